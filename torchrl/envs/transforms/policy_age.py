"""A filter that drops collected data produced by policies too many updates old.

Asynchronous collection tags every step with the version of the weights that produced it
(``"policy_version"``); the lag of a step is ``current_version - version``.
:class:`PolicyAgeFilter` keeps the data whose lag is at most ``max_policy_lag``. For the lag
statistics of a batch, see :func:`torchrl.collectors.policy_lag.policy_lag_stats`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDictBase

from torchrl._keys import POLICY_VERSION
from torchrl._types import NestedKey
from torchrl.envs.transforms.base import Transform

__all__ = ["PolicyAgeFilter"]


def batch_versions(
    batch: TensorDictBase | torch.Tensor, version_key: NestedKey, caller: str
) -> torch.Tensor:
    """The version entry of ``batch`` (or ``batch`` itself when it is a tensor), checked.

    Args:
        batch: a TensorDict holding ``version_key``, or a tensor of versions.
        version_key: the entry holding the versions.
        caller: the name used in error messages.

    Returns:
        The ``int64`` version tensor, shaped like ``batch`` (a trailing ``1`` dropped).

    Examples:
        >>> from tensordict import TensorDict
        >>> td = TensorDict(policy_version=torch.tensor([[1], [2]]), batch_size=[2])
        >>> batch_versions(td, "policy_version", "example")
        tensor([1, 2])
    """
    if isinstance(batch, torch.Tensor):
        versions = batch
    elif isinstance(batch, TensorDictBase):
        versions = batch.get(version_key, None)
        if versions is None:
            raise KeyError(
                f"{caller}: the batch has no {version_key!r} entry (the policy version of each "
                f"step); keys present: {sorted(map(str, batch.keys(True, True)))}"
            )
        if versions.ndim == batch.batch_dims + 1 and versions.shape[-1] == 1:
            versions = versions.squeeze(-1)
    else:
        raise TypeError(
            f"{caller}: batch must be a TensorDict or a tensor, got {type(batch).__name__}"
        )
    if versions.dtype.is_floating_point or versions.dtype == torch.bool:
        raise TypeError(
            f"{caller}: the {version_key!r} entry must hold integer versions, got {versions.dtype}"
        )
    return versions.to(torch.int64)


def as_version(value: int | torch.Tensor, name: str, caller: str) -> int:
    """``value`` (an int or a one-element integer tensor) as a Python int.

    Args:
        value: the version.
        name: the argument's name, for the error message.
        caller: the name used in error messages.

    Returns:
        The version as an int.

    Examples:
        >>> as_version(torch.tensor(3), "current_version", "example")
        3
    """
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
            raise ValueError(
                f"{caller}: {name} must be one integer, got a tensor of shape "
                f"{tuple(value.shape)} and dtype {value.dtype}"
            )
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{caller}: {name} must be an int, got {value!r}")
    return value


class PolicyAgeFilter(Transform):
    """Drops the collected data whose policy lag exceeds ``max_policy_lag``.

    The lag of a step is ``current_version - version`` (a version newer than
    ``current_version`` counts as lag 0). A 1-D batch ``[N]`` is filtered step by step. A
    batch ``[*B, T]`` (time last: rows of contiguous steps, as collectors yield) is filtered
    row by row: a row is kept whole when its *largest* lag is within the bound and dropped whole
    otherwise, so the value recursions never see a trajectory with a hole in it. The result is
    ``[rows_kept, T]`` (leading dims flattened), possibly with no row at all.

    Use it as a collector ``postproc``, on a replay buffer (``rb.append_transform(f)`` filters
    samples; ``invert=True`` filters what is written) or as a plain callable. Keep
    :attr:`current_version` up to date: assign it after each update, or pass a callable such as
    ``lambda: collector.policy_version``. :attr:`kept_frames` and :attr:`dropped_frames` count
    the steps seen. It cannot sit inside an env (it changes the batch size).

    Args:
        max_policy_lag: the largest lag kept (``>= 0``).
        current_version: the learner's version: an int or a callable returning one.
        version_key: the entry holding each step's version. Defaults to ``"policy_version"``.

    Examples:
        >>> from tensordict import TensorDict
        >>> f = PolicyAgeFilter(1, current_version=5)
        >>> versions = torch.tensor([[5, 5], [3, 4], [4, 5]])
        >>> batch = TensorDict(policy_version=versions, batch_size=[3, 2])
        >>> f(batch)["policy_version"]
        tensor([[5, 5],
                [4, 5]])
        >>> f.current_version = 6
        >>> f(batch).batch_size, f.dropped_frames
        (torch.Size([1, 2]), 6)
    """

    def __init__(
        self,
        max_policy_lag: int,
        current_version: int | torch.Tensor | Callable[[], int] = 0,
        version_key: NestedKey = POLICY_VERSION,
    ) -> None:
        super().__init__()
        if isinstance(max_policy_lag, bool) or not isinstance(max_policy_lag, int):
            raise TypeError(
                f"PolicyAgeFilter: max_policy_lag must be an int, got {max_policy_lag!r}"
            )
        if max_policy_lag < 0:
            raise ValueError(f"PolicyAgeFilter: max_policy_lag must be >= 0, got {max_policy_lag}")
        self.max_policy_lag = max_policy_lag
        self.version_key = version_key
        self._current: int | Callable[[], int] = 0
        self.current_version = current_version  # type: ignore[assignment]
        self.kept_frames = 0
        self.dropped_frames = 0

    @property
    def current_version(self) -> int:
        """The learner's policy version (read from the callable when one was given)."""
        value = self._current() if callable(self._current) else self._current
        return as_version(value, "current_version", type(self).__name__)

    @current_version.setter
    def current_version(self, value: int | torch.Tensor | Callable[[], int]) -> None:
        if callable(value) and not isinstance(value, torch.Tensor):
            self._current = value
        else:
            self._current = as_version(value, "current_version", type(self).__name__)

    def keep_mask(self, batch: TensorDictBase) -> torch.Tensor:
        """The rows (``[*B, T]`` batches) or steps (``[N]`` batches) kept.

        Args:
            batch: collected data holding ``version_key``.

        Returns:
            A bool tensor ``[prod(B)]`` for a ``[*B, T]`` batch, ``[N]`` for a 1-D one.
        """
        name = type(self).__name__
        if batch.batch_dims == 0:
            raise ValueError(f"{name}: the batch has no batch dim; expected [N] steps or [*B, T]")
        lag = self.current_version - batch_versions(batch, self.version_key, name)
        if batch.batch_dims == 1:
            return lag <= self.max_policy_lag
        rows = lag.reshape(-1, lag.shape[batch.batch_dims - 1])
        if rows.shape[-1] == 0:
            return torch.ones(rows.shape[0], dtype=torch.bool, device=rows.device)
        return rows.amax(-1) <= self.max_policy_lag

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Returns the part of ``tensordict`` recent enough (a new TensorDict).

        Args:
            tensordict: collected data ``[N]`` or ``[*B, T]`` holding ``version_key``.

        Returns:
            The kept steps ``[N_kept]`` or rows ``[rows_kept, T]``.
        """
        return self._call(tensordict)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        keep = self.keep_mask(next_tensordict)
        if next_tensordict.batch_dims > 2:
            next_tensordict = next_tensordict.reshape(-1, next_tensordict.shape[-1])
        kept = next_tensordict[keep]
        # batch_size.numel(): TensorDict.numel() counts an empty batch as 1
        self.kept_frames += kept.batch_size.numel()
        self.dropped_frames += next_tensordict.batch_size.numel() - kept.batch_size.numel()
        return kept

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(
            "PolicyAgeFilter filters batches of collected data (a collector postproc or a replay "
            "buffer transform); it cannot run inside an env, whose batch size is fixed"
        )

    def extra_repr(self) -> str:
        return (
            f"max_policy_lag={self.max_policy_lag}, current_version={self.current_version}, "
            f"version_key={self.version_key!r}"
        )
