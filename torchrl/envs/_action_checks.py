"""Actions checked against the action spec at the env boundary (``EnvBase.step``).

A checker is built once per spec (when the env's spec cache is built) as a closure specialised
for the spec's kind: no ``isinstance`` dispatch per step. A step's check is a key lookup, the
comparisons of type, dtype and shape, and one pass over the values: small CPU actions (the
usual single env or ``SerialEnv``) are read once as a Python list (``tolist`` costs a fraction
of a tensor kernel on a few entries), larger or non-CPU ones are checked with one or two fused
tensor ops. The detailed reason is only worked out when a check fails.

What is checked, per spec kind (shape and dtype always; the shape must be the env's batch size
followed by the spec's feature shape, or any leading batch dims for a batch-unlocked env):

- ``Bounded``: ``low <= a <= high`` everywhere (NaN fails);
- ``Unbounded`` float: no NaN;
- ``Categorical``: ``0 <= a < n`` (and the mask when one is set);
- ``OneHot``: entries are 0/1 with exactly one 1 along the last dim (and the mask);
- ``Binary``: entries are 0 or 1;
- other specs (``MultiOneHot``, ``MultiCategorical``, stacked specs): ``spec.is_in``;
- ``NonTensor``: nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._td_compat import entries
from torchrl._types import NestedKey
from torchrl.data.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    NonTensor,
    OneHot,
    TensorSpec,
    Unbounded,
)

#: Number of entries up to which a CPU action is checked as a Python list.
_SMALL = 64

# values_ok(value, small, ndim): ``small``: read the values as a Python list; ``ndim``: the
# value's number of dims (known from the shape check, so not asked again)
_ValuesOk = Callable[[torch.Tensor, bool, int], bool]
#: Checks the actions of a step input; raises when one does not fit.
ActionCheck = Callable[[TensorDictBase], None]


def _flat(value: torch.Tensor, ndim: int) -> Iterable[Any]:
    """The entries of a small tensor, in order (``ndim``: its number of dims, at least 1)."""
    if ndim == 1:
        return value.tolist()
    if ndim == 2:
        # nested rows chained: cheaper than a torch reshape before tolist (a (8, 1) batch of
        # a SerialEnv's actions: ~1.1 us instead of ~1.7 us with the loop)
        return chain.from_iterable(value.tolist())
    return value.reshape(-1).tolist()


def _uniform(bound: torch.Tensor) -> float | int | None:
    """The single value of ``bound`` when all its entries are equal, else ``None``."""
    if bound.numel() == 0:
        return None
    first = bound.reshape(-1)[0]
    if bool((bound == first).all()):
        return first.item()
    return None


def _bounded(spec: Bounded) -> _ValuesOk:
    low = spec.low.expand(spec.shape)
    high = spec.high.expand(spec.shape)
    lo, hi = _uniform(low), _uniform(high)
    lows: list[Any] = low.reshape(-1).tolist()
    highs: list[Any] = high.reshape(-1).tolist()
    bounds_on: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {low.device: (low, high)}

    def vectorized(value: torch.Tensor) -> bool:
        pair = bounds_on.get(value.device)
        if pair is None:
            pair = bounds_on[value.device] = (low.to(value.device), high.to(value.device))
        # comparisons promote mixed dtypes (an int32 action, int64 bounds); NaN fails both
        return bool(((value >= pair[0]) & (value <= pair[1])).all())

    if lo is not None and hi is not None:

        def ok_scalar(value: torch.Tensor, small: bool, ndim: int) -> bool:
            if not small:
                return vectorized(value)
            if ndim == 0:
                return bool(lo <= value.item() <= hi)
            for v in _flat(value, ndim):  # a loop: cheaper than all() on a few entries
                if not lo <= v <= hi:  # NaN fails both comparisons
                    return False
            return True

        return ok_scalar

    def ok_elementwise(value: torch.Tensor, small: bool, ndim: int) -> bool:
        # the per-entry bounds are listed for the spec's own shape only
        if not small or value.shape != low.shape:
            return vectorized(value)
        for v, a, b in zip(_flat(value, ndim), lows, highs):
            if not a <= v <= b:
                return False
        return True

    return ok_elementwise


def _not_nan(value: torch.Tensor, small: bool, ndim: int) -> bool:
    if not small:
        return not bool(value.isnan().any())
    if ndim == 0:
        v = value.item()
        return bool(v == v)
    for v in _flat(value, ndim):
        if v != v:  # NaN is the one value unequal to itself
            return False
    return True


def _masked(spec: Any, plain: _ValuesOk) -> _ValuesOk:
    def ok(value: torch.Tensor, small: bool, ndim: int) -> bool:
        if not plain(value, small, ndim):
            return False
        # a mask may be set (or changed) on the spec at any step: read it each time
        return spec.mask is None or _is_in(spec, value)

    return ok


def _categorical(spec: Categorical) -> _ValuesOk:
    hi = int(spec.n) - 1

    def ok(value: torch.Tensor, small: bool, ndim: int) -> bool:
        if small:
            if ndim == 0:
                return bool(0 <= value.item() <= hi)
            return all(0 <= v <= hi for v in _flat(value, ndim))
        if value.dtype is torch.bool:
            return hi >= 1 or not bool(value.any())
        return not bool(((value < 0) | (value > hi)).any())

    return _masked(spec, ok)


def _one_hot(spec: OneHot) -> _ValuesOk:
    n = int(spec.n)
    zeros = n - 1
    eye = [[i == j for j in range(n)] for i in range(n)] if n <= 32 else None

    def ok(value: torch.Tensor, small: bool, ndim: int) -> bool:
        # every row: exactly one 1 and n - 1 zeros (True == 1 and False == 0, so bool rows
        # need no dtype test)
        if small:
            if ndim == 1:
                row = value.tolist()
                if row.count(1) != 1 or row.count(0) != zeros:
                    return False
            else:
                rows = value.tolist() if ndim == 2 else value.reshape(-1, n).tolist()
                if eye is not None:
                    # every row is a row of the identity: n list counts, compared in C
                    # (True == 1, so int64 rows match the bool rows of ``eye`` too)
                    found = 0
                    for one_hot_row in eye:
                        found += rows.count(one_hot_row)
                    if found != len(rows):
                        return False
                else:
                    for row in rows:
                        if row.count(1) != 1 or row.count(0) != zeros:
                            return False
        elif value.dtype is torch.bool:
            if not bool((value.sum(-1) == 1).all()):
                return False
        elif not (bool(((value == 0) | (value == 1)).all()) and bool((value.sum(-1) == 1).all())):
            return False
        return spec.mask is None or _is_in(spec, value)

    return ok


def _binary(value: torch.Tensor, small: bool, ndim: int) -> bool:
    if value.dtype is torch.bool:
        return True
    if not small:
        return bool(((value == 0) | (value == 1)).all())
    if ndim == 0:
        v = value.item()
        return v == 0 or v == 1
    return all(v == 0 or v == 1 for v in _flat(value, ndim))


def _values_check(spec: TensorSpec) -> _ValuesOk | None:
    """The value check of ``spec`` (``None``: any value of the right shape and dtype fits)."""
    if isinstance(spec, Bounded):
        return _bounded(spec)
    if isinstance(spec, Unbounded):
        return _not_nan if spec.dtype is not None and spec.dtype.is_floating_point else None
    if isinstance(spec, Categorical):
        return _categorical(spec)
    if isinstance(spec, OneHot):
        return _one_hot(spec)
    if isinstance(spec, Binary):
        return _binary

    def ok_generic(value: torch.Tensor, small: bool, ndim: int) -> bool:
        return _is_in(spec, value)

    return ok_generic


def _as_spec_dtype(spec: TensorSpec, value: torch.Tensor) -> torch.Tensor | None:
    """``value`` in the spec's dtype, or ``None`` when the cast would change a value."""
    if value.dtype is spec.dtype:
        return value
    cast = value.to(spec.dtype)
    return cast if torch.equal(cast.to(value.dtype), value) else None


