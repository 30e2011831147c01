"""Trajectory views at collection: rings, store-once batches, checks, and the on-policy rebuild."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from _envs import CountingEnv
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from torchrl.collectors import MultiaSyncDataCollector, MultiSyncDataCollector, SyncDataCollector
from torchrl.collectors._views import ViewPolicy, ViewRebuilder, ViewRing, collection_views
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer, Unbounded
from torchrl.data.trajectory_views import TrajectoryView, build_views, prev_action, prev_reward
from torchrl.envs.transforms import InitTracker, TransformedEnv
from torchrl.modules import LSTMModule

TRAJ = ("collector", "traj_ids")


class TickEnv(CountingEnv):
    """A ``CountingEnv`` that also observes ``"tick"``: a per-sub-env clock, never zero.

    The clock advances at every step and every reset, so that each step of a sub-env has its
    own value and a view that reads the wrong step (or another episode) shows it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        batch = self.batch_size
        self.observation_spec["tick"] = Unbounded(shape=(*batch, 1), dtype=torch.float32)
        self.observation_spec = self.observation_spec  # refresh the key caches
        self.tick = torch.zeros(*batch, 1)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        out = super()._reset(tensordict, **kwargs)
        mask = None if tensordict is None else tensordict.get("_reset", None)
        self.tick = self.tick + (1 if mask is None else mask.float())
        out["tick"] = self.tick.clone()
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = super()._step(tensordict)
        self.tick = self.tick + 1
        out["tick"] = self.tick.clone()
        return out


def tick_env(batch: int = 2, max_steps: tuple[int, ...] = (3, 5)) -> TickEnv:
    """Sub-envs with different episode lengths (picklable, for spawned workers)."""
    return TickEnv(batch_size=[batch], max_steps=torch.tensor(max_steps[:batch]))


class Recorder(nn.Module):
    """Acts on the tick's parity and returns a copy of every view it was given (``seen_*``)."""

    def __init__(self, views: list[TrajectoryView]) -> None:
        super().__init__()
        self.views = views

    def forward(self, tick: torch.Tensor, *seen: torch.Tensor) -> tuple[torch.Tensor, ...]:
        action = (tick % 2).long()
        return (action, *[s.clone() for s in seen])


def recording_policy(views: list[TrajectoryView]) -> TensorDictModule:
    """A policy declaring ``views``; it writes ``"seen_<out_key>"`` with what it saw."""
    outs = [v.target_key for v in views]
    return TensorDictModule(
        Recorder(views),
        in_keys=["tick", *outs],
        out_keys=["action", *[f"seen_{k}" for k in outs]],
    )


VIEWS = {
    "int": [TrajectoryView("tick", -2)],
    "list": [TrajectoryView("tick", [-3, -1, 0])],
    "range": [TrajectoryView("tick", "-2:0", out_key="stack")],
    "first": [TrajectoryView("tick", "-3:0", padding="first")],
    "prev": [prev_action(), prev_reward(), TrajectoryView(("next", "tick"), [-2, -1])],
    "mixed": [
        TrajectoryView("tick", "-4:0"),
        TrajectoryView("tick", -1, out_key="last_tick", padding="first"),
        TrajectoryView("observation", [-1, 0]),
        prev_action(),
    ],
}


def _check_seen(batch: TensorDictBase, views: list[TrajectoryView]) -> None:
    for view in views:
        out = view.target_key
        torch.testing.assert_close(batch[out], batch[f"seen_{out}"], rtol=0, atol=0, msg=out)


def _collect(views: list[TrajectoryView], batches: int = 4, **kwargs: Any) -> list[TensorDictBase]:
    collector = SyncDataCollector(
        tick_env(), recording_policy(views), frames_per_batch=8, total_frames=8 * batches, **kwargs
    )
    out = [batch for batch in collector]
    collector.shutdown()
    return out


@pytest.mark.parametrize("kind", list(VIEWS))
def test_collected_views_equal_rebuilt_views(kind: str) -> None:
    views = VIEWS[kind]
    batches = _collect(views)  # T = 4: episodes of 3 and 5 steps cross batch boundaries
    for batch in batches:
        for view in views:  # stored once: no view entry, the sources are there
            assert view.target_key not in batch.keys(True, True)
            assert view.key in batch.keys(True, True)
    # the contiguous run, rebuilt at once (episode starts from ("next", "done"))
    full = torch.cat(batches, 1)
    _check_seen(build_views(full.clone(), views), views)
    # batch by batch, the lookback of a batch's first steps carried from the previous batch
    rebuild = ViewRebuilder(views)
    for batch in batches:
        _check_seen(rebuild(batch.clone()), views)


