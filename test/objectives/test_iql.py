"""IQL losses against hand-written references (Kostrikov et al. 2022)."""

from __future__ import annotations

import pytest
import torch
from _loss_helpers import (
    ConcatMLP,
    assert_matches,
    categorical_actor,
    float64,
    gaussian_actor,
    linears,
    mlp,
    ref_mlp,
    stacked_linears,
    transition_batch,
)
from tensordict.nn import TensorDictModule
from torch import distributions as D
from torch.nn import functional as F

from torchrl.modules import ValueOperator
from torchrl.objectives import DiscreteIQLLoss, IQLLoss, ValueEstimators


def _member(layers, i):
    return [(w[i], b[i]) for w, b in layers]


def _perturb(tensors):
    with torch.no_grad():
        for t in tensors:
            t.add_(0.1 * torch.randn_like(t))


def _expectile_and_weights(q_t, v, expectile, temperature):
    diff = q_t - v
    weight = torch.where(diff < 0, 1 - expectile, expectile)
    value_loss = (weight * diff.pow(2)).mean()
    exp_adv = torch.exp(temperature * (q_t - v.detach())).clamp(max=100.0)
    return value_loss, exp_adv.squeeze(-1)


def test_iql_matches_reference():
    with float64():
        torch.manual_seed(0)
        actor = gaussian_actor(3, 2)
        qvalue = ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])
        value = ValueOperator(mlp(3, 1))
        td = transition_batch(10, 3, torch.randn(10, 2))
        loss = IQLLoss(actor, qvalue, value, expectile=0.7, temperature=3.0, loss_function="l2")
        loss.make_value_estimator(ValueEstimators.TD0, gamma=0.8)
        _perturb(loss.qvalue_network_params.values(True, True))  # online != target
        out = loss(td)

        critics = stacked_linears(loss.qvalue_network_params)
        critics_t = stacked_linears(loss.target_qvalue_network_params)
        obs, act = td["observation"], td["action"]
        sa = torch.cat([obs, act], -1)
        q_t = torch.minimum(*[ref_mlp(sa, _member(critics_t, i)) for i in range(2)])
        v = ref_mlp(obs, linears(value))
        value_loss, exp_adv = _expectile_and_weights(q_t, v, 0.7, 3.0)
        loc, log_scale = ref_mlp(obs, linears(actor)).chunk(2, -1)
        logp = D.Normal(loc, log_scale.exp()).log_prob(act).sum(-1)
        next_v = ref_mlp(td["next", "observation"], linears(value)).detach()
        y = td["next", "reward"] + 0.8 * (~td["next", "terminated"]).double() * next_v
        q_loss = sum((ref_mlp(sa, _member(critics, i)) - y).pow(2) for i in range(2)).mean()
        params = [
            *actor.parameters(),
            *value.parameters(),
            *loss.qvalue_network_params.values(True, True),
        ]
        assert_matches(out["loss_value"], value_loss, params, name="value")
        assert_matches(out["loss_actor"], -(exp_adv * logp).mean(), params, name="actor")
        assert_matches(out["loss_qvalue"], q_loss, params, name="qvalue")


@pytest.mark.parametrize("space", ["one_hot", "categorical"])
def test_discrete_iql_matches_reference(space):
    with float64():
        torch.manual_seed(1)
        actor = categorical_actor(3, 4, one_hot=space == "one_hot")
        qvalue = TensorDictModule(mlp(3, 4), ["observation"], ["action_value"])
        value = ValueOperator(mlp(3, 1))
        index = torch.randint(4, (10,))
        td = transition_batch(10, 3, F.one_hot(index, 4) if space == "one_hot" else index)
        loss = DiscreteIQLLoss(
            actor, qvalue, value, action_space=space, expectile=0.8, temperature=2.0
        )
        loss.make_value_estimator(ValueEstimators.TD0, gamma=0.8)
        out = loss(td)

        critics = stacked_linears(loss.qvalue_network_params)
        critics_t = stacked_linears(loss.target_qvalue_network_params)
        obs = td["observation"]

        def taken(layers, i):
            return ref_mlp(obs, _member(layers, i)).gather(-1, index[:, None])

        q_t = torch.minimum(taken(critics_t, 0), taken(critics_t, 1))
        v = ref_mlp(obs, linears(value))
        value_loss, exp_adv = _expectile_and_weights(q_t, v, 0.8, 2.0)
        logp = ref_mlp(obs, linears(actor)).log_softmax(-1).gather(-1, index[:, None]).squeeze(-1)
        next_v = ref_mlp(td["next", "observation"], linears(value)).detach()
        y = td["next", "reward"] + 0.8 * (~td["next", "terminated"]).double() * next_v
        q_loss = sum(
            F.smooth_l1_loss(taken(critics, i), y, reduction="none") for i in range(2)
        ).mean()
        params = [
            *actor.parameters(),
            *value.parameters(),
            *loss.qvalue_network_params.values(True, True),
        ]
        assert_matches(out["loss_value"], value_loss, params, name="value")
        assert_matches(out["loss_actor"], -(exp_adv * logp).mean(), params, name="actor")
        assert_matches(out["loss_qvalue"], q_loss, params, name="qvalue")


def test_iql_rejects_bad_expectile():
    with pytest.raises(ValueError, match="expectile"):
        IQLLoss(
            gaussian_actor(3, 2),
            ValueOperator(ConcatMLP(5), in_keys=["observation", "action"]),
            ValueOperator(mlp(3, 1)),
            expectile=1.5,
        )
