"""Fuzzing the specs with hypothesis: random specs of every kind (random dtypes, small ints
included, extreme and infinite bounds, shapes with zeros), built through their constructors.

Invalid constructions must raise ``ValueError``/``TypeError`` with a message (checked against an
independent oracle, so no bad spec is built silently); valid ones must keep ``rand``/``zero``/
``is_in``/``project``/``encode``/conversions/``clone``/``expand``/indexing consistent, for
arbitrary values (NaN, inf, huge, wrong dtype, broadcastable or not). A stateful test chains
shape operations, stacking and Composite wrapping. The default suite runs 200 examples per
property; the ``slow`` variants run 5,000.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from tensordict import NonTensorData, TensorDict

from torchrl.data import (
    Binary,
    BoundedTensorSpec,
    Categorical,
    Composite,
    CompositeSpec,
    DiscreteTensorSpec,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    Stacked,
    Unbounded,
)
from torchrl.data import Bounded as BoundedCurrent

DEFAULT_EXAMPLES = 200
SLOW_EXAMPLES = 5000
EXAMPLES = [
    pytest.param(DEFAULT_EXAMPLES, id="default"),
    pytest.param(SLOW_EXAMPLES, id="many", marks=pytest.mark.slow),
]


def run(body: Any, examples: int, **strategies: Any) -> None:
    """Runs ``body`` as a hypothesis test with ``examples`` examples."""
    test = given(**strategies)(body)
    settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )(test)()


INT_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
DISCRETE_DTYPES = [torch.bool, *INT_DTYPES]
INF = math.inf
EXTREMES = [
    0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 2**15, 2**31 - 1, 2**31, -(2**31),
    2**62, 2**63 - 1, -(2**63), 0.5, -0.5, 1e-3, 65504.0, 65520.0, -65520.0, 1e6, 3.4e38,
    -3.5e38, 1e300, -1e300, 2.0**63, INF, -INF,
]  # fmt: skip
NAN = math.nan


def int_range(dtype: torch.dtype) -> tuple[int, int]:
    if dtype is torch.bool:
        return 0, 1
    info = torch.iinfo(dtype)
    return int(info.min), int(info.max)


def is_int(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and dtype is not torch.bool


# --------------------------------------------------------------------------- shapes, values
dims = st.integers(0, 3)
batch_shapes = st.lists(dims, min_size=0, max_size=2).map(tuple)
leads = st.lists(st.integers(0, 2), min_size=0, max_size=2).map(tuple)
bound_values = st.one_of(
    st.sampled_from(EXTREMES + [NAN]),
    st.integers(-300, 300),
    st.floats(allow_nan=False, width=64),
)


def numel(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape)) if shape else 1


@st.composite
def values_of(draw: Any, shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor of ``shape`` with a random dtype and adversarial values (NaN, inf, huge)."""
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.float16, *DISCRETE_DTYPES]))
    n = numel(shape)
    if dtype.is_floating_point:
        raw = draw(
            st.lists(
                st.one_of(st.sampled_from(EXTREMES + [NAN]), st.floats(-3, 3)),
                min_size=n,
                max_size=n,
            )
        )
        with np.errstate(over="ignore"):
            return torch.tensor(np.array(raw, dtype=np.float64).reshape(shape)).to(dtype)
    lo, hi = int_range(dtype)
    pool = st.one_of(
        st.integers(lo, hi),
        st.sampled_from([lo, hi, 0, 1]),
        st.integers(-3, 3).filter(lambda v: lo <= v <= hi),
    )
    raw = draw(st.lists(pool, min_size=n, max_size=n))
    return (
        torch.tensor(raw, dtype=torch.int64 if dtype is not torch.bool else torch.bool)
        .reshape(shape)
        .to(dtype)
    )


