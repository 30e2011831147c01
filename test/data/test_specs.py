"""Leaf specs: Unbounded, Bounded, Categorical, OneHot, MultiCategorical, MultiOneHot, Binary,
NonTensor; their shape operations, errors, and the paper-era aliases."""

import numpy as np
import pytest
import torch
from tensordict import NonTensorData

import torchrl.data as data
import torchrl.data.specs as specs_mod
from torchrl.data import (
    Binary,
    Bounded,
    Categorical,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    TensorSpec,
    Unbounded,
    UnboundedDiscrete,
)
from torchrl.data.specs import BinaryBox, BoxList, CategoricalBox, ContinuousBox

META = torch.device("meta")


class TestUnbounded:
    def test_defaults(self):
        spec = Unbounded()
        assert spec.shape == torch.Size([1])
        assert spec.dtype is torch.float32 and spec.device is None
        assert spec.domain == "continuous" and spec.ndim == 1 and spec.ndimension() == 1
        assert Unbounded(3).shape == torch.Size([3])
        assert Unbounded((2, 3)).shape == torch.Size([2, 3])

    def test_integer_dtype_is_discrete(self):
        spec = Unbounded(shape=(4,), dtype=torch.int32)
        assert spec.domain == "discrete"
        sample = spec.rand((5,))
        assert sample.dtype is torch.int32 and sample.shape == (5, 4)
        assert spec.is_in(sample)
        assert UnboundedDiscrete(2).dtype is torch.int64
        flags = Unbounded(shape=(200,), dtype=torch.bool).rand()
        assert flags.any() and not flags.all()
        assert UnboundedDiscrete(2) == Unbounded(2, dtype=torch.int64)

    def test_rand_zero_one(self):
        spec = Unbounded(shape=(2, 3))
        assert spec.rand().shape == (2, 3)
        assert spec.rand(4).shape == (4, 2, 3)
        assert spec.rand(torch.Size([4, 5])).shape == (4, 5, 2, 3)
        assert torch.equal(spec.zero((2,)), torch.zeros(2, 2, 3))
        assert torch.equal(spec.one(), torch.ones(2, 3))

    def test_is_in(self):
        spec = Unbounded(shape=(3,))
        assert spec.is_in(torch.randn(3)) and spec.is_in(torch.randn(7, 3))
        assert spec.is_in(torch.tensor([float("inf"), 0.0, -1e30]))
        assert not spec.is_in(torch.randn(4))
        assert not spec.is_in(torch.randn(3, dtype=torch.float64))
        assert not spec.is_in(np.zeros(3, dtype=np.float32))
        with pytest.raises(
            AssertionError, match=r"wrong dtype: expected torch.float32, got torch.float64"
        ):
            spec.assert_is_in(torch.zeros(3, dtype=torch.float64))
        with pytest.raises(AssertionError, match=r"wrong shape.*\(3,\).*\(2,\)"):
            spec.assert_is_in(torch.zeros(2))
        with pytest.raises(AssertionError, match="expected a tensor"):
            spec.assert_is_in([1.0, 2.0, 3.0])

    def test_project_casts(self):
        spec = Unbounded(shape=(2,), dtype=torch.int64)
        assert torch.equal(spec.project(torch.tensor([1.6, -2.4])), torch.tensor([2, -2]))
        x = torch.zeros(2, dtype=torch.int64)
        assert spec.project(x) is x

    def test_encode(self):
        spec = Unbounded(shape=(3,))
        arr = np.arange(3, dtype=np.float64)
        out = spec.encode(arr)
        assert out.dtype is torch.float32 and torch.equal(out, torch.arange(3.0))
        shared = np.zeros(3, dtype=np.float32)
        enc = spec.encode(shared)
        shared[0] = 5.0  # a matching numpy array is wrapped, not copied
        assert enc[0] == 5.0
        assert torch.equal(spec.encode([1, 2, 3]), torch.tensor([1.0, 2.0, 3.0]))
        assert spec.encode(np.zeros((4, 3))).shape == (4, 3)  # extra leading dims are kept
        assert Unbounded(1).encode(2.5).shape == (1,)
        assert Unbounded(shape=(1, 3)).encode([1, 2, 3]).shape == (1, 3)  # same numel: reshaped
        readonly = np.ones(3)
        readonly.flags.writeable = False
        assert torch.equal(spec.encode(readonly), torch.ones(3))
        with pytest.raises(ValueError, match="cannot encode a value of shape"):
            spec.encode(np.zeros(4))

    def test_to_numpy(self):
        spec = Unbounded(shape=(2,))
        np.testing.assert_array_equal(spec.to_numpy(torch.ones(2)), np.ones(2, dtype=np.float32))
        with pytest.raises(AssertionError):
            spec.to_numpy(torch.ones(3), safe=True)

    def test_space_and_repr(self):
        spec = Unbounded(shape=(2,))
        assert isinstance(spec.space, ContinuousBox)
        assert torch.isinf(spec.space.low).all() and spec.space.low.shape == (2,)
        assert repr(spec) == "Unbounded(shape=torch.Size([2]), dtype=torch.float32, device=None)"

    def test_bad_args(self):
        with pytest.raises(ValueError, match="non-negative"):
            Unbounded(shape=(-1,))
        with pytest.raises(ValueError, match="dtype must be a torch.dtype"):
            Unbounded(dtype="float32")
        with pytest.raises(ValueError, match="complex"):
            Unbounded(dtype=torch.complex64)


