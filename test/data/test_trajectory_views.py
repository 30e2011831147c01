"""Trajectory views: the declaration, build_views on trajectories, and the replay-buffer rebuild."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from torchrl.data import (
    Bounded,
    Categorical,
    Composite,
    LazyTensorStorage,
    ListStorage,
    OneHot,
    SliceSampler,
    TensorDictReplayBuffer,
    Unbounded,
)
from torchrl.data.trajectory_views import (
    TrajectoryView,
    ViewBuilder,
    build_views,
    episode_bounds,
    get_views,
    prev_action,
    prev_reward,
    view_spec,
)

# -- reference: a plain Python loop over steps -------------------------------------------------


def reference_view(x: torch.Tensor, start: torch.Tensor, view: TrajectoryView) -> torch.Tensor:
    """``x`` [T, *F] and episode starts [T] -> the view [T, (n,) *F], one step at a time."""
    T = x.shape[0]
    episode = torch.cumsum(start.long(), 0)
    rows = []
    for t in range(T):
        same = (episode == episode[t]).nonzero().reshape(-1)
        lo, hi = int(same.min()), int(same.max())
        vals = []
        for k in view.shifts:
            s = t + k
            if lo <= s <= hi:
                vals.append(x[s])
            elif view.padding == "zeros":
                vals.append(torch.zeros_like(x[0]))
            else:
                vals.append(x[min(max(s, lo), hi)])
        rows.append(torch.stack(vals) if view.stacked else vals[0])
    return torch.stack(rows)


def random_starts(gen: torch.Generator, *shape: int, p: float = 0.2) -> torch.Tensor:
    start = torch.rand(*shape, generator=gen) < p
    start[..., 0] = True
    return start


SHIFTS = [-1, 0, 2, [-2, 0], [1, -3, 0], range(-3, 1), "-3:0", "-1:2"]


# -- declaration -------------------------------------------------------------------------------


class TestDeclaration:
    @pytest.mark.parametrize(
        "shift, shifts, stacked",
        [
            (0, (0,), False),
            (-1, (-1,), False),
            ([-2, 0], (-2, 0), True),
            (range(-2, 1), (-2, -1, 0), True),
            ("-3:0", (-3, -2, -1, 0), True),
            (" -1 : 1 ", (-1, 0, 1), True),
            ("2:2", (2,), True),
        ],
    )
    def test_shifts(self, shift, shifts, stacked):
        view = TrajectoryView("observation", shift)
        assert view.shifts == shifts
        assert view.stacked is stacked
        assert view.lookback == max(0, -min(shifts))
        assert view.lookahead == max(0, max(shifts))
        hash(view)  # frozen and hashable, lists included

    @pytest.mark.parametrize(
        "shift, error, match",
        [
            ("-3", ValueError, "inclusive range 'start:stop'"),
            ("a:b", ValueError, "inclusive range"),
            ("-3:0:1", ValueError, "inclusive range"),
            ("0:-3", ValueError, "is empty"),
            ([], ValueError, "must not be empty"),
            ([0, 1.5], TypeError, "must hold ints, got 1.5"),
            (True, TypeError, "shift must be"),
            (1.0, TypeError, "got float"),
        ],
    )
    def test_bad_shift(self, shift, error, match):
        with pytest.raises(error, match=match):
            TrajectoryView("observation", shift)

    def test_bad_fields(self):
        with pytest.raises(ValueError, match="padding must be one of .* got 'last'"):
            TrajectoryView("observation", padding="last")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="key must be a string or a tuple"):
            TrajectoryView(3)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="out_key must be"):
            TrajectoryView("observation", out_key=("a", 1))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="used_for_training must be a bool"):
            TrajectoryView("observation", used_for_training=1)  # type: ignore[arg-type]

    def test_out_keys(self):
        assert TrajectoryView("observation").out_key == "observation_view"
        assert TrajectoryView(("next", "reward")).out_key == "next_reward_view"
        assert TrajectoryView(("observation",)).key == "observation"
        assert TrajectoryView("x", out_key=["a", "b"]).out_key == ("a", "b")
        state = TrajectoryView(("next", "h"), -1, out_key="h")
        assert (state.key, state.out_key, state.shifts, state.stacked) == (
            ("next", "h"),
            "h",
            (-1,),
            False,
        )

    def test_prev_action_reward(self):
        assert prev_action() == TrajectoryView("action", -1, out_key="prev_action")
        assert prev_action(("agents", "action")).key == ("agents", "action")
        assert prev_reward() == TrajectoryView(("next", "reward"), -1, out_key="prev_reward")

    def test_get_views(self):
        net = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.Sequential(torch.nn.Linear(1, 1)))
        net[0].views = [prev_action(), TrajectoryView("obs", "-1:0", used_for_training=False)]
        net[1].views = [TrajectoryView("obs", [-1, 0]), prev_reward()]
        net[1][0].views = prev_action()
        views = get_views(net)
        assert [v.out_key for v in views] == ["prev_action", "obs_view", "prev_reward"]
        # merged duplicate: used for training once any declaration is
        assert views[1].used_for_training
        assert get_views(torch.nn.Linear(1, 1)) == []

    def test_get_views_conflict_and_types(self):
        net = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.Linear(1, 1))
        net[0].views = [TrajectoryView("obs", "-1:0")]
        net[1].views = [TrajectoryView("obs", "-2:0")]
        with pytest.raises(ValueError, match="out_key 'obs_view' is declared twice differently"):
            get_views(net)
        net[1].views = ["obs"]
        with pytest.raises(TypeError, match="must hold TrajectoryView objects, got str"):
            get_views(net)
        net[1].views = {"a": 1}
        with pytest.raises(TypeError, match="Linear.views must be a list"):
            get_views(net)


# -- build_views -----------------------------------------------------------------------------


class TestBuildViews:
    @pytest.mark.parametrize("shift", SHIFTS)
    @pytest.mark.parametrize("padding", ["zeros", "first"])
    def test_matches_reference(self, shift, padding):
        gen = torch.Generator().manual_seed(0)
        B, T = 3, 17
        x = torch.randn(B, T, 2, generator=gen)
        start = random_starts(gen, B, T)
        view = TrajectoryView("x", shift, padding=padding)
        out = build_views(TensorDict({"x": x}, [B, T]), [view], episode_start=start)
        for b in range(B):
            torch.testing.assert_close(out["x_view"][b], reference_view(x[b], start[b], view))

    def test_starts_from_is_init_and_done(self):
        gen = torch.Generator().manual_seed(1)
        T = 20
        start = random_starts(gen, 2, T)
        done = torch.zeros(2, T, 1, dtype=torch.bool)
        done[:, :-1, 0] = start[:, 1:]
        x = torch.randn(2, T, generator=gen)
        view = TrajectoryView("x", "-2:1")
        want = build_views(TensorDict({"x": x}, [2, T]), view, episode_start=start)["x_view"]
        from_done = TensorDict({"x": x, ("next", "done"): done}, [2, T])
        torch.testing.assert_close(build_views(from_done, view)["x_view"], want)
        from_init = TensorDict({"x": x, "is_init": start.unsqueeze(-1)}, [2, T])
        torch.testing.assert_close(build_views(from_init, view)["x_view"], want)

    def test_window_start_not_an_episode_start(self):
        x = torch.arange(1.0, 5.0)
        td = TensorDict({"x": x}, [4])
        start = torch.tensor([False, False, True, False])
        zeros = build_views(td, TrajectoryView("x", -1), episode_start=start)["x_view"]
        assert zeros.tolist() == [0.0, 1.0, 0.0, 3.0]
        first = build_views(td, TrajectoryView("x", -2, padding="first"), episode_start=start)
        assert first["x_view"].tolist() == [1.0, 1.0, 3.0, 3.0]

    def test_nested_and_tensordict_sources(self):
        gen = torch.Generator().manual_seed(2)
        T = 9
        start = random_starts(gen, T)
        h = torch.randn(T, 4, generator=gen)
        td = TensorDict({("next", "h"): h, "obs": {"a": h.clone(), "b": h[:, :1].clone()}}, [T])
        views = [
            TrajectoryView(("next", "h"), -1, out_key="h"),
            TrajectoryView("obs", "-2:0"),
        ]
        out = build_views(td, views, episode_start=start)
        torch.testing.assert_close(out["h"], reference_view(h, start, views[0]))
        assert out["obs_view"].batch_size == torch.Size([T, 3])
        torch.testing.assert_close(out["obs_view", "a"], reference_view(h, start, views[1]))
        torch.testing.assert_close(out["obs_view", "b"], reference_view(h[:, :1], start, views[1]))

    def test_views_read_the_entries_before_any_view_is_written(self):
        td = TensorDict({"x": torch.arange(1.0, 4.0)}, [3])
        views = [TrajectoryView("x", -1, out_key="x"), TrajectoryView("x", 0)]
        out = build_views(td, views, episode_start=torch.tensor([True, False, False]))
        assert out["x"].tolist() == [0.0, 1.0, 2.0]
        assert out["x_view"].tolist() == [1.0, 2.0, 3.0]

    def test_integer_and_bool_entries(self):
        td = TensorDict({"a": torch.tensor([3, 1, 2]), "d": torch.tensor([True, False, True])}, [3])
        start = torch.tensor([True, False, False])
        out = build_views(td, [prev_action("a"), TrajectoryView("d", "-1:0")], episode_start=start)
        assert out["prev_action"].tolist() == [0, 3, 1]
        assert out["d_view"].tolist() == [[False, True], [True, False], [False, True]]

    def test_errors(self):
        td = TensorDict({"x": torch.zeros(3)}, [3])
        with pytest.raises(KeyError, match="reads the key 'action', which the trajectory lacks"):
            build_views(td, [prev_action()])
        with pytest.raises(KeyError, match="needs the episode starts"):
            build_views(TensorDict({"x": torch.zeros(3)}, [3]), [TrajectoryView("x", -1)])
        with pytest.raises(ValueError, match=r"episode_start must have the batch shape \(3,\)"):
            build_views(td, [TrajectoryView("x", -1)], episode_start=torch.ones(4, dtype=bool))
        with pytest.raises(ValueError, match="needs a trajectory TensorDict with a time dim"):
            build_views(TensorDict({"x": torch.zeros(())}, []), [TrajectoryView("x")])
        with pytest.raises(TypeError, match="views must hold TrajectoryView objects"):
            build_views(td, ["x"])  # type: ignore[list-item]

    def test_episode_bounds(self):
        first, last = episode_bounds(torch.tensor([[True, True, False], [False, False, True]]))
        assert first.tolist() == [[0, 1, 1], [0, 0, 2]]
        assert last.tolist() == [[0, 2, 2], [1, 1, 2]]
        with pytest.raises(ValueError, match="episode_start must be a bool tensor"):
            episode_bounds(torch.zeros(3))


# -- view_spec -------------------------------------------------------------------------------


class TestViewSpec:
    def test_stacked_and_single(self):
        spec = Composite(
            observation=Unbounded(shape=(4, 3)),
            action=OneHot(5, shape=(4, 5)),
            next=Composite(reward=Unbounded(shape=(4, 1)), shape=(4,)),
            shape=(4,),
        )
        assert view_spec(TrajectoryView("observation", "-2:0"), spec).shape == (4, 3, 3)
        stacked = view_spec(TrajectoryView("action", [-1, 0]), spec)
        assert isinstance(stacked, OneHot) and stacked.shape == (4, 2, 5)
        assert view_spec(prev_reward(), spec).shape == (4, 1)
        assert view_spec(prev_action(), spec) == spec["action"]
        leaf = view_spec(TrajectoryView("x", "-1:0"), Categorical(3, shape=(2,)), batch_dims=1)
        assert isinstance(leaf, Categorical) and leaf.shape == (2, 2)

    def test_zero_padding_widens_bounds(self):
        spec = Bounded(low=1.0, high=2.0, shape=(3,))
        widened = view_spec(TrajectoryView("x", "-1:0"), spec)
        assert widened.shape == (2, 3)
        assert widened.is_in(torch.zeros(2, 3))
        kept = view_spec(TrajectoryView("x", "-1:0", padding="first"), spec)
        assert not kept.is_in(torch.zeros(2, 3))

    def test_missing_key(self):
        spec = Composite(observation=Unbounded(shape=(3,)))
        with pytest.raises(KeyError, match="reads 'action', which the spec does not provide"):
            view_spec(prev_action(), spec)


# -- replay-buffer rebuild -------------------------------------------------------------------


def stream(gen: torch.Generator, B: int, T: int, p: float = 0.15) -> TensorDict:
    """A [B, T] collector-like stream: episodes (is_init, done, traj_ids), obs, action, states."""
    start = random_starts(gen, B, T, p=p)
    done = torch.zeros(B, T, 1, dtype=torch.bool)
    done[:, :-1, 0] = start[:, 1:]
    traj = torch.cumsum(start.long(), 1) + 1000 * torch.arange(B).unsqueeze(-1)
    return TensorDict(
        {
            "observation": torch.randn(B, T, 3, generator=gen),
            "action": torch.randint(4, (B, T), generator=gen),
            "is_init": start.unsqueeze(-1),
            ("next", "done"): done,
            ("next", "h"): torch.randn(B, T, 2, generator=gen),
            ("collector", "traj_ids"): traj,
        },
        [B, T],
    )


VIEWS = [
    TrajectoryView("observation", "-3:0"),
    TrajectoryView("observation", [1, -1], out_key="obs_future", padding="first"),
    prev_action(),
    TrajectoryView(("next", "h"), -1, out_key="h"),
    TrajectoryView("action", "-2:0", padding="first", out_key="actions"),
]


def expected_views(data: TensorDict, filled: int, views, keep=("is_init",)) -> TensorDict:
    """build_views over the stream's last ``filled`` steps (what the ring holds), per row."""
    window = data[..., data.shape[-1] - filled :].clone()
    start = window["is_init"].squeeze(-1).clone()
    start[..., 0] = True
    return build_views(window, views, episode_start=start)