def _is_in(spec: TensorSpec, value: torch.Tensor) -> bool:
    cast = _as_spec_dtype(spec, value)
    return cast is not None and spec.is_in(cast)


def _accepted_dtypes(dtype: torch.dtype | None) -> frozenset[torch.dtype]:
    """The action dtypes a spec of ``dtype`` takes: the same kind (the env casts them).

    Floating specs take any floating dtype; integer and bool specs any integer or bool dtype
    (one-hot rows from ``F.one_hot`` are int64), their values checked as numbers. A float
    action for a discrete spec is refused whatever its values.
    """
    if dtype is None:
        return frozenset()
    floats = {torch.float16, torch.bfloat16, torch.float32, torch.float64}
    if dtype.is_floating_point:
        return frozenset(floats)
    if dtype.is_complex:
        return frozenset({dtype})
    ints = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}
    return frozenset(ints)


class _LeafCheck:
    """What a step checks of one action entry; built once per spec.

    ``ok(value, tensordict)`` says whether ``value`` (read from ``tensordict``) fits; the
    input's batch size is read only when the value's shape is not the spec's (a batch-unlocked
    env's input with extra leading dims).
    """

    __slots__ = (
        "dtype",
        "dtypes",
        "feature",
        "key",
        "ok",
        "raw_key",
        "shape",
        "spec",
        "spec_ndim",
        "spec_small",
        "values_ok",
    )

    def __init__(self, key: NestedKey, spec: TensorSpec, batch_ndim: int) -> None:
        self.key = key
        # plain TensorDicts are read through their entry dict for a str key
        self.raw_key = key if type(key) is str else None
        self.spec = spec
        self.shape = shape = spec.shape
        self.feature = feature = spec.shape[batch_ndim:]
        self.dtype = dtype = spec.dtype
        self.dtypes = dtypes = _accepted_dtypes(spec.dtype)
        self.spec_small = spec_small = shape.numel() <= _SMALL
        self.spec_ndim = spec_ndim = len(shape)
        self.values_ok = values_ok = _values_check(spec)
        tensor = torch.Tensor

        def ok(value: Any, tensordict: TensorDictBase) -> bool:
            if type(value) is not tensor and not isinstance(value, tensor):
                return False
            value_dtype = value.dtype
            if value_dtype is not dtype and value_dtype not in dtypes:
                return False
            value_shape = value.shape
            if value_shape == shape:
                return values_ok is None or values_ok(value, spec_small, spec_ndim)
            if value_shape != tensordict.batch_size + feature:
                return False
            # a batch-unlocked env's input with extra leading dims
            return values_ok is None or values_ok(value, value.numel() <= _SMALL, value.dim())

        self.ok = ok


