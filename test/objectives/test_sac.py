"""SAC losses against hand-written references (Haarnoja et al. 2018; Christodoulou 2019)."""

from __future__ import annotations

import math

import pytest
import torch
from _loss_helpers import (
    ConcatMLP,
    FixedNoiseTanhNormal,
    assert_matches,
    categorical_actor,
    float64,
    gaussian_actor,
    linears,
    mlp,
    ref_mlp,
    ref_tanh_sample,
    stacked_linears,
    transition_batch,
)
from tensordict.nn import TensorDictModule
from torch.nn import functional as F

from torchrl.data import Bounded
from torchrl.modules import ValueOperator
from torchrl.objectives import DiscreteSACLoss, SACLoss, SoftUpdate, ValueEstimators

GAMMA = 0.8


def _member(layers, i, detach=False):
    out = [(w[i], b[i]) for w, b in layers]
    return [(w.detach(), b.detach()) for w, b in out] if detach else out


def _policy(actor, obs, detach=False):
    out = ref_mlp(obs, linears(actor))
    if detach:
        out = out.detach()
    loc, log_scale = out.chunk(2, -1)
    return loc, log_scale.exp()


def _q(layers, obs, action, i, detach=False):
    return ref_mlp(torch.cat([obs, action], -1), _member(layers, i, detach))


def _sac_nets():
    actor = gaussian_actor(3, 2, distribution_class=FixedNoiseTanhNormal)
    qvalue = ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])
    return actor, qvalue


@pytest.mark.parametrize("fixed_alpha", [False, True])
def test_sac_v2_matches_reference(fixed_alpha):
    with float64():
        torch.manual_seed(0)
        actor, qvalue = _sac_nets()
        td = transition_batch(8, 3, torch.rand(8, 2) * 1.6 - 0.8)
        loss = SACLoss(
            actor,
            qvalue,
            alpha_init=0.7,
            fixed_alpha=fixed_alpha,
            action_spec=Bounded(-1.0, 1.0, shape=(2,)),
            loss_function="l2",
        )
        assert loss.target_entropy == -2.0
        loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
        out = loss(td)

        critics = stacked_linears(loss.qvalue_network_params)
        critics_t = stacked_linears(loss.target_qvalue_network_params)
        obs, nobs = td["observation"], td["next", "observation"]
        alpha = 0.7
        action, logp = ref_tanh_sample(*_policy(actor, obs))
        logp = logp.unsqueeze(-1)
        min_q_pi = torch.minimum(*[_q(critics, obs, action, i, detach=True) for i in range(2)])
        ref_actor = (alpha * logp - min_q_pi).mean()
        next_action, next_logp = ref_tanh_sample(*_policy(actor, nobs, detach=True))
        next_q = torch.minimum(*[_q(critics_t, nobs, next_action, i) for i in range(2)])
        next_v = next_q - alpha * next_logp.unsqueeze(-1)
        y = td["next", "reward"] + GAMMA * (~td["next", "terminated"]).double() * next_v
        ref_q = sum((_q(critics, obs, td["action"], i) - y).pow(2) for i in range(2)).mean()
        params = [*actor.parameters(), *loss.qvalue_network_params.values(True, True)]
        if not fixed_alpha:
            params.append(loss.log_alpha)
        assert_matches(out["loss_actor"], ref_actor, params, name="actor")
        assert_matches(out["loss_qvalue"], ref_q, params, name="qvalue")
        if fixed_alpha:
            assert not out["loss_alpha"].requires_grad
            assert "log_alpha" not in dict(loss.named_parameters())
        else:
            ref_alpha = -(loss.log_alpha * (logp.detach() - 2.0)).mean()
            assert_matches(out["loss_alpha"], ref_alpha, params, name="alpha")
        torch.testing.assert_close(out["entropy"], -logp.mean().detach())
        torch.testing.assert_close(out["alpha"], torch.tensor(alpha, dtype=torch.float64))


