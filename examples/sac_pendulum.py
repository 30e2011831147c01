"""SAC on Pendulum-v1: a tanh-Gaussian actor, twin Q critics, a learned temperature.

The collector steps the env with the stochastic actor (uniform random actions for the first
``init_random_frames``); each batch goes into the replay buffer and is followed by
``updates_per_frame`` gradient steps per collected frame on the SAC loss (actor, critics and
temperature share one optimizer step); the target critics follow by Polyak averaging. Every
``eval_every`` frames the deterministic policy (the squashed mean) is evaluated; training stops
at the first evaluation that reaches ``target_return`` and, with ``confirm`` (the default), a
second one on fresh episodes agrees: five episodes can pass by luck while other starting states
still fail.

The whole gradient step (the SAC loss, its backward, the Adam step and the Polyak update) is
compiled into one graph by default when the frame budget allows at least ``compile_min_updates``
gradient steps (torchrl's ``make_update_step``: dynamo traces ``backward``, Adam runs through
torch's functional ``adam`` on the optimizer's own state, the guards skip the networks'
attributes, inductor's C++ wrapper calls the kernels); the batches of one round are drawn in one ``sample``
call. Measured on 2 busy AMD EPYC cores (torch 2.13 CPU, 1 thread, CPU time per step on the
example's batches): eager 2.9-3.3 ms, compiled 0.89-1.08 ms (0.30-0.32x; the library helper,
under load 3-5: 0.96 and 1.08 ms against 3.07 and 3.34 ms eager; compiling the loss and its
backward only, with Adam and the Polyak update eager and the default guards: 1.21-1.34 ms). Compiling costs ~3.6 s of CPU (4-7 s wall on this busy machine) with inductor's on-disk cache
warm and ~24 s wall on a machine's first run, once per process: later ``train`` calls reuse the
graph (the step holds the optimizer's tensors, not the optimizer, so a new run does not
recompile). A run that solves in 3-6k frames repays the warm cost only (``--compile false`` for a
one-off run on a fresh machine). ``benchmarks/time_to_solve.py --tasks sac_pendulum --libs
ours,sb3`` (3 seeds, one process, load average 5; recorded in
``docs/benchmarks/time_to_solve.json``): ours 18.1 / 6.5 / 4.8 s at 6000 / 4000 / 3000 frames
(the first seed pays the compile: 7.4 s), Stable-Baselines3 13.8 / 18.3 / 12.3 s at 4000 / 4000 /
3000: 0.47x its median wall time, 0.40x its median wall time per frame (two earlier runs: 0.35x
and 0.43x, 0.38x and 0.40x per frame).

Usage: ``python examples/sac_pendulum.py [--frames N] [--seed S] [--out DIR] [--compile false]``.
"""

from __future__ import annotations

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
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import GymEnv, RewardSum, TransformedEnv
from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import SACLoss, SoftUpdate
from torchrl.objectives._update_step import make_update_step


@dataclass
class Config:
    env_name: str = "Pendulum-v1"
    frames: int = 30_000  # upper bound; training stops once solved
    frames_per_batch: int = 200
    updates_per_frame: float = 1.0
    init_random_frames: int = 1000
    buffer_size: int = 100_000
    batch_size: int = 256
    lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.005
    hidden: int = 64
    eval_every: int = 1000
    eval_episodes: int = 5
    confirm: bool = True  # re-check a passing evaluation on fresh episodes before stopping
    final_eval_episodes: int = 10
    target_return: float = -200.0
    seed: int = 0
    out: str = "outputs"
    progress: bool = True
    # torch.compile the gradient step (loss, backward, Adam, Polyak update) when the frame
    # budget allows at least compile_min_updates gradient steps: compiling takes seconds that
    # fewer steps cannot repay (see the module docstring)
    compile: bool = True
    compile_min_updates: int = 2000


def _bound(value: torch.Tensor) -> float | torch.Tensor:
    """A bound shared by every action dim as a number, else the tensor.

    ``TanhNormal`` checks tensor bounds with a data-dependent test, which ``torch.compile``
    cannot trace: numbers keep the compiled update in one graph.
    """
    flat = value.flatten()
    return float(flat[0]) if bool((flat == flat[0]).all()) else value


def make_agent(env: GymEnv, hidden: int) -> tuple[ProbabilisticActor, ValueOperator]:
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    actor_net = nn.Sequential(
        MLP(
            in_features=n_obs,
            out_features=2 * n_act,
            num_cells=[hidden, hidden],
            activation_class=nn.ReLU,
        ),
        NormalParamExtractor(),
    )
    actor = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=env.action_spec,
        distribution_class=TanhNormal,
        distribution_kwargs={
            "low": _bound(env.action_spec.space.low),
            "high": _bound(env.action_spec.space.high),
        },
    )
    qvalue = ValueOperator(
        MLP(
            in_features=n_obs + n_act,
            out_features=1,
            num_cells=[hidden, hidden],
            activation_class=nn.ReLU,
        ),
        in_keys=["observation", "action"],
    )
    return actor, qvalue


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
    # One fused kernel for all parameters: torch's CPU default is a Python loop over them.
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr, fused=True)

    budget = int((cfg.frames - cfg.init_random_frames) * cfg.updates_per_frame)
    compiled = cfg.compile and budget >= cfg.compile_min_updates
    # One graph for the loss, its backward, Adam and the Polyak update when compiled (see the
    # module docstring); eager, the fused optim.step().
    update_step = make_update_step(
        loss_fn, optim, target_updater, compile=compiled, return_losses=False
    )

    collector = SyncDataCollector(
        env,
        actor,
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.frames,
        init_random_frames=cfg.init_random_frames,
    )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.buffer_size), batch_size=cfg.batch_size
    )

    history: dict = {
        "train": [],
        "eval": [],
        "solved_at": None,
        "eval_wall": 0.0,
        "compiled": compiled,
    }
    frames, next_eval = 0, cfg.eval_every
    start, cpu_start = time.perf_counter(), time.process_time()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="SAC Pendulum")
    for batch in collector:
        n = batch.numel()
        frames += n
        buffer.extend(batch.reshape(-1))
        updates = int(n * cfg.updates_per_frame)
        if frames >= cfg.init_random_frames and updates:
            # The buffer does not change during these updates: one draw of all their batches
            # (uniform, with replacement) is distributed as `updates` draws, for one call.
            batches = buffer.sample(updates * cfg.batch_size).reshape(updates, -1).unbind(0)
            if "first_update_wall" not in history:  # compiling, when compiled
                first_start = time.perf_counter()
                update_step(batches[0])
                history["first_update_wall"] = time.perf_counter() - first_start
                batches = batches[1:]
            for sample in batches:
                update_step(sample)
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
    # reused by iql_pendulum_offline.py: its behaviour policy, or its training data as a dataset
    history["actor"] = actor
    history["buffer"] = buffer
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    plot_curve(history, f"{cfg.out}/sac_pendulum.png", "SAC, Pendulum-v1", target=cfg.target_return)
    report("SAC Pendulum-v1", history, cfg.target_return, history["final_return"])


if __name__ == "__main__":
    main()
