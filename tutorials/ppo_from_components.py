"""PPO from the components: env, actor, critic, collector, GAE, loss, buffer, optimizer
====================================================================================

Each piece is a separate, replaceable part; this tutorial assembles them into a PPO agent
that solves CartPole-v1 in a few seconds (the same recipe as ``examples/ppo_cartpole.py``).

Run it: ``python tutorials/ppo_from_components.py`` (``--smoke`` for a quicker run).
"""

from __future__ import annotations

import argparse

import torch
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, SamplerWithoutReplacement, TensorDictReplayBuffer
from torchrl.envs import GymEnv, RewardSum, TransformedEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
parser.add_argument("--smoke", action="store_true", help="small budgets, for the test suite")
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)  # tiny networks: extra threads only add overhead

# %%
# 1. Environments: 8 CartPoles stepped as one batched env, with episode returns.
#
env = TransformedEnv(GymEnv("CartPole-v1", num_envs=8), RewardSum())
env.set_seed(0)
n_obs = env.observation_spec["observation"].shape[-1]
n_act = env.action_spec.shape[-1]

# %%
# 2. The actor: observation -> logits -> a categorical distribution -> "action".
#
# ``return_log_prob`` stores the log-probability of each sampled action: PPO's importance
# ratio needs the probabilities of the policy that collected the data.
actor = ProbabilisticActor(
    TensorDictModule(
        MLP(n_obs, n_act, num_cells=[64, 64], activation_class=nn.Tanh),
        in_keys=["observation"],
        out_keys=["logits"],
    ),
    in_keys=["logits"],
    spec=env.action_spec,
    distribution_class=OneHotCategorical,
    return_log_prob=True,
)

# %%
# 3. The critic: observation -> "state_value".
#
critic = ValueOperator(
    MLP(n_obs, 1, num_cells=[64, 64], activation_class=nn.Tanh), in_keys=["observation"]
)

# %%
# 4. The collector yields batches of [8 envs, 32 steps] from the current policy.
#
frames_per_batch = 256
total_frames = 2 * frames_per_batch if args.smoke else 60 * frames_per_batch
collector = SyncDataCollector(
    env, actor, frames_per_batch=frames_per_batch, total_frames=total_frames
)

# %%
# 5. Advantages: GAE over each batch writes "advantage" and "value_target".
#
advantage = GAE(gamma=0.98, lmbda=0.8, value_network=critic)

# %%
# 6. The loss: clipped surrogate + value regression; it returns a TensorDict of terms.
#
loss_fn = ClipPPOLoss(
    actor,
    critic,
    clip_epsilon=0.2,
    entropy_bonus=False,
    normalize_advantage=True,
    loss_critic_type="l2",
    critic_coef=0.5,
)
optim = torch.optim.Adam(loss_fn.parameters(), lr=1e-3)

# %%
# 7. A buffer that serves each batch in shuffled minibatches, every item once per epoch.
#
buffer = TensorDictReplayBuffer(
    storage=LazyTensorStorage(frames_per_batch),
    sampler=SamplerWithoutReplacement(),
    batch_size=128,
)

# %%
# 8. The loop: collect, estimate advantages, a few epochs of minibatch steps, repeat.
#
eval_env = GymEnv("CartPole-v1", num_envs=4)
eval_env.set_seed(1)
for i, batch in enumerate(collector):
    with torch.no_grad():
        advantage(batch)
    buffer.extend(batch.reshape(-1))  # flatten [envs, steps] into single transitions
    for _ in range(10):  # epochs
        for _ in range(frames_per_batch // buffer.batch_size):
            losses = loss_fn(buffer.sample())
            loss = losses["loss_objective"] + losses["loss_critic"]
            optim.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(loss_fn.parameters(), 0.5)
            optim.step()
    collector.update_policy_weights_()  # a no-op here (same process), needed across processes

    if (i + 1) % 8 == 0 or args.smoke:
        # Evaluation: the most likely action, one full episode in each of 4 envs.
        with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
            rollout = eval_env.rollout(500, actor, break_when_all_done=True)
        done = rollout["next", "done"].squeeze(-1).long()
        alive = (done.cumsum(-1) - done) == 0
        score = (rollout["next", "reward"].squeeze(-1) * alive).sum(-1).mean().item()
        print(f"frames {(i + 1) * frames_per_batch:6d}  evaluation return {score:6.1f}")
        if score >= 475:
            print("solved!")
            break
collector.shutdown()
