"""PPO on Atari (Pong by default): the Nature-DQN CNN, GAE over lives, the clipped PPO loss.

``make_atari_env`` builds the games with the standard preprocessing (no-op starts, 4 frames per
step max-pooled, grey 84x84, 4 stacked frames, rewards clipped to their sign, a life lost marked
``"end-of-life"``). A ``SyncDataCollector`` steps ``num_envs`` games with the stochastic policy;
GAE treats a lost life as the end of an episode (its ``done``/``terminated`` keys read
``"end-of-life"``); ``epochs`` passes of minibatch gradient steps on the clipped objective follow,
with the learning rate and the clip range annealed linearly to 0. Actor and critic share the CNN
trunk (an ``ActorValueOperator``). Training episodes are whole games (unclipped score).

The defaults are a 2-core smoke run (a few minutes, no learning to speak of). ``--published
true`` switches to the settings of Schulman et al. (2017) for Atari: 8 games, 128 steps per
batch, 3 epochs of 4 minibatches of 256 steps, lr 2.5e-4, clip 0.1, gamma 0.99, lambda 0.95, entropy 0.01, value coefficient 1, 10M steps
(40M frames); Pong reaches about +20 there, a day or more of CPU time on 2 cores.

``--device cuda`` puts the networks, the loss and the collected batches on the GPU while the
games run on the CPU (``--parallel true`` spreads them over worker processes); ``--max-wall-s S``
stops training after ``S`` seconds, whatever is left of the frame budget (the learning rate and
clip range still anneal over ``--frames``).

Usage: ``python examples/ppo_atari.py [--env-name ALE/Pong-v5] [--frames N] [--published true]
[--device cuda] [--parallel true] [--max-wall-s S] [--out DIR]``.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass

import torch
from _common import episode_returns, evaluate, parse_config, plot_curve, report
from tensordict.nn import TensorDictModule
from torch import nn
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.envs.libs.atari import make_atari_env
from torchrl.modules import MLP, ActorValueOperator, ConvNet, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

PUBLISHED = {
    "frames": 10_000_000,
    "num_envs": 8,
    "steps_per_env": 128,
    "epochs": 3,
    "minibatch_size": 256,
    "lr": 2.5e-4,
    "clip_epsilon": 0.1,
    "entropy_coef": 0.01,
    "critic_coef": 1.0,
    "eval_every": 500_000,
}


@dataclass
class Config:
    env_name: str = "ALE/Pong-v5"
    frames: int = 8_192  # env steps (each 4 emulator frames)
    num_envs: int = 4
    steps_per_env: int = 64  # frames per batch = num_envs * steps_per_env
    epochs: int = 3
    minibatch_size: int = 64
    lr: float = 2.5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_epsilon: float = 0.1
    entropy_coef: float = 0.01
    critic_coef: float = 1.0
    max_grad_norm: float = 0.5
    anneal: bool = True  # lr and clip range decay linearly to 0
    eval_every: int = 1_000_000  # frames between deterministic evaluations (smoke: none)
    eval_episodes: int = 2
    eval_max_steps: int = 27_000  # 108k emulator frames: ALE's cap on an episode
    final_eval_episodes: int = 2
    parallel: bool = False  # games in worker processes (ParallelEnv) instead of this one
    device: str = "cpu"  # networks, loss and batches ("cuda": games stay on the CPU)
    max_wall_s: float = 0.0  # stop training after this many seconds (0: the frame budget only)
    published: bool = False
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_agent(env) -> tuple[ActorValueOperator, ProbabilisticActor, ValueOperator]:
    n_frames = env.observation_spec["pixels"].shape[-3]
    n_actions = int(env.action_spec.space.n)
    trunk = nn.Sequential(
        ConvNet(
            in_features=n_frames,
            num_cells=[32, 64, 64],
            kernel_sizes=[8, 4, 3],
            strides=[4, 2, 1],
            activation_class=nn.ReLU,
        ),
        MLP(
            in_features=3136,
            out_features=512,
            num_cells=[],
            activation_class=nn.ReLU,
            activate_last_layer=True,
        ),
    )
    common = TensorDictModule(trunk, in_keys=["pixels"], out_keys=["hidden"])
    policy = ProbabilisticActor(
        TensorDictModule(nn.Linear(512, n_actions), in_keys=["hidden"], out_keys=["logits"]),
        in_keys=["logits"],
        spec=env.action_spec,
        distribution_class=torch.distributions.Categorical,
        distribution_kwargs={"validate_args": False},
        return_log_prob=True,
    )
    value = ValueOperator(nn.Linear(512, 1), in_keys=["hidden"])
    agent = ActorValueOperator(common, policy, value)
    return agent, agent.get_policy_operator(), agent.get_value_operator()


def make_env(cfg: Config, n: int, seed: int, train: bool = True):
    # evaluation plays whole games and adds up their unclipped scores
    env = make_atari_env(
        cfg.env_name,
        n,
        parallel=cfg.parallel and train,
        track_return=True,
        episodic_life=train,
        clip_rewards=train,
    )
    env.set_seed(seed)
    return env


def _on_cpu(actor: ProbabilisticActor) -> ProbabilisticActor:
    """The actor itself on the CPU, else a CPU copy: evaluation games run on the CPU."""
    if next(actor.parameters()).device.type == "cpu":
        return actor
    return copy.deepcopy(actor).to("cpu")


def train(cfg: Config) -> dict:
    if cfg.published:
        cfg = dataclasses.replace(cfg, **PUBLISHED)
    torch.manual_seed(cfg.seed)
    env = make_env(cfg, cfg.num_envs, cfg.seed)
    agent, actor, critic = make_agent(env)
    agent.to(cfg.device)

    frames_per_batch = cfg.num_envs * cfg.steps_per_env
    collector = SyncDataCollector(
        env,
        actor,
        frames_per_batch=frames_per_batch,
        total_frames=cfg.frames,
        env_device="cpu",
        policy_device=cfg.device,
        storing_device=cfg.device,
    )
    # a lost life ends the episode for the value estimate, as in the published setup
    advantage = GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic)
    advantage.set_keys(done="end-of-life", terminated="end-of-life")
    loss_fn = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip_epsilon,
        entropy_coef=cfg.entropy_coef,
        entropy_bonus=cfg.entropy_coef > 0,
        normalize_advantage=True,
        loss_critic_type="l2",
        critic_coef=cfg.critic_coef,
    )
    loss_fn.to(cfg.device)  # its own buffers too
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr, eps=1e-5)
    n_updates = max(1, cfg.frames // frames_per_batch)

    history: dict = {"train": [], "eval": [], "solved_at": None}
    frames, next_eval, update = 0, cfg.eval_every, 0
    start = time.perf_counter()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="PPO Atari")
    for batch in collector:
        n = batch.numel()
        frames += n
        if cfg.anneal:
            left = 1.0 - update / n_updates
            for group in optim.param_groups:
                group["lr"] = cfg.lr * left
            loss_fn.clip_epsilon = cfg.clip_epsilon * max(left, 1e-3)
        with torch.no_grad():
            advantage(batch)
        flat = batch.reshape(-1)
        for _ in range(cfg.epochs):
            for idx in torch.randperm(n).split(cfg.minibatch_size):
                losses = loss_fn(flat[idx])
                loss = losses["loss_objective"] + losses["loss_critic"]
                if "loss_entropy" in losses.keys():
                    loss = loss + losses["loss_entropy"]
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(loss_fn.parameters(), cfg.max_grad_norm)
                optim.step()
        collector.update_policy_weights_()
        update += 1

        history["train"] += episode_returns(batch, frames)
        bar.update(n)
        if frames >= next_eval:
            next_eval += cfg.eval_every
            eval_env = make_env(cfg, cfg.eval_episodes, cfg.seed + 10_000, train=False)
            ret = evaluate(eval_env, _on_cpu(actor), cfg.eval_max_steps)
            eval_env.close()
            history["eval"].append((frames, ret))
            bar.set_postfix(eval_return=f"{ret:.1f}")
        if cfg.max_wall_s and time.perf_counter() - start >= cfg.max_wall_s:
            break
    history["wall"] = time.perf_counter() - start
    history["frames"] = frames
    bar.close()
    collector.shutdown()
    final_env = make_env(cfg, cfg.final_eval_episodes, cfg.seed + 20_000, train=False)
    history["final_return"] = evaluate(final_env, _on_cpu(actor), cfg.eval_max_steps)
    final_env.close()
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small batches: more threads only add overhead on small machines
    history = train(cfg)
    name = cfg.env_name.split("/")[-1]
    plot_curve(history, f"{cfg.out}/ppo_atari.png", f"PPO, {name}", xlabel="env steps (x4 frames)")
    report(f"PPO {name}", history, None, history["final_return"], cfg.final_eval_episodes)


if __name__ == "__main__":
    main()