def test_zero_padding_before_the_first_step() -> None:
    views = [TrajectoryView("tick", "-3:0")]
    batch = _collect(views, batches=1)[0]
    seen = batch["seen_tick_view"]  # [2 envs, 4 steps, 4 shifts, 1]
    for t in range(3):  # step t of the first episode: 3 - t zeros, then the ticks so far
        assert (seen[:, t, : 3 - t] == 0).all()
        torch.testing.assert_close(seen[:, t, 3 - t :], batch["tick"][:, : t + 1])
    assert (seen[0, 3, :3] == 0).all()  # env 0 started its second episode at step 3
    assert (batch["tick"] > 0).all()


def test_first_padding_repeats_the_first_step() -> None:
    views = [TrajectoryView("tick", "-2:0", padding="first")]
    batch = _collect(views, batches=1)[0]
    seen = batch["seen_tick_view"]
    first = batch["tick"][:, 0]
    torch.testing.assert_close(seen[:, 0], first.unsqueeze(1).expand(2, 3, 1))
    torch.testing.assert_close(seen[:, 1, :2], first.unsqueeze(1).expand(2, 2, 1))
    # env 0 starts again at step 3: its first tick is repeated again
    torch.testing.assert_close(seen[0, 3], batch["tick"][0, 3].expand(3, 1))


@pytest.mark.parametrize(
    "options",
    [
        {"max_frames_per_traj": 2},  # truncations by the collector start episodes too
        {"use_buffers": False},
        {"init_random_frames": 8},  # random actions go on feeding the rings
        {"split_trajs": False, "set_truncated": True},
    ],
    ids=["max_frames", "stacked", "random_first", "set_truncated"],
)
def test_collector_options_keep_views_consistent(options: dict[str, Any]) -> None:
    views = VIEWS["mixed"]
    batches = _collect(views, **options)
    # a random first batch has no seen_* entries (zeros), but its steps feed the rings
    skip = 1 if options.get("init_random_frames") else 0
    rebuild = ViewRebuilder(views)
    for batch in [rebuild(b.clone()) for b in batches][skip:]:
        _check_seen(batch, views)
    full = build_views(torch.cat(batches, 1), views)
    _check_seen(full[:, 4 * skip :], views)


def test_reset_at_each_iter_restarts_views() -> None:
    views = [TrajectoryView("tick", "-2:0")]
    batches = _collect(views, reset_at_each_iter=True)
    for batch in batches:
        assert (batch["seen_tick_view"][:, 0, :2] == 0).all()  # a fresh episode per batch
    rebuild = ViewRebuilder(views)
    for batch in batches:
        _check_seen(rebuild(batch.clone()), views)


def test_collector_reset_index_restarts_that_env() -> None:
    views = [TrajectoryView("tick", -1)]
    collector = SyncDataCollector(
        tick_env(max_steps=(50, 50)), recording_policy(views), frames_per_batch=8
    )
    first = collector.rollout().clone()
    collector.reset(index=1)
    second = collector.rollout().clone()
    collector.shutdown()
    assert second["seen_tick_view"][1, 0].item() == 0
    assert second["seen_tick_view"][0, 0].item() == first["tick"][0, -1].item()


def test_policy_without_views_keeps_the_fast_path() -> None:
    policy = TensorDictModule(lambda tick: (tick % 2).long(), ["tick"], ["action"])
    collector = SyncDataCollector(tick_env(), policy, frames_per_batch=8)
    assert collector._views is None
    assert collection_views(policy) == []
    collector.shutdown()


# ------------------------------------------------------------------------------ checks
def _ring(views: list[TrajectoryView], policy: Any = None) -> ViewRing:
    return ViewRing(views, tick_env(), policy)


def test_unknown_key_is_named_with_what_is_available() -> None:
    with pytest.raises(KeyError, match=r"'pixels'.*available: .*'tick'"):
        _ring([TrajectoryView("pixels", "-3:0")])
    # the collector checks at construction
    with pytest.raises(KeyError, match="'pixels'"):
        SyncDataCollector(
            tick_env(), recording_policy([TrajectoryView("pixels", -1)]), frames_per_batch=8
        )


