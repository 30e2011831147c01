"""The model-based benchmark: its cases on our package (tiny shapes), its losses, flags and summary.

The cases run in this process on our ``torchrl``; one short driver run goes through a child
process (ours only). TorchRL's side is exercised only for its "skipped" row (its venv is
optional).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys

import pytest
import torch
from tensordict import TensorDict

import torchrl
import torchrl.data
import torchrl.envs
import torchrl.modules

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(name: str, *parts: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", *parts))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


cases = _load("bench_torchrl_model_based", "_peers", "torchrl_model_based.py")
driver = _load("bench_model_based", "model_based.py")


def test_train_step_updates_the_world_model():
    torch.manual_seed(0)
    step = cases.make_train_step(torchrl, cases.TINY)
    first = step()
    second = step()
    assert math.isfinite(first) and math.isfinite(second)
    assert first != second  # the Adam step changed the parameters


def test_imagination_cases_roll_out_the_horizon():
    s = cases.TINY
    env, actor, starts = cases._make_imagination_env(torchrl, s, seed=0)
    with torch.no_grad():
        out = env.rollout(s.horizon, actor, auto_reset=False, tensordict=env.reset(starts.clone()))
    assert out.batch_size == torch.Size([s.imag_batch, s.horizon])
    assert out["next", "belief"].shape == (s.imag_batch, s.horizon, s.belief)
    assert out["action"].abs().max() <= 1.0
    for case in ("imagine_env", "imagine_env_grad", "imagine_loop"):
        fn, frames, unit = cases.make_case(torchrl, case, s)
        assert math.isfinite(fn()) and frames == s.imag_batch * s.horizon
        assert unit == "frames_per_s"


def test_grad_imagination_reaches_the_actor():
    s = cases.TINY
    env, actor, starts = cases._make_imagination_env(torchrl, s, seed=0)
    out = env.rollout(s.horizon, actor, auto_reset=False, tensordict=env.reset(starts.clone()))
    out["next", "reward"].mean().backward()
    assert all(p.grad is not None for p in actor.parameters())


def test_losses_match_their_formulas():
    g = torch.Generator().manual_seed(0)
    b, t, n = 3, 4, 5
    td = TensorDict(
        {
            "next": {
                "prior_mean": torch.randn(b, t, n, generator=g),
                "prior_std": torch.rand(b, t, n, generator=g) + 0.1,
                "posterior_mean": torch.randn(b, t, n, generator=g),
                "posterior_std": torch.rand(b, t, n, generator=g) + 0.1,
                "pixels": torch.rand(b, t, 3, 2, 2, generator=g),
                "reco_pixels": torch.rand(b, t, 3, 2, 2, generator=g),
                "reward": torch.randn(b, t, 1, generator=g),
                "reward_pred": torch.randn(b, t, 1, generator=g),
            }
        },
        batch_size=[b, t],
    )
    post = torch.distributions.Normal(td["next", "posterior_mean"], td["next", "posterior_std"])
    prior = torch.distributions.Normal(td["next", "prior_mean"], td["next", "prior_std"])
    kl = torch.distributions.kl_divergence(post, prior).sum(-1)
    for free_nats in (0.0, 3.0):
        losses = cases.dreamer_losses(td, free_nats)
        torch.testing.assert_close(losses["loss_kl"], kl.clamp_min(free_nats).mean())
    reco = (td["next", "reco_pixels"] - td["next", "pixels"]).pow(2).flatten(2).sum(-1)
    torch.testing.assert_close(losses["loss_reco"], 0.5 * reco.mean())
    reward = (td["next", "reward_pred"] - td["next", "reward"]).pow(2)
    torch.testing.assert_close(losses["loss_reward"], 0.5 * reward.mean())


def test_time_case_counts_calls():
    calls = []
    wall, cpu = cases.time_case(lambda: calls.append(1) or 0.0, seconds=0.0, min_iters=3)
    assert len(calls) == 4 and len(wall) == len(cpu) == 3  # one warm-up call
    with pytest.raises(ValueError, match="case: expected one of"):
        cases.make_case(torchrl, "plan", cases.TINY)


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--libs", "ours,dreamerv3"], "--libs: expected a comma-separated subset.*dreamerv3"),
        (["--libs", ""], "--libs"),
        (["--cases", "train,plan"], "--cases: expected"),
        (["--threads", "0"], "--threads: expected comma-separated positive integers"),
        (["--threads", "two"], "--threads"),
        (["--seconds", "0"], "--seconds: expected a positive number, got 0"),
        (["--rounds", "0"], "--rounds: expected a positive integer"),
    ],
)
def test_bad_flags(argv, match):
    with pytest.raises(ValueError, match=match):
        driver.parse_args(argv)


def test_bad_script_flags():
    with pytest.raises(ValueError, match="--cases"):
        cases.parse_args(["--cases", "nope"])
    with pytest.raises(ValueError, match="--threads"):
        cases.parse_args(["--threads", "-1"])


def test_summary_ratios_and_problems():
    args = driver.parse_args(["--threads", "1", "--cases", "train,imagine_loop"])
    records = [
        {"lib": "ours", "case": "train", "threads": "1", "min_s": 2.0, "updates_per_s": 0.5,
         "updates_per_cpu_s": 0.5},
        {"lib": "ours", "case": "train", "threads": "1", "min_s": 1.0, "updates_per_s": 1.0,
         "updates_per_cpu_s": 1.0},
        {"lib": "torchrl", "case": "train", "threads": "1", "min_s": 1.25,
         "updates_per_s": 0.8, "updates_per_cpu_s": 0.5, "impl": "torchrl-0.14.1"},
        {"lib": "ours", "case": "imagine_loop", "threads": "1", "min_s": 1.0,
         "frames_per_s": 10.0, "frames_per_cpu_s": 12.0},
        {"bench": "model_based", "lib": "torchrl", "threads": "1", "skipped": "no peer"},
    ]  # fmt: skip
    summary = driver.summarize(records, args)
    train, loop = summary["rows"]
    assert train["ours"] == 1.0  # the best round is kept
    assert train["ratio"] == 1.25 and train["ratio_cpu"] == 2.0 and not train["meets_target"]
    assert "ratio" not in loop and loop["ours"] == 10.0
    assert summary["problems"] == [records[-1]]


def test_missing_peer_is_skipped():
    args = driver.parse_args(["--libs", "torchrl", "--peer-python", "/nonexistent/python"])
    (row,) = driver.measure("torchrl", "1", args)
    assert row["skipped"] == "no peer python at /nonexistent/python"


def test_driver_runs_ours_in_a_child():
    rows = []
    code = driver.main(
        ["--libs", "ours", "--tiny", "--threads", "1", "--cases", "imagine_loop,train",
         "--seconds", "0.01", "--min-iters", "1"],
        emit=rows.append,
    )  # fmt: skip
    assert code == 0, rows
    loop, train, summary = rows
    assert loop["impl"] == "ours" and loop["torch_threads"] == 1 and loop["frames_per_s"] > 0
    # The child imported this repo's package, not a peer's.
    assert loop["torchrl_path"] == os.path.dirname(torchrl.__file__)
    assert train["case"] == "train" and train["updates_per_s"] > 0
    assert summary["summary"] and summary["rows"][0]["ours"] == loop["frames_per_s"]
    json.dumps(summary)
