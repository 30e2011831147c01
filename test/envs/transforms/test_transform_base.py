"""Transform, Compose and TransformedEnv: keys, errors, specs, parent/container, inverse, resets."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from envs.transforms.transform_envs import AgentsEnv, CountEnv
from tensordict import TensorDict

from torchrl import set_auto_unwrap_transformed_env
from torchrl.data import Unbounded
from torchrl.envs import PendulumEnv, check_env_specs
from torchrl.envs.transforms import (
    Compose,
    ObservationTransform,
    RewardSum,
    StepCounter,
    Transform,
    TransformedEnv,
)


class AddOne(ObservationTransform):
    def _apply_transform(self, value):
        return value + 1

    def _inv_apply_transform(self, value):
        return value - 1

    def transform_observation_spec(self, observation_spec):
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            if in_key in observation_spec:
                observation_spec[out_key] = observation_spec[in_key].clone()
        return observation_spec


class Tag(Transform):
    """Records the order in which hooks run."""

    def __init__(self, name, log):
        super().__init__()
        self.name = name
        self.log = log

    def _step(self, tensordict, next_tensordict):
        self.log.append(("step", self.name))
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        self.log.append(("reset", self.name))
        return tensordict_reset

    def _inv_call(self, tensordict):
        self.log.append(("inv", self.name))
        return tensordict


# ---------------------------------------------------------------------------------------- keys
class TestKeys:
    def test_normalization(self):
        t = AddOne(in_keys="a")
        assert t.in_keys == ["a"] and t.out_keys == ["a"]
        t = AddOne(in_keys=("a", "b"))  # a tuple is one nested key
        assert t.in_keys == [("a", "b")]
        t = AddOne(in_keys=[("a", ("b", "c")), ("d",)])
        assert t.in_keys == [("a", "b", "c"), "d"]
        t.out_keys = ["x", "y"]
        assert t.out_keys == ["x", "y"]

    def test_length_mismatch(self):
        with pytest.raises(ValueError, match="same length"):
            AddOne(in_keys=["a", "b"], out_keys=["c"])
        with pytest.raises(ValueError, match="same length"):
            AddOne(in_keys_inv=["a"], out_keys_inv=["b", "c"])

    def test_bad_key(self):
        with pytest.raises(TypeError, match="key"):
            AddOne(in_keys=[3])

    def test_missing_key_names_key_and_transform(self):
        t = AddOne(in_keys=["obs"])
        with pytest.raises(KeyError, match=r"AddOne: the input key 'obs' is missing"):
            t(TensorDict(other=torch.zeros(1)))

    def test_missing_inverse_key(self):
        t = AddOne(in_keys_inv=["action"])
        with pytest.raises(KeyError, match="AddOne.*'action'"):
            t.inv(TensorDict(other=torch.zeros(1)))

    def test_forward_nested(self):
        td = TensorDict(agents=TensorDict(obs=torch.zeros(2, 3), batch_size=[2]))
        out = AddOne(in_keys=[("agents", "obs")], out_keys=[("agents", "new")])(td)
        assert (out["agents", "new"] == 1).all()
        assert (out["agents", "obs"] == 0).all()

    def test_not_implemented(self):
        with pytest.raises(NotImplementedError, match="_apply_transform"):
            Transform(in_keys=["a"])(TensorDict(a=torch.zeros(1)))


# ------------------------------------------------------------------------------------- inverse
class TestInverse:
    def test_inv_copies(self):
        t = AddOne(in_keys_inv=["action"], out_keys_inv=["action"])
        td = TensorDict(action=torch.ones(2))
        out = t.inv(td)
        assert out is not td
        assert (out["action"] == 0).all() and (td["action"] == 1).all()

    def test_inv_nested_does_not_write_through(self):
        t = AddOne(in_keys_inv=[("agents", "action")])
        td = TensorDict(agents=TensorDict(action=torch.ones(2)))
        out = t.inv(td)
        assert (out["agents", "action"] == 0).all()
        assert (td["agents", "action"] == 1).all()

    def test_no_inverse_returns_input(self):
        t = AddOne(in_keys=["a"])
        td = TensorDict(a=torch.ones(1))
        assert t.inv(td) is td
        assert Compose(AddOne(in_keys=["a"])).inv(td) is td

    def test_env_action_untouched(self):
        base = PendulumEnv(seed=0)
        env = TransformedEnv(base, AddOne(in_keys_inv=["action"]))
        td = env.reset()
        td["action"] = torch.full((1,), 0.5)
        out = env.step(td)
        assert out["action"].item() == 0.5  # the user's action is kept


# ------------------------------------------------------------------------------------- Compose
class TestCompose:
    def test_order(self):
        log = []
        env = TransformedEnv(CountEnv(), Compose(Tag("a", log), Tag("b", log)))
        env.rollout(1)
        assert log == [
            ("reset", "a"),
            ("reset", "b"),
            ("inv", "b"),
            ("inv", "a"),
            ("step", "a"),
            ("step", "b"),
        ]

    def test_list_and_indexing(self):
        a, b, c = AddOne(in_keys=["x"]), AddOne(in_keys=["y"]), AddOne(in_keys=["z"])
        compose = Compose([a, b, c])
        assert len(compose) == 3 and compose[1] is b and list(compose) == [a, b, c]
        view = compose[1:]
        assert isinstance(view, Compose) and list(view) == [b, c]
        assert b.container is None and b._container() is compose  # the view does not adopt

    def test_rejects_non_transform(self):
        with pytest.raises(TypeError, match="Transform"):
            Compose(lambda td: td)

    def test_append_insert(self):
        compose = Compose(AddOne(in_keys=["x"]))
        compose.append(AddOne(in_keys=["x"]))
        compose.insert(0, AddOne(in_keys=["x"], out_keys=["y"]))
        out = compose(TensorDict(x=torch.zeros(1)))
        assert out["x"].item() == 2 and out["y"].item() == 1

    def test_forward_module(self):
        compose = Compose(AddOne(in_keys=["x"]), AddOne(in_keys=["x"]))
        assert compose(TensorDict(x=torch.zeros(1)))["x"].item() == 2

    def test_nested_compose_in_env(self):
        env = TransformedEnv(
            PendulumEnv(seed=0), Compose(Compose(StepCounter(3)), Compose(RewardSum()))
        )
        check_env_specs(env)
        assert env.rollout(10).shape == torch.Size([3])


# ---------------------------------------------------------------------------- container/parent
class TestParent:
    def test_parent_chain(self):
        base = CountEnv()
        t0, t1 = AddOne(in_keys=["observation"]), AddOne(in_keys=["observation"], out_keys=["o2"])
        env = TransformedEnv(base, Compose(t0, t1))
        assert t0.container is env and t1.container is env
        assert t0.parent.base_env is base and len(t0.parent.transform) == 0
        p1 = t1.parent
        assert len(p1.transform) == 1 and p1.transform[0] is t0
        assert "o2" not in p1.observation_spec.keys() and "o2" in env.observation_spec.keys()
        assert t1.parent is p1  # cached

    def test_parent_outside_env(self):
        assert AddOne(in_keys=["a"]).parent is None
        assert Compose(AddOne(in_keys=["a"]))[0].parent is None

    def test_nested_compose_parent(self):
        a, b, c = (AddOne(in_keys=["observation"]) for _ in range(3))
        env = TransformedEnv(CountEnv(), Compose(a, Compose(b, c)))
        assert [t for t in c.parent.transform] == [a, b]
        assert c.container is env

    def test_reuse_raises_then_clone(self):
        t = StepCounter()
        first = TransformedEnv(CountEnv(), t)
        with pytest.raises(AttributeError, match="clone"):
            TransformedEnv(CountEnv(), t)
        other = TransformedEnv(CountEnv(), t.clone())
        check_env_specs(other)
        del first  # a transform whose env is gone can be used again
        check_env_specs(TransformedEnv(CountEnv(), t))

    def test_parent_cache_cleared_on_append(self):
        t = StepCounter()
        env = TransformedEnv(CountEnv(), t)
        p = t.parent
        env.insert_transform(0, RewardSum())
        assert t.parent is not p and len(t.parent.transform) == 1


# ---------------------------------------------------------------------------- TransformedEnv
class TestTransformedEnv:
    def test_specs_recomputed_on_append_insert(self):
        env = TransformedEnv(CountEnv(batch_size=[2]))
        assert "step_count" not in env.observation_spec.keys()
        env.append_transform(StepCounter())
        assert "step_count" in env.observation_spec.keys()
        env.insert_transform(0, RewardSum())
        assert "episode_reward" in env.observation_spec.keys()
        assert isinstance(env.transform[0], RewardSum)
        check_env_specs(env)

    def test_spec_setters_raise(self):
        env = TransformedEnv(CountEnv())
        with pytest.raises(AttributeError, match="base_env"):
            env.observation_spec = Unbounded(shape=(1,))
        with pytest.raises(AttributeError, match="base_env"):
            env.action_spec = Unbounded(shape=(1,))

    def test_base_spec_change_with_empty_cache(self):
        base = CountEnv()
        env = TransformedEnv(base, StepCounter())
        base.observation_spec["extra"] = Unbounded(shape=(2,))
        base.observation_spec = base.observation_spec
        assert "extra" not in env.observation_spec.keys()
        env.empty_cache()
        assert "extra" in env.observation_spec.keys()

    def test_cache_specs_false(self):
        base = CountEnv()
        env = TransformedEnv(base, StepCounter(), cache_specs=False)
        base.observation_spec["extra"] = Unbounded(shape=(2,))
        assert "extra" in env.observation_spec.keys()

    def test_assign_transform(self):
        env = TransformedEnv(CountEnv())
        env.transform = StepCounter()
        assert isinstance(env.transform, StepCounter)  # kept bare, as given
        assert "step_count" in env.observation_spec.keys()
        check_env_specs(env)

    def test_single_transform_stays_bare(self):
        t = StepCounter()
        env = TransformedEnv(CountEnv(), t)
        assert env.transform is t and t.container is env
        env.append_transform(RewardSum())
        assert isinstance(env.transform, Compose) and env.transform[0] is t
        compose_env = TransformedEnv(CountEnv(), Compose(StepCounter()))
        assert isinstance(compose_env.transform, Compose)

    def test_type_errors(self):
        with pytest.raises(TypeError, match="EnvBase"):
            TransformedEnv(object())
        with pytest.raises(TypeError, match="Transform"):
            TransformedEnv(CountEnv(), transform=lambda td: td)

    @pytest.mark.parametrize("unwrap", [True, False])
    def test_nested_transformed_env(self, unwrap):
        base = CountEnv(batch_size=[3], max_steps=[2, 3, 4])
        counter, summer = StepCounter(), RewardSum()
        inner = TransformedEnv(base, counter)
        with set_auto_unwrap_transformed_env(unwrap):
            outer = TransformedEnv(inner, summer)
        check_env_specs(outer)
        r = outer.rollout(6, break_when_any_done=False)
        assert r["next", "step_count"][1].squeeze(-1).tolist() == [1, 2, 3, 1, 2, 3]
        assert "episode_reward" in r["next"].keys()
        if unwrap:  # TorchRL's default: one env holding both transforms, in order
            assert outer.base_env is base
            assert list(outer.transform) == [counter, summer]
            assert counter.container is outer
        else:
            assert outer.base_env is inner
        explicit = TransformedEnv(TransformedEnv(CountEnv(), StepCounter()), auto_unwrap=False)
        assert isinstance(explicit.base_env, TransformedEnv)

    def test_seed_delegates(self):
        base = CountEnv()
        env = TransformedEnv(base, StepCounter())
        assert env.set_seed(3) == base.set_seed(3)
        assert base.seeds[-2:] == [3, 3]

    def test_close(self):
        base = CountEnv()
        env = TransformedEnv(base)
        env.close()
        assert base.is_closed

    def test_to_cpu(self):
        env = TransformedEnv(PendulumEnv(seed=0), StepCounter())
        assert env.to("cpu") is env
        assert env.full_observation_spec["step_count"].device == torch.device("cpu")

    def test_deepcopy_and_pickle(self):
        env = TransformedEnv(CountEnv(batch_size=[2]), Compose(StepCounter(3), RewardSum()))
        for other in (copy.deepcopy(env), pickle.loads(pickle.dumps(env))):
            assert other.transform[0].container is other
            assert other.transform[1].parent.transform[0] is other.transform[0]
            check_env_specs(other)

    def test_repr(self):
        env = TransformedEnv(CountEnv(), StepCounter(4))
        assert "StepCounter(max_steps=4" in repr(env)

    def test_partial_reset_stateless_transform(self):
        # A transform applied to all reset outputs keeps the sub-envs that were not reset.
        env = TransformedEnv(PendulumEnv(batch_size=[3], seed=0), AddOne(in_keys=["observation"]))
        td = env.reset()
        before = td["observation"].clone()
        td["_reset"] = torch.tensor([[False], [True], [False]])
        td = env.reset(td)
        assert torch.equal(td["observation"][[0, 2]], before[[0, 2]])
        assert not torch.equal(td["observation"][1], before[1])

    def test_step_and_maybe_reset(self):
        env = TransformedEnv(CountEnv(batch_size=[2], max_steps=[2, 3]), StepCounter())
        td = env.reset()
        counts = []
        for _ in range(4):
            td = env.rand_action(td)
            _, td = env.step_and_maybe_reset(td)
            counts.append(td["step_count"].squeeze(-1).tolist())
        assert counts == [[1, 1], [0, 2], [1, 0], [0, 1]]

    def test_nested_keys_env(self):
        env = TransformedEnv(
            AgentsEnv(batch_size=[2]),
            AddOne(in_keys=[("agents", "observation")], out_keys=[("agents", "obs1")]),
        )
        check_env_specs(env)
        r = env.rollout(2)
        assert torch.equal(r["agents", "obs1"], r["agents", "observation"] + 1)


class TestBatchedEnvs:
    """Transforms outside and inside a SerialEnv whose sub-envs end at different times."""

    kwargs = [{"max_steps": 2}, {"max_steps": 3}]

    def _transforms(self):
        from torchrl.envs.transforms import CatFrames, InitTracker

        return Compose(
            StepCounter(), RewardSum(), InitTracker(), CatFrames(2, -1, in_keys=["observation"])
        )

    def _check(self, env):
        check_env_specs(env)
        r = env.rollout(6, break_when_any_done=False)
        assert r["next", "step_count"].squeeze(-1).tolist() == [
            [1, 2, 1, 2, 1, 2],
            [1, 2, 3, 1, 2, 3],
        ]
        assert r["is_init"].squeeze(-1).tolist() == [
            [True, False, True, False, True, False],
            [True, False, False, True, False, False],
        ]
        assert r["observation"][1].tolist() == [[0, 0], [0, 1], [1, 2], [0, 0], [0, 1], [1, 2]]

    def test_outside(self):
        from torchrl.envs import SerialEnv

        self._check(
            TransformedEnv(
                SerialEnv(2, CountEnv, create_env_kwargs=self.kwargs), self._transforms()
            )
        )

    def test_inside(self):
        from torchrl.envs import SerialEnv

        fns = [
            lambda kw=kw: TransformedEnv(CountEnv(**kw), self._transforms()) for kw in self.kwargs
        ]
        self._check(SerialEnv(2, fns))
