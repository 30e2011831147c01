"""Safe modules, DDPG/DQN networks, Conv3dNet, Online DT actor, cross-group critic, consistent dropout."""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule, set_interaction_type
from torch import distributions as D
from torch import nn

from torchrl.data import Bounded, Composite, Unbounded
from torchrl.modules.models.ddpg import DdpgCnnActor, DdpgCnnQNet, DdpgMlpActor, DdpgMlpQNet
from torchrl.modules.tensordict_module.safe import (
    SafeModule,
    SafeProbabilisticModule,
    SafeProbabilisticTensorDictSequential,
    SafeSequential,
)

# ----------------------------------------------------------------------------- safe modules


def _big_obs(batch=6, dim=3):
    return TensorDict(obs=torch.full((batch, dim), 100.0), batch_size=[batch])


@pytest.mark.parametrize("safe", [True, False])
def test_safe_module_projects_only_when_safe(safe):
    mod = SafeModule(
        nn.Linear(3, 2), ["obs"], ["out"], spec=Bounded(-1.0, 1.0, shape=(2,)), safe=safe
    )
    nn.init.constant_(mod.module.weight, 1.0)
    out = mod(_big_obs())["out"]
    assert out.shape == (6, 2)
    if safe:
        assert torch.equal(out, torch.ones(6, 2))
    else:
        assert bool((out > 1).all())


def test_safe_module_leaf_spec_describes_first_out_key_and_checks_keys():
    mod = SafeModule(
        lambda x: (x * 10, x * 10), ["obs"], ["a", "b"], spec=Bounded(-1.0, 1.0, (3,)), safe=True
    )
    assert list(mod.spec.keys()) == ["a"]
    td = mod(_big_obs())
    assert td["a"].max() == 1.0 and td["b"].max() == 1000.0
    with pytest.raises(ValueError, match="safe=True needs a spec"):
        SafeModule(nn.Linear(3, 2), ["obs"], ["out"], safe=True)
    with pytest.raises(KeyError, match="not one of the out_keys"):
        SafeModule(nn.Linear(3, 2), ["obs"], ["out"], spec=Composite(other=Unbounded(2)))


def test_safe_module_nested_out_key():
    spec = Composite({("agents", "action"): Bounded(-2.0, 2.0, shape=(2,))})
    mod = SafeModule(nn.Linear(3, 2), ["obs"], [("agents", "action")], spec=spec, safe=True)
    nn.init.constant_(mod.module.weight, 1.0)
    assert torch.equal(mod(_big_obs())["agents", "action"], torch.full((6, 2), 2.0))


def test_safe_probabilistic_module_projects_samples_not_log_prob():
    mod = SafeProbabilisticModule(
        ["loc", "scale"],
        ["action"],
        spec=Bounded(-1.0, 1.0, shape=(2,)),
        safe=True,
        distribution_class=D.Normal,
        return_log_prob=True,
    )
    td = TensorDict(loc=torch.full((4, 2), 10.0), scale=torch.ones(4, 2) * 0.01, batch_size=[4])
    with set_interaction_type("random"):
        td = mod(td)
    assert torch.equal(td["action"], torch.ones(4, 2))
    # the log-probability is the one of the drawn (unprojected) value: near the mode, not at 1
    assert bool((td["action_log_prob"] > 0).all())
    unsafe = SafeProbabilisticModule(["loc", "scale"], ["action"], distribution_class=D.Normal)
    assert unsafe.spec is None and not unsafe.safe
    with set_interaction_type("deterministic"):
        assert unsafe(td.exclude("action"))["action"].min() == 10.0


def test_safe_sequential_merges_specs_and_projects():
    hidden = SafeModule(nn.Linear(3, 4), ["obs"], ["hidden"], spec=Unbounded(4))
    head = SafeModule(nn.Linear(4, 2), ["hidden"], ["out"], spec=Bounded(-1.0, 1.0, (2,)))
    seq = SafeSequential(hidden, head)
    assert sorted(seq.spec.keys()) == ["hidden", "out"]
    assert not seq.safe
    safe_seq = SafeSequential(hidden, head, safe=True)
    td = safe_seq(_big_obs())
    assert bool(td["out"].abs().max() <= 1.0)
    # an explicit leaf spec describes the last module's first output
    leaf = SafeSequential(hidden, head, spec=Bounded(-0.5, 0.5, (2,)), safe=True)
    assert list(leaf.spec.keys()) == ["out"]
    assert bool(leaf(_big_obs())["out"].abs().max() <= 0.5)
    with pytest.raises(ValueError, match="safe=True needs a spec"):
        SafeSequential(TensorDictModule(nn.Linear(3, 2), ["obs"], ["out"]), safe=True)


