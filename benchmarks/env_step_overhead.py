"""Per-step overhead of the env contract (``step``, ``step_mdp``, ``rollout``) on a trivial env.

The env's own ``_step`` does almost nothing, so what is measured is what ``EnvBase`` adds per
step. Prints one JSON object per measurement. Runs with ``torch.set_num_threads(1)``.

Usage: ``python benchmarks/env_step_overhead.py [--steps 20000]``. When a TorchRL install is
available (``TORCHRL_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``), the same trivial env
is timed under TorchRL for comparison.

``overhead_us_per_step`` is the rollout's time per step minus the env's own ``_step`` and the
random policy: what the contract costs. ``cpu_*`` figures use this thread's CPU time, which other
processes on a shared machine do not inflate.
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
from torchrl.envs import EnvBase, step_mdp

torch.set_num_threads(1)


class TrivialEnv(EnvBase):
    """Observation ``[*B, 4]``, action ``Categorical(2)``; never done (the rollouts run long)."""

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


def _best(run, n: int, clock) -> float:
    best = float("inf")
    for _ in range(5):
        start = clock()
        run()
        best = min(best, (clock() - start) / n)
    return best * 1e6


def _per_call_us(fn, n: int, clock=time.perf_counter) -> float:
    fn()

    def run():
        for _ in range(n):
            fn()

    return _best(run, n, clock)


def _rollout_us(env: EnvBase, steps: int, clock=time.perf_counter, **kwargs) -> float:
    env.rollout(10, **kwargs)
    return _best(lambda: env.rollout(steps, **kwargs), steps, clock)


def _emit(**record) -> None:
    print(json.dumps(record), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    n = args.steps
    for batch in ((), (16,)):
        env = TrivialEnv(batch)
        td = env.rand_action(env.reset())
        raw = _per_call_us(lambda env=env, td=td: env._step(td), n)
        policy = _per_call_us(lambda env=env, td=td: env.rand_action(td), n)
        step = _per_call_us(lambda env=env, td=td: env.step(td), n)
        stepped = env.step(td)
        mdp = _per_call_us(lambda s=stepped: step_mdp(s), n)
        smr = _per_call_us(lambda env=env, td=td: env.step_and_maybe_reset(td), n)
        roll_any = _rollout_us(env, n)
        roll_nonstop = _rollout_us(env, n, break_when_any_done=False)
        # CPU time of this thread: robust to other processes sharing the cores.
        cpu = time.thread_time
        raw_cpu = _per_call_us(lambda env=env, td=td: env._step(td), n, cpu)
        policy_cpu = _per_call_us(lambda env=env, td=td: env.rand_action(td), n, cpu)
        roll_any_cpu = _rollout_us(env, n, cpu)
        roll_nonstop_cpu = _rollout_us(env, n, cpu, break_when_any_done=False)
        common = dict(env="TrivialEnv", batch_size=list(batch), torch_threads=1)
        _emit(measure="raw _step", us_per_call=round(raw, 2), **common)
        _emit(measure="rand_action", us_per_call=round(policy, 2), **common)
        _emit(
            measure="step", us_per_call=round(step, 2), overhead_us=round(step - raw, 2), **common
        )
        _emit(measure="step_mdp", us_per_call=round(mdp, 2), **common)
        _emit(
            measure="step_and_maybe_reset",
            us_per_call=round(smr, 2),
            overhead_us=round(smr - raw, 2),
            **common,
        )
        for name, total, total_cpu in (
            ("rollout(break_when_any_done=True)", roll_any, roll_any_cpu),
            ("rollout(break_when_any_done=False)", roll_nonstop, roll_nonstop_cpu),
        ):
            _emit(
                measure=name,
                us_per_step=round(total, 2),
                overhead_us_per_step=round(total - raw - policy, 2),
                steps_per_s=round(1e6 / total),
                cpu_us_per_step=round(total_cpu, 2),
                cpu_overhead_us_per_step=round(total_cpu - raw_cpu - policy_cpu, 2),
                **common,
            )
    if not args.no_peers:
        _run_peer(n)


def _run_peer(n: int) -> None:
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    script = Path(__file__).parent / "_peers" / "torchrl_env_overhead.py"
    if not Path(python).exists() or not script.exists():
        _emit(peer="torchrl", note=f"skipped: {python} or {script.name} not found")
        return
    # Our package is also called torchrl: run the peer outside this repo's import path.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [python, str(script), "--steps", str(n)],
        capture_output=True,
        text=True,
        cwd="/",
        env=env,
        timeout=900,
    )
    if out.returncode != 0:
        _emit(peer="torchrl", note="failed", stderr=out.stderr[-2000:])
        return
    sys.stdout.write(out.stdout)


if __name__ == "__main__":
    main()
