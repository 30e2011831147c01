"""Composite specs and stacking (plain stacks of equal specs, lazy Stacked/StackedComposite)."""

import numpy as np
import pytest
import torch
from tensordict import LazyStackedTensorDict, NonTensorData, TensorDict

from torchrl.data import (
    Bounded,
    Categorical,
    Composite,
    CompositeSpec,
    MultiOneHot,
    NonTensor,
    OneHot,
    Stacked,
    StackedComposite,
    Unbounded,
    UnboundedContinuousTensorSpec,
    stack_specs,
)

META = torch.device("meta")


def make_spec(shape=()):
    b = tuple(shape)
    return Composite(
        observation=Unbounded(shape=(*b, 4)),
        action=Bounded(-1.0, 1.0, shape=(*b, 2)),
        next=Composite(
            reward=Unbounded(shape=(*b, 1)),
            done=Categorical(2, shape=(*b, 1), dtype=torch.bool),
            shape=b,
        ),
        shape=b,
    )


def test_paper_appendix_c_example():
    spec = CompositeSpec(obs=UnboundedContinuousTensorSpec(shape=(3, 4)), shape=(3,), device="cpu")
    td = spec.rand()
    assert isinstance(td, TensorDict)
    assert td.batch_size == torch.Size([3])
    assert td["obs"].shape == (3, 4) and td.device == torch.device("cpu")
    assert "batch_size=[3]" in repr(td) or "batch_size=torch.Size([3])" in repr(td)


class TestConstruction:
    def test_kwargs_dict_and_nested_dicts(self):
        a = Composite(x=Unbounded(2), sub={"y": Categorical(3), "deeper": {"z": OneHot(2)}})
        b = Composite({"x": Unbounded(2), ("sub", "y"): Categorical(3)})
        b["sub", "deeper", "z"] = OneHot(2)
        assert isinstance(a["sub"], Composite) and isinstance(a["sub", "deeper"], Composite)
        assert a == b
        assert Composite(a) == a  # from another Composite
        assert Composite().shape == torch.Size([]) and Composite().device is None
        with pytest.raises(TypeError, match="at most one dict"):
            Composite({}, {})
        with pytest.raises(TypeError, match="must be a TensorSpec"):
            Composite(x=torch.zeros(3))

    def test_shape_must_prefix_leaves(self):
        with pytest.raises(ValueError, match=r"key 'obs' has shape \(3,\).*batch shape \(4,\)"):
            Composite(obs=Unbounded(3), shape=(4,))
        spec = Composite(shape=(2,))
        with pytest.raises(ValueError, match="key 'x'"):
            spec["x"] = Unbounded(3)
        spec["x"] = Unbounded((2, 3))
        with pytest.raises(ValueError, match="key 'x'"):
            spec.shape = (3,)
        spec.shape = (2, 3)
        assert spec.shape == (2, 3) and spec.ndim == 2
        spec.shape = ()
        assert spec.shape == ()

    def test_device(self):
        spec = Composite(x=Unbounded(3), device="cpu")
        assert spec["x"].device == torch.device("cpu")  # device-less leaves take the device
        assert spec.device == torch.device("cpu")
        with pytest.raises(ValueError, match=r"key 'y' is on meta.*Composite is on cpu"):
            spec["y"] = Unbounded(3, device="meta")
        mixed = Composite(a=Unbounded(1, device="meta"), b=Unbounded(1, device="cpu"))
        assert mixed.device is None

    def test_dtype(self):
        assert Composite(a=Unbounded(1), b=Bounded(0, 1, shape=(2,))).dtype is torch.float32
        assert make_spec().dtype is None


