"""CrossQ loss against a hand-written reference (Bhatt et al. 2024): joint batch norm, no target."""

from __future__ import annotations

import copy

import pytest
import torch
from _loss_helpers import (
    ConcatMLP,
    FixedNoiseTanhNormal,
    assert_matches,
    float64,
    gaussian_actor,
    linears,
    ref_mlp,
    ref_tanh_sample,
    transition_batch,
)
from tensordict.nn import TensorDictModule
from torch import nn
from torch.nn import functional as F

from torchrl.modules import BatchRenorm1d, ValueOperator
from torchrl.objectives import SoftUpdate, ValueEstimators
from torchrl.objectives.crossq import CrossQLoss

GAMMA = 0.8
EPS = 1e-5


class NormedCritic(nn.Module):
    """Q(s, a) = Linear(tanh(Linear(BatchRenorm(cat(s, a)))))."""

    def __init__(self, n_in: int, hidden: int = 4) -> None:
        super().__init__()
        self.norm = BatchRenorm1d(n_in)
        self.l1 = nn.Linear(n_in, hidden)
        self.l2 = nn.Linear(hidden, 1)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.l1(self.norm(torch.cat(inputs, -1)))))


def _nets():
    actor = gaussian_actor(3, 2, distribution_class=FixedNoiseTanhNormal)
    qvalue = ValueOperator(NormedCritic(5), in_keys=["observation", "action"])
    return actor, qvalue


def _policy(actor, obs, detach=False):
    out = ref_mlp(obs, linears(actor))
    if detach:
        out = out.detach()
    loc, log_scale = out.chunk(2, -1)
    return loc, log_scale.exp()


def _critic(params, i, x, mean=None, var=None, detach=False):
    """Member ``i`` of the stacked critics; batch statistics of ``x`` unless given."""
    p = {k: v[i].detach() if detach else v[i] for k, v in params.items(True, True)}
    if mean is None:
        mean, var = x.mean(0), x.var(0, unbiased=False)
    h = (x - mean) / (var + EPS).sqrt() * p["module", "norm", "weight"] + p[
        "module", "norm", "bias"
    ]
    h = torch.tanh(F.linear(h, p["module", "l1", "weight"], p["module", "l1", "bias"]))
    return F.linear(h, p["module", "l2", "weight"], p["module", "l2", "bias"])


def _batch():
    action = torch.linspace(-0.8, 0.8, 16).reshape(8, 2)
    return transition_batch(8, 3, action)


def _loss(**kwargs):
    actor, qvalue = _nets()
    kwargs.setdefault("alpha_init", 0.7)
    kwargs.setdefault("target_entropy", -2.0)
    kwargs.setdefault("loss_function", "l2")
    loss = CrossQLoss(actor, qvalue, **kwargs)
    loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
    return loss, actor


@pytest.mark.parametrize("deactivate_vmap", [False, True])
def test_crossq_matches_reference(deactivate_vmap):
    with float64():
        torch.manual_seed(0)
        loss, actor = _loss(num_qvalue_nets=3, deactivate_vmap=deactivate_vmap)
        params = loss.qvalue_network_params
        with torch.no_grad():  # non-trivial normalisation affine terms
            for key in (("module", "norm", "weight"), ("module", "norm", "bias")):
                params.get(key).add_(0.3 * torch.randn_like(params.get(key)))
        td = _batch()
        out = loss(td)

        alpha = 0.7
        obs, nobs = td["observation"], td["next", "observation"]
        next_action, next_logp = ref_tanh_sample(*_policy(actor, nobs, detach=True))
        x = torch.cat([obs, td["action"]], -1)
        x_next = torch.cat([nobs, next_action], -1)
        joint = torch.cat([x, x_next], 0)
        q_joint = [_critic(params, i, joint) for i in range(3)]
        pred = [q[:8] for q in q_joint]
        q_next = torch.stack([q[8:].detach() for q in q_joint]).min(0).values
        y = td["next", "reward"] + GAMMA * (~td["next", "terminated"]).double() * (
            q_next - alpha * next_logp.unsqueeze(-1)
        )
        ref_q = sum((p - y).pow(2) for p in pred).mean()

        # The running statistics moved by 1% towards the joint batch's (unbiased variance).
        mean = 0.01 * joint.mean(0)
        var = 0.99 + 0.01 * joint.var(0, unbiased=True)
        for i in range(3):
            torch.testing.assert_close(params["module", "norm", "running_mean"][i], mean)
            torch.testing.assert_close(params["module", "norm", "running_var"][i], var)
        action, logp = ref_tanh_sample(*_policy(actor, obs))
        logp = logp.unsqueeze(-1)
        x_pi = torch.cat([obs, action], -1)
        q_pi = torch.stack([_critic(params, i, x_pi, mean, var, detach=True) for i in range(3)])
        ref_actor = (alpha * logp - q_pi.min(0).values).mean()
        ref_alpha = -(loss.log_alpha * (logp.detach() - 2.0)).mean()

        check = [*actor.parameters(), *params.values(True, True), loss.log_alpha]
        check = [p for p in check if p.requires_grad]
        assert_matches(out["loss_qvalue"], ref_q, check, name="qvalue")
        assert_matches(out["loss_actor"], ref_actor, check, name="actor")
        assert_matches(out["loss_alpha"], ref_alpha, check, name="alpha")
        torch.testing.assert_close(out["entropy"], -logp.mean().detach())
        assert sorted(td.keys()) == sorted(["observation", "action", "next", "td_error"])
        assert td["td_error"].shape == (8,)


