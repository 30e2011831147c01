"""SyncDataCollector: batch shapes and counts, trajectories, options, life cycle."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from _collector_helpers import counting_env, threshold_policy
from _envs import CountingEnv, NestedEnv
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.collectors import (
    Collector,
    DataCollectorBase,
    SyncDataCollector,
    split_trajectories,
)
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.data.postprocs import MultiStep
from torchrl.envs import PendulumEnv, SerialEnv
from torchrl.envs.utils import ExplorationType, RandomPolicy, exploration_type

TRAJ = ("collector", "traj_ids")


def _collect(collector: SyncDataCollector) -> list[TensorDict]:
    return [batch for batch in collector]


class TestFrames:
    @pytest.mark.parametrize("batch", [0, 3])
    def test_frames_per_batch_and_total_exact(self, batch):
        collector = SyncDataCollector(counting_env(batch), frames_per_batch=12, total_frames=48)
        batches = _collect(collector)
        steps = 12 // max(batch, 1)
        expected = torch.Size([batch, steps]) if batch else torch.Size([steps])
        assert len(batches) == 4
        assert all(b.batch_size == expected for b in batches)
        assert sum(b.numel() for b in batches) == collector.frames == 48

    def test_frames_per_batch_rounded_up_to_whole_steps(self):
        with pytest.warns(UserWarning, match="not a multiple"):
            collector = SyncDataCollector(counting_env(3), frames_per_batch=10, total_frames=24)
        assert collector.frames_per_batch == 12
        assert [b.numel() for b in collector] == [12, 12]

    def test_total_frames_rounded_up_to_whole_batches(self):
        with pytest.warns(UserWarning, match="total_frames"):
            collector = SyncDataCollector(counting_env(), frames_per_batch=10, total_frames=25)
        assert sum(b.numel() for b in collector) == 30

    def test_infinite(self):
        collector = SyncDataCollector(counting_env(), frames_per_batch=4, total_frames=-1)
        for i, _ in enumerate(collector):
            if i == 5:
                break
        assert collector.frames == 24

    @pytest.mark.parametrize("bad", [0, -3, 2.5])
    def test_bad_frames_per_batch(self, bad):
        with pytest.raises(ValueError, match="frames_per_batch"):
            SyncDataCollector(counting_env(), frames_per_batch=bad)

    def test_numpy_and_other_integer_counts(self):
        # what a Trainer (or a config loaded with numpy) passes on
        collector = SyncDataCollector(
            counting_env(2),
            frames_per_batch=np.int64(4),
            total_frames=np.int32(8),
            init_random_frames=np.int64(4),
            max_frames_per_traj=np.uint8(3),
        )
        assert type(collector.frames_per_batch) is int and collector.frames_per_batch == 4
        assert type(collector.total_frames) is int and collector.total_frames == 8
        assert type(collector.init_random_frames) is int and collector.init_random_frames == 4
        assert collector.max_frames_per_traj == 3
        assert [b.numel() for b in collector] == [4, 4]
        forever = SyncDataCollector(counting_env(), frames_per_batch=4, total_frames=np.int64(-1))
        assert forever.total_frames == float("inf")

    @pytest.mark.parametrize(
        "kwargs, match",
        [
            ({"init_random_frames": -1}, "init_random_frames must be an integer >= 0, got -1"),
            ({"init_random_frames": np.int64(-8)}, "init_random_frames .* got -8"),
            ({"init_random_frames": 1.5}, r"init_random_frames .* got 1\.5 \(float\)"),
            ({"max_frames_per_traj": 0}, "max_frames_per_traj must be an integer >= 1, got 0"),
            ({"max_frames_per_traj": -1}, "max_frames_per_traj"),
            ({"total_frames": -2}, r"total_frames .* got -2 \(-1 or None: collect forever\)"),
            ({"total_frames": 0}, "total_frames"),
            ({"total_frames": 8.0}, r"total_frames .* got 8\.0 \(float\)"),
            ({"frames_per_batch": True}, r"frames_per_batch .* got True \(bool\)"),
            ({"frames_per_batch": np.float64(4)}, "frames_per_batch"),
            ({"frames_per_batch": "4"}, "frames_per_batch"),
        ],
    )
    def test_bad_counts_name_the_argument_and_the_value(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            SyncDataCollector(counting_env(), **{"frames_per_batch": 4, **kwargs})


class TestTrajectories:
    def test_traj_ids_unique_and_continue_across_batches(self):
        # 2 envs ending after 5 steps, 3 steps per batch: every trajectory spans 2 batches
        collector = SyncDataCollector(
            counting_env(2), threshold_policy(), frames_per_batch=6, total_frames=60
        )
        data = torch.cat(_collect(collector), dim=-1)  # [2, 30]
        ids, obs = data[TRAJ], data["observation"].squeeze(-1)
        for row in range(2):
            # a new id starts exactly where the count restarts from 0
            starts = obs[row] == 0
            changes = torch.cat([torch.tensor([True]), ids[row, 1:] != ids[row, :-1]])
            assert torch.equal(starts, changes)
        assert not set(ids[0].tolist()) & set(ids[1].tolist())
        assert ids.unique().numel() == 12  # 30 steps / 5 per episode, per env

    def test_split_trajectories_across_batches(self):
        collector = SyncDataCollector(counting_env(2), frames_per_batch=6, total_frames=60)
        data = torch.cat(_collect(collector), dim=-1)
        split = split_trajectories(data)
        assert split.batch_size == torch.Size([12, 5])
        assert split["collector", "mask"].all()
        expected = torch.arange(5.0).expand(12, 5)
        assert torch.equal(split["observation"].squeeze(-1), expected)
        assert split["next", "done"][:, -1].all() and not split["next", "done"][:, :-1].any()

    def test_split_trajs_option(self):
        collector = SyncDataCollector(
            counting_env(max_steps=3), frames_per_batch=7, total_frames=7, split_trajs=True
        )
        (batch,) = _collect(collector)
        assert batch.batch_size == torch.Size([3, 3])
        assert batch["collector", "mask"].sum() == 7

    def test_max_frames_per_traj_truncates_and_resets(self):
        collector = SyncDataCollector(
            counting_env(max_steps=100), frames_per_batch=10, total_frames=10, max_frames_per_traj=3
        )
        (batch,) = _collect(collector)
        assert batch["observation"].squeeze(-1).tolist() == [0, 1, 2] * 3 + [0]
        truncated = batch["next", "truncated"].squeeze(-1)
        assert truncated.tolist() == [False, False, True] * 3 + [False]
        assert torch.equal(batch["next", "done"], batch["next", "truncated"])
        assert not batch["next", "terminated"].any()
        assert batch[TRAJ].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]

    def test_max_frames_per_traj_batched(self):
        env = CountingEnv(batch_size=[2], max_steps=torch.tensor([2, 100]))
        collector = SyncDataCollector(env, frames_per_batch=12, max_frames_per_traj=4)
        batch = collector.rollout()
        assert batch["observation"][0].squeeze(-1).tolist() == [0, 1] * 3
        assert batch["observation"][1].squeeze(-1).tolist() == [0, 1, 2, 3, 0, 1]
        assert batch["next", "truncated"][1].squeeze(-1).tolist() == [0, 0, 0, 1, 0, 0]

    def test_reset_at_each_iter(self):
        collector = SyncDataCollector(
            counting_env(max_steps=100), frames_per_batch=3, total_frames=9, reset_at_each_iter=True
        )
        for batch in collector:
            assert batch["observation"].squeeze(-1).tolist() == [0, 1, 2]

    def test_set_truncated(self):
        collector = SyncDataCollector(
            counting_env(max_steps=100), frames_per_batch=3, total_frames=6, set_truncated=True
        )
        b1, b2 = _collect(collector)
        for b in (b1, b2):
            assert b["next", "truncated"].squeeze(-1).tolist() == [False, False, True]
            assert b["next", "done"][-1].all()
        assert b2["observation"][0].item() == 0  # a new trajectory after the truncation
        assert b1[TRAJ].unique().item() != b2[TRAJ].unique().item()

    def test_reset_some_sub_envs(self):
        collector = SyncDataCollector(counting_env(2, 100), frames_per_batch=4)
        first = collector.rollout().clone()  # rollout() returns the reused buffer
        collector.reset(index=1)
        second = collector.rollout()
        assert second["observation"][:, 0].squeeze(-1).tolist() == [2, 0]
        assert second[TRAJ][0, 0] == first[TRAJ][0, 0]
        assert second[TRAJ][1, 0] not in first[TRAJ]
        collector.reset()
        assert collector.rollout()["observation"][:, 0].sum() == 0

    def test_devices_on_cpu(self):
        collector = SyncDataCollector(
            counting_env(), threshold_policy(), frames_per_batch=4, device="cpu"
        )
        assert collector.env.device == torch.device("cpu")
        assert collector.storing_device == torch.device("cpu")
        assert collector.rollout()["observation"].device == torch.device("cpu")

    def test_reset_when_done_false(self):
        env = CountingEnv(max_steps=2)
        collector = SyncDataCollector(env, frames_per_batch=4, reset_when_done=False)
        batch = collector.rollout()
        # never reset: the count keeps going past the end of the episode
        assert batch["observation"].squeeze(-1).tolist() == [0, 1, 2, 3]


class TestPolicy:
    def test_none_is_random_policy(self):
        collector = SyncDataCollector(counting_env(), frames_per_batch=50)
        assert isinstance(collector.policy, RandomPolicy)
        actions = collector.rollout()["action"]
        assert set(actions.unique().tolist()) == {0, 1}

    def test_plain_module_is_wrapped(self):
        collector = SyncDataCollector(counting_env(), threshold_policy().module, frames_per_batch=4)
        assert isinstance(collector.policy, TensorDictModule)
        assert collector.rollout()["action"].sum() == 0

    def test_callable_policy(self):
        def policy(td):
            td["action"] = torch.ones(1, dtype=torch.int64)
            return td

        collector = SyncDataCollector(counting_env(), policy, frames_per_batch=4)
        assert collector.rollout()["next", "reward"].sum() == 4

    def test_init_random_frames(self):
        class Ones(nn.Module):
            def forward(self, obs):
                return torch.ones_like(obs, dtype=torch.int64), obs + 10

        policy = TensorDictModule(Ones(), ["observation"], ["action", "extra"])
        collector = SyncDataCollector(
            counting_env(max_steps=1000),
            policy,
            frames_per_batch=40,
            total_frames=120,
            init_random_frames=40,
        )
        b1, b2, b3 = _collect(collector)
        assert set(b1["action"].unique().tolist()) == {0, 1}
        assert (b1["extra"] == 0).all()  # allocated, but not produced by random actions
        assert (b2["action"] == 1).all() and (b3["action"] == 1).all()
        assert torch.equal(b2["extra"], b2["observation"] + 10)

    @pytest.mark.parametrize("kind", [None, ExplorationType.DETERMINISTIC])
    def test_exploration_type(self, kind):
        seen = []

        def policy(td):
            seen.append(exploration_type())
            td["action"] = torch.zeros(1, dtype=torch.int64)
            return td

        kwargs = {} if kind is None else {"exploration_type": kind}
        collector = SyncDataCollector(counting_env(), policy, frames_per_batch=2, **kwargs)
        collector.rollout()
        assert seen == [kind or ExplorationType.RANDOM] * 2
        assert exploration_type() is None  # the setting does not leak

    def test_no_grad(self):
        def policy(td):
            assert not torch.is_grad_enabled()
            td["action"] = torch.zeros(1, dtype=torch.int64)
            return td

        SyncDataCollector(counting_env(), policy, frames_per_batch=2).rollout()

    def test_update_policy_weights(self):
        policy = threshold_policy()
        collector = SyncDataCollector(counting_env(), policy, frames_per_batch=4)
        assert collector.rollout()["action"].sum() == 0
        collector.update_policy_weights_({"module.linear.bias": torch.ones(1)})
        assert (collector.rollout()["action"] == 1).all()
        with pytest.raises(KeyError, match="no weights named"):
            collector.update_policy_weights_({"nope": torch.ones(1)})


class TestData:
    def test_return_copies_by_default(self):
        collector = SyncDataCollector(counting_env(), frames_per_batch=4, total_frames=8)
        b1, b2 = _collect(collector)
        assert b1["observation"].squeeze(-1).tolist() == [0, 1, 2, 3]
        assert b2["observation"].squeeze(-1).tolist() == [4, 0, 1, 2]

    def test_return_same_td(self):
        collector = SyncDataCollector(
            counting_env(), frames_per_batch=4, total_frames=8, return_same_td=True
        )
        b1, b2 = _collect(collector)
        assert b1 is b2

    def test_postproc(self):
        collector = SyncDataCollector(
            counting_env(), frames_per_batch=4, total_frames=4, postproc=MultiStep(0.9, 1)
        )
        (batch,) = _collect(collector)
        assert "steps_to_next_obs" in batch.keys()

    def test_replay_buffer(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(100))
        collector = SyncDataCollector(
            counting_env(2), frames_per_batch=8, total_frames=24, replay_buffer=rb
        )
        assert list(collector) == [None, None, None]
        assert len(rb) == 24
        assert rb.sample(4)["observation"].shape == torch.Size([4, 1])

    def test_use_buffers_false_matches_buffers(self):
        def run(use_buffers):
            torch.manual_seed(0)
            env = PendulumEnv(batch_size=[2], seed=0)
            collector = SyncDataCollector(
                env, frames_per_batch=10, total_frames=20, use_buffers=use_buffers
            )
            return torch.cat(_collect(collector), -1)

        a, b = run(True), run(False)
        assert a.batch_size == b.batch_size
        for key in a.keys(True, True):
            assert torch.equal(a[key], b[key]), key

    def test_nested_multi_agent_keys(self):
        collector = SyncDataCollector(NestedEnv(batch_size=[2]), frames_per_batch=10)
        batch = collector.rollout()
        assert batch["agents"].batch_size == torch.Size([2, 5, 3])
        assert batch["next", "agents", "reward"].shape == torch.Size([2, 5, 3, 1])
        assert batch[TRAJ][:, :4].unique().numel() == 2  # episodes of 4 steps
        assert (batch[TRAJ][:, 4] != batch[TRAJ][:, 3]).all()

    def test_serial_env(self):
        env = SerialEnv(2, lambda: CountingEnv(max_steps=3))
        collector = SyncDataCollector(env, frames_per_batch=8, total_frames=16)
        batches = _collect(collector)
        assert batches[0].batch_size == torch.Size([2, 4])
        assert batches[1]["observation"][0].squeeze(-1).tolist() == [1, 2, 0, 1]
        collector.shutdown()

    def test_missing_key_later_is_explained(self):
        class Dropping(CountingEnv):
            def _step(self, td):
                out = super()._step(td)
                if self.count.sum() == 2:
                    del out["observation"]
                return out

        collector = SyncDataCollector(Dropping(), frames_per_batch=4)
        with pytest.raises(KeyError, match="first transition had"):
            collector.rollout()

    def test_deterministic_with_seed(self):
        def run(seed):
            torch.manual_seed(seed)
            env = PendulumEnv(batch_size=[2])
            collector = SyncDataCollector(env, frames_per_batch=20, total_frames=40)
            collector.set_seed(seed)
            return torch.cat(_collect(collector), -1)

        a, b, c = run(0), run(0), run(1)
        assert (a == b).all()
        assert not torch.equal(a["observation"], c["observation"])


class TestLifeCycle:
    def test_aliases(self):
        assert Collector is SyncDataCollector
        assert issubclass(SyncDataCollector, DataCollectorBase)

    def test_next_continues_iteration(self):
        collector = SyncDataCollector(counting_env(), frames_per_batch=2, total_frames=4)
        b1 = collector.next()
        b2 = collector.next()
        assert b1["observation"].squeeze(-1).tolist() == [0, 1]
        assert b2["observation"].squeeze(-1).tolist() == [2, 3]
        with pytest.raises(StopIteration):
            collector.next()

    def test_shutdown_idempotent_and_context_manager(self):
        env = counting_env()
        with SyncDataCollector(env, frames_per_batch=2) as collector:
            collector.rollout()
        assert env.is_closed
        collector.shutdown()
        collector.shutdown()

    def test_state_dict_round_trip(self):
        policy = threshold_policy()
        collector = SyncDataCollector(counting_env(), policy, frames_per_batch=2, total_frames=8)
        collector.next()
        state = collector.state_dict()
        assert state["frames"] == 2
        other = SyncDataCollector(counting_env(), threshold_policy(), frames_per_batch=2)
        with torch.no_grad():
            other.policy.module.linear.bias.fill_(5.0)
        other.load_state_dict(state)
        assert other.frames == 2
        assert other.policy.module.linear.bias.item() == -1.0

    def test_start_and_async_shutdown(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10_000))
        collector = SyncDataCollector(
            counting_env(), frames_per_batch=10, total_frames=-1, replay_buffer=rb
        )
        before = threading.active_count()
        collector.start()
        assert collector.is_running()
        deadline = time.monotonic() + 10
        while len(rb) < 50 and time.monotonic() < deadline:
            time.sleep(0.01)
        collector.async_shutdown(timeout=10)
        assert len(rb) >= 50
        assert threading.active_count() == before
        assert not collector.is_running()

    def test_async_shutdown_keeping_the_env(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10_000))
        collector = SyncDataCollector(counting_env(), frames_per_batch=10, replay_buffer=rb)
        collector.start()
        while len(rb) < 20:
            time.sleep(0.01)
        collector.async_shutdown(close_env=False)
        assert collector.next() is None  # still usable
        with collector:
            collector.start()
        assert not collector.is_running()

    def test_start_needs_replay_buffer(self):
        collector = SyncDataCollector(counting_env(), frames_per_batch=10)
        with pytest.raises(RuntimeError, match="replay_buffer"):
            collector.start()

    def test_bad_env(self):
        with pytest.raises(TypeError, match="EnvBase"):
            SyncDataCollector(lambda: 3, frames_per_batch=2)
        with pytest.raises(ValueError, match="one env"):
            SyncDataCollector([counting_env, counting_env], frames_per_batch=2)


def _drive(collector: SyncDataCollector, policy: nn.Module) -> TensorDict:
    """Runs ``collector.rollout_steps()`` to its end, acting with ``policy`` outside it."""
    steps = collector.rollout_steps()
    with torch.no_grad():
        td = next(steps)
        try:
            while True:
                td = steps.send(policy(td))
        except StopIteration as stop:
            return stop.value.clone()


def test_rollout_steps_equals_rollout():
    # The generator hands every policy call but the first to its caller: driven with the same
    # deterministic policy, it collects what rollout() collects, batch after batch.
    def make(seed: int) -> SyncDataCollector:
        policy = TensorDictModule(nn.Linear(3, 1), ["observation"], ["action"])
        torch.manual_seed(0)
        policy.module.reset_parameters()
        collector = SyncDataCollector(
            PendulumEnv(batch_size=[3]), policy, frames_per_batch=12, max_frames_per_traj=5
        )
        collector.set_seed(seed)
        return collector

    plain, driven = make(1), make(1)
    acting = driven.policy
    calls = []

    def counted(td):
        calls.append(1)
        return acting(td)

    for _ in range(3):
        expected = plain.rollout().clone()
        got = _drive(driven, counted)
        torch.testing.assert_close(got.to_dict(), expected.to_dict())
    # 3 batches of 4 steps, the very first step called inside
    assert len(calls) == 3 * 4 - 1


def test_rollout_steps_needs_buffers():
    collector = SyncDataCollector(PendulumEnv(), frames_per_batch=4, use_buffers=False)
    with pytest.raises(RuntimeError, match="use_buffers"):
        next(collector.rollout_steps())
