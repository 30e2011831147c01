"""The one module that touches tensordict's private API.

Hot paths (an env step, a collector write, a buffer sample) build and fill many small
TensorDicts whose shapes and devices are already known to be right. tensordict's public
constructor and ``set`` check them again; its private ``TensorDict._new_unsafe``,
``TensorDict._set_str`` and the ``_tensordict`` dict skip those checks. Every other torchrl
module goes through the four names below, so a tensordict release that changes its internals
breaks one file, not fifteen.

At import the private names are probed on a tiny TensorDict, for a tensordict version from
``MIN_VERSION`` on. When the version is older, a name is missing, the probe disagrees with
the public API, or the environment variable ``TORCHRL_TENSORDICT_PUBLIC_API=1`` is set, the
same four names fall back on tensordict's public API: slower, with the same results (the test
suite checks both paths give equal TensorDicts).

- :func:`new_unchecked` ``(source, batch_size=None, device=None, nested=True)``: a TensorDict
  from a dict of values that already have ``batch_size`` in front.
- :func:`set_unchecked` ``(td, key, value, *, inplace, validated)``: ``td.set(key, value)`` for
  a string key; with ``validated=True`` the value's shape and device are trusted.
- :func:`entries` ``(td)``: the ``{key: value}`` dict of a plain TensorDict's top level, for
  reading only.
- :func:`plain_entries` ``(td)``: :func:`entries` for a plain ``TensorDict``, ``None`` for any
  other kind (lazy stacks, TensorDictParams, ...).
- :func:`plain_module_call` ``(module)``: whether calling a ``TensorDictModule`` is only reading
  its inputs, calling its network and writing its outputs (the collectors' and the losses'
  direct calls rely on it); it reads tensordict's private ``_kwargs``/``_get_kwargs`` and
  ``nn.Module``'s hook dicts.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Mapping
from typing import Any

import tensordict
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._types import DeviceLike, ShapeLike

__all__ = [
    "FAST",
    "MIN_VERSION",
    "entries",
    "new_unchecked",
    "plain_entries",
    "public_entries",
    "public_new_unchecked",
    "public_set_unchecked",
    "set_unchecked",
]

# The oldest tensordict whose private names were checked to behave as described above.
MIN_VERSION = (0, 10)


def public_new_unchecked(
    source: Mapping[str, Any] | None = None,
    batch_size: ShapeLike | None = None,
    device: DeviceLike = None,
    nested: bool = True,
) -> TensorDict:
    """:func:`new_unchecked` on tensordict's public constructor."""
    del nested  # the public constructor turns nested dicts into TensorDicts in every case
    return TensorDict(dict(source or {}), batch_size=batch_size, device=device)


def public_set_unchecked(
    td: TensorDict, key: str, value: Any, *, inplace: bool, validated: bool
) -> TensorDict:
    """:func:`set_unchecked` on ``TensorDict.set``."""
    del validated  # the public API always validates
    return td.set(key, value, inplace=inplace)


def public_entries(td: TensorDict) -> dict[str, Any]:
    """:func:`entries` on ``TensorDict.items``: a copy, so it costs one dict per call."""
    return dict(td.items())


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _private_api_works() -> bool:
    """Whether tensordict's private names exist and agree with its public API on a probe."""
    if _version(tensordict.__version__ or "0") < MIN_VERSION:
        return False
    try:
        x = torch.arange(6.0).reshape(2, 3)
        fast = TensorDict._new_unsafe({"a": x}, batch_size=torch.Size([2]), device=None)
        TensorDict._set_str(fast, "b", x + 1, inplace=False, validated=True)
        raw = fast._tensordict
        public = TensorDict({"a": x, "b": x + 1}, batch_size=[2])
        return (
            type(fast) is TensorDict
            and isinstance(raw, dict)
            and set(raw) == {"a", "b"}
            and raw["a"] is x
            and fast.batch_size == public.batch_size
            and bool((fast == public).all())
        )
    except Exception:  # any change in the private API means: use the public one
        return False


FAST: bool = os.environ.get("TORCHRL_TENSORDICT_PUBLIC_API", "0") in ("", "0") and (
    _private_api_works()
)

new_unchecked: Callable[..., TensorDict]
set_unchecked: Callable[..., Any]
entries: Callable[[TensorDict], Mapping[str, Any]]
if FAST:
    # The unbound private methods themselves: no wrapper call on the hot paths.
    new_unchecked = TensorDict._new_unsafe
    set_unchecked = TensorDict._set_str
    entries = operator.attrgetter("_tensordict")
else:
    new_unchecked = public_new_unchecked
    set_unchecked = public_set_unchecked
    entries = public_entries


def plain_entries(td: TensorDictBase) -> Mapping[str, Any] | None:
    """:func:`entries` of a plain ``TensorDict``; ``None`` for other TensorDict kinds."""
    return entries(td) if type(td) is TensorDict else None


_TENSORDICT_MODULE: list[Any] = []


def _tensordict_module() -> Any:
    """``tensordict.nn.TensorDictModule``, imported on first use (``import torchrl`` does not
    load ``tensordict.nn``) and kept: an import statement costs ~0.5 us a call."""
    if not _TENSORDICT_MODULE:
        from tensordict.nn import TensorDictModule

        _TENSORDICT_MODULE.append(TensorDictModule)
    return _TENSORDICT_MODULE[0]


def plain_module_call(module: Any) -> bool:
    """Whether ``module(td)`` only reads ``module.in_keys`` from ``td``, calls ``module.module``
    with them positionally and writes its outputs at ``module.out_keys`` in place.

    True for a ``TensorDictModule`` (or subclass: the caller checks the class) without keyword
    inputs, ``method``, renamed outputs, non-inplace output or hooks on the wrapper. A
    tensordict version without the private attributes read here gives ``False``: the caller
    then takes the module's own call.
    """
    if not isinstance(module, _tensordict_module()):
        return False
    return (
        getattr(module, "_kwargs", False) is None
        and not getattr(module, "_get_kwargs", True)
        and module.method is None
        and not module.method_kwargs
        and module.inplace is True
        # (two lists, or anything else: then unequal, and the module's own call is taken)
        and module.out_keys_source == module.out_keys
        and not (
            module._forward_hooks
            or module._forward_pre_hooks
            or module._backward_hooks
            or module._backward_pre_hooks
        )
    )
