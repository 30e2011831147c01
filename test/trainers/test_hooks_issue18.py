"""Tests of TrainerHookBase and the scheduling hooks (LR scheduler, target-net updates, value
estimates, update-to-data ratio)."""

from __future__ import annotations

import pytest
import torch
from _trainer_helpers import FakeCollector, TinyLoss
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.modules import OneHotCategorical, ProbabilisticActor, QValueActor, ValueOperator
from torchrl.objectives import A2CLoss, DQNLoss, HardUpdate, SoftUpdate, ValueEstimators
from torchrl.objectives.value import GAE
from torchrl.trainers import (
    BatchSubSampler,
    ClearCudaCache,
    CountFramesLog,
    LogReward,
    OptimizerHook,
    ReplayBufferTrainer,
    SelectKeys,
    Trainer,
    UpdateWeights,
)
from torchrl.trainers.hooks import TrainerHookBase
from torchrl.trainers.hooks_extra import (
    LRSchedulerHook,
    TargetNetUpdaterHook,
    UTDRHook,
    ValueEstimatorHook,
)


def _trainer(collector, loss=None, optim_steps=2, lr=0.1, **kwargs):
    loss = loss if loss is not None else TinyLoss()
    optimizer = torch.optim.SGD(loss.parameters(), lr=lr)
    trainer = Trainer(
        collector=collector,
        total_frames=collector.total_frames,
        optim_steps_per_batch=optim_steps,
        loss_module=loss,
        optimizer=optimizer,
        progress_bar=False,
        **kwargs,
    )
    return trainer, optimizer


# -- TrainerHookBase -------------------------------------------------------------------------------
def test_trainer_hook_base_is_abstract_and_the_standard_hooks_derive_from_it():
    with pytest.raises(TypeError):
        TrainerHookBase()  # type: ignore[abstract]
    loss = TinyLoss()
    hooks = [
        OptimizerHook(torch.optim.SGD(loss.parameters(), lr=0.1)),
        BatchSubSampler(batch_size=2),
        CountFramesLog(),
        LogReward(),
        SelectKeys(["observation"]),
        ClearCudaCache(1),
        UpdateWeights(FakeCollector(), 1),
        LRSchedulerHook(
            torch.optim.lr_scheduler.StepLR(torch.optim.SGD(loss.parameters(), lr=1), 1)
        ),
    ]
    assert all(isinstance(h, TrainerHookBase) for h in hooks)


def test_trainer_hook_base_default_state_is_empty():
    class Hook(TrainerHookBase):
        def register(self, trainer, name="hook"):
            trainer.register_op("post_steps", lambda: None)

    hook = Hook()
    assert hook.state_dict() == {}
    hook.load_state_dict({})
    with pytest.raises(KeyError, match="keeps no state"):
        hook.load_state_dict({"x": 1})
    trainer, _ = _trainer(FakeCollector(total_frames=20))
    hook.register(trainer)
    assert len(trainer.ops("post_steps")) == 1


# -- LRSchedulerHook --------------------------------------------------------------------------------
@pytest.mark.parametrize("interval", ["batch", "optim"])
def test_lr_scheduler_hook_changes_lr_at_each_step(interval):
    trainer, opt = _trainer(FakeCollector(frames_per_batch=10, total_frames=40), optim_steps=3)
    hook = LRSchedulerHook(torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5), interval)
    hook.register(trainer)
    seen: list[float] = []
    point = "post_steps" if interval == "batch" else "post_optim"
    trainer.register_op(point, lambda: seen.append(opt.param_groups[0]["lr"]))
    trainer.train()
    steps = 4 if interval == "batch" else 12
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**steps)
    # the lr halves at every step: each value recorded after the hook ran is half the previous
    assert seen == pytest.approx([0.1 * 0.5 ** (i + 1) for i in range(steps)])
    assert hook in trainer.ops(point)


def test_lr_scheduler_hook_waits_for_optimization_steps():
    collector = FakeCollector(frames_per_batch=10, total_frames=50)
    collector.init_random_frames = 20  # the first two batches only fill up, no updates
    trainer, opt = _trainer(collector, optim_steps=1)
    LRSchedulerHook(torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)).register(trainer)
    trainer.train()
    assert trainer.optim_count == 3
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**3)


