"""Tests of torchrl.checkpoint: round trips, rotation, strictness, corrupted files, pickles."""

from __future__ import annotations

import json
import pickle
import random
import shutil
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from _trainer_helpers import FakeCollector
from tensordict import TensorDict
from torch import nn

from torchrl.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointOptions,
    CheckpointRotation,
    DumpLoadCheckpointAdapter,
    GlobalRNGState,
    JSONCheckpointAdapter,
    StateDictCheckpointAdapter,
    read_manifest,
)
from torchrl.data import LazyMemmapStorage, LazyTensorStorage, TensorDictReplayBuffer


def _run_parts(seed: int = 0):
    torch.manual_seed(seed)
    module = nn.Linear(3, 1)
    optim = torch.optim.Adam(module.parameters(), lr=1e-2)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(64), batch_size=8)
    buffer.extend(TensorDict(x=torch.randn(32, 3), y=torch.randn(32, 1), batch_size=[32]))
    return module, optim, buffer


def _train_step(module, optim, buffer) -> torch.Tensor:
    batch = buffer.sample()
    loss = ((module(batch["x"]) - batch["y"]) ** 2).mean()
    optim.zero_grad()
    loss.backward()
    optim.step()
    return module.weight.detach().clone()


def _draws():
    return (random.random(), float(np.random.rand()), torch.rand(3))


class TestRoundTrip:
    def test_same_next_step_and_random_numbers(self, tmp_path):
        module, optim, buffer = _run_parts()
        collector = FakeCollector()
        collector.frames = 40
        progress = {"frames": 40}
        for _ in range(3):
            _train_step(module, optim, buffer)
        ckpt = Checkpoint(
            policy=module,
            optimizer=optim,
            replay_buffer=buffer,
            collector=collector,
            rng=GlobalRNGState(),
            progress=progress,
        )
        path = ckpt.save(tmp_path / "ckpt")
        expected_step = _train_step(module, optim, buffer)
        expected_draws = _draws()

        module2, optim2, buffer2 = _run_parts(seed=1)
        collector2 = FakeCollector()
        progress2: dict = {}
        result = Checkpoint(
            policy=module2,
            optimizer=optim2,
            replay_buffer=buffer2,
            collector=collector2,
            rng=GlobalRNGState(),
            progress=progress2,
        ).load(path)
        assert result.loaded == {
            "policy",
            "optimizer",
            "replay_buffer",
            "collector",
            "rng",
            "progress",
        }
        assert not result.missing and not result.incompatible and not result.unrequested
        assert progress2 == {"frames": 40} and result.values["progress"] == {"frames": 40}
        assert collector2.frames == 40
        assert len(buffer2) == 32
        assert torch.equal(_train_step(module2, optim2, buffer2), expected_step)
        draws = _draws()
        assert draws[:2] == expected_draws[:2]
        assert torch.equal(draws[2], expected_draws[2])

    def test_adapters_chosen(self, tmp_path):
        module, optim, buffer = _run_parts()
        path = Checkpoint(a=module, b=buffer, c=[1, 2], d=GlobalRNGState()).save(tmp_path / "c")
        adapters = {k: v["adapter"] for k, v in read_manifest(path)["components"].items()}
        assert adapters == {
            "a": StateDictCheckpointAdapter.adapter_id,
            "b": DumpLoadCheckpointAdapter.adapter_id,
            "c": JSONCheckpointAdapter.adapter_id,
            "d": StateDictCheckpointAdapter.adapter_id,
        }

    def test_unknown_object_is_refused_by_name(self):
        with pytest.raises(CheckpointError, match="'thing'"):
            Checkpoint(thing=object())

    def test_partial_selection_and_overwrite(self, tmp_path):
        src = nn.Linear(2, 2)
        ckpt = Checkpoint(policy=src, config={"lr": 1.0}, save_components={"policy"})
        path = ckpt.save(tmp_path / "c")
        assert set(read_manifest(path)["components"]) == {"policy"}
        # Overwriting an existing checkpoint replaces it whole.
        ckpt.save(path, components={"config"})
        assert set(read_manifest(path)["components"]) == {"config"}
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
        dst = nn.Linear(2, 2)
        with pytest.raises(CheckpointError, match="missing"):
            Checkpoint(policy=dst).load(path)
        result = Checkpoint(policy=dst, config={}).load(path, components={"config"})
        assert result.loaded == {"config"}

    def test_options_forwarded(self, tmp_path):
        src = nn.Linear(2, 2)
        path = Checkpoint(policy=src).save(tmp_path / "c")
        dst = nn.Sequential(nn.Linear(2, 2))  # other key names
        ckpt = Checkpoint()
        ckpt.register("policy", dst[0], options=CheckpointOptions(load_kwargs={"strict": True}))
        assert ckpt.load(path).loaded == {"policy"}
        assert torch.equal(dst[0].weight, src.weight)


