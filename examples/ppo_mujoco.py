"""PPO on a gymnasium MuJoCo task (HalfCheetah-v5 by default, ``--env-name Hopper-v5`` too).

The usual MuJoCo recipe (Schulman et al., 2017; the defaults of most libraries): separate
actor and critic networks of two 64-unit tanh layers, a Gaussian policy whose mean comes from
the network and whose log standard deviation is a free parameter, 2048 steps per batch, 10
epochs of minibatches of 64, Adam at 3e-4, GAE with ``gamma=0.99`` and ``lambda=0.95``, a clip
range of 0.2, no entropy bonus and gradients clipped to norm 0.5. Observations are normalized
by running statistics (``VecNorm``; the evaluation env reads the same statistics, frozen) and
clipped to ``[-10, 10]``; rewards are multiplied by ``reward_scale`` so that the critic's
targets stay of order one. Actions are clipped to the action bounds on their way into the
simulator (``ClipTransform`` on the action); the collected batch keeps the unclipped sample,
whose log-probability is the one the policy computed.

Every ``eval_every`` frames the deterministic policy (the mean action) plays
``eval_episodes`` full episodes. Nothing stops training early: MuJoCo tasks have no "solved"
score. Needs ``mujoco`` (``pip install "gymnasium[mujoco]"``). 100k frames take about 2 min
of CPU time on one core; by then HalfCheetah-v5 training episodes return 500-600 (random play:
about -300) and the deterministic policy 450-940 (10 episodes, seeds 0 and 1; its evaluations
swing widely from one to the next at this stage).

Usage: ``python examples/ppo_mujoco.py [--env-name Hopper-v5] [--frames N] [--seed S]
[--out DIR]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from _common import episode_returns, evaluate, parse_config, plot_curve, report
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.envs import (
    ClipTransform,
    Compose,
    DoubleToFloat,
    GymEnv,
    RewardScaling,
    RewardSum,
    TransformedEnv,
    VecNorm,
)
from torchrl.modules import (
    MLP,
    AddStateIndependentNormalScale,
    IndependentNormal,
    ProbabilisticActor,
    ValueOperator,
)
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE


@dataclass
class Config:
    env_name: str = "HalfCheetah-v5"
    frames: int = 1_000_000
    steps_per_batch: int = 2048
    epochs: int = 10
    minibatch_size: int = 64
    lr: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_epsilon: float = 0.2
    critic_coef: float = 0.5
    max_grad_norm: float = 0.5
    reward_scale: float = 0.1
    hidden: int = 64
    max_episode_steps: int = 1000  # gymnasium's time limit for the MuJoCo tasks
    eval_every: int = 20_480
    eval_episodes: int = 5
    final_eval_episodes: int = 10
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_env(
    name: str, stats: TensorDictBase, reward_scale: float | None, num_envs: int | None = None
) -> TransformedEnv:
    """A MuJoCo env with observations normalized by ``stats``; for training if ``reward_scale``.

    The training env updates the statistics and scales its rewards; an evaluation env
    (``reward_scale=None``) only reads the statistics and returns the true rewards.
    """
    env = GymEnv(name) if num_envs is None else GymEnv(name, num_envs=num_envs)
    bounds = env.action_spec.space
    vecnorm = VecNorm(in_keys=["observation"], shared_data=stats, decay=0.99999, eps=1e-2)
    transforms = [
        DoubleToFloat(),  # MuJoCo observations are float64; the networks are float32
        ClipTransform(in_keys_inv=["action"], low=bounds.low, high=bounds.high),
        vecnorm if reward_scale is not None else vecnorm.freeze(),
        ClipTransform(in_keys=["observation"], low=-10.0, high=10.0),
        RewardSum(),  # the true episode return, before any scaling
    ]
    if reward_scale is not None:
        transforms.append(RewardScaling(loc=0.0, scale=reward_scale))
    return TransformedEnv(env, Compose(*transforms))


def make_agent(env: TransformedEnv, hidden: int) -> tuple[ProbabilisticActor, ValueOperator]:
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    policy_net = MLP(
        in_features=n_obs, out_features=n_act, num_cells=[hidden, hidden], activation_class=nn.Tanh
    )
    actor = ProbabilisticActor(
        TensorDictModule(
            # the mean from the network, a learned state-independent scale beside it
            nn.Sequential(policy_net, AddStateIndependentNormalScale(n_act)),
            in_keys=["observation"],
            out_keys=["loc", "scale"],
        ),
        in_keys=["loc", "scale"],
        spec=env.action_spec,
        distribution_class=IndependentNormal,
        return_log_prob=True,
    )
    value_net = MLP(
        in_features=n_obs, out_features=1, num_cells=[hidden, hidden], activation_class=nn.Tanh
    )
    return actor, ValueOperator(value_net, in_keys=["observation"])


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    # One set of running statistics: the training env updates them, the evaluation envs only
    # read them (their VecNorm is frozen), so both see the same normalization.
    stats = VecNorm.build_td_for_shared_vecnorm(
        TransformedEnv(GymEnv(cfg.env_name), DoubleToFloat()), keys=["observation"]
    )
    env = make_env(cfg.env_name, stats, cfg.reward_scale)
    env.set_seed(cfg.seed)
    eval_env = make_env(cfg.env_name, stats, None, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    actor, critic = make_agent(env, cfg.hidden)

    collector = SyncDataCollector(
        env, actor, frames_per_batch=cfg.steps_per_batch, total_frames=cfg.frames
    )
    advantage = GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic)
    loss_fn = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip_epsilon,
        entropy_bonus=False,
        normalize_advantage=True,
        loss_critic_type="l2",
        critic_coef=cfg.critic_coef,
    )
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr, eps=1e-5)

    history: dict = {"train": [], "eval": []}
    frames, next_eval = 0, cfg.eval_every
    start = time.perf_counter()
    bar = tqdm(
        total=cfg.frames, unit="frames", disable=not cfg.progress, desc=f"PPO {cfg.env_name}"
    )
    for batch in collector:
        n = batch.numel()
        frames += n
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

        history["train"] += episode_returns(batch, frames)
        bar.update(n)
        if frames >= next_eval:
            next_eval += cfg.eval_every
            ret = evaluate(eval_env, actor, max_steps=cfg.max_episode_steps)
            history["eval"].append((frames, ret))
            bar.set_postfix(eval_return=f"{ret:.0f}")
    history["wall"] = time.perf_counter() - start
    history["frames"] = frames
    bar.close()
    collector.shutdown()
    eval_env.close()
    final_env = make_env(cfg.env_name, stats, None, num_envs=cfg.final_eval_episodes)
    final_env.set_seed(cfg.seed + 20_000)
    history["final_return"] = evaluate(final_env, actor, max_steps=cfg.max_episode_steps)
    final_env.close()
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks gain little from more threads; runs share cores
    history = train(cfg)
    plot_curve(history, f"{cfg.out}/ppo_mujoco.png", f"PPO, {cfg.env_name}")
    report(
        f"PPO {cfg.env_name}",
        history,
        None,
        history["final_return"],
        episodes=cfg.final_eval_episodes,
    )


if __name__ == "__main__":
    main()
