"""Asynchronous training: an inference server, rollout workers, policy lag and APPO
================================================================================

In asynchronous training, collection and learning overlap: rollout worker processes only step
environments, an inference server runs the policy once for the requests of many envs, and the
learner trains on the trajectories as they arrive, while the workers go on collecting with
weights that may be a few updates old. This tutorial takes the pieces one at a time:

1. an :class:`~torchrl.modules.inference_server.InferenceServer` alone, serving client threads;
2. :class:`~torchrl.collectors.AsyncBatchedCollector`: its batches, the ``"policy_version"``
   of every step, and the policy lag;
3. APPO on CartPole: PPO's clipped loss with V-trace advantages, which correct for the lag
   (the recipe of ``examples/appo_cartpole.py``; ``docs/async_training.rst`` explains the
   processes and which collector to pick).

Run it: ``python tutorials/async_training.py`` (``--smoke`` for a quicker run).
"""

from __future__ import annotations

import argparse
import threading
from collections import deque

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torch import nn  # noqa: E402

from torchrl.collectors import AsyncBatchedCollector, policy_lag_stats  # noqa: E402
from torchrl.envs import EnvBase, GymEnv, RewardSum, TransformedEnv  # noqa: E402
from torchrl.envs.utils import ExplorationType, set_exploration_type  # noqa: E402
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator  # noqa: E402
from torchrl.modules.inference_server import InferenceServer, ThreadingTransport  # noqa: E402
from torchrl.objectives import ClipPPOLoss, ValueEstimators  # noqa: E402

parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
parser.add_argument("--smoke", action="store_true", help="small budgets, for the test suite")
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)  # tiny networks: extra threads only add overhead

# %%
# 1. The inference server on its own.
#
# A server owns a policy and a transport. Clients submit requests (TensorDicts of one or more
# rows); the serving thread takes every request that is ready, concatenates them, runs the
# policy once and hands each client its own rows back, stamped with the version of the
# weights that computed them. Here 4 threads play the envs, each asking 25 times.
policy = TensorDictModule(nn.Linear(4, 2), in_keys=["observation"], out_keys=["action"])
transport = ThreadingTransport()
server = InferenceServer(policy, transport, max_batch_size=16).start()
client = transport.client()


def env_thread() -> None:
    for _ in range(25):
        client(TensorDict(observation=torch.randn(4)))


