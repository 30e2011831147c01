"""On-policy trainers: collect a batch, estimate advantages, then epochs of minibatches.

:class:`OnPolicyTrainer` holds the wiring; :class:`PPOTrainer`, :class:`A2CTrainer` and
:class:`ReinforceTrainer` only change its defaults (how many epochs each batch is used for).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._keys import ACTION, DONE, EPISODE_REWARD, OBSERVATION, REWARD, TERMINATED
from torchrl._types import NestedKey
from torchrl.record.loggers.common import Logger
from torchrl.trainers.algorithms._common import check_positive, register_common, valid_items
from torchrl.trainers.hooks import ReplayBufferTrainer
from torchrl.trainers.trainer import Trainer

__all__ = ["A2CTrainer", "OnPolicyTrainer", "PPOTrainer", "ReinforceTrainer"]


class _EpochMinibatches:
    """Cuts the collected batch into minibatches, a fresh random permutation per epoch."""

    def __init__(self, batch_size: int | None) -> None:
        self.batch_size = batch_size
        self._perm: torch.Tensor | None = None
        self._pos = 0

    def reset(self) -> None:
        self._perm = None

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        n = batch.shape[0]
        size = min(self.batch_size or n, n)
        if self._perm is None or self._pos + size > n:
            self._perm = torch.randperm(n, device=batch.device)
            self._pos = 0
        index = self._perm[self._pos : self._pos + size]
        self._pos += size
        return batch[index]


class OnPolicyTrainer(Trainer):
    """Shared trainer of on-policy algorithms (PPO, A2C, REINFORCE).

    Each collected batch gets its advantages (GAE by default, from the loss's critic) under
    ``torch.no_grad``, is flattened, and is then used for ``num_epochs`` epochs of minibatches
    of ``batch_size`` items (a new random permutation each epoch; the whole batch when
    ``batch_size`` is ``None``). With a ``replay_buffer`` the batch is written into it (emptied
    first) and minibatches are sampled from it instead. The policy weights are pushed to the
    collector after every batch. All other keywords are the :class:`~torchrl.trainers.Trainer`'s.

    Args:
        optim_steps_per_batch: gradient steps per batch; ``None`` (default) makes it
            ``num_epochs * (frames_per_batch // batch_size)`` (``num_epochs`` without
            ``batch_size``), with ``frames_per_batch`` read from the collector.
        num_epochs: passes over each batch; ``None`` takes the class default (PPO 4, others 1).
        replay_buffer: optional buffer to sample minibatches from (e.g. with a
            ``SamplerWithoutReplacement``).
        batch_size: minibatch size (``None``: the whole batch).
        add_gae: compute advantages before the epochs.
        gae: the advantage module; ``None`` makes the loss's GAE estimator with ``gamma`` and
            ``lmbda`` (the loss needs a critic).
        gamma, lmbda: discount and GAE lambda of the default estimator.
        lr_scheduler: stepped once per collected batch (and checkpointed).
        target_net_updater: stepped after every optimizer step when given.
        enable_logging, log_rewards, log_actions, log_observations: which statistics of the
            collected batches are logged (reward, finished-episode return and done share,
            action norm, observation norm).
        reward_key, action_key, observation_key, done_key, episode_reward_key: entries those
            statistics read; ``terminated_key`` is accepted for TorchRL compatibility (the
            advantage module reads the loss's own keys).
        hooks: objects with ``register(trainer)`` (e.g. ``Recorder``, ``EarlyStopping``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> w = torch.nn.Parameter(torch.zeros(1))
        >>> batches = [TensorDict(x=torch.ones(8, 1), batch_size=[8]) for _ in range(4)]
        >>> trainer = OnPolicyTrainer(collector=batches, total_frames=32,
        ...     loss_module=lambda td: TensorDict(loss_l2=((td["x"] - w) ** 2).mean()),
        ...     optimizer=torch.optim.SGD([w], lr=0.1), add_gae=False, num_epochs=2,
        ...     batch_size=4, optim_steps_per_batch=4, progress_bar=False)
        >>> trainer.train()
        >>> trainer.optim_count, round(w.item(), 2)
        (16, 0.97)
    """

    #: passes over each batch when ``num_epochs`` is not given.
    default_num_epochs: int = 1

    def __init__(
        self,
        *,
        collector: Iterable[TensorDictBase | None],
        total_frames: int,
        frame_skip: int = 1,
        optim_steps_per_batch: int | None = None,
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
        num_epochs: int | None = None,
        replay_buffer: Any = None,
        batch_size: int | None = None,
        add_gae: bool = True,
        gae: Callable[[TensorDictBase], Any] | None = None,
        gamma: float = 0.99,
        lmbda: float = 0.95,
        lr_scheduler: Any = None,
        target_net_updater: Any = None,
        enable_logging: bool = True,
        log_rewards: bool = True,
        log_actions: bool = True,
        log_observations: bool = False,
        reward_key: NestedKey = REWARD,
        action_key: NestedKey = ACTION,
        observation_key: NestedKey = OBSERVATION,
        done_key: NestedKey = DONE,
        terminated_key: NestedKey = TERMINATED,
        episode_reward_key: NestedKey = EPISODE_REWARD,
        hooks: Sequence[Any] | None = None,
    ) -> None:
        num_epochs = self.default_num_epochs if num_epochs is None else num_epochs
        check_positive("num_epochs", num_epochs, allow_none=False)
        check_positive("batch_size", batch_size)
        if optim_steps_per_batch is None:
            optim_steps_per_batch = _steps_per_batch(collector, num_epochs, batch_size)
        source: Any = collector
        super().__init__(
            collector=source,
            total_frames=total_frames,
            frame_skip=frame_skip,
            optim_steps_per_batch=optim_steps_per_batch,
            loss_module=loss_module,
            optimizer=optimizer,
            logger=logger,
            clip_grad_norm=clip_grad_norm,
            clip_norm=clip_norm,
            progress_bar=progress_bar,
            seed=seed,
            save_trainer_interval=save_trainer_interval,
            log_interval=log_interval,
            save_trainer_file=save_trainer_file,
        )
        self.num_epochs = int(num_epochs)
        self.batch_size = batch_size
        self.replay_buffer = replay_buffer
        self.terminated_key = terminated_key
        self.gae = _make_gae(loss_module, gamma, lmbda) if add_gae and gae is None else gae
        if self.gae is not None and not callable(self.gae):
            raise TypeError(f"gae must be callable, got {type(self.gae).__name__}")
        self.register_op("batch_process", self._prepare_batch)
        if replay_buffer is not None:
            self.register_op("batch_process", self._empty_buffer)
            ReplayBufferTrainer(replay_buffer, batch_size=batch_size).register(self)
        else:
            sampler = _EpochMinibatches(batch_size)
            self.register_op("pre_optim_steps", sampler.reset)
            self.register_op("process_optim_batch", sampler)
        if target_net_updater is not None:
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

    def _prepare_batch(self, batch: TensorDictBase | None) -> TensorDictBase:
        if batch is None:
            raise RuntimeError(
                f"{type(self).__name__}: the collector yielded no batch; on-policy training needs "
                "the collected data (do not give the collector a replay buffer)"
            )
        if self.gae is not None:
            # Advantages need the time dim: computed before flattening.
            with torch.no_grad():
                self.gae(batch)
        return valid_items(batch)

    def _empty_buffer(self, batch: TensorDictBase) -> None:
        # On-policy: only the latest batch may be sampled.
        self.replay_buffer.empty()


class PPOTrainer(OnPolicyTrainer):
    """Proximal Policy Optimization trainer: :class:`OnPolicyTrainer` with 4 epochs per batch.

    Takes the keywords of :class:`OnPolicyTrainer`; the loss is typically a
    :class:`~torchrl.objectives.ClipPPOLoss` with a critic (which the default GAE uses).

    Examples:
        >>> import torch
        >>> from torchrl.collectors import SyncDataCollector
        >>> from torchrl.envs import GymEnv
        >>> from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator
        >>> from torchrl.objectives import ClipPPOLoss
        >>> from tensordict.nn import TensorDictModule
        >>> env = GymEnv("CartPole-v1")
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(MLP(in_features=4, out_features=2), ["observation"], ["logits"]),
        ...     in_keys=["logits"], spec=env.action_spec, distribution_class=OneHotCategorical,
        ...     return_log_prob=True)
        >>> critic = ValueOperator(MLP(in_features=4, out_features=1), in_keys=["observation"])
        >>> loss = ClipPPOLoss(actor, critic)
        >>> collector = SyncDataCollector(env, actor, frames_per_batch=64, total_frames=128)
        >>> trainer = PPOTrainer(collector=collector, total_frames=128, loss_module=loss,
        ...     optimizer=torch.optim.Adam(loss.parameters(), lr=1e-3), batch_size=32,
        ...     progress_bar=False)
        >>> trainer.optim_steps_per_batch  # 4 epochs of 2 minibatches
        8
        >>> trainer.train()
        >>> trainer.collected_frames
        128
    """

    default_num_epochs = 4


class A2CTrainer(OnPolicyTrainer):
    """Advantage Actor-Critic trainer: :class:`OnPolicyTrainer` using each batch once.

    Takes the keywords of :class:`OnPolicyTrainer`; the loss is an
    :class:`~torchrl.objectives.A2CLoss` with a critic.

    Examples:
        >>> A2CTrainer.default_num_epochs
        1
    """

    default_num_epochs = 1


class ReinforceTrainer(OnPolicyTrainer):
    """REINFORCE (policy gradient with a baseline) trainer: each batch is used once.

    Takes the keywords of :class:`OnPolicyTrainer`; the loss is a
    :class:`~torchrl.objectives.ReinforceLoss` (with a critic for the default GAE, or pass
    ``gae=`` / ``add_gae=False`` and let the loss find its advantages).

    Examples:
        >>> ReinforceTrainer.default_num_epochs
        1
    """

    default_num_epochs = 1


def _steps_per_batch(collector: Any, num_epochs: int, batch_size: int | None) -> int:
    if batch_size is None:
        return num_epochs
    frames = getattr(collector, "frames_per_batch", None)
    if frames is None:
        raise ValueError(
            "optim_steps_per_batch=None needs the collector's frames_per_batch to count the "
            f"minibatches; {type(collector).__name__} has none: pass optim_steps_per_batch"
        )
    return num_epochs * max(int(frames) // batch_size, 1)


def _make_gae(loss_module: Any, gamma: float, lmbda: float) -> Callable[[TensorDictBase], Any]:
    if getattr(loss_module, "critic_network", None) is None:
        raise ValueError(
            f"add_gae=True needs a loss with a critic ({type(loss_module).__name__} has none): "
            "pass gae=<advantage module> or add_gae=False"
        )
    # The loss's own estimator: it uses the loss's critic and key names.
    loss_module.make_value_estimator("gae", gamma=gamma, lmbda=lmbda)
    return loss_module.value_estimator
