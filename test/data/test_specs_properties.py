"""Property-based tests of the specs: rand() is in the spec, project(x) is in the spec for any
x, encode round-trips, and one-hot <-> categorical round-trips. 200 examples per property in the
default suite, 5,000 in the ``slow`` variants (test_specs_fuzz.py fuzzes every spec kind)."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchrl.data import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)

DEFAULT_EXAMPLES = 200
SLOW_EXAMPLES = 5000
EXAMPLES = [
    pytest.param(DEFAULT_EXAMPLES, id="default"),
    pytest.param(SLOW_EXAMPLES, id="many", marks=pytest.mark.slow),
]


def run(body, examples, **strategies):
    """Runs ``body`` as a hypothesis test with ``examples`` examples (200 by default, 5,000 in
    the slow variants)."""
    test = given(**strategies)(body)
    settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )(test)()


batch_shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)
finite = st.floats(-1e6, 1e6, allow_nan=False, width=32)
anything = st.floats(allow_nan=False, width=32)  # includes +-inf and extreme values


@st.composite
def bounded_specs(draw):
    shape = draw(batch_shapes) + (draw(st.integers(1, 3)),)
    numel = int(np.prod(shape))
    a = np.array(draw(st.lists(finite, min_size=numel, max_size=numel)), dtype=np.float32)
    b = np.array(draw(st.lists(finite, min_size=numel, max_size=numel)), dtype=np.float32)
    low, high = np.minimum(a, b).reshape(shape), np.maximum(a, b).reshape(shape)
    if draw(st.booleans()):
        return Bounded(torch.from_numpy(low), torch.from_numpy(high))
    low_i, high_i = np.floor(low), np.floor(high)
    return Bounded(torch.from_numpy(low_i), torch.from_numpy(high_i), dtype=torch.int64)


@st.composite
def discrete_specs(draw):
    shape = draw(batch_shapes)
    kind = draw(st.sampled_from(["categorical", "one_hot", "multi", "multi_one_hot", "binary"]))
    masked = draw(st.booleans())
    if kind == "binary":
        return Binary(shape=shape + (draw(st.integers(1, 4)),))
    if kind in ("categorical", "one_hot"):
        n = draw(st.integers(1, 5))
        mask = None
        if masked:
            mask = torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
            mask[draw(st.integers(0, n - 1))] = True
        if kind == "categorical":
            return Categorical(n, shape=shape, mask=mask)
        return OneHot(n, shape=shape + (n,), mask=mask)
    nvec = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    mask = None
    if masked:
        mask = torch.tensor(draw(st.lists(st.booleans(), min_size=sum(nvec), max_size=sum(nvec))))
        start = 0
        for n in nvec:  # every group keeps an allowed category
            mask[start + draw(st.integers(0, n - 1))] = True
            start += n
    if kind == "multi":
        return MultiCategorical(nvec, shape=shape + (len(nvec),), mask=mask)
    return MultiOneHot(nvec, shape=shape + (sum(nvec),), mask=mask)


def arbitrary_values(spec, draw, lead=(2,)):
    shape = lead + tuple(spec.shape)
    numel = int(np.prod(shape))
    values = draw(st.lists(anything, min_size=numel, max_size=numel))
    return torch.tensor(values, dtype=torch.float32).reshape(shape)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_bounded_rand_in_spec(examples):
    run(_bounded_rand_in_spec, examples, spec=bounded_specs(), lead=batch_shapes)


def _bounded_rand_in_spec(spec, lead):
    sample = spec.rand(lead)
    assert sample.shape == lead + tuple(spec.shape) and spec.is_in(sample)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_bounded_project_in_spec(examples):
    run(_bounded_project_in_spec, examples, spec=bounded_specs(), data=st.data())


def _bounded_project_in_spec(spec, data):
    projected = spec.project(arbitrary_values(spec, data.draw))
    assert spec.is_in(projected)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_discrete_rand_in_spec(examples):
    run(_discrete_rand_in_spec, examples, spec=discrete_specs(), lead=batch_shapes)


def _discrete_rand_in_spec(spec, lead):
    assert spec.is_in(spec.rand(lead))


@pytest.mark.parametrize("examples", EXAMPLES)
def test_discrete_project_in_spec(examples):
    run(_discrete_project_in_spec, examples, spec=discrete_specs(), data=st.data())


def _discrete_project_in_spec(spec, data):
    values = arbitrary_values(spec, data.draw)
    assert spec.is_in(spec.project(values))
    ints = values.clamp(-10, 10).round().to(torch.int64)
    assert spec.is_in(spec.project(ints))


@pytest.mark.parametrize("examples", EXAMPLES)
def test_encode_round_trip(examples):
    run(
        _encode_round_trip,
        examples,
        spec=st.one_of(bounded_specs(), discrete_specs()),
        lead=batch_shapes,
    )


def _encode_round_trip(spec, lead):
    value = spec.rand(lead)
    as_numpy = spec.to_numpy(value)
    encoded = spec.encode(as_numpy)
    assert torch.equal(encoded, value) and encoded.dtype == spec.dtype
    np.testing.assert_array_equal(spec.to_numpy(encoded), as_numpy)
    assert torch.equal(spec.encode(as_numpy.tolist()), value)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_categorical_one_hot_round_trip(examples):
    run(
        _categorical_one_hot_round_trip,
        examples,
        n=st.integers(1, 6),
        shape=batch_shapes,
        lead=batch_shapes,
    )


def _categorical_one_hot_round_trip(n, shape, lead):
    cat = Categorical(n, shape=shape)
    idx = cat.rand(lead)
    one_hot_spec = cat.to_one_hot_spec()
    one_hot = cat.to_one_hot(idx)
    assert one_hot_spec.is_in(one_hot)
    assert torch.equal(one_hot_spec.to_categorical(one_hot), idx)
    assert one_hot_spec.to_categorical_spec() == cat
    if idx.shape[-one_hot_spec.ndim :] != one_hot_spec.shape:  # else indices read as one-hot
        assert torch.equal(one_hot_spec.encode(idx), one_hot)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_multi_one_hot_round_trip(examples):
    run(
        _multi_one_hot_round_trip,
        examples,
        nvec=st.lists(st.integers(1, 5), min_size=1, max_size=4),
        shape=batch_shapes,
        lead=batch_shapes,
    )


def _multi_one_hot_round_trip(nvec, shape, lead):
    multi = MultiCategorical(nvec, shape=shape + (len(nvec),))
    idx = multi.rand(lead)
    one_hot_spec = multi.to_one_hot_spec()
    one_hot = multi.to_one_hot(idx)
    assert one_hot_spec.is_in(one_hot)
    assert torch.equal(one_hot_spec.to_categorical(one_hot), idx)
    assert one_hot_spec.to_categorical_spec() == multi
    if idx.shape[-one_hot_spec.ndim :] != one_hot_spec.shape:  # else indices read as one-hot
        assert torch.equal(one_hot_spec.encode(idx), one_hot)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_composite_rand_project_in_spec(examples):
    run(
        _composite_rand_project_in_spec,
        examples,
        spec=st.one_of(bounded_specs(), discrete_specs()),
        lead=st.integers(1, 3),
    )


def _composite_rand_project_in_spec(spec, lead):
    composite = Composite(leaf=spec, free=Unbounded(shape=(2,)))
    td = composite.rand((lead,))
    assert composite.is_in(td)
    td["leaf"] = torch.full_like(td["leaf"], 7, dtype=torch.float32)
    assert composite.is_in(composite.project(td))


@pytest.mark.parametrize(
    "make, dims",
    [(lambda: Bounded(0.0, 1.0, shape=(3,)), [-2, -1, 0, 1]), (lambda: OneHot(3), [-2, 0])],
)
@pytest.mark.parametrize("examples", EXAMPLES)
def test_stacking_equal_specs(make, dims, examples):
    def body(count, data):
        _stacking_equal_specs(make, dims, count, data)

    run(body, examples, count=st.integers(1, 4), data=st.data())


def _stacking_equal_specs(make, dims, count, data):
    dim = data.draw(st.sampled_from(dims))
    specs = [make() for _ in range(count)]
    stacked = torch.stack(specs, dim)
    assert type(stacked) is type(specs[0])
    assert stacked.is_in(torch.stack([s.rand() for s in specs], dim))
