"""The plain-PyTorch floor of ``benchmarks/losses.py`` computes what our losses compute.

Each plain case gets our loss's weights and the same batch; with the same seed (both draw their
noise in the same order) every loss term agrees with ours. Also: the plain updates (with Adam)
move the parameters and targets, and ``benchmarks/compile.py`` runs its rows with the
``aot_eager`` variant (tracing only, no inductor code generation).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import sys
from contextlib import redirect_stdout

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from torchrl import modules, objectives

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, "benchmarks", "_peers")


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


plain = _load("bench_plain_cases", os.path.join(PEERS, "plain_cases.py"))
loss_cases = _load("bench_loss_cases", os.path.join(PEERS, "loss_cases.py"))


def _copy(net: nn.Module, tensors: list[torch.Tensor]) -> None:
    params = list(net.parameters())
    assert len(params) == len(tensors)
    with torch.no_grad():
        for p, t in zip(params, tensors):
            assert p.shape == t.shape
            p.copy_(t)


def _member(params: TensorDict, i: int) -> list[torch.Tensor]:
    return [t[i] for t in params.values(True, True)]


def _leaves(params: TensorDict) -> list[torch.Tensor]:
    return list(params.values(True, True))


def _td(data: dict[str, torch.Tensor], action: torch.Tensor) -> TensorDict:
    return TensorDict(
        {
            "observation": data["obs"],
            "action": action,
            "next": {
                "observation": data["next_obs"],
                "reward": data["reward"],
                "done": data["terminated"].clone(),
                "terminated": data["terminated"],
            },
        },
        batch_size=[plain.BATCH],
    )


def _ours(name: str):
    return loss_cases.make_losses(modules, objectives)[name][0]


def _close(ours: torch.Tensor, theirs: torch.Tensor, rtol: float = 1e-5) -> None:
    torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=rtol, atol=1e-6)


def test_plain_dqn_matches_dqn_loss():
    loss = _ours("dqn_update")
    case = plain.PlainDQN()
    _copy(case.qnet, list(loss.value_network.parameters()))
    _copy(case.qnet_target, _leaves(loss.target_value_network_params))
    action = nn.functional.one_hot(case.data["action"].squeeze(-1), plain.N_ACTIONS)
    _close(loss(_td(case.data, action))["loss"], case.losses()["loss"])


def test_plain_sac_matches_sac_loss():
    loss = _ours("sac_update")
    case = plain.PlainSAC()
    _copy(case.actor, list(loss.actor_network.parameters()))
    for i, (q, q_target) in enumerate([(case.q1, case.q1_target), (case.q2, case.q2_target)]):
        _copy(q, _member(loss.qvalue_network_params, i))
        _copy(q_target, _member(loss.target_qvalue_network_params, i))
    torch.manual_seed(3)
    ours = loss(_td(case.data, case.data["action"]))
    torch.manual_seed(3)
    theirs = case.losses()
    for key in ("loss_actor", "loss_qvalue", "loss_alpha"):
        _close(ours[key], theirs[key])


def test_plain_td3_matches_td3_loss():
    loss = _ours("td3_update")
    case = plain.PlainTD3()
    _copy(case.actor, list(loss.actor_network.parameters()))
    _copy(case.actor_target, _leaves(loss.target_actor_network_params))
    for i, (q, q_target) in enumerate([(case.q1, case.q1_target), (case.q2, case.q2_target)]):
        _copy(q, _member(loss.qvalue_network_params, i))
        _copy(q_target, _member(loss.target_qvalue_network_params, i))
    torch.manual_seed(3)
    ours = loss(_td(case.data, case.data["action"]))
    torch.manual_seed(3)
    theirs = case.losses()
    for key in ("loss_actor", "loss_qvalue"):
        _close(ours[key], theirs[key])


def test_plain_ppo_matches_clip_ppo_loss():
    loss = _ours("ppo_minibatch_update")
    case = plain.PlainPPO()
    _copy(case.actor, list(loss.actor_network.parameters()))
    _copy(case.critic, list(loss.critic_network.parameters()))
    td = _td(case.data, case.data["action"])
    td["sample_log_prob"] = case.data["old_log_prob"]
    td["advantage"] = case.data["advantage"].unsqueeze(-1)
    td["value_target"] = case.data["value_target"]
    torch.manual_seed(3)
    ours = loss(td)
    torch.manual_seed(3)
    theirs = case.losses()
    _close(ours["loss_objective"], theirs["loss_objective"])
    _close(ours["loss_critic"], theirs["loss_critic"])
    # The same one-sample entropy estimate, scored from the same pre-tanh draw.
    _close(ours["loss_entropy"], theirs["loss_entropy"])


@pytest.mark.parametrize("name", sorted(plain.PLAIN))
def test_cases_do_the_same_work_on_a_reused_batch(name):
    # The benchmark passes the same batch to every call: what a loss writes into it (the
    # priorities) must not change the next call's result.
    loss, td, _ = loss_cases.make_losses(modules, objectives)[name]
    fresh = td.clone()
    torch.manual_seed(1)
    loss(td)
    torch.manual_seed(2)
    again = loss(td)
    torch.manual_seed(2)
    first = loss(fresh)
    assert set(again.keys()) == set(first.keys())
    for key in first.keys():
        torch.testing.assert_close(again[key], first[key], rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(plain.PLAIN))
def test_plain_update_with_adam_moves_parameters_and_targets(name):
    torch.manual_seed(0)
    case = plain.PLAIN[name](optimizer=True)
    before = [p.detach().clone() for p in case.trainable]
    targets = [t.detach().clone() for t in case.targets]
    case.update()
    assert all(p.grad is not None for p in case.trainable)
    assert any(not torch.equal(a, p) for a, p in zip(before, case.trainable))
    if targets:
        assert any(not torch.equal(a, t) for a, t in zip(targets, case.targets))


def test_time_call_returns_wall_and_cpu_microseconds():
    wall, cpu = plain.time_call(lambda: torch.ones(4).sum(), seconds=0.01, repeats=1)
    assert wall > 0 and cpu >= 0


def _compile_args(**kw) -> argparse.Namespace:
    base = dict(
        rounds=1,
        seconds=0.01,
        variants=["aot_eager"],
        fullgraph=False,
        dynamo_backward=False,
        inductor_applied={},
        ours_compile="update",
        env_batch=[2],
        device="cpu",
    )
    base.update(kw)
    return argparse.Namespace(**base)


@pytest.mark.slow
def test_compile_benchmark_rows_with_aot_eager():
    bench = _load("bench_compile", os.path.join(ROOT, "benchmarks", "compile.py"))
    out = io.StringIO()
    with redirect_stdout(out):
        bench.bench_updates("ppo", _compile_args())
        bench.bench_collect(_compile_args())
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    updates = {(r["impl"], r["variant"]): r for r in rows if r["case"] == "ppo_update"}
    assert set(updates) == {
        ("ours", "eager"),
        ("plain", "eager"),
        ("ours", "aot_eager"),
        ("plain", "aot_eager"),
    }
    assert updates["plain", "eager"]["over_plain_eager"] == 1.0
    assert updates["ours", "aot_eager"]["first_call_s"] > 0
    assert updates["ours", "aot_eager"]["compile_options"]["backend"] == "aot_eager"
    collect = [r for r in rows if r["case"] == "collect_pendulum_2env"]
    assert [r["variant"] for r in collect] == ["eager", "aot_eager"]
    assert all(r["per_s"] > 0 for r in collect)


def test_paired_cpu_times_both_calls_in_alternating_chunks():
    calls: list[str] = []
    x = torch.randn(64, 64)

    def heavy() -> None:
        calls.append("a")
        for _ in range(20):
            x @ x

    def light() -> None:
        calls.append("b")

    a, b = plain.paired_cpu(heavy, light, seconds=0.0, chunk=2)
    assert len(a) == len(b) == 5  # at least five pairs, even with no time given
    assert calls[4:8] == ["a", "a", "b", "b"]  # after a warm-up of 2 each: chunks of 2
    assert min(a) > 0 and min(b) >= 0
    assert sorted(a)[2] > sorted(b)[2]  # the heavier call is the slower one


def test_paired_summary_gives_median_ratio_and_quartiles():
    pairs = [(2.0, 1.0), (3.0, 2.0), (1.2, 1.0), (4.0, 2.0), (1.0, 1.0)]
    out = plain.paired_summary(pairs)
    assert out["pairs"] == 5
    assert out["ours_over_plain"] == 1.5  # ratios 1.0, 1.2, 1.5, 2.0, 2.0
    low, high = out["ours_over_plain_quartiles"]
    assert 1.0 <= low <= 1.5 <= high <= 2.0
    assert out["paired_cpu_us_per_call"] == 2.0 and out["plain_paired_cpu_us_per_call"] == 1.0
    assert plain.paired_summary([(3.0, 2.0)])["ours_over_plain_quartiles"] == [1.5, 1.5]
