"""Learning tests of the asynchronous examples (slow; ``make test-slow``).

APPO and IMPALA on CartPole-v1 must bring the average of the last 100 training episodes to
475 (the figure Sample Factory prints as "Avg episode reward"), on the asynchronous collector
with an inference server; APPO on HalfCheetah-v5 must, within 200k frames, lift the average
training return clearly above a random policy's (about -230 per 1000-step episode). Each test
prints its frames, wall time and policy lag (``pytest -s`` shows them).
"""

from __future__ import annotations

import importlib
import os

import pytest

pytest.importorskip("gymnasium")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def _example(name: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(EXAMPLES)
    return importlib.import_module(name)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", ["appo_cartpole", "impala_cartpole"])
def test_cartpole_reaches_475(name: str, seed: int, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    result = _example(name, monkeypatch).train(
        seed=seed, total_frames=600_000, progress=False, final_eval_episodes=0
    )
    print(
        f"{name} seed {seed}: reached {result['reached_target']} after {result['frames']} "
        f"frames, {result['wall_s']:.1f} s ({result['frames_per_s']:.0f} frames/s); "
        f"policy lag {result['policy_lag']}"
    )
    assert result["reached_target"] is not None, result["return_curve"][-5:]
    assert result["final_avg_return"] >= 475
    lag = result["policy_lag"]
    assert lag is not None and lag["min"] >= 0


@pytest.mark.slow
def test_appo_halfcheetah_learns(monkeypatch, tmp_path) -> None:
    pytest.importorskip("mujoco")
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the working directory
    result = _example("appo_mujoco", monkeypatch).train(
        seed=0, total_frames=200_000, progress=False
    )
    print(
        f"appo_mujoco: average training return {result['final_avg_return']:.1f} after "
        f"{result['frames']} frames, {result['wall_s']:.1f} s; policy lag {result['policy_lag']}"
    )
    assert result["final_avg_return"] > 0.0  # uniformly random actions: about -230
