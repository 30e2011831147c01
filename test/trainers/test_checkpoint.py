"""Tests of checkpointing: atomic files, RNG states, trainer state and resuming (incl. SIGKILL)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from _trainer_helpers import FakeCollector, TinyLoss
from torch import nn

from torchrl.data import Categorical, LazyTensorStorage, TensorDictReplayBuffer
from torchrl.modules import EGreedyModule
from torchrl.trainers import (
    CountFramesLog,
    ReplayBufferTrainer,
    Trainer,
    UpdateWeights,
    load_checkpoint,
    save_checkpoint,
)
from torchrl.trainers.checkpoint import get_rng_states, set_rng_states

HERE = os.path.dirname(os.path.abspath(__file__))


class TestAtomicFile:
    def test_roundtrip_and_permissions(self, tmp_path):
        path = save_checkpoint({"a": torch.arange(3)}, tmp_path / "sub" / "ckpt.pt")
        assert torch.equal(load_checkpoint(path)["a"], torch.arange(3))
        mode = os.stat(path).st_mode & 0o777
        umask = os.umask(0)
        os.umask(umask)
        assert mode == 0o666 & ~umask

    def test_failed_write_keeps_the_old_file(self, tmp_path, monkeypatch):
        path = tmp_path / "ckpt.pt"
        save_checkpoint({"v": 1}, path)
        real_save = torch.save

        def broken(obj, f, *args, **kwargs):
            f.write(b"half a checkpoint")
            raise OSError("disk full")

        monkeypatch.setattr(torch, "save", broken)
        with pytest.raises(OSError, match="disk full"):
            save_checkpoint({"v": 2}, path)
        monkeypatch.setattr(torch, "save", real_save)
        assert load_checkpoint(path) == {"v": 1}
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]

    def test_stale_temp_files_removed(self, tmp_path):
        (tmp_path / ".ckpt.pt.deadbeef.tmp").write_bytes(b"killed mid-write")
        save_checkpoint({"v": 1}, tmp_path / "ckpt.pt")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]

    def test_missing_file(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="no checkpoint"):
            load_checkpoint(tmp_path / "nope.pt")


def test_rng_states_roundtrip():
    state = get_rng_states()
    draws = (torch.rand(2), np.random.rand(2), random.random())
    set_rng_states(state)
    again = (torch.rand(2), np.random.rand(2), random.random())
    assert (
        torch.equal(draws[0], again[0])
        and np.array_equal(draws[1], again[1])
        and draws[2] == again[2]
    )


def build(ckpt, total_frames=100, collector_total=None, stateful=True, interval=20):
    """A trainer with every kind of state: buffer, optimizer, target params, hooks, exploration."""
    collector = FakeCollector(10, collector_total or total_frames, stateful=stateful)
    explore = EGreedyModule(Categorical(2), eps_init=1.0, eps_end=0.0, annealing_num_steps=100)
    collector.policy = nn.ModuleDict({"actor": nn.Linear(1, 1), "explore": explore})
    loss = TinyLoss()
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    trainer = Trainer(
        collector=collector,
        total_frames=total_frames,
        optim_steps_per_batch=2,
        loss_module=loss,
        optimizer=optim,
        progress_bar=False,
        save_trainer_interval=interval,
        save_trainer_file=ckpt,
    )
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), batch_size=4)
    ReplayBufferTrainer(rb).register(trainer)
    CountFramesLog().register(trainer)
    UpdateWeights(collector, 3).register(trainer)
    trainer.register_op("post_optim", loss.update_target)
    trainer.register_op("post_steps", explore.step, frames=10)
    return trainer, collector, loss, optim, rb, explore


def observations(rb):
    return sorted(int(x) for x in rb[: len(rb)]["observation"].reshape(-1).tolist())


def adam_step(optim, loss):
    return int(optim.state[loss.value.weight]["step"])


class TestTrainerCheckpoint:
    def test_save_interval(self, tmp_path):
        ckpt = tmp_path / "ckpt.pt"
        trainer, *_ = build(ckpt, total_frames=50, interval=20)
        saved = []
        real = trainer.save_trainer

        def spy(force_save=False):
            out = real(force_save=force_save)
            if out is not None:
                saved.append(trainer.collected_frames)
            return out

        trainer.save_trainer = spy
        trainer.train()
        assert saved == [20, 40, 50]  # every 20 frames, and once at the end

    def test_no_file_configured(self):
        trainer = Trainer(
            collector=FakeCollector(),
            total_frames=10,
            optim_steps_per_batch=0,
            loss_module=TinyLoss(),
            progress_bar=False,
        )
        assert trainer.save_trainer() is None
        with pytest.raises(RuntimeError, match="save_trainer_file"):
            trainer.save_trainer(force_save=True)

    @pytest.mark.parametrize("stateful", [True, False])
    def test_resume_continues_exactly(self, tmp_path, stateful):
        ckpt = tmp_path / "ckpt.pt"
        # First run: its collector runs dry at 40 frames (a run cut short), checkpoint at the end.
        trainer, _, loss, optim, rb, explore = build(
            ckpt, total_frames=100, collector_total=40, stateful=stateful
        )
        trainer.train()
        assert trainer.collected_frames == 40
        saved_target = loss.target_value.weight.clone()
        saved_eps = explore.eps.clone()

        trainer2, collector2, loss2, optim2, rb2, explore2 = build(
            ckpt, total_frames=100, stateful=stateful
        )
        trainer2.load_from_file(ckpt)
        assert trainer2.collected_frames == 40 and trainer2.optim_count == 8
        assert adam_step(optim2, loss2) == 8
        assert observations(rb2) == list(range(40))
        assert torch.equal(loss2.target_value.weight, saved_target)
        assert torch.equal(loss2.value.weight, loss.value.weight)
        assert torch.equal(explore2.eps, saved_eps) and explore2.eps.item() == pytest.approx(0.6)
        assert trainer2._modules["count_frames_log"].frame_count == 40
        assert trainer2._modules["update_weights"].counter == 4
        if stateful:
            assert collector2.frames == 40
        else:
            assert collector2.total_frames == 60
        trainer2.train()
        assert trainer2.collected_frames == 100 and trainer2.optim_count == 20
        assert adam_step(optim2, loss2) == 20
        if stateful:
            # the collector continued where it stopped: no frame lost or repeated
            assert observations(rb2) == list(range(100))
        else:
            assert len(rb2) == 100

    def test_rng_restored(self, tmp_path):
        ckpt = tmp_path / "ckpt.pt"
        trainer, *_ = build(ckpt, total_frames=20)
        trainer.train()
        expected = torch.rand(3)
        trainer2, *_ = build(ckpt, total_frames=20)
        torch.manual_seed(123)
        trainer2.load_from_file(ckpt)
        assert torch.equal(torch.rand(3), expected)

    def test_mismatch_errors(self, tmp_path):
        ckpt = tmp_path / "ckpt.pt"
        trainer, *_ = build(ckpt, total_frames=20)
        trainer.train()
        bare = Trainer(
            collector=FakeCollector(),
            total_frames=20,
            optim_steps_per_batch=1,
            loss_module=TinyLoss(),
            progress_bar=False,
        )
        with pytest.raises(KeyError, match="not registered here"):
            bare.load_from_file(ckpt)
        state = load_checkpoint(ckpt)
        state["version"] = 99
        trainer2, *_ = build(ckpt, total_frames=20)
        with pytest.raises(ValueError, match="version 99"):
            trainer2.load_state_dict(state)

    def test_finished_run_does_nothing_more(self, tmp_path):
        ckpt = tmp_path / "ckpt.pt"
        trainer, *_ = build(ckpt, total_frames=30)
        trainer.train()
        trainer2, collector2, *_ = build(ckpt, total_frames=30)
        trainer2.load_from_file(ckpt)
        trainer2.train()
        assert trainer2.collected_frames == 30 and trainer2.optim_count == 6


def _read_events(proc, until, timeout):
    events = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        events.append(json.loads(line))
        if until(events):
            return events
    raise AssertionError(f"child did not reach the expected state; events: {events[-3:]}")


@pytest.mark.slow
@pytest.mark.parametrize("memmap", [False, True], ids=["buffer_in_file", "buffer_dumped"])
def test_sigkill_and_resume(tmp_path, memmap):
    """Train in a child, SIGKILL it between checkpoints, resume in a new process."""
    ckpt = str(tmp_path / "ckpt.pt")
    child = os.path.join(HERE, "_resume_child.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    flags = ["--memmap"] if memmap else []
    proc = subprocess.Popen(
        [sys.executable, child, ckpt, "100000", *flags], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        # Checkpoints every 16 frames; kill once 5 batches (40 frames) are done, i.e. after the
        # checkpoint at 32 frames and with a batch collected after it.
        events = _read_events(proc, lambda ev: ev[-1]["frames"] >= 40, timeout=120)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    state = load_checkpoint(ckpt)
    ckpt_frames = state["collected_frames"]
    if memmap:
        assert "replay_buffer_dir" in state["modules"]["replay_buffer"]
        assert os.path.isdir(state["modules"]["replay_buffer"]["replay_buffer_dir"])
    # the kill may land after the next checkpoint (48) was written too: either is valid
    assert ckpt_frames % 16 == 0 and ckpt_frames >= 32
    assert state["optim_count"] == 3 * ckpt_frames // 8

    total = ckpt_frames + 24
    out = subprocess.run(
        [sys.executable, child, ckpt, str(total), "--resume", *flags],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    loaded = next(ev for ev in events if ev["event"] == "loaded")
    done = events[-1]
    # The frame counter, the buffer and the optimizer continue from the checkpoint.
    assert loaded["frames"] == ckpt_frames and loaded["collector_frames"] == ckpt_frames
    assert loaded["optim_count"] == state["optim_count"] == loaded["adam_step"]
    assert loaded["buffer"] == list(range(ckpt_frames))
    first_iter = next(ev for ev in events if ev["event"] == "iter")
    assert first_iter["frames"] == ckpt_frames + 8
    assert done["frames"] == total
    assert done["adam_step"] == done["optim_count"] == 3 * total // 8
    # Every frame before the checkpoint kept, and collection went on from it: 0..total-1 once.
    assert done["buffer"] == list(range(total))


def _ddpg_trainer(ckpt, total_frames):
    objectives = pytest.importorskip("torchrl.objectives")
    from tensordict.nn import TensorDictSequential

    from torchrl.collectors import SyncDataCollector
    from torchrl.envs import PendulumEnv
    from torchrl.modules import MLP, Actor, AdditiveGaussianModule, ValueOperator

    class QNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = MLP(in_features=4, out_features=1, num_cells=[8])

        def forward(self, observation, action):
            return self.net(torch.cat([observation, action], -1))

    env = PendulumEnv()
    actor = Actor(MLP(in_features=3, out_features=1, num_cells=[8]), spec=env.action_spec)
    explore = AdditiveGaussianModule(env.action_spec, annealing_num_steps=100)
    loss = objectives.DDPGLoss(actor, ValueOperator(QNet(), in_keys=["observation", "action"]))
    updater = objectives.SoftUpdate(loss, eps=0.9)
    collector = SyncDataCollector(
        env, TensorDictSequential(actor, explore), frames_per_batch=20, total_frames=total_frames
    )
    trainer = Trainer(
        collector=collector,
        total_frames=total_frames,
        optim_steps_per_batch=2,
        loss_module=loss,
        optimizer=torch.optim.Adam(loss.parameters(), lr=1e-3),
        progress_bar=False,
        save_trainer_interval=40,
        save_trainer_file=ckpt,
    )
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(500), batch_size=8)
    ReplayBufferTrainer(rb).register(trainer)
    trainer.register_op("post_optim", updater.step)
    trainer.register_op("post_steps", explore.step, frames=20)
    return trainer, collector, loss, explore, rb


def test_resume_with_real_collector_and_ddpg(tmp_path):
    ckpt = tmp_path / "ckpt.pt"
    trainer, collector, loss, explore, rb = _ddpg_trainer(ckpt, total_frames=60)
    trainer.train()
    trainer2, collector2, loss2, explore2, rb2 = _ddpg_trainer(ckpt, total_frames=100)
    trainer2.load_from_file(ckpt)
    assert collector2.frames == 60 and trainer2.collected_frames == 60
    for (name, a), (_, b) in zip(
        loss.state_dict().items(), loss2.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    assert any("target" in k for k in loss2.state_dict())
    assert torch.equal(explore2.sigma, explore.sigma) and explore2.sigma < 1.0
    assert torch.equal(rb2[:60]["observation"], rb[:60]["observation"])
    trainer2.train()
    assert trainer2.collected_frames == 100 and len(rb2) == 100


@pytest.mark.parametrize("storage_cls", ["LazyMemmapStorage", "LazyTensorStorage"])
def test_buffer_dumped_beside_the_checkpoint(tmp_path, storage_cls):
    from torchrl.data import LazyMemmapStorage

    ckpt = tmp_path / "ckpt.pt"

    def make(total):
        collector = FakeCollector(10, total)
        loss = TinyLoss()
        trainer = Trainer(
            collector=collector,
            total_frames=total,
            optim_steps_per_batch=1,
            loss_module=loss,
            optimizer=torch.optim.Adam(loss.parameters()),
            progress_bar=False,
            save_trainer_interval=20,
            save_trainer_file=ckpt,
        )
        storage = (
            LazyMemmapStorage(500) if storage_cls == "LazyMemmapStorage" else LazyTensorStorage(500)
        )
        rb = TensorDictReplayBuffer(storage=storage, batch_size=4)
        ReplayBufferTrainer(rb, memmap=True).register(trainer)
        return trainer, rb

    trainer, rb = make(60)
    trainer.train()
    state = load_checkpoint(ckpt)
    dump = state["modules"]["replay_buffer"]["replay_buffer_dir"]
    # the file holds a location, not the data; at most the current and the previous dump remain
    assert os.path.getsize(ckpt) < 50_000
    dumps = sorted(p for p in tmp_path.iterdir() if ".buffer." in p.name)
    assert str(tmp_path / os.path.basename(dump)) in map(str, dumps) and len(dumps) <= 2

    trainer2, rb2 = make(100)
    trainer2.load_from_file(ckpt)
    assert observations(rb2) == list(range(60))
    trainer2.train()
    assert observations(rb2) == list(range(100))
    # the dump the final checkpoint names is a complete copy of the buffer
    dump = load_checkpoint(ckpt)["modules"]["replay_buffer"]["replay_buffer_dir"]
    fresh = make(10)[1]
    fresh.loads(dump)
    assert observations(fresh) == list(range(100))
    with pytest.raises(FileNotFoundError, match="buffer directory"):
        trainer2._modules["replay_buffer"].load_state_dict(
            {"replay_buffer_dir": str(tmp_path / "gone")}
        )


# -- safe loading and resume cleanup ------------------------------------------------------------


class _Payload:
    """Unpickling this object creates ``marker`` (as an attacker's code would run)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _memmap_trainer(ckpt, total):
    from torchrl.data import LazyMemmapStorage

    collector = FakeCollector(10, total)
    loss = TinyLoss()
    trainer = Trainer(
        collector=collector,
        total_frames=total,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=torch.optim.Adam(loss.parameters()),
        progress_bar=False,
        save_trainer_interval=20,
        save_trainer_file=ckpt,
    )
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(500), batch_size=4)
    ReplayBufferTrainer(rb, memmap=True).register(trainer)
    return trainer, rb


