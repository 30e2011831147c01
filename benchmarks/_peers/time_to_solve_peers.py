"""Time-to-solve for the peers (run under the peers venv by ``benchmarks/time_to_solve.py``).

Usage: ``python time_to_solve_peers.py sb3_ppo_cartpole SEED`` (or ``sb3_sac_pendulum``).
Prints one JSON object: frames and wall time until the first deterministic evaluation reaches the
target, with the same hyper-parameters and evaluation protocol as our examples. Torch uses 1 thread.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import torch


def _eval_vec(model, env_id: str, episodes: int, seed: int, max_steps: int) -> float:
    import gymnasium as gym

    envs = gym.make_vec(env_id, num_envs=episodes, vectorization_mode="sync")
    obs, _ = envs.reset(seed=seed)
    total = np.zeros(episodes)
    alive = np.ones(episodes, dtype=bool)
    for _ in range(max_steps):
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, term, trunc, _ = envs.step(action)
        total += reward * alive
        alive &= ~(term | trunc)
        if not alive.any():
            break
    envs.close()
    return float(total.mean())


def sb3_ppo_cartpole(seed: int, max_frames: int = 100_000) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    state = {"next_eval": 2048, "solved": None, "evals": [], "eval_wall": 0.0}

    class Eval(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps >= state["next_eval"]:
                state["next_eval"] += 2048
                t0 = time.perf_counter()
                ret = _eval_vec(self.model, "CartPole-v1", 4, seed + 10_000, 500)
                state["eval_wall"] += time.perf_counter() - t0
                state["evals"].append((self.num_timesteps, ret))
                if ret >= 475:
                    state["solved"] = self.num_timesteps
                    return False
            return True

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        n_epochs=20,
        learning_rate=1e-3,
        gamma=0.98,
        gae_lambda=0.8,
        clip_range=0.2,
        ent_coef=0.0,
        max_grad_norm=0.5,
        vf_coef=0.5,
        policy_kwargs={"net_arch": [64, 64]},
        seed=seed,
        device="cpu",
    )
    start = time.perf_counter()
    model.learn(max_frames, callback=Eval())
    wall = time.perf_counter() - start
    return {
        "lib": "sb3",
        "task": "ppo_cartpole",
        "seed": seed,
        "frames": state["solved"],
        "wall_s": round(wall, 2),
        "train_wall_s": round(wall - state["eval_wall"], 2),
        "solved": state["solved"] is not None,
    }


def sb3_sac_pendulum(seed: int, max_frames: int = 30_000) -> dict:
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    state = {"next_eval": 1000, "solved": None, "eval_wall": 0.0}

    class Eval(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps >= state["next_eval"]:
                state["next_eval"] += 1000
                t0 = time.perf_counter()
                ret = _eval_vec(self.model, "Pendulum-v1", 5, seed + 10_000, 200)
                state["eval_wall"] += time.perf_counter() - t0
                if ret >= -200:
                    state["solved"] = self.num_timesteps
                    return False
            return True

    env = gym.make("Pendulum-v1")
    model = SAC(
        "MlpPolicy",
        env,
        learning_rate=1e-3,
        buffer_size=100_000,
        learning_starts=1000,
        batch_size=256,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        policy_kwargs={"net_arch": [256, 256]},
        seed=seed,
        device="cpu",
    )
    start = time.perf_counter()
    model.learn(max_frames, callback=Eval())
    wall = time.perf_counter() - start
    return {
        "lib": "sb3",
        "task": "sac_pendulum",
        "seed": seed,
        "frames": state["solved"],
        "wall_s": round(wall, 2),
        "train_wall_s": round(wall - state["eval_wall"], 2),
        "solved": state["solved"] is not None,
    }


def torchrl_ppo_cartpole(seed: int, max_frames: int = 102_400) -> dict:
    """TorchRL's own components with the hyper-parameters of ``examples/ppo_cartpole.py``."""
    cfg = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    num_envs, steps = cfg.get("num_envs", 8), cfg.get("steps_per_env", 32)
    epochs, lr = cfg.get("epochs", 20), cfg.get("lr", 1e-3)
    gamma, lmbda = cfg.get("gamma", 0.98), cfg.get("gae_lambda", 0.8)
    minibatch = cfg.get("minibatch_size", 256)
    from tensordict.nn import TensorDictModule
    from torch import nn

    try:
        from torchrl.collectors import SyncDataCollector
    except ImportError:  # TorchRL >= 0.12 names it Collector
        from torchrl.collectors import Collector as SyncDataCollector
    from torchrl.envs import GymEnv
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    torch.manual_seed(seed)
    env = GymEnv("CartPole-v1", num_envs=num_envs)
    env.set_seed(seed)
    eval_env = GymEnv("CartPole-v1", num_envs=4)
    eval_env.set_seed(seed + 10_000)
    actor = ProbabilisticActor(
        TensorDictModule(
            MLP(in_features=4, out_features=2, num_cells=[64, 64], activation_class=nn.Tanh),
            in_keys=["observation"],
            out_keys=["logits"],
        ),
        in_keys=["logits"],
        spec=env.action_spec,
        distribution_class=OneHotCategorical,
        return_log_prob=True,
    )
    critic = ValueOperator(
        MLP(in_features=4, out_features=1, num_cells=[64, 64], activation_class=nn.Tanh),
        in_keys=["observation"],
    )
    fpb = num_envs * steps
    collector = SyncDataCollector(
        env, actor, frames_per_batch=fpb, total_frames=max_frames // fpb * fpb
    )
    gae = GAE(gamma=gamma, lmbda=lmbda, value_network=critic)
    loss_fn = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=0.2,
        entropy_bonus=False,
        normalize_advantage=True,
        loss_critic_type="l2",
        critic_coeff=0.5,
    )
    optim = torch.optim.Adam(loss_fn.parameters(), lr=lr)
    frames, next_eval, solved, eval_wall = 0, 2048, None, 0.0
    start = time.perf_counter()
    for batch in collector:
        frames += batch.numel()
        with torch.no_grad():
            gae(batch)
        flat = batch.reshape(-1)
        for _ in range(epochs):
            for idx in torch.randperm(flat.numel()).split(minibatch):
                losses = loss_fn(flat[idx])
                loss = losses["loss_objective"] + losses["loss_critic"]
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(loss_fn.parameters(), 0.5)
                optim.step()
        collector.update_policy_weights_()
        if frames >= next_eval:
            next_eval += 2048
            t0 = time.perf_counter()
            with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
                ro = eval_env.rollout(500, actor, break_when_all_done=True)
            done = ro["next", "done"].squeeze(-1).long()
            alive = (done.cumsum(-1) - done) == 0
            ret = float((ro["next", "reward"].squeeze(-1) * alive).sum(-1).mean())
            eval_wall += time.perf_counter() - t0
            if ret >= 475:
                solved = frames
                break
    wall = time.perf_counter() - start
    collector.shutdown()
    return {
        "lib": "torchrl",
        "task": "ppo_cartpole",
        "seed": seed,
        "frames": solved,
        "wall_s": round(wall, 2),
        "train_wall_s": round(wall - eval_wall, 2),
        "solved": solved is not None,
    }


if __name__ == "__main__":
    torch.set_num_threads(1)
    name, seed = sys.argv[1], int(sys.argv[2])
    print(json.dumps(globals()[name](seed)))
