"""Sum/min segment trees: the C++ kernels and the NumPy fallback agree, and both fail cleanly."""

from __future__ import annotations

import pickle
import threading
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchrl._utils
from torchrl.data import _segment_tree as st_mod
from torchrl.data._segment_tree import (
    MinSegmentTree,
    NumpyMinSegmentTree,
    NumpySumSegmentTree,
    SumSegmentTree,
)

DTYPES = [torch.float64, torch.float32]
CAPACITIES = [1, 2, 3, 1000, 1023, 1024, 1025]
TREES = {"sum": SumSegmentTree, "min": MinSegmentTree}


def test_c_extension_imports():
    # Unconditional: a build failure of torchrl._C must fail the test suite.
    import torchrl._C as C

    for name in ("SumSegmentTreeFp64", "SumSegmentTreeFp32", "MinSegmentTreeFp64"):
        assert hasattr(C, name)
    assert hasattr(C, "MinSegmentTreeFp32")
    assert st_mod._HAS_C
    assert SumSegmentTree(3).backend == "cpp"


def _pair(op: str, capacity: int, dtype: torch.dtype):
    cls = TREES[op]
    return cls(capacity, dtype, backend="cpp"), cls(capacity, dtype, backend="numpy")


def _assert_same_state(a, b):
    va, vb = a.state_dict()["values"], b.state_dict()["values"]
    assert va.dtype == vb.dtype
    assert torch.equal(va, vb)
    assert a.total() == b.total()


