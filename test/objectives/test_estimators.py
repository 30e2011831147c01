"""Value estimator modules: keys, network calls and agreement with plain references."""

from __future__ import annotations

import pytest
import torch
from _loss_helpers import categorical_actor, float64, linears, mlp, ref_gae, ref_mlp
from _loss_helpers import trajectory_batch as _batch
from torch.nn import functional as F

from torchrl.modules import ValueOperator
from torchrl.objectives.value import (
    GAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    VTrace,
    functional,
)

GAMMA, LMBDA = 0.9, 0.7


def _critic():
    return ValueOperator(mlp(3, 1))


def _values(critic, td):
    layers = linears(critic)
    return ref_mlp(td["observation"], layers), ref_mlp(td["next", "observation"], layers)


def _ref_td_lambda(gamma, lmbda, next_value, reward, done, terminated):
    ret = torch.zeros_like(reward)
    steps = reward.shape[-2]
    for t in reversed(range(steps)):
        boot = torch.where(terminated[..., t, :], 0.0, next_value[..., t, :])
        if t == steps - 1:
            ret[..., t, :] = reward[..., t, :] + gamma * boot
            continue
        mix = (1 - lmbda) * boot + lmbda * ret[..., t + 1, :]
        follow = torch.where(done[..., t, :], boot, mix)
        ret[..., t, :] = reward[..., t, :] + gamma * follow
    return ret


def _nxt(td):
    n = td["next"]
    return n["reward"], n["done"], n["terminated"]


@pytest.mark.parametrize("shifted", [False, True])
def test_gae_module_matches_reference(shifted):
    with float64():
        torch.manual_seed(0)
        critic = _critic()
        td = _batch(3, 9, 3)
        out = GAE(gamma=GAMMA, lmbda=LMBDA, value_network=critic, shifted=shifted)(td.clone())
        value, next_value = _values(critic, td)
        adv = ref_gae(GAMMA, LMBDA, value, next_value, *_nxt(td))
        torch.testing.assert_close(out["advantage"], adv.detach())
        torch.testing.assert_close(out["value_target"], (adv + value).detach())
        torch.testing.assert_close(out["state_value"], value.detach())
        torch.testing.assert_close(out["next", "state_value"], next_value.detach())
        assert not out["advantage"].requires_grad


def test_td_estimators_match_references():
    with float64():
        torch.manual_seed(0)
        critic = _critic()
        td = _batch(2, 8, 3)
        value, next_value = _values(critic, td)
        value, next_value = value.detach(), next_value.detach()
        reward, done, terminated = _nxt(td)
        td0 = TD0Estimator(gamma=GAMMA, value_network=critic)(td.clone())
        ref0 = reward + GAMMA * torch.where(terminated, 0.0, next_value)
        torch.testing.assert_close(td0["value_target"], ref0)
        torch.testing.assert_close(td0["advantage"], ref0 - value)
        td1 = TD1Estimator(gamma=GAMMA, value_network=critic)(td.clone())
        ref1 = _ref_td_lambda(GAMMA, 1.0, next_value, reward, done, terminated)
        torch.testing.assert_close(td1["value_target"], ref1)
        for vectorized in (False, True):
            est = TDLambdaEstimator(
                gamma=GAMMA, lmbda=LMBDA, value_network=critic, vectorized=vectorized
            )
            tdl = est(td.clone())
            refl = _ref_td_lambda(GAMMA, LMBDA, next_value, reward, done, terminated)
            torch.testing.assert_close(tdl["value_target"], refl)


def test_values_given_and_value_estimate():
    td = _batch(2, 5, 3)
    td["state_value"] = torch.randn(2, 5, 1)
    td["next", "state_value"] = torch.randn(2, 5, 1)
    est = GAE(gamma=GAMMA, lmbda=LMBDA)
    out = est(td.clone())
    adv, target = functional.generalized_advantage_estimate(
        GAMMA, LMBDA, td["state_value"], td["next", "state_value"], *_nxt(td)
    )
    torch.testing.assert_close(out["advantage"], adv)
    torch.testing.assert_close(est.value_estimate(td.clone()), target)
    next_value = torch.zeros(2, 5, 1)
    td0 = TD0Estimator(gamma=GAMMA)
    torch.testing.assert_close(td0.value_estimate(td, next_value=next_value), td["next", "reward"])
    with pytest.raises(KeyError, match="state_value"):
        TD0Estimator(gamma=GAMMA)(td.exclude("state_value"))


@pytest.mark.parametrize("variant", ["float_flags", "int_gamma", "steps", "only_done"])
def test_td0_target_given_next_value_is_the_functional_one(variant):
    # The common case (bool flags, a float gamma, no step counts) takes a shorter path than
    # these variants; every one equals the functional estimate.
    td = _batch(2, 5, 3)
    td["next", "terminated"][0, 1] = True
    next_value = torch.randn(2, 5, 1)
    gamma = GAMMA
    terminated = td["next", "terminated"]
    if variant == "float_flags":
        td["next", "terminated"] = terminated.float()
    elif variant == "int_gamma":
        gamma = 1
    elif variant == "steps":
        td["steps_to_next_obs"] = torch.full((2, 5, 1), 2)
        gamma = GAMMA**2
    elif variant == "only_done":
        td["next", "done"] = terminated.clone()
        del td["next", "terminated"]
    expected = functional.td0_return_estimate(gamma, next_value, td["next", "reward"], terminated)
    estimator = TD0Estimator(gamma=GAMMA if variant == "steps" else gamma)
    torch.testing.assert_close(estimator.value_estimate(td, next_value=next_value), expected)


