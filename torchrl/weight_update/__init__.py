"""Weight synchronisation: one scheme object per model keeps its copies in step.

A trainer updates a model; collectors, inference workers, Ray actors and remote processes run
copies of it. A :class:`WeightSyncScheme` says how new weights reach those copies (shared
memory, pipes, Ray, RPC, ``torch.distributed``) and numbers every update (``version``), so
that each end knows which weights it holds. Every collector uses one per model through its
``weight_sync_schemes`` keyword. See ``docs/api/weight_update.rst``.
"""

from __future__ import annotations

from torchrl.weight_update.distributed import DistributedTransport, DistributedWeightSyncScheme
from torchrl.weight_update.mp import MPTransport, MultiProcessWeightSyncScheme
from torchrl.weight_update.ray_schemes import (
    RayModuleTransformScheme,
    RayTransport,
    RayWeightSyncScheme,
)
from torchrl.weight_update.rpc_scheme import RPCTransport, RPCWeightSyncScheme
from torchrl.weight_update.shared import SharedMemTransport, SharedMemWeightSyncScheme
from torchrl.weight_update.weight_sync_schemes import (
    InitialSyncTransport,
    NoWeightSyncScheme,
    TransportBackend,
    WeightStrategy,
    WeightSyncScheme,
)

__all__ = [
    "DistributedTransport",
    "DistributedWeightSyncScheme",
    "InitialSyncTransport",
    "MPTransport",
    "MultiProcessWeightSyncScheme",
    "NoWeightSyncScheme",
    "RPCTransport",
    "RPCWeightSyncScheme",
    "RayModuleTransformScheme",
    "RayTransport",
    "RayWeightSyncScheme",
    "SharedMemTransport",
    "SharedMemWeightSyncScheme",
    "TransportBackend",
    "WeightStrategy",
    "WeightSyncScheme",
]
