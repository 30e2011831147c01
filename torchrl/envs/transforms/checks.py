"""Transforms that check the data passing through an env: ``FiniteTensorDictCheck``."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from torchrl.envs.transforms.base import Transform

__all__ = ["FiniteTensorDictCheck"]


class FiniteTensorDictCheck(Transform):
    """Raises a ``ValueError`` when a reset or a step outputs a NaN or an infinite value.

    Every floating-point (or complex) leaf of the TensorDict is checked, nested ones included;
    integer and bool entries are always finite. Nothing is changed, specs included.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import FiniteTensorDictCheck, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), FiniteTensorDictCheck())
        >>> check_env_specs(env)
        >>> FiniteTensorDictCheck()(TensorDict(obs=torch.tensor([1.0, float("nan")])))
        Traceback (most recent call last):
        ...
        ValueError: FiniteTensorDictCheck: the entry 'obs' holds non-finite values
    """

    def __init__(self) -> None:
        super().__init__()

    def _check(self, tensordict: TensorDictBase) -> TensorDictBase:
        for key, value in tensordict.items(include_nested=True, leaves_only=True):
            if not isinstance(value, torch.Tensor):
                continue
            if not (value.dtype.is_floating_point or value.dtype.is_complex):
                continue
            if not bool(torch.isfinite(value).all()):
                raise ValueError(
                    f"FiniteTensorDictCheck: the entry {key!r} holds non-finite values"
                )
        return tensordict

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._check(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._check(tensordict_reset)
