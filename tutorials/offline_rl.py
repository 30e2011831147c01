"""Offline RL: record a dataset, save it as a D4RL file, train BC and IQL on it
============================================================================

Offline reinforcement learning learns a policy from a fixed dataset, without touching the env
during training. This tutorial makes the whole pipeline on Pendulum-v1 in about a minute:

1. record a *mixed* dataset with a collector: half of the episodes come from a good hand-written
   controller, half from uniform random actions (a "medium-expert" dataset in D4RL's terms);
2. write it with :func:`~torchrl.data.datasets.export_d4rl` in D4RL's HDF5 layout and open it
   again with :class:`~torchrl.data.datasets.D4RLExperienceReplay`: what you would do with a
   downloaded D4RL file (see the offline data guide);
3. train behavioural cloning (:class:`~torchrl.objectives.BCLoss`) on all of it and on its best
   episodes, and implicit Q-learning (:class:`~torchrl.objectives.IQLLoss`), on the file's
   transitions only;
4. play the greedy policies in the env and compare them with the dataset's mean return.

BC copies every action of the data, good and bad alike; IQL learns which actions are better than
the data's average in each state and imitates those, so it can beat the data it learned from.
With 16 episodes and a few thousand gradient steps the scores are noisy: run it with other seeds
before drawing conclusions.
``examples/offline/`` does the same at a larger scale, on a dataset recorded by SAC.

Run it: ``python tutorials/offline_rl.py`` (``--smoke`` for a quicker run).
"""

from __future__ import annotations

import argparse
import os
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDictBase  # noqa: E402
from tensordict.nn import NormalParamExtractor, TensorDictModule  # noqa: E402
from torch import nn  # noqa: E402

from torchrl.collectors import SyncDataCollector  # noqa: E402
from torchrl.data import LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer  # noqa: E402
from torchrl.data.datasets import D4RLExperienceReplay, export_d4rl  # noqa: E402
from torchrl.envs import GymEnv  # noqa: E402
from torchrl.envs.utils import ExplorationType, set_exploration_type  # noqa: E402
from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator  # noqa: E402
from torchrl.objectives import BCLoss, IQLLoss, SoftUpdate  # noqa: E402

parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
parser.add_argument("--smoke", action="store_true", help="small budgets, for the test suite")
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)  # tiny networks: extra threads only add overhead

# %%
# 1. The behaviour policies.
#
# Pendulum-v1's observation is ``[cos(theta), sin(theta), angular velocity]`` with ``theta = 0``
# upright, and the action a torque in [-2, 2]. The "expert" is a classic controller: far from the
# top it pumps energy into the swing (torque along the velocity until the energy of an upright,
# resting pendulum is reached); near the top it balances with a PD law. A little noise keeps its
# data varied. The other half of the data comes from uniform random torques.


def swing_up(observation: torch.Tensor) -> torch.Tensor:
    """Energy-pumping swing-up and PD balance, plus Gaussian noise (std 1)."""
    cos, sin, velocity = observation.unbind(-1)
    theta = torch.atan2(sin, cos)
    energy = 0.5 * velocity**2 + 15.0 * cos  # 15 = 3 g / (2 l): Pendulum-v1's gravity term
    pump = torch.sign(velocity) * (15.0 - energy)
    pump = torch.where(velocity.abs() < 1e-3, torch.ones_like(pump), pump)  # start at rest
    balance = -(10.0 * theta + 2.0 * velocity)
    torque = torch.where(cos > 0.85, balance, pump) + torch.randn_like(cos)
    return torque.clamp(-2.0, 2.0).unsqueeze(-1)


expert = TensorDictModule(swing_up, in_keys=["observation"], out_keys=["action"])

# %%
# 2. Recording the dataset with a collector.
#
# Each collector runs 8 Pendulums side by side for one episode each (200 steps); ``policy=None``
# plays random actions from the env's action spec. The collector's batches are TED transitions
# (``"observation"``, ``"action"``, ``("next", "reward")``, ``("next", "done")``, ...) of shape
# ``[8 envs, 200 steps]``.
n_envs = 2 if args.smoke else 8
episode_steps = 200


