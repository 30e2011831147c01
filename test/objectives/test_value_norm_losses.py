"""PPO and A2C losses with value_norm= / value_transform=: scaled critic targets, real advantages."""

from __future__ import annotations

import pytest
import torch
from _loss_helpers import (
    categorical_actor,
    float64,
    gaussian_actor,
    linears,
    mlp,
    ref_gae,
    ref_mlp,
    trajectory_batch,
)
from torch import nn

from torchrl.modules import ValueOperator
from torchrl.modules.functional import symexp, symlog
from torchrl.modules.models.value_norm import (
    DecodedValueOperator,
    PopArtValueNorm,
    RunningValueNorm,
    SymLogValueTransform,
)
from torchrl.objectives import A2CLoss, ClipPPOLoss, KLPENPPOLoss, PPOLoss, ValueEstimators

GAMMA, LMBDA = 0.9, 0.8
LOSSES = [PPOLoss, ClipPPOLoss, KLPENPPOLoss, A2CLoss]


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    actor = gaussian_actor(3, 2, return_log_prob=True)
    critic = ValueOperator(mlp(3, 1))
    td = trajectory_batch(2, 7, 3, seed=seed)
    td["action"] = torch.randn(2, 7, 2) * 0.7
    with torch.no_grad():
        # get_dist writes the distribution parameters (loc, scale) KLPENPPOLoss reads
        td["action_log_prob"] = actor.get_dist(td).log_prob(td["action"])
    return actor, critic, td


def _fitted_norm(loc: float, spread: float) -> RunningValueNorm:
    vn = RunningValueNorm()
    vn.update(torch.tensor([[loc - spread], [loc + spread]]))
    return vn


@pytest.mark.parametrize("loss_cls", LOSSES)
def test_default_path_has_no_scaling(loss_cls) -> None:
    actor, critic, _ = _setup()
    loss = loss_cls(actor, critic)
    assert loss.value_norm is None and loss.value_transform is None
    assert loss.value_estimator.value_network is critic


@pytest.mark.parametrize("loss_cls", LOSSES)
def test_estimator_reads_decoded_values(loss_cls) -> None:
    with float64():
        actor, critic, td = _setup()
        vn = _fitted_norm(50.0, 20.0)
        loss = loss_cls(actor, critic, value_norm=vn, value_transform=SymLogValueTransform())
        loss.make_value_estimator(ValueEstimators.GAE, gamma=GAMMA, lmbda=LMBDA)
        assert isinstance(loss.value_estimator.value_network, DecodedValueOperator)
        loss.value_estimator(td)
        layers = linears(critic)
        value = symexp(vn.denormalize(ref_mlp(td["observation"], layers)))
        next_value = symexp(vn.denormalize(ref_mlp(td["next", "observation"], layers)))
        torch.testing.assert_close(td["state_value"], value)
        nxt = td["next"]
        adv = ref_gae(
            GAMMA, LMBDA, value, next_value, nxt["reward"], nxt["done"], nxt["terminated"]
        )
        torch.testing.assert_close(td["advantage"], adv)
        torch.testing.assert_close(td["value_target"], adv + value)


@pytest.mark.parametrize("loss_cls", LOSSES)
def test_critic_regresses_encoded_targets(loss_cls) -> None:
    with float64():
        actor, critic, td = _setup()
        vn = _fitted_norm(100.0, 30.0)
        td["advantage"] = torch.randn(2, 7, 1)
        td["value_target"] = torch.randn(2, 7, 1) * 300.0
        loss = loss_cls(
            actor,
            critic,
            loss_critic_type="l2",
            critic_coef=1.0,
            value_norm=vn,
            value_transform=SymLogValueTransform(),
        )
        loss.eval()  # no statistics update: the encoding is fixed
        out = loss(td.clone())
        prediction = ref_mlp(td["observation"], linears(critic))
        target = vn.normalize(symlog(td["value_target"]))
        torch.testing.assert_close(out["loss_critic"], (prediction - target).square().mean())
        assert float(vn.count) == 2