class TestBounded:
    def test_shape_inference(self):
        assert Bounded(0.0, 1.0).shape == torch.Size([])
        assert Bounded(torch.zeros(3), 1.0).shape == (3,)
        assert Bounded(torch.zeros(1, 3), torch.ones(2, 1)).shape == (2, 3)
        spec = Bounded(-1.0, torch.tensor([1.0, 2.0]), shape=(4, 2))
        assert spec.low.shape == (4, 2) and spec.high.shape == (4, 2)
        assert torch.equal(spec.high[3], torch.tensor([1.0, 2.0]))

    def test_bad_bounds(self):
        with pytest.raises(ValueError, match=r"low must be <= high.*low=2.0.*high=1.0"):
            Bounded(2.0, 1.0, shape=(2,))
        with pytest.raises(ValueError, match="low must be <= high"):
            Bounded(torch.tensor([0.0, 3.0]), torch.tensor([1.0, 2.0]))
        with pytest.raises(ValueError, match=r"does not broadcast to the spec shape \(4,\)"):
            Bounded(torch.zeros(3), 1.0, shape=(4,))
        with pytest.raises(ValueError, match="do not broadcast together"):
            Bounded(torch.zeros(3), torch.ones(4))
        with pytest.raises(ValueError, match="NaN"):
            Bounded(float("nan"), 1.0)
        with pytest.raises(ValueError, match="bool dtype"):
            Bounded(0, 1, dtype=torch.bool)
        with pytest.raises(ValueError, match="no torch.int64 value"):
            Bounded(0.2, 0.8, dtype=torch.int64)

    def test_rand_in_bounds(self):
        spec = Bounded(torch.tensor([-1.0, 10.0]), torch.tensor([1.0, 10.5]), shape=(2,))
        sample = spec.rand((1000,))
        assert sample.shape == (1000, 2) and spec.is_in(sample)
        assert (sample[:, 0] < 0).any() and (sample[:, 0] > 0).any()
        scalar = Bounded(3.0, 3.0, shape=(5,))
        assert torch.equal(scalar.rand(), torch.full((5,), 3.0))

    def test_rand_integer(self):
        spec = Bounded(-2, 2, shape=(1000,), dtype=torch.int64)
        sample = spec.rand()
        assert sample.dtype is torch.int64 and spec.is_in(sample)
        assert set(sample.unique().tolist()) == {-2, -1, 0, 1, 2}
        per_entry = Bounded(torch.tensor([0, 10]), torch.tensor([1, 12]), dtype=torch.int32)
        assert per_entry.is_in(per_entry.rand((500,)))
        assert Bounded(0.5, 2.5, shape=(3,), dtype=torch.int64).low[0] == 1  # real bounds, ceiled

    def test_rand_infinite_bounds(self):
        inf = float("inf")
        spec = Bounded(torch.tensor([-inf, 0.0, -inf]), torch.tensor([0.0, inf, inf]))
        sample = spec.rand((200,))
        assert spec.is_in(sample) and torch.isfinite(sample).all()

    def test_rand_wide_bounds(self):
        big = torch.finfo(torch.float32).max
        spec = Bounded(-big, big, shape=(100,))
        assert spec.is_in(spec.rand())

    def test_is_in(self):
        spec = Bounded(0.0, 1.0, shape=(3,))
        assert spec.is_in(torch.tensor([0.0, 0.5, 1.0]))
        assert not spec.is_in(torch.tensor([0.0, 1.5, 1.0]))
        assert not spec.is_in(torch.tensor([0.0, float("nan"), 1.0]))
        assert not spec.is_in(torch.tensor([0, 1, 1]))  # dtype
        assert spec.is_in(torch.zeros(0, 3))
        tensor_spec = Bounded(torch.zeros(2), torch.tensor([1.0, 2.0]))
        assert tensor_spec.is_in(torch.tensor([[1.0, 2.0], [0.5, 1.5]]))
        assert not tensor_spec.is_in(torch.tensor([1.5, 0.0]))
        assert not tensor_spec.is_in(torch.tensor([float("nan"), 0.0]))

    def test_assert_is_in_message(self):
        spec = Bounded(torch.zeros(2), torch.tensor([1.0, 2.0]))
        with pytest.raises(AssertionError, match=r"value\[1, 0\] = 1.5 is not in \[0.0, 1.0\]"):
            spec.assert_is_in(torch.tensor([[0.5, 0.5], [1.5, 0.0]]))
        with pytest.raises(AssertionError, match=r"^Bounded\(shape=\(2,\)"):
            spec.assert_is_in(torch.tensor([3.0, 0.0]))

    def test_project(self):
        spec = Bounded(torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 5.0]))
        out = spec.project(torch.tensor([[-3.0, 2.0], [0.5, 9.0]]))
        assert torch.equal(out, torch.tensor([[-1.0, 2.0], [0.5, 5.0]]))
        assert spec.project(torch.tensor([2, -2])).dtype is torch.float32
        ints = Bounded(0, 10, shape=(3,), dtype=torch.int64)
        out = ints.project(torch.tensor([-4.2, 3.6, 1e30]))
        assert torch.equal(out, torch.tensor([0, 4, 10])) and ints.is_in(out)

    def test_space_repr_eq(self):
        spec = Bounded(-1.0, 1.0, shape=(2,))
        assert isinstance(spec.space, ContinuousBox) and spec.space.high is spec.high
        assert spec.domain == "continuous"
        assert Bounded(0, 1, dtype=torch.int8).domain == "discrete"
        assert repr(spec) == (
            "Bounded(shape=torch.Size([2]), low=-1.0, high=1.0, dtype=torch.float32, device=None)"
        )
        assert "low=[0.0, 1.0]" in repr(Bounded(torch.tensor([0.0, 1.0]), 2.0))
        assert spec == Bounded(torch.tensor([-1.0, -1.0]), 1.0)
        assert spec != Bounded(-1.0, 2.0, shape=(2,))
        assert spec != Unbounded(2)
        assert spec != Bounded(-1.0, 1.0, shape=(2,), dtype=torch.float64)

    def test_to_dtype(self):
        spec = Bounded(-1.5, 1.5, shape=(2,)).to(torch.float64)
        assert spec.dtype is torch.float64 and spec.low.dtype is torch.float64
        assert spec.is_in(spec.rand())


