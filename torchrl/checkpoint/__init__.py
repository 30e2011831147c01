"""Checkpoints of a whole run: modules, optimizers, replay buffers, collectors and RNG states."""

from __future__ import annotations

from torchrl.checkpoint.checkpoint import (
    Checkpoint,
    CheckpointAdapter,
    CheckpointError,
    CheckpointFormat,
    CheckpointLoadResult,
    CheckpointOptions,
    CheckpointRotation,
    CheckpointStrictness,
    DumpLoadCheckpointAdapter,
    GlobalRNGState,
    JSONCheckpointAdapter,
    StateDictCheckpointAdapter,
    StateDictFormat,
    read_manifest,
)

__all__ = [
    "Checkpoint",
    "CheckpointAdapter",
    "CheckpointError",
    "CheckpointFormat",
    "CheckpointLoadResult",
    "CheckpointOptions",
    "CheckpointRotation",
    "CheckpointStrictness",
    "DumpLoadCheckpointAdapter",
    "GlobalRNGState",
    "JSONCheckpointAdapter",
    "StateDictCheckpointAdapter",
    "StateDictFormat",
    "read_manifest",
]
