"""step_mdp, check_env_specs, exploration types and RandomPolicy."""

from __future__ import annotations

import pytest
import torch
from _envs import BrokenEnv, CountingEnv, NestedEnv, NoisyResetEnv
from tensordict import LazyStackedTensorDict, TensorDict
from tensordict.nn import InteractionType, ProbabilisticTensorDictModule, interaction_type

from torchrl.data import Categorical, Composite, OneHot, Unbounded
from torchrl.envs import (
    ExplorationType,
    RandomPolicy,
    check_env_specs,
    exploration_type,
    set_exploration_type,
    step_mdp,
)
from torchrl.envs.utils import check_entry


def _transition(batch=(2,)):
    b = torch.Size(batch)
    flag = torch.zeros(*b, 1, dtype=torch.bool)
    return TensorDict(
        observation=torch.zeros(*b, 3),
        action=torch.ones(*b, 1),
        hidden=torch.ones(*b, 4),
        done=flag.clone(),
        next=TensorDict(
            observation=torch.ones(*b, 3),
            reward=torch.ones(*b, 1),
            done=flag | True,
            terminated=flag.clone(),
            truncated=flag | True,
            batch_size=b,
        ),
        batch_size=b,
    )


class TestStepMDP:
    def test_default(self):
        td = _transition()
        out = step_mdp(td)
        assert set(out.keys()) == {"observation", "hidden", "done", "terminated", "truncated"}
        assert (out["observation"] == 1).all() and out["done"].all()
        assert out.batch_size == td.batch_size
        assert out["hidden"] is td["hidden"]  # shared, not copied

    @pytest.mark.parametrize(
        "kwargs,expected",
        [
            ({"exclude_done": True}, {"observation", "hidden"}),
            (
                {"exclude_reward": False},
                {"observation", "hidden", "reward", "done", "terminated", "truncated"},
            ),
            (
                {"exclude_action": False},
                {"observation", "hidden", "action", "done", "terminated", "truncated"},
            ),
            ({"keep_other": False}, {"observation", "done", "terminated", "truncated"}),
            (
                {"keep_other": False, "exclude_action": False},
                {"observation", "action", "done", "terminated", "truncated"},
            ),
        ],
    )
    def test_variants(self, kwargs, expected):
        assert set(step_mdp(_transition(), **kwargs).keys()) == expected

    def test_custom_keys(self):
        td = _transition()
        td["next", "r"] = td["next"].pop("reward")
        out = step_mdp(td, reward_keys="r", action_keys=["action", "hidden"])
        assert "r" not in out.keys() and "hidden" not in out.keys()

    def test_next_tensordict(self):
        dest = TensorDict(batch_size=[2])
        out = step_mdp(_transition(), next_tensordict=dest)
        assert out is dest and (dest["observation"] == 1).all()

    def test_no_next(self):
        td = _transition()
        del td["next"]
        out = step_mdp(td)
        assert set(out.keys()) == {"observation", "hidden", "done"}

    def test_nested(self):
        g = (2, 3)
        td = TensorDict(
            agents=TensorDict(
                observation=torch.zeros(*g, 2),
                action=torch.ones(*g, 1),
                memory=torch.ones(*g, 5),
                batch_size=g,
            ),
            next=TensorDict(
                agents=TensorDict(
                    observation=torch.ones(*g, 2), reward=torch.ones(*g, 1), batch_size=g
                ),
                batch_size=[2],
            ),
            batch_size=[2],
        )
        out = step_mdp(td, reward_keys=("agents", "reward"), action_keys=("agents", "action"))
        assert set(out.keys(True, True)) == {("agents", "observation"), ("agents", "memory")}
        assert out["agents"].batch_size == torch.Size(g)
        assert (out["agents", "observation"] == 1).all()
        # The result's nested TensorDicts are new objects: writing there leaves td untouched.
        out["agents", "new"] = torch.zeros(*g)
        assert "new" not in td["agents"].keys()
        out = step_mdp(td, keep_other=False, exclude_action=False, action_keys=("agents", "action"))
        assert set(out.keys(True, True)) == {
            ("agents", "observation"),
            ("agents", "action"),
            ("agents", "reward"),
        }

    def test_lazy_stacked_input(self):
        td = LazyStackedTensorDict.lazy_stack([_transition(()), _transition(())], 0)
        out = step_mdp(td)
        assert out.batch_size == torch.Size([2])
        assert (out["observation"] == 1).all()


