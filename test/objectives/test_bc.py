"""Behavioural cloning against hand-written references."""

from __future__ import annotations

import pytest
import torch
from _loss_helpers import (
    assert_matches,
    float64,
    gaussian_actor,
    linears,
    mlp,
    ref_mlp,
)
from tensordict import TensorDict
from torch import distributions as D
from torch.nn import functional as F

from torchrl.modules import Actor
from torchrl.objectives import BCLoss


def _data():
    return TensorDict(observation=torch.randn(7, 3), action=torch.randn(7, 2), batch_size=[7])


@pytest.mark.parametrize("loss_function", ["l2", "l1", "smooth_l1"])
def test_deterministic_bc_matches_reference(loss_function):
    with float64():
        torch.manual_seed(0)
        actor = Actor(mlp(3, 2))
        td = _data()
        out = BCLoss(actor, loss_function=loss_function)(td)
        pred = ref_mlp(td["observation"], linears(actor))
        ref = {
            "l2": F.mse_loss(pred, td["action"]),
            "l1": F.l1_loss(pred, td["action"]),
            "smooth_l1": F.smooth_l1_loss(pred, td["action"]),
        }[loss_function]
        assert_matches(out["loss_bc"], ref, list(actor.parameters()))


def test_probabilistic_bc_matches_reference():
    with float64():
        torch.manual_seed(0)
        actor = gaussian_actor(3, 2)
        td = _data()
        loss = BCLoss(actor)
        assert loss.probabilistic
        out = loss(td)
        loc, log_scale = ref_mlp(td["observation"], linears(actor)).chunk(2, -1)
        nll = -D.Normal(loc, log_scale.exp()).log_prob(td["action"]).sum(-1).mean()
        assert_matches(out["loss_bc"], nll, list(actor.parameters()))


def test_bc_errors():
    loss = BCLoss(Actor(mlp(3, 2)))
    with pytest.raises(KeyError, match="BCLoss.*action"):
        loss(TensorDict(observation=torch.randn(4, 3), batch_size=[4]))
    td = TensorDict(observation=torch.randn(4, 3), action=torch.randn(4, 3), batch_size=[4])
    with pytest.raises(ValueError, match="shape"):
        loss(td)
    with pytest.raises(TypeError, match="get_dist"):
        BCLoss(Actor(mlp(3, 2)), probabilistic=True)
    none = BCLoss(Actor(mlp(3, 2)), reduction="none")(_data())
    assert none["loss_bc"].shape == (7,)
