"""Off-policy and offline trainers: a replay buffer, target-network updates, many small steps.

Every trainer here is the same wiring (:class:`OffPolicyTrainer`); each names its algorithm's
loss and usual target-network updater (a :class:`~torchrl.objectives.SoftUpdate` or
:class:`~torchrl.objectives.HardUpdate`, passed as ``target_net_updater``).
:class:`TD3Trainer` also delays the actor's updates.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._keys import ACTION, DONE, EPISODE_REWARD, OBSERVATION, REWARD
from torchrl._types import NestedKey
from torchrl.record.loggers.common import Logger
from torchrl.trainers.algorithms._common import check_positive, register_common, valid_items
from torchrl.trainers.hooks import BatchSubSampler, OptimizerHook, ReplayBufferTrainer
from torchrl.trainers.trainer import Trainer

__all__ = [
    "CQLTrainer",
    "DDPGTrainer",
    "DQNTrainer",
    "FQLTrainer",
    "IQLTrainer",
    "OffPolicyTrainer",
    "SACTrainer",
    "TD3Trainer",
]


class OfflineIterations:
    """Stands in for a collector in offline training: yields ``None`` batches without end.

    The trainer counts each as ``frames_per_batch`` frames, so with
    ``frames_per_batch=optim_steps_per_batch`` its ``total_frames`` counts gradient steps.

    Args:
        frames_per_batch: frames counted per (empty) batch.

    Examples:
        >>> it = iter(OfflineIterations(10))
        >>> next(it) is None, OfflineIterations(10).frames_per_batch
        (True, 10)
    """

    def __init__(self, frames_per_batch: int) -> None:
        check_positive("frames_per_batch", frames_per_batch, allow_none=False)
        self.frames_per_batch = int(frames_per_batch)

    def __iter__(self) -> Iterator[None]:
        while True:
            yield None


class OffPolicyTrainer(Trainer):
    """Shared trainer of off-policy algorithms: replay buffer, target updates, weight sync.

    Every collected batch is written into ``replay_buffer`` (flattened); each of the
    ``optim_steps_per_batch`` steps samples ``batch_size`` items from it, computes the loss,
    steps the optimizer and then the target-network updater. The policy weights are pushed to
    the collector after every batch. Without a buffer, steps use random ``batch_size`` items of
    the collected batch (the whole batch when ``batch_size`` is ``None``). With
    ``collector=None`` the trainer runs offline on the buffer: each iteration makes
    ``optim_steps_per_batch`` steps and counts them as frames, so ``total_frames`` is the number
    of gradient steps. The keywords not listed below (``collector``, ``total_frames``,
    ``optim_steps_per_batch``, ``loss_module``, ``optimizer``, ``logger``, ...) are the
    :class:`~torchrl.trainers.Trainer`'s.

    Args:
        replay_buffer: where collected data goes and optimization batches come from.
        batch_size: items per optimization batch (``None``: the buffer's own).
        target_net_updater: a ``SoftUpdate``/``HardUpdate`` of the loss, stepped after every
            optimizer step. Without one, a loss with target parameters warns: its targets
            would never move.
        enable_logging, log_rewards, log_actions, log_observations: logged statistics of the
            collected batches.
        reward_key, action_key, observation_key, done_key, episode_reward_key: their entries.
        lr_scheduler: stepped once per iteration (and checkpointed).
        hooks: objects with ``register(trainer)`` (e.g. ``Recorder``, ``EarlyStopping``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, ReplayBuffer
        >>> data = ReplayBuffer(storage=LazyTensorStorage(100))
        >>> _ = data.extend(TensorDict(x=torch.ones(100, 1), batch_size=[100]))
        >>> w = torch.nn.Parameter(torch.zeros(1))
        >>> trainer = OffPolicyTrainer(collector=None, total_frames=30, optim_steps_per_batch=10,
        ...     loss_module=lambda td: TensorDict(loss_l2=((td["x"] - w) ** 2).mean()),
        ...     optimizer=torch.optim.SGD([w], lr=0.1), replay_buffer=data, batch_size=16,
        ...     progress_bar=False)
        >>> trainer.train()  # offline: total_frames counts gradient steps
        >>> trainer.optim_count, round(w.item(), 2)
        (30, 1.0)
    """

    def __init__(
        self,
        *,
        collector: Iterable[TensorDictBase | None] | None,
        total_frames: int,
        frame_skip: int = 1,
        optim_steps_per_batch: int = 1,
        loss_module: nn.Module | Callable[[TensorDictBase], TensorDictBase],
        optimizer: torch.optim.Optimizer | None = None,
        logger: Logger | None = None,
        clip_grad_norm: bool = True,
        clip_norm: float | None = None,
        progress_bar: bool = True,
        seed: int | None = None,
        save_trainer_interval: int = 10000,
        log_interval: int = 10000,
        save_trainer_file: str | Path | None = None,
        replay_buffer: Any = None,
        batch_size: int | None = None,
        target_net_updater: Any = None,
        enable_logging: bool = True,
        log_rewards: bool = True,
        log_actions: bool = True,
        log_observations: bool = False,
        reward_key: NestedKey = REWARD,
        action_key: NestedKey = ACTION,
        observation_key: NestedKey = OBSERVATION,
        done_key: NestedKey = DONE,
        episode_reward_key: NestedKey = EPISODE_REWARD,
        lr_scheduler: Any = None,
        hooks: Sequence[Any] | None = None,
    ) -> None:
        check_positive("batch_size", batch_size)
        check_positive("optim_steps_per_batch", optim_steps_per_batch, allow_none=False)
        if collector is None and replay_buffer is None:
            raise ValueError(
                f"{type(self).__name__}: offline training (collector=None) needs a "
                "replay_buffer holding the dataset"
            )
        source: Any = (
            collector if collector is not None else OfflineIterations(optim_steps_per_batch)
        )
        super().__init__(
            collector=source,
            total_frames=total_frames,
            frame_skip=frame_skip,
            optim_steps_per_batch=optim_steps_per_batch,
            loss_module=loss_module,
            optimizer=None,
            logger=logger,
            clip_grad_norm=clip_grad_norm,
            clip_norm=clip_norm,
            progress_bar=progress_bar,
            seed=seed,
            save_trainer_interval=save_trainer_interval,
            log_interval=log_interval,
            save_trainer_file=save_trainer_file,
        )
        self.replay_buffer = replay_buffer
        self.batch_size = batch_size
        if optimizer is not None:
            self._register_optimizer(optimizer)
        self.register_op("batch_process", self._process_collected)
        if replay_buffer is not None:
            ReplayBufferTrainer(replay_buffer, batch_size=batch_size).register(self)
        else:
            self.register_op("batch_process", _flatten)
            if batch_size is not None:
                BatchSubSampler(batch_size=batch_size).register(self)
        if target_net_updater is None and getattr(loss_module, "target_network_names", None):
            warnings.warn(
                f"{type(self).__name__}: {type(loss_module).__name__} has target parameters but "
                "no target_net_updater was given, so they never change; pass "
                "target_net_updater=SoftUpdate(loss, tau=...) (or HardUpdate(...))",
                stacklevel=2,
            )
        if target_net_updater is not None:
            if not callable(getattr(target_net_updater, "step", None)):
                raise TypeError(
                    "target_net_updater must have a step() method, got "
                    f"{type(target_net_updater).__name__}"
                )
            self.register_op("post_optim", target_net_updater.step)
        self.target_net_updater = target_net_updater
        register_common(
            self,
            collector=collector,
            enable_logging=enable_logging,
            log_rewards=log_rewards,
            log_actions=log_actions,
            log_observations=log_observations,
            reward_key=reward_key,
            action_key=action_key,
            observation_key=observation_key,
            done_key=done_key,
            episode_reward_key=episode_reward_key,
            lr_scheduler=lr_scheduler,
            hooks=hooks,
        )

    def _register_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        OptimizerHook(optimizer).register(self)

    def _process_collected(self, batch: TensorDictBase | None) -> TensorDictBase | None:
        """Runs on every collected batch before it is stored (``None`` keeps it as it is)."""
        return None


def _flatten(batch: TensorDictBase | None) -> TensorDictBase | None:
    return None if batch is None else valid_items(batch)


class SACTrainer(OffPolicyTrainer):
    """Soft Actor-Critic trainer: :class:`OffPolicyTrainer` for a :class:`~torchrl.objectives.SACLoss`.

    Takes the keywords of :class:`OffPolicyTrainer`; the usual ``target_net_updater`` is a
    ``SoftUpdate(loss, tau=0.005)``.

    Examples:
        >>> import torch
        >>> from tensordict.nn import NormalParamExtractor, TensorDictModule
        >>> from torchrl.collectors import SyncDataCollector
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> from torchrl.envs import GymEnv
        >>> from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
        >>> from torchrl.objectives import SACLoss, SoftUpdate
        >>> env = GymEnv("Pendulum-v1")
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(torch.nn.Sequential(MLP(in_features=3, out_features=2),
        ...         NormalParamExtractor()), ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"], spec=env.action_spec, distribution_class=TanhNormal)
        >>> qvalue = ValueOperator(MLP(in_features=4, out_features=1),
        ...     in_keys=["observation", "action"])
        >>> loss = SACLoss(actor, qvalue)
        >>> trainer = SACTrainer(
        ...     collector=SyncDataCollector(env, actor, frames_per_batch=50, total_frames=100),
        ...     total_frames=100, optim_steps_per_batch=2, loss_module=loss,
        ...     optimizer=torch.optim.Adam(loss.parameters(), lr=1e-3),
        ...     replay_buffer=TensorDictReplayBuffer(storage=LazyTensorStorage(1000)),
        ...     batch_size=16, target_net_updater=SoftUpdate(loss, tau=0.005), progress_bar=False)
        >>> trainer.train()
        >>> trainer.optim_count, len(trainer.replay_buffer)
        (4, 100)
    """


class DQNTrainer(OffPolicyTrainer):
    """Deep Q-Network trainer: :class:`OffPolicyTrainer` for a :class:`~torchrl.objectives.DQNLoss`.

    Takes the keywords of :class:`OffPolicyTrainer`, plus ``greedy_module``: the collector
    policy's exploration module (e.g. an ``EGreedyModule``), annealed by ``step(frames)`` with
    the frame count of every collected batch (the trainer's checkpoints hold the exploration
    modules of the collector's policy). The usual
    ``target_net_updater`` is a ``HardUpdate(loss, value_network_update_interval=...)``.

    Examples:
        >>> issubclass(DQNTrainer, OffPolicyTrainer)
        True
    """

    def __init__(self, *, greedy_module: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.greedy_module = greedy_module
        if greedy_module is not None:
            if not callable(getattr(greedy_module, "step", None)):
                raise TypeError(
                    "DQNTrainer: greedy_module must have a step(frames) method (e.g. an "
                    f"EGreedyModule), got {type(greedy_module).__name__}"
                )
            self.register_op("batch_process", self._anneal)

    def _anneal(self, batch: TensorDictBase) -> None:
        self.greedy_module.step(batch.numel())


class DDPGTrainer(OffPolicyTrainer):
    """Deep Deterministic Policy Gradient trainer, for a :class:`~torchrl.objectives.DDPGLoss`.

    Takes the keywords of :class:`OffPolicyTrainer`; the usual ``target_net_updater`` is a
    ``SoftUpdate`` of the target actor and critic.

    Examples:
        >>> issubclass(DDPGTrainer, OffPolicyTrainer)
        True
    """


class TD3Trainer(OffPolicyTrainer):
    """Twin Delayed DDPG trainer: the actor is updated every ``policy_delay`` optimizer steps.

    Takes the keywords of :class:`OffPolicyTrainer`, plus ``policy_delay`` (default 2). On the
    other steps the ``loss_actor`` term is left out of the backward pass, so one optimizer over
    all parameters leaves the actor unchanged (optimizers skip parameters without gradient).
    The loss is a :class:`~torchrl.objectives.TD3Loss`, the usual updater a ``SoftUpdate``.

    Examples:
        >>> issubclass(TD3Trainer, OffPolicyTrainer)
        True
    """

    def __init__(self, *, policy_delay: int = 2, **kwargs: Any) -> None:
        check_positive("policy_delay", policy_delay, allow_none=False)
        self.policy_delay = int(policy_delay)
        super().__init__(**kwargs)

    def _register_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        hook = OptimizerHook(
            optimizer, clip_grad_norm=self.clip_grad_norm, clip_norm=self.clip_norm
        )
        self.register_op("optimizer", _DelayedActor(hook, self))
        self.register_module("optimizer", hook)


class _DelayedActor:
    def __init__(self, hook: OptimizerHook, trainer: Trainer) -> None:
        self.hook = hook
        self.trainer = trainer

    def __call__(self, losses: TensorDictBase) -> TensorDictBase:
        delay = getattr(self.trainer, "policy_delay", 1)
        if self.trainer.optim_count % delay != 0 and "loss_actor" in losses.keys():
            out = self.hook(losses.exclude("loss_actor"))
            out.set("loss_actor", losses.get("loss_actor").detach())
            return out
        return self.hook(losses)


class IQLTrainer(OffPolicyTrainer):
    """Implicit Q-Learning trainer, offline (``collector=None``) or online.

    Takes the keywords of :class:`OffPolicyTrainer`; the loss is an
    :class:`~torchrl.objectives.IQLLoss`, the usual updater a ``SoftUpdate``. Offline, ``replay_buffer`` holds the dataset and
    ``total_frames`` counts gradient steps.

    Examples:
        >>> issubclass(IQLTrainer, OffPolicyTrainer)
        True
    """


class CQLTrainer(OffPolicyTrainer):
    """Conservative Q-Learning trainer, offline (``collector=None``) or online.

    Takes the keywords of :class:`OffPolicyTrainer`; the loss is a
    :class:`~torchrl.objectives.CQLLoss`, the usual updater a ``SoftUpdate``. Offline, ``replay_buffer`` holds the dataset and
    ``total_frames`` counts gradient steps.

    Examples:
        >>> issubclass(CQLTrainer, OffPolicyTrainer)
        True
    """


class FQLTrainer(OffPolicyTrainer):
    """Flow Q-Learning trainer, offline (``collector=None``) or online.

    Takes the keywords of :class:`OffPolicyTrainer`; the loss is a
    :class:`~torchrl.objectives.FQLLoss` (the flow policy, the one-step policy and the critics
    in one optimizer), the usual updater a ``SoftUpdate`` of its critics. Offline,
    ``replay_buffer`` holds the dataset and ``total_frames`` counts gradient steps.

    Examples:
        >>> issubclass(FQLTrainer, OffPolicyTrainer)
        True
    """
