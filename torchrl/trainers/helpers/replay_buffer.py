"""The replay-buffer builder from a config."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from torchrl.trainers.helpers._cfg import cfg_value

if TYPE_CHECKING:
    from torchrl.data.replay_buffers.replay_buffers import TensorDictReplayBuffer

__all__ = ["ReplayArgsConfig", "make_replay_buffer"]


@dataclasses.dataclass
class ReplayArgsConfig:
    """The fields read by :func:`make_replay_buffer` (any object with these attributes works).

    Attributes:
        buffer_size: the capacity, in transitions.
        prb: prioritized sampling (``alpha=0.7``, ``beta=0.5``) instead of uniform.
        buffer_scratch_dir: the directory of the memory-mapped storage (``None``: a temporary
            one, removed with the storage).
        buffer_prefetch: batches sampled ahead in background threads (``0``: none).
        batch_size: the sample size.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.trainers.helpers import make_replay_buffer
        >>> rb = make_replay_buffer("cpu", ReplayArgsConfig(buffer_size=100, prb=True, batch_size=4))
        >>> type(rb.sampler).__name__
        'PrioritizedSampler'
        >>> _ = rb.extend(TensorDict(x=torch.arange(10.0), batch_size=[10]))
        >>> rb.sample().batch_size
        torch.Size([4])
    """

    buffer_size: int = 1_000_000
    prb: bool = False
    buffer_scratch_dir: str | None = None
    buffer_prefetch: int = 0
    batch_size: int = 256


def make_replay_buffer(device: torch.device | str | int, cfg: Any) -> TensorDictReplayBuffer:
    """A TensorDict replay buffer over a memory-mapped storage, from ``cfg``.

    A :class:`~torchrl.data.LazyMemmapStorage` of ``buffer_size`` items in
    ``buffer_scratch_dir``, a :class:`~torchrl.data.PrioritizedSampler` (``prb``) or a
    :class:`~torchrl.data.RandomSampler`, ``batch_size`` samples, ``buffer_prefetch`` batches
    prefetched, and pinned samples when ``device`` is a CUDA device.

    Args:
        device: where the samples will be used.
        cfg: the config (:class:`ReplayArgsConfig` fields).

    Returns:
        The buffer.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> rb = make_replay_buffer("cpu", ReplayArgsConfig(buffer_size=100, batch_size=4))
        >>> _ = rb.extend(TensorDict(x=torch.arange(10.0), batch_size=[10]))
        >>> rb.sample().batch_size
        torch.Size([4])
    """
    from torchrl.data.replay_buffers.replay_buffers import TensorDictReplayBuffer
    from torchrl.data.replay_buffers.samplers import PrioritizedSampler, RandomSampler
    from torchrl.data.replay_buffers.storages import LazyMemmapStorage

    def get(name: str) -> Any:
        return cfg_value(cfg, name, ReplayArgsConfig)

    device = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    size = int(get("buffer_size"))
    sampler: Any = (
        PrioritizedSampler(max_capacity=size, alpha=0.7, beta=0.5)
        if get("prb")
        else RandomSampler()
    )
    return TensorDictReplayBuffer(
        storage=LazyMemmapStorage(size, scratch_dir=get("buffer_scratch_dir")),
        sampler=sampler,
        pin_memory=device.type == "cuda",
        prefetch=int(get("buffer_prefetch") or 0),
        batch_size=int(get("batch_size")),
    )