def _random_update(tree_pair, rng, capacity, op):
    n = int(rng.integers(0, 300))
    # A narrow index range makes duplicates common.
    high = capacity if rng.random() < 0.5 else max(1, capacity // 50)
    idx = rng.integers(0, high, size=n)
    if op == "sum":
        vals = rng.random(n) * 10.0
        vals[rng.random(n) < 0.3] = 0.0
    else:
        vals = rng.normal(size=n)
        vals[rng.random(n) < 0.1] = np.inf
    scalar = rng.random() < 0.2
    for tree in tree_pair:
        if scalar:
            tree.update(idx, 0.5)
        else:
            tree.update(idx, vals)
    return idx, (np.full(n, 0.5) if scalar else vals)


def _check_scan(values: np.ndarray, v: np.ndarray, found: np.ndarray, rtol: float):
    """Each answer lands on a positive value whose cumulative-sum bucket holds v (up to rtol)."""
    values = values.astype(np.float64)
    cum = np.cumsum(values)
    total = cum[-1]
    tol = rtol * total
    assert (values[found] > 0).all()
    before = cum[found] - values[found]
    vc = np.clip(v, 0.0, None)
    inside = (before - tol <= vc) & (vc < cum[found] + tol)
    # At or past the total, the answer is the last positive value.
    last_pos = np.flatnonzero(values > 0)[-1]
    past = v >= total - tol
    assert (inside | (past & (found == last_pos))).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("capacity", CAPACITIES)
@pytest.mark.parametrize("op", ["sum", "min"])
def test_backends_agree_on_random_data(op, capacity, dtype):
    rng = np.random.default_rng(capacity)
    pair = _pair(op, capacity, dtype)
    shadow = np.full(capacity, 0.0 if op == "sum" else np.inf)
    for _ in range(8):
        idx, vals = _random_update(pair, rng, capacity, op)
        for i, x in zip(idx, vals):  # the reference semantics: writes in order
            shadow[i] = x
        _assert_same_state(*pair)
        ref = shadow.astype(pair[0].dtype)
        np.testing.assert_array_equal(pair[0][:], ref)
        np.testing.assert_array_equal(pair[1][:], ref)
        probe = rng.integers(0, capacity, size=50)
        np.testing.assert_array_equal(pair[0][probe], pair[1][probe])
        for _ in range(20):
            start, end = np.sort(rng.integers(0, capacity + 1, size=2))
            qa, qb = pair[0].query(start, end), pair[1].query(start, end)
            assert qa == qb  # bit-identical, not just close
            chunk = ref[start:end].astype(np.float64)
            if op == "sum":
                np.testing.assert_allclose(
                    qa, chunk.sum(), rtol=1e-6 if dtype == torch.float32 else 1e-12
                )
            else:
                assert qa == (chunk.min() if chunk.size else np.inf)
        if op == "sum" and pair[0].total() > 0:
            total = pair[0].total()
            v = np.concatenate(
                [rng.random(200) * total, [0.0, total, total * (1 + 1e-7), 1e30, -1.0]]
            )
            v = np.concatenate([v, np.cumsum(ref.astype(np.float64))[:50]])  # bucket edges
            fa, fb = pair[0].scan_lower_bound(v), pair[1].scan_lower_bound(v)
            np.testing.assert_array_equal(fa, fb)
            assert fa.dtype == np.int64
            _check_scan(ref, v, fa, rtol=1e-5 if dtype == torch.float32 else 1e-12)


@pytest.mark.parametrize("backend", ["cpp", "numpy"])
def test_zero_priorities_never_sampled(backend):
    capacity = 1025
    tree = SumSegmentTree(capacity, backend=backend)
    rng = np.random.default_rng(0)
    positive = np.sort(rng.choice(capacity, size=7, replace=False))
    tree[positive] = rng.random(7) + 0.1
    total = tree.total()
    v = np.concatenate([np.linspace(-1.0, 2 * total, 5001), np.cumsum(tree[positive])])
    found = tree.scan_lower_bound(v)
    assert np.isin(found, positive).all()
    assert found[v >= total].tolist() == [positive[-1]] * int((v >= total).sum())
    assert tree.scan_lower_bound(-5.0) == positive[0]
    # Only the last leaf of a non power-of-two tree is positive.
    tree.update(positive, 0.0)
    tree[capacity - 1] = 1e-300
    assert (tree.scan_lower_bound(np.array([0.0, 1.0, 1e300])) == capacity - 1).all()


@pytest.mark.parametrize("backend", ["cpp", "numpy"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_one_element_tree(backend, dtype):
    s = SumSegmentTree(1, dtype, backend=backend)
    m = MinSegmentTree(1, dtype, backend=backend)
    assert len(s) == s.capacity == 1
    assert m.total() == np.inf
    s[0] = 2.0
    m[0] = -3.0
    assert s.total() == s.query() == s[0] == 2.0
    assert m.total() == m.query(0, 1) == -3.0
    assert s.query(0, 0) == 0.0 and m.query(1, 1) == np.inf
    assert s.scan_lower_bound([0.0, 1.9, 2.0, 5.0]).tolist() == [0, 0, 0, 0]
    with pytest.raises(IndexError):
        s[1] = 1.0


@pytest.mark.parametrize("backend", ["cpp", "numpy"])
def test_all_zero_tree_scan_raises(backend):
    tree = SumSegmentTree(10, backend=backend)
    with pytest.raises(ValueError, match="positive total"):
        tree.scan_lower_bound([0.5])
    tree[3] = 1.0
    tree[3] = 0.0
    with pytest.raises(ValueError, match="positive total"):
        tree.scan_lower_bound(0.0)


@pytest.mark.parametrize("backend", ["cpp", "numpy"])
def test_overflowing_total_scan_raises(backend):
    tree = SumSegmentTree(4, torch.float32, backend=backend)
    tree[[0, 3]] = 3e38  # each finite in float32, their sum is not
    assert tree.total() == np.inf
    with pytest.raises(ValueError, match="overflows"):
        tree.scan_lower_bound([1.0])
    assert tree.query(0, 1) == pytest.approx(3e38)  # ranges are summed in float64


BAD_CALLS = {
    "index_too_large": (IndexError, lambda t: t.update([0, 10], [1.0, 1.0])),
    "negative_index": (IndexError, lambda t: t.update(-1, 1.0)),
    "getitem_out_of_range": (IndexError, lambda t: t[np.array([3, 11])]),
    "float_index": (TypeError, lambda t: t.update(np.array([1.5]), 1.0)),
    "string_value": (TypeError, lambda t: t.update([1], ["a"])),
    "mismatched_lengths": (ValueError, lambda t: t.update([0, 1, 2], [1.0, 2.0])),
    "mismatched_tensor_lengths": (
        ValueError,
        lambda t: t.update(torch.arange(3), torch.ones(2, 2)),
    ),
    "nan_value": (ValueError, lambda t: t.update([1], float("nan"))),
    "query_out_of_range": (IndexError, lambda t: t.query(0, 11)),
    "query_negative": (IndexError, lambda t: t.query(-1, 3)),
    "query_reversed": (ValueError, lambda t: t.query(5, 2)),
    "bad_state_size": (
        ValueError,
        lambda t: t.load_state_dict({"capacity": 10, "values": torch.zeros(9)}),
    ),
    "bad_state_capacity": (
        ValueError,
        lambda t: t.load_state_dict({"capacity": 9, "values": torch.zeros(9)}),
    ),
}
SUM_ONLY_BAD_CALLS = {
    "negative_value": (ValueError, lambda t: t.update([1, 2], [1.0, -0.5])),
    "inf_value": (ValueError, lambda t: t.update([1], float("inf"))),
    "float32_overflow": (ValueError, lambda t: t.update([1], 1e300)),
    "nan_prefix": (ValueError, lambda t: t.scan_lower_bound([0.1, float("nan")])),
    "negative_state": (
        ValueError,
        lambda t: t.load_state_dict({"capacity": 10, "values": -torch.ones(10)}),
    ),
}


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("backend", ["cpp", "numpy"])
@pytest.mark.parametrize("op", ["sum", "min"])
@pytest.mark.parametrize("case", sorted(BAD_CALLS) + sorted(SUM_ONLY_BAD_CALLS))
def test_bad_input_raises_same_error(backend, op, case):
    if case in SUM_ONLY_BAD_CALLS and op == "min":
        if case == "nan_prefix":
            return  # no scan on a min tree
        # A min tree takes negative and infinite values.
        tree = TREES[op](10, torch.float32, backend=backend)
        SUM_ONLY_BAD_CALLS[case][1](tree)
        return
    exc, call = {**BAD_CALLS, **SUM_ONLY_BAD_CALLS}[case]
    tree = TREES[op](10, torch.float32, backend=backend)
    tree[[1, 2]] = [1.0, 2.0]
    before = tree.state_dict()["values"].clone()
    with pytest.raises(exc):
        call(tree)
    # A rejected call leaves the tree untouched.
    assert torch.equal(tree.state_dict()["values"], before)


def _raw_cores():
    import torchrl._C as C

    return [
        lambda cap: C.SumSegmentTreeFp64(cap),
        lambda cap: st_mod._NumpyTree(cap, np.dtype(np.float64), "sum"),
    ]


@pytest.mark.parametrize("make", _raw_cores(), ids=["cpp", "numpy"])
def test_raw_cores_check_arguments(make):
    core = make(4)
    with pytest.raises(ValueError, match="1-D"):
        core.update(np.zeros((2, 2), dtype=np.int64), 1.0)
    with pytest.raises(ValueError, match="1-D"):
        core.update(np.int64(1), 1.0)
    with pytest.raises(ValueError, match="scalar or a 1-D"):
        core.update(np.array([0, 1]), np.ones((2, 1)))
    with pytest.raises(ValueError, match="1-D"):
        core.scan_lower_bound(np.ones((2, 2)))
    with pytest.raises(ValueError, match="1-D"):
        core.set_values(np.ones(3))
    with pytest.raises(TypeError):
        core.scan_lower_bound(np.array(["x"]))
    core.update(np.array([], dtype=np.int64), np.array([]))  # empty batch: no-op
    assert core.total() == 0.0
    assert core.at(np.array([], dtype=np.int64)).shape == (0,)
    core.update(np.array([3, 3, 0], dtype=np.uint8), np.array([1.0, 2.0, 4.0]))
    assert core.at(np.array([0, 3])).tolist() == [4.0, 2.0]
    for cap in (0, -3):
        with pytest.raises(ValueError, match="capacity"):
            make(cap)
    with pytest.raises(ValueError, match="too large"):
        make(1 << 60)


@pytest.mark.parametrize("backend", ["cpp", "numpy"])
def test_torch_inputs(backend):
    tree = SumSegmentTree(100, torch.float64, backend=backend)
    idx = torch.arange(0, 100, 2, dtype=torch.int32)[::2]  # non-contiguous
    vals = torch.linspace(1.0, 2.0, idx.numel(), requires_grad=True)
    tree.update(idx, vals)
    got = tree[idx.long()]
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    np.testing.assert_allclose(got, vals.detach().numpy())
    # Shapes are kept: a (5, 5) index gives (5, 5) values; (B, 1) values fit (B,) indices.
    idx2 = torch.arange(25).reshape(5, 5)
    tree.update(idx2, torch.ones(25, 1))
    assert tree[idx2].shape == (5, 5)
    tree.update(idx2, torch.full((5,), 3.0))  # broadcast over rows
    assert (tree[idx2] == 3.0).all()
    tree.update(torch.tensor(7), torch.tensor(0.25, dtype=torch.bfloat16))
    assert tree[7] == 0.25 and isinstance(tree[7], float)
    found = tree.scan_lower_bound(torch.rand(4, 3, dtype=torch.float32) * tree.total())
    assert found.shape == (4, 3) and found.dtype == np.int64
    assert isinstance(tree.scan_lower_bound(0.0), int)
    assert tree.query(torch.tensor(0), torch.tensor(25)) == 24 * 3.0 + 0.25


@pytest.mark.parametrize("src", ["cpp", "numpy"])
@pytest.mark.parametrize("dst", ["cpp", "numpy"])
@pytest.mark.parametrize("op", ["sum", "min"])
def test_state_round_trip(tmp_path, src, dst, op):
    cls = TREES[op]
    a = cls(1000, torch.float32, backend=src)
    rng = np.random.default_rng(1)
    a[rng.integers(0, 1000, 300)] = rng.random(300)
    path = tmp_path / "tree.pt"
    torch.save(a.state_dict(), path)
    sd = torch.load(path, weights_only=True)
    assert sd["capacity"] == 1000 and sd["dtype"] == "float32"
    b = cls(1000, torch.float32, backend=dst)
    b.load_state_dict(sd)
    _assert_same_state(a, b)
    c = pickle.loads(pickle.dumps(a))
    _assert_same_state(a, c)
    assert c.backend == src


def test_dtype_and_backend_arguments():
    for dtype in (torch.float32, np.float32, "float32", np.dtype("float32")):
        assert SumSegmentTree(2, dtype).dtype == np.float32
    for dtype in (torch.float64, np.float64, "float64", float):
        assert MinSegmentTree(2, dtype).dtype == np.float64
    for dtype in (torch.int64, "int32", torch.float16, "nonsense"):
        with pytest.raises(ValueError, match="dtype"):
            SumSegmentTree(2, dtype)
    with pytest.raises(ValueError, match="backend"):
        SumSegmentTree(2, backend="cuda")
    with pytest.raises(TypeError):
        SumSegmentTree(2.5)
    assert isinstance(NumpySumSegmentTree(3), SumSegmentTree)
    assert NumpyMinSegmentTree(3, torch.float32).backend == "numpy"
    r = repr(SumSegmentTree(3))
    assert r == "SumSegmentTree(capacity=3, dtype=float64, backend='cpp', total=0.0)"
    assert "NumpyMinSegmentTree(capacity=3" in repr(NumpyMinSegmentTree(3))
    assert SumSegmentTree(3).reduce() == 0.0


def test_fallback_when_extension_missing(monkeypatch):
    monkeypatch.setattr(st_mod, "_C", None)
    monkeypatch.setattr(st_mod, "_C_IMPORT_ERROR", ImportError("no _C"))
    monkeypatch.setattr(torchrl._utils, "_warned", set())
    with pytest.warns(UserWarning, match="build_ext --inplace"):
        tree = SumSegmentTree(4)
    assert tree.backend == "numpy"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once only
        MinSegmentTree(4)
    with pytest.raises(ImportError, match="build_ext"):
        SumSegmentTree(4, backend="cpp")


@pytest.mark.parametrize("backend", ["cpp", "numpy"])
def test_concurrent_use_from_threads(backend):
    # The C++ side releases the GIL: concurrent calls must neither crash nor corrupt the tree.
    tree = SumSegmentTree(10_000, backend=backend)
    tree[:] = 1.0
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(200 if backend == "cpp" else 30):
                tree.update(rng.integers(0, 10_000, 256), rng.random(256) + 0.5)
                found = tree.scan_lower_bound(rng.random(256) * tree.total())
                assert ((found >= 0) & (found < 10_000)).all()
        except Exception as err:  # reported to the main thread below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ref = SumSegmentTree(10_000, backend="cpp" if backend == "numpy" else "numpy")
    ref.load_state_dict(tree.state_dict())
    assert ref.total() == tree.total()  # parents are consistent with the leaves


_ops = st.lists(
    st.tuples(
        st.lists(st.integers(0, 36), min_size=0, max_size=20),
        st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False),
        st.booleans(),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacity=st.integers(1, 37),
    ops=_ops,
    us=st.lists(st.floats(-0.1, 1.1), min_size=1, max_size=10),
    f32=st.booleans(),
)
def test_property_backends_agree(capacity, ops, us, f32):
    dtype = torch.float32 if f32 else torch.float64
    sums = _pair("sum", capacity, dtype)
    mins = _pair("min", capacity, dtype)
    for raw_idx, value, zero in ops:
        idx = [i % capacity for i in raw_idx]
        vals = [0.0 if zero and k % 2 else value / (k + 1) for k in range(len(idx))]
        for tree in (*sums, *mins):
            tree.update(idx, vals)
    _assert_same_state(*sums)
    _assert_same_state(*mins)
    for start in range(0, capacity + 1, max(1, capacity // 4)):
        assert sums[0].query(start) == sums[1].query(start)
        assert mins[0].query(0, start) == mins[1].query(0, start)
    total = sums[0].total()
    if total > 0:
        v = np.asarray(us) * total
        found = sums[0].scan_lower_bound(v)
        np.testing.assert_array_equal(found, sums[1].scan_lower_bound(v))
        _check_scan(sums[0][:], v, found, rtol=1e-5 if f32 else 1e-12)
    else:
        for tree in sums:
            with pytest.raises(ValueError):
                tree.scan_lower_bound(us)
