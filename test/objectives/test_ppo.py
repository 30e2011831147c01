"""PPO losses against hand-written references of the published objectives (Schulman et al. 2017)."""

from __future__ import annotations

import pytest
import torch
from _loss_helpers import (
    assert_matches,
    float64,
    gaussian_actor,
    linears,
    mlp,
    ref_gae,
    ref_mlp,
    trajectory_batch,
)
from torch import distributions as D
from torch.nn import functional as F

from torchrl.modules import ValueOperator
from torchrl.objectives import ClipPPOLoss, KLPENPPOLoss, PPOLoss, ValueEstimators

GAMMA, LMBDA = 0.9, 0.8


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    actor = gaussian_actor(3, 2, return_log_prob=True)
    critic = ValueOperator(mlp(3, 1))
    td = trajectory_batch(2, 7, 3, seed=seed)
    td["action"] = torch.randn(2, 7, 2) * 0.7
    return actor, critic, td


def _ref_policy(actor, td):
    out = ref_mlp(td["observation"], linears(actor))
    loc, log_scale = out.chunk(2, -1)
    return loc, log_scale.exp()


def _ref_logp(loc, scale, action):
    return D.Normal(loc, scale).log_prob(action).sum(-1)


def _ref_critic(critic, td):
    layers = linears(critic)
    value = ref_mlp(td["observation"], layers)
    next_value = ref_mlp(td["next", "observation"], layers)
    return value, next_value


def _old_log_prob(actor, td, spread=0.3):
    with torch.no_grad():
        loc, scale = _ref_policy(actor, td)
        logp = _ref_logp(loc, scale, td["action"])
    return logp + spread * torch.randn(logp.shape)


def _params(*modules):
    return [p for m in modules for p in m.parameters()]


@pytest.mark.parametrize("normalize", [False, True])
def test_clip_ppo_matches_reference(normalize):
    with float64():
        actor, critic, td = _setup()
        td["sample_log_prob"] = _old_log_prob(actor, td)
        loss = ClipPPOLoss(
            actor,
            critic,
            clip_epsilon=0.15,
            entropy_coef=0.02,
            critic_coef=0.7,
            loss_critic_type="l2",
            normalize_advantage=normalize,
        )
        loss.make_value_estimator(ValueEstimators.GAE, gamma=GAMMA, lmbda=LMBDA)
        out = loss(td.clone())

        loc, scale = _ref_policy(actor, td)
        logp = _ref_logp(loc, scale, td["action"])
        value, next_value = _ref_critic(critic, td)
        nxt = td["next"]
        adv = ref_gae(
            GAMMA,
            LMBDA,
            value.detach(),
            next_value.detach(),
            nxt["reward"],
            nxt["done"],
            nxt["terminated"],
        )
        value_target = adv + value.detach()
        a = adv.squeeze(-1)
        if normalize:
            a = (a - a.mean()) / a.std()
        ratio = torch.exp(logp - td["sample_log_prob"])
        objective = -torch.minimum(ratio * a, ratio.clamp(0.85, 1.15) * a).mean()
        entropy = D.Normal(loc, scale).entropy().sum(-1)
        critic_loss = 0.7 * (value - value_target).pow(2).mean()

        params = _params(actor, critic)
        assert_matches(out["loss_objective"], objective, params, name="objective")
        assert_matches(out["loss_entropy"], -0.02 * entropy.mean(), params, name="entropy")
        assert_matches(out["loss_critic"], critic_loss, params, name="critic")
        clipped = ((ratio - 1).abs() > 0.15).double().mean()
        torch.testing.assert_close(out["clip_fraction"], clipped)
        torch.testing.assert_close(out["kl_approx"], (td["sample_log_prob"] - logp).mean())
        assert 0 < float(clipped) < 1  # both branches of the min are exercised


