"""Casting transforms: ``DTypeCastTransform`` and ``DoubleToFloat``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase

from torchrl._types import NestedKey
from torchrl.data.specs import Composite, TensorSpec
from torchrl.envs.transforms._utils import (
    cast_spec,
    map_input_specs,
    map_output_specs,
    set_,
)
from torchrl.envs.transforms.base import ObservationTransform

__all__ = ["DTypeCastTransform", "DoubleToFloat"]


def _leaves_of_dtype(spec: Composite, dtype: torch.dtype) -> list[NestedKey]:
    return [
        k
        for k, leaf in spec.items(include_nested=True, leaves_only=True)
        if getattr(leaf, "dtype", None) == dtype
    ]


class DTypeCastTransform(ObservationTransform):
    """Casts entries from ``dtype_in`` to ``dtype_out`` (and inputs back, through the inverse).

    Without ``in_keys``, every observation and reward of ``dtype_in`` is cast (found in the
    env's specs; as a module, every entry of ``dtype_in``). Without ``in_keys_inv``, every action
    and state of ``dtype_in`` is exposed as ``dtype_out`` and cast back before the base env sees
    it. Pass ``in_keys_inv=[]`` to leave the inputs alone.

    Args:
        dtype_in: the dtype of the base env's entries.
        dtype_out: the dtype seen outside.
        in_keys: the outputs to cast (``None``: all of ``dtype_in``).
        out_keys: where to write them (default: in place).
        in_keys_inv: the base env's inputs to cast back (``None``: all of ``dtype_in``).
        out_keys_inv: where the outside writes them (default: ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import DTypeCastTransform
        >>> t = DTypeCastTransform(torch.float64, torch.float32)
        >>> t(TensorDict(obs=torch.zeros(2, dtype=torch.float64), n=torch.zeros(2, dtype=torch.int64)))["obs"].dtype
        torch.float32
        >>> t.inv(TensorDict(action=torch.zeros(1)))["action"].dtype  # no env: no inverse keys
        torch.float32
    """

    def __init__(
        self,
        dtype_in: torch.dtype,
        dtype_out: torch.dtype,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        if not isinstance(dtype_in, torch.dtype) or not isinstance(dtype_out, torch.dtype):
            raise TypeError(
                f"{type(self).__name__}: dtype_in and dtype_out must be torch dtypes, got "
                f"{dtype_in!r} and {dtype_out!r}"
            )
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.dtype_in = dtype_in
        self.dtype_out = dtype_out
        self._infer = in_keys is None
        self._infer_inv = in_keys_inv is None

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.to(self.dtype_out)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.to(self.dtype_in)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._infer and not self._in_keys:
            # Used as a module without declared keys: cast whatever has dtype_in.
            for key, value in list(tensordict.items(include_nested=True, leaves_only=True)):
                if isinstance(value, torch.Tensor) and value.dtype == self.dtype_in:
                    set_(tensordict, key, value.to(self.dtype_out))
            return tensordict
        return self._call(tensordict)

    def _cast(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        if leaf.dtype != self.dtype_in:
            raise TypeError(
                f"{type(self).__name__}: the spec of {key!r} has dtype {leaf.dtype}, expected "
                f"{self.dtype_in}: {leaf!r}"
            )
        return cast_spec(leaf, self.dtype_out)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        if self._infer:
            keys: list[NestedKey] = []
            for name in ("full_observation_spec", "full_reward_spec"):
                keys += _leaves_of_dtype(output_spec[name], self.dtype_in)
            self._in_keys, self._out_keys = keys, None
            self._update_pairs()
        map_output_specs(self, output_spec, self._cast)
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        if self._infer_inv:
            keys: list[NestedKey] = []
            for name in ("full_state_spec", "full_action_spec"):
                keys += _leaves_of_dtype(input_spec[name], self.dtype_in)
            self._in_keys_inv, self._out_keys_inv = keys, None
            self._update_pairs()
        map_input_specs(self, input_spec, self._cast)
        return input_spec

    def extra_repr(self) -> str:
        return f"dtype_in={self.dtype_in}, dtype_out={self.dtype_out}, {super().extra_repr()}"


class DoubleToFloat(DTypeCastTransform):
    """Casts float64 entries to float32 (and float32 inputs back to float64 for the base env).

    Args:
        in_keys: the outputs to cast (``None``: every float64 observation and reward).
        out_keys: where to write them (default: in place).
        in_keys_inv: the base env's inputs to cast back (``None``: every float64 action/state).
        out_keys_inv: where the outside writes them (default: ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from torchrl.data import Bounded, Unbounded
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import DoubleToFloat, TransformedEnv
        >>> t = DoubleToFloat(in_keys=["obs"])
        >>> from tensordict import TensorDict
        >>> t(TensorDict(obs=torch.zeros(3, dtype=torch.float64)))["obs"].dtype
        torch.float32
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(torch.float64, torch.float32, in_keys, out_keys, in_keys_inv, out_keys_inv)

    def extra_repr(self) -> str:
        return ObservationTransform.extra_repr(self)
