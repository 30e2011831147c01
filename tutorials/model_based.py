"""Model-based RL: learn a Pendulum model, imagine with it, plan through it with CEM
=================================================================================

A learned model of the dynamics can stand in for the env: put it behind the env contract and
``rollout``, collectors and planners work on it unchanged. This tutorial, on Pendulum-v1:

1. records random play with the real env;
2. fits a small network that predicts the next observation and the reward;
3. wraps it as a :class:`~torchrl.envs.WorldModelEnv` and compares an imagined rollout with the
   real one under the same actions;
4. imagines short rollouts branching from stored real states with
   :class:`~torchrl.envs.ImaginedEnv` (what MBPO trains its policy on);
5. plans every action with a :class:`~torchrl.modules.CEMPlanner` through the model (model
   predictive control) and scores it in the real env, with no policy network at all.

``examples/mpc_pendulum.py`` (an ensemble model and a refit loop) and ``examples/mbpo_pendulum.py``
are the full versions; the model-based guide explains the envs.

Run it: ``python tutorials/model_based.py`` (``--smoke`` for a quicker run).
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDictBase  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torch import nn  # noqa: E402

from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer  # noqa: E402
from torchrl.envs import GymEnv, ImaginedEnv, WorldModelEnv  # noqa: E402
from torchrl.modules import MLP, CEMPlanner  # noqa: E402

parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
parser.add_argument("--smoke", action="store_true", help="small budgets, for the test suite")
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)  # tiny networks: extra threads only add overhead

# %%
# 1. Data from the real env.
#
# 8 Pendulums side by side, one 200-step episode of uniform random torques each. The
# observation is ``[cos(theta), sin(theta), angular velocity]``; the reward penalises the
# angle from upright, the velocity and the torque.
env = GymEnv("Pendulum-v1", num_envs=8)
env.set_seed(0)
with torch.no_grad():
    random_play = env.rollout(200)  # no policy: random actions from the action spec
random_play_return = random_play["next", "reward"].sum(-2).mean().item()
print(f"random play: {random_play.numel()} transitions, mean return {random_play_return:.1f}")

buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(10_000), batch_size=256)
buffer.extend(
    random_play.reshape(-1).select(
        "observation", "action", ("next", "observation"), ("next", "reward")
    )
)

# %%
# 2. The world model.
#
# A plain MLP reads the observation and the action and predicts the *change* of the
# observation and the reward (changes are small and centred: easier to fit than the next state
# itself). The inputs and targets are standardised with the data's statistics. The action is
# clipped to the env's range first, as the real env does, so a planner may propose any torque.
transitions = buffer.storage[: len(buffer)]
inputs = torch.cat([transitions["observation"], transitions["action"]], -1)
targets = torch.cat(
    [
        transitions["next", "observation"] - transitions["observation"],
        transitions["next", "reward"],
    ],
    -1,
)


class Dynamics(nn.Module):
    """(observation, action) -> (next observation, reward), on standardised data."""

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor, hidden: int) -> None:
        super().__init__()
        self.net = MLP(inputs.shape[-1], targets.shape[-1], num_cells=[hidden, hidden])
        self.register_buffer("in_mean", inputs.mean(0))
        self.register_buffer("in_std", inputs.std(0) + 1e-6)
        self.register_buffer("out_mean", targets.mean(0))
        self.register_buffer("out_std", targets.std(0) + 1e-6)

    def normalised(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([observation, action.clamp(-2.0, 2.0)], -1)
        return self.net((x - self.in_mean) / self.in_std)

    def forward(
        self, observation: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.normalised(observation, action) * self.out_std + self.out_mean
        return observation + out[..., :-1], out[..., -1:]


dynamics = Dynamics(inputs, targets, hidden=64 if args.smoke else 128)
optim = torch.optim.Adam(dynamics.parameters(), lr=1e-3)
fit_steps = 100 if args.smoke else 3000
target_mean, target_std = dynamics.out_mean, dynamics.out_std
for step in range(1, fit_steps + 1):
    batch = buffer.sample()
    prediction = dynamics.normalised(batch["observation"], batch["action"])
    target = torch.cat(
        [batch["next", "observation"] - batch["observation"], batch["next", "reward"]], -1
    )
    loss = (prediction - (target - target_mean) / target_std).pow(2).mean()
    optim.zero_grad()
    loss.backward()
    optim.step()
    if step % (fit_steps // 4) == 0:
        print(f"model fit step {step:5d}: standardised MSE {loss.item():.4f}")

# %%
# 3. The model as an env.
#
# A ``TensorDictModule`` maps the model's inputs and outputs to the env's keys: it reads
# ``"observation"`` and ``"action"`` and writes the next ``"observation"`` and the ``"reward"``.
# ``set_specs_from_env`` copies the real env's specs for one sub-env. The state travels in the
# TensorDict, so the model env takes any batch size: a reset with given observations starts
# there.
world_model = TensorDictModule(
    dynamics, in_keys=["observation", "action"], out_keys=["observation", "reward"]
)
model_env = WorldModelEnv(world_model, validate_actions=False)
model_env.set_specs_from_env(GymEnv("Pendulum-v1"))

# A fresh real episode, and the same actions played open loop in the model from its first state.
test_env = GymEnv("Pendulum-v1", num_envs=4)
test_env.set_seed(123)
with torch.no_grad():
    real = test_env.rollout(60)  # random actions, [4, 60]


class Replay:
    """A policy that plays recorded actions ``[B, T, 1]`` one step after the other."""

    def __init__(self, actions: torch.Tensor) -> None:
        self.actions, self.t = actions, 0

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict["action"] = self.actions[:, self.t]
        self.t += 1
        return tensordict


with torch.no_grad():
    imagined = model_env.rollout(
        60, Replay(real["action"]), tensordict=real[:, 0].select("observation")
    )
theta_real = torch.atan2(real["next", "observation"][..., 1], real["next", "observation"][..., 0])
theta_imagined = torch.atan2(
    imagined["next", "observation"][..., 1], imagined["next", "observation"][..., 0]
)
for horizon in (5, 20, 60):
    error = (theta_real[:, :horizon] - theta_imagined[:, :horizon]).abs()
    error = torch.minimum(error, 2 * torch.pi - error)  # angles wrap around
    print(f"open-loop angle error over {horizon:2d} steps: {error.mean():.3f} rad")
print(
    "reward over 60 steps, real vs imagined:",
    [round(v, 1) for v in real["next", "reward"].sum((-2, -1)).tolist()],
    [round(v, 1) for v in imagined["next", "reward"].sum((-2, -1)).tolist()],
)

fig, ax = plt.subplots(figsize=(6, 3.5))
for i in range(2):
    ax.plot(theta_real[i], color=f"C{i}", label=f"real, episode {i}")
    ax.plot(theta_imagined[i], color=f"C{i}", ls="--", label=f"imagined, episode {i}")
ax.set_xlabel("step")
ax.set_ylabel("angle (rad, 0 = upright)")
ax.set_title("The same actions, played in the real env and in the model")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %%
# Errors grow with the horizon: each step starts from the previous prediction. That is why MBPO
# imagines only a few steps, and why a planner replans at every step.

# %%
# 4. Imagined rollouts from replay-buffer states.
#
# :class:`~torchrl.envs.ImaginedEnv` starts every reset from states sampled from a buffer:
# here 512 short rollouts of 3 steps, branching from real states, under a random policy. A
# model-based agent such as MBPO adds them to the data its policy learns from.
imagined_env = ImaginedEnv(world_model, buffer, GymEnv("Pendulum-v1"), batch_size=[512])
with torch.no_grad():
    branches = imagined_env.rollout(3, break_when_any_done=False)
print("imagined branches:", branches.batch_size, "keys:", sorted(str(k) for k in branches.keys()))

# %%
# 5. Planning: model predictive control with the cross-entropy method.
#
# At every real step, :class:`~torchrl.modules.CEMPlanner` samples ``num_candidates`` action
# sequences of ``planning_horizon`` steps, rolls them all out through the model in one batch,
# refits a Gaussian to the ``top_k`` best (by imagined return) and repeats ``optim_steps``
# times; it plays the first action of the final mean and plans again at the next step. The
# planner is a module like any policy, so the real env's ``rollout`` runs it directly, here on 4
# episodes side by side (one batched plan for all of them).
planner = CEMPlanner(
    model_env,
    planning_horizon=15,
    optim_steps=3,
    num_candidates=100,
    top_k=10,
)
eval_env = GymEnv("Pendulum-v1", num_envs=4)
eval_env.set_seed(1_000)
episode_steps = 20 if args.smoke else 200
with torch.no_grad():
    random_episodes = eval_env.rollout(episode_steps)
    planned = eval_env.rollout(episode_steps, planner)
random_return = random_episodes["next", "reward"].sum(-2).mean().item()
mpc_return = planned["next", "reward"].sum(-2).mean().item()
print(f"random actions: mean return {random_return:7.1f} over {episode_steps} steps")
print(f"CEM MPC:        mean return {mpc_return:7.1f} over {episode_steps} steps")

theta_planned = torch.atan2(
    planned["next", "observation"][..., 1], planned["next", "observation"][..., 0]
)
fig, ax = plt.subplots(figsize=(6, 3.5))
for i in range(theta_planned.shape[0]):
    ax.plot(theta_planned[i].abs(), color=f"C{i}")
ax.set_xlabel("step")
ax.set_ylabel("|angle| (rad, 0 = upright)")
ax.set_title("CEM MPC through the learned model, in the real env")
fig.tight_layout()
plt.show()

# %%
# The model saw only random play, yet planning through it swings the pendulum up and holds it:
# the model needs to be right only a few steps ahead, and replanning corrects its errors.
# ``examples/mpc_pendulum.py`` adds the planned episodes to the data and refits an ensemble
# after each one; ``MPPIPlanner`` is the path-integral alternative to CEM, weighting every
# candidate by its advantage instead of keeping the ``top_k``.
