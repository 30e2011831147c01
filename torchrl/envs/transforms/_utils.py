"""Small helpers shared by the transforms: key handling, fast TensorDict access, spec reshaping.

The ``get``/``set_`` pair is on the hot path of every transformed step: for a plain
``TensorDict`` and a string key they read and write the TensorDict's dict directly (through
:mod:`torchrl._td_compat`), after the checks ``TensorDict.set`` would make (batch dims, device)
are done in a couple of comparisons.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._td_compat import entries, new_unchecked, set_unchecked
from torchrl._types import NestedKey
from torchrl.data.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    TensorSpec,
    Unbounded,
)

if TYPE_CHECKING:
    from torchrl.envs.transforms.base import Transform

#: The three sub-specs of an env's ``output_spec``, in the order transforms visit them.
OUTPUT_SPECS = ("full_observation_spec", "full_reward_spec", "full_done_spec")


# ------------------------------------------------------------------------------------- keys
def unravel_key(key: object) -> NestedKey:
    """A key as a string, or a flat tuple of strings (``("a", ("b", "c"))`` -> ``("a", "b", "c")``).

    Raises:
        TypeError: when ``key`` is neither a string nor a (nested) tuple of strings.
    """
    if type(key) is str:
        return key
    if isinstance(key, tuple) and key:
        flat: list[str] = []
        for part in key:
            sub = unravel_key(part)
            flat.extend((sub,) if type(sub) is str else sub)
        return flat[0] if len(flat) == 1 else tuple(flat)
    raise TypeError(f"a key is a string or a tuple of strings, got {key!r}")


def key_list(keys: NestedKey | Sequence[NestedKey] | None, what: str = "keys") -> list[NestedKey]:
    """Normalizes ``None`` / one key / a sequence of keys to a list of unravelled keys.

    A tuple of strings is *one* nested key; pass several keys as a list.
    """
    if keys is None:
        return []
    if isinstance(keys, str) or (isinstance(keys, tuple) and all(isinstance(k, str) for k in keys)):
        return [unravel_key(keys)]
    if not isinstance(keys, Sequence):
        raise TypeError(f"{what} must be a key or a list of keys, got {keys!r}")
    return [unravel_key(k) for k in keys]


def key_tuple(key: NestedKey) -> tuple[str, ...]:
    return (key,) if type(key) is str else key  # type: ignore[return-value]


def key_from_tuple(key: tuple[str, ...]) -> NestedKey:
    return key[0] if len(key) == 1 else key


def key_prefix(key: NestedKey) -> tuple[str, ...]:
    """The groups above a key: ``()`` for ``"a"``, ``("agents",)`` for ``("agents", "a")``."""
    return () if type(key) is str else key[:-1]  # type: ignore[return-value]


def replace_last(key: NestedKey, name: str) -> NestedKey:
    """``("agents", "reward")`` -> ``("agents", name)``; ``"reward"`` -> ``name``."""
    return name if type(key) is str else (*key[:-1], name)  # type: ignore[return-value]


def with_prefix(prefix: tuple[str, ...], name: NestedKey) -> NestedKey:
    return key_from_tuple((*prefix, *key_tuple(name)))


# ----------------------------------------------------------------------------- fast access
def get(td: TensorDictBase, key: NestedKey) -> Any:
    """``td.get(key, None)``, reading the dict of a plain TensorDict directly for string keys."""
    if type(key) is str and type(td) is TensorDict:
        return entries(td).get(key)
    return td.get(key, None)


def set_(td: TensorDictBase, key: NestedKey, value: torch.Tensor) -> None:
    """``td.set(key, value)`` (a new entry, not an in-place write), skipping repeated checks."""
    if type(key) is str and type(td) is TensorDict and isinstance(value, torch.Tensor):
        batch = td.batch_size
        device = td.device
        if (not batch or value.shape[: len(batch)] == batch) and (
            device is None or value.device == device
        ):
            set_unchecked(td, key, value, inplace=False, validated=True)
            return
    td.set(key, value)


def shallow_copy(td: TensorDictBase) -> TensorDictBase:
    """A copy sharing every tensor; nested TensorDicts are new containers (writable safely)."""
    if type(td) is not TensorDict:
        return td.copy()
    items = dict(entries(td))
    for k, v in items.items():
        if type(v) is TensorDict:
            items[k] = shallow_copy(v)
    return new_unchecked(items, batch_size=td.batch_size, device=td.device, nested=False)


def missing_key_error(owner: object, key: NestedKey, td: TensorDictBase | None) -> KeyError:
    """The error a transform raises when an input key is absent: it names both."""
    name = owner if isinstance(owner, str) else type(owner).__name__
    if td is not None:
        keys = sorted(map(str, td.keys(include_nested=True, leaves_only=True)))
        found = f" (its keys: {keys})"
    else:
        found = ""
    return KeyError(f"{name}: the input key {key!r} is missing from the TensorDict{found}")


def expand_right(mask: torch.Tensor, ndim: int) -> torch.Tensor:
    """Appends singleton dims to ``mask`` up to ``ndim`` dims (for ``torch.where``)."""
    if mask.ndim < ndim:
        return mask.reshape(*mask.shape, *([1] * (ndim - mask.ndim)))
    return mask


# ------------------------------------------------------------------------------------ specs
def find_spec(output_spec: Composite, key: NestedKey) -> tuple[str, TensorSpec] | None:
    """The ``(sub-spec name, leaf)`` of ``key`` among observation, reward and done specs."""
    for name in OUTPUT_SPECS:
        sub = output_spec.get(name, None)
        if sub is not None and key in sub:
            return name, sub[key]
    return None


def spec_apply(
    spec: TensorSpec, fn: Callable[[torch.Tensor], torch.Tensor], owner: str
) -> TensorSpec:
    """A leaf spec whose shape (and bounds) went through ``fn``, a shape-only tensor op.

    ``fn`` maps a tensor of the spec's shape to the new layout (``permute``, ``flatten``,
    ``cat``...). Bounds of a ``Bounded`` spec go through ``fn`` too.

    Raises:
        NotImplementedError: for spec kinds whose values depend on their layout (one-hot...).
    """
    new_shape = fn(torch.empty(spec.shape, device="meta")).shape
    if isinstance(spec, Bounded):
        return Bounded(
            fn(spec.low), fn(spec.high), shape=new_shape, device=spec.device, dtype=spec.dtype
        )
    if isinstance(spec, Unbounded):
        return type(spec)(shape=new_shape, device=spec.device, dtype=spec.dtype)
    if type(spec) is Categorical and spec.mask is None:
        return Categorical(spec.n, shape=new_shape, device=spec.device, dtype=spec.dtype)
    if type(spec) is Binary and new_shape and new_shape[-1] == spec.shape[-1]:
        return Binary(spec.shape[-1], shape=new_shape, device=spec.device, dtype=spec.dtype)
    raise NotImplementedError(
        f"{owner}: cannot reshape a spec of type {type(spec).__name__} ({spec!r})"
    )


def cast_spec(spec: TensorSpec, dtype: torch.dtype) -> TensorSpec:
    """A leaf spec with another dtype (bounds cast along)."""
    if spec.dtype == dtype:
        return spec
    if isinstance(spec, Bounded):
        return Bounded(spec.low, spec.high, shape=spec.shape, device=spec.device, dtype=dtype)
    if isinstance(spec, Unbounded) and type(spec) is not Unbounded:
        # UnboundedDiscrete and friends: the float counterpart is a plain Unbounded.
        return Unbounded(shape=spec.shape, device=spec.device, dtype=dtype)
    return spec.to(dtype)


def float_dtype(spec: TensorSpec) -> torch.dtype:
    """The spec's dtype when it is a float dtype, else ``torch.float32``."""
    dtype = spec.dtype
    return dtype if dtype is not None and dtype.is_floating_point else torch.float32


