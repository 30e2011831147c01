"""Tests of the Trainer loop, its hook points, logging and progress bar."""

from __future__ import annotations

import pytest
import torch
from _trainer_helpers import FakeCollector, TinyLoss
from tensordict import TensorDict

from torchrl.trainers import (
    HOOK_POINTS,
    CSVLogger,
    EarlyStopping,
    LogReward,
    OptimizerHook,
    Trainer,
)


def make_trainer(collector=None, total_frames=100, optim_steps=2, **kwargs):
    collector = collector if collector is not None else FakeCollector(10, total_frames)
    loss = TinyLoss()
    kwargs.setdefault("optimizer", torch.optim.SGD(loss.parameters(), lr=0.01))
    kwargs.setdefault("progress_bar", False)
    trainer = Trainer(
        collector=collector,
        total_frames=total_frames,
        optim_steps_per_batch=optim_steps,
        loss_module=loss,
        **kwargs,
    )
    return trainer, collector, loss


def test_hook_points_order_and_arguments():
    trainer, collector, _ = make_trainer(total_frames=30, optim_steps=2)
    events: list[tuple] = []

    def batch_process(batch):
        events.append(("batch_process", batch.numel()))
        batch.set("seen", torch.ones(batch.shape))
        return batch

    def process_optim_batch(batch):
        events.append(("process_optim_batch", "seen" in batch.keys()))
        return batch[:4]

    trainer.register_op("batch_process", batch_process)
    trainer.register_op("pre_optim_steps", lambda: events.append(("pre_optim_steps",)))
    trainer.register_op("process_optim_batch", process_optim_batch)
    trainer.register_op(
        "post_loss", lambda b: events.append(("post_loss", b.numel(), "td_error" in b.keys()))
    )
    trainer.register_op("post_optim", lambda: events.append(("post_optim",)))
    trainer.register_op("post_optim_log", lambda b: events.append(("post_optim_log",)))
    trainer.register_op("pre_steps_log", lambda b: events.append(("pre_steps_log",)))
    trainer.register_op("post_steps", lambda tag: events.append(("post_steps", tag)), tag="x")
    trainer.register_op("post_steps_log", lambda b: events.append(("post_steps_log",)))
    trainer.train()
    one_iter = [
        ("batch_process", 10),
        ("pre_steps_log",),
        ("pre_optim_steps",),
        *[
            ("process_optim_batch", True),
            ("post_loss", 4, True),
            ("post_optim",),
            ("post_optim_log",),
        ]
        * 2,
        ("post_steps", "x"),
        ("post_steps_log",),
    ]
    assert events == one_iter * 3
    assert trainer.collected_frames == 30 and trainer.optim_count == 6
    assert collector.closed


