"""Smoke runs of ``examples/dreamer/dreamer.py`` (Dreamer v1 and DreamerV3, states and pixels).

Each run trains a few updates on one or two Pendulum episodes with tiny networks, then checks
the files the example writes (learning curve, imagined-vs-real figure, GIF for pixels). The
helpers the script is built from (batch sampling, open-loop imagination) are checked directly.
"""

from __future__ import annotations

import doctest
import importlib
import math
import os
import runpy
import sys

import pytest
import torch

pytest.importorskip("gymnasium")

EXAMPLES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "dreamer"
)
SCRIPT = os.path.join(EXAMPLES, "dreamer.py")

TINY = [
    "--frames", "25", "--action-repeat", "8", "--seed-frames", "12", "--frames-per-batch", "25",
    "--updates-per-batch", "2", "--batch-size", "4", "--seq-len", "8", "--horizon", "3",
    "--state-dim", "4", "--num-categoricals", "4", "--num-classes", "4", "--belief-dim", "16",
    "--hidden", "16", "--channels", "4", "--num-bins", "21", "--eval-every", "25",
    "--eval-episodes", "1", "--final-eval-episodes", "1",
]  # fmt: skip


@pytest.fixture
def dreamer(monkeypatch):
    monkeypatch.syspath_prepend(EXAMPLES)
    torch.set_num_threads(1)
    return importlib.import_module("dreamer")


