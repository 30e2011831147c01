"""Time-to-solve for the peers (run under the peers venv by ``benchmarks/time_to_solve.py``).

Usage: ``python time_to_solve_peers.py FUNCTION SEED [CONFIG_JSON]`` with FUNCTION one of
``sb3_ppo_cartpole``, ``sb3_zoo_ppo_cartpole``, ``sb3_sac_pendulum``, ``torchrl_ppo_cartpole``,
``torchrl_sac_pendulum`` and CONFIG_JSON our example's config. Prints one JSON object: frames and wall time until the first deterministic evaluation reaches the
target, with the same hyper-parameters and evaluation protocol as our examples. Torch uses 1 thread.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import torch


def _cfg() -> dict:
    """Our example's config (JSON, third argument), so that every library runs the same values."""
    return json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}


class _EvalVec:
    """SB3 evaluation with our protocol: one deterministic episode in each of ``episodes`` envs.

    As in our examples, the evaluation envs are made and seeded once, and every evaluation
    starts fresh episodes from a reset (new initial states each time); an evaluation ends when
    every env has finished its episode or after ``max_steps`` steps.
    """

    def __init__(self, env_id: str, episodes: int, seed: int, max_steps: int) -> None:
        import gymnasium as gym

        self.envs = gym.make_vec(env_id, num_envs=episodes, vectorization_mode="sync")
        self.seed: int | None = seed
        self.episodes, self.max_steps = episodes, max_steps

    def __call__(self, model) -> float:
        obs, _ = self.envs.reset(seed=self.seed)
        self.seed = None
        total = np.zeros(self.episodes)
        alive = np.ones(self.episodes, dtype=bool)
        for _ in range(self.max_steps):
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, term, trunc, _ = self.envs.step(action)
            total += reward * alive
            alive &= ~(term | trunc)
            if not alive.any():
                break
        return float(total.mean())


