"""The offline-data benchmark driver: its generated D4RL file, flags, summary and a small real run.

The run is ours only, on 20k transitions (two child processes: the conversion, then one reopen
with sampling); the d3rlpy peer is exercised only for its "skipped" row (its venv is optional).
"""

from __future__ import annotations

import importlib.util
import json
import os
import time

import h5py
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_driver():
    path = os.path.join(ROOT, "benchmarks", "offline_data.py")
    spec = importlib.util.spec_from_file_location("offline_data", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_driver()


def test_generated_file_is_d4rl_shaped(tmp_path):
    path = bench.write_d4rl_file(tmp_path / "d.hdf5", 2500, seed=1, episode_len=1000)
    with h5py.File(path, "r") as f:
        data = {k: f[k][()] for k in f.keys()}
    assert data["observations"].shape == (2500, 17) and data["observations"].dtype == np.float32
    assert data["next_observations"].shape == (2500, 17)
    assert data["actions"].shape == (2500, 6) and np.abs(data["actions"]).max() <= 1.0
    assert data["rewards"].shape == (2500,) and data["rewards"].dtype == np.float32
    assert data["terminals"].dtype == bool and not data["terminals"].any()
    assert np.flatnonzero(data["timeouts"]).tolist() == [999, 1999]
    # Inside an episode the next observation is the following one; across a cut it is not.
    np.testing.assert_array_equal(data["next_observations"][:999], data["observations"][1:1000])
    assert not np.array_equal(data["next_observations"][999], data["observations"][1000])
    # Written in chunks of 100 episodes: the chunk boundary keeps the same rule.
    path = bench.write_d4rl_file(tmp_path / "e.hdf5", 250, episode_len=2)
    with h5py.File(path, "r") as f:
        obs, nxt, cut = f["observations"][()], f["next_observations"][()], f["timeouts"][()]
    assert cut.sum() == 125
    inside = np.flatnonzero(~cut[:-1])
    np.testing.assert_array_equal(nxt[inside], obs[inside + 1])
    assert bench._file_matches(tmp_path / "d.hdf5", 2500, 1)
    assert not bench._file_matches(tmp_path / "d.hdf5", 2500, 0)
    assert not bench._file_matches(tmp_path / "missing.hdf5", 2500, 1)


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--libs", "ours,rlkit"], "--libs: expected a comma-separated subset.*'ours,rlkit'"),
        (["--libs", ""], "--libs"),
        (["--transitions", "0"], "--transitions: expected a positive integer, got 0"),
        (["--batch-size", "-1"], "--batch-size: expected a positive"),
        (["--repeats", "0"], "--repeats"),
        (["--seconds", "0"], "--seconds: expected a positive number"),
    ],
)
def test_bad_flags(argv, match):
    with pytest.raises(ValueError, match=match):
        bench.parse_args(argv)


def test_bad_generator_arguments(tmp_path):
    with pytest.raises(ValueError, match="transitions must be positive, got 0"):
        bench.write_d4rl_file(tmp_path / "x.hdf5", 0)
    with pytest.raises(ValueError, match="episode_len must be positive"):
        bench.write_d4rl_file(tmp_path / "x.hdf5", 10, episode_len=0)
    assert not list(tmp_path.iterdir())


def _reopen_row(reopen_s, tps, grow, lib="ours"):
    return {
        "lib": lib,
        "measure": "reopen_sample",
        "reopen_s": reopen_s,
        "transitions_per_s": tps,
        "rss_before_open": {"rss": 1000, "rss_anon": 500},
        "rss_after_open": {"rss": 1000 + grow, "rss_anon": 500},
        "rss_after_sample": {"rss": 5000, "rss_anon": 510},
    }


