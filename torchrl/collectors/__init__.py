"""Data collectors: iterators of TensorDict batches collected by running a policy in envs.

``SyncDataCollector`` steps its env in the calling process; ``MultiSyncDataCollector`` and
``MultiaSyncDataCollector`` run one collector per worker process and move the data through
shared memory. ``Collector``, ``MultiSyncCollector`` and ``MultiAsyncCollector`` are the same
classes under TorchRL's current names. Each collector checks its keywords once into an options
object (:class:`CollectorOptions`, :class:`MultiCollectorOptions`, :class:`RemoteCollectorOptions`)
that its workers receive whole.
"""

from __future__ import annotations

from torchrl.collectors._base import DataCollectorBase
from torchrl.collectors._options import (
    CollectorOptions,
    MultiCollectorOptions,
    RemoteCollectorOptions,
)
from torchrl.collectors._pool import WorkerError
from torchrl.collectors._views import ViewPolicy, ViewRebuilder, ViewRing, collection_views
from torchrl.collectors._worker import RemoteTraceback
from torchrl.collectors.async_batched import AsyncBatchedCollector
from torchrl.collectors.evaluator import Evaluator
from torchrl.collectors.multi import (
    MultiaSyncDataCollector,
    MultiCollector,
    MultiSyncDataCollector,
    aSyncDataCollector,
)
from torchrl.collectors.policy_lag import policy_lag_stats
from torchrl.collectors.sync import SyncDataCollector
from torchrl.collectors.utils import split_trajectories
from torchrl.collectors.weight_updaters import (
    MultiProcessedWeightUpdater,
    RayWeightUpdater,
    VanillaWeightUpdater,
    WeightUpdaterBase,
)
from torchrl.envs.utils import RandomPolicy

#: TorchRL's current names for the same classes (equal, no warning).
Collector = SyncDataCollector
MultiSyncCollector = MultiSyncDataCollector
MultiAsyncCollector = MultiaSyncDataCollector
#: TorchRL's current name of the collector running one SyncDataCollector in a process.
AsyncCollector = aSyncDataCollector
#: TorchRL's current name of the collectors' base class.
BaseCollector = DataCollectorBase

__all__ = [
    "AsyncBatchedCollector",
    "AsyncCollector",
    "BaseCollector",
    "Collector",
    "CollectorOptions",
    "DataCollectorBase",
    "Evaluator",
    "MultiAsyncCollector",
    "MultiCollector",
    "MultiCollectorOptions",
    "MultiSyncCollector",
    "MultiProcessedWeightUpdater",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
    "RandomPolicy",
    "RayWeightUpdater",
    "RemoteCollectorOptions",
    "RemoteTraceback",
    "SyncDataCollector",
    "VanillaWeightUpdater",
    "ViewPolicy",
    "ViewRebuilder",
    "ViewRing",
    "WeightUpdaterBase",
    "WorkerError",
    "aSyncDataCollector",
    "collection_views",
    "policy_lag_stats",
    "split_trajectories",
]