class TestStrictness:
    def _saved(self, tmp_path):
        return Checkpoint(policy=nn.Linear(2, 2)).save(tmp_path / "c")

    def test_missing(self, tmp_path):
        path = self._saved(tmp_path)
        ckpt = Checkpoint(policy=nn.Linear(2, 2), optimizer={"lr": 1})
        with pytest.raises(CheckpointError, match="optimizer"):
            ckpt.load(path)
        with pytest.warns(UserWarning, match="optimizer"):
            result = ckpt.load(path, strict="warn")
        assert result.loaded == {"policy"} and result.missing == {"optimizer"}
        result = Checkpoint(policy=nn.Linear(2, 2), extra=[], strict="ignore").load(path)
        assert result.missing == {"extra"}

    def test_incompatible_shape(self, tmp_path):
        path = self._saved(tmp_path)
        with pytest.raises(CheckpointError, match="'policy'"):
            Checkpoint(policy=nn.Linear(3, 2)).load(path)
        result = Checkpoint(policy=nn.Linear(3, 2)).load(path, strict="ignore")
        assert "policy" in result.incompatible and not result.loaded

    def test_adapter_mismatch(self, tmp_path):
        path = Checkpoint(policy={"a": 1}).save(tmp_path / "c")
        result = Checkpoint(policy=nn.Linear(2, 2)).load(path, strict="ignore")
        assert "adapter" in result.incompatible["policy"]

    def test_unregistered_request(self, tmp_path):
        path = self._saved(tmp_path)
        with pytest.raises(CheckpointError, match="unknown"):
            Checkpoint(policy=nn.Linear(2, 2)).load(path, components={"nope"})


class TestCorrupted:
    def test_not_a_checkpoint(self, tmp_path):
        with pytest.raises(CheckpointError, match="no checkpoint"):
            Checkpoint().load(tmp_path / "absent")
        (tmp_path / "empty").mkdir()
        with pytest.raises(CheckpointError, match="partial"):
            Checkpoint().load(tmp_path / "empty")

    def test_corrupted_manifest(self, tmp_path):
        path = Checkpoint(policy=nn.Linear(2, 2)).save(tmp_path / "c")
        (path / "manifest.json").write_text("{not json")
        with pytest.raises(CheckpointError, match="corrupted"):
            Checkpoint(policy=nn.Linear(2, 2)).load(path)
        (path / "manifest.json").write_text(json.dumps({"format_version": 99, "components": {}}))
        with pytest.raises(CheckpointError, match="format version"):
            Checkpoint().load(path)

    def test_truncated_and_missing_payload(self, tmp_path):
        path = Checkpoint(policy=nn.Linear(2, 2), rb=_run_parts()[2]).save(tmp_path / "c")
        leaf = path / "policy" / "state" / "t0.memmap"
        leaf.write_bytes(leaf.read_bytes()[:4])
        with pytest.raises(CheckpointError, match="'policy'"):
            Checkpoint(policy=nn.Linear(2, 2)).load(path)
        shutil.rmtree(path / "policy" / "state")
        with pytest.raises(CheckpointError, match="partial"):
            Checkpoint(policy=nn.Linear(2, 2)).load(path)
        shutil.rmtree(path / "rb" / "data")
        with pytest.raises(CheckpointError, match="'rb'"):
            Checkpoint(rb=_run_parts()[2]).load(path)

    def test_failed_save_leaves_old_checkpoint(self, tmp_path):
        path = Checkpoint(config={"a": 1}).save(tmp_path / "c")
        with pytest.raises(CheckpointError, match="'config'"):
            Checkpoint(config={"a": object()}).save(path)
        assert read_manifest(path)["components"] == {
            "config": {"adapter": "torchrl.json", "type": "dict"}
        }
        assert [p.name for p in tmp_path.iterdir()] == ["c"]

    def test_leftovers_of_killed_saves_removed(self, tmp_path):
        (tmp_path / ".c.0123456789ab.tmp").mkdir()
        (tmp_path / ".c.0123456789ab.old").mkdir()
        (tmp_path / ".c.d.0123456789ab.tmp").mkdir()  # another checkpoint's ("c.d")
        Checkpoint(config={"a": 1}).save(tmp_path / "c")
        assert sorted(p.name for p in tmp_path.iterdir()) == [".c.d.0123456789ab.tmp", "c"]