def _describe(value: torch.Tensor) -> str:
    if value.numel() <= 16:
        return repr(value)
    return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"


def _reason(leaf: _LeafCheck, value: Any, batch: torch.Size) -> str:
    """Why ``value`` was rejected: worked out after the fact, on the failure path only."""
    spec = leaf.spec
    if not isinstance(value, torch.Tensor):
        return f"expected a tensor, got {type(value).__name__}: {value!r}"
    expected = tuple(batch + leaf.feature)
    if value.shape != leaf.shape and tuple(value.shape) != expected:
        hint = ""
        if isinstance(spec, OneHot) and tuple(value.shape) == expected[:-1]:
            hint = " (a OneHot spec takes one-hot vectors: spec.encode(index) makes them)"
        return f"wrong shape: expected {expected}, got {tuple(value.shape)}{hint}"
    if value.dtype is not leaf.dtype and value.dtype not in leaf.dtypes:
        floating = leaf.dtype is not None and leaf.dtype.is_floating_point
        kind = "a floating" if floating else "an integer or bool"
        return f"wrong dtype: expected {leaf.dtype} ({kind} dtype), got {value.dtype}"
    if value.dtype.is_floating_point and bool(value.isnan().any()):
        where = tuple(int(i) for i in value.isnan().nonzero()[0].tolist())
        return f"NaN at index {where}"
    cast = _as_spec_dtype(spec, value)
    if cast is None:
        return f"values that {spec.dtype} cannot hold"
    try:
        spec.assert_is_in(cast)
    except AssertionError as err:
        return str(err)
    return "the value is not in the spec"


def _raise(owner: str, leaf: _LeafCheck, value: Any, batch: torch.Size) -> None:
    reason = _reason(leaf, value, batch)
    shown = _describe(value) if isinstance(value, torch.Tensor) else repr(value)
    raise ValueError(
        f"{owner}.step: the action {leaf.key!r} does not fit the action spec {leaf.spec!r}: "
        f"{reason}. Action: {shown}. Nothing was stepped (validate_actions=False on the env "
        f"skips this check)"
    )


def _missing(owner: str, leaf: _LeafCheck, tensordict: TensorDictBase) -> None:
    present = sorted(map(str, tensordict.keys(include_nested=True, leaves_only=True)))
    raise KeyError(
        f"{owner}.step: the input has no action entry {leaf.key!r} (spec: {leaf.spec!r}); "
        f"entries present: {present}"
    )


def make_action_check(
    owner: str, action_spec: Composite, keys: Sequence[NestedKey], batch_ndim: int
) -> ActionCheck | None:
    """Builds the function that checks the actions of a step input against ``action_spec``.

    Args:
        owner: the env's class name, for the error messages.
        action_spec: the env's ``full_action_spec``.
        keys: its leaf keys.
        batch_ndim: the number of batch dims of the env.

    Returns:
        ``check(tensordict)``, raising a ``ValueError`` naming the key, the spec and the value
        when an action does not fit (``KeyError`` when it is missing); ``None`` when the env
        has no actions.
    """
    leaves = [
        _LeafCheck(key, action_spec[key], batch_ndim)
        for key in keys
        if not isinstance(action_spec[key], NonTensor)
    ]
    if not leaves:
        return None
    raw_key = leaves[0].raw_key
    if len(leaves) == 1 and raw_key is not None:
        leaf = leaves[0]
        key: str = raw_key
        leaf_ok = leaf.ok
        # the common case inlined (one call less per step): a tensor of the spec's own dtype
        # and shape; anything else goes through leaf.ok
        shape, dtype, values_ok = leaf.shape, leaf.dtype, leaf.values_ok
        small, ndim = leaf.spec_small, leaf.spec_ndim

        def check_one(tensordict: TensorDictBase) -> None:
            value = (
                entries(tensordict).get(key)
                if type(tensordict) is TensorDict
                else tensordict.get(key, None)
            )
            if (
                type(value) is torch.Tensor
                and value.dtype is dtype
                and value.shape == shape
                and (values_ok is None or values_ok(value, small, ndim))
            ):
                return
            if not leaf_ok(value, tensordict):
                if value is None:
                    _missing(owner, leaf, tensordict)
                _raise(owner, leaf, value, tensordict.batch_size)

        return check_one

    def check_all(tensordict: TensorDictBase) -> None:
        for leaf in leaves:
            value = tensordict.get(leaf.key, None)
            if not leaf.ok(value, tensordict):
                if value is None:
                    _missing(owner, leaf, tensordict)
                _raise(owner, leaf, value, tensordict.batch_size)

    return check_all
