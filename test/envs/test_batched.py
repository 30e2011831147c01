"""SerialEnv, ParallelEnv and EnvCreator: contract, partial resets, seeds, kwargs, transforms.

Failures of ParallelEnv workers (exceptions, killed processes, cleanup) are tested in
``test_parallel_failures.py``. Process-backed tests reuse envs where they can: a fork costs
~0.1 s per worker.
"""

from __future__ import annotations

import os
import pickle
from functools import partial

import numpy as np
import pytest
import torch
from _envs import CountingEnv, NestedEnv
from tensordict import TensorDict

from torchrl.data import Composite, Unbounded
from torchrl.envs import (
    EnvBase,
    EnvCreator,
    GymEnv,
    ParallelEnv,
    PendulumEnv,
    SerialEnv,
    check_env_specs,
)
from torchrl.envs.common import next_seed as _next_seed

gymnasium = pytest.importorskip("gymnasium")


def _children() -> set[int]:
    """Pids of this process's live children (from /proc)."""
    me = os.getpid()
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            out.add(int(entry))
    return out


class ThreadsEnv(CountingEnv):
    """A CountingEnv whose observation is the number of torch threads of its process."""

    def _reset(self, tensordict, **kwargs):
        out = super()._reset(tensordict, **kwargs)
        out["observation"] = torch.full_like(out["observation"], torch.get_num_threads())
        return out


