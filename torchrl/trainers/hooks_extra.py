"""Scheduling hooks for the :class:`~torchrl.trainers.Trainer`: learning-rate schedules,
target-network updates, value estimates of the collected batches, and the update-to-data ratio.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol

import torch
from tensordict import TensorDictBase

from torchrl.trainers.hooks import BatchSubSampler, ReplayBufferTrainer, TrainerHookBase

if TYPE_CHECKING:
    from torchrl.data.replay_buffers.replay_buffers import ReplayBuffer
    from torchrl.trainers.trainer import Trainer

__all__ = ["LRSchedulerHook", "TargetNetUpdaterHook", "UTDRHook", "ValueEstimatorHook"]


class _Steppable(Protocol):
    def step(self) -> None: ...


class LRSchedulerHook(TrainerHookBase):
    """Steps a learning-rate scheduler once per collected batch or after every optimizer step.

    With ``interval="batch"`` the op runs at ``"post_steps"`` (once per batch), with
    ``"optim"`` at ``"post_optim"`` (after each optimization step, so the number of scheduler
    steps per batch is ``optim_steps_per_batch``). Once registered, the hook steps the scheduler
    only when an optimization step ran since its last step, so the learning rate does not decay
    while no training happens (e.g. before the collector's ``init_random_frames``).

    Args:
        scheduler: a ``torch.optim.lr_scheduler.LRScheduler`` (``ReduceLROnPlateau`` needs a
            metric and is not supported).
        interval: ``"batch"`` or ``"optim"``.

    Examples:
        >>> import torch
        >>> w = torch.nn.Parameter(torch.zeros(1))
        >>> opt = torch.optim.SGD([w], lr=1.0)
        >>> hook = LRSchedulerHook(torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5))
        >>> opt.step()
        >>> hook()
        >>> opt.param_groups[0]["lr"]
        0.5
    """

    def __init__(
        self,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        interval: Literal["batch", "optim"] = "batch",
    ) -> None:
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            raise TypeError(
                "LRSchedulerHook: ReduceLROnPlateau steps on a metric; call its step(metric) "
                "from your own hook instead"
            )
        if not callable(getattr(scheduler, "step", None)):
            raise TypeError(
                f"LRSchedulerHook: expected an LR scheduler, got {type(scheduler).__name__}"
            )
        if interval not in ("batch", "optim"):
            raise ValueError(
                f"LRSchedulerHook: interval must be 'batch' or 'optim', got {interval!r}"
            )
        self.scheduler = scheduler
        self.interval = interval
        self._trainer: Trainer | None = None
        self._last_optim_count = 0

    def __call__(self) -> None:
        """Steps the scheduler (registered: only when an optimization step ran since the last)."""
        if self._trainer is not None:
            count = self._trainer.optim_count
            if count == self._last_optim_count:
                return
            self._last_optim_count = count
        self.scheduler.step()

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state and the optimization count at its last step."""
        return {
            "scheduler": self.scheduler.state_dict(),
            "last_optim_count": self._last_optim_count,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the scheduler's state."""
        self.scheduler.load_state_dict(state_dict["scheduler"])
        self._last_optim_count = int(state_dict["last_optim_count"])

    def register(self, trainer: Trainer, name: str = "lr_scheduler") -> None:
        """Registers at ``"post_steps"`` (``"batch"``) or ``"post_optim"`` (``"optim"``), and
        in the checkpoint."""
        self._trainer = trainer
        self._last_optim_count = trainer.optim_count
        trainer.register_op("post_steps" if self.interval == "batch" else "post_optim", self)
        trainer.register_module(name, self)


class TargetNetUpdaterHook(TrainerHookBase):
    """Calls ``step()`` of a target-network updater after each optimization step.

    Registered at ``"post_optim"``. The updater's step counter (``HardUpdate``), when it has
    one, goes into the checkpoint.

    Args:
        target_params_updater: a :class:`~torchrl.objectives.SoftUpdate` or
            :class:`~torchrl.objectives.HardUpdate` (anything with ``step()``).

    Examples:
        >>> class Updater:
        ...     steps = 0
        ...     def step(self):
        ...         self.steps += 1
        >>> updater = Updater()
        >>> hook = TargetNetUpdaterHook(updater)
        >>> hook(); hook()
        >>> updater.steps
        2
    """

    def __init__(self, target_params_updater: _Steppable) -> None:
        if not callable(getattr(target_params_updater, "step", None)):
            raise TypeError(
                f"TargetNetUpdaterHook: {type(target_params_updater).__name__} has no step() method"
            )
        self.target_params_updater = target_params_updater

    def __call__(self) -> None:
        """Updates the target parameters."""
        self.target_params_updater.step()

    def state_dict(self) -> dict[str, Any]:
        """The updater's step counter (empty when it has none)."""
        counter = getattr(self.target_params_updater, "counter", None)
        return {} if counter is None else {"counter": int(counter)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the updater's step counter."""
        if "counter" in state_dict:
            self.target_params_updater.counter = int(state_dict["counter"])  # type: ignore[attr-defined]

    def register(self, trainer: Trainer, name: str = "target_net_updater") -> None:
        """Registers at ``"post_optim"`` and in the checkpoint."""
        trainer.register_op("post_optim", self)
        trainer.register_module(name, self)


class UTDRHook(TrainerHookBase):
    """Logs the update-to-data ratio ``batch_size * optim_steps / data_count`` as ``"utd_ratio"``.

    ``optim_steps`` is the trainer's optimization count. With a replay buffer (the one of a
    registered :class:`~torchrl.trainers.ReplayBufferTrainer`, or ``replay_buffer=``),
    ``data_count`` is the buffer's ``write_count`` and ``batch_size`` the sample size; without
    one, ``data_count`` is the number of collected transitions (frames over ``frame_skip``) and
    ``batch_size`` that of a registered :class:`~torchrl.trainers.BatchSubSampler` (else the
    collected batch's). Registered at ``"post_steps_log"``, after the batch's updates.

    Args:
        trainer: the trainer to watch.
        replay_buffer: the buffer to count writes in (default: found in the trainer).
        batch_size: the sample size (default: found as described above).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> from torchrl.trainers import ReplayBufferTrainer, Trainer
        >>> w = torch.nn.Parameter(torch.zeros(1))
        >>> trainer = Trainer(
        ...     collector=[TensorDict(x=torch.ones(8), batch_size=[8])] * 2,
        ...     total_frames=16, optim_steps_per_batch=3,
        ...     loss_module=lambda td: TensorDict(loss=(td["x"] - w).pow(2).mean()),
        ...     optimizer=torch.optim.SGD([w], lr=0.1), progress_bar=False)
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
        >>> ReplayBufferTrainer(rb, batch_size=4).register(trainer)
        >>> UTDRHook(trainer).register(trainer)
        >>> trainer.train()
        >>> trainer.latest_logs["utd_ratio"]  # 4 samples * 6 updates / 16 writes
        1.5
    """

    def __init__(
        self,
        trainer: Trainer,
        replay_buffer: ReplayBuffer | None = None,
        batch_size: int | None = None,
    ) -> None:
        self.trainer = trainer
        self.replay_buffer = replay_buffer
        self.batch_size = batch_size
        self.utd_ratio: float | None = None

    def _registered(self, kind: type[TrainerHookBase]) -> Any:
        for op in self.trainer.ops("process_optim_batch"):
            owner = op if isinstance(op, kind) else getattr(op, "__self__", None)
            if isinstance(owner, kind):
                return owner
        return None

    def _sources(self, batch: TensorDictBase | None) -> tuple[int | None, int]:
        buffer = self.replay_buffer
        batch_size = self.batch_size
        rb_hook = self._registered(ReplayBufferTrainer)
        if buffer is None and rb_hook is not None:
            buffer = rb_hook.replay_buffer
        if buffer is not None:
            if batch_size is None:
                batch_size = rb_hook.batch_size if rb_hook is not None else None
                batch_size = batch_size or getattr(buffer, "batch_size", None)
            return batch_size, int(buffer.write_count)
        if batch_size is None:
            sub_sampler = self._registered(BatchSubSampler)
            if sub_sampler is not None:
                batch_size = sub_sampler.batch_size
            elif batch is not None:
                batch_size = batch.numel()
        return batch_size, self.trainer.collected_frames // self.trainer.frame_skip

    def __call__(self, batch: TensorDictBase | None = None) -> dict[str, float] | None:
        """The current ratio (``None`` before any data or without a known batch size)."""
        batch_size, data_count = self._sources(batch)
        if batch_size is None or data_count == 0:
            return None
        self.utd_ratio = batch_size * self.trainer.optim_count / data_count
        return {"utd_ratio": self.utd_ratio}

    def state_dict(self) -> dict[str, Any]:
        """The last ratio computed."""
        return {"utd_ratio": self.utd_ratio}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the last ratio computed."""
        self.utd_ratio = state_dict.get("utd_ratio")

    def register(self, trainer: Trainer, name: str = "utdr_hook") -> None:
        """Registers at ``"post_steps_log"`` and in the checkpoint."""
        if trainer is not self.trainer:
            raise ValueError("UTDRHook: register it with the trainer it was built for")
        trainer.register_op("post_steps_log", self)
        trainer.register_module(name, self)


class ValueEstimatorHook(TrainerHookBase):
    """Computes value targets and advantages over each whole collected batch.

    Registered at ``"batch_process"``, so register it before a
    :class:`~torchrl.trainers.ReplayBufferTrainer` (whose ``extend`` runs at that point too):
    the stored or sub-sampled data then hold ``"advantage"`` and ``"value_target"``. Runs under
    ``torch.no_grad``. A ``None`` batch (a collector writing into a buffer) passes through.

    Args:
        value_estimator: a value estimator (e.g. :class:`~torchrl.objectives.value.GAE`), any
            callable on a TensorDict, or a loss module, whose current ``value_estimator`` is
            used at every call (so ``loss.make_value_estimator(...)`` later is followed).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.objectives.value import GAE
        >>> critic = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["state_value"])
        >>> hook = ValueEstimatorHook(GAE(gamma=0.9, lmbda=0.9, value_network=critic))
        >>> batch = TensorDict({
        ...     "observation": torch.randn(5, 3),
        ...     ("next", "observation"): torch.randn(5, 3),
        ...     ("next", "reward"): torch.ones(5, 1),
        ...     ("next", "done"): torch.zeros(5, 1, dtype=torch.bool),
        ...     ("next", "terminated"): torch.zeros(5, 1, dtype=torch.bool),
        ... }, batch_size=[5])
        >>> hook(batch)["advantage"].shape
        torch.Size([5, 1])
    """

    def __init__(self, value_estimator: Callable[[TensorDictBase], TensorDictBase | None]) -> None:
        if not callable(value_estimator) and not hasattr(value_estimator, "value_estimator"):
            raise TypeError(
                f"ValueEstimatorHook: expected a value estimator or a loss, got "
                f"{type(value_estimator).__name__}"
            )
        self.value_estimator = value_estimator

    def _estimator(self) -> Callable[[TensorDictBase], TensorDictBase | None]:
        # A loss module is itself callable (its forward is the loss): use its estimator.
        estimator = getattr(self.value_estimator, "value_estimator", None)
        return estimator if estimator is not None else self.value_estimator

    def __call__(self, batch: TensorDictBase | None) -> TensorDictBase | None:
        """The batch with the estimator's entries written into it."""
        if batch is None:
            return None
        with torch.no_grad():
            out = self._estimator()(batch)
        return out if out is not None else batch

    def register(self, trainer: Trainer, name: str = "value_estimator") -> None:
        """Registers at ``"batch_process"``."""
        trainer.register_op("batch_process", self)
