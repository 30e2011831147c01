"""Collector throughput (frames/s): ours, a hand-written gymnasium loop, TorchRL's and SB3's.

Every case runs a 2x64 MLP policy (tanh) with torch on 1 thread (``torch.set_num_threads(1)``,
workers too): CartPole-v1 takes the argmax of 2 logits (index actions), Pendulum-v1 and
HalfCheetah-v5 ``2 * tanh`` / ``tanh`` of the outputs. Cases:

- ``sync_1env``: ``SyncDataCollector(GymEnv(id))``, batches of 1000 frames;
- ``sync_serial8``: ``SyncDataCollector(SerialEnv(8, ...))``, 1000 frames (125 steps);
- ``sync_vec8``: ``SyncDataCollector(GymEnv(id, num_envs=8))`` (a gymnasium ``SyncVectorEnv``);
- ``multisync_2w`` / ``multiasync_2w``: 2 worker processes of one env each, 1000 frames per
  batch (500 per worker for the sync one, 1000 per worker batch for the async one);
- ``handloop_1env``, ``handloop_syncvec8`` / ``handloop_asyncvec8``: the reference, a
  hand-written loop over ``gymnasium.make(id)`` / ``SyncVectorEnv(8)`` / ``AsyncVectorEnv(8)``
  writing obs/action/reward/done into preallocated tensors (vector envs: gymnasium's autoreset);
- peers (``benchmarks/_peers/collect_peers.py`` under ``TORCHRL_PEERS_PYTHON``, default
  ``/work/peers-venv/bin/python``): TorchRL's ``Collector`` (1 env, ``SerialEnv(8)``),
  ``MultiSyncCollector``/``MultiAsyncCollector`` (2 workers), and SB3's PPO
  ``collect_rollouts`` on ``DummyVecEnv(1)``/``DummyVecEnv(8)`` (which also runs a value net).

Each case reports ``frames_per_s`` (wall clock; with ``--repeats N``, of the best of N windows of
``--seconds``, for every case alike) and ``frames_per_cpu_s`` (frames per CPU second
of this process and its child processes: what a quiet machine would give when other jobs share
the cores; for multi-process cases it shows the cost per frame, not the parallel speed). Modes: ``--profile`` prints where the time of ``sync_1env`` on CartPole goes
(cProfile, grouped); ``--memory FRAMES`` collects FRAMES CartPole frames with
``MultiaSyncDataCollector`` and reports the resident-memory growth (parent + workers) after a
warm-up. One JSON object per line. ``--envs HalfCheetah-v5`` (gymnasium MuJoCo, needs the ``mujoco``
package) is the case where the env step (~60 us) costs more than the policy (~30 us): there the
multi-process collectors should beat ``sync_1env`` in wall clock by up to the number of free
cores, at about the same ``frames_per_cpu_s``. On a machine whose cores are busy with other
jobs only the CPU figures compare: with Linux autogroup scheduling
(``/proc/sys/kernel/sched_autogroup_enabled``) all processes of one session share one session's
CPU share, so extra workers get no extra CPU time (``SleepyPendulum``, whose step waits without
using the CPU, shows the parallel speed even then). Usage:
``python benchmarks/collect.py [--seconds 3] [--repeats 1] [--envs CartPole-v1 Pendulum-v1 HalfCheetah-v5]
[--cases sync_1env multisync_2w ...] [--no-peers] [--profile] [--memory 1000000]
[--no-validate-actions]``. ``--no-validate-actions`` builds our envs with
``validate_actions=False`` (no check of the actions against the action spec), to show what the
check costs: run once with and once without it.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict.nn import TensorDictModule

from torchrl.collectors import MultiaSyncDataCollector, MultiSyncDataCollector, SyncDataCollector
from torchrl.envs import GymEnv, GymWrapper, SerialEnv

sys.path.insert(0, str(Path(__file__).resolve().parent / "_peers"))

from collect_cases import DIMS, SCALE, make_net, rate  # noqa: E402  (shared with the peers)

# "SleepyPendulum": Pendulum-v1 whose step also waits 1 ms (a simulator or device that answers
# slowly without using this CPU): shows the parallel speed of multi-process collectors on a
# machine whose cores are busy with other work.
SLEEP_S = 1e-3
# Timed windows per case (the best is reported): --repeats.
REPEATS = 1
# Our envs check actions against their spec unless --no-validate-actions.
VALIDATE_ACTIONS = True


def gym_make(env_name: str) -> Any:
    import gymnasium as gym

    if env_name != "SleepyPendulum":
        return gym.make(env_name)

    class Sleepy(gym.Wrapper):
        def step(self, action: Any) -> Any:
            time.sleep(SLEEP_S)
            return self.env.step(action)

    return Sleepy(gym.make("Pendulum-v1"))


def _emit(record: dict) -> None:
    print(json.dumps({"bench": "collect", **record}), flush=True)


def make_policy(env_name: str) -> TensorDictModule:
    return TensorDictModule(make_net(env_name), in_keys=["observation"], out_keys=["action"])


def make_env(
    env_name: str, num_envs: int = 0, validate_actions: bool = True
) -> GymEnv | GymWrapper:
    if env_name == "SleepyPendulum":
        if num_envs:
            raise ValueError("SleepyPendulum has no vector version here")
        return GymWrapper(
            gym_make(env_name),
            categorical_action_encoding=True,
            validate_actions=validate_actions,
        )
    return GymEnv(
        env_name,
        num_envs=num_envs,
        categorical_action_encoding=True,
        validate_actions=validate_actions,
    )


def _serial(n: int, env_fn: Callable[[], Any]) -> SerialEnv:
    env = SerialEnv(n, env_fn)
    env.validate_actions = VALIDATE_ACTIONS  # the batched env checks the stacked actions
    return env


def bench_collector(collector: Any, seconds: float) -> dict:
    it = iter(collector)
    try:
        out = rate(lambda: next(it).numel(), seconds, REPEATS)
    finally:
        collector.shutdown()
    return out


def handloop_single(env_name: str, seconds: float, steps: int = 1000) -> dict:
    env = gym_make(env_name)
    obs, _ = env.reset(seed=0)
    net = make_net(env_name)
    n_in, n_out = DIMS[env_name]
    discrete = env_name not in SCALE
    buf_obs = torch.zeros(steps, n_in)
    buf_act = torch.zeros(steps, dtype=torch.int64) if discrete else torch.zeros(steps, n_out)
    buf_rew = torch.zeros(steps)
    buf_done = torch.zeros(steps, dtype=torch.bool)
    state = {"obs": obs}

    def batch() -> int:
        obs = state["obs"]
        with torch.no_grad():
            for t in range(steps):
                o = torch.from_numpy(obs).float()
                action = net(o)
                obs, reward, term, trunc, _ = env.step(
                    action.item() if discrete else action.numpy()
                )
                buf_obs[t] = o
                buf_act[t] = action
                buf_rew[t] = reward
                buf_done[t] = term or trunc
                if term or trunc:
                    obs, _ = env.reset()
        state["obs"] = obs
        return steps

    try:
        return rate(batch, seconds, REPEATS)
    finally:
        env.close()


def handloop(env_name: str, vector: str, seconds: float, n: int = 8, steps: int = 125) -> dict:
    import gymnasium as gym

    cls = gym.vector.SyncVectorEnv if vector == "sync" else gym.vector.AsyncVectorEnv
    env = cls([functools.partial(gym_make, env_name)] * n)
    obs, _ = env.reset(seed=0)
    net = make_net(env_name)
    n_in, n_out = DIMS[env_name]
    discrete = env_name not in SCALE
    buf_obs = torch.zeros(steps, n, n_in)
    buf_act = torch.zeros(steps, n, dtype=torch.int64) if discrete else torch.zeros(steps, n, n_out)
    buf_rew = torch.zeros(steps, n)
    buf_done = torch.zeros(steps, n, dtype=torch.bool)
    state = {"obs": obs}

    def batch() -> int:
        obs = state["obs"]
        with torch.no_grad():
            for t in range(steps):
                o = torch.from_numpy(obs).float()
                action = net(o)
                obs, reward, term, trunc, _ = env.step(action.numpy())
                buf_obs[t] = o
                buf_act[t] = action
                buf_rew[t] = torch.from_numpy(reward)
                buf_done[t] = torch.from_numpy(term | trunc)
        state["obs"] = obs
        return steps * n

    try:
        return rate(batch, seconds, REPEATS)
    finally:
        env.close()


def _ours_cases(env_name: str) -> dict[str, Callable[[], Any]]:
    # the flag travels in the partial: worker processes do not run main()
    env_fn = functools.partial(make_env, env_name, validate_actions=VALIDATE_ACTIONS)

    def policy() -> TensorDictModule:
        return make_policy(env_name)

    return {
        "sync_1env": lambda: SyncDataCollector(env_fn(), policy(), frames_per_batch=1000),
        "sync_serial8": lambda: SyncDataCollector(
            _serial(8, env_fn), policy(), frames_per_batch=1000
        ),
        "sync_vec8": lambda: SyncDataCollector(env_fn(8), policy(), frames_per_batch=1000),
        "multisync_2w": lambda: MultiSyncDataCollector(
            [env_fn] * 2, policy(), frames_per_batch=1000
        ),
        "multiasync_2w": lambda: MultiaSyncDataCollector(
            [env_fn] * 2, policy(), frames_per_batch=1000
        ),
    }


def run_ours(env_name: str, seconds: float, only: list[str] | None) -> None:
    for case, build in _ours_cases(env_name).items():
        if only and case not in only:
            continue
        try:
            collector = build()
        except ValueError as err:  # a case this env does not have
            _emit({"impl": "ours", "env": env_name, "case": case, "skipped": str(err)})
            continue
        result = bench_collector(collector, seconds)
        _emit(
            {
                "impl": "ours",
                "env": env_name,
                "case": case,
                "torch_threads": 1,
                "validate_actions": VALIDATE_ACTIONS,
                **result,
            }
        )
    if not only or "handloop_1env" in only:
        result = handloop_single(env_name, seconds)
        _emit({"impl": "reference", "env": env_name, "case": "handloop_1env", **result})
    for vector in ("sync", "async"):
        case = f"handloop_{vector}vec8"
        if only and case not in only:
            continue
        _emit(
            {
                "impl": "reference",
                "env": env_name,
                "case": case,
                **handloop(env_name, vector, seconds),
            }
        )


def run_peers(envs: list[str], seconds: float) -> None:
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    script = Path(__file__).resolve().parent / "_peers" / "collect_peers.py"
    if not Path(python).exists():
        _emit({"impl": "peers", "skipped": f"no peers python at {python}"})
        return
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # Run from /tmp so that `import torchrl` finds the peer TorchRL, not this repository.
    proc = subprocess.run(
        [python, str(script), str(seconds), str(REPEATS), *envs],
        cwd="/tmp",
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            print(line, flush=True)
    if proc.returncode:
        _emit({"impl": "peers", "error": proc.stderr[-1000:]})


def profile(seconds: float) -> None:
    collector = SyncDataCollector(
        make_env("CartPole-v1", validate_actions=VALIDATE_ACTIONS),
        make_policy("CartPole-v1"),
        frames_per_batch=1000,
    )
    it = iter(collector)
    next(it)
    prof = cProfile.Profile()
    frames, start = 0, time.perf_counter()
    prof.enable()
    while time.perf_counter() - start < seconds:
        frames += next(it).numel()
    prof.disable()
    collector.shutdown()
    stats = pstats.Stats(prof)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    # cumulative time of the entry points of each part of a step
    groups = {
        "policy (direct TensorDictModule call + MLP)": (
            "torchrl/collectors/_policy.py",
            "__call__",
        ),
        "env.step_and_maybe_reset (all)": ("torchrl/envs/common.py", "step_and_maybe_reset"),
        "  gymnasium env.step (raw)": ("gymnasium/wrappers/common.py", "step"),
        "  env.reset (partial resets)": ("torchrl/envs/common.py", "reset"),
        "collector write into batch": ("torchrl/collectors/_buffer.py", "write"),
        "batch hand-out / buffer reuse": ("torchrl/collectors/sync.py", "_renew_slot"),
        "collector traj ids (per batch)": ("torchrl/collectors/sync.py", "_assign_traj_ids"),
        "batch clone": ("tensordict/base.py", "clone"),
    }
    loop = next(
        v[3]
        for k, v in stats.stats.items()
        if k[2] == "_rollout_buffered"  # type: ignore[attr-defined]
    )
    shares = {}
    for label, (path, func) in groups.items():
        cum = max(
            (v[3] for k, v in stats.stats.items() if k[0].endswith(path) and k[2] == func),  # type: ignore[attr-defined]
            default=0.0,
        )
        shares[label] = round(100 * cum / loop, 1)
    top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:12]  # type: ignore[attr-defined]
    _emit(
        {
            "mode": "profile",
            "case": "sync_1env CartPole-v1",
            "frames": frames,
            "percent_of_collection_loop": shares,
            "top_tottime": [
                {
                    "fn": f"{Path(k[0]).name}:{k[2]}",
                    "s": round(v[2], 3),
                    "pct": round(100 * v[2] / total, 1),
                }
                for k, v in top
            ],
        }
    )


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory(frames: int) -> None:
    env_fn = functools.partial(make_env, "CartPole-v1", validate_actions=VALIDATE_ACTIONS)
    collector = MultiaSyncDataCollector(
        [env_fn] * 2, make_policy("CartPole-v1"), frames_per_batch=1000, total_frames=frames
    )
    pids = [os.getpid()] + [p.pid for p in collector._procs]
    warm = min(50_000, frames // 10)
    seen, base, start = 0, None, time.perf_counter()
    samples = []
    for batch in collector:
        seen += batch.numel()
        if base is None and seen >= warm:
            base = sum(_rss(p) for p in pids)
        if base is not None and seen % 100_000 < batch.numel():
            samples.append(sum(_rss(p) for p in pids) - base)
    end = sum(_rss(p) for p in pids)
    wall = time.perf_counter() - start
    collector.shutdown()
    assert base is not None
    _emit(
        {
            "mode": "memory",
            "case": "multiasync_2w CartPole-v1",
            "frames": seen,
            "warmup_frames": warm,
            "rss_after_warmup_mb": round(base / 2**20, 1),
            "rss_growth_mb": round((end - base) / 2**20, 2),
            "growth_every_100k_mb": [round(s / 2**20, 2) for s in samples],
            "frames_per_s": round(seen / wall),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument(
        "--repeats", type=int, default=1, help="timed windows per case, the best is reported"
    )
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "Pendulum-v1"])
    parser.add_argument("--cases", nargs="+", default=None, help="only these of our cases")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--memory", type=int, default=0, metavar="FRAMES")
    parser.add_argument(
        "--no-validate-actions",
        action="store_true",
        help="build our envs with validate_actions=False (no action checks)",
    )
    args = parser.parse_args()
    global REPEATS, VALIDATE_ACTIONS
    REPEATS = max(1, args.repeats)
    VALIDATE_ACTIONS = not args.no_validate_actions
    torch.set_num_threads(1)
    np.random.seed(0)
    if args.profile:
        profile(args.seconds)
        return
    if args.memory:
        memory(args.memory)
        return
    for env_name in args.envs:
        run_ours(env_name, args.seconds, args.cases)
    if not args.no_peers:
        run_peers(args.envs, args.seconds)


if __name__ == "__main__":
    sys.exit(main())
