"""MADDPG / IDDPG on VMAS navigation: deterministic per-agent actors, per-agent Q critics.

Each agent's actor is a shared-parameter :class:`~torchrl.modules.MultiAgentMLP` mapping its own
observation to a ``tanh``-bounded 2-D force; Gaussian noise (annealed) explores. The critic
``Q_k(s, a)`` is another ``MultiAgentMLP`` on ``(observation, action)`` pairs: with
``--maddpg true`` every agent's critic sees the observations and actions of all agents
(centralised, MADDPG), with ``--maddpg false`` only its own (IDDPG). The loss is
:class:`~torchrl.objectives.DDPGLoss` on the per-agent rewards and done flags of the group
``"agents"`` (its keys pointed there with ``set_keys``), with target actor and critic updated by
``SoftUpdate``, trained off-policy from a replay buffer.

Every ``eval_every`` iterations (and after the last) the greedy policy (no exploration noise)
runs one episode in each of ``eval_envs`` fresh sub-envs; ``--out DIR`` gets the curve of these
mean per-agent returns, and the last line printed is the usual summary.

Usage: ``python examples/multiagent/maddpg.py [--maddpg B] [--iters N] [--num-envs E]
[--out DIR] [--no-progress]``.
Prints one JSON line per iteration (frames, mean reward per agent-step, losses, noise scale) unless
``--no-progress`` or ``--verbose false``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass

import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import evaluate_agents, parse_config, plot_curve, report  # noqa: E402

from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, RandomSampler, TensorDictReplayBuffer
from torchrl.envs.libs.vmas import VmasEnv
from torchrl.modules import AdditiveGaussianModule, MultiAgentMLP
from torchrl.objectives import DDPGLoss, SoftUpdate, ValueEstimators

GROUP = "agents"


@dataclass
class Config:
    scenario: str = "navigation"
    maddpg: bool = True  # centralised critics (MADDPG) or decentralised (IDDPG)
    n_agents: int = 3
    num_envs: int = 32
    max_steps: int = 100
    steps_per_batch: int = 25  # frames per batch = num_envs * steps_per_batch
    iters: int = 200  # the first ~100 batches dip below random (see docs/multiagent.rst)
    updates_per_batch: int = 20
    batch_size: int = 256
    buffer_size: int = 100_000
    lr_actor: float = 3e-4
    lr_critic: float = 1e-3
    gamma: float = 0.9
    tau: float = 0.005
    sigma_init: float = 0.9
    sigma_end: float = 0.1
    hidden: int = 64
    max_grad_norm: float = 1.0
    seed: int = 0
    eval_every: int = 5  # iterations between deterministic evaluations
    eval_envs: int = 16
    verbose: bool = True
    out: str = "outputs"
    progress: bool = True


def parse_args(argv: list[str] | None = None) -> Config:
    """A ``Config`` from ``--flag value`` pairs (bools take ``true``/``false``)."""
    return parse_config(Config, __doc__, argv)


def make_networks(env: VmasEnv, cfg: Config) -> tuple[TensorDictModule, TensorDictModule]:
    n_agents = cfg.n_agents
    n_obs = env.observation_spec[GROUP, "observation"].shape[-1]
    n_act = env.full_action_spec[GROUP, "action"].shape[-1]
    actor = TensorDictModule(
        nn.Sequential(
            MultiAgentMLP(
                n_agent_inputs=n_obs,
                n_agent_outputs=n_act,
                n_agents=n_agents,
                centralized=False,
                share_params=True,
                depth=2,
                num_cells=cfg.hidden,
                activation_class=nn.Tanh,
            ),
            nn.Tanh(),  # VMAS navigation forces lie in [-1, 1]
        ),
        in_keys=[(GROUP, "observation")],
        out_keys=[(GROUP, "action")],
    )
    critic = TensorDictModule(
        MultiAgentMLP(
            n_agent_inputs=n_obs + n_act,
            n_agent_outputs=1,
            n_agents=n_agents,
            centralized=cfg.maddpg,
            share_params=True,
            depth=2,
            num_cells=cfg.hidden,
            activation_class=nn.Tanh,
        ),
        in_keys=[(GROUP, "observation"), (GROUP, "action")],
        out_keys=[(GROUP, "state_action_value")],
    )
    return actor, critic


def train(cfg: Config) -> dict:
    """Trains for ``cfg.iters`` batches; returns the per-iteration curve, timings and the actor."""
    torch.manual_seed(cfg.seed)
    env = VmasEnv(
        cfg.scenario,
        num_envs=cfg.num_envs,
        continuous_actions=True,
        max_steps=cfg.max_steps,
        seed=cfg.seed,
        n_agents=cfg.n_agents,
    )
    actor, critic = make_networks(env, cfg)
    frames_per_batch = cfg.num_envs * cfg.steps_per_batch
    total = frames_per_batch * cfg.iters
    explore = AdditiveGaussianModule(
        env.full_action_spec,
        sigma_init=cfg.sigma_init,
        sigma_end=cfg.sigma_end,
        annealing_num_steps=max(1, total // 2),
        action_key=(GROUP, "action"),
    )
    collector = SyncDataCollector(
        env,
        TensorDictSequential(actor, explore),
        frames_per_batch=frames_per_batch,
        total_frames=total,
    )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.buffer_size),
        sampler=RandomSampler(),
        batch_size=cfg.batch_size,
    )
    loss_fn = DDPGLoss(actor, critic, delay_actor=True, delay_value=True)
    loss_fn.set_keys(
        state_action_value=(GROUP, "state_action_value"),
        reward=(GROUP, "reward"),
        done=(GROUP, "done"),
        terminated=(GROUP, "terminated"),
    )
    loss_fn.make_value_estimator(ValueEstimators.TD0, gamma=cfg.gamma)
    updater = SoftUpdate(loss_fn, tau=cfg.tau)
    optim_actor = torch.optim.Adam(loss_fn.actor_network.parameters(), lr=cfg.lr_actor)
    optim_critic = torch.optim.Adam(loss_fn.value_network.parameters(), lr=cfg.lr_critic)

    eval_env = VmasEnv(
        cfg.scenario,
        num_envs=cfg.eval_envs,
        continuous_actions=True,
        max_steps=cfg.max_steps,
        seed=cfg.seed + 1000,
        n_agents=cfg.n_agents,
    )
    evals: list[tuple[int, float]] = []
    curve: list[dict] = []
    frames = 0
    start = time.perf_counter()
    for i, batch in enumerate(collector):
        frames += batch.numel()
        buffer.extend(batch.reshape(-1))
        actor_losses, value_losses = [], []
        for _ in range(cfg.updates_per_batch):
            losses = loss_fn(buffer.sample())
            # one backward for both: the actor loss reads the critic through detached
            # parameters and the critic loss the actor through its target, so the gradients
            # stay apart; stepping the critic first would invalidate the actor's graph
            optim_critic.zero_grad()
            optim_actor.zero_grad()
            (losses["loss_value"] + losses["loss_actor"]).backward()
            nn.utils.clip_grad_norm_(loss_fn.value_network.parameters(), cfg.max_grad_norm)
            nn.utils.clip_grad_norm_(loss_fn.actor_network.parameters(), cfg.max_grad_norm)
            optim_critic.step()
            optim_actor.step()
            updater.step()
            actor_losses.append(losses["loss_actor"].detach())
            value_losses.append(losses["loss_value"].detach())
        explore.step(batch.numel())
        collector.update_policy_weights_()
        point = {
            "iter": i,
            "frames": frames,
            "reward": float(batch.get(("next", GROUP, "reward")).mean()),
            "loss_actor": float(torch.stack(actor_losses).mean()),
            "loss_value": float(torch.stack(value_losses).mean()),
            "sigma": round(float(explore.sigma), 3),
            "wall_s": round(time.perf_counter() - start, 2),
        }
        if (i + 1) % cfg.eval_every == 0 or i + 1 == cfg.iters:
            point["eval_return"] = evaluate_agents(eval_env, actor, cfg.max_steps, GROUP)
            evals.append((frames, point["eval_return"]))
        curve.append(point)
        if cfg.verbose and cfg.progress:
            print(json.dumps(point))
    collector.shutdown()
    return {
        "curve": curve,
        "frames": frames,
        "evals": evals,
        "wall_s": time.perf_counter() - start,
        "policy": actor,
    }


def main() -> None:
    cfg = parse_args()
    torch.set_num_threads(1)  # small networks: extra threads only add overhead on small machines
    out = train(cfg)
    # per-step rewards swing with the episode phase: compare whole episodes of batches
    k = max(1, cfg.max_steps // cfg.steps_per_batch)
    rewards = [p["reward"] for p in out["curve"]]
    first, last = sum(rewards[:k]) / len(rewards[:k]), sum(rewards[-k:]) / len(rewards[-k:])
    algo = "MADDPG" if cfg.maddpg else "IDDPG"
    print(
        f"{algo} {cfg.scenario}: mean reward per agent-step {first:.4f} (first episode) -> "
        f"{last:.4f} (last) in {out['frames']} frames ({out['wall_s']:.0f} s)"
    )
    title = f"{algo} VMAS {cfg.scenario} ({cfg.n_agents} agents)"
    history = {"eval": out["evals"], "frames": out["frames"], "wall": out["wall_s"]}
    plot_curve(history, os.path.join(cfg.out, f"{algo.lower()}_vmas.png"), title)
    report(title, history, None, out["evals"][-1][1], episodes=cfg.eval_envs)


if __name__ == "__main__":
    main()
