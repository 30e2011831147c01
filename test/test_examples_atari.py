"""Smoke runs of the Atari examples and of ``benchmarks/atari.py`` with tiny budgets.

The scripts run in this process (``runpy``) with patched ``sys.argv``; skipped without ale-py.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("ale_py")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
BENCHMARKS = os.path.join(ROOT, "benchmarks")

# Script -> the flags that make it a few-second run (a few hundred env steps).
ATARI_EXAMPLE_ARGS = {
    "ppo_atari.py": [
        "--frames", "128", "--num-envs", "2", "--steps-per-env", "32", "--epochs", "1",
        "--minibatch-size", "32", "--eval-every", "64", "--eval-max-steps", "20",
        "--final-eval-episodes", "1", "--eval-episodes", "1",
    ],
    "dqn_atari.py": [
        "--frames", "192", "--num-envs", "2", "--frames-per-batch", "32",
        "--init-random-frames", "64", "--buffer-size", "256", "--batch-size", "8",
        "--train-every", "8", "--target-update-interval", "2", "--double-dqn", "true",
        "--eval-every", "192", "--eval-max-steps", "20", "--final-eval-episodes", "1",
        "--eval-episodes", "1",
    ],
}  # fmt: skip


def _run(path: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [path, *args])
    monkeypatch.syspath_prepend(os.path.dirname(path))
    runpy.run_path(path, run_name="__main__")


@pytest.mark.parametrize("script", sorted(ATARI_EXAMPLE_ARGS))
def test_atari_example_smoke(script, tmp_path, monkeypatch, capsys) -> None:
    args = [*ATARI_EXAMPLE_ARGS[script], "--out", str(tmp_path), "--no-progress"]
    _run(os.path.join(EXAMPLES, script), args, monkeypatch)
    out = capsys.readouterr().out
    assert "final deterministic evaluation return" in out
    assert list(tmp_path.glob("*.png")), "no learning-curve plot written"


def test_published_settings_are_flaggable(monkeypatch) -> None:
    monkeypatch.syspath_prepend(EXAMPLES)
    import dqn_atari
    import ppo_atari

    for module in (ppo_atari, dqn_atari):
        names = {f.name for f in module.dataclasses.fields(module.Config)}
        assert set(module.PUBLISHED) <= names, f"{module.__name__}: unknown published settings"
    assert ppo_atari.PUBLISHED["frames"] == 10_000_000
    assert dqn_atari.PUBLISHED["buffer_size"] == 1_000_000


def test_atari_benchmark_tiny(monkeypatch, capsys) -> None:
    args = ["--steps", "3", "--repeats", "1", "--warmup", "1", "--envs", "2", "--no-envpool"]
    monkeypatch.setattr(sys, "argv", ["atari.py", *args])
    runpy.run_path(os.path.join(BENCHMARKS, "atari.py"), run_name="__main__")
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    pipelines = {rec["pipeline"]: rec for rec in lines if "pipeline" in rec}
    assert {"gymnasium hand loop", "torchrl ale", "torchrl ale (rgb)"} <= set(pipelines)
    assert all(rec["frames_per_s"] > 0 for rec in pipelines.values())
    summary = [rec for rec in lines if "summary" in rec][-1]
    assert "torchrl ale / hand loop" in summary["summary"]