def write_in_chunks(rb: TensorDictReplayBuffer, data: TensorDict, chunk: int) -> None:
    T = data.shape[-1]
    for t0 in range(0, T, chunk):
        rb.extend(data[..., t0 : t0 + chunk].clone())


class TestBufferRebuild:
    @pytest.mark.parametrize("written", [7, 40, 53])
    @pytest.mark.parametrize("drop", [(), ("is_init", ("collector", "traj_ids"))])
    def test_flat_ring_equals_build_views(self, written, drop):
        """ndim=1: wrap-around, unwritten slots, episode ends; from traj ids or done flags."""
        gen = torch.Generator().manual_seed(written)
        data = stream(gen, 1, written)[0]
        slots = 20
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(slots), views=VIEWS)
        write_in_chunks(rb, data.exclude(*drop), 6)
        filled = min(written, slots)
        want = expected_views(data, filled, VIEWS)
        index = torch.arange(filled)
        got = rb.view_builder(rb.storage.get(index), rb.storage, index, cursor=written % slots)
        # slot s holds stream step i with i % slots == s among the last `filled` steps
        step = torch.arange(written - filled, written)
        order = torch.argsort(step % slots)
        for view in VIEWS:
            torch.testing.assert_close(got[view.out_key], want[view.out_key][order])

    @pytest.mark.parametrize("written", [9, 33])
    def test_multi_dim_ring_equals_build_views(self, written):
        """ndim=2 storage [B, T] filled by collector-like [B, t] batches, with wrap-around."""
        gen = torch.Generator().manual_seed(written)
        B, slots = 3, 12
        data = stream(gen, B, written)
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(B * slots, ndim=2), views=VIEWS, batch_size=16
        )
        write_in_chunks(rb, data, 4)
        filled = min(written, slots)
        want = expected_views(data, filled, VIEWS)
        step = torch.arange(written - filled, written)
        pos_of_slot = torch.empty(slots, dtype=torch.long)
        pos_of_slot[step % slots] = torch.arange(filled)
        for _ in range(3):
            sample = rb.sample()
            row, slot = sample["index"].unbind(-1)
            ref = want[row, pos_of_slot[slot]]
            torch.testing.assert_close(sample["observation"], ref["observation"])
            for view in VIEWS:
                torch.testing.assert_close(sample[view.out_key], ref[view.out_key])

    def test_zero_and_first_padding_at_the_ring_edges(self):
        slots = 5
        data = TensorDict(
            {"x": torch.arange(1.0, 8.0), ("next", "done"): torch.zeros(7, 1, dtype=bool)}, [7]
        )
        views = [
            TrajectoryView("x", "-2:1"),
            TrajectoryView("x", "-2:1", padding="first", out_key="f"),
        ]
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(slots), views=views)
        rb.extend(data[:3])  # slots 0-2 written, 3-4 never
        index = torch.arange(3)
        got = rb.view_builder(rb.storage.get(index), rb.storage, index, cursor=3)
        assert got["x_view"].tolist() == [[0, 0, 1, 2], [0, 1, 2, 3], [1, 2, 3, 0]]
        assert got["f"].tolist() == [[1, 1, 1, 2], [1, 1, 2, 3], [1, 2, 3, 3]]
        rb.extend(data[3:])  # 7 steps into 5 slots: slot 2 (x=3) is the oldest, slot 1 the newest
        index = torch.arange(5)
        got = rb.view_builder(rb.storage.get(index), rb.storage, index, cursor=2)
        assert got["x_view"].tolist() == [
            [4, 5, 6, 7],
            [5, 6, 7, 0],
            [0, 0, 3, 4],
            [0, 3, 4, 5],
            [3, 4, 5, 6],
        ]
        assert got["f"][2].tolist() == [3, 3, 3, 4]
        assert got["f"][1].tolist() == [5, 6, 7, 7]

    def test_recurrent_state_at_slice_start(self):
        """SliceSampler sequences: h at the first step = stored ("next", h) one step before."""
        gen = torch.Generator().manual_seed(3)
        B, slots, written = 2, 30, 45
        data = stream(gen, B, written, p=0.1)
        state = TrajectoryView(("next", "h"), -1, out_key="h")
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(B * slots, ndim=2),
            sampler=SliceSampler(slice_len=4, traj_key=("collector", "traj_ids")),
            views=[state],
            batch_size=32,
        )
        write_in_chunks(rb, data, 5)
        storage = rb.storage
        seen_zero = seen_stored = 0
        for _ in range(5):
            sample = rb.sample().reshape(8, 4)
            row, slot = sample[:, 0]["index"].unbind(-1)
            h0 = sample[:, 0]["h"]
            prev = (slot - 1) % slots
            prev_h = storage.get((row, prev))["next", "h"]
            same_traj = (
                storage.get((row, prev))["collector", "traj_ids"]
                == sample[:, 0]["collector", "traj_ids"]
            )
            newest = slot == written % slots  # the oldest slot: its ring predecessor is newer
            has_past = same_traj & ~newest
            torch.testing.assert_close(h0[has_past], prev_h[has_past])
            assert (h0[~has_past] == 0).all()
            # inside a slice, h at t is ("next", h) at t-1
            torch.testing.assert_close(sample[:, 1:]["h"], sample[:, :-1]["next", "h"])
            seen_zero += int((~has_past).sum())
            seen_stored += int(has_past.sum())
        assert seen_stored > 0 and seen_zero > 0

    def test_views_not_used_for_training_are_not_rebuilt(self):
        views = [
            TrajectoryView("x", -1, used_for_training=False),
            TrajectoryView("x", -1, out_key="y"),
        ]
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4), views=views, batch_size=2)
        rb.extend(TensorDict({"x": torch.ones(4), "is_init": torch.zeros(4, 1, dtype=bool)}, [4]))
        sample = rb.sample()
        assert "x_view" not in sample.keys() and "y" in sample.keys()

    def test_clear_errors(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(4), views=[prev_action()], batch_size=2
        )
        rb.extend(
            TensorDict({"x": torch.ones(4), ("next", "done"): torch.zeros(4, 1, dtype=bool)}, [4])
        )
        with pytest.raises(
            KeyError, match=r"reads the key 'action', which the stored data lacks \(stored keys: "
        ):
            rb.sample()
        index = torch.arange(2)
        with pytest.raises(KeyError, match="stored keys: 'x', \\('next', 'done'\\)"):
            rb.view_builder(rb.storage.get(index), rb.storage, index, cursor=0)
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(4), views=[prev_action()], batch_size=2
        )
        rb.extend(TensorDict({"action": torch.ones(4)}, [4]))
        with pytest.raises(KeyError, match="cannot find episode boundaries"):
            rb.sample()
        with pytest.raises(TypeError, match="views need a tensor storage"):
            TensorDictReplayBuffer(storage=ListStorage(4), views=[prev_action()])
        with pytest.raises(ValueError, match="out_key 'prev_action' is declared twice differently"):
            ViewBuilder([prev_action(), TrajectoryView("action", -2, out_key="prev_action")])
        assert len(ViewBuilder([prev_action(), prev_action()]).views) == 1

    def test_custom_keys_through_a_view_builder(self):
        builder = ViewBuilder([TrajectoryView("x", -1)], traj_key="episode", done_key="end")
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(6), views=builder)
        data = TensorDict(
            {"x": torch.arange(1.0, 7.0), "episode": torch.tensor([0, 0, 0, 1, 1, 1])}, [6]
        )
        rb.extend(data)
        index = torch.arange(6)
        got = builder(rb.storage.get(index), rb.storage, index, cursor=0)
        assert got["x_view"].tolist() == [0, 1, 2, 0, 4, 5]


