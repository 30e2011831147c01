"""What ``torch.compile`` buys: SAC/PPO update steps/s and collector frames/s, eager vs compiled.

Update cases (``--cases sac ppo``): one full update on a batch of 256 with 2x64 MLPs, the
networks and loss terms of ``benchmarks/losses.py`` (``_peers/loss_cases.py`` for ours,
``_peers/plain_cases.py`` for plain PyTorch), plus an Adam step and, for SAC, the Polyak
target update. Four rows per algorithm:

- ``impl=ours, mode=eager``: ``SACLoss``/``ClipPPOLoss`` on a TensorDict batch;
- ``impl=ours, mode=compiled``: the same update function passed to ``torch.compile`` (what
  ``--ours-compile loss`` changes: only the loss module is compiled, the backward, Adam step and
  target update stay eager);
- ``impl=plain, mode=eager`` / ``mode=compiled``: the hand-written update, eager and compiled.

Dynamo stops its graph at ``backward()``: the compiled update is a compiled forward (whose
backward AOTAutograd also compiles) followed by a compiled optimizer step and target update.
Each row gives ``compile_s`` (the first call: tracing and code generation; 0 for eager),
``us_per_call`` (wall, best of ``--rounds``), ``cpu_us_per_call`` (this thread's CPU time per
call, what a loaded machine disturbs least), ``updates_per_s`` (from the CPU time) and
``over_plain_eager`` (CPU time over the plain eager update's).

Collector cases (``--cases collect``): ``SyncDataCollector`` on the repo's pure-torch
``PendulumEnv`` (``--env-batch`` pendulums, default 1 and 32), a 2x64 tanh policy,
``frames_per_batch`` = 16 steps of every pendulum, without and with ``compile_policy=True``
(when the collector does not take that keyword, the benchmark wraps the policy network in
``torch.compile`` itself and says so in ``compiled_by``). Rows give ``first_batch_s`` (the
first batch, compile included) and ``frames_per_s`` (the best of ``--rounds`` windows of
``--seconds``).

Flags: ``--mode`` (``torch.compile`` mode, e.g. ``max-autotune-no-cudagraphs``),
``--fullgraph``, ``--dynamo-backward`` (``torch._dynamo.config.trace_autograd_ops``: dynamo
traces ``backward()`` too, so forward, backward, Adam and the target update can form one
graph), ``--inductor KEY=VALUE ...`` (``torch._inductor.config`` settings, e.g.
``cpp_wrapper=True``: the compiled graph calls its kernels from generated C++ instead of
Python).
Runs with ``torch.set_num_threads(1)``. Compilation takes 10-100 s a graph on a small shared
machine. One JSON object per line.

Usage: ``python benchmarks/compile.py [--cases sac ppo collect] [--seconds 0.5] [--rounds 2]
[--mode MODE] [--fullgraph] [--dynamo-backward] [--inductor cpp_wrapper=True]
[--ours-compile update|loss] [--env-batch 1 32]``
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

torch.set_num_threads(1)

sys.path.insert(0, str(Path(__file__).parent / "_peers"))

from loss_cases import make_losses, step_fn  # noqa: E402
from plain_cases import PlainPPO, PlainSAC, time_call  # noqa: E402

from torchrl import modules, objectives  # noqa: E402

LOSS_CASES = {"sac": "sac_update", "ppo": "ppo_minibatch_update"}
PLAIN = {"sac": PlainSAC, "ppo": PlainPPO}


def _emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def _compile_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if args.mode:
        kwargs["mode"] = args.mode
    if args.fullgraph:
        kwargs["fullgraph"] = True
    return kwargs


def _set_inductor(settings: list[str]) -> dict[str, Any]:
    """Applies ``KEY=VALUE`` settings to ``torch._inductor.config``; returns them parsed."""
    import ast

    import torch._inductor.config as inductor_config

    applied: dict[str, Any] = {}
    for item in settings:
        key, sep, raw = item.partition("=")
        if not sep:
            raise SystemExit(f"--inductor takes KEY=VALUE, got {item!r}")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        inductor_config.__setattr__(key, value)
        applied[key] = value
    return applied


def _first_call(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def make_updates(algo: str, args: argparse.Namespace) -> dict[tuple[str, str], Callable[[], Any]]:
    """``{(impl, mode): update}`` for one algorithm, built fresh (each with its own networks)."""
    kwargs = _compile_kwargs(args)
    updates: dict[tuple[str, str], Callable[[], Any]] = {}
    name = LOSS_CASES[algo]
    loss, td, updater = make_losses(modules, objectives)[name]
    updates["ours", "eager"] = step_fn(torch, loss, td, updater, optimizer=True)
    loss, td, updater = make_losses(modules, objectives)[name]
    if args.ours_compile == "loss":
        updates["ours", "compiled"] = step_fn(
            torch, torch.compile(loss, **kwargs), td, updater, optimizer=True
        )
    else:
        updates["ours", "compiled"] = torch.compile(
            step_fn(torch, loss, td, updater, optimizer=True), **kwargs
        )
    torch.manual_seed(0)
    updates["plain", "eager"] = PLAIN[algo](optimizer=True).update
    updates["plain", "compiled"] = torch.compile(PLAIN[algo](optimizer=True).update, **kwargs)
    return updates


def bench_updates(algo: str, args: argparse.Namespace) -> None:
    import torch._dynamo

    updates = make_updates(algo, args)
    compile_s: dict[tuple[str, str], float] = {}
    breaks: dict[tuple[str, str], int] = {}
    for key, fn in updates.items():
        before = sum(torch._dynamo.utils.counters["graph_break"].values())
        compile_s[key] = _first_call(fn) if key[1] == "compiled" else 0.0
        breaks[key] = sum(torch._dynamo.utils.counters["graph_break"].values()) - before
    wall: dict[tuple[str, str], float] = {}
    cpu: dict[tuple[str, str], float] = {}
    for _ in range(max(args.rounds, 1)):
        # Back to back, every round: the ratios survive a machine whose load changes.
        for key, fn in updates.items():
            w, c = time_call(fn, args.seconds)
            wall[key] = min(w, wall.get(key, float("inf")))
            cpu[key] = min(c, cpu.get(key, float("inf")))
    floor = cpu["plain", "eager"]
    for (impl, mode), c in cpu.items():
        record = {
            "bench": "compile",
            "case": f"{algo}_update",
            "impl": impl,
            "mode": mode,
            "compile_s": round(compile_s[impl, mode], 1),
            "us_per_call": round(wall[impl, mode], 1),
            "cpu_us_per_call": round(c, 1),
            "updates_per_s": round(1e6 / c, 1),
            "over_plain_eager": round(c / floor, 3),
        }
        if mode == "compiled":
            record["compile_options"] = {
                **_compile_kwargs(args),
                **({"inductor": args.inductor_applied} if args.inductor_applied else {}),
                "dynamo_backward": args.dynamo_backward,
                **({"what": args.ours_compile} if impl == "ours" else {}),
            }
            record["graph_breaks"] = breaks[impl, mode]
        record["torch_threads"] = 1
        _emit(record)


def _policy() -> Any:
    from tensordict.nn import TensorDictModule
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(3, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1), nn.Tanh()
    )
    return TensorDictModule(net, ["observation"], ["action"])


def _collector(env_batch: int, compiled: bool, kwargs: dict[str, Any]) -> tuple[Any, str]:
    from torchrl.collectors import SyncDataCollector
    from torchrl.envs.custom.pendulum import PendulumEnv

    env = PendulumEnv(batch_size=[env_batch] if env_batch > 1 else None, seed=0)
    policy = _policy()
    extra: dict[str, Any] = {}
    compiled_by = ""
    if compiled:
        if "compile_policy" in inspect.signature(SyncDataCollector).parameters:
            extra["compile_policy"] = kwargs or True
            compiled_by = "collector (compile_policy)"
        else:
            policy.module = torch.compile(policy.module, **kwargs)
            compiled_by = "benchmark (torch.compile of the policy network)"
    collector = SyncDataCollector(
        env, policy, frames_per_batch=16 * env_batch, total_frames=-1, **extra
    )
    return collector, compiled_by


def bench_collect(args: argparse.Namespace) -> None:
    kwargs = _compile_kwargs(args)
    for env_batch in args.env_batch:
        for compiled in (False, True):
            collector, compiled_by = _collector(env_batch, compiled, kwargs)
            it = iter(collector)
            first = _first_call(it.__next__)
            frames = 16 * env_batch
            best = 0.0
            for _ in range(max(args.rounds, 1)):
                n, start = 0, time.perf_counter()
                while time.perf_counter() - start < args.seconds:
                    next(it)
                    n += frames
                best = max(best, n / (time.perf_counter() - start))
            collector.shutdown()
            record = {
                "bench": "compile",
                "case": "collect_pendulum",
                "env_batch": env_batch,
                "mode": "compiled" if compiled else "eager",
                "first_batch_s": round(first, 2),
                "frames_per_s": round(best),
            }
            if compiled:
                record["compiled_by"] = compiled_by
                record["compile_options"] = {
                    **kwargs,
                    **({"inductor": args.inductor_applied} if args.inductor_applied else {}),
                }
            record["torch_threads"] = 1
            _emit(record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", nargs="+", default=["sac", "ppo", "collect"])
    parser.add_argument("--seconds", type=float, default=0.5, help="time per timed window")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (best kept)")
    parser.add_argument("--mode", default=None, help="torch.compile mode")
    parser.add_argument("--fullgraph", action="store_true")
    parser.add_argument("--dynamo-backward", action="store_true")
    parser.add_argument("--inductor", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--ours-compile", choices=["update", "loss"], default="update")
    parser.add_argument("--env-batch", type=int, nargs="+", default=[1, 32])
    args = parser.parse_args()
    unknown = sorted(set(args.cases) - {*LOSS_CASES, "collect"})
    if unknown:
        parser.error(f"unknown --cases {unknown}; choose from sac, ppo, collect")
    args.inductor_applied = _set_inductor(args.inductor)
    if args.dynamo_backward:
        import torch._dynamo

        torch._dynamo.config.trace_autograd_ops = True
    for case in args.cases:
        if case == "collect":
            bench_collect(args)
        else:
            bench_updates(case, args)


if __name__ == "__main__":
    main()
