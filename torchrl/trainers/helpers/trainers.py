"""The trainer builder: a :class:`~torchrl.trainers.Trainer` with its optimizer and usual hooks,
from a config."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from torchrl.trainers.helpers._cfg import cfg_value
from torchrl.trainers.helpers.collectors import OffPolicyCollectorConfig
from torchrl.trainers.helpers.envs import EnvConfig
from torchrl.trainers.hooks import (
    BatchSubSampler,
    CountFramesLog,
    LogReward,
    ReplayBufferTrainer,
    RewardNormalizer,
    SelectKeys,
    UpdateWeights,
)
from torchrl.trainers.hooks_extra import LRSchedulerHook, TargetNetUpdaterHook
from torchrl.trainers.trainer import Trainer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from tensordict import TensorDictBase

    from torchrl.data.replay_buffers.replay_buffers import ReplayBuffer
    from torchrl.envs.common import EnvBase
    from torchrl.record.loggers.common import Logger

__all__ = ["OPTIMIZERS", "TrainerConfig", "make_trainer"]

#: The optimizers ``cfg.optimizer`` names.
OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "adam": torch.optim.Adam,
    "sgd": torch.optim.SGD,
    "adamax": torch.optim.Adamax,
}


@dataclasses.dataclass
class TrainerConfig:
    """The fields read by :func:`make_trainer` (any object with these attributes works).

    ``make_trainer`` also reads ``frames_per_batch`` and ``total_frames`` (collector configs)
    and ``frame_skip`` (:class:`~torchrl.trainers.helpers.EnvConfig`).

    Attributes:
        optim_steps_per_batch: optimization steps per collected batch.
        optimizer: ``"adam"``, ``"sgd"`` or ``"adamax"``.
        lr_scheduler: ``"cosine"`` (cosine annealing over the whole run, stepped after every
            optimization step) or ``""``/``None`` (constant learning rate).
        selected_keys: keep only these entries of the collected batches (``None``: all).
        batch_size: the size of the optimization batches.
        log_interval: frames between two writes of a value to the logger.
        lr: the learning rate.
        weight_decay: the optimizer's weight decay.
        clip_norm: the gradient clipping threshold (``None``: no clipping).
        clip_grad_norm: clip the gradient norm (``True``) or each gradient value (``False``).
        normalize_rewards_online: normalize rewards with running statistics.
        normalize_rewards_online_scale: the scale of the normalized rewards.
        normalize_rewards_online_decay: the decay of the running statistics.
        sub_traj_len: without a replay buffer, sub-sample windows of this many steps (``<= 0``:
            single transitions).
        record_interval: batches between two evaluations (with a ``recorder`` env).
        record_frames: steps of each evaluation rollout.
        progress_bar: show a progress bar.
        save_trainer_file: the checkpoint file (``None``: no checkpoints).
        save_trainer_interval: frames between two checkpoints.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.trainers.helpers import make_trainer
        >>> class Loss(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.w = torch.nn.Parameter(torch.zeros(1))
        ...     def forward(self, td):
        ...         return TensorDict(loss=((td["x"] - self.w) ** 2).mean())
        >>> cfg = TrainerConfig(optimizer="sgd", lr=0.1, optim_steps_per_batch=2, batch_size=4,
        ...     lr_scheduler="", progress_bar=False)
        >>> cfg.total_frames, cfg.frames_per_batch = 16, 8  # read from the collector's config
        >>> loss = Loss()
        >>> trainer = make_trainer([TensorDict(x=torch.ones(8))] * 2, loss, cfg=cfg)
        >>> trainer.train()
        >>> trainer.optim_count, round(loss.w.item(), 4)  # 4 SGD steps: w = 1 - 0.8 ** 4
        (4, 0.5904)
    """

    optim_steps_per_batch: int = 500
    optimizer: str = "adam"
    lr_scheduler: str | None = "cosine"
    selected_keys: list[str] | None = None
    batch_size: int = 256
    log_interval: int = 10000
    lr: float = 3e-4
    weight_decay: float = 0.0
    clip_norm: float | None = 1000.0
    clip_grad_norm: bool = False
    normalize_rewards_online: bool = False
    normalize_rewards_online_scale: float = 1.0
    normalize_rewards_online_decay: float = 0.9999
    sub_traj_len: int = -1
    record_interval: int = 1000
    record_frames: int = 1000
    progress_bar: bool = True
    save_trainer_file: str | None = None
    save_trainer_interval: int = 10000


def _exploration_step(modules: list[Any], frames: int) -> Any:
    def step() -> None:
        for module in modules:
            module.step(frames)

    return step


def make_trainer(
    collector: Iterable[TensorDictBase],
    loss_module: nn.Module,
    recorder: EnvBase | None = None,
    target_net_updater: Any = None,
    policy_exploration: nn.Module | None = None,
    replay_buffer: ReplayBuffer | None = None,
    logger: Logger | None = None,
    cfg: Any = None,
) -> Trainer:
    """A :class:`~torchrl.trainers.Trainer` with its optimizer and the usual hooks, from ``cfg``.

    The optimizer (``cfg.optimizer`` over the loss's parameters, ``lr``, ``weight_decay``) and
    its cosine schedule (``lr_scheduler``) are built here. Hooks registered, in order:
    :class:`~torchrl.trainers.SelectKeys` (``selected_keys``), a
    :class:`~torchrl.trainers.ReplayBufferTrainer` (with ``replay_buffer``; otherwise a
    :class:`~torchrl.trainers.BatchSubSampler` of ``batch_size``/``sub_traj_len``), a
    :class:`~torchrl.trainers.RewardNormalizer` (``normalize_rewards_online``), a
    :class:`~torchrl.trainers.TargetNetUpdaterHook`, an
    :class:`~torchrl.trainers.LRSchedulerHook`, :class:`~torchrl.trainers.UpdateWeights` (every
    batch), the annealing of the exploration modules of ``policy_exploration`` (their
    ``step(frames_per_batch)`` after every batch), a deterministic
    :class:`~torchrl.trainers.Recorder` on ``recorder``, :class:`~torchrl.trainers.LogReward`
    and :class:`~torchrl.trainers.CountFramesLog`. The trainer counts ``total_frames *
    frame_skip`` env frames (the config's counts are in steps, see
    :func:`~torchrl.trainers.helpers.correct_for_frame_skip`).

    Args:
        collector: the data collector.
        loss_module: the loss.
        recorder: an evaluation env (``None``: no evaluation).
        target_net_updater: a ``SoftUpdate``/``HardUpdate`` (``None``: no target network).
        policy_exploration: the exploration policy (evaluated by the recorder; its exploration
            modules are annealed).
        replay_buffer: the replay buffer (``None``: train on the collected batches).
        logger: the logger.
        cfg: the config (:class:`TrainerConfig` fields; ``None`` uses the defaults).

    Returns:
        The trainer.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> class Loss(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.w = torch.nn.Parameter(torch.zeros(1))
        ...     def forward(self, td):
        ...         return TensorDict(loss=((td["x"] - self.w) ** 2).mean())
        >>> batches = [TensorDict(x=torch.ones(8)) for _ in range(2)]
        >>> cfg = TrainerConfig(optim_steps_per_batch=3, batch_size=4, progress_bar=False)
        >>> cfg.total_frames, cfg.frames_per_batch = 16, 8
        >>> trainer = make_trainer(batches, Loss(), cfg=cfg)
        >>> trainer.train()
        >>> trainer.optim_count
        6
    """

    def get(name: str) -> Any:
        return cfg_value(cfg, name, TrainerConfig)

    frame_skip = int(cfg_value(cfg, "frame_skip", EnvConfig))
    total_frames = int(cfg_value(cfg, "total_frames", OffPolicyCollectorConfig))
    frames_per_batch = int(cfg_value(cfg, "frames_per_batch", OffPolicyCollectorConfig))
    optim_steps = int(get("optim_steps_per_batch"))

    name = str(get("optimizer")).lower()
    if name not in OPTIMIZERS:
        raise ValueError(f"make_trainer: optimizer must be one of {list(OPTIMIZERS)}, got {name!r}")
    params = [p for p in loss_module.parameters() if p.requires_grad]
    optimizer = OPTIMIZERS[name](
        params, lr=float(get("lr")), weight_decay=float(get("weight_decay"))
    )
    trainer = Trainer(
        collector=collector,
        total_frames=total_frames * frame_skip,
        frame_skip=frame_skip,
        optim_steps_per_batch=optim_steps,
        loss_module=loss_module,
        optimizer=optimizer,
        logger=logger,
        clip_grad_norm=bool(get("clip_grad_norm")),
        clip_norm=get("clip_norm"),
        progress_bar=bool(get("progress_bar")),
        save_trainer_interval=int(get("save_trainer_interval")),
        log_interval=int(get("log_interval")),
        save_trainer_file=get("save_trainer_file"),
    )

    selected_keys = get("selected_keys")
    if selected_keys:
        SelectKeys(list(selected_keys)).register(trainer)
    if replay_buffer is not None:
        ReplayBufferTrainer(replay_buffer, batch_size=int(get("batch_size"))).register(trainer)
    elif optim_steps > 0:
        sub_traj_len = max(int(get("sub_traj_len") or 0), 0)
        BatchSubSampler(int(get("batch_size")), sub_traj_len=sub_traj_len).register(trainer)
    if get("normalize_rewards_online"):
        RewardNormalizer(
            decay=float(get("normalize_rewards_online_decay")),
            scale=float(get("normalize_rewards_online_scale")),
        ).register(trainer)
    if target_net_updater is not None:
        TargetNetUpdaterHook(target_net_updater).register(trainer)

    scheduler = get("lr_scheduler")
    if scheduler == "cosine":
        t_max = max(optim_steps * (total_frames // max(frames_per_batch, 1)), 1)
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=t_max)
        LRSchedulerHook(cosine, interval="optim").register(trainer)
    elif scheduler:
        raise ValueError(f"make_trainer: lr_scheduler must be 'cosine' or None, got {scheduler!r}")

    if callable(getattr(collector, "update_policy_weights_", None)):
        UpdateWeights(collector, update_weights_interval=1).register(trainer)  # type: ignore[arg-type]
    if policy_exploration is not None:
        annealed = [
            m
            for m in policy_exploration.modules()
            if callable(getattr(m, "step", None)) and list(m.buffers(recurse=False))
        ]
        if annealed:
            trainer.register_op("post_steps", _exploration_step(annealed, frames_per_batch))
    if recorder is not None:
        if policy_exploration is None:
            raise ValueError(
                "make_trainer: a recorder env needs the policy_exploration to evaluate"
            )
        from torchrl.envs.utils import ExplorationType
        from torchrl.trainers.evaluation import Recorder

        Recorder(
            record_interval=int(get("record_interval")),
            record_frames=int(get("record_frames")),
            frame_skip=frame_skip,
            policy_exploration=policy_exploration,
            environment=recorder,
            exploration_type=ExplorationType.DETERMINISTIC,
            log_pbar=True,
        ).register(trainer)
    LogReward(log_pbar=True).register(trainer)
    CountFramesLog(frame_skip=frame_skip).register(trainer)
    return trainer
