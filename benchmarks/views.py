"""Memory and speed of trajectory views at collection, against CatFrames and env primers.

Two policies, each collected two ways with ``SyncDataCollector`` (8 sub-envs of a pure-torch
env, one batch = ``--frames`` frames):

- ``frames``: 84x84 uint8 frames (``"pixels"``, ``[1, 84, 84]``), a policy that reads the last 4
  frames. ``catframes``: the env stacks them (``CatFrames(4)``), so every stored entry holds 4
  frames; ``views``: the policy declares ``TrajectoryView("pixels", "-3:0")`` and the collector
  stacks them from its ring, storing single frames. The policy (mean of each frame, a linear
  layer) does the same work in both.
- ``lstm``: an ``LSTMModule(256)`` policy. ``primer``: the env's ``TensorDictPrimer`` writes the
  states, stored at the root (input) and under ``"next"`` (output); ``views``: the LSTM declares
  ``TrajectoryView(("next", "recurrent_state_h"), -1, out_key="recurrent_state_h")`` (and ``_c``),
  and only the outputs are stored.

Every case reports ``bytes_per_frame`` (the sum of ``numel * element_size`` over every leaf of a
collected batch, over its frames), the bytes of the entries in question (``pixels_bytes_per_frame``
or ``recurrent_state_bytes_per_frame``), and the collection speed: ``frames_per_s`` (wall
clock) and ``frames_per_cpu_s`` (this process's CPU time, what a quiet machine would give when
other jobs share the cores), each the best of ``--repeats`` timed runs of ``--batches`` batches
after one warm-up batch, the two modes of a case timed in turn. Runs on 1 torch thread; one JSON
object per line.

Usage: ``python benchmarks/views.py [--frames 1024] [--batches 8] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from torchrl.collectors import SyncDataCollector
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.data.trajectory_views import TrajectoryView
from torchrl.envs import EnvBase
from torchrl.envs.transforms import CatFrames, InitTracker, TransformedEnv
from torchrl.modules import LSTMModule

torch.set_num_threads(1)

ENVS = 8
SIDE = 84
STACK = 4
HIDDEN = 256


class FramesEnv(EnvBase):
    """``pixels`` ``[*B, 1, 84, 84]`` uint8 (one of 16 fixed frames per step), 2 actions.

    Sub-env ``i`` ends its episodes every ``40 + 7 * i`` steps. ``observation`` is a float
    ``[*B, 4]`` summary (the LSTM case reads it).
    """

    def __init__(self, batch: int = ENVS) -> None:
        super().__init__(batch_size=[batch])
        b = self.batch_size
        self.observation_spec = Composite(
            pixels=Unbounded(shape=(*b, 1, SIDE, SIDE), dtype=torch.uint8),
            observation=Unbounded(shape=(*b, 4)),
            shape=b,
        )
        self.action_spec = Categorical(2, shape=(*b, 1))
        gen = torch.Generator().manual_seed(0)
        self._bank = torch.randint(0, 256, (16, 1, SIDE, SIDE), dtype=torch.uint8, generator=gen)
        self._summary = torch.randn(16, 4, generator=gen)
        self._count = torch.zeros(batch, dtype=torch.long)
        self._length = 40 + 7 * torch.arange(batch)

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _obs(self) -> dict[str, torch.Tensor]:
        index = self._count % 16
        return {"pixels": self._bank[index], "observation": self._summary[index]}

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            self._count.zero_()
        else:
            self._count.masked_fill_(mask.reshape(-1), 0)
        return TensorDict(self._obs(), batch_size=self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._count += 1
        done = (self._count >= self._length).unsqueeze(-1)
        out = {
            **self._obs(),
            "reward": tensordict["action"].float(),
            "done": done,
            "terminated": done.clone(),
        }
        return TensorDict(out, batch_size=self.batch_size)


class FrameStackNet(nn.Module):
    """Mean of each of the ``STACK`` frames (any layout with them first), a linear layer, argmax."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(STACK, 2)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        batch = frames.shape[:1]
        means = frames.reshape(*batch, STACK, -1).float().mean(-1)
        return self.linear(means).argmax(-1, keepdim=True)


