"""V-trace on off-policy data inside ClipPPOLoss (APPO) and A2CLoss (IMPALA).

The reference is a plain Python loop over each row of ``[N, T]`` data, written from the IMPALA
paper's definitions: ``rho = min(rho_bar, pi/mu)``, ``c = min(c_bar, pi/mu)``,
``v_s = V(x_s) + delta_s + gamma c_s (v_{s+1} - V(x_{s+1}))`` and the policy-gradient advantage
``rho_s (r_s + gamma v_{s+1} - V(x_s))``.
"""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.modules import OneHotCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import A2CLoss, ClipPPOLoss
from torchrl.objectives.utils import ValueEstimators

N, T, OBS, ACT = 3, 6, 4, 3
GAMMA, RHO_BAR, C_BAR = 0.9, 1.0, 0.7


def _nets() -> tuple[ProbabilisticActor, ValueOperator]:
    torch.manual_seed(0)
    actor = ProbabilisticActor(
        TensorDictModule(nn.Linear(OBS, ACT), ["observation"], ["logits"]),
        in_keys=["logits"],
        distribution_class=OneHotCategorical,
        return_log_prob=True,
    )
    critic = ValueOperator(nn.Linear(OBS, 1), in_keys=["observation"])
    return actor, critic


def _data(log_prob_key: str = "action_log_prob") -> TensorDict:
    """Off-policy rows: behaviour log-probs unrelated to the learned policy, mixed episode ends."""
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(N, T + 1, OBS, generator=g)
    actions = torch.randint(ACT, (N, T), generator=g)
    # Row 0: a termination at t=2; row 1: a truncation at t=3 (done, not terminated);
    # row 2: no end (the last step is cut by the batch).
    terminated = torch.zeros(N, T, 1, dtype=torch.bool)
    truncated = torch.zeros(N, T, 1, dtype=torch.bool)
    terminated[0, 2] = True
    truncated[1, 3] = True
    next_obs = obs[:, 1:].clone()
    # After an episode end the next row step starts a new episode: its observation is not the
    # previous step's next observation.
    obs_t = obs[:, :-1].clone()
    obs_t[0, 3] = torch.randn(OBS, generator=g)
    obs_t[1, 4] = torch.randn(OBS, generator=g)
    return TensorDict(
        {
            "observation": obs_t,
            "action": nn.functional.one_hot(actions, ACT),
            log_prob_key: torch.rand(N, T, generator=g) * -2.0 - 0.1,
            "next": {
                "observation": next_obs,
                "reward": torch.randn(N, T, 1, generator=g),
                "done": terminated | truncated,
                "terminated": terminated,
                "truncated": truncated,
            },
        },
        batch_size=[N, T],
    )


def _reference(data: TensorDict, actor: ProbabilisticActor, critic: ValueOperator, key: str):
    """(advantage, value_target, log_pi) with a plain loop, per row."""
    with torch.no_grad():
        log_pi = actor.get_dist(data.copy()).log_prob(data["action"])
        v = critic.module(data["observation"]).squeeze(-1)
        nv = critic.module(data["next", "observation"]).squeeze(-1)
    log_mu = data[key]
    r = data["next", "reward"].squeeze(-1)
    done = data["next", "done"].squeeze(-1)
    term = data["next", "terminated"].squeeze(-1)
    adv = torch.zeros(N, T)
    vs = torch.zeros(N, T)
    for n in range(N):
        for t in reversed(range(T)):
            ratio = math.exp(float(log_pi[n, t] - log_mu[n, t]))
            rho, c = min(RHO_BAR, ratio), min(C_BAR, ratio)
            boot = 0.0 if term[n, t] else GAMMA * float(nv[n, t])
            delta = rho * (float(r[n, t]) + boot - float(v[n, t]))
            if done[n, t] or t == T - 1:
                vs[n, t] = float(v[n, t]) + delta
                next_vs = float(nv[n, t])
            else:
                vs[n, t] = float(v[n, t]) + delta + GAMMA * c * float(vs[n, t + 1] - nv[n, t])
                next_vs = float(vs[n, t + 1])
            next_term = 0.0 if term[n, t] else GAMMA * next_vs
            adv[n, t] = rho * (float(r[n, t]) + next_term - float(v[n, t]))
    return adv, vs, log_pi


def _vtrace(loss, **kw):
    loss.make_value_estimator(
        ValueEstimators.VTrace, gamma=GAMMA, rho_thresh=RHO_BAR, c_thresh=C_BAR, **kw
    )
    return loss