@pytest.mark.parametrize(
    "version,pixels", [("v1", "false"), ("v3", "false"), ("v1", "true"), ("v3", "true")]
)
def test_dreamer_smoke(version: str, pixels: str, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)  # gym/pygame may write next to the working directory
    args = [*TINY, "--version", version, "--pixels", pixels, "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [SCRIPT, *args, "--no-progress"])
    runpy.run_path(SCRIPT, run_name="__main__")
    out = capsys.readouterr().out
    tag = f"dreamer_{version}_{'pixels' if pixels == 'true' else 'states'}"
    assert f"{tag}: final deterministic evaluation return" in out
    assert (tmp_path / f"{tag}.png").is_file(), "no learning curve written"
    assert (tmp_path / f"{tag}_imagination.png").is_file(), "no imagined-vs-real figure"
    assert (tmp_path / f"{tag}_imagination.gif").is_file() == (pixels == "true")


def test_config_errors(dreamer) -> None:
    with pytest.raises(ValueError, match="version must be 'v1' or 'v3'"):
        dreamer.Config(version="v2")
    with pytest.raises(ValueError, match=r"crop must be in \(0, 1\]"):
        dreamer.Config(crop=0.0)
    with pytest.raises(ValueError, match="burn_in must be >= 0"):
        dreamer.Config(burn_in=-1)
    with pytest.raises(ValueError, match="seq_len must be >= 1"):
        dreamer.Config(seq_len=0)
    with pytest.raises(ValueError, match="multiple of 8"):
        dreamer.Config(version="v3", pixels=True, num_categoricals=3, num_classes=3)
    published = dreamer.Config(version="v1", published=True)
    assert (published.state_dim, published.belief_dim, published.seq_len) == (30, 200, 50)


def test_helpers_doctests(dreamer) -> None:
    result = doctest.testmod(dreamer, verbose=False)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("version", ["v1", "v3"])
def test_batches_and_imagination_shapes(dreamer, version: str) -> None:
    """Stored episodes give [B, T] windows with zero primers; imagination decodes the horizon."""
    torch.manual_seed(0)
    cfg = dreamer.Config(
        version=version, batch_size=3, seq_len=5, hidden=16, belief_dim=8, state_dim=4,
        num_categoricals=2, num_classes=4, num_bins=21, action_repeat=4, progress=False,
    )  # fmt: skip
    env = dreamer.make_env(cfg)
    env.set_seed(0)
    agent = dreamer.make_agent(cfg, env.observation_spec[cfg.obs_key].shape)
    buffer = dreamer.ReplayBuffer(storage=dreamer.LazyTensorStorage(4), batch_size=cfg.batch_size)
    episode = dreamer.run_episode(env, agent, "random")
    assert episode.batch_size == torch.Size([50])  # 200 env steps, each action repeated 4 times
    assert bool(episode["next", "done"][-1]) and not bool(episode["next", "done"][:-1].any())
    assert float(episode["action"].abs().max()) <= 1.0
    buffer.extend(dreamer.to_storage(episode, cfg).unsqueeze(0))
    batch = dreamer.sample_batch(buffer, cfg)
    assert batch.batch_size == torch.Size([3, 5])
    assert batch["state"].shape == (3, 5, cfg.latent_dim) and not batch["state"].any()
    # windows are consecutive steps of the stored episode
    obs = episode["next", "observation"]
    for row in batch["next", "observation"]:
        start = int((obs == row[0]).all(-1).nonzero()[0])
        assert torch.equal(obs[start : start + 5], row)
    model_logs = dreamer.update(agent, batch, model_only=True)  # world-model pretraining step
    assert "loss_model_reco" in model_logs and "loss_actor" not in model_logs
    logs = dreamer.update(agent, batch)
    assert {"loss_model_kl", "loss_model_reco", "loss_actor", "loss_value"} <= set(logs)
    assert all(torch.isfinite(torch.tensor(v)) for v in logs.values())
    real, imagined = dreamer.imagine_episode(agent, episode, context=5, horizon=10)
    assert real.shape == imagined.shape == (10, 3)
    env.close()


def test_pixels_show_the_pendulum_centred(dreamer) -> None:
    """The 64x64 frames are channels-first floats in [0, 1] where the rod fills the frame.

    Uncropped, the rod covered about 2.5% of the pixels (the render spans 4.4 rod lengths) and
    the pixel world model learnt a blurred mean frame; the default crop keeps the rod's reach.
    """
    cfg = dreamer.Config(version="v3", pixels=True, progress=False)
    env = dreamer.make_env(cfg)
    env.set_seed(0)
    td = env.reset()
    frames = [td["pixels"]]
    for _ in range(4):
        td["action"] = torch.ones(1)
        td = env.step(td)["next"].exclude("reward", "done", "terminated", "truncated")
        frames.append(td["pixels"])
    env.close()
    pixels = torch.stack(frames)
    assert pixels.shape == (5, 3, 64, 64) and pixels.dtype == torch.float32
    assert float(pixels.min()) >= 0.0 and float(pixels.max()) <= 1.0 + 1e-5  # antialiasing
    drawn = (pixels < 0.9).any(1)  # [5, 64, 64]: the rod, the pivot and the torque arrow
    assert bool(drawn[:, 30:34, 30:34].any(-1).any(-1).all()), "the pivot is not at the centre"
    rows, cols = torch.meshgrid(torch.arange(64), torch.arange(64), indexing="ij")
    radius = ((rows - 31.5) ** 2 + (cols - 31.5) ** 2).sqrt()
    for frame in drawn:
        assert float(radius[frame].max()) > 20, "the rod spans less than a third of the frame"
        assert float(frame.float().mean()) > 0.05
    assert float((pixels[1:] - pixels[:-1]).abs().mean()) > 0.005, "frames do not change"


def test_pixels_show_the_state_after_the_action(dreamer) -> None:
    """Each step's frame draws the pendulum at that step's own angle: no one-step lag.

    The rod's tip (the drawn pixel furthest from the pivot) must point where the env's
    ``(cos, sin)`` observation of the same step says, after the repeated action, also on reset.
    A lag from the render / frame-skip / transform order would leave the world-model probes
    fine but hand the policy stale frames.
    """
    cfg = dreamer.Config(version="v3", pixels=True, progress=False)
    env = dreamer.make_env(cfg)
    env.set_seed(0)
    rows, cols = torch.meshgrid(torch.arange(64.0), torch.arange(64.0), indexing="ij")

    def tip_angle(frame: torch.Tensor) -> float:
        rod = (frame[0] - frame[1]) > 0.3  # the rod is drawn red
        radius = torch.where(rod, (rows - 31.5) ** 2 + (cols - 31.5) ** 2, -1.0)
        index = int(radius.argmax())
        row, col = rows.flatten()[index], cols.flatten()[index]
        # the render's up is -row; theta = 0 points up, positive theta turns to the left
        return float(torch.atan2(-(col - 31.5), -(row - 31.5)))

    td = env.reset()
    errors, moves = [], []
    for step in range(8):
        obs = td["observation"]
        theta = float(torch.atan2(obs[1], obs[0]))
        diff = tip_angle(td["pixels"]) - theta
        errors.append(abs(math.atan2(math.sin(diff), math.cos(diff))))
        td["action"] = torch.full((1,), 1.0 if step % 4 < 2 else -1.0)
        nxt = env.step(td)["next"]
        move = float(torch.atan2(nxt["observation"][1], nxt["observation"][0])) - theta
        moves.append(abs(math.atan2(math.sin(move), math.cos(move))))
        td = nxt.exclude("reward", "done", "terminated", "truncated")
    env.close()
    assert max(errors) < 0.15, f"frame vs observation angle errors {errors}"
    # a one-step lag would show errors as large as the moves
    assert sum(m > 0.2 for m in moves) >= 5, f"the pendulum barely moved ({moves}): no lag seen"


def test_probe_world_model_prints_its_diagnostics(dreamer, monkeypatch, tmp_path, capsys) -> None:
    """The world-model probe trains the model alone and prints the probe and reward errors."""
    import json

    monkeypatch.chdir(tmp_path)
    probe = importlib.import_module("probe_world_model")
    probe.main([
        "--updates", "2", "--every", "2", "--train-episodes", "2", "--test-episodes", "1",
        "--action-repeat", "8", "--hidden", "16", "--belief-dim", "16", "--num-bins", "21",
        "--batch-size", "2", "--seq-len", "4",
    ])  # fmt: skip
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["updates"] == 2 and len(line["probe_r2"]) == 3
    assert len(line["reward_open_loop_mae"]) == len(probe.HORIZONS)
    assert line["reward_std"] > 0 and "loss_model_reco" in line
    with pytest.raises(ValueError, match="two-hot reward head"):
        probe.main(["--version", "v1"])
