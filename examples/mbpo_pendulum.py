"""MBPO on Pendulum-v1: SAC trained mostly on short rollouts of a learned ensemble model.

Model-Based Policy Optimisation (Janner et al., 2019) in four steps, repeated per collected batch:

1. the SAC actor collects real frames into the env buffer (uniform random actions first);
2. every ``model_train_every`` frames, a probabilistic ensemble (``ensemble_size`` Gaussian MLPs,
   each predicting the change of the observation and the reward with a mean and a log-variance)
   is fitted by Gaussian negative log-likelihood on all real transitions; the ``elites`` members
   with the lowest held-out error are used for imagination;
3. ``rollouts_per_frame`` imagined rollouts per collected frame, ``rollout_length`` steps each,
   start from real states sampled from the env buffer through an
   :class:`~torchrl.envs.ImaginedEnv` and are stored in the model buffer (each step uses a
   random elite and samples its Gaussian: the ensemble's disagreement stays in the data);
4. ``updates_per_frame`` SAC updates per collected frame on batches that are ``real_ratio`` real
   transitions and the rest imagined ones.

Evaluation, stopping and the SAC networks are those of ``sac_pendulum.py``, so that the frames to
reach ``target_return`` compare directly. The defaults are sized for a 2-core CPU (a smaller
model, 10 updates per frame instead of 20, fewer and shorter rollouts); ``--published true``
switches to the paper's Pendulum-sized settings (7 members, 5 elites, 200 hidden units, 20
updates per frame, 400 rollouts per frame, 5% real data).

Usage: ``python examples/mbpo_pendulum.py [--frames N] [--seed S] [--out DIR] [--published true]``.
"""

from __future__ import annotations

import math
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
from sac_pendulum import make_agent
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import GymEnv, ImaginedEnv, RewardSum, TransformedEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.objectives import SACLoss, SoftUpdate

#: The entries of a transition the model and SAC read.
TRANSITION_KEYS = (
    "observation",
    "action",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
)


@dataclass
class Config:
    env_name: str = "Pendulum-v1"
    frames: int = 10_000  # upper bound; training stops once solved
    frames_per_batch: int = 100
    init_random_frames: int = 400
    # model
    ensemble_size: int = 5
    elites: int = 4
    model_hidden: int = 128
    model_lr: float = 1e-3
    model_batch_size: int = 256
    model_train_every: int = 200  # frames between model fits
    model_train_steps: int = 300  # gradient steps per fit (warm-started)
    holdout: float = 0.1
    # imagination
    rollouts_per_frame: float = 10.0
    rollout_length: int = 3
    model_buffer_batches: int = 5  # the model buffer holds the rollouts of this many batches
    # SAC (as sac_pendulum.py)
    updates_per_frame: float = 10.0
    real_ratio: float = 0.1
    batch_size: int = 256
    lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.005
    hidden: int = 64
    buffer_size: int = 100_000
    eval_every: int = 500
    eval_episodes: int = 5
    confirm: bool = True
    final_eval_episodes: int = 10
    target_return: float = -200.0
    published: bool = False  # the paper's model size, update ratio and rollout counts
    seed: int = 0
    out: str = "outputs"
    progress: bool = True

    def __post_init__(self) -> None:
        if self.published:
            self.ensemble_size, self.elites, self.model_hidden = 7, 5, 200
            self.updates_per_frame, self.rollouts_per_frame, self.real_ratio = 20.0, 400.0, 0.05
            self.rollout_length = 1
        if not 0 < self.elites <= self.ensemble_size:
            raise ValueError(
                f"elites must be in [1, ensemble_size={self.ensemble_size}], got {self.elites}"
            )
        if not 0.0 <= self.real_ratio <= 1.0:
            raise ValueError(f"real_ratio must be in [0, 1], got {self.real_ratio}")
        if self.rollout_length < 1:
            raise ValueError(f"rollout_length must be >= 1, got {self.rollout_length}")


class EnsembleLinear(nn.Module):
    """``E`` independent linear layers applied as one batched matmul: ``[E, N, in] -> [E, N, out]``.

    Args:
        members: the number of ensemble members ``E``.
        in_features: input size.
        out_features: output size.

    Examples:
        >>> layer = EnsembleLinear(3, 4, 2)
        >>> layer(torch.zeros(3, 5, 4)).shape
        torch.Size([3, 5, 2])
        >>> layer(torch.zeros(2, 5, 4), members=torch.tensor([0, 2])).shape
        torch.Size([2, 5, 2])
    """

    def __init__(self, members: int, in_features: int, out_features: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(members, 1, out_features))
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        if members is None:
            return torch.baddbmm(self.bias, x, self.weight)
        return torch.baddbmm(self.bias[members], x, self.weight[members])