def test_rebuild_from_collector_batches_equals_build_views():
    """A SyncDataCollector over 3 envs fills an ndim=2 storage; samples = build_views."""
    from _envs import CountingEnv

    from torchrl.collectors import SyncDataCollector

    env = CountingEnv(batch_size=[3], max_steps=torch.tensor([3, 5, 7]))
    collector = SyncDataCollector(env, None, frames_per_batch=12, total_frames=12 * 7)
    views = [
        TrajectoryView(("next", "observation"), "-2:0"),
        TrajectoryView("observation", [-1, 1], padding="first", out_key="around"),
        prev_action(),
    ]
    slots = 10
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(3 * slots, ndim=2), views=views, batch_size=24
    )
    batches = []
    for batch in collector:
        rb.extend(batch)
        batches.append(batch)
    collector.shutdown()
    data = torch.cat(batches, -1)
    written = data.shape[-1]
    window = data[:, written - slots :].clone()
    ids = window["collector", "traj_ids"]
    start = torch.ones_like(ids, dtype=torch.bool)
    start[:, 1:] = ids[:, 1:] != ids[:, :-1]
    want = build_views(window, views, episode_start=start)
    # the ring's slot s holds the stream step i with i % slots == s
    pos_of_slot = (torch.arange(slots) - written) % slots
    for _ in range(3):
        sample = rb.sample()
        row, slot = sample["index"].unbind(-1)
        ref = want[row, pos_of_slot[slot]]
        torch.testing.assert_close(sample["observation"], ref["observation"])
        for view in views:
            torch.testing.assert_close(sample[view.out_key], ref[view.out_key])
    # in the counting env, ("next", "observation") at step t of an episode is t + 1
    full = rb.view_builder(
        rb.storage.get((torch.arange(3).repeat_interleave(slots), torch.arange(slots).repeat(3))),
        rb.storage,
        (torch.arange(3).repeat_interleave(slots), torch.arange(slots).repeat(3)),
        cursor=written % slots,
    )
    t = full["observation"].squeeze(-1)
    nxt = full["next_observation_view"].squeeze(-1)
    far_enough = (t >= 2) & ((torch.arange(slots).repeat(3) - written) % slots >= 2)
    assert (nxt[far_enough] == torch.stack([t - 1, t, t + 1], -1)[far_enough]).all()


