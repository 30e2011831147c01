"""Diffusion-policy behavioural cloning on Pendulum-v1 from an expert dataset kept on disk.

Four stages. (1) A scripted expert (energy pumping to swing up, a PD controller near the top:
torque ``2 * (E_top - E) * sign(thetadot)`` or ``-(10 theta + 2 thetadot)``, clipped to
``[-2, 2]``) plays ``dataset_episodes`` episodes; its discontinuous, bang-bang actions are a
target an MSE regression smooths over. (2) The transitions are written to memory-mapped files
(``LazyMemmapStorage`` in ``<out>/diffusion_bc_dataset``). (3) A fresh storage maps those files
again (``LazyMemmapStorage.open``) and a :class:`~torchrl.modules.DiffusionActor` is trained on
them alone with :class:`~torchrl.objectives.DiffusionBCLoss` (noise prediction, Chi et al.,
2023). (4) The policy samples its actions through the reverse chain and is evaluated on fresh
episodes, next to the expert, a uniformly random policy and (``compare_mse``) an MSE-BC actor
trained on the same data. Seeds 0-2 with the defaults, mean return over 50 final episodes:
diffusion -144.7 / -149.3 / -148.9, expert -139.6 / -139.4 / -145.9, random -1191 / -1221 /
-1179, MSE-BC -147.4 / -149.8 / -148.4 (about 70 s of training each on one CPU thread). This
expert is a deterministic function of the state, so MSE-BC fits it too; the case where it
cannot, a multi-modal expert, is ``test_diffusion_fits_a_bimodal_expert_where_mse_bc_averages``
in ``test/objectives/test_diffusion_bc.py``.

Usage: ``python examples/diffusion_bc_offline.py [--steps N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from _common import parse_config, plot_curve
from tensordict.nn import TensorDictModule
from torch import Tensor, nn
from tqdm import tqdm

from torchrl.data import LazyMemmapStorage, TensorDictReplayBuffer
from torchrl.envs import GymEnv
from torchrl.envs.utils import ExplorationType, RandomPolicy, set_exploration_type
from torchrl.modules import MLP, Actor
from torchrl.modules.tensordict_module.diffusion import DiffusionActor
from torchrl.objectives import BCLoss, LossModule
from torchrl.objectives.diffusion_bc import DiffusionBCLoss


@dataclass
class Config:
    env_name: str = "Pendulum-v1"
    dataset_episodes: int = 50  # of 200 steps each
    steps: int = 10_000  # gradient steps
    batch_size: int = 256
    lr: float = 3e-3
    hidden: int = 256
    num_steps: int = 20  # denoising steps per action
    beta_end: float = 0.2  # with 20 steps, prod(1 - beta) ~ 0.1: the chain starts near noise
    eval_every: int = 2500  # gradient steps
    eval_episodes: int = 10
    final_eval_episodes: int = 50
    compare_mse: bool = True  # also train an MSE-BC actor on the same data
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


class PendulumExpert(nn.Module):
    """Scripted swing-up: energy pumping far from the top, PD control near it.

    Pendulum-v1 obeys ``thetaddot = 15 sin(theta) + 3 u`` with ``theta = 0`` upright, so
    ``E = thetadot^2 / 6 + 5 cos(theta)`` changes at rate ``thetadot * u`` and is 5 at rest on top.
    """

    def forward(self, observation: Tensor) -> Tensor:
        cos, sin, thetadot = observation.unbind(-1)
        theta = torch.atan2(sin, cos)
        energy = thetadot.pow(2) / 6 + 5 * cos
        # the small offset gives sign(0) = +1: a pendulum at rest is pushed, not left hanging
        pump = 2.0 * (5.0 - energy) * torch.sign(thetadot + 1e-3)
        balance = -(10.0 * theta + 2.0 * thetadot)
        return torch.where(cos > 0.85, balance, pump).clamp(-2.0, 2.0).unsqueeze(-1)


@torch.no_grad()
def mean_return(env: GymEnv, policy, mode: ExplorationType = ExplorationType.RANDOM) -> float:
    """Mean return of one 200-step episode per sub-env (Pendulum never terminates early)."""
    with set_exploration_type(mode):
        rollout = env.rollout(200, policy)
    return float(rollout["next", "reward"].sum(-2).mean())


def make_dataset(cfg: Config, path: str) -> float:
    """Writes the expert's transitions to memory-mapped files at ``path``; returns its score."""
    env = GymEnv(cfg.env_name, num_envs=cfg.dataset_episodes)
    env.set_seed(cfg.seed)
    expert = TensorDictModule(PendulumExpert(), ["observation"], ["action"])
    with torch.no_grad():
        rollout = env.rollout(200, expert)
    env.close()
    storage = LazyMemmapStorage(rollout.numel(), scratch_dir=path, existsok=True)
    TensorDictReplayBuffer(storage=storage).extend(rollout.reshape(-1))
    return float(rollout["next", "reward"].sum(-2).mean())


