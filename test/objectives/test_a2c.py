"""A2C loss against a hand-written reference (Mnih et al. 2016)."""

from __future__ import annotations

import pytest
import torch
from _loss_helpers import (
    assert_matches,
    categorical_actor,
    float64,
    linears,
    mlp,
    ref_gae,
    ref_mlp,
    trajectory_batch,
)
from torch.nn import functional as F

from torchrl.modules import ValueOperator
from torchrl.objectives import A2CLoss, ValueEstimators


@pytest.mark.parametrize("loss_critic_type", ["l2", "smooth_l1"])
def test_a2c_matches_reference(loss_critic_type):
    with float64():
        torch.manual_seed(0)
        actor = categorical_actor(3, 4)
        critic = ValueOperator(mlp(3, 1))
        td = trajectory_batch(3, 6, 3)
        index = torch.randint(4, (3, 6))
        td["action"] = F.one_hot(index, 4)
        loss = A2CLoss(
            actor, critic, entropy_coef=0.05, critic_coef=0.5, loss_critic_type=loss_critic_type
        )
        loss.make_value_estimator(ValueEstimators.GAE, gamma=0.95, lmbda=0.9)
        out = loss(td.clone())

        logits = ref_mlp(td["observation"], linears(actor))
        log_p = logits.log_softmax(-1)
        logp_taken = log_p.gather(-1, index.unsqueeze(-1)).squeeze(-1)
        layers = linears(critic)
        value = ref_mlp(td["observation"], layers)
        next_value = ref_mlp(td["next", "observation"], layers).detach()
        nxt = td["next"]
        adv = ref_gae(
            0.95, 0.9, value.detach(), next_value, nxt["reward"], nxt["done"], nxt["terminated"]
        )
        target = adv + value.detach()
        entropy = -(log_p.exp() * log_p).sum(-1)
        if loss_critic_type == "l2":
            critic_loss = (value - target).pow(2).mean()
        else:
            critic_loss = F.smooth_l1_loss(value, target)
        params = [*actor.parameters(), *critic.parameters()]
        assert_matches(out["loss_objective"], -(logp_taken * adv.squeeze(-1)).mean(), params)
        assert_matches(out["loss_entropy"], -0.05 * entropy.mean(), params)
        assert_matches(out["loss_critic"], 0.5 * critic_loss, params)
        torch.testing.assert_close(out["entropy"], entropy.mean())


def test_a2c_reduction_none_and_given_advantage():
    actor = categorical_actor(3, 2)
    td = trajectory_batch(2, 4, 3)
    td["action"] = F.one_hot(torch.randint(2, (2, 4)), 2)
    td["advantage"] = torch.randn(2, 4, 1)
    loss = A2CLoss(actor, reduction="none", entropy_bonus=False)
    out = loss(td)
    assert out["loss_objective"].shape == (2, 4)
    assert loss.out_keys == ["loss_objective"]
    with pytest.raises(KeyError, match="advantage"):
        loss(td.exclude("advantage"))
