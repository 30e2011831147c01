"""find_start_stop_traj: trajectory boundaries of a storage, ring buffers included."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from torchrl.data.replay_buffers.query import find_start_stop_traj, trajectory_bounds


def _rows(start, stop, lengths):
    return list(zip(start.tolist(), stop.tolist(), lengths.tolist()))


def test_end_flags_not_at_capacity():
    end = torch.tensor([False, False, True, False, True, False])
    start, stop, lengths = find_start_stop_traj(end=end, at_capacity=False)
    assert start.shape == (3, 1) and stop.shape == (3, 1)
    assert _rows(start[:, 0], stop[:, 0], lengths) == [(0, 2, 3), (3, 4, 2), (5, 5, 1)]


def test_end_flags_wrap_at_capacity():
    end = torch.tensor([False, False, True, False, True, False])
    start, stop, lengths = find_start_stop_traj(end=end, at_capacity=True)
    # rows 5 and 0..2 form one trajectory across the wrap point
    assert _rows(start[:, 0], stop[:, 0], lengths) == [(5, 2, 4), (3, 4, 2)]
    # an end on the last row: nothing wraps
    end[-1] = True
    start, stop, lengths = find_start_stop_traj(end=end, at_capacity=True)
    assert _rows(start[:, 0], stop[:, 0], lengths) == [(0, 2, 3), (3, 4, 2), (5, 5, 1)]


def test_trajectory_ids():
    ids = torch.tensor([0, 0, 1, 1, 1, 2])
    start, stop, lengths = find_start_stop_traj(trajectory=ids, at_capacity=False)
    assert _rows(start[:, 0], stop[:, 0], lengths) == [(0, 1, 2), (2, 4, 3), (5, 5, 1)]
    # full ring whose newest rows continue the oldest trajectory (same id on both sides)
    ids = torch.tensor([2, 0, 0, 1, 1, 2])
    start, stop, lengths = find_start_stop_traj(trajectory=ids, at_capacity=True)
    assert _rows(start[:, 0], stop[:, 0], lengths) == [(5, 0, 2), (1, 2, 2), (3, 4, 2)]
    ids = torch.tensor([0, 0, 1, 1, 2, 2])
    start, stop, lengths = find_start_stop_traj(trajectory=ids, at_capacity=True)
    assert _rows(start[:, 0], stop[:, 0], lengths) == [(0, 1, 2), (2, 3, 2), (4, 5, 2)]


@pytest.mark.parametrize("cursor", [2, range(1, 3), torch.tensor([1, 2]), -4])
def test_cursor_cuts_the_ring(cursor):
    # one long trajectory filled the ring; the rows after the cursor are older data
    end = torch.zeros(6, dtype=torch.bool)
    start, stop, lengths = find_start_stop_traj(end=end, at_capacity=True, cursor=cursor)
    assert _rows(start[:, 0], stop[:, 0], lengths) == [(3, 2, 6)]
    ids = torch.full((6,), 5)
    start, stop, lengths = find_start_stop_traj(trajectory=ids, at_capacity=True, cursor=cursor)
    assert _rows(start[:, 0], stop[:, 0], lengths) == [(3, 2, 6)]


def test_full_ring_without_any_end_is_one_trajectory():
    start, stop, lengths = find_start_stop_traj(
        end=torch.zeros(4, dtype=torch.bool), at_capacity=True
    )
    assert _rows(start[:, 0], stop[:, 0], lengths) == [(0, 3, 4)]


def test_batched_columns():
    # [T=4, B=2]: each column is its own sequence of steps
    end = torch.tensor([[False, False], [True, False], [False, True], [False, False]])
    start, stop, lengths = find_start_stop_traj(end=end, at_capacity=False)
    assert start.tolist() == [[0, 0], [2, 0], [0, 1], [3, 1]]
    assert stop.tolist() == [[1, 0], [3, 0], [2, 1], [3, 1]]
    assert lengths.tolist() == [2, 2, 3, 1]
    start, stop, lengths = find_start_stop_traj(end=end, at_capacity=True)
    assert start.tolist() == [[2, 0], [3, 1]]
    assert stop.tolist() == [[1, 0], [2, 1]]
    assert lengths.tolist() == [4, 4]
    # extra batch dims are unravelled in order
    end3 = torch.zeros(3, 2, 2, dtype=torch.bool)
    end3[0, 1, 1] = True
    start, stop, lengths = find_start_stop_traj(end=end3, at_capacity=False)
    assert start.shape == (5, 3)
    assert start[-2:].tolist() == [[0, 1, 1], [1, 1, 1]]
    assert lengths.sum() == 12


@pytest.mark.parametrize("at_capacity", [False, True])
def test_matches_trajectory_bounds_and_covers_every_row(at_capacity):
    g = torch.Generator().manual_seed(0)
    end = torch.rand(50, 3, generator=g) < 0.15
    start, stop, lengths = find_start_stop_traj(end=end, at_capacity=at_capacity)
    assert int(lengths.sum()) == 150
    covered = torch.zeros(50, 3, dtype=torch.long)
    for (t0, b), (t1, _), n in zip(start.tolist(), stop.tolist(), lengths.tolist()):
        rows = [(t0 + i) % 50 for i in range(n)]
        assert rows[-1] == t1
        covered[rows, b] += 1
        assert not end[rows[:-1], b].any()  # no end flag inside a trajectory
    assert (covered == 1).all()
    if not at_capacity:
        td = TensorDict(
            {"next": TensorDict({"done": end[:, 0:1]}, [50])},
            [50],
        )
        with pytest.warns(UserWarning):
            bounds = trajectory_bounds(td)
        col0 = start[:, 1] == 0
        assert torch.equal(start[col0, 0], bounds[:, 0])
        assert torch.equal(stop[col0, 0] + 1, bounds[:, 1])


def test_device_and_empty():
    start, stop, lengths = find_start_stop_traj(
        end=torch.zeros(0, 2, dtype=torch.bool), at_capacity=False, device="cpu"
    )
    assert start.shape == (0, 2) and lengths.shape == (0,)
    start, _, _ = find_start_stop_traj(
        trajectory=torch.tensor([0, 1]), at_capacity=False, device=torch.device("cpu")
    )
    assert start.device == torch.device("cpu")


def test_errors():
    end = torch.zeros(4, dtype=torch.bool)
    with pytest.raises(ValueError, match="exactly one"):
        find_start_stop_traj(at_capacity=False)
    with pytest.raises(ValueError, match="exactly one"):
        find_start_stop_traj(end=end, trajectory=torch.zeros(4), at_capacity=False)
    with pytest.raises(ValueError, match="bool"):
        find_start_stop_traj(end=torch.zeros(4), at_capacity=False)
    with pytest.raises(ValueError, match="time dim"):
        find_start_stop_traj(end=torch.tensor(True), at_capacity=False)
    with pytest.raises(TypeError, match="tensor"):
        find_start_stop_traj(end=[True, False], at_capacity=False)
    with pytest.raises(ValueError, match="out of range"):
        find_start_stop_traj(end=end, at_capacity=True, cursor=4)
    with pytest.raises(ValueError, match="empty"):
        find_start_stop_traj(end=end, at_capacity=True, cursor=range(0))
    with pytest.raises(TypeError, match="cursor"):
        find_start_stop_traj(end=end, at_capacity=True, cursor=1.5)
