"""PETS-style MPC on Pendulum-v1: a learned ensemble model and a CEM planner, no policy network.

1. ``random_frames`` frames of uniform random actions start the dataset;
2. a probabilistic ensemble (``mbpo_pendulum.GaussianEnsemble``: ``ensemble_size`` Gaussian MLPs
   predicting the change of the observation and the reward) is fitted on all real transitions by
   Gaussian negative log-likelihood, warm-started from the previous fit;
3. the policy is a :class:`~torchrl.modules.CEMPlanner` that plans through a
   :class:`~torchrl.envs.WorldModelEnv` over that model (each candidate action sequence is scored
   with the mean prediction of the elite members), replanning at every step; one episode with it
   is added to the dataset, and the loop goes back to 2.

Planning is costly (every action is ``optim_steps * horizon`` batched model steps), so the
planner is evaluated only after a training episode reaches ``target_return``: then on
``eval_episodes`` fresh episodes (run side by side: one batched plan for all of them), and
training stops once their mean return reaches the target and, with ``confirm``, a second
evaluation agrees. The frames counted include every real episode, the passing one too. ``--published true`` uses
PETS-like planner settings (horizon 30, 5 iterations of 500 candidates, 50 elites) and a
7-member ensemble of 200 hidden units: much slower on a CPU.

Usage: ``python examples/mpc_pendulum.py [--episodes N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from _common import evaluate, evaluate_confirmed, parse_config, plot_curve, report
from mbpo_pendulum import TRANSITION_KEYS, EnsembleStep, GaussianEnsemble, fit_ensemble
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from tqdm import tqdm

from torchrl.envs import GymEnv, WorldModelEnv
from torchrl.modules import CEMPlanner


@dataclass
class Config:
    env_name: str = "Pendulum-v1"
    random_frames: int = 200
    episodes: int = 10  # on-policy episodes at most; training stops once solved
    max_steps: int = 200
    # model
    ensemble_size: int = 5
    elites: int = 4
    model_hidden: int = 64
    model_depth: int = 2
    model_lr: float = 1e-3
    model_batch_size: int = 256
    model_train_steps: int = 500  # gradient steps per fit (warm-started)
    holdout: float = 0.1
    # planner
    horizon: int = 15
    optim_steps: int = 3
    candidates: int = 100
    top_k: int = 10
    eval_episodes: int = 5
    confirm: bool = True
    final_eval_episodes: int = 10
    target_return: float = -300.0
    published: bool = False  # PETS-like planner and model sizes
    seed: int = 0
    out: str = "outputs"
    progress: bool = True

    def __post_init__(self) -> None:
        if self.published:
            self.ensemble_size, self.elites, self.model_hidden, self.model_depth = 7, 5, 200, 3
            self.horizon, self.optim_steps, self.candidates, self.top_k = 30, 5, 500, 50
        if not 0 < self.elites <= self.ensemble_size:
            raise ValueError(
                f"elites must be in [1, ensemble_size={self.ensemble_size}], got {self.elites}"
            )
        if not 0 < self.top_k <= self.candidates:
            raise ValueError(
                f"top_k must be in [1, candidates={self.candidates}], got {self.top_k}"
            )


def make_planner(
    env: GymEnv, ensemble: GaussianEnsemble, cfg: Config
) -> tuple[CEMPlanner, WorldModelEnv]:
    """A CEM planner over a :class:`WorldModelEnv` that steps ``ensemble``'s elite mean."""
    world_model = TensorDictModule(
        EnsembleStep(ensemble, "mean"), ["observation", "action"], ["observation", "reward"]
    )
    model_env = WorldModelEnv(world_model, validate_actions=False)
    model_env.set_specs_from_env(env)
    planner = CEMPlanner(
        model_env,
        planning_horizon=cfg.horizon,
        optim_steps=cfg.optim_steps,
        num_candidates=cfg.candidates,
        top_k=cfg.top_k,
    )
    return planner, model_env


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    env = GymEnv(cfg.env_name)
    env.set_seed(cfg.seed)
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    ensemble = GaussianEnsemble(n_obs, n_act, cfg.ensemble_size, cfg.model_hidden, cfg.model_depth)
    model_optim = torch.optim.Adam(ensemble.parameters(), lr=cfg.model_lr, weight_decay=1e-5)
    planner, _ = make_planner(env, ensemble, cfg)

    history: dict = {"train": [], "eval": [], "model": [], "solved_at": None, "eval_wall": 0.0}
    start, cpu_start = time.perf_counter(), time.process_time()
    with torch.no_grad():
        data: TensorDictBase = torch.cat(
            [env.rollout(cfg.max_steps) for _ in range(-(-cfg.random_frames // cfg.max_steps))]
        )[: cfg.random_frames].select(*TRANSITION_KEYS)
    frames = data.numel()
    total = cfg.random_frames + cfg.episodes * cfg.max_steps
    bar = tqdm(total=total, unit="frames", disable=not cfg.progress, desc="MPC Pendulum")
    bar.update(frames)
    for _ in range(cfg.episodes):
        fit = fit_ensemble(
            ensemble,
            model_optim,
            data,
            cfg.model_train_steps,
            cfg.model_batch_size,
            cfg.holdout,
            cfg.elites,
        )
        history["model"].append((frames, fit["holdout_mse"]))
        with torch.no_grad():
            rollout = env.rollout(cfg.max_steps, planner)
        episode_return = float(rollout["next", "reward"].sum())
        data = torch.cat([data, rollout.select(*TRANSITION_KEYS)])
        frames += rollout.numel()
        bar.update(rollout.numel())
        history["train"].append((frames, episode_return))
        if cfg.progress:
            print(f"frames {frames}: training episode return {episode_return:.1f}")
        if episode_return >= cfg.target_return:
            # The planner is deterministic given the model: a passing training episode is a
            # candidate, checked on fresh evaluation episodes with the same model.
            eval_start = time.perf_counter()
            ret = evaluate_confirmed(
                eval_env, planner, cfg.max_steps, cfg.target_return, cfg.confirm
            )
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
    eval_env.close()
    final_env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
    final_env.set_seed(cfg.seed + 20_000)
    history["final_return"] = evaluate(final_env, planner, max_steps=cfg.max_steps)
    final_env.close()
    env.close()
    history["ensemble"] = ensemble
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    plot_curve(
        history, f"{cfg.out}/mpc_pendulum.png", "PETS-style CEM MPC, Pendulum-v1", cfg.target_return
    )
    report("CEM MPC Pendulum-v1", history, cfg.target_return, history["final_return"])


if __name__ == "__main__":
    main()