def test_checkpoints_load_safely_and_crafted_ones_are_refused(tmp_path):
    import pickle

    ckpt = tmp_path / "ckpt.pt"
    trainer, *_ = build(ckpt, total_frames=20)
    trainer.train()
    # A real checkpoint (optimizer, RNG states, buffer, hooks) needs no pickle of Python objects.
    torch.load(ckpt, weights_only=True)
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    save_checkpoint({"version": 1, "modules": {"x": _Payload(marker)}}, evil)
    with pytest.raises(pickle.UnpicklingError, match="global io.open.*trusted=True"):
        load_checkpoint(evil)
    trainer2, *_ = build(ckpt, total_frames=20)
    with pytest.raises(pickle.UnpicklingError, match="trusted=True"):
        trainer2.load_from_file(evil)
    assert not marker.exists()
    with pytest.warns(UserWarning, match="trusted=True"):
        load_checkpoint(evil, trusted=True)
    assert marker.exists()


def test_checkpoint_naming_a_crafted_buffer_dump_is_refused(tmp_path):
    import pickle

    ckpt = tmp_path / "ckpt.pt"
    trainer, rb = _memmap_trainer(ckpt, 40)
    trainer.train()
    dump = load_checkpoint(ckpt)["modules"]["replay_buffer"]["replay_buffer_dir"]
    marker = tmp_path / "pwned"
    torch.save({"cursor": _Payload(marker)}, os.path.join(dump, "sampler.pt"))
    trainer2, rb2 = _memmap_trainer(ckpt, 80)
    with pytest.raises(pickle.UnpicklingError, match="sampler.pt.*trusted=True"):
        trainer2.load_from_file(ckpt)
    assert not marker.exists() and len(rb2) == 0
    # The refused resume left no copy of the dump behind.
    assert not [p for p in tmp_path.iterdir() if ".live." in p.name]
    with pytest.warns(UserWarning, match="trusted=True"):
        trainer2.load_from_file(ckpt, trusted=True)  # RandomSampler: its state is ignored
    assert marker.exists() and observations(rb2) == list(range(40))