threads = [threading.Thread(target=env_thread) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
stats = server.stats()
print(
    f"{stats['requests']} requests answered in {stats['batches']} forward passes "
    f"(up to {stats['max_batch_requests']} requests in one)"
)

# %%
# New weights are applied between two forward passes, never in the middle of one, and each
# update bumps the version that later responses carry.
print("version before:", client(TensorDict(observation=torch.zeros(4)))["policy_version"].item())
server.update_weights({"module.weight": torch.zeros(2, 4), "module.bias": torch.ones(2)})
answer = client(TensorDict(observation=torch.zeros(4)))
print("version after: ", answer["policy_version"].item(), "action:", answer["action"].tolist())
server.shutdown()  # stops the serving thread and fails anything still pending

# %%
# 2. The actor and the critic for CartPole.
#
# ``return_log_prob`` matters here: the server stores the log-probability of each action it
# samples, which is the *behaviour* policy's probability that V-trace needs later.
actor = ProbabilisticActor(
    TensorDictModule(
        MLP(4, 2, num_cells=[64, 64], activation_class=nn.Tanh),
        in_keys=["observation"],
        out_keys=["logits"],
    ),
    in_keys=["logits"],
    distribution_class=OneHotCategorical,
    return_log_prob=True,
)
critic = ValueOperator(MLP(4, 1, num_cells=[64, 64], activation_class=nn.Tanh), ["observation"])


# %%
# 3. The asynchronous collector.
#
# It takes one constructor per env (single envs, batch size ``[]``), splits them between
# ``num_workers`` rollout processes, and serves the policy from one inference server (a
# thread of this process here; ``policy_backend="multiprocessing"`` gives it a process of its
# own). Each worker writes trajectory chunks of ``rollout_length`` steps into shared memory;
# the collector yields batches ``[rows, rollout_length]``, each row a contiguous piece of one
# env's trajectory. ``RewardSum`` on each env writes the episode returns we plot below.
def make_env() -> EnvBase:
    return TransformedEnv(GymEnv("CartPole-v1"), RewardSum())


total_frames = 2_048 if args.smoke else 600 * 256
collector = AsyncBatchedCollector(
    create_env_fn=[make_env] * 8,
    policy=actor,
    frames_per_batch=256,
    rollout_length=32,
    total_frames=total_frames,
    num_workers=2,
    num_splits=1,
    seed=0,
)
print(collector)

# %%
# 4. The loss: APPO.
#
# PPO's clipped objective, with advantages and critic targets from V-trace: each step's
# correction is weighted by the truncated ratio ``min(rho_thresh, pi / mu)`` between the
# current policy ``pi`` and the behaviour policy ``mu`` that collected it, so data a few
# versions old still gives an unbiased-enough target.
loss_fn = ClipPPOLoss(
    actor, critic, clip_epsilon=0.2, entropy_bonus=False, normalize_advantage=True,
    loss_critic_type="l2", critic_coef=0.5,
)  # fmt: skip
loss_fn.make_value_estimator(ValueEstimators.VTrace, gamma=0.99, rho_thresh=1.0, c_thresh=1.0)
optim = torch.optim.Adam(loss_fn.parameters(), lr=3e-3)

# %%
# 5. The loop.
#
# Every batch is trained on as it comes (V-trace once, then 4 epochs of minibatches) and the
# new weights go to the server with ``update_policy_weights_``. Meanwhile the workers keep
# stepping, so the next batch may hold steps from several versions: ``policy_lag_stats``
# (or ``collector.last_policy_lag``) says how far behind. ``max_policy_lag=`` would drop rows
# older than a bound. The collector is shut down in ``finally``: its worker processes and
# shared memory never outlive the loop, even on an error.
recent: deque[float] = deque(maxlen=20)  # the last 20 finished training episodes
curve, lags = [], []
frames = 0
try:
    for i, batch in enumerate(collector):
        if i == 0:
            print("batch:", tuple(batch.batch_size), "keys:", sorted(map(str, batch.keys())))
            print("envs of the rows:", batch["collector", "env_index"][:, 0].tolist())
        frames += batch.numel()
        lag = policy_lag_stats(batch, collector.policy_version)
        lags.append(lag["mean"])
        done = batch["next", "done"].squeeze(-1)
        recent.extend(batch["next", "episode_reward"][done].flatten().tolist())

        batch["next", "reward"] = batch["next", "reward"] * 0.1  # smaller targets for the critic
        with torch.no_grad():
            loss_fn.value_estimator(batch)
        flat = batch.reshape(-1)
        for _ in range(4):
            for idx in torch.randperm(flat.numel()).split(128):
                terms = loss_fn(flat[idx])
                optim.zero_grad()
                (terms["loss_objective"] + terms["loss_critic"]).backward()
                nn.utils.clip_grad_norm_(loss_fn.parameters(), 0.5)
                optim.step()
        collector.update_policy_weights_()

        if recent:
            curve.append((frames, sum(recent) / len(recent)))
        if i % 40 == 0:
            print(
                f"frames {frames:7d}  version {collector.policy_version:4d}  "
                f"lag min/mean/max {lag['min']:.0f}/{lag['mean']:.2f}/{lag['max']:.0f}  "
                f"average return {curve[-1][1] if curve else float('nan'):6.1f}"
            )
        if len(recent) == recent.maxlen and curve[-1][1] >= 475:
            print(f"solved after {frames} frames: average return {curve[-1][1]:.1f}")
            break
    served = collector.server_stats()
    print(
        f"inference server: {served['requests']} requests of {collector.envs_per_group} envs "
        f"each in {served['batches']} forward passes, {served['mean_batch_rows']:.1f} rows per "
        f"pass, {served['weight_updates']} weight updates"
    )
finally:
    collector.shutdown()

# %%
# 6. The result, greedily evaluated, and the curves.
eval_env = GymEnv("CartPole-v1", num_envs=4)
eval_env.set_seed(1)
with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
    rollout = eval_env.rollout(500, actor, break_when_all_done=True)
ended = rollout["next", "done"].squeeze(-1).long()
alive = (ended.cumsum(-1) - ended) == 0  # steps up to and including each env's first end
score = (rollout["next", "reward"].squeeze(-1) * alive).sum(-1).mean().item()
print(f"deterministic evaluation return (4 episodes): {score:.1f}")
eval_env.close()

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9, 3.2))
if curve:
    ax0.plot(*zip(*curve))
ax0.set_xlabel("frames")
ax0.set_ylabel("average training return")
ax0.set_title("APPO, CartPole-v1")
ax1.plot(lags)
ax1.set_xlabel("batch")
ax1.set_ylabel("mean policy lag (updates)")
ax1.set_title("how old the data was")
fig.tight_layout()
plt.show()
