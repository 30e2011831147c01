"""Decision-transformer losses against hand-written references."""

from __future__ import annotations

import math

import torch
from _loss_helpers import assert_matches, float64, gaussian_actor, linears, ref_mlp
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import distributions as D

from torchrl.modules import DTActor, DTConfig
from torchrl.objectives import DTLoss, OnlineDTLoss


def test_dt_loss_matches_reference():
    with float64():
        torch.manual_seed(0)
        net = DTActor(
            3,
            2,
            DTConfig(n_embd=8, n_layer=1, n_head=2, n_inner=16, resid_pdrop=0.0, attn_pdrop=0.0),
        )
        actor = TensorDictModule(net, ["observation", "action", "return_to_go"], ["action"])
        td = TensorDict(
            observation=torch.randn(2, 5, 3),
            action=torch.rand(2, 5, 2) * 2 - 1,
            return_to_go=torch.randn(2, 5, 1),
            batch_size=[2, 5],
        )
        loss = DTLoss(actor)
        out = loss(td.clone())
        pred = net(td["observation"], td["action"], td["return_to_go"])
        ref = (pred - td["action"]).pow(2).mean()
        assert_matches(out["loss"], ref, list(net.parameters()))
        # The target is read before the actor overwrites the same key.
        assert float(out["loss"].detach()) > 0


def test_online_dt_loss_matches_reference():
    with float64():
        torch.manual_seed(0)
        actor = gaussian_actor(3, 2)
        td = TensorDict(
            observation=torch.randn(2, 5, 3), action=torch.randn(2, 5, 2), batch_size=[2, 5]
        )
        loss = OnlineDTLoss(actor, alpha_init=0.2, target_entropy=-1.0)
        out = loss(td)
        loc, log_scale = ref_mlp(td["observation"], linears(actor)).chunk(2, -1)
        dist = D.Normal(loc, log_scale.exp())
        logp = dist.log_prob(td["action"]).sum(-1)
        entropy = dist.entropy().sum(-1)
        params = [*actor.parameters(), loss.log_alpha]
        assert_matches(out["loss_log_likelihood"], -logp.mean(), params)
        assert_matches(out["loss_entropy"], -0.2 * entropy.mean(), params)
        ref_alpha = (loss.log_alpha.exp() * (entropy.detach() + 1.0)).mean()
        assert_matches(out["loss_alpha"], ref_alpha, params)
        torch.testing.assert_close(out["alpha"], torch.tensor(0.2, dtype=torch.float64))
        assert math.isclose(float(out["entropy"]), float(entropy.mean().detach()))
