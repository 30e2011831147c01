"""QMIX / VDN on VMAS navigation (discrete actions): per-agent Q-values mixed into a team value.

Each agent's Q-network is a shared-parameter :class:`~torchrl.modules.MultiAgentMLP` reading its
own observation and writing the values of VMAS's 5 discrete moves
(``("agents", "action_value")``, ``[E, n_agents, 5]``); a ``QValueModule`` takes the greedy move
and epsilon-greedy exploration the random ones. :class:`~torchrl.objectives.QMixerLoss` mixes the
chosen values with :class:`~torchrl.modules.QMixer` (hypernetworks on the global state, here
all agents' observations) or :class:`~torchrl.modules.VDNMixer` (a sum) and regresses the team
value on the team reward (the agents' mean reward) with a target network updated by
``SoftUpdate``. Transitions go through a replay buffer.

Every ``eval_every`` iterations (and after the last) the greedy policy (no exploration noise)
runs one episode in each of ``eval_envs`` fresh sub-envs; ``--out DIR`` gets the curve of these
mean per-agent returns, and the last line printed is the usual summary.

Usage: ``python examples/multiagent/qmix_vdn.py [--mixer qmix|vdn] [--iters N] [--num-envs E]
[--out DIR] [--no-progress]``.
Prints one JSON line per iteration (frames, mean reward per agent-step, loss, epsilon) unless
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
from torchrl.modules import EGreedyModule, MultiAgentMLP, QMixer, QValueModule, VDNMixer
from torchrl.objectives import QMixerLoss, SoftUpdate, ValueEstimators

GROUP = "agents"


@dataclass
class Config:
    scenario: str = "navigation"
    mixer: str = "qmix"  # "qmix" or "vdn"
    n_agents: int = 3
    num_envs: int = 32
    max_steps: int = 100
    steps_per_batch: int = 25  # frames per batch = num_envs * steps_per_batch
    iters: int = 40
    updates_per_batch: int = 20
    batch_size: int = 256
    buffer_size: int = 100_000
    lr: float = 5e-4
    gamma: float = 0.9
    tau: float = 0.005
    eps_init: float = 1.0
    eps_end: float = 0.05
    hidden: int = 64
    mixing_embed_dim: int = 32
    max_grad_norm: float = 10.0
    seed: int = 0
    eval_every: int = 5  # iterations between deterministic evaluations
    eval_envs: int = 16
    verbose: bool = True
    out: str = "outputs"
    progress: bool = True


def parse_args(argv: list[str] | None = None) -> Config:
    """A ``Config`` from ``--flag value`` pairs (bools take ``true``/``false``)."""
    return parse_config(Config, __doc__, argv)


def make_networks(env: VmasEnv, cfg: Config) -> tuple[TensorDictSequential, TensorDictModule]:
    n_agents = cfg.n_agents
    n_obs = env.observation_spec[GROUP, "observation"].shape[-1]
    n_actions = env.full_action_spec[GROUP, "action"].space.n
    q_net = TensorDictModule(
        MultiAgentMLP(
            n_agent_inputs=n_obs,
            n_agent_outputs=n_actions,
            n_agents=n_agents,
            centralized=False,
            share_params=True,
            depth=2,
            num_cells=cfg.hidden,
            activation_class=nn.ReLU,
        ),
        in_keys=[(GROUP, "observation")],
        out_keys=[(GROUP, "action_value")],
    )
    greedy = QValueModule(
        action_space="categorical",
        action_value_key=(GROUP, "action_value"),
        out_keys=[(GROUP, "action"), (GROUP, "action_value"), (GROUP, "chosen_action_value")],
    )
    policy = TensorDictSequential(q_net, greedy)
    if cfg.mixer == "qmix":
        mixer = TensorDictModule(
            QMixer(
                state_shape=(n_agents, n_obs),
                mixing_embed_dim=cfg.mixing_embed_dim,
                n_agents=n_agents,
            ),
            # the global state: every agent's observation
            in_keys=[(GROUP, "chosen_action_value"), (GROUP, "observation")],
            out_keys=["chosen_action_value"],
        )
    elif cfg.mixer == "vdn":
        mixer = TensorDictModule(
            VDNMixer(n_agents=n_agents),
            in_keys=[(GROUP, "chosen_action_value")],
            out_keys=["chosen_action_value"],
        )
    else:
        raise ValueError(f"--mixer must be 'qmix' or 'vdn', got {cfg.mixer!r}")
    return policy, mixer


def train(cfg: Config) -> dict:
    """Trains for ``cfg.iters`` batches; returns the per-iteration curve and timings."""
    torch.manual_seed(cfg.seed)
    env = VmasEnv(
        cfg.scenario,
        num_envs=cfg.num_envs,
        continuous_actions=False,
        max_steps=cfg.max_steps,
        seed=cfg.seed,
        n_agents=cfg.n_agents,
    )
    policy, mixer = make_networks(env, cfg)
    frames_per_batch = cfg.num_envs * cfg.steps_per_batch
    total = frames_per_batch * cfg.iters
    explore = EGreedyModule(
        env.full_action_spec,
        eps_init=cfg.eps_init,
        eps_end=cfg.eps_end,
        annealing_num_steps=max(1, total // 2),
        action_key=(GROUP, "action"),
    )
    collector = SyncDataCollector(
        env,
        TensorDictSequential(policy, explore),
        frames_per_batch=frames_per_batch,
        total_frames=total,
    )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.buffer_size),
        sampler=RandomSampler(),
        batch_size=cfg.batch_size,
    )
    loss_fn = QMixerLoss(policy, mixer, delay_value=True)
    loss_fn.make_value_estimator(ValueEstimators.TD0, gamma=cfg.gamma)
    updater = SoftUpdate(loss_fn, tau=cfg.tau)
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr)

    eval_env = VmasEnv(
        cfg.scenario,
        num_envs=cfg.eval_envs,
        continuous_actions=False,
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
        # the mixer regresses one team value: the team reward is the agents' mean
        batch.set(("next", "reward"), batch.get(("next", GROUP, "reward")).mean(-2))
        buffer.extend(batch.reshape(-1))
        losses = []
        for _ in range(cfg.updates_per_batch):
            loss = loss_fn(buffer.sample())["loss"]
            optim.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(loss_fn.parameters(), cfg.max_grad_norm)
            optim.step()
            updater.step()
            losses.append(loss.detach())
        explore.step(batch.numel())
        collector.update_policy_weights_()
        point = {
            "iter": i,
            "frames": frames,
            "reward": float(batch.get(("next", GROUP, "reward")).mean()),
            "loss": float(torch.stack(losses).mean()),
            "eps": round(float(explore.eps), 3),
            "wall_s": round(time.perf_counter() - start, 2),
        }
        if (i + 1) % cfg.eval_every == 0 or i + 1 == cfg.iters:
            point["eval_return"] = evaluate_agents(eval_env, policy, cfg.max_steps, GROUP)
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
    # per-step rewards swing with the episode phase: compare whole episodes of batches
    k = max(1, cfg.max_steps // cfg.steps_per_batch)
    rewards = [p["reward"] for p in out["curve"]]
    first, last = sum(rewards[:k]) / len(rewards[:k]), sum(rewards[-k:]) / len(rewards[-k:])
    print(
        f"{cfg.mixer.upper()} {cfg.scenario}: mean reward per agent-step {first:.4f} (first episode) -> "
        f"{last:.4f} (last) in {out['frames']} frames ({out['wall_s']:.0f} s)"
    )
    title = f"{cfg.mixer.upper()} VMAS {cfg.scenario} ({cfg.n_agents} agents)"
    history = {"eval": out["evals"], "frames": out["frames"], "wall": out["wall_s"]}
    plot_curve(history, os.path.join(cfg.out, f"{cfg.mixer}_vmas.png"), title)
    report(title, history, None, out["evals"][-1][1], episodes=cfg.eval_envs)


if __name__ == "__main__":
    main()
