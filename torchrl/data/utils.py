"""Spec helpers for lazily stacked (heterogeneous) specs.

A :class:`~torchrl.data.StackedComposite` stacks Composites that may not share every key (an
*exclusive* key lives in some of them only). These helpers tell whether a spec holds lazy stacks
or exclusive keys, and fill the gaps with empty (zero-sized) entries so that every stacked
Composite has the same keys.
"""

from __future__ import annotations

from typing import cast

import torch

from torchrl._types import NestedKey
from torchrl.data.specs import (
    Composite,
    NonTensor,
    Stacked,
    StackedComposite,
    TensorSpec,
    Unbounded,
    stack_specs,
)

__all__ = ["check_no_exclusive_keys", "consolidate_spec", "contains_lazy_spec"]


def contains_lazy_spec(spec: TensorSpec) -> bool:
    """Returns whether ``spec`` is, or holds at any depth, a lazily stacked spec.

    Args:
        spec: the spec to inspect.

    Returns:
        ``True`` when a :class:`~torchrl.data.Stacked` (or ``StackedComposite``) is found.

    Examples:
        >>> import torch
        >>> from torchrl.data import Composite, Unbounded, contains_lazy_spec
        >>> stacked = torch.stack([Unbounded(3), Unbounded(4)], 0)
        >>> contains_lazy_spec(Composite(a=Unbounded(3))), contains_lazy_spec(Composite(b=stacked))
        (False, True)
    """
    if not isinstance(spec, TensorSpec):
        raise TypeError(f"contains_lazy_spec expects a TensorSpec, got {type(spec).__name__}")
    if isinstance(spec, Stacked):
        return True
    if isinstance(spec, Composite):
        return any(contains_lazy_spec(value) for value in spec.values())
    return False


def _nested_key_set(spec: Composite) -> set[tuple[str, ...]]:
    keys = spec.keys(include_nested=True)
    return {(key,) if isinstance(key, str) else tuple(key) for key in keys}


def check_no_exclusive_keys(spec: TensorSpec, recurse: bool = True) -> bool:
    """Returns ``True`` when no lazily stacked Composite in ``spec`` has exclusive keys.

    A key is exclusive when some of the Composites of a ``StackedComposite`` have it and others
    do not.

    Args:
        spec: the spec to check.
        recurse: also look inside nested entries (and compare nested keys); ``False`` checks the
            top-level keys of ``spec`` only.

    Returns:
        Whether every stacked Composite found has the same keys.

    Examples:
        >>> import torch
        >>> from torchrl.data import Composite, Unbounded, check_no_exclusive_keys
        >>> same = torch.stack([Composite(a=Unbounded(3)), Composite(a=Unbounded(4))], 0)
        >>> other = torch.stack([Composite(a=Unbounded(3)), Composite(b=Unbounded(3))], 0)
        >>> check_no_exclusive_keys(same), check_no_exclusive_keys(other)
        (True, False)
    """
    if not isinstance(spec, TensorSpec):
        raise TypeError(f"check_no_exclusive_keys expects a TensorSpec, got {type(spec).__name__}")
    if isinstance(spec, StackedComposite):
        subs = cast(list[Composite], spec.specs)
        if recurse:
            key_sets = [_nested_key_set(sub) for sub in subs]
        else:
            key_sets = [{(key,) for key in sub.keys()} for sub in subs]
        if any(keys != key_sets[0] for keys in key_sets[1:]):
            return False
        return not recurse or all(check_no_exclusive_keys(sub, True) for sub in subs)
    if isinstance(spec, Composite) and recurse:
        return all(
            check_no_exclusive_keys(value, True)
            for value in spec.values()
            if isinstance(value, (Composite, StackedComposite))
        )
    return True


def _empty_like(template: TensorSpec, template_batch: int, shape: torch.Size) -> TensorSpec:
    """A spec like ``template`` with batch ``shape`` and every other dim of size zero."""
    zeros = [0] * (template.ndim - template_batch)
    new_shape = torch.Size([*shape, *zeros])
    if isinstance(template, NonTensor):
        return NonTensor(shape=new_shape, device=template.device, dtype=template.dtype)
    dtype = template.dtype if isinstance(template.dtype, torch.dtype) else None
    return Unbounded(shape=new_shape, device=template.device, dtype=dtype)


