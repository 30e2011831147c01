"""REINFORCE against a hand-written reference (Williams 1992, with a learned baseline)."""

from __future__ import annotations

import torch
from _loss_helpers import (
    assert_matches,
    float64,
    gaussian_actor,
    linears,
    mlp,
    ref_mlp,
    trajectory_batch,
)
from torch import distributions as D

from torchrl.modules import ValueOperator
from torchrl.objectives import ReinforceLoss, SoftUpdate, ValueEstimators


def _ref_td1(gamma, next_value, reward, done, terminated):
    """Discounted returns, bootstrapped at truncations and at the end of each row."""
    ret = torch.zeros_like(reward)
    steps = reward.shape[-2]
    for t in reversed(range(steps)):
        boot = torch.where(terminated[..., t, :], 0.0, next_value[..., t, :])
        if t == steps - 1:
            follow = boot
        else:
            follow = torch.where(done[..., t, :], boot, ret[..., t + 1, :])
        ret[..., t, :] = reward[..., t, :] + gamma * follow
    return ret


def test_reinforce_with_td1_baseline_matches_reference():
    with float64():
        torch.manual_seed(0)
        actor = gaussian_actor(3, 2)
        critic = ValueOperator(mlp(3, 1))
        td = trajectory_batch(2, 8, 3)
        td["action"] = torch.randn(2, 8, 2)
        loss = ReinforceLoss(actor, critic, delay_value=True, loss_critic_type="l2")
        loss.make_value_estimator(ValueEstimators.TD1, gamma=0.9)
        # Make the target critic differ from the online one: the returns use the target.
        with torch.no_grad():
            for w in critic.parameters():
                w.add_(0.1 * torch.randn_like(w))
        out = loss(td.clone())

        out_actor = ref_mlp(td["observation"], linears(actor))
        loc, log_scale = out_actor.chunk(2, -1)
        logp = D.Normal(loc, log_scale.exp()).log_prob(td["action"]).sum(-1)
        layers = linears(critic)
        tp = loss.target_critic_network_params
        target_layers = [
            (tp["module", "0", "weight"], tp["module", "0", "bias"]),
            (tp["module", "2", "weight"], tp["module", "2", "bias"]),
        ]
        value = ref_mlp(td["observation"], layers)
        next_value = ref_mlp(td["next", "observation"], target_layers)
        nxt = td["next"]
        returns = _ref_td1(0.9, next_value, nxt["reward"], nxt["done"], nxt["terminated"])
        adv = returns - value.detach()
        params = [*actor.parameters(), *critic.parameters()]
        assert_matches(out["loss_actor"], -(logp * adv.squeeze(-1)).mean(), params)
        assert_matches(out["loss_value"], (value - returns).pow(2).mean(), params)
        SoftUpdate(loss, tau=1.0).step()
        torch.testing.assert_close(tp["module", "0", "weight"], critic.module[0].weight.detach())
