"""Batched envs: ``n`` copies of an env behind one env of batch ``[n, *inner]``.

:class:`SerialEnv` steps them one after the other in this process; :class:`ParallelEnv` runs
one process each, exchanging data through shared memory.
"""

from __future__ import annotations

from torchrl.envs.batched._meta import EnvMetaData
from torchrl.envs.batched.base import BatchedEnvBase
from torchrl.envs.batched.parallel import ParallelEnv
from torchrl.envs.batched.serial import SerialEnv

__all__ = ["BatchedEnvBase", "EnvMetaData", "ParallelEnv", "SerialEnv"]
