"""GAIL on CartPole-v1: imitate a PPO expert from its transitions, without the task's reward.

Three stages. (1) An expert is trained with PPO on the true reward (the agent of
``ppo_cartpole.py``) until its deterministic evaluation reaches ``expert_target``. (2) The
expert acts (sampling its actions, which covers more states than its most likely action) for
``expert_frames`` frames; its ``(observation, action)`` pairs go to a replay buffer, and its
deterministic evaluation return is the expert score. (3) A fresh PPO agent learns from the GAIL
reward only: every batch, the discriminator ``D(s, a)`` (the probability that a transition is
the learner's) takes ``disc_steps`` steps of :class:`~torchrl.objectives.GAILLoss` (gradient
penalty on) against as many expert transitions, then the batch's rewards are replaced by
``-log D`` (``GAILLoss.reward``, the paper's reward) and PPO takes its usual steps. Training
stops when a (confirmed) deterministic evaluation on the true reward reaches
``target_fraction`` of the expert score.

A positive reward per step would solve CartPole by itself (surviving is the task), so with
``bootstrap_terminal`` (the default) the end of an episode is treated as a truncation: the
critic's value of the last state stands in for the rest, falling neither ends the rewards nor
stops them, and only looking like the expert pays. ``--reward-kind constant`` is the control:
reward 1 everywhere under the same rule, which does not learn (seed 0: 13.5 after 102k frames).

Usage: ``python examples/gail_cartpole.py [--gail-frames N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from _common import episode_returns, evaluate, evaluate_confirmed, parse_config, plot_curve
from ppo_cartpole import make_agent
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import GymEnv, RewardSum, TransformedEnv
from torchrl.envs.utils import ExplorationType
from torchrl.modules import MLP, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.gail import GAILLoss
from torchrl.objectives.value import GAE


@dataclass
class Config:
    env_name: str = "CartPole-v1"
    expert_frames_max: int = 102_400  # PPO budget of the expert (stops once it is good)
    expert_target: float = 475.0
    expert_frames: int = 4096  # demonstrations stored
    deterministic_expert: bool = False  # demonstrations of the most likely action
    gail_frames: int = 102_400  # upper bound of the imitation stage
    num_envs: int = 8
    steps_per_env: int = 32
    epochs: int = 10
    minibatch_size: int = 256
    lr: float = 2e-3
    gamma: float = 0.98
    gae_lambda: float = 0.8
    clip_epsilon: float = 0.2
    max_grad_norm: float = 0.5
    hidden: int = 64
    disc_hidden: int = 64
    disc_lr: float = 1e-3
    disc_steps: int = 4
    gp_lambda: float = 1.0
    eval_every: int = 2048
    eval_episodes: int = 4
    final_eval_episodes: int = 10
    target_fraction: float = 0.8
    # GAILLoss.reward's kind ("neg_log", "logit"), or "constant" (1 per step: the control)
    reward_kind: str = "neg_log"
    bootstrap_terminal: bool = True
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


class Discriminator(nn.Module):
    """``D(s, a) = sigmoid(MLP([s, a]))``: the probability that a transition is the learner's."""

    def __init__(self, n_in: int, hidden: int) -> None:
        super().__init__()
        self.net = MLP(in_features=n_in, out_features=1, num_cells=[hidden, hidden])

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net(torch.cat([observation, action.float()], -1)))


def ppo_stage(
    cfg: Config,
    actor: ProbabilisticActor,
    critic: ValueOperator,
    frames: int,
    target: float,
    desc: str,
    relabel: Callable[[TensorDictBase], None] | None = None,
) -> dict:
    """PPO until a confirmed deterministic evaluation reaches ``target`` (or ``frames``).

    ``relabel(batch)``, when given, rewrites each batch's ``("next", "reward")`` before the
    advantages are computed (the GAIL stage); evaluations always use the task's reward.
    """
    env = TransformedEnv(GymEnv(cfg.env_name, num_envs=cfg.num_envs), RewardSum())
    env.set_seed(cfg.seed)
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    collector = SyncDataCollector(
        env, actor, frames_per_batch=cfg.num_envs * cfg.steps_per_env, total_frames=frames
    )
    advantage = GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic)
    loss_fn = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip_epsilon,
        entropy_bonus=False,
        normalize_advantage=True,
        loss_critic_type="l2",
        critic_coef=0.5,
    )
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr)
    history: dict = {"train": [], "eval": [], "solved_at": None}
    done_frames, next_eval = 0, cfg.eval_every
    start = time.perf_counter()
    bar = tqdm(total=frames, unit="frames", disable=not cfg.progress, desc=desc)
    for batch in collector:
        n = batch.numel()
        done_frames += n
        # Training returns are those of the task's reward (RewardSum runs inside the env).
        history["train"] += episode_returns(batch, done_frames)
        if relabel is not None:
            relabel(batch)
        with torch.no_grad():
            advantage(batch)
        flat = batch.reshape(-1)
        for _ in range(cfg.epochs):
            for idx in torch.randperm(n).split(cfg.minibatch_size):
                losses = loss_fn(flat[idx])
                loss = losses["loss_objective"] + losses["loss_critic"]
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(loss_fn.parameters(), cfg.max_grad_norm)
                optim.step()
        collector.update_policy_weights_()
        bar.update(n)
        if done_frames >= next_eval:
            next_eval += cfg.eval_every
            ret = evaluate_confirmed(eval_env, actor, 500, target)
            history["eval"].append((done_frames, ret))
            bar.set_postfix(eval_return=f"{ret:.0f}")
            if ret >= target:
                history["solved_at"] = done_frames
                break
    bar.close()
    collector.shutdown()
    eval_env.close()
    history["frames"] = done_frames
    history["wall"] = time.perf_counter() - start
    return history


