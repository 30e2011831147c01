"""Frames and wall time to solve: PPO on CartPole-v1 and SAC on Pendulum-v1, ours vs peers.

"Solved" is the first deterministic evaluation (every 2048 frames for PPO over 4 episodes, every
1000 frames for SAC over 5 episodes) reaching 475 (CartPole) or -200 (Pendulum). Ours runs the
``train`` function of ``examples/ppo_cartpole.py`` / ``examples/sac_pendulum.py`` with their
default configs; Stable-Baselines3 and TorchRL run the same hyper-parameters and the same
evaluation protocol under the peers venv (``benchmarks/_peers/time_to_solve_peers.py``; set
``TORCHRL_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``; skipped with a note when
absent). ``wall_s`` is the training loop's wall time including the evaluations, and
``train_wall_s`` the same without them. Torch uses 1 thread everywhere
(``torch.set_num_threads(1)``).

Prints one JSON object per run, then one summary object (medians) per library and task.
Usage: ``python benchmarks/time_to_solve.py [--seeds 3] [--tasks ppo_cartpole,sac_pendulum]
[--libs ours,sb3,torchrl]``.
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
# Peer functions per (library, task); TorchRL's SAC is not written yet.
PEER_FN = {
    ("sb3", "ppo_cartpole"): "sb3_ppo_cartpole",
    ("sb3", "sac_pendulum"): "sb3_sac_pendulum",
    ("torchrl", "ppo_cartpole"): "torchrl_ppo_cartpole",
}


def run_ours(task: str, seed: int) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    module = __import__(EXAMPLE[task])
    cfg = module.Config(seed=seed, progress=False, out=tempfile.gettempdir())
    if hasattr(cfg, "confirm"):
        # The peers stop at the first passing evaluation; the example's extra check on fresh
        # episodes is turned off so that all run the same protocol.
        cfg.confirm = False
    h = module.train(cfg)
    return {
        "lib": "ours",
        "task": task,
        "seed": seed,
        "frames": h["solved_at"],
        "wall_s": round(h["wall"], 2),
        "train_wall_s": round(h["wall"] - h.get("eval_wall", 0.0), 2),
        "solved": h["solved_at"] is not None,
    }


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tasks", default="ppo_cartpole,sac_pendulum")
    parser.add_argument("--libs", default="ours,sb3,torchrl")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[tuple[str, str], list[dict]] = {}
    for task in args.tasks.split(","):
        for seed in range(args.seeds):
            # Interleave the libraries seed by seed, so load changes hit them alike.
            for lib in args.libs.split(","):
                row = run_ours(task, seed) if lib == "ours" else run_peer(lib, task, seed)
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
        }
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