class _Holder:
    """State that is an arbitrary Python object: needs a real pickle."""

    def __init__(self):
        self.payload = None

    def state_dict(self):
        return {"obj": _Holder}

    def load_state_dict(self, state):
        self.payload = state["obj"]


def _holder_checkpoint(**kwargs) -> Checkpoint:
    ckpt = Checkpoint(**kwargs)
    ckpt.register("holder", _Holder(), adapter=StateDictCheckpointAdapter("torch"))
    return ckpt


class TestTrust:
    def test_untrusted_pickle_refused_whatever_strict(self, tmp_path):
        path = _holder_checkpoint().save(tmp_path / "c")
        for strict in ("error", "ignore"):
            holder = _Holder()
            with pytest.raises(pickle.UnpicklingError):
                Checkpoint(holder=holder, strict=strict).load(path)
            assert holder.payload is None
        holder = _Holder()
        with pytest.warns(UserWarning, match="trusted=True"):
            Checkpoint(holder=holder).load(path, trusted=True)
        assert holder.payload is _Holder


class TestRotation:
    def test_keep_last(self, tmp_path):
        rotation = CheckpointRotation(tmp_path, keep_last=2)
        ckpt = Checkpoint(value={"x": 0})
        paths = [rotation.save(ckpt, step=s) for s in (1, 5, 10)]
        assert rotation.checkpoints() == tuple(paths[1:])
        assert rotation.latest() == paths[-1]
        assert rotation.best() is None
        target: dict = {}
        result = rotation.load_latest(Checkpoint(value=target))
        assert result.manifest["metadata"]["step"] == 10

    def test_keep_best(self, tmp_path):
        rotation = CheckpointRotation(tmp_path, keep_last=1, keep_best=("reward", "max"))
        ckpt = Checkpoint(value={"x": 0})
        rewards = {1: 0.5, 2: 3.0, 3: 1.0, 4: 2.0}
        paths = {s: rotation.save(ckpt, step=s, metadata={"reward": r}) for s, r in rewards.items()}
        assert rotation.best() == paths[2]
        assert rotation.checkpoints() == (paths[2], paths[4])
        low = CheckpointRotation(tmp_path / "low", keep_last=1, keep_best=("loss", "min"))
        for s, r in rewards.items():
            low.save(ckpt, step=s, metadata={"loss": r})
        assert low.best().name.endswith("1") and len(low.checkpoints()) == 2

    def test_incomplete_entries_ignored(self, tmp_path):
        rotation = CheckpointRotation(tmp_path, keep_last=3)
        (tmp_path / "checkpoint-000000000099").mkdir()  # no manifest: a crashed save
        assert rotation.latest() is None
        with pytest.raises(CheckpointError, match="no checkpoint"):
            rotation.load_latest(Checkpoint())
        with pytest.raises(ValueError):
            CheckpointRotation(tmp_path, keep_last=0)