def collect_demonstrations(cfg: Config, expert: ProbabilisticActor) -> TensorDictReplayBuffer:
    """``expert_frames`` transitions of the deterministic expert, in a replay buffer."""
    env = GymEnv(cfg.env_name, num_envs=cfg.num_envs)
    env.set_seed(cfg.seed + 30_000)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(cfg.expert_frames))
    collector = SyncDataCollector(
        env,
        expert,
        frames_per_batch=cfg.num_envs * cfg.steps_per_env,
        total_frames=cfg.expert_frames,
        exploration_type=(
            ExplorationType.DETERMINISTIC if cfg.deterministic_expert else ExplorationType.RANDOM
        ),
    )
    for batch in collector:
        buffer.extend(batch.reshape(-1).select("observation", "action"))
    collector.shutdown()
    return buffer


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    probe = GymEnv(cfg.env_name)
    n_obs = probe.observation_spec["observation"].shape[-1]
    n_act = probe.action_spec.shape[-1]

    # (1) The expert: PPO on the true reward.
    expert, expert_critic = make_agent(probe, cfg.hidden)
    expert_hist = ppo_stage(
        cfg, expert, expert_critic, cfg.expert_frames_max, cfg.expert_target, "PPO expert"
    )
    final_env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
    final_env.set_seed(cfg.seed + 20_000)
    expert_return = evaluate(final_env, expert, max_steps=500)

    # (2) Demonstrations.
    demos = collect_demonstrations(cfg, expert)

    # (3) GAIL: a fresh learner, rewarded by the discriminator only.
    actor, critic = make_agent(probe, cfg.hidden)
    probe.close()
    disc = TensorDictModule(
        Discriminator(n_obs + n_act, cfg.disc_hidden),
        in_keys=["observation", "action"],
        out_keys=["d_logits"],
    )
    gail = GAILLoss(disc, use_grad_penalty=cfg.gp_lambda > 0, gp_lambda=cfg.gp_lambda)
    disc_optim = torch.optim.Adam(gail.parameters(), lr=cfg.disc_lr)
    disc_log: list[float] = []

    def relabel(batch: TensorDictBase) -> None:
        flat = batch.reshape(-1)
        for idx in torch.randperm(flat.shape[0]).chunk(cfg.disc_steps):
            data = demos.sample(len(idx)).select("observation", "action")
            data["collector_observation"] = flat["observation"][idx]
            data["collector_action"] = flat["action"][idx]
            loss = gail(data)["loss"]
            disc_optim.zero_grad()
            loss.backward()
            disc_optim.step()
            disc_log.append(loss.item())
        if cfg.reward_kind == "constant":
            batch["next", "reward"] = torch.ones_like(batch["next", "reward"])
        else:
            kind = cfg.reward_kind
            batch["next", "reward"] = gail.reward(batch, kind=kind)  # type: ignore[arg-type]
        if cfg.bootstrap_terminal:
            # The imitation reward is not defined past the end of an episode: bootstrapping
            # with the critic there makes the episode's end neither a loss of future positive
            # rewards (a survival bonus) nor an escape from negative ones.
            batch["next", "terminated"] = torch.zeros_like(batch["next", "terminated"])

    target = cfg.target_fraction * expert_return
    history = ppo_stage(cfg, actor, critic, cfg.gail_frames, target, "GAIL", relabel)
    history["final_return"] = evaluate(final_env, actor, max_steps=500)
    final_env.close()
    history.update(
        expert_return=expert_return,
        expert_frames=expert_hist["frames"],
        expert_wall=expert_hist["wall"],
        target=target,
        disc_loss=disc_log,
    )
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)
    history = train(cfg)
    plot_curve(
        history,
        f"{cfg.out}/gail_cartpole.png",
        "GAIL (PPO on the discriminator's reward), CartPole-v1",
        target=history["target"],
        target_label=f"{cfg.target_fraction:.0%} of the expert",
    )
    solved = history["solved_at"]
    print(
        f"GAIL CartPole-v1: expert return {history['expert_return']:.1f} "
        f"({history['expert_frames']} PPO frames, {history['expert_wall']:.1f} s); "
        f"final deterministic evaluation return {history['final_return']:.1f} "
        f"(target {history['target']:.1f}); "
        + (f"reached at {solved} frames" if solved is not None else "target not reached")
        + f"; {history['frames']} GAIL frames in {history['wall']:.1f} s"
    )


if __name__ == "__main__":
    main()
