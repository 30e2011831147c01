"""DQN on Atari (Pong by default): the Nature-DQN network, a replay buffer, a target network.

``make_atari_env`` builds the games with the standard preprocessing (no-op starts, 4 frames per
step max-pooled, grey 84x84, 4 stacked frames, rewards clipped to their sign, a life lost marked
``"end-of-life"``). The collector steps the games with an epsilon-greedy policy (epsilon
annealed from 1 to ``eps_end``); transitions go into the replay buffer with their frames stored
as uint8 (a quarter of the memory of floats); every ``train_every`` steps one gradient step of
the DQN loss (Huber, double DQN optional) follows on a sampled minibatch, and the target network
copies the online one every ``target_update_interval`` gradient steps. A lost life is a terminal
state for the bootstrap (``loss.set_keys(done=..., terminated="end-of-life")``); training
episodes are whole games (unclipped score).

The defaults are a 2-core smoke run (a few minutes, no learning to speak of). ``--published
true`` switches to Mnih et al. (2015): replay of 1M steps (about 56 GB of uint8 frames: use a
machine with the memory, or a memory-mapped storage), batches of 32, one update every 4 steps,
lr 2.5e-4 (Adam here, RMSProp in the paper), 50k random steps first, epsilon 1 -> 0.1 over 1M
steps, target update every 10k updates, 50M steps (200M frames).

Usage: ``python examples/dqn_atari.py [--env-name ALE/Pong-v5] [--frames N] [--published true]
[--out DIR]``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch
from _common import episode_returns, evaluate, parse_config, plot_curve, report
from tensordict.nn import TensorDictSequential
from torch import nn
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs.libs.atari import make_atari_env
from torchrl.modules import MLP, ConvNet, EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, HardUpdate

PUBLISHED = {
    "frames": 50_000_000,
    "num_envs": 1,
    "frames_per_batch": 4,
    "train_every": 4,
    "buffer_size": 1_000_000,
    "batch_size": 32,
    "init_random_frames": 50_000,
    "eps_frames": 1_000_000,
    "eps_end": 0.1,
    "target_update_interval": 10_000,
    "eval_every": 1_000_000,
}
# what the loss reads from a stored transition
KEEP = ["pixels", "action", ("next", "pixels"), ("next", "reward"), ("next", "end-of-life")]


@dataclass
class Config:
    env_name: str = "ALE/Pong-v5"
    frames: int = 4_096  # env steps (each 4 emulator frames)
    num_envs: int = 4
    frames_per_batch: int = 64
    train_every: int = 4  # env steps per gradient step
    init_random_frames: int = 1_024
    buffer_size: int = 4_096
    batch_size: int = 32
    lr: float = 2.5e-4
    gamma: float = 0.99
    eps_end: float = 0.1
    eps_frames: int = 4_096  # env steps over which epsilon anneals to eps_end
    target_update_interval: int = 500  # gradient steps
    double_dqn: bool = False
    eval_every: int = 1_000_000  # env steps between evaluations (smoke: none)
    eval_episodes: int = 2
    eval_max_steps: int = 27_000  # 108k emulator frames: ALE's cap on an episode
    final_eval_episodes: int = 2
    published: bool = False
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_qnet(env) -> QValueActor:
    net = nn.Sequential(
        ConvNet(
            in_features=env.observation_spec["pixels"].shape[-3],
            num_cells=[32, 64, 64],
            kernel_sizes=[8, 4, 3],
            strides=[4, 2, 1],
            activation_class=nn.ReLU,
        ),
        MLP(
            in_features=3136,
            out_features=int(env.action_spec.space.n),
            num_cells=[512],
            activation_class=nn.ReLU,
        ),
    )
    return QValueActor(net, in_keys=["pixels"], spec=env.action_spec)


def make_env(cfg: Config, n: int, seed: int, train: bool = True):
    # evaluation plays whole games and adds up their unclipped scores
    env = make_atari_env(
        cfg.env_name, n, track_return=True, episodic_life=train, clip_rewards=train
    )
    env.set_seed(seed)
    return env


def to_uint8(frames: torch.Tensor) -> torch.Tensor:
    return frames.mul(255).round_().to(torch.uint8)


def train(cfg: Config) -> dict:
    if cfg.published:
        cfg = dataclasses.replace(cfg, **PUBLISHED)
    torch.manual_seed(cfg.seed)
    env = make_env(cfg, cfg.num_envs, cfg.seed)
    greedy = make_qnet(env)
    egreedy = EGreedyModule(
        env.action_spec, eps_init=1.0, eps_end=cfg.eps_end, annealing_num_steps=cfg.eps_frames
    )
    policy = TensorDictSequential(greedy, egreedy)

    loss_fn = DQNLoss(
        greedy, delay_value=True, double_dqn=cfg.double_dqn, loss_function="smooth_l1"
    )
    loss_fn.set_keys(done="end-of-life", terminated="end-of-life")
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    target_updater = HardUpdate(loss_fn, value_network_update_interval=cfg.target_update_interval)
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr, eps=1.5e-4)

    collector = SyncDataCollector(
        env,
        policy,
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.frames,
        init_random_frames=cfg.init_random_frames,
    )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.buffer_size), batch_size=cfg.batch_size
    )

    history: dict = {"train": [], "eval": [], "solved_at": None}
    frames, next_eval, pending = 0, cfg.eval_every, 0.0
    start = time.perf_counter()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="DQN Atari")
    for batch in collector:
        n = batch.numel()
        frames += n
        stored = batch.select(*KEEP).reshape(-1)
        stored["pixels"] = to_uint8(stored["pixels"])
        stored["next", "pixels"] = to_uint8(stored["next", "pixels"])
        buffer.extend(stored)
        egreedy.step(n)
        if frames >= cfg.init_random_frames:
            pending += n / cfg.train_every
            while pending >= 1:
                pending -= 1
                sample = buffer.sample()
                sample["pixels"] = sample["pixels"].float().div_(255)
                sample["next", "pixels"] = sample["next", "pixels"].float().div_(255)
                loss = loss_fn(sample)["loss"]
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(loss_fn.parameters(), 10.0)
                optim.step()
                target_updater.step()
            collector.update_policy_weights_()

        history["train"] += episode_returns(batch, frames)
        bar.update(n)
        if frames >= next_eval:
            next_eval += cfg.eval_every
            eval_env = make_env(cfg, cfg.eval_episodes, cfg.seed + 10_000, train=False)
            ret = evaluate(eval_env, greedy, cfg.eval_max_steps)
            eval_env.close()
            history["eval"].append((frames, ret))
            bar.set_postfix(eval_return=f"{ret:.1f}", eps=f"{float(egreedy.eps):.2f}")
    history["wall"] = time.perf_counter() - start
    history["frames"] = frames
    bar.close()
    collector.shutdown()
    final_env = make_env(cfg, cfg.final_eval_episodes, cfg.seed + 20_000, train=False)
    history["final_return"] = evaluate(final_env, greedy, cfg.eval_max_steps)
    final_env.close()
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small batches: more threads only add overhead on small machines
    history = train(cfg)
    name = cfg.env_name.split("/")[-1]
    plot_curve(history, f"{cfg.out}/dqn_atari.png", f"DQN, {name}", xlabel="env steps (x4 frames)")
    report(f"DQN {name}", history, None, history["final_return"], cfg.final_eval_episodes)


if __name__ == "__main__":
    main()
