"""SAC from the components: a squashed Gaussian actor, twin Q critics, targets, a replay buffer
=============================================================================================

Soft actor-critic learns a stochastic policy that maximises the return plus an entropy bonus,
from transitions replayed out of a buffer (it is off-policy). This tutorial assembles it piece
by piece on Pendulum-v1, with the recipe of ``examples/sac_pendulum.py``:

1. an environment whose action is a bounded torque;
2. an actor whose distribution, a ``TanhNormal``, respects those bounds;
3. one Q network, which the loss turns into two critics with their own parameters;
4. the SAC loss, its TD(0) value estimator and the target critics that follow by Polyak
   averaging;
5. a collector that starts with uniform random actions, and a replay buffer;
6. the loop: collect a batch, store it, one gradient step per collected frame, evaluate.

A full run takes about 1.5 minutes on two CPU cores and reaches a deterministic return around
-200 (a pendulum swung up and held; the untrained policy scores about -1300).

Run it: ``python tutorials/sac_from_components.py`` (``--smoke`` for a quicker run).
"""

from __future__ import annotations

import argparse
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import GymEnv, RewardSum, TransformedEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import SACLoss, SoftUpdate

parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
parser.add_argument("--smoke", action="store_true", help="small budgets, for the test suite")
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)  # tiny networks: extra threads only add overhead

# %%
# 1. The environment
# ------------------
#
# Pendulum-v1 observes ``[cos(theta), sin(theta), angular velocity]`` and takes one torque in
# ``[-2, 2]``. Its reward is at best 0 (upright and still); an episode lasts 200 steps and
# only ends by truncation, never by termination. ``RewardSum`` adds the running return,
# ``"episode_reward"``, so that the training episodes can be reported.
env = TransformedEnv(GymEnv("Pendulum-v1"), RewardSum())
env.set_seed(0)
n_obs = env.observation_spec["observation"].shape[-1]
n_act = env.action_spec.shape[-1]
low, high = env.action_spec.space.low.item(), env.action_spec.space.high.item()
print(f"observation: {n_obs} numbers; action: {n_act} torque in [{low}, {high}]")

# %%
# 2. The actor: observation -> (loc, scale) -> TanhNormal -> action
# ------------------------------------------------------------------
#
# The network writes twice as many numbers as there are actions; ``NormalParamExtractor``
# splits them into a mean and a positive scale. ``TanhNormal`` samples a Gaussian and
# squashes it with ``tanh`` into ``[low, high]``, correcting the log-probability for the
# squashing. Its samples are *reparameterised*: the action is a differentiable function of the
# parameters, which is what lets SAC's actor loss follow the critic's gradient.
actor_net = nn.Sequential(
    MLP(n_obs, 2 * n_act, num_cells=[64, 64], activation_class=nn.ReLU),
    NormalParamExtractor(),
)
actor = ProbabilisticActor(
    TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
    in_keys=["loc", "scale"],
    spec=env.action_spec,
    distribution_class=TanhNormal,
    distribution_kwargs={"low": env.action_spec.space.low, "high": env.action_spec.space.high},
)
with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
    td = actor(env.reset())
print("sampled action:", td["action"], "(always inside the bounds)")

# %%
# Outside an exploration context the actor returns its *deterministic* action, the squashed
# mean: that is what evaluation wants. The collector samples, since its ``exploration_type``
# defaults to ``ExplorationType.RANDOM``; the loss draws its own reparameterised samples.
with torch.no_grad():
    print("deterministic action:", actor(td)["action"], "(the squashed mean)")

# %%
# 3. The critic: (observation, action) -> "state_action_value"
# ------------------------------------------------------------
#
# One Q network is enough to write: :class:`~torchrl.modules.ValueOperator` concatenates its
# ``in_keys`` and writes ``"state_action_value"``. The loss builds the twin critics from it.
qvalue = ValueOperator(
    MLP(n_obs + n_act, 1, num_cells=[64, 64], activation_class=nn.ReLU),
    in_keys=["observation", "action"],
)

# %%
# 4. The loss, its value estimator and the target critics
# --------------------------------------------------------
#
# ``num_qvalue_nets=2`` stacks two independently initialised copies of the critic's
# parameters (a leading dim of 2): the targets use the smaller of the two estimates, which
# curbs the over-estimation a maximising actor would exploit. ``delay_qvalue`` (on by
# default) keeps a second, slowly moving copy of those parameters, the *target* critics.
# The temperature ``alpha`` is learned too: it grows while the policy's entropy is below
# ``target_entropy`` (``-action_dim`` by default) and shrinks when it is above.
loss_fn = SACLoss(actor, qvalue, num_qvalue_nets=2, loss_function="l2")
print(
    "critic parameters:",
    loss_fn.qvalue_network_params["module", "0", "weight"].shape,
    "(2 critics)",
)
print("target critics:", loss_fn.target_qvalue_network_params["module", "0", "weight"].shape)

