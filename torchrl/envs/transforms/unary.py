"""``UnaryTransform``: applies a user function to some entries, and infers their new specs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from torchrl._types import NestedKey
from torchrl.data.specs import Composite, TensorSpec, Unbounded
from torchrl.envs.transforms._utils import map_input_specs, map_output_specs
from torchrl.envs.transforms.base import ObservationTransform

__all__ = ["UnaryTransform"]


class UnaryTransform(ObservationTransform):
    """Applies ``fn`` to each ``in_keys`` entry (and ``inv_fn`` to each ``out_keys_inv`` entry).

    The spec of each output is found by running ``fn`` on a zero value of the input's spec: it
    is an ``Unbounded`` spec with the shape and dtype of the result. An inverse output keeps the
    spec of the base env's input (``inv_fn`` is expected to keep the layout).

    Args:
        in_keys: the entries to read.
        out_keys: where to write ``fn(entry)`` (default: in place).
        in_keys_inv: the base env's inputs written by the inverse pass.
        out_keys_inv: the entries the inverse pass reads (default: ``in_keys_inv``).
        fn: the function applied on the way out (a tensor to a tensor).
        inv_fn: the function applied on the way in (default: identity).

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import TransformedEnv, UnaryTransform
        >>> t = UnaryTransform(["observation"], ["obs_sum"], fn=lambda x: x.sum(-1, keepdim=True))
        >>> env = TransformedEnv(PendulumEnv(seed=0), t)
        >>> env.observation_spec["obs_sum"].shape
        torch.Size([1])
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        *,
        fn: Callable[[torch.Tensor], torch.Tensor],
        inv_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"UnaryTransform: fn must be callable, got {type(fn).__name__}")
        if inv_fn is not None and not callable(inv_fn):
            raise TypeError(f"UnaryTransform: inv_fn must be callable, got {type(inv_fn).__name__}")
        super().__init__(
            in_keys=in_keys, out_keys=out_keys, in_keys_inv=in_keys_inv, out_keys_inv=out_keys_inv
        )
        self.fn = fn
        self.inv_fn = inv_fn

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self.fn(value)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value if self.inv_fn is None else self.inv_fn(value)

    def _out_spec(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        example = self.fn(leaf.zero())
        if not isinstance(example, torch.Tensor):
            raise TypeError(
                f"UnaryTransform: fn returned {type(example).__name__} for {key!r}, not a tensor"
            )
        return Unbounded(shape=example.shape, device=leaf.device, dtype=example.dtype)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        map_output_specs(self, output_spec, self._out_spec)
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        map_input_specs(self, input_spec, lambda leaf, key: leaf.clone())
        return input_spec

    def extra_repr(self) -> str:
        return f"fn={self.fn}, inv_fn={self.inv_fn}, in_keys={self.in_keys}"
