"""Transforms of issue 17, batch B: policy switches and skips, action sequences, macro actions,
module transforms, VecNormV2, RND, gSDE noise, vector-gym final observations, cat_frames."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch
from _envs import CountingEnv
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

import torchrl.envs as envs_pkg
import torchrl.envs.transforms as transforms_pkg
import torchrl.envs.transforms.transforms as transforms_mod
from torchrl.data import Composite, LazyTensorStorage, ReplayBuffer, Unbounded
from torchrl.envs import ParallelEnv, PendulumEnv, SerialEnv, check_env_specs, step_mdp
from torchrl.envs.transforms import (
    ConditionalPolicySwitch,
    ConditionalSkip,
    MacroAction,
    MacroPrimitive,
    MacroPrimitiveTransform,
    MeanActionSelector,
    ModuleTransform,
    MultiAction,
    RNDTransform,
    RunningMeanStd,
    StepCounter,
    TargetMacroAction,
    TransformedEnv,
    VecGymEnvTransform,
    VecNorm,
    VecNormV2,
    gSDENoise,
)
from torchrl.envs.transforms.functional import cat_frames

NAMES = [
    "ConditionalPolicySwitch",
    "ConditionalSkip",
    "MacroAction",
    "MacroPrimitive",
    "MacroPrimitiveTransform",
    "MeanActionSelector",
    "ModuleTransform",
    "MultiAction",
    "RNDTransform",
    "RunningMeanStd",
    "TargetMacroAction",
    "VecGymEnvTransform",
    "VecNormV2",
    "gSDENoise",
]


@pytest.mark.parametrize("name", NAMES)
def test_exported_everywhere(name: str) -> None:
    obj = getattr(transforms_pkg, name)
    assert getattr(envs_pkg, name) is obj
    assert getattr(transforms_mod, name) is obj
    assert name in transforms_pkg.__all__ and name in envs_pkg.__all__


def _zero_action(td: TensorDictBase) -> TensorDictBase:
    return td.set("action", torch.zeros(*td.batch_size, 1))


# ------------------------------------------------------------------ ConditionalPolicySwitch
class TestConditionalPolicySwitch:
    def test_inner_policy_plays_odd_steps(self) -> None:
        seen: list[int] = []

        def inner(td: TensorDictBase) -> TensorDictBase:
            seen.append(int(td["step_count"]))
            return _zero_action(td)

        env = TransformedEnv(PendulumEnv(seed=0), StepCounter())
        env.append_transform(ConditionalPolicySwitch(inner, lambda td: td["step_count"] % 2 == 1))
        r = env.rollout(4)
        # The outer policy sees even counts only; the inner one played after each outer step.
        assert r["step_count"].squeeze(-1).tolist() == [0, 2, 4, 6]
        assert r["next", "step_count"].squeeze(-1).tolist() == [2, 4, 6, 8]
        assert seen == [1, 3, 5, 7]
        check_env_specs(env)

    def test_plays_after_reset_and_stops_on_done(self) -> None:
        # CountingEnv ends after 3 steps; the inner policy acts while the count is odd.
        env = TransformedEnv(CountingEnv(max_steps=3), StepCounter())
        env.append_transform(
            ConditionalPolicySwitch(
                lambda td: td.set("action", torch.ones(1, dtype=torch.int64)),
                lambda td: td["step_count"] % 2 == 1,
            )
        )
        r = env.rollout(10)
        assert r["next", "step_count"].squeeze(-1).tolist() == [2, 3]
        assert bool(r["next", "done"][-1])

    def test_condition_at_reset(self) -> None:
        env = TransformedEnv(PendulumEnv(seed=0), StepCounter())
        env.append_transform(
            ConditionalPolicySwitch(_zero_action, lambda td: td["step_count"] % 2 == 0)
        )
        # The inner policy moves first: the outer one starts at step 1.
        assert int(env.reset()["step_count"]) == 1

    def test_errors(self) -> None:
        with pytest.raises(TypeError, match="callables"):
            ConditionalPolicySwitch(_zero_action, None)  # type: ignore[arg-type]
        t = ConditionalPolicySwitch(_zero_action, lambda td: True)
        with pytest.raises(RuntimeError, match="TransformedEnv"):
            t(TensorDict(observation=torch.zeros(3)))
        env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), StepCounter())
        env.append_transform(
            ConditionalPolicySwitch(_zero_action, lambda td: torch.tensor([True, False]))
        )
        with pytest.raises(ValueError, match="some sub-envs"):
            env.reset()
        env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0))
        env.append_transform(ConditionalPolicySwitch(_zero_action, lambda td: torch.ones(3) > 0))
        with pytest.raises(ValueError, match="batch shape"):
            env.reset()


# --------------------------------------------------------------------------- ConditionalSkip
class TestConditionalSkip:
    def test_skipped_steps_keep_the_state(self) -> None:
        env = TransformedEnv(
            PendulumEnv(seed=0), ConditionalSkip(lambda td: td["step_count"] % 2 == 1)
        )
        env.append_transform(StepCounter())
        r = env.rollout(6)
        for t in range(6):
            same = bool((r["next", "th"][t] == r["th"][t]).all())
            assert same == (t % 2 == 1), t
            if t % 2 == 1:
                assert float(r["next", "reward"][t]) == 0.0
        check_env_specs(env)

    def test_batched_partial_skip(self) -> None:
        env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0))
        env.append_transform(ConditionalSkip(lambda td: torch.tensor([True, False])))
        td = env.reset()
        td["action"] = torch.ones(2, 1)
        out = env.step(td)["next"]
        assert bool((out["th"][0] == td["th"][0]).all())
        assert not bool((out["th"][1] == td["th"][1]).all())

    def test_stateful_env(self) -> None:
        # A single stateful env is skipped without stepping: its count stays.
        base = CountingEnv()
        env = TransformedEnv(base, ConditionalSkip(lambda td: True))
        td = env.reset().set("action", torch.ones(1, dtype=torch.int64))
        out = env.step(td)
        assert int(base.count) == 0 and float(out["next", "observation"]) == 0.0
        assert float(out["next", "reward"]) == 0.0 and "_step" not in out.keys()
        env = TransformedEnv(CountingEnv(), ConditionalSkip(lambda td: False))
        assert env.rollout(3).batch_size == torch.Size([3])
        # A stateful env with several sub-envs cannot step some of them only.
        env = TransformedEnv(
            CountingEnv(batch_size=[2]), ConditionalSkip(lambda td: torch.tensor([True, False]))
        )
        td = env.reset().set("action", torch.ones(2, 1, dtype=torch.int64))
        with pytest.raises(ValueError, match="batch-locked"):
            env.step(td)

    @pytest.mark.parametrize("kind", ["serial", "parallel"])
    def test_stateful_batched_env(self, kind: str) -> None:
        cls = SerialEnv if kind == "serial" else ParallelEnv
        # StepCounter before the skip: its count of a skipped step is replaced too.
        env = TransformedEnv(cls(2, CountingEnv), StepCounter())
        env.append_transform(ConditionalSkip(lambda td: torch.tensor([True, False])))
        try:
            td = env.reset()
            for t in range(3):
                td = td.set("action", torch.ones(2, 1, dtype=torch.int64))
                td = env.step(td)
                assert td["next", "step_count"].squeeze(-1).tolist() == [0, t + 1]
                assert td["next", "reward"].squeeze(-1).tolist() == [0.0, 1.0]
                td = step_mdp(td)
            # worker 0 never stepped: its count (the observation) and step count stay at 0
            assert td["observation"].squeeze(-1).tolist() == [0.0, 3.0]
            assert td["step_count"].squeeze(-1).tolist() == [0, 3]
        finally:
            env.close()

    def test_errors(self) -> None:
        with pytest.raises(TypeError, match="callable"):
            ConditionalSkip(3)  # type: ignore[arg-type]
        with pytest.raises(RuntimeError, match="TransformedEnv"):
            ConditionalSkip(lambda td: True)(TensorDict())


# --------------------------------------------------------------------------- ModuleTransform
def _sum_module() -> TensorDictModule:
    return TensorDictModule(lambda x: x.sum(-1, keepdim=True), ["observation"], ["obs_sum"])


def _add_sum_spec(spec: Composite) -> Composite:
    spec["obs_sum"] = Unbounded(shape=(*spec.shape, 1))
    return spec


class TestModuleTransform:
    def test_in_env_and_specs(self) -> None:
        env = TransformedEnv(
            PendulumEnv(batch_size=[2], seed=0),
            ModuleTransform(module=_sum_module(), observation_spec_transform=_add_sum_spec),
        )
        r = env.rollout(3)
        torch.testing.assert_close(r["obs_sum"], r["observation"].sum(-1, keepdim=True))
        assert "obs_sum" in env.observation_spec.keys()
        check_env_specs(env)

    def test_factory_no_grad_and_buffer(self) -> None:
        lin = nn.Linear(3, 1)
        t = ModuleTransform(
            module_factory=lambda: TensorDictModule(lin, ["observation"], ["out"]), no_grad=True
        )
        td = t(TensorDict(observation=torch.ones(4, 3), batch_size=[4]))
        assert td["out"].shape == (4, 1) and not td["out"].requires_grad
        t2 = ModuleTransform(module=TensorDictModule(lin, ["observation"], ["out"]))
        assert t2(TensorDict(observation=torch.ones(4, 3), batch_size=[4]))["out"].requires_grad
        rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=t, batch_size=2)
        rb.extend(TensorDict(observation=torch.ones(5, 3), batch_size=[5]))
        assert rb.sample()["out"].shape == (2, 1)

    def test_inverse_writes_the_action(self) -> None:
        policy = TensorDictModule(
            lambda x: torch.zeros(*x.shape[:-1], 1), ["observation"], ["action"]
        )
        env = TransformedEnv(PendulumEnv(seed=0), ModuleTransform(module=policy, inverse=True))
        td = env.reset()
        td["action"] = torch.full((1,), 100.0)  # replaced by the module before the base env
        out = env.step(td)
        ref = PendulumEnv(seed=0)
        ref_td = ref.reset().set("action", torch.zeros(1))
        torch.testing.assert_close(out["next", "th"], ref.step(ref_td)["next", "th"])

    def test_composite_replacement_spec(self) -> None:
        base = PendulumEnv(seed=0)
        new_spec = base.full_observation_spec.clone()
        new_spec["obs_sum"] = Unbounded(shape=(1,))
        env = TransformedEnv(
            base, ModuleTransform(module=_sum_module(), observation_spec_transform=new_spec)
        )
        check_env_specs(env)

    def test_errors(self) -> None:
        with pytest.raises(ValueError, match="exactly one"):
            ModuleTransform()
        with pytest.raises(ValueError, match="exactly one"):
            ModuleTransform(module=_sum_module(), module_factory=_sum_module)
        with pytest.raises(NotImplementedError, match="use_ray_service"):
            ModuleTransform(module=_sum_module(), use_ray_service=True)
        with pytest.raises(TypeError, match="callable"):
            ModuleTransform(module=3)  # type: ignore[arg-type]
        bad = ModuleTransform(module=lambda td: 3)  # type: ignore[arg-type,return-value]
        with pytest.raises(TypeError, match="must return a TensorDict"):
            bad(TensorDict())
        with pytest.raises(TypeError, match="must be a Composite"):
            TransformedEnv(
                PendulumEnv(seed=0),
                ModuleTransform(module=_sum_module(), observation_spec_transform=Unbounded(())),
            )


# ------------------------------------------------------------------------------ MultiAction
class TestMultiAction:
    def test_sequence_in_one_step(self) -> None:
        env = TransformedEnv(PendulumEnv(seed=0), StepCounter())
        env.append_transform(MultiAction(num_actions=3, stack_observations=True))
        td = env.reset().set("action", torch.tensor([[1.0], [-1.0], [2.0]]))
        out = env.step(td)["next"]
        assert out["step_count"].squeeze(-1).tolist() == [1, 2, 3]  # stacked observations
        assert out["reward"].shape == (3, 1)
        assert out["th"].shape == (3,)
        # Same as three plain steps with the same actions.
        ref = PendulumEnv(seed=0)
        rtd = ref.reset()
        rewards = []
        for a in (1.0, -1.0, 2.0):
            rtd = ref.step(rtd.set("action", torch.tensor([a])))
            rewards.append(rtd["next", "reward"])
            rtd = rtd["next"]
        torch.testing.assert_close(out["reward"], torch.stack(rewards))
        # Without stacked observations the next step starts from the last state.
        env = TransformedEnv(PendulumEnv(seed=0), MultiAction(num_actions=3))
        td = env.reset().set("action", torch.tensor([[1.0], [-1.0], [2.0]]))
        out = env.step(td)["next"]
        torch.testing.assert_close(out["th"], rtd["th"])
        assert env.action_spec.shape == (3, 1) and env.reward_spec.shape == (3, 1)
        check_env_specs(env)

    def test_single_action_and_last_reward(self) -> None:
        env = TransformedEnv(PendulumEnv(seed=0), MultiAction(stack_rewards=False))
        td = env.reset().set("action", torch.ones(1))
        assert env.step(td)["next", "reward"].shape == (1,)
        td = env.reset().set("action", torch.ones(4, 1))
        assert env.step(td)["next", "reward"].shape == (1,)
        check_env_specs(env)  # specs unchanged without num_actions

    @pytest.mark.parametrize("aggregation", ["sum", "mean", "last"])
    def test_reward_aggregation(self, aggregation: str) -> None:
        env = TransformedEnv(CountingEnv(max_steps=10), MultiAction(reward_aggregation=aggregation))
        actions = torch.tensor([[1], [0], [1], [1]])
        out = env.step(env.reset().set("action", actions))["next"]
        expected = {"sum": 3.0, "mean": 0.75, "last": 1.0}[aggregation]
        assert out["reward"].shape == (1,) and float(out["reward"]) == expected
        check_env_specs(env)

    def test_chunk_key(self) -> None:
        env = TransformedEnv(CountingEnv(max_steps=10), StepCounter())
        env.append_transform(MultiAction(chunk_key="chunk", num_actions=2))
        assert env.full_action_spec["chunk"].shape == (2, 1)
        td = env.reset().set("chunk", torch.ones(2, 1, dtype=torch.int64))
        td["action"] = torch.zeros(1, dtype=torch.int64)  # replaced by the chunk's actions
        out = env.step(td)["next"]
        assert int(out["step_count"]) == 2 and out["reward"].squeeze(-1).tolist() == [1.0, 1.0]
        check_env_specs(env)
        # Without a chunk, a plain step with the action.
        env2 = TransformedEnv(CountingEnv(max_steps=10), MultiAction(chunk_key="chunk"))
        out = env2.step(env2.reset().set("action", torch.ones(1, dtype=torch.int64)))["next"]
        assert out["reward"].shape == (1,)

    def test_batched_stops_when_done(self) -> None:
        env = TransformedEnv(CountingEnv(batch_size=[2], max_steps=2), StepCounter())
        env.append_transform(MultiAction())
        td = env.reset().set("action", torch.ones(2, 4, 1, dtype=torch.int64))
        out = env.step(td)["next"]
        assert out["step_count"].squeeze(-1).tolist() == [2, 2]
        assert out["done"].all()
        # Rewards past the early stop are zeros.
        assert out["reward"][:, :, 0].tolist() == [[1.0, 1.0, 0.0, 0.0]] * 2

    def test_errors(self) -> None:
        with pytest.raises(ValueError, match="dim"):
            MultiAction(dim=0)
        with pytest.raises(ValueError, match="num_actions"):
            MultiAction(num_actions=0)
        with pytest.raises(ValueError, match="reward_aggregation"):
            MultiAction(reward_aggregation="max")
        env = TransformedEnv(PendulumEnv(seed=0), MultiAction(action_key="nope"))
        with pytest.raises(KeyError, match="nope"):
            env.step(env.reset().set("action", torch.ones(1)))
        env = TransformedEnv(PendulumEnv(seed=0), MultiAction())
        td = env.reset().set("action", torch.ones(2, 2, 1))
        with pytest.raises(ValueError, match="expected 1 dims"):
            env.step(td)
        with pytest.raises(RuntimeError, match="TransformedEnv"):
            MultiAction()(TensorDict())


# ---------------------------------------------------------------------------- Macro actions
class TestMacroActions:
    def test_structured_actions(self) -> None:
        a = TargetMacroAction.move(torch.ones(2, 3), steps=4, settle_steps=1)
        assert a.batch_size == (2,)
        assert a.mode.squeeze(-1).tolist() == [int(MacroPrimitive.MOVE)] * 2
        w = MacroAction.wait(steps=2, batch_size=[3])
        assert w.mode.shape == (3, 1) and int(w.steps[0, 0]) == 2
        assert int(MacroPrimitive.WAIT) == 0 and int(MacroPrimitive.MOVE) == 1

    def test_expansion(self) -> None:
        t = MacroPrimitiveTransform(macro_steps=4, settle_steps=2, action_dim=2)
        td = TensorDict(
            action=TargetMacroAction.move(torch.tensor([[4.0, -4.0]]), steps=2), batch_size=[1]
        )
        seq = t.inv(td)["action"]
        assert seq.shape == (1, 6, 2)
        assert seq[0, :, 0].tolist() == [2.0, 4.0, 4.0, 4.0, 4.0, 4.0]
        # WAIT holds the current action (zeros by default); a raw tensor is a MOVE.
        td = TensorDict(action=MacroAction.wait(batch_size=[1]), batch_size=[1])
        assert t.inv(td)["action"].abs().sum() == 0
        raw = t.inv(TensorDict(action=torch.tensor([[4.0, 0.0]]), batch_size=[1]))["action"]
        assert raw[0, :, 0].tolist() == [1.0, 2.0, 3.0, 4.0, 4.0, 4.0]

    def test_execute_in_env(self) -> None:
        composed = MacroPrimitiveTransform(macro_steps=3, execute=True)
        assert type(composed).__name__ == "Compose"
        assert isinstance(composed[0], MultiAction)
        assert isinstance(composed[1], MacroPrimitiveTransform)
        env = TransformedEnv(PendulumEnv(seed=0), StepCounter())
        env.append_transform(composed)
        td = env.reset()
        td["action"] = TargetMacroAction.move(torch.full((1,), 1.5), steps=3)
        out = env.step(td)["next"]
        assert int(out["step_count"]) == 3 and out["reward"].shape == (3, 1)
        assert set(env.full_action_spec["action"].keys()) == {
            "mode",
            "target",
            "steps",
            "settle_steps",
        }
        check_env_specs(env)

    def test_errors(self) -> None:
        with pytest.raises(ValueError, match="macro_steps"):
            MacroPrimitiveTransform(macro_steps=0)
        t = MacroPrimitiveTransform(macro_steps=2, action_dim=1)
        with pytest.raises(KeyError, match="action"):
            t.inv(TensorDict(other=torch.zeros(1), batch_size=[1]))
        bad_mode = TargetMacroAction.move(torch.zeros(1, 1), steps=1)
        bad_mode.mode.fill_(7)
        with pytest.raises(ValueError, match="unknown primitive"):
            t.inv(TensorDict(action=bad_mode, batch_size=[1]))
        too_long = TargetMacroAction.move(torch.zeros(1, 1), steps=2, settle_steps=3)
        with pytest.raises(ValueError, match="exceeds"):
            t.inv(TensorDict(action=too_long, batch_size=[1]))
        with pytest.raises(ValueError, match="features"):
            t.inv(TensorDict(action=torch.zeros(1, 3), batch_size=[1]))


# ----------------------------------------------------------------------- MeanActionSelector
class TestMeanActionSelector:
    def test_env(self) -> None:
        env = TransformedEnv(PendulumEnv(seed=0), MeanActionSelector())
        td = env.reset()
        assert td["observation", "mean"].shape == (3,)
        assert td["observation", "var"].abs().sum() == 0
        td["action", "mean"] = torch.zeros(1)
        out = env.step(td)
        ref = PendulumEnv(seed=0)
        rtd = ref.step(ref.reset().set("action", torch.zeros(1)))
        torch.testing.assert_close(out["next", "observation", "mean"], rtd["next", "observation"])
        assert isinstance(env.action_spec, Composite) or "mean" in env.full_action_spec["action"]
        check_env_specs(env)

    def test_module_use_and_errors(self) -> None:
        t = MeanActionSelector()
        data = TensorDict(
            observation=torch.ones(4, 3),
            next=TensorDict(observation=torch.ones(4, 3)),
            batch_size=[4],
        )
        out = t(data)
        assert out["observation", "var"].shape == (4, 3, 3)
        assert out["next", "observation", "mean"].shape == (4, 3)
        with pytest.raises(KeyError, match="observation"):
            t(TensorDict(other=torch.ones(2)))
        with pytest.raises(KeyError, match="mean"):
            t.inv(TensorDict(action=TensorDict(var=torch.ones(1))))
        with pytest.raises(KeyError, match="no leaf"):
            TransformedEnv(PendulumEnv(seed=0), MeanActionSelector(observation_key="nope"))


# ------------------------------------------------------------------------------- VecNormV2
class TestVecNormV2:
    def test_obs_and_reward_shared_across_batch(self) -> None:
        torch.manual_seed(0)
        env = TransformedEnv(
            PendulumEnv(batch_size=[4], seed=0),
            VecNormV2(in_keys=["observation", "reward"], decay=1.0),
        )
        r = env.rollout(50)
        t = env.transform
        assert isinstance(t, VecNormV2) and isinstance(t, VecNorm)
        mean, std = t.loc_scale("observation")
        assert mean.shape == (3,)  # one set of statistics for the 4 sub-envs
        assert t.loc_scale("reward")[0].shape == (1,)
        # Late data is roughly standardized.
        assert r["next", "reward"][:, -10:].abs().mean() < 3
        check_env_specs(env)

    def test_matches_manual_statistics(self) -> None:
        t = VecNormV2(in_keys=["x"], decay=1.0, eps=1e-8)
        a = torch.randn(8, 2)
        out = t(TensorDict(x=a, batch_size=[8]))
        mean = a.mean(0)
        std = a.var(0, unbiased=False).sqrt()
        torch.testing.assert_close(out["x"], (a - mean) / std, atol=1e-4, rtol=1e-4)

    def test_reduce_batch_dims(self) -> None:
        t = VecNormV2(in_keys=["x"], decay=1.0, reduce_batch_dims=True)
        t(TensorDict(x=torch.tensor([[0.0], [2.0]]), batch_size=[2]))
        t(TensorDict(x=torch.tensor([[4.0], [6.0]]), batch_size=[2]))
        # Each batch counted as its mean: 1 and 5.
        assert float(t.stats["x", "count"]) == 2.0
        assert float(t.loc_scale("x")[0]) == pytest.approx(3.0)

    def test_freeze_eval_and_state_dict(self) -> None:
        t = VecNormV2(in_keys=["x"], decay=0.9)
        t(TensorDict(x=torch.randn(16, 2), batch_size=[16]))
        before = t.stats.clone()
        t.eval()
        t(TensorDict(x=torch.randn(16, 2) + 10, batch_size=[16]))
        assert (t.stats == before).all()
        t.train()
        t.freeze()
        t(TensorDict(x=torch.randn(16, 2) + 10, batch_size=[16]))
        assert (t.stats == before).all()
        loaded = VecNormV2(in_keys=["x"], decay=0.9)
        loaded.load_state_dict(t.state_dict())
        torch.testing.assert_close(loaded.loc_scale("x"), t.loc_scale("x"))
        frozen = t.frozen_copy()
        assert isinstance(frozen, VecNormV2) and frozen.frozen

    def test_frozen_copy_in_replay_buffer(self) -> None:
        t = VecNormV2(in_keys=["observation"], decay=1.0)
        t(TensorDict(observation=torch.randn(32, 3) * 4 + 2, batch_size=[32]))
        frozen = t.frozen_copy()
        rb = ReplayBuffer(storage=LazyTensorStorage(16), transform=frozen, batch_size=4)
        data = torch.randn(8, 3) * 4 + 2
        rb.extend(TensorDict(observation=data, next=TensorDict(observation=data), batch_size=[8]))
        sample = rb.sample()
        mean, std = t.loc_scale("observation")
        assert sample["observation"].shape == (4, 3)
        # Samples are normalized with the frozen statistics, which do not move.
        restored = sample["observation"] * std + mean
        gaps = (restored[:, None, :] - data[None]).abs().sum(-1).min(1).values
        assert bool((gaps < 1e-3).all())
        torch.testing.assert_close(frozen.loc_scale("observation"), (mean, std))

    def test_errors(self) -> None:
        with pytest.raises(NotImplementedError, match="stateful=False"):
            VecNormV2(in_keys=["x"], stateful=False)
        with pytest.raises(ValueError, match="decay"):
            VecNormV2(in_keys=["x"], decay=2.0)
        with pytest.raises(TypeError):
            VecNormV2()  # type: ignore[call-arg]
        with pytest.raises(KeyError, match="missing"):
            VecNormV2(in_keys=["x"])(TensorDict(y=torch.ones(2)))


# --------------------------------------------------------------------- RND, RunningMeanStd
class TestRND:
    def test_running_mean_std(self) -> None:
        torch.manual_seed(0)
        rms = RunningMeanStd(shape=(3,), epsilon=1e-8)
        a, b = torch.randn(100, 3) * 2 + 1, torch.randn(50, 3) - 4
        rms.update(a)
        rms.update(b)
        both = torch.cat([a, b])
        torch.testing.assert_close(rms.mean, both.mean(0), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(rms.var, both.var(0, unbiased=False), atol=1e-4, rtol=1e-4)
        assert set(rms.state_dict()) == {"mean", "var", "count"}
        with pytest.raises(ValueError, match="tracked shape"):
            rms.update(torch.zeros(4, 2))

    def test_intrinsic_reward_in_env(self) -> None:
        torch.manual_seed(0)
        target, predictor = nn.Linear(3, 8), nn.Linear(3, 8)
        rnd = RNDTransform(target, predictor)
        assert not any(p.requires_grad for p in target.parameters())
        env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), rnd)
        r = env.rollout(5)
        reward = r["next", "intrinsic_reward"]
        assert reward.shape == (2, 5, 1) and bool((reward >= 0).all())
        assert bool((reward <= rnd.reward_clip).all())
        assert rnd.obs_rms is not None and rnd.obs_rms.count > 9
        check_env_specs(env)

    def test_training_the_predictor_lowers_the_reward(self) -> None:
        torch.manual_seed(0)
        target, predictor = nn.Linear(3, 4), nn.Linear(3, 4)
        rnd = RNDTransform(target, predictor, normalize_obs=False, normalize_reward=False)
        obs = torch.randn(64, 3)
        first = rnd(TensorDict(observation=obs, batch_size=[64]))["intrinsic_reward"].mean()
        opt = torch.optim.Adam(predictor.parameters(), lr=0.05)
        for _ in range(200):
            opt.zero_grad()
            rnd.prediction_error(obs).mean().backward()
            opt.step()
        after = rnd(TensorDict(observation=obs, batch_size=[64]))["intrinsic_reward"].mean()
        assert after < first * 0.1

    def test_errors(self) -> None:
        with pytest.raises(TypeError, match="Modules"):
            RNDTransform(lambda x: x, nn.Linear(1, 1))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="one observation key"):
            RNDTransform(nn.Linear(1, 1), nn.Linear(1, 1), in_keys=["a", "b"], out_keys=["c", "d"])
        with pytest.raises(ValueError, match="positive"):
            RNDTransform(nn.Linear(1, 1), nn.Linear(1, 1), obs_clip=0)
        with pytest.raises(KeyError, match="observation"):
            RNDTransform(nn.Linear(1, 1), nn.Linear(1, 1))(TensorDict(other=torch.ones(1)))


# ------------------------------------------------------------------------------ gSDENoise
class TestGSDENoise:
    def test_noise_fixed_per_episode(self) -> None:
        torch.manual_seed(0)
        env = TransformedEnv(
            CountingEnv(batch_size=[2], max_steps=3), gSDENoise(state_dim=4, action_dim=2)
        )
        assert env.observation_spec["_eps_gSDE"].shape == (2, 2, 4)
        r = env.rollout(6, break_when_any_done=False)
        eps = r["_eps_gSDE"]
        assert bool((eps[:, 0] == eps[:, 2]).all())  # constant within an episode
        assert not bool((eps[:, 2] == eps[:, 3]).all())  # redrawn at the reset
        assert eps.std() > 0.5
        check_env_specs(env)

    def test_module_fills_missing_noise(self) -> None:
        t = gSDENoise(state_dim=2, action_dim=1)
        td = t(TensorDict(observation=torch.zeros(2)))
        assert td["_eps_gSDE"].shape == (1, 2)

    def test_shape_and_errors(self) -> None:
        env = TransformedEnv(PendulumEnv(seed=0), gSDENoise(state_dim=3, action_dim=1, shape=(5,)))
        assert env.reset()["_eps_gSDE"].shape == (5, 1, 3)
        with pytest.raises(ValueError, match="both"):
            gSDENoise(state_dim=3)
        with pytest.raises(ValueError, match="shape"):
            gSDENoise()


# ------------------------------------------------------------------------ VecGymEnvTransform
class AutoResetCountingEnv(CountingEnv):
    """A ``CountingEnv`` that resets finished sub-envs itself, gymnasium-vector style.

    The step ending an episode returns the next episode's first observation (0) and the true
    last one under ``("final", "observation")``; resets are partial (``"_reset"``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        batch = self.batch_size
        self.observation_spec["final"] = Composite(
            observation=Unbounded(shape=(*batch, 1), dtype=torch.float32), shape=batch
        )
        self.observation_spec = self.observation_spec
        self.auto_resets = 0

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        out = super()._reset(tensordict, **kwargs)
        out["final"] = TensorDict(
            observation=out["observation"].clone(), batch_size=self.batch_size
        )
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = super()._step(tensordict)
        done = out["done"]
        out["final"] = TensorDict(
            observation=out["observation"].clone(), batch_size=self.batch_size
        )
        self.auto_resets += int(done.sum())
        self.count = torch.where(done, 0, self.count)
        out["observation"] = self.count.float()
        return out


class TestVecGymEnvTransform:
    def test_final_observation_swapped_back(self) -> None:
        base = AutoResetCountingEnv(batch_size=[2], max_steps=torch.tensor([2, 3]))
        env = TransformedEnv(base, VecGymEnvTransform())
        assert "final" not in env.observation_spec.keys()
        r = env.rollout(6, break_when_any_done=False)
        ref = CountingEnv(batch_size=[2], max_steps=torch.tensor([2, 3]))
        ref_r = ref.rollout(6, break_when_any_done=False)
        torch.testing.assert_close(r["next", "observation"], ref_r["next", "observation"])
        torch.testing.assert_close(r["observation"], ref_r["observation"])
        assert "final" not in r["next"].keys()
        check_env_specs(env)

    def test_missing_final_is_filled(self) -> None:
        env = TransformedEnv(CountingEnv(max_steps=1), VecGymEnvTransform())
        td = env.reset().set("action", torch.ones(1, dtype=torch.int64))
        assert torch.isnan(env.step(td)["next", "observation"]).all()

    def test_errors(self) -> None:
        with pytest.raises(RuntimeError, match="TransformedEnv"):
            VecGymEnvTransform()(TensorDict())


@pytest.mark.skipif(importlib.util.find_spec("gymnasium") is None, reason="needs gymnasium")
def test_vec_gym_transform_with_gymnasium_cartpole() -> None:
    # torchrl's GymEnv disables gymnasium's autoreset, so no "final" entry appears: the
    # transform then passes the data through unchanged.
    from torchrl.envs import GymEnv

    env = TransformedEnv(GymEnv("CartPole-v1"), VecGymEnvTransform())
    env.set_seed(0)
    r = env.rollout(30)
    assert not torch.isnan(r["next", "observation"]).any() or bool(r["next", "done"][-1])
    check_env_specs(env)


# ---------------------------------------------------------------------------- cat_frames
class TestCatFrames:
    def test_windows(self) -> None:
        x = torch.arange(5.0).reshape(5, 1)
        out = cat_frames(x, N=3, dim=-1, time_dim=-2)
        assert out.shape == (5, 3)
        assert out.tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]
        const = cat_frames(x, N=3, dim=-1, time_dim=-2, padding="constant", padding_value=-1)
        assert const[1].tolist() == [-1, 0, 1]

    def test_done_mask_and_batch(self) -> None:
        x = torch.arange(10.0).reshape(2, 5, 1)
        done = torch.zeros(2, 5, 1, dtype=torch.bool)
        done[0, 1] = True
        out = cat_frames(x, N=2, dim=-1, time_dim=-2, done_mask=done)
        assert out[0, 2].tolist() == [2, 2]  # a new trajectory starts at t=2
        assert out[1, 2].tolist() == [6, 7]

    def test_matches_catframes_in_env(self) -> None:
        from torchrl.envs.transforms import CatFrames

        env = TransformedEnv(
            CountingEnv(max_steps=10),
            CatFrames(N=3, dim=-1, in_keys=["observation"], out_keys=["stacked"]),
        )
        r = env.rollout(6)
        out = cat_frames(r["observation"], N=3, dim=-1, time_dim=-2)
        torch.testing.assert_close(out, r["stacked"])

    def test_errors(self) -> None:
        x = torch.zeros(4, 2)
        with pytest.raises(ValueError, match="N"):
            cat_frames(x, N=0, dim=-1, time_dim=-2)
        with pytest.raises(ValueError, match="negative"):
            cat_frames(x, N=2, dim=1, time_dim=-2)
        with pytest.raises(ValueError, match="differ"):
            cat_frames(x, N=2, dim=-1, time_dim=-1)
        with pytest.raises(ValueError, match="padding"):
            cat_frames(x, N=2, dim=-1, time_dim=-2, padding="reflect")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="done_mask"):
            cat_frames(x, N=2, dim=-1, time_dim=-2, done_mask=torch.zeros(3, dtype=torch.bool))
