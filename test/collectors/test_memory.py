"""Resident memory stays flat while a multi-process collector runs (slow: 1M frames)."""

from __future__ import annotations

import os

import pytest

from torchrl.collectors import MultiaSyncDataCollector
from torchrl.envs import GymEnv


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cartpole() -> GymEnv:
    return GymEnv("CartPole-v1", categorical_action_encoding=True)


@pytest.mark.slow
def test_multiasync_memory_is_flat_over_1m_cartpole_frames():
    total, warmup = 1_000_000, 50_000
    collector = MultiaSyncDataCollector([_cartpole] * 2, frames_per_batch=1000, total_frames=total)
    pids = [os.getpid()] + [p.pid for p in collector._procs]
    seen, base = 0, None
    try:
        for batch in collector:
            seen += batch.numel()
            if base is None and seen >= warmup:
                base = sum(_rss(p) for p in pids)
        growth = sum(_rss(p) for p in pids) - base
    finally:
        collector.shutdown()
    assert seen == total
    assert growth < 100 * 2**20, f"resident memory grew by {growth / 2**20:.1f} MB"