def frames_case(mode: str) -> tuple[EnvBase, TensorDictModule]:
    net = FrameStackNet()
    if mode == "catframes":
        env: EnvBase = TransformedEnv(
            FramesEnv(), CatFrames(N=STACK, dim=-3, in_keys=["pixels"], padding="constant")
        )
        return env, TensorDictModule(net, ["pixels"], ["action"])
    net.views = [TrajectoryView("pixels", f"-{STACK - 1}:0", out_key="pixels_stack")]
    return FramesEnv(), TensorDictModule(net, ["pixels_stack"], ["action"])


def lstm_case(mode: str) -> tuple[EnvBase, TensorDictSequential]:
    torch.manual_seed(0)
    lstm = LSTMModule(4, HIDDEN, in_key="observation", out_key="features")
    head = TensorDictModule(nn.Linear(HIDDEN, 2), ["features"], ["logits"])
    act = TensorDictModule(lambda x: x.argmax(-1, keepdim=True), ["logits"], ["action"])
    env = TransformedEnv(FramesEnv(), InitTracker())
    if mode == "primer":
        env = env.append_transform(lstm.make_tensordict_primer())
    else:
        lstm.views = [
            TrajectoryView((("next", key)), -1, out_key=key)
            for key in ("recurrent_state_h", "recurrent_state_c")
        ]
    return env, TensorDictSequential(lstm, head, act)


def batch_bytes(batch: TensorDictBase, match: str | None = None) -> float:
    """Bytes per frame of a batch's leaves (those whose last key name starts with ``match``)."""
    total = 0
    for key, value in batch.items(True, True):
        name = key if isinstance(key, str) else key[-1]
        if match is None or name.startswith(match):
            total += value.numel() * value.element_size()
    return total / batch.numel()


def measure(case: str, frames: int, batches: int, repeats: int) -> list[dict[str, Any]]:
    """Both modes of ``case``, timed in turn (so that other jobs' load hits both alike)."""
    modes = {"frames": ["catframes", "views"], "lstm": ["primer", "views"]}[case]
    collectors, first = {}, {}
    for mode in modes:
        env, policy = frames_case(mode) if case == "frames" else lstm_case(mode)
        collectors[mode] = SyncDataCollector(env, policy, frames_per_batch=frames)
        first[mode] = collectors[mode].rollout().clone()  # warm-up; allocates the batch
    wall = dict.fromkeys(modes, float("inf"))
    cpu = dict.fromkeys(modes, float("inf"))
    for _ in range(repeats):
        for mode in modes:
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(batches):
                collectors[mode].rollout()
            wall[mode] = min(wall[mode], time.perf_counter() - start)
            cpu[mode] = min(cpu[mode], time.process_time() - start_cpu)
    key = "pixels" if case == "frames" else "recurrent_state"
    records = []
    for mode in modes:
        collectors[mode].shutdown()
        batch = first[mode]
        n = batches * batch.numel()
        records.append(
            {
                "case": case,
                "mode": mode,
                "envs": ENVS,
                "frames_per_batch": batch.numel(),
                "bytes_per_frame": round(batch_bytes(batch), 1),
                f"{key}_bytes_per_frame": round(batch_bytes(batch, key), 1),
                "stored_keys": sorted(str(k) for k in batch.keys(True, True) if key in str(k)),
                "frames_per_s": round(n / wall[mode], 1),
                "frames_per_cpu_s": round(n / cpu[mode], 1),
            }
        )
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--cases", nargs="+", default=["frames", "lstm"], choices=["frames", "lstm"]
    )
    args = parser.parse_args()
    for case in args.cases:
        for record in measure(case, args.frames, args.batches, args.repeats):
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
