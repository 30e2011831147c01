"""Consistent dropout (Hausknecht & Wagener 2022): the mask drawn while acting is stored with the
transition and used again when the loss replays it, so the loss sees the network that acted.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from torchrl._types import NestedKey
from torchrl.modules._spec_utils import module_keys

if TYPE_CHECKING:
    from torchrl.envs.transforms import TensorDictPrimer

__all__ = ["ConsistentDropout", "ConsistentDropoutModule"]


def _draw_mask(shape: torch.Size, p: float, device: torch.device | None = None) -> torch.Tensor:
    return torch.rand(shape, device=device) >= p


class ConsistentDropout(nn.Module):
    """Dropout whose mask can be given: the same mask gives the same output.

    In training mode the input is multiplied by ``mask / (1 - p)``; without a mask one is drawn
    (:meth:`make_mask`). In eval mode the input is returned unchanged. Collectors run policies
    in ``no_grad`` but not in eval mode: masks apply while collecting unless the policy is put
    in eval mode. The exploration type (``set_exploration_type``) has no effect here.

    Args:
        p: probability of zeroing an element, in ``[0, 1)``.

    Examples:
        >>> drop = ConsistentDropout(p=0.5)
        >>> x = torch.ones(2, 6)
        >>> mask = drop.make_mask(x)
        >>> torch.equal(drop(x, mask), drop(x, mask)), set(drop(x, mask).unique().tolist()) <= {0.0, 2.0}
        (True, True)
        >>> torch.equal(drop.eval()(x), x)
        True
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"ConsistentDropout: p must be in [0, 1), got {p}")
        self.p = float(p)

    def make_mask(self, x: torch.Tensor) -> torch.Tensor:
        """A boolean keep-mask shaped like ``x`` (True with probability ``1 - p``)."""
        return _draw_mask(x.shape, self.p, x.device)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Applies ``mask`` (drawn when ``None``) in training mode; returns ``x`` in eval mode.

        Args:
            x: the input.
            mask: a boolean keep-mask broadcastable to ``x``.
        """
        if not self.training:
            return x
        if mask is None:
            mask = self.make_mask(x)
        return x * mask.to(x.dtype) / (1.0 - self.p)


class ConsistentDropoutModule(TensorDictModuleBase):
    """A :class:`ConsistentDropout` that keeps its mask in the tensordict.

    In training mode the module reads the mask at ``mask_key`` (drawing and writing one when the
    entry is missing), applies it to ``in_keys[0]`` and writes the result at ``out_keys[0]``.
    A transition stored in a replay buffer therefore carries the mask the policy used, and the
    loss, calling the same module on it, applies the same mask. A mask present in the input is
    kept: in an env rollout it is carried from step to step until an episode restarts, which
    :meth:`make_tensordict_primer` arranges (a fresh mask at each reset). In eval mode the input
    is copied through unchanged.

    Args:
        p: dropout probability.
        in_keys: the entry to drop out (one key).
        out_keys: where to write the result (default: ``in_keys``).
        input_shape: the shape of one input (without batch dims), for
            :meth:`make_tensordict_primer`.
        input_dtype: the input's dtype, kept for API compatibility (the mask is boolean).
        mask_key: where the mask is kept (default ``"mask_<id of the module>"``).

    Examples:
        >>> from tensordict import TensorDict
        >>> module = ConsistentDropoutModule(p=0.5, in_keys="x", out_keys="y", mask_key="mask")
        >>> td = module(TensorDict(x=torch.ones(3, 4), batch_size=[3]))
        >>> td["mask"].dtype, td["y"].shape
        (torch.bool, torch.Size([3, 4]))
        >>> replay = module(td.exclude("y"))  # the stored mask is applied again
        >>> torch.equal(replay["y"], td["y"])
        True
    """

    def __init__(
        self,
        p: float = 0.5,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        input_shape: Sequence[int] | torch.Size | None = None,
        input_dtype: torch.dtype | None = None,
        mask_key: NestedKey | None = None,
    ) -> None:
        super().__init__()
        if in_keys is None:
            raise TypeError("ConsistentDropoutModule needs in_keys (the entry to drop out)")
        keys_in = [in_keys] if isinstance(in_keys, (str, tuple)) else list(in_keys)
        if out_keys is None:
            keys_out = list(keys_in)
        else:
            keys_out = [out_keys] if isinstance(out_keys, (str, tuple)) else list(out_keys)
        if len(keys_in) != 1 or len(keys_out) != 1:
            raise ValueError(
                f"ConsistentDropoutModule reads one entry and writes one, got in_keys={keys_in} "
                f"and out_keys={keys_out}"
            )
        self.consistent_dropout = ConsistentDropout(p)
        self.p = self.consistent_dropout.p
        self.mask_key: NestedKey = f"mask_{id(self)}" if mask_key is None else mask_key
        self.in_keys = module_keys([keys_in[0], self.mask_key])
        self.out_keys = module_keys([keys_out[0], self.mask_key])
        self.input_shape = None if input_shape is None else torch.Size(input_shape)
        self.input_dtype = torch.get_default_dtype() if input_dtype is None else input_dtype

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        x = tensordict.get(self.in_keys[0])
        if not self.training:
            tensordict.set(self.out_keys[0], x)
            return tensordict
        mask = tensordict.get(self.mask_key, None)
        if mask is None:
            mask = self.consistent_dropout.make_mask(x)
        elif mask.shape != x.shape:
            raise ValueError(
                f"ConsistentDropoutModule: the mask at {self.mask_key!r} has shape "
                f"{tuple(mask.shape)}, the input {self.in_keys[0]!r} has {tuple(x.shape)}"
            )
        tensordict.set(self.out_keys[0], self.consistent_dropout(x, mask))
        tensordict.set(self.mask_key, mask)
        return tensordict

    def make_tensordict_primer(self) -> TensorDictPrimer:
        """A transform that gives each episode a fresh mask at reset.

        The sub-envs reset by one call share the mask drawn for that call.

        Returns:
            A :class:`~torchrl.envs.transforms.TensorDictPrimer` for ``mask_key``.

        Examples:
            >>> module = ConsistentDropoutModule(0.5, "x", input_shape=(4,), mask_key="mask")
            >>> module.make_tensordict_primer().primers["mask"].shape
            torch.Size([4])
        """
        if self.input_shape is None:
            raise ValueError(
                "ConsistentDropoutModule.make_tensordict_primer needs input_shape (the shape of "
                "one input, without batch dims) given at construction"
            )
        from torchrl.data import Binary
        from torchrl.envs.transforms import TensorDictPrimer

        spec = Binary(shape=self.input_shape, dtype=torch.bool)
        draw = functools.partial(_draw_mask, self.input_shape, self.p)
        return TensorDictPrimer({self.mask_key: spec}, default_value=draw)