def test_lr_scheduler_hook_state_round_trip_and_errors():
    w = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=1.0)
    hook = LRSchedulerHook(torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.1))
    opt.step()
    hook()
    hook()
    state = hook.state_dict()
    opt2 = torch.optim.SGD([w], lr=1.0)
    hook2 = LRSchedulerHook(torch.optim.lr_scheduler.StepLR(opt2, step_size=1, gamma=0.1))
    hook2.load_state_dict(state)
    assert hook2.scheduler.last_epoch == 2
    with pytest.raises(ValueError, match="interval"):
        LRSchedulerHook(hook.scheduler, interval="epoch")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ReduceLROnPlateau"):
        LRSchedulerHook(torch.optim.lr_scheduler.ReduceLROnPlateau(opt))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="LR scheduler"):
        LRSchedulerHook(object())  # type: ignore[arg-type]


# -- TargetNetUpdaterHook ---------------------------------------------------------------------------
def _dqn_loss() -> DQNLoss:
    return DQNLoss(QValueActor(nn.Linear(4, 2), action_space="categorical"))


def _target_and_online(loss: DQNLoss) -> tuple[torch.Tensor, torch.Tensor]:
    target = loss.target_value_network_params["module", "0", "module", "weight"]
    online = loss.value_network.module[0].module.weight
    return target, online


def test_target_net_updater_hook_moves_target_params():
    loss = _dqn_loss()
    hook = TargetNetUpdaterHook(SoftUpdate(loss, tau=0.5))
    with torch.no_grad():
        _target_and_online(loss)[1].add_(1.0)
    target, online = _target_and_online(loss)
    before = target.clone()
    hook()
    target, online = _target_and_online(loss)
    assert not torch.equal(target, before)
    torch.testing.assert_close(target, online - 0.5)


def test_target_net_updater_hook_registers_post_optim_and_keeps_the_counter():
    loss = _dqn_loss()
    updater = HardUpdate(loss, value_network_update_interval=3)
    hook = TargetNetUpdaterHook(updater)
    trainer, _ = _trainer(FakeCollector(total_frames=20))
    hook.register(trainer)
    assert hook in trainer.ops("post_optim")
    hook()
    assert hook.state_dict() == {"counter": 1}
    other = TargetNetUpdaterHook(HardUpdate(_dqn_loss(), value_network_update_interval=3))
    other.load_state_dict(hook.state_dict())
    assert other.target_params_updater.counter == 1  # type: ignore[attr-defined]
    assert TargetNetUpdaterHook(SoftUpdate(loss)).state_dict() == {}
    with pytest.raises(TypeError, match="step"):
        TargetNetUpdaterHook(object())  # type: ignore[arg-type]


def test_target_net_updater_hook_in_a_training_loop():
    collector = FakeCollector(frames_per_batch=10, total_frames=30)
    loss = TinyLoss()

    class Updater:
        steps = 0

        def step(self):
            self.steps += 1
            loss.update_target(tau=1.0)

    trainer, _ = _trainer(collector, loss=loss, optim_steps=2)
    updater = Updater()
    TargetNetUpdaterHook(updater).register(trainer)
    trainer.train()
    assert updater.steps == 6
    torch.testing.assert_close(loss.target_value.weight, loss.value.weight)


# -- UTDRHook ---------------------------------------------------------------------------------------
def test_utdr_hook_with_a_replay_buffer():
    collector = FakeCollector(frames_per_batch=10, total_frames=30)
    trainer, _ = _trainer(collector, optim_steps=4)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
    ReplayBufferTrainer(rb, batch_size=5).register(trainer)
    hook = UTDRHook(trainer)
    hook.register(trainer)
    trainer.train()
    assert rb.write_count == 30 and trainer.optim_count == 12
    assert trainer.latest_logs["utd_ratio"] == pytest.approx(5 * 12 / 30)
    assert hook.state_dict() == {"utd_ratio": pytest.approx(2.0)}


