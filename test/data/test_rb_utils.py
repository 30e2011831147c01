"""Replay-buffer utilities: TED <-> flat layout, trajectory queries, offline-to-online buffers."""

from __future__ import annotations

import tempfile
import warnings

import pytest
import torch
from tensordict import TensorDict

import torchrl.data as data_pkg
import torchrl.data.replay_buffers as rb_pkg
from torchrl.data import (
    Flat2TED,
    LazyTensorStorage,
    ListStorage,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
    TED2Flat,
    TensorDictReplayBuffer,
    Trajectory,
    TrajectoryPredicate,
    filter_trajectories,
    iter_trajectories,
    prefill_replay_buffer,
    traj,
)
from torchrl.data.replay_buffers.query import trajectory_bounds

# ------------------------------------------------------------------------------------------------
# TED data: episodes of given lengths, observations counting up, next obs = following root obs
# ------------------------------------------------------------------------------------------------


def _ted_rows(lengths_per_row, t_len, feat=2, truncate_last=False):
    """A ``[rows, t_len]`` TED batch; each row holds episodes of the given lengths (summing to T)."""
    rows = []
    counter = 0.0
    for lengths in lengths_per_row:
        assert sum(lengths) == t_len
        obs, nobs, done, reward, ids, agent = [], [], [], [], [], []
        for e, n in enumerate(lengths):
            seq = torch.arange(counter, counter + n + 1).unsqueeze(-1).expand(n + 1, feat)
            counter += n + 1000.0  # the final next obs of an episode differs from the next reset
            obs.append(seq[:-1])
            nobs.append(seq[1:])
            d = torch.zeros(n, 1, dtype=torch.bool)
            d[-1] = e < len(lengths) - 1 or not truncate_last
            done.append(d)
            reward.append(torch.rand(n, 1))
            ids.append(torch.full((n,), float(len(rows) * 100 + e)))
            agent.append(seq[:-1, :1] * 2)
        obs, nobs = torch.cat(obs), torch.cat(nobs)
        agent_root = torch.cat(agent)
        agent_next = nobs[:, :1] * 2
        rows.append(
            TensorDict(
                observation=obs.clone(),
                action=torch.randn(t_len, 1),
                agents=TensorDict(obs=agent_root, batch_size=[t_len]),
                traj_ids=torch.cat(ids).long(),
                next=TensorDict(
                    observation=nobs.clone(),
                    agents=TensorDict(obs=agent_next, batch_size=[t_len]),
                    reward=torch.cat(reward),
                    done=torch.cat(done),
                    terminated=torch.cat(done).clone(),
                    truncated=torch.zeros(t_len, 1, dtype=torch.bool),
                    batch_size=[t_len],
                ),
                batch_size=[t_len],
            )
        )
    return torch.stack(rows)


def _assert_td_equal(a, b):
    assert a.batch_size == b.batch_size
    ka = set(a.keys(include_nested=True, leaves_only=True))
    kb = set(b.keys(include_nested=True, leaves_only=True))
    assert ka == kb
    for key in ka:
        assert torch.equal(a.get(key), b.get(key)), key


