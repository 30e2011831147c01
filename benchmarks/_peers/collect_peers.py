"""Peer side of ``benchmarks/collect.py``: TorchRL's and SB3's collectors on the same workloads.

Run by the peers' python (``TORCHRL_PEERS_PYTHON``) from outside the repo, so that ``import
torchrl`` finds TorchRL and not this package. Same policy (2x64 tanh MLP, argmax / ``2 tanh``
head), same envs, batches of 1000 frames, 1 torch thread. Prints one JSON object per case.

Usage: ``python collect_peers.py SECONDS REPEATS ENV_ID [ENV_ID ...]`` (the best of ``REPEATS``
windows of ``SECONDS`` per case).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

DIMS = {"CartPole-v1": (4, 2), "Pendulum-v1": (3, 1), "HalfCheetah-v5": (17, 6)}
SCALE = {"Pendulum-v1": 2.0, "HalfCheetah-v5": 1.0}
REPEATS = 1


def _emit(impl: str, record: dict) -> None:
    print(json.dumps({"bench": "collect", "impl": impl, **record}), flush=True)


def _children_cpu() -> float:
    """CPU seconds (user + system) used so far by the live child processes (from /proc)."""
    me, tick, total = os.getpid(), os.sysconf("SC_CLK_TCK"), 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _rate(run_batch: Callable[[], int], seconds: float) -> dict:
    """Frames per second of ``run_batch`` over ``seconds``: the best of ``REPEATS`` windows.

    Every case (ours, the reference loops, the peers) is timed alike; the best window is the one
    least disturbed by other work on a shared machine.
    """
    run_batch()  # warm-up (allocation, first resets)
    best: dict | None = None
    for _ in range(REPEATS):
        frames, start = 0, time.perf_counter()
        cpu, children = time.process_time(), _children_cpu()
        while time.perf_counter() - start < seconds:
            frames += run_batch()
        wall = time.perf_counter() - start
        own = time.process_time() - cpu
        # Wall clock is the figure; CPU time (this process and its workers) shows what a quiet
        # machine would give when other jobs share the cores.
        window = {
            "frames_per_s": round(frames / wall),
            "frames_per_cpu_s": round(frames / max(own + _children_cpu() - children, 1e-9)),
            "frames": frames,
        }
        if best is None or window["frames_per_s"] > best["frames_per_s"]:
            best = window
    assert best is not None
    return {**best, "windows": REPEATS}


class ToFloat(nn.Module):
    """Casts observations to float32 (MuJoCo envs return float64; a no-op otherwise)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float()


class Head(nn.Module):
    """argmax (discrete) or ``scale * tanh`` of the MLP outputs (module level: picklable)."""

    def __init__(self, scale: float | None) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.scale is None:
            return x.argmax(-1)
        return self.scale * torch.tanh(x)


def _net(env_name: str) -> nn.Sequential:
    n_in, n_out = DIMS[env_name]
    torch.manual_seed(0)
    return nn.Sequential(
        ToFloat(),
        nn.Linear(n_in, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, n_out),
        Head(SCALE.get(env_name)),
    )  # fmt: skip


def _make_env(env_name: str) -> Any:
    from torchrl.envs import GymEnv

    return GymEnv(env_name, categorical_action_encoding=True)


def torchrl_cases(env_name: str, seconds: float) -> None:
    from tensordict.nn import TensorDictModule

    import torchrl
    from torchrl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
    from torchrl.envs import SerialEnv

    impl = f"torchrl-{torchrl.__version__}"
    env_fn = functools.partial(_make_env, env_name)

    def policy() -> Any:
        return TensorDictModule(_net(env_name), in_keys=["observation"], out_keys=["action"])

    cases: dict[str, Callable[[], Any]] = {
        "sync_1env": lambda: Collector(env_fn(), policy(), frames_per_batch=1000),
        "sync_serial8": lambda: Collector(SerialEnv(8, env_fn), policy(), frames_per_batch=1000),
        "multisync_2w": lambda: MultiSyncCollector([env_fn] * 2, policy(), frames_per_batch=1000),
        "multiasync_2w": lambda: MultiAsyncCollector([env_fn] * 2, policy(), frames_per_batch=1000),
    }
    for case, build in cases.items():
        try:
            collector = build()
            it = iter(collector)
            try:
                out = _rate(lambda it=it: next(it).numel(), seconds)
            finally:
                collector.shutdown()
            _emit(impl, {"env": env_name, "case": case, **out})
        except Exception as err:  # a case that fails is reported, not fatal
            _emit(impl, {"env": env_name, "case": case, "skipped": repr(err)[:300]})
            traceback.print_exc()


def sb3_cases(env_name: str, seconds: float) -> None:
    import gymnasium as gym
    import stable_baselines3 as sb3
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    impl = f"sb3-{sb3.__version__}"
    for n in (1, 8):
        case = f"ppo_collect_rollouts_dummyvec{n}"
        try:
            venv = DummyVecEnv([functools.partial(gym.make, env_name)] * n)
            model = PPO(
                "MlpPolicy",
                venv,
                n_steps=1000 // n,
                batch_size=1000 // n * n,
                device="cpu",
                policy_kwargs={"net_arch": [64, 64]},
                seed=0,
            )
            _, callback = model._setup_learn(10**9, callback=None)
            callback.on_training_start(locals(), globals())

            def batch(model: Any = model, callback: Any = callback, n: int = n) -> int:
                model.collect_rollouts(model.env, callback, model.rollout_buffer, model.n_steps)
                return model.n_steps * n

            _emit(
                impl,
                {
                    "env": env_name,
                    "case": case,
                    "note": "also runs the value net",
                    **_rate(batch, seconds),
                },
            )
            venv.close()
        except Exception as err:
            _emit(impl, {"env": env_name, "case": case, "skipped": repr(err)[:300]})
            traceback.print_exc()


def main() -> None:
    global REPEATS
    seconds = float(sys.argv[1])
    REPEATS = int(sys.argv[2])
    envs = sys.argv[3:]
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    for env_name in envs:
        try:
            torchrl_cases(env_name, seconds)
        except Exception as err:
            _emit("torchrl-peer", {"env": env_name, "skipped": repr(err)[:300]})
        try:
            sb3_cases(env_name, seconds)
        except Exception as err:
            _emit("sb3-peer", {"env": env_name, "skipped": repr(err)[:300]})


if __name__ == "__main__":
    main()