class GaussianEnsemble(nn.Module):
    """A probabilistic ensemble: ``E`` MLPs mapping (observation, action) to a Gaussian.

    Each member predicts the mean and log-variance of ``[next_obs - obs, reward]`` in normalised
    units (inputs and targets are standardised with statistics set by :meth:`set_normalizers`).
    The log-variance is softly bounded by learned ``max_logvar``/``min_logvar`` (PETS).

    Args:
        obs_dim: the observation size.
        action_dim: the action size.
        members: the number of members ``E``.
        hidden: hidden units per layer.
        depth: hidden layers.

    Examples:
        >>> model = GaussianEnsemble(3, 1, members=2, hidden=8)
        >>> mean, logvar = model(torch.zeros(2, 5, 4))
        >>> mean.shape, logvar.shape
        (torch.Size([2, 5, 4]), torch.Size([2, 5, 4]))
    """

    def __init__(
        self, obs_dim: int, action_dim: int, members: int = 5, hidden: int = 128, depth: int = 3
    ) -> None:
        super().__init__()
        self.obs_dim, self.action_dim, self.members = obs_dim, action_dim, members
        n_in, n_out = obs_dim + action_dim, obs_dim + 1
        sizes = [n_in] + [hidden] * depth
        self.hidden_layers = nn.ModuleList(
            EnsembleLinear(members, a, b) for a, b in zip(sizes[:-1], sizes[1:])
        )
        self.head = EnsembleLinear(members, hidden, 2 * n_out)
        self.max_logvar = nn.Parameter(torch.full((n_out,), 0.5))
        self.min_logvar = nn.Parameter(torch.full((n_out,), -10.0))
        self.register_buffer("in_mean", torch.zeros(n_in))
        self.register_buffer("in_std", torch.ones(n_in))
        self.register_buffer("out_mean", torch.zeros(n_out))
        self.register_buffer("out_std", torch.ones(n_out))
        # every member is usable until the first fit ranks them
        self.register_buffer("elites", torch.arange(members))

    def set_normalizers(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        """Standardise inputs ``[N, obs+act]`` and targets ``[N, obs+1]`` with their statistics."""
        self.in_mean.copy_(inputs.mean(0))
        self.in_std.copy_(inputs.std(0).clamp_min(1e-6))
        self.out_mean.copy_(targets.mean(0))
        self.out_std.copy_(targets.std(0).clamp_min(1e-6))

    def forward(
        self, x: torch.Tensor, members: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised mean and log-variance ``[E', N, obs+1]`` for normalised inputs ``x``."""
        for layer in self.hidden_layers:
            x = nn.functional.silu(layer(x, members))
        mean, logvar = self.head(x, members).chunk(2, dim=-1)
        logvar = self.max_logvar - nn.functional.softplus(self.max_logvar - logvar)
        logvar = self.min_logvar + nn.functional.softplus(logvar - self.min_logvar)
        return mean, logvar

    def nll(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Gaussian NLL of raw ``targets [E, N, obs+1]`` given raw ``inputs [E, N, obs+act]``."""
        mean, logvar = self((inputs - self.in_mean) / self.in_std)
        err = (targets - self.out_mean) / self.out_std - mean
        nll = (err.pow(2) * torch.exp(-logvar) + logvar).mean()
        return nll + 0.01 * (self.max_logvar.sum() - self.min_logvar.sum())

    @torch.no_grad()
    def mse(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-member mean squared error (normalised units) of the means on raw data ``[N, *]``."""
        x = ((inputs - self.in_mean) / self.in_std).expand(self.members, *inputs.shape)
        mean, _ = self(x)
        return ((targets - self.out_mean) / self.out_std - mean).pow(2).mean((1, 2))


class EnsembleStep(nn.Module):
    """One step of a :class:`GaussianEnsemble`: ``(observation, action) -> (next obs, reward)``.

    ``mode="sample"``: each row goes to a random elite member (drawn again every step) and its
    Gaussian is sampled (MBPO). ``mode="mean"``: the mean of the elites' means, no noise (a
    deterministic model for planning). Works on any batch shape.

    Args:
        ensemble: the fitted ensemble.
        mode: ``"sample"`` or ``"mean"``.

    Examples:
        >>> step = EnsembleStep(GaussianEnsemble(3, 1, members=2, hidden=8))
        >>> nxt, reward = step(torch.zeros(4, 7, 3), torch.zeros(4, 7, 1))
        >>> nxt.shape, reward.shape
        (torch.Size([4, 7, 3]), torch.Size([4, 7, 1]))
    """

    def __init__(self, ensemble: GaussianEnsemble, mode: str = "sample") -> None:
        super().__init__()
        if mode not in ("sample", "mean"):
            raise ValueError(f"mode must be 'sample' or 'mean', got {mode!r}")
        self.ensemble = ensemble
        self.mode = mode

    def forward(
        self, observation: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        model = self.ensemble
        batch = observation.shape[:-1]
        x = torch.cat([observation, action], -1).reshape(
            -1, observation.shape[-1] + action.shape[-1]
        )
        x = (x - model.in_mean) / model.in_std
        elites = model.elites
        n_el, rows = elites.numel(), x.shape[0]
        if self.mode == "mean":
            mean, _ = model(x.expand(n_el, *x.shape), elites)
            out = mean.mean(0)
        else:
            # A random permutation deals the rows out to the elites, one block each.
            per = -(-rows // n_el)
            perm = torch.randperm(rows, device=x.device)
            padded = x.new_zeros(n_el * per, x.shape[-1])
            padded[:rows] = x[perm]
            mean, logvar = model(padded.reshape(n_el, per, -1), elites)
            sample = mean + torch.randn_like(mean) * (0.5 * logvar).exp()
            out = torch.empty(rows, sample.shape[-1], device=x.device, dtype=x.dtype)
            out[perm] = sample.reshape(n_el * per, -1)[:rows]
        out = out * model.out_std + model.out_mean
        delta, reward = out[:, :-1], out[:, -1:]
        return observation + delta.reshape(*batch, -1), reward.reshape(*batch, 1)


def transition_arrays(data: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
    """Model inputs ``[obs, action]`` and targets ``[next_obs - obs, reward]`` of transitions."""
    obs, action = data["observation"], data["action"]
    inputs = torch.cat([obs, action], -1)
    targets = torch.cat([data["next", "observation"] - obs, data["next", "reward"]], -1)
    return inputs, targets


def fit_ensemble(
    model: GaussianEnsemble,
    optim: torch.optim.Optimizer,
    data: TensorDictBase,
    steps: int,
    batch_size: int,
    holdout: float,
    n_elites: int,
) -> dict:
    """Fits ``model`` on transitions ``data`` by NLL and ranks its members on a held-out split.

    Each member draws its own minibatches (with replacement), so members see different data.
    Sets ``model.elites`` to the ``n_elites`` members with the lowest held-out error.

    Args:
        model: the ensemble, fitted in place (warm-started from its current weights).
        optim: the optimiser over ``model``'s parameters.
        data: transitions (``observation``, ``action``, ``("next", "observation")``,
            ``("next", "reward")``), batch ``[N]``.
        steps: gradient steps.
        batch_size: minibatch size per member.
        holdout: the fraction of ``data`` (at most 1000 transitions) held out to rank members.
        n_elites: how many members to keep as elites.

    Returns:
        ``{"nll": last training NLL, "holdout_mse": [per member]}``.
    """
    inputs, targets = transition_arrays(data)
    n = inputs.shape[0]
    # A fresh split each fit: with warm starts earlier fits saw some held-out rows, which only
    # flatters every member alike; the split serves to rank members, not to stop training.
    perm = torch.randperm(n)
    n_hold = min(int(n * holdout), 1000) if n >= 20 else 0
    hold, train = perm[:n_hold], perm[n_hold:]
    model.set_normalizers(inputs[train], targets[train])
    nll = torch.zeros(())
    for _ in range(steps):
        idx = train[torch.randint(train.numel(), (model.members, batch_size))]
        nll = model.nll(inputs[idx], targets[idx])
        optim.zero_grad()
        nll.backward()
        optim.step()
    if n_hold:
        mse = model.mse(inputs[hold], targets[hold])
        model.elites = mse.argsort()[:n_elites].sort().values
    else:
        mse = torch.full((model.members,), float("nan"))
    return {"nll": float(nll.detach()), "holdout_mse": mse.tolist()}


def make_ensemble(env: GymEnv, cfg: Config) -> tuple[GaussianEnsemble, torch.optim.Optimizer]:
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    model = GaussianEnsemble(n_obs, n_act, cfg.ensemble_size, cfg.model_hidden)
    optim = torch.optim.Adam(model.parameters(), lr=cfg.model_lr, weight_decay=1e-5)
    return model, optim


def mixed_batch(
    real: TensorDictReplayBuffer, imagined: TensorDictReplayBuffer, n: int, real_ratio: float
) -> TensorDictBase:
    """``n`` transitions: ``real_ratio`` of them from ``real``, the rest from ``imagined``."""
    n_real = int(round(n * real_ratio)) if len(imagined) else n
    parts = [real.sample(n_real).select(*TRANSITION_KEYS)] if n_real else []
    if n - n_real:
        parts.append(imagined.sample(n - n_real).select(*TRANSITION_KEYS))
    return torch.cat(parts) if len(parts) > 1 else parts[0]


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    env = TransformedEnv(GymEnv(cfg.env_name), RewardSum())
    env.set_seed(cfg.seed)
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    actor, qvalue = make_agent(env, cfg.hidden)
    loss_fn = SACLoss(actor, qvalue, num_qvalue_nets=2, loss_function="l2")
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    target_updater = SoftUpdate(loss_fn, tau=cfg.tau)
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr, fused=True)

    ensemble, model_optim = make_ensemble(env, cfg)
    real_buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(cfg.buffer_size))
    n_rollouts = max(1, int(cfg.rollouts_per_frame * cfg.frames_per_batch))
    model_capacity = n_rollouts * cfg.rollout_length * cfg.model_buffer_batches
    model_buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(model_capacity))
    # The imagined env: start states sampled from the real buffer, steps from the ensemble.
    world_model = TensorDictModule(
        EnsembleStep(ensemble, "sample"), ["observation", "action"], ["observation", "reward"]
    )
    model_env = ImaginedEnv(
        world_model, real_buffer, env.base_env, batch_size=[n_rollouts], validate_actions=False
    )
    model_env.set_seed(cfg.seed)

    collector = SyncDataCollector(
        env,
        actor,
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.frames,
        init_random_frames=cfg.init_random_frames,
    )
    history: dict = {"train": [], "eval": [], "model": [], "solved_at": None, "eval_wall": 0.0}
    real_data: TensorDictBase | None = None
    frames, next_eval, next_fit = 0, cfg.eval_every, cfg.init_random_frames
    start, cpu_start = time.perf_counter(), time.process_time()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="MBPO Pendulum")
    for batch in collector:
        n = batch.numel()
        frames += n
        flat = batch.reshape(-1)
        real_buffer.extend(flat)
        new = flat.select(*TRANSITION_KEYS)
        real_data = new if real_data is None else torch.cat([real_data, new])
        if frames >= next_fit:
            next_fit += cfg.model_train_every
            fit = fit_ensemble(
                ensemble,
                model_optim,
                real_data,
                cfg.model_train_steps,
                cfg.model_batch_size,
                cfg.holdout,
                cfg.elites,
            )
            history["model"].append((frames, fit["holdout_mse"]))
        if frames >= cfg.init_random_frames:
            with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
                imagined = model_env.rollout(cfg.rollout_length, actor)
            model_buffer.extend(imagined.reshape(-1).select(*TRANSITION_KEYS))
            for _ in range(int(n * cfg.updates_per_frame)):
                losses = loss_fn(
                    mixed_batch(real_buffer, model_buffer, cfg.batch_size, cfg.real_ratio)
                )
                loss = losses["loss_actor"] + losses["loss_qvalue"] + losses["loss_alpha"]
                optim.zero_grad()
                loss.backward()
                optim.step()
                target_updater.step()
            collector.update_policy_weights_()

        history["train"] += episode_returns(batch, frames)
        bar.update(n)
        if frames >= next_eval:
            next_eval += cfg.eval_every
            eval_start = time.perf_counter()
            ret = evaluate_confirmed(eval_env, actor, 200, cfg.target_return, cfg.confirm)
            history["eval_wall"] += time.perf_counter() - eval_start
            history["eval"].append((frames, ret))
            bar.set_postfix(eval_return=f"{ret:.0f}")
            if ret >= cfg.target_return:
                history["solved_at"] = frames
                break
    history["wall"] = time.perf_counter() - start
    history["cpu"] = time.process_time() - cpu_start
    history["frames"] = frames
    bar.close()
    collector.shutdown()
    eval_env.close()
    final_env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
    final_env.set_seed(cfg.seed + 20_000)
    history["final_return"] = evaluate(final_env, actor, max_steps=200)
    final_env.close()
    history["actor"] = actor
    history["ensemble"] = ensemble
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    plot_curve(
        history, f"{cfg.out}/mbpo_pendulum.png", "MBPO, Pendulum-v1", target=cfg.target_return
    )
    report("MBPO Pendulum-v1", history, cfg.target_return, history["final_return"])


if __name__ == "__main__":
    main()
