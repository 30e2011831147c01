"""Learning tests of GAIL and RND (slow; `make test-slow`).

GAIL (``examples/gail_cartpole.py``): a PPO learner rewarded only by the discriminator reaches
at least 80% of its PPO expert's deterministic return on CartPole-v1, and the control (reward 1
per step under the same rule for episode ends) does not. RND (``examples/rnd_sparse.py``): on
the sparse-reward chain, PPO with the RND bonus reaches the goal, and PPO alone, with the same
budget, never does. ``pytest -s`` shows frames and wall time.
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def _example(name: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(EXAMPLES)
    torch.set_num_threads(1)
    return importlib.import_module(name)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gail_reaches_80_percent_of_the_expert(seed: int, tmp_path, monkeypatch) -> None:
    pytest.importorskip("gymnasium")
    module = _example("gail_cartpole", monkeypatch)
    cfg = module.Config(seed=seed, out=str(tmp_path), progress=False)
    history = module.train(cfg)
    print(
        f"\ngail_cartpole seed {seed}: expert {history['expert_return']:.1f} "
        f"({history['expert_frames']} frames); GAIL final {history['final_return']:.1f}, "
        f"target reached at {history['solved_at']} frames, {history['wall']:.1f} s",
        file=sys.stderr,
    )
    target = cfg.target_fraction * history["expert_return"]
    assert history["solved_at"] is not None, f"evaluations: {history['eval']}"
    assert history["final_return"] >= target, (
        f"final {history['final_return']:.1f} < {target:.1f}; evaluations: {history['eval']}"
    )


@pytest.mark.slow
def test_gail_control_reward_does_not_imitate(tmp_path, monkeypatch) -> None:
    pytest.importorskip("gymnasium")
    module = _example("gail_cartpole", monkeypatch)
    cfg = module.Config(seed=0, out=str(tmp_path), progress=False, reward_kind="constant")
    history = module.train(cfg)
    assert history["solved_at"] is None
    assert history["final_return"] < 0.8 * history["expert_return"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rnd_reaches_the_goal_where_ppo_does_not(seed: int, tmp_path, monkeypatch) -> None:
    module = _example("rnd_sparse", monkeypatch)
    with_rnd = module.train(module.Config(seed=seed, rnd=True, out=str(tmp_path), progress=False))
    without = module.train(module.Config(seed=seed, rnd=False, out=str(tmp_path), progress=False))
    print(
        f"\nrnd_sparse seed {seed}: PPO + RND reached the goal at {with_rnd['solved_at']} "
        f"frames ({with_rnd['wall']:.1f} s); PPO alone: {without['final_return']:.1f} after "
        f"{without['frames']} frames ({without['wall']:.1f} s)",
        file=sys.stderr,
    )
    assert with_rnd["solved_at"] is not None, f"evaluations: {with_rnd['eval']}"
    assert with_rnd["final_return"] == 1.0
    assert without["solved_at"] is None
    assert without["first_goal_at"] is None  # not one training episode found the goal