@pytest.mark.parametrize("key", ["action_log_prob", "sample_log_prob"])
def test_appo_targets_and_ratio_against_behaviour(key: str) -> None:
    actor, critic = _nets()
    data = _data(key)
    adv_ref, vs_ref, log_pi = _reference(data, actor, critic, key)
    eps = 0.2
    loss = _vtrace(
        ClipPPOLoss(actor, critic, clip_epsilon=eps, entropy_bonus=False, loss_critic_type="l2")
    )
    out = loss(data)
    torch.testing.assert_close(data["advantage"].squeeze(-1), adv_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(data["value_target"].squeeze(-1), vs_ref, rtol=1e-5, atol=1e-5)
    # The PPO ratio is taken against the behaviour policy's stored log-probabilities.
    ratio = (log_pi - data[key]).exp()
    objective = -torch.minimum(ratio * adv_ref, ratio.clamp(1 - eps, 1 + eps) * adv_ref).mean()
    torch.testing.assert_close(out["loss_objective"], objective, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        v = critic.module(data["observation"]).squeeze(-1)
    torch.testing.assert_close(out["loss_critic"], ((v - vs_ref) ** 2).mean(), rtol=1e-5, atol=1e-6)
    assert float(out["kl_approx"]) == pytest.approx(float((data[key] - log_pi).mean()), rel=1e-5)


def test_impala_policy_gradient_and_critic() -> None:
    actor, critic = _nets()
    data = _data()
    adv_ref, vs_ref, log_pi = _reference(data, actor, critic, "action_log_prob")
    loss = _vtrace(A2CLoss(actor, critic, entropy_bonus=False, loss_critic_type="l2"))
    out = loss(data)
    torch.testing.assert_close(
        out["loss_objective"], -(log_pi * adv_ref).mean(), rtol=1e-5, atol=1e-6
    )
    with torch.no_grad():
        v = critic.module(data["observation"]).squeeze(-1)
    torch.testing.assert_close(out["loss_critic"], ((v - vs_ref) ** 2).mean(), rtol=1e-5, atol=1e-6)
    # The gradient flows through log pi only (the advantage is a constant).
    out["loss_objective"].backward()
    assert actor.module[0].module.weight.grad is not None


def test_on_policy_data_reduces_to_n_step_returns() -> None:
    """With mu = pi and c_bar = rho_bar = 1, v_s is the bootstrapped discounted return."""
    actor, critic = _nets()
    data = _data()
    with torch.no_grad():
        data["action_log_prob"] = actor.get_dist(data.copy()).log_prob(data["action"])
        nv = critic.module(data["next", "observation"]).squeeze(-1)
    loss = A2CLoss(actor, critic)
    loss.make_value_estimator(ValueEstimators.VTrace, gamma=GAMMA)
    loss(data)
    r = data["next", "reward"].squeeze(-1)
    done = data["next", "done"].squeeze(-1)
    term = data["next", "terminated"].squeeze(-1)
    for n in range(N):
        g = 0.0
        for t in reversed(range(T)):
            if done[n, t] or t == T - 1:  # the recursion restarts: bootstrap unless terminated
                g = float(r[n, t]) + (0.0 if term[n, t] else GAMMA * float(nv[n, t]))
            else:
                g = float(r[n, t]) + GAMMA * g
            assert float(data["value_target"][n, t]) == pytest.approx(g, rel=1e-4, abs=1e-5)


def test_rows_are_independent() -> None:
    """Each row is its own trajectory: computing row by row gives the batched answer."""
    actor, critic = _nets()
    data = _data()
    loss = _vtrace(A2CLoss(actor, critic))
    loss(data)
    for n in range(N):
        row = _data()[n : n + 1]
        _vtrace(A2CLoss(actor, critic))(row)
        torch.testing.assert_close(row["value_target"][0], data["value_target"][n])


def test_renamed_behaviour_key_reaches_the_estimator() -> None:
    actor, critic = _nets()
    data = _data("mu_log_prob")
    adv_ref, _, _ = _reference(data, actor, critic, "mu_log_prob")
    for loss in (ClipPPOLoss(actor, critic), A2CLoss(actor, critic)):
        loss = _vtrace(loss)
        loss.set_keys(sample_log_prob="mu_log_prob")
        d = data.clone()
        loss(d)
        torch.testing.assert_close(d["advantage"].squeeze(-1), adv_ref, rtol=1e-5, atol=1e-5)


def test_missing_behaviour_log_prob_is_named() -> None:
    actor, critic = _nets()
    data = _data()
    del data["action_log_prob"]
    loss = _vtrace(A2CLoss(actor, critic))
    with pytest.raises(KeyError, match="action_log_prob"):
        loss(data)
