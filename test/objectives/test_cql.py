"""CQL losses against hand-written references (Kumar et al. 2020)."""

from __future__ import annotations

import math

import pytest
import torch
from _loss_helpers import (
    ConcatMLP,
    FixedNoiseTanhNormal,
    assert_matches,
    float64,
    gaussian_actor,
    linears,
    mlp,
    ref_mlp,
    ref_tanh_sample,
    stacked_linears,
    transition_batch,
)
from torch.nn import functional as F

from torchrl.modules import QValueActor, ValueOperator
from torchrl.objectives import CQLLoss, DiscreteCQLLoss, ValueEstimators

R = 3  # random actions of each kind


def _member(layers, i, detach=False):
    out = [(w[i], b[i]) for w, b in layers]
    return [(w.detach(), b.detach()) for w, b in out] if detach else out


@pytest.mark.parametrize("with_lagrange", [False, True])
def test_cql_matches_reference(with_lagrange):
    with float64():
        torch.manual_seed(0)
        actor = gaussian_actor(3, 2, distribution_class=FixedNoiseTanhNormal)
        qvalue = ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])
        td = transition_batch(6, 3, torch.rand(6, 2) * 1.6 - 0.8)
        loss = CQLLoss(
            actor,
            qvalue,
            bounds=(-1.0, 1.0),
            target_entropy=-2.0,
            alpha_init=0.5,
            num_random=R,
            temperature=0.7,
            min_q_weight=2.0,
            with_lagrange=with_lagrange,
            lagrange_thresh=0.3,
            loss_function="l2",
        )
        loss.make_value_estimator(ValueEstimators.TD0, gamma=0.8)
        torch.manual_seed(5)
        out = loss(td)

        critics = stacked_linears(loss.qvalue_network_params)
        critics_t = stacked_linears(loss.target_qvalue_network_params)
        obs, nobs, act = td["observation"], td["next", "observation"], td["action"]

        def policy(x):
            loc, log_scale = ref_mlp(x, linears(actor)).chunk(2, -1)
            return loc, log_scale.exp()

        def q(layers, x, a, i, detach=False):
            return ref_mlp(torch.cat([x, a], -1), _member(layers, i, detach))

        # SAC parts, deterministic backup (no entropy term in the target).
        a_pi, logp = ref_tanh_sample(*policy(obs))
        logp = logp.unsqueeze(-1)
        min_q_pi = torch.minimum(*[q(critics, obs, a_pi, i, True) for i in range(2)])
        next_a, _ = ref_tanh_sample(*[t.detach() for t in policy(nobs)])
        next_q = torch.minimum(*[q(critics_t, nobs, next_a, i) for i in range(2)])
        y = td["next", "reward"] + 0.8 * (~td["next", "terminated"]).double() * next_q
        preds = [q(critics, obs, act, i) for i in range(2)]
        # CQL(H) with the importance-sampled logsumexp of the paper's appendix.
        obs_r = obs.expand(R, *obs.shape)
        nobs_r = nobs.expand(R, *nobs.shape)
        a_curr, logp_curr = ref_tanh_sample(*[t.detach() for t in policy(obs_r)])
        a_next, logp_next = ref_tanh_sample(*[t.detach() for t in policy(nobs_r)])
        torch.manual_seed(5)
        a_rand = torch.rand(R, 6, 2) * 2 - 1
        log_density = math.log(0.5**2)
        cql = []
        for i in range(2):
            cat = torch.cat(
                [
                    q(critics, obs_r, a_rand, i) - log_density,
                    q(critics, obs_r, a_next, i) - logp_next.unsqueeze(-1),
                    q(critics, obs_r, a_curr, i) - logp_curr.unsqueeze(-1),
                ],
                0,
            )
            lse = 0.7 * torch.logsumexp(cat / 0.7, 0)
            cql.append(2.0 * (lse - preds[i]))
        params = [*actor.parameters(), *loss.qvalue_network_params.values(True, True)]
        assert_matches(out["loss_actor"], (0.5 * logp - min_q_pi).mean(), params, name="actor")
        ref_q = sum((p - y).pow(2) for p in preds).mean()
        assert_matches(out["loss_qvalue"], ref_q, params, name="qvalue")
        if with_lagrange:
            alpha_prime = loss.log_alpha_prime.exp()
            gaps = [c - 0.3 for c in cql]
            ref_cql = sum(alpha_prime.detach() * g for g in gaps).mean()
            ref_prime = (-0.5 * sum(alpha_prime * g.detach() for g in gaps)).mean()
            assert_matches(out["loss_cql"], ref_cql, params, name="cql")
            assert_matches(
                out["loss_alpha_prime"], ref_prime, [loss.log_alpha_prime], name="alpha'"
            )
        else:
            assert_matches(out["loss_cql"], sum(cql).mean(), params, name="cql")


def test_cql_max_q_backup_runs():
    actor = gaussian_actor(3, 2, distribution_class=FixedNoiseTanhNormal)
    qvalue = ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])
    loss = CQLLoss(
        actor, qvalue, target_entropy=-2.0, max_q_backup=True, deterministic_backup=False
    )
    out = loss(transition_batch(4, 3, torch.rand(4, 2) - 0.5))
    sum(v for k, v in out.items() if k.startswith("loss_")).backward()


def test_discrete_cql_matches_reference():
    with float64():
        torch.manual_seed(0)
        net = QValueActor(mlp(4, 3), action_space="categorical")
        index = torch.randint(3, (8,))
        td = transition_batch(8, 4, index)
        loss = DiscreteCQLLoss(net)
        loss.make_value_estimator(gamma=0.8)
        out = loss(td)
        q = ref_mlp(td["observation"], linears(net))
        pred = q.gather(-1, index[:, None])
        target = stacked_linears(loss.target_value_network_params)
        next_q = ref_mlp(td["next", "observation"], target).max(-1, keepdim=True).values
        y = td["next", "reward"] + 0.8 * (~td["next", "terminated"]).double() * next_q
        params = list(net.parameters())
        assert_matches(out["loss_qvalue"], (pred - y).pow(2).mean(), params)
        assert_matches(out["loss_cql"], (q.logsumexp(-1, keepdim=True) - pred).mean(), params)
        with pytest.raises(ValueError):
            loss(transition_batch(8, 4, F.one_hot(index, 3)))