class TestTEDFlat:
    def test_round_trip_1d_drops_duplicates(self):
        ted = _ted_rows([[2, 3, 1]], 6)[0]
        flat = TED2Flat()(ted)
        # only the 3 episode ends keep their next observation
        assert flat["next", "observation"].shape == (3, 2)
        assert flat["next", "agents", "obs"].shape == (3, 1)
        # rewards and done flags are never compacted
        assert flat["next", "reward"].shape == (6, 1)
        assert flat["next", "done"].shape == (6, 1)
        assert flat["shift"].item() == 0 and flat["is_full"].item()
        _assert_td_equal(Flat2TED()(flat), ted)

    def test_round_trip_2d(self):
        ted = _ted_rows([[2, 4], [6], [1, 1, 4]], 6)
        flat = TED2Flat()(ted)
        # ends: 2 + 1 + 3 episodes (every row end is kept)
        assert flat["next", "observation"].shape == (6, 2)
        assert flat["ted_batch_size"].tolist() == [3, 6]
        _assert_td_equal(Flat2TED()(flat), ted)

    def test_unfinished_episode_at_row_end_is_kept(self):
        ted = _ted_rows([[3, 3]], 6, truncate_last=True)[0]
        flat = TED2Flat()(ted)
        assert flat["next", "observation"].shape == (2, 2)
        _assert_td_equal(Flat2TED()(flat), ted)

    def test_wrapped_ring_buffer(self):
        # Slots 0..2 hold the newest items (written after wrapping), slots 3..5 older ones: the
        # newest item (slot 2) is not followed by slot 3.
        ted = _ted_rows([[6]], 6, truncate_last=True)[0]
        ring = torch.cat([ted[3:], ted[:3]])
        with pytest.raises(ValueError, match=r"\('next', 'observation'\) is not the root"):
            TED2Flat()(ring)
        flat = TED2Flat()(ring, shift=3, is_full=True)
        assert flat["shift"].item() == 3
        _assert_td_equal(Flat2TED()(flat), ring)

    def test_partially_filled_storage(self):
        ted = _ted_rows([[2, 2]], 4, truncate_last=True)[0]
        storage = torch.cat([ted, ted[:1].apply(torch.zeros_like).expand(2).clone()])
        storage["observation"][4:] = 42.0  # garbage in the unfilled slots
        with pytest.raises(ValueError):
            TED2Flat()(storage)
        flat = TED2Flat()(storage, shift=4, is_full=False)
        back = Flat2TED()(flat)
        _assert_td_equal(back[:4], ted)

    def test_multistep_data_raises(self):
        ted = _ted_rows([[6]], 6)[0]
        ted["next", "observation"][1] += 1.0
        with pytest.raises(ValueError, match="multi-step"):
            TED2Flat()(ted)

    def test_next_entry_of_other_shape_is_kept(self):
        ted = _ted_rows([[3, 3]], 6)[0]
        ted["next", "observation"] = torch.zeros(6, 5)
        flat = TED2Flat()(ted)
        assert flat["next", "observation"].shape == (6, 5)
        _assert_td_equal(Flat2TED()(flat), ted)

    def test_custom_keys(self):
        ted = _ted_rows([[3, 3]], 6)[0]
        ted["next", "r2"] = ted["next", "reward"].clone()
        ted["r2"] = torch.zeros(6, 1)  # same shape as ("next", "r2") but not a copy: a reward
        to_flat = TED2Flat(shift_key="cursor", is_full_key=("meta", "full"), reward_keys=["r2"])
        flat = to_flat(ted)
        assert "cursor" in flat.keys() and ("meta", "full") in flat.keys(True)
        assert flat["next", "r2"].shape == (6, 1)
        back = Flat2TED(shift_key="cursor", is_full_key=("meta", "full"), reward_keys=["r2"])
        _assert_td_equal(back(flat), ted)
        with pytest.raises(KeyError, match="shift"):
            Flat2TED()(flat)

    def test_bad_inputs(self):
        with pytest.raises(TypeError, match="TensorDict"):
            TED2Flat()(torch.zeros(3))
        with pytest.raises(ValueError, match="time dim"):
            TED2Flat()(TensorDict(a=torch.zeros(()), batch_size=[]))
        with pytest.raises(ValueError, match="shift"):
            TED2Flat()(_ted_rows([[6]], 6)[0], shift=7)
        with pytest.raises(TypeError, match="Flat2TED"):
            Flat2TED()([1, 2])
        flat = TED2Flat()(_ted_rows([[3, 3]], 6)[0])
        flat["next", "done"] = torch.zeros(6, 1, dtype=torch.bool)  # the ends changed
        flat["next", "terminated"] = torch.zeros(6, 1, dtype=torch.bool)
        with pytest.raises(ValueError, match="kept values"):
            Flat2TED()(flat)

    def test_as_storage_hooks(self):
        ted = _ted_rows([[2, 4]], 6)[0]
        rb = ReplayBuffer(storage=LazyTensorStorage(6))
        rb.extend(ted)
        rb.storage.checkpointer.register_save_hook(TED2Flat())
        with tempfile.TemporaryDirectory() as tmp:
            rb.dumps(tmp)
            rb2 = ReplayBuffer(storage=LazyTensorStorage(6))
            rb2.storage.checkpointer.register_load_hook(Flat2TED())
            rb2.loads(tmp)
            _assert_td_equal(rb2[:], ted)


