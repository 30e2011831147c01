"""Data builders shared by the replay-buffer tests."""

from __future__ import annotations

import torch
from tensordict import TensorDict


def transitions(n: int, start: int = 0, obs_dim: int = 3) -> TensorDict:
    """``n`` HalfCheetah-shaped transitions whose entries encode their step number.

    ``obs == step``, ``next.obs == step + 1``, ``action == -step``: any item read back can be
    checked for consistency (no mix of two writes).
    """
    step = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict(
        {
            "step": step.long(),
            "observation": step[:, None].expand(n, obs_dim).clone(),
            "action": -step[:, None].expand(n, 2).clone(),
            "next": {
                "observation": (step + 1)[:, None].expand(n, obs_dim).clone(),
                "reward": step[:, None] * 0.5,
                "done": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        batch_size=[n],
    )


def consistent(td: TensorDict) -> bool:
    """Whether every item of a batch built by :func:`transitions` is intact."""
    step = td["step"].float()
    return bool(
        (td["observation"] == step[:, None]).all()
        and (td["next", "observation"] == step[:, None] + 1).all()
        and (td["action"] == -step[:, None]).all()
    )


def persistence_cases(root):
    """Buffer factories, one per storage kind, for the dumps/loads tests (parent and child)."""
    from pathlib import Path

    from torchrl.data.replay_buffers import (
        LazyMemmapStorage,
        LazyTensorStorage,
        ListStorage,
        PrioritizedSampler,
        RandomSampler,
        SamplerWithoutReplacement,
        SliceSamplerWithoutReplacement,
        TensorDictPrioritizedReplayBuffer,
        TensorDictReplayBuffer,
        TensorStorage,
    )

    root = Path(root)
    return {
        "list_random": lambda: TensorDictReplayBuffer(
            storage=ListStorage(30), sampler=RandomSampler(), batch_size=6
        ),
        "lazy_without_replacement": lambda: TensorDictReplayBuffer(
            storage=LazyTensorStorage(30), sampler=SamplerWithoutReplacement(), batch_size=6
        ),
        "tensor_prioritized": lambda: TensorDictReplayBuffer(
            storage=TensorStorage(transitions(30, start=1000)),
            sampler=PrioritizedSampler(30, alpha=0.7, beta=0.5),
            batch_size=6,
        ),
        "memmap_prioritized": lambda: TensorDictPrioritizedReplayBuffer(
            alpha=0.7,
            beta=0.5,
            storage=LazyMemmapStorage(30, scratch_dir=root / "scratch_memmap_prioritized"),
            batch_size=6,
        ),
        "memmap_slices": lambda: TensorDictReplayBuffer(
            storage=LazyMemmapStorage(30),
            sampler=SliceSamplerWithoutReplacement(slice_len=3),
            batch_size=6,
        ),
        "lazy_ndim2_prioritized": lambda: TensorDictPrioritizedReplayBuffer(
            alpha=0.7, beta=0.5, storage=LazyTensorStorage(40, ndim=2), batch_size=6
        ),
    }


def fill_for_persistence(name, rb):
    """Writes, samples and updates priorities so that every part has a non-trivial state."""
    if "ndim2" in name:
        rb.extend(transitions(24).reshape(2, 12))
        rb.extend(transitions(16, start=24).reshape(2, 8))
    else:
        rb.extend(transitions(20))
        rb.extend(transitions(15, start=20))
    for _ in range(2):
        sample = rb.sample()
        sample["td_error"] = sample["step"].float() / 10
        rb.update_tensordict_priority(sample)


def all_items(rb):
    """Every stored item, in storage order."""
    storage = rb.storage
    return rb._collate_fn(storage.get(storage._dense_to_index(torch.arange(len(storage)))))


def next_samples(rb, n=3, seed=7):
    """``n`` batches drawn after seeding torch: equal for two buffers in the same state."""
    torch.manual_seed(seed)
    return [rb.sample().select("index", "step") for _ in range(n)]
