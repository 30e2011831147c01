"""policy_lag_stats: exact min/mean/max lag of a batch."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from torchrl.collectors.policy_lag import policy_lag_stats


def test_exact_stats_on_rows() -> None:
    v = torch.tensor([[10, 10, 11, 12], [8, 8, 9, 9]])
    stats = policy_lag_stats(TensorDict(policy_version=v, batch_size=[2, 4]), 12)
    lags = [2, 2, 1, 0, 4, 4, 3, 3]
    assert stats == {"min": 0.0, "mean": sum(lags) / len(lags), "max": 4.0}


def test_tensor_input_key_and_trailing_dim() -> None:
    v = torch.tensor([[3], [5]])
    assert policy_lag_stats(v.squeeze(-1), torch.tensor(5)) == {"min": 0.0, "mean": 1.0, "max": 2.0}
    td = TensorDict(ver=v, batch_size=[2])
    assert policy_lag_stats(td, 6, version_key="ver") == {"min": 1.0, "mean": 2.0, "max": 3.0}


def test_negative_lag_is_reported() -> None:
    assert policy_lag_stats(torch.tensor([4, 6]), 5)["min"] == -1.0


def test_errors() -> None:
    with pytest.raises(KeyError, match="'policy_version'"):
        policy_lag_stats(TensorDict(x=torch.zeros(2), batch_size=[2]), 0)
    with pytest.raises(ValueError, match="no step"):
        policy_lag_stats(torch.zeros(0, dtype=torch.long), 0)
    with pytest.raises(ValueError, match="current_version"):
        policy_lag_stats(torch.zeros(2, dtype=torch.long), 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="integer versions"):
        policy_lag_stats(torch.zeros(2), 1)


def test_filter_as_async_collector_postproc() -> None:
    """PolicyAgeFilter(0) as the postproc of AsyncBatchedCollector: only current-version rows."""
    from tensordict.nn import TensorDictModule
    from torch import nn

    from torchrl.collectors.async_batched import AsyncBatchedCollector
    from torchrl.envs import PendulumEnv
    from torchrl.envs.transforms.policy_age import PolicyAgeFilter

    policy = TensorDictModule(
        nn.Sequential(nn.Linear(3, 1), nn.Tanh()), ["observation"], ["action"]
    )
    age_filter = PolicyAgeFilter(0)
    collector = AsyncBatchedCollector(
        create_env_fn=[PendulumEnv] * 4,
        policy=policy,
        frames_per_batch=40,
        total_frames=400,
        num_workers=1,
        num_splits=2,
        postproc=age_filter,
        seed=0,
    )
    age_filter.current_version = lambda: collector.policy_version
    try:
        seen = 0
        for batch in collector:
            if batch.batch_size.numel():
                stats = policy_lag_stats(batch, collector.policy_version)
                assert stats["max"] == 0.0
                seen += batch.batch_size.numel()
            collector.update_policy_weights_()
    finally:
        collector.shutdown()
    assert age_filter.dropped_frames > 0  # the weights changed under the collector
    assert seen == age_filter.kept_frames