def done_groups(done_spec: Composite) -> list[tuple[tuple[str, ...], torch.Size]]:
    """The groups of done flags: ``[(prefix, done_leaf_shape), ...]``, the root first."""
    from torchrl._keys import DONE_KEYS

    groups: dict[tuple[str, ...], torch.Size] = {}
    for key in done_spec.keys(include_nested=True, leaves_only=True):
        path = key_tuple(key)
        if path[-1] in DONE_KEYS and path[:-1] not in groups:
            groups[path[:-1]] = done_spec[key].shape
    if not groups:
        groups[()] = torch.Size((*done_spec.shape, 1))
    return sorted(groups.items(), key=lambda item: len(item[0]))


def node_ndim(td: TensorDictBase, prefix: tuple[str, ...]) -> int:
    """The batch dims of the TensorDict under ``prefix`` (the root when empty or missing)."""
    if prefix:
        node = td.get(prefix, None)
        if node is not None:
            return node.batch_dims
    return td.batch_dims


def where_reset(
    mask: torch.Tensor | None, fill: torch.Tensor, previous: torch.Tensor | None, group_ndim: int
) -> torch.Tensor:
    """``fill`` where ``mask`` (a ``"_reset"`` entry) is set, ``previous`` elsewhere.

    ``mask`` is reduced to the group's ``group_ndim`` batch dims and broadcast over the rest.
    Without a mask or a previous value, everything is reset.
    """
    if mask is None or previous is None or previous.shape != fill.shape:
        return fill
    if mask.ndim > group_ndim:
        mask = mask.reshape(*mask.shape[:group_ndim], -1).any(-1)
    return torch.where(expand_right(mask, fill.ndim), fill, previous)


