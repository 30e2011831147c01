"""Transforms that move, select or reshape entries.

``CatTensors``, ``ExcludeTransform``, ``SelectTransform``, ``RenameTransform``,
``FlattenObservation``, ``UnsqueezeTransform``, ``SqueezeTransform``, ``PermuteTransform``,
``RemoveEmptySpecs``, ``Stack``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase

from torchrl._keys import OBSERVATION
from torchrl._types import NestedKey
from torchrl.data.specs import Bounded, Composite, TensorSpec, Unbounded
from torchrl.envs.transforms._utils import (
    OUTPUT_SPECS,
    find_spec,
    get,
    key_list,
    map_input_specs,
    map_output_specs,
    missing_key_error,
    missing_spec_error,
    set_,
    spec_apply,
    unravel_key,
)
from torchrl.envs.transforms.base import ObservationTransform, Transform

__all__ = [
    "CatTensors",
    "ExcludeTransform",
    "FlattenObservation",
    "PermuteTransform",
    "RemoveEmptySpecs",
    "RenameTransform",
    "SelectTransform",
    "SqueezeTransform",
    "Stack",
    "UnsqueezeTransform",
]


def _state_keys(transform: Transform) -> list[NestedKey]:
    """The state keys of the env as ``transform`` sees it (none outside an env)."""
    parent = transform.parent
    return [] if parent is None else list(parent.full_state_spec.keys(True, True))


def _delete(td: TensorDictBase, key: NestedKey) -> None:
    if get(td, key) is not None:
        del td[key]


# ------------------------------------------------------------------------------ CatTensors
class _ManyToOne(ObservationTransform):
    """Writes one entry (``out_key``) from all of its ``in_keys`` (CatTensors, Stack)."""

    out_key: NestedKey

    def _update_pairs(self) -> None:
        # One output for all inputs: no per-key pairs.
        self._pairs = []
        self._inv_pairs = list(zip(self._in_keys_inv, self.out_keys_inv))

    @property
    def out_keys(self) -> list[NestedKey]:  # type: ignore[override]
        """``[out_key]``."""
        return [self.out_key] if hasattr(self, "out_key") else []

    @out_keys.setter
    def out_keys(self, value: NestedKey | Sequence[NestedKey] | None) -> None:
        keys = key_list(value, "out_keys")
        if len(keys) != 1:
            raise ValueError(f"{type(self).__name__} has one out_key, got {keys}")
        self.out_key = keys[0]

    def _uses_step(self) -> bool:
        return True


class CatTensors(_ManyToOne):
    """Concatenates entries along a dim into one entry (e.g. a flat observation vector).

    Args:
        in_keys: the entries (``None``: every floating observation of the env).
        out_key: the result's key.
        dim: the dim to concatenate along (negative: counted from the end of each entry).
        del_keys: remove the inputs afterwards (entries the env needs as state are kept).
        unsqueeze_if_needed: entries without a feature dim (shape ``[*B]``) get one.
        sort: sort ``in_keys`` (so that the layout does not depend on their order).

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import CatTensors, TransformedEnv
        >>> env = TransformedEnv(
        ...     PendulumEnv(batch_size=[2], seed=0),
        ...     CatTensors(["observation", "thdot"], out_key="obs_vec", del_keys=False),
        ... )
        >>> env.observation_spec["obs_vec"].shape
        torch.Size([2, 4])
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_key: NestedKey = "observation_vector",
        dim: int = -1,
        *,
        del_keys: bool = True,
        unsqueeze_if_needed: bool = True,
        sort: bool = True,
    ) -> None:
        keys = key_list(in_keys, "in_keys")
        if sort:
            keys = sorted(keys, key=str)
        super().__init__(in_keys=keys, out_keys=[])
        if dim >= 0:
            raise ValueError(f"CatTensors: dim must be negative (counted from the end), got {dim}")
        self.out_key = unravel_key(out_key)
        self.dim = dim
        self.del_keys = del_keys
        self.unsqueeze_if_needed = unsqueeze_if_needed
        self.sort = sort
        self._infer = in_keys is None
        self._keep: set[NestedKey] = set()

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        values = []
        batch_ndim = next_tensordict.batch_dims
        for key in self._in_keys:
            value = get(next_tensordict, key)
            if value is None:
                if self.missing_tolerance:
                    return next_tensordict
                raise missing_key_error(self, key, next_tensordict)
            if self.unsqueeze_if_needed and value.ndim == batch_ndim:
                value = value.unsqueeze(-1)
            values.append(value)
        if not values:
            raise RuntimeError("CatTensors has no in_keys (use it in an env, or pass in_keys)")
        set_(next_tensordict, self.out_key, torch.cat(values, self.dim))
        if self.del_keys:
            keep = self._keep
            for key in self._in_keys:
                if key != self.out_key and key not in keep:
                    _delete(next_tensordict, key)
        return next_tensordict

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        obs_spec = output_spec["full_observation_spec"]
        if self._infer:
            keys = [
                k
                for k, leaf in obs_spec.items(include_nested=True, leaves_only=True)
                if leaf.dtype is not None and leaf.dtype.is_floating_point and k != self.out_key
            ]
            self._in_keys = sorted(keys, key=str) if self.sort else keys
        batch_ndim = len(obs_spec.shape)
        leaves = []
        for key in self._in_keys:
            if key not in obs_spec:
                raise missing_spec_error(self, key, output_spec, ("full_observation_spec",))
            leaf = obs_spec[key]
            if self.unsqueeze_if_needed and leaf.ndim == batch_ndim:
                leaf = spec_apply(leaf, lambda t: t.unsqueeze(-1), type(self).__name__)
            leaves.append((key, leaf))
        try:
            lows = [
                leaf.low if isinstance(leaf, Bounded) else torch.empty(leaf.shape)
                for _, leaf in leaves
            ]
            shape = torch.cat(lows, self.dim).shape
        except RuntimeError as err:
            shapes = {str(k): tuple(leaf.shape) for k, leaf in leaves}
            raise ValueError(
                f"CatTensors: cannot concatenate {shapes} along dim {self.dim}: {err}"
            ) from err
        dtype = torch.promote_types(leaves[0][1].dtype, leaves[0][1].dtype)
        for _, leaf in leaves[1:]:
            dtype = torch.promote_types(dtype, leaf.dtype)
        device = leaves[0][1].device
        if all(isinstance(leaf, Bounded) for _, leaf in leaves):
            low = torch.cat([leaf.low.to(dtype) for _, leaf in leaves], self.dim)
            high = torch.cat([leaf.high.to(dtype) for _, leaf in leaves], self.dim)
            out: TensorSpec = Bounded(low, high, shape=shape, device=device, dtype=dtype)
        else:
            out = Unbounded(shape=shape, device=device, dtype=dtype)
        # Entries the base env reads back as state must survive del_keys.
        self._keep = set(_state_keys(self)) & set(self._in_keys)
        obs_spec[self.out_key] = out
        if self.del_keys:
            for key in self._in_keys:
                if key != self.out_key and key not in self._keep and key in obs_spec:
                    del obs_spec[key]
        return output_spec

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        raise NotImplementedError("CatTensors rewrites specs through transform_output_spec")

    def extra_repr(self) -> str:
        return f"in_keys={self._in_keys}, out_key={self.out_key!r}, dim={self.dim}"


