"""Learning tests of the computation-task examples (slow; ``make test-slow``).

- ``examples/agents/ppo_aux_reward.py``: on CartPole-v1, seeds 0-2, 24,576 frames each, PPO
  with the auxiliary reward-prediction task sharing the policy's torso must match PPO alone:
  its mean deterministic evaluation return over the run (the area under the curve, 12
  evaluations of 4 episodes) is at least 0.9 times PPO's.
- ``examples/agents/hierarchical.py``: the manager/worker policy reaches a deterministic
  success rate >= 0.9 on 200 held-out GoalGrid episodes (a random walk: about 0.2), seeds 0-2.

Each test prints its figures (``pytest -s`` shows them).
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

pytest.importorskip("gymnasium")

AGENTS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "agents"
)


@pytest.mark.slow
def test_ppo_aux_reward_matches_ppo(tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(AGENTS)
    module = importlib.import_module("ppo_aux_reward")
    torch.set_num_threads(1)
    cfg = module.Config(compare=True, seeds="0,1,2", out=str(tmp_path), progress=False)
    summary = module.compare(cfg)
    ppo, aux = summary["ppo"], summary["ppo_aux"]
    print(
        f"\nPPO: mean evaluation return {ppo['mean_over_run']:.1f}, solved at "
        f"{ppo['solved_at']}, final {ppo['final_return']}\nPPO + reward prediction: "
        f"{aux['mean_over_run']:.1f}, solved at {aux['solved_at']}, final {aux['final_return']}",
        file=sys.stderr,
    )
    assert aux["mean_over_run"] >= 0.9 * ppo["mean_over_run"], (ppo, aux)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hierarchical_learns(seed: int, tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(AGENTS)
    module = importlib.import_module("hierarchical")
    torch.set_num_threads(1)
    cfg = module.Config(seed=seed, out=str(tmp_path), progress=False)
    history = module.train(cfg)
    print(
        f"\nhierarchical seed {seed}: success {history['final_return']:.2f} (random "
        f"{history['random_return']:.2f}), first evaluation >= {cfg.target_success} at "
        f"{history['solved_at']} frames, {history['frames']} frames in {history['wall']:.1f} s",
        file=sys.stderr,
    )
    assert history["final_return"] >= cfg.target_success, history["eval"]
