"""TQC loss against a hand-written reference (Kuznetsov et al. 2020): truncated pooled quantiles."""

from __future__ import annotations

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
    stacked_linears,
    transition_batch,
)
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.modules import ValueOperator
from torchrl.objectives import SoftUpdate, ValueEstimators
from torchrl.objectives.tqc import TQCLoss

GAMMA = 0.8
N_NETS, N_QUANTILES = 3, 4


def _nets(n_quantiles=N_QUANTILES):
    actor = gaussian_actor(3, 2, distribution_class=FixedNoiseTanhNormal)
    qvalue = ValueOperator(ConcatMLP(5, n_quantiles), in_keys=["observation", "action"])
    return actor, qvalue


def _batch():
    return transition_batch(8, 3, torch.linspace(-0.8, 0.8, 16).reshape(8, 2))


def _loss(drop=2, **kwargs):
    actor, qvalue = _nets()
    kwargs.setdefault("alpha_init", 0.7)
    kwargs.setdefault("target_entropy", -2.0)
    loss = TQCLoss(
        actor, qvalue, num_qvalue_nets=N_NETS, top_quantiles_to_drop_per_net=drop, **kwargs
    )
    loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
    return loss, actor


def _policy(actor, obs, detach=False):
    out = ref_mlp(obs, linears(actor))
    if detach:
        out = out.detach()
    loc, log_scale = out.chunk(2, -1)
    return loc, log_scale.exp()


def _atoms(layers, obs, action, i, detach=False):
    member = [(w[i], b[i]) for w, b in layers]
    if detach:
        member = [(w.detach(), b.detach()) for w, b in member]
    return ref_mlp(torch.cat([obs, action], -1), member)  # [B, M]


def _quantile_huber(atoms, target):
    taus = (torch.arange(atoms.shape[-1], dtype=atoms.dtype) + 0.5) / atoms.shape[-1]
    total = 0.0
    for j in range(atoms.shape[-1]):
        for k in range(target.shape[-1]):
            u = target[:, k] - atoms[:, j]
            huber = torch.where(u.abs() <= 1, 0.5 * u**2, u.abs() - 0.5)
            total = total + (taus[j] - (u < 0).double()).abs() * huber
    return total / (atoms.shape[-1] * target.shape[-1])  # [B]


@pytest.mark.parametrize("drop", [0, 2])
def test_tqc_matches_reference(drop):
    with float64():
        torch.manual_seed(0)
        loss, actor = _loss(drop)
        with torch.no_grad():  # online critics != target critics
            for p in loss.qvalue_network_params.values(True, True):
                p.add_(0.1 * torch.randn_like(p))
        td = _batch()
        out = loss(td)

        alpha = 0.7
        online = stacked_linears(loss.qvalue_network_params)
        target_net = stacked_linears(loss.target_qvalue_network_params)
        obs, nobs = td["observation"], td["next", "observation"]
        next_action, next_logp = ref_tanh_sample(*_policy(actor, nobs, detach=True))
        pooled = torch.cat([_atoms(target_net, nobs, next_action, i) for i in range(N_NETS)], -1)
        kept = pooled.sort(-1).values[:, : N_NETS * (N_QUANTILES - drop)]
        y = td["next", "reward"] + GAMMA * (~td["next", "terminated"]).double() * (
            kept - alpha * next_logp.unsqueeze(-1)
        )
        ref_q = sum(_quantile_huber(_atoms(online, obs, td["action"], i), y) for i in range(N_NETS))
        ref_q = (ref_q / N_NETS).mean()

        action, logp = ref_tanh_sample(*_policy(actor, obs))
        z_pi = torch.stack([_atoms(online, obs, action, i, detach=True) for i in range(N_NETS)])
        ref_actor = (alpha * logp - z_pi.mean((0, -1))).mean()
        ref_alpha = -(loss.log_alpha * (logp.detach() - 2.0)).mean()

        params = [*actor.parameters(), *loss.qvalue_network_params.values(True, True)]
        params.append(loss.log_alpha)
        assert_matches(out["loss_qvalue"], ref_q, params, name="qvalue")
        assert_matches(out["loss_actor"], ref_actor, params, name="actor")
        assert_matches(out["loss_alpha"], ref_alpha, params, name="alpha")
        torch.testing.assert_close(out["entropy"], -logp.mean().detach())
        assert td["td_error"].shape == (8,)


