"""Getting started: environments, TensorDicts, policies, rollouts and collectors
=============================================================================

Everything in torchrl passes one kind of object around: a ``tensordict.TensorDict``, a
dictionary of tensors that share leading (batch) dimensions. This tutorial walks through the
pieces that produce and consume it, in the order a training script uses them.

Run it: ``python tutorials/getting_started.py`` (``--smoke`` for a quicker run).
"""

from __future__ import annotations

import argparse

import torch
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.collectors import SyncDataCollector
from torchrl.envs import GymEnv, RewardSum, StepCounter, TransformedEnv, check_env_specs
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor

parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
parser.add_argument("--smoke", action="store_true", help="small budgets, for the test suite")
args = parser.parse_args()
torch.manual_seed(0)

# %%
# 1. An environment behind the TensorDict API
# -------------------------------------------
# ``GymEnv`` wraps a gymnasium env. Its specs say what every entry looks like; ``reset``
# returns a TensorDict holding the first observation and the done flags.
env = GymEnv("CartPole-v1")
env.set_seed(0)
print("observation spec:", env.observation_spec["observation"])
print("action spec:", env.action_spec)
td = env.reset()
print(td)

# %%
# 2. One step
# -----------
# ``step`` reads ``"action"`` and writes the outcome under ``"next"``: the next observation,
# the reward, and ``done``/``terminated``/``truncated``. Nothing is overwritten in place, so
# the TensorDict now holds a whole transition.
td["action"] = env.action_spec.rand()
td = env.step(td)
print("reward:", td["next", "reward"], "done:", td["next", "done"])

# %%
# 3. Rollouts
# -----------
# ``rollout`` repeats reset/step and stacks the steps along a new, last batch dimension (time).
# With no policy the actions are random. By default it stops at the first ``done``
# (``break_when_any_done=False`` resets finished episodes and keeps going).
rollout = env.rollout(max_steps=50)
print("rollout batch size (time last):", rollout.batch_size)

# %%
# 4. Transforms
# -------------
# A transform rewrites what comes out of the env. ``StepCounter`` counts steps and
# ``RewardSum`` keeps the return of the running episode under ``"episode_reward"``.
# ``check_env_specs`` runs a short rollout and compares every entry with its spec.
env = TransformedEnv(GymEnv("CartPole-v1", num_envs=4), StepCounter())
env.append_transform(RewardSum())
check_env_specs(env)
rollout = env.rollout(max_steps=20)
print("4 CartPoles, 20 steps:", rollout.batch_size, "keys:", sorted(rollout["next"].keys()))

# %%
# 5. A policy is a module that reads and writes keys
# --------------------------------------------------
# ``TensorDictModule`` wraps any ``nn.Module``: it reads ``in_keys`` and writes ``out_keys``.
# ``ProbabilisticActor`` turns the logits into a distribution and samples ``"action"``.
n_obs = env.observation_spec["observation"].shape[-1]
n_act = env.action_spec.shape[-1]
actor = ProbabilisticActor(
    TensorDictModule(
        MLP(n_obs, n_act, num_cells=[32], activation_class=nn.Tanh),
        in_keys=["observation"],
        out_keys=["logits"],
    ),
    in_keys=["logits"],
    spec=env.action_spec,
    distribution_class=OneHotCategorical,
    return_log_prob=True,
)
with torch.no_grad():
    rollout = env.rollout(max_steps=20, policy=actor)
print("the actor wrote:", [k for k in ("logits", "action", "action_log_prob") if k in rollout])

# The exploration type says how an action is chosen: RANDOM samples, DETERMINISTIC takes the
# most likely action (what an evaluation wants).
with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
    greedy = env.rollout(max_steps=20, policy=actor)
print("greedy actions of the first env:", greedy["action"][0].argmax(-1).tolist())

# %%
# 6. Collectors
# -------------
# A collector runs the policy in its env and yields fixed-size batches, carrying the env state
# across batch boundaries. Between batches you train, then call ``update_policy_weights_()``.
frames = 256 if args.smoke else 2048
collector = SyncDataCollector(env, actor, frames_per_batch=128, total_frames=frames)
for i, batch in enumerate(collector):
    ended = batch["next", "done"].sum().item()
    print(f"batch {i}: {tuple(batch.batch_size)} (envs x steps), {ended} episodes ended")
collector.shutdown()
print("next: tutorials/ppo_from_components.py trains this actor.")