class TestDictInterface:
    def test_getitem(self):
        spec = make_spec()
        reward = spec["next"]["reward"]
        assert spec["next", "reward"] is reward and spec[("next", "reward")] is reward
        assert spec[("next", ("reward",))] is reward
        with pytest.raises(
            KeyError, match=r"key 'nope' is not in the Composite \(keys: \['observation'"
        ):
            spec["nope"]
        with pytest.raises(KeyError, match=r"\('next', 'nope'\) is missing"):
            spec["next", "nope"]
        with pytest.raises(KeyError, match="is a leaf"):
            spec["observation", "x"]

    def test_setitem_del_pop(self):
        spec = make_spec()
        spec["a", "b", "c"] = Unbounded(1)
        assert isinstance(spec["a", "b"], Composite) and ("a", "b", "c") in spec
        assert spec.set("z", Unbounded(1)) is spec
        del spec["a", "b", "c"]
        assert ("a", "b", "c") not in spec and ("a", "b") in spec
        del spec["a"]
        assert "a" not in spec
        with pytest.raises(KeyError):
            del spec["a"]
        assert spec.pop("z") == Unbounded(1) and spec.pop("z", None) is None
        with pytest.raises(KeyError):
            spec.pop("z")
        with pytest.raises(KeyError, match="is a leaf"):
            spec["observation", "x"] = Unbounded(1)
        with pytest.raises(TypeError, match="keys are strings"):
            spec[1, "a"] = Unbounded(1)

    def test_contains_len_iter_get(self):
        spec = make_spec()
        assert "next" in spec and ("next", "done") in spec
        assert ("next", "nope") not in spec and ("observation", "x") not in spec
        assert 3 not in spec
        assert len(spec) == 3 and list(spec) == ["observation", "action", "next"]
        assert spec.get("nope", None) is None and spec.get(("next", "done")) is spec["next", "done"]
        with pytest.raises(KeyError):
            spec.get("nope")

    def test_keys_items_values(self):
        spec = make_spec()
        assert list(spec.keys()) == ["observation", "action", "next"]
        assert spec.keys(include_nested=True) == [
            "observation",
            "action",
            "next",
            ("next", "reward"),
            ("next", "done"),
        ]
        assert spec.keys(True, True) == [
            "observation",
            "action",
            ("next", "reward"),
            ("next", "done"),
        ]
        assert spec.keys(leaves_only=True) == ["observation", "action"]
        assert [k for k, _ in spec.items(True, True)] == spec.keys(True, True)
        assert spec.values(True, True)[-1] is spec["next", "done"]
        assert list(spec.values())[0] is spec["observation"]
        assert dict(spec.items())["next"] is spec["next"]

    def test_update(self):
        spec = make_spec()
        other = Composite(
            next=Composite(truncated=Categorical(2, (1,), dtype=torch.bool)), extra=Unbounded(1)
        )
        assert spec.update(other) is spec
        assert ("next", "reward") in spec and ("next", "truncated") in spec and "extra" in spec
        spec.update({"extra": Bounded(0, 1, shape=(1,)), ("next", "reward"): Unbounded(2)})
        assert isinstance(spec["extra"], Bounded) and spec["next", "reward"].shape == (2,)

    def test_select_exclude_empty(self):
        spec = make_spec((2,))
        selected = spec.select("observation", ("next", "done"))
        assert selected.keys(True, True) == ["observation", ("next", "done")]
        assert selected["next"].shape == (2,)
        with pytest.raises(KeyError):
            spec.select("nope")
        assert spec.select("nope", "action", strict=False).keys() == {"action"}
        excluded = spec.exclude("action", ("next", "reward"), "not-there")
        assert excluded.keys(True, True) == ["observation", ("next", "done")]
        assert ("next", "reward") in spec  # the original is untouched
        empty = spec.empty()
        assert empty.is_empty() and empty.shape == spec.shape and len(empty) == 0
        assert not spec.is_empty()
        hollow = Composite(a=Composite(b=Composite()))
        assert not hollow.is_empty() and hollow.is_empty(recurse=True)


