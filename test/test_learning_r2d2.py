"""Learning test of the R2D2-style example: recurrent DQN solves CartPole without velocities.

Target: a deterministic evaluation return of at least 475 (500-step episodes), confirmed on
fresh episodes, within the example's frame budget, for seeds 0-2. Slow (minutes per seed).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

r2d2 = pytest.importorskip("r2d2_stateless_cartpole")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_r2d2_solves_stateless_cartpole(seed, tmp_path):
    torch.set_num_threads(1)
    cfg = r2d2.Config(seed=seed, progress=False, out=str(tmp_path))
    history = r2d2.train(cfg)
    evals = history["eval"]
    assert history["solved_at"] is not None, (
        f"seed {seed}: no evaluation reached {cfg.target_return} in {history['frames']} "
        f"frames; evaluations {evals}"
    )
    assert history["solved_at"] <= cfg.frames