def test_plain_ppo_matches_reference():
    with float64():
        actor, critic, td = _setup(1)
        td["sample_log_prob"] = _old_log_prob(actor, td)
        loss = PPOLoss(actor, critic, entropy_bonus=False, loss_critic_type="smooth_l1")
        loss.make_value_estimator(ValueEstimators.GAE, gamma=GAMMA, lmbda=LMBDA)
        out = loss(td.clone())
        assert "loss_entropy" not in out.keys()

        loc, scale = _ref_policy(actor, td)
        value, next_value = _ref_critic(critic, td)
        nxt = td["next"]
        adv = ref_gae(
            GAMMA,
            LMBDA,
            value.detach(),
            next_value.detach(),
            nxt["reward"],
            nxt["done"],
            nxt["terminated"],
        )
        ratio = torch.exp(_ref_logp(loc, scale, td["action"]) - td["sample_log_prob"])
        params = _params(actor, critic)
        assert_matches(out["loss_objective"], -(ratio * adv.squeeze(-1)).mean(), params)
        huber = F.smooth_l1_loss(value, adv + value.detach())
        assert_matches(out["loss_critic"], huber, params)


def test_klpen_ppo_matches_reference_and_adapts_beta():
    with float64():
        actor, critic, td = _setup(2)
        td["sample_log_prob"] = _old_log_prob(actor, td)
        td["loc"] = torch.randn(2, 7, 2) * 0.3
        td["scale"] = torch.rand(2, 7, 2) + 0.5
        td["advantage"] = torch.randn(2, 7, 1)
        loss = KLPENPPOLoss(actor, dtarg=0.01, beta=0.5, increment=2.0, entropy_bonus=False)
        out = loss(td.clone())

        loc, scale = _ref_policy(actor, td)
        old_loc, old_scale = td["loc"], td["scale"]
        # KL(N_old || N_new) for diagonal Gaussians, summed over the action dims.
        kl = (
            torch.log(scale / old_scale)
            + (old_scale.pow(2) + (old_loc - loc).pow(2)) / (2 * scale.pow(2))
            - 0.5
        ).sum(-1)
        ratio = torch.exp(_ref_logp(loc, scale, td["action"]) - td["sample_log_prob"])
        objective = -(ratio * td["advantage"].squeeze(-1) - 0.5 * kl).mean()
        assert_matches(out["loss_objective"], objective, _params(actor))
        torch.testing.assert_close(out["kl"], kl.mean())
        assert float(out["beta"]) == 0.5
        # The KL is far above 1.5 * dtarg: beta doubles for the next call.
        assert float(loss.beta) == 1.0
        loss.eval()
        loss(td.clone())
        assert float(loss.beta) == 1.0


def test_clip_value_matches_reference():
    with float64():
        actor, critic, td = _setup(3)
        td["sample_log_prob"] = _old_log_prob(actor, td)
        td["advantage"] = torch.randn(2, 7, 1)
        td["value_target"] = torch.randn(2, 7, 1)
        td["state_value"] = torch.randn(2, 7, 1) * 0.1
        loss = PPOLoss(actor, critic, clip_value=0.05, loss_critic_type="l2", critic_coef=1.0)
        out = loss(td.clone())
        value, _ = _ref_critic(critic, td)
        old = td["state_value"]
        clipped = old + (value - old).clamp(-0.05, 0.05)
        target = td["value_target"]
        ref = torch.maximum((value - target).pow(2), (clipped - target).pow(2)).mean()
        assert_matches(out["loss_critic"], ref, _params(critic))
        frac = ((value - old).abs() > 0.05).double().mean()
        torch.testing.assert_close(out["value_clip_fraction"], frac)


def test_separate_losses_keeps_critic_grads_off_the_shared_trunk():
    from _loss_helpers import LocScale
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torch import nn

    from torchrl.modules import IndependentNormal, ProbabilisticActor

    trunk = TensorDictModule(nn.Linear(3, 4), ["observation"], ["hidden"])
    head = TensorDictModule(
        nn.Sequential(nn.Linear(4, 4), LocScale()), ["hidden"], ["loc", "scale"]
    )
    actor = ProbabilisticActor(
        TensorDictSequential(trunk, head),
        in_keys=["loc", "scale"],
        distribution_class=IndependentNormal,
    )
    critic = TensorDictSequential(
        trunk, TensorDictModule(nn.Linear(4, 1), ["hidden"], ["state_value"])
    )
    td = trajectory_batch(2, 5, 3)
    td["action"] = torch.randn(2, 5, 2)
    td["sample_log_prob"] = torch.zeros(2, 5)
    td["advantage"] = torch.randn(2, 5, 1)
    td["value_target"] = torch.randn(2, 5, 1)
    for separate in (False, True):
        loss = PPOLoss(actor, critic, separate_losses=separate, entropy_bonus=False)
        trunk.module.weight.grad = None
        loss(td.clone())["loss_critic"].backward()
        got = trunk.module.weight.grad
        assert (got is None or not got.any()) == separate


