"""Frames and wall time to solve: PPO on CartPole-v1 and SAC on Pendulum-v1, ours vs peers.

"Solved" is the first deterministic evaluation (every 2048 frames for PPO over 4 episodes, every
1000 frames for SAC over 5 episodes) reaching 475 (CartPole) or -200 (Pendulum). Ours runs the
``train`` function of ``examples/ppo_cartpole.py`` / ``examples/sac_pendulum.py`` with their
default configs; Stable-Baselines3 and TorchRL run the same hyper-parameters (read from our
config) under the peers venv (``benchmarks/_peers/time_to_solve_peers.py``; set
``TORCHRL_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``; skipped with a note when
absent). ``sb3_zoo`` is SB3 with the RL Zoo's own CartPole PPO settings (20 epochs, lr 1e-3;
ours: 10 epochs, lr 2e-3), SB3 at its best. Every library uses torch's fused Adam, as our
examples do eagerly (our compiled SAC step runs the same Adam update, torch's functional
``adam``, inside its graph).

Evaluation protocol, the same for all: the evaluation envs (a vector of ``eval_episodes``
gymnasium envs) are made and seeded once (``seed + 10000``); each evaluation resets them (fresh
initial states every time), runs the deterministic policy (most likely action / squashed mean)
until every env has finished one episode or after 500 (CartPole) / 200 (Pendulum) steps, and
averages the returns of those first episodes. It runs after the update on the frames counted so
far (SB3: at the start of the next rollout). ``wall_s`` is the training loop's wall time
including the evaluations, ``train_wall_s`` the same without them, ``cpu_s`` the CPU time of
the process over the loop (steadier than wall time on a loaded machine). Torch uses 1 thread
everywhere (``torch.set_num_threads(1)``). Our SAC rows also say whether the example compiled its
gradient step (``compiled``, its default: loss, backward, Adam and Polyak update in one graph)
and how long its first step took (``first_update_s``: the compilation, already counted in
``wall_s``: 4-7 s wall with inductor's on-disk cache warm on 2 busy cores, ~24 s on the first run
of a machine; once per process, later seeds reuse the compiled graph).

Measured on 2026-11-27 (2 shared AMD EPYC cores, load average 4-6, ``--tasks sac_pendulum --libs
ours,sb3 --seeds 3``, three runs, the last recorded in ``docs/benchmarks/time_to_solve.json``):
ours 13.8 / 6.4 / 5.2 s, 18.5 / 6.9 / 4.9 s and 18.1 / 6.5 / 4.8 s at 6000 / 4000 / 3000 frames
(seed 0 pays the compile), SB3 18.2 / 19.7 / 13.1 s, 21.2 / 16.3 / 13.1 s and 13.8 / 18.3 / 12.3 s
at 4000 / 4000 / 3000 frames: our median wall time 0.35x, 0.43x and 0.47x SB3's, per frame 0.38x,
0.40x and 0.40x (CPU time per frame 0.36-0.37x). Over seeds 0-9, ours solves in 3-8k frames
(median 5k), SB3 in 3-6k (median 4k).

Prints one JSON object per run, then one summary object (medians) per library and task, then
our medians over each peer's (``"ratio": true``: wall, CPU, and per frame).
Usage: ``python benchmarks/time_to_solve.py [--seeds 3] [--tasks ppo_cartpole,sac_pendulum]
[--libs ours,sb3,sb3_zoo,torchrl] [--config KEY=VALUE ...]`` (``--config compile=false``: our
SAC example with its gradient step eager, for comparison).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, "benchmarks", "_peers", "time_to_solve_peers.py")
PEERS_PYTHON = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
EXAMPLE = {"ppo_cartpole": "ppo_cartpole", "sac_pendulum": "sac_pendulum"}
# Peer functions per (library, task). ``sb3_zoo`` is SB3 with the RL Zoo's own CartPole PPO
# settings (20 epochs, lr 1e-3) instead of ours.
PEER_FN = {
    ("sb3", "ppo_cartpole"): "sb3_ppo_cartpole",
    ("sb3_zoo", "ppo_cartpole"): "sb3_zoo_ppo_cartpole",
    ("sb3", "sac_pendulum"): "sb3_sac_pendulum",
    ("torchrl", "ppo_cartpole"): "torchrl_ppo_cartpole",
    ("torchrl", "sac_pendulum"): "torchrl_sac_pendulum",
}


def run_ours(task: str, seed: int, overrides: dict | None = None) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    module = __import__(EXAMPLE[task])
    cfg = module.Config(seed=seed, progress=False, out=tempfile.gettempdir())
    for key, value in (overrides or {}).items():
        if hasattr(cfg, key):
            setattr(cfg, key, value)
    if hasattr(cfg, "confirm"):
        # The peers stop at the first passing evaluation; the example's extra check on fresh
        # episodes is turned off so that all run the same protocol.
        cfg.confirm = False
    h = module.train(cfg)
    row = {
        "lib": "ours",
        "task": task,
        "seed": seed,
        "frames": h["solved_at"],
        "wall_s": round(h["wall"], 2),
        "train_wall_s": round(h["wall"] - h.get("eval_wall", 0.0), 2),
        "cpu_s": round(h["cpu"], 2),
        "solved": h["solved_at"] is not None,
    }
    if "compiled" in h:
        # The first gradient step includes compiling it (already counted in wall_s).
        row["compiled"] = h["compiled"]
        row["first_update_s"] = round(h.get("first_update_wall", 0.0), 2)
    return row


def our_config(task: str) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    return dataclasses.asdict(__import__(EXAMPLE[task]).Config())


def run_peer(lib: str, task: str, seed: int) -> dict:
    fn = PEER_FN.get((lib, task))
    if fn is None:
        return {"lib": lib, "task": task, "seed": seed, "note": "not implemented"}
    if not os.path.exists(PEERS_PYTHON):
        return {"lib": lib, "task": task, "seed": seed, "note": f"no {PEERS_PYTHON}"}
    cfg = json.dumps({k: v for k, v in our_config(task).items() if not isinstance(v, str)})
    # Run from a temporary directory: our own ``torchrl`` must not shadow the peer's.
    proc = subprocess.run(
        [PEERS_PYTHON, PEERS, fn, str(seed), cfg],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        timeout=1800,
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
        return {"lib": lib, "task": task, "seed": seed, "error": tail[0]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ratios(ours: list[dict], peer: list[dict]) -> dict:
    """Our medians over a peer's on solved runs: wall time, CPU time and wall time per frame.

    Runs solve at different frame counts (seeds and libraries draw different random numbers),
    so the wall time per frame compares the cost of equal frames.
    """
    ours = [r for r in ours if r.get("solved")]
    peer = [r for r in peer if r.get("solved")]
    if not ours or not peer:
        return {}

    def med(rows: list[dict], fn) -> float:
        return statistics.median(fn(r) for r in rows)

    out = {}
    for name, fn in (
        ("wall", lambda r: r["wall_s"]),
        ("cpu", lambda r: r["cpu_s"]),
        ("wall_per_frame", lambda r: r["wall_s"] / r["frames"]),
        ("cpu_per_frame", lambda r: r["cpu_s"] / r["frames"]),
    ):
        out[f"ours_over_peer_{name}"] = round(med(ours, fn) / med(peer, fn), 3)
    return out


def parse_overrides(items: list[str]) -> dict:
    """``KEY=VALUE`` pairs for our examples' configs (``compile=false``); values stay strings
    until :func:`_typed` casts them to the type of the field they replace."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--config takes KEY=VALUE, got {item!r}")
        out[key.replace("-", "_")] = value
    return out


