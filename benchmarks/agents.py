"""Agents (``torchrl.agents``): training-loop overhead and NRemoteAgent's parallel crossover.

Two measurements, one JSON object per line:

- ``bench="agents_vs_components"``: the agent-style A2C and PPO examples
  (``examples/agents/a2c_agents.py``, ``ppo_agents.py``) against our component-style ones
  (``examples/a2c_cartpole.py``, ``ppo_cartpole.py``) at the same settings: each ``train``
  runs a fixed number of frames with the evaluations switched off (no early stop), in this
  process, one after the other (order alternating over repeats). Reports the wall seconds of the
  training loops and the CPU seconds of ``train`` (the loop and a final 1-episode evaluation),
  min and median over the repeats, and their ratios (agents / components; the target is
  <= 1.2).
- ``bench="nremote_crossover"``: frames per second of an acquisition agent
  (``TemporalAgent(Agents(EnvAgent(env), ModuleAgent(policy)))``, a 2x64 MLP) over 8 sub-envs
  in this process, against ``NRemoteAgent`` with 2 processes of 4 sub-envs each, as the cost
  of an env step grows. The env is pure torch; each step of a batch of ``n`` sub-envs costs
  ``n * step_us`` microseconds, spent sleeping (``--work sleep``: an env waiting on a
  simulator or a network) or computing (``--work spin``: a CPU-bound simulator, which gains
  only where a free core exists). ``speedup`` > 1 means the two processes collect faster.

Torch uses 1 thread (``torch.set_num_threads(1)``; the workers too). On a busy machine the
wall-clock figures move by +-20% between runs: the CPU figures are steadier.
Usage: ``python benchmarks/agents.py [--cases overhead crossover] [--repeats 1]
[--a2c-frames 40960] [--ppo-frames 20480] [--step-us 0 50 200 1000] [--work sleep spin]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "agents"))
sys.path.insert(0, os.path.join(ROOT, "examples"))

from torchrl.agents import (  # noqa: E402
    Agents,
    EnvAgent,
    ModuleAgent,
    NRemoteAgent,
    TemporalAgent,
    Workspace,
)
from torchrl.data import Categorical, Composite, Unbounded  # noqa: E402
from torchrl.envs import EnvBase  # noqa: E402


# ------------------------------------------------------------------------ overhead
def _timed_train(module: Any, overrides: dict[str, Any]) -> dict[str, float]:
    cfg = dataclasses.replace(module.Config(), **overrides)
    cpu = time.process_time()
    history = module.train(cfg)
    # the loops' own wall time (without the final evaluation that follows them)
    return {
        "wall_s": history["wall"],
        "cpu_s": time.process_time() - cpu,
        "frames": history["frames"],
    }


def overhead(repeats: int, a2c_frames: int, ppo_frames: int) -> None:
    import a2c_agents
    import a2c_cartpole
    import ppo_agents
    import ppo_cartpole

    pairs = {
        "a2c": (a2c_cartpole, a2c_agents, a2c_frames),
        "ppo": (ppo_cartpole, ppo_agents, ppo_frames),
    }
    for algo, (components, agents, frames) in pairs.items():
        overrides = {
            "frames": frames,
            "eval_every": 10 * frames,  # no evaluation inside the loop: same work for both
            "target_return": float("inf"),
            "final_eval_episodes": 1,
            "progress": False,
        }
        results: dict[str, list[dict[str, float]]] = {"components": [], "agents": []}
        for rep in range(repeats):
            order = ["components", "agents"] if rep % 2 == 0 else ["agents", "components"]
            for name in order:
                module = components if name == "components" else agents
                results[name].append(_timed_train(module, overrides))

        def stat(name: str, field: str, how: Any, runs: dict = results) -> float:
            return float(how([r[field] for r in runs[name]]))

        row: dict[str, Any] = {
            "bench": "agents_vs_components",
            "algo": algo,
            "frames": frames,
            "repeats": repeats,
        }
        for how_name, how in (("min", min), ("median", statistics.median)):
            for field in ("wall_s", "cpu_s"):
                comp, agent = stat("components", field, how), stat("agents", field, how)
                row[f"components_{field}_{how_name}"] = round(comp, 2)
                row[f"agents_{field}_{how_name}"] = round(agent, 2)
                row[f"{field[:-2]}_ratio_{how_name}"] = round(agent / comp, 3)
        row["all_runs"] = results
        print(json.dumps(row), flush=True)


# ------------------------------------------------------------------------ crossover
class CostlyEnv(EnvBase):
    """A 4-dim random walk whose step of ``n`` sub-envs costs ``n * step_us`` microseconds."""

    def __init__(self, batch: int, step_us: float, work: str) -> None:
        super().__init__(batch_size=[batch])
        self.observation_spec = Composite(observation=Unbounded(shape=(batch, 4)), shape=[batch])
        self.action_spec = Categorical(2, shape=(batch,))
        self.cost_s = batch * step_us * 1e-6
        self.work = work
        self.state = torch.zeros(batch, 4)
        self.count = torch.zeros(batch, 1)
        self.gen = torch.Generator().manual_seed(0)

    def _set_seed(self, seed: int | None) -> None:
        self.gen.manual_seed(int(seed or 0))

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        self.state = torch.zeros_like(self.state)
        self.count = torch.zeros_like(self.count)
        return TensorDict(observation=self.state.clone(), batch_size=self.batch_size)

    def _spend(self) -> None:
        if self.cost_s <= 0:
            return
        if self.work == "sleep":
            time.sleep(self.cost_s)
            return
        end = time.perf_counter() + self.cost_s
        while time.perf_counter() < end:  # a CPU-bound simulator, on purpose
            pass

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._spend()
        action = tensordict["action"].float().unsqueeze(-1) * 2 - 1
        noise = torch.randn(self.state.shape, generator=self.gen) * 0.1
        self.state = self.state + noise + action * 0.01
        self.count = self.count + 1
        done = self.count >= 200
        self.count = torch.where(done, 0.0, self.count)
        return TensorDict(
            observation=self.state.clone(),
            reward=-self.state.pow(2).sum(-1, keepdim=True),
            done=done,
            terminated=done.clone(),
            batch_size=self.batch_size,
        )


def _acquisition(batch: int, step_us: float, work: str) -> TemporalAgent:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))

    class Greedy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.net(obs).argmax(-1)

    policy = ModuleAgent(TensorDictModule(Greedy(), ["observation"], ["action"]))
    return TemporalAgent(Agents(EnvAgent(CostlyEnv(batch, step_us, work)), policy))


def _frames_per_s(agent: Any, steps: int, batches: int) -> float:
    ws = Workspace()
    agent(ws, t=0, n_steps=steps + 1)  # warm-up (and the shared layout for NRemoteAgent)
    start = time.perf_counter()
    for _ in range(batches):
        ws.copy_n_last_steps(1)
        agent(ws, t=1, n_steps=steps)
    return batches * steps * 8 / (time.perf_counter() - start)


def crossover(step_us_list: list[float], works: list[str], steps: int, batches: int) -> None:
    for work in works:
        for step_us in step_us_list:
            with torch.no_grad():
                local = _frames_per_s(_acquisition(8, step_us, work), steps, batches)
            remote = NRemoteAgent(
                lambda i, s=step_us, w=work: _acquisition(4, s, w), num_processes=2
            )
            try:
                parallel = _frames_per_s(remote, steps, batches)
            finally:
                remote.close()
            print(
                json.dumps(
                    {
                        "bench": "nremote_crossover",
                        "work": work,
                        "step_us_per_env": step_us,
                        "steps_per_batch": steps,
                        "one_process_fps": round(local, 1),
                        "nremote_2proc_fps": round(parallel, 1),
                        "speedup": round(parallel / local, 3),
                    }
                ),
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["overhead", "crossover"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--a2c-frames", type=int, default=40_960)
    parser.add_argument("--ppo-frames", type=int, default=20_480)
    parser.add_argument("--step-us", type=float, nargs="+", default=[0, 50, 200, 1000])
    parser.add_argument("--work", nargs="+", default=["sleep", "spin"])
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--batches", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if "overhead" in args.cases:
        overhead(args.repeats, args.a2c_frames, args.ppo_frames)
    if "crossover" in args.cases:
        crossover(args.step_us, args.work, args.steps, args.batches)


if __name__ == "__main__":
    main()