# ------------------------------------------------------------------------------------------------
# Trajectories
# ------------------------------------------------------------------------------------------------


def _transitions(lengths, rewards=None, id_key="traj_ids"):
    n = sum(lengths)
    ids = torch.cat([torch.full((k,), i) for i, k in enumerate(lengths)])
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[torch.tensor(lengths).cumsum(0) - 1] = True
    reward = torch.ones(n, 1) if rewards is None else torch.as_tensor(rewards).reshape(n, 1)
    td = TensorDict(
        observation=torch.arange(n, dtype=torch.float32).unsqueeze(-1),
        action=torch.zeros(n, 2),
        next=TensorDict(
            reward=reward,
            done=done,
            terminated=done.clone(),
            truncated=torch.zeros_like(done),
            observation=torch.arange(1, n + 1, dtype=torch.float32).unsqueeze(-1),
            batch_size=[n],
        ),
        batch_size=[n],
    )
    if id_key is not None:
        td.set(id_key, ids)
    return td


class TestTrajectories:
    @pytest.mark.parametrize("id_key", ["traj_ids", ("collector", "traj_ids"), "episode"])
    def test_iter_by_ids(self, id_key):
        data = _transitions([2, 3, 1], id_key=id_key)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            trajs = list(iter_trajectories(data))
        assert [t.length for t in trajs] == [2, 3, 1]
        assert trajs[1].observation.squeeze(-1).tolist() == [2.0, 3.0, 4.0]

    def test_ids_beat_done_flags(self):
        # a trajectory cut by the collector (no done flag) followed by another one
        data = _transitions([3, 3])
        data["next", "done"][2] = False
        data["next", "terminated"][2] = False
        assert [t.length for t in iter_trajectories(data)] == [3, 3]

    def test_explicit_key(self):
        data = _transitions([2, 4])
        data["my_ids"] = torch.tensor([5, 5, 5, 7, 7, 7])
        assert [t.length for t in iter_trajectories(data, trajectory_key="my_ids")] == [3, 3]
        with pytest.raises(KeyError, match="missing"):
            list(iter_trajectories(data, trajectory_key="missing"))

    def test_fallback_to_done_flags_warns(self):
        data = _transitions([2, 3, 1], id_key=None)
        with pytest.warns(UserWarning, match="done flags"):
            trajs = list(iter_trajectories(data))
        assert [t.length for t in trajs] == [2, 3, 1]
        # a truncated flag alone also ends a trajectory
        data["next", "done"].zero_()
        data["next", "terminated"].zero_()
        data["next", "truncated"][3] = True
        with pytest.warns(UserWarning):
            assert [t.length for t in iter_trajectories(data)] == [4, 2]

    def test_errors(self):
        with pytest.raises(ValueError, match="no trajectory ids"):
            list(iter_trajectories(TensorDict(a=torch.zeros(4), batch_size=[4])))
        with pytest.raises(ValueError, match="single batch dim"):
            list(iter_trajectories(_transitions([2, 2]).reshape(2, 2)))
        with pytest.raises(TypeError):
            list(iter_trajectories({"a": 1}))
        assert list(iter_trajectories(_transitions([2])[:0])) == []
        assert trajectory_bounds(_transitions([2, 1])).tolist() == [[0, 2], [2, 3]]

    def test_trajectory_view(self):
        t = next(iter_trajectories(_transitions([3, 1])))
        assert len(t) == 3 and t.length == 3
        assert t.reward.shape == (3, 1)  # from "next"
        assert t.observation.squeeze(-1).tolist() == [0.0, 1.0, 2.0]  # the root one
        assert t.get(("next", "observation")).squeeze(-1).tolist() == [1.0, 2.0, 3.0]
        assert t.done[-1].item() and t.terminated[-1].item() and not t.truncated.any()
        assert t.action.shape == (3, 2)
        assert t.get("nope", 0) == 0
        with pytest.raises(KeyError, match="nope"):
            t["nope"]
        assert "length=3" in repr(t)
        with pytest.raises(ValueError, match="one batch dim"):
            Trajectory(TensorDict(a=torch.zeros(2, 2), batch_size=[2, 2]))
        with pytest.raises(TypeError):
            Trajectory(torch.zeros(3))

    def test_filter_with_expressions(self):
        data = _transitions([2, 3, 1], rewards=[1.0, 1.0, 5.0, 5.0, 5.0, 9.0])
        kept = filter_trajectories(data, traj.reward.sum() > 3)
        assert [t.length for t in kept] == [3, 1]
        kept = filter_trajectories(data, (traj.reward.sum() > 3) & (traj.length > 1))
        assert [t.length for t in kept] == [3]
        kept = filter_trajectories(data, (traj.length == 2) | (traj.reward.max() >= 9))
        assert [t.length for t in kept] == [2, 1]
        kept = filter_trajectories(data, ~(traj.length == 3))
        assert [t.length for t in kept] == [2, 1]
        # arithmetic between expressions and reductions
        kept = filter_trajectories(data, traj.reward.sum() / traj.length > 4)
        assert [t.length for t in kept] == [3, 1]
        kept = filter_trajectories(data, traj["observation"].first() >= 2)
        assert [t.length for t in kept] == [3, 1]
        kept = filter_trajectories(data, traj.done.last() & (traj.reward.mean() < 2))
        assert [t.length for t in kept] == [2]
        assert len(filter_trajectories(data)) == 3
        assert len(filter_trajectories(data, lambda t: t.length > 1)) == 2

    def test_predicate_api(self):
        p = (traj.reward.sum() > 1) & (traj["observation"].min() < 3) | (traj.length > 9)
        assert p.required_keys() == frozenset({"reward", "observation"})
        assert "traj.reward.sum()" in repr(p)
        opaque = TrajectoryPredicate(lambda t: True, "always")
        assert opaque.required_keys() is None
        assert (opaque & p).required_keys() is None
        assert repr(opaque) == "TrajectoryPredicate(always)"
        with pytest.raises(TypeError):
            TrajectoryPredicate(3)
        # a non-reduced comparison is refused with a hint
        t = next(iter_trajectories(_transitions([3])))
        with pytest.raises(ValueError, match=r"reduce it first"):
            (traj.reward > 0)(t)
        with pytest.raises(TypeError, match="predicate"):
            filter_trajectories(_transitions([3]), 5)
        with pytest.raises(TypeError):
            _ = p & 5


