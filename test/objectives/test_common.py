"""LossModule machinery: target parameters, ensembles, keys, estimators and updaters."""

from __future__ import annotations

import copy

import pytest
import torch
from _loss_helpers import ConcatMLP, gaussian_actor, mlp, transition_batch
from tensordict import TensorDict
from torch import nn

from torchrl.modules import Actor, QValueActor, ValueOperator
from torchrl.objectives import (
    DQNLoss,
    HardUpdate,
    LossModule,
    PPOLoss,
    SACLoss,
    SoftUpdate,
    TD3Loss,
    ValueEstimators,
    default_value_kwargs,
    distance_loss,
    hold_out_net,
)
from torchrl.objectives.value import GAE, TD0Estimator, TDLambdaEstimator


def _td3(num=2, critic=None):
    actor = Actor(mlp(3, 2))
    critic = critic or ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])
    return TD3Loss(actor, critic, bounds=(-1.0, 1.0), num_qvalue_nets=num)


def test_targets_are_buffers_and_saved():
    loss = _td3()
    params = dict(loss.named_parameters())
    buffers = dict(loss.named_buffers())
    assert not any("target" in name for name in params)
    assert any(name.startswith("target_qvalue_network_params") for name in buffers)
    assert any(name.startswith("target_actor_network_params") for name in buffers)
    assert sorted(loss.target_network_names) == ["actor_network", "qvalue_network"]
    state = loss.state_dict()
    assert any(k.startswith("target_actor_network_params") for k in state)
    # The value estimator shares the loss's networks but is not a sub-module.
    loss.make_value_estimator(ValueEstimators.TD0)
    assert state.keys() == loss.state_dict().keys()
    other = _td3()
    other.load_state_dict(state)
    for a, b in zip(loss.state_dict().values(), other.state_dict().values()):
        torch.testing.assert_close(a, b)


def test_deepcopy_and_dtype_moves():
    loss = _td3()
    td = transition_batch(4, 3, torch.rand(4, 2) - 0.5)
    clone = copy.deepcopy(loss)
    with torch.no_grad():
        loss.qvalue_network_params["module", "net", "0", "weight"].add_(1.0)
    assert not torch.equal(
        clone.qvalue_network_params["module", "net", "0", "weight"],
        loss.qvalue_network_params["module", "net", "0", "weight"],
    )
    clone(td.clone())
    loss64 = _td3().double()
    out = loss64(td.double())
    assert out["loss_qvalue"].dtype == torch.float64
    SoftUpdate(loss64, tau=0.1).step()
    assert loss64.target_qvalue_network_params["module", "net", "0", "weight"].dtype == (
        torch.float64
    )


def test_ensemble_vmap_and_loop_agree():
    loss = _td3(num=3)
    td = transition_batch(5, 3, torch.rand(5, 2) - 0.5)
    vmapped = loss._call_ensemble("qvalue_network", td, ["state_action_value"])[0]
    loss.deactivate_vmap = True
    looped = loss._call_ensemble("qvalue_network", td, ["state_action_value"])[0]
    assert vmapped.shape == (3, 5, 1)
    torch.testing.assert_close(vmapped, looped)
    # The template holds no tensors: the stacked parameters are the only copy.
    assert list(loss.qvalue_network.parameters()) == []


def test_ensemble_with_buffers_soft_update_copies_counters():
    class BNCritic(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(5, 4)
            self.bn = nn.BatchNorm1d(4)
            self.out = nn.Linear(4, 1)

        def forward(self, obs, action):
            return self.out(self.bn(self.lin(torch.cat([obs, action], -1))))

    critic = ValueOperator(BNCritic(), in_keys=["observation", "action"])
    loss = _td3(critic=critic)
    loss.eval()
    loss(transition_batch(4, 3, torch.rand(4, 2) - 0.5))
    counter = loss.qvalue_network_params["module", "bn", "num_batches_tracked"]
    with torch.no_grad():
        counter.add_(5)
    SoftUpdate(loss, tau=0.01).step()
    target = loss.target_qvalue_network_params["module", "bn", "num_batches_tracked"]
    assert torch.equal(target, counter)


def test_lazy_modules_initialise_on_first_batch():
    # (more cases in test_loss_extras.py)
    loss = DQNLoss(QValueActor(nn.LazyLinear(3), action_space="categorical"), delay_value=True)
    assert loss.target_network_names == []
    td = TensorDict(
        observation=torch.randn(4, 5),
        action=torch.randint(0, 3, (4,)),
        next=TensorDict(
            observation=torch.randn(4, 5),
            reward=torch.zeros(4, 1),
            done=torch.zeros(4, 1, dtype=torch.bool),
            terminated=torch.zeros(4, 1, dtype=torch.bool),
            batch_size=[4],
        ),
        batch_size=[4],
    )
    loss(td)
    assert loss.value_network.module[0].module.weight.shape == (3, 5)
    assert loss.target_network_names == ["value_network"]


def test_keys_and_estimators():
    loss = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="categorical"))
    assert loss.value_type is None
    assert isinstance(loss.value_estimator, TD0Estimator)  # made on first use
    loss.make_value_estimator("td_lambda", gamma=0.5, lmbda=0.3)
    assert isinstance(loss.value_estimator, TDLambdaEstimator)
    assert loss.value_estimator.gamma == 0.5 and loss.value_type is ValueEstimators.TDLambda
    loss.set_keys(reward="r", done="d")
    assert loss.value_estimator.tensor_keys.reward == "r"
    assert ("next", "r") in loss.in_keys and ("next", "d") in loss.in_keys
    with pytest.raises(ValueError, match="DQNLoss.set_keys: unknown key name"):
        loss.set_keys(not_a_key="x")
    with pytest.raises(NotImplementedError, match="DQNLoss does not support the VTrace"):
        loss.make_value_estimator(ValueEstimators.VTrace)
    assert default_value_kwargs("gae") == {"gamma": 0.99, "lmbda": 0.95, "differentiable": False}
    assert ValueEstimators("TDLambda") is ValueEstimators.TDLambda


