"""Multi-agent RL: groups, per-agent specs, MultiAgentMLP, and a MAPPO/IPPO loop
================================================================================

Multi-agent data nests per *group* of agents: the observations of the 3 agents of the group
``"agents"`` live under ``("agents", "observation")`` with shape ``[envs, 3, obs]``. This
tutorial builds a VMAS ``navigation`` env (3 agents, each driving to its own goal), reads its
specs and a rollout, builds per-agent networks with
:class:`~torchrl.modules.MultiAgentMLP`, takes one
:class:`~torchrl.objectives.multiagent.MAPPOLoss` step by hand, then trains MAPPO (centralised
critic) and IPPO (one critic per agent) for a few batches and plots both curves (the recipe of
``examples/multiagent/mappo_ippo.py``; ``docs/multiagent.rst`` has the full-length results).

It needs VMAS (``pip install vmas``), a vectorized multi-agent simulator written in torch.

Run it: ``python tutorials/multiagent.py`` (``--smoke`` for a quicker run).
"""

from __future__ import annotations

import argparse
import importlib.util

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from tensordict.nn import NormalParamExtractor, TensorDictModule  # noqa: E402
from torch import nn  # noqa: E402

from torchrl.collectors import SyncDataCollector  # noqa: E402
from torchrl.envs import MarlGroupMapType, RewardSum, TransformedEnv  # noqa: E402
from torchrl.envs.libs.vmas import VmasEnv  # noqa: E402
from torchrl.modules import MultiAgentMLP, ProbabilisticActor, TanhNormal  # noqa: E402
from torchrl.objectives.multiagent import IPPOLoss, MAPPOLoss  # noqa: E402

parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
parser.add_argument("--smoke", action="store_true", help="small budgets, for the test suite")
args = parser.parse_args()
if importlib.util.find_spec("vmas") is None:
    raise ImportError("this tutorial needs VMAS: pip install vmas")
torch.manual_seed(0)
torch.set_num_threads(1)  # small networks: extra threads only add overhead

N_AGENTS = 3
NUM_ENVS = 4 if args.smoke else 32
MAX_STEPS = 100  # one episode per env and batch

# %%
# 1. The env and its groups.
#
# VMAS steps ``num_envs`` copies of a scenario at once, so the env's batch size is
# ``[num_envs]``. Agents with the same specs go to one group (the default,
# ``MarlGroupMapType.ALL_IN_ONE_GROUP``, names it ``"agents"``): their entries are stacked on
# an agent dim, which is what lets one network serve all of them in one call.
env = VmasEnv(
    "navigation",
    num_envs=NUM_ENVS,
    n_agents=N_AGENTS,
    continuous_actions=True,
    max_steps=MAX_STEPS,
    seed=0,
)
print("batch size:", tuple(env.batch_size))
print("groups:", env.group_map)
print("observation", tuple(env.observation_spec["agents", "observation"].shape))
print("action     ", tuple(env.full_action_spec["agents", "action"].shape))
print("reward     ", tuple(env.full_reward_spec["agents", "reward"].shape))
print("done, per agent", tuple(env.full_done_spec["agents", "done"].shape))
print("done, per env  ", tuple(env.full_done_spec["done"].shape))

# %%
# The same scenario with one group per agent: each agent's data is its own sub-TensorDict,
# as it would have to be if the agents had different observation or action sizes.
per_agent = VmasEnv(
    "navigation",
    num_envs=2,
    n_agents=N_AGENTS,
    continuous_actions=True,
    seed=0,
    group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT,
)
print("one group per agent:", per_agent.group_map)
print(
    "agent_0 observation",
    tuple(per_agent.observation_spec["agent_0", "observation"].shape),
    "(a group of one agent)",
)
per_agent.close()

# %%
# 2. A rollout.
#
# Time is a batch dim of the whole rollout (``[envs, T]``); the agent dim belongs to the
# group's entries only, so the group's sub-TensorDict has batch ``[envs, T, agents]``.
rollout = env.rollout(5)  # random actions
print("rollout batch:", tuple(rollout.batch_size))
print("group batch:  ", tuple(rollout["agents"].batch_size))
print("reward:", tuple(rollout["next", "agents", "reward"].shape))
print("done:  ", tuple(rollout["next", "done"].shape), "(one flag per env)")

