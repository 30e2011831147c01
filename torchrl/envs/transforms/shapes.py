"""Transforms that change the shape of single entries: ``ExpandAs`` (an entry expanded to the
shape of another) and ``FlattenAction`` (a multi-dimensional action seen flat by the policy).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from tensordict import TensorDictBase

from torchrl._keys import ACTION
from torchrl._types import NestedKey
from torchrl.data.specs import Composite
from torchrl.envs.transforms._utils import (
    OUTPUT_SPECS,
    expand_right,
    find_spec,
    get,
    key_list,
    missing_key_error,
    missing_spec_error,
    set_,
    spec_apply,
    unravel_key,
)
from torchrl.envs.transforms.base import Transform

__all__ = ["ExpandAs", "FlattenAction"]


class ExpandAs(Transform):
    """Expands an entry on the right to the shape of a reference entry.

    The entry's shape must be a prefix of the reference's (``[*B, 1]`` -> ``[*B, 1, 3]`` is not;
    ``[*B]`` -> ``[*B, 3]`` and ``[*B, n, 1]`` from ``[*B, n]`` are); a size-1 trailing dim is
    expanded too (``[*B, 1]`` -> ``[*B, 4]``).

    Args:
        in_key: the entry to expand.
        ref_key: the entry whose shape is taken.
        out_key: where the expanded entry is written (default: ``in_key``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import ExpandAs
        >>> td = TensorDict(done=torch.ones(2, 1, dtype=torch.bool), reward=torch.zeros(2, 1, 3))
        >>> ExpandAs("done", "reward")(td)["done"].shape
        torch.Size([2, 1, 3])
    """

    def __init__(
        self, in_key: NestedKey, ref_key: NestedKey, out_key: NestedKey | None = None
    ) -> None:
        in_key = unravel_key(in_key)
        super().__init__(in_keys=[in_key], out_keys=[in_key if out_key is None else out_key])
        self.ref_key = unravel_key(ref_key)

    def _expand(self, value: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        if value.ndim > len(shape) or value.shape != shape[: value.ndim]:
            value_fits = value.ndim <= len(shape) and all(
                a in (1, b) for a, b in zip(value.shape, shape[: value.ndim])
            )
            if not value_fits:
                raise ValueError(
                    f"ExpandAs: {self._in_keys[0]!r} of shape {list(value.shape)} cannot be "
                    f"expanded to the shape of {self.ref_key!r}: {list(shape)}"
                )
        return expand_right(value, len(shape)).expand(shape)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        in_key, out_key = self._pairs[0]
        value = get(next_tensordict, in_key)
        ref = get(next_tensordict, self.ref_key)
        for key, found in ((in_key, value), (self.ref_key, ref)):
            if found is None:
                if self.missing_tolerance:
                    return next_tensordict
                raise missing_key_error(self, key, next_tensordict)
        set_(next_tensordict, out_key, self._expand(value, ref.shape))
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call_tolerant(tensordict_reset)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        in_key, out_key = self._pairs[0]
        found = find_spec(output_spec, in_key)
        ref = find_spec(output_spec, self.ref_key)
        for key, hit in ((in_key, found), (self.ref_key, ref)):
            if hit is None:
                raise missing_spec_error(self, key, output_spec, OUTPUT_SPECS)
        assert found is not None and ref is not None
        name, leaf = found
        shape = ref[1].shape
        output_spec[name][out_key] = spec_apply(leaf, lambda t: self._expand(t, shape), "ExpandAs")
        return output_spec

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, ref_key={self.ref_key!r}"


def _flattener(first: int, last: int) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda t: t.flatten(first, last)


class FlattenAction(Transform):
    """Flattens adjacent dims of an action: the policy writes a flat action, the base env
    receives it unflattened.

    On the inverse pass (policy -> env), the flat dim is unflattened back to the sizes of the
    base env's action; the action spec is flattened. Applied as a module (``forward``, e.g. in a
    replay buffer), the dims of ``in_keys`` entries are flattened. Step outputs are untouched.

    Args:
        first_dim: the first dim to flatten (negative, counted from the end, unless
            ``allow_positive_dim``).
        last_dim: the last dim to flatten (inclusive).
        in_keys_inv: the base env's action keys (default: ``["action"]``).
        out_keys_inv: the flat actions the policy writes (default: ``in_keys_inv``).
        in_keys: the entries flattened by ``forward`` (default: ``in_keys_inv``).
        out_keys: where ``forward`` writes them (default: ``in_keys``).
        allow_positive_dim: accept dims ``>= 0``, counted after the batch dims.
        action_shape: the (unflattened) action shape past the batch dims, for an inverse pass
            outside an env (default: read from the parent env's action spec).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import FlattenAction
        >>> t = FlattenAction(action_shape=[2, 3])
        >>> t.inv(TensorDict(action=torch.arange(6.0)))["action"].shape
        torch.Size([2, 3])
        >>> t(TensorDict(action=torch.zeros(2, 3)))["action"].shape
        torch.Size([6])
    """

    def __init__(
        self,
        first_dim: int = -2,
        last_dim: int = -1,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        allow_positive_dim: bool = False,
        *,
        action_shape: Sequence[int] | None = None,
    ) -> None:
        first_dim, last_dim = int(first_dim), int(last_dim)
        if not allow_positive_dim and (first_dim >= 0 or last_dim >= 0):
            raise ValueError(
                f"FlattenAction: dims must be negative (got first_dim={first_dim}, "
                f"last_dim={last_dim}); pass allow_positive_dim=True for dims after the batch dims"
            )
        if (first_dim < 0) == (last_dim < 0) and first_dim > last_dim:
            raise ValueError(
                f"FlattenAction: first_dim ({first_dim}) must come before last_dim ({last_dim})"
            )
        keys_inv = key_list(in_keys_inv, "in_keys_inv") or [ACTION]
        super().__init__(
            in_keys=in_keys if in_keys is not None else keys_inv,
            out_keys=out_keys,
            in_keys_inv=keys_inv,
            out_keys_inv=out_keys_inv,
        )
        self.first_dim = first_dim
        self.last_dim = last_dim
        self.allow_positive_dim = bool(allow_positive_dim)
        self.action_shape = None if action_shape is None else torch.Size(action_shape)
        # The unflattened sizes of each base action (from the parent's spec).
        self._sizes: dict[NestedKey, torch.Size] = {}

    def _span(self, batch_ndim: int, ndim: int) -> tuple[int, int]:
        """The (negative) first and last dims, for a tensor of ``ndim`` dims."""
        dims = []
        for d in (self.first_dim, self.last_dim):
            dims.append(d + batch_ndim - ndim if d >= 0 else d)
        if not -ndim <= dims[0] <= dims[1] < 0:
            raise ValueError(
                f"FlattenAction: dims ({self.first_dim}, {self.last_dim}) do not fit a tensor of "
                f"{ndim} dims with {batch_ndim} batch dims"
            )
        return dims[0], dims[1]

    def _sizes_for(self, key: NestedKey) -> torch.Size:
        sizes = self._sizes.get(key)
        if sizes is not None:
            return sizes
        if self.action_shape is not None:
            first, last = self._span(0, len(self.action_shape))
            n = len(self.action_shape)
            return self.action_shape[n + first : n + last + 1]
        raise RuntimeError(
            f"FlattenAction: the unflattened shape of {key!r} is unknown; use the transform in "
            "an env or pass action_shape"
        )

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in self._inv_pairs:
            value = get(tensordict, out_key)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise missing_key_error(self, out_key, tensordict)
            sizes = self._sizes_for(in_key)
            # Dims after ``last_dim`` are untouched: the flat dim sits at ``last_dim`` from the
            # end of the flat tensor.
            last = self.last_dim
            if last >= 0:
                batch_ndim = tensordict.batch_dims
                last = last + batch_ndim - (value.ndim + len(sizes) - 1)
            try:
                set_(tensordict, in_key, value.unflatten(last, sizes))
            except RuntimeError as err:
                raise ValueError(
                    f"FlattenAction: {out_key!r} of shape {list(value.shape)} cannot be "
                    f"unflattened to sizes {list(sizes)} at dim {last}"
                ) from err
        return tensordict

    def _uses_step(self) -> bool:
        return False

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        # Step outputs hold no action.
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Flattens the ``in_keys`` entries of ``tensordict`` (written to ``out_keys``)."""
        for in_key, out_key in self._pairs:
            value = get(tensordict, in_key)
            if value is None:
                raise missing_key_error(self, in_key, tensordict)
            first, last = self._span(tensordict.batch_dims, value.ndim)
            set_(tensordict, out_key, value.flatten(first, last))
        return tensordict

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        batch_ndim = len(action_spec.shape)
        for in_key, out_key in self._inv_pairs:
            if in_key not in action_spec:
                raise KeyError(
                    f"FlattenAction: the action key {in_key!r} is not in the env's action spec "
                    f"(keys: {list(action_spec.keys(True, True))})"
                )
            leaf = action_spec[in_key]
            first, last = self._span(batch_ndim, len(leaf.shape))
            n = len(leaf.shape)
            self._sizes[in_key] = leaf.shape[n + first : n + last + 1]
            new = spec_apply(leaf, _flattener(first, last), "FlattenAction")
            if out_key != in_key:
                del action_spec[in_key]
            action_spec[out_key] = new
        return action_spec

    def extra_repr(self) -> str:
        return f"first_dim={self.first_dim}, last_dim={self.last_dim}, {super().extra_repr()}"