class TestCheckEnvSpecs:
    @pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
    def test_good_envs(self, batch):
        check_env_specs(CountingEnv(batch_size=batch, max_steps=2))
        check_env_specs(NoisyResetEnv(batch_size=batch, max_steps=2), return_contiguous=False)
        check_env_specs(NestedEnv(batch_size=batch, max_steps=2), seed=0)
        check_env_specs(BrokenEnv(None, batch_size=batch))

    @pytest.mark.parametrize(
        "bug,pattern",
        [
            ("dtype", r"'observation' has dtype torch.float64 but its spec expects torch.float32"),
            ("shape", r"'observation' has shape \(3, 4\) but its spec expects \(3, 3\)"),
            ("missing", r"key 'extra' is declared in env.full_observation_spec .* missing"),
            ("undeclared", r"key 'extra' came out of the env .* no spec declares it"),
            ("range", r"'bounded' is out of its spec"),
            ("reward_shape", r"'reward' has shape \(3,\) but its spec expects \(3, 1\)"),
        ],
    )
    def test_broken_envs(self, bug, pattern):
        with pytest.raises(ValueError, match=pattern):
            check_env_specs(BrokenEnv(bug))

    def test_batched_broken_env(self):
        with pytest.raises(ValueError, match=r"'observation' has shape \(2, 3, 4\)"):
            check_env_specs(BrokenEnv("shape", batch_size=[2]))

    def test_message_names_spec(self):
        with pytest.raises(ValueError, match="Unbounded"):
            check_env_specs(BrokenEnv("dtype"))

    def test_check_dtype_false(self):
        check_env_specs(BrokenEnv("dtype"), check_dtype=False)

    def test_seed_and_tensordict(self):
        env = CountingEnv(max_steps=10)
        check_env_specs(env, seed=4, tensordict=TensorDict())
        assert env.seeds == [4]

    def test_check_entry(self):
        spec = Unbounded(shape=(2, 3))
        check_entry("x", "k", spec, torch.zeros(2, 5, 3), 1, (5,))
        with pytest.raises(
            ValueError, match=r"'k' has shape \(2, 3\) but its spec expects \(2, 5, 3\)"
        ):
            check_entry("x", "k", spec, torch.zeros(2, 3), 1, (5,))
        with pytest.raises(ValueError, match="should be a tensor"):
            check_entry("x", "k", spec, TensorDict(), 1)


class TestExploration:
    def test_alias(self):
        assert ExplorationType is InteractionType
        for name in ("RANDOM", "MODE", "MEAN", "DETERMINISTIC"):
            assert hasattr(ExplorationType, name)

    def test_context_manager(self):
        assert exploration_type() is None
        with set_exploration_type(ExplorationType.RANDOM):
            assert exploration_type() is ExplorationType.RANDOM
            assert interaction_type() is InteractionType.RANDOM
            with set_exploration_type("mode"):
                assert exploration_type() is ExplorationType.MODE
            assert exploration_type() is ExplorationType.RANDOM
        assert exploration_type() is None

    def test_decorator(self):
        @set_exploration_type(ExplorationType.MEAN)
        def f():
            return exploration_type()

        assert f() is ExplorationType.MEAN
        assert exploration_type() is None

    def test_drives_tensordict_modules(self):
        module = ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=torch.distributions.Normal,
        )
        td = TensorDict(loc=torch.zeros(100), scale=torch.ones(100))
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            assert (module(td.clone())["action"] == 0).all()
        with set_exploration_type(ExplorationType.RANDOM):
            assert (module(td.clone())["action"] != 0).any()

    def test_bad_type(self):
        with pytest.raises(ValueError):
            set_exploration_type("nonsense")


class TestRandomPolicy:
    def test_leaf(self):
        spec = Categorical(3, shape=(4,))
        td = RandomPolicy(spec)(TensorDict(batch_size=[4]))
        assert spec.is_in(td["action"])

    def test_composite(self):
        spec = Composite(
            a=Categorical(3, shape=(2,)),
            b=Composite(c=Unbounded(shape=(2, 5)), shape=(2,)),
            shape=(2,),
        )
        td = RandomPolicy(spec)(TensorDict(batch_size=[2]))
        assert td["b", "c"].shape == torch.Size([2, 5])

    def test_masked_categorical(self):
        spec = Categorical(5, shape=(1000,))
        mask = torch.zeros(1000, 5, dtype=torch.bool)
        mask[:, 1] = mask[:, 3] = True
        td = RandomPolicy(spec)(TensorDict(action_mask=mask, batch_size=[1000]))
        values = set(td["action"].tolist())
        assert values == {1, 3}
        assert td["action"].dtype == spec.dtype

    def test_masked_one_hot(self):
        spec = OneHot(4, shape=(50, 4))
        mask = torch.tensor([True, False, False, True]).expand(50, 4)
        td = RandomPolicy(spec, mask_key="m")(TensorDict(m=mask, batch_size=[50]))
        assert td["action"].shape == torch.Size([50, 4])
        assert (td["action"][:, 1:3] == 0).all() and (td["action"].sum(-1) == 1).all()

    def test_env_action_spec(self):
        env = CountingEnv(batch_size=[3], max_steps=100)
        r = env.rollout(4, policy=RandomPolicy(env.action_spec))
        assert r["action"].shape == torch.Size([3, 4, 1])
        assert "RandomPolicy" in repr(RandomPolicy(env.action_spec))
