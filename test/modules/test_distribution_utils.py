"""torchrl.modules.distributions.utils and OneHotCategorical's reparameterised samples."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import CompositeDistribution, set_composite_lp_aggregate
from torch import distributions as D

from torchrl.modules.distributions.continuous import TanhNormal
from torchrl.modules.distributions.discrete import OneHotCategorical, ReparamGradientStrategy
from torchrl.modules.distributions.utils import (
    composite_entropy,
    has_analytic_entropy,
    has_analytic_kl,
    rsample_and_log_prob,
    sample_and_log_prob,
)


def _normal(loc: float = 0.0, scale: float = 1.0, n: int = 3) -> D.Normal:
    return D.Normal(torch.full((n,), loc), torch.full((n,), scale))


class TestSampleAndLogProb:
    def test_fallback_scores_the_sample(self) -> None:
        dist = _normal(1.0, 2.0)
        sample, lp = sample_and_log_prob(dist, (4,))
        assert sample.shape == (4, 3) and not sample.requires_grad
        torch.testing.assert_close(lp, dist.log_prob(sample))

    def test_uses_the_joint_method_of_the_class(self) -> None:
        loc = torch.zeros(5, 2)
        scale = torch.full((5, 2), 0.5)
        torch.manual_seed(3)
        sample, lp = sample_and_log_prob(TanhNormal(loc, scale), (2,))
        torch.manual_seed(3)
        ref_sample, ref_lp = TanhNormal(loc, scale).sample_and_log_prob(torch.Size([2]))
        torch.testing.assert_close(sample, ref_sample)
        torch.testing.assert_close(lp, ref_lp)
        assert lp.shape == (2, 5)

    def test_reparameterized_draws_carry_gradients(self) -> None:
        loc = torch.zeros(3, requires_grad=True)
        sample, lp = rsample_and_log_prob(D.Normal(loc, 1.0), (2,))
        assert sample.requires_grad
        sample.sum().backward()
        assert loc.grad is not None
        torch.testing.assert_close(loc.grad, torch.full((3,), 2.0))
        loc2 = torch.zeros(3, 2, requires_grad=True)
        s2, lp2 = sample_and_log_prob(TanhNormal(loc2, torch.ones(3, 2)), reparameterize=True)
        assert s2.requires_grad and lp2.shape == (3,)

    def test_composite_follows_the_aggregation_flag(self) -> None:
        params = TensorDict(
            {
                "cont": {"loc": torch.zeros(4, 2), "scale": torch.ones(4, 2)},
                "disc": {"logits": torch.zeros(4, 3)},
            },
            [4],
        )
        dist = CompositeDistribution(params, {"cont": D.Normal, "disc": D.Categorical})
        sample, lp = sample_and_log_prob(dist)
        assert set(lp.keys()) == {"cont_log_prob", "disc_log_prob"}
        with set_composite_lp_aggregate(True):
            sample, total = sample_and_log_prob(dist)
        ref = D.Normal(0.0, 1.0).log_prob(sample["cont"]).sum(-1) - math.log(3)
        torch.testing.assert_close(total, ref)


class TestAnalyticEntropy:
    @pytest.mark.parametrize(
        "dist, expected",
        [
            (_normal(), True),
            (D.Independent(_normal(), 1), True),
            (OneHotCategorical(logits=torch.zeros(3)), True),
            (D.TransformedDistribution(_normal(), [D.TanhTransform()]), False),
            (TanhNormal(torch.zeros(2), torch.ones(2)), False),
            (D.Independent(TanhNormal(torch.zeros(2, 2), torch.ones(2, 2)), 1), False),
        ],
    )
    def test_matches_whether_entropy_works(self, dist: D.Distribution, expected: bool) -> None:
        assert has_analytic_entropy(dist) is expected
        if expected:
            assert torch.isfinite(dist.entropy()).all()
        else:
            with pytest.raises(NotImplementedError):
                dist.entropy()

    def test_composite_is_not_analytic(self) -> None:
        params = TensorDict({"a": {"loc": torch.zeros(2), "scale": torch.ones(2)}}, [2])
        assert not has_analytic_entropy(CompositeDistribution(params, {"a": D.Normal}))


class TestAnalyticKL:
    @pytest.mark.parametrize(
        "p, q, expected",
        [
            (_normal(), _normal(1.0, 2.0), True),
            (D.Independent(_normal(), 1), D.Independent(_normal(1.0), 1), True),
            (_normal(), D.Independent(_normal(), 1), False),
            (
                D.TransformedDistribution(_normal(), [D.ExpTransform()]),
                D.TransformedDistribution(_normal(0.5), [D.ExpTransform()]),
                True,
            ),
            (
                D.TransformedDistribution(_normal(), [D.ExpTransform()]),
                D.TransformedDistribution(_normal(), [D.TanhTransform()]),
                False,
            ),
            (D.Categorical(logits=torch.zeros(3)), _normal(n=1), False),
            (D.Beta(torch.ones(3), torch.ones(3)), _normal(), True),
        ],
    )
    def test_matches_whether_kl_divergence_works(
        self, p: D.Distribution, q: D.Distribution, expected: bool
    ) -> None:
        assert has_analytic_kl(p, q) is expected
        if expected:
            assert torch.isfinite(D.kl_divergence(p, q)).all()
        else:
            with pytest.raises(NotImplementedError):
                D.kl_divergence(p, q)

    def test_independent_dims_must_agree(self) -> None:
        base = D.Normal(torch.zeros(2, 3), 1.0)
        assert not has_analytic_kl(D.Independent(base, 1), D.Independent(base, 2))


class TestCompositeEntropy:
    def _dist(self) -> CompositeDistribution:
        params = TensorDict(
            {
                "cont": {"loc": torch.zeros(4, 2), "scale": torch.full((4, 2), 2.0)},
                ("nested", "disc"): {"logits": torch.zeros(4, 5)},
                "squashed": {"loc": torch.zeros(4, 1), "scale": torch.full((4, 1), 0.3)},
            },
            [4],
        )
        return CompositeDistribution(
            params,
            {"cont": D.Normal, ("nested", "disc"): D.Categorical, "squashed": TanhNormal},
        )

    def test_per_component_entries(self) -> None:
        torch.manual_seed(0)
        ent = composite_entropy(self._dist(), samples_mc=4000)
        assert set(ent.keys(True, True)) == {
            "cont_entropy",
            ("nested", "disc_entropy"),
            "squashed_entropy",
        }
        normal_entropy = 0.5 * math.log(2 * math.pi * math.e * 4.0)
        torch.testing.assert_close(ent["cont_entropy"], torch.full((4, 2), normal_entropy))
        torch.testing.assert_close(ent["nested", "disc_entropy"], torch.full((4,), math.log(5)))
        # TanhNormal: Monte Carlo, against an independent large-sample estimate
        tn = TanhNormal(torch.zeros(1), torch.full((1,), 0.3))
        ref = -tn.log_prob(tn.sample((20000,))).mean()
        assert ent["squashed_entropy"].shape == (4,)
        assert (ent["squashed_entropy"] - ref).abs().max() < 0.05

    def test_aggregated(self) -> None:
        torch.manual_seed(0)
        with set_composite_lp_aggregate(True):
            total = composite_entropy(self._dist(), samples_mc=2000)
        torch.manual_seed(0)
        parts = composite_entropy(self._dist(), samples_mc=2000)
        ref = (
            parts["cont_entropy"].sum(-1)
            + parts["nested", "disc_entropy"]
            + parts["squashed_entropy"]
        )
        assert total.shape == (4,)
        torch.testing.assert_close(total, ref)

    def test_rejects_no_samples(self) -> None:
        with pytest.raises(ValueError, match="samples_mc"):
            composite_entropy(self._dist(), samples_mc=0)


class TestOneHotRsample:
    @pytest.mark.parametrize("grad_method", list(ReparamGradientStrategy))
    @pytest.mark.parametrize("from_probs", [False, True])
    def test_values_are_one_hot(self, grad_method, from_probs: bool) -> None:
        logits = torch.randn(4, 3)
        kwargs = {"probs": logits.softmax(-1)} if from_probs else {"logits": logits}
        sample = OneHotCategorical(**kwargs, grad_method=grad_method).rsample((5,))
        assert sample.shape == (5, 4, 3) and sample.dtype == torch.float32
        assert ((sample == 0) | (sample == 1)).all() and (sample.sum(-1) == 1).all()

    def test_pass_through_gradient_is_the_probabilities(self) -> None:
        logits = torch.randn(4, 3, requires_grad=True)
        weights = torch.tensor([1.0, -2.0, 0.5])
        dist = OneHotCategorical(logits=logits)
        assert dist.grad_method is ReparamGradientStrategy.PassThrough
        (grad,) = torch.autograd.grad((dist.rsample() * weights).sum(), logits)
        (ref,) = torch.autograd.grad((logits.softmax(-1) * weights).sum(), logits)
        torch.testing.assert_close(grad, ref)

    def test_relaxed_gradient_is_the_gumbel_softmax_one(self) -> None:
        logits = torch.randn(4, 3, requires_grad=True)
        weights = torch.tensor([1.0, -2.0, 0.5])
        dist = OneHotCategorical(logits=logits, grad_method=ReparamGradientStrategy.RelaxedOneHot)
        torch.manual_seed(5)
        sample = dist.rsample()
        (grad,) = torch.autograd.grad((sample * weights).sum(), logits)
        torch.manual_seed(5)
        relaxed = D.RelaxedOneHotCategorical(1.0, logits=logits).rsample()
        (ref,) = torch.autograd.grad((relaxed * weights).sum(), logits)
        torch.testing.assert_close(grad, ref)
        torch.testing.assert_close(sample.argmax(-1), relaxed.argmax(-1))

    def test_sampling_is_unchanged(self) -> None:
        dist = OneHotCategorical(logits=torch.zeros(2, 3))
        assert not dist.has_rsample  # policies keep drawing long one-hot samples
        assert dist.sample().dtype == torch.long

    def test_bad_grad_method(self) -> None:
        with pytest.raises(TypeError, match="ReparamGradientStrategy"):
            OneHotCategorical(logits=torch.zeros(3), grad_method="pass")  # type: ignore[arg-type]
