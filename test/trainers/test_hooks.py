"""Tests of the standard trainer hooks."""

from __future__ import annotations

import pytest
import torch
from _trainer_helpers import FakeCollector, TinyLoss, make_policy
from tensordict import TensorDict

from torchrl.data import (
    LazyTensorStorage,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from torchrl.envs import ExplorationType, PendulumEnv
from torchrl.trainers import (
    BatchSubSampler,
    ClearCudaCache,
    CountFramesLog,
    LogReward,
    LogScalar,
    LogValidationReward,
    Recorder,
    ReplayBufferTrainer,
    RewardNormalizer,
    SelectKeys,
    Trainer,
    UpdateWeights,
)
from torchrl.trainers.evaluation import episode_returns


def make_trainer(total_frames=60, optim_steps=2, collector=None):
    loss = TinyLoss()
    collector = collector or FakeCollector(10, total_frames)
    trainer = Trainer(
        collector=collector,
        total_frames=total_frames,
        optim_steps_per_batch=optim_steps,
        loss_module=loss,
        optimizer=torch.optim.Adam(loss.parameters(), lr=1e-2),
        progress_bar=False,
    )
    return trainer, collector, loss


class TestReplayBufferTrainer:
    def test_extend_sample_in_trainer(self):
        trainer, _, _ = make_trainer(total_frames=60)
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000))
        hook = ReplayBufferTrainer(rb, batch_size=5)
        hook.register(trainer)
        sizes = []
        trainer.register_op("post_loss", lambda b: sizes.append(b.numel()))
        trainer.train()
        assert len(rb) == 60 and sizes == [5] * 12
        assert sorted(rb[:60]["observation"].reshape(-1).tolist()) == list(range(60))

    def test_flatten_and_mask(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
        batch = TensorDict(x=torch.arange(12.0).reshape(3, 4), batch_size=[3, 4])
        mask = torch.ones(3, 4, dtype=torch.bool)
        mask[2, 2:] = False
        batch.set(("collector", "mask"), mask)
        ReplayBufferTrainer(rb).extend(batch)
        assert len(rb) == 10

    def test_max_dims_pads(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100, ndim=2))
        hook = ReplayBufferTrainer(rb, flatten_tensordicts=False, max_dims=(2, 6))
        hook.extend(TensorDict(x=torch.ones(2, 4), batch_size=[2, 4]))
        assert len(rb) == 12
        assert rb.sample(200)["x"].unique().tolist() == [0.0, 1.0]
        with pytest.raises(ValueError, match="max_dims"):
            ReplayBufferTrainer(rb, flatten_tensordicts=False, max_dims=(2,)).extend(
                TensorDict(x=torch.ones(2, 4), batch_size=[2, 4])
            )

    def test_priorities_are_updated(self):
        trainer, _, _ = make_trainer(total_frames=20, optim_steps=3)
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=1.0, beta=1.0, storage=LazyTensorStorage(100), priority_key="td_error"
        )
        ReplayBufferTrainer(rb, batch_size=8).register(trainer)
        trainer.train()
        prio = rb.sampler.state_dict()
        assert prio  # sampler state exists
        # The loss wrote |error| as priorities: sampling now prefers large errors.
        sample = rb.sample(256)
        weights = sample["_weight"]
        assert weights.min() < weights.max()

    def test_empty_buffer(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        with pytest.raises(RuntimeError, match="empty"):
            ReplayBufferTrainer(rb, batch_size=2).sample()

    def test_state_roundtrip(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        hook = ReplayBufferTrainer(rb, batch_size=2)
        hook.extend(TensorDict(x=torch.arange(4.0), batch_size=[4]))
        rb2 = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        ReplayBufferTrainer(rb2).load_state_dict(hook.state_dict())
        assert torch.equal(rb2[:4]["x"], torch.arange(4.0))


class TestLogScalar:
    def test_reductions(self):
        batch = TensorDict(
            {("next", "reward"): torch.tensor([[1.0], [2.0], [6.0]])}, batch_size=[3]
        )
        assert LogScalar(reduction="max", include_std=False)(batch)["next_reward"] == 6.0
        out = LogScalar(logname="r")(batch)
        assert out["r"] == 3.0 and out["r_std"] == pytest.approx(
            torch.tensor([1.0, 2.0, 6.0]).std().item()
        )
        assert LogScalar("missing")(batch) is None
        with pytest.raises(ValueError, match="reduction"):
            LogScalar(reduction="median")  # type: ignore[arg-type]

    def test_mask_is_honoured(self):
        batch = TensorDict(
            {
                ("next", "reward"): torch.tensor([[1.0], [100.0]]),
                ("collector", "mask"): torch.tensor([True, False]),
            },
            batch_size=[2],
        )
        assert LogReward()(batch)["r_training"] == 1.0

    def test_registered(self):
        trainer, _, _ = make_trainer(total_frames=20)
        LogReward(log_pbar=True).register(trainer)
        trainer.train()
        assert trainer.latest_logs["r_training"] == pytest.approx(
            torch.arange(10.0, 20.0).remainder(3).mean().item()
        )


def test_reward_normalizer():
    trainer, _, _ = make_trainer(total_frames=40, optim_steps=1)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
    ReplayBufferTrainer(rb, batch_size=64).register(trainer)
    norm = RewardNormalizer(decay=0.0, eps=0.0)
    norm.register(trainer)
    seen = []
    trainer.register_op("post_loss", lambda b: seen.append(b["next", "reward"].clone()))
    trainer.train()
    # rewards in the buffer untouched, normalized in the sub-batches
    assert rb[:40]["next", "reward"].max() == 2.0
    assert seen[-1].mean().abs() < 0.5 and seen[-1].min() < 0
    state = norm.state_dict()
    other = RewardNormalizer()
    other.load_state_dict(state)
    assert other._stats == norm._stats
    with pytest.raises(RuntimeError, match="statistics"):
        RewardNormalizer().normalize_reward(TensorDict({("next", "reward"): torch.ones(1, 1)}, [1]))
    with pytest.raises(ValueError, match="decay"):
        RewardNormalizer(decay=1.0)


class TestBatchSubSampler:
    def test_items(self):
        batch = TensorDict(x=torch.arange(40.0).reshape(4, 10), batch_size=[4, 10])
        sub = BatchSubSampler(batch_size=7)(batch)
        assert sub.batch_size == (7,)

    def test_windows(self):
        batch = TensorDict(x=torch.arange(40.0).reshape(4, 10), batch_size=[4, 10])
        sub = BatchSubSampler(batch_size=20, sub_traj_len=5)(batch)
        assert sub.shape == (4, 5)
        assert (sub["x"].diff(dim=-1) == 1).all()
        assert ((sub["x"][:, 0] % 10) <= 5).all()

    def test_errors(self):
        with pytest.raises(ValueError, match="batch_size"):
            BatchSubSampler(0)
        with pytest.raises(ValueError, match="sub_traj_len"):
            BatchSubSampler(4, sub_traj_len=5)
        with pytest.raises(ValueError, match="longer"):
            BatchSubSampler(20, sub_traj_len=20)(
                TensorDict(x=torch.zeros(2, 10), batch_size=[2, 10])
            )

    def test_registered(self):
        trainer, _, _ = make_trainer(total_frames=20)
        BatchSubSampler(batch_size=3).register(trainer)
        sizes = []
        trainer.register_op("post_loss", lambda b: sizes.append(b.numel()))
        trainer.train()
        assert sizes == [3] * 4


def test_count_frames_log_and_update_weights():
    trainer, collector, _ = make_trainer(total_frames=50)
    counter = CountFramesLog(frame_skip=2)
    counter.register(trainer)
    UpdateWeights(collector, update_weights_interval=2).register(trainer)
    trainer.train()
    assert trainer.latest_logs["n_frames"] == 100 and counter.state_dict() == {"frame_count": 100}
    assert collector.updates == 2
    with pytest.raises(TypeError, match="update_policy_weights_"):
        UpdateWeights(object(), 1)
    with pytest.raises(ValueError, match="interval"):
        UpdateWeights(collector, 0)


def test_select_keys():
    trainer, _, _ = make_trainer(total_frames=20)
    SelectKeys(["observation", ("next", "reward")]).register(trainer)
    seen = []
    trainer.register_op(
        "pre_steps_log", lambda b: seen.append(sorted(map(str, b.keys(True, True))))
    )
    trainer.train()
    assert seen[0] == sorted(["observation", str(("next", "reward"))])
    with pytest.raises(KeyError, match="missing"):
        SelectKeys(["missing"])(TensorDict(a=torch.zeros(1), batch_size=[1]))
    with pytest.raises(TypeError, match="single str"):
        SelectKeys("observation")  # type: ignore[arg-type]


def test_clear_cuda_cache():
    trainer, _, _ = make_trainer(total_frames=20)
    hook = ClearCudaCache(3)
    hook.register(trainer)
    trainer.train()
    assert hook.count == 4
    with pytest.raises(ValueError, match="interval"):
        ClearCudaCache(0)


class TestRecorder:
    def test_deterministic_rollout_logged(self):
        env = PendulumEnv()
        env.set_seed(0)
        modes = []

        class Policy(torch.nn.Module):
            def forward(self, td):
                from torchrl.envs.utils import exploration_type

                modes.append(exploration_type())
                td.set("action", torch.zeros(*td.batch_size, 1))
                return td

        rec = Recorder(
            record_interval=2,
            record_frames=12,
            policy_exploration=Policy(),
            environment=env,
            suffix="_det",
        )
        trainer, _, _ = make_trainer(total_frames=50)
        rec.register(trainer)
        trainer.train()
        # 5 iterations, evaluated at the 1st, 3rd and 5th: 12 policy calls each
        assert len(modes) == 36 and set(modes) == {ExplorationType.DETERMINISTIC}
        assert trainer.latest_logs["r_evaluation_det"] <= 0
        assert trainer.latest_logs["return_evaluation_det"] == pytest.approx(
            12 * trainer.latest_logs["r_evaluation_det"], rel=1e-5
        )
        assert rec.state_dict() == {"count": 5}

    def test_alias_and_errors(self):
        assert LogValidationReward is Recorder
        with pytest.raises(ValueError, match="environment"):
            Recorder(record_interval=1, record_frames=1, policy_exploration=make_policy())
        with pytest.raises(ValueError, match=">= 1"):
            Recorder(
                record_interval=0,
                record_frames=1,
                policy_exploration=None,
                environment=PendulumEnv(),
            )

    def test_episode_returns(self):
        reward = torch.ones(2, 6, 1)
        done = torch.zeros(2, 6, 1, dtype=torch.bool)
        done[0, 1] = done[0, 5] = done[1, 2] = True
        assert episode_returns(reward, done).tolist() == [2.0, 4.0, 3.0]
        assert episode_returns(reward, torch.zeros_like(done)).tolist() == [6.0, 6.0]
        with pytest.raises(ValueError, match="differ"):
            episode_returns(reward, done[:, :3])