@pytest.mark.parametrize("loss_cls", [ClipPPOLoss, A2CLoss])
def test_training_mode_updates_statistics_first(loss_cls) -> None:
    with float64():
        actor, critic, td = _setup()
        vn = RunningValueNorm()
        td["advantage"] = torch.randn(2, 7, 1)
        td["value_target"] = torch.randn(2, 7, 1) * 10.0 + 1000.0
        loss = loss_cls(actor, critic, loss_critic_type="l2", value_norm=vn)
        out = loss(td.clone())
        flat = td["value_target"].reshape(-1)
        assert float(vn.count) == 14
        torch.testing.assert_close(vn.loc(), flat.mean().reshape(1))
        prediction = ref_mlp(td["observation"], linears(critic))
        target = (td["value_target"] - flat.mean()) / (flat.var(unbiased=False) + 1e-5).sqrt()
        torch.testing.assert_close(out["loss_critic"], (prediction - target).square().mean())
        assert "value_norm.mean" in loss.state_dict()


def test_clip_value_compares_encoded_old_values() -> None:
    with float64():
        actor, critic, td = _setup()
        vn = _fitted_norm(10.0, 5.0)
        td["advantage"] = torch.randn(2, 7, 1)
        td["value_target"] = torch.randn(2, 7, 1) * 5.0 + 10.0
        td["state_value"] = torch.randn(2, 7, 1) * 5.0 + 10.0
        loss = ClipPPOLoss(actor, critic, loss_critic_type="l2", clip_value=0.1, value_norm=vn)
        loss.eval()
        out = loss(td.clone())
        prediction = ref_mlp(td["observation"], linears(critic))
        old = vn.normalize(td["state_value"])
        target = vn.normalize(td["value_target"])
        clipped = old + (prediction - old).clamp(-0.1, 0.1)
        ref = torch.maximum((prediction - target).square(), (clipped - target).square())
        torch.testing.assert_close(out["loss_critic"], ref.mean())
        ref_fraction = ((prediction - old).abs() > 0.1).double().mean()
        torch.testing.assert_close(out["value_clip_fraction"], ref_fraction)


def test_policy_objective_uses_real_advantages() -> None:
    with float64():
        actor, critic, td = _setup()
        plain = A2CLoss(actor, critic)
        scaled = A2CLoss(actor, critic, value_norm=_fitted_norm(1000.0, 500.0))
        for loss in (plain, scaled):
            loss.make_value_estimator(ValueEstimators.GAE, gamma=GAMMA, lmbda=LMBDA)
        a = td.clone()
        b = td.clone()
        plain.value_estimator(a)
        scaled.value_estimator(b)
        # the scaled critic's (denormalised) values are ~1000x larger: so are its advantages
        assert b["state_value"].abs().mean() > 100 * a["state_value"].abs().mean()


def _popart_fit(value_norm: bool, steps: int = 300) -> float:
    """Relative error of a critic fit with A2C/PPO's critic loss to targets of scale 1000."""
    torch.manual_seed(0)
    head = nn.Linear(16, 1)
    critic = ValueOperator(nn.Sequential(nn.Linear(3, 16), nn.Tanh(), head))
    actor = categorical_actor(3, 2, return_log_prob=True)
    vn = PopArtValueNorm(beta=0.9, layer=head) if value_norm else None
    loss = ClipPPOLoss(actor, critic, entropy_bonus=False, loss_critic_type="l2", value_norm=vn)
    weights = torch.tensor([[1.0], [-2.0], [0.5]])
    optim = torch.optim.Adam(critic.parameters(), lr=1e-2)
    for _ in range(steps):
        obs = torch.randn(64, 3)
        td = _critic_batch(obs, 1000.0 * torch.tanh(obs @ weights) + 500.0)
        loss(td)["loss_critic"].backward()
        optim.step()
        optim.zero_grad()
    obs = torch.randn(256, 3)
    target = 1000.0 * torch.tanh(obs @ weights) + 500.0
    with torch.no_grad():
        td = _critic_batch(obs, target)
        real = loss.value_estimator.value_network(td)["state_value"]
    return float((real - target).square().mean().sqrt() / target.std())


def _critic_batch(obs: torch.Tensor, target: torch.Tensor):
    from tensordict import TensorDict

    n = obs.shape[0]
    return TensorDict(
        {
            "observation": obs,
            "action": nn.functional.one_hot(torch.randint(2, (n,)), 2),
            "action_log_prob": torch.full((n,), -0.69),
            "advantage": torch.zeros(n, 1),
            "value_target": target,
        },
        [n],
    )


def test_popart_critic_fits_targets_of_scale_1000() -> None:
    error = _popart_fit(value_norm=True)
    assert error < 0.1, error
    # the same budget without normalisation is far off (the outputs must grow to ~1000)
    assert _popart_fit(value_norm=False) > 3 * error
