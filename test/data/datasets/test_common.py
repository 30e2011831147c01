"""BaseDatasetExperienceReplay (convert once, reopen fast) and the dataset registry."""

from __future__ import annotations

import pickle
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from tensordict import MemoryMappedTensor, TensorDictBase

from torchrl.data.datasets import (
    BaseDatasetExperienceReplay,
    DatasetNotFoundError,
    list_datasets,
    load_dataset,
    register_dataset,
    ted_from_arrays,
)
from torchrl.data.datasets import registry as registry_module
from torchrl.data.datasets.d4rl import D4RLExperienceReplay, export_d4rl
from torchrl.data.replay_buffers.storages import Storage


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHRL_DATASETS_ROOT", str(tmp_path / "cache"))
    monkeypatch.setattr(registry_module, "_REGISTRY", dict(registry_module._REGISTRY))


def _arrays(n: int, dim: int = 3) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    terminated = torch.zeros(n, dtype=torch.bool)
    terminated[n // 3] = True
    truncated = torch.zeros(n, dtype=torch.bool)
    truncated[-1] = True
    return {
        "obs": torch.randn(n, dim, generator=g),
        "action": torch.randn(n, 2, generator=g),
        "reward": torch.randn(n, generator=g),
        "terminated": terminated,
        "truncated": truncated,
        "next_obs": torch.randn(n, dim, generator=g),
    }


class ToyDataset(BaseDatasetExperienceReplay):
    """Raw data: ``<source_dir>/<dataset_id>.pt`` (a dict of arrays); counts every hook call."""

    cache_name = "toy"

    def __init__(self, dataset_id: str, *, source_dir: Path, calls: Counter, **kwargs):
        self.source_dir = Path(source_dir)
        self.calls = calls
        self.opened: TensorDictBase | None = None
        super().__init__(dataset_id, **kwargs)

    @property
    def source(self) -> Path:
        return self.source_dir / f"{self.dataset_id}.pt"

    def _source_exists(self) -> bool:
        self.calls["source_exists"] += 1
        return self.source.exists()

    def _missing_message(self) -> str:
        return f"toy dataset {self.dataset_id!r} expected at {self.source}"

    def _download(self) -> None:
        self.calls["download"] += 1
        self.source_dir.mkdir(parents=True, exist_ok=True)
        torch.save(_arrays(9), self.source)

    def _convert(self) -> TensorDictBase:
        self.calls["convert"] += 1
        a = torch.load(self.source)
        return ted_from_arrays(
            a["obs"], a["action"], a["reward"], a["terminated"], a["truncated"], a["next_obs"]
        )

    def _write(self, dest: Path) -> dict:
        self.calls["write"] += 1
        super()._write(dest)
        return {"written_by": "toy"}

    def _make_storage(self, data: TensorDictBase) -> Storage:
        self.opened = data
        return super()._make_storage(data)


class InterruptedToy(ToyDataset):
    def _write(self, dest: Path) -> dict:
        self._convert().memmap_(prefix=dest)  # a complete-looking folder...
        raise KeyboardInterrupt  # ...then the process is interrupted before the rename


def _source(tmp_path, n=9, name="ds"):
    src = tmp_path / "raw"
    src.mkdir(exist_ok=True)
    torch.save(_arrays(n), src / f"{name}.pt")
    return src


def test_converts_once_then_reopens_without_reading(tmp_path):
    src = _source(tmp_path, n=200_000)
    calls = Counter()
    root = tmp_path / "root"
    first = ToyDataset("ds", source_dir=src, calls=calls, root=root, batch_size=8)
    assert calls["convert"] == 1 and calls["write"] == 1
    assert len(first) == 200_000
    assert first.metadata == {"written_by": "toy"}
    assert (root / "ds" / "flat" / ".complete").exists()
    (src / "ds.pt").unlink()  # the raw data is not needed any more
    calls.clear()
    t0 = time.perf_counter()
    again = ToyDataset("ds", source_dir=src, calls=calls, root=root, batch_size=8)
    elapsed = time.perf_counter() - t0
    assert calls == Counter()  # no conversion, not even a look at the source
    assert elapsed < 1.0
    # the reopened copy is memory-mapped: nothing was read into memory
    assert again.opened is not None
    leaves = list(again.opened.values(include_nested=True, leaves_only=True))
    assert leaves and all(isinstance(x, MemoryMappedTensor) for x in leaves)
    assert torch.equal(again[:]["observation"], first[:]["observation"])
    assert again.sample().shape == (8,)


def test_interrupted_conversion_leaves_no_half_copy(tmp_path):
    src = _source(tmp_path)
    root = tmp_path / "root"
    with pytest.raises(KeyboardInterrupt):
        InterruptedToy("ds", source_dir=src, calls=Counter(), root=root)
    assert not (root / "ds" / "flat").exists()
    assert not [p for p in (root / "ds").iterdir() if p.name != "metadata.json"]
    calls = Counter()
    assert len(ToyDataset("ds", source_dir=src, calls=calls, root=root)) == 9
    assert calls["convert"] == 1


def test_failed_conversion_leaves_no_half_copy(tmp_path):
    src = tmp_path / "raw"
    src.mkdir()
    (src / "ds.pt").write_text("not a torch file")
    root = tmp_path / "root"
    with pytest.raises(pickle.UnpicklingError):
        ToyDataset("ds", source_dir=src, calls=Counter(), root=root)
    assert not (root / "ds").exists() or not list((root / "ds").iterdir())


def test_download_false_never_downloads(tmp_path):
    calls = Counter()
    with pytest.raises(DatasetNotFoundError, match="toy dataset 'ds' expected at"):
        ToyDataset("ds", source_dir=tmp_path / "raw", calls=calls, root=tmp_path / "root")
    assert calls["download"] == 0 and calls["convert"] == 0
    rb = ToyDataset(
        "ds", source_dir=tmp_path / "raw", calls=calls, root=tmp_path / "root", download=True
    )
    assert calls["download"] == 1 and len(rb) == 9
    # the data is there now: download=True does not fetch it again
    ToyDataset(
        "ds", source_dir=tmp_path / "raw", calls=calls, root=tmp_path / "root", download=True
    )
    assert calls["download"] == 1 and calls["convert"] == 1


def test_force_reconverts(tmp_path):
    src = _source(tmp_path)
    calls = Counter()
    root = tmp_path / "root"
    ToyDataset("ds", source_dir=src, calls=calls, root=root)
    torch.save(_arrays(12), src / "ds.pt")
    assert len(ToyDataset("ds", source_dir=src, calls=calls, root=root)) == 9  # cached copy
    rb = ToyDataset("ds", source_dir=src, calls=calls, root=root, download="force")
    assert calls["convert"] == 2 and calls["download"] == 0
    assert len(rb) == 12


def test_split_trajs(tmp_path):
    src = _source(tmp_path, n=9)  # terminated at 3, truncated at 8: trajectories of 4 and 5
    calls = Counter()
    rb = ToyDataset("ds", source_dir=src, calls=calls, root=tmp_path / "root", split_trajs=True)
    assert rb.data_path.name == "split" and len(rb) == 2
    data = rb[:]
    assert data["mask"].sum(-1).tolist() == [4, 5]
    assert data["episode"][1, :5].tolist() == [1] * 5
    flat = ToyDataset("ds", source_dir=src, calls=calls, root=tmp_path / "root")
    assert calls["convert"] == 1  # the split copy is made from the flat one
    assert torch.equal(data["observation"][0, :4], flat[:4]["observation"])


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="dataset_id"):
        ToyDataset("", source_dir=tmp_path, calls=Counter())
    with pytest.raises(ValueError, match="download"):
        ToyDataset("ds", source_dir=tmp_path, calls=Counter(), download="yes")


