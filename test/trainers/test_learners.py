"""``torchrl.trainers.learners``: the control records, ``Learner`` and the learner groups."""

from __future__ import annotations

import copy
import threading

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from torchrl.data import (
    LazyTensorStorage,
    PrioritizedSampler,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)
from torchrl.modules import QValueActor
from torchrl.objectives import DQNLoss, HardUpdate, SoftUpdate
from torchrl.trainers.learners import (
    Learner,
    LearnerContext,
    LearnerGroup,
    LearnerStepRequest,
    LearnerStepResult,
    LearnerWeights,
    LocalLearnerGroup,
    OptimizationContext,
)
from torchrl.trainers.mixed_precision import MixedPrecisionOptimizationStepper


class Regression(nn.Module):
    """A loss whose gradient is easy to write down: mean((x @ w - y)^2)."""

    def __init__(self, n: int = 3) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(n, 1))

    def forward(self, td: TensorDict) -> TensorDict:
        return TensorDict(loss=((td["x"] @ self.w - td["y"]) ** 2).mean())


def _regression_buffer(n: int = 32, seed: int = 0, **kwargs) -> TensorDictReplayBuffer:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]])
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(n), **kwargs)
    buffer.extend(TensorDict(x=x, y=y, batch_size=[n]))
    return buffer


def _dqn_batch(n: int = 16) -> TensorDict:
    return TensorDict(
        {
            "observation": torch.randn(n, 4),
            "action": nn.functional.one_hot(torch.arange(n) % 2, 2),
            "next": {
                "observation": torch.randn(n, 4),
                "reward": torch.randn(n, 1),
                "done": torch.zeros(n, 1, dtype=torch.bool),
                "terminated": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        batch_size=[n],
    )


# ------------------------------------------------------------------------------------ records
def test_records_validate_and_are_frozen() -> None:
    request = LearnerStepRequest(round_id=2, num_steps=3, global_batch_size=8)
    with pytest.raises(Exception, match="cannot assign"):
        request.num_steps = 4  # type: ignore[misc]
    for bad in ({"round_id": 0}, {"num_steps": -1}, {"global_batch_size": True}):
        kwargs = {"round_id": 1, "num_steps": 1, "global_batch_size": 4, **bad}
        name = next(iter(bad))
        with pytest.raises(ValueError, match=f"{name} must be an int >= 1"):
            LearnerStepRequest(**kwargs)
    with pytest.raises(ValueError, match=r"rank must lie in \[0, 2\)"):
        LearnerContext(rank=2, world_size=2, collective=object())
    with pytest.raises(ValueError, match="needs a gradient collective"):
        LearnerContext(rank=0, world_size=2)
    assert LearnerContext(device="cpu").device == torch.device("cpu")
    result = LearnerStepResult(1, 0, 2, 2, TensorDict(loss=torch.tensor(1.0)))
    assert (result.round_id, result.optim_steps) == (1, 2)


def test_learner_weights_apply_and_publish() -> None:
    source, target = nn.Linear(2, 1), nn.Linear(2, 1)
    snapshot = LearnerWeights("policy", 5, TensorDict(dict(source.state_dict())))

    class Collector:
        received = None

        def update_policy_weights_(self, weights):
            self.received = weights

    collector = Collector()
    snapshot.publish(collector, target)
    assert collector.received is snapshot.weights
    torch.testing.assert_close(target.weight, source.weight)
    with pytest.raises(TypeError, match="cannot hand weights to a int"):
        snapshot.publish(3)


# ------------------------------------------------------------------------------------ learner


def test_default_context_follows_the_loss_module_device() -> None:
    """Without a context, batches go where the loss's parameters are (a GPU loss trains on
    the GPU); the CPU when the loss has no parameters."""
    net = nn.Linear(2, 1, device="meta")
    optim = torch.optim.SGD(net.parameters(), lr=0.1)
    learner = Learner(net, optimizer=optim, models={"policy": net})
    assert learner.context.device == torch.device("meta")
    free = Learner(nn.Identity(), optimizer=optim, models={"policy": net})
    assert free.context.device == torch.device("cpu")
    pinned = Learner(net, optimizer=optim, models={"policy": net}, context=LearnerContext())
    assert pinned.context.device == torch.device("cpu")  # a given context wins


def test_learner_matches_plain_sgd_and_is_an_optimization_context() -> None:
    buffer = _regression_buffer(sampler=SamplerWithoutReplacement(), batch_size=32)
    loss = Regression()
    reference = copy.deepcopy(loss)
    learner = Learner(
        loss, buffer, optimizer=torch.optim.SGD(loss.parameters(), lr=0.1), models={"p": loss}
    ).initialize()
    assert isinstance(learner, OptimizationContext)
    torch.manual_seed(0)
    metrics = learner.step(num_steps=4)
    # the same steps by hand (batches without replacement of 32 out of 32 items are the whole
    # buffer in some order, and the mean loss does not depend on the order)
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    data = buffer[:]
    losses = []
    for _ in range(4):
        opt.zero_grad()
        value = reference(data)["loss"]
        losses.append(value.item())
        value.backward()
        opt.step()
    torch.testing.assert_close(loss.w, reference.w)
    assert learner.model_version == 4 and learner.last_round == 1
    assert metrics["loss"].item() == pytest.approx(sum(losses) / 4, rel=1e-5)
    assert metrics["grad_norm"].ndim == 0 and metrics["loss"].device.type == "cpu"
    weights = learner.get_weights("p", expected_version=4)
    torch.testing.assert_close(weights["w"], loss.w.detach())
    weights["w"].zero_()  # a copy: the learner's parameters are untouched
    assert loss.w.abs().sum() > 0
    snapshot = learner.fetch_weights("p")
    assert (snapshot.model_id, snapshot.version) == ("p", 4)


def test_learner_errors() -> None:
    loss = Regression()
    opt = torch.optim.SGD(loss.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="pass optimizer= or optimization_stepper="):
        Learner(loss, _regression_buffer(batch_size=4))
    with pytest.raises(TypeError, match="must have sample"):
        Learner(loss, [1, 2], optimizer=opt)
    learner = Learner(loss, _regression_buffer(batch_size=4), optimizer=opt, models={"p": loss})
    with pytest.raises(RuntimeError, match="call initialize"):
        learner.step()
    learner.initialize()
    with pytest.raises(RuntimeError, match="expected round_id=1, got 3"):
        learner.execute(LearnerStepRequest(3, 1, 4))
    with pytest.raises(KeyError, match="unknown model_id 'policy'"):
        learner.get_weights()
    with pytest.raises(RuntimeError, match="expected model_version=7"):
        learner.get_weights("p", expected_version=7)
    learner.close()
    with pytest.raises(RuntimeError, match="closed"):
        learner.step()
    no_buffer = Learner(loss, optimizer=opt, models={"p": loss}).initialize()
    with pytest.raises(ValueError, match="pass batch_size="):
        no_buffer.step()
    with pytest.raises(RuntimeError, match="no replay_buffer"):
        no_buffer.step(batch_size=4)
    other = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="one_hot"))
    dqn = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="one_hot"))
    with pytest.raises(ValueError, match="built for another loss module"):
        Learner(
            dqn, optimizer=torch.optim.Adam(dqn.parameters()), target_net_updater=SoftUpdate(other)
        )