# %%
# 3. Per-agent networks.
#
# :class:`~torchrl.modules.MultiAgentMLP` maps ``[*B, agents, in]`` to ``[*B, agents, out]``
# with one MLP per agent, run over the agent dim in one vectorized call. ``share_params``
# says whether the agents share weights; ``centralized`` whether each agent's MLP reads the
# inputs of all agents (concatenated) or only its own.
n_obs = env.observation_spec["agents", "observation"].shape[-1]
obs = rollout["agents", "observation"][:, 0]  # [envs, agents, obs]
for share, central in [(True, False), (False, False), (True, True)]:
    net = MultiAgentMLP(
        n_obs, 1, n_agents=N_AGENTS, share_params=share, centralized=central, num_cells=[64, 64]
    )
    n_params = sum(p.numel() for p in net.parameters())
    out = net(obs)
    print(f"share_params={share!s:5} centralized={central!s:5} {n_params:6d} parameters", end="")
    print(f" -> output {tuple(out.shape)}")

# %%
# With shared parameters and decentralised inputs, two agents that see the same observation
# act alike: the network is the same function of its own input for every agent.
shared = MultiAgentMLP(n_obs, 2, n_agents=N_AGENTS, share_params=True, centralized=False)
same_obs = obs[:1, :1].expand(1, N_AGENTS, n_obs)
out = shared(same_obs)
print("same input, same output for every agent:", torch.allclose(out[0, 0], out[0, 1]))


# %%
# 4. The actor and the critic.
#
# The actor writes a mean and scale per agent, then a ``TanhNormal`` within the action bounds;
# ``return_log_prob`` stores the log-probability PPO's ratio needs, under the group. The
# critic writes one value per agent; centralised, it is MAPPO's, decentralised IPPO's.
def make_agent(centralized_critic: bool) -> tuple[ProbabilisticActor, TensorDictModule]:
    action_spec = env.full_action_spec["agents", "action"]
    n_act = action_spec.shape[-1]
    policy_net = nn.Sequential(
        MultiAgentMLP(
            n_obs, 2 * n_act, n_agents=N_AGENTS, centralized=False, share_params=True,
            depth=2, num_cells=128,
        ),
        NormalParamExtractor(),  # splits the last dim into a loc and a positive scale
    )  # fmt: skip
    actor = ProbabilisticActor(
        TensorDictModule(
            policy_net,
            in_keys=[("agents", "observation")],
            out_keys=[("agents", "loc"), ("agents", "scale")],
        ),
        spec=action_spec,
        in_keys=[("agents", "loc"), ("agents", "scale")],
        out_keys=[("agents", "action")],
        distribution_class=TanhNormal,
        # the bounds of one agent (the spec's are expanded over envs and agents)
        distribution_kwargs={
            "low": action_spec.space.low.reshape(-1, n_act)[0],
            "high": action_spec.space.high.reshape(-1, n_act)[0],
        },
        return_log_prob=True,
        log_prob_key=("agents", "action_log_prob"),
    )
    critic = TensorDictModule(
        MultiAgentMLP(
            n_obs, 1, n_agents=N_AGENTS, centralized=centralized_critic, share_params=True,
            depth=2, num_cells=128,
        ),
        in_keys=[("agents", "observation")],
        out_keys=[("agents", "state_value")],
    )  # fmt: skip
    return actor, critic