# ------------------------------------------------------------------------------------------------
# Offline to online
# ------------------------------------------------------------------------------------------------


def _buffer(n, value, capacity=None):
    rb = ReplayBuffer(storage=LazyTensorStorage(capacity or n))
    rb.extend(TensorDict(obs=torch.full((n, 3), float(value)), batch_size=[n]))
    return rb


class TestOfflineToOnline:
    def test_exact_split_every_batch(self):
        offline = _buffer(50, 0)
        rb = OfflineToOnlineReplayBuffer(offline, online_capacity=100, offline_fraction=0.3)
        rb.extend(TensorDict(obs=torch.ones(20, 3), batch_size=[20]))
        for _ in range(5):
            batch = rb.sample(10)
            assert batch.shape == (10,)
            # round(0.3 * 10) == 3 offline items, first
            assert batch["obs"][:, 0].tolist() == [0.0] * 3 + [1.0] * 7
        assert rb.split(7) == (2, 5)
        assert len(rb) == 70 and len(rb.online_buffer) == 20
        assert len(offline) == 50  # the offline data is never written to

    def test_tensordict_replay_buffer_dataset(self):
        # Its samples carry "index" (into the dataset's storage): dropped from mixed batches.
        offline = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        offline.extend(TensorDict(obs=torch.zeros(10, 3), batch_size=[10]))
        rb = OfflineToOnlineReplayBuffer(offline, online_capacity=10, offline_fraction=0.5)
        rb.extend(TensorDict(obs=torch.ones(4, 3), batch_size=[4]))
        batch = rb.sample(4)
        assert batch["obs"][:, 0].tolist() == [0.0, 0.0, 1.0, 1.0]
        assert "index" not in batch.keys()

    def test_empty_online_and_annealing(self):
        rb = OfflineToOnlineReplayBuffer(_buffer(10, 0), online_capacity=10, batch_size=4)
        assert rb.sample()["obs"].sum() == 0  # online empty: all offline
        rb.extend(TensorDict(obs=torch.ones(5, 3), batch_size=[5]))
        rb.offline_fraction = 0.0
        assert rb.sample()["obs"][:, 0].tolist() == [1.0] * 4
        rb.offline_fraction = 1.0
        assert rb.sample()["obs"].sum() == 0
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            rb.offline_fraction = 1.5

    def test_online_storage_transform_and_state(self):
        calls = []

        def transform(td):
            calls.append(td.shape)
            return td.set("seen", torch.ones(td.shape[0]))

        rb = OfflineToOnlineReplayBuffer(
            _buffer(10, 0), online_storage=ListStorage(10), transform=transform
        )
        for i in range(3):
            rb.add(TensorDict(obs=torch.full((3,), 2.0 + i), batch_size=[]))
        batch = rb.sample(6)
        assert calls == [torch.Size([6])] and batch["seen"].shape == (6,)
        state = rb.state_dict()
        rb2 = OfflineToOnlineReplayBuffer(
            _buffer(10, 0), online_storage=ListStorage(10), offline_fraction=0.9
        )
        rb2.load_state_dict(state)
        assert rb2.offline_fraction == 0.5 and len(rb2.online_buffer) == 3
        rb.empty()
        assert len(rb.online_buffer) == 0 and len(rb.offline_buffer) == 10
        assert "online=0" in repr(rb)

    def test_errors(self):
        offline = _buffer(10, 0)
        with pytest.raises(ValueError, match="exclusive"):
            OfflineToOnlineReplayBuffer(offline, online_storage=ListStorage(3), online_capacity=3)
        with pytest.raises(ValueError, match="online_capacity"):
            OfflineToOnlineReplayBuffer(offline)
        with pytest.raises(ValueError, match="positive int"):
            OfflineToOnlineReplayBuffer(offline, online_capacity=0)
        with pytest.raises(TypeError, match="Storage"):
            OfflineToOnlineReplayBuffer(offline, online_storage=[1])
        with pytest.raises(KeyError, match="no dataset registered"):
            OfflineToOnlineReplayBuffer("nosuchfamily:x", online_capacity=3)
        with pytest.raises(TypeError, match="ReplayBuffer"):
            OfflineToOnlineReplayBuffer([1, 2], online_capacity=3)
        with pytest.raises(TypeError, match="unexpected keyword"):
            OfflineToOnlineReplayBuffer(offline, online_capacity=3, download=True)
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            OfflineToOnlineReplayBuffer(offline, online_capacity=3, offline_fraction=-0.1)
        rb = OfflineToOnlineReplayBuffer(offline, online_capacity=3)
        with pytest.raises(RuntimeError, match="batch size"):
            rb.sample()
        rb.extend(TensorDict(obs=torch.ones(2, 3), other=torch.ones(2), batch_size=[2]))
        with pytest.raises(KeyError, match="online only: .*other"):
            rb.sample(4)
        empty = OfflineToOnlineReplayBuffer(
            ReplayBuffer(storage=LazyTensorStorage(3)), online_capacity=3
        )
        with pytest.raises(RuntimeError, match="offline dataset is empty"):
            empty.sample(2)
        with pytest.raises(KeyError, match="lacks"):
            rb.load_state_dict({})


