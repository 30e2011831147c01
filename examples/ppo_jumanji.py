"""PPO on jumanji's Snake (6x6 board): a vmapped JAX env feeding a torch policy.

``JumanjiEnv("Snake-v1", num_rows=6, num_cols=6, batch_size=[n])`` steps ``n`` snakes in one
jitted, vmapped JAX call and hands the boards to torch through DLPack. The policy reads the
flattened ``"grid"`` (6x6x5 one-hot planes) and samples only legal moves: a
``MaskedCategorical`` reads the env's ``"action_mask"``. The rest is the PPO loop of
``ppo_cartpole.py``: a collector, GAE, the clipped loss, Adam. The reward is 1 per fruit eaten;
an episode ends when the snake hits a wall or itself, or after ``time_limit`` steps.

At the end the deterministic policy (most likely legal move) and a uniformly random legal
policy play the same number of fresh episodes; the example prints both mean returns.

Usage: ``python examples/ppo_jumanji.py [--frames N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from _common import episode_returns, evaluate, parse_config, plot_curve, report
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.envs import RewardSum, TransformedEnv
from torchrl.envs.libs.jumanji import JumanjiEnv
from torchrl.modules import MLP, MaskedCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE


@dataclass
class Config:
    frames: int = 81_920
    board: int = 6
    time_limit: int = 100
    num_envs: int = 32
    steps_per_env: int = 64  # frames per batch = num_envs * steps_per_env
    epochs: int = 4
    minibatch_size: int = 512
    lr: float = 1e-3
    gamma: float = 0.97
    gae_lambda: float = 0.9
    clip_epsilon: float = 0.2
    entropy_coef: float = 0.01
    max_grad_norm: float = 0.5
    hidden: int = 128
    eval_every: int = 20_480
    eval_episodes: int = 32
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_env(cfg: Config, num_envs: int) -> JumanjiEnv:
    return JumanjiEnv(
        "Snake-v1",
        categorical_action_encoding=True,
        num_rows=cfg.board,
        num_cols=cfg.board,
        time_limit=cfg.time_limit,
        batch_size=[num_envs],
    )


def make_agent(env: JumanjiEnv, hidden: int) -> tuple[ProbabilisticActor, ValueOperator]:
    n_obs = env.observation_spec["grid"].shape[1:].numel()
    n_act = env.action_spec.n
    flat = TensorDictModule(lambda g: g.flatten(-3), in_keys=["grid"], out_keys=["flat_grid"])
    legal = TensorDictModule(legal_moves, in_keys=["action_mask"], out_keys=["legal"])
    policy_net = MLP(
        in_features=n_obs, out_features=n_act, num_cells=[hidden, hidden], activation_class=nn.Tanh
    )
    logits = TensorDictModule(policy_net, in_keys=["flat_grid"], out_keys=["logits"])
    actor = ProbabilisticActor(
        TensorDictSequential(flat, legal, logits),
        in_keys={"logits": "logits", "mask": "legal"},
        spec=env.action_spec,
        distribution_class=MaskedCategorical,
        # a finite logit for illegal moves: with -inf, the entropy's gradient is NaN
        distribution_kwargs={"neg_inf": -1e8},
        return_log_prob=True,
    )
    value_net = MLP(
        in_features=n_obs, out_features=1, num_cells=[hidden, hidden], activation_class=nn.Tanh
    )
    critic = ValueOperator(nn.Sequential(nn.Flatten(-3), value_net), in_keys=["grid"])
    return actor, critic


def legal_moves(mask: torch.Tensor) -> torch.Tensor:
    """The action mask, with every move allowed where none is legal.

    A snake that has boxed itself in has no legal move left but is not dead yet: its next move,
    whichever, ends the episode.
    """
    return mask | ~mask.any(-1, keepdim=True)


def random_legal_policy(td):
    """A uniformly random legal move (the baseline)."""
    mask = legal_moves(td["action_mask"])
    return td.set("action", MaskedCategorical(logits=torch.zeros(mask.shape), mask=mask).sample())


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    env = TransformedEnv(make_env(cfg, cfg.num_envs), RewardSum())
    env.set_seed(cfg.seed)
    eval_env = make_env(cfg, cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    actor, critic = make_agent(env, cfg.hidden)

    collector = SyncDataCollector(
        env, actor, frames_per_batch=cfg.num_envs * cfg.steps_per_env, total_frames=cfg.frames
    )
    advantage = GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic)
    loss_fn = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip_epsilon,
        entropy_coef=cfg.entropy_coef,
        entropy_bonus=cfg.entropy_coef > 0,
        normalize_advantage=True,
        loss_critic_type="l2",
        critic_coef=0.5,
    )
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr)

    history: dict = {"train": [], "eval": [], "solved_at": None}
    frames, next_eval = 0, cfg.eval_every
    start = time.perf_counter()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="PPO Snake")
    for batch in collector:
        n = batch.numel()
        frames += n
        with torch.no_grad():
            advantage(batch)
        flat = batch.reshape(-1)
        for _ in range(cfg.epochs):
            for idx in torch.randperm(n).split(cfg.minibatch_size):
                losses = loss_fn(flat[idx])
                loss = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(loss_fn.parameters(), cfg.max_grad_norm)
                optim.step()
        collector.update_policy_weights_()
        history["train"] += episode_returns(batch, frames)
        bar.update(n)
        if frames >= next_eval:
            next_eval += cfg.eval_every
            ret = evaluate(eval_env, actor, cfg.time_limit)
            history["eval"].append((frames, ret))
            bar.set_postfix(eval_return=f"{ret:.2f}")
    bar.close()
    collector.shutdown()
    history["wall"] = time.perf_counter() - start
    history["frames"] = frames
    eval_env.set_seed(cfg.seed + 20_000)
    history["final_return"] = evaluate(eval_env, actor, cfg.time_limit)
    eval_env.set_seed(cfg.seed + 20_000)
    history["random_return"] = evaluate(eval_env, random_legal_policy, cfg.time_limit)
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)
    history = train(cfg)
    plot_curve(history, f"{cfg.out}/ppo_jumanji.png", "PPO, jumanji Snake 6x6")
    report("PPO jumanji Snake-6x6", history, None, history["final_return"], cfg.eval_episodes)
    print(f"random legal moves: {history['random_return']:.2f} fruits per episode")


if __name__ == "__main__":
    main()
