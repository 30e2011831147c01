"""Standard hooks for the :class:`~torchrl.trainers.Trainer`.

Each hook is a plain object with ``register(trainer, name=...)``, which registers its ops at
their usual points and, when it has state, adds itself to the trainer's checkpoint.
"""

from __future__ import annotations

import abc
import shutil
import uuid
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from tensordict import TensorDictBase

from torchrl._keys import COLLECTOR, MASK, NEXT, REWARD
from torchrl._types import NestedKey, WeightSyncLike
from torchrl._utils import total_loss
from torchrl.record.loggers.common import as_float

if TYPE_CHECKING:
    from torchrl.data.replay_buffers.replay_buffers import ReplayBuffer
    from torchrl.data.replay_buffers.storages import LazyMemmapStorage
    from torchrl.trainers.trainer import Trainer

__all__ = [
    "BatchSubSampler",
    "ClearCudaCache",
    "CountFramesLog",
    "LogReward",
    "LogScalar",
    "OptimizerHook",
    "ReplayBufferTrainer",
    "RewardNormalizer",
    "SelectKeys",
    "TrainerHookBase",
    "UpdateWeights",
]


class TrainerHookBase(abc.ABC):
    """The base of the trainer's hooks: ``register`` plus a (possibly empty) checkpoint state.

    A hook registers its ops at their usual points with :meth:`register`; to register one at
    another point, use ``trainer.register_op(dest, hook)``. A hook with state adds itself to
    the trainer's checkpoint in :meth:`register` (``trainer.register_module(name, self)``) and
    overrides :meth:`state_dict` / :meth:`load_state_dict`; a stateless hook keeps the defaults.

    Examples:
        >>> class CountBatches(TrainerHookBase):
        ...     def __init__(self):
        ...         self.count = 0
        ...     def __call__(self, batch):
        ...         self.count += 1
        ...     def state_dict(self):
        ...         return {"count": self.count}
        ...     def load_state_dict(self, state_dict):
        ...         self.count = state_dict["count"]
        ...     def register(self, trainer, name="count_batches"):
        ...         trainer.register_op("batch_process", self)
        ...         trainer.register_module(name, self)
        >>> hook = CountBatches()
        >>> hook(None)
        >>> hook.state_dict()
        {'count': 1}
    """

    def state_dict(self) -> dict[str, Any]:
        """The hook's checkpoint state (empty for a stateless hook)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned (nothing for a stateless hook)."""
        if state_dict:
            raise KeyError(
                f"{type(self).__name__} keeps no state, got a state with keys {sorted(state_dict)}"
            )

    @abc.abstractmethod
    def register(self, trainer: Trainer, name: str) -> None:
        """Registers the hook's ops in ``trainer`` at their default points.

        Args:
            trainer: the :class:`~torchrl.trainers.Trainer`.
            name: the hook's name in the trainer's checkpoint (hooks with state).
        """


def _valid(batch: TensorDictBase) -> TensorDictBase:
    """The items of a batch that are real data (``("collector", "mask")`` True when present)."""
    mask = batch.get((COLLECTOR, MASK), None)
    return batch[mask] if mask is not None else batch


def flat_key_name(key: NestedKey) -> str:
    """A flat name for a (nested) key: ``("next", "reward")`` -> ``"next_reward"``.

    Args:
        key: a string or a tuple of strings.

    Returns:
        The key itself for a string, else its parts joined by ``"_"``.

    Examples:
        >>> flat_key_name(("next", "reward"))
        'next_reward'
    """
    return key if isinstance(key, str) else "_".join(str(part) for part in key)


