"""GAILLoss against hand-written references: the BCE, the gradient penalty, the reward."""

from __future__ import annotations

import pytest
import torch
from _loss_helpers import ConcatMLP, assert_matches, float64
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.objectives.gail import GAILLoss


class _Disc(nn.Module):
    """D(s, a) = sigmoid(MLP([s, a]))."""

    def __init__(self, n_in: int) -> None:
        super().__init__()
        self.net = ConcatMLP(n_in)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net(*inputs))


def _disc(in_keys=("observation", "action"), n_in: int = 5, out_key="d_logits"):
    return TensorDictModule(_Disc(n_in), in_keys=list(in_keys), out_keys=[out_key])


def _data(batch=(6,)):
    return TensorDict(
        observation=torch.randn(*batch, 3),
        action=torch.randn(*batch, 2),
        collector_observation=torch.randn(*batch, 3) + 1.0,
        collector_action=torch.randn(*batch, 2),
        batch_size=list(batch),
    )


def _d(disc, obs, act):
    return disc.module(obs, act).squeeze(-1)


def test_gail_loss_matches_bce_reference():
    with float64():
        torch.manual_seed(0)
        disc = _disc()
        td = _data()
        out = GAILLoss(disc)(td)
        assert set(out.keys()) == {"loss"}
        d_e = _d(disc, td["observation"], td["action"])
        d_c = _d(disc, td["collector_observation"], td["collector_action"])
        bce = nn.functional.binary_cross_entropy
        ref = bce(torch.cat([d_e, d_c]), torch.cat([torch.zeros(6), torch.ones(6)]))
        assert_matches(out["loss"], ref, list(disc.parameters()))


def test_gail_reduction_and_batch_shapes():
    torch.manual_seed(0)
    disc = _disc()
    td = _data(batch=(2, 3))
    per_sample = GAILLoss(disc, reduction="none")(td)["loss"]
    assert per_sample.shape == (2, 3)
    total = GAILLoss(disc, reduction="sum")(td)["loss"]
    mean = GAILLoss(disc)(td)["loss"]
    torch.testing.assert_close(total, per_sample.sum())
    torch.testing.assert_close(mean, per_sample.mean())


def test_gail_gradient_penalty_matches_reference():
    with float64():
        torch.manual_seed(0)
        disc = _disc()
        td = _data()
        loss = GAILLoss(disc, use_grad_penalty=True, gp_lambda=3.0)
        assert loss.out_keys == ["loss", "gp_loss"]
        torch.manual_seed(1)
        out = loss(td)
        torch.manual_seed(1)
        alpha = torch.rand(6, 1)
        obs = alpha * td["observation"] + (1 - alpha) * td["collector_observation"]
        act = alpha * td["action"] + (1 - alpha) * td["collector_action"]
        obs.requires_grad_(True)
        act.requires_grad_(True)
        g_obs, g_act = torch.autograd.grad(_d(disc, obs, act).sum(), [obs, act], create_graph=True)
        norm = torch.cat([g_obs, g_act], -1).norm(dim=-1)
        gp = (3.0 * (norm - 1) ** 2).mean()
        base = GAILLoss(disc)(td)["loss"]
        assert_matches(out["loss"], base + gp, list(disc.parameters()), atol=1e-6)
        torch.testing.assert_close(out["gp_loss"], gp.detach(), atol=1e-6, rtol=1e-6)
        assert not out["gp_loss"].requires_grad


def test_gail_state_only_discriminator_and_set_keys():
    torch.manual_seed(0)
    disc = _disc(in_keys=("obs",), n_in=3, out_key="p")
    loss = GAILLoss(disc)
    # The discriminator's out key is adopted; its in key must be an expert key.
    assert loss.tensor_keys.discriminator_pred == "p"
    td = TensorDict(obs=torch.randn(4, 3), agent_obs=torch.randn(4, 3), batch_size=[4])
    with pytest.raises(ValueError, match="neither the expert observation"):
        loss(td)
    loss.set_keys(expert_observation="obs", collector_observation="agent_obs")
    assert loss.in_keys == ["obs", "agent_obs"]
    out = loss(td)
    d_e, d_c = disc.module(td["obs"]), disc.module(td["agent_obs"])
    ref = -(torch.log(1 - d_e) + torch.log(d_c)).mean() / 2
    torch.testing.assert_close(out["loss"], ref)


def test_gail_training_separates_expert_from_collector():
    torch.manual_seed(0)
    disc = _disc(in_keys=("observation",), n_in=3)
    loss = GAILLoss(disc, use_grad_penalty=True, gp_lambda=1.0)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    expert = TensorDict(observation=torch.randn(64, 3) + 2.0, batch_size=[64])
    agent = TensorDict(observation=torch.randn(64, 3) - 2.0, batch_size=[64])
    td = expert.clone()
    td["collector_observation"] = agent["observation"]
    before = loss(td)["loss"].item()
    for _ in range(100):
        optim.zero_grad()
        loss(td)["loss"].backward()
        optim.step()
    assert loss(td)["loss"].item() < before
    # The expert's transitions earn a higher reward than the collector's, of either kind.
    for kind in ("logit", "neg_log"):
        assert loss.reward(expert, kind=kind).mean() > loss.reward(agent, kind=kind).mean()
    assert (loss.reward(expert) > 0).float().mean() > 0.9
    assert (loss.reward(agent) < 0).float().mean() > 0.9
    assert (loss.reward(agent, kind="neg_log") > 0).all()


def test_gail_reward_values():
    torch.manual_seed(0)
    disc = _disc()
    loss = GAILLoss(disc)
    td = _data(batch=(2, 3))
    d = disc.module(td["observation"], td["action"])
    torch.testing.assert_close(loss.reward(td), torch.log(1 - d) - torch.log(d))
    torch.testing.assert_close(loss.reward(td, kind="neg_log"), -torch.log(d))
    assert loss.reward(td).shape == (2, 3, 1)
    assert not loss.reward(td).requires_grad
    assert "d_logits" not in td.keys()  # the caller's data is left untouched


def test_gail_errors():
    with pytest.raises(TypeError, match="TensorDict module"):
        GAILLoss(nn.Linear(3, 1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gp_lambda"):
        GAILLoss(_disc(), gp_lambda=-1.0)
    with pytest.raises(ValueError, match="reduction"):
        GAILLoss(_disc(), reduction="max")
    loss = GAILLoss(_disc())
    td = _data()
    with pytest.raises(ValueError, match="neither the expert"):
        td2 = td.clone().set("other", torch.randn(6, 2))
        GAILLoss(_disc(in_keys=("observation", "other")))(td2)
    with pytest.raises(KeyError, match="GAILLoss.*collector_action"):
        loss(td.exclude("collector_action"))
    bad = td.clone()
    bad["collector_action"] = torch.randn(6, 3)
    with pytest.raises(ValueError, match="collector 'collector_action' has shape"):
        loss(bad)
    with pytest.raises(ValueError, match="kind"):
        loss.reward(td, kind="exp")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="GAILLoss.*action"):
        loss.reward(td.exclude("action"))
