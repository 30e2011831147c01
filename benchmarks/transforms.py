"""Per-step cost of env transforms: a ``TransformedEnv`` with 0-3 simple transforms.

The base env's ``_step`` does almost nothing, so the figures are what the transform layer adds.
Each configuration runs a loop of ``step_and_maybe_reset`` with a fixed action (the path a
collector takes, without a rollout's growing list of steps); ``added_us_per_step`` is its time
per step minus the bare env's, and ``us_per_transform`` divides that by the number of transforms. ``cpu_*``
figures use this thread's CPU time (robust to other processes on a shared machine). Prints one
JSON object per measurement; runs with ``torch.set_num_threads(1)``.

Usage: ``python benchmarks/transforms.py [--steps 10000] [--no-peers]``. When a TorchRL install
is available (``TORCHRL_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``) the same
configurations are timed under TorchRL.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from tensordict import TensorDict

from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase
from torchrl.envs.transforms import (
    CatFrames,
    Compose,
    ObservationNorm,
    RewardSum,
    StepCounter,
    TransformedEnv,
)

torch.set_num_threads(1)


class TrivialEnv(EnvBase):
    """Observation ``[*B, 4]``, action ``Categorical(2)``; never done."""

    def __init__(self, batch_size=()):
        super().__init__(batch_size=batch_size)
        b = self.batch_size
        self.observation_spec = Composite(observation=Unbounded(shape=(*b, 4)), shape=b)
        self.action_spec = Categorical(2, shape=b)
        self._obs = torch.zeros(*b, 4)
        self._flag = torch.zeros(*b, 1, dtype=torch.bool)
        self._reward = torch.zeros(*b, 1)

    def _set_seed(self, seed):
        pass

    def _reset(self, tensordict, **kwargs):
        return TensorDict({"observation": self._obs}, batch_size=self.batch_size)

    def _step(self, tensordict):
        flag = self._flag
        return TensorDict(
            {
                "observation": self._obs,
                "reward": self._reward,
                "done": flag,
                "terminated": flag,
                "truncated": flag,
            },
            batch_size=self.batch_size,
        )


CONFIGS = {
    "bare env": lambda: [],
    "TransformedEnv()": lambda: [],
    "StepCounter": lambda: [StepCounter(max_steps=10**9)],
    "StepCounter+RewardSum": lambda: [StepCounter(max_steps=10**9), RewardSum()],
    "StepCounter+RewardSum+ObservationNorm": lambda: [
        StepCounter(max_steps=10**9),
        RewardSum(),
        ObservationNorm(loc=0.0, scale=2.0, in_keys=["observation"]),
    ],
    "CatFrames(4)": lambda: [CatFrames(4, -1, in_keys=["observation"])],
}


def make(name: str, batch: tuple[int, ...]) -> EnvBase:
    base = TrivialEnv(batch)
    if name == "bare env":
        return base
    return TransformedEnv(base, Compose(*CONFIGS[name]()))


def time_steps(env: EnvBase, steps: int) -> tuple[float, float]:
    """Best-of-5 time per step of a ``step_and_maybe_reset`` loop (as a collector runs it)."""
    action = env.action_spec.rand()
    step_and_reset = env.step_and_maybe_reset

    def loop(n: int) -> None:
        td = env.reset()
        for _ in range(n):
            td.set("action", action)
            _, td = step_and_reset(td)

    loop(100)
    best = best_cpu = float("inf")
    for _ in range(5):
        start, start_cpu = time.perf_counter(), time.thread_time()
        loop(steps)
        best = min(best, (time.perf_counter() - start) / steps)
        best_cpu = min(best_cpu, (time.thread_time() - start_cpu) / steps)
    return best * 1e6, best_cpu * 1e6


def emit(**record) -> None:
    print(json.dumps(record), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    for batch in ((), (16,)):
        base_us, base_cpu = time_steps(make("bare env", batch), args.steps)
        for name, factory in CONFIGS.items():
            n = len(factory())
            us, cpu = (
                (base_us, base_cpu)
                if name == "bare env"
                else time_steps(make(name, batch), args.steps)
            )
            record = dict(
                library="ours",
                config=name,
                batch_size=list(batch),
                us_per_step=round(us, 2),
                cpu_us_per_step=round(cpu, 2),
                added_us_per_step=round(us - base_us, 2),
                cpu_added_us_per_step=round(cpu - base_cpu, 2),
                torch_threads=1,
            )
            if n:
                record["us_per_transform"] = round((us - base_us) / n, 2)
                record["cpu_us_per_transform"] = round((cpu - base_cpu) / n, 2)
            emit(**record)
    if not args.no_peers:
        run_peer(args.steps)


def run_peer(steps: int) -> None:
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    script = Path(__file__).parent / "_peers" / "torchrl_transforms.py"
    if not Path(python).exists():
        emit(peer="torchrl", note=f"skipped: {python} not found")
        return
    # Our package is also called torchrl: run the peer outside this repo's import path.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [python, str(script), "--steps", str(steps)],
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    sys.stdout.write(out.stdout)
    if out.returncode:
        emit(peer="torchrl", note="failed", stderr=out.stderr[-2000:])


if __name__ == "__main__":
    main()