def test_summary_medians_ratio_and_targets():
    rows = [
        {"measure": "generate", "file_bytes": 10_000},
        {"lib": "ours", "measure": "convert", "conversion_s": 3.0, "converted_bytes": 11_000},
        _reopen_row(0.05, 1.5e6, 100),
        _reopen_row(2.0, 0.9e6, 300),
        _reopen_row(0.07, 1.2e6, 200),
        {"lib": "d3rlpy", "transitions_per_s": 1e5, "build_s": 1.0, "read_s": 0.1},
        {"lib": "d3rlpy", "transitions_per_s": 3e5, "build_s": 2.0, "read_s": 0.1},
        {"lib": "d3rlpy", "error": "boom"},
    ]
    s = bench.summarize(rows, 10_000)
    assert s["ours"]["reopen_s"] == 0.07 and s["ours"]["reopen_s_max"] == 2.0
    assert s["ours"]["transitions_per_s"] == 1.2e6 and s["ours"]["rss_growth_open"] == 200
    assert s["ours"]["rss_anon_growth_after_sample"] == 10
    assert s["d3rlpy"]["runs"] == 2 and s["d3rlpy"]["transitions_per_s"] == 2e5
    assert s["ratios"]["transitions_per_s"] == 6.0
    assert s["targets"]["reopen_s"]["met"] is True
    assert s["targets"]["rss_growth_fraction_of_file"]["value"] == 0.02
    assert s["meets_all_targets"] is True and s["failed_runs"] == 1
    json.dumps(s)

    slow = bench.summarize([_reopen_row(0.1, 5e5, 5000)], 10_000)
    assert slow["targets"]["transitions_per_s"]["met"] is False
    assert slow["targets"]["rss_growth_fraction_of_file"]["met"] is False
    assert slow["targets"]["ratio_vs_d3rlpy"]["met"] is None  # no d3rlpy figure
    assert slow["meets_all_targets"] is False
    unknown = bench.summarize([_reopen_row(0.1, 2e6, 0)], 10_000)
    assert unknown["meets_all_targets"] is None


def test_missing_peer_is_skipped(tmp_path, capsys):
    summary = bench.main(
        ["--libs", "d3rlpy", "--transitions", "2000", "--repeats", "1"]
        + ["--d3rlpy-python", str(tmp_path / "nope" / "python"), "--workdir", str(tmp_path)]
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["measure"] == "generate" and lines[0]["transitions"] == 2000
    assert "no d3rlpy python at" in lines[1]["skipped"]
    assert lines[-1] == summary and summary["d3rlpy"]["runs"] == 0
    assert summary["meets_all_targets"] is None
    # The generated file stays in --workdir and is reused by the next run.
    assert (tmp_path / f"{bench.DATASET_ID}-2000.hdf5").exists()
    bench.main(
        ["--libs", "d3rlpy", "--transitions", "2000", "--repeats", "1"]
        + ["--d3rlpy-python", str(tmp_path / "nope" / "python"), "--workdir", str(tmp_path)]
    )
    assert json.loads(capsys.readouterr().out.splitlines()[0])["reused"] is True


def test_child_errors_become_rows():
    # A child that dies (here: at once, on a bad argument) is reported as an error row.
    row = bench.run_child("bogus", {}, timeout=60)
    assert "bogus process exited with 2" in row["error"] and "invalid choice" in row["error"]
    # A child past its time is killed and reported (importing torch alone takes longer).
    t0 = time.perf_counter()
    row = bench.run_child("convert", {"root": "/nonexistent"}, timeout=0.3)
    assert row == {"error": "convert process timed out after 0.3 s (killed)"}
    assert time.perf_counter() - t0 < 10


def test_ours_small_run(tmp_path, capsys):
    summary = bench.main(
        ["--libs", "ours", "--transitions", "20000", "--seconds", "0.3", "--repeats", "1"]
        + ["--workdir", str(tmp_path)]
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    convert, reopen = rows[1], rows[2]
    assert "error" not in convert, convert.get("error")
    assert "error" not in reopen, reopen.get("error")
    assert convert["transitions"] == 20000 and convert["converted_bytes"] > 0
    assert reopen["transitions"] == 20000 and reopen["batch_size"] == 256
    assert reopen["converted_again"] is False
    for key in ("observation", "action", "next.observation", "next.reward", "next.done"):
        assert key in reopen["batch_keys"]
    assert reopen["batches"] > 0 and reopen["transitions_per_s"] > 0
    assert 0 < reopen["reopen_s"] < 30
    assert summary["ours"]["reopen_runs"] == 1 and summary["failed_runs"] == 0
    assert summary["targets"]["ratio_vs_d3rlpy"]["met"] is None
    # The converted copy is removed after the run; the generated file is kept in --workdir.
    assert [p.name for p in tmp_path.iterdir()] == [f"{bench.DATASET_ID}-20000.hdf5"]