class OptimizerHook(TrainerHookBase):
    """Sums loss terms, back-propagates, clips and steps one optimizer.

    Registered at ``"optimizer"``. Clipping follows the trainer's ``clip_grad_norm`` /
    ``clip_norm`` unless given here. With several optimizers, prefer one optimizer over all
    parameters: a hook's step changes parameters that a later hook's backward would still need.

    Args:
        optimizer: the optimizer.
        loss_components: the loss entries to sum; ``None`` sums every entry starting with
            ``"loss"``.
        clip_grad_norm: clip the total norm (``True``) or each value (``False``).
        clip_norm: the clipping threshold (``None``: no clipping).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> w = torch.nn.Parameter(torch.ones(1))
        >>> hook = OptimizerHook(torch.optim.SGD([w], lr=0.5))
        >>> out = hook(TensorDict(loss_a=(w**2).sum(), loss_b=w.sum()))
        >>> round(w.item(), 2), sorted(out.keys())
        (-0.5, ['grad_norm_0', 'loss_a', 'loss_b'])
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        loss_components: Sequence[NestedKey] | None = None,
        clip_grad_norm: bool | None = None,
        clip_norm: float | None = None,
    ) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"OptimizerHook: expected a torch optimizer, got {type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        self.loss_components = list(loss_components) if loss_components is not None else None
        self.clip_grad_norm = clip_grad_norm
        self.clip_norm = clip_norm
        self._params = [p for group in optimizer.param_groups for p in group["params"]]

    def __call__(self, losses: TensorDictBase) -> TensorDictBase:
        """Steps the optimizer on the summed loss; returns the detached losses plus
        ``"grad_norm_0"`` (the total gradient norm before clipping)."""
        total = total_loss(
            losses, self.loss_components, owner="OptimizerHook", option="loss components"
        )
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        grads = [p for p in self._params if p.grad is not None]
        if self.clip_norm is not None and self.clip_grad_norm is False:
            torch.nn.utils.clip_grad_value_(grads, self.clip_norm)
        max_norm = (
            self.clip_norm
            if self.clip_norm is not None and self.clip_grad_norm is not False
            else float("inf")
        )
        # clip_grad_norm_ with an infinite bound only measures the norm.
        grad_norm = torch.nn.utils.clip_grad_norm_(grads, max_norm) if grads else torch.zeros(())
        self.optimizer.step()
        out = losses.detach()
        out.set("grad_norm_0", grad_norm.detach())
        return out

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state."""
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the optimizer's state."""
        self.optimizer.load_state_dict(state_dict["optimizer"])

    def register(self, trainer: Trainer, name: str = "optimizer") -> None:
        """Registers at ``"optimizer"`` and in the checkpoint (``name``, suffixed when taken)."""
        if self.clip_grad_norm is None:
            self.clip_grad_norm = trainer.clip_grad_norm
        if self.clip_norm is None:
            self.clip_norm = trainer.clip_norm
        trainer.register_op("optimizer", self)
        unique, i = name, 1
        while unique in trainer._modules:
            unique, i = f"{name}_{i}", i + 1
        trainer.register_module(unique, self)