def test_dqn_learner_with_prioritized_replay_and_target_updates() -> None:
    torch.manual_seed(0)
    dqn = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="one_hot"), delay_value=True)
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(16),
        sampler=PrioritizedSampler(16, alpha=0.7, beta=0.5),
        batch_size=8,
        priority_key="td_error",
    )
    buffer.extend(_dqn_batch(16))
    updater = HardUpdate(dqn, value_network_update_interval=2)
    learner = Learner(
        dqn,
        buffer,
        optimizer=torch.optim.Adam(dqn.parameters(), lr=0.05),
        target_net_updater=updater,
    ).initialize()
    assert learner.models["policy"] is dqn.value_network
    before = learner.get_weights()
    priorities_before = buffer._sampler._sum_tree.query(0, 16)  # noqa: SLF001 - test only
    metrics = learner.step(num_steps=3)
    assert set(metrics.keys()) >= {"loss", "grad_norm"}
    after = learner.get_weights(expected_version=3)
    assert not torch.equal(
        before["module", "0", "module", "weight"], after["module", "0", "module", "weight"]
    )
    assert buffer._sampler._sum_tree.query(0, 16) != priorities_before  # noqa: SLF001
    assert updater.counter == 1  # 3 steps with an interval of 2: one copy, one pending
    # checkpoint round trip, target counter included
    state = copy.deepcopy(learner.state_dict())  # state_dict holds live tensors, as in torch
    learner.step(num_steps=2)
    learner.load_state_dict(state)
    assert (learner.model_version, learner.last_round, updater.counter) == (3, 1, 1)
    torch.testing.assert_close(learner.get_weights(), after)


