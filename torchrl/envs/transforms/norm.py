"""Normalization transforms: ``ObservationNorm`` (fixed statistics) and ``VecNorm`` (running)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import NEXT, OBSERVATION
from torchrl._types import NestedKey
from torchrl.data.specs import Bounded, Composite, TensorSpec, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.transforms._utils import (
    float_dtype,
    get,
    key_tuple,
    map_input_specs,
    map_output_specs,
    missing_key_error,
    set_,
)
from torchrl.envs.transforms.base import Compose, ObservationTransform
from torchrl.envs.transforms.env import TransformedEnv

__all__ = ["ObservationNorm", "VecNorm"]


class _Lock(Protocol):
    """A ``threading``/``multiprocessing`` lock, or a manager's proxy of one."""

    def acquire(self) -> Any: ...

    def release(self) -> Any: ...


def _refresh_env(transform: ObservationTransform) -> None:
    container = transform.container
    if isinstance(container, TransformedEnv):
        container._refresh_specs()


class ObservationNorm(ObservationTransform):
    """Affine normalization with fixed statistics: ``obs * scale + loc`` (or standard-normal).

    With ``standard_normal=True`` the output is ``(obs - loc) / scale``. The statistics are
    given, or computed from random rollouts of the env by :meth:`init_stats`. The inverse keys
    undo the normalization (e.g. for actions).

    Args:
        loc: the shift (``None``: set later by :meth:`init_stats`).
        scale: the factor (``None``: set later by :meth:`init_stats`).
        in_keys: the entries (default ``["observation"]``).
        out_keys: where to write them (default: in place).
        in_keys_inv: base env inputs to un-normalize on the way in.
        out_keys_inv: where the outside writes them (default: ``in_keys_inv``).
        standard_normal: compute ``(obs - loc) / scale``.
        eps: the smallest scale :meth:`init_stats` keeps.

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import ObservationNorm, TransformedEnv
        >>> env = TransformedEnv(
        ...     PendulumEnv(batch_size=[16], seed=0),
        ...     ObservationNorm(in_keys=["observation"], standard_normal=True),
        ... )
        >>> env.transform.init_stats(num_iter=50, reduce_dim=(0, 1))
        >>> env.transform.loc.shape, env.transform.scale.shape
        (torch.Size([3]), torch.Size([3]))
        >>> check_env_specs(env)
    """

    loc: torch.Tensor | None
    scale: torch.Tensor | None

    def __init__(
        self,
        loc: float | torch.Tensor | None = None,
        scale: float | torch.Tensor | None = None,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        standard_normal: bool = False,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(
            [OBSERVATION] if in_keys is None else in_keys, out_keys, in_keys_inv, out_keys_inv
        )
        self.standard_normal = standard_normal
        self.eps = eps
        self.register_buffer(
            "loc", None if loc is None else torch.as_tensor(loc, dtype=torch.float32)
        )
        self.register_buffer(
            "scale", None if scale is None else torch.as_tensor(scale, dtype=torch.float32)
        )
        if self.scale is not None and standard_normal and bool((self.scale == 0).any()):
            raise ValueError("ObservationNorm: scale must not be 0 with standard_normal=True")

    @property
    def initialized(self) -> bool:
        """Whether ``loc`` and ``scale`` are set."""
        return self.loc is not None and self.scale is not None

    def _stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        loc, scale = self.loc, self.scale
        if loc is None or scale is None:
            raise RuntimeError(
                "ObservationNorm: loc and scale are not set: pass them or call init_stats()"
            )
        return loc, scale

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        loc, scale = self._stats()
        if self.standard_normal:
            return (value - loc) / scale
        if value.dtype == loc.dtype and value.device == loc.device:
            return torch.addcmul(loc, value, scale)  # one kernel instead of two
        return value * scale + loc

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        loc, scale = self._stats()
        if self.standard_normal:
            return value * scale + loc
        return (value - loc) / scale

    def init_stats(
        self,
        num_iter: int,
        reduce_dim: int | Sequence[int] = 0,
        cat_dim: int | None = None,
        key: NestedKey | None = None,
        keep_dims: Sequence[int] | None = None,
    ) -> None:
        """Sets ``loc`` and ``scale`` from a random rollout of ``num_iter`` steps of the env.

        The rollout (batch ``[*env.batch_size, num_iter]``) resets finished sub-envs and goes
        on; the mean and std of ``key`` are taken over ``reduce_dim``.

        Args:
            num_iter: the number of steps.
            reduce_dim: the dim(s) of the rollout data to average over (``0`` for an unbatched
                env: the time dim; pass e.g. ``(0, 1)`` for an env of batch size ``[B]``).
            cat_dim: accepted for TorchRL compatibility (one rollout is made, nothing is
                concatenated).
            key: the entry (default: the only in_key).
            keep_dims: reduced dims to keep (with size 1) in ``loc`` and ``scale``.

        Raises:
            RuntimeError: when the transform is not in an env, or the stats are already set.
        """
        if self.initialized:
            raise RuntimeError("ObservationNorm.init_stats: loc and scale are already set")
        parent = self.parent
        if parent is None:
            raise RuntimeError("ObservationNorm.init_stats needs the transform in a TransformedEnv")
        if key is None:
            if len(self._in_keys) != 1:
                raise ValueError(
                    f"ObservationNorm.init_stats: several in_keys {self._in_keys}: pass key="
                )
            key = self._in_keys[0]
        if num_iter < 2:
            raise ValueError("ObservationNorm.init_stats needs num_iter >= 2")
        rollout = parent.rollout(num_iter, break_when_any_done=False)
        data = rollout.get(key, None)
        if data is None:
            raise missing_key_error(self, key, rollout)
        dims = (reduce_dim,) if isinstance(reduce_dim, int) else tuple(reduce_dim)
        dims = tuple(d % data.ndim for d in dims)
        data = data.float()
        loc = data.mean(dims, keepdim=True)
        scale = data.std(dims, keepdim=True).clamp_min(self.eps)
        keep = {d % data.ndim for d in (keep_dims or ())}
        squeeze = tuple(sorted((d for d in dims if d not in keep), reverse=True))
        for d in squeeze:
            loc, scale = loc.squeeze(d), scale.squeeze(d)
        if self.standard_normal:
            self.loc, self.scale = loc, scale
        else:
            self.loc, self.scale = -loc / scale, 1 / scale
        _refresh_env(self)

    def _spec(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        dtype = float_dtype(leaf)
        if isinstance(leaf, Bounded) and self.initialized:
            a = self._apply_transform(leaf.low.to(dtype))
            b = self._apply_transform(leaf.high.to(dtype))
            a, b = torch.minimum(a, b), torch.maximum(a, b)
            return Bounded(
                a.expand(leaf.shape), b.expand(leaf.shape), leaf.shape, leaf.device, dtype
            )
        return Unbounded(shape=leaf.shape, device=leaf.device, dtype=dtype)

    def _spec_inv(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        dtype = float_dtype(leaf)
        if isinstance(leaf, Bounded) and self.initialized:
            # The outside writes normalized values: the bounds go through the forward map.
            a = self._apply_transform(leaf.low.to(dtype))
            b = self._apply_transform(leaf.high.to(dtype))
            a, b = torch.minimum(a, b), torch.maximum(a, b)
            return Bounded(
                a.expand(leaf.shape), b.expand(leaf.shape), leaf.shape, leaf.device, dtype
            )
        return Unbounded(shape=leaf.shape, device=leaf.device, dtype=dtype)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        map_output_specs(self, output_spec, self._spec)
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        map_input_specs(self, input_spec, self._spec_inv)
        return input_spec

    def extra_repr(self) -> str:
        loc = self.loc
        stats = "uninitialized" if loc is None else f"loc shape {tuple(loc.shape)}"
        return f"{stats}, standard_normal={self.standard_normal}, {super().extra_repr()}"


class VecNorm(ObservationTransform):
    """Normalizes entries with running (exponentially decayed) means and variances.

    The statistics (``sum``, ``ssq``, ``count`` per key) live in a TensorDict, created at the
    first data seen or passed as ``shared_data`` (e.g. made by
    :meth:`build_td_for_shared_vecnorm` and put in shared memory, so that env workers in other
    processes update and read the same statistics; pass a ``lock`` to serialize updates). They
    are updated in training mode and frozen by ``eval()`` or :meth:`freeze`; they are saved by
    ``state_dict``. In a replay buffer, use a frozen copy (``eval()`` or :meth:`frozen_copy`):
    as a module, it also normalizes the ``("next", key)`` entries of transitions.

    Args:
        in_keys: the entries (default ``["observation"]``).
        out_keys: where to write them (default: in place).
        shared_data: a TensorDict holding the statistics (shared between processes).
        lock: a lock (e.g. ``multiprocessing.Lock()``) held while updating.
        decay: the factor applied to past statistics at each update.
        eps: the smallest standard deviation used.
        shapes: the shape of the statistics of each key (default: each entry's dims past the
            data's batch dims); e.g. ``[(4,)]`` for ``[*B, 3, 4]`` entries normalizes the last dim
            only.
        shared_td: same as ``shared_data`` (TorchRL's name).

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import TransformedEnv, VecNorm
        >>> env = TransformedEnv(PendulumEnv(batch_size=[8], seed=0), VecNorm(in_keys=["observation"], decay=0.99))
        >>> _ = env.rollout(100)
        >>> vecnorm = env.transform
        >>> mean, std = vecnorm.loc_scale("observation")
        >>> mean.shape, std.shape
        (torch.Size([3]), torch.Size([3]))
        >>> norm = vecnorm.to_observation_norm()  # frozen statistics, as an ObservationNorm
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        shared_data: TensorDictBase | None = None,
        lock: _Lock | None = None,
        decay: float = 0.9999,
        eps: float = 1e-4,
        *,
        shapes: Sequence[Sequence[int]] | None = None,
        shared_td: TensorDictBase | None = None,
    ) -> None:
        super().__init__([OBSERVATION] if in_keys is None else in_keys, out_keys)
        if shared_data is not None and shared_td is not None:
            raise ValueError("VecNorm: give shared_data or shared_td, not both")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"VecNorm: decay must be in (0, 1], got {decay}")
        self._td: TensorDictBase | None = shared_data if shared_data is not None else shared_td
        self.lock = lock
        self.decay = float(decay)
        self.eps = float(eps)
        self.frozen = False
        if shapes is not None and len(shapes) != len(self._in_keys):
            raise ValueError(
                f"VecNorm: {len(shapes)} shapes for {len(self._in_keys)} in_keys {self._in_keys}"
            )
        self.shapes = None if shapes is None else [torch.Size(s) for s in shapes]
        self._shape_of = {} if self.shapes is None else dict(zip(self._in_keys, self.shapes))

    # ---------------------------------------------------------------------- statistics
    @staticmethod
    def build_td_for_shared_vecnorm(
        env: EnvBase,
        keys: Sequence[NestedKey] | None = None,
        memmap: bool = False,
    ) -> TensorDictBase:
        """Makes zeroed statistics for ``keys`` of ``env``'s observations, in shared memory.

        Args:
            env: an env whose observation spec holds the keys.
            keys: the observation keys (default ``["observation"]``).
            memmap: put the statistics in memory-mapped files instead of shared memory.

        Returns:
            A TensorDict to pass as ``shared_data`` to every ``VecNorm`` that shares them.
        """
        keys = [OBSERVATION] if keys is None else list(keys)
        spec = env.full_observation_spec
        batch_ndim = len(env.batch_size)
        entries: dict[Any, Any] = {}
        for key in keys:
            leaf = spec[key]
            feature = leaf.shape[batch_ndim:]
            entries[key_tuple(key)] = {
                "sum": torch.zeros(feature),
                "ssq": torch.zeros(feature),
                "count": torch.zeros(()),
            }
        td = TensorDict()
        for path, stats in entries.items():
            td.set(path, TensorDict(stats))
        return td.memmap_() if memmap else td.share_memory_()

    def _batch_ndim(self, key: NestedKey, value: torch.Tensor, batch_ndim: int) -> int:
        """The dims of ``value`` reduced by the statistics (all but the feature dims)."""
        shape = self._shape_of.get(key)
        if shape is None:
            return batch_ndim
        if tuple(value.shape[value.ndim - len(shape) :]) != tuple(shape):
            raise ValueError(
                f"VecNorm: the entry {key!r} of shape {tuple(value.shape)} does not end with its "
                f"declared shape {tuple(shape)}"
            )
        return value.ndim - len(shape)

    def _stats(self, key: NestedKey, value: torch.Tensor, batch_ndim: int) -> TensorDictBase:
        td = self._td
        path = key_tuple(key)
        stats = None if td is None else td.get(path, None)
        if stats is None:
            if td is not None and td.is_shared():
                raise KeyError(
                    f"VecNorm: the shared statistics have no entry for {key!r}; build them with "
                    "VecNorm.build_td_for_shared_vecnorm(env, keys)"
                )
            feature = value.shape[batch_ndim:]
            stats = TensorDict(
                sum=torch.zeros(feature, device=value.device),
                ssq=torch.zeros(feature, device=value.device),
                count=torch.zeros((), device=value.device),
            )
            if td is None:
                td = self._td = TensorDict(device=None)
            td.set(path, stats)
        return stats

    def _update(self, stats: TensorDictBase, value: torch.Tensor, batch_ndim: int) -> None:
        flat = value.reshape(-1, *value.shape[batch_ndim:]).to(stats["sum"].dtype)
        decay = self.decay
        stats["sum"].mul_(decay).add_(flat.sum(0))
        stats["ssq"].mul_(decay).add_(flat.pow(2).sum(0))
        stats["count"].mul_(decay).add_(flat.shape[0])

    def _loc_scale(self, stats: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        count = stats["count"].clamp_min(1e-8)
        mean = stats["sum"] / count
        var = (stats["ssq"] / count - mean.pow(2)).clamp_min(0.0)
        return mean, var.sqrt().clamp_min(self.eps)

    def loc_scale(self, key: NestedKey | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The current mean and standard deviation of an entry.

        Args:
            key: the entry (default: the only in_key).

        Returns:
            ``(mean, std)``, each shaped like one entry (without batch dims).
        """
        if key is None:
            if len(self._in_keys) != 1:
                raise ValueError(f"VecNorm.loc_scale: several in_keys {self._in_keys}: pass key")
            key = self._in_keys[0]
        stats = None if self._td is None else self._td.get(key_tuple(key), None)
        if stats is None:
            raise RuntimeError(f"VecNorm: no statistics yet for {key!r} (no data seen)")
        return self._loc_scale(stats)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        batch_ndim = next_tensordict.batch_dims
        update = self.training and not self.frozen
        lock = self.lock if update else None
        if lock is not None:
            lock.acquire()
        try:
            for in_key, out_key in self._pairs:
                value = get(next_tensordict, in_key)
                if value is None:
                    if self.missing_tolerance:
                        continue
                    raise missing_key_error(self, in_key, next_tensordict)
                ndim = self._batch_ndim(in_key, value, batch_ndim)
                stats = self._stats(in_key, value, ndim)
                if update:
                    self._update(stats, value, ndim)
                mean, std = self._loc_scale(stats)
                out = (value - mean) / std
                set_(next_tensordict, out_key, out)
        finally:
            if lock is not None:
                lock.release()
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Normalizes ``in_keys`` of ``tensordict`` (updating the statistics in training mode),
        and the matching ``("next", key)`` entries of transitions, without counting them twice.
        """
        self._call(tensordict)
        nxt = tensordict.get(NEXT, None)
        if isinstance(nxt, TensorDictBase):
            for in_key, out_key in self._pairs:
                value = get(nxt, in_key)
                stats = None if self._td is None else self._td.get(key_tuple(in_key), None)
                if value is not None and stats is not None:
                    mean, std = self._loc_scale(stats)
                    set_(nxt, out_key, (value - mean) / std)
        return tensordict

    def freeze(self) -> VecNorm:
        """Stops updating the statistics (normalization goes on); returns the transform."""
        self.frozen = True
        return self

    def unfreeze(self) -> VecNorm:
        """Resumes updating the statistics; returns the transform."""
        self.frozen = False
        return self

    def frozen_copy(self) -> VecNorm:
        """A frozen copy with its own (copied) statistics, e.g. for evaluation or a buffer."""
        copy = VecNorm(
            self._in_keys, self._out_keys, decay=self.decay, eps=self.eps, shapes=self.shapes
        )
        copy._td = None if self._td is None else self._td.clone()
        return copy.freeze()

    def to_observation_norm(self) -> ObservationNorm | Compose:
        """An ``ObservationNorm`` (standard-normal) with the current statistics.

        Returns:
            One ``ObservationNorm``, or a ``Compose`` of them when there are several keys.
        """
        norms = []
        for in_key, out_key in self._pairs:
            mean, std = self.loc_scale(in_key)
            norms.append(
                ObservationNorm(
                    loc=mean.clone(),
                    scale=std.clone(),
                    in_keys=[in_key],
                    out_keys=[out_key],
                    standard_normal=True,
                )
            )
        return norms[0] if len(norms) == 1 else Compose(*norms)

    # ------------------------------------------------------------------------ state dict
    def get_extra_state(self) -> dict[str, torch.Tensor]:
        if self._td is None:
            return {}
        return {k: v.clone() for k, v in self._td.flatten_keys(".").items()}

    def set_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        if not state:
            return
        loaded = TensorDict({k: v for k, v in state.items()}).unflatten_keys(".")
        if self._td is None:
            self._td = loaded
        else:
            # In place: statistics shared with other processes stay shared.
            self._td.update_(loaded)

    @property
    def stats(self) -> TensorDictBase | None:
        """The statistics TensorDict (``None`` before any data)."""
        return self._td

    def _spec(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        dtype = float_dtype(leaf)
        return Unbounded(shape=leaf.shape, device=leaf.device, dtype=dtype)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        map_output_specs(self, output_spec, self._spec)
        return output_spec

    def extra_repr(self) -> str:
        return f"decay={self.decay}, eps={self.eps}, frozen={self.frozen}, {super().extra_repr()}"
