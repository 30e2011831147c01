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