def sb3_ppo_cartpole(
    seed: int, max_frames: int = 102_400, overrides: dict | None = None, lib: str = "sb3"
) -> dict:
    """SB3's PPO with the hyper-parameters of ``examples/ppo_cartpole.py`` (read from ``_cfg``)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    cfg = {**_cfg(), **(overrides or {})}
    every, episodes = cfg.get("eval_every", 2048), cfg.get("eval_episodes", 4)
    target = cfg.get("target_return", 475.0)
    hidden = cfg.get("hidden", 64)
    state = {"next_eval": every, "solved": None, "eval_wall": 0.0}
    evaluate = _EvalVec("CartPole-v1", episodes, seed + 10_000, 500)

    class Eval(BaseCallback):
        # Evaluate when a rollout starts, i.e. after the update on the frames counted so far
        # (as ours does); ``_on_step`` would run before the last batch is trained on.
        def _on_rollout_start(self) -> None:
            if self.num_timesteps >= state["next_eval"]:
                state["next_eval"] += every
                t0 = time.perf_counter()
                ret = evaluate(self.model)
                state["eval_wall"] += time.perf_counter() - t0
                if ret >= target:
                    state["solved"] = self.num_timesteps

        def _on_step(self) -> bool:
            return state["solved"] is None

    env = make_vec_env("CartPole-v1", n_envs=cfg.get("num_envs", 8), seed=seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=cfg.get("steps_per_env", 32),
        batch_size=cfg.get("minibatch_size", 256),
        n_epochs=cfg.get("epochs", 10),
        learning_rate=cfg.get("lr", 2e-3),
        gamma=cfg.get("gamma", 0.98),
        gae_lambda=cfg.get("gae_lambda", 0.8),
        clip_range=cfg.get("clip_epsilon", 0.2),
        ent_coef=cfg.get("entropy_coef", 0.0),
        max_grad_norm=cfg.get("max_grad_norm", 0.5),
        vf_coef=0.5,
        # Our example's fused Adam (SB3's own default eps for PPO kept).
        policy_kwargs={
            "net_arch": [hidden, hidden],
            "optimizer_kwargs": {"eps": 1e-5, "fused": True},
        },
        seed=seed,
        device="cpu",
    )
    start, cpu_start = time.perf_counter(), time.process_time()
    model.learn(max_frames, callback=Eval())
    return _record(lib, "ppo_cartpole", seed, state["solved"], start, cpu_start, state["eval_wall"])


def sb3_zoo_ppo_cartpole(seed: int) -> dict:
    """SB3's PPO with the RL Zoo's tuned CartPole settings: 20 epochs at lr 1e-3, else ours.

    Our example trains 10 epochs at lr 2e-3; with those, SB3 needs more frames, so this row
    shows SB3 at its own best as well.
    """
    return sb3_ppo_cartpole(seed, overrides={"epochs": 20, "lr": 1e-3}, lib="sb3_zoo")


def sb3_sac_pendulum(seed: int, max_frames: int = 30_000) -> dict:
    """SB3's SAC with the hyper-parameters of ``examples/sac_pendulum.py`` (read from ``_cfg``).

    Like ours, it collects ``frames_per_batch`` frames, then takes as many gradient steps.
    """
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    cfg = _cfg()
    every, episodes = cfg.get("eval_every", 1000), cfg.get("eval_episodes", 5)
    target = cfg.get("target_return", -200.0)
    hidden, fpb = cfg.get("hidden", 64), cfg.get("frames_per_batch", 200)
    state = {"next_eval": every, "solved": None, "eval_wall": 0.0}
    evaluate = _EvalVec("Pendulum-v1", episodes, seed + 10_000, 200)

    class Eval(BaseCallback):
        # Evaluate when a rollout starts, i.e. after the update on the frames counted so far
        # (as ours does); ``_on_step`` would run before the last batch is trained on.
        def _on_rollout_start(self) -> None:
            if self.num_timesteps >= state["next_eval"]:
                state["next_eval"] += every
                t0 = time.perf_counter()
                ret = evaluate(self.model)
                state["eval_wall"] += time.perf_counter() - t0
                if ret >= target:
                    state["solved"] = self.num_timesteps

        def _on_step(self) -> bool:
            return state["solved"] is None

    env = gym.make("Pendulum-v1")
    model = SAC(
        "MlpPolicy",
        env,
        learning_rate=cfg.get("lr", 1e-3),
        buffer_size=cfg.get("buffer_size", 100_000),
        # SB3 trains only once ``num_timesteps > learning_starts``; ours already at the batch
        # that reaches ``init_random_frames``.
        learning_starts=cfg.get("init_random_frames", 1000) - 1,
        batch_size=cfg.get("batch_size", 256),
        tau=cfg.get("tau", 0.005),
        gamma=cfg.get("gamma", 0.99),
        train_freq=(fpb, "step"),
        gradient_steps=int(fpb * cfg.get("updates_per_frame", 1.0)),
        policy_kwargs={"net_arch": [hidden, hidden], "optimizer_kwargs": {"fused": True}},
        seed=seed,
        device="cpu",
    )
    start, cpu_start = time.perf_counter(), time.process_time()
    model.learn(max_frames, callback=Eval())
    return _record(
        "sb3", "sac_pendulum", seed, state["solved"], start, cpu_start, state["eval_wall"]
    )


def torchrl_ppo_cartpole(seed: int, max_frames: int = 102_400) -> dict:
    """TorchRL's own components with the hyper-parameters of ``examples/ppo_cartpole.py``."""
    cfg = _cfg()
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
    optim = torch.optim.Adam(loss_fn.parameters(), lr=lr, fused=True)
    frames, next_eval, solved, eval_wall = 0, 2048, None, 0.0
    start, cpu_start = time.perf_counter(), time.process_time()
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
            ret = _torchrl_eval(eval_env, actor, 500)
            eval_wall += time.perf_counter() - t0
            if ret >= 475:
                solved = frames
                break
    result = _record("torchrl", "ppo_cartpole", seed, solved, start, cpu_start, eval_wall)
    collector.shutdown()
    return result


def _record(
    lib: str,
    task: str,
    seed: int,
    solved: int | None,
    start: float,
    cpu_start: float,
    eval_wall: float,
) -> dict:
    """One run's result, timed up to now from ``start`` (wall) and ``cpu_start`` (CPU)."""
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {
        "lib": lib,
        "task": task,
        "seed": seed,
        "frames": solved,
        "wall_s": round(wall, 2),
        "train_wall_s": round(wall - eval_wall, 2),
        "cpu_s": round(cpu, 2),
        "solved": solved is not None,
    }


