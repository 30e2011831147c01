"""MAPPO / IPPO on VMAS navigation: shared-parameter agents, a per-agent critic, clipped PPO.

Each agent's policy is a :class:`~torchrl.modules.MultiAgentMLP` reading its own observation
(``("agents", "observation")``, ``[E, n_agents, obs]``) and writing a ``TanhNormal`` over its 2-D
force. The critic is another ``MultiAgentMLP``: with ``--mappo true`` (MAPPO) every agent's value
sees the observations of all agents (centralised critic), with ``--mappo false`` (IPPO) only its
own. The loss is :class:`~torchrl.objectives.multiagent.MAPPOLoss` or
:class:`~torchrl.objectives.multiagent.IPPOLoss`, whose value estimator is
:class:`~torchrl.objectives.multiagent.MultiAgentGAE`: run once over all agents on the per-agent
rewards and the per-env episode ends. All data stays in the group ``"agents"``; every loss key
is pointed at it with ``set_keys`` (the estimator's follow).

Every ``eval_every`` iterations (and after the last) the actor runs one deterministic episode
in each of ``eval_envs`` fresh sub-envs; the learning curve (``--out DIR``) shows these and the
training episodes' mean reward per agent, and the last line is the usual summary.

Usage: ``python examples/multiagent/mappo_ippo.py [--iters N] [--num-envs E] [--mappo B]
[--out DIR] [--no-progress]``. Prints one line per iteration (frames, mean reward per
agent-step, mean episode reward) unless ``--no-progress`` or ``--verbose false``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import evaluate_agents, parse_config, plot_curve, report  # noqa: E402

from torchrl.collectors import SyncDataCollector
from torchrl.envs import RewardSum, TransformedEnv
from torchrl.envs.libs.vmas import VmasEnv
from torchrl.modules import MultiAgentMLP, ProbabilisticActor, TanhNormal
from torchrl.objectives.multiagent import IPPOLoss, MAPPOLoss

GROUP = "agents"


@dataclass
class Config:
    scenario: str = "navigation"
    n_agents: int = 3
    num_envs: int = 64
    max_steps: int = 100  # episode length; one batch is one episode of every sub-env
    iters: int = 30
    epochs: int = 4
    minibatch_size: int = 800
    lr: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.9
    clip_epsilon: float = 0.2
    entropy_coef: float = 1e-4
    max_grad_norm: float = 1.0
    hidden: int = 128
    mappo: bool = True  # centralised critic (MAPPO) or decentralised (IPPO)
    share_params: bool = True
    seed: int = 0
    eval_every: int = 5  # iterations between deterministic evaluations
    eval_envs: int = 16
    verbose: bool = True
    out: str = "outputs"
    progress: bool = True


def parse_args(argv: list[str] | None = None) -> Config:
    """A ``Config`` from ``--flag value`` pairs (bools take ``true``/``false``)."""
    return parse_config(Config, __doc__, argv)


def make_env(cfg: Config, seed: int, num_envs: int | None = None) -> TransformedEnv:
    env = VmasEnv(
        cfg.scenario,
        num_envs=cfg.num_envs if num_envs is None else num_envs,
        continuous_actions=True,
        max_steps=cfg.max_steps,
        seed=seed,
        n_agents=cfg.n_agents,
    )
    # Per-agent episode returns, reset with the env: the curve we report.
    return TransformedEnv(
        env, RewardSum(in_keys=[(GROUP, "reward")], out_keys=[(GROUP, "episode_reward")])
    )


def make_agent(env: TransformedEnv, cfg: Config) -> tuple[ProbabilisticActor, TensorDictModule]:
    n_agents = cfg.n_agents
    n_obs = env.observation_spec[GROUP, "observation"].shape[-1]
    action_spec = env.full_action_spec[GROUP, "action"]
    n_act = action_spec.shape[-1]
    policy_net = nn.Sequential(
        MultiAgentMLP(
            n_agent_inputs=n_obs,
            n_agent_outputs=2 * n_act,
            n_agents=n_agents,
            centralized=False,
            share_params=cfg.share_params,
            depth=2,
            num_cells=cfg.hidden,
            activation_class=nn.Tanh,
        ),
        NormalParamExtractor(),
    )
    actor = ProbabilisticActor(
        TensorDictModule(
            policy_net,
            in_keys=[(GROUP, "observation")],
            out_keys=[(GROUP, "loc"), (GROUP, "scale")],
        ),
        spec=action_spec,
        in_keys=[(GROUP, "loc"), (GROUP, "scale")],
        out_keys=[(GROUP, "action")],
        distribution_class=TanhNormal,
        # the bounds of one agent: the spec's are expanded over envs and agents
        distribution_kwargs={
            "low": action_spec.space.low.reshape(-1, n_act)[0],
            "high": action_spec.space.high.reshape(-1, n_act)[0],
        },
        return_log_prob=True,
        log_prob_key=(GROUP, "action_log_prob"),
    )
    critic_net = MultiAgentMLP(
        n_agent_inputs=n_obs,
        n_agent_outputs=1,
        n_agents=n_agents,
        centralized=cfg.mappo,
        share_params=cfg.share_params,
        depth=2,
        num_cells=cfg.hidden,
        activation_class=nn.Tanh,
    )
    critic = TensorDictModule(
        critic_net, in_keys=[(GROUP, "observation")], out_keys=[(GROUP, "state_value")]
    )
    return actor, critic


def train(cfg: Config) -> dict:
    """Trains for ``cfg.iters`` batches; returns the per-iteration curve and timings."""
    torch.manual_seed(cfg.seed)
    env = make_env(cfg, cfg.seed)
    actor, critic = make_agent(env, cfg)
    frames_per_batch = cfg.num_envs * cfg.max_steps
    collector = SyncDataCollector(
        env, actor, frames_per_batch=frames_per_batch, total_frames=frames_per_batch * cfg.iters
    )
    loss_cls = MAPPOLoss if cfg.mappo else IPPOLoss
    loss_fn = loss_cls(
        actor,
        critic,
        clip_epsilon=cfg.clip_epsilon,
        entropy_coef=cfg.entropy_coef,
        normalize_advantage=False,
        loss_critic_type="smooth_l1",
    )
    loss_fn.set_keys(
        reward=(GROUP, "reward"),
        action=(GROUP, "action"),
        sample_log_prob=(GROUP, "action_log_prob"),
        value=(GROUP, "state_value"),
        advantage=(GROUP, "advantage"),
        value_target=(GROUP, "value_target"),
    )
    # VMAS ends episodes per env: MultiAgentGAE broadcasts the root done flags over the agents
    loss_fn.make_value_estimator(gamma=cfg.gamma, lmbda=cfg.gae_lambda)
    gae = loss_fn.value_estimator
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr)

    eval_env = make_env(cfg, cfg.seed + 1000, cfg.eval_envs)
    evals: list[tuple[int, float]] = []
    curve: list[dict] = []
    frames = 0
    start = time.perf_counter()
    for i, batch in enumerate(collector):
        frames += batch.numel()
        with torch.no_grad():
            gae(batch)
        flat = batch.reshape(-1)
        n = flat.numel()
        for _ in range(cfg.epochs):
            for idx in torch.randperm(n).split(cfg.minibatch_size):
                losses = loss_fn(flat[idx])
                loss = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(loss_fn.parameters(), cfg.max_grad_norm)
                optim.step()
        collector.update_policy_weights_()
        nxt = batch["next"]
        done = nxt["done"].squeeze(-1)
        episode = nxt[GROUP, "episode_reward"].mean(-2).squeeze(-1)[done]
        point = {
            "iter": i,
            "frames": frames,
            "reward": float(nxt[GROUP, "reward"].mean()),
            "episode_reward": float(episode.mean()) if episode.numel() else float("nan"),
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
        "evals": evals,
        "frames": frames,
        "wall_s": time.perf_counter() - start,
    }


def main() -> None:
    cfg = parse_args()
    torch.set_num_threads(1)  # small networks: extra threads only add overhead on small machines
    out = train(cfg)
    first, last = out["curve"][0], out["curve"][-1]
    algo = "MAPPO" if cfg.mappo else "IPPO"
    print(
        f"{algo} {cfg.scenario}: mean episode reward {first['episode_reward']:.3f} -> "
        f"{last['episode_reward']:.3f} in {out['frames']} frames ({out['wall_s']:.0f} s)"
    )
    title = f"{algo} VMAS {cfg.scenario} ({cfg.n_agents} agents)"
    history = {
        "train": [(p["frames"], p["episode_reward"]) for p in out["curve"]],
        "eval": out["evals"],
        "frames": out["frames"],
        "wall": out["wall_s"],
    }
    plot_curve(history, os.path.join(cfg.out, f"{algo.lower()}_vmas.png"), title)
    report(title, history, None, out["evals"][-1][1], episodes=cfg.eval_envs)


if __name__ == "__main__":
    main()
