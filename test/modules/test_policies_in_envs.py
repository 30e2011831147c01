"""Policies built from torchrl.modules drive real envs (gymnasium's Pendulum-v1)."""

import pytest
import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from torchrl.envs.utils import ExplorationType, check_env_specs, set_exploration_type
from torchrl.modules import (
    MLP,
    AdditiveGaussianWrapper,
    NormalParamExtractor,
    ProbabilisticActor,
    TanhNormal,
    ValueOperator,
)

pytest.importorskip("gymnasium")


@pytest.fixture
def pendulum():
    from torchrl.envs.libs import GymEnv

    env = GymEnv("Pendulum-v1")
    env.set_seed(0)
    yield env
    env.close()


def test_probabilistic_actor_and_value_operator_drive_pendulum(pendulum):
    env = pendulum
    spec = env.action_spec
    net = TensorDictModule(
        nn.Sequential(
            MLP(out_features=2 * spec.shape[-1], num_cells=[32, 32]), NormalParamExtractor()
        ),
        in_keys=["observation"],
        out_keys=["loc", "scale"],
    )
    actor = ProbabilisticActor(
        net,
        in_keys=["loc", "scale"],
        spec=spec,
        safe=True,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": spec.low, "high": spec.high},
        return_log_prob=True,
    )
    value = ValueOperator(MLP(out_features=1, num_cells=[32, 32]))
    with set_exploration_type(ExplorationType.RANDOM), torch.no_grad():
        rollout = env.rollout(25, actor)
    assert rollout.batch_size == (25,)
    assert spec.is_in(rollout["action"])
    assert rollout["action"].std() > 0  # sampled, not a constant action
    assert torch.isfinite(rollout["action_log_prob"]).all()
    obs_spec = env.observation_spec["observation"]
    assert obs_spec.is_in(rollout["observation"]) and obs_spec.is_in(rollout["next", "observation"])
    values = value(rollout)["state_value"]
    assert values.shape == (25, 1)
    # Deterministic evaluation: the squashed mean, the same action for the same observation.
    with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
        evaluation = env.rollout(5, actor)
        again = actor(evaluation.exclude("action", "loc", "scale", "action_log_prob"))
    torch.testing.assert_close(again["action"], evaluation["action"])
    check_env_specs(env)


def test_paper_figure_1_model_code(pendulum):
    """The model part of the TorchRL paper's Figure 1 (a DDPG script on Pendulum), as written."""
    env = pendulum
    # Model: Actor and value
    mlp_actor = MLP(num_cells=64, depth=3, in_features=3, out_features=1)
    actor = TensorDictModule(mlp_actor, in_keys=["observation"], out_keys=["action"])
    mlp_value = MLP(num_cells=64, depth=2, in_features=4, out_features=1)
    critic = TensorDictSequential(
        actor,
        TensorDictModule(
            mlp_value, in_keys=["observation", "action"], out_keys=["state_action_value"]
        ),
    )
    explorative_policy = AdditiveGaussianWrapper(actor)
    with torch.no_grad():
        rollout = env.rollout(10, explorative_policy)
        assert rollout["action"].shape == (10, 1)
        # The exploration noise is on (no exploration type set counts as exploring).
        greedy = actor(rollout.exclude("action").clone())["action"]
        assert not torch.allclose(greedy, rollout["action"])
        data = critic(rollout.clone())
    assert data["state_action_value"].shape == (10, 1)
    explorative_policy.step(1000)
    assert explorative_policy.exploration_module.sigma.item() == pytest.approx(0.1)


def test_paper_figure_1_collector(pendulum):
    """The collector part of Figure 1, once collectors exist (issue of another helper)."""
    collectors = pytest.importorskip("torchrl.collectors")
    mlp_actor = MLP(num_cells=64, depth=3, in_features=3, out_features=1)
    actor = TensorDictModule(mlp_actor, in_keys=["observation"], out_keys=["action"])
    # the spec: noisy actions are projected into the torque bounds, which the env checks
    policy = AdditiveGaussianWrapper(actor, spec=pendulum.action_spec)
    collector = collectors.SyncDataCollector(
        pendulum, policy, frames_per_batch=50, total_frames=100
    )
    batches = list(collector)
    assert sum(b.numel() for b in batches) == 100