class TestArchive:
    def test_round_trip_and_auto_detection(self, tmp_path):
        module, optim, buffer = _run_parts()
        for _ in range(2):
            _train_step(module, optim, buffer)
        ckpt = Checkpoint(
            format="archive",
            policy=module,
            optimizer=optim,
            replay_buffer=buffer,
            rng=GlobalRNGState(),
            step={"n": 2},
        )
        path = ckpt.save(tmp_path / "run.ckpt")
        assert path.is_file() and zipfile.is_zipfile(path)
        names = zipfile.ZipFile(path).namelist()
        assert names[0] == "manifest.json" and "policy/state_schema.json" in names
        assert read_manifest(path)["components"]["replay_buffer"]["adapter"] == (
            DumpLoadCheckpointAdapter.adapter_id
        )
        expected = _train_step(module, optim, buffer)
        module2, optim2, buffer2 = _run_parts(seed=3)
        step: dict = {}
        # Loading reads the container it finds, whatever the loader's own default format.
        result = Checkpoint(
            policy=module2, optimizer=optim2, replay_buffer=buffer2, rng=GlobalRNGState(), step=step
        ).load(path)
        assert result.loaded == {"policy", "optimizer", "replay_buffer", "rng", "step"}
        assert step == {"n": 2} and len(buffer2) == 32
        assert torch.equal(_train_step(module2, optim2, buffer2), expected)
        assert not list(tmp_path.glob(".*"))  # no staging left next to the archive

    def test_same_weights_as_directory(self, tmp_path):
        src = nn.Linear(3, 2)
        for fmt, compression in (
            ("archive", "stored"),
            ("archive", "deflate"),
            ("directory", "stored"),
        ):
            path = Checkpoint(policy=src, format=fmt, archive_compression=compression).save(
                tmp_path / f"{fmt}-{compression}"
            )
            dst = nn.Linear(3, 2)
            Checkpoint(policy=dst).load(path)
            assert torch.equal(dst.weight, src.weight) and torch.equal(dst.bias, src.bias)
        info = zipfile.ZipFile(tmp_path / "archive-deflate").getinfo("policy/state_schema.json")
        assert info.compress_type == zipfile.ZIP_DEFLATED

    def test_partial_load_extracts_only_requested(self, tmp_path, monkeypatch):
        path = Checkpoint(format="archive", policy=nn.Linear(2, 2), rb=_run_parts()[2]).save(
            tmp_path / "c.zip"
        )
        extracted = []
        original = zipfile.ZipFile.extract

        def spy(self, member, *args, **kwargs):
            extracted.append(member.filename if hasattr(member, "filename") else member)
            return original(self, member, *args, **kwargs)

        monkeypatch.setattr(zipfile.ZipFile, "extract", spy)
        result = Checkpoint(policy=nn.Linear(2, 2)).load(path)
        assert result.loaded == {"policy"} and result.unrequested == {"rb"}
        assert extracted and all(name.startswith("policy/") for name in extracted)

    def test_memmap_buffer_keeps_its_extracted_files(self, tmp_path):
        def buffer(n):
            rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(16), batch_size=4)
            if n:
                rb.extend(TensorDict(x=torch.arange(float(n)), batch_size=[n]))
            return rb

        path = Checkpoint(rb=buffer(6), format="archive").save(tmp_path / "c.zip")
        # A memmap storage maps the loaded files in place: they must outlive the load.
        target = buffer(0)
        Checkpoint(rb=target).load(path, extract_dir=tmp_path / "rb-files")
        assert (tmp_path / "rb-files" / "rb").is_dir()
        target.extend(TensorDict(x=torch.tensor([6.0]), batch_size=[1]))
        assert torch.equal(target.storage.get(torch.arange(7))["x"], torch.arange(7.0))
        with pytest.warns(UserWarning, match="maps its files in place") as record:
            Checkpoint(rb=buffer(0)).load(path)
        kept = Path(str(record[0].message).split("stay in ")[1].split(" (")[0])
        assert (kept / "rb").is_dir()
        shutil.rmtree(kept)

    def test_temporary_extraction_removed(self, tmp_path, monkeypatch):
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
        (tmp_path / "tmp").mkdir()
        path = Checkpoint(format="archive", policy=nn.Linear(2, 2), rb=_run_parts()[2]).save(
            tmp_path / "c.zip"
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            Checkpoint(policy=nn.Linear(2, 2), rb=_run_parts()[2]).load(path)
        assert list((tmp_path / "tmp").iterdir()) == []

    def test_untrusted_pickle_refused(self, tmp_path):
        path = _holder_checkpoint(format="archive").save(tmp_path / "c.zip")
        holder = _Holder()
        with pytest.raises(pickle.UnpicklingError):
            Checkpoint(holder=holder, strict="ignore").load(path)
        assert holder.payload is None
        with pytest.warns(UserWarning, match="trusted=True"):
            Checkpoint(holder=holder).load(path, trusted=True)
        assert holder.payload is _Holder

    def test_overwrite_switches_container_atomically(self, tmp_path):
        target = tmp_path / "c"
        Checkpoint(config={"a": 1}).save(target)
        assert target.is_dir()
        Checkpoint(config={"a": 2}, format="archive").save(target)
        assert target.is_file()
        Checkpoint(config={"a": 3}).save(target)
        assert target.is_dir()
        value: dict = {}
        Checkpoint(config=value).load(target)
        assert value == {"a": 3}
        assert [p.name for p in tmp_path.iterdir()] == ["c"]

    def test_failed_save_keeps_old_archive(self, tmp_path):
        path = Checkpoint(config={"a": 1}, format="archive").save(tmp_path / "c.zip")
        with pytest.raises(CheckpointError, match="'config'"):
            Checkpoint(config={"a": object()}, format="archive").save(path)
        assert read_manifest(path)["components"]["config"]["adapter"] == "torchrl.json"
        assert [p.name for p in tmp_path.iterdir()] == ["c.zip"]

    def test_corrupted_archives(self, tmp_path):
        path = Checkpoint(policy=nn.Linear(2, 2), format="archive").save(tmp_path / "c.zip")
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
        with pytest.raises(CheckpointError, match="corrupted"):
            Checkpoint(policy=nn.Linear(2, 2)).load(path)
        (tmp_path / "junk.zip").write_bytes(b"not a zip")
        with pytest.raises(CheckpointError, match="corrupted"):
            read_manifest(tmp_path / "junk.zip")
        with zipfile.ZipFile(tmp_path / "nomanifest.zip", "w") as archive:
            archive.writestr("policy/state.pt", b"")
        with pytest.raises(CheckpointError, match="partial"):
            read_manifest(tmp_path / "nomanifest.zip")

    def test_member_escaping_the_checkpoint_refused(self, tmp_path):
        path = tmp_path / "evil.zip"
        manifest = {
            "format_version": 1,
            "metadata": {},
            "components": {"policy": {"adapter": "torchrl.state_dict", "type": "Linear"}},
        }
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("manifest.json", json.dumps(manifest))
            archive.writestr("policy/../../escaped.txt", b"x")
        with pytest.raises(CheckpointError, match="outside"):
            Checkpoint(policy=nn.Linear(2, 2)).load(path)
        assert not (tmp_path.parent / "escaped.txt").exists()

    def test_bad_arguments(self, tmp_path):
        with pytest.raises(ValueError, match="format"):
            Checkpoint(format="tar")
        with pytest.raises(ValueError, match="archive_compression"):
            Checkpoint(archive_compression="lzma")
        with pytest.raises(ValueError, match="format"):
            Checkpoint(a=1).save(tmp_path / "x", format="zip")
        for call in (
            lambda: Checkpoint(a=1).save("s3://bucket/ckpt"),
            lambda: Checkpoint(a=1).load("file:///tmp/ckpt"),
            lambda: read_manifest("gs://bucket/ckpt"),
        ):
            with pytest.raises(ValueError, match="local filesystem"):
                call()


class TestArchiveRotation:
    def test_keep_last_archives(self, tmp_path):
        rotation = CheckpointRotation(tmp_path, keep_last=2)
        ckpt = Checkpoint(value={"x": 0}, format="archive")
        paths = [rotation.save(ckpt, step=s) for s in (1, 5, 10)]
        assert all(p.name.endswith(".zip") for p in paths) and not paths[0].exists()
        assert all(p.is_file() for p in paths[1:])
        assert rotation.checkpoints() == tuple(paths[1:])
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths[1:])
        result = rotation.load_latest(Checkpoint(value={}))
        assert result.manifest["metadata"]["step"] == 10

    def test_mixed_formats_and_best(self, tmp_path):
        rotation = CheckpointRotation(tmp_path, keep_last=1, keep_best=("reward", "max"))
        ckpt = Checkpoint(value={"x": 0})
        first = rotation.save(ckpt, step=1, metadata={"reward": 9.0}, format="archive")
        second = rotation.save(ckpt, step=2, metadata={"reward": 1.0})
        third = rotation.save(ckpt, step=3, metadata={"reward": 2.0}, format="archive")
        assert first.is_file() and third.is_file() and not second.exists()
        assert rotation.best() == first
        assert rotation.checkpoints() == (first, third)
        # A new save at an existing step replaces the other container's checkpoint.
        again = rotation.save(ckpt, step=3, metadata={"reward": 2.0}, format="directory")
        assert again.is_dir() and not third.exists()
        assert rotation.checkpoints() == (first, again)

    def test_incomplete_archive_ignored(self, tmp_path):
        rotation = CheckpointRotation(tmp_path, keep_last=3)
        (tmp_path / ".checkpoint-000000000004.zip.0123456789ab.tmp").write_bytes(b"partial")
        (tmp_path / "checkpoint-000000000007.zip").mkdir()  # not an archive file
        assert rotation.latest() is None


