"""Smoke runs of ``examples/ppo_stateless_cartpole.py``: every ``--memory`` mode, tiny budgets.

The script runs in this process (``runpy``) with patched ``sys.argv``; ``train(cfg)`` is also
called directly, as ``benchmarks/recurrent.py`` does.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
SCRIPT = os.path.join(EXAMPLES, "ppo_stateless_cartpole.py")

TINY = [
    "--frames", "128", "--num-envs", "2", "--steps-per-env", "32", "--seq-len", "16",
    "--epochs", "1", "--hidden", "8", "--gtrxl-memory", "4", "--eval-every", "64",
    "--eval-episodes", "2", "--final-eval-episodes", "2",
]  # fmt: skip


def _run(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [SCRIPT, *args])
    monkeypatch.syspath_prepend(EXAMPLES)
    runpy.run_path(SCRIPT, run_name="__main__")


def _json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("memory", ["mlp", "lstm", "frames", "gtrxl"])
def test_smoke(memory: str, tmp_path, monkeypatch, capsys) -> None:
    _run([*TINY, "--memory", memory, "--out", str(tmp_path)], monkeypatch)
    out = capsys.readouterr().out
    lines = _json_lines(out)
    evals, final = lines[:-1], lines[-1]
    assert [e["frames"] for e in evals] == [64, 128]
    assert all(set(e) == {"frames", "wall_s", "eval_return"} for e in evals)
    assert final["memory"] == memory and final["frames"] == 128
    assert final["frames_to_target"] is None  # 128 frames never solve it
    assert final["final_return"] > 0
    assert "final deterministic evaluation return" in out
    assert list(tmp_path.glob("*.png"))


def test_lstm_state_views(tmp_path, monkeypatch, capsys) -> None:
    _run([*TINY, "--memory", "lstm", "--state-views", "true", "--out", str(tmp_path)], monkeypatch)
    final = _json_lines(capsys.readouterr().out)[-1]
    assert final["config"]["state_views"] and final["frames"] == 128
    # the LSTM states are stored once: the collected batch holds the written ("next", h) only
    import ppo_stateless_cartpole as example

    cfg = example.Config(memory="lstm", state_views=True, hidden=8)
    policy, _, _ = example.make_agent(cfg)
    env = example.TransformedEnv(
        example.make_env(cfg, 2, 0), example.get_env_transforms_from_module(policy)
    )
    collector = example.SyncDataCollector(env, policy, frames_per_batch=8, total_frames=8)
    batch = next(iter(collector))
    collector.shutdown()
    keys = set(batch.keys(True))
    assert ("next", "pi_h") in keys and "pi_h" not in keys and "pi_c" not in keys


def test_gym_env(tmp_path, monkeypatch, capsys) -> None:
    pytest.importorskip("gymnasium")
    _run([*TINY, "--memory", "lstm", "--env", "gym", "--out", str(tmp_path)], monkeypatch)
    final = _json_lines(capsys.readouterr().out)[-1]
    assert final["env"] == "gym" and final["frames"] == 128


def test_train_api_and_errors(monkeypatch) -> None:
    monkeypatch.syspath_prepend(EXAMPLES)
    import ppo_stateless_cartpole as example

    cfg = example.Config(
        memory="lstm", frames=64, num_envs=2, steps_per_env=32, seq_len=8, epochs=1, hidden=8,
        eval_every=64, eval_episodes=2, final_eval_episodes=2, log_json=False,
    )  # fmt: skip
    history = example.train(cfg)
    assert history["frames"] == 64 and len(history["eval"]) == 1
    assert {"wall", "eval_wall", "solved_at", "solved_wall", "final_return"} <= set(history)
    summary = example.summary(cfg, history)
    assert summary["config"]["memory"] == "lstm"
    linear = example.train(
        example.Config(**{**example.asdict(cfg), "lr_schedule": "linear", "frames": 128})
    )
    assert linear["frames"] == 128 and len(linear["eval"]) == 2
    for field, value, match in [
        ("memory", "gru", "memory must be one of"),
        ("env", "brax", "env must be one of"),
        ("seq_len", 5, "seq_len"),
        ("minibatches", 3, "minibatches"),
        ("lr_schedule", "cosine", "lr_schedule must be one of"),
    ]:
        bad = example.Config(**{**example.asdict(cfg), field: value})
        with pytest.raises(ValueError, match=match):
            example.train(bad)