# ------------------------------------------------------------------------------------ groups
def _factory(lr: float = 0.1, accumulation: int = 1):
    def make(context: LearnerContext) -> Learner:
        loss = Regression()
        opt = torch.optim.SGD(loss.parameters(), lr=lr)
        stepper = MixedPrecisionOptimizationStepper(
            opt, clip_norm=None, gradient_accumulation_steps=accumulation
        )
        return Learner(
            loss,
            context.replay_buffer,
            optimization_stepper=stepper,
            context=context,
            models={"policy": loss},
        )

    return make


def test_local_group_single_rank_contract() -> None:
    group = LocalLearnerGroup(_factory(), _regression_buffer(), global_batch_size=8, seed=0)
    assert isinstance(group, LearnerGroup) and not group.is_alive
    with pytest.raises(RuntimeError, match="not started"):
        group.step()
    with group:
        assert group.is_alive and group.world_size == 1 and group.global_batch_size == 8
        group.step(num_steps=2)
        metrics = group.step(num_steps=3)
        assert (group.last_round, group.model_version) == (2, 5)
        assert metrics["loss"].ndim == 0
        target = Regression()
        sent = group.publish_weights(target)
        assert sent.version == 5
        torch.testing.assert_close(target.w, group.learners[0].loss_module.w)
        state = group.state_dict()
    assert not group.is_alive
    fresh = LocalLearnerGroup(_factory(), _regression_buffer(), global_batch_size=8).start()
    fresh.load_state_dict(state)
    assert fresh.model_version == 5
    torch.testing.assert_close(fresh.get_weights()["w"], sent.weights["w"])
    with pytest.raises(ValueError, match="global_batch_size=8, this group 4"):
        LocalLearnerGroup(
            _factory(), _regression_buffer(), global_batch_size=4
        ).start().load_state_dict(state)
    fresh.shutdown()


def test_local_group_data_parallel_equals_one_learner_on_the_whole_batch() -> None:
    """Two ranks, each on half of every batch, with averaged gradients, take the same steps as
    one learner on the whole batch (the loss is a mean over items; batches of 16 out of 16
    items without replacement are the whole buffer at every step)."""
    buffer = _regression_buffer(n=16, sampler=SamplerWithoutReplacement())
    group = LocalLearnerGroup(
        _factory(), buffer, global_batch_size=16, world_size=2, seed=3, timeout=30
    ).start()
    single = _factory()(LearnerContext(replay_buffer=buffer)).initialize()
    # same initial parameters (rank 0's were broadcast to rank 1)
    single.loss_module.load_state_dict(group.learners[0].loss_module.state_dict())
    torch.testing.assert_close(group.learners[1].loss_module.w, group.learners[0].loss_module.w)
    metrics = group.step(num_steps=3)
    single.step(num_steps=3, batch_size=16)
    for learner in group.learners:
        torch.testing.assert_close(learner.loss_module.w, single.loss_module.w)
        assert learner.model_version == 3 and learner.last_round == 1
    assert set(metrics.keys()) == {"loss", "grad_norm"}
    group.shutdown()


def test_local_group_ranks_see_different_shards() -> None:
    seen: list[list[torch.Tensor]] = [[], []]

    class Recording(Regression):
        def forward(self, td):
            seen[int(threading.current_thread().name.rsplit("_", 1)[-1]) % 2].append(td["x"])
            return super().forward(td)

    def make(context):
        loss = Recording()
        return Learner(
            loss,
            context.replay_buffer,
            context=context,
            optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
            models={"policy": loss},
        )

    with LocalLearnerGroup(
        make, _regression_buffer(n=8), global_batch_size=8, world_size=2
    ) as group:
        group.step(num_steps=1)
    shards = [s[0] for s in seen if s]
    assert len(shards) == 2 and all(s.shape == (4, 3) for s in shards)
    assert not torch.equal(shards[0], shards[1])


