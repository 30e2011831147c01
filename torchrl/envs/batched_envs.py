"""TorchRL's ``torchrl.envs.batched_envs`` path; the batched envs live in :mod:`torchrl.envs.batched`."""

from __future__ import annotations

from torchrl.envs.batched import BatchedEnvBase, ParallelEnv, SerialEnv

__all__ = ["BatchedEnvBase", "ParallelEnv", "SerialEnv"]