@st.composite
def broadcastable_shapes(draw: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` with some dims set to 1 and some leading dims dropped (still broadcastable)."""
    out = tuple(1 if draw(st.booleans()) and draw(st.booleans()) else s for s in shape)
    drop = draw(st.integers(0, len(out))) if draw(st.booleans()) else 0
    return out[drop:]


# --------------------------------------------------------------------------- spec recipes
@dataclass
class Recipe:
    """How to build a spec, and whether an independent oracle says it is valid."""

    kind: str
    make: Any
    valid: bool
    why: str = ""
    info: dict = field(default_factory=dict)

    def build(self) -> Any:
        return self.make()


def bounded_oracle(low: list, high: list, dtype: torch.dtype) -> tuple[bool, str, Any]:
    """Validity of element-wise bounds (python numbers) for ``dtype``; the expected bounds."""
    if dtype is torch.bool:
        return False, "bool", None
    if any(isinstance(v, float) and math.isnan(v) for v in low + high):
        return False, "NaN", None
    if any(lo > hi for lo, hi in zip(low, high)):
        return False, "low > high", None
    if is_int(dtype):
        imin, imax = int_range(dtype)
        exp_low, exp_high = [], []
        for lo, hi in zip(low, high):
            if lo == INF or hi == -INF:
                return False, "empty", None
            lo_i = imin if lo == -INF else math.ceil(lo)
            hi_i = imax if hi == INF else math.floor(hi)
            if (lo != -INF and not imin <= lo_i <= imax) or (
                hi != INF and not imin <= hi_i <= imax
            ):
                return False, "does not fit", None
            if lo_i > hi_i:
                return False, "no value", None
            exp_low.append(lo_i)
            exp_high.append(hi_i)
        return True, "", (exp_low, exp_high)
    limit = torch.finfo(dtype).max
    overflows = [
        math.isfinite(v) and torch.tensor(float(v), dtype=torch.float64).to(dtype).isinf()
        for v in low + high
    ]
    for v, over, is_low in zip(low + high, overflows, [True] * len(low) + [False] * len(high)):
        if over and ((is_low and v > 0) or (not is_low and v < 0)):
            return False, "no finite value", None
    return True, "", limit


@st.composite
def bounded_recipes(draw: Any) -> Recipe:
    shape = draw(batch_shapes)
    dtype = draw(st.sampled_from(FLOAT_DTYPES + INT_DTYPES + [torch.bool]))
    per_entry = draw(st.booleans()) and numel(shape) <= 6
    n = numel(shape) if per_entry else 1
    values = bound_values
    if is_int(dtype) and draw(st.booleans()):  # edges of the dtype's own range
        imin, imax = int_range(dtype)
        edges = [imin, imin + 1, imax - 1, imax, -INF, INF, float(imin), 0.5]
        values = st.one_of(st.sampled_from(edges), st.integers(imin, imax))
    low = draw(st.lists(values, min_size=n, max_size=n))
    high = draw(st.lists(values, min_size=n, max_size=n))
    if draw(st.booleans()):  # mostly well-ordered bounds, else the constructor must complain
        pairs = [(a, b) if not (a > b) else (b, a) for a, b in zip(low, high)]
        low, high = [p[0] for p in pairs], [p[1] for p in pairs]
    if per_entry:
        # Tensors of python numbers: int64 when all are ints that fit, else float64.
        def as_tensor(vals: list) -> torch.Tensor:
            if all(isinstance(v, int) and -(2**63) <= v < 2**63 for v in vals):
                return torch.tensor(vals, dtype=torch.int64).reshape(shape)
            return torch.tensor([float(v) for v in vals], dtype=torch.float64).reshape(shape)

        low_arg, high_arg = as_tensor(low), as_tensor(high)
        low = low_arg.reshape(-1).tolist()
        high = high_arg.reshape(-1).tolist()
        kwargs: dict = {}
    else:
        low_arg, high_arg = low[0], high[0]
        kwargs = {"shape": shape}
    valid, why, expected = bounded_oracle(low, high, dtype)
    cls = draw(st.sampled_from([BoundedCurrent, BoundedTensorSpec]))
    return Recipe(
        "bounded",
        lambda: cls(low_arg, high_arg, dtype=dtype, **kwargs),
        valid,
        why,
        {"expected": expected, "low": low, "high": high, "shape": shape, "dtype": dtype},
    )


N_VALUES = st.one_of(
    st.integers(1, 6),
    st.sampled_from([127, 128, 129, 255, 256, 257, 300, 2**15, 2**31, 2**63 - 1, 2**63, 0, -1]),
)


def categorical_oracle(n: int, dtype: torch.dtype) -> tuple[bool, str]:
    if n <= 0 or n > 2**63 - 1:
        return False, "n"
    if dtype.is_floating_point:
        return False, "dtype"
    if n - 1 > int_range(dtype)[1]:
        return False, "does not fit"
    return True, ""


def some_mask(draw: Any, n: int) -> torch.Tensor | None:
    if n > 8 or not draw(st.booleans()):
        return None
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    mask[draw(st.integers(0, n - 1))] = True
    return mask


@st.composite
def categorical_recipes(draw: Any) -> Recipe:
    n = draw(N_VALUES)
    shape = draw(batch_shapes)
    dtype = draw(st.sampled_from(DISCRETE_DTYPES + [torch.float32]))
    valid, why = categorical_oracle(n, dtype)
    mask = some_mask(draw, n) if valid else None
    cls = draw(st.sampled_from([Categorical, DiscreteTensorSpec]))
    return Recipe("categorical", lambda: cls(n, shape=shape, dtype=dtype, mask=mask), valid, why)


@st.composite
def one_hot_recipes(draw: Any) -> Recipe:
    n = draw(st.integers(1, 6))
    shape = draw(batch_shapes) + (n,)
    dtype = draw(st.sampled_from(DISCRETE_DTYPES + [torch.float32]))
    valid = not dtype.is_floating_point  # values are 0/1: every integer dtype holds them
    mask = some_mask(draw, n) if valid else None
    return Recipe("one_hot", lambda: OneHot(n, shape=shape, dtype=dtype, mask=mask), valid)


@st.composite
def multi_recipes(draw: Any) -> Recipe:
    one_hot = draw(st.booleans())
    small = st.integers(1, 4)
    entry = small if one_hot else st.one_of(small, st.sampled_from([128, 129, 256, 2**31, 2**62]))
    nvec = draw(st.lists(entry, min_size=1, max_size=3))
    shape = draw(batch_shapes)
    dtype = draw(st.sampled_from(DISCRETE_DTYPES + [torch.float64]))
    if one_hot:
        valid = not dtype.is_floating_point
    else:
        valid = categorical_oracle(max(nvec), dtype)[0]
    mask = None
    if valid and sum(nvec) <= 12 and draw(st.booleans()):
        mask = torch.tensor(draw(st.lists(st.booleans(), min_size=sum(nvec), max_size=sum(nvec))))
        start = 0
        for n in nvec:
            mask[start + draw(st.integers(0, n - 1))] = True
            start += n
    if one_hot:
        return Recipe(
            "multi_one_hot",
            lambda: MultiOneHot(nvec, shape=shape + (sum(nvec),), dtype=dtype, mask=mask),
            valid,
        )
    return Recipe(
        "multi_categorical",
        lambda: MultiCategorical(nvec, shape=shape + (len(nvec),), dtype=dtype, mask=mask),
        valid,
    )


@st.composite
def simple_recipes(draw: Any) -> Recipe:
    kind = draw(st.sampled_from(["unbounded", "binary", "non_tensor"]))
    shape = draw(batch_shapes)
    if kind == "unbounded":
        dtype = draw(st.sampled_from(FLOAT_DTYPES + DISCRETE_DTYPES + [torch.complex64]))
        return Recipe(
            kind, lambda: Unbounded(shape=shape, dtype=dtype), not dtype.is_complex, "complex"
        )
    if kind == "binary":
        n = draw(st.integers(1, 4))
        dtype = draw(st.sampled_from(DISCRETE_DTYPES + [torch.float32]))
        return Recipe(
            kind, lambda: Binary(n, shape=shape + (n,), dtype=dtype), not dtype.is_floating_point
        )
    return Recipe(kind, lambda: NonTensor(shape=shape, example_data={"x": 1}), True)


leaf_recipes = st.one_of(
    bounded_recipes(), categorical_recipes(), one_hot_recipes(), multi_recipes(), simple_recipes()
)


@st.composite
def valid_leaves(draw: Any) -> Any:
    recipe = draw(leaf_recipes.filter(lambda r: r.valid))
    return recipe.build()


# --------------------------------------------------------------------------- checks
FEATURE_DIM = (OneHot, MultiOneHot, MultiCategorical, Binary)


def batch_ndim(spec: Any) -> int:
    return spec.ndim - (1 if isinstance(spec, FEATURE_DIM) else 0)


def zero_in_domain(spec: Any) -> bool:
    if isinstance(spec, (OneHot, MultiOneHot)):
        return False  # all zeros is a placeholder, never one-hot (as TorchRL documents)
    if isinstance(spec, BoundedCurrent):
        return bool((spec.low <= 0).all() and (spec.high >= 0).all())
    if isinstance(spec, Categorical) and spec.mask is not None:
        return bool(spec.mask[..., 0].all())
    if isinstance(spec, MultiCategorical) and spec.mask is not None:
        starts = np.cumsum([0] + spec._nvec_list[:-1])
        return bool(spec.mask[..., starts].all())
    return True


def check_value(spec: Any, value: Any, lead: tuple[int, ...]) -> None:
    if isinstance(spec, NonTensor):
        assert value.batch_size == lead + tuple(spec.shape)
    else:
        assert value.shape == lead + tuple(spec.shape)
        assert value.dtype == spec.dtype


def check_project(spec: Any, value: torch.Tensor, lead: tuple[int, ...]) -> None:
    before = value.clone()
    out = spec.project(value)
    torch.testing.assert_close(value, before, rtol=0, atol=0, equal_nan=True)  # not mutated
    assert spec.is_in(out), (spec, value, out)
    expected = torch.broadcast_shapes(value.shape, spec.shape)
    assert out.shape == expected and out.shape[len(lead) :] == spec.shape


def check_leaf(spec: Any, lead: tuple[int, ...], data: Any) -> None:
    """Every property of a valid leaf spec."""
    sample = spec.rand(lead)
    check_value(spec, sample, lead)
    assert spec.is_in(sample), (spec, sample)
    zero = spec.zero(lead)
    check_value(spec, zero, lead)
    if isinstance(spec, NonTensor):
        assert spec.is_in(zero) and spec.project(sample) is sample
        if spec.ndim:
            with pytest.raises(ValueError, match="batch size"):
                spec.project(NonTensor(shape=(*spec.shape, 5)).rand())
        return
    assert spec.is_in(zero) == zero_in_domain(spec) or not zero.numel()
    # project: arbitrary values of broadcastable shapes (NaN, inf, huge, any dtype).
    shape = data.draw(broadcastable_shapes(tuple(spec.shape)))
    value = data.draw(values_of(lead + shape if len(shape) == spec.ndim else shape))
    check_project(spec, value, lead if len(shape) == spec.ndim else ())
    check_project(spec, sample, lead)
    # project: a trailing size that cannot broadcast is a clear error.
    if spec.ndim:
        bad = list(spec.shape)
        bad[-1] = bad[-1] + 1 if bad[-1] != 0 else 2
        with pytest.raises(ValueError, match=re.escape(str(tuple(spec.shape)))):
            spec.project(torch.zeros(bad))
    # encode round trip (bfloat16 goes through float32: numpy has no bfloat16)
    as_numpy = spec.to_numpy(sample)
    encoded = spec.encode(as_numpy)
    assert torch.equal(encoded, sample) and encoded.dtype == spec.dtype
    # one-hot <-> categorical
    if isinstance(spec, Categorical) and spec.n <= 64:
        one_hot_spec = spec.to_one_hot_spec()
        one_hot = spec.to_one_hot(sample)
        assert one_hot_spec.is_in(one_hot)
        assert torch.equal(one_hot_spec.to_categorical(one_hot), sample.long())
    if isinstance(spec, OneHot):
        cat_spec = spec.to_categorical_spec()
        idx = spec.to_categorical(sample)
        assert cat_spec.is_in(idx) and torch.equal(cat_spec.to_one_hot(idx), sample.bool())
    if isinstance(spec, MultiCategorical) and max(spec.space.nvec) <= 64:
        one_hot_spec = spec.to_one_hot_spec()
        one_hot = spec.to_one_hot(sample)
        assert one_hot_spec.is_in(one_hot)
        assert torch.equal(one_hot_spec.to_categorical(one_hot), sample.long())
    if isinstance(spec, MultiOneHot):
        cat_spec = spec.to_categorical_spec()
        idx = spec.to_categorical(sample)
        assert cat_spec.is_in(idx) and torch.equal(cat_spec.to_one_hot(idx), sample.bool())
    check_shape_ops(spec)


def check_shape_ops(spec: Any) -> None:
    """clone/equality, expand and indexing stay consistent."""
    clone = spec.clone()
    assert clone == spec and spec == spec and clone is not spec
    expanded = spec.expand(2, *spec.shape)
    assert expanded.shape == (2, *spec.shape) and expanded[0] == spec and expanded[1] == spec
    value = expanded.rand()
    assert expanded.is_in(value) and spec.is_in(value[1])
    if batch_ndim(spec) and spec.shape[0] > 0:
        sub = spec[0]
        assert sub.shape == spec.shape[1:]
        assert sub.is_in(spec.rand()[0])
        assert spec[:1].shape == (1, *spec.shape[1:])


# --------------------------------------------------------------------------- properties
def construction_property(recipe: Recipe) -> None:
    try:
        spec = recipe.build()
    except (ValueError, TypeError) as err:
        assert str(err), "an error without a message"
        assert not recipe.valid, f"a valid {recipe.kind} spec was rejected: {err}"
        return
    assert recipe.valid, f"an invalid {recipe.kind} spec was built ({recipe.why}): {spec!r}"
    expected = recipe.info.get("expected")
    if isinstance(expected, list | tuple):  # integer bounds: exactly the rounded-inwards ones
        shape = spec.shape
        low = torch.tensor(expected[0]).reshape(-1)
        high = torch.tensor(expected[1]).reshape(-1)
        assert torch.equal(spec.low.reshape(-1).long(), low.expand(numel(shape)))
        assert torch.equal(spec.high.reshape(-1).long(), high.expand(numel(shape)))
    elif recipe.kind == "bounded":
        low = torch.tensor([float(v) for v in recipe.info["low"]], dtype=torch.float64)
        high = torch.tensor([float(v) for v in recipe.info["high"]], dtype=torch.float64)
        eps = torch.finfo(spec.dtype).eps
        # finite bounds past the dtype's range sit at its largest finite value
        low = torch.where(low.isfinite(), low.clamp(-expected, expected), low)
        high = torch.where(high.isfinite(), high.clamp(-expected, expected), high)
        for got, want in ((spec.low, low), (spec.high, high)):
            got = got.reshape(-1).double()
            want = want.expand(got.shape)
            finite = want.isfinite()
            assert torch.equal(got[~finite], want[~finite])
            assert torch.allclose(
                got[finite], want[finite], rtol=eps, atol=torch.finfo(spec.dtype).tiny
            )


@pytest.mark.parametrize("examples", EXAMPLES)
def test_construction_valid_or_clear_error(examples):
    run(construction_property, examples, recipe=leaf_recipes)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_leaf_properties(examples):
    run(check_leaf, examples, spec=valid_leaves(), lead=leads, data=st.data())


@st.composite
def composites(draw: Any) -> Any:
    batch = draw(st.lists(st.integers(0, 2), min_size=0, max_size=2).map(tuple))
    leaves = draw(st.lists(valid_leaves(), min_size=1, max_size=3))
    entries = {f"k{i}": leaf.expand(*batch, *leaf.shape) for i, leaf in enumerate(leaves)}
    nested = dict(list(entries.items())[1:])
    top = dict(list(entries.items())[:1])
    cls = draw(st.sampled_from([Composite, CompositeSpec]))
    return (
        cls(top, nested=cls(nested, shape=batch) if nested else None, shape=batch)
        if nested
        else cls(top, shape=batch)
    )


def composite_property(spec: Any, lead: tuple[int, ...], data: Any) -> None:
    td = spec.rand(lead)
    assert td.batch_size == lead + tuple(spec.shape) and spec.is_in(td)
    assert spec.zero(lead).batch_size == td.batch_size
    # project an arbitrary TensorDict: every entry replaced by adversarial values.
    for key, leaf in spec.items(include_nested=True, leaves_only=True):
        if isinstance(leaf, NonTensor):
            continue
        value = data.draw(values_of(tuple(td.get(key).shape)))
        td.set(key, value)
    projected = spec.project(td)
    assert spec.is_in(projected), spec._why_not_in(projected)
    # a missing key is a clear error, not a silently incomplete result
    key = spec.keys(include_nested=True, leaves_only=True)[0]
    del td[key]
    with pytest.raises(KeyError, match="missing"):
        spec.project(td)
    clone = spec.clone()
    assert clone == spec
    expanded = spec.expand(2, *spec.shape)
    assert expanded[0] == spec and expanded.is_in(expanded.rand())


@pytest.mark.parametrize("examples", EXAMPLES)
def test_composite_properties(examples):
    run(composite_property, examples, spec=composites(), lead=leads, data=st.data())


@st.composite
def stacks(draw: Any) -> Any:
    """Two specs of one class and shape that may differ (bounds, n, mask), stacked."""
    shape = draw(st.lists(st.integers(1, 3), min_size=0, max_size=1).map(tuple))
    kind = draw(st.sampled_from(["bounded", "categorical", "one_hot", "binary"]))
    dtype = draw(st.sampled_from(INT_DTYPES))

    def one() -> Any:
        if kind == "bounded":
            a, b = sorted(draw(st.lists(st.integers(0, 100), min_size=2, max_size=2)))
            float_dtype = draw(st.booleans())
            return BoundedCurrent(a, b, shape=shape, dtype=torch.float32 if float_dtype else dtype)
        if kind == "categorical":
            n = draw(st.integers(1, 5))
            return Categorical(n, shape=shape, dtype=dtype, mask=some_mask(draw, n))
        if kind == "one_hot":
            n = 3
            return OneHot(n, shape=shape + (n,), dtype=dtype, mask=some_mask(draw, n))
        return Binary(2, shape=shape + (2,), dtype=dtype)

    specs = [one() for _ in range(draw(st.integers(1, 3)))]
    if len({s.dtype for s in specs}) > 1:
        specs = [specs[0]] * len(specs)
    return specs, torch.stack(specs, 0)


def stack_property(pair: Any, lead: tuple[int, ...], data: Any) -> None:
    specs, stacked = pair
    value = stacked.rand()
    assert stacked.is_in(value)
    for i, spec in enumerate(specs):
        assert stacked[i] == spec and spec.is_in(value[i])
    shape = (len(specs), *specs[0].shape)
    arbitrary = data.draw(values_of(shape))
    projected = stacked.project(arbitrary)
    assert stacked.is_in(projected) and projected.shape == shape
    if isinstance(stacked, Stacked):
        with pytest.raises(ValueError, match="cannot project"):
            stacked.project(torch.zeros(len(specs) + 1, *specs[0].shape))
    assert stacked.clone() == stacked


@pytest.mark.parametrize("examples", EXAMPLES)
def test_stack_properties(examples):
    run(stack_property, examples, pair=stacks(), lead=leads, data=st.data())


# --------------------------------------------------------------------------- stateful
class SpecMachine(RuleBasedStateMachine):
    """Chains shape operations, stacking and wrapping on one spec; the invariants check that
    every intermediate spec still samples, checks and projects consistently."""

    def __init__(self) -> None:
        super().__init__()
        self.spec: Any = None

    @rule(leaf=valid_leaves())
    def new_leaf(self, leaf: Any) -> None:
        if self.spec is None or isinstance(leaf, NonTensor):
            self.spec = leaf

    @rule(size=st.integers(0, 3))
    def expand(self, size: int) -> None:
        if self.spec is not None:
            self.spec = self.spec.expand(size, *self.spec.shape)

    @rule()
    def unsqueeze_squeeze(self) -> None:
        if self.spec is not None:
            unsqueezed = self.spec.unsqueeze(0)
            assert unsqueezed.shape == (1, *self.spec.shape)
            assert unsqueezed.squeeze(0) == self.spec
            self.spec = unsqueezed

    @rule(data=st.data())
    def index(self, data: Any) -> None:
        spec = self.spec
        if spec is None or isinstance(spec, Composite) or not batch_ndim(spec) or not spec.shape[0]:
            return
        i = data.draw(st.integers(0, spec.shape[0] - 1))
        value = spec.rand()
        sub = spec[i]
        assert sub.shape == spec.shape[1:] and sub.is_in(value[i])
        self.spec = sub

    @rule()
    def stack_with_itself(self) -> None:
        if self.spec is not None and not isinstance(self.spec, Composite):
            stacked = torch.stack([self.spec, self.spec.clone()], 0)
            assert stacked == self.spec.expand(2, *self.spec.shape)
            self.spec = stacked

    @rule()
    def wrap(self) -> None:
        if self.spec is not None and not isinstance(self.spec, Composite):
            batch = self.spec.shape[: batch_ndim(self.spec)]
            self.spec = Composite(leaf=self.spec, shape=batch)

    @rule()
    def clone(self) -> None:
        if self.spec is not None:
            clone = self.spec.clone()
            assert clone == self.spec
            self.spec = clone

    @invariant()
    def consistent(self) -> None:
        spec = self.spec
        if spec is None:
            return
        value = spec.rand((2,))
        assert spec.is_in(value)
        if isinstance(spec, Composite):
            assert spec.is_in(spec.project(value))
            return
        if not isinstance(spec, NonTensor):
            projected = spec.project(torch.full(spec.shape, NAN))
            assert spec.is_in(projected) and projected.shape == spec.shape
            huge = torch.full(spec.shape, 1e30)
            assert spec.is_in(spec.project(huge)) and spec.is_in(spec.project(-huge))


@pytest.mark.parametrize("examples", EXAMPLES)
def test_spec_state_machine(examples):
    run_state_machine_as_test(
        SpecMachine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=6,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )


# --------------------------------------------------------------------------- regressions
@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda: BoundedCurrent(0, 1000, dtype=torch.int8),
            r"high = 1000 does not fit dtype torch.int8",
        ),
        (lambda: BoundedCurrent(1e6, 2e6, dtype=torch.float16), "above the largest finite"),
        (lambda: BoundedCurrent(-1e300, -1e299), "below the smallest finite"),
        (lambda: BoundedCurrent(math.inf, math.inf, dtype=torch.int32), "no torch.int32 value"),
        (lambda: BoundedCurrent(math.nan, 1.0), "NaN"),
        (lambda: BoundedCurrent(2.0, 1.0), "low must be <= high"),
        (lambda: Categorical(300, dtype=torch.uint8), "n=300 does not fit dtype torch.uint8"),
        (
            lambda: Categorical(129, dtype=torch.int8),
            "largest category 128 exceeds its maximum 127",
        ),
        (lambda: Categorical(2**63), "at most 2\\*\\*63 - 1"),
        (lambda: MultiCategorical([2, 300], dtype=torch.uint8), r"max\(nvec\)=300 does not fit"),
    ],
)
def test_constructor_rejects(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_infinite_integer_bounds_are_the_dtype_range():
    spec = BoundedCurrent(0.0, math.inf, dtype=torch.int64)
    assert spec.high.item() == 2**63 - 1 and spec.low.item() == 0
    assert spec.is_in(spec.rand((100,)))
    # float64 has nothing between 2**63 - 1024 and 2**63: huge floats saturate there
    assert spec.project(torch.tensor([1e30, -1e30, math.nan])).tolist() == [2**63 - 1024, 0, 0]
    assert spec.project(torch.tensor([2**63 - 1, -5])).tolist() == [2**63 - 1, 0]
    small = BoundedCurrent(-math.inf, math.inf, dtype=torch.int8)
    assert (small.low.item(), small.high.item()) == (-128, 127)


def test_float_bounds_past_the_dtype_range_stay_finite():
    spec = BoundedCurrent(-1e300, 1e6, shape=(2,), dtype=torch.float16)
    assert spec.low.tolist() == [-65504.0] * 2 and spec.high.tolist() == [65504.0] * 2
    assert not spec.is_in(torch.full((2,), math.inf, dtype=torch.float16))
    assert spec.is_in(spec.rand((50,)))
    wide = BoundedCurrent(-1e300, 1e300)  # python floats are read as float64, not float32 inf
    assert wide.high.item() == torch.finfo(torch.float32).max


def test_project_clamps_before_casting():
    assert Categorical(129, dtype=torch.int16).project(torch.tensor(1e9)).item() == 128
    assert Unbounded(2, dtype=torch.int8).project(torch.tensor([300, -300])).tolist() == [127, -128]
    spec = BoundedCurrent(0, 10, shape=(2,), dtype=torch.int8)
    assert spec.project(torch.tensor([256, -256])).tolist() == [10, 0]
    assert spec.project(torch.tensor([2.0**70, math.nan])).tolist() == [10, 0]


def test_project_shape_errors_and_broadcast():
    spec = Categorical(4, shape=(2,))
    with pytest.raises(ValueError, match=r"shape \(3,\).*spec's shape \(2,\)"):
        spec.project(torch.zeros(3))
    assert spec.project(torch.tensor(9.0)).tolist() == [3, 3]
    bounded = BoundedCurrent(0.0, 1.0, shape=(1,))
    with pytest.raises(ValueError, match=r"spec's shape \(1,\)"):
        bounded.project(torch.zeros(3))
    assert bounded.project(torch.full((4, 1), math.nan)).tolist() == [[0.0]] * 4


def test_composite_project_names_the_key():
    spec = Composite(obs=BoundedCurrent(0.0, 1.0, shape=(2,)))
    td = TensorDict(obs=torch.zeros(3))
    with pytest.raises(ValueError, match="key 'obs'.*spec's shape"):
        spec.project(td)
    with pytest.raises(KeyError, match="'obs' is missing"):
        spec.project(TensorDict())


def test_non_tensor_project():
    spec = NonTensor(shape=(2,))
    assert spec.project("x") == "x"
    with pytest.raises(ValueError, match="batch size ending with"):
        spec.project(NonTensorData("x", batch_size=(3,)))
    with pytest.raises(ValueError, match="non-tensor data"):
        spec.project(TensorDict())
