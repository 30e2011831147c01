"""Write your own environment: a batched, pure-torch env in four methods
=====================================================================

An env subclasses ``EnvBase``, declares its specs, and writes ``_reset``, ``_step`` and
``_set_seed``; ``reset``, ``step``, ``rollout``, ``step_and_maybe_reset``, partial resets and
transforms then come for free. This tutorial writes ``Reach``: a point on a line starts at a
random position and must reach 0; the action is a velocity in [-1, 1]; the reward is minus the
distance; an episode ends on arrival (terminated) or after ``max_steps`` (truncated).

Run it: ``python tutorials/write_your_own_env.py`` (``--smoke`` for a quicker run).
"""

from __future__ import annotations

import argparse

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs import EnvBase, RewardSum, TransformedEnv, check_env_specs

parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
parser.add_argument("--smoke", action="store_true", help="small budgets, for the test suite")
args = parser.parse_args()


class Reach(EnvBase):
    """A point on a line moves towards 0; ``batch_size`` points run side by side."""

    def __init__(self, batch_size: tuple[int, ...] = (), max_steps: int = 50) -> None:
        super().__init__(batch_size=batch_size)
        self.max_steps = max_steps
        shape = (*self.batch_size, 1)
        # Specs are declared once, with the batch shape in front. Every entry the env writes
        # is declared: the position the policy sees, and a step counter for the time limit
        # (the env reads it back at the next step; policies simply ignore it).
        self.observation_spec = Composite(
            observation=Bounded(-10.0, 10.0, shape=shape),
            steps=Unbounded(shape=shape, dtype=torch.int64),
            shape=self.batch_size,
        )
        self.action_spec = Bounded(-1.0, 1.0, shape=shape)
        self.reward_spec = Unbounded(shape=shape)
        self._set_seed(None)

    def _set_seed(self, seed: int | None) -> None:
        # A private generator: seeding the env leaves torch's global random state alone.
        self.rng = torch.Generator()
        if seed is None:
            self.rng.seed()
        else:
            self.rng.manual_seed(seed)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs) -> TensorDictBase:
        # Return fresh values for *every* sub-env: on a partial reset (a "_reset" mask in the
        # input) EnvBase keeps the old values of the sub-envs that were not reset.
        position = torch.rand((*self.batch_size, 1), generator=self.rng) * 10 - 5
        return TensorDict(
            observation=position,
            steps=torch.zeros_like(position, dtype=torch.int64),
            batch_size=self.batch_size,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        # Read the action and the state, write the next observation, reward and done flags.
        position = (tensordict["observation"] + tensordict["action"].clamp(-1, 1)).clamp(-10, 10)
        steps = tensordict["steps"] + 1
        terminated = position.abs() < 0.5
        truncated = steps >= self.max_steps
        return TensorDict(
            observation=position,
            steps=steps,
            reward=-position.abs(),
            terminated=terminated,
            truncated=truncated,
            done=terminated | truncated,
            batch_size=self.batch_size,
        )


env = Reach(batch_size=(4,))

# %%
# Check the env against its specs: a short rollout, every entry compared with its spec.
#
check_env_specs(env)
env.set_seed(0)


# %%
# A hand-written policy: move towards 0 at full speed. Any callable on TensorDicts works.
#
def go_home(td: TensorDictBase) -> TensorDictBase:
    td["action"] = -td["observation"].sign()
    return td


rollout = env.rollout(max_steps=20, policy=go_home, break_when_any_done=False)
print("rollout:", rollout.batch_size, "(4 envs x 20 steps)")
print("positions of env 0:", rollout["next", "observation"][0].squeeze(-1)[:8].tolist())

# %%
# Transforms and partial resets work unchanged: step_and_maybe_reset resets only the
#
# sub-envs that finished, and RewardSum reports each episode's return.
env = TransformedEnv(env, RewardSum())
td = env.reset()
returns = []
for _ in range(10 if args.smoke else 100):
    td, td_next = env.step_and_maybe_reset(go_home(td))
    done = td["next", "done"].squeeze(-1)
    returns += td["next", "episode_reward"][done].squeeze(-1).tolist()
    td = td_next
print(f"{len(returns)} episodes finished, mean return {sum(returns) / max(len(returns), 1):.2f}")