class BufferEnv(CountingEnv):
    """A CountingEnv with a registered buffer (what EnvCreator shares)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.register_buffer("stat", torch.zeros(3))


def _pendulum_with_step_counter():
    from torchrl.envs.transforms import StepCounter, TransformedEnv

    return TransformedEnv(PendulumEnv(), StepCounter(max_steps=3))


# ------------------------------------------------------------------------------- SerialEnv
class TestSerialEnv:
    @pytest.mark.parametrize("inner", [(), (3,)])
    def test_contract(self, inner):
        env = SerialEnv(2, CountingEnv, {"batch_size": inner, "max_steps": 4})
        assert env.batch_size == torch.Size([2, *inner])
        assert env.observation_spec["observation"].shape == torch.Size([2, *inner, 1])
        assert env.action_spec.shape == torch.Size([2, *inner, 1])
        assert env.reset_keys == ["_reset"]
        check_env_specs(env, seed=0)
        rollout = env.rollout(10)
        assert rollout.batch_size == torch.Size([2, *inner, 4])
        assert rollout["next", "done"][..., -1, :].all()
        env.close()

    def test_lazy_start_and_restart(self):
        env = SerialEnv(2, partial(CountingEnv, max_steps=3))
        assert not env.is_started
        # the env built to read the specs becomes worker 0: one build per worker in all
        env.reset()
        assert env.is_started and len(env.envs) == 2
        env.close()
        env.close()  # idempotent
        assert env.is_closed and env.envs == []
        assert env.rollout(2).batch_size == torch.Size([2, 2])  # starts again
        assert not env.is_closed

    def test_partial_reset(self):
        env = SerialEnv(3, CountingEnv, {"max_steps": 100})
        td = env.reset()
        for _ in range(2):
            td = env.step(env.rand_action(td))["next"].clone()
        assert (td["observation"] == 2).all()
        td["_reset"] = torch.tensor([[False], [True], [False]])
        out = env.reset(td)
        assert out["observation"].squeeze(-1).tolist() == [2.0, 0.0, 2.0]
        # only worker 1 was reset
        assert [e.reset_calls for e in env.envs] == [1, 2, 1]
        assert "_reset" not in out.keys()

    def test_step_and_maybe_reset(self):
        env = SerialEnv(2, CountingEnv, [{"max_steps": 2}, {"max_steps": 3}])
        td = env.reset()
        counts = []
        for _ in range(4):
            td = env.rand_action(td)
            transition, td = env.step_and_maybe_reset(td)
            counts.append(td["observation"].squeeze(-1).tolist())
            assert not td["done"].any()
            assert "_reset" not in td.keys()
        assert counts == [[1, 1], [0, 2], [1, 0], [0, 1]]
        assert transition["next", "done"].squeeze(-1).tolist() == [True, False]

    def test_seeds_chain(self):
        env = SerialEnv(3, CountingEnv)
        out = env.set_seed(7)
        seeds = [e.seeds[-1] for e in env.envs]
        assert seeds[0] == 7
        assert seeds[1] == _next_seed(7) and seeds[2] == _next_seed(seeds[1])
        assert out == _next_seed(seeds[2])
        assert len(set(seeds)) == 3
        assert env.set_seed(7, static_seed=True) == 7
        assert [e.seeds[-1] for e in env.envs] == [7, 7, 7]

    def test_update_kwargs(self):
        env = SerialEnv(2, CountingEnv, {"max_steps": 3})
        assert env.rollout(10).batch_size == torch.Size([2, 3])
        env.update_kwargs({"max_steps": 5})
        assert env.create_env_kwargs == [{"max_steps": 5}] * 2
        assert env.rollout(10).batch_size == torch.Size([2, 5])
        env.update_kwargs([{"batch_size": [4]}, {"batch_size": [4]}])
        assert env.batch_size == torch.Size([2, 4])
        assert env.rollout(10).batch_size == torch.Size([2, 4, 5])

    def test_list_of_fns(self):
        env = SerialEnv(2, [partial(CountingEnv, max_steps=2), partial(CountingEnv, max_steps=3)])
        rollout = env.rollout(5, break_when_all_done=True)
        assert rollout["next", "done"].squeeze(-1)[:, :3].tolist() == [
            [False, True, False],
            [False, False, True],
        ]
        with pytest.raises(ValueError, match="different keys"):
            SerialEnv(2, [CountingEnv, NestedEnv])
        with pytest.raises(ValueError, match="batch size"):
            SerialEnv(2, [CountingEnv, partial(CountingEnv, batch_size=[2])])
        with pytest.raises(ValueError, match="one per worker"):
            SerialEnv(3, [CountingEnv, CountingEnv])
        with pytest.raises(ValueError, match="one per worker"):
            SerialEnv(3, CountingEnv, [{}, {}])
        with pytest.raises(TypeError, match="EnvBase"):
            SerialEnv(2, lambda: "not an env")
        with pytest.raises(ValueError, match="num_workers"):
            SerialEnv(0, CountingEnv)

    def test_integer_types_of_num_workers(self):
        env = SerialEnv(np.int64(2), CountingEnv)
        assert env.batch_size == torch.Size([2]) and type(env.num_workers) is int
        with pytest.raises(TypeError, match="num_workers must be a positive int, got 2.0"):
            SerialEnv(2.0, CountingEnv)
        with pytest.raises(TypeError, match="num_workers"):
            SerialEnv(True, CountingEnv)

    def test_specs_stack_when_values_differ(self):
        light = partial(PendulumEnv, seed=0)
        heavy = partial(PendulumEnv, td_params=PendulumEnv.gen_params(max_torque=1.0))
        env = SerialEnv(2, [light, heavy])
        assert env.action_spec.shape == torch.Size([2, 1])
        assert env.action_spec[0].is_in(torch.tensor([1.5]))
        assert not env.action_spec[1].is_in(torch.tensor([1.5]))
        check_env_specs(env, seed=0)

    def test_nested_keys(self):
        env = SerialEnv(2, NestedEnv, {"batch_size": [2], "n_agents": 3})
        assert env.reset_keys == ["_reset", ("agents", "_reset")]
        check_env_specs(env, seed=0)
        rollout = env.rollout(6, break_when_any_done=False)
        assert rollout["next", "agents", "observation"].shape == torch.Size([2, 2, 6, 3, 3])
        assert rollout.get(("next", "agents")).batch_size == torch.Size([2, 2, 6, 3])

    def test_missing_action(self):
        env = SerialEnv(2, CountingEnv)
        with pytest.raises(KeyError, match="action"):
            env.step(env.reset())

    def test_transforms_inside_and_outside(self):
        from torchrl.envs.transforms import RewardSum, StepCounter, TransformedEnv

        def make():
            return TransformedEnv(PendulumEnv(seed=0), StepCounter(max_steps=4))

        inside = SerialEnv(2, make)
        check_env_specs(inside, seed=0)
        rollout = inside.rollout(10)
        assert rollout.batch_size == torch.Size([2, 4])
        assert rollout["next", "step_count"][:, -1].flatten().tolist() == [4, 4]
        # the workers reset their truncated envs, step counters included
        rollout = inside.rollout(6, break_when_any_done=False)
        assert rollout["next", "step_count"][1].flatten().tolist() == [1, 2, 3, 4, 1, 2]
        assert rollout["step_count"][1].flatten().tolist() == [0, 1, 2, 3, 0, 1]
        outside = TransformedEnv(SerialEnv(2, PendulumEnv), StepCounter(max_steps=3))
        outside.append_transform(RewardSum())
        check_env_specs(outside, seed=0)
        rollout = outside.rollout(7, break_when_any_done=False)
        assert rollout["next", "step_count"][0].flatten().tolist() == [1, 2, 3, 1, 2, 3, 1]

    def test_repr(self):
        text = repr(SerialEnv(2, CountingEnv))
        assert text.startswith("SerialEnv(\n    num_workers=2,\n    batch_size=[2]")


# ------------------------------------------------------------------------------ EnvCreator
class TestEnvCreator:
    def test_meta_and_pickle(self):
        creator = EnvCreator(partial(GymEnv, "CartPole-v1"))
        assert creator.meta_data.batch_size == torch.Size([])
        spec = creator.meta_data.output_spec["full_observation_spec", "observation"]
        assert spec.shape == torch.Size([4])
        clone = pickle.loads(pickle.dumps(creator))
        env = clone()
        assert isinstance(env, GymEnv)
        assert env.reset()["observation"].shape == torch.Size([4])

    def test_kwargs(self):
        creator = EnvCreator(CountingEnv, {"max_steps": 2}, batch_size=[3])
        env = creator()
        assert env.batch_size == torch.Size([3])
        assert env.rollout(5).batch_size == torch.Size([3, 2])
        assert creator(max_steps=4).rollout(5).batch_size == torch.Size([3, 4])
        with pytest.raises(TypeError, match="callable"):
            EnvCreator(3)

    def test_shared_buffers(self):
        creator = EnvCreator(BufferEnv)
        a, b = creator(), creator()
        a.stat += 1
        assert b.stat.tolist() == [1.0, 1.0, 1.0]
        assert a.stat.is_shared()
        assert EnvCreator(BufferEnv, share_memory=False)().stat.sum() == 0

    def test_batched_env_uses_cached_specs(self):
        calls = []

        def make():
            calls.append(1)
            return CountingEnv()

        creator = EnvCreator(make)
        assert len(calls) == 1
        env = SerialEnv(2, creator)
        assert len(calls) == 1  # the specs came from the creator
        env.reset()
        assert len(calls) == 3


# ----------------------------------------------------------------------------- ParallelEnv
class TestParallelEnv:
    def test_matches_serial_cartpole(self):
        """Must show 4: 4 CartPoles in processes give SerialEnv's trajectories, resets included."""
        make = partial(GymEnv, "CartPole-v1")
        serial, parallel = SerialEnv(4, make), ParallelEnv(4, make)
        try:
            rollouts = []
            for env in (serial, parallel):
                assert env.set_seed(3) == serial.set_seed(3)
                torch.manual_seed(0)
                rollouts.append(env.rollout(120, break_when_any_done=False))
            a, b = rollouts
            assert a["next", "done"].sum() >= 4  # episodes ended and sub-envs were reset
            assert set(a.keys(True, True)) == set(b.keys(True, True))
            for key in a.keys(True, True):
                assert torch.equal(a[key], b[key]), key
            # the same with a stop at the first done (step + reset paths)
            for env in (serial, parallel):
                env.set_seed(5)
            torch.manual_seed(1)
            a = serial.rollout(50)
            torch.manual_seed(1)
            b = parallel.rollout(50)
            assert (a == b).all()
        finally:
            parallel.close()

    def test_matches_serial_vector_workers(self):
        # workers holding a gymnasium vector env of 3: partial resets inside the workers
        make = partial(GymEnv, "CartPole-v1", num_envs=3)
        serial, parallel = SerialEnv(2, make), ParallelEnv(2, make)
        try:
            rollouts = []
            for env in (serial, parallel):
                env.set_seed(1)
                torch.manual_seed(0)
                rollouts.append(env.rollout(60, break_when_any_done=False))
            a, b = rollouts
            assert a.batch_size == torch.Size([2, 3, 60])
            assert a["next", "done"].sum() >= 3
            assert (a == b).all()
        finally:
            parallel.close()

    def test_lifecycle(self):
        before = _children()
        env = ParallelEnv(2, CountingEnv, {"batch_size": [3], "max_steps": 4})
        assert _children() == before  # lazy: nothing started yet
        assert env.batch_size == torch.Size([2, 3])
        check_env_specs(env, seed=0)
        pids = set(env.worker_pids)
        assert len(pids) == 2 and pids <= _children()
        rollout = env.rollout(10)
        assert rollout.batch_size == torch.Size([2, 3, 4])
        # partial reset of one worker
        td = env.reset()
        td = env.step(env.rand_action(td))["next"].clone()
        td["_reset"] = torch.tensor([[True] * 3, [False] * 3]).unsqueeze(-1)
        out = env.reset(td)
        assert out["observation"].flatten().tolist() == [0.0] * 3 + [1.0] * 3
        env.close()
        env.close()
        assert env.is_closed and env.worker_pids == []
        assert not (pids & _children())
        # a closed env starts again on its next use
        assert env.rollout(3).batch_size == torch.Size([2, 3, 3])
        env.close()
        assert _children() == before

    def test_nested_workers_threads_and_seeds(self):
        make = partial(NestedEnv, batch_size=[2], n_agents=3, max_steps=3)
        env = ParallelEnv(2, make, mp_start_method="fork")
        serial = SerialEnv(2, make)
        try:
            check_env_specs(env, seed=0)
            assert env.set_seed(11) == serial.set_seed(11)
            torch.manual_seed(0)
            a = env.rollout(7, break_when_any_done=False)
            torch.manual_seed(0)
            b = serial.rollout(7, break_when_any_done=False)
            assert (a == b).all()
            assert a["next", "agents", "done"].any()
        finally:
            env.close()
        threads = ParallelEnv(2, ThreadsEnv, num_sub_threads=2)
        try:
            assert threads.reset()["observation"].flatten().tolist() == [2.0, 2.0]
        finally:
            threads.close()

    def test_workers_holding_several_envs(self):
        # 2 workers x 3 envs: each worker runs a SerialEnv of its own
        inner = partial(SerialEnv, 3, CountingEnv, [{"max_steps": m} for m in (2, 3, 4)])
        env = ParallelEnv(2, inner)
        try:
            assert env.batch_size == torch.Size([2, 3])
            td = env.reset()
            for _ in range(3):
                _, td = env.step_and_maybe_reset(env.rand_action(td))
            assert td["observation"].flatten().tolist() == [1.0, 0.0, 3.0] * 2
            torch.manual_seed(0)
            a = env.rollout(9, break_when_any_done=False)
            torch.manual_seed(0)
            b = SerialEnv(2, inner).rollout(9, break_when_any_done=False)
            assert (a == b).all()
        finally:
            env.close()

    def test_transforms_and_memmap(self):
        from torchrl.envs.transforms import StepCounter, TransformedEnv

        env = TransformedEnv(
            ParallelEnv(2, PendulumEnv, shared_memory=False), StepCounter(max_steps=3)
        )
        try:
            check_env_specs(env, seed=0)
            rollout = env.rollout(5, break_when_any_done=False)
            assert rollout["next", "step_count"][0].flatten().tolist() == [1, 2, 3, 1, 2]
            assert torch.isfinite(rollout["next", "observation"]).all()
        finally:
            env.close()
        inside = ParallelEnv(2, _pendulum_with_step_counter)
        try:
            rollout = inside.rollout(6, break_when_any_done=False)
            assert rollout["next", "step_count"][1].flatten().tolist() == [1, 2, 3, 1, 2, 3]
            assert rollout["step_count"][1].flatten().tolist() == [0, 1, 2, 0, 1, 2]
        finally:
            inside.close()

    def test_arguments(self):
        with pytest.raises(ValueError, match="mp_start_method"):
            ParallelEnv(2, CountingEnv, mp_start_method="thread")
        with pytest.raises(ValueError, match="num_sub_threads"):
            ParallelEnv(2, CountingEnv, num_sub_threads=0)
        env = ParallelEnv(2, CountingEnv)
        with pytest.raises(KeyError, match="action"):
            env.step(TensorDict(batch_size=[2]))
        with pytest.raises(ValueError, match="shape"):
            env.step(TensorDict(action=torch.zeros(2, 3, dtype=torch.int64), batch_size=[2]))
        env.close()

    def test_state_inputs_and_reset_kwargs(self):
        # Pendulum reads its "params" from the input: only what is given reaches the workers
        env = ParallelEnv(2, PendulumEnv)
        try:
            params = PendulumEnv.gen_params([2], g=5.0)
            td = env.reset(params.clone())
            assert td["params", "g"].tolist() == [5.0, 5.0]
            td = env.reset()
            assert td["params", "g"].tolist() == [10.0, 10.0]
        finally:
            env.close()

    @pytest.mark.slow
    def test_spawn(self):
        make = EnvCreator(partial(GymEnv, "CartPole-v1"))
        env = ParallelEnv(2, make, mp_start_method="spawn")
        try:
            check_env_specs(env, seed=0)
        finally:
            env.close()
        with pytest.raises(TypeError, match="pickle"):
            ParallelEnv(2, lambda: CountingEnv(), mp_start_method="spawn").reset()


def test_spec_composite_default_shapes():
    """A worker env with an empty state spec and a custom observation key."""

    class Custom(CountingEnv):
        def __init__(self):
            super().__init__()
            self.observation_spec = Composite(
                observation=Unbounded(shape=(1,)), extra=Unbounded(shape=(2,))
            )

        def _reset(self, tensordict, **kwargs):
            out = super()._reset(tensordict, **kwargs)
            out["extra"] = torch.ones(2)
            return out

        def _step(self, tensordict):
            out = super()._step(tensordict)
            out["extra"] = torch.ones(2)
            return out

    env = SerialEnv(2, Custom)
    check_env_specs(env)
    assert env.reset()["extra"].shape == torch.Size([2, 2])
    assert isinstance(env.envs[0], EnvBase)