@pytest.mark.parametrize(
    "view, match",
    [
        (TrajectoryView("tick", 1), "ahead"),
        (TrajectoryView("tick", [-1, 2]), "ahead"),
        (TrajectoryView(("next", "tick"), 0), "current step"),
        (TrajectoryView(("next", "reward"), [-2, 0]), "current step"),
        (TrajectoryView("action", 0), "current step"),
        (TrajectoryView(("next", "reward"), -1, padding="first"), "padding='first'"),
    ],
)
def test_views_not_available_at_collection_raise(view: TrajectoryView, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _ring([view])


def test_policy_output_without_shape_raises() -> None:
    policy = TensorDictModule(nn.Identity(), ["tick"], ["embed"])
    _ring([TrajectoryView("action", -1)], policy)  # the action spec gives its shape
    with pytest.raises(ValueError, match="'embed'.*shape"):
        _ring([TrajectoryView("embed", -1)], policy)
    with pytest.raises(KeyError, match="'embed'"):
        _ring([TrajectoryView("embed", -1)])  # not an out_key of this policy


def test_view_of_a_view_raises() -> None:
    with pytest.raises(ValueError, match="another view"):
        _ring([TrajectoryView("tick", -1, out_key="a"), TrajectoryView("a", -1)])


# --------------------------------------------------------------------------- recurrent
def _lstm_policy(views: bool) -> TensorDictSequential:
    torch.manual_seed(0)
    lstm = LSTMModule(2, 8, in_key="observations", out_key="features")
    if views:
        lstm.views = [
            TrajectoryView(("next", "recurrent_state_h"), -1, out_key="recurrent_state_h"),
            TrajectoryView(("next", "recurrent_state_c"), -1, out_key="recurrent_state_c"),
        ]
    cat = TensorDictModule(
        lambda a, b: torch.cat([a, b], -1), ["observation", "tick"], ["observations"]
    )
    head = TensorDictModule(nn.Linear(8, 2), ["features"], ["logits"])
    act = TensorDictModule(lambda x: x.argmax(-1, keepdim=True), ["logits"], ["action"])
    return TensorDictSequential(cat, lstm, head, act)


def test_recurrent_state_stored_once_equals_primer_rollout() -> None:
    primed = _lstm_policy(views=False)
    env = TransformedEnv(tick_env(), InitTracker())
    env = env.append_transform(primed[1].make_tensordict_primer())
    collector = SyncDataCollector(env, primed, frames_per_batch=16, total_frames=48)
    expected = [b for b in collector]
    viewed = _lstm_policy(views=True)  # no primer on the env
    env = TransformedEnv(tick_env(), InitTracker())
    collector = SyncDataCollector(env, viewed, frames_per_batch=16, total_frames=48)
    got = [b for b in collector]
    for old, new in zip(expected, got):
        assert "recurrent_state_h" in old.keys() and "recurrent_state_h" not in new.keys()
        for key in (
            "logits",
            "action",
            ("next", "recurrent_state_h"),
            ("next", "recurrent_state_c"),
        ):
            torch.testing.assert_close(old[key], new[key], rtol=0, atol=0)
    per_step = sum(v.numel() * v.element_size() for v in got[0].values(True, True)) / 16
    before = sum(v.numel() * v.element_size() for v in expected[0].values(True, True)) / 16
    assert before - per_step == 2 * 8 * 4 * 1  # h and c (1 layer, 8 floats) not stored twice
    # the state a step read is the stored state of the step before (zeros at episode starts)
    rebuilt = ViewRebuilder(viewed)
    for old, new in zip(expected, got):
        rebuilt(new)
        start = old["is_init"].squeeze(-1)
        torch.testing.assert_close(
            new["recurrent_state_h"][~start], old["recurrent_state_h"][~start]
        )
        assert (new["recurrent_state_h"][start] == 0).all()


# ------------------------------------------------------------------------ multi-process
@pytest.mark.parametrize("cls", [MultiSyncDataCollector, MultiaSyncDataCollector])
def test_multiprocess_collectors_build_views(cls: type) -> None:
    views = VIEWS["mixed"]
    collector = cls(
        [functools.partial(tick_env, 2, (3, 5)), functools.partial(tick_env, 2, (4, 2))],
        recording_policy(views),
        frames_per_batch=12,
        total_frames=48,
    )
    rebuild = ViewRebuilder(views)
    try:
        n = 0
        for batch in collector:
            for view in views:
                assert view.target_key not in batch.keys(True, True)
            _check_seen(rebuild(batch.clone()), views)
            n += 1
        assert n >= 2
    finally:
        collector.shutdown()


# ---------------------------------------------------------------------------- rebuilder
def test_rebuilder_matches_trajectories_by_id_in_any_order() -> None:
    views = [TrajectoryView("x", "-2:0")]

    def batch(x: list[list[float]], ids: list[list[int]], done_last: list[bool]) -> TensorDict:
        done = torch.zeros(len(x), len(x[0]), 1, dtype=torch.bool)
        done[:, -1, 0] = torch.tensor(done_last)
        return TensorDict(
            {"x": torch.tensor(x), TRAJ: torch.tensor(ids), ("next", "done"): done},
            [len(x), len(x[0])],
        )

    rebuild = ViewRebuilder(views)
    rebuild(batch([[1.0, 2.0], [5.0, 6.0]], [[0, 0], [1, 1]], [False, True]))
    # the rows come swapped: row 1 goes on with trajectory 0, row 0 is a new trajectory
    out = rebuild(batch([[7.0, 8.0], [3.0, 4.0]], [[2, 2], [0, 0]], [False, False]))
    assert out["x_view"][1, 0].tolist() == [1.0, 2.0, 3.0]
    assert out["x_view"][0, 0].tolist() == [0.0, 0.0, 7.0]


def test_rebuilder_errors_and_kept_tails() -> None:
    rebuild = ViewRebuilder([TrajectoryView("x", -1)], keep=1)
    with pytest.raises(KeyError, match="traj_ids"):
        rebuild(TensorDict({"x": torch.zeros(1, 2)}, [1, 2]))
    with pytest.raises(KeyError, match=r"lacks the view source\(s\) .*x"):
        rebuild(TensorDict({TRAJ: torch.zeros(1, 2, dtype=torch.long)}, [1, 2]))
    with pytest.raises(ValueError, match="keep"):
        ViewRebuilder([TrajectoryView("x", -1)], keep=0)
    # views not used for training are left to the collector
    assert ViewRebuilder([TrajectoryView("x", -1, used_for_training=False)]).views == []
    assert ViewRebuilder(
        [TrajectoryView("x", -1, used_for_training=False)], training_only=False
    ).views
    # a tail with no sequel for `keep` batches is dropped
    rebuild(TensorDict({"x": torch.ones(1, 2), TRAJ: torch.zeros(1, 2, dtype=torch.long)}, [1, 2]))
    rebuild(TensorDict({"x": torch.ones(1, 2), TRAJ: torch.ones(1, 2, dtype=torch.long)}, [1, 2]))
    out = rebuild(
        TensorDict({"x": torch.ones(1, 2), TRAJ: torch.zeros(1, 2, dtype=torch.long)}, [1, 2])
    )
    assert out["x_view"][0, 0].item() == 0.0
    rebuild.reset()


def _reference_next(batch: TensorDictBase, view: TrajectoryView, row: int, t: int) -> torch.Tensor:
    """The view at the step after ``t`` (a loop over shifts; ``batch`` holds the whole run)."""
    ids = batch[TRAJ][row]
    first = t
    while first > 0 and ids[first - 1] == ids[t]:
        first -= 1
    root = batch[view.key][row]
    parts = []
    for s in view.shifts:
        if s == 0:
            parts.append(batch["next", view.key][row, t])
        elif t + 1 + s >= first:
            parts.append(root[t + 1 + s])
        elif view.padding == "first":
            parts.append(root[first])
        else:
            parts.append(torch.zeros_like(root[0]))
    return torch.stack(parts) if view.stacked else parts[0]


@pytest.mark.parametrize("kind", ["list", "first", "prev", "mixed"])
def test_next_views_are_what_the_policy_sees_next(kind: str) -> None:
    views = VIEWS[kind]
    rebuild = ViewRebuilder(views, next_views=True)
    full = torch.cat([rebuild(b.clone()) for b in _collect(views)], 1)
    ids = full[TRAJ]
    same = ids[:, 1:] == ids[:, :-1]  # steps whose next step was collected in the episode
    for view in views:
        out = view.target_key
        nxt = full["next", out]
        torch.testing.assert_close(nxt[:, :-1][same], full[f"seen_{out}"][:, 1:][same])
        # episode ends (no next step collected) and the run's last step: against a loop
        for row, t in [*(~same).nonzero().tolist(), (0, ids.shape[1] - 1)]:
            torch.testing.assert_close(nxt[row, t], _reference_next(full, view, row, t))


def test_source_shape_disagreeing_with_its_spec_is_named() -> None:
    class WideTick(TickEnv):
        def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
            out = super()._step(tensordict)
            out["tick"] = out["tick"].expand(*self.batch_size, 3).clone()  # spec: 1 value
            return out

    env = WideTick(batch_size=[2], max_steps=torch.tensor([3, 5]))
    ring = ViewRing([TrajectoryView(("next", "tick"), -1)], env, None)
    td = env.reset()
    ring.build(td)
    td["action"] = torch.zeros(2, 1, dtype=torch.long)
    transition = env._step(td)
    with pytest.raises(RuntimeError, match=r"'next', 'tick'\) has shape \(2, 3\).*\(2, 1\)"):
        ring.record(TensorDict({"next": transition, "tick": td["tick"]}, [2]))


def test_rebuilder_refuses_split_batches() -> None:
    views = [TrajectoryView("tick", -1)]
    collector = SyncDataCollector(
        tick_env(), recording_policy(views), frames_per_batch=8, split_trajs=True
    )
    batch = collector.rollout()
    split = next(iter(collector))
    collector.shutdown()
    assert batch.get(("collector", "mask"), None) is None
    with pytest.raises(ValueError, match="split_trajs=False"):
        ViewRebuilder(views)(split)


@pytest.mark.parametrize("kind", ["mixed", "first", "prev"])
@pytest.mark.parametrize("capacity", [64, 16], ids=["filling", "wrapped"])
def test_buffer_rebuilds_what_the_policy_saw(kind: str, capacity: int) -> None:
    views = VIEWS[kind]
    # [2 envs, T] batches go to a 2-d storage: each row keeps its sub-env's time order
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity, ndim=2), views=views, batch_size=12
    )
    collector = SyncDataCollector(
        tick_env(), recording_policy(views), frames_per_batch=8, total_frames=40,
        replay_buffer=buffer,
    )  # fmt: skip
    for _ in collector:
        pass
    collector.shutdown()
    lookback = max(v.lookback for v in views)
    per_row, steps = capacity // 2, 20  # 20 steps of each sub-env were written
    for _ in range(3):
        sample = buffer.sample()
        # the step each item holds; in a wrapped buffer, items whose lookback was overwritten
        # (the oldest `lookback` steps) cannot get their past back: they are left out
        slot = sample["index"][:, 1]
        keep = torch.ones_like(slot, dtype=torch.bool)
        if steps > per_row:
            oldest = steps - per_row
            step = oldest + (slot - steps % per_row) % per_row
            keep = step >= oldest + lookback
        assert keep.any()
        _check_seen(sample[keep], views)