def test_skip_existing_and_set_keys():
    critic = _critic()
    td = _batch(2, 5, 3)
    td["state_value"] = torch.full((2, 5, 1), 3.0)
    td["next", "state_value"] = torch.full((2, 5, 1), 3.0)
    reuse = TD0Estimator(gamma=GAMMA, value_network=critic, skip_existing=True)(td.clone())
    fresh = TD0Estimator(gamma=GAMMA, value_network=critic, skip_existing=False)(td.clone())
    torch.testing.assert_close(reuse["state_value"], td["state_value"])
    assert not torch.equal(fresh["state_value"], td["state_value"])
    renamed = td.clone()
    renamed.rename_key_(("next", "reward"), ("next", "r"))
    est = TD0Estimator(gamma=GAMMA, value_network=critic).set_keys(
        reward="r", advantage="adv", value_target="vt"
    )
    out = est(renamed)
    assert "adv" in out.keys() and "vt" in out.keys()
    assert ("next", "r") in est.in_keys and est.out_keys == ["adv", "vt"]
    with pytest.raises(ValueError, match="unknown key name"):
        est.set_keys(rewardz="x")
    with pytest.raises(KeyError, match="reward"):
        TD0Estimator(gamma=GAMMA, value_network=critic)(renamed)


def test_time_dim_and_average_gae():
    torch.manual_seed(0)
    critic = _critic()
    td = _batch(3, 6, 3)
    last = GAE(gamma=GAMMA, lmbda=LMBDA, value_network=critic)(td.clone())
    first = GAE(gamma=GAMMA, lmbda=LMBDA, value_network=critic, time_dim=0)(
        td.clone().transpose(0, 1)
    )
    torch.testing.assert_close(first["advantage"].transpose(0, 1), last["advantage"])
    avg = GAE(gamma=GAMMA, lmbda=LMBDA, value_network=critic, average_gae=True)(td.clone())
    assert abs(float(avg["advantage"].mean())) < 1e-5
    assert abs(float(avg["advantage"].std()) - 1) < 1e-5


def test_steps_to_next_obs_discount():
    td = _batch(1, 4, 3)
    td["state_value"] = torch.zeros(1, 4, 1)
    td["next", "state_value"] = torch.ones(1, 4, 1)
    td["steps_to_next_obs"] = torch.tensor([[[1], [2], [3], [1]]])
    out = TD0Estimator(gamma=0.5)(td.clone())
    gamma = 0.5 ** td["steps_to_next_obs"].double()
    ref = td["next", "reward"] + (gamma * (~td["next", "terminated"]).double()).float()
    torch.testing.assert_close(out["value_target"], ref)


def test_differentiable_estimator_keeps_the_graph():
    critic = _critic()
    td = _batch(2, 4, 3)
    out = TD0Estimator(gamma=GAMMA, value_network=critic, differentiable=True)(td.clone())
    out["value_target"].sum().backward()
    assert critic.module[0].weight.grad is not None


def test_vtrace_matches_functional():
    torch.manual_seed(0)
    actor = categorical_actor(3, 2)
    critic = _critic()
    td = _batch(2, 6, 3)
    index = torch.randint(2, (2, 6))
    td["action"] = F.one_hot(index, 2)
    td["sample_log_prob"] = torch.full((2, 6), -0.6)
    out = VTrace(gamma=GAMMA, actor_network=actor, value_network=critic, rho_thresh=1.2)(td.clone())
    with torch.no_grad():
        log_pi = ref_mlp(td["observation"], linears(actor)).log_softmax(-1)
        log_pi = log_pi.gather(-1, index.unsqueeze(-1))
        value, next_value = _values(critic, td)
    adv, target = functional.vtrace_advantage_estimate(
        GAMMA,
        log_pi,
        td["sample_log_prob"].unsqueeze(-1),
        value,
        next_value,
        *_nxt(td),
        rho_thresh=1.2,
    )
    torch.testing.assert_close(out["advantage"], adv)
    torch.testing.assert_close(out["value_target"], target)
    with pytest.raises(TypeError, match="get_dist"):
        VTrace(gamma=GAMMA, actor_network=critic)


def test_estimator_needs_a_time_dim():
    td = _batch(1, 3, 3)[0, 0]
    td["state_value"] = torch.zeros(1)
    td["next", "state_value"] = torch.zeros(1)
    with pytest.raises(ValueError, match="time dim"):
        GAE(gamma=GAMMA, lmbda=LMBDA)(td)