def record(policy: TensorDictModule | None, seed: int) -> TensorDictBase:
    env = GymEnv("Pendulum-v1", num_envs=n_envs)
    env.set_seed(seed)
    collector = SyncDataCollector(
        env,
        policy,
        frames_per_batch=n_envs * episode_steps,
        total_frames=n_envs * episode_steps,
    )
    batch = next(iter(collector))
    collector.shutdown()
    return batch


expert_data = record(expert, seed=0)
random_data = record(None, seed=1)
for name, batch in [("expert", expert_data), ("random", random_data)]:
    returns = batch["next", "reward"].sum(-2).squeeze(-1)
    print(f"{name:6s} episodes: mean return {returns.mean():7.1f}  ({batch.numel()} steps)")
# keep the transition entries: the collector's bookkeeping (trajectory ids) is not needed
keys = ["observation", "action", ("next", "observation"), ("next", "reward")]
keys += [("next", "done"), ("next", "terminated"), ("next", "truncated")]
data = torch.cat([expert_data, random_data], 0).select(*keys)  # [2 * n_envs, 200]
behaviour_return = data["next", "reward"].sum(-2).mean().item()
print(f"dataset: {data.numel()} transitions, mean episode return {behaviour_return:.1f}")

# %%
# 3. Writing and reading a D4RL file.
#
# :func:`~torchrl.data.datasets.export_d4rl` writes ``observations``, ``actions``, ``rewards``,
# ``terminals``, ``timeouts`` and ``next_observations``, one row per transition, env after env.
# The reader converts the file once into a memory-mapped copy under ``root`` and is a replay
# buffer: ``sample()`` returns a batch of transitions, with an ``"episode"`` id for each.
# Any D4RL-layout file (D4RL's own downloads included) is opened the same way.
workdir = tempfile.mkdtemp(prefix="torchrl_offline_tutorial_")
path = export_d4rl(data, os.path.join(workdir, "pendulum-mixed.hdf5"))
dataset = D4RLExperienceReplay(
    "pendulum-mixed", batch_size=256, data_file=path, root=os.path.join(workdir, "cache")
)
print(f"{path.name}: {len(dataset)} transitions")
sample = dataset.sample()
print("a batch:", sample.batch_size, sorted(str(k) for k in sample.keys(True, True)))
print("episodes in the file:", dataset.storage[:]["episode"].unique().numel())

# %%
# 4. The networks.
#
# Both agents use the same stochastic actor: a tanh-squashed Gaussian over the torque. IQL
# adds two Q networks ``Q(s, a)`` and a state-value network ``V(s)``.
env = GymEnv("Pendulum-v1")
hidden = 64 if args.smoke else 128


def make_actor() -> ProbabilisticActor:
    net = nn.Sequential(MLP(3, 2, num_cells=[hidden, hidden]), NormalParamExtractor())
    return ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=env.action_spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": -2.0, "high": 2.0},
    )


def evaluate(actor: ProbabilisticActor, episodes: int, seed: int) -> float:
    """Mean return of ``episodes`` greedy episodes (the mode of the actor's distribution)."""
    eval_env = GymEnv("Pendulum-v1", num_envs=episodes)
    eval_env.set_seed(seed)
    with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
        rollout = eval_env.rollout(episode_steps, actor)
    eval_env.close()
    return rollout["next", "reward"].sum(-2).mean().item()


# %%
# 5. Training: the same loop for both losses.
#
# A loss module reads a batch of transitions and returns a TensorDict of ``loss_*`` terms; the
# loop sums them and steps one optimizer. IQL regresses ``V`` on an upper expectile of ``Q``
# (``expectile=0.7``: ``V`` tracks the better actions of the data), learns ``Q`` by TD on ``V``,
# and weighs each data action in the actor's likelihood by ``exp(temperature * (Q - V))``. BC
# maximises the likelihood of every data action. IQL's target networks follow with
# :class:`~torchrl.objectives.SoftUpdate`.
steps = 100 if args.smoke else 2500
eval_every = steps if args.smoke else 500


