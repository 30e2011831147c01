"""Smoke runs of the asynchronous examples: a few thousand frames each, end to end.

Each example's ``train(**config)`` runs on the asynchronous collector with an inference server
(and APPO once on ``MultiaSyncDataCollector``); the result must hold the figures the benchmark
reads. One run goes through ``main()`` and its command line.
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys

import pytest

pytest.importorskip("gymnasium")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def _check(result: dict, at_least: int) -> None:
    assert result["frames"] >= at_least
    assert result["wall_s"] > 0 and result["frames_per_s"] > 0
    for frames, wall, avg in result["return_curve"]:
        assert 0 < frames <= result["frames"] and wall >= 0 and avg > 0
    assert result["reached_target"] is None or set(result["reached_target"]) == {
        "frames",
        "wall_s",
    }


@pytest.mark.parametrize(
    "name, collector",
    [
        ("appo_cartpole", "async_batched"),
        ("impala_cartpole", "async_batched"),
        ("appo_cartpole", "multi_async"),
    ],
)
def test_cartpole_examples(name: str, collector: str, monkeypatch) -> None:
    monkeypatch.syspath_prepend(EXAMPLES)
    module = importlib.import_module(name)
    extra = {"epochs": 1} if name == "appo_cartpole" else {}
    result = module.train(
        total_frames=2048,
        frames_per_batch=512,
        num_envs=8,
        collector=collector,
        **extra,
        seed=0,
        progress=False,
        final_eval_episodes=2,
    )
    _check(result, 2048)
    assert result["return_curve"], "no training episode finished in 2048 CartPole frames"
    if collector == "async_batched":
        lag = result["policy_lag"]
        assert lag is not None and 0 <= lag["min"] <= lag["mean"] <= lag["max"]
    assert result["final_return"] > 0


def test_appo_mujoco(monkeypatch, tmp_path) -> None:
    pytest.importorskip("mujoco")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(EXAMPLES)
    module = importlib.import_module("appo_mujoco")
    result = module.train(
        total_frames=2048,
        frames_per_batch=1024,
        num_envs=8,
        epochs=1,
        seed=0,
        progress=False,
    )
    _check(result, 2048)
    assert result["policy_lag"] is not None


def test_main_command_line(monkeypatch, tmp_path, capsys) -> None:
    path = os.path.join(EXAMPLES, "impala_cartpole.py")
    args = ["--total-frames", "1024", "--frames-per-batch", "512", "--num-envs", "8"]
    args += ["--final-eval-episodes", "2", "--out", str(tmp_path), "--no-progress"]
    monkeypatch.setattr(sys, "argv", [path, *args])
    monkeypatch.syspath_prepend(EXAMPLES)
    runpy.run_path(path, run_name="__main__")
    assert "final deterministic evaluation return" in capsys.readouterr().out
    assert list(tmp_path.glob("*.png"))


def test_multi_policy_example(monkeypatch) -> None:
    monkeypatch.syspath_prepend(EXAMPLES)
    module = importlib.import_module("multi_policy_cartpole")
    out = module.train(
        total_frames=4096,
        lrs="3e-3,1e-3",
        envs_per_policy=4,
        frames_per_batch=256,
        epochs=1,
        seed=0,
        progress=False,
    )
    results = out["policies"]
    assert [r["lr"] for r in results] == [3e-3, 1e-3]
    for result in results:
        # each policy trained on its own share of the frames
        assert 0 < result["frames"] < 4096
        assert result["policy_lag"] is not None
    assert sum(r["frames"] for r in results) >= 4096 - 256
