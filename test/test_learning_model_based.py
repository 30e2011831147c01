"""Learning tests of the model-based examples (slow; ``pytest -m slow``).

- MBPO (``examples/mbpo_pendulum.py``) reaches a mean deterministic return of -200 on
  Pendulum-v1 (a confirmed evaluation, then a final 10-episode evaluation on fresh starts), and
  does so with fewer real env frames than our SAC (``examples/sac_pendulum.py``, same networks,
  optimiser, batch size, random warm-up, collection batches and evaluation cadence): SAC is run
  for as many frames as MBPO needed and must not have solved the task by then.
- The PETS-style CEM MPC example (``examples/mpc_pendulum.py``) reaches -300, confirmed on fresh
  evaluation episodes and on a final 10-episode evaluation.

Each test prints its frames and wall time (``pytest -s`` shows them).
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
def test_mbpo_solves_pendulum_with_fewer_frames_than_sac(seed: int, tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(EXAMPLES)
    mbpo = importlib.import_module("mbpo_pendulum")
    sac = importlib.import_module("sac_pendulum")
    torch.set_num_threads(1)
    cfg = mbpo.Config(seed=seed, out=str(tmp_path), progress=False)
    history = mbpo.train(cfg)
    print(
        f"\nMBPO seed {seed}: solved at {history['solved_at']} frames, {history['wall']:.1f} s, "
        f"final deterministic return {history['final_return']:.1f}; evaluations "
        f"{history['eval']}",
        file=sys.stderr,
    )
    assert history["solved_at"] is not None, (
        f"MBPO (seed {seed}) did not reach {cfg.target_return} in {history['frames']} frames; "
        f"evaluations: {history['eval']}"
    )
    assert history["final_return"] >= cfg.target_return, (
        f"MBPO (seed {seed}): final evaluation {history['final_return']:.1f} is below "
        f"{cfg.target_return}"
    )
    # SAC with the same settings, given exactly the frames MBPO needed.
    sac_cfg = sac.Config(
        seed=seed,
        frames=history["solved_at"],
        frames_per_batch=cfg.frames_per_batch,
        init_random_frames=cfg.init_random_frames,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        gamma=cfg.gamma,
        tau=cfg.tau,
        hidden=cfg.hidden,
        eval_every=cfg.eval_every,
        eval_episodes=cfg.eval_episodes,
        confirm=cfg.confirm,
        target_return=cfg.target_return,
        out=str(tmp_path),
        progress=False,
    )
    sac_history = sac.train(sac_cfg)
    print(
        f"SAC seed {seed} with {sac_cfg.frames} frames: solved at {sac_history['solved_at']}, "
        f"{sac_history['wall']:.1f} s; evaluations {sac_history['eval']}",
        file=sys.stderr,
    )
    assert sac_history["solved_at"] is None, (
        f"SAC (seed {seed}) reached {cfg.target_return} at {sac_history['solved_at']} frames, "
        f"no later than MBPO ({history['solved_at']})"
    )


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mpc_reaches_minus_300(seed: int, tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(EXAMPLES)
    mpc = importlib.import_module("mpc_pendulum")
    torch.set_num_threads(1)
    cfg = mpc.Config(seed=seed, out=str(tmp_path), progress=False)
    history = mpc.train(cfg)
    print(
        f"\nCEM MPC seed {seed}: solved at {history['solved_at']} frames, "
        f"{history['wall']:.1f} s, final deterministic return {history['final_return']:.1f}; "
        f"training episodes {history['train']}, evaluations {history['eval']}",
        file=sys.stderr,
    )
    assert history["solved_at"] is not None, (
        f"MPC (seed {seed}) did not reach {cfg.target_return} in {history['frames']} frames; "
        f"training episodes: {history['train']}, evaluations: {history['eval']}"
    )
    assert history["final_return"] >= cfg.target_return, (
        f"MPC (seed {seed}): final evaluation {history['final_return']:.1f} is below "
        f"{cfg.target_return}"
    )