def _fill_missing(target: Composite, source: Composite, key: tuple[str, ...]) -> None:
    """Adds to ``target`` an empty version of ``source[key]`` (and its missing parents)."""
    parent_t: TensorSpec = target
    parent_s: TensorSpec = source
    for part in key:
        entry_s = parent_s.get(part)  # type: ignore[attr-defined]
        if part in parent_t.keys():  # type: ignore[attr-defined]
            parent_t, parent_s = parent_t.get(part), entry_s  # type: ignore[attr-defined]
            continue
        extra = [0] * (entry_s.ndim - len(parent_s.shape))
        if isinstance(entry_s, (Composite, StackedComposite)):
            # an empty Composite with as many dims as the source's
            new: TensorSpec = Composite(
                shape=torch.Size([*parent_t.shape, *extra]), device=entry_s.device
            )
        else:
            new = _empty_like(entry_s, len(parent_s.shape), parent_t.shape)
        parent_t.set(part, new)  # type: ignore[attr-defined]
        parent_t, parent_s = new, entry_s


def consolidate_spec(
    spec: Composite | StackedComposite,
    recurse_through_entries: bool = True,
    recurse_through_stack: bool = True,
) -> Composite | StackedComposite:
    """Returns a copy of ``spec`` where stacked Composites have no exclusive keys.

    Each Composite of a lazy stack that lacks a key some other one has gets an empty entry of
    that key: same dtype and number of dims, its own batch dims, and size ``0`` in every other
    dim (empty parent Composites are added where needed). After this,
    :func:`check_no_exclusive_keys` holds.

    Args:
        spec: a ``Composite`` or ``StackedComposite``; it is not modified.
        recurse_through_entries: also consolidate lazy stacks found in the entries of
            Composites.
        recurse_through_stack: also consolidate the Composites inside a lazy stack and fill
            missing nested keys (``False``: only the top-level keys of the stack are filled).

    Returns:
        The consolidated spec.

    Examples:
        >>> import torch
        >>> from torchrl.data import Composite, Unbounded, consolidate_spec
        >>> spec = torch.stack([Composite(a=Unbounded(3)), Composite(b=Unbounded(2))], 0)
        >>> out = consolidate_spec(spec)
        >>> out[1]["a"].shape, out[0]["b"].shape
        (torch.Size([0]), torch.Size([0]))
    """
    if not isinstance(spec, (Composite, StackedComposite)):
        raise TypeError(
            f"consolidate_spec expects a Composite or StackedComposite, got {type(spec).__name__}"
        )
    if isinstance(spec, StackedComposite):
        subs = [cast(Composite, sub).clone() for sub in spec.specs]
        if recurse_through_stack:
            subs = [
                cast(
                    Composite, consolidate_spec(sub, recurse_through_entries, recurse_through_stack)
                )
                for sub in subs
            ]
            key_sets = [_nested_key_set(sub) for sub in subs]
        else:
            key_sets = [{(key,) for key in sub.keys()} for sub in subs]
        # Shorter keys first: a missing parent is added before its children.
        everything = sorted(set().union(*key_sets), key=lambda k: (len(k), k))
        for sub, keys in zip(subs, key_sets, strict=True):
            for key in everything:
                if key in keys or _has_key(sub, key):
                    continue
                owner = next(o for o, ks in zip(subs, key_sets, strict=True) if key in ks)
                _fill_missing(sub, owner, key)
        return cast(StackedComposite, stack_specs(subs, spec.dim))
    out = spec.clone()
    if recurse_through_entries:
        for name in list(out.keys()):
            value = out.get(name)
            if isinstance(value, (Composite, StackedComposite)):
                out.set(
                    name, consolidate_spec(value, recurse_through_entries, recurse_through_stack)
                )
    return out


def _has_key(spec: Composite, key: NestedKey) -> bool:
    node: TensorSpec = spec
    for part in (key,) if isinstance(key, str) else key:
        if not isinstance(node, (Composite, StackedComposite)) or part not in node.keys():
            return False
        node = node.get(part)
    return True
