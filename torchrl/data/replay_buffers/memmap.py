"""The module path of :class:`LazyMemmapStorage`, which is defined in :mod:`.storages`."""

from __future__ import annotations

from torchrl.data.replay_buffers.storages import LazyMemmapStorage

__all__ = ["LazyMemmapStorage"]
