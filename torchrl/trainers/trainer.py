"""The ``Trainer``: a collect-optimize-log loop with hooks at named points and checkpointing."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._keys import COLLECTOR, MASK, NEXT, REWARD
from torchrl._types import StatefulLike
from torchrl._utils import logger as torchrl_logger
from torchrl.record.loggers.common import Logger, as_float
from torchrl.trainers.checkpoint import (
    CHECKPOINT_VERSION,
    get_rng_states,
    load_checkpoint,
    save_checkpoint,
    set_rng_states,
)

__all__ = ["HOOK_POINTS", "Trainer"]

#: Where ops can be registered, in the order one training iteration reaches them, with what
#: each op receives and returns.
HOOK_POINTS: dict[str, str] = {
    "batch_process": "op(batch) -> batch or None (None keeps the batch)",
    "pre_optim_steps": "op() -> None",
    "process_optim_batch": "op(batch) -> sub_batch (chained: each op gets the previous output)",
    "post_loss": "op(sub_batch) -> None (sub_batch holds what the loss wrote, e.g. priorities)",
    "optimizer": "op(losses) -> detached losses (and diagnostics) to average and log",
    "post_optim": "op() -> None (e.g. a target-network update)",
    "post_optim_log": "op(sub_batch) -> dict of values to log or None",
    "pre_steps_log": "op(batch) -> dict of values to log or None",
    "post_steps": "op() -> None (e.g. update the collector's weights)",
    "post_steps_log": "op(batch) -> dict of values to log or None (e.g. an evaluation)",
}


class Trainer:
    """Runs collection, optimization and logging, with ops registered at named points.

    One iteration: a batch comes from the collector, goes through ``batch_process`` ops, is
    logged (``pre_steps_log``); then ``optim_steps_per_batch`` times a sub-batch is made
    (``process_optim_batch``, the batch itself by default), the loss computed, ``post_loss``
    ops run, the ``optimizer`` ops step, and ``post_optim`` ops run; finally ``post_steps`` and
    ``post_steps_log`` ops run and a checkpoint is written every ``save_trainer_interval``
    frames. See :data:`HOOK_POINTS` for the signatures. The collector is any iterable of
    TensorDict batches; ``update_policy_weights_``, ``state_dict``/``load_state_dict``,
    ``set_seed`` and ``shutdown`` are used when it has them.

    Args:
        collector: an iterable of TensorDict batches (e.g. a ``SyncDataCollector``).
        total_frames: stop after this many frames (counting ``frame_skip``).
        frame_skip: env frames per collected step (frames are counted ``numel * frame_skip``).
        optim_steps_per_batch: optimization steps per collected batch.
        loss_module: maps a sub-batch to a TensorDict of ``loss_*`` terms.
        optimizer: when given, an :class:`~torchrl.trainers.hooks.OptimizerHook` is registered.
        logger: a :class:`~torchrl.record.loggers.Logger`; ``None`` logs nothing.
        clip_grad_norm: clip the gradient norm (``True``) or each gradient value (``False``).
        clip_norm: the clipping threshold; ``None`` disables clipping.
        progress_bar: show a tqdm bar (frames, reward, losses, fps).
        seed: seeds torch, numpy, ``random`` and the collector.
        save_trainer_interval: frames between two checkpoints.
        log_interval: frames between two writes of the same value to the logger.
        save_trainer_file: the checkpoint file; ``None`` disables checkpointing.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> class Loss(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.w = torch.nn.Parameter(torch.zeros(1))
        ...     def forward(self, td):
        ...         return TensorDict(loss_l2=((td["x"] - self.w) ** 2).mean())
        >>> batches = [TensorDict(x=torch.ones(8, 1), batch_size=[8]) for _ in range(20)]
        >>> loss = Loss()
        >>> trainer = Trainer(collector=batches, total_frames=160, optim_steps_per_batch=5,
        ...     loss_module=loss, optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
        ...     progress_bar=False)
        >>> trainer.train()
        >>> trainer.collected_frames, round(loss.w.item(), 2)
        (160, 1.0)
    """

    def __init__(
        self,
        *,
        collector: Iterable[TensorDictBase],
        total_frames: int,
        frame_skip: int = 1,
        optim_steps_per_batch: int,
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
    ) -> None:
        if not hasattr(collector, "__iter__"):
            raise TypeError(
                f"Trainer: the collector must be an iterable of TensorDicts, got a "
                f"{type(collector).__name__}"
            )
        for name, value, low in (
            ("total_frames", total_frames, 1),
            ("frame_skip", frame_skip, 1),
            ("optim_steps_per_batch", optim_steps_per_batch, 0),
            ("save_trainer_interval", save_trainer_interval, 1),
            ("log_interval", log_interval, 0),
        ):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
                raise ValueError(f"Trainer: {name} must be an int >= {low}, got {value!r}")
        if clip_norm is not None and clip_norm <= 0:
            raise ValueError(f"Trainer: clip_norm must be > 0 or None, got {clip_norm!r}")
        if logger is not None and not isinstance(logger, Logger):
            raise TypeError(
                f"Trainer: logger must be a torchrl Logger, got {type(logger).__name__}"
            )
        self.collector = collector
        self.total_frames = int(total_frames)
        self.frame_skip = int(frame_skip)
        self.optim_steps_per_batch = int(optim_steps_per_batch)
        self.loss_module = loss_module
        self.logger = logger
        self.clip_grad_norm = bool(clip_grad_norm)
        self.clip_norm = clip_norm
        self.progress_bar = bool(progress_bar)
        self.seed = seed
        self.save_trainer_interval = int(save_trainer_interval)
        self.log_interval = int(log_interval)
        self.save_trainer_file = Path(save_trainer_file) if save_trainer_file is not None else None

        self.collected_frames = 0
        self._optim_count = 0
        self._last_save = 0
        self._last_logged: dict[str, int] = {}
        self._stop_reason: str | None = None
        self._ops: dict[str, list[tuple[Callable[..., Any], dict[str, Any]]]] = {
            point: [] for point in HOOK_POINTS
        }
        # Any: some modules also have checkpoint_state(path) or load_state_dict(..., trusted=)
        self._modules: dict[str, Any] = {}
        #: the latest value of every logged name (read by hooks such as ``EarlyStopping``).
        self.latest_logs: dict[str, float] = {}
        self._pbar_values: dict[str, float] = {}
        self._pbar: Any = None
        self._frames_at_start = 0
        self._start_time = 0.0

        if seed is not None:
            self.set_seed(seed)
        if optimizer is not None:
            from torchrl.trainers.hooks import OptimizerHook

            OptimizerHook(optimizer).register(self)

    # -- registration ----------------------------------------------------------------------------
    def register_op(self, dest: str, op: Callable[..., Any], **kwargs: Any) -> None:
        """Registers ``op`` at the hook point ``dest``; ``kwargs`` are passed at every call.

        Ops at one point run in registration order. See :data:`HOOK_POINTS`.

        Args:
            dest: a key of :data:`HOOK_POINTS`.
            op: the callable.
            **kwargs: extra keyword arguments for ``op``.

        Raises:
            KeyError: ``dest`` is not a hook point.
            TypeError: ``op`` is not callable.
        """
        if dest not in self._ops:
            raise KeyError(
                f"Trainer: unknown hook point {dest!r}; expected one of {list(HOOK_POINTS)}"
            )
        if not callable(op):
            raise TypeError(
                f"Trainer: op registered at {dest!r} must be callable, got {type(op).__name__}"
            )
        self._ops[dest].append((op, kwargs))

    def register_module(self, module_name: str, module: StatefulLike) -> None:
        """Adds an object with ``state_dict``/``load_state_dict`` to the trainer's checkpoint.

        Args:
            module_name: its name in the checkpoint (unique).
            module: a module, optimizer, hook, buffer, ...

        Raises:
            KeyError: the name is taken.
            TypeError: the object has no ``state_dict``/``load_state_dict``.
        """
        if module_name in self._modules or module_name in _RESERVED:
            raise KeyError(f"Trainer: a module named {module_name!r} is already registered")
        if not (hasattr(module, "state_dict") and hasattr(module, "load_state_dict")):
            raise TypeError(
                f"Trainer: {module_name!r} ({type(module).__name__}) has no state_dict/load_state_dict"
            )
        self._modules[module_name] = module

    def ops(self, dest: str) -> list[Callable[..., Any]]:
        """The ops registered at ``dest``, in call order."""
        return [op for op, _ in self._ops[dest]]

    # -- control ---------------------------------------------------------------------------------
    def set_seed(self, seed: int) -> None:
        """Seeds torch, numpy, Python's ``random`` and the collector (when it has ``set_seed``)."""
        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)
        set_seed = getattr(self.collector, "set_seed", None)
        if callable(set_seed):
            set_seed(seed)

    def request_stop(self, reason: str = "requested") -> None:
        """Makes :meth:`train` stop after the current iteration (used by ``EarlyStopping``)."""
        self._stop_reason = reason

    @property
    def stop_reason(self) -> str | None:
        """Why training stopped early, or ``None``."""
        return self._stop_reason

    @property
    def optim_count(self) -> int:
        """Optimization steps taken so far."""
        return self._optim_count

    # -- the loop --------------------------------------------------------------------------------
    def train(self) -> None:
        """Runs until ``total_frames`` frames were collected, the collector ends, or a hook
        requests a stop; then writes a last checkpoint and shuts the collector down."""
        if self.optim_steps_per_batch > 0 and not self._ops["optimizer"]:
            raise RuntimeError(
                "Trainer: nothing steps the parameters: pass optimizer= or register an "
                "OptimizerHook (or set optim_steps_per_batch=0)"
            )
        if self.progress_bar:
            from tqdm.auto import tqdm

            self._pbar = tqdm(total=self.total_frames, initial=self.collected_frames, unit="frames")
        self._frames_at_start = self.collected_frames
        self._start_time = time.perf_counter()
        init_random = int(getattr(self.collector, "init_random_frames", 0) or 0)
        try:
            if self.collected_frames < self.total_frames and self._stop_reason is None:
                for batch in self.collector:
                    self._iteration(batch, init_random)
                    if self.collected_frames >= self.total_frames or self._stop_reason is not None:
                        break
            if self.save_trainer_file is not None:
                self.save_trainer(force_save=True)
        finally:
            if self._pbar is not None:
                self._pbar.close()
                self._pbar = None
            shutdown = getattr(self.collector, "shutdown", None)
            if callable(shutdown):
                shutdown()
        if self._stop_reason is not None:
            torchrl_logger.info("training stopped early: %s", self._stop_reason)

    def _iteration(self, batch: TensorDictBase | None, init_random: int) -> None:
        frames = self._count_frames(batch)
        batch = self._batch_process(batch)
        self.collected_frames += frames
        self._log_ops("pre_steps_log", batch)
        if self.collected_frames > init_random and self.optim_steps_per_batch > 0:
            self.optim_steps(batch)
        for op, kwargs in self._ops["post_steps"]:
            op(**kwargs)
        self._log_ops("post_steps_log", batch)
        self._update_pbar(frames, batch)
        self.save_trainer()

    def _count_frames(self, batch: TensorDictBase | None) -> int:
        if batch is None:
            # A collector writing straight into a replay buffer yields None.
            per_batch = getattr(self.collector, "frames_per_batch", None)
            if per_batch is None:
                raise RuntimeError(
                    "Trainer: the collector yielded None and has no frames_per_batch to count frames with"
                )
            return int(per_batch) * self.frame_skip
        mask = batch.get((COLLECTOR, MASK), None)
        count = int(mask.sum()) if mask is not None else batch.numel()
        return count * self.frame_skip

    def _batch_process(self, batch: TensorDictBase | None) -> TensorDictBase | None:
        for op, kwargs in self._ops["batch_process"]:
            out = op(batch, **kwargs)
            if out is not None:
                batch = out
        return batch

    def optim_steps(self, batch: TensorDictBase | None) -> None:
        """Runs ``optim_steps_per_batch`` optimization steps on ``batch`` and logs the mean
        losses."""
        for op, kwargs in self._ops["pre_optim_steps"]:
            op(**kwargs)
        sums: dict[str, torch.Tensor] = {}
        for _ in range(self.optim_steps_per_batch):
            self._optim_count += 1
            sub_batch = batch
            for op, kwargs in self._ops["process_optim_batch"]:
                sub_batch = op(sub_batch, **kwargs)
            if sub_batch is None:
                raise RuntimeError(
                    "Trainer: no batch to optimize on: the collector yields None (it writes into a "
                    "replay buffer), so register a ReplayBufferTrainer to sample from it"
                )
            losses = self.loss_module(sub_batch)
            for op, kwargs in self._ops["post_loss"]:
                op(sub_batch, **kwargs)
            detached: dict[str, torch.Tensor] = {}
            for op, kwargs in self._ops["optimizer"]:
                out = op(losses, **kwargs)
                if out is not None:
                    detached.update({k: v for k, v in out.items() if isinstance(v, torch.Tensor)})
            for op, kwargs in self._ops["post_optim"]:
                op(**kwargs)
            self._log_ops("post_optim_log", sub_batch)
            # Summed as tensors: one host sync per batch instead of one per step and value.
            for key, value in detached.items():
                if value.numel() == 1:
                    value = value.detach().reshape(())
                    sums[key] = sums[key] + value if key in sums else value.clone()
        if sums:
            means = {k: as_float(v) / self.optim_steps_per_batch for k, v in sums.items()}
            losses_only = {k: v for k, v in means.items() if k.startswith("loss")}
            self._log(log_pbar=True, **losses_only)
            self._log(False, **{k: v for k, v in means.items() if k not in losses_only})
        self._log(optim_steps=self._optim_count)

    # -- logging ---------------------------------------------------------------------------------
    def _log_ops(self, dest: str, batch: Any) -> None:
        for op, kwargs in self._ops[dest]:
            out = op(batch, **kwargs)
            if out:
                out = dict(out)
                log_pbar = bool(out.pop("log_pbar", False))
                self._log(log_pbar=log_pbar, **out)

    def _log(self, log_pbar: bool = False, **values: Any) -> None:
        """Records values: kept in :attr:`latest_logs`, shown on the bar when ``log_pbar``, and
        written to the logger at most every ``log_interval`` frames per name."""
        for name, value in values.items():
            value = as_float(value)
            self.latest_logs[name] = value
            if log_pbar:
                self._pbar_values[name] = value
            if self.logger is None:
                continue
            last = self._last_logged.get(name)
            if last is None or self.collected_frames - last >= self.log_interval:
                self.logger.log_scalar(name, value, step=self.collected_frames)
                self._last_logged[name] = self.collected_frames

    def _update_pbar(self, frames: int, batch: TensorDictBase | None) -> None:
        if self._pbar is None:
            return
        elapsed = max(time.perf_counter() - self._start_time, 1e-9)
        postfix: dict[str, str] = {}
        reward = batch.get((NEXT, REWARD), None) if batch is not None else None
        if reward is not None and reward.numel():
            # Shown only (never logged): LogReward logs it.
            postfix["reward"] = f"{as_float(reward.float().mean()):.4g}"
        postfix.update({k: f"{v:.4g}" for k, v in self._pbar_values.items()})
        postfix["fps"] = f"{(self.collected_frames - self._frames_at_start) / elapsed:.0f}"
        self._pbar.set_postfix(postfix, refresh=False)
        self._pbar.update(frames)

    # -- checkpointing ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything a run needs to continue: counters, loss (online and target parameters),
        the registered modules (optimizers, replay buffer, hooks), the collector, the
        exploration modules of its policy, and the RNG states."""
        return self._state(None)

    def _state(self, path: Path | None) -> dict[str, Any]:
        # Modules with checkpoint_state(path) may keep large state beside the file (e.g. a
        # dumped replay buffer) when a file is being written.
        modules = {
            name: m.checkpoint_state(path)
            if path is not None and callable(getattr(m, "checkpoint_state", None))
            else m.state_dict()
            for name, m in self._modules.items()
        }
        state: dict[str, Any] = {
            "version": CHECKPOINT_VERSION,
            "collected_frames": self.collected_frames,
            "optim_count": self._optim_count,
            "last_logged": dict(self._last_logged),
            "latest_logs": dict(self.latest_logs),
            "loss_module": self.loss_module.state_dict()
            if isinstance(self.loss_module, nn.Module)
            else None,
            "modules": modules,
            "collector": None,
            "exploration": {
                name: m.state_dict() for name, m in _exploration_modules(self.collector).items()
            },
            "rng": get_rng_states(),
        }
        collector_state = getattr(self.collector, "state_dict", None)
        if callable(collector_state):
            state["collector"] = collector_state()
        return state

    def load_state_dict(self, state_dict: dict[str, Any], *, trusted: bool = False) -> None:
        """Restores a :meth:`state_dict`; training then continues from its frame count.

        A collector with ``load_state_dict`` restores its own frame count; otherwise, a collector
        with a ``total_frames`` attribute has it reduced by the frames already collected.
        ``trusted=True`` is passed on to the modules that keep files beside the checkpoint (a
        dumped replay buffer), which then may read arbitrary pickled objects from them.

        Raises:
            KeyError: a registered module has no saved state, or a saved one is not registered.
            ValueError: the checkpoint comes from another format version.
        """
        version = state_dict.get("version")
        if version != CHECKPOINT_VERSION:
            raise ValueError(
                f"Trainer: checkpoint format version {version!r}, expected {CHECKPOINT_VERSION}"
            )
        saved = state_dict["modules"]
        missing = sorted(set(self._modules) - set(saved))
        unexpected = sorted(set(saved) - set(self._modules))
        if missing or unexpected:
            raise KeyError(
                f"Trainer: the checkpoint's modules do not match the registered ones (missing "
                f"from the checkpoint: {missing}; not registered here: {unexpected})"
            )
        if state_dict["loss_module"] is not None and isinstance(self.loss_module, nn.Module):
            self.loss_module.load_state_dict(state_dict["loss_module"])
        for name, module in self._modules.items():
            if trusted and callable(getattr(module, "checkpoint_state", None)):
                # Modules keeping files beside the checkpoint read them trusted too.
                module.load_state_dict(saved[name], trusted=True)
            else:
                module.load_state_dict(saved[name])
        exploration = _exploration_modules(self.collector)
        for name, module_state in state_dict.get("exploration", {}).items():
            if name in exploration:
                exploration[name].load_state_dict(module_state)
        frames = int(state_dict["collected_frames"])
        collector_load = getattr(self.collector, "load_state_dict", None)
        if state_dict.get("collector") is not None and callable(collector_load):
            collector_load(state_dict["collector"])
        elif hasattr(self.collector, "total_frames"):
            remaining = max(int(self.collector.total_frames) - frames, 0)  # type: ignore[attr-defined]
            self.collector.total_frames = remaining  # type: ignore[attr-defined]
        self.collected_frames = frames
        self._last_save = frames
        self._optim_count = int(state_dict["optim_count"])
        self._last_logged = dict(state_dict.get("last_logged", {}))
        self.latest_logs = dict(state_dict.get("latest_logs", {}))
        set_rng_states(state_dict["rng"])

    def save_trainer(self, force_save: bool = False) -> Path | None:
        """Writes the checkpoint to ``save_trainer_file`` (atomically) when
        ``save_trainer_interval`` frames passed since the last one, or when ``force_save``.

        Returns:
            The path written, or ``None`` when nothing was written.
        """
        if self.save_trainer_file is None:
            if force_save:
                raise RuntimeError("Trainer: save_trainer(force_save=True) needs save_trainer_file")
            return None
        if not force_save and self.collected_frames - self._last_save < self.save_trainer_interval:
            return None
        self._last_save = self.collected_frames
        return save_checkpoint(self._state(self.save_trainer_file), self.save_trainer_file)

    def load_from_file(self, file: str | Path, *, trusted: bool = False, **kwargs: Any) -> Trainer:
        """Loads a checkpoint written by :meth:`save_trainer` into this trainer.

        The file (and a replay-buffer dump it names) is read without running code from it
        (``torch.load(weights_only=True)``, see :func:`load_checkpoint`).

        Args:
            file: the checkpoint file.
            trusted: also load arbitrary pickled Python objects, in the file and in the buffer
                dump it names (warns: unpickling can run any code; only for files you wrote).
            **kwargs: passed to ``torch.load`` (e.g. ``map_location``).

        Returns:
            The trainer itself.

        Raises:
            pickle.UnpicklingError: the checkpoint holds objects that need ``trusted=True``.
        """
        self.load_state_dict(load_checkpoint(file, trusted=trusted, **kwargs), trusted=trusted)
        return self

    def __repr__(self) -> str:
        hooks = {
            k: [getattr(op, "__qualname__", type(op).__name__) for op, _ in v]
            for k, v in self._ops.items()
            if v
        }
        return (
            f"Trainer(total_frames={self.total_frames}, collected_frames={self.collected_frames}, "
            f"optim_steps_per_batch={self.optim_steps_per_batch}, hooks={hooks})"
        )


_RESERVED = frozenset({"loss_module", "collector", "exploration", "rng"})


def _exploration_modules(collector: Any) -> dict[str, nn.Module]:
    """The sub-modules of the collector's policy that anneal (they have a ``step`` method)."""
    policy = getattr(collector, "policy", None)
    if not isinstance(policy, nn.Module):
        return {}
    return {
        name or "policy": module
        for name, module in policy.named_modules()
        if callable(getattr(module, "step", None)) and list(module.buffers(recurse=False))
    }