class TestCategorical:
    def test_defaults(self):
        spec = Categorical(4)
        assert spec.shape == torch.Size([]) and spec.dtype is torch.int64 and spec.n == 4
        assert spec.space == CategoricalBox(4) and spec.domain == "discrete"
        sample = spec.rand((1000,))
        assert sample.shape == (1000,) and set(sample.tolist()) == {0, 1, 2, 3}

    @pytest.mark.parametrize("n", [0, -1, 2.5, True, "3"])
    def test_bad_n(self, n):
        with pytest.raises(ValueError, match="n must be a positive int"):
            Categorical(n)

    def test_bad_dtype(self):
        with pytest.raises(ValueError, match="integer or bool dtype, got torch.float32"):
            Categorical(3, dtype=torch.float32)
        with pytest.raises(ValueError, match="at most 2 categories"):
            Categorical(3, dtype=torch.bool)

    def test_bool_done_flag(self):
        spec = Categorical(2, shape=(1,), dtype=torch.bool)
        assert spec.rand().dtype is torch.bool
        assert spec.is_in(torch.tensor([True])) and not spec.is_in(torch.tensor([1]))
        assert torch.equal(spec.encode(True), torch.tensor([True]))
        assert torch.equal(spec.encode(np.bool_(False)), torch.tensor([False]))
        assert not Categorical(1, dtype=torch.bool).is_in(torch.tensor(True))

    def test_is_in(self):
        spec = Categorical(3, shape=(2,))
        assert spec.is_in(torch.tensor([0, 2])) and spec.is_in(torch.zeros(5, 2, dtype=torch.int64))
        assert not spec.is_in(torch.tensor([0, 3]))
        assert not spec.is_in(torch.tensor([-1, 0]))
        assert not spec.is_in(torch.tensor([0.0, 1.0]))
        with pytest.raises(AssertionError, match=r"value\[1\] = 3 is not in \{0, ..., 2\}"):
            spec.assert_is_in(torch.tensor([0, 3]))

    def test_mask(self):
        mask = torch.tensor([True, False, True, False])
        spec = Categorical(4, shape=(3,), mask=mask)
        assert spec.mask.shape == (3, 4)
        sample = spec.rand((200,))
        assert set(sample.unique().tolist()) == {0, 2} and spec.is_in(sample)
        assert not spec.is_in(torch.tensor([0, 1, 2]))
        with pytest.raises(AssertionError, match=r"masked out: value\[1\] = 1"):
            spec.assert_is_in(torch.tensor([0, 1, 2]))
        assert torch.equal(spec.project(torch.tensor([1, 3, 2])), torch.tensor([0, 2, 2]))
        spec.update_mask(torch.tensor([[True, True, False, False]] * 3))
        assert spec.rand((100,)).max() <= 1
        spec.update_mask(None)
        assert spec.mask is None and spec.is_in(torch.tensor([3, 3, 3]))

    def test_bad_mask(self):
        with pytest.raises(ValueError, match="does not broadcast"):
            Categorical(4, mask=torch.ones(3, dtype=torch.bool))
        with pytest.raises(ValueError, match="bool tensor"):
            Categorical(4, mask=torch.ones(4))
        with pytest.raises(ValueError, match="allows no value"):
            Categorical(2, shape=(2,), mask=torch.tensor([[True, False], [False, False]]))

    def test_project(self):
        spec = Categorical(3)
        out = spec.project(torch.tensor([-5.0, 0.4, 1.6, 99.0, float("nan")]))
        assert torch.equal(out, torch.tensor([0, 0, 2, 2, 0]))

    def test_one_hot(self):
        spec = Categorical(3, shape=(2,))
        val = torch.tensor([2, 0])
        oh = spec.to_one_hot(val)
        assert oh.dtype is torch.bool and oh.shape == (2, 3)
        oh_spec = spec.to_one_hot_spec()
        assert oh_spec == OneHot(3, shape=(2, 3))
        assert oh_spec.is_in(oh) and torch.equal(oh_spec.to_categorical(oh), val)
        assert oh_spec.to_categorical_spec() == spec
        with pytest.raises(AssertionError):
            spec.to_one_hot(torch.tensor([0, 3]), safe=True)

    def test_encode(self):
        spec = Categorical(5, shape=(1,))
        assert torch.equal(spec.encode(3), torch.tensor([3]))
        assert torch.equal(spec.encode(np.int64(4)), torch.tensor([4]))
        assert spec.encode(np.array([[1], [2]], dtype=np.int32)).shape == (2, 1)
        with pytest.raises(ValueError, match=r"cannot encode a value of shape \(2,\)"):
            spec.encode(np.array([1, 2]))

    def test_eq_repr(self):
        assert Categorical(3) == Categorical(3)
        assert Categorical(3) != Categorical(4)
        assert Categorical(3) != Categorical(3, mask=torch.tensor([True, True, False]))
        assert repr(Categorical(3)) == (
            "Categorical(n=3, shape=torch.Size([]), dtype=torch.int64, device=None)"
        )