class ReplayBufferTrainer(TrainerHookBase):
    """Extends a replay buffer with every batch, samples the optimization batches from it, and
    updates priorities after the loss.

    Ops: ``extend`` at ``"batch_process"``, ``sample`` at ``"process_optim_batch"``,
    ``update_priority`` at ``"post_loss"``. The buffer goes into the trainer's checkpoint: its
    content inside the file by default; with ``memmap=True``, as a directory written by the
    buffer's ``dumps`` next to the checkpoint (``<file>.buffer.<id>``, memory-mapped files for
    tensor storages), whose location the file holds. A new directory is written at each
    checkpoint before the file is replaced, and older ones are removed afterwards, so the file
    always names a complete copy.

    Args:
        replay_buffer: a (TensorDict) replay buffer.
        batch_size: the sample size; ``None`` uses the buffer's own.
        memmap: keep the buffer out of the checkpoint file, in a dumped directory beside it
            (for large buffers).
        device: where sampled batches are moved.
        flatten_tensordicts: flatten batches to one dim before extending (a ``[*B, T]`` batch
            becomes ``B*T`` transitions); padded items (``("collector", "mask")``) are dropped.
        max_dims: without flattening, zero-pad each batch dim up to these sizes first.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
        >>> hook = ReplayBufferTrainer(rb, batch_size=4)
        >>> hook.extend(TensorDict(x=torch.arange(6.).reshape(2, 3), batch_size=[2, 3]))
        >>> len(rb), hook.sample().batch_size
        (6, torch.Size([4]))
    """

    def __init__(
        self,
        replay_buffer: ReplayBuffer,
        batch_size: int | None = None,
        memmap: bool = False,
        device: torch.device | str | None = None,
        flatten_tensordicts: bool = True,
        max_dims: Sequence[int] | None = None,
    ) -> None:
        self.replay_buffer = replay_buffer
        self.batch_size = batch_size
        self.memmap = bool(memmap)
        self.device = torch.device(device) if device is not None else None
        self.flatten_tensordicts = bool(flatten_tensordicts)
        self.max_dims = tuple(max_dims) if max_dims is not None else None
        self._last_dump: Path | None = None
        self._live: Path | None = None

    def extend(self, batch: TensorDictBase | None) -> None:
        """Writes the batch into the buffer (``None``, from a collector that already wrote into
        the buffer, is skipped)."""
        if batch is None:
            return
        if self.flatten_tensordicts:
            batch = _valid(batch.reshape(-1))
        elif self.max_dims is not None:
            from tensordict import pad

            if len(self.max_dims) != batch.ndim:
                raise ValueError(
                    f"ReplayBufferTrainer: max_dims {self.max_dims} has {len(self.max_dims)} dims, the "
                    f"batch has {batch.ndim} ({tuple(batch.shape)})"
                )
            pads: list[int] = []
            for size, limit in zip(batch.shape, self.max_dims, strict=True):
                pads += [0, max(limit - size, 0)]
            batch = pad(batch, pads)
        self.replay_buffer.extend(batch)

    def sample(self, batch: TensorDictBase | None = None) -> TensorDictBase:
        """A sample from the buffer (the collected batch is ignored)."""
        if len(self.replay_buffer) == 0:
            raise RuntimeError("ReplayBufferTrainer: the replay buffer is empty; nothing to sample")
        sample = self.replay_buffer.sample(self.batch_size)
        if self.device is not None:
            sample = sample.to(self.device)
        return sample

    def update_priority(self, batch: TensorDictBase) -> None:
        """Updates priorities from the priority entry the loss wrote into ``batch`` (buffers
        without priorities, or batches without the entry, are left alone)."""
        update = getattr(self.replay_buffer, "update_tensordict_priority", None)
        key = getattr(self.replay_buffer, "priority_key", None)
        if update is None or key is None or key not in batch.keys(True):
            return
        if self.device is not None:
            batch = batch.cpu()
        update(batch)

    def state_dict(self) -> dict[str, Any]:
        """The buffer's state (storage content, sampler and writer)."""
        return {"replay_buffer": self.replay_buffer.state_dict()}

    def checkpoint_state(self, path: Path) -> dict[str, Any]:
        """The state to write into the checkpoint file ``path`` (see the class notes).

        Args:
            path: the checkpoint file about to be written.

        Returns:
            :meth:`state_dict`, or with ``memmap=True`` ``{"replay_buffer_dir": <dump dir>}``.
        """
        if not self.memmap:
            return self.state_dict()
        path = Path(path)
        target = path.with_name(f"{path.name}.buffer.{uuid.uuid4().hex[:12]}")
        self.replay_buffer.dumps(target)
        # Keep the dump the current file names (the new file is not written yet) and the new one.
        for old in path.parent.glob(f"{path.name}.buffer.*"):
            if old != target and old != self._last_dump:
                shutil.rmtree(old, ignore_errors=True)
        self._last_dump = target
        return {"replay_buffer_dir": str(target)}

    def load_state_dict(self, state_dict: dict[str, Any], *, trusted: bool = False) -> None:
        """Restores the buffer's state (from the file's content or from the dumped directory).

        A dumped memory-mapped storage is first copied to ``<file>.live.<id>``: a
        ``LazyMemmapStorage`` maps what it loads in place, and the dump must stay unchanged. That
        copy holds the live buffer; it is removed when the buffer's storage is released (or the
        process exits), and copies left by earlier runs (killed ones included) are removed at
        the next resume, so the checkpoint folder does not grow with the number of resumes.
        Copies are only removed by a resume from the same checkpoint: two processes must not
        resume from one checkpoint file at the same time.

        Args:
            state_dict: what :meth:`checkpoint_state` or :meth:`state_dict` returned.
            trusted: read the dump with ``trusted=True`` (see ``ReplayBuffer.loads``).
        """
        if "replay_buffer_dir" not in state_dict:
            self.replay_buffer.load_state_dict(state_dict["replay_buffer"])
            return
        source = Path(state_dict["replay_buffer_dir"])
        if not source.is_dir():
            raise FileNotFoundError(
                f"ReplayBufferTrainer: the checkpoint's buffer directory {source} is missing"
            )
        from torchrl.data.replay_buffers.storages import LazyMemmapStorage

        storage = self.replay_buffer.storage
        live = None
        if isinstance(storage, LazyMemmapStorage):
            # Not named "<file>.buffer.*": checkpoint_state removes those.
            base = source.name.split(".buffer.")[0]
            for stale in source.parent.glob(f"{base}.live.*"):
                # Copies of earlier resumes: the one this buffer maps now is released by the
                # loads() below (the storage maps the new copy instead).
                if not _mapped_by(storage, stale):
                    shutil.rmtree(stale, ignore_errors=True)
            live = source.with_name(f"{base}.live.{uuid.uuid4().hex[:12]}")
            shutil.copytree(source, live)
            source = live
        try:
            self.replay_buffer.loads(source, trusted=trusted)
        except BaseException:
            if live is not None:
                shutil.rmtree(live, ignore_errors=True)
            raise
        if live is not None:
            previous = self._live
            self._live = live
            # The copy lives as long as the storage that maps it.
            weakref.finalize(storage, shutil.rmtree, str(live), True)
            if previous is not None and previous != live:
                shutil.rmtree(previous, ignore_errors=True)
        self._last_dump = Path(state_dict["replay_buffer_dir"])

    def register(self, trainer: Trainer, name: str = "replay_buffer") -> None:
        """Registers ``extend``, ``sample`` and ``update_priority``, and the buffer's state."""
        trainer.register_op("batch_process", self.extend)
        trainer.register_op("process_optim_batch", self.sample)
        trainer.register_op("post_loss", self.update_priority)
        trainer.register_module(name, self)


