"""EnvBase: specs, reset (incl. partial), step, step_and_maybe_reset, rollout, seeding, helpers."""

from __future__ import annotations

import pytest
import torch
from _envs import BrokenEnv, CountingEnv, DoneAtResetEnv, NestedEnv, NoisyResetEnv
from tensordict import LazyStackedTensorDict, TensorDict

from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase, check_env_specs


# ---------------------------------------------------------------------------------------- specs
class TestSpecs:
    def test_defaults(self):
        env = CountingEnv(batch_size=[4])
        assert env.batch_size == torch.Size([4])
        assert env.device is None
        assert env.batch_locked
        assert env.reward_spec.shape == torch.Size([4, 1])
        assert env.reward_spec.dtype == torch.float32
        assert set(env.full_done_spec.keys()) == {"done", "terminated", "truncated"}
        for key in ("done", "terminated", "truncated"):
            assert env.full_done_spec[key].shape == torch.Size([4, 1])
            assert env.full_done_spec[key].dtype == torch.bool
        assert env.done_keys == ["done", "terminated", "truncated"]
        assert env.reset_keys == ["_reset"]
        assert env.action_keys == ["action"] and env.action_key == "action"
        assert env.reward_keys == ["reward"] and env.reward_key == "reward"
        assert env.observation_keys == ["observation"]
        assert env.state_keys == []
        assert isinstance(env.action_spec, Categorical)
        assert isinstance(env.done_spec, Composite)
        assert env.observation_spec is env.full_observation_spec
        assert env.state_spec is env.full_state_spec
        assert set(env.output_spec.keys()) == {
            "full_observation_spec",
            "full_reward_spec",
            "full_done_spec",
        }
        assert set(env.input_spec.keys()) == {"full_state_spec", "full_action_spec"}

    def test_leaf_setters_wrap(self):
        env = CountingEnv(batch_size=[2])
        env.action_spec = Bounded(-1.0, 1.0, shape=(2, 3))
        assert env.action_keys == ["action"]
        assert env.action_spec.shape == torch.Size([2, 3])
        env.reward_spec = Unbounded(shape=(2, 1), dtype=torch.float64)
        assert env.full_reward_spec["reward"].dtype == torch.float64
        env.observation_spec = Unbounded(shape=(2, 5))
        assert env.observation_keys == ["observation"]
        env.done_spec = Categorical(2, shape=(2, 1), dtype=torch.bool)
        assert set(env.done_keys) == {"done", "terminated", "truncated"}

    def test_setter_keeps_existing_single_key(self):
        env = CountingEnv()
        env.full_action_spec = Composite(act=Categorical(3, shape=(1,)))
        env.action_spec = Categorical(5, shape=(1,))
        assert env.action_keys == ["act"]

    def test_done_spec_from_leaf(self):
        env = CountingEnv(batch_size=[3])
        env.done_spec = Categorical(2, shape=(3, 1), dtype=torch.bool)
        for key in ("done", "terminated", "truncated"):
            assert env.full_done_spec[key].shape == torch.Size([3, 1])

    @pytest.mark.parametrize(
        "attr", ["action_spec", "reward_spec", "observation_spec", "done_spec", "state_spec"]
    )
    def test_batch_mismatch_raises(self, attr):
        env = CountingEnv(batch_size=[4])
        spec = Unbounded(shape=(3, 1))
        if attr == "state_spec":
            spec = Composite(x=Unbounded(shape=(3, 1)), shape=(3,))
        with pytest.raises(ValueError, match=r"batch size \(4,\)"):
            setattr(env, attr, spec)

    def test_state_spec_needs_composite(self):
        with pytest.raises(TypeError, match="Composite"):
            CountingEnv().state_spec = Unbounded(shape=(1,))

    def test_output_input_spec_setters(self):
        env = CountingEnv()
        out = env.output_spec.clone()
        env.output_spec = out
        assert env.output_spec is out
        with pytest.raises(KeyError, match="full_reward_spec"):
            env.output_spec = Composite(full_observation_spec=Composite())
        inp = env.input_spec.clone()
        env.input_spec = inp
        with pytest.raises(KeyError, match="full_action_spec"):
            env.input_spec = Composite(full_state_spec=Composite())

    def test_several_keys(self):
        env = NestedEnv(batch_size=[2])
        assert env.action_keys == [("agents", "action")]
        assert env.reward_key == ("agents", "reward")
        assert set(env.reset_keys) == {"_reset", ("agents", "_reset")}
        assert len(env.done_keys) == 6
        env.full_reward_spec["other"] = Unbounded(shape=(2, 1))
        env.empty_cache()
        with pytest.raises(KeyError, match="2 reward keys"):
            env.reward_key  # noqa: B018
        assert isinstance(env.reward_spec, Composite)

    def test_repr(self):
        text = repr(CountingEnv(batch_size=[2]))
        assert text.startswith("CountingEnv(")
        assert "batch_size=[2]" in text and "'observation': (2, 1)" in text


