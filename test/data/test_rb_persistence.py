"""dumps/loads across processes, and memory-mapped buffers killed in the middle of a write."""

import multiprocessing
import os
import queue
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import _rb_child
import pytest
import torch
from _rb_helpers import all_items, consistent, next_samples, persistence_cases, transitions

from torchrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    RandomSampler,
    ReplayBuffer,
    TensorDictReplayBuffer,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CASES = list(persistence_cases("/unused"))


def _child(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return subprocess.Popen(
        [sys.executable, str(HERE.parent / "_rb_child.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_for(proc: subprocess.Popen, word: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"child exited before {word!r}: {proc.stderr.read()[-2000:]}")
        if line.startswith(word):
            return
    raise AssertionError(f"child did not print {word!r} in {timeout}s")


class _Forked:
    """A forked child running a function of ``_rb_child``; ``wait_for`` reads its notes."""

    def __init__(self, target, *args):
        ctx = multiprocessing.get_context("fork")
        self._notes = ctx.Queue()
        self.process = ctx.Process(target=target, args=(*args, self._notes.put), daemon=True)
        self.process.start()

    def wait_for(self, word: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                note = self._notes.get(timeout=0.5)
            except queue.Empty:
                if not self.process.is_alive():
                    raise AssertionError(
                        f"child exited ({self.process.exitcode}) before {word!r}"
                    ) from None
                continue
            if note.startswith(word):
                return
        raise AssertionError(f"child did not reach {word!r} in {timeout}s")


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    """Forked children (torch already imported: they start at once): one dump, two kills."""
    roots = {name: tmp_path_factory.mktemp(name) for name in ("dump", "append", "overwrite")}
    procs = {
        "dump": _Forked(_rb_child.dump, str(roots["dump"])),
        "append": _Forked(_rb_child.kill, "append", str(roots["append"])),
        "overwrite": _Forked(_rb_child.kill, "overwrite", str(roots["overwrite"])),
    }
    yield roots, procs
    for child in procs.values():
        if child.process.is_alive():
            child.process.kill()
        child.process.join()


def _dumped(children) -> Path:
    roots, procs = children
    child = procs["dump"]
    if child.process.exitcode is None:
        child.wait_for("DONE")
        child.process.join(timeout=60)
    assert child.process.exitcode == 0
    return roots["dump"]


def _equal_states(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal_states(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal_states(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return a == b


@pytest.mark.parametrize("name", CASES)
def test_dumps_loads_in_new_process(children, name):
    root = _dumped(children)
    expected = torch.load(root / f"{name}_expected.pt", weights_only=False)
    # A fresh buffer of the same configuration, in this (another) process.
    rb = persistence_cases(root / "parent")[name]()
    rb.loads(root / name)
    assert len(rb) == expected["items"].batch_size[0]
    assert (all_items(rb) == expected["items"]).all()
    assert _equal_states(rb.writer.state_dict(), expected["writer"])
    assert _equal_states(rb.sampler.state_dict(), expected["sampler"])
    for got, want in zip(next_samples(rb), expected["next"]):
        assert (got == want).all()


def test_memmap_loads_without_copy(children):
    root = _dumped(children)
    path = root / "memmap_prioritized"
    rb = persistence_cases(root / "parent2")["memmap_prioritized"]()
    rb.loads(path)
    storage = rb.storage
    assert storage.scratch_dir == path / "storage"
    leaf = storage._memmap_data["observation"]
    assert Path(leaf.filename).parent == path / "storage" / "data"
    # Writes go to the loaded files; dumping to the same place copies nothing.
    rb.extend(transitions(2, start=500))
    rb.dumps(path)
    again = persistence_cases(root / "parent3")["memmap_prioritized"]()
    again.loads(path)
    assert sorted(all_items(again)["step"].tolist())[-2:] == [500, 501]


def _reopen_after_kill(children, mode):
    roots, procs = children
    child = procs[mode]
    child.wait_for("PAUSED")
    os.kill(child.process.pid, signal.SIGKILL)
    child.process.join(timeout=30)
    assert child.process.exitcode == -signal.SIGKILL
    with pytest.warns(UserWarning, match="mix of old and new") if mode == "overwrite" else _null():
        storage = LazyMemmapStorage.open(roots[mode])
    return storage


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *args):
        return False


def test_killed_mid_append_keeps_earlier_items(children):
    storage = _reopen_after_kill(children, "append")
    assert len(storage) == 40 and storage.torn_slots.numel() == 0
    items = storage.get(torch.arange(40))
    assert items["step"].tolist() == list(range(40)) and consistent(items)
    # The buffer continues after the items that were committed.
    rb = TensorDictReplayBuffer(storage=storage, batch_size=8)
    assert rb.writer._cursor == 40
    rb.extend(transitions(5, start=40))
    assert rb[:]["step"].tolist() == list(range(45)) and consistent(rb[:])


def test_killed_mid_overwrite_reports_torn_slots(children):
    storage = _reopen_after_kill(children, "overwrite")
    assert len(storage) == 30
    assert storage.torn_slots.tolist() == [10, 11, 12, 13, 14]
    intact = torch.tensor([*range(10), *range(15, 30)])
    items = storage.get(intact)
    assert items["step"].tolist() == [*range(30, 40), *range(15, 30)] and consistent(items)
    rb = TensorDictReplayBuffer(storage=storage, batch_size=8)
    assert rb.writer._cursor == 10  # the torn slots are rewritten first
    rb.extend(transitions(5, start=200))
    assert storage.torn_slots.numel() == 0 and consistent(rb[:])


@pytest.mark.slow
def test_dumps_loads_in_fresh_interpreter(tmp_path):
    proc = _child("dump", str(tmp_path))
    _wait_for(proc, "DONE")
    assert proc.wait(timeout=60) == 0
    for name in CASES:
        expected = torch.load(tmp_path / f"{name}_expected.pt", weights_only=False)
        rb = persistence_cases(tmp_path / "parent")[name]()
        rb.loads(tmp_path / name)
        assert (all_items(rb) == expected["items"]).all()
        assert _equal_states(rb.sampler.state_dict(), expected["sampler"])
        for got, want in zip(next_samples(rb), expected["next"]):
            assert (got == want).all()


@pytest.mark.slow
def test_killed_at_random_time(tmp_path):
    proc = _child("kill", "random", str(tmp_path))
    try:
        for _ in range(3):
            _wait_for(proc, "WROTE")
        time.sleep(random.uniform(0.0, 0.05))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        storage = LazyMemmapStorage.open(tmp_path)
    assert len(storage) >= 6_000
    keep = torch.ones(len(storage), dtype=torch.bool)
    keep[storage.torn_slots] = False
    assert storage.torn_slots.numel() <= 2_000
    assert consistent(storage.get(torch.arange(len(storage))[keep]))


@pytest.mark.parametrize(
    "make",
    [
        lambda p: ReplayBuffer(storage=ListStorage(10)),
        lambda p: ReplayBuffer(storage=LazyTensorStorage(10)),
        lambda p: ReplayBuffer(storage=LazyMemmapStorage(10, scratch_dir=p / "scratch")),
    ],
)
def test_dumps_loads_same_process(tmp_path, make):
    rb = make(tmp_path)
    rb.extend(transitions(12))
    rb.dumps(tmp_path / "dump")
    assert (tmp_path / "dump" / "buffer.json").exists()
    other = make(tmp_path / "other")
    other.loads(tmp_path / "dump")
    assert len(other) == 10 and other.write_count == 12
    assert [int(x["step"]) for x in [other[i] for i in range(10)]] == [10, 11, *range(2, 10)]
    # Dumping again over an existing dump replaces it.
    rb.extend(transitions(1, start=99))
    rb.dumps(tmp_path / "dump")
    other.loads(tmp_path / "dump")
    assert int(other[2]["step"]) == 99


def test_loads_refuses_other_components(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(transitions(3))
    rb.dumps(tmp_path)
    other = ReplayBuffer(storage=LazyTensorStorage(10), sampler=RandomSampler())
    other.loads(tmp_path)
    with pytest.raises(
        ValueError, match="a LazyTensorStorage storage, but this buffer has a ListStorage"
    ):
        ReplayBuffer(storage=ListStorage(10)).loads(tmp_path)
    with pytest.raises(ValueError, match="max_size=10, not 20"):
        ReplayBuffer(storage=LazyTensorStorage(20)).loads(tmp_path)
    with pytest.raises(FileNotFoundError, match="nothing was saved"):
        ReplayBuffer().loads(tmp_path / "nope")


def test_dumps_empty_and_lazy_memmap_reopen(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.dumps(tmp_path / "empty")
    other = ReplayBuffer(storage=LazyTensorStorage(10))
    other.loads(tmp_path / "empty")
    assert len(other) == 0
    # A tensor storage's dump can be mapped as a memmap storage without copying.
    rb.extend(transitions(4))
    rb.dumps(tmp_path / "full")
    mapped = LazyMemmapStorage.open(tmp_path / "full" / "storage")
    assert mapped.get(torch.arange(4))["step"].tolist() == [0, 1, 2, 3]