# --------------------------------------------------------------------------- ViewPolicy
@pytest.mark.parametrize("kind", ["mixed", "first", "prev"])
def test_view_policy_in_env_rollout(kind: str) -> None:
    views = VIEWS[kind]
    env = tick_env()
    policy = ViewPolicy(recording_policy(views), env)
    assert set(policy.out_keys) >= {v.target_key for v in views}
    rollout = env.rollout(12, policy, break_when_any_done=False)  # auto-resets inside
    _check_seen(build_views(rollout.clone(), views), views)
    # a second rollout starts afresh after reset() (no InitTracker to say so)
    policy.reset()
    again = env.rollout(4, policy, break_when_any_done=False)
    _check_seen(build_views(again.clone(), views), views)


def test_view_policy_follows_is_init() -> None:
    views = [TrajectoryView("tick", "-2:0")]
    env = TransformedEnv(tick_env(max_steps=(50, 50)), InitTracker())
    policy = ViewPolicy(recording_policy(views), env)
    env.rollout(3, policy)
    second = env.rollout(3, policy)  # a new rollout resets the env: is_init says so
    assert (second["seen_tick_view"][:, 0, :2] == 0).all()
    _check_seen(build_views(second.clone(), views), views)


# ---------------------------------------------------------------------------- benchmark
def test_benchmark_stores_one_frame_and_one_state() -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "views.py"
    spec = importlib.util.spec_from_file_location("views_benchmark", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    frames = {r["mode"]: r for r in bench.measure("frames", 64, 1, 1)}
    lstm = {r["mode"]: r for r in bench.measure("lstm", 64, 1, 1)}
    # "pixels" and ("next", "pixels"): 4 frames each with CatFrames, 1 each with views
    assert frames["views"]["pixels_bytes_per_frame"] == 2 * 84 * 84
    assert frames["catframes"]["pixels_bytes_per_frame"] == 4 * 2 * 84 * 84
    # h and c (256 float32): under "next" only with views, at the root too with the primer
    assert lstm["views"]["recurrent_state_bytes_per_frame"] == 2 * 256 * 4
    assert lstm["primer"]["recurrent_state_bytes_per_frame"] == 2 * 2 * 256 * 4
