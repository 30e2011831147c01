"""Learning test of diffusion behavioural cloning (slow; `make test-slow`).

``examples/diffusion_bc_offline.py`` trains a diffusion policy on a scripted Pendulum-v1
expert's transitions, read back from memory-mapped files. Its sampled actions must come within
50 of the expert's mean return over 50 fresh episodes (expert about -140, a random policy about
-1200), i.e. clearly beat random play and approach the expert.
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

pytest.importorskip("gymnasium")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_diffusion_bc_approaches_the_expert(seed: int, tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(EXAMPLES)
    module = importlib.import_module("diffusion_bc_offline")
    torch.set_num_threads(1)
    cfg = module.Config(seed=seed, out=str(tmp_path), progress=False, compare_mse=False)
    history = module.train(cfg)
    print(
        f"\ndiffusion_bc_offline seed {seed}: final {history['final_return']:.1f} vs expert "
        f"{history['expert_return']:.1f}, random {history['random_return']:.1f}, "
        f"{history['wall']:.1f} s of training",
        file=sys.stderr,
    )
    assert history["final_return"] > 0.25 * history["random_return"]
    assert history["final_return"] >= history["expert_return"] - 50.0