class TestOneHot:
    def test_defaults_and_errors(self):
        spec = OneHot(4)
        assert spec.shape == (4,) and spec.dtype is torch.bool and spec.n == 4
        assert OneHot(4, shape=(2, 4)).shape == (2, 4)
        with pytest.raises(ValueError, match=r"last dim of shape must be n=4"):
            OneHot(4, shape=(2, 3))
        with pytest.raises(ValueError, match="last dim"):
            OneHot(4, shape=())
        with pytest.raises(ValueError, match="integer or bool dtype"):
            OneHot(4, dtype=torch.float32)
        with pytest.raises(ValueError, match="n must be a positive int"):
            OneHot(0)

    @pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.uint8])
    def test_rand_is_in(self, dtype):
        spec = OneHot(5, shape=(3, 5), dtype=dtype)
        sample = spec.rand((10,))
        assert sample.dtype is dtype and sample.shape == (10, 3, 5)
        assert (sample.long().sum(-1) == 1).all() and spec.is_in(sample)
        zeros = torch.zeros(3, 5, dtype=dtype)
        assert not spec.is_in(zeros)
        two = zeros.clone()
        two[:, :2] = 1
        assert not spec.is_in(two)
        with pytest.raises(AssertionError, match="not one-hot"):
            spec.assert_is_in(two)

    def test_samples_are_fresh_tensors(self):
        spec = OneHot(3)
        first = spec.rand()
        first.fill_(True)  # must not leak into later samples
        assert all(spec.is_in(spec.rand()) for _ in range(20))
        assert spec.rand((2,)).sum() == 2

    def test_negative_entries_rejected(self):
        spec = OneHot(3, dtype=torch.int64)
        assert not spec.is_in(torch.tensor([2, -1, 0]))

    def test_mask(self):
        spec = OneHot(4, mask=torch.tensor([False, True, False, True]))
        sample = spec.rand((100,))
        assert spec.is_in(sample) and not sample[:, [0, 2]].any()
        assert not spec.is_in(torch.tensor([True, False, False, False]))
        projected = spec.project(torch.tensor([5.0, 1.0, 9.0, 2.0]))
        assert torch.equal(projected, torch.tensor([False, False, False, True]))
        with pytest.raises(ValueError, match="allows no value"):
            spec.update_mask(torch.zeros(4, dtype=torch.bool))

    def test_project(self):
        spec = OneHot(3)
        valid = torch.tensor([False, True, False])
        assert spec.project(valid) is valid
        out = spec.project(torch.tensor([[0.1, 0.2, 0.7], [float("nan"), 2.0, 1.0]]))
        assert torch.equal(out, torch.tensor([[False, False, True], [False, True, False]]))

    def test_encode(self):
        spec = OneHot(3)
        assert torch.equal(spec.encode(1), torch.tensor([False, True, False]))
        assert torch.equal(spec.encode(np.int64(0)), torch.tensor([True, False, False]))
        batch = spec.encode(np.array([0, 2]))
        assert batch.shape == (2, 3) and spec.is_in(batch)
        assert torch.equal(spec.encode(np.array([0, 0, 1])), torch.tensor([False, False, True]))
        with pytest.raises(ValueError, match="expected an index"):
            spec.encode(3)
        with pytest.raises(ValueError, match="expected indices"):
            spec.encode(np.array([0, 5]))

    def test_to_categorical(self):
        spec = OneHot(4, shape=(2, 4), dtype=torch.int64)
        val = spec.rand()
        idx = spec.to_categorical(val, safe=True)
        assert idx.shape == (2,) and torch.equal(torch.nn.functional.one_hot(idx, 4), val)
        cat = spec.to_categorical_spec()
        assert cat == Categorical(4, shape=(2,)) and cat.is_in(idx)

    def test_feature_dim_is_not_a_batch_dim(self):
        spec = OneHot(3, shape=(2, 3))
        assert spec[0] == OneHot(3)
        with pytest.raises(ValueError, match="feature dim"):
            spec.unsqueeze(-1)
        with pytest.raises(IndexError, match="does not fit"):
            OneHot(3)[0]
        assert spec.unsqueeze(-2).shape == (2, 1, 3)
        with pytest.raises(ValueError, match="cannot expand"):
            spec.expand(2, 4)