def test_sac_v1_matches_reference():
    with float64():
        torch.manual_seed(1)
        actor, qvalue = _sac_nets()
        value = ValueOperator(mlp(3, 1))
        td = transition_batch(8, 3, torch.rand(8, 2) * 1.6 - 0.8)
        loss = SACLoss(actor, qvalue, value, alpha_init=0.5, target_entropy=-1.5)
        loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
        with torch.no_grad():  # online value != target value
            for p in value.parameters():
                p.add_(0.1 * torch.randn_like(p))
        out = loss(td)
        critics = stacked_linears(loss.qvalue_network_params)
        obs = td["observation"]
        action, logp = ref_tanh_sample(*_policy(actor, obs))
        logp = logp.unsqueeze(-1)
        min_q_pi = torch.minimum(*[_q(critics, obs, action, i, detach=True) for i in range(2)])
        v_target_net = stacked_linears(loss.target_value_network_params)
        y = td["next", "reward"] + GAMMA * (~td["next", "terminated"]).double() * ref_mlp(
            td["next", "observation"], v_target_net
        )
        q_loss = sum(
            F.smooth_l1_loss(_q(critics, obs, td["action"], i), y, reduction="none")
            for i in range(2)
        ).mean()
        v = ref_mlp(obs, linears(value))
        v_loss = F.smooth_l1_loss(v, (min_q_pi - 0.5 * logp).detach())
        params = [
            *actor.parameters(),
            *value.parameters(),
            *loss.qvalue_network_params.values(True, True),
        ]
        assert_matches(out["loss_actor"], (0.5 * logp - min_q_pi).mean(), params, name="actor")
        assert_matches(out["loss_qvalue"], q_loss, params, name="qvalue")
        assert_matches(out["loss_value"], v_loss, params, name="value")
        SoftUpdate(loss, tau=0.1).step()


def test_sac_with_tanh_normal_and_errors():
    from torchrl.modules import TanhNormal

    actor = gaussian_actor(3, 2, distribution_class=TanhNormal)
    qvalue = ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])
    with pytest.raises(ValueError, match="target_entropy='auto'"):
        SACLoss(actor, qvalue)
    loss = SACLoss(actor, qvalue, target_entropy=-2.0, num_qvalue_nets=3, min_alpha=0.1)
    td = transition_batch(6, 3, torch.rand(6, 2) - 0.5)
    out = loss(td)
    total = sum(v for k, v in out.items() if k.startswith("loss_"))
    total.backward()
    assert loss.log_alpha.grad is not None
    with pytest.raises(TypeError, match="probabilistic actor"):
        SACLoss(qvalue, qvalue, target_entropy=-1.0)
    with torch.no_grad():
        loss.log_alpha.fill_(math.log(0.01))
    torch.testing.assert_close(loss.alpha, torch.tensor(0.1))


@pytest.mark.parametrize("space", ["one_hot", "categorical"])
def test_discrete_sac_matches_reference(space):
    with float64():
        torch.manual_seed(2)
        actor = categorical_actor(3, 4, one_hot=space == "one_hot")
        qvalue = TensorDictModule(mlp(3, 4), ["observation"], ["action_value"])
        index = torch.randint(4, (8,))
        action = F.one_hot(index, 4) if space == "one_hot" else index
        td = transition_batch(8, 3, action)
        loss = DiscreteSACLoss(
            actor, qvalue, action_space=space, num_actions=4, alpha_init=0.3, loss_function="l2"
        )
        loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
        out = loss(td)

        critics = stacked_linears(loss.qvalue_network_params)
        critics_t = stacked_linears(loss.target_qvalue_network_params)
        obs, nobs = td["observation"], td["next", "observation"]
        log_p = ref_mlp(obs, linears(actor)).log_softmax(-1)
        p = log_p.exp()
        q_min = torch.minimum(*[ref_mlp(obs, _member(critics, i, True)) for i in range(2)])
        ref_actor = (p * (0.3 * log_p - q_min)).sum(-1).mean()
        next_log_p = ref_mlp(nobs, linears(actor)).log_softmax(-1).detach()
        next_q = torch.minimum(*[ref_mlp(nobs, _member(critics_t, i)) for i in range(2)])
        next_v = (next_log_p.exp() * (next_q - 0.3 * next_log_p)).sum(-1, keepdim=True)
        y = td["next", "reward"] + GAMMA * (~td["next", "terminated"]).double() * next_v
        preds = [ref_mlp(obs, _member(critics, i)).gather(-1, index[:, None]) for i in range(2)]
        ref_q = sum((pr - y).pow(2) for pr in preds).mean()
        entropy = -(p * log_p).sum(-1)
        target_entropy = 0.98 * math.log(4)
        ref_alpha = (loss.log_alpha * (entropy.detach() - target_entropy)).mean()
        params = [
            *actor.parameters(),
            *loss.qvalue_network_params.values(True, True),
            loss.log_alpha,
        ]
        assert_matches(out["loss_actor"], ref_actor, params, name="actor")
        assert_matches(out["loss_qvalue"], ref_q, params, name="qvalue")
        assert_matches(out["loss_alpha"], ref_alpha, params, name="alpha")
        torch.testing.assert_close(out["entropy"], entropy.mean().detach())


def test_sac_action_shape_mismatch_raises_before_gradients():
    actor, qvalue = _sac_nets()
    loss = SACLoss(actor, qvalue, target_entropy=-2.0)
    td = transition_batch(4, 3, torch.rand(4, 3) - 0.5)  # 3 action dims, the policy has 2
    with pytest.raises(ValueError, match="data's action 'action' has shape"):
        loss(td)
    assert all(p.grad is None for p in loss.parameters())