def train(
    loss_fn: BCLoss | IQLLoss, actor: ProbabilisticActor, buffer: ReplayBuffer, name: str
) -> list[float]:
    optim = torch.optim.Adam(loss_fn.parameters(), lr=1e-3)
    # a fixed budget of steps: decaying the rate lets the policy settle at the end
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optim, steps)
    target = SoftUpdate(loss_fn, tau=0.005) if isinstance(loss_fn, IQLLoss) else None
    curve = []
    for step in range(1, steps + 1):
        losses = loss_fn(buffer.sample())
        loss = sum(v for k, v in losses.items() if k.startswith("loss_"))
        optim.zero_grad()
        loss.backward()
        optim.step()
        schedule.step()
        if target is not None:
            target.step()
        if step % eval_every == 0:
            curve.append(evaluate(actor, episodes=4, seed=100 + step))
            print(f"{name} step {step:5d}: greedy return {curve[-1]:7.1f}")
    return curve


bc_actor = make_actor()
bc_curve = train(BCLoss(bc_actor), bc_actor, dataset, "BC ")

# %%
# A common baseline, "filtered BC", clones only the best episodes. The ``"episode"`` ids of the
# reader's transitions give each episode's return; the transitions of the better half go into
# a new buffer.
transitions = dataset.storage[:]
episode = transitions["episode"]
episode_return = torch.zeros(int(episode.max()) + 1).index_add_(
    0, episode, transitions["next", "reward"].reshape(-1)
)
threshold = episode_return.sort().values[episode_return.numel() // 2]
good = episode_return[episode] >= threshold
best = TensorDictReplayBuffer(storage=LazyTensorStorage(int(good.sum())), batch_size=256)
best.extend(transitions[good].to_tensordict())
n_best = int((episode_return >= threshold).sum())
print(f"filtered BC: {len(best)} transitions of the {n_best} best episodes")
fbc_actor = make_actor()
fbc_curve = train(BCLoss(fbc_actor), fbc_actor, best, "fBC")

iql_actor = make_actor()
qvalue = ValueOperator(MLP(3 + 1, 1, num_cells=[hidden, hidden]), in_keys=["observation", "action"])
value = ValueOperator(MLP(3, 1, num_cells=[hidden, hidden]), in_keys=["observation"])
iql_loss = IQLLoss(iql_actor, qvalue, value, num_qvalue_nets=2, expectile=0.7, temperature=3.0)
iql_loss.make_value_estimator(gamma=0.99)
iql_curve = train(iql_loss, iql_actor, dataset, "IQL")

# %%
# 6. Evaluation on fresh episodes.
#
# Pendulum's return depends a lot on the start state, so the final score averages 16 episodes
# that neither the data nor the training evaluations saw.
final_episodes = 4 if args.smoke else 16
bc_score = evaluate(bc_actor, final_episodes, seed=10_000)
fbc_score = evaluate(fbc_actor, final_episodes, seed=10_000)
iql_score = evaluate(iql_actor, final_episodes, seed=10_000)
print(f"dataset (behaviour) mean return: {behaviour_return:7.1f}")
print(f"BC  greedy return:               {bc_score:7.1f}")
print(f"filtered BC greedy return:       {fbc_score:7.1f}")
print(f"IQL greedy return:               {iql_score:7.1f}")

fig, ax = plt.subplots(figsize=(6, 3.5))
x = [eval_every * (i + 1) for i in range(len(bc_curve))]
ax.plot(x, bc_curve, marker="o", label=f"BC (final {bc_score:.0f})")
ax.plot(x, fbc_curve, marker="o", label=f"filtered BC (final {fbc_score:.0f})")
ax.plot(x, iql_curve, marker="o", label=f"IQL (final {iql_score:.0f})")
ax.axhline(behaviour_return, color="gray", ls="--", label="dataset mean")
ax.set_xlabel("gradient steps")
ax.set_ylabel("greedy return (4 episodes)")
ax.set_title("Offline training on a mixed Pendulum dataset")
ax.legend()
fig.tight_layout()
plt.show()

# %%
# What to read from it: IQL's greedy policy should end well above the dataset's mean, since it
# imitates the actions its critics rate above the data's average. BC's score lands between the
# two behaviours, and from one run to another it moves a lot. Filtered BC is not safe here
# either: its 8 expert episodes cover only the states along 8 swing-ups, and the greedy clone
# drifts off them into states it never saw; the random half of the data covers more of the state
# space, which IQL uses and filtered BC throws away. ``examples/offline/`` trains IQL, CQL,
# TD3+BC, BC and a decision transformer on a 10,000-transition SAC dataset with three seeds.