class TestMultiCategorical:
    def test_construction(self):
        spec = MultiCategorical([2, 3, 4])
        assert spec.shape == (3,) and torch.equal(spec.nvec, torch.tensor([2, 3, 4]))
        assert spec.space == BoxList([CategoricalBox(2), CategoricalBox(3), CategoricalBox(4)])
        assert MultiCategorical(torch.tensor([2, 3]), shape=(5, 2)).nvec.shape == (5, 2)
        assert MultiCategorical(np.array([2, 3])).shape == (2,)
        with pytest.raises(ValueError, match="does not fit the shape"):
            MultiCategorical([2, 3], shape=(3,))
        with pytest.raises(ValueError, match="must be > 0"):
            MultiCategorical([2, 0])
        with pytest.raises(ValueError, match="non-empty sequence"):
            MultiCategorical(3)
        with pytest.raises(ValueError, match="integer or bool dtype"):
            MultiCategorical([2], dtype=torch.float64)

    def test_rand_is_in(self):
        spec = MultiCategorical([2, 3, 4], shape=(5, 3))
        sample = spec.rand((100,))
        assert sample.shape == (100, 5, 3) and spec.is_in(sample)
        assert torch.equal(sample.flatten(0, 1).amax(0), torch.tensor([1, 2, 3]))
        assert not spec.is_in(torch.tensor([[0, 0, 4]] * 5))
        with pytest.raises(AssertionError, match=r"value\[0, 2\] = 4 is not in \{0, ..., 3\}"):
            spec.assert_is_in(torch.tensor([[0, 0, 4]] * 5))

    def test_varying_nvec(self):
        spec = MultiCategorical(torch.tensor([[2, 2], [5, 5]]))
        sample = spec.rand((50,))
        assert spec.is_in(sample) and sample[:, 1].max() > 1 and sample[:, 0].max() <= 1
        with pytest.raises(ValueError, match="same nvec"):
            spec.update_mask(torch.ones(2, 4, dtype=torch.bool))
        with pytest.raises(ValueError, match="varies"):
            _ = spec.space

    def test_mask(self):
        mask = torch.tensor([True, False, False, True, True])
        spec = MultiCategorical([2, 3], mask=mask)
        sample = spec.rand((100,))
        assert (sample[:, 0] == 0).all() and (sample[:, 1] >= 1).all() and spec.is_in(sample)
        assert not spec.is_in(torch.tensor([1, 1]))
        with pytest.raises(AssertionError, match="sub-action 0"):
            spec.assert_is_in(torch.tensor([1, 1]))
        assert torch.equal(spec.project(torch.tensor([1, 0])), torch.tensor([0, 1]))
        with pytest.raises(ValueError, match="group 1"):
            spec.update_mask(torch.tensor([True, True, False, False, False]))

    def test_project(self):
        spec = MultiCategorical([2, 3])
        out = spec.project(torch.tensor([[5.0, -1.0], [0.6, 1.4]]))
        assert torch.equal(out, torch.tensor([[1, 0], [1, 1]]))

    def test_one_hot_round_trip(self):
        spec = MultiCategorical([2, 3], shape=(4, 2))
        val = spec.rand()
        oh = spec.to_one_hot(val)
        oh_spec = spec.to_one_hot_spec()
        assert oh_spec == MultiOneHot([2, 3], shape=(4, 5)) and oh_spec.is_in(oh)
        assert torch.equal(oh_spec.to_categorical(oh), val)
        assert oh_spec.to_categorical_spec() == spec