# ---------------------------------------------------------------------------------------- reset
class TestReset:
    def test_reset_fills_done(self):
        td = CountingEnv(batch_size=[3]).reset()
        assert td.batch_size == torch.Size([3])
        for key in ("done", "terminated", "truncated"):
            assert td[key].shape == torch.Size([3, 1]) and td[key].dtype == torch.bool
            assert not td[key].any()

    def test_partial_reset_stateful(self):
        env = CountingEnv(batch_size=[3], max_steps=10)
        td = env.reset()
        for _ in range(2):
            td = env.step(env.rand_action(td))["next"].clone()
        td["_reset"] = torch.tensor([[True], [False], [True]])
        out = env.reset(td)
        assert out is td
        assert "_reset" not in out.keys()
        assert out["observation"].squeeze(-1).tolist() == [0.0, 2.0, 0.0]
        assert env.count.squeeze(-1).tolist() == [0, 2, 0]

    def test_partial_reset_base_keeps_unreset_entries(self):
        env = NoisyResetEnv(batch_size=[4], max_steps=10)
        td = env.reset()
        noise = td["noise"].clone()
        td["_reset"] = torch.tensor([[False], [True], [False], [False]])
        td = env.reset(td)
        assert torch.equal(td["noise"][[0, 2, 3]], noise[[0, 2, 3]])
        assert not torch.equal(td["noise"][1], noise[1])

    def test_full_mask_is_full_reset(self):
        env = NoisyResetEnv(batch_size=[2])
        td = env.reset()
        noise = td["noise"].clone()
        td["_reset"] = torch.ones(2, 1, dtype=torch.bool)
        td = env.reset(td)
        assert not torch.equal(td["noise"], noise)

    def test_empty_mask_skips_reset(self):
        env = CountingEnv(batch_size=[2])
        td = env.reset()
        calls = env.reset_calls
        td["_reset"] = torch.zeros(2, 1, dtype=torch.bool)
        out = env.reset(td)
        assert env.reset_calls == calls
        assert "_reset" not in out.keys()

    def test_reset_sees_mask_and_non_bool_mask(self):
        env = CountingEnv(batch_size=[2], max_steps=10)
        td = env.step(env.rand_action(env.reset()))["next"].clone()
        td["_reset"] = torch.tensor([[1], [0]], dtype=torch.uint8)
        out = env.reset(td)
        assert out["observation"].squeeze(-1).tolist() == [0.0, 1.0]

    def test_done_after_reset(self):
        with pytest.raises(RuntimeError, match="still done"):
            DoneAtResetEnv().reset()
        td = DoneAtResetEnv(allow_done_after_reset=True).reset()
        assert td["done"].all()

    def test_wrong_batch_raises(self):
        env = CountingEnv(batch_size=[2])
        with pytest.raises(ValueError, match=r"batch size \[3\]"):
            env.reset(TensorDict(batch_size=[3]))

    def test_reset_must_return_tensordict(self):
        class Bad(CountingEnv):
            def _reset(self, tensordict, **kwargs):
                return {"observation": torch.zeros(1)}

        with pytest.raises(TypeError, match="must return a TensorDict"):
            Bad().reset()

    def test_nested_partial_reset(self):
        env = NestedEnv(batch_size=[2], max_steps=10)
        td = env.reset()
        td = env.step(env.rand_action(td))["next"].clone()
        td["_reset"] = torch.tensor([[True], [False]])
        td = env.reset(td)
        assert td["state", "count"].squeeze(-1).tolist() == [0, 1]
        assert td["agents", "done"].shape == torch.Size([2, 3, 1])
        assert not td["agents", "done"].any()

    def test_missing_methods(self):
        class Empty(EnvBase):
            pass

        env = Empty()
        with pytest.raises(NotImplementedError, match="_reset"):
            env.reset()
        with pytest.raises(NotImplementedError, match="_step"):
            env.step(TensorDict())
        with pytest.raises(NotImplementedError, match="_set_seed"):
            env.set_seed(0)