class TestValues:
    @pytest.mark.parametrize("lead", [(), (5,), (2, 3)])
    def test_rand_zero_one(self, lead):
        spec = make_spec((4,))
        for method in ("rand", "zero", "one"):
            td = getattr(spec, method)(lead)
            assert isinstance(td, TensorDict)
            assert td.batch_size == (*lead, 4) and td["next"].batch_size == (*lead, 4)
            assert td["observation"].shape == (*lead, 4, 4)
        assert spec.is_in(spec.rand(lead)) and spec.is_in(spec.zero(lead))
        assert Composite(shape=(3,)).rand().batch_size == (3,)

    def test_device_of_values(self):
        td = make_spec().to(META).rand()
        assert td.device == META and td["observation"].device == META

    def test_non_tensor_entry(self):
        spec = Composite(text=NonTensor(example_data="hi"), x=Unbounded(1))
        td = spec.rand()
        assert td["text"] == "hi" and isinstance(td.get("text"), NonTensorData)
        assert spec.is_in(td)

    def test_is_in_failures(self):
        spec = make_spec((2,))
        td = spec.rand()
        assert spec.is_in(td) and spec.is_in(td.to_dict())
        bad_dtype = td.clone()
        bad_dtype["next", "reward"] = torch.zeros(2, 1, dtype=torch.float64)
        with pytest.raises(
            AssertionError,
            match=r"key \('next', 'reward'\) does not fit its spec Unbounded.*wrong dtype: expected "
            r"torch.float32, got torch.float64",
        ):
            spec.assert_is_in(bad_dtype)
        bad_shape = td.clone()
        bad_shape["observation"] = torch.zeros(2, 5)
        with pytest.raises(AssertionError, match=r"key 'observation'.*\(2, 4\).*\(2, 5\)"):
            spec.assert_is_in(bad_shape)
        out_of_bounds = td.clone()
        out_of_bounds["action"] = torch.full((2, 2), 3.0)
        with pytest.raises(AssertionError, match=r"key 'action'.*= 3.0 is not in \[-1.0, 1.0\]"):
            spec.assert_is_in(out_of_bounds)
        missing = td.exclude(("next", "done"))
        assert not spec.is_in(missing)
        with pytest.raises(
            AssertionError, match=r"key \('next', 'done'\) is missing: its spec is Categorical"
        ):
            spec.assert_is_in(missing)
        with pytest.raises(AssertionError, match="expected a TensorDict, got a tensor"):
            spec.assert_is_in(torch.zeros(2))
        extra = td.clone().set("unknown", torch.zeros(2))
        assert spec.is_in(extra)  # keys the spec does not have are not its business

    def test_project(self):
        spec = make_spec()
        td = spec.rand()
        td["action"] = torch.tensor([5.0, -5.0])
        observation = td["observation"]
        assert spec.project(td) is td
        assert torch.equal(td["action"], torch.tensor([1.0, -1.0]))
        assert td["observation"] is observation  # in-spec entries are left alone
        assert spec.is_in(td)

    def test_encode(self):
        spec = make_spec()
        td = spec.encode(
            {
                "observation": np.arange(4, dtype=np.float64),
                "action": [0.5, 0.5],
                "next": {"reward": 1.0, "done": np.bool_(True)},
            }
        )
        assert isinstance(td, TensorDict) and td.batch_size == ()
        assert td["observation"].dtype is torch.float32 and td["next", "done"].item() is True
        assert spec.encode({"observation": None}).is_empty()
        with pytest.raises(KeyError, match="'nope' is not in the Composite"):
            spec.encode({"nope": 1})

    def test_to_numpy(self):
        spec = make_spec()
        out = spec.to_numpy(spec.zero())
        assert out["next"]["reward"].dtype == np.float32 and out["observation"].shape == (4,)


class TestShapeOps:
    def test_expand(self):
        spec = make_spec()
        expanded = spec.expand(3)
        assert expanded.shape == (3,) and expanded["next", "reward"].shape == (3, 1)
        assert expanded["next"].shape == (3,) and expanded.is_in(expanded.rand())
        assert spec.expand(torch.Size([2, 3])).shape == (2, 3)
        batched = make_spec((1,))
        assert batched.expand(5).shape == (5,) and batched.expand(4, -1).shape == (4, 1)
        assert batched.expand(5)["action"].shape == (5, 2)
        with pytest.raises(ValueError, match="cannot expand"):
            make_spec((2,)).expand(3)

    def test_index(self):
        spec = make_spec((3, 2))
        assert spec[0].shape == (2,) and spec[0]["observation"].shape == (2, 4)
        assert spec[:, 1]["next", "done"].shape == (3, 1)
        assert spec[..., 0]["observation"].shape == (3, 4)
        assert spec[torch.tensor([True, False, True])].shape == (2, 2)
        with pytest.raises(IndexError):
            spec[0, 0, 0]

    def test_squeeze_unsqueeze(self):
        spec = make_spec((1, 3))
        assert spec.squeeze().shape == (3,) and spec.squeeze()["observation"].shape == (3, 4)
        assert spec.squeeze(0) == spec.squeeze() and spec.squeeze(1) == spec
        un = make_spec((3,)).unsqueeze(-1)
        assert un.shape == (3, 1) and un["action"].shape == (3, 1, 2)
        assert make_spec((3,)).unsqueeze(0)["next", "done"].shape == (1, 3, 1)
        with pytest.raises(ValueError, match="out of range"):
            make_spec((3,)).squeeze(2)

    def test_to_clone_eq(self):
        spec = make_spec((2,))
        clone = spec.clone()
        assert clone == spec and clone["next"] is not spec["next"]
        assert clone["action"].low.data_ptr() != spec["action"].low.data_ptr()
        meta = spec.to(META)
        assert meta.device == META and meta["next", "reward"].device == META
        assert spec.to("cpu").to("cpu").device == torch.device("cpu")
        double = spec.to(torch.float64)
        assert double["observation"].dtype is torch.float64
        assert double["next", "done"].dtype is torch.bool
        with pytest.raises(ValueError, match="only floating dtypes"):
            spec.to(torch.int64)
        assert spec != make_spec((3,)) and spec != spec.exclude("action")
        assert spec != Composite(**dict(spec.items()), shape=(2,), device="cpu")

    def test_repr(self):
        text = repr(make_spec())
        assert text.startswith("Composite(\n    observation: Unbounded(")
        assert "    next: Composite(\n        reward: Unbounded(" in text
        assert text.endswith("shape=torch.Size([]),\n    device=None)")


