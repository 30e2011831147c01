"""examples/distributed/ppo_ray.py solves CartPole (a learning test: slow)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.mark.slow
def test_ppo_ray_solves_cartpole():
    pytest.importorskip("ray")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "examples", "distributed", "ppo_ray.py"),
            "--no-progress",
            "--frames",
            "51200",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "solved at" in out.stdout, out.stdout[-2000:]