class TestMultiOneHot:
    def test_construction(self):
        spec = MultiOneHot([2, 3])
        assert spec.shape == (5,) and spec.nvec == [2, 3] and spec.dtype is torch.bool
        assert spec.space.nvec == [2, 3]
        with pytest.raises(ValueError, match=r"sum\(nvec\)=5"):
            MultiOneHot([2, 3], shape=(4,))
        with pytest.raises(ValueError, match="1-d"):
            MultiOneHot([[2, 3]])

    @pytest.mark.parametrize("dtype", [torch.bool, torch.int64])
    def test_rand_is_in(self, dtype):
        spec = MultiOneHot([2, 3, 1], shape=(4, 6), dtype=dtype)
        sample = spec.rand((10,))
        assert sample.shape == (10, 4, 6) and sample.dtype is dtype and spec.is_in(sample)
        bad = sample.clone()
        bad[..., 0] = 1
        bad[..., 1] = 1
        assert not spec.is_in(bad)
        with pytest.raises(AssertionError, match="group 0"):
            spec.assert_is_in(bad)

    def test_encode_and_categorical(self):
        spec = MultiOneHot([2, 3])
        enc = spec.encode([1, 2])
        assert torch.equal(enc, torch.tensor([False, True, False, False, True]))
        batch = spec.encode(np.array([[0, 0], [1, 1]]))
        assert batch.shape == (2, 5) and spec.is_in(batch)
        assert torch.equal(spec.to_categorical(batch), torch.tensor([[0, 0], [1, 1]]))
        assert torch.equal(spec.encode(enc.numpy()), enc)
        with pytest.raises(ValueError, match="within nvec"):
            spec.encode([2, 0])

    def test_mask_and_project(self):
        mask = torch.tensor([False, True, True, True, False])
        spec = MultiOneHot([2, 3], mask=mask)
        sample = spec.rand((100,))
        assert spec.is_in(sample) and sample[:, 1].all() and not sample[:, 4].any()
        assert not spec.is_in(torch.tensor([True, False, True, False, False]))
        out = spec.project(torch.tensor([9.0, 0.0, 0.0, 1.0, 5.0]))
        assert torch.equal(out, torch.tensor([False, True, False, True, False]))
        with pytest.raises(ValueError, match="group 0"):
            spec.update_mask(torch.tensor([False, False, True, True, True]))


