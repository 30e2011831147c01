"""PolicyAgeFilter drops exactly the rows (or steps) whose policy lag exceeds the bound."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from torchrl.data.replay_buffers import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs.transforms.policy_age import PolicyAgeFilter


def _rows(versions: list[list[int]]) -> TensorDict:
    v = torch.tensor(versions)
    n, t = v.shape
    return TensorDict(
        policy_version=v,
        obs=torch.arange(n * t, dtype=torch.float32).reshape(n, t, 1),
        batch_size=[n, t],
    )


def test_rows_dropped_by_their_oldest_step() -> None:
    batch = _rows([[7, 7, 7], [5, 6, 7], [6, 6, 6], [4, 4, 4], [6, 7, 7]])
    f = PolicyAgeFilter(1, current_version=7)
    out = f(batch)
    # lags per row (max): 0, 2, 1, 3, 1 -> rows 0, 2, 4 kept
    assert out.batch_size == torch.Size([3, 3])
    torch.testing.assert_close(out["obs"], batch["obs"][torch.tensor([0, 2, 4])])
    assert (f.kept_frames, f.dropped_frames) == (9, 6)


def test_one_dim_batches_filtered_per_step() -> None:
    batch = TensorDict(policy_version=torch.tensor([0, 1, 2, 3, 4]), batch_size=[5])
    f = PolicyAgeFilter(2, current_version=4)
    assert f(batch)["policy_version"].tolist() == [2, 3, 4]
    f.max_policy_lag = 0
    assert f(batch)["policy_version"].tolist() == [4]


def test_bound_inclusive_and_zero_lag() -> None:
    batch = _rows([[3, 3], [2, 3]])
    assert PolicyAgeFilter(0, current_version=3)(batch).batch_size[0] == 1
    assert PolicyAgeFilter(1, current_version=3)(batch).batch_size[0] == 2


def test_current_version_updates_and_callable() -> None:
    batch = _rows([[1, 1], [2, 2]])
    f = PolicyAgeFilter(0, current_version=2)
    assert f(batch)["policy_version"][:, 0].tolist() == [2]
    f.current_version = 3
    assert f(batch).batch_size[0] == 0
    f.current_version = torch.tensor(1)
    assert f.current_version == 1
    assert f(batch)["policy_version"][:, 0].tolist() == [1, 2]
    clock = {"v": 2}
    f.current_version = lambda: clock["v"]
    assert f(batch)["policy_version"][:, 0].tolist() == [2]
    clock["v"] = 3
    assert f(batch).batch_size[0] == 0


def test_newer_data_counts_as_fresh() -> None:
    batch = _rows([[5, 6]])
    assert PolicyAgeFilter(0, current_version=4)(batch).batch_size[0] == 1


def test_trailing_one_and_leading_dims() -> None:
    v = torch.tensor([[[3, 3], [1, 3]], [[2, 3], [3, 3]]])  # [2, 2, T=2]
    batch = TensorDict(policy_version=v.unsqueeze(-1), batch_size=[2, 2, 2])
    out = PolicyAgeFilter(1, current_version=3)(batch)
    assert out.batch_size == torch.Size([3, 2])
    assert out["policy_version"].squeeze(-1).tolist() == [[3, 3], [2, 3], [3, 3]]


def test_all_dropped_gives_empty_batch() -> None:
    f = PolicyAgeFilter(0, current_version=9)
    out = f(_rows([[1, 1], [2, 2]]))
    assert out.batch_size == torch.Size([0, 2])
    assert (f.kept_frames, f.dropped_frames) == (0, 4)


def test_replay_buffer_write_and_sample() -> None:
    f = PolicyAgeFilter(1, current_version=4)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=50)
    rb.append_transform(f, invert=True)  # filter what is written
    rb.extend(TensorDict(policy_version=torch.tensor([1, 2, 3, 4]), batch_size=[4]))
    assert len(rb) == 2
    assert set(rb.sample()["policy_version"].tolist()) == {3, 4}

    sampled = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=50)
    sampled.append_transform(PolicyAgeFilter(0, current_version=4))  # filter samples
    sampled.extend(TensorDict(policy_version=torch.tensor([3, 4]), batch_size=[2]))
    assert set(sampled.sample()["policy_version"].tolist()) == {4}


def test_errors() -> None:
    with pytest.raises(ValueError, match="max_policy_lag must be >= 0"):
        PolicyAgeFilter(-1)
    with pytest.raises(TypeError, match="max_policy_lag must be an int"):
        PolicyAgeFilter(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="current_version must be an int"):
        PolicyAgeFilter(1, current_version="3")  # type: ignore[arg-type]
    f = PolicyAgeFilter(1, version_key="v")
    with pytest.raises(KeyError, match="no 'v' entry"):
        f(TensorDict(policy_version=torch.zeros(2, dtype=torch.long), batch_size=[2]))
    with pytest.raises(TypeError, match="integer versions"):
        f(TensorDict(v=torch.zeros(2), batch_size=[2]))
    with pytest.raises(ValueError, match="no batch dim"):
        f(TensorDict(v=torch.tensor(1)))


def test_refuses_to_run_inside_an_env() -> None:
    from torchrl.envs import PendulumEnv, TransformedEnv

    env = TransformedEnv(PendulumEnv(), PolicyAgeFilter(1))
    with pytest.raises(RuntimeError, match="cannot run inside an env"):
        env.rollout(2)
