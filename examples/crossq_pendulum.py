"""CrossQ on Pendulum-v1: SAC without target networks, critics with batch renormalisation.

The critics normalise their inputs and hidden layers with ``BatchRenorm1d`` and are evaluated
on the current and next state-action pairs in one joint batch (``CrossQLoss``), which replaces
the target networks of SAC: there is no ``SoftUpdate``. As in the paper, Adam uses
``beta1 = 0.5`` and the actor and temperature are updated once every ``policy_delay`` critic
updates (``loss.qvalue_loss`` / ``loss.actor_loss`` / ``loss.alpha_loss`` called separately).
The collector steps the env with the stochastic actor (uniform random actions for the first
``init_random_frames``). Every ``eval_every`` frames the deterministic policy is evaluated;
training stops at the first evaluation that reaches ``target_return`` and, with ``confirm``, a
second one on fresh episodes agrees. ``--env HalfCheetah-v5`` runs the same recipe on MuJoCo
(no target score there; it needs ``pip install "gymnasium[mujoco]"``).

Usage: ``python examples/crossq_pendulum.py [--env NAME] [--frames N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from _common import (
    episode_returns,
    evaluate,
    evaluate_confirmed,
    parse_config,
    plot_curve,
    report,
)
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import Compose, DoubleToFloat, GymEnv, RewardSum, TransformedEnv
from torchrl.modules import MLP, BatchRenorm1d, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives.crossq import CrossQLoss


@dataclass
class Config:
    env_name: str = "Pendulum-v1"
    frames: int = 30_000  # upper bound; training stops once solved
    frames_per_batch: int = 200
    updates_per_frame: float = 1.0
    init_random_frames: int = 1000
    buffer_size: int = 100_000
    batch_size: int = 256
    lr: float = 1e-3
    adam_beta1: float = 0.5
    gamma: float = 0.99
    policy_delay: int = 3
    actor_hidden: int = 64
    critic_hidden: int = 256
    renorm_warmup: int = 5000  # critic updates of plain batch norm before renormalising
    eval_every: int = 1000
    eval_episodes: int = 5
    confirm: bool = True  # re-check a passing evaluation on fresh episodes before stopping
    final_eval_episodes: int = 10
    target_return: float = -200.0
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_env(name: str, num_envs: int | None = None) -> TransformedEnv:
    # MuJoCo observations are float64; the networks are float32.
    env = GymEnv(name) if num_envs is None else GymEnv(name, num_envs=num_envs)
    return TransformedEnv(env, Compose(DoubleToFloat(), RewardSum()))


def max_episode_steps(name: str) -> int:
    import gymnasium

    return int(gymnasium.spec(name).max_episode_steps or 1000)


def solve_target(cfg: Config) -> float | None:
    """``target_return`` on Pendulum; ``None`` elsewhere (MuJoCo tasks have no solved score)."""
    return cfg.target_return if cfg.env_name.startswith("Pendulum") else None


def make_agent(
    env: TransformedEnv, actor_hidden: int, critic_hidden: int, renorm_warmup: int
) -> tuple[ProbabilisticActor, ValueOperator]:
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    actor_net = nn.Sequential(
        MLP(
            in_features=n_obs,
            out_features=2 * n_act,
            num_cells=[actor_hidden, actor_hidden],
            activation_class=nn.ReLU,
        ),
        NormalParamExtractor(),
    )
    actor = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=env.action_spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": env.action_spec.space.low, "high": env.action_spec.space.high},
    )

    def renorm(n: int) -> BatchRenorm1d:
        return BatchRenorm1d(n, momentum=0.01, warmup_steps=renorm_warmup)

    # Inputs and every hidden layer renormalised, as in the paper's critic.
    critic_net = nn.Sequential(
        renorm(n_obs + n_act),
        nn.Linear(n_obs + n_act, critic_hidden),
        nn.ReLU(),
        renorm(critic_hidden),
        nn.Linear(critic_hidden, critic_hidden),
        nn.ReLU(),
        renorm(critic_hidden),
        nn.Linear(critic_hidden, 1),
    )
    qvalue = ValueOperator(_Concat(critic_net), in_keys=["observation", "action"])
    return actor, qvalue


class _Concat(nn.Module):
    """Runs ``net`` on its inputs concatenated along the last dim."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat(inputs, -1))


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    env = make_env(cfg.env_name)
    env.set_seed(cfg.seed)
    eval_env = make_env(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    episode_steps = max_episode_steps(cfg.env_name)
    target = solve_target(cfg)
    actor, qvalue = make_agent(env, cfg.actor_hidden, cfg.critic_hidden, cfg.renorm_warmup)

    loss_fn = CrossQLoss(actor, qvalue, num_qvalue_nets=2, loss_function="l2")
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    actor_ids = {id(p) for p in actor.parameters()} | {id(loss_fn.log_alpha)}
    critic_params = [p for p in loss_fn.parameters() if id(p) not in actor_ids]
    betas = (cfg.adam_beta1, 0.999)
    critic_optim = torch.optim.Adam(critic_params, lr=cfg.lr, betas=betas)
    actor_optim = torch.optim.Adam([*actor.parameters(), loss_fn.log_alpha], lr=cfg.lr, betas=betas)

    collector = SyncDataCollector(
        env,
        actor,
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.frames,
        init_random_frames=cfg.init_random_frames,
    )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.buffer_size), batch_size=cfg.batch_size
    )

    history: dict = {"train": [], "eval": [], "solved_at": None, "eval_wall": 0.0}
    frames, next_eval, updates = 0, cfg.eval_every, 0
    start, cpu_start = time.perf_counter(), time.process_time()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="CrossQ")
    for batch in collector:
        n = batch.numel()
        frames += n
        buffer.extend(batch.reshape(-1))
        if frames >= cfg.init_random_frames:
            for _ in range(int(n * cfg.updates_per_frame)):
                sample = buffer.sample()
                loss_qvalue, _ = loss_fn.qvalue_loss(sample)
                critic_optim.zero_grad()
                loss_qvalue.backward()
                critic_optim.step()
                updates += 1
                if updates % cfg.policy_delay == 0:
                    loss_actor, info = loss_fn.actor_loss(sample)
                    loss_alpha = loss_fn.alpha_loss(info["log_prob"])
                    actor_optim.zero_grad()
                    (loss_actor + loss_alpha).backward()
                    actor_optim.step()
            collector.update_policy_weights_()

        history["train"] += episode_returns(batch, frames)
        bar.update(n)
        if frames >= next_eval:
            next_eval += cfg.eval_every
            eval_start = time.perf_counter()
            if target is None:
                ret = evaluate(eval_env, actor, episode_steps)
            else:
                ret = evaluate_confirmed(eval_env, actor, episode_steps, target, cfg.confirm)
            history["eval_wall"] += time.perf_counter() - eval_start
            history["eval"].append((frames, ret))
            bar.set_postfix(eval_return=f"{ret:.0f}")
            if target is not None and ret >= target:
                history["solved_at"] = frames
                break
    history["wall"] = time.perf_counter() - start
    history["cpu"] = time.process_time() - cpu_start
    history["frames"] = frames
    bar.close()
    collector.shutdown()
    eval_env.close()
    final_env = make_env(cfg.env_name, num_envs=cfg.final_eval_episodes)
    final_env.set_seed(cfg.seed + 20_000)
    history["final_return"] = evaluate(final_env, actor, max_steps=episode_steps)
    final_env.close()
    history["actor"] = actor
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    target = solve_target(cfg)
    plot_curve(history, f"{cfg.out}/crossq_pendulum.png", f"CrossQ, {cfg.env_name}", target)
    final = history["final_return"]
    report(f"CrossQ {cfg.env_name}", history, target, final, cfg.final_eval_episodes)


if __name__ == "__main__":
    main()