class TestPrefill:
    def test_copies_in_order_by_chunks(self):
        dataset = ReplayBuffer(storage=LazyTensorStorage(25))
        dataset.extend(TensorDict(obs=torch.arange(25.0).unsqueeze(-1), batch_size=[25]))
        rb = ReplayBuffer(storage=LazyTensorStorage(100))
        assert prefill_replay_buffer(rb, dataset, n_samples=12, chunk_size=5) is rb
        assert rb[:]["obs"].squeeze(-1).tolist() == [float(i) for i in range(12)]
        rb2 = prefill_replay_buffer(ReplayBuffer(storage=LazyTensorStorage(100)), dataset)
        assert len(rb2) == 25
        assert (
            len(prefill_replay_buffer(ReplayBuffer(storage=LazyTensorStorage(9)), dataset, 0)) == 0
        )

    def test_multi_dim_dataset(self):
        dataset = ReplayBuffer(storage=LazyTensorStorage(8, ndim=2))
        dataset.extend(TensorDict(obs=torch.arange(8.0).reshape(2, 4), batch_size=[2, 4]))
        rb = prefill_replay_buffer(
            ReplayBuffer(storage=LazyTensorStorage(10)), dataset, chunk_size=3
        )
        assert rb[:]["obs"].tolist() == [float(i) for i in range(8)]  # row-major order

    def test_from_iterable_of_batches(self):
        def batches():  # what a collector yields: [n_envs, T] batches, endlessly
            i = 0
            while True:
                yield TensorDict(obs=torch.arange(i, i + 6.0).reshape(2, 3), batch_size=[2, 3])
                i += 6

        rb = prefill_replay_buffer(ReplayBuffer(storage=LazyTensorStorage(20)), batches(), 10, 4)
        assert rb[:]["obs"].tolist() == [float(i) for i in range(10)]
        with pytest.raises(ValueError, match="n_samples is required"):
            prefill_replay_buffer(rb, batches())
        with pytest.raises(TypeError, match="TensorDict batches"):
            prefill_replay_buffer(rb, iter([1, 2]), 3)

    def test_errors(self):
        dataset = _buffer(5, 0)
        rb = ReplayBuffer(storage=LazyTensorStorage(10))
        with pytest.raises(KeyError, match="no dataset registered"):
            prefill_replay_buffer(rb, "nosuchfamily:halfcheetah-medium-v2")
        with pytest.raises(ValueError, match="chunk_size"):
            prefill_replay_buffer(rb, dataset, chunk_size=0)
        with pytest.raises(ValueError, match="n_samples"):
            prefill_replay_buffer(rb, dataset, n_samples=-1)
        with pytest.raises(TypeError, match="extend"):
            prefill_replay_buffer(object(), dataset)
        with pytest.raises(TypeError, match="dataset"):
            prefill_replay_buffer(rb, 3)


def test_exported_paths():
    names = [
        "Flat2TED",
        "OfflineToOnlineReplayBuffer",
        "TED2Flat",
        "Trajectory",
        "TrajectoryPredicate",
        "filter_trajectories",
        "iter_trajectories",
        "prefill_replay_buffer",
        "traj",
    ]
    for name in names:
        assert getattr(data_pkg, name) is getattr(rb_pkg, name)
        assert name in rb_pkg.__all__
