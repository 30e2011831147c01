"""Smoke runs of ``examples/agents/ppo_aux_reward.py`` and ``examples/agents/hierarchical.py``.

Each script runs in this process (``runpy``) for a few batches and must print its final line
and write its outputs (curves, CSV logs).
"""

from __future__ import annotations

import json
import os
import runpy
import sys

import pytest

pytest.importorskip("gymnasium")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENTS = os.path.join(ROOT, "examples", "agents")


def _run(script: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = os.path.join(AGENTS, script)
    monkeypatch.setattr(sys, "argv", [path, *args])
    runpy.run_path(path, run_name="__main__")


def test_ppo_aux_reward_runs(tmp_path, monkeypatch, capsys) -> None:
    args = ["--frames", "512", "--eval-every", "256", "--eval-episodes", "2"]
    _run(
        "ppo_aux_reward.py",
        [*args, "--final-eval-episodes", "2", "--out", str(tmp_path)],
        monkeypatch,
    )
    out = capsys.readouterr().out
    assert "ppo_aux CartPole-v1: final deterministic evaluation return" in out
    assert "rounds {'ppo': 2, 'reward': 2}, gradient steps {'ppo': 20, 'reward': 8}" in out
    scalars = tmp_path / "ppo_aux_reward" / "ppo_aux_seed0" / "scalars"
    assert (scalars / "eval" / "reward.csv").exists()
    assert (scalars / "reward" / "loss_reward.csv").exists()
    assert (scalars / "ppo" / "loss_objective.csv").exists()


def test_ppo_aux_reward_compare_writes_curves(tmp_path, monkeypatch, capsys) -> None:
    args = ["--compare", "true", "--seeds", "0", "--frames", "512", "--eval-every", "256"]
    args += ["--eval-episodes", "2", "--final-eval-episodes", "2", "--no-progress"]
    _run("ppo_aux_reward.py", [*args, "--out", str(tmp_path)], monkeypatch)
    out = capsys.readouterr().out
    assert "ppo: mean evaluation return over the run" in out
    assert "ppo_aux: mean evaluation return over the run" in out
    summary = json.loads((tmp_path / "ppo_aux_reward.json").read_text())
    assert [run["name"] for run in summary["runs"]] == ["ppo", "ppo_aux"]
    assert summary["ppo"]["frames"] == [256, 512]
    assert "reward" not in summary["runs"][0]["rounds"]  # the baseline has the PPO task only
    if "matplotlib" in sys.modules or _has("matplotlib"):
        assert (tmp_path / "ppo_aux_reward.png").exists()


def test_hierarchical_runs(tmp_path, monkeypatch, capsys) -> None:
    args = ["--frames", "1024", "--eval-every", "512", "--eval-episodes", "4"]
    args += ["--final-eval-episodes", "4", "--no-progress", "--out", str(tmp_path)]
    _run("hierarchical.py", args, monkeypatch)
    out = capsys.readouterr().out
    assert "hierarchical GoalGrid 9x9: final deterministic success rate" in out
    assert "rounds {'manager': 2, 'worker': 2}" in out
    scalars = tmp_path / "hierarchical" / "seed0" / "scalars"
    assert (scalars / "manager" / "loss_objective.csv").exists()
    assert (scalars / "worker" / "loss_objective.csv").exists()
    assert (scalars / "eval" / "reward.csv").exists()


def _has(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