def _torchrl_eval(env, actor, max_steps: int) -> float:
    """Mean return of one deterministic episode per sub-env (the protocol of ``evaluate``)."""
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
        ro = env.rollout(max_steps, actor, break_when_all_done=True)
    done = ro["next", "done"].reshape(*ro.batch_size).long()
    alive = (done.cumsum(-1) - done) == 0
    return float((ro["next", "reward"].reshape(*ro.batch_size) * alive).sum(-1).mean())


def torchrl_sac_pendulum(seed: int) -> dict:
    """TorchRL's SAC with the hyper-parameters and loop of ``examples/sac_pendulum.py``."""
    cfg = _cfg()
    hidden, fpb = cfg.get("hidden", 64), cfg.get("frames_per_batch", 200)
    init_random, max_frames = cfg.get("init_random_frames", 1000), cfg.get("frames", 30_000)
    every, episodes = cfg.get("eval_every", 1000), cfg.get("eval_episodes", 5)
    target = cfg.get("target_return", -200.0)
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torch import nn

    try:
        from torchrl.collectors import SyncDataCollector
    except ImportError:  # TorchRL >= 0.12 names it Collector
        from torchrl.collectors import Collector as SyncDataCollector
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.envs import GymEnv
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import SACLoss, SoftUpdate

    torch.manual_seed(seed)
    env = GymEnv("Pendulum-v1")
    env.set_seed(seed)
    eval_env = GymEnv("Pendulum-v1", num_envs=episodes)
    eval_env.set_seed(seed + 10_000)
    space = env.action_spec.space
    actor = ProbabilisticActor(
        TensorDictModule(
            nn.Sequential(
                MLP(
                    in_features=3,
                    out_features=2,
                    num_cells=[hidden, hidden],
                    activation_class=nn.ReLU,
                ),
                NormalParamExtractor(),
            ),
            in_keys=["observation"],
            out_keys=["loc", "scale"],
        ),
        in_keys=["loc", "scale"],
        spec=env.action_spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": space.low, "high": space.high},
    )
    qvalue = ValueOperator(
        MLP(in_features=4, out_features=1, num_cells=[hidden, hidden], activation_class=nn.ReLU),
        in_keys=["observation", "action"],
    )
    loss_fn = SACLoss(actor, qvalue, num_qvalue_nets=2, loss_function="l2")
    loss_fn.make_value_estimator(gamma=cfg.get("gamma", 0.99))
    target_updater = SoftUpdate(loss_fn, tau=cfg.get("tau", 0.005))
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.get("lr", 1e-3), fused=True)
    collector = SyncDataCollector(
        env,
        actor,
        frames_per_batch=fpb,
        total_frames=max_frames,
        init_random_frames=init_random,
    )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.get("buffer_size", 100_000)),
        batch_size=cfg.get("batch_size", 256),
    )
    updates = int(fpb * cfg.get("updates_per_frame", 1.0))
    frames, next_eval, solved, eval_wall = 0, every, None, 0.0
    start, cpu_start = time.perf_counter(), time.process_time()
    for batch in collector:
        frames += batch.numel()
        buffer.extend(batch.reshape(-1))
        if frames >= init_random:
            for _ in range(updates):
                losses = loss_fn(buffer.sample())
                loss = losses["loss_actor"] + losses["loss_qvalue"] + losses["loss_alpha"]
                optim.zero_grad()
                loss.backward()
                optim.step()
                target_updater.step()
            collector.update_policy_weights_()
        if frames >= next_eval:
            next_eval += every
            t0 = time.perf_counter()
            ret = _torchrl_eval(eval_env, actor, 200)
            eval_wall += time.perf_counter() - t0
            if ret >= target:
                solved = frames
                break
    result = _record("torchrl", "sac_pendulum", seed, solved, start, cpu_start, eval_wall)
    collector.shutdown()
    return result


if __name__ == "__main__":
    torch.set_num_threads(1)
    name, seed = sys.argv[1], int(sys.argv[2])
    print(json.dumps(globals()[name](seed)))