def test_tensordict_free_call_and_missing_keys():
    loss = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="categorical"))
    assert loss.in_keys == [
        "observation",
        ("next", "observation"),
        "action",
        ("next", "reward"),
        ("next", "done"),
        ("next", "terminated"),
    ]
    td = transition_batch(5, 4, torch.randint(2, (5,)))
    value = loss(
        observation=td["observation"],
        next_observation=td["next", "observation"],
        action=td["action"],
        next_reward=td["next", "reward"],
        next_done=td["next", "done"],
        next_terminated=td["next", "terminated"],
    )
    torch.testing.assert_close(value, loss(td)["loss"])
    with pytest.raises(KeyError, match=r"DQNLoss: the input tensordict has no entry .*terminated"):
        loss(td.exclude(("next", "terminated")))


def test_soft_and_hard_update_math():
    loss = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="categorical"))
    online = loss.value_network.module[0].module.weight
    target = loss.target_value_network_params["module", "0", "module", "weight"]
    with torch.no_grad():
        online.add_(2.0)
    old = target.clone()
    SoftUpdate(loss, tau=0.25).step()
    torch.testing.assert_close(target, 0.75 * old + 0.25 * online.detach())
    updater = SoftUpdate(loss, eps=0.5)
    updater.init_()
    torch.testing.assert_close(target, online.detach())
    with pytest.raises(ValueError, match="eps must lie"):
        SoftUpdate(loss, eps=1.5)
    with pytest.raises(ValueError, match="value_network_update_interval"):
        HardUpdate(loss, value_network_update_interval=0)


def test_helpers():
    a, b = torch.tensor([0.0, 2.0]), torch.tensor([1.0, 0.0])
    torch.testing.assert_close(distance_loss(a, b, "l1"), torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="different shapes"):
        distance_loss(a, b[:1])
    torch.testing.assert_close(
        distance_loss(a, b[:1], strict_shape=False), torch.tensor([1.0, 1.0])
    )
    with pytest.raises(ValueError, match="loss_function"):
        distance_loss(a, b, "l3")
    net = nn.Linear(2, 1)
    with hold_out_net(net):
        assert not net.weight.requires_grad
    assert net.weight.requires_grad


def test_loss_module_is_plain_nn_module():
    assert LossModule.__mro__[1] is nn.Module
    actor = gaussian_actor(3, 2)
    loss = PPOLoss(actor, ValueOperator(mlp(3, 1)))
    assert isinstance(loss.value_estimator, GAE)
    # The actor is shared with the caller (it also acts in the environment).
    assert loss.actor_network is actor
    names = {n.split(".")[0] for n, _ in loss.named_parameters()}
    assert names == {"actor_network", "critic_network"}


def test_reduction_none_shapes():
    from torchrl.modules import TanhNormal

    actor = gaussian_actor(3, 2, distribution_class=TanhNormal)
    qvalue = ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])
    loss = SACLoss(actor, qvalue, target_entropy=-2.0, reduction="none")
    out = loss(transition_batch(6, 3, torch.rand(6, 2) - 0.5))
    assert out["loss_actor"].shape == (6, 1)
    assert out["loss_qvalue"].shape == (6, 1)
    with pytest.raises(ValueError, match="reduction"):
        SACLoss(actor, qvalue, target_entropy=-2.0, reduction="avg")


def test_priority_written_for_replay():
    loss = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="categorical"), priority_key="prio")
    td = transition_batch(5, 4, torch.randint(2, (5,)))
    loss(td)
    assert td["prio"].shape == (5,) and not td["prio"].requires_grad


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_losses_run_on_cuda():
    from torchrl.modules import TanhNormal

    device = torch.device("cuda")
    actor = gaussian_actor(3, 2, distribution_class=TanhNormal)
    qvalue = ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])
    sac = SACLoss(actor, qvalue, target_entropy=-2.0).to(device)
    td = transition_batch(8, 3, torch.rand(8, 2) - 0.5).to(device)
    out = sac(td)
    sum(v for k, v in out.items() if k.startswith("loss_")).backward()
    SoftUpdate(sac, tau=0.1).step()
    td3 = _td3().to(device)
    td3(td.clone())
    dqn = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="categorical")).to(device)
    dqn(transition_batch(8, 4, torch.randint(2, (8,))).to(device))["loss"].backward()
    ppo = PPOLoss(gaussian_actor(3, 2), ValueOperator(mlp(3, 1))).to(device)
    from _loss_helpers import trajectory_batch

    traj = trajectory_batch(2, 6, 3)
    traj["action"] = torch.randn(2, 6, 2)
    traj["sample_log_prob"] = torch.zeros(2, 6)
    assert ppo(traj.to(device))["loss_objective"].device.type == "cuda"


def test_leaf_cache_follows_tensor_replacements():
    loss = _td3()
    td = transition_batch(4, 3, torch.rand(4, 2) - 0.5)
    loss(td.clone())
    state = {k: v.clone() + 1 for k, v in loss.state_dict().items()}
    loss.load_state_dict(state, assign=True)
    stacked = loss.qvalue_network_params["module", "net", "0", "weight"]
    assert loss._online_tensors("qvalue_network")[0] is stacked
    loss.double()
    assert loss._target_tensors("qvalue_network")[0].dtype == torch.float64
    loss(td.double())
