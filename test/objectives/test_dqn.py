"""DQN and C51 losses against hand-written references (Mnih et al. 2015; Bellemare et al. 2017)."""

from __future__ import annotations

import pytest
import torch
from _loss_helpers import (
    assert_matches,
    float64,
    linears,
    mlp,
    ref_mlp,
    stacked_linears,
    transition_batch,
)
from torch import nn
from torch.nn import functional as F

from torchrl.modules import DistributionalQValueActor, QValueActor
from torchrl.objectives import (
    DistributionalDQNLoss,
    DQNLoss,
    HardUpdate,
    SoftUpdate,
    ValueEstimators,
)
from torchrl.objectives._helpers import gather_action_values

GAMMA = 0.9


def _perturb(module, scale=0.2):
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn_like(p))


@pytest.mark.parametrize("space", ["categorical", "one_hot"])
@pytest.mark.parametrize("double_dqn", [False, True])
@pytest.mark.parametrize("loss_function", ["l2", "smooth_l1"])
def test_dqn_matches_reference(space, double_dqn, loss_function):
    with float64():
        torch.manual_seed(0)
        net = QValueActor(mlp(4, 3), action_space=space)
        index = torch.randint(3, (10,))
        action = index if space == "categorical" else F.one_hot(index, 3)
        td = transition_batch(10, 4, action)
        loss = DQNLoss(net, double_dqn=double_dqn, loss_function=loss_function)
        loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
        _perturb(net)  # online != target
        out = loss(td)

        online = linears(net)
        target = stacked_linears(loss.target_value_network_params)
        pred = ref_mlp(td["observation"], online).gather(-1, index.unsqueeze(-1))
        next_obs = td["next", "observation"]
        next_q_target = ref_mlp(next_obs, target)
        chooser = ref_mlp(next_obs, online) if double_dqn else next_q_target
        best = chooser.argmax(-1, keepdim=True)
        next_value = next_q_target.gather(-1, best)
        not_term = (~td["next", "terminated"]).double()
        y = td["next", "reward"] + GAMMA * not_term * next_value
        if loss_function == "l2":
            ref = (pred - y).pow(2).mean()
        else:
            ref = F.smooth_l1_loss(pred, y.detach())
        assert_matches(out["loss"], ref, list(net.parameters()))
        torch.testing.assert_close(td["td_error"], (pred - y).abs().squeeze(-1).detach())


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.float32])
def test_one_hot_action_values_ignore_untaken_actions(dtype):
    # The taken action's value is picked out, not summed over the one-hot: an infinite value
    # of an action not taken leaves the prediction (and its gradient) finite.
    values = torch.tensor([[1.0, float("inf")], [float("-inf"), 2.0]], requires_grad=True)
    action = F.one_hot(torch.tensor([0, 1]), 2).to(dtype)
    pred = gather_action_values(values, action, "one_hot", "DQNLoss")
    assert pred.tolist() == [[1.0], [2.0]]
    pred.sum().backward()
    assert values.grad.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_dqn_masked_next_actions():
    with float64():
        torch.manual_seed(1)
        net = QValueActor(mlp(4, 3), action_space="categorical", action_mask_key="action_mask")
        index = torch.randint(3, (6,))
        td = transition_batch(6, 4, index)
        mask = torch.ones(6, 3, dtype=torch.bool)
        td["action_mask"] = mask
        # Forbid, in each next state, the action the target network likes best.
        next_q = ref_mlp(td["next", "observation"], linears(net)).detach()
        next_mask = ~F.one_hot(next_q.argmax(-1), 3).bool()
        td["next", "action_mask"] = next_mask
        loss = DQNLoss(net)
        loss.make_value_estimator(gamma=GAMMA)
        out = loss(td)
        allowed = next_q.masked_fill(~next_mask, float("-inf")).max(-1, keepdim=True).values
        not_term = (~td["next", "terminated"]).double()
        y = td["next", "reward"] + GAMMA * not_term * allowed
        pred = ref_mlp(td["observation"], linears(net)).gather(-1, index.unsqueeze(-1))
        assert_matches(out["loss"], (pred - y).pow(2).mean(), list(net.parameters()))


def test_dqn_bad_actions_raise_before_gradients():
    net = QValueActor(nn.Linear(4, 3), action_space="one_hot")
    loss = DQNLoss(net)
    td = transition_batch(5, 4, torch.randint(3, (5,)))  # categorical data, one-hot loss
    with pytest.raises(ValueError, match="one-hot action 'action' has shape"):
        loss(td)
    assert net.module[0].module.weight.grad is None
    with pytest.raises(ValueError, match="action_space must be"):
        DQNLoss(nn.Linear(4, 3), action_space="continuous")
    with pytest.raises(ValueError, match="pass action_space"):
        DQNLoss(nn.Linear(4, 3))
    with pytest.raises(KeyError, match="DQNLoss.*reward"):
        loss(td.exclude(("next", "reward")))
    with pytest.raises(NotImplementedError, match="GAE"):
        loss.make_value_estimator(ValueEstimators.GAE)