def _typed(task: str, overrides: dict) -> dict:
    """Casts ``overrides`` to the types of ``task``'s config fields; drops keys it lacks."""
    defaults = our_config(task)
    out = {}
    for key, value in overrides.items():
        if key not in defaults:
            continue
        kind = type(defaults[key])
        out[key] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tasks", default="ppo_cartpole,sac_pendulum")
    parser.add_argument("--libs", default="ours,sb3,sb3_zoo,torchrl")
    parser.add_argument(
        "--config",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="override our example's config, e.g. compile=false (ours only)",
    )
    args = parser.parse_args()
    overrides = parse_overrides(args.config)
    torch.set_num_threads(1)
    results: dict[tuple[str, str], list[dict]] = {}
    for task in args.tasks.split(","):
        for seed in range(args.seeds):
            # Interleave the libraries seed by seed, so load changes hit them alike.
            for lib in args.libs.split(","):
                row = (
                    run_ours(task, seed, _typed(task, overrides))
                    if lib == "ours"
                    else run_peer(lib, task, seed)
                )
                print(json.dumps(row), flush=True)
                results.setdefault((lib, task), []).append(row)
    for (lib, task), rows in results.items():
        done = [r for r in rows if "frames" in r]
        if not done:
            continue
        solved = [r for r in done if r["solved"]]
        summary = {
            "summary": True,
            "lib": lib,
            "task": task,
            "seeds": len(done),
            "solved": len(solved),
            "median_frames": statistics.median(r["frames"] for r in solved) if solved else None,
            "median_wall_s": statistics.median(r["wall_s"] for r in solved) if solved else None,
            "median_train_wall_s": (
                statistics.median(r.get("train_wall_s", r["wall_s"]) for r in solved)
                if solved
                else None
            ),
            "median_cpu_s": (
                statistics.median(r["cpu_s"] for r in solved if "cpu_s" in r) if solved else None
            ),
            "load_avg_1min": round(os.getloadavg()[0], 2),
        }
        print(json.dumps(summary), flush=True)
    for (lib, task), rows in results.items():
        if lib == "ours":
            continue
        ratio = _ratios(results.get(("ours", task), []), rows)
        if ratio:
            print(json.dumps({"ratio": True, "task": task, "peer": lib, **ratio}), flush=True)


if __name__ == "__main__":
    main()