def _filled_buffer(storage, views, **kwargs) -> TensorDictReplayBuffer:
    gen = torch.Generator().manual_seed(5)
    rb = TensorDictReplayBuffer(storage=storage, views=views, batch_size=16, **kwargs)
    write_in_chunks(rb, stream(gen, 1, 37)[0], 5)
    return rb


def test_column_reads_equal_item_reads():
    """The buffer reads storage columns; reading whole items through get() gives the same."""
    rb = _filled_buffer(LazyTensorStorage(16), VIEWS)
    index = torch.arange(16)
    by_items = rb.view_builder(rb.storage.get(index), rb.storage, index, cursor=37 % 16)
    by_sample = rb.sample(16, return_info=True)
    sample, info = by_sample
    for view in VIEWS:
        torch.testing.assert_close(sample[view.out_key], by_items[view.out_key][info["index"]])


def test_memmap_and_prioritized_buffers(tmp_path):
    from torchrl.data import LazyMemmapStorage, TensorDictPrioritizedReplayBuffer

    ref = _filled_buffer(LazyTensorStorage(16), VIEWS)
    mm = _filled_buffer(LazyMemmapStorage(16, scratch_dir=tmp_path), VIEWS)
    prio = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(16), views=VIEWS, batch_size=16
    )
    write_in_chunks(prio, stream(torch.Generator().manual_seed(5), 1, 37)[0], 5)
    index = torch.arange(16)
    want = ref.view_builder(ref.storage.get(index), ref.storage, index, cursor=37 % 16)
    for rb in (mm, prio):
        sample = rb.sample()
        for view in VIEWS:
            torch.testing.assert_close(sample[view.out_key], want[view.out_key][sample["index"]])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_storage_equals_cpu_storage():
    cpu = _filled_buffer(LazyTensorStorage(16), VIEWS)
    gpu = _filled_buffer(LazyTensorStorage(16, device="cuda"), VIEWS)
    index = torch.arange(16)
    want = cpu.view_builder(cpu.storage.get(index), cpu.storage, index, cursor=37 % 16)
    sample = gpu.sample()
    for view in VIEWS:
        assert sample[view.out_key].device.type == "cuda"
        torch.testing.assert_close(
            sample[view.out_key].cpu(), want[view.out_key][sample["index"].cpu()]
        )


def test_padded_slices_pad_the_views_too():
    """SliceSampler(pad=...) fills padded items after the views are built: views included."""
    data = TensorDict(
        {
            "x": torch.arange(1.0, 9.0),
            ("collector", "traj_ids"): torch.tensor([0, 0, 0, 1, 1, 1, 1, 1]),
        },
        [8],
    )
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(8),
        sampler=SliceSampler(
            slice_len=4, traj_key=("collector", "traj_ids"), strict_length=False, pad=-1.0
        ),
        views=[TrajectoryView("x", -1)],
        batch_size=8,
    )
    rb.extend(data)
    padded = 0
    for _ in range(10):
        sample = rb.sample()
        mask = sample.get("mask", torch.ones(8, dtype=torch.bool))
        padded += int((~mask).sum())
        assert (sample["x_view"][~mask] == -1).all()
        x, view = sample["x"][mask], sample["x_view"][mask]
        first = (x == 1) | (x == 4)  # episode starts
        assert (view[first] == 0).all() and (view[~first] == x[~first] - 1).all()
    assert padded > 0
