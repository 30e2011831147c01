"""Memory for policies: stacked frames as views, an LSTM, a gated transformer (GTrXL)
====================================================================================

StatelessCartPole is CartPole-v1 with the velocities hidden: the observation is ``[x, theta]``.
One observation does not say which way the pole falls, so a policy needs memory. This tutorial
shows the three ways to give it some, each on the same env:

1. stacked frames, declared as a :class:`~torchrl.data.trajectory_views.TrajectoryView` (the
   last ``k`` observations, zero before the episode's start; stored once, built on demand);
2. an :class:`~torchrl.modules.LSTMModule`, whose state the env carries from step to step;
3. a :class:`~torchrl.modules.GTrXLModule`, which attends to its last ``n`` embeddings.

It ends by training PPO with an LSTM (``examples/ppo_stateless_cartpole.py``) until the
deterministic return reaches 475, and the memoryless MLP for contrast.

Run it: ``python tutorials/memory_and_views.py`` (``--smoke`` for a quicker run).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

import torchrl
from torchrl.data.trajectory_views import TrajectoryView, build_views, get_views
from torchrl.envs import TransformedEnv
from torchrl.envs.custom.stateless_cartpole import StatelessCartPole
from torchrl.modules import LSTMModule, set_recurrent_mode
from torchrl.modules.gtrxl import GTrXLModule
from torchrl.modules.recurrent_utils import get_env_transforms_from_module

parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
parser.add_argument("--smoke", action="store_true", help="small budgets, for the test suite")
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)  # tiny networks: extra threads only add overhead


def greedy(policy: TensorDictModule) -> TensorDictSequential:
    """Appends the most likely action (one-hot) to a policy writing ``"logits"``."""

    def pick(logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(logits.argmax(-1), 2).bool()

    return TensorDictSequential(policy, TensorDictModule(pick, ["logits"], ["action"]))


# %%
# 0. The task: 4 carts side by side; the env keeps the velocities to itself.
#
env = StatelessCartPole(batch_size=[4], seed=0, max_episode_steps=20)
print("observation:", env.reset()["observation"].shape, "(x and theta of 4 carts)")

# %%
# 1. Stacked frames as a view.
#
# A module declares what it needs beside its ``in_keys``: here the observations at t-3..t,
# stacked on a new dim. Nothing is stored twice: a views-aware collector builds the stack from
# a small ring buffer while it steps the env, and a replay buffer or :func:`build_views`
# rebuilds it from the single-step data. Before an episode's start the stack holds zeros.
frames = TrajectoryView("observation", "-3:0")
mlp = TensorDictModule(
    nn.Sequential(nn.Flatten(-2), nn.Linear(4 * 2, 2)), ["observation_view"], ["logits"]
)
mlp.views = [frames]
print("views declared by the policy:", get_views(mlp))

rollout = env.rollout(30, break_when_any_done=False)  # random actions; episodes of <= 20 steps
build_views(rollout, get_views(mlp))
print("stacked observations:", rollout["observation_view"].shape)  # [4 envs, 30 steps, 4, 2]
print(
    "first step of an episode sees zeros before it:",
    rollout["observation_view"][0, 0, :3].abs().sum().item(),
)
logits = mlp(rollout)["logits"]  # the policy runs on the rebuilt inputs, as in a loss

# %%
# 2. An LSTM: the state lives in the TensorDict.
#
# ``get_env_transforms_from_module`` gives the env what the policy needs: an ``InitTracker``
# (``"is_init"`` marks episode starts, where the state is reset) and a primer that writes zero
# states at reset. The module writes the next state under ``"next"``; the env carries it to the
# next step. In recurrent mode the same module runs on whole ``[B, T]`` sequences, starting
# each from the stored state (or zeros at an episode start): what a loss needs.
lstm = LSTMModule(2, 16, in_key="observation", out_key="features")
lstm_policy = TensorDictSequential(
    lstm, TensorDictModule(nn.Linear(16, 2), ["features"], ["logits"])
)
lstm_env = TransformedEnv(
    StatelessCartPole(batch_size=[4], seed=0, max_episode_steps=20),
    get_env_transforms_from_module(lstm_policy),
)
with torch.no_grad():
    data = lstm_env.rollout(30, greedy(lstm_policy), break_when_any_done=False)
    step_features = data["features"].clone()
    with set_recurrent_mode(True):
        sequence_features = lstm_policy(data.exclude("features"))["features"]
print(
    "LSTM, step mode == sequence mode:", torch.allclose(step_features, sequence_features, atol=1e-5)
)

# %%
# 3. GTrXL: attention over the last n steps.
#
# Each step's embeddings (one per layer) join the memory of the following steps. With
# ``memory_mode="primer"`` the env carries that memory like an LSTM state; with the default
# ``"views"`` the memory is a view of the stored per-step embeddings (declared in
# ``module.views``), so each embedding is stored once.
gtrxl = GTrXLModule(
    2, 16, memory_length=8, in_key="observation", out_key="features", memory_mode="primer"
)
gtrxl_policy = TensorDictSequential(
    gtrxl, TensorDictModule(nn.Linear(16, 2), ["features"], ["logits"])
)
gtrxl_env = TransformedEnv(
    StatelessCartPole(batch_size=[4], seed=0, max_episode_steps=20),
    get_env_transforms_from_module(gtrxl_policy),
)
with torch.no_grad():
    data = gtrxl_env.rollout(30, greedy(gtrxl_policy), break_when_any_done=False)
    step_features = data["features"].clone()
    with set_recurrent_mode(True):
        window_features = gtrxl_policy(data.exclude("features"))["features"]
print("GTrXL memory:", data["gtrxl_memory"].shape, "(envs, steps, n, layers, hidden)")
print("GTrXL, step mode == window mode:", torch.allclose(step_features, window_features, atol=1e-5))
print(
    "GTrXL views-mode declaration:",
    GTrXLModule(2, 16, memory_length=8, in_key="o", out_key="f").views,
)

# %%
# 4. Training: PPO with an LSTM solves it; without memory it does not.
#
# ``train`` is the example's loop: collector, GAE on stored states, ClipPPOLoss on chunks of the
# batch in recurrent mode. It stops at the first deterministic evaluation >= 475.
# the examples folder of the source tree (sphinx-gallery runs this file without ``__file__``)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(torchrl.__file__)), "examples"))
from ppo_stateless_cartpole import Config, train  # noqa: E402

budget = (
    dict(frames=512, eval_every=256, eval_episodes=2, final_eval_episodes=2) if args.smoke else {}
)
for memory in ["lstm"] if args.smoke else ["lstm", "mlp"]:
    history = train(Config(memory=memory, log_json=False, **budget))
    print(
        f"{memory}: evaluations {[round(r) for _, r in history['eval']]}; "
        f"475 reached at {history['solved_at']} frames ({history['frames']} frames in "
        f"{history['wall']:.0f} s)"
    )
