"""The R2D2-style example (``examples/r2d2_stateless_cartpole.py``): smoke run and its parts.

Checks that the burn-in rebuilds the state the actor had, that the sequence unroll from a
stored state gives the values the actor computed step by step, and the n-step targets.
"""

from __future__ import annotations

import os
import runpy
import sys

import pytest
import torch
from tensordict.nn import TensorDictSequential

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
sys.path.insert(0, EXAMPLES)

r2d2 = pytest.importorskip("r2d2_stateless_cartpole")


@pytest.fixture(scope="module")
def collected():
    """A greedy rollout ``[3, 40]`` of an untrained network, with many episode starts."""
    from torchrl.collectors import SyncDataCollector
    from torchrl.modules import QValueModule

    torch.manual_seed(0)
    qnet, lstm = r2d2.make_qnet(2, 2, 16)
    env = r2d2.make_env(3, lstm)
    env.set_seed(0)
    greedy = TensorDictSequential(qnet, QValueModule(spec=env.action_spec))
    collector = SyncDataCollector(env, greedy, frames_per_batch=120, total_frames=120)
    batch = next(iter(collector))
    collector.shutdown()
    return qnet, batch


def stored_sequence(batch):
    """What the buffer keeps of ``batch``, with the input states rebuilt as views."""
    from torchrl.data.trajectory_views import build_views

    batch = batch.clone()
    batch.set("env_row", torch.arange(batch.shape[0])[:, None].expand(batch.batch_size))
    return build_views(batch.select(*r2d2.STORED_KEYS), r2d2.STATE_VIEWS)


def test_smoke_run(tmp_path, monkeypatch, capsys):
    argv = [
        "r2d2_stateless_cartpole.py",
        "--frames",
        "768",
        "--frames-per-batch",
        "128",
        "--learning-starts",
        "256",
        "--num-sequences",
        "4",
        "--updates-per-batch",
        "2",
        "--eval-every",
        "512",
        "--eval-episodes",
        "2",
        "--final-eval-episodes",
        "2",
        "--no-progress",
        "--out",
        str(tmp_path),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(os.path.join(EXAMPLES, "r2d2_stateless_cartpole.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "final deterministic evaluation return" in out
    assert "768 frames" in out


def test_collected_states_are_carried(collected):
    _, batch = collected
    h, next_h = batch["recurrent_state_h"], batch["next", "recurrent_state_h"]
    is_init = batch["is_init"].squeeze(-1)
    assert is_init[:, 1:].any(), "the rollout should hold episode starts"
    carried = (h[:, 1:] == next_h[:, :-1]).flatten(2).all(-1)
    assert carried[~is_init[:, 1:]].all()
    assert (h[is_init] == 0).all()


def test_state_views_equal_the_actors_input_state(collected):
    _, batch = collected
    seq = stored_sequence(batch)
    for key in ("recurrent_state_h", "recurrent_state_c"):
        torch.testing.assert_close(seq[key], batch[key])


def test_buffer_rebuilds_the_state_at_sequence_starts(collected):
    from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer

    _, batch = collected
    batch = batch.clone()
    batch.set("env_row", torch.arange(3)[:, None].expand(batch.batch_size))
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(120, ndim=2),
        sampler=SliceSampler(slice_len=10, traj_key="env_row", truncated_key="slice_end"),
        batch_size=40,
        views=r2d2.STATE_VIEWS,
    )
    buffer.extend(batch.select(*r2d2.STORED_KEYS))
    sample = buffer.sample().reshape(4, 10)
    stored = buffer.storage.get((torch.tensor([0]), torch.tensor([0])))
    assert "recurrent_state_h" not in stored.keys()  # stored once, under "next"
    row, t = sample["index"][..., 0], sample["index"][..., 1]
    torch.testing.assert_close(sample["recurrent_state_h"], batch["recurrent_state_h"][row, t])
    torch.testing.assert_close(sample["recurrent_state_c"], batch["recurrent_state_c"][row, t])


@pytest.mark.parametrize("burn_in", [1, 7, 20])
def test_burn_in_state_equals_the_actors_state(collected, burn_in):
    qnet, batch = collected
    seq = stored_sequence(batch)
    h, c = r2d2.burn_in_state(qnet, seq, burn_in)
    # The actor's state entering step burn_in is the next state it wrote at burn_in - 1.
    torch.testing.assert_close(h, batch["next", "recurrent_state_h"][:, burn_in - 1])
    torch.testing.assert_close(c, batch["next", "recurrent_state_c"][:, burn_in - 1])


@pytest.mark.parametrize("burn_in", [0, 5])
def test_sequence_values_equal_collection(collected, burn_in):
    qnet, batch = collected
    seq = stored_sequence(batch)
    values = r2d2.sequence_values(qnet, seq, burn_in)
    torch.testing.assert_close(values, batch["action_value"][:, burn_in:])


def test_n_step_targets():
    gamma = 0.5
    # one row, L = 3 targets, n = 2: a termination at step 1
    reward = torch.tensor([[1.0, 2.0, 4.0, 8.0, 16.0]])
    done = torch.tensor([[False, True, False, False, False]])
    truncated = torch.zeros_like(done)
    bootstrap = torch.tensor([[100.0, 200.0, 300.0]])
    target, valid = r2d2.n_step_targets(reward, done, truncated, bootstrap, gamma, 2)
    # t=0: 1 + 0.5 * 2, then done; t=1: 2, done; t=2: 4 + 0.5 * 8 + 0.25 * 300
    torch.testing.assert_close(target, torch.tensor([[2.0, 2.0, 83.0]]))
    assert valid.all()
    # a time-limit end inside a window makes it invalid; one after an earlier done does not
    truncated = torch.tensor([[False, False, False, True, False]])
    done = done | truncated
    _, valid = r2d2.n_step_targets(reward, done, truncated, bootstrap, gamma, 2)
    assert valid.tolist() == [[True, True, False]]