class TestStacking:
    def test_equal_specs_give_a_plain_spec(self):
        a = Bounded(0.0, 1.0, shape=(3,))
        for stacked in (
            torch.stack([a, a.clone()], 0),
            stack_specs([a, a.clone()]),
            torch.stack((a, a), dim=0),
        ):
            assert type(stacked) is Bounded and stacked.shape == (2, 3)
        assert torch.stack([a, a], 1).shape == (3, 2)
        assert torch.stack([a, a], -1).shape == (3, 2)
        oh = torch.stack([OneHot(3), OneHot(3)], -2)
        assert type(oh) is OneHot and oh.shape == (2, 3)
        comp = torch.stack([make_spec(), make_spec()], 0)
        assert (
            type(comp) is Composite and comp.shape == (2,) and comp["next", "done"].shape == (2, 1)
        )

    def test_heterogeneous_leaves(self):
        a, b = Bounded(0.0, 1.0, shape=(3,)), Bounded(5.0, 6.0, shape=(3,))
        spec = torch.stack([a, b], 0)
        assert isinstance(spec, Stacked) and spec.shape == (2, 3) and spec.dtype is torch.float32
        assert spec[0] is a and spec[1] is b and spec.specs == [a, b]
        sample = spec.rand((4,))
        assert sample.shape == (4, 2, 3) and spec.is_in(sample)
        assert (sample[:, 1] >= 5).all()
        assert not spec.is_in(torch.zeros(2, 3))
        with pytest.raises(AssertionError, match=r"stack entry 1 .*is not in \[5.0, 6.0\]"):
            spec.assert_is_in(torch.zeros(2, 3))
        with pytest.raises(AssertionError, match="expected 2 entries along the stack dim"):
            spec.assert_is_in(torch.zeros(3, 3))
        assert torch.equal(spec.project(torch.zeros(2, 3))[1], torch.full((3,), 5.0))
        assert spec.zero().shape == (2, 3) and spec.one((2,)).shape == (2, 2, 3)
        assert torch.equal(spec.encode(np.full((2, 3), 0.5))[0], torch.full((3,), 0.5))

    def test_heterogeneous_leaves_other_dim(self):
        a, b = Categorical(3, shape=(4,)), Categorical(5, shape=(4,))
        spec = torch.stack([a, b], 1)
        assert isinstance(spec, Stacked) and spec.shape == (4, 2) and spec.dim == 1
        sample = spec.rand((7,))
        assert sample.shape == (7, 4, 2) and spec.is_in(sample)
        assert spec[:, 0] == a and spec[1, 1] == b[1]
        assert isinstance(spec[0], Stacked) and spec[0].shape == (2,)
        assert spec[:2].shape == (2, 2)

    def test_heterogeneous_shapes(self):
        spec = torch.stack([Unbounded(3), Unbounded(4)], 0)
        assert spec.shape == (2, -1)
        sample = spec.rand()
        assert sample.is_nested and spec.is_in(sample)
        assert spec.is_in([torch.zeros(3), torch.zeros(4)])
        assert not spec.is_in([torch.zeros(3), torch.zeros(3)])
        assert [t.shape for t in spec.to_numpy(sample)] == [(3,), (4,)]
        with pytest.raises(ValueError, match="nested tensor along dim 0"):
            spec.rand((2,))

    def test_shape_ops(self):
        spec = torch.stack([Bounded(0, 1, shape=(3,)), Bounded(0, 2, shape=(3,))], 0)
        expanded = spec.expand(5, 2, 3)
        assert isinstance(expanded, Stacked) and expanded.shape == (5, 2, 3) and expanded.dim == 1
        assert expanded.is_in(expanded.rand())
        with pytest.raises(ValueError, match="must stay 2"):
            spec.expand(5, 3, 3)
        un = spec.unsqueeze(0)
        assert un.shape == (1, 2, 3) and un.dim == 1 and un.squeeze(0) == spec
        assert spec.unsqueeze(1).shape == (2, 1, 3) and spec.unsqueeze(1).dim == 0
        assert spec.unsqueeze(1).squeeze() == spec
        single = Stacked(Bounded(0, 1, shape=(3,)), dim=0)
        assert single.squeeze() == Bounded(0, 1, shape=(3,))
        assert spec.clone() == spec and spec.clone() is not spec
        assert spec.to(META).device == META and spec.to(META).rand().device == META
        assert spec.to(torch.float64).dtype is torch.float64
        assert spec != torch.stack([Bounded(0, 1, shape=(3,)), Bounded(0, 3, shape=(3,))], 0)
        assert "Stacked(dim=0" in repr(spec)

    def test_errors(self):
        with pytest.raises(ValueError, match="nothing to stack"):
            stack_specs([])
        with pytest.raises(ValueError, match="different kinds"):
            torch.stack([Bounded(0, 1, shape=(3,)), Unbounded(3)], 0)
        with pytest.raises(ValueError, match="different kinds"):
            torch.stack([make_spec(), Unbounded(3)], 0)
        with pytest.raises(ValueError, match="different numbers of dims"):
            torch.stack([Unbounded(3), Unbounded((1, 3))], 0)
        with pytest.raises(ValueError, match="different dtypes"):
            torch.stack([Unbounded(3), Unbounded(3, dtype=torch.float64)], 0)
        with pytest.raises(ValueError, match="different devices"):
            torch.stack([Unbounded(3), Unbounded(3, device="meta")], 0)
        with pytest.raises(ValueError, match="feature dim"):
            torch.stack([OneHot(3), OneHot(3, mask=torch.tensor([True, True, False]))], -1)
        with pytest.raises(TypeError, match="expected specs"):
            stack_specs([Unbounded(3), torch.zeros(3)])
        with pytest.raises(IndexError, match="only ints, slices"):
            torch.stack([Unbounded(3), Unbounded(4)], 0)[torch.tensor([0])]