def map_output_specs(
    owner: Transform,
    output_spec: Composite,
    fn: Callable[[TensorSpec, NestedKey], TensorSpec],
    pairs: Sequence[tuple[NestedKey, NestedKey]] | None = None,
    strict: bool = True,
) -> None:
    """Writes ``fn(leaf of in_key)`` at ``out_key``, in the sub-spec holding ``in_key``.

    Raises:
        KeyError: (``strict``) when an input key is in none of the output specs.
    """
    for in_key, out_key in owner._pairs if pairs is None else pairs:
        found = find_spec(output_spec, in_key)
        if found is None:
            if strict:
                raise missing_spec_error(owner, in_key, output_spec, OUTPUT_SPECS)
            continue
        name, leaf = found
        output_spec[name][out_key] = fn(leaf, in_key)


def map_input_specs(
    owner: Transform,
    input_spec: Composite,
    fn: Callable[[TensorSpec, NestedKey], TensorSpec],
    strict: bool = True,
    keep_base_key: bool = False,
) -> None:
    """Rewrites input specs for an inverse pass: ``out_keys_inv`` get ``fn(leaf of in_keys_inv)``.

    The base key's spec is dropped when the outer key differs (the transform writes it), unless
    ``keep_base_key``.
    """
    names = ("full_state_spec", "full_action_spec")
    for in_key, out_key in owner._inv_pairs:
        for name in names:
            sub = input_spec.get(name, None)
            if sub is not None and in_key in sub:
                leaf = sub[in_key]
                if out_key != in_key and not keep_base_key:
                    del sub[in_key]
                sub[out_key] = fn(leaf, in_key)
                break
        else:
            if strict:
                raise missing_spec_error(owner, in_key, input_spec, names)


def missing_spec_error(
    owner: object, key: NestedKey, spec: Composite, names: Sequence[str]
) -> KeyError:
    found = {
        name: [str(k) for k in spec[name].keys(include_nested=True, leaves_only=True)]
        for name in names
        if name in spec.keys()
    }
    return KeyError(
        f"{type(owner).__name__}: the key {key!r} is in none of the env's specs ({found})"
    )


def feature_spec(spec: TensorSpec, batch_ndim: int) -> TensorSpec:
    """The spec of one element of the env's batch (its first ``batch_ndim`` dims indexed away)."""
    for _ in range(batch_ndim):
        spec = spec[0]
    return spec
