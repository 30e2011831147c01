"""Tests of torchrl.trainers.helpers: building envs, collectors, losses, buffers and trainers from
a config."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch
from _trainer_helpers import GlobalCounterEnv
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import nn

from torchrl.collectors import MultiaSyncDataCollector, MultiSyncDataCollector, SyncDataCollector
from torchrl.data import (
    Composite,
    LazyMemmapStorage,
    PrioritizedSampler,
    RandomSampler,
    TensorDictReplayBuffer,
    Unbounded,
)
from torchrl.envs import (
    EnvBase,
    EnvCreator,
    GymEnv,
    ObservationNorm,
    ParallelEnv,
    PendulumEnv,
    RewardScaling,
    StepCounter,
    TransformedEnv,
    VecNorm,
)
from torchrl.modules import MLP, EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, HardUpdate, SoftUpdate
from torchrl.trainers import Trainer
from torchrl.trainers.helpers import (
    EnvConfig,
    HelpersConfig,
    LossConfig,
    OffPolicyCollectorConfig,
    OnPolicyCollectorConfig,
    ReplayArgsConfig,
    TrainerConfig,
    correct_for_frame_skip,
    get_stats_random_rollout,
    make_collector_offpolicy,
    make_collector_onpolicy,
    make_dqn_loss,
    make_replay_buffer,
    make_target_updater,
    make_trainer,
    parallel_env_constructor,
    sync_async_collector,
    sync_sync_collector,
    transformed_env_constructor,
)
from torchrl.trainers.hooks_extra import LRSchedulerHook, TargetNetUpdaterHook


# -- correct_for_frame_skip -----------------------------------------------------------------------
def test_correct_for_frame_skip_divides_frame_counts_in_place():
    cfg = HelpersConfig(
        frame_skip=4,
        total_frames=1000,
        frames_per_batch=100,
        max_frames_per_traj=1000,
        init_random_frames=40,
        init_env_steps=1000,
        record_frames=400,
        noops=8,
        batch_size=256,
    )
    assert correct_for_frame_skip(cfg) is cfg
    assert (cfg.total_frames, cfg.frames_per_batch, cfg.max_frames_per_traj) == (250, 25, 250)
    assert (cfg.init_random_frames, cfg.init_env_steps, cfg.record_frames) == (10, 250, 100)
    assert cfg.noops == 2
    assert cfg.batch_size == 256  # not a frame count


def test_correct_for_frame_skip_on_any_object():
    ns = types.SimpleNamespace(
        frame_skip=3, total_frames=10, annealing_frames=9, record_frames=None
    )
    correct_for_frame_skip(ns)
    assert (ns.total_frames, ns.annealing_frames, ns.record_frames) == (3, 3, None)
    untouched = types.SimpleNamespace(frame_skip=1, total_frames=10)
    assert correct_for_frame_skip(untouched).total_frames == 10
    with pytest.raises(ValueError, match="frame_skip"):
        correct_for_frame_skip(types.SimpleNamespace(frame_skip=0, total_frames=10))


# -- get_stats_random_rollout ---------------------------------------------------------------------
def test_get_stats_random_rollout_matches_the_rollout_values():
    # the observation is a global step counter: a 10-frame rollout sees 0, 1, ..., 9
    stats = get_stats_random_rollout(EnvConfig(init_env_steps=10), GlobalCounterEnv(episode_len=4))
    expected = torch.arange(10.0)
    torch.testing.assert_close(stats["loc"], expected.mean().reshape(1))
    torch.testing.assert_close(stats["scale"], expected.std().reshape(1))


def test_get_stats_random_rollout_matches_a_seeded_rollout():
    cfg = HelpersConfig(env_name="CartPole-v1", init_env_steps=30, max_frames_per_traj=0)
    env = GymEnv("CartPole-v1")
    env.set_seed(3)
    torch.manual_seed(3)
    stats = get_stats_random_rollout(cfg, env, key="observation")
    env.set_seed(3)
    torch.manual_seed(3)
    obs = env.rollout(30, break_when_any_done=False)["observation"]
    torch.testing.assert_close(stats["loc"], obs.mean(0))
    torch.testing.assert_close(stats["scale"], obs.std(0).clamp_min(1e-4))
    # built from the config when no env is given; the only float observation is found
    built = get_stats_random_rollout(cfg)
    assert built["loc"].shape == (4,) and bool((built["scale"] > 0).all())


def test_get_stats_random_rollout_batched_env_and_errors():
    env = PendulumEnv(batch_size=[4])
    stats = get_stats_random_rollout(EnvConfig(init_env_steps=40), env, key="observation")
    assert stats["loc"].shape == (3,)
    with_count = TransformedEnv(GymEnv("CartPole-v1"), StepCounter())  # an int entry: ignored
    assert get_stats_random_rollout(EnvConfig(init_env_steps=5), with_count)["loc"].shape == (4,)
    with pytest.raises(ValueError, match="init_env_steps"):
        get_stats_random_rollout(EnvConfig(init_env_steps=0), env)


class _ImageEnv(EnvBase):
    """Random ``[2, 3, 3]`` images whose channel c has values around c."""

    def __init__(self) -> None:
        super().__init__(batch_size=())
        self.observation_spec = Composite(pixels=Unbounded(shape=(2, 3, 3)), extra=Unbounded((1,)))
        self.action_spec = Unbounded(shape=(1,))

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _obs(self) -> TensorDictBase:
        pixels = torch.randn(2, 3, 3) * 0.1 + torch.tensor([0.0, 5.0]).reshape(2, 1, 1)
        return TensorDict(pixels=pixels, extra=torch.zeros(1))

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        return self._obs()

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = self._obs()
        out.update(
            reward=torch.zeros(1),
            done=torch.zeros(1, dtype=torch.bool),
            terminated=torch.zeros(1, dtype=torch.bool),
        )
        return out


def test_get_stats_random_rollout_images_keep_the_channel_dim():
    env = _ImageEnv()
    with pytest.raises(ValueError, match="2 floating-point observations"):
        get_stats_random_rollout(EnvConfig(init_env_steps=5), env)
    stats = get_stats_random_rollout(EnvConfig(init_env_steps=20), env, key="pixels")
    assert stats["loc"].shape == (2, 1, 1)
    torch.testing.assert_close(stats["loc"].flatten(), torch.tensor([0.0, 5.0]), atol=0.1, rtol=0)


# -- transformed_env_constructor / parallel_env_constructor --------------------------------------
def test_transformed_env_constructor_applies_the_configured_transforms():
    cfg = HelpersConfig(
        env_name="CartPole-v1", reward_scaling=2.0, reward_loc=0.5, max_frames_per_traj=5
    )
    stats = {"loc": torch.zeros(4), "scale": torch.full((4,), 2.0)}
    make = transformed_env_constructor(cfg, stats=stats)
    env = make()
    types_ = [type(t) for t in env.transform]
    assert RewardScaling in types_ and ObservationNorm in types_ and StepCounter in types_
    base = GymEnv("CartPole-v1")
    base.set_seed(0)
    env.set_seed(0)
    td = env.rollout(20, break_when_any_done=False)
    raw = base.rollout(20, break_when_any_done=False)
    assert int(td["next", "step_count"].max()) <= 5  # episodes cut at max_frames_per_traj
    torch.testing.assert_close(td["next", "reward"], torch.full_like(td["next", "reward"], 2.5))
    torch.testing.assert_close(td["observation"][0], raw["observation"][0] / 2.0)


def test_transformed_env_constructor_options():
    cfg = EnvConfig(env_name="CartPole-v1", vecnorm=True)
    env = transformed_env_constructor(cfg)()
    assert any(isinstance(t, VecNorm) for t in env.transform)
    base = transformed_env_constructor(cfg, return_transformed_envs=False)()
    assert isinstance(base, GymEnv)
    assert isinstance(transformed_env_constructor(cfg, use_env_creator=True), EnvCreator)

    seen: dict[str, Any] = {}

    def maker(**kwargs: Any) -> EnvBase:
        seen.update(kwargs)
        return PendulumEnv()

    env = transformed_env_constructor(EnvConfig(frame_skip=2), custom_env_maker=maker)()
    assert seen["frame_skip"] == 2 and isinstance(env.base_env, PendulumEnv)

    norm_state = {"loc": torch.ones(3), "scale": torch.ones(3)}
    env = transformed_env_constructor(
        EnvConfig(), custom_env=PendulumEnv(), obs_norm_state_dict=norm_state
    )()
    norm = next(t for t in env.transform if isinstance(t, ObservationNorm))
    torch.testing.assert_close(norm.loc, torch.ones(3))
    with pytest.raises(ValueError, match="env_library"):
        transformed_env_constructor(EnvConfig(env_library="nope"))()


def test_parallel_env_constructor():
    cfg = types.SimpleNamespace(env_name="CartPole-v1", env_per_collector=2)
    env = parallel_env_constructor(cfg)
    try:
        assert isinstance(env, ParallelEnv)
        assert env.rollout(3)["observation"].shape == (2, 3, 4)
    finally:
        env.close()
    single = parallel_env_constructor(types.SimpleNamespace(env_name="CartPole-v1"))
    assert isinstance(single, EnvCreator)
    with pytest.raises(ValueError, match="env_per_collector"):
        parallel_env_constructor(types.SimpleNamespace(env_per_collector=0))


# -- collectors -----------------------------------------------------------------------------------
def test_sync_sync_collector_one_collector_steps_a_parallel_env():
    collector = sync_sync_collector(
        PendulumEnv, None, num_env_per_collector=2, frames_per_batch=20, total_frames=20
    )
    try:
        assert isinstance(collector, SyncDataCollector)
        batch = next(iter(collector))
        assert batch.batch_size == (2, 10)
        assert isinstance(collector.env, ParallelEnv)
    finally:
        collector.shutdown()


def test_sync_sync_and_sync_async_collectors_with_several_collectors():
    collector = sync_sync_collector(
        [PendulumEnv] * 4,
        [{}] * 4,
        num_collectors=2,
        frames_per_batch=40,
        total_frames=40,
    )
    try:
        assert isinstance(collector, MultiSyncDataCollector)
        assert sum(b.numel() for b in collector) == 40
    finally:
        collector.shutdown()
    collector = sync_async_collector(
        PendulumEnv, {}, num_collectors=2, frames_per_batch=10, total_frames=20
    )
    try:
        assert isinstance(collector, MultiaSyncDataCollector)
        assert sum(b.numel() for b in collector) == 20
    finally:
        collector.shutdown()
    with pytest.raises(ValueError, match="3 env constructors"):
        sync_sync_collector([PendulumEnv] * 3, None, num_env_per_collector=2, num_collectors=2)
    with pytest.raises(ValueError, match="env_kwargs"):
        sync_sync_collector([PendulumEnv] * 2, [{}], frames_per_batch=4)


def test_make_collector_offpolicy_reads_the_config():
    cfg = HelpersConfig(
        frames_per_batch=20,
        total_frames=40,
        init_random_frames=20,
        multi_step=True,
        n_steps_return=2,
        gamma=0.5,
        max_frames_per_traj=0,
    )
    collector = make_collector_offpolicy(PendulumEnv, None, cfg)
    assert isinstance(collector, SyncDataCollector)
    batch = next(iter(collector))
    assert "steps_to_next_obs" in batch.keys()  # the n-step postproc ran
    assert collector.init_random_frames == 20
    collector.shutdown()

    async_cfg = OffPolicyCollectorConfig(
        async_collection=True, num_workers=2, frames_per_batch=10, total_frames=20
    )
    collector = make_collector_offpolicy(PendulumEnv, None, async_cfg)
    try:
        assert isinstance(collector, MultiaSyncDataCollector)
    finally:
        collector.shutdown()
    with pytest.raises(ValueError, match="exploration_mode"):
        make_collector_offpolicy(PendulumEnv, None, HelpersConfig(exploration_mode="greedy"))


def test_make_collector_onpolicy_reads_the_config():
    cfg = OnPolicyCollectorConfig(frames_per_batch=16, total_frames=32, seed=1)
    collector = make_collector_onpolicy(PendulumEnv, None, cfg)
    assert isinstance(collector, SyncDataCollector)
    assert [b.numel() for b in collector] == [16, 16]
    multi = make_collector_onpolicy(
        PendulumEnv, None, OnPolicyCollectorConfig(num_workers=2, frames_per_batch=8)
    )
    try:
        assert isinstance(multi, MultiSyncDataCollector)
    finally:
        multi.shutdown()


# -- replay buffer, losses ------------------------------------------------------------------------
def test_make_replay_buffer(tmp_path):
    cfg = ReplayArgsConfig(buffer_size=50, batch_size=8, buffer_scratch_dir=str(tmp_path / "rb"))
    rb = make_replay_buffer("cpu", cfg)
    assert isinstance(rb, TensorDictReplayBuffer)
    assert isinstance(rb.storage, LazyMemmapStorage) and isinstance(rb.sampler, RandomSampler)
    rb.extend(TensorDict(x=torch.arange(60.0), batch_size=[60]))
    assert len(rb) == 50 and rb.sample().batch_size == (8,)
    assert (tmp_path / "rb").exists()
    prb = make_replay_buffer("cpu", types.SimpleNamespace(prb=True, buffer_size=10))
    assert isinstance(prb.sampler, PrioritizedSampler)


def _q_model() -> QValueActor:
    return QValueActor(MLP(4, 2, num_cells=[16]), in_keys=["observation"], action_space="one_hot")


def test_make_target_updater_follows_the_config():
    loss = DQNLoss(_q_model())
    soft = make_target_updater(LossConfig(value_network_update_interval=4), loss)
    assert isinstance(soft, SoftUpdate) and soft.eps == pytest.approx(0.75)
    hard = make_target_updater(LossConfig(hard_update=True, value_network_update_interval=7), loss)
    assert isinstance(hard, HardUpdate) and hard.value_network_update_interval == 7
    assert make_target_updater(LossConfig(loss="single"), loss) is None
    with pytest.raises(RuntimeError, match="hard_update"):
        make_target_updater(LossConfig(loss="single", hard_update=True), loss)


def test_make_dqn_loss():
    loss, updater = make_dqn_loss(_q_model(), LossConfig(gamma=0.7, loss_function="l2"))
    assert isinstance(loss, DQNLoss) and loss.delay_value and isinstance(updater, SoftUpdate)
    assert loss.loss_function == "l2"
    assert loss.value_estimator.gamma == pytest.approx(0.7)
    single, none = make_dqn_loss(_q_model(), types.SimpleNamespace(loss="single"))
    assert not single.delay_value and none is None
    with pytest.raises(NotImplementedError, match="single"):
        make_dqn_loss(_q_model(), LossConfig(loss="triple"))


# -- make_trainer ---------------------------------------------------------------------------------
def test_make_trainer_runs_two_iterations_on_cartpole():
    torch.manual_seed(0)
    cfg = HelpersConfig(
        env_name="CartPole-v1",
        frames_per_batch=32,
        total_frames=64,
        optim_steps_per_batch=3,
        batch_size=16,
        buffer_size=1000,
        lr=1e-2,
        progress_bar=False,
        record_interval=1,
        record_frames=20,
        value_network_update_interval=2,
        max_frames_per_traj=100,
    )
    make_env = transformed_env_constructor(cfg)
    model = _q_model()
    explore = TensorDictSequential(
        model, EGreedyModule(make_env().action_spec, annealing_num_steps=640)
    )
    loss, updater = make_dqn_loss(model, cfg)
    collector = make_collector_offpolicy(make_env, explore, cfg)
    rb = make_replay_buffer("cpu", cfg)
    trainer = make_trainer(
        collector,
        loss,
        recorder=make_env(),
        target_net_updater=updater,
        policy_exploration=explore,
        replay_buffer=rb,
        cfg=cfg,
    )
    assert isinstance(trainer, Trainer)
    assert any(isinstance(op, TargetNetUpdaterHook) for op in trainer.ops("post_optim"))
    assert any(isinstance(op, LRSchedulerHook) for op in trainer.ops("post_optim"))
    target_before = loss.target_value_network_params.clone()
    lr_before = trainer.ops("optimizer")[0].optimizer.param_groups[0]["lr"]  # type: ignore[attr-defined]
    trainer.train()

    assert trainer.collected_frames == 64 and trainer.optim_count == 6
    assert len(rb) == 64
    moved = (target_before - loss.target_value_network_params).abs().sum()
    assert float(sum(moved.values(True, True))) > 0  # the target net followed the online one
    lr_after = trainer.ops("optimizer")[0].optimizer.param_groups[0]["lr"]  # type: ignore[attr-defined]
    assert lr_after < lr_before  # cosine schedule stepped
    assert float(explore[1].eps) == pytest.approx(1.0 - 0.9 * 64 / 640)  # annealed per batch
    for name in ("r_training", "n_frames", "r_evaluation", "loss"):
        assert name in trainer.latest_logs, name
    assert trainer.latest_logs["n_frames"] == 64


def test_make_trainer_without_buffer_and_errors():
    class Loss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))

        def forward(self, td: TensorDictBase) -> TensorDictBase:
            return TensorDict(loss=((td["x"] - self.w) ** 2).mean())

    batches = [TensorDict(x=torch.ones(8, 4), batch_size=[8, 4]) for _ in range(2)]
    cfg = types.SimpleNamespace(
        total_frames=64,
        frames_per_batch=32,
        optim_steps_per_batch=2,
        batch_size=6,
        sub_traj_len=2,
        optimizer="sgd",
        lr_scheduler=None,
        selected_keys=["x"],
        normalize_rewards_online=False,
        progress_bar=False,
    )
    trainer = make_trainer(batches, Loss(), cfg=cfg)
    sub = trainer.ops("process_optim_batch")[0](batches[0])
    assert sub.batch_size == (3, 2)  # BatchSubSampler of sub-trajectories
    assert isinstance(trainer.ops("optimizer")[0].optimizer, torch.optim.SGD)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="optimizer"):
        make_trainer(batches, Loss(), cfg=TrainerConfig(optimizer="rmsprop"))
    with pytest.raises(ValueError, match="lr_scheduler"):
        make_trainer(batches, Loss(), cfg=TrainerConfig(lr_scheduler="linear"))
    with pytest.raises(ValueError, match="policy_exploration"):
        make_trainer(batches, Loss(), recorder=PendulumEnv(), cfg=TrainerConfig())
