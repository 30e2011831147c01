"""LSTMModule/GRUModule with ``state_views=True``: states stored once, read back as views."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from torchrl.data.trajectory_views import TrajectoryView, build_views, get_views
from torchrl.modules import GRUModule, LSTMModule, set_recurrent_mode

# Step-by-step and padded-sequence RNN calls reduce in different orders (float32).
ATOL = 1e-5

B, T, F, H = 3, 11, 4, 6

STATES = {
    "lstm": ["recurrent_state_h", "recurrent_state_c"],
    "gru": ["recurrent_state"],
}


def _module(kind: str, state_views: bool, seed: int = 0) -> LSTMModule | GRUModule:
    torch.manual_seed(seed)
    cls = LSTMModule if kind == "lstm" else GRUModule
    return cls(F, H, num_layers=2, in_key="obs", out_key="y", state_views=state_views)


def _trajectory(seed: int = 1) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    is_init = torch.zeros(B, T, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[0, 5] = True
    is_init[1, 2] = True
    is_init[1, 3] = True
    is_init[2, 9] = True
    done = torch.zeros(B, T, dtype=torch.bool)
    done[:, :-1] = is_init[:, 1:]
    td = TensorDict(obs=torch.randn(B, T, F, generator=g), batch_size=[B, T])
    td["is_init"] = is_init.unsqueeze(-1)
    td["next", "done"] = done.unsqueeze(-1)
    return td


def _run_primer_steps(m, traj: TensorDict) -> TensorDict:
    """Step by step with the states carried in the TensorDict (what a primer + step_mdp do)."""
    states = {k: torch.randn(B, 2, H) for k in STATES[_kind(m)]}  # stale: is_init clears them
    steps = []
    for t in range(T):
        step = traj[:, t].clone()
        step.update(states)
        step = m(step)
        steps.append(step)
        states = {k: step["next", k] for k in states}
    return torch.stack(steps, 1)


def _run_view_steps(m, traj: TensorDict) -> TensorDict:
    """Step by step with each state built as a view of the stored ``("next", state)`` entries."""
    views = get_views(m)
    td = traj.clone()
    for k in STATES[_kind(m)]:
        td["next", k] = torch.zeros(B, T, 2, H)
    td["y"] = torch.zeros(B, T, H)
    for t in range(T):
        step = build_views(td[:, : t + 1].clone(), views)[:, t].clone()
        step = m(step)
        td["y"][:, t] = step["y"]
        for k in STATES[_kind(m)]:
            td["next", k][:, t] = step["next", k]
    return td


def _kind(m) -> str:
    return "lstm" if isinstance(m, LSTMModule) else "gru"


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_views_declared(kind):
    m = _module(kind, True)
    assert get_views(m) == [TrajectoryView(("next", k), -1, out_key=k) for k in STATES[kind]]
    # the primer still declares the states' shapes (a views collector sizes its rings with it)
    assert sorted(m.make_tensordict_primer().primers.keys()) == sorted(STATES[kind])
    plain = _module(kind, False)
    assert plain.views == [] and get_views(plain) == []
    assert sorted(plain.make_tensordict_primer().primers.keys()) == sorted(STATES[kind])


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_views_equal_primer_mode(kind):
    traj = _trajectory()
    primer = _run_primer_steps(_module(kind, False), traj)
    viewed = _run_view_steps(_module(kind, True), traj)
    torch.testing.assert_close(viewed["y"], primer["y"], atol=ATOL, rtol=0)
    for k in STATES[kind]:
        torch.testing.assert_close(viewed["next", k], primer["next", k], atol=ATOL, rtol=0)
    # the rebuilt input states equal what the primer mode fed the RNN (zeros at is_init)
    build_views(viewed, get_views(_module(kind, True)))
    starts = traj["is_init"].squeeze(-1)
    for k in STATES[kind]:
        fed = primer[k].masked_fill(starts[..., None, None], 0)
        torch.testing.assert_close(viewed[k], fed, atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("drop_is_init", [False, True])
def test_sequence_start_state_is_previous_stored_state(kind, drop_is_init):
    m = _module(kind, True)
    stored = _run_view_steps(m, _trajectory())
    steps_y = stored["y"]
    data = stored.exclude("y", *STATES[kind])  # what the buffer keeps: states once, under next
    build_views(data, get_views(m))
    starts = data["is_init"].squeeze(-1)
    for start, stop in [(0, T), (1, 6), (3, 10), (5, 11), (6, 8)]:
        window = data[:, start:stop].clone()
        for k in STATES[kind]:
            first = window[k][:, 0]
            if start == 0:
                expected = torch.zeros_like(first)
            else:
                expected = data["next", k][:, start - 1].masked_fill(
                    starts[:, start, None, None], 0
                )
            torch.testing.assert_close(first, expected, atol=0, rtol=0)
        if drop_is_init:
            window = window.exclude("is_init")  # episode starts from the previous done
        with set_recurrent_mode(True):
            y = m(window)["y"]
        torch.testing.assert_close(y, steps_y[:, start:stop], atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_views_mode_needs_no_is_init_in_step_mode(kind):
    m = _module(kind, True)
    step = TensorDict(obs=torch.randn(B, F), batch_size=[B])
    for k in STATES[kind]:
        step[k] = torch.zeros(B, 2, H)
    with_flag = step.clone()
    with_flag["is_init"] = torch.ones(B, 1, dtype=torch.bool)
    torch.testing.assert_close(m(step)["y"], m(with_flag)["y"])


def test_errors():
    m = _module("lstm", True)
    step = TensorDict(obs=torch.randn(B, F), batch_size=[B])
    with pytest.raises(KeyError, match="'recurrent_state_h'.*view of the previous step's"):
        m(step)
    window = TensorDict(obs=torch.randn(B, 3, F), batch_size=[B, 3])
    window["recurrent_state_h"] = torch.zeros(B, 3, 2, H)
    window["recurrent_state_c"] = torch.zeros(B, 3, 2, H)
    with set_recurrent_mode(True):
        with pytest.raises(KeyError, match="neither 'is_init' nor \\('next', 'done'\\)"):
            m(window)
    with pytest.raises(TypeError, match="state_views must be a bool"):
        LSTMModule(F, H, in_key="obs", out_key="y", state_views="yes")  # type: ignore[arg-type]
    plain = _module("lstm", False)
    with pytest.raises(KeyError, match="make_tensordict_primer"):
        plain(TensorDict(obs=torch.randn(B, F), batch_size=[B]))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_views_collector_stores_states_once(kind):
    from tensordict.nn import TensorDictModule, TensorDictSequential

    from torchrl.collectors import SyncDataCollector
    from torchrl.envs.custom.stateless_cartpole import StatelessCartPole
    from torchrl.envs.transforms import InitTracker, TransformedEnv

    def policy(state_views: bool):
        torch.manual_seed(0)
        cls = LSTMModule if kind == "lstm" else GRUModule
        rnn = cls(2, H, in_key="observation", out_key="y", state_views=state_views)
        head = TensorDictModule(torch.nn.Linear(H, 2), ["y"], ["logits"])
        act = TensorDictModule(lambda x: x.argmax(-1), ["logits"], ["action"])
        return TensorDictSequential(rnn, head, act)

    def env():
        base = StatelessCartPole(
            batch_size=[2], seed=0, max_episode_steps=6, categorical_action_encoding=True
        )
        return TransformedEnv(base, InitTracker())

    frames = 2 * 20
    primed = policy(False)
    collector = SyncDataCollector(
        env().append_transform(primed[0].make_tensordict_primer()),
        primed,
        frames_per_batch=frames,
        total_frames=frames,
    )
    reference = next(iter(collector))
    collector.shutdown()
    viewed = policy(True)
    collector = SyncDataCollector(env(), viewed, frames_per_batch=frames, total_frames=frames)
    batch = next(iter(collector))
    collector.shutdown()
    for k in STATES[kind]:
        assert k not in batch.keys() and k in reference.keys()  # stored once, under "next"
        torch.testing.assert_close(batch["next", k], reference["next", k], atol=ATOL, rtol=0)
    torch.testing.assert_close(batch["y"], reference["y"], atol=ATOL, rtol=0)
    assert batch["is_init"][:, 1:].any()
    build_views(batch, get_views(viewed))
    with set_recurrent_mode(True):
        y = viewed[0](batch[:, 3:17].clone())["y"]
    torch.testing.assert_close(y, reference["y"][:, 3:17], atol=ATOL, rtol=0)


def test_primer_expands_when_state_starts_like_the_batch():
    from torchrl.envs import PendulumEnv
    from torchrl.envs.transforms import InitTracker, TransformedEnv

    lstm = LSTMModule(3, H, in_key="observation", out_key="y")  # state [1, H], batch [1]
    env = TransformedEnv(PendulumEnv(batch_size=[1], seed=0), InitTracker())
    env = env.append_transform(lstm.make_tensordict_primer())
    assert env.reset()["recurrent_state_h"].shape == (1, 1, H)