def _mapped_by(storage: LazyMemmapStorage, directory: Path) -> bool:
    """Whether ``storage`` (a memory-mapped storage) maps the files in ``directory``."""
    current = storage.scratch_dir
    try:
        return current is not None and Path(current).resolve() == directory.resolve()
    except OSError:
        return False


class LogScalar(TrainerHookBase):
    """Logs a reduction (and the std) of an entry of every collected batch.

    Registered at ``"pre_steps_log"``. Padded items (``("collector", "mask")``) are ignored.

    Args:
        key: the entry to read.
        logname: the logged name; defaults to the key joined with ``"_"``.
        log_pbar: show it on the progress bar.
        include_std: also log ``"<logname>_std"``.
        reduction: ``"mean"``, ``"sum"``, ``"min"`` or ``"max"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({("next", "reward"): torch.tensor([[1.0], [3.0]])}, batch_size=[2])
        >>> LogScalar(("next", "reward"), "r", include_std=False)(batch)
        {'r': 2.0, 'log_pbar': False}
    """

    def __init__(
        self,
        key: NestedKey = (NEXT, REWARD),
        logname: str | None = None,
        log_pbar: bool = False,
        include_std: bool = True,
        reduction: Literal["mean", "sum", "min", "max"] = "mean",
    ) -> None:
        if reduction not in ("mean", "sum", "min", "max"):
            raise ValueError(f"LogScalar: reduction must be mean/sum/min/max, got {reduction!r}")
        self.key = key
        self.logname = logname or flat_key_name(key)
        self.log_pbar = bool(log_pbar)
        self.include_std = bool(include_std)
        self.reduction = reduction

    def __call__(self, batch: TensorDictBase | None) -> dict[str, Any] | None:
        """The logged values, or ``None`` when the batch lacks the entry."""
        if batch is None:
            return None
        values = _valid(batch).get(self.key, None)
        if values is None or values.numel() == 0:
            return None
        values = values.float()
        out: dict[str, Any] = {self.logname: as_float(getattr(values, self.reduction)())}
        if self.include_std:
            out[f"{self.logname}_std"] = as_float(values.std()) if values.numel() > 1 else 0.0
        out["log_pbar"] = self.log_pbar
        return out

    def register(self, trainer: Trainer, name: str | None = None) -> None:
        """Registers at ``"pre_steps_log"``."""
        trainer.register_op("pre_steps_log", self)


