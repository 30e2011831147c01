"""Learning tests of the recurrent PPO example on StatelessCartPole (slow; ``make test-slow``).

PPO with an LSTM must reach a deterministic evaluation return >= 475 (8 episodes, 500-step
cap) within 50k frames for seeds 0-2, with GTrXL within 200k frames, with 4 stacked frames (a
trajectory view) within 50k; the memoryless MLP policy, trained the same way with the same
budget, must not (the velocities are hidden: without memory the task is not solvable to that
level). Each test prints the frames and wall time it needed (``pytest -s`` shows them).

Measured (seeds 0-2, 1 torch thread, a shared and loaded 2-core machine): LSTM 20480/6144/32768
frames (3-17 s) with the linear schedule and lambda 0.95 (12288/6144/12288, 13-24 s,
with the previous defaults, which GTrXL and the stacked frames keep here); stacked frames
14336/12288/36864 (27-77 s); GTrXL 4096/36864/18432 frames (23/250/104 s); MLP best evaluations
50/51/45 (46/49/45 with the previous defaults).
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


# GTrXL and the stacked frames were measured with the settings before the LSTM's defaults became
# a linear schedule with GAE lambda 0.95: they keep those.
_MEASURED_BEFORE = {"lr_schedule": "constant", "gae_lambda": 0.8}


def _example(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(EXAMPLES)
    if "ppo_stateless_cartpole" in sys.modules:
        return sys.modules["ppo_stateless_cartpole"]
    return importlib.import_module("ppo_stateless_cartpole")


def _train(monkeypatch: pytest.MonkeyPatch, **fields) -> dict:
    example = _example(monkeypatch)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = example.Config(log_json=False, **fields)
        history = example.train(cfg)
    finally:
        torch.set_num_threads(threads)
    print(
        f"\n{fields}: solved at {history['solved_at']} frames, {history['solved_wall']} s; "
        f"evaluations {[round(r) for _, r in history['eval']]}; "
        f"final return {history['final_return']:.1f}"
    )
    return history


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lstm_solves_stateless_cartpole(seed: int, monkeypatch) -> None:
    history = _train(monkeypatch, memory="lstm", seed=seed, frames=50_000)
    assert history["solved_at"] is not None and history["solved_at"] <= 50_000


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gtrxl_solves_stateless_cartpole(seed: int, monkeypatch) -> None:
    history = _train(monkeypatch, memory="gtrxl", seed=seed, frames=200_000, **_MEASURED_BEFORE)
    assert history["solved_at"] is not None and history["solved_at"] <= 200_000


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stacked_frames_solve_stateless_cartpole(seed: int, monkeypatch) -> None:
    history = _train(monkeypatch, memory="frames", seed=seed, frames=50_000, **_MEASURED_BEFORE)
    assert history["solved_at"] is not None and history["solved_at"] <= 50_000


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mlp_does_not_solve_stateless_cartpole(seed: int, monkeypatch) -> None:
    history = _train(monkeypatch, memory="mlp", seed=seed, frames=50_000)
    assert history["solved_at"] is None
    assert max(r for _, r in history["eval"]) < 475
