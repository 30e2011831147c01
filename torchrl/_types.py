"""Type aliases and Protocols shared by every torchrl subpackage.

One definition of each, imported everywhere else, so that a signature reads the same in
``envs``, ``collectors`` and ``objectives`` and mypy checks one meaning.

- ``NestedKey``: a TensorDict key, ``"obs"`` or a path such as ``("agents", "obs")``.
- ``DeviceLike``: what ``torch.device(...)`` accepts, or ``None`` for "no device".
- ``ShapeLike``: a shape given as a ``torch.Size``, a sequence of ints or one int.
- ``IndexLike``: what indexing a tensor accepts (an int, a slice, ``...``, ``None``, an index
  tensor or array, or a sequence/tuple of those).
- ``TensorDictModuleLike``: a callable from a TensorDict to a TensorDict (policies, networks).
- ``ReplayBufferLike``: what collectors, trainers and transforms need from a replay buffer.
- ``LoggerLike``: what trainers and recorders need from a logger.
- ``StatefulLike``: what a checkpoint needs from an object (``state_dict``/``load_state_dict``).
- ``WeightSyncLike``: a collector whose policy weights can be refreshed.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import EllipsisType
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from tensordict import TensorDictBase

__all__ = [
    "DeviceLike",
    "IndexLike",
    "LoggerLike",
    "NestedKey",
    "ReplayBufferLike",
    "ShapeLike",
    "StatefulLike",
    "TensorDictModuleLike",
    "WeightSyncLike",
]

NestedKey = str | tuple[str, ...]
DeviceLike = torch.device | str | int | None
ShapeLike = torch.Size | Sequence[int] | int
IndexLike = int | slice | EllipsisType | None | torch.Tensor | np.ndarray | Sequence[Any]


@runtime_checkable
class TensorDictModuleLike(Protocol):
    """Reads some entries of a TensorDict and writes others (a policy, a value network)."""

    def __call__(self, tensordict: TensorDictBase, /) -> TensorDictBase: ...


@runtime_checkable
class ReplayBufferLike(Protocol):
    """A replay buffer as other components use it: add data, sample it, count it."""

    def extend(self, data: TensorDictBase, /) -> object: ...

    def sample(self, batch_size: int | None = None, /) -> Any: ...

    def __len__(self) -> int: ...


@runtime_checkable
class LoggerLike(Protocol):
    """A logger as trainers and recorders use it."""

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None: ...


@runtime_checkable
class StatefulLike(Protocol):
    """An object a checkpoint saves and restores: a module, an optimizer, a hook, a buffer."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any], /) -> object: ...


@runtime_checkable
class WeightSyncLike(Protocol):
    """A collector whose policy copies can be refreshed from the policy being trained."""

    def update_policy_weights_(self) -> None: ...