def test_missing_and_bad_inputs_are_named():
    actor, critic, td = _setup()
    loss = ClipPPOLoss(actor, critic)
    with pytest.raises(KeyError, match="sample_log_prob"):
        loss(td.clone())
    td["sample_log_prob"] = torch.zeros(2, 7, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        loss(td.clone())
    td["sample_log_prob"] = torch.zeros(2, 7)
    with pytest.raises(KeyError, match="ClipPPOLoss.*observation"):
        loss(td.exclude("observation"))
    td["advantage"] = torch.zeros(2, 7, 3)
    with pytest.raises(ValueError, match="advantage"):
        loss(td.clone())


def test_estimators_and_keys():
    actor, critic, td = _setup()
    td["sample_log_prob"] = torch.zeros(2, 7)
    loss = PPOLoss(actor, critic)
    for value_type in ValueEstimators:
        loss.make_value_estimator(value_type)
        out = loss(td.clone())
        assert torch.isfinite(out["loss_objective"])
    td2 = td.clone()
    td2.rename_key_(("next", "reward"), ("next", "r"))
    loss.set_keys(reward="r")
    assert ("next", "r") in loss.in_keys
    assert loss.value_estimator.tensor_keys.reward == "r"
    loss.make_value_estimator(ValueEstimators.GAE)
    assert loss.value_estimator.tensor_keys.reward == "r"
    assert torch.isfinite(loss(td2)["loss_critic"])
    with pytest.raises(ValueError, match="unknown key name 'rewards'"):
        loss.set_keys(rewards="r")


def test_tensordict_free_call():
    actor, critic, td = _setup()
    td["sample_log_prob"] = torch.zeros(2, 7)
    loss = ClipPPOLoss(actor, critic)
    kwargs = {
        "observation": td["observation"],
        "action": td["action"],
        "action_log_prob": td["sample_log_prob"],
        "next_observation": td["next", "observation"],
        "next_reward": td["next", "reward"],
        "next_done": td["next", "done"],
        "next_terminated": td["next", "terminated"],
    }
    values = loss(**kwargs)
    assert isinstance(values, tuple) and len(values) == len(loss.out_keys)
    reference = loss(td.clone())
    for key, value in zip(loss.out_keys, values):
        torch.testing.assert_close(value, reference[key])


def test_composite_action_distribution():
    from tensordict.nn import (
        CompositeDistribution,
        ProbabilisticTensorDictModule,
        ProbabilisticTensorDictSequential,
        TensorDictModule,
    )
    from torch import nn

    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 5)

        def forward(self, obs):
            out = self.lin(obs)
            return out[..., :1], out[..., 1:2].exp(), out[..., 2:]

    params = TensorDictModule(
        Heads(),
        ["observation"],
        [("params", "cont", "loc"), ("params", "cont", "scale"), ("params", "disc", "logits")],
    )
    sampler = ProbabilisticTensorDictModule(
        in_keys=["params"],
        out_keys=["cont", "disc"],
        distribution_class=CompositeDistribution,
        distribution_kwargs={
            "distribution_map": {"cont": D.Normal, "disc": D.Categorical},
        },
        return_log_prob=True,
    )
    actor = ProbabilisticTensorDictSequential(params, sampler)
    td = trajectory_batch(2, 4, 3)
    with torch.no_grad():
        actor(td)
    td["advantage"] = torch.randn(2, 4, 1)
    loss = ClipPPOLoss(actor, entropy_coef=0.1)
    out = loss(td.clone())
    # At the data-collecting weights the ratio is one: the objective is -mean(advantage).
    torch.testing.assert_close(out["loss_objective"], -td["advantage"].mean())
    lin = params.module.lin
    o = lin(td["observation"])
    entropy = (
        D.Normal(o[..., :1], o[..., 1:2].exp()).entropy().squeeze(-1)
        + D.Categorical(logits=o[..., 2:]).entropy()
    )
    torch.testing.assert_close(out["loss_entropy"], -0.1 * entropy.mean())
    out["loss_objective"].backward()
    assert lin.weight.grad is not None