def test_delete(tmp_path):
    src = _source(tmp_path)
    rb = ToyDataset("ds", source_dir=src, calls=Counter(), root=tmp_path / "root")
    rb.delete()
    assert not rb.data_path_root.exists() and (src / "ds.pt").exists()


# -- registry --------------------------------------------------------------------------------------
def test_load_d4rl_by_name(tmp_path):
    root = tmp_path / "root"
    a = _arrays(9)
    td = ted_from_arrays(
        a["obs"], a["action"], a["reward"], a["terminated"], a["truncated"], a["next_obs"]
    )
    export_d4rl(td, root / "toy-medium-v2.hdf5")
    rb = load_dataset("d4rl/toy-medium-v2", root=root, batch_size=4)
    assert isinstance(rb, D4RLExperienceReplay)
    assert rb.dataset_id == "toy-medium-v2" and len(rb) == 9
    assert torch.equal(rb[:]["observation"], a["obs"])
    assert "d4rl" in list_datasets()


def test_register_and_load(tmp_path):
    seen = {}

    def family(dataset_id, **kwargs):
        seen["family"] = (dataset_id, kwargs)
        return "built"

    register_dataset("mine", family)
    assert load_dataset("mine/abc-v0", root="r") == "built"
    assert seen["family"] == ("abc-v0", {"root": "r"})
    register_dataset("whole", lambda **kw: kw)
    assert load_dataset("whole", batch_size=3) == {"batch_size": 3}
    assert {"mine", "whole"} <= set(list_datasets())
    assert list_datasets() == sorted(list_datasets())


def test_register_errors():
    with pytest.raises(ValueError, match="without '/'"):
        register_dataset("a/b", lambda **kw: None)
    with pytest.raises(ValueError, match="non-empty"):
        register_dataset("", lambda **kw: None)
    with pytest.raises(TypeError, match="callable"):
        register_dataset("x", 3)
    register_dataset("x", lambda **kw: 1)
    with pytest.raises(ValueError, match="already registered"):
        register_dataset("x", lambda **kw: 2)
    with pytest.raises(ValueError, match="already registered"):
        register_dataset("d4rl", lambda **kw: 2)
    register_dataset("x", lambda **kw: 2, overwrite=True)
    assert load_dataset("x") == 2
    with pytest.raises(KeyError, match="no dataset registered as 'nope/a'"):
        load_dataset("nope/a")
