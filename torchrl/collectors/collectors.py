"""TorchRL's ``torchrl.collectors.collectors`` path; the collectors live in :mod:`torchrl.collectors`."""

from __future__ import annotations

from torchrl.collectors import (
    DataCollectorBase,
    MultiaSyncDataCollector,
    MultiSyncDataCollector,
    SyncDataCollector,
)

__all__ = [
    "DataCollectorBase",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
    "SyncDataCollector",
]
