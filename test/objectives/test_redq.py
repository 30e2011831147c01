"""REDQ loss against a hand-written reference (Chen et al. 2021)."""

from __future__ import annotations

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

from torchrl.modules import ValueOperator
from torchrl.objectives import REDQLoss, ValueEstimators


def _member(layers, i, detach=False):
    out = [(w[i], b[i]) for w, b in layers]
    return [(w.detach(), b.detach()) for w, b in out] if detach else out


def test_redq_matches_reference():
    with float64():
        torch.manual_seed(0)
        actor = gaussian_actor(3, 2, distribution_class=FixedNoiseTanhNormal)
        qvalue = ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])
        td = transition_batch(8, 3, torch.rand(8, 2) - 0.5)
        n = 3
        # With the subset as large as the ensemble the random draw does not matter.
        loss = REDQLoss(
            actor,
            qvalue,
            num_qvalue_nets=n,
            sub_sample_len=n,
            target_entropy=-2.0,
            alpha_init=0.4,
            loss_function="l2",
        )
        loss.make_value_estimator(ValueEstimators.TD0, gamma=0.8)
        out = loss(td)

        critics = stacked_linears(loss.qvalue_network_params)
        critics_t = stacked_linears(loss.target_qvalue_network_params)
        obs, nobs = td["observation"], td["next", "observation"]

        def policy(x):
            loc, log_scale = ref_mlp(x, linears(actor)).chunk(2, -1)
            return loc, log_scale.exp()

        def q(layers, x, a, i, detach=False):
            return ref_mlp(torch.cat([x, a], -1), _member(layers, i, detach))

        action, logp = ref_tanh_sample(*policy(obs))
        logp = logp.unsqueeze(-1)
        mean_q = sum(q(critics, obs, action, i, True) for i in range(n)) / n
        ref_actor = (0.4 * logp - mean_q).mean()
        next_action, next_logp = ref_tanh_sample(*[t.detach() for t in policy(nobs)])
        next_q = torch.stack([q(critics_t, nobs, next_action, i) for i in range(n)]).min(0).values
        y = td["next", "reward"] + 0.8 * (~td["next", "terminated"]).double() * (
            next_q - 0.4 * next_logp.unsqueeze(-1)
        )
        ref_q = sum((q(critics, obs, td["action"], i) - y).pow(2) for i in range(n)).mean()
        params = [*actor.parameters(), *loss.qvalue_network_params.values(True, True)]
        assert_matches(out["loss_actor"], ref_actor, params, name="actor")
        assert_matches(out["loss_qvalue"], ref_q, params, name="qvalue")


def test_redq_subset_is_random_and_bounded():
    actor = gaussian_actor(3, 2, distribution_class=FixedNoiseTanhNormal)
    qvalue = ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])
    loss = REDQLoss(actor, qvalue, num_qvalue_nets=6, sub_sample_len=2, target_entropy=-2.0)
    assert loss.qvalue_network_params.batch_size == (6,)
    td = transition_batch(5, 3, torch.rand(5, 2) - 0.5)
    values = {float(loss(td.clone())["loss_qvalue"].detach()) for _ in range(5)}
    assert len(values) > 1  # different subsets give different targets
