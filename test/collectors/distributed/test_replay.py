"""RayReplayBuffer: a buffer in a Ray actor, extended by Ray collectors, sampled here."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("ray")

from _collector_helpers import counting_env  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from torchrl.collectors.distributed import RayCollector, RayReplayBuffer  # noqa: E402
from torchrl.data import LazyTensorStorage, PrioritizedSampler  # noqa: E402


@pytest.mark.slow
def test_ray_replay_buffer_api(ray_cluster):
    rb = RayReplayBuffer(
        storage=LazyTensorStorage(50),
        sampler=PrioritizedSampler(50, alpha=1.0, beta=1.0),
        batch_size=8,
    )
    try:
        rb.extend(TensorDict(obs=torch.arange(20.0), batch_size=[20]))
        assert len(rb) == 20
        sample, info = rb.sample(return_info=True)
        assert sample.shape == (8,)
        index = info["index"]
        rb.update_priority(index, torch.full((len(index),), 5.0))
        rb.empty()
        assert len(rb) == 0
    finally:
        rb.shutdown()


@pytest.mark.slow
def test_ray_collectors_extend_remote_buffer(ray_cluster):
    rb = RayReplayBuffer(storage=LazyTensorStorage(1000), batch_size=16)
    collector = RayCollector(
        counting_env,
        None,
        num_collectors=2,
        sync=False,
        frames_per_batch=20,
        total_frames=100,
        collector_kwargs={"replay_buffer": rb},
    )
    try:
        assert all(batch is None for batch in collector)
        assert collector.frames == 100
        assert len(rb) == 100
        sample = rb.sample()
        assert sample.shape == (16,) and ("collector", "traj_ids") in sample.keys(True)
    finally:
        collector.shutdown()
        rb.shutdown()
