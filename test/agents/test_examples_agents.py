"""The agent-style examples (examples/agents/): smoke runs, and learning tests (slow)."""

from __future__ import annotations

import os
import runpy
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "agents")

SMOKE_ARGS = {
    "a2c_agents.py": ["--frames", "512", "--eval-every", "256", "--final-eval-episodes", "2"],
    "ppo_agents.py": ["--frames", "512", "--eval-every", "256", "--final-eval-episodes", "2"],
    "dqn_agents.py": [
        "--frames", "512", "--init-random-frames", "256", "--updates-per-batch", "2",
        "--eval-every", "256", "--final-eval-episodes", "2",
    ],
    "a2c_lstm_agents.py": ["--frames", "512", "--eval-every", "256", "--final-eval-episodes", "2"],
    "async_eval_agents.py": [
        "--frames", "1024", "--eval-max-steps", "20", "--final-eval-episodes", "2",
    ],
}  # fmt: skip


def _scripts() -> list[str]:
    return sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py") and not f.startswith("_"))


def _run(script: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = os.path.join(EXAMPLES, script)
    monkeypatch.setattr(sys, "argv", [path, *args])
    monkeypatch.syspath_prepend(os.path.dirname(path))
    runpy.run_path(path, run_name="__main__")


def test_every_agent_example_is_here() -> None:
    # (the computation-task examples of this folder are smoke-tested in test_tasks.py)
    assert set(SMOKE_ARGS) <= set(_scripts())


@pytest.mark.parametrize("script", sorted(SMOKE_ARGS))
def test_example_smoke(script: str, tmp_path, monkeypatch, capsys) -> None:
    _run(script, [*SMOKE_ARGS[script], "--out", str(tmp_path), "--no-progress"], monkeypatch)
    out = capsys.readouterr().out
    assert "final deterministic evaluation return" in out
    assert list(tmp_path.glob("*.png")), "no learning-curve plot written"


def _train(script: str, **overrides):
    import dataclasses
    import importlib

    sys.path.insert(0, os.path.abspath(EXAMPLES))
    try:
        module = importlib.import_module(script)
    finally:
        sys.path.remove(os.path.abspath(EXAMPLES))
    cfg = dataclasses.replace(module.Config(), progress=False, **overrides)
    return module.train(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("script", ["a2c_agents", "ppo_agents"])
def test_agent_examples_solve_cartpole(script: str, seed: int) -> None:
    """Solved as in test/test_learning.py: an evaluation (confirmed on fresh episodes) >= 475."""
    import torch

    torch.set_num_threads(1)
    history = _train(script, seed=seed)
    print(
        f"\n{script} seed {seed}: solved at {history['solved_at']} frames, "
        f"{history['wall']:.1f} s, final deterministic return {history['final_return']:.1f}",
        file=sys.stderr,
    )
    assert history["solved_at"] is not None, history["eval"]
