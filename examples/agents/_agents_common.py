"""Helpers shared by the agent-style examples: import path, evaluation agent, episode returns.

Nothing here is part of the library.
"""

from __future__ import annotations

import os
import sys

# The examples of this folder reuse examples/_common.py and the networks of examples/*.py.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from tensordict import TensorDictBase  # noqa: E402
from tensordict.nn import TensorDictModuleBase  # noqa: E402

from torchrl.agents import Agents, EnvAgent, ModuleAgent, TemporalAgent, Workspace  # noqa: E402
from torchrl.envs import EnvBase  # noqa: E402
from torchrl.envs.utils import ExplorationType  # noqa: E402


def evaluation_agent(env: EnvBase, actor: TensorDictModuleBase) -> TemporalAgent:
    """One deterministic episode per sub-env of ``env``: run it with ``stop_variable="done"``."""
    policy = ModuleAgent(actor, out_keys=["action"], exploration_type=ExplorationType.DETERMINISTIC)
    return TemporalAgent(Agents(EnvAgent(env, auto_reset=False), policy), stop_variable="done")


def mean_return(workspace: Workspace) -> float:
    """Mean episode return of an evaluation workspace (finished sub-envs earn zero reward)."""
    return float(workspace.get_full(("next", "reward"))[:, :-1].sum(1).mean())


@torch.no_grad()
def evaluate_agent(agent: TemporalAgent, max_steps: int) -> float:
    """Runs ``agent`` (from :func:`evaluation_agent`) once: up to ``max_steps`` transitions."""
    workspace = Workspace()
    agent(workspace, t=0, n_steps=max_steps + 1)
    return mean_return(workspace)


def final_return(env: EnvBase, actor: TensorDictModuleBase, seed: int) -> float:
    """The held-out evaluation after training: one deterministic episode per sub-env of ``env``
    (seeded ``seed + 20_000``, away from training and evaluation seeds); closes ``env``."""
    env.set_seed(seed + 20_000)
    try:
        return evaluate_agent(evaluation_agent(env, actor), max_steps=500)
    finally:
        env.close()


def episode_returns(batch: TensorDictBase, frames: int) -> list[tuple[int, float]]:
    """``(frames, return)`` of the episodes that end in ``batch`` (needs ``RewardSum``)."""
    nxt = batch["next"]
    if "episode_reward" not in nxt.keys():
        return []
    done = nxt["done"].squeeze(-1)
    return [(frames, float(r)) for r in nxt["episode_reward"].squeeze(-1)[done]]
