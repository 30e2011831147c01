"""Learning tests of issue 18's examples (slow; `make test-slow`).

CrossQ and TQC must reach a mean deterministic return >= -200 on Pendulum-v1, judged on the
final evaluation (10 episodes from starting states never used to decide when to stop), as for
SAC in ``test_learning.py``. Each test prints the frames and wall time it needed (``pytest -s``
shows them).
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
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", ["crossq_pendulum", "tqc_pendulum"])
def test_crossq_tqc_pendulum_learn(name: str, seed: int, tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(EXAMPLES)
    module = importlib.import_module(name)
    torch.set_num_threads(1)
    cfg = module.Config(seed=seed, out=str(tmp_path), progress=False)
    history = module.train(cfg)
    print(
        f"\n{name} seed {seed}: solved at {history['solved_at']} frames, "
        f"{history['wall']:.1f} s, final deterministic return {history['final_return']:.1f}",
        file=sys.stderr,
    )
    assert history["final_return"] >= cfg.target_return, (
        f"{name} (seed {seed}): final evaluation {history['final_return']:.1f} over "
        f"{cfg.final_eval_episodes} episodes is below {cfg.target_return} after "
        f"{history['frames']} frames; evaluations: {history['eval']}"
    )
