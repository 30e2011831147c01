"""Replay buffers: storages, samplers, writers and the buffers composing them."""

from __future__ import annotations

from torchrl.data.replay_buffers.checkpointers import (
    CompressedListStorageCheckpointer,
    FlatStorageCheckpointer,
    H5StorageCheckpointer,
    ListStorageCheckpointer,
    NestedStorageCheckpointer,
    StorageCheckpointerBase,
    StorageEnsembleCheckpointer,
    TensorStorageCheckpointer,
)
from torchrl.data.replay_buffers.ensemble import (
    ReplayBufferEnsemble,
    SamplerEnsemble,
    StorageEnsemble,
    WriterEnsemble,
)
from torchrl.data.replay_buffers.flat_ted import Flat2TED, TED2Flat
from torchrl.data.replay_buffers.offline_to_online import (
    OfflineToOnlineReplayBuffer,
    prefill_replay_buffer,
)
from torchrl.data.replay_buffers.query import (
    Trajectory,
    TrajectoryPredicate,
    filter_trajectories,
    find_start_stop_traj,
    iter_trajectories,
    traj,
)
from torchrl.data.replay_buffers.ray_buffer import RayReplayBuffer
from torchrl.data.replay_buffers.replay_buffers import (
    PrioritizedReplayBuffer,
    RemoteTensorDictReplayBuffer,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from torchrl.data.replay_buffers.sample_units import SampleUnit, Sequence, Transition
from torchrl.data.replay_buffers.samplers import (
    ConsumingSampler,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    StalenessAwareSampler,
)
from torchrl.data.replay_buffers.storages import (
    CompressedListStorage,
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    Storage,
    TensorStorage,
)
from torchrl.data.replay_buffers.video import (
    VideoClipRef,
    clear_video_decoder_cache,
    set_video_decoder_cache_size,
)
from torchrl.data.replay_buffers.writers import (
    ImmutableDatasetWriter,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictRoundRobinWriter,
    Writer,
)

__all__ = [
    "Flat2TED",
    "OfflineToOnlineReplayBuffer",
    "TED2Flat",
    "Trajectory",
    "TrajectoryPredicate",
    "filter_trajectories",
    "find_start_stop_traj",
    "iter_trajectories",
    "prefill_replay_buffer",
    "traj",
    "CompressedListStorage",
    "CompressedListStorageCheckpointer",
    "FlatStorageCheckpointer",
    "H5StorageCheckpointer",
    "ImmutableDatasetWriter",
    "LazyStackStorage",
    "ListStorageCheckpointer",
    "NestedStorageCheckpointer",
    "ReplayBufferEnsemble",
    "SamplerEnsemble",
    "StalenessAwareSampler",
    "StorageCheckpointerBase",
    "StorageEnsemble",
    "StorageEnsembleCheckpointer",
    "TensorStorageCheckpointer",
    "WriterEnsemble",
    "ConsumingSampler",
    "LazyMemmapStorage",
    "LazyTensorStorage",
    "ListStorage",
    "PrioritizedReplayBuffer",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "RandomSampler",
    "RayReplayBuffer",
    "RemoteTensorDictReplayBuffer",
    "ReplayBuffer",
    "RoundRobinWriter",
    "SampleUnit",
    "Sampler",
    "SamplerWithoutReplacement",
    "Sequence",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "Storage",
    "TensorDictMaxValueWriter",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "TensorDictRoundRobinWriter",
    "TensorStorage",
    "Transition",
    "VideoClipRef",
    "Writer",
    "clear_video_decoder_cache",
    "set_video_decoder_cache_size",
]