# ----------------------------------------------------------------------------------------- step
class TestStep:
    def test_step_writes_next(self):
        env = CountingEnv(batch_size=[2])
        td = env.rand_action(env.reset())
        out = env.step(td)
        assert out is td
        assert set(out["next"].keys()) == {
            "observation",
            "reward",
            "done",
            "terminated",
            "truncated",
        }
        assert out["next", "observation"].squeeze(-1).tolist() == [1.0, 1.0]
        assert torch.equal(out["next", "reward"], td["action"].float())

    @pytest.mark.parametrize(
        "flags,truncate",
        [
            ((), False),
            (("done",), False),
            (("terminated",), False),
            (("truncated",), True),
            (("done", "terminated"), False),
            (("done", "terminated"), True),
            (("done", "truncated"), True),
            (("done", "truncated"), False),
            (("terminated", "truncated"), True),
        ],
    )
    def test_derived_flags(self, flags, truncate):
        env = CountingEnv(batch_size=[3], max_steps=[1, 2, 1], flags=flags, truncate=truncate)
        nxt = env.rand_step(env.reset())["next"]
        done = nxt["done"].squeeze(-1).tolist()
        term = nxt["terminated"].squeeze(-1).tolist()
        trunc = nxt["truncated"].squeeze(-1).tolist()
        for key in ("done", "terminated", "truncated"):
            assert nxt[key].dtype == torch.bool and nxt[key].shape == torch.Size([3, 1])
        if not flags:
            assert done == term == trunc == [False, False, False]
            return
        end, never = [True, False, True], [False, False, False]
        assert done == end
        # A lone "done" counts as a termination; otherwise the flag the env wrote decides.
        truncated_end = truncate and flags != ("done",)
        assert term == (never if truncated_end else end)
        assert trunc == (end if truncated_end else never)

    def test_derived_flags_are_distinct_tensors(self):
        env = CountingEnv(max_steps=1, flags=("done",))
        nxt = env.rand_step(env.reset())["next"]
        assert nxt["done"].data_ptr() != nxt["terminated"].data_ptr()

    def test_wrong_batch_raises(self):
        env = CountingEnv(batch_size=[2])
        with pytest.raises(ValueError, match="batch size"):
            env.step(TensorDict(action=torch.zeros(3, 1, dtype=torch.long), batch_size=[3]))

    @pytest.mark.parametrize("bug", ["dtype", "shape", "range", "reward_shape", "missing"])
    def test_run_type_checks(self, bug):
        env = BrokenEnv(bug, batch_size=[2], run_type_checks=True)
        key = {"missing": "extra", "range": "bounded", "reward_shape": "reward"}.get(
            bug, "observation"
        )
        with pytest.raises(ValueError, match=key):
            td = env.reset()
            env.step(env.rand_action(td))

    def test_run_type_checks_ok(self):
        env = CountingEnv(batch_size=[2], run_type_checks=True)
        env.rollout(4)

    def test_step_and_maybe_reset_only_finished(self):
        env = CountingEnv(batch_size=[3], max_steps=[1, 2, 3])
        td = env.reset()
        seen = []
        for _ in range(4):
            td = env.rand_action(td)
            transition, td = env.step_and_maybe_reset(td)
            seen.append(
                (
                    transition["next", "observation"].squeeze(-1).tolist(),
                    td["observation"].squeeze(-1).tolist(),
                )
            )
            assert "_reset" not in td.keys()
            assert not td["done"].any()
            assert "action" not in td.keys() and "reward" not in td.keys()
        assert seen == [
            ([1, 1, 1], [0, 1, 1]),
            ([1, 2, 2], [0, 0, 2]),
            ([1, 1, 3], [0, 1, 0]),
            ([1, 2, 1], [0, 0, 1]),
        ]

    def test_step_and_maybe_reset_nested(self):
        env = NestedEnv(batch_size=[2], max_steps=2)
        td = env.reset()
        for _ in range(2):
            transition, td = env.step_and_maybe_reset(env.rand_action(td))
        assert transition["next", "done"].all()
        assert td["state", "count"].squeeze(-1).tolist() == [0, 0]
        assert not td["agents", "done"].any()
        assert ("agents", "_reset") not in td.keys(True)