# %%
# 5. The loss, pointed at the group.
#
# :class:`~torchrl.objectives.multiagent.MAPPOLoss` is PPO's clipped loss; every key it reads
# is moved under ``"agents"`` with ``set_keys``. Its value estimator,
# :class:`~torchrl.objectives.multiagent.MultiAgentGAE`, takes the per-agent rewards and
# values and the per-env done flags, broadcasts the flags over the agents, and runs one GAE
# recursion for all of them.
def make_loss(mappo: bool) -> tuple[MAPPOLoss, ProbabilisticActor]:
    actor, critic = make_agent(centralized_critic=mappo)
    loss_cls = MAPPOLoss if mappo else IPPOLoss
    loss = loss_cls(
        actor, critic, clip_epsilon=0.2, entropy_coef=1e-4, normalize_advantage=False,
        loss_critic_type="smooth_l1",
    )  # fmt: skip
    loss.set_keys(
        reward=("agents", "reward"),
        action=("agents", "action"),
        sample_log_prob=("agents", "action_log_prob"),
        value=("agents", "state_value"),
        advantage=("agents", "advantage"),
        value_target=("agents", "value_target"),
    )
    loss.make_value_estimator(gamma=0.99, lmbda=0.9)
    return loss, actor


loss_fn, actor = make_loss(mappo=True)
with torch.no_grad():
    data = env.rollout(MAX_STEPS, actor)
    loss_fn.value_estimator(data)
print("advantage:", tuple(data["agents", "advantage"].shape), "(one per env, step and agent)")
losses = loss_fn(data.reshape(-1))
print({k: round(v.item(), 4) for k, v in losses.items() if k.startswith("loss_")})
(losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]).backward()
grad_norm = torch.cat([p.grad.flatten() for p in loss_fn.parameters() if p.grad is not None]).norm()
print(f"gradient norm over actor and critic: {grad_norm:.3f}")


# %%
# 6. Training MAPPO and IPPO.
#
# The loop is single-agent PPO's: collect a batch (one episode of every env), estimate
# advantages, a few epochs of minibatch steps. The score is the mean per-agent return of the
# episodes that ended in the batch (``RewardSum`` on the group's rewards).
def train(mappo: bool, iters: int) -> list[float]:
    torch.manual_seed(0)
    train_env = TransformedEnv(
        VmasEnv(
            "navigation", num_envs=NUM_ENVS, n_agents=N_AGENTS, continuous_actions=True,
            max_steps=MAX_STEPS, seed=0,
        ),
        RewardSum(in_keys=[("agents", "reward")], out_keys=[("agents", "episode_reward")]),
    )  # fmt: skip
    loss, policy = make_loss(mappo)
    optim = torch.optim.Adam(loss.parameters(), lr=3e-4)
    frames_per_batch = NUM_ENVS * MAX_STEPS
    collector = SyncDataCollector(
        train_env, policy, frames_per_batch=frames_per_batch, total_frames=iters * frames_per_batch
    )
    returns = []
    for batch in collector:
        with torch.no_grad():
            loss.value_estimator(batch)
        flat = batch.reshape(-1)
        for _ in range(4):  # epochs
            for idx in torch.randperm(flat.numel()).split(400):
                terms = loss(flat[idx])
                total = terms["loss_objective"] + terms["loss_critic"] + terms["loss_entropy"]
                optim.zero_grad()
                total.backward()
                nn.utils.clip_grad_norm_(loss.parameters(), 1.0)
                optim.step()
        collector.update_policy_weights_()
        done = batch["next", "done"].squeeze(-1)
        episode = batch["next", "agents", "episode_reward"].mean(-2).squeeze(-1)[done]
        returns.append(episode.mean().item())
    collector.shutdown()
    name = "MAPPO" if mappo else "IPPO"
    print(f"{name}: per-agent return", " ".join(f"{r:5.2f}" for r in returns))
    return returns


iters = 1 if args.smoke else 20
curves = {"MAPPO": train(True, iters), "IPPO": train(False, iters)}

fig, ax = plt.subplots(figsize=(6, 3.5))
for name, curve in curves.items():
    ax.plot([(i + 1) * NUM_ENVS * MAX_STEPS for i in range(len(curve))], curve, label=name)
ax.set_xlabel("env steps")
ax.set_ylabel("mean per-agent return")
ax.set_title(f"VMAS navigation, {N_AGENTS} agents")
ax.legend()
fig.tight_layout()
plt.show()
env.close()

# %%
# Next steps: ``examples/multiagent/`` also trains QMIX/VDN (discrete actions, a mixing
# network over the agents' chosen action values) and MADDPG/IDDPG (deterministic actors, a
# replay buffer), on the same group keys.