def test_resumes_do_not_accumulate_buffer_copies(tmp_path):
    import gc

    ckpt = tmp_path / "ckpt.pt"
    trainer, rb = _memmap_trainer(ckpt, 40)
    trainer.train()
    del trainer, rb

    def live_copies():
        return [p for p in tmp_path.iterdir() if ".live." in p.name]

    kept = []  # earlier runs still alive, as after a crash nothing cleans up
    for _ in range(16):
        trainer, rb = _memmap_trainer(ckpt, 40)
        trainer.load_from_file(ckpt)
        assert observations(rb) == list(range(40))
        assert len(live_copies()) == 1
        kept.append((trainer, rb))
    # The copy a buffer maps is removed with it.
    latest = live_copies()[0]
    kept.clear()
    del trainer, rb
    gc.collect()
    assert not latest.exists() and not live_copies()
    # Resuming twice into the same buffer removes the superseded copy at once.
    trainer, rb = _memmap_trainer(ckpt, 40)
    trainer.load_from_file(ckpt)
    first = live_copies()
    trainer.load_from_file(ckpt)
    assert len(live_copies()) == 1 and live_copies() != first
    assert observations(rb) == list(range(40))
    rb.extend(rb[:2])  # the buffer still writes into its (new) copy
    assert len(rb) == 42


def test_legacy_numpy_rng_state_still_restores():
    legacy = {"numpy": np.random.get_state()}
    draws = np.random.rand(3)
    set_rng_states(legacy)
    assert np.array_equal(np.random.rand(3), draws)


def test_checkpoint_of_earlier_version_with_numpy_rng_state_loads(tmp_path):
    path = tmp_path / "old.pt"
    torch.save({"rng": {"numpy": np.random.get_state()}}, path)  # the earlier layout
    draws = np.random.rand(3)
    set_rng_states(load_checkpoint(path)["rng"])
    assert np.array_equal(np.random.rand(3), draws)