def test_crossq_has_no_target_network():
    loss, _ = _loss()
    assert loss.target_network_names == []
    assert not any("target" in k for k in loss.state_dict())
    with pytest.raises(ValueError, match="no target parameters"):
        SoftUpdate(loss, tau=0.01)


def test_crossq_gradients_reach_the_right_params():
    torch.manual_seed(1)
    loss, actor = _loss()
    out = loss(_batch())
    actor_params = list(actor.parameters())
    critic_params = [p for p in loss.qvalue_network_params.values(True, True) if p.requires_grad]
    groups = {"actor": actor_params, "critic": critic_params, "alpha": [loss.log_alpha]}
    expected = {"loss_qvalue": "critic", "loss_actor": "actor", "loss_alpha": "alpha"}
    for name, owner in expected.items():
        for group, ps in groups.items():
            got = torch.autograd.grad(out[name], ps, retain_graph=True, allow_unused=True)
            nonzero = any(g is not None and g.abs().sum() > 0 for g in got)
            assert nonzero == (group == owner), (name, group)
    assert not out["alpha"].requires_grad and not out["entropy"].requires_grad


def test_crossq_public_terms_match_forward():
    torch.manual_seed(2)
    loss, _ = _loss()
    other = copy.deepcopy(loss)
    out = loss(_batch())
    loss_q, info_q = other.qvalue_loss(_batch())
    loss_pi, info_pi = other.actor_loss(_batch())
    torch.testing.assert_close(loss_q, out["loss_qvalue"])
    torch.testing.assert_close(loss_pi, out["loss_actor"])
    torch.testing.assert_close(other.alpha_loss(info_pi["log_prob"]), out["loss_alpha"])
    assert info_q["td_error"].shape == (8, 1)


def test_crossq_eval_mode_keeps_running_statistics():
    loss, _ = _loss()
    loss.eval()
    before = loss.qvalue_network_params.clone()
    loss(_batch())
    assert (loss.qvalue_network_params == before).all()
    loss.train()
    loss(_batch())
    assert not (loss.qvalue_network_params == before).all()
    # the template's own mode is restored after each call
    assert loss.qvalue_network.training


def test_crossq_reduction_none_and_renamed_keys():
    loss, _ = _loss(reduction="none")
    loss.set_keys(reward="r")
    assert ("next", "r") in loss.in_keys
    td = _batch()
    td["next", "r"] = td["next"].pop("reward")
    out = loss(td)
    assert out["loss_qvalue"].shape == (8, 1) and out["loss_actor"].shape == (8, 1)
    # several batch dims: the normalisation runs over all of them, the halves split on the first
    out = loss(td.reshape(4, 2))
    assert out["loss_qvalue"].shape == (4, 2, 1) and out["loss_actor"].shape == (4, 2, 1)
    torch.testing.assert_close(
        out["loss_qvalue"].reshape(8, 1).mean(), loss(td)["loss_qvalue"].mean()
    )


def test_crossq_without_normalisation_runs():
    actor = gaussian_actor(3, 2, distribution_class=FixedNoiseTanhNormal)
    qvalue = ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])
    out = CrossQLoss(actor, qvalue, target_entropy=-2.0)(_batch())
    assert torch.isfinite(out["loss_qvalue"])


def test_crossq_bad_inputs():
    loss, _ = _loss()
    td = _batch()
    del td["next", "reward"]
    with pytest.raises(KeyError, match="reward"):
        loss(td)
    td = _batch()
    td["action"] = torch.zeros(8, 3)
    with pytest.raises(ValueError, match="shape"):
        loss(td)
    with pytest.raises(ValueError, match="no batch dimension"):
        loss(_batch()[0])
    with pytest.raises(NotImplementedError, match="GAE"):
        loss.make_value_estimator(ValueEstimators.GAE)
    actor, qvalue = _nets()
    with pytest.raises(ValueError, match="reduction"):
        CrossQLoss(actor, qvalue, target_entropy=-1.0, reduction="max")
    deterministic = TensorDictModule(nn.Linear(3, 2), ["observation"], ["action"])
    with pytest.raises(TypeError, match="probabilistic actor"):
        CrossQLoss(deterministic, qvalue)