# %%
# The bootstrapped target ``y = r + gamma * (min_i Q_target_i(s', a') - alpha log pi(a'|s'))``
# is computed by a value estimator, TD(0) here. ``SoftUpdate`` moves the target parameters
# a fraction ``tau`` towards the online ones after each gradient step.
loss_fn.make_value_estimator(gamma=0.99)
target_updater = SoftUpdate(loss_fn, tau=0.005)
# Actor, critics and temperature take one step together: their losses touch disjoint
# parameters (the actor loss sees detached critics, the critic loss a detached actor).
optim = torch.optim.Adam(loss_fn.parameters(), lr=1e-3)

# %%
# 5. The collector and the replay buffer
# --------------------------------------
#
# ``init_random_frames`` makes the collector take uniformly random actions (from the spec)
# for the first frames, so the buffer holds diverse data before the first gradient step.
# Each batch is 200 frames of the single env; the buffer keeps every transition.
frames_per_batch = 100 if args.smoke else 200
total_frames = 400 if args.smoke else 6000
init_random_frames = 200 if args.smoke else 1000
collector = SyncDataCollector(
    env,
    actor,
    frames_per_batch=frames_per_batch,
    total_frames=total_frames,
    init_random_frames=init_random_frames,
)
buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(100_000), batch_size=256)

# %%
# One loss call on a short rollout of the untrained actor shows what the loss returns: the
# three terms to minimise, and ``alpha`` and ``entropy`` as diagnostics (detached).
with torch.no_grad():
    rollout = env.rollout(256, actor, break_when_any_done=False)
losses = loss_fn(rollout)
print({k: round(v.item(), 3) for k, v in losses.items()})

# %%
# 6. Evaluation
# -------------
#
# The deterministic policy (the squashed mean) on 10 fresh episodes run side by side in a
# vectorised env; Pendulum episodes always last 200 steps, so the return is the sum of the
# rewards of the rollout.
eval_episodes = 2 if args.smoke else 10
eval_env = GymEnv("Pendulum-v1", num_envs=eval_episodes)
eval_env.set_seed(1000)


def evaluate() -> float:
    with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
        rollout = eval_env.rollout(200, actor)
    return rollout["next", "reward"].sum(-2).mean().item()


print(f"untrained policy: evaluation return {evaluate():.0f}")

# %%
# 7. The loop
# -----------
#
# Collect a batch, store it, then one gradient step per collected frame (an update-to-data
# ratio of 1), each followed by a target update. ``update_policy_weights_`` is a no-op for a
# collector in this process; it is what keeps remote collectors in sync. Training stops once
# an evaluation reaches -200.
eval_every = 200 if args.smoke else 1000
eval_curve: list[tuple[int, float]] = []
train_returns: list[tuple[int, float]] = []
frames, start = 0, time.perf_counter()
for batch in collector:
    frames += batch.numel()
    buffer.extend(batch)
    if frames >= init_random_frames:
        for _ in range(batch.numel()):
            losses = loss_fn(buffer.sample())
            loss = losses["loss_actor"] + losses["loss_qvalue"] + losses["loss_alpha"]
            optim.zero_grad()
            loss.backward()
            optim.step()
            target_updater.step()
        collector.update_policy_weights_()
    done = batch["next", "done"].squeeze(-1)
    train_returns += [(frames, r.item()) for r in batch["next", "episode_reward"][done]]
    if frames % eval_every == 0:
        score = evaluate()
        eval_curve.append((frames, score))
        print(
            f"frames {frames:5d}  evaluation return {score:7.1f}  alpha "
            f"{losses['alpha'].item():.3f}  ({time.perf_counter() - start:.0f} s)"
        )
        if score >= -200:
            print("reached -200")
            break
collector.shutdown()

# %%
# The learning curve: each dot is a training episode (stochastic actions, random ones during
# the first frames), the line the deterministic evaluations.
fig, ax = plt.subplots(figsize=(6, 3.5))
if train_returns:
    ax.scatter(*zip(*train_returns), s=8, alpha=0.5, label="training episodes")
ax.plot(*zip(*eval_curve), marker="o", color="C1", label="evaluation (deterministic)")
ax.axhline(-200, color="grey", linestyle="--", linewidth=1, label="-200")
ax.set_xlabel("frames")
ax.set_ylabel("return")
ax.set_title("SAC on Pendulum-v1")
ax.legend(loc="lower right")
fig.tight_layout()
plt.show()

# %%
# Where to go from here: ``examples/sac_pendulum.py`` is this loop with a configuration,
# a confirmed stopping rule and a recorded curve; ``examples/sac_pendulum_trainer.py`` runs
# it with the :class:`~torchrl.trainers.Trainer` and hooks; ``examples/sac_mujoco.py`` scales
# it to MuJoCo tasks. The same actor and critic work with ``TD3Loss`` (a deterministic actor)
# or ``CrossQLoss`` (no target networks).