def test_register_errors():
    trainer, _, _ = make_trainer()
    with pytest.raises(KeyError, match="unknown hook point 'nope'"):
        trainer.register_op("nope", lambda: None)
    with pytest.raises(TypeError, match="callable"):
        trainer.register_op("post_steps", 3)
    with pytest.raises(KeyError, match="already registered"):
        trainer.register_module("optimizer", torch.nn.Linear(1, 1))
    with pytest.raises(TypeError, match="state_dict"):
        trainer.register_module("thing", object())
    assert set(HOOK_POINTS) >= {
        "batch_process",
        "pre_optim_steps",
        "process_optim_batch",
        "post_loss",
        "optimizer",
        "post_optim",
        "pre_steps_log",
        "post_steps_log",
        "post_steps",
    }


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"total_frames": 0}, "total_frames"),
        ({"frame_skip": 0}, "frame_skip"),
        ({"clip_norm": -1.0}, "clip_norm"),
        ({"logger": "csv"}, "Logger"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make_trainer(**kwargs)
    with pytest.raises(TypeError, match="iterable"):
        Trainer(collector=3, total_frames=10, optim_steps_per_batch=1, loss_module=TinyLoss())


def test_no_optimizer_is_an_error():
    trainer, _, _ = make_trainer(optimizer=None)
    with pytest.raises(RuntimeError, match="OptimizerHook"):
        trainer.train()


def test_learns_and_stops_at_total_frames():
    collector = FakeCollector(10, total_frames=10_000)
    trainer, _, loss = make_trainer(collector, total_frames=50, optim_steps=1)
    before = loss.value.weight.clone()
    trainer.train()
    assert trainer.collected_frames == 50 and collector.frames == 50
    assert not torch.equal(before, loss.value.weight)


def test_frame_skip_and_mask():
    class Masked(FakeCollector):
        def __iter__(self):
            for batch in super().__iter__():
                mask = torch.ones(batch.shape, dtype=torch.bool)
                mask[:3] = False
                batch.set(("collector", "mask"), mask)
                yield batch

    trainer, _, _ = make_trainer(Masked(10, 40), total_frames=56, frame_skip=2, optim_steps=0)
    trainer.train()
    # 7 real frames per batch, counted twice: 14, 28, 42, 56
    assert trainer.collected_frames == 56


def test_seed_seeds_everything():
    collector = FakeCollector()
    make_trainer(collector, seed=3)
    a = torch.rand(3)
    torch.manual_seed(3)
    assert torch.equal(a, torch.rand(3)) and collector.seeds == [3]


def test_init_random_frames_skip_optimization():
    collector = FakeCollector(10, 40)
    collector.init_random_frames = 20
    trainer, _, _ = make_trainer(collector, total_frames=40, optim_steps=1)
    trainer.train()
    assert trainer.optim_count == 2  # batches 3 and 4 only


def test_optimizer_hook_clipping():
    w = torch.nn.Parameter(torch.zeros(3))
    hook = OptimizerHook(torch.optim.SGD([w], lr=1.0), clip_grad_norm=True, clip_norm=0.5)
    out = hook(TensorDict(loss_a=(w * torch.tensor([30.0, 40.0, 0.0])).sum()))
    assert out["grad_norm_0"].item() == pytest.approx(50.0)
    assert w.detach().norm().item() == pytest.approx(0.5, rel=1e-5)
    v = torch.nn.Parameter(torch.zeros(2))
    hook = OptimizerHook(torch.optim.SGD([v], lr=1.0), clip_grad_norm=False, clip_norm=0.1)
    hook(TensorDict(loss_a=(v * torch.tensor([3.0, -0.05])).sum()))
    assert torch.allclose(v.detach(), torch.tensor([-0.1, 0.05]))


def test_optimizer_hook_components_and_errors():
    w = torch.nn.Parameter(torch.ones(1))
    hook = OptimizerHook(torch.optim.SGD([w], lr=1.0), loss_components=["loss_a"])
    hook(TensorDict(loss_a=w.sum(), loss_b=100 * w.sum()))
    assert w.item() == pytest.approx(0.0)  # only loss_a's gradient
    with pytest.raises(KeyError, match="loss_c"):
        OptimizerHook(torch.optim.SGD([w], lr=1.0), loss_components=["loss_c"])(
            TensorDict(loss_a=w.sum())
        )
    with pytest.raises(KeyError, match="starting with 'loss'"):
        OptimizerHook(torch.optim.SGD([w], lr=1.0))(TensorDict(x=w.sum()))
    with pytest.raises(ValueError, match="scalar"):
        OptimizerHook(torch.optim.SGD([w], lr=1.0))(TensorDict(loss_a=w * torch.ones(2)))
    with pytest.raises(TypeError, match="optimizer"):
        OptimizerHook([w])  # type: ignore[arg-type]


def test_trainer_clip_settings_reach_the_hook():
    trainer, _, _ = make_trainer(clip_norm=0.25, clip_grad_norm=False)
    (hook,) = trainer.ops("optimizer")
    assert hook.clip_norm == 0.25 and hook.clip_grad_norm is False


def test_logging_interval(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path)
    trainer, _, _ = make_trainer(total_frames=100, logger=logger, log_interval=30)
    LogReward().register(trainer)
    trainer.train()
    rows = (tmp_path / "exp" / "scalars" / "r_training.csv").read_text().split()
    assert [int(r.split(",")[0]) for r in rows] == [10, 40, 70, 100]
    assert float(rows[0].split(",")[1]) == pytest.approx(
        torch.arange(10.0).remainder(3).mean().item()
    )
    losses = (tmp_path / "exp" / "scalars" / "loss_value.csv").read_text().split()
    assert len(losses) == 4
    assert "loss_value" in trainer.latest_logs and "grad_norm_0" in trainer.latest_logs
    assert trainer.latest_logs["optim_steps"] == 20


def test_progress_bar(capsys):
    trainer, _, _ = make_trainer(total_frames=30, progress_bar=True)
    LogReward(log_pbar=True).register(trainer)
    trainer.train()
    err = capsys.readouterr().err
    assert "30/30" in err and "fps=" in err and "loss_value=" in err and "r_training=" in err
    assert "reward=" in err


def test_early_stopping():
    trainer, collector, _ = make_trainer(total_frames=1000)
    trainer.register_op("post_steps_log", lambda b: {"metric": float(b["observation"].max())})
    stop = EarlyStopping("metric", threshold=35.0)
    stop.register(trainer)
    trainer.train()
    assert trainer.collected_frames == 40 and stop.stopped
    assert "metric=39" in trainer.stop_reason
    with pytest.raises(ValueError, match="mode"):
        EarlyStopping("m", 1.0, mode="best")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="register"):
        EarlyStopping("m", 1.0)(None)
    assert collector.closed


def test_collector_yielding_none_needs_a_buffer():
    class Writes(FakeCollector):
        def __iter__(self):
            for _ in super().__iter__():
                yield None

    trainer, _, _ = make_trainer(Writes(10, 20), total_frames=20, optim_steps=0)
    trainer.train()
    assert trainer.collected_frames == 20
    trainer, _, _ = make_trainer(Writes(10, 20), total_frames=20, optim_steps=1)
    with pytest.raises(RuntimeError, match="ReplayBufferTrainer"):
        trainer.train()


def test_repr():
    trainer, _, _ = make_trainer()
    assert "OptimizerHook" in repr(trainer) and "total_frames=100" in repr(trainer)
