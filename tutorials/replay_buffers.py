"""Replay buffers: storages, samplers, writers, priorities and trajectory slices
=============================================================================

A replay buffer is three small parts: a *storage* that holds items, a *sampler* that picks
indices, and a *writer* that decides where new items go. ``TensorDictReplayBuffer`` stores
TensorDicts and writes the sampled ``"index"`` back into each sample, so that a loss can send
new priorities to the sampler.

Run it: ``python tutorials/replay_buffers.py`` (``--smoke`` for a quicker run).
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from tensordict import TensorDict

from torchrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    SliceSampler,
    TensorDictReplayBuffer,
)
from torchrl.envs import GymEnv

parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
parser.add_argument("--smoke", action="store_true", help="small budgets, for the test suite")
args = parser.parse_args()
torch.manual_seed(0)

# %%
# 1. Any Python objects: ListStorage
# ----------------------------------
# The simplest buffer keeps a list. ``extend`` adds items, ``sample`` draws a batch with
# replacement (the default RandomSampler).
rb = ReplayBuffer(storage=ListStorage(max_size=100), batch_size=4)
rb.extend(["a", "b", "c", "d", "e"])
print("ListStorage sample:", rb.sample())

# %%
# 2. TensorDicts in preallocated tensors: LazyTensorStorage
# ---------------------------------------------------------
# The storage is allocated on the first write, from the shapes of the first batch, then filled
# in place (a ring buffer: when full, the oldest items are overwritten).
data = TensorDict(
    observation=torch.randn(1000, 4), action=torch.randint(2, (1000, 1)), batch_size=[1000]
)
rb = TensorDictReplayBuffer(storage=LazyTensorStorage(max_size=500), batch_size=32)
rb.extend(data)
sample = rb.sample()
print("stored:", len(rb), "| sample keys:", sorted(sample.keys()), "| batch:", sample.batch_size)

# %%
# 3. Epochs: SamplerWithoutReplacement
# ------------------------------------
# Every item once per epoch (what PPO's minibatches want).
rb = TensorDictReplayBuffer(
    storage=LazyTensorStorage(64), sampler=SamplerWithoutReplacement(), batch_size=16
)
rb.extend(TensorDict(x=torch.arange(64), batch_size=[64]))
seen = torch.cat([rb.sample()["x"] for _ in range(4)])
print("one epoch covers every item once:", bool((seen.sort().values == torch.arange(64)).all()))

# %%
# 4. Prioritized replay
# ---------------------
# PrioritizedSampler draws item i with probability p_i^alpha / sum_j p_j^alpha (sum tree in
# C++, O(log n)). Update priorities from the sampled "index", e.g. with TD errors.
rb = TensorDictReplayBuffer(
    storage=LazyTensorStorage(100),
    sampler=PrioritizedSampler(max_capacity=100, alpha=0.7, beta=0.5),
    batch_size=8,
)
rb.extend(TensorDict(x=torch.arange(100), batch_size=[100]))
sample = rb.sample()
rb.update_priority(sample["index"], torch.full((8,), 100.0))  # make these 8 items likely
counts = torch.zeros(100)
for _ in range(20 if args.smoke else 200):
    counts += torch.bincount(rb.sample()["index"], minlength=100)
hot = counts[sample["index"]].sum() / counts.sum()
print(f"share of draws on the 8 boosted items: {hot:.2f} (uniform would be 0.08)")

# %%
# 5. Trajectory slices: SliceSampler
# ----------------------------------
# Store rollouts of a real env, then sample contiguous sub-trajectories (for recurrent
# policies, n-step returns, sequence models). The episode boundaries come from ("next", "done").
env = GymEnv("CartPole-v1")
env.set_seed(0)
rollouts = torch.cat([env.rollout(100) for _ in range(10)])
rb = TensorDictReplayBuffer(
    storage=LazyTensorStorage(10_000), sampler=SliceSampler(slice_len=8), batch_size=32
)
rb.extend(rollouts)
slices = rb.sample().reshape(4, 8)
print(
    "4 slices of 8 steps; consecutive observations chain up:",
    bool((slices["next", "observation"][:, :-1] == slices["observation"][:, 1:]).all()),
)

# %%
# 6. On disk: LazyMemmapStorage, and saving a whole buffer
# --------------------------------------------------------
# Memory-mapped files hold the data outside the process's memory; ``dumps``/``loads`` save
# and restore a buffer (storage, sampler and writer state).
with tempfile.TemporaryDirectory() as tmp:
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(1000, scratch_dir=tmp), batch_size=4)
    rb.extend(data[:200])
    rb.dumps(f"{tmp}/saved")
    restored = TensorDictReplayBuffer(storage=LazyMemmapStorage(1000), batch_size=4)
    restored.loads(f"{tmp}/saved")
    print("restored buffer holds", len(restored), "items")
