"""split_trajectories: ids, done flags, padding, nesting, and errors."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from torchrl.collectors.utils import split_trajectories
from torchrl.data.postprocs import split_trajectories as split_from_data


def _batch(ids: torch.Tensor, done: torch.Tensor | None = None) -> TensorDict:
    shape = ids.shape
    data = TensorDict(
        obs=torch.arange(ids.numel(), dtype=torch.float32).reshape(*shape, 1),
        collector=TensorDict(traj_ids=ids, batch_size=shape),
        batch_size=shape,
    )
    if done is not None:
        data["next"] = TensorDict(done=done.unsqueeze(-1), batch_size=shape)
    return data


def test_same_function():
    assert split_trajectories is split_from_data


def test_pads_and_masks_by_id():
    out = split_trajectories(_batch(torch.tensor([3, 3, 5, 5, 5, 7])))
    assert out.batch_size == torch.Size([3, 3])
    assert out["obs"].squeeze(-1).tolist() == [[0, 1, 0], [2, 3, 4], [5, 0, 0]]
    assert out["collector", "mask"].tolist() == [
        [True, True, False],
        [True, True, True],
        [True, False, False],
    ]
    assert out["collector", "traj_ids"][:, 0].tolist() == [3, 5, 7]


def test_batched_rows_and_non_contiguous_ids():
    # two envs; trajectory 4 is split in two pieces in time order
    ids = torch.tensor([[0, 0, 2, 2], [1, 1, 1, 3]])
    out = split_trajectories(_batch(ids))
    assert out.batch_size == torch.Size([4, 3])
    assert out["obs"].squeeze(-1)[1].tolist() == [4, 5, 6]
    assert out["collector", "mask"].sum() == 8


def test_from_done_flags_without_ids():
    done = torch.tensor([[False, True, False, False], [True, False, False, True]])
    data = _batch(torch.zeros(2, 4, dtype=torch.long), done)
    del data["collector"]
    out = split_trajectories(data)
    assert out.batch_size == torch.Size([4, 3])
    assert out["mask"].sum(-1).tolist() == [2, 2, 1, 3]
    assert out["obs"].squeeze(-1)[0].tolist() == [0, 1, 0]


def test_trajectory_key_and_nested_entries():
    data = TensorDict(
        agents=TensorDict(obs=torch.zeros(4, 2, 3), batch_size=[4, 2]),
        ids=torch.tensor([0, 0, 1, 1]),
        batch_size=[4],
    )
    out = split_trajectories(data, trajectory_key="ids")
    assert out["agents"].batch_size == torch.Size([2, 2, 2])
    assert out["mask"].all()


def test_as_nested():
    out = split_trajectories(_batch(torch.tensor([0, 0, 0, 1])), as_nested=True)
    assert out.batch_size == torch.Size([2])
    assert [t.shape[0] for t in out["obs"].unbind(0)] == [3, 1]


def test_errors():
    with pytest.raises(ValueError, match="time dim"):
        split_trajectories(TensorDict(a=torch.zeros(3)))
    with pytest.raises(KeyError, match="neither trajectory ids nor a done flag"):
        split_trajectories(TensorDict(a=torch.zeros(3), batch_size=[3]))