class TestBinary:
    def test_construction(self):
        assert Binary(3).shape == (3,) and Binary(3).dtype is torch.int8
        assert Binary(shape=(2, 4)).n == 4
        assert Binary(4, shape=(2, 4)).space == BinaryBox(4)
        with pytest.raises(ValueError, match="give n or shape"):
            Binary()
        with pytest.raises(ValueError, match="last dim of shape must be n=3"):
            Binary(3, shape=(4,))
        with pytest.raises(ValueError, match="at least one dim"):
            Binary(shape=())
        with pytest.raises(ValueError, match="integer or bool dtype"):
            Binary(3, dtype=torch.float32)
        with pytest.raises(ValueError):
            Binary(3).to(torch.float32)

    def test_values(self):
        spec = Binary(4)
        sample = spec.rand((100,))
        assert spec.is_in(sample) and set(sample.unique().tolist()) == {0, 1}
        assert not spec.is_in(torch.tensor([0, 2, 1, 0], dtype=torch.int8))
        with pytest.raises(AssertionError, match=r"value\[1\] = 2 is not 0 or 1"):
            spec.assert_is_in(torch.tensor([0, 2, 1, 0], dtype=torch.int8))
        out = spec.project(torch.tensor([0.7, -1.0, 0.5, 3.0]))
        assert torch.equal(out, torch.tensor([1, 0, 0, 1], dtype=torch.int8))
        bool_spec = Binary(2, dtype=torch.bool)
        assert bool_spec.is_in(bool_spec.rand())
        assert torch.equal(
            spec.encode(np.array([1, 0, 1, 1])), torch.tensor([1, 0, 1, 1]).to(torch.int8)
        )


class TestNonTensor:
    def test_rand_zero(self):
        spec = NonTensor(shape=(2,), example_data={"a": 1})
        for value in (spec.rand(), spec.zero(), spec.one()):
            assert isinstance(value, NonTensorData)
            assert value.batch_size == (2,) and value.data == {"a": 1}
        assert spec.rand((3,)).batch_size == (3, 2)
        assert NonTensor().shape == torch.Size([]) and NonTensor().domain is None

    def test_is_in_encode(self):
        spec = NonTensor(shape=(2,))
        assert spec.is_in(spec.rand()) and spec.is_in("anything")
        assert not spec.is_in(NonTensor(shape=(3,)).rand())
        with pytest.raises(AssertionError, match="batch size ending with"):
            spec.assert_is_in(NonTensor(shape=(3,)).rand())
        wrapped = spec.encode("text")
        assert isinstance(wrapped, NonTensorData) and wrapped.data == "text"
        assert spec.encode(wrapped) is wrapped
        assert spec.project("x") == "x"
        assert spec.to_numpy(wrapped) == "text"

    def test_shape_ops_eq(self):
        spec = NonTensor(example_data=1)
        assert spec.expand(3).shape == (3,) and spec.expand(3).rand().batch_size == (3,)
        assert spec.unsqueeze(0).shape == (1,)
        assert spec == NonTensor() and spec != NonTensor(shape=(1,))
        assert spec.to(META).device == META


LEAVES = [
    pytest.param(lambda: Unbounded(shape=(2, 3)), id="Unbounded"),
    pytest.param(lambda: Unbounded(shape=(2, 3), dtype=torch.int16), id="UnboundedInt"),
    pytest.param(
        lambda: Bounded(torch.zeros(2, 3), torch.arange(1.0, 7.0).view(2, 3)), id="Bounded"
    ),
    pytest.param(lambda: Bounded(-5, 5, shape=(2, 3), dtype=torch.int32), id="BoundedInt"),
    pytest.param(
        lambda: Categorical(4, shape=(2, 3), mask=torch.tensor([True, False, True, True])),
        id="Categorical",
    ),
    pytest.param(lambda: OneHot(3, shape=(2, 3)), id="OneHot"),
    pytest.param(
        lambda: OneHot(
            3, shape=(2, 3), mask=torch.tensor([[True, False, True], [False, True, True]])
        ),
        id="OneHotMask",
    ),
    pytest.param(lambda: MultiCategorical([2, 3], shape=(2, 2)), id="MultiCategorical"),
    pytest.param(lambda: MultiOneHot([1, 2], shape=(2, 3)), id="MultiOneHot"),
    pytest.param(lambda: Binary(shape=(2, 3)), id="Binary"),
]