def test_dqn_target_updates():
    net = QValueActor(nn.Linear(4, 2), action_space="categorical")
    loss = DQNLoss(net)
    weight = net.module[0].module.weight
    target = loss.target_value_network_params["module", "0", "module", "weight"]
    assert not target.requires_grad
    assert [n for n, _ in loss.named_parameters()] == [
        "value_network.module.0.module.weight",
        "value_network.module.0.module.bias",
    ]
    before = target.clone()
    with torch.no_grad():
        weight.add_(1.0)
    SoftUpdate(loss, eps=0.75).step()
    torch.testing.assert_close(target, 0.75 * before + 0.25 * weight.detach())
    hard = HardUpdate(loss, value_network_update_interval=3)
    hard.step()
    hard.step()
    assert not torch.equal(target, weight)
    hard.step()
    assert torch.equal(target, weight.detach())
    no_target = DQNLoss(net, delay_value=False)
    assert no_target.target_network_names == []
    with pytest.raises(ValueError, match="no target parameters"):
        SoftUpdate(no_target)
    with pytest.raises(ValueError, match="eps or tau"):
        SoftUpdate(loss, eps=0.5, tau=0.5)


def test_dqn_prioritized_weights():
    net = QValueActor(nn.Linear(4, 2), action_space="categorical")
    td = transition_batch(6, 4, torch.randint(2, (6,)))
    loss = DQNLoss(net, reduction="none")
    plain = loss(td.clone())["loss"]
    td["_weight"] = torch.linspace(0.1, 1.0, 6)
    weighted = loss(td.clone())["loss"]
    torch.testing.assert_close(weighted, plain * td["_weight"].unsqueeze(-1))


def _ref_c51_target(p_next, reward, not_term, support, gamma):
    """Projection of the shifted atoms by the triangular kernel (Bellemare et al., eq. 7)."""
    v_min, v_max = support[0], support[-1]
    dz = (v_max - v_min) / (support.numel() - 1)
    tz = (reward + gamma * not_term * support).clamp(v_min, v_max)  # [B, atoms_j]
    # m_i = sum_j p_j * max(0, 1 - |Tz_j - z_i| / dz)
    kernel = (1 - (tz.unsqueeze(-2) - support.view(-1, 1)).abs() / dz).clamp(min=0)
    return (kernel * p_next.unsqueeze(-2)).sum(-1)


@pytest.mark.parametrize("space", ["categorical", "one_hot"])
def test_c51_matches_reference(space):
    with float64():
        torch.manual_seed(0)
        support = torch.linspace(-2.0, 2.0, 9)
        net = DistributionalQValueActor(
            nn.Sequential(mlp(4, 9 * 3), nn.Unflatten(-1, (9, 3))), support, action_space=space
        )
        index = torch.randint(3, (8,))
        action = index if space == "categorical" else F.one_hot(index, 3)
        td = transition_batch(8, 4, action)
        td["next", "reward"] = td["next", "reward"] * 3  # some targets fall outside the support
        loss = DistributionalDQNLoss(net, gamma=GAMMA)
        _perturb(net)
        out = loss(td)

        online = linears(net)
        target = stacked_linears(loss.target_value_network_params)
        log_p = ref_mlp(td["observation"], online).view(8, 9, 3).log_softmax(-2)
        log_p_a = log_p[torch.arange(8), :, index]  # [B, atoms]
        p_next = ref_mlp(td["next", "observation"], target).view(8, 9, 3).softmax(-2)
        best = (p_next * support.view(1, -1, 1)).sum(-2).argmax(-1)
        p_best = p_next[torch.arange(8), :, best]
        not_term = (~td["next", "terminated"]).double()
        m = _ref_c51_target(p_best, td["next", "reward"], not_term, support, GAMMA)
        torch.testing.assert_close(m.sum(-1), torch.ones(8))
        ref = -(m * log_p_a).sum(-1).mean()
        assert_matches(out["loss"], ref, list(net.parameters()))
        with pytest.raises(NotImplementedError):
            loss.make_value_estimator(ValueEstimators.TDLambda)


def test_c51_atom_exactly_on_support():
    # r + gamma * z lands exactly on atoms: the whole mass must stay (no lost probability).
    support = torch.linspace(-1.0, 1.0, 5)
    net = DistributionalQValueActor(
        nn.Sequential(nn.Linear(2, 10), nn.Unflatten(-1, (5, 2))),
        support,
        action_space="categorical",
    )
    loss = DistributionalDQNLoss(net, gamma=1.0)
    p = torch.softmax(torch.randn(3, 5), -1)
    m = loss._project(p, torch.zeros(3, 1), torch.zeros(3, 1, dtype=torch.bool), 1.0)
    torch.testing.assert_close(m, p)
