"""ACT (action chunking with transformers) on Pendulum-v1 from an expert dataset kept on disk.

Four stages. (1) The scripted swing-up expert of ``diffusion_bc_offline.py`` plays
``dataset_episodes`` episodes, written to memory-mapped files (``LazyMemmapStorage`` in
``<out>/act_dataset``) and mapped again into a fresh buffer; both steps are that example's
functions. (2) The flat transitions are cut back into episodes at their ``("next", "done")``
flags and every step gets the chunk of the ``chunk_size`` actions that follow it
(``"action_chunk"``, ``[k, 1]``); a chunk that runs past its episode's end repeats the last
action and flags those steps in ``"action_is_pad"`` (``[k]``), which the loss leaves out and
the CVAE encoder does not see. (3) :class:`~torchrl.modules.ACTModel` is trained on those
chunks alone with :class:`~torchrl.objectives.ACTLoss` (L1 + ``kl_weight`` * KL). (4) An
:class:`~torchrl.modules.ActionChunkExecutor` plays each predicted chunk's first
``execute_steps`` actions and queries the model again (and at every episode start, through
:class:`~torchrl.envs.InitTracker`); it is evaluated on fresh episodes next to the expert and a
uniformly random policy on the same initial states. Seeds 0-2 with the defaults, mean return
over 50 final episodes: ACT -149.7 / -150.0 / -274.8 (seed 2 fails a few swing-ups), expert
-144.8 / -147.2 / -145.9, random -1239 / -1211 / -1216 (3000 gradient steps, 188 s on one
CPU thread, 345-424 s on a busy 2-core machine). On seed 2, ``--execute-steps 1`` gives -307.8 and
``--steps 5000`` -220.4.

Usage: ``python examples/act_pendulum_offline.py [--steps N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch
from _common import evaluate, parse_config, plot_curve
from diffusion_bc_offline import PendulumExpert, load_dataset, make_dataset
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from tqdm import tqdm

from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import GymEnv, InitTracker, TransformedEnv
from torchrl.envs.utils import RandomPolicy
from torchrl.modules import ActionChunkExecutor, ACTModel
from torchrl.objectives import ACTLoss


@dataclass
class Config:
    env_name: str = "Pendulum-v1"
    dataset_episodes: int = 50  # of 200 steps each
    chunk_size: int = 10  # k: actions predicted per query
    execute_steps: int = 2  # actions played per query (receding horizon)
    steps: int = 3000  # gradient steps
    batch_size: int = 256
    lr: float = 1e-3
    embed_dim: int = 64
    num_heads: int = 4
    num_layers: int = 1  # of each transformer stack
    latent_dim: int = 16
    kl_weight: float = 10.0  # the paper's beta
    eval_every: int = 1000  # gradient steps
    eval_episodes: int = 10
    final_eval_episodes: int = 50
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_chunks(data: TensorDictBase, chunk_size: int) -> TensorDict:
    """The chunk of the next ``chunk_size`` actions for every step of flat episode data.

    Args:
        data: transitions ``[N]`` stored episode after episode, with ``"observation"``,
            ``"action"`` ``[N, A]`` and ``("next", "done")`` ``[N, 1]`` closing each episode.
        chunk_size: ``k``.

    Returns:
        ``observation [N, obs_dim]``, ``action_chunk [N, k, A]`` (``a_t .. a_{t+k-1}``, the
        last action of the episode repeated past its end) and ``action_is_pad [N, k]``
        (``True`` on those repeated steps).
    """
    n = data.shape[0]
    done = data["next", "done"].reshape(n)
    ends = done.nonzero().squeeze(-1)
    if ends.numel() == 0 or ends[-1] != n - 1:  # a last episode cut short still ends here
        ends = torch.cat([ends, ends.new_tensor([n - 1])])
    episode_end = ends[torch.searchsorted(ends, torch.arange(n))]  # [N]
    wanted = torch.arange(n).unsqueeze(-1) + torch.arange(chunk_size)  # [N, k]
    is_pad = wanted > episode_end.unsqueeze(-1)
    index = torch.minimum(wanted, episode_end.unsqueeze(-1))
    return TensorDict(
        observation=data["observation"],
        action_chunk=data["action"][index],
        action_is_pad=is_pad,
        batch_size=[n],
    )


def make_env(cfg: Config, num_envs: int, seed: int) -> TransformedEnv:
    """Batched evaluation envs; ``InitTracker`` tells the executor where episodes start."""
    env = TransformedEnv(GymEnv(cfg.env_name, num_envs=num_envs), InitTracker())
    env.set_seed(seed)
    return env


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    path = os.path.join(cfg.out, "act_dataset")
    make_dataset(cfg, path)  # the expert's episodes, written to disk
    transitions = load_dataset(cfg, path).storage[:]  # ... and mapped again
    chunks = make_chunks(transitions, cfg.chunk_size)
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(chunks.shape[0]), batch_size=cfg.batch_size
    )
    buffer.extend(chunks)

    n_obs = transitions["observation"].shape[-1]
    n_act = transitions["action"].shape[-1]
    model = ACTModel(
        n_obs,
        n_act,
        cfg.chunk_size,
        latent_dim=cfg.latent_dim,
        embed_dim=cfg.embed_dim,
        num_heads=cfg.num_heads,
        num_encoder_layers=cfg.num_layers,
        num_decoder_layers=cfg.num_layers,
    )
    # training reads the expert chunk and its padding; acting reads the observation alone (the
    # latent is the prior's mean, zero)
    train_net = TensorDictModule(
        model, ["observation", "action_chunk", "action_is_pad"], ["action_pred", "mu", "log_var"]
    )
    # the env rejects actions outside its spec: clip the chunks (Pendulum's torque is in [-2, 2])
    probe = GymEnv(cfg.env_name)
    low, high = probe.action_spec.space.low, probe.action_spec.space.high
    probe.close()
    policy = TensorDictSequential(
        TensorDictModule(model, ["observation"], ["action_chunk", "mu", "log_var"]),
        TensorDictModule(lambda c: c.clamp(low, high), ["action_chunk"], ["action_chunk"]),
    )
    executor = ActionChunkExecutor(policy, cfg.execute_steps)
    loss_fn = ACTLoss(train_net, kl_weight=cfg.kl_weight)

    eval_env = make_env(cfg, cfg.eval_episodes, cfg.seed + 10_000)

    def act_return(env: TransformedEnv) -> float:
        model.eval()
        executor.reset()
        ret = evaluate(env, executor, max_steps=200)
        model.train()
        return ret

    optim = torch.optim.AdamW(loss_fn.parameters(), lr=cfg.lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optim, cfg.steps)
    history: dict = {"eval": []}
    start = time.perf_counter()
    bar = tqdm(range(1, cfg.steps + 1), disable=not cfg.progress, desc="ACT")
    for step in bar:
        losses = loss_fn(buffer.sample())
        optim.zero_grad()
        losses["loss_act"].backward()
        optim.step()
        schedule.step()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            history["eval"].append((step, act_return(eval_env)))
            bar.set_postfix(eval_return=f"{history['eval'][-1][1]:.1f}")
    history["wall"] = time.perf_counter() - start
    eval_env.close()

    # ACT, the expert and random play on the same fresh initial states
    final_env = make_env(cfg, cfg.final_eval_episodes, cfg.seed + 20_000)
    history["final_return"] = act_return(final_env)
    final_env.set_seed(cfg.seed + 20_000)
    expert = TensorDictModule(PendulumExpert(), ["observation"], ["action"])
    history["expert_return"] = evaluate(final_env, expert, max_steps=200)
    final_env.set_seed(cfg.seed + 20_000)
    random_policy = RandomPolicy(final_env.action_spec)
    history["random_return"] = evaluate(final_env, random_policy, max_steps=200)
    final_env.close()
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    plot_curve(
        history,
        f"{cfg.out}/act_pendulum_offline.png",
        f"ACT (k={cfg.chunk_size}, {cfg.execute_steps} steps per query), Pendulum-v1",
        target=history["expert_return"],
        xlabel="gradient steps",
        target_label="expert",
    )
    print(
        f"ACT Pendulum-v1 (offline): final deterministic evaluation return "
        f"{history['final_return']:.1f} ({cfg.final_eval_episodes} episodes); expert "
        f"{history['expert_return']:.1f}; random {history['random_return']:.1f}; "
        f"{cfg.steps} gradient steps in {history['wall']:.1f} s"
    )


if __name__ == "__main__":
    main()
