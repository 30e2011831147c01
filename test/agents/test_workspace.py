"""Workspace (torchrl/agents/workspace.py): indexing, growth, views without copies, errors."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from torchrl.agents import Workspace


def _filled(steps: int = 3, batch: int = 2) -> Workspace:
    ws = Workspace(batch_size=[batch], capacity=4)
    for t in range(steps):
        ws.set("x", t, torch.full((batch, 3), float(t)))
        ws.set(("nested", "y"), t, torch.full((batch,), t, dtype=torch.int64))
    return ws


def test_set_get_and_indexing() -> None:
    ws = _filled()
    assert ws.time_length == 3 and ws.batch_size == torch.Size([2])
    assert torch.equal(ws.get("x", 1), torch.ones(2, 3))
    assert torch.equal(ws.get("x", -1), torch.full((2, 3), 2.0))
    assert ws.get(("nested", "y"), 2).dtype == torch.int64
    assert set(ws.keys()) == {"x", ("nested", "y")}
    assert "x" in ws and ("nested", "y") in ws and "z" not in ws
    full = ws.get_full("x")
    assert full.shape == (2, 3, 3)
    assert torch.equal(full[:, :, 0], torch.tensor([[0.0, 1.0, 2.0]] * 2))


def test_get_is_a_view_of_the_storage() -> None:
    ws = _filled()
    ws.get("x", 1).fill_(7.0)
    assert ws.get_full("x")[0, 1, 0] == 7.0
    assert ws.get_full("x").data_ptr() == ws.storage["x"].data_ptr()


def test_growth_keeps_data() -> None:
    ws = Workspace(batch_size=[2], capacity=2)
    for t in range(9):
        ws.set("x", t, torch.full((2,), float(t)))
    assert ws.time_length == 9 and ws.capacity >= 9
    assert torch.equal(ws.get_full("x")[0], torch.arange(9.0))
    # writing far ahead jumps the capacity there at once; the gap holds zeros
    ws.set("x", 40, torch.ones(2))
    assert ws.capacity >= 41 and ws.time_length == 41
    assert ws.get("x", 20).abs().sum() == 0


def test_conversions_share_storage() -> None:
    td = TensorDict({"obs": torch.randn(4, 5, 3), ("next", "r"): torch.randn(4, 5, 1)}, [4, 5])
    ws = Workspace.from_tensordict(td)
    assert ws.batch_size == torch.Size([4]) and ws.time_length == 5
    assert ws.get_full("obs").data_ptr() == td["obs"].data_ptr()
    assert ws.to_tensordict() is td  # full capacity: the storage itself
    ws2 = _filled()  # capacity 4, 3 steps: a view of the first 3 steps
    out = ws2.to_tensordict()
    assert out.batch_size == torch.Size([2, 3])
    assert out["x"].data_ptr() == ws2.storage["x"].data_ptr()
    assert out["nested", "y"].data_ptr() == ws2.storage["nested", "y"].data_ptr()
    back = Workspace.from_tensordict(out)
    assert back.get_full("x").data_ptr() == ws2.storage["x"].data_ptr()


def test_set_full_stores_without_copy() -> None:
    ws = _filled()
    value = torch.randn(2, 3, 5, requires_grad=True)
    ws.set_full("z", value)
    assert ws.get_full("z") is value or ws.get_full("z").data_ptr() == value.data_ptr()
    assert ws.get_full("z").requires_grad
    with pytest.raises(ValueError, match="holds 3 steps"):
        ws.set_full("w", torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"expected a value of shape \[\[2\], T"):
        ws.set_full("w", torch.zeros(3, 3))
    empty = Workspace(batch_size=[2])
    empty.set_full("a", torch.zeros(2, 6))
    assert empty.time_length == 6


def test_get_step_and_set_step() -> None:
    ws = _filled()
    step = ws.get_step(1)
    assert step.batch_size == torch.Size([2])
    assert torch.equal(step["x"], torch.ones(2, 3))
    assert set(ws.get_step(1, keys=["x"]).keys()) == {"x"}
    fresh = Workspace()
    fresh.set_step(0, TensorDict({"a": torch.zeros(3, 2)}, [3]))
    assert fresh.batch_size == torch.Size([3])
    with pytest.raises(ValueError, match="batch size"):
        fresh.set_step(1, TensorDict({"a": torch.zeros(4, 2)}, [4]))


def test_copy_n_last_steps() -> None:
    ws = Workspace(batch_size=[1])
    for t in range(5):
        ws.set("x", t, torch.full((1,), float(t)))
    ws.copy_n_last_steps(3)
    assert ws.time_length == 3
    assert torch.equal(ws.get_full("x"), torch.tensor([[2.0, 3.0, 4.0]]))  # overlapping copy
    with pytest.raises(ValueError, match="n must be in"):
        ws.copy_n_last_steps(4)


def test_time_length_clear_slices() -> None:
    ws = _filled()
    assert ws.time_slice(1, 3)["x"].shape == (2, 2, 3)
    rows = ws.batch_slice(slice(1, 2))
    assert rows.batch_size == torch.Size([1])
    assert rows.get_full("x").data_ptr() == ws.storage["x"][1:].data_ptr()
    ws.clear()
    assert ws.time_length == 0
    ws.set_time_length(2)
    assert ws.get_full("x").shape == (2, 2, 3)
    with pytest.raises(ValueError, match="set_time_length"):
        ws.set_time_length(99)


def test_to_device_and_share_memory() -> None:
    ws = _filled()
    assert ws.to("cpu") is ws
    ws.share_memory_()
    assert ws.storage["x"].is_shared()


def test_errors_name_the_key() -> None:
    ws = _filled()
    with pytest.raises(KeyError, match="no variable 'nope'"):
        ws.get("nope", 0)
    with pytest.raises(IndexError, match="step 5 of 'x' is out of range: 3 steps"):
        ws.get("x", 5)
    with pytest.raises(ValueError, match=r"Workspace.set\('x'\): stored steps have shape \[3\]"):
        ws.set("x", 0, torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"expected a value of shape \[\[2\], ...\], got \[5, 3\]"):
        ws.set("x", 0, torch.zeros(5, 3))
    with pytest.raises(TypeError, match="must be a tensor"):
        ws.set("x", 0, [1, 2])  # type: ignore[arg-type]
    with pytest.raises(IndexError, match="negative step"):
        ws.set("x", -1, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="batch size is unknown"):
        Workspace().set("x", 0, torch.tensor(1.0))
    inferred = Workspace()
    inferred.set("x", 0, torch.zeros(5, 2))
    assert inferred.batch_size == torch.Size([5])
    with pytest.raises(ValueError, match="needs a time dim"):
        Workspace.from_tensordict(TensorDict({}, []))
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        Workspace(capacity=0)


def test_step_reads_and_writes_follow_the_layout() -> None:
    # get_step/set_step keep per-step plans (views, destinations): they must follow new
    # variables and growth, and never share a TensorDict between two reads.
    ws = Workspace(batch_size=[2], capacity=2)
    step = TensorDict({"a": torch.zeros(2, 3), "next": {"b": torch.zeros(2)}}, [2])
    ws.set_step(0, step)
    first, second = ws.get_step(0), ws.get_step(0)
    assert first is not second and first["next"] is not second["next"]
    first["extra"] = torch.ones(2)
    first["next", "more"] = torch.ones(2)
    again = ws.get_step(0)
    assert "extra" not in again.keys() and "more" not in again["next"].keys()
    assert list(again.keys(True, True)) == list(ws.storage.keys(True, True))
    ws.set("c", 0, torch.ones(2))  # a new variable: the next read shows it
    assert torch.equal(ws.get_step(0)["c"], torch.ones(2))
    assert "next" not in ws.get_step(0, exclude=("next",)).keys()
    for t in range(1, 5):  # writes past the capacity grow the storage
        ws.set_step(t, TensorDict({"a": torch.full((2, 3), float(t))}, [2]), keys=["a"])
    assert ws.capacity >= 5
    assert torch.equal(ws.get_full("a")[:, :, 0], torch.arange(5.0).expand(2, 5))
    assert ws.get_step(4)["a"].data_ptr() == ws.storage["a"][:, 4].data_ptr()
    with pytest.raises(ValueError, match="stored steps have shape"):
        ws.set_step(1, TensorDict({"a": torch.zeros(2, 4)}, [2]), keys=["a"])
    with pytest.raises(KeyError, match="no entry 'zzz'"):
        ws.set_step(1, TensorDict({"a": torch.zeros(2, 3)}, [2]), keys=["zzz"])
    ws.set_step(1, TensorDict({"x": torch.ones(2)}, [2]), under="next", keys=["x"])
    assert torch.equal(ws.get(("next", "x"), 1), torch.ones(2))
