"""Spec helpers shared by actors and exploration modules (specs are imported lazily)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, interaction_type

from torchrl._types import NestedKey


def as_composite(spec: Any, keys: Sequence[NestedKey]) -> Any:
    """Returns ``spec`` as a ``Composite`` keyed by ``keys`` (``None`` stays ``None``).

    A leaf spec describes the first key; a ``Composite`` is returned unchanged.
    """
    if spec is None:
        return None
    from torchrl.data import Composite

    if isinstance(spec, Composite):
        return spec
    if not keys:
        raise ValueError("a leaf spec needs at least one out_key to describe")
    return Composite({cast(Any, keys[0]): spec})


def key_list(keys: NestedKey | Iterable[NestedKey] | None) -> list[NestedKey]:
    """``keys`` as a list: one key (a string or a tuple) becomes ``[key]``, ``None`` ``[]``."""
    if keys is None:
        return []
    if isinstance(keys, (str, tuple)):
        return [keys]
    return list(keys)


def module_keys(keys: Iterable[NestedKey]) -> list[Any]:
    """``keys`` as a list for ``TensorDictModuleBase.in_keys`` / ``out_keys``.

    tensordict types those setters narrower (``list[str | tuple[str]]``) than its own
    ``NestedKey``; this is the one place that says nested keys are fine there.
    """
    return list(keys)


def leaf_spec(spec: Any, key: NestedKey) -> Any:
    """The spec of ``key`` inside a ``Composite``, or ``spec`` itself when it is a leaf."""
    if spec is None:
        return None
    if getattr(spec, "_is_composite", False):
        if key not in spec:
            raise KeyError(f"the spec has no entry {key!r}; it has {list(spec.keys(True, True))}")
        return spec[key]
    return spec


def project_keys(tensordict: TensorDictBase, spec: Any, keys: Sequence[NestedKey]) -> None:
    """Projects, in place, the entries ``keys`` of ``tensordict`` that ``spec`` describes."""
    for key in keys:
        if key not in spec:
            continue
        value = tensordict.get(key, None)
        if value is None:
            continue
        tensordict.set(key, spec[key].project(value))


def exploring() -> bool:
    """Whether exploration noise applies now.

    Exploration modules add noise when the exploration (interaction) type is ``RANDOM`` or when
    none is set: training code that calls a policy outside any ``set_exploration_type`` block
    explores, as collectors do (they set ``RANDOM`` explicitly). ``DETERMINISTIC``, ``MODE``,
    ``MEAN`` and ``MEDIAN`` (evaluation) switch it off.
    """
    current = interaction_type()
    return current is None or current is InteractionType.RANDOM


def spec_kind(spec: object) -> str:
    """``"one_hot"``, ``"categorical"``, ``"mult_one_hot"``, ``"multi_categorical"`` or the class name."""
    from torchrl.data import Categorical, MultiCategorical, MultiOneHot, OneHot

    for cls, name in (
        (OneHot, "one_hot"),
        (MultiOneHot, "mult_one_hot"),
        (MultiCategorical, "multi_categorical"),
        (Categorical, "categorical"),
    ):
        if isinstance(spec, cls):
            return name
    return type(spec).__name__


def masked_uniform_index(mask: torch.Tensor) -> torch.Tensor:
    """A uniformly random allowed index along the last dim of a boolean ``mask``."""
    scores = torch.rand(mask.shape, device=mask.device).masked_fill_(~mask, -1.0)
    return scores.argmax(-1)
