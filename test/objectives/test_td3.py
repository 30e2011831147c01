"""TD3 and TD3+BC losses against hand-written references (Fujimoto et al. 2018, 2021)."""

from __future__ import annotations

import pytest
import torch
from _loss_helpers import (
    ConcatMLP,
    assert_matches,
    float64,
    linears,
    mlp,
    ref_mlp,
    stacked_linears,
    transition_batch,
)

from torchrl.data import Bounded
from torchrl.modules import Actor, ValueOperator
from torchrl.objectives import SoftUpdate, TD3BCLoss, TD3Loss, ValueEstimators

LOW, HIGH = -0.6, 0.8


def _nets():
    actor = Actor(mlp(3, 2))
    critic = ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])
    return actor, critic


def _member(layers, i, detach=False):
    out = [(w[i], b[i]) for w, b in layers]
    return [(w.detach(), b.detach()) for w, b in out] if detach else out


def _perturb(*tensors):
    with torch.no_grad():
        for t in tensors:
            t.add_(0.1 * torch.randn_like(t))


def _reference_parts(loss, actor, td, seed):
    """Q(s, a) per critic, Q_1(s, pi(s)) (critics detached) and the TD3 target."""
    critics = stacked_linears(loss.qvalue_network_params)
    critics_t = stacked_linears(loss.target_qvalue_network_params)
    actor_t = stacked_linears(loss.target_actor_network_params)
    obs, nobs = td["observation"], td["next", "observation"]
    pi = ref_mlp(obs, linears(actor))
    q1_pi = ref_mlp(torch.cat([obs, pi], -1), _member(critics, 0, detach=True))
    preds = [ref_mlp(torch.cat([obs, td["action"]], -1), _member(critics, i)) for i in range(2)]
    torch.manual_seed(seed)
    next_a = ref_mlp(nobs, actor_t)
    noise = (torch.randn(next_a.shape) * 0.3).clamp(-0.25, 0.25)
    next_a = (next_a + noise).clamp(LOW, HIGH)
    next_q = torch.minimum(
        *[ref_mlp(torch.cat([nobs, next_a], -1), _member(critics_t, i)) for i in range(2)]
    )
    y = td["next", "reward"] + 0.8 * (~td["next", "terminated"]).double() * next_q
    return pi, q1_pi, preds, y


@pytest.mark.parametrize("vmap", [True, False])
def test_td3_matches_reference(vmap):
    with float64():
        torch.manual_seed(0)
        actor, critic = _nets()
        td = transition_batch(9, 3, torch.rand(9, 2) - 0.3)
        spec = Bounded(LOW, HIGH, shape=(2,))
        loss = TD3Loss(
            actor,
            critic,
            action_spec=spec,
            policy_noise=0.3,
            noise_clip=0.25,
            loss_function="l2",
            deactivate_vmap=not vmap,
        )
        loss.make_value_estimator(ValueEstimators.TD0, gamma=0.8)
        _perturb(*actor.parameters(), *loss.qvalue_network_params.values(True, True))
        torch.manual_seed(7)
        out = loss(td)
        _, q1_pi, preds, y = _reference_parts(loss, actor, td, seed=7)
        params = [*actor.parameters(), *loss.qvalue_network_params.values(True, True)]
        assert_matches(out["loss_actor"], -q1_pi.mean(), params, name="actor")
        ref_q = sum((p - y).pow(2) for p in preds).mean()
        assert_matches(out["loss_qvalue"], ref_q, params, name="qvalue")
        td_error = torch.maximum(*[(p - y).abs() for p in preds]).squeeze(-1)
        torch.testing.assert_close(td["td_error"], td_error.detach())


def test_td3_ensemble_members_differ_and_update():
    actor, critic = _nets()
    loss = TD3Loss(actor, critic, bounds=(LOW, HIGH), num_qvalue_nets=3)
    w = loss.qvalue_network_params["module", "net", "0", "weight"]
    assert w.shape[0] == 3
    assert not torch.equal(w[0], w[1])
    # The first member keeps the given network's weights; the loss owns a copy.
    torch.testing.assert_close(w[0], critic.module.net[0].weight)
    names = [n for n, _ in loss.named_parameters()]
    assert not any("target" in n for n in names)
    assert sum(n.startswith("qvalue_network_params") for n in names) == 4
    target = loss.target_qvalue_network_params["module", "net", "0", "weight"]
    with torch.no_grad():
        w.add_(1.0)
    SoftUpdate(loss, tau=0.5).step()
    torch.testing.assert_close(target, w.detach() - 0.5)
    with pytest.raises(ValueError, match="action bounds"):
        TD3Loss(actor, critic)


def test_td3bc_matches_reference():
    with float64():
        torch.manual_seed(1)
        actor, critic = _nets()
        td = transition_batch(9, 3, torch.rand(9, 2) - 0.3)
        loss = TD3BCLoss(
            actor,
            critic,
            bounds=(LOW, HIGH),
            alpha=2.0,
            policy_noise=0.3,
            noise_clip=0.25,
            loss_function="l2",
        )
        loss.make_value_estimator(ValueEstimators.TD0, gamma=0.8)
        torch.manual_seed(3)
        out = loss(td)
        pi, q1_pi, preds, y = _reference_parts(loss, actor, td, seed=3)
        lmbda = 2.0 / q1_pi.abs().mean().detach()
        ref_actor = -lmbda * q1_pi.mean() + (pi - td["action"]).pow(2).mean()
        params = [*actor.parameters(), *loss.qvalue_network_params.values(True, True)]
        assert_matches(out["loss_actor"], ref_actor, params, name="actor")
        assert_matches(out["loss_qvalue"], sum((p - y).pow(2) for p in preds).mean(), params)
        torch.testing.assert_close(out["lmbda"], lmbda)


def test_td3_action_shape_mismatch_raises():
    actor, critic = _nets()
    loss = TD3Loss(actor, critic, bounds=(LOW, HIGH))
    with pytest.raises(ValueError, match="data's action"):
        loss(transition_batch(4, 3, torch.rand(4, 1)))