@pytest.mark.parametrize("make", LEAVES)
class TestCommonBehaviour:
    def test_rand_zero_one_shapes(self, make):
        spec = make()
        assert spec.is_in(spec.rand()) and spec.is_in(spec.rand((4, 1)))
        assert spec.rand(5).shape == (5, *spec.shape)
        for value in (spec.zero(), spec.one((2,))):
            assert value.dtype == spec.dtype and value.shape[-spec.ndim :] == spec.shape

    def test_expand(self, make):
        spec = make()
        expanded = spec.expand(4, *spec.shape)
        assert expanded.shape == (4, *spec.shape) and type(expanded) is type(spec)
        assert expanded.is_in(expanded.rand())
        assert spec.expand(torch.Size([4, *spec.shape])) == expanded
        assert spec.expand(4, *([-1] * spec.ndim)) == expanded
        assert expanded[0] == spec
        with pytest.raises(ValueError, match="cannot expand"):
            spec.expand(4, 7, *spec.shape[1:])
        with pytest.raises(ValueError, match="shorter"):
            spec.expand(*spec.shape[1:])

    def test_unsqueeze_squeeze(self, make):
        spec = make()
        unsq = spec.unsqueeze(0)
        assert unsq.shape == (1, *spec.shape) and unsq.is_in(unsq.rand())
        assert unsq.squeeze(0) == spec and unsq.squeeze() == spec
        assert spec.unsqueeze(1).shape == (2, 1, *spec.shape[1:])
        assert spec.squeeze(0) == spec  # not a singleton: unchanged, like torch

    def test_indexing(self, make):
        spec = make()
        assert spec[0].shape == spec.shape[1:] and spec[0].is_in(spec[0].rand())
        assert spec[1:].shape == (1, *spec.shape[1:])
        assert spec[None].shape == (1, *spec.shape)
        assert spec[torch.tensor([True, False])].shape == (1, *spec.shape[1:])
        assert spec[...].shape == spec.shape

    def test_clone_eq(self, make):
        spec = make()
        clone = spec.clone()
        assert clone == spec and clone is not spec
        for name in type(spec)._tensor_fields:
            t = getattr(spec, name)
            if t is not None:
                assert getattr(clone, name).data_ptr() != t.data_ptr()
        assert spec != spec.expand(2, *spec.shape)
        assert spec != "not a spec"
        with pytest.raises(TypeError):
            hash(spec)

    def test_to_device(self, make):
        spec = make()
        assert spec.to("cpu").device == torch.device("cpu") and spec.cpu() == spec.to("cpu")
        meta = spec.to(META)
        assert meta.device == META and meta.rand().device == META
        assert "device=meta" in repr(meta)
        assert spec.to(spec.dtype) is spec
        assert spec.to(torch.device("cpu")).to("cpu") is not None

    def test_encode_round_trip(self, make):
        spec = make()
        value = spec.rand()
        encoded = spec.encode(value.numpy())
        assert torch.equal(encoded, value) and spec.is_in(encoded)
        np.testing.assert_array_equal(spec.to_numpy(encoded), value.numpy())
        assert torch.equal(spec.encode(value.tolist()), value)

    def test_project_in_spec(self, make):
        spec = make()
        projected = spec.project(torch.randn(3, *spec.shape) * 10)
        assert spec.is_in(projected)
        valid = spec.rand()
        assert torch.equal(spec.project(valid), valid)

    def test_repr(self, make):
        spec = make()
        text = repr(spec)
        assert text.startswith(type(spec).__name__) and str(spec.dtype) in text
        assert isinstance(spec, TensorSpec)


ALIASES = {
    "CompositeSpec": "Composite",
    "UnboundedContinuousTensorSpec": "Unbounded",
    "UnboundedDiscreteTensorSpec": "UnboundedDiscrete",
    "BoundedTensorSpec": "Bounded",
    "OneHotDiscreteTensorSpec": "OneHot",
    "DiscreteTensorSpec": "Categorical",
    "MultiOneHotDiscreteTensorSpec": "MultiOneHot",
    "MultiDiscreteTensorSpec": "MultiCategorical",
    "BinaryDiscreteTensorSpec": "Binary",
    "NonTensorSpec": "NonTensor",
    "LazyStackedTensorSpec": "Stacked",
    "LazyStackedCompositeSpec": "StackedComposite",
    "UnboundedContinuous": "Unbounded",
    "BoundedContinuous": "Bounded",
}


@pytest.mark.parametrize("alias, name", ALIASES.items())
def test_aliases(alias, name, recwarn):
    assert getattr(data, alias) is getattr(data, name)
    assert getattr(specs_mod, alias) is getattr(specs_mod, name)
    assert len(recwarn) == 0


def test_alias_defaults():
    assert data.UnboundedDiscreteTensorSpec(shape=(2,)).dtype is torch.int64
    assert data.UnboundedContinuousTensorSpec(shape=(2,)).dtype is torch.float32
    assert data.DiscreteTensorSpec(3).dtype is torch.int64
    assert data.OneHotDiscreteTensorSpec(3).dtype is torch.bool


def test_every_public_name_is_exported():
    for name in specs_mod.__all__:
        assert getattr(data, name) is getattr(specs_mod, name)