def load_dataset(cfg: Config, path: str) -> TensorDictReplayBuffer:
    """Maps the files written by :func:`make_dataset` again, into a new buffer."""
    return TensorDictReplayBuffer(storage=LazyMemmapStorage.open(path), batch_size=cfg.batch_size)


def fit(
    cfg: Config,
    loss_fn: LossModule,
    buffer: TensorDictReplayBuffer,
    evaluate: Callable[[], float],
    name: str,
) -> dict:
    """Adam with a cosine-decayed rate on ``loss_fn``; evaluates every ``cfg.eval_every`` steps."""
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optim, cfg.steps)
    history: dict = {"eval": []}
    bar = tqdm(range(1, cfg.steps + 1), disable=not cfg.progress, desc=name)
    for step in bar:
        losses = loss_fn(buffer.sample())
        loss = sum(v for k, v in losses.items() if k.startswith("loss_"))
        optim.zero_grad()
        loss.backward()
        optim.step()
        schedule.step()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            history["eval"].append((step, evaluate()))
            bar.set_postfix(eval_return=str(history["eval"][-1][1]))
    return history


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    path = os.path.join(cfg.out, "diffusion_bc_dataset")
    expert_return = make_dataset(cfg, path)
    buffer = load_dataset(cfg, path)

    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    final_env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
    probe = GymEnv(cfg.env_name)  # the specs of one env (the eval envs' are batched)
    action_spec, n_obs = probe.action_spec, probe.observation_spec["observation"].shape[-1]
    probe.close()

    actor = DiffusionActor(
        action_spec.shape[-1],
        obs_dim=n_obs,
        num_steps=cfg.num_steps,
        beta_end=cfg.beta_end,
        spec=action_spec,
        num_cells=(cfg.hidden, cfg.hidden),
    )
    start = time.perf_counter()
    history = fit(
        cfg, DiffusionBCLoss(actor), buffer, lambda: mean_return(eval_env, actor), "DiffusionBC"
    )
    history["wall"] = time.perf_counter() - start
    history["expert_return"] = expert_return
    final_env.set_seed(cfg.seed + 20_000)
    history["final_return"] = mean_return(final_env, actor)
    final_env.set_seed(cfg.seed + 20_000)
    history["random_return"] = mean_return(final_env, RandomPolicy(final_env.action_spec))
    if cfg.compare_mse:
        mse_net = MLP(n_obs, action_spec.shape[-1], num_cells=[cfg.hidden, cfg.hidden])
        mse_actor = Actor(mse_net, spec=action_spec, safe=True)
        mse_eval = lambda: mean_return(eval_env, mse_actor)  # noqa: E731
        fit(cfg, BCLoss(mse_actor), buffer, mse_eval, "MSE-BC")
        final_env.set_seed(cfg.seed + 20_000)
        history["mse_bc_return"] = mean_return(final_env, mse_actor)
    eval_env.close()
    final_env.close()
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    plot_curve(
        history,
        f"{cfg.out}/diffusion_bc_pendulum_offline.png",
        "Diffusion BC, Pendulum-v1 (expert data)",
        target=history["expert_return"],
        xlabel="gradient steps",
        target_label="expert",
    )
    mse = f"; MSE-BC {history['mse_bc_return']:.1f}" if "mse_bc_return" in history else ""
    # "deterministic" in the shared wording of the examples' last line: the evaluation episodes
    # are fixed by seed; the diffusion policy itself samples its actions through the chain.
    print(
        f"DiffusionBC Pendulum-v1 (offline): final deterministic evaluation return "
        f"{history['final_return']:.1f}; expert {history['expert_return']:.1f}; random "
        f"{history['random_return']:.1f}{mse}; {cfg.steps} gradient steps in "
        f"{history['wall']:.1f} s"
    )


if __name__ == "__main__":
    main()