# ------------------------------------------------------------------- Exclude / Select / Rename
class ExcludeTransform(Transform):
    """Removes entries from the env's outputs (and from its specs).

    Args:
        *excluded_keys: the keys to remove (nested keys are tuples).
        inverse: remove them from the step inputs instead (before the base env sees them).

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import ExcludeTransform, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), ExcludeTransform(("params", "g")))
        >>> "g" in env.observation_spec["params"].keys(), "g" in env.reset()["params"].keys()
        (False, False)
    """

    def __init__(self, *excluded_keys: NestedKey, inverse: bool = False) -> None:
        super().__init__()
        if len(excluded_keys) == 1 and isinstance(excluded_keys[0], list):
            excluded_keys = tuple(excluded_keys[0])
        self.excluded_keys = [unravel_key(k) for k in excluded_keys]
        self.inverse = inverse

    def _exclude(self, tensordict: TensorDictBase) -> TensorDictBase:
        for key in self.excluded_keys:
            _delete(tensordict, key)
        return tensordict

    def _uses_step(self) -> bool:
        return not self.inverse

    def _uses_inv(self) -> bool:
        return self.inverse

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict if self.inverse else self._exclude(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return tensordict_reset if self.inverse else self._exclude(tensordict_reset)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._exclude(tensordict) if self.inverse else tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._exclude(tensordict)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        if not self.inverse:
            for name in OUTPUT_SPECS:
                sub = output_spec[name]
                for key in self.excluded_keys:
                    if key in sub:
                        del sub[key]
        return output_spec

    def extra_repr(self) -> str:
        return f"excluded_keys={self.excluded_keys}, inverse={self.inverse}"


class SelectTransform(Transform):
    """Keeps only some entries of the env's outputs (plus rewards, done flags and states).

    Args:
        *selected_keys: the observation keys to keep.
        keep_rewards: keep the reward entries too.
        keep_dones: keep the done flags too.

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import SelectTransform, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), SelectTransform("observation"))
        >>> sorted(env.reset().keys())  # states the pendulum reads back are kept
        ['done', 'observation', 'params', 'terminated', 'th', 'thdot', 'truncated']
        >>> check_env_specs(env)
    """

    def __init__(
        self, *selected_keys: NestedKey, keep_rewards: bool = True, keep_dones: bool = True
    ) -> None:
        super().__init__()
        if len(selected_keys) == 1 and isinstance(selected_keys[0], list):
            selected_keys = tuple(selected_keys[0])
        self.selected_keys = [unravel_key(k) for k in selected_keys]
        self.keep_rewards = keep_rewards
        self.keep_dones = keep_dones
        self._always: list[NestedKey] = []

    def _uses_step(self) -> bool:
        return True

    def _select(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict.select(*self.selected_keys, *self._always, strict=False)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._select(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._select(tensordict_reset)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._select(tensordict)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        always = []
        if self.keep_rewards:
            always += list(output_spec["full_reward_spec"].keys(True, True))
        if self.keep_dones:
            always += list(output_spec["full_done_spec"].keys(True, True))
        # States must survive, or the base env cannot step.
        always += _state_keys(self)
        self._always = list(dict.fromkeys(always))
        keep = set(self.selected_keys) | set(self._always)
        for name in OUTPUT_SPECS:
            sub = output_spec[name]
            for key in list(sub.keys(True, True)):
                if key not in keep:
                    del sub[key]
            for key in list(sub.keys(True)):
                if key in sub and isinstance(sub[key], Composite) and sub[key].is_empty(True):
                    del sub[key]
        return output_spec

    def extra_repr(self) -> str:
        return f"selected_keys={self.selected_keys}"


class RenameTransform(ObservationTransform):
    """Renames entries on the way out (and inputs on the way in, with the ``_inv`` keys).

    Args:
        in_keys: the current names.
        out_keys: the new names.
        in_keys_inv: the names the base env reads (inputs).
        out_keys_inv: the names the outside writes them under.
        create_copy: keep the old entries too.

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import RenameTransform, TransformedEnv
        >>> env = TransformedEnv(
        ...     PendulumEnv(seed=0),
        ...     RenameTransform(["observation"], ["obs"], in_keys_inv=["action"], out_keys_inv=["torque"]),
        ... )
        >>> "obs" in env.observation_spec.keys(), env.action_keys
        (True, ['torque'])
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey],
        out_keys: NestedKey | Sequence[NestedKey],
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        create_copy: bool = False,
    ) -> None:
        if out_keys_inv is None and in_keys_inv is not None:
            raise ValueError("RenameTransform: give out_keys_inv with in_keys_inv")
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.create_copy = create_copy

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in self._pairs:
            value = get(next_tensordict, in_key)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise missing_key_error(self, in_key, next_tensordict)
            set_(next_tensordict, out_key, value)
            if not self.create_copy:
                del next_tensordict[in_key]
        return next_tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in self._inv_pairs:
            value = get(tensordict, out_key)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise missing_key_error(self, out_key, tensordict)
            set_(tensordict, in_key, value)
            if not self.create_copy:
                del tensordict[out_key]
        return tensordict

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        for in_key, out_key in self._pairs:
            found = find_spec(output_spec, in_key)
            if found is None:
                raise missing_spec_error(self, in_key, output_spec, OUTPUT_SPECS)
            name, leaf = found
            output_spec[name][out_key] = leaf.clone()
            if not self.create_copy:
                del output_spec[name][in_key]
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        map_input_specs(
            self, input_spec, lambda leaf, _: leaf.clone(), keep_base_key=self.create_copy
        )
        return input_spec

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, create_copy={self.create_copy}"


# ---------------------------------------------------------------------------- reshaping
class _ShapeTransform(ObservationTransform):
    """A per-key reshaping op whose spec follows the data (shared by the reshaping transforms)."""

    def _spec_out(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        return spec_apply(leaf, self._apply_transform, type(self).__name__)

    def _spec_in(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        # The outside sees the base input after the forward op (the inverse undoes it).
        return spec_apply(leaf, self._apply_transform, type(self).__name__)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        map_output_specs(self, output_spec, self._spec_out)
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        map_input_specs(self, input_spec, self._spec_in)
        return input_spec


def _check_dim(owner: str, dim: int, allow_positive: bool) -> int:
    if dim >= 0 and not allow_positive:
        raise ValueError(
            f"{owner}: dims must be negative (counted from the end of each entry, so that they do "
            f"not depend on batch dims); got {dim}. Pass allow_positive_dim=True to index from "
            "the start of the full tensor"
        )
    return dim


class FlattenObservation(_ShapeTransform):
    """Flattens dims ``first_dim..last_dim`` of entries (e.g. ``[C, H, W]`` -> ``[C * H * W]``).

    Args:
        first_dim: the first dim to flatten (negative: from the end of each entry).
        last_dim: the last one.
        in_keys: the entries (default ``["observation"]``).
        out_keys: where to write them (default: in place).
        allow_positive_dim: accept dims counted from the start of the full tensor.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import FlattenObservation
        >>> t = FlattenObservation(-3, -1, in_keys=["pixels"])
        >>> t(TensorDict(pixels=torch.zeros(2, 3, 4, 5), batch_size=[2]))["pixels"].shape
        torch.Size([2, 60])
    """

    def __init__(
        self,
        first_dim: int,
        last_dim: int,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        allow_positive_dim: bool = False,
    ) -> None:
        super().__init__(in_keys if in_keys is not None else [OBSERVATION], out_keys)
        name = type(self).__name__
        self.first_dim = _check_dim(name, first_dim, allow_positive_dim)
        self.last_dim = _check_dim(name, last_dim, allow_positive_dim)
        if (first_dim < 0) == (last_dim < 0) and first_dim > last_dim:
            raise ValueError(f"{name}: first_dim ({first_dim}) must be <= last_dim ({last_dim})")

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.flatten(self.first_dim, self.last_dim)

    def extra_repr(self) -> str:
        return f"first_dim={self.first_dim}, last_dim={self.last_dim}, {super().extra_repr()}"


class UnsqueezeTransform(_ShapeTransform):
    """Inserts a dim of size 1 at ``dim`` (the inverse removes it from inputs).

    Args:
        dim: where the dim goes (negative: from the end of each entry).
        in_keys: the entries.
        out_keys: where to write them (default: in place).
        in_keys_inv: base env inputs whose outside version has the extra dim.
        out_keys_inv: where the outside writes them (default: ``in_keys_inv``).
        allow_positive_dim: accept a dim counted from the start of the full tensor.

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import TransformedEnv, UnsqueezeTransform
        >>> env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), UnsqueezeTransform(-1, in_keys=["thdot"], out_keys=["thdot_vec"]))
        >>> env.observation_spec["thdot_vec"].shape
        torch.Size([2, 1])
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        dim: int,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        allow_positive_dim: bool = False,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.dim = _check_dim(type(self).__name__, dim, allow_positive_dim)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.unsqueeze(self.dim)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.squeeze(self.dim)

    def _spec_out(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        try:
            return spec_apply(leaf, self._apply_transform, type(self).__name__)
        except NotImplementedError:
            return leaf.unsqueeze(self.dim)

    _spec_in = _spec_out

    def extra_repr(self) -> str:
        return f"dim={self.dim}, {super().extra_repr()}"


class SqueezeTransform(_ShapeTransform):
    """Removes the dim ``dim`` (of size 1) of entries (the inverse puts it back on inputs).

    Args:
        dim: the dim (negative: from the end of each entry).
        in_keys: the entries.
        out_keys: where to write them (default: in place).
        in_keys_inv: base env inputs whose outside version lacks the dim.
        out_keys_inv: where the outside writes them (default: ``in_keys_inv``).
        allow_positive_dim: accept a dim counted from the start of the full tensor.

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import SqueezeTransform, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), SqueezeTransform(-1, in_keys_inv=["action"]))
        >>> env.action_spec.shape
        torch.Size([2])
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        dim: int,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        allow_positive_dim: bool = False,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.dim = _check_dim(type(self).__name__, dim, allow_positive_dim)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if value.shape[self.dim] != 1:
            raise ValueError(
                f"SqueezeTransform: dim {self.dim} of an entry of shape {tuple(value.shape)} "
                "is not of size 1"
            )
        return value.squeeze(self.dim)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.unsqueeze(self.dim)

    def _spec_out(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        try:
            return spec_apply(leaf, self._apply_transform, type(self).__name__)
        except NotImplementedError:
            return leaf.squeeze(self.dim)

    _spec_in = _spec_out

    def extra_repr(self) -> str:
        return f"dim={self.dim}, {super().extra_repr()}"


class PermuteTransform(_ShapeTransform):
    """Permutes the last ``len(dims)`` dims of entries (e.g. ``HWC`` -> ``CHW``).

    Args:
        dims: the new order of the last dims, a permutation of ``[-len(dims), ..., -1]``.
        in_keys: the entries.
        out_keys: where to write them (default: in place).
        in_keys_inv: base env inputs to permute back on the way in.
        out_keys_inv: where the outside writes them (default: ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import PermuteTransform
        >>> t = PermuteTransform((-1, -3, -2), in_keys=["pixels"])  # HWC -> CHW
        >>> t(TensorDict(pixels=torch.zeros(2, 8, 6, 3), batch_size=[2]))["pixels"].shape
        torch.Size([2, 3, 8, 6])
    """

    def __init__(
        self,
        dims: Sequence[int],
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        dims = [int(d) for d in dims]
        k = len(dims)
        if sorted(dims) != list(range(-k, 0)):
            raise ValueError(
                f"PermuteTransform: dims must be a permutation of {list(range(-k, 0))}, got {dims}"
            )
        self.dims = dims
        self._perm = [d + k for d in dims]
        self._inv_perm = [self._perm.index(i) for i in range(k)]

    def _permute(self, value: torch.Tensor, perm: list[int]) -> torch.Tensor:
        lead = value.ndim - len(perm)
        return value.permute(*range(lead), *(lead + p for p in perm))

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._permute(value, self._perm)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._permute(value, self._inv_perm)

    def extra_repr(self) -> str:
        return f"dims={self.dims}, {super().extra_repr()}"


def _empty_composite_keys(spec: Composite) -> list[tuple[str, ...]]:
    """The keys of the sub-Composites holding no leaf at any depth (outermost ones only)."""
    found: list[tuple[str, ...]] = []
    for key in list(spec.keys()):
        sub = spec[key]
        if isinstance(sub, Composite):
            if sub.is_empty(recurse=True):
                found.append((key,))
            else:
                found.extend((key, *inner) for inner in _empty_composite_keys(sub))
    return found


def _drop_empty(td: TensorDictBase) -> TensorDictBase:
    """Deletes, in place, the sub-TensorDicts of ``td`` holding no tensor at any depth."""
    for key in list(td.keys()):
        value = td.get(key)
        if isinstance(value, TensorDictBase):
            _drop_empty(value)
            if value.is_empty():
                del td[key]
    return td


class RemoveEmptySpecs(Transform):
    """Removes the empty ``Composite`` specs of an env, and the empty entries from its outputs.

    Some envs declare a sub-Composite with no leaf (an empty ``"info"``, say); code that walks
    leaves then meets an entry with nothing in it. This transform drops such specs (nested ones
    included) and deletes the matching empty sub-TensorDicts after each reset and step. Empty
    input specs are dropped too; the inverse pass puts empty entries back for the base env.

    Examples:
        >>> from torchrl.data import Composite
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import RemoveEmptySpecs, TransformedEnv
        >>> base = PendulumEnv(seed=0)
        >>> base.observation_spec["info"] = Composite(shape=base.batch_size)
        >>> env = TransformedEnv(base, RemoveEmptySpecs())
        >>> "info" in env.observation_spec.keys()
        False
        >>> check_env_specs(env)
    """

    def __init__(self) -> None:
        super().__init__()
        self._removed_inputs: list[tuple[tuple[str, ...], Composite]] = []

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return _drop_empty(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return _drop_empty(tensordict_reset)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for key, spec in self._removed_inputs:
            if key not in tensordict.keys(include_nested=True):
                tensordict.set(key, spec.zero())
        return tensordict

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        for name in OUTPUT_SPECS:
            sub = output_spec.get(name, None)
            if sub is not None:
                for key in _empty_composite_keys(sub):
                    del sub[key]
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        removed = []
        for name in ("full_state_spec", "full_action_spec"):
            sub = input_spec.get(name, None)
            if sub is not None:
                for key in _empty_composite_keys(sub):
                    removed.append((key, sub[key].clone()))
                    del sub[key]
        self._removed_inputs = removed
        return input_spec


class Stack(_ManyToOne):
    """Stacks entries of one shape and dtype into a new entry along a new dim.

    Args:
        in_keys: the observations to stack (at least one; same shape and dtype).
        out_key: the key of the stacked entry.
        dim: where the new dim goes, counted from the end of each entry (negative).
        del_keys: delete the inputs once stacked.

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import Stack, TransformedEnv, UnaryTransform
        >>> env = TransformedEnv(
        ...     PendulumEnv(seed=0),
        ...     UnaryTransform(["observation"], ["negated"], fn=lambda x: -x),
        ... )
        >>> env = env.append_transform(Stack(["observation", "negated"], "both"))
        >>> env.observation_spec["both"].shape
        torch.Size([3, 2])
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey],
        out_key: NestedKey,
        dim: int = -1,
        *,
        del_keys: bool = True,
    ) -> None:
        keys = key_list(in_keys, "in_keys")
        if not keys:
            raise ValueError("Stack: give at least one key in in_keys")
        if dim >= 0:
            raise ValueError(f"Stack: dim must be negative (counted from the end), got {dim}")
        super().__init__(in_keys=keys, out_keys=[])
        self.out_key = unravel_key(out_key)
        self.dim = dim
        self.del_keys = del_keys

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        values = []
        for key in self._in_keys:
            value = get(next_tensordict, key)
            if value is None:
                if self.missing_tolerance:
                    return next_tensordict
                raise missing_key_error(self, key, next_tensordict)
            values.append(value)
        # dim counts from the end of each entry; torch.stack wants it from the end of the result.
        set_(next_tensordict, self.out_key, torch.stack(values, self.dim))
        if self.del_keys:
            for key in self._in_keys:
                if key != self.out_key:
                    _delete(next_tensordict, key)
        return next_tensordict

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        obs_spec = output_spec["full_observation_spec"]
        leaves = []
        for key in self._in_keys:
            if key not in obs_spec:
                raise missing_spec_error(self, key, output_spec, ("full_observation_spec",))
            leaves.append(obs_spec[key])
        first = leaves[0]
        for key, leaf in zip(self._in_keys, leaves):
            if leaf.shape != first.shape or leaf.dtype != first.dtype:
                raise ValueError(
                    f"Stack: {key!r} has shape {tuple(leaf.shape)} and dtype {leaf.dtype}, "
                    f"{self._in_keys[0]!r} has {tuple(first.shape)} and {first.dtype}"
                )
        new: TensorSpec
        bounded = [leaf for leaf in leaves if isinstance(leaf, Bounded)]
        if len(bounded) == len(leaves):
            low = torch.stack([leaf.low for leaf in bounded], self.dim)
            high = torch.stack([leaf.high for leaf in bounded], self.dim)
            new = Bounded(low, high, low.shape, first.device, first.dtype)
        else:
            shape = torch.stack([torch.empty(first.shape, device="meta")] * len(leaves), self.dim)
            new = Unbounded(shape=shape.shape, device=first.device, dtype=first.dtype)
        if self.del_keys:
            for key in self._in_keys:
                if key != self.out_key:
                    del obs_spec[key]
        obs_spec[self.out_key] = new
        return output_spec

    def extra_repr(self) -> str:
        return f"in_keys={self.in_keys}, out_key={self.out_key!r}, dim={self.dim}"
