"""The async-throughput benchmark driver: flags, result rows, summary and process clean-up.

No training here: the rows are fake; the Sample Factory check only parses SF's config in its venv
and is skipped when that venv is absent.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SF_SCRIPT = os.path.join(ROOT, "benchmarks", "_peers", "sf_async.py")


def _load_driver():
    path = os.path.join(ROOT, "benchmarks", "async_throughput.py")
    spec = importlib.util.spec_from_file_location("async_throughput", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_driver()
SF_PYTHON = bench.sf_python()
needs_sf = pytest.mark.skipif(
    not os.path.exists(SF_PYTHON), reason=f"Sample Factory venv not found at {SF_PYTHON}"
)


def _row(lib, task, fps, tt=None, lag=None, final=None):
    row = {"lib": lib, "task": task, "frames": int(fps * 10), "wall_s": 10.0}
    row["frames_per_s"] = fps
    row["reached_target"] = None if tt is None else {"frames": int(fps * tt), "wall_s": tt}
    row["policy_lag"] = lag
    row["final_avg_return"] = final
    return row


class TestParseArgs:
    def test_defaults(self):
        args = bench.parse_args([])
        assert args.tasks == ["cartpole", "halfcheetah"]
        assert args.libs == ["ours", "sample_factory"]
        assert bench.parse_args(["--libs", "sample_factory_sfnet"]).libs == ["sample_factory_sfnet"]
        assert args.seeds == 1 and args.target_return == 475.0
        assert bench.budget(args, "cartpole")[2] is True
        assert bench.budget(args, "halfcheetah") == (300_000, 150.0, False)

    def test_lists_and_budgets(self):
        args = bench.parse_args(
            ["--tasks", "halfcheetah", "--libs", "sample_factory,ours", "--seeds", "3"]
            + ["--halfcheetah-frames", "1000", "--sf-flag=--batch_size=1024"]
        )
        assert args.tasks == ["halfcheetah"] and args.libs == ["sample_factory", "ours"]
        assert args.seeds == 3 and bench.budget(args, "halfcheetah")[0] == 1000
        assert args.sf_flag == ["--batch_size=1024"]

    @pytest.mark.parametrize(
        "argv, match",
        [
            (["--tasks", "pong"], "--tasks: expected a comma-separated subset"),
            (["--libs", "ours,rllib"], "--libs: .*'ours,rllib'"),
            (["--tasks", ""], "--tasks"),
            (["--seeds", "0"], "--seeds: expected a positive"),
            (["--cartpole-frames", "0"], "--cartpole-frames: expected > 0"),
        ],
    )
    def test_bad_flags(self, argv, match):
        with pytest.raises(ValueError, match=match):
            bench.parse_args(argv)


class TestNormalizeOurs:
    def test_tuple_and_dict_forms(self):
        base = {"frames": 2000, "wall_s": 4.0, "return_curve": [[1000, 2.0, 30.0]]}
        row = bench.normalize_ours({**base, "reached_target": [1500, 3.0]}, "cartpole", 1, 475.0)
        assert row["reached_target"] == {"frames": 1500, "wall_s": 3.0}
        # frames_per_s falls back to frames / wall_s when the example does not give it.
        assert row["frames_per_s"] == 500.0 and row["final_avg_return"] == 30.0
        row = bench.normalize_ours(
            {**base, "reached_target": {"frames": 7, "wall_s": 1.5}, "frames_per_s": 510.0},
            "halfcheetah",
            0,
            475.0,
        )
        assert row["reached_target"] == {"frames": 7, "wall_s": 1.5}
        assert row["frames_per_s"] == 510.0 and row["env_id"] == "HalfCheetah-v5"

    def test_lag_forms(self):
        base = {"frames": 10, "wall_s": 1.0}
        row = bench.normalize_ours(
            {**base, "policy_lag": {"min": 0, "mean": 1.0, "max": 3}}, "cartpole", 0, 1.0
        )
        assert row["policy_lag"] == {"min": 0, "mean": 1.0, "max": 3}
        flat = {**base, "policy_lag_min": 1, "policy_lag_mean": 1.5, "policy_lag_max": 2}
        row = bench.normalize_ours(flat, "cartpole", 0, 1.0)
        assert row["policy_lag"] == {"min": 1, "mean": 1.5, "max": 2}
        assert bench.normalize_ours(base, "cartpole", 0, 1.0)["policy_lag"] is None

    def test_missing_key(self):
        with pytest.raises(KeyError, match="lacks 'wall_s'"):
            bench.normalize_ours({"frames": 10}, "cartpole", 0, 475.0)


class TestSummarize:
    def test_medians_and_ratios(self):
        lag = {"min": 0, "mean": 1.0, "max": 4}
        rows = [
            _row("ours", "cartpole", 9000.0, tt=20.0, lag=lag, final=480.0),
            _row("ours", "cartpole", 12000.0, tt=30.0, lag=lag, final=490.0),
            _row("ours", "cartpole", 15000.0, tt=None, lag=lag, final=400.0),
            _row("sample_factory", "cartpole", 3000.0, tt=100.0, final=490.0),
            _row("ours", "halfcheetah", 5000.0),
            _row("sample_factory", "halfcheetah", 2500.0),
            {"lib": "sample_factory", "task": "halfcheetah", "seed": 1, "error": "boom"},
        ]
        summary = bench.summarize(rows)
        ours = summary["per_lib"]["ours"]["cartpole"]
        assert ours["runs"] == 3 and ours["reached_target"] == 2
        assert ours["median_frames_per_s"] == 12000.0
        assert ours["median_time_to_target_s"] == 25.0
        assert ours["median_final_avg_return"] == 480.0
        assert ours["median_policy_lag_mean"] == 1.0 and ours["policy_lag_max"] == 4
        assert summary["per_lib"]["sample_factory"]["halfcheetah"]["runs"] == 1
        assert summary["per_lib"]["sample_factory"]["halfcheetah"]["failed_runs"] == 1
        assert ours["failed_runs"] == 0
        assert summary["ratios"]["sample_factory"]["cartpole"] == {
            "frames_per_s": 4.0,
            "time_to_target": 0.25,
            "meets_issue_targets": True,
        }
        # HalfCheetah has no target return: only the 3x frames/s counts (2x here).
        assert summary["ratios"]["sample_factory"]["halfcheetah"]["frames_per_s"] == 2.0
        assert summary["ratios"]["sample_factory"]["halfcheetah"]["meets_issue_targets"] is False
        json.dumps(summary)

    def test_each_peer_has_its_ratios(self):
        rows = [
            _row("ours", "cartpole", 6000.0, tt=40.0),
            _row("sample_factory", "cartpole", 3000.0),  # never reached the target
            _row("sample_factory_sfnet", "cartpole", 1500.0, tt=100.0),
        ]
        ratios = bench.summarize(rows)["ratios"]
        assert ratios["sample_factory"]["cartpole"]["time_to_target"] is None
        assert ratios["sample_factory_sfnet"]["cartpole"] == {
            "frames_per_s": 4.0,
            "time_to_target": 0.4,
            "meets_issue_targets": True,
        }

    def test_time_target_unmet_or_missing_peer(self):
        rows = [
            _row("ours", "cartpole", 12000.0, tt=60.0),
            _row("sample_factory", "cartpole", 3000.0, tt=100.0),
            _row("ours", "halfcheetah", 5000.0),
        ]
        summary = bench.summarize(rows)
        assert summary["ratios"]["sample_factory"]["cartpole"]["time_to_target"] == 0.6
        assert summary["ratios"]["sample_factory"]["cartpole"]["meets_issue_targets"] is False
        assert "halfcheetah" not in summary["ratios"]["sample_factory"]  # no SF row to compare

    def test_ours_never_reached(self):
        rows = [
            _row("ours", "cartpole", 12000.0),
            _row("sample_factory", "cartpole", 3000.0, tt=90.0),
        ]
        ratio = bench.summarize(rows)["ratios"]["sample_factory"]["cartpole"]
        # Unknown rather than failed: the time ratio cannot be computed.
        assert ratio["time_to_target"] is None and ratio["meets_issue_targets"] is None


def test_sf_absent_is_skipped(monkeypatch, capsys):
    monkeypatch.setenv("SF_PYTHON", "/nonexistent/python")
    bench.main(["--libs", "sample_factory", "--tasks", "cartpole"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "no Sample Factory python at /nonexistent/python" in lines[0]["skipped"]
    assert lines[-1]["summary"] is True and lines[-1]["ratios"] == {}
    assert len(lines) == 2


def test_child_ours_calls_train_with_its_keywords(tmp_path, monkeypatch):
    # A stand-in example: the child passes only the keywords ``train`` takes and writes its
    # result (tensors turned into lists) for the parent to read.
    (tmp_path / "fake_appo.py").write_text(
        "import torch\n"
        "def train(total_frames, seed):\n"
        "    return {'frames': total_frames, 'wall_s': 2.0, 'lag': torch.tensor([1, 2])}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(bench.EXAMPLE, "cartpole", "fake_appo")
    out = tmp_path / "result.json"
    config = {"total_frames": 64, "seed": 3, "target_return": 475.0, "stop_at_target": True}
    spec = {"task": "cartpole", "config": config, "out": str(out)}
    threads = torch.get_num_threads()
    try:
        bench.child_ours(json.dumps(spec))
    finally:
        torch.set_num_threads(threads)
    result = json.loads(out.read_text())
    assert result["frames"] == 64 and result["lag"] == [1, 2]
    assert result["_config"] == {"total_frames": 64, "seed": 3}
    row = bench.normalize_ours(result, "cartpole", 3, 475.0)
    assert row["frames_per_s"] == 32.0 and row["reached_target"] is None


def test_run_isolated_kills_process_tree(tmp_path):
    # A parent that starts a long-sleeping child and then sleeps itself: the timeout must take
    # both down (the child would otherwise outlive the run).
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(c.pid))\n"
        "time.sleep(60)\n"
    )
    t0 = time.perf_counter()
    result = bench.run_isolated(
        [sys.executable, "-c", code], 2.0, str(tmp_path), dict(os.environ), str(tmp_path / "log")
    )
    # well under the 60 s the processes would sleep (a loaded 2-core machine took 17 s once)
    assert time.perf_counter() - t0 < 45
    assert result["timed_out"] is True and result["rc"] != 0
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_run_isolated_escalates_when_interrupt_is_ignored(tmp_path, monkeypatch):
    # A main process that ignores SIGINT and SIGTERM still goes down (SIGKILL) after the graces.
    monkeypatch.setattr(bench, "INTERRUPT_GRACE_S", 0.5)
    monkeypatch.setattr(bench, "TERM_GRACE_S", 0.5)
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "time.sleep(60)\n"
    )
    t0 = time.perf_counter()
    result = bench.run_isolated(
        # 3 s: time for the child to install its handlers even on a loaded machine.
        [sys.executable, "-c", code],
        3.0,
        str(tmp_path),
        dict(os.environ),
        str(tmp_path / "log"),
    )
    assert time.perf_counter() - t0 < 20
    assert result["timed_out"] is True and result["rc"] == -9


def test_run_isolated_reports_strays(tmp_path):
    # The main process exits at once but leaves a child behind: it is killed and reported.
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    )
    result = bench.run_isolated(
        [sys.executable, "-c", code], 30.0, str(tmp_path), dict(os.environ), str(tmp_path / "log")
    )
    assert result["rc"] == 0 and result["timed_out"] is False
    assert result["strays_killed"] is True


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@needs_sf
def test_sf_config_matches_our_network():
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {os.path.dirname(SF_SCRIPT)!r})\n"
        "import sf_async\n"
        "out = {}\n"
        "for task in ('cartpole', 'halfcheetah'):\n"
        "    cfg, env_id, _ = sf_async.make_cfg(task, 3, '/tmp/unused', 1000, [])\n"
        "    out[task] = [env_id, list(cfg.encoder_mlp_layers), cfg.nonlinearity,\n"
        "                 cfg.actor_critic_share_weights, cfg.use_rnn, cfg.num_workers,\n"
        "                 cfg.num_envs_per_worker, cfg.device, cfg.async_rl, cfg.seed]\n"
        "for task in ('cartpole', 'halfcheetah'):\n"
        "    cfg, _, _ = sf_async.make_cfg(task, 0, '/tmp/unused', 10, [], 'sf_default')\n"
        "    out[task + '_sf_default'] = [list(cfg.encoder_mlp_layers), cfg.nonlinearity,\n"
        "                                 cfg.actor_critic_share_weights]\n"
        "print(json.dumps(out))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [SF_PYTHON, "-c", code], capture_output=True, text=True, cwd="/", env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    common = [[64, 64], "tanh", False, False, 2, 8, "cpu", True, 3]
    assert out["cartpole"] == ["CartPole-v1", *common]
    assert out["halfcheetah"][0] in ("HalfCheetah-v5", "HalfCheetah-v4")
    assert out["halfcheetah"][1:] == common
    assert out["cartpole_sf_default"] == [[512, 512], "elu", True]
    assert out["halfcheetah_sf_default"] == [[64, 64], "tanh", True]
