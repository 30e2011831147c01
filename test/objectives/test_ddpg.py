"""DDPG loss against a hand-written reference (Lillicrap et al. 2016)."""

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

from torchrl.modules import Actor, ValueOperator
from torchrl.objectives import DDPGLoss, ValueEstimators


def _detached(layers):
    return [(w.detach(), b.detach()) for w, b in layers]


@pytest.mark.parametrize("delay_actor", [False, True])
def test_ddpg_matches_reference(delay_actor):
    with float64():
        torch.manual_seed(0)
        actor = Actor(mlp(3, 2))
        critic = ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])
        td = transition_batch(9, 3, torch.randn(9, 2))
        loss = DDPGLoss(actor, critic, delay_actor=delay_actor, loss_function="l2")
        loss.make_value_estimator(ValueEstimators.TD0, gamma=0.8)
        with torch.no_grad():  # online != target
            for p in [*actor.parameters(), *critic.parameters()]:
                p.add_(0.1 * torch.randn_like(p))
        out = loss(td)

        actor_l, critic_l = linears(actor), linears(critic)
        obs, nobs = td["observation"], td["next", "observation"]
        q_actor = ref_mlp(torch.cat([obs, ref_mlp(obs, actor_l)], -1), _detached(critic_l))
        pred = ref_mlp(torch.cat([obs, td["action"]], -1), critic_l)
        actor_t = (
            stacked_linears(loss.target_actor_network_params) if delay_actor else _detached(actor_l)
        )
        critic_t = stacked_linears(loss.target_value_network_params)
        next_q = ref_mlp(torch.cat([nobs, ref_mlp(nobs, actor_t)], -1), critic_t)
        y = td["next", "reward"] + 0.8 * (~td["next", "terminated"]).double() * next_q
        params = [*actor.parameters(), *critic.parameters()]
        assert_matches(out["loss_actor"], -q_actor.mean(), params, name="actor")
        assert_matches(out["loss_value"], (pred - y).pow(2).mean(), params, name="value")
        torch.testing.assert_close(out["target_value"], y.mean())
        torch.testing.assert_close(td["td_error"], (pred - y).abs().squeeze(-1).detach())


def test_ddpg_missing_key():
    actor = Actor(mlp(3, 2))
    critic = ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])
    loss = DDPGLoss(actor, critic)
    assert ("next", "observation") in loss.in_keys
    assert ("next", "action") not in loss.in_keys
    td = transition_batch(4, 3, torch.randn(4, 2))
    with pytest.raises(KeyError, match="DDPGLoss.*action"):
        loss(td.exclude("action"))