def test_utdr_hook_without_a_buffer():
    collector = FakeCollector(frames_per_batch=10, total_frames=50)
    trainer, _ = _trainer(collector, optim_steps=2)
    BatchSubSampler(batch_size=4).register(trainer)
    UTDRHook(trainer).register(trainer)
    trainer.train()
    assert trainer.latest_logs["utd_ratio"] == pytest.approx(4 * 10 / 50)

    trainer2, _ = _trainer(FakeCollector(frames_per_batch=10, total_frames=50), optim_steps=2)
    UTDRHook(trainer2).register(trainer2)
    trainer2.train()
    # the whole batch (10 items) at each of the 10 updates, over 50 transitions
    assert trainer2.latest_logs["utd_ratio"] == pytest.approx(2.0)


def test_utdr_hook_explicit_values_and_errors():
    trainer, _ = _trainer(FakeCollector(total_frames=20))
    hook = UTDRHook(trainer, batch_size=3)
    assert hook(None) is None  # no data yet
    with pytest.raises(ValueError, match="trainer it was built for"):
        hook.register(_trainer(FakeCollector(total_frames=20))[0])
    hook.load_state_dict({"utd_ratio": 0.25})
    assert hook.utd_ratio == 0.25


# -- ValueEstimatorHook -----------------------------------------------------------------------------
def _a2c_loss() -> A2CLoss:
    actor = ProbabilisticActor(
        TensorDictModule(nn.Linear(3, 2), ["observation"], ["logits"]),
        in_keys=["logits"],
        distribution_class=OneHotCategorical,
    )
    return A2CLoss(actor, ValueOperator(nn.Linear(3, 1)))


def _rollout_batch(n_envs: int = 2, t: int = 6) -> TensorDict:
    done = torch.zeros(n_envs, t, 1, dtype=torch.bool)
    done[:, -1] = True
    return TensorDict(
        {
            "observation": torch.randn(n_envs, t, 3),
            "action": nn.functional.one_hot(torch.randint(2, (n_envs, t)), 2),
            "next": {
                "observation": torch.randn(n_envs, t, 3),
                "reward": torch.randn(n_envs, t, 1),
                "done": done,
                "terminated": done.clone(),
            },
        },
        batch_size=[n_envs, t],
    )


def test_value_estimator_hook_writes_advantage_like_the_loss_estimator():
    loss = _a2c_loss()
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.9, lmbda=0.8)
    batch = _rollout_batch()
    expected = loss.value_estimator(batch.clone())["advantage"]
    out = ValueEstimatorHook(loss)(batch)
    assert "advantage" in out.keys() and "value_target" in out.keys()
    torch.testing.assert_close(out["advantage"], expected)
    assert not out["advantage"].requires_grad  # computed under no_grad

    # a later make_value_estimator is followed
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.5, lmbda=0.8)
    hook = ValueEstimatorHook(loss)
    batch2 = _rollout_batch()
    torch.testing.assert_close(
        hook(batch2.clone())["advantage"], loss.value_estimator(batch2)["advantage"]
    )


def test_value_estimator_hook_before_the_replay_buffer():
    critic = ValueOperator(nn.Linear(3, 1))
    batch = _rollout_batch(n_envs=1, t=10)

    class OneBatch:
        total_frames = 10

        def __iter__(self):
            yield batch

    loss = _a2c_loss()
    trainer = Trainer(
        collector=OneBatch(),
        total_frames=10,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.0),
        progress_bar=False,
    )
    hook = ValueEstimatorHook(GAE(gamma=0.99, lmbda=0.95, value_network=critic))
    hook.register(trainer)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
    ReplayBufferTrainer(rb, batch_size=4).register(trainer)
    assert trainer.ops("batch_process")[0] is hook
    trainer.train()
    stored = rb[:]
    assert "advantage" in stored.keys() and stored["advantage"].shape == (10, 1)
    assert hook(None) is None


def test_value_estimator_hook_rejects_non_callables():
    with pytest.raises(TypeError, match="value estimator"):
        ValueEstimatorHook(3)  # type: ignore[arg-type]