class TestStackedComposite:
    def make(self):
        a = Composite(obs=Unbounded(3), extra=MultiOneHot([2, 2]))
        b = Composite(obs=Unbounded(4))
        return a, b, torch.stack([a, b], 0)

    def test_dict_interface(self):
        a, b, spec = self.make()
        assert isinstance(spec, StackedComposite) and spec.shape == (2,)
        assert spec[0] is a and spec[1] is b
        assert spec.keys() == ["obs"] and list(spec) == ["obs"] and len(spec) == 1
        assert "obs" in spec and "extra" not in spec
        assert spec["obs"].shape == (2, -1) and isinstance(spec["obs"], Stacked)
        assert spec.get("extra") is None
        with pytest.raises(KeyError, match="not in every stacked Composite"):
            spec["extra"]

    def test_rand_is_in(self):
        _, _, spec = self.make()
        td = spec.rand((5,))
        assert isinstance(td, LazyStackedTensorDict) and td.batch_size == (5, 2)
        assert spec.is_in(td) and spec.zero().batch_size == (2,)
        assert spec.is_in(spec.project(spec.rand()))
        bad = spec.rand()
        bad[1]["obs"] = torch.zeros(4, dtype=torch.int64)
        with pytest.raises(AssertionError, match=r"stack entry 1 .*key 'obs'.*wrong dtype"):
            spec.assert_is_in(bad)
        with pytest.raises(AssertionError, match="expected a TensorDict"):
            spec.assert_is_in(torch.zeros(2))
        encoded = spec.encode([{"obs": np.zeros(3), "extra": [0, 1]}, {"obs": np.ones(4)}])
        assert spec.is_in(encoded)
        assert spec.to_numpy(encoded)[1]["obs"].shape == (4,)

    def test_inside_a_composite(self):
        _, _, agents = self.make()
        spec = Composite(agents=agents, step=Unbounded(1))
        assert spec.keys(True, True) == [("agents", "obs"), "step"]
        assert spec["agents", "obs"].shape == (2, -1)
        td = spec.rand()
        assert spec.is_in(td)
        assert spec.select(("agents", "obs"))["agents"] is agents  # stacked entries stay whole
        td["agents"][0]["obs"] = torch.zeros(3, dtype=torch.float64)
        with pytest.raises(AssertionError, match=r"key 'agents' does not fit.*stack entry 0"):
            spec.assert_is_in(td)

    def test_shape_ops(self):
        a, b, spec = self.make()
        expanded = spec.expand(3, 2)
        assert isinstance(expanded, StackedComposite) and expanded.shape == (3, 2)
        assert expanded.rand().batch_size == (3, 2) and expanded["obs"].shape == (3, 2, -1)
        assert spec.unsqueeze(0).shape == (1, 2) and spec.clone() == spec
        assert spec.to(META)[0].device == META
        assert spec[1:] == b.unsqueeze(0)