PAYLOAD_FORMATS = ("directory", "archive", "consolidated", "torch")
PAYLOAD_FILES = {
    "directory": "state",
    "archive": "state.tdz",
    "consolidated": "state.td",
    "torch": "state.pt",
}


class _StateHolder:
    """A component whose state dict is whatever the test gives it."""

    def __init__(self, state=None):
        self.state = state
        self.loaded = None

    def state_dict(self):
        return self.state

    def load_state_dict(self, state):
        self.loaded = state


def _same(a, b) -> bool:
    """Equal values of the same types all the way down (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def _module_with_buffers() -> nn.Module:
    module = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    module.register_buffer("mask", torch.tensor([True, False, True]))
    module.register_buffer("steps", torch.arange(6, dtype=torch.int32).reshape(2, 3).t())
    module(torch.randn(5, 3))  # running stats and the int64 num_batches_tracked move
    return module


def _save_with(tmp_path, payload_format, name="c", container="directory", **components):
    ckpt = Checkpoint(format=container)
    for key, obj in components.items():
        ckpt.register(key, obj, adapter=StateDictCheckpointAdapter(payload_format))
    return ckpt.save(tmp_path / name)


class TestStateDictPayloads:
    def test_adapter_keywords(self):
        from typing import get_args

        from torchrl.checkpoint import StateDictFormat

        assert get_args(StateDictFormat) == PAYLOAD_FORMATS
        assert StateDictCheckpointAdapter().payload_format == "directory"
        adapter = StateDictCheckpointAdapter("archive", archive_compression="deflate")
        assert adapter.payload_format == "archive" and adapter.archive_compression == "deflate"
        with pytest.raises(ValueError, match="payload_format must be one of"):
            StateDictCheckpointAdapter("pickle")
        with pytest.raises(ValueError, match="archive_compression='deflate' applies to"):
            StateDictCheckpointAdapter("directory", archive_compression="deflate")

    @pytest.mark.parametrize("payload_format", PAYLOAD_FORMATS)
    def test_module_optimizer_rng_exact(self, tmp_path, payload_format, monkeypatch):
        module = _module_with_buffers()
        assert not module.steps.is_contiguous()
        optim = torch.optim.Adam(module.parameters(), lr=1e-2)
        module(torch.randn(5, 3)).sum().backward()
        optim.step()
        path = _save_with(
            tmp_path, payload_format, policy=module, optim=optim, rng=GlobalRNGState()
        )
        files = sorted(p.name for p in (path / "policy").iterdir())
        expected = [PAYLOAD_FILES[payload_format]]
        assert files == (
            expected if payload_format == "torch" else expected + ["state_schema.json"]
        )
        draws = _draws()
        if payload_format != "torch":  # the pickle-free payloads never reach torch.load
            monkeypatch.setattr(torch, "load", None)
        module2 = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
        module2.register_buffer("mask", torch.zeros(3, dtype=torch.bool))
        module2.register_buffer("steps", torch.zeros(3, 2, dtype=torch.int32))
        optim2 = torch.optim.Adam(module2.parameters(), lr=0.5)
        # The loader uses default adapters: the payload format is recognised from the files.
        Checkpoint(policy=module2, optim=optim2, rng=GlobalRNGState()).load(path)
        assert _same(dict(module2.state_dict()), dict(module.state_dict()))
        raw = _StateHolder()
        Checkpoint(raw=raw).load(
            _save_with(tmp_path, payload_format, "raw", raw=_StateHolder(module.state_dict()))
        )
        # The state dict itself comes back as an OrderedDict with the modules' versions.
        assert type(raw.loaded) is type(module.state_dict())
        assert raw.loaded._metadata == module.state_dict()._metadata
        assert _same(optim2.state_dict(), optim.state_dict())
        assert _same(_draws(), draws)

    @pytest.mark.parametrize("payload_format", PAYLOAD_FORMATS)
    def test_nested_python_values(self, tmp_path, payload_format):
        state = {
            "config": {"name": "ppo", "lr": 3e-4, "clip": None, "flags": [True, False]},
            "schedule": [(0, 1.0), (10, 0.5)],
            "pair": (1, ("two", [3.0, float("nan"), float("inf")])),
            "shape": torch.Size([2, 3]),
            3: torch.arange(4, dtype=torch.int16),
            2.5: "float key",
            None: "none key",
            True: {},
            "empty": [[], (), {}],
        }
        path = _save_with(tmp_path, payload_format, holder=_StateHolder(state))
        holder = _StateHolder()
        Checkpoint(holder=holder).load(path)
        assert _same(holder.loaded, state)  # tuples come back as tuples, keys keep their type
        assert type(holder.loaded["pair"][1]) is tuple

    @pytest.mark.parametrize("payload_format", PAYLOAD_FORMATS)
    @pytest.mark.parametrize("container", ["directory", "archive"])
    def test_empty_states(self, tmp_path, payload_format, container):
        path = _save_with(
            tmp_path, payload_format, container=container, relu=nn.ReLU(), holder=_StateHolder({})
        )
        holder, relu = _StateHolder(), nn.ReLU()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing stays mapped from an archive's extraction
            Checkpoint(relu=relu, holder=holder).load(path)
        assert holder.loaded == {} and type(holder.loaded) is dict

    @pytest.mark.parametrize(
        "state, where, what",
        [
            ({"a": [1, {"b": object()}]}, r"state\['a'\]\[1\]\['b'\]", "builtins.object"),
            ({"a": np.float64(1.0)}, r"state\['a'\]", "numpy.float64"),
            ({"a": {(1, 2): 3}}, r"state\['a'\] key \(1, 2\)", "builtins.tuple"),
            ({"s": torch.eye(2).to_sparse()}, r"state\['s'\]", "layout torch.sparse_coo"),
        ],
    )
    def test_unstorable_value_named(self, tmp_path, state, where, what):
        with pytest.raises(CheckpointError, match="'holder'") as info:
            _save_with(tmp_path, "directory", holder=_StateHolder(state))
        message = str(info.value)
        assert re_search(where, message) and what in message
        assert "payload_format='torch'" in message
        assert not list(tmp_path.iterdir())  # nothing half-written

    def test_archive_payload_compression(self, tmp_path):
        ckpt = Checkpoint()
        adapter = StateDictCheckpointAdapter("archive", archive_compression="deflate")
        ckpt.register("policy", nn.Linear(30, 30), adapter=adapter)
        path = ckpt.save(tmp_path / "c")
        with zipfile.ZipFile(path / "policy" / "state.tdz") as archive:
            kinds = {info.compress_type for info in archive.infolist() if info.file_size}
        assert zipfile.ZIP_DEFLATED in kinds
        target = nn.Linear(30, 30)
        Checkpoint(policy=target).load(path)
        assert torch.equal(target.weight, ckpt.components["policy"].weight)

    def test_old_state_pt_checkpoint_loads(self, tmp_path):
        source = nn.Linear(2, 2)
        path = tmp_path / "old"
        (path / "policy").mkdir(parents=True)
        torch.save(source.state_dict(), path / "policy" / "state.pt")
        manifest = {
            "format_version": 1,
            "metadata": {},
            "components": {"policy": {"adapter": "torchrl.state_dict", "type": "Linear"}},
        }
        (path / "manifest.json").write_text(json.dumps(manifest))
        target = nn.Linear(2, 2)
        Checkpoint(policy=target).load(path)
        assert torch.equal(target.weight, source.weight)

    @pytest.mark.parametrize("payload_format", ["directory", "archive", "consolidated"])
    def test_damaged_payloads(self, tmp_path, payload_format):
        path = _save_with(tmp_path, payload_format, policy=nn.Linear(4, 4))
        payload = path / "policy" / PAYLOAD_FILES[payload_format]
        victim = (
            next(p for p in sorted(payload.rglob("*")) if p.is_file())
            if payload.is_dir()
            else payload
        )
        victim.write_bytes(victim.read_bytes()[:-8])
        with pytest.raises(CheckpointError, match="differ from what state_schema.json records"):
            Checkpoint(policy=nn.Linear(4, 4)).load(path)
        _remove_tree(payload)
        with pytest.raises(CheckpointError, match="partial"):
            Checkpoint(policy=nn.Linear(4, 4)).load(path)
        schema = path / "policy" / "state_schema.json"
        schema.write_text(json.dumps({"payload_format": "pickle"}))
        with pytest.raises(CheckpointError, match="payload_format 'pickle'"):
            Checkpoint(policy=nn.Linear(4, 4)).load(path)
        schema.unlink()
        with pytest.raises(CheckpointError, match="neither state_schema.json nor state.pt"):
            Checkpoint(policy=nn.Linear(4, 4)).load(path)

    def test_schema_mismatch_refused(self, tmp_path):
        path = _save_with(tmp_path, "directory", policy=nn.Linear(2, 2))
        schema_path = path / "policy" / "state_schema.json"
        schema = json.loads(schema_path.read_text())
        schema["state"]["dict"][0][1]["shape"] = [3, 3]
        schema_path.write_text(json.dumps(schema))
        with pytest.raises(CheckpointError, match="the schema says float32 of shape"):
            Checkpoint(policy=nn.Linear(2, 2)).load(path)

    def test_map_location(self, tmp_path):
        path = _save_with(tmp_path, "directory", policy=nn.Linear(2, 2))
        target = nn.Linear(2, 2)
        Checkpoint(policy=target).load(path, map_location={"cpu": "cpu"})
        Checkpoint(policy=target).load(path, map_location=torch.device("cpu"))
        with pytest.raises(CheckpointError, match="a callable works only with"):
            Checkpoint(policy=target).load(path, map_location=lambda storage, loc: storage)

    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    def test_saved_device_and_map_location_cuda(self, tmp_path):
        source = nn.Linear(2, 2).cuda()
        path = _save_with(tmp_path, "directory", holder=_StateHolder(source.state_dict()))
        for map_location, device in ((None, "cuda:0"), ("cpu", "cpu"), ({"cuda:0": "cpu"}, "cpu")):
            holder = _StateHolder()
            Checkpoint(holder=holder).load(path, map_location=map_location)
            assert holder.loaded["weight"].device == torch.device(device)
            assert torch.equal(holder.loaded["weight"].cpu(), source.weight.detach().cpu())


def re_search(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, text) is not None


def _remove_tree(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def test_type_names_describe_the_accepted_values(tmp_path):
    """``CheckpointFormat``/``CheckpointStrictness`` list what ``format=``/``strict=`` take, and a
    load returns a ``CheckpointLoadResult``."""
    import typing

    from torchrl.checkpoint import CheckpointFormat, CheckpointLoadResult, CheckpointStrictness

    assert set(typing.get_args(CheckpointFormat)) == {"directory", "archive"}
    assert set(typing.get_args(CheckpointStrictness)) == {"error", "warn", "ignore"}
    for fmt in typing.get_args(CheckpointFormat):
        path = Checkpoint(policy=nn.Linear(2, 1), format=fmt).save(tmp_path / fmt)
        for strict in typing.get_args(CheckpointStrictness):
            result = Checkpoint(policy=nn.Linear(2, 1)).load(path, strict=strict)
            assert isinstance(result, CheckpointLoadResult)
            assert result.loaded == {"policy"}
    with pytest.raises((ValueError, CheckpointError)):
        Checkpoint(policy=nn.Linear(2, 1), format="tarball")
