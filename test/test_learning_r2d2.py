"""Learning test of the R2D2-style example: recurrent DQN solves CartPole without velocities.

Stated target: a deterministic evaluation return of at least 300 (of 500), confirmed on fresh
episodes, within the example's budget of 80k frames, for seeds 0-2. Measured with the defaults
(lr 5e-4, gamma 0.97): seeds 0, 1 and 2 reach it at 45,056, 40,960 and 65,536 frames. 475 was
not reached on any seed (see the example's docstring). Slow (2-5 minutes per seed on a loaded
2-core machine).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

r2d2 = pytest.importorskip("r2d2_stateless_cartpole")

TARGET = 300.0


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_r2d2_solves_stateless_cartpole(seed, tmp_path):
    torch.set_num_threads(1)
    cfg = r2d2.Config(seed=seed, target_return=TARGET, progress=False, out=str(tmp_path))
    history = r2d2.train(cfg)
    evals = history["eval"]
    assert history["solved_at"] is not None, (
        f"seed {seed}: no evaluation reached {cfg.target_return} in {history['frames']} "
        f"frames; evaluations {evals}"
    )
    assert history["solved_at"] <= cfg.frames