class LogReward(LogScalar):
    """Logs the mean reward of every collected batch (:class:`LogScalar` on the reward).

    Args:
        logname: the logged name.
        log_pbar: show it on the progress bar.
        reward_key: the reward entry; defaults to ``("next", "reward")``.

    Examples:
        >>> hook = LogReward(log_pbar=True)
        >>> hook.logname, hook.key
        ('r_training', ('next', 'reward'))
    """

    def __init__(
        self,
        logname: str = "r_training",
        log_pbar: bool = False,
        reward_key: NestedKey | None = None,
    ) -> None:
        super().__init__(
            reward_key or (NEXT, REWARD), logname, log_pbar=log_pbar, include_std=False
        )


class RewardNormalizer(TrainerHookBase):
    """Normalizes rewards of the optimization batches with running statistics of the collected ones.

    ``update_reward_stats`` (at ``"batch_process"``) updates a decayed mean and variance;
    ``normalize_reward`` (at ``"process_optim_batch"``, so register it after a
    :class:`ReplayBufferTrainer`) writes ``scale * (r - mean) / std`` into the sub-batch.

    Args:
        decay: weight of the past statistics at each update.
        scale: multiplies the normalized reward.
        eps: added to the std.
        log_pbar: unused (kept for TorchRL compatibility).
        reward_key: the reward entry; defaults to ``("next", "reward")``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> norm = RewardNormalizer(decay=0.0, eps=0.0)
        >>> batch = TensorDict({("next", "reward"): torch.tensor([[1.0], [3.0]])}, batch_size=[2])
        >>> norm.update_reward_stats(batch)
        >>> norm.normalize_reward(batch.clone())["next", "reward"].squeeze(-1)
        tensor([-1.,  1.])
    """

    def __init__(
        self,
        decay: float = 0.999,
        scale: float = 1.0,
        eps: float = 1e-4,
        log_pbar: bool = False,
        reward_key: NestedKey | None = None,
    ) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"RewardNormalizer: decay must be in [0, 1), got {decay}")
        self.decay = float(decay)
        self.scale = float(scale)
        self.eps = float(eps)
        self.reward_key = reward_key or (NEXT, REWARD)
        self._stats = {"sum": 0.0, "ssq": 0.0, "count": 0.0}

    def update_reward_stats(self, batch: TensorDictBase | None) -> None:
        """Folds the batch's rewards into the running statistics."""
        if batch is None:
            return
        reward = _valid(batch).get(self.reward_key).float()
        d = self.decay
        self._stats["sum"] = d * self._stats["sum"] + as_float(reward.sum())
        self._stats["ssq"] = d * self._stats["ssq"] + as_float(reward.pow(2).sum())
        self._stats["count"] = d * self._stats["count"] + reward.numel()

    def _mean_std(self) -> tuple[float, float]:
        count = self._stats["count"]
        if count == 0:
            return 0.0, 1.0
        mean = self._stats["sum"] / count
        var = max(self._stats["ssq"] / count - mean**2, 0.0)
        return mean, var**0.5

    def normalize_reward(self, batch: TensorDictBase) -> TensorDictBase:
        """Returns the batch with its reward normalized (a new tensor; the buffer is untouched)."""
        if self._stats["count"] == 0:
            raise RuntimeError(
                "RewardNormalizer: no statistics yet; update_reward_stats must run on a batch first"
            )
        mean, std = self._mean_std()
        reward = batch.get(self.reward_key)
        batch.set(self.reward_key, (reward - mean) * (self.scale / (std + self.eps)))
        return batch

    def state_dict(self) -> dict[str, Any]:
        """The running statistics."""
        return {"stats": dict(self._stats)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the running statistics."""
        self._stats = dict(state_dict["stats"])

    def register(self, trainer: Trainer, name: str = "reward_normalizer") -> None:
        """Registers both ops and the statistics."""
        trainer.register_op("batch_process", self.update_reward_stats)
        trainer.register_op("process_optim_batch", self.normalize_reward)
        trainer.register_module(name, self)


class BatchSubSampler(TrainerHookBase):
    """Draws a random sub-batch (of items or of sub-trajectories) from the collected batch.

    Registered at ``"process_optim_batch"``. With ``sub_traj_len=0`` it draws ``batch_size``
    items of the flattened batch; otherwise ``batch_size // sub_traj_len`` windows of
    ``sub_traj_len`` consecutive steps along the last (time) dim, giving a
    ``[batch_size // sub_traj_len, sub_traj_len]`` batch. Windows may span an episode end; the
    done flags inside them mark it.

    Args:
        batch_size: items per sub-batch.
        sub_traj_len: window length (``0``: single items).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict(x=torch.arange(40.).reshape(4, 10), batch_size=[4, 10])
        >>> sub = BatchSubSampler(batch_size=12, sub_traj_len=3)(batch)
        >>> sub.batch_size, bool((sub["x"].diff(dim=-1) == 1).all())
        (torch.Size([4, 3]), True)
    """

    def __init__(self, batch_size: int, sub_traj_len: int = 0) -> None:
        if batch_size < 1:
            raise ValueError(f"BatchSubSampler: batch_size must be >= 1, got {batch_size}")
        if sub_traj_len < 0 or (sub_traj_len and batch_size < sub_traj_len):
            raise ValueError(
                f"BatchSubSampler: sub_traj_len must be in [0, batch_size={batch_size}], got {sub_traj_len}"
            )
        self.batch_size = int(batch_size)
        self.sub_traj_len = int(sub_traj_len)

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        """A random sub-batch of ``batch``."""
        if self.sub_traj_len == 0:
            flat = _valid(batch.reshape(-1))
            idx = torch.randint(flat.shape[0], (self.batch_size,), device=flat.device)
            return flat[idx]
        if batch.ndim == 0:
            raise ValueError("BatchSubSampler: sub-trajectories need a batch with a time dim")
        rows = batch.reshape(-1, batch.shape[-1])
        n, t = rows.shape
        length = self.sub_traj_len
        if t < length:
            raise ValueError(
                f"BatchSubSampler: sub_traj_len={length} is longer than the batch's time dim ({t})"
            )
        count = self.batch_size // length
        row = torch.randint(n, (count, 1), device=rows.device)
        start = torch.randint(t - length + 1, (count, 1), device=rows.device)
        steps = start + torch.arange(length, device=rows.device)
        return rows[row.expand(count, length), steps]

    def register(self, trainer: Trainer, name: str | None = None) -> None:
        """Registers at ``"process_optim_batch"``."""
        trainer.register_op("process_optim_batch", self)


class CountFramesLog(TrainerHookBase):
    """Logs the number of frames collected so far as ``"n_frames"``.

    Args:
        frame_skip: env frames per collected step.
        log_pbar: show it on the progress bar.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> hook = CountFramesLog(frame_skip=2)
        >>> hook(TensorDict(batch_size=[4, 5]))
        {'n_frames': 40, 'log_pbar': False}
    """

    def __init__(self, frame_skip: int = 1, log_pbar: bool = False) -> None:
        self.frame_skip = int(frame_skip)
        self.log_pbar = bool(log_pbar)
        self.frame_count = 0

    def __call__(self, batch: TensorDictBase | None) -> dict[str, Any] | None:
        """Adds the batch's frames and returns the total."""
        if batch is None:
            return None
        mask = batch.get((COLLECTOR, MASK), None)
        self.frame_count += (
            int(mask.sum()) if mask is not None else batch.numel()
        ) * self.frame_skip
        return {"n_frames": self.frame_count, "log_pbar": self.log_pbar}

    def state_dict(self) -> dict[str, Any]:
        """The frame count."""
        return {"frame_count": self.frame_count}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the frame count."""
        self.frame_count = int(state_dict["frame_count"])

    def register(self, trainer: Trainer, name: str = "count_frames_log") -> None:
        """Registers at ``"pre_steps_log"`` and in the checkpoint."""
        trainer.register_op("pre_steps_log", self)
        trainer.register_module(name, self)


class UpdateWeights(TrainerHookBase):
    """Pushes the trained weights to the collector every ``update_weights_interval`` iterations.

    Registered at ``"post_steps"``.

    Args:
        collector: anything with ``update_policy_weights_()``.
        update_weights_interval: iterations between two updates.

    Examples:
        >>> class Collector:
        ...     updates = 0
        ...     def update_policy_weights_(self):
        ...         self.updates += 1
        >>> collector = Collector()
        >>> hook = UpdateWeights(collector, update_weights_interval=2)
        >>> for _ in range(5):
        ...     hook()
        >>> collector.updates
        2
    """

    def __init__(self, collector: WeightSyncLike, update_weights_interval: int) -> None:
        if not callable(getattr(collector, "update_policy_weights_", None)):
            raise TypeError(
                f"UpdateWeights: {type(collector).__name__} has no update_policy_weights_() method"
            )
        if update_weights_interval < 1:
            raise ValueError(f"UpdateWeights: interval must be >= 1, got {update_weights_interval}")
        self.collector = collector
        self.update_weights_interval = int(update_weights_interval)
        self.counter = 0

    def __call__(self) -> None:
        """Counts one iteration and updates the weights when the interval is reached."""
        self.counter += 1
        if self.counter % self.update_weights_interval == 0:
            self.collector.update_policy_weights_()

    def state_dict(self) -> dict[str, Any]:
        """The iteration counter."""
        return {"counter": self.counter}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the iteration counter."""
        self.counter = int(state_dict["counter"])

    def register(self, trainer: Trainer, name: str = "update_weights") -> None:
        """Registers at ``"post_steps"`` and in the checkpoint."""
        trainer.register_op("post_steps", self)
        trainer.register_module(name, self)


class SelectKeys(TrainerHookBase):
    """Keeps only some entries of every collected batch (registered at ``"batch_process"``).

    Args:
        keys: the entries to keep.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> SelectKeys(["a"])(TensorDict(a=torch.zeros(2), b=torch.ones(2), batch_size=[2])).keys()
        _StringKeys(dict_keys(['a']))
    """

    def __init__(self, keys: Sequence[NestedKey]) -> None:
        if isinstance(keys, str):
            raise TypeError("SelectKeys: keys must be a sequence of keys, got a single str")
        self.keys = list(keys)

    def __call__(self, batch: TensorDictBase | None) -> TensorDictBase | None:
        """The batch restricted to the keys."""
        if batch is None:
            return None
        missing = [k for k in self.keys if k not in batch.keys(True)]
        if missing:
            raise KeyError(f"SelectKeys: keys {missing} are not in the batch")
        return batch.select(*self.keys)

    def register(self, trainer: Trainer, name: str | None = None) -> None:
        """Registers at ``"batch_process"``."""
        trainer.register_op("batch_process", self)


class ClearCudaCache(TrainerHookBase):
    """Empties the CUDA cache every ``interval`` optimization steps (``"post_optim"``).

    Args:
        interval: optimization steps between two calls.

    Examples:
        >>> hook = ClearCudaCache(10)
        >>> hook()  # no-op without CUDA
    """

    def __init__(self, interval: int) -> None:
        if interval < 1:
            raise ValueError(f"ClearCudaCache: interval must be >= 1, got {interval}")
        self.interval = int(interval)
        self.count = 0

    def __call__(self) -> None:
        """Counts one step and empties the cache when due."""
        self.count += 1
        if self.count % self.interval == 0 and torch.cuda.is_available():
            torch.cuda.empty_cache()

    def register(self, trainer: Trainer, name: str | None = None) -> None:
        """Registers at ``"post_optim"``."""
        trainer.register_op("post_optim", self)