def test_safe_probabilistic_sequential_get_dist_and_projection():
    net = SafeModule(
        nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()), ["obs"], ["loc", "scale"]
    )
    sampler = SafeProbabilisticModule(
        ["loc", "scale"], ["action"], distribution_class=D.Normal, return_log_prob=True
    )
    policy = SafeProbabilisticTensorDictSequential(
        net, sampler, spec=Bounded(-1.0, 1.0, shape=(2,)), safe=True
    )
    assert list(policy.spec.keys()) == ["action"]
    td = TensorDict(obs=torch.randn(64, 3) * 100, batch_size=[64])
    with set_interaction_type("random"):
        out = policy(td.clone())
    assert bool(out["action"].abs().max() <= 1.0)
    assert bool((out["action"].abs() == 1.0).any())
    dist = policy.get_dist(td.clone())
    assert isinstance(dist, D.Normal) and dist.loc.shape == (64, 2)
    # the specs of the parts are merged when none is given; a safe sampler projects itself
    safe_sampler = SafeProbabilisticModule(
        ["loc", "scale"],
        ["action"],
        spec=Bounded(-0.1, 0.1, shape=(2,)),
        safe=True,
        distribution_class=D.Normal,
    )
    merged = SafeProbabilisticTensorDictSequential(net, safe_sampler)
    assert list(merged.spec.keys()) == ["action"] and not merged.safe
    with set_interaction_type("random"):
        assert bool(merged(td.clone())["action"].abs().max() <= 0.1)


# ----------------------------------------------------------------------------- DDPG networks


def test_ddpg_mlp_actor_lazy_and_explicit_sizes():
    actor = DdpgMlpActor(action_dim=4)
    assert actor(torch.randn(10, 6)).shape == (10, 4)
    assert [m.out_features for m in actor.mlp if isinstance(m, nn.Linear)] == [400, 300, 4]
    explicit = DdpgMlpActor(3, mlp_net_kwargs={"in_features": 5, "num_cells": [16, 8]})
    first = explicit.mlp[0]
    assert isinstance(first, nn.Linear) and first.in_features == 5 and first.out_features == 16
    assert explicit(torch.randn(2, 7, 5)).shape == (2, 7, 3)
    # the output layer starts small (paper init)
    assert explicit.mlp[-1].weight.abs().max() <= 3e-3


def test_ddpg_mlp_qnet_action_joins_after_first_layer():
    qnet = DdpgMlpQNet()
    obs, act = torch.randn(10, 6), torch.randn(10, 2)
    assert qnet(obs, act).shape == (10, 1)
    assert qnet.mlp1[0].in_features == 6 and qnet.mlp1[0].out_features == 400
    assert qnet.mlp2[0].in_features == 402  # 400 features + the 2-dim action
    explicit = DdpgMlpQNet(
        mlp_net_kwargs_net1={"in_features": 6, "out_features": 8},
        mlp_net_kwargs_net2={"in_features": 10, "num_cells": [4]},
    )
    out = explicit(obs, act)
    assert out.shape == (10, 1)
    out.sum().backward()
    assert explicit.mlp1[0].weight.grad is not None


@pytest.mark.parametrize("use_avg_pooling", [False, True])
def test_ddpg_cnn_actor_returns_action_and_hidden(use_avg_pooling):
    actor = DdpgCnnActor(action_dim=3, use_avg_pooling=use_avg_pooling)
    action, hidden = actor(torch.randn(2, 5, 3, 64, 64))
    assert action.shape == (2, 5, 3)
    assert hidden.shape == ((2, 5, 64) if use_avg_pooling else (2, 5, 64 * 6 * 6))
    small = DdpgCnnActor(
        2,
        conv_net_kwargs={"in_features": 3, "num_cells": [4, 4, 4]},
        mlp_net_kwargs={"num_cells": 8},
    )
    assert isinstance(small.convnet.layers[0], nn.Conv2d)
    assert small.convnet.layers[0].in_channels == 3
    assert small(torch.randn(1, 3, 64, 64))[1].shape == (1, 4 * 6 * 6)


def test_ddpg_cnn_qnet_value_shape_any_image_size_with_pooling():
    qnet = DdpgCnnQNet()
    assert qnet(torch.randn(2, 3, 64, 64), torch.randn(2, 4)).shape == (2, 1)
    # average pooling: the value head does not depend on the image size
    assert qnet(torch.randn(2, 3, 96, 80), torch.randn(2, 4)).shape == (2, 1)
    flat = DdpgCnnQNet(use_avg_pooling=False)
    assert flat(torch.randn(2, 3, 64, 64), torch.randn(2, 4)).shape == (2, 1)
    assert flat.mlp[0].in_features == 128 * 6 * 6 + 4