def test_tqc_truncation_count():
    loss, _ = _loss(drop=1)
    assert loss.num_target_atoms(N_QUANTILES) == N_NETS * (N_QUANTILES - 1)
    # Dropping more atoms gives a lower (more pessimistic) target, so a larger critic loss
    # for critics that sit above it.
    losses = []
    for drop in (0, 1, 3):
        torch.manual_seed(0)
        loss, _ = _loss(drop)
        with torch.no_grad():
            for key, p in loss.qvalue_network_params.items(True, True):
                if key[-1] == "bias" and p.shape[-1] == N_QUANTILES:
                    p.add_(50.0)  # online atoms far above the target ones
        losses.append(loss(_batch())["loss_qvalue"].detach().item())
    assert losses[0] < losses[1] < losses[2]
    with pytest.raises(ValueError, match="smaller than the number of quantiles"):
        _loss(drop=N_QUANTILES)[0](_batch())


def test_tqc_gradients_and_target_update():
    torch.manual_seed(1)
    loss, actor = _loss()
    assert loss.target_network_names == ["qvalue_network"]
    out = loss(_batch())
    critic = list(loss.qvalue_network_params.values(True, True))
    groups = {"actor": list(actor.parameters()), "critic": critic, "alpha": [loss.log_alpha]}
    expected = {"loss_qvalue": "critic", "loss_actor": "actor", "loss_alpha": "alpha"}
    for name, owner in expected.items():
        for group, ps in groups.items():
            got = torch.autograd.grad(out[name], ps, retain_graph=True, allow_unused=True)
            nonzero = any(g is not None and g.abs().sum() > 0 for g in got)
            assert nonzero == (group == owner), (name, group)
    assert not any(p.requires_grad for p in loss.target_qvalue_network_params.values(True, True))
    updater = SoftUpdate(loss, tau=0.5)
    with torch.no_grad():
        for p in critic:
            p.add_(1.0)
    before = loss.target_qvalue_network_params.clone()
    updater.step()
    moved = loss.target_qvalue_network_params
    for key, p in loss.qvalue_network_params.items(True, True):
        torch.testing.assert_close(moved[key], 0.5 * before[key] + 0.5 * p.detach())


def test_tqc_reduction_none_shapes():
    loss, _ = _loss(reduction="none")
    out = loss(_batch())
    assert out["loss_qvalue"].shape == (8, 1)
    assert out["loss_actor"].shape == (8, 1)
    assert loss.out_keys == ["loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"]


def test_tqc_bad_inputs():
    with pytest.raises(ValueError, match="non-negative integer"):
        _loss(drop=-1)
    loss, _ = _loss()
    with pytest.raises(NotImplementedError, match="TD1"):
        loss.make_value_estimator(ValueEstimators.TD1)
    td = _batch()
    del td["next", "observation"]
    with pytest.raises(KeyError, match="observation"):
        loss(td)
    # a critic that squeezes its output loses the quantile dim
    actor = gaussian_actor(3, 2, distribution_class=FixedNoiseTanhNormal)
    squeezed = TensorDictModule(
        nn.Sequential(nn.Linear(3, 1), nn.Flatten(0)), ["observation"], ["state_action_value"]
    )
    bad = TQCLoss(actor, squeezed, num_qvalue_nets=2, target_entropy=-2.0)
    with pytest.raises(ValueError, match="n_quantiles"):
        bad(_batch())
