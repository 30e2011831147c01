"""Decision Transformer on Pendulum-v1 from a dataset file (``--data d4rl:PATH | minari:ID``).

Offline RL as sequence modelling (Chen et al., 2021). Each stored transition gets its
undiscounted return-to-go (``Reward2GoTransform`` over the dataset's episodes); a
:class:`~torchrl.data.SliceSampler` draws windows of ``context`` consecutive steps of one episode
(by the ``"episode"`` ids the readers write); :class:`~torchrl.modules.DTActor` (a
:class:`~torchrl.modules.DecisionTransformer` over (return-to-go, state, action) tokens and a tanh
head) predicts each step's action from the window up to that state, trained with
:class:`~torchrl.objectives.DTLoss`. Observations are standardised with the dataset's statistics,
actions scaled to [-1, 1] and returns divided by ``return_scale``.

At evaluation the env's :class:`~torchrl.envs.TargetReturn` transform starts every episode at the
target return (default: the best episode return in the dataset) and lowers it by each reward;
the last ``context`` observations, targets and actions are the model's input, and it acts with
its prediction at the latest state. Sequences shorter than ``context`` (an episode's first
steps) are fed as they are; the causal attention needs no padding.

Usage: ``python examples/offline/dt.py [--data d4rl:PATH | --data minari:ID] [--context K]
[--offline-steps N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
from _offline import OfflineConfig, describe, episode_returns, open_dataset, transitions
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import iql_pendulum_offline  # noqa: E402
from _common import parse_config  # noqa: E402

from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer  # noqa: E402
from torchrl.envs import GymEnv, Reward2GoTransform, TargetReturn, TransformedEnv  # noqa: E402
from torchrl.envs.utils import step_mdp  # noqa: E402
from torchrl.modules import DTActor, DTConfig  # noqa: E402
from torchrl.objectives import DTLoss  # noqa: E402


@dataclass
class Config(OfflineConfig):
    offline_steps: int = 3000
    batch_size: int = 64  # windows of `context` steps per gradient step
    context: int = 20  # K: steps the transformer sees
    lr: float = 6e-4
    weight_decay: float = 1e-4
    warmup_steps: int = 300  # linear warm-up of the rate, then the cosine decay
    embed_dim: int = 64
    num_layers: int = 2
    num_heads: int = 2
    dropout: float = 0.1
    return_scale: float = 1000.0  # returns-to-go are divided by this
    target_return: float = math.nan  # nan: the best episode return in the dataset


class DTPolicy:
    """Acts with a trained Decision Transformer in a batched env, keeping the context itself.

    ``obs_mean``/``obs_std`` standardise observations, ``action_high`` scales the model's [-1, 1]
    actions back, ``return_scale`` divides the env's ``"target_return"``.
    """

    def __init__(
        self,
        net: DTActor,
        context: int,
        obs_mean: torch.Tensor,
        obs_std: torch.Tensor,
        action_high: torch.Tensor,
        return_scale: float,
    ) -> None:
        self.net, self.context = net, context
        self.obs_mean, self.obs_std = obs_mean, obs_std
        self.action_high, self.return_scale = action_high, return_scale

    @torch.no_grad()
    def episode_return(self, env: TransformedEnv, max_steps: int = 200) -> float:
        """Mean return of one episode per sub-env of ``env`` (rewards up to the first done)."""
        was_training = self.net.training
        self.net.eval()
        td = env.reset()
        n = td.batch_size[0]
        obs, rtg, act = [], [], []
        total = torch.zeros(n)
        alive = torch.ones(n, dtype=torch.bool)
        for _ in range(max_steps):
            obs = [*obs, (td["observation"] - self.obs_mean) / self.obs_std][-self.context :]
            rtg = [*rtg, td["target_return"] / self.return_scale][-self.context :]
            # the action token of the current step comes after its state token: the causal
            # attention never lets the prediction see it, zeros are a placeholder
            act = [*act, torch.zeros_like(self.action_high).expand(n, -1)][-self.context :]
            pred = self.net(torch.stack(obs, 1), torch.stack(act, 1), torch.stack(rtg, 1))
            act[-1] = pred[:, -1]
            td["action"] = pred[:, -1] * self.action_high
            td = env.step(td)
            total += td["next", "reward"].reshape(n) * alive
            alive &= ~td["next", "done"].reshape(n)
            if not alive.any():
                break
            td = step_mdp(td)
        self.net.train(was_training)
        return float(total.mean())


def make_sequences(cfg: Config, dataset: Any) -> tuple[TensorDictReplayBuffer, dict]:
    """The dataset with returns-to-go, normalised, in a buffer that samples windows of episodes."""
    data = transitions(dataset).select(
        "observation", "action", "episode", ("next", "reward"), ("next", "done")
    )
    data = Reward2GoTransform(gamma=1.0, out_keys=["return_to_go"]).inv(data.clone())
    obs = data["observation"]
    stats = {
        "obs_mean": obs.mean(0),
        "obs_std": obs.std(0).clamp_min(1e-6),
        "returns": episode_returns(data),
    }
    n = data.shape[0]
    sequences = TensorDict(
        observation=(obs - stats["obs_mean"]) / stats["obs_std"],
        action=data["action"],
        return_to_go=data["return_to_go"] / cfg.return_scale,
        episode=data["episode"],
        batch_size=[n],
    )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(n),
        sampler=SliceSampler(slice_len=cfg.context, traj_key="episode"),
        batch_size=cfg.batch_size * cfg.context,
    )
    buffer.extend(sequences)
    return buffer, stats


def train(cfg: Config, dataset: Any = None) -> dict:
    """Trains a Decision Transformer on ``dataset`` (default: ``cfg.data``); returns the history."""
    torch.manual_seed(cfg.seed)
    if dataset is None:
        dataset = open_dataset(cfg.data, cfg.batch_size, root=cfg.root)
    if cfg.progress:
        print(describe(cfg.data, dataset))
    probe = GymEnv(cfg.env_name)
    high = probe.action_spec.space.high.clone()
    probe.close()
    buffer, stats = make_sequences(cfg, dataset)
    behaviour = float(stats["returns"].mean())
    target = float(stats["returns"].max()) if math.isnan(cfg.target_return) else cfg.target_return

    obs_dim = stats["obs_mean"].shape[-1]
    net = DTActor(
        obs_dim,
        high.shape[-1],
        DTConfig(
            n_embd=cfg.embed_dim,
            n_layer=cfg.num_layers,
            n_head=cfg.num_heads,
            n_inner=4 * cfg.embed_dim,
            n_positions=3 * cfg.context,
            resid_pdrop=cfg.dropout,
            attn_pdrop=cfg.dropout,
        ),
    )
    # the dataset's actions are scaled to the tanh head's [-1, 1] in the buffer
    actor = TensorDictModule(net, ["observation", "action", "return_to_go"], ["action_pred"])
    loss_fn = DTLoss(actor, loss_function="l2")
    policy = DTPolicy(net, cfg.context, stats["obs_mean"], stats["obs_std"], high, cfg.return_scale)

    def make_env(num_envs: int, seed: int) -> TransformedEnv:
        env = TransformedEnv(GymEnv(cfg.env_name, num_envs=num_envs), TargetReturn(target))
        env.set_seed(seed)
        return env

    eval_env = make_env(cfg.eval_episodes, cfg.seed + 10_000)
    optim = torch.optim.AdamW(loss_fn.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    warmup = max(cfg.warmup_steps, 1)

    def rate(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if not cfg.cosine_lr:
            return 1.0
        progress = (step - warmup) / max(cfg.offline_steps - warmup, 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optim, rate)
    history: dict = {"train": [], "eval": [], "behaviour_return": behaviour, "target": target}
    start = time.perf_counter()
    bar = tqdm(range(1, cfg.offline_steps + 1), disable=not cfg.progress, desc="DT offline")
    for step in bar:
        batch = buffer.sample()
        # the actions fed to the model are the scaled ones, like its targets
        batch = batch.reshape(cfg.batch_size, cfg.context)
        batch["action"] = batch["action"] / high
        loss = loss_fn(batch)["loss"]
        optim.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(loss_fn.parameters(), 0.25)
        optim.step()
        schedule.step()
        if step % cfg.eval_every == 0 or step == cfg.offline_steps:
            ret = policy.episode_return(eval_env)
            history["eval"].append((step, ret))
            bar.set_postfix(eval_return=f"{ret:.0f}", behaviour=f"{behaviour:.0f}")
    history["wall"] = time.perf_counter() - start
    eval_env.close()
    final_env = make_env(cfg.final_eval_episodes, cfg.seed + 20_000)
    history["final_return"] = policy.episode_return(final_env)
    final_env.close()
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    print(f"DT conditioned on a target return of {history['target']:.1f}")
    iql_pendulum_offline.report_offline(cfg, history, "DT", "offline_dt")


if __name__ == "__main__":
    main()
