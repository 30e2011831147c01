"""Recurrent PPO peers on CartPole without velocities (run in their own venvs by ``recurrent.py``).

Usage: ``python recurrent_peers.py FUNCTION SEED [CONFIG_JSON]`` with FUNCTION one of
``sb3_recurrent_ppo`` (SB3-contrib's RecurrentPPO, under a venv with ``sb3-contrib``) and
``rllib_ppo_lstm`` (RLlib's PPO with its LSTM, under a venv with ``ray[rllib]``). CONFIG_JSON
holds the protocol: ``eval_every``, ``eval_episodes``, ``target_return``, ``max_frames``,
``train_target``, ``num_env_runners`` and ``max_wall_s`` (RLlib). Prints one JSON object. Torch uses 1
thread in the driver process.

Both peers see the same task as ours: gymnasium's CartPole-v1 (500-step cap) with the cart and
pole velocities removed from the observation, ``[x, theta]``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np
import torch


def _cfg() -> dict:
    return json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}


def _no_velocity_env(render_mode: str | None = None) -> Any:
    """CartPole-v1 whose observation keeps the positions only: ``[x, theta]``."""
    import gymnasium as gym

    class NoVelocity(gym.ObservationWrapper):
        def __init__(self, env: gym.Env) -> None:
            super().__init__(env)
            box = env.observation_space
            self.observation_space = gym.spaces.Box(
                low=box.low[::2], high=box.high[::2], dtype=np.float32
            )

        def observation(self, observation: np.ndarray) -> np.ndarray:
            return observation[::2].astype(np.float32)

    return NoVelocity(gym.make("CartPole-v1", render_mode=render_mode))


def sb3_recurrent_ppo(seed: int) -> dict:
    """SB3-contrib's RecurrentPPO with the RL Zoo's CartPoleNoVel-v1 settings.

    The RL Zoo's hyperparameters (``hyperparams/ppo_lstm.yml`` and the published sb3 model's
    card): 8 envs, n_steps 32, batch 256, 20 epochs, gamma 0.98, GAE lambda 0.8, ent_coef 0,
    learning rate linearly from 1e-3 and clip range linearly from 0.2 over 1e5 steps,
    VecNormalize on observations only, policy: ReLU, no orthogonal init, LSTM 64 for the actor
    and the critic, one 64-unit layer after each.
    """
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
    from torch import nn

    cfg = _cfg()
    every, episodes = cfg.get("eval_every", 8192), cfg.get("eval_episodes", 5)
    target, max_frames = cfg.get("target_return", 475.0), cfg.get("max_frames", 100_000)
    torch.set_num_threads(1)
    env = VecNormalize(
        make_vec_env(_no_velocity_env, n_envs=8, seed=seed), norm_obs=True, norm_reward=False
    )
    eval_envs = make_vec_env(_no_velocity_env, n_envs=episodes, seed=seed + 10_000)

    def linear(start: float):
        return lambda progress_remaining: progress_remaining * start

    model = RecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=32,
        batch_size=256,
        n_epochs=20,
        gamma=0.98,
        gae_lambda=0.8,
        ent_coef=0.0,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        policy_kwargs=dict(
            ortho_init=False,
            activation_fn=nn.ReLU,
            lstm_hidden_size=64,
            enable_critic_lstm=True,
            net_arch=dict(pi=[64], vf=[64]),
        ),
        seed=seed,
        device="cpu",
        verbose=0,
    )

    def evaluate() -> float:
        # One deterministic episode per eval env, fresh episodes every call; observations
        # normalised with the training statistics (frozen during the evaluation).
        obs = env.normalize_obs(eval_envs.reset())
        state, starts = None, np.ones(episodes, dtype=bool)
        total, alive = np.zeros(episodes), np.ones(episodes, dtype=bool)
        for _ in range(500):
            action, state = model.predict(
                obs, state=state, episode_start=starts, deterministic=True
            )
            raw, reward, done, _ = eval_envs.step(action)
            obs, starts = env.normalize_obs(raw), done
            total += reward * alive
            alive &= ~done
            if not alive.any():
                break
        return float(total.mean())

    state: dict[str, Any] = {"next_eval": every, "solved": None, "evals": [], "eval_wall": 0.0}
    start = time.perf_counter()

    class Eval(BaseCallback):
        # At a rollout's start, i.e. after the update on the frames counted so far.
        def _on_rollout_start(self) -> None:
            if self.num_timesteps >= state["next_eval"]:
                state["next_eval"] += every
                t0 = time.perf_counter()
                ret = evaluate()
                state["eval_wall"] += time.perf_counter() - t0
                state["evals"].append((self.num_timesteps, round(ret, 1)))
                if ret >= target and state["solved"] is None:
                    state["solved"] = (self.num_timesteps, time.perf_counter() - start)

        def _on_step(self) -> bool:
            return state["solved"] is None

    model.learn(total_timesteps=max_frames, callback=Eval())
    wall = time.perf_counter() - start
    solved = state["solved"]
    return {
        "lib": "sb3_contrib_recurrent_ppo",
        "seed": seed,
        "solved": solved is not None,
        "frames": solved[0] if solved else None,
        "wall_s": round(solved[1], 2) if solved else None,
        "total_frames": model.num_timesteps,
        "total_wall_s": round(wall, 2),
        "eval_wall_s": round(state["eval_wall"], 2),
        "evals": state["evals"],
    }


def rllib_ppo_lstm(seed: int) -> dict:
    """RLlib's PPO with its LSTM, with the settings of its StatelessCartPole LSTM example.

    From RLlib's ``stateless_cartpole_ppo_with_lstm`` example: MeanStdFilter on observations,
    16 envs per env runner, rollout fragments of 32, train batch 2048, minibatch 128, lr 3e-4,
    5 epochs, vf_loss_coeff 1.5, no entropy, gamma 0.99, lambda 0.95, clip 0.3, vf_clip 1e4, no
    KL loss, shared value layers, LSTM with max_seq_len 20. The example runs 4 env runners;
    ``num_env_runners`` (config) sets how many here. RLlib reports the mean return of recent
    training episodes (its own window); we record the first time it reaches ``train_target``
    (300) and ``target_return`` (475).
    """
    import os

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import MeanStdFilter
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    cfg = _cfg()
    max_frames = cfg.get("max_frames", 300_000)
    targets = {
        "train_300": cfg.get("train_target", 300.0),
        "train_475": cfg.get("target_return", 475.0),
    }
    runners = int(cfg.get("num_env_runners", 4))
    max_wall = float(cfg.get("max_wall_s", float("inf")))
    torch.set_num_threads(1)
    register_env("cartpole_no_velocity", lambda _config: _no_velocity_env())
    ray.init(num_cpus=max(2, runners + 1), include_dashboard=False, log_to_driver=False)
    try:
        config = (
            PPOConfig()
            .environment("cartpole_no_velocity")
            .env_runners(
                num_env_runners=runners,
                num_envs_per_env_runner=16,
                env_to_module_connector=lambda env, spaces, device: MeanStdFilter(),
                rollout_fragment_length=32,
            )
            .training(
                train_batch_size=2048,
                minibatch_size=128,
                lr=0.0003,
                num_epochs=5,
                vf_loss_coeff=1.5,
                entropy_coeff=0,
                gamma=0.99,
                lambda_=0.95,
                clip_param=0.3,
                vf_clip_param=10_000,
                use_kl_loss=False,
            )
            .rl_module(
                model_config=DefaultModelConfig(vf_share_layers=True, use_lstm=True, max_seq_len=20)
            )
            .debugging(seed=seed)
        )
        algo = config.build_algo() if hasattr(config, "build_algo") else config.build()
        start = time.perf_counter()
        reached: dict[str, tuple[int, float]] = {}
        curve = []
        steps = 0
        while (
            steps < max_frames
            and len(reached) < len(targets)
            and time.perf_counter() - start < max_wall
        ):
            result = algo.train()
            runners_metrics = result.get("env_runners", {})
            steps = int(
                result.get("num_env_steps_sampled_lifetime")
                or runners_metrics.get("num_env_steps_sampled_lifetime")
                or 0
            )
            ret = runners_metrics.get("episode_return_mean")
            wall = time.perf_counter() - start
            if ret is None or np.isnan(ret):
                continue
            curve.append((steps, round(wall, 1), round(float(ret), 1)))
            for name, value in targets.items():
                if name not in reached and ret >= value:
                    reached[name] = (steps, wall)
        algo.stop()
    finally:
        ray.shutdown()
    out: dict[str, Any] = {"lib": "rllib_ppo_lstm", "seed": seed, "num_env_runners": runners}
    for name in targets:
        hit = reached.get(name)
        out[f"{name}_frames"] = hit[0] if hit else None
        out[f"{name}_wall_s"] = round(hit[1], 2) if hit else None
    out["total_frames"] = steps
    out["total_wall_s"] = round(time.perf_counter() - start, 2)
    out["curve"] = curve[-40:]
    return out


if __name__ == "__main__":
    fn = {"sb3_recurrent_ppo": sb3_recurrent_ppo, "rllib_ppo_lstm": rllib_ppo_lstm}[sys.argv[1]]
    print(json.dumps(fn(int(sys.argv[2]))), flush=True)
