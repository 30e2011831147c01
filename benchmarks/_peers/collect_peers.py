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
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import torch
from collect_cases import make_net, rate  # this script's own folder

REPEATS = 1


def _emit(impl: str, record: dict) -> None:
    print(json.dumps({"bench": "collect", "impl": impl, **record}), flush=True)


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
        return TensorDictModule(make_net(env_name), in_keys=["observation"], out_keys=["action"])

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
                out = rate(lambda it=it: next(it).numel(), seconds, REPEATS)
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
                    **rate(batch, seconds, REPEATS),
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