# -------------------------------------------------------------------------------------- rollout
class TestRollout:
    def test_shapes_time_last(self):
        env = CountingEnv(batch_size=[2, 3], max_steps=100)
        r = env.rollout(7)
        assert r.batch_size == torch.Size([2, 3, 7])
        assert r["next", "observation"].shape == torch.Size([2, 3, 7, 1])
        assert r["next", "observation"][0, 0, :, 0].tolist() == [1, 2, 3, 4, 5, 6, 7]
        assert r["observation"][0, 0, :, 0].tolist() == [0, 1, 2, 3, 4, 5, 6]
        assert r["action"].shape == torch.Size([2, 3, 7, 1])

    def test_unbatched(self):
        r = CountingEnv(max_steps=3).rollout(10)
        assert r.batch_size == torch.Size([3])
        assert r["next", "done"][:, 0].tolist() == [False, False, True]

    def test_break_when_any_done(self):
        env = CountingEnv(batch_size=[3], max_steps=[2, 4, 6])
        r = env.rollout(10)
        assert r.batch_size == torch.Size([3, 2])
        assert r["next", "done"][0, -1].all()

    def test_no_break_resets_in_between(self):
        env = CountingEnv(batch_size=[2], max_steps=[2, 3])
        r = env.rollout(6, break_when_any_done=False)
        assert r.batch_size == torch.Size([2, 6])
        assert r["next", "observation"][..., 0].tolist() == [
            [1, 2, 1, 2, 1, 2],
            [1, 2, 3, 1, 2, 3],
        ]
        assert r["observation"][..., 0].tolist() == [[0, 1, 0, 1, 0, 1], [0, 1, 2, 0, 1, 2]]

    def test_break_when_all_done(self):
        env = CountingEnv(batch_size=[3], max_steps=[1, 2, 4])
        r = env.rollout(10, break_when_all_done=True)
        assert r.batch_size == torch.Size([3, 4])
        with pytest.raises(ValueError, match="cannot both"):
            env.rollout(10, break_when_any_done=True, break_when_all_done=True)

    def test_policy_and_callback(self):
        env = CountingEnv(batch_size=[2], max_steps=100)
        calls = []

        def policy(td):
            td["action"] = torch.ones(2, 1, dtype=torch.long)
            return td

        r = env.rollout(5, policy=policy, callback=lambda e, td: calls.append(td.batch_size))
        assert (r["action"] == 1).all() and (r["next", "reward"] == 1).all()
        assert len(calls) == 5

    def test_policy_returning_none(self):
        env = CountingEnv(max_steps=100)

        def policy(td):
            td["action"] = torch.zeros(1, dtype=torch.long)

        assert (env.rollout(3, policy=policy)["action"] == 0).all()

    def test_tensordict_module_policy_cast(self):
        from tensordict.nn import TensorDictModule

        env = BrokenEnv(None, batch_size=[2])
        module = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        r = env.rollout(3, policy=module, auto_cast_to_device=True)
        assert r["action"].shape == torch.Size([2, 3, 1])

    def test_auto_reset_false(self):
        env = CountingEnv(batch_size=[2], max_steps=100)
        with pytest.raises(ValueError, match="needs a tensordict"):
            env.rollout(3, auto_reset=False)
        td = env.reset()
        env.rollout(3)  # the env moved on; the explicit td does not reset it
        r = env.rollout(2, auto_reset=False, tensordict=td)
        assert r["next", "observation"][0, :, 0].tolist() == [4, 5]
        assert "action" not in td.keys()  # the input is not modified

    def test_max_steps_validation(self):
        with pytest.raises(ValueError, match="max_steps"):
            CountingEnv().rollout(0)

    def test_lazy_stack(self):
        r = CountingEnv(batch_size=[2], max_steps=100).rollout(4, return_contiguous=False)
        assert isinstance(r, LazyStackedTensorDict)
        assert r.batch_size == torch.Size([2, 4])
        assert r["next", "observation"][1, :, 0].tolist() == [1, 2, 3, 4]

    def test_stack_fallback_non_tensor(self):
        env = CountingEnv(batch_size=[2], max_steps=100)

        def policy(td):
            td["action"] = torch.zeros(2, 1, dtype=torch.long)
            td["note"] = "hello"
            return td

        r = env.rollout(3, policy=policy)
        assert r.batch_size == torch.Size([2, 3])
        assert r[0, 1]["note"] == "hello"

    def test_stack_matches_torch_stack(self):
        from torchrl.envs._rollout import stack_steps as _stack_steps

        env = NestedEnv(batch_size=[2], max_steps=100)
        td = env.reset()
        tds = []
        for _ in range(4):
            transition, td = env.step_and_maybe_reset(env.rand_action(td))
            tds.append(transition)
        fast, ref = _stack_steps(tds), torch.stack(tds, -1)
        assert fast.batch_size == ref.batch_size == torch.Size([2, 4])
        assert fast["agents"].batch_size == ref["agents"].batch_size
        assert (fast == ref).all()

    def test_steps_do_not_alias(self):
        env = NestedEnv(batch_size=[2], max_steps=100)
        r = env.rollout(3)
        assert r["state", "count"][0, :, 0].tolist() == [0, 1, 2]
        assert r["next", "state", "count"][0, :, 0].tolist() == [1, 2, 3]
        assert r["agents", "action"].shape == torch.Size([2, 3, 3, 2])

    def test_nested_rollout_and_checks(self):
        env = NestedEnv(batch_size=[2], max_steps=2)
        r = env.rollout(5, break_when_any_done=False)
        assert r.batch_size == torch.Size([2, 5])
        assert r["next", "agents", "done"][0, :, 0, 0].tolist() == [False, True] * 2 + [False]
        check_env_specs(env)


