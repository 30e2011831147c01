"""Envs and policies for the collector tests (never shipped in the package)."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from _envs import CountingEnv
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.envs import PendulumEnv


class RaisingEnv(CountingEnv):
    """A ``CountingEnv`` whose ``_step`` raises ``ValueError`` at its ``fail_at``-th step."""

    def __init__(self, fail_at: int = 3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail_at = fail_at
        self.steps = 0

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.steps += 1
        if self.steps >= self.fail_at:
            raise ValueError(f"boom at step {self.steps}")
        return super()._step(tensordict)


class SlowEnv(CountingEnv):
    """A ``CountingEnv`` that sleeps ``delay`` seconds per step (an expensive simulator)."""

    def __init__(self, delay: float = 0.01, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delay = delay

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        time.sleep(self.delay)
        return super()._step(tensordict)


class _Threshold(nn.Module):
    """action = 1 where ``weight * observation + bias > 0``, else 0 (``[*B, 1]`` int64)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(1, 1)
        with torch.no_grad():
            self.linear.weight.zero_()
            self.linear.bias.fill_(-1.0)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return (self.linear(observation) > 0).long()


def threshold_policy() -> TensorDictModule:
    """A policy for ``CountingEnv`` with weights: it writes action 0 until its bias is > 0."""
    return TensorDictModule(_Threshold(), in_keys=["observation"], out_keys=["action"])


def counting_env(batch: int = 0, max_steps: int = 5) -> CountingEnv:
    """A ``CountingEnv`` (picklable constructor, for spawned workers)."""
    return CountingEnv(batch_size=[batch] if batch else [], max_steps=max_steps)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def child_pids() -> set[int]:
    """Pids of the live child processes of this process (from /proc).

    multiprocessing's resource tracker (started once per process by spawn contexts, and kept
    until the process exits) is not counted.
    """
    from multiprocessing import resource_tracker

    tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
    me = os.getpid()
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z" and int(entry) != tracker:
            out.add(int(entry))
    return out


class DeviceCheck(nn.Module):
    """A linear policy that records the devices of its inputs and fails on an unexpected one.

    The check raises inside worker processes too, where a record cannot be read back.
    """

    def __init__(self, expected: str | None = None) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1)
        self.expected = expected
        self.seen: list[torch.device] = []

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            self.seen.append(observation.device)
            if self.expected is not None and observation.device.type != self.expected:
                raise RuntimeError(
                    f"policy input on {observation.device}, expected {self.expected}"
                )
        return torch.tanh(self.linear(observation))  # inside the action bounds


def pendulum(batch: int = 2, seed: int = 0) -> PendulumEnv:
    """A seeded ``PendulumEnv`` of ``batch`` pendulums."""
    env = PendulumEnv(batch_size=[batch])
    env.set_seed(seed)
    return env


def marking_backend(folder: str, gm, example_inputs):
    """A torch.compile backend that leaves a file named after the compiling process."""
    with open(os.path.join(folder, f"compiled-{os.getpid()}"), "w"):
        pass
    return gm.forward


class OutOfBounds(nn.Module):
    """A policy whose actions fall outside Pendulum's action bounds."""

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return observation[..., :1] * 0 + 5.0  # outside Pendulum's [-2, 2]
