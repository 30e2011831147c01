"""What ``benchmarks/collect.py`` and its peer side share: the policy network and the timing.

Imports torch only (no torchrl): the peers' python, whose ``torchrl`` is TorchRL, imports it
from this folder as well as our benchmark.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import torch
from torch import nn

# Observation and action sizes of the benchmark envs.
DIMS = {
    "CartPole-v1": (4, 2),
    "Pendulum-v1": (3, 1),
    "HalfCheetah-v5": (17, 6),
    "SleepyPendulum": (3, 1),
}
# Continuous envs: actions are ``scale * tanh`` of the outputs; the others take the argmax.
SCALE = {"Pendulum-v1": 2.0, "HalfCheetah-v5": 1.0, "SleepyPendulum": 2.0}


class ToFloat(nn.Module):
    """Casts observations to float32 (MuJoCo envs return float64; a no-op otherwise)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float()


class Head(nn.Module):
    """Turns the MLP's outputs into actions: argmax (discrete) or ``scale * tanh``."""

    def __init__(self, scale: float | None) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.scale is None:
            return x.argmax(-1)
        return self.scale * torch.tanh(x)


def make_net(env_name: str) -> nn.Sequential:
    """The 2x64 tanh MLP every case runs (seeded: the same weights everywhere)."""
    n_in, n_out = DIMS[env_name]
    torch.manual_seed(0)
    return nn.Sequential(
        ToFloat(),
        nn.Linear(n_in, 64),
        nn.Tanh(),
        nn.Linear(64, 64),
        nn.Tanh(),
        nn.Linear(64, n_out),
        Head(SCALE.get(env_name)),
    )


def children_cpu() -> float:
    """CPU seconds (user + system) used so far by the live child processes (from /proc)."""
    me, tick, total = os.getpid(), os.sysconf("SC_CLK_TCK"), 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def rate(run_batch: Callable[[], int], seconds: float, repeats: int) -> dict:
    """Frames per second of ``run_batch`` over ``seconds``: the best of ``repeats`` windows.

    Every case (ours, the reference loops, the peers) is timed alike; the best window is the one
    least disturbed by other work on a shared machine.
    """
    run_batch()  # warm-up (allocation, first resets)
    best: dict | None = None
    for _ in range(max(1, repeats)):
        frames, start = 0, time.perf_counter()
        cpu, children = time.process_time(), children_cpu()
        while time.perf_counter() - start < seconds:
            frames += run_batch()
        wall = time.perf_counter() - start
        own = time.process_time() - cpu
        # Wall clock is the figure; CPU time (this process and its workers) shows what a quiet
        # machine would give when other jobs share the cores.
        window = {
            "frames_per_s": round(frames / wall),
            "frames_per_cpu_s": round(frames / max(own + children_cpu() - children, 1e-9)),
            "frames": frames,
        }
        if best is None or window["frames_per_s"] > best["frames_per_s"]:
            best = window
    assert best is not None
    return {**best, "windows": max(1, repeats)}