# -------------------------------------------------------------------------------------- helpers
class TestHelpers:
    def test_set_seed(self):
        env = CountingEnv()
        nxt = env.set_seed(3)
        assert env.seeds == [3] and nxt != 3
        assert env.set_seed(3) == nxt
        assert env.set_seed(nxt) != nxt
        assert env.set_seed(5, static_seed=True) == 5
        torch.manual_seed(0)
        a = env.set_seed(None)
        torch.manual_seed(0)
        assert env.set_seed(None) == a
        chain = [0]
        for _ in range(50):
            chain.append(env.set_seed(chain[-1]))
        assert len(set(chain)) == 51
        assert all(0 <= s < 2**32 for s in chain)

    def test_rand_action_and_step(self):
        env = CountingEnv(batch_size=[4])
        td = env.rand_action()
        assert td.batch_size == torch.Size([4])
        assert env.action_spec.is_in(td["action"])
        td = env.rand_step(env.reset())
        assert td["next", "observation"].shape == torch.Size([4, 1])

    def test_rand_action_composite(self):
        env = NestedEnv(batch_size=[2])
        td = env.rand_action()
        assert td["agents", "action"].shape == torch.Size([2, 3, 2])
        env.full_action_spec["other"] = Categorical(3, shape=(2,))
        env.empty_cache()
        td = env.rand_action()
        assert td["other"].shape == torch.Size([2])

    def test_fake_tensordict_matches_rollout(self):
        for env in (CountingEnv(batch_size=[2]), NestedEnv(batch_size=[2]), NoisyResetEnv()):
            fake = env.fake_tensordict()
            real = env.rollout(1)[..., 0]
            assert set(fake.keys(True, True)) == set(real.keys(True, True))
            for key in fake.keys(True, True):
                assert fake[key].shape == real[key].shape, key
                assert fake[key].dtype == real[key].dtype, key

    def test_to_device(self):
        env = CountingEnv(batch_size=[2])
        assert env.to("cpu") is env
        assert env.device == torch.device("cpu")
        assert env.action_spec.device == torch.device("cpu")
        assert env.full_done_spec["done"].device == torch.device("cpu")
        with pytest.raises(TypeError, match="dtypes"):
            env.to(torch.float64)

    def test_device_specs(self):
        env = CountingEnv(device="cpu")
        assert env.reward_spec.device == torch.device("cpu")
        env.observation_spec = Unbounded(shape=(1,))
        assert env.observation_spec["observation"].device == torch.device("cpu")

    def test_close(self):
        closes = []

        class Closing(CountingEnv):
            def _close(self):
                closes.append(1)

        env = Closing()
        assert not env.is_closed
        env.close()
        env.close()
        assert env.is_closed and closes == [1]
        with Closing() as env2:
            env2.rollout(2)
        assert env2.is_closed and closes == [1, 1]

    def test_batch_locked_setter(self):
        env = CountingEnv()
        env.batch_locked = False
        assert not env.batch_locked

    def test_in_place_spec_edit_needs_empty_cache(self):
        env = CountingEnv()
        env.full_observation_spec["other"] = Unbounded(shape=(2,))
        env.empty_cache()
        assert "other" in env.observation_keys


def test_step_keeps_next_entries_written_by_the_policy():
    # A recurrent policy writes its next hidden state under "next" before the env steps.
    env = CountingEnv()
    td = env.reset()
    td["action"] = env.action_spec.rand()
    td["next", "hidden"] = torch.ones(*env.batch_size, 3)
    td = env.step(td)
    assert (td["next", "hidden"] == 1).all()
    assert "observation" in td["next"].keys()
