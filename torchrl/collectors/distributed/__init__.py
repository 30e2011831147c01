"""Distributed collectors: local collectors run on Ray actors or on submitit/mp workers.

They keep the iterator interface of the local collectors, so a training script changes one
line to scale out. ``ray`` and ``submitit`` are optional (extras ``torchrl[ray]``,
``torchrl[submitit]``) and imported only when a collector is built.
"""

from __future__ import annotations

from torchrl.collectors.distributed.generic import (
    DistributedCollector,
    DistributedDataCollector,
    DistributedSyncCollector,
    DistributedSyncDataCollector,
    submitit_delayed_launcher,
)
from torchrl.collectors.distributed.ray import DEFAULT_REMOTE_CLASS_CONFIG, RayCollector
from torchrl.collectors.distributed.ray_eval_worker import RayEvalWorker
from torchrl.collectors.distributed.replay import RayReplayBuffer
from torchrl.collectors.distributed.rpc import RPCCollector, RPCDataCollector
from torchrl.collectors.distributed.rpc_replay import RPCReplayBuffer
from torchrl.collectors.distributed.utils import WorkerCore, policy_weights
from torchrl.collectors.distributed.weight_updaters import (
    DistributedWeightUpdater,
    RPCWeightUpdater,
)

__all__ = [
    "DEFAULT_REMOTE_CLASS_CONFIG",
    "DistributedCollector",
    "DistributedDataCollector",
    "DistributedSyncCollector",
    "DistributedSyncDataCollector",
    "DistributedWeightUpdater",
    "RayCollector",
    "RayEvalWorker",
    "RPCCollector",
    "RPCDataCollector",
    "RPCReplayBuffer",
    "RPCWeightUpdater",
    "RayReplayBuffer",
    "WorkerCore",
    "policy_weights",
    "submitit_delayed_launcher",
]