def test_local_group_failure_stops_every_rank_and_the_group() -> None:
    class Failing(Regression):
        def __init__(self, fail: bool) -> None:
            super().__init__()
            self.fail = fail

        def forward(self, td):
            if self.fail:
                raise RuntimeError("rank 1 exploded")
            return super().forward(td)

    def make(context):
        loss = Failing(context.rank == 1)
        return Learner(
            loss,
            context.replay_buffer,
            context=context,
            optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
            models={"policy": loss},
        )

    group = LocalLearnerGroup(
        make, _regression_buffer(), global_batch_size=8, world_size=2, timeout=20
    )
    group.start()
    with pytest.raises(RuntimeError, match="rank 1 exploded"):
        group.step()
    assert not group.is_alive
    with pytest.raises(RuntimeError, match="a previous round failed"):
        group.step()
    group.shutdown()


def test_local_group_errors() -> None:
    with pytest.raises(ValueError, match="not a multiple of world_size=3"):
        LocalLearnerGroup(_factory(), None, global_batch_size=8, world_size=3)
    with pytest.raises(TypeError, match="must return a Learner"):
        LocalLearnerGroup(lambda ctx: object(), None, global_batch_size=8).start()
    loss = Regression()

    def ignores_context(context):
        return Learner(
            loss, context.replay_buffer, optimizer=torch.optim.SGD(loss.parameters(), lr=1)
        )

    with pytest.raises(ValueError, match="context=context"):
        LocalLearnerGroup(ignores_context, _regression_buffer(), global_batch_size=8).start()

    class NoDataParallel:
        def step(self, context, batch):
            return TensorDict()

    def plain_stepper(context):
        m = Regression()
        return Learner(
            m, context.replay_buffer, optimization_stepper=NoDataParallel(), context=context
        )

    with pytest.raises(RuntimeError, match="supports_data_parallel"):
        LocalLearnerGroup(
            plain_stepper, _regression_buffer(), global_batch_size=8, world_size=2
        ).start()


def test_group_publishes_versioned_weights_to_a_collector() -> None:
    from _collector_helpers import threshold_policy
    from _envs import CountingEnv

    from torchrl.collectors import SyncDataCollector

    class BiasUp(nn.Module):
        """Trains the policy's bias towards 1 (the data only sets the batch size)."""

        def __init__(self) -> None:
            super().__init__()
            self.policy = threshold_policy()

        def forward(self, td):
            bias = self.policy.module.linear.bias
            return TensorDict(loss=((bias - 1.0) ** 2).sum() + 0 * td["x"].sum())

    def make(context):
        loss = BiasUp()
        return Learner(
            loss,
            context.replay_buffer,
            context=context,
            optimizer=torch.optim.SGD(loss.parameters(), lr=0.5),
            models={"policy": loss.policy},
        )

    collector = SyncDataCollector(
        CountingEnv(), threshold_policy(), frames_per_batch=4, total_frames=-1
    )
    try:
        with LocalLearnerGroup(make, _regression_buffer(), global_batch_size=4) as group:
            group.step(num_steps=2)
            sent = group.publish_weights(collector)
            assert sent.version == 2 and sent.model_id == "policy"
            collector_bias = collector.policy.module.linear.bias
            torch.testing.assert_close(
                collector_bias.detach(), sent.weights["module", "linear", "bias"]
            )
            assert collector_bias.item() == pytest.approx(1.0)  # -1 - 0.5 * 2 * (-1 - 1) = 1
            # the collector now acts with the new weights: bias > 0 and weight 0 -> action 1
            batch = next(iter(collector))
            assert bool((batch["action"] == 1).all())
    finally:
        collector.shutdown()


def test_two_argument_factories_and_clip_options() -> None:
    def make(replay_buffer, context):  # TorchRL's factory signature
        loss = Regression()
        return Learner(
            loss,
            replay_buffer,
            context=context,
            optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
            clip_grad_norm=True,
            clip_norm=1.0,
            models={"policy": loss},
        )

    with LocalLearnerGroup(make, _regression_buffer(), global_batch_size=8) as group:
        assert group.step()["grad_norm"].item() > 0
    with pytest.raises(TypeError, match="must take \\(context\\) or \\(replay_buffer, context\\)"):
        LocalLearnerGroup(lambda a, b, c: None, None, global_batch_size=8)
    loss = Regression()
    with pytest.raises(ValueError, match="clips the gradient norm only"):
        Learner(
            loss,
            optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
            clip_grad_norm=False,
            clip_norm=1.0,
        )
