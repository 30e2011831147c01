"""Behaviour and numerics of torchrl.modules.distributions."""

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, ProbabilisticTensorDictModule, set_interaction_type
from torch import distributions as D

from torchrl.modules import (
    Delta,
    IndependentNormal,
    MaskedCategorical,
    MaskedOneHotCategorical,
    NormalParamExtractor,
    OneHotCategorical,
    OneHotOrdinal,
    Ordinal,
    TanhDelta,
    TanhNormal,
    TruncatedNormal,
)


def _reference_tanh_normal_log_prob(value, loc, scale, low, high):
    """log N(atanh(u); loc, scale) - log(1 - u^2) - log(half), float64, no clamping."""
    half, mid = (high - low) / 2, (high + low) / 2
    u = (value - mid) / half
    x = 0.5 * torch.log((1 + u) / (1 - u))
    normal = -0.5 * ((x - loc) / scale) ** 2 - torch.log(scale) - 0.5 * math.log(2 * math.pi)
    return normal - torch.log(1 - u**2) - torch.log(half)


class TestTanhNormal:
    def test_shapes_bounds_and_gradients(self):
        loc = torch.randn(5, 3, requires_grad=True)
        scale = torch.rand(5, 3).add(0.1).requires_grad_()
        low, high = torch.tensor([-1.0, 0.0, 2.0]), torch.tensor([1.0, 5.0, 2.5])
        dist = TanhNormal(loc, scale, low=low, high=high)
        assert dist.batch_shape == (5,) and dist.event_shape == (3,)
        sample = dist.rsample((7,))
        assert sample.shape == (7, 5, 3)
        assert ((sample > low) & (sample < high)).all()
        assert dist.log_prob(sample).shape == (7, 5)
        sample.sum().backward()
        assert loc.grad.abs().sum() > 0 and scale.grad.abs().sum() > 0

    def test_event_dims(self):
        dist = TanhNormal(torch.zeros(4, 2), torch.ones(4, 2), event_dims=0)
        assert dist.log_prob(torch.zeros(4, 2)).shape == (4, 2)
        dist = TanhNormal(torch.zeros(4, 2), torch.ones(4, 2), event_dims=2)
        assert dist.log_prob(torch.zeros(4, 2)).shape == ()

    def test_log_prob_matches_float64_reference(self):
        torch.manual_seed(1)
        loc = torch.randn(200, 2, dtype=torch.float64)
        scale = torch.rand(200, 2, dtype=torch.float64) + 0.2
        low = torch.tensor([-2.0, 0.5], dtype=torch.float64)
        high = torch.tensor([3.0, 0.75], dtype=torch.float64)
        dist = TanhNormal(loc, scale, low=low, high=high, event_dims=0)
        u = torch.rand(200, 2, dtype=torch.float64) * 1.98 - 0.99
        value = (high + low) / 2 + (high - low) / 2 * u
        ref = _reference_tanh_normal_log_prob(value, loc, scale, low, high)
        torch.testing.assert_close(dist.log_prob(value), ref, rtol=1e-10, atol=1e-10)
        torch_ref = D.TransformedDistribution(
            D.Normal(loc, scale),
            [D.TanhTransform(), D.AffineTransform((high + low) / 2, (high - low) / 2)],
        )
        torch.testing.assert_close(dist.log_prob(value), torch_ref.log_prob(value))

    def test_density_integrates_to_one(self):
        dist = TanhNormal(
            torch.tensor([0.4], dtype=torch.float64),
            torch.tensor([0.6], dtype=torch.float64),
            low=-3.0,
            high=1.0,
            event_dims=0,
        )
        y = torch.linspace(-3, 1, 400001, dtype=torch.float64)[1:-1, None]
        density = dist.log_prob(y).exp().squeeze(-1)
        assert abs(torch.trapezoid(density, y.squeeze(-1)).item() - 1) < 1e-6

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    def test_log_prob_finite_at_the_bounds(self, dtype):
        dist = TanhNormal(
            torch.zeros(2, dtype=dtype),
            torch.ones(2, dtype=dtype),
            low=-2.0,
            high=4.0,
            event_dims=0,
        )
        lp = dist.log_prob(torch.tensor([-2.0, 4.0], dtype=dtype))
        assert torch.isfinite(lp).all()
        # Saturated samples (|x| >> 1) are scored finitely, and exactly from the pre-tanh draw.
        far = TanhNormal(
            torch.full((1000,), 30.0, dtype=dtype), torch.ones(1000, dtype=dtype), event_dims=0
        )
        sample, lp = far.rsample_and_log_prob()
        assert torch.isfinite(lp).all() and torch.isfinite(far.log_prob(sample)).all()

    def test_joint_log_prob_matches_log_prob(self):
        dist = TanhNormal(
            torch.randn(100, 3, dtype=torch.float64),
            torch.rand(100, 3, dtype=torch.float64) + 0.3,
            low=-1.5,
            high=0.5,
        )
        sample, lp = dist.rsample_and_log_prob()
        torch.testing.assert_close(lp, dist.log_prob(sample), rtol=1e-8, atol=1e-8)

    def test_mc_entropy(self):
        loc = torch.tensor([0.4, -1.2], dtype=torch.float64, requires_grad=True)
        scale = torch.tensor([0.6, 1.5], dtype=torch.float64, requires_grad=True)
        dist = TanhNormal(loc, scale, low=-3.0, high=1.0, event_dims=0)
        # The same draws as rsample_and_log_prob, scored the same way.
        torch.manual_seed(3)
        one = dist.mc_entropy()
        torch.manual_seed(3)
        torch.testing.assert_close(one, -dist.rsample_and_log_prob()[1])
        torch.manual_seed(3)
        four = dist.mc_entropy(num_samples=4)
        torch.manual_seed(3)
        torch.testing.assert_close(four, -dist.rsample_and_log_prob((4,))[1].mean(0))
        assert one.shape == four.shape == (2,)
        # An unbiased estimate: close to the entropy integrated on a fine grid.
        many = dist.mc_entropy(num_samples=200_000)
        y = torch.linspace(-3, 1, 400001, dtype=torch.float64)[1:-1, None]
        with torch.no_grad():
            lp = dist.log_prob(y)
        exact = -torch.trapezoid(lp.exp() * lp, y.squeeze(-1), dim=0)
        torch.testing.assert_close(many.detach(), exact, atol=0.02, rtol=0)
        # Reparameterised: gradients reach both parameters.
        many.sum().backward()
        assert loc.grad is not None and scale.grad is not None
        assert (loc.grad != 0).all() and (scale.grad != 0).all()
        with pytest.raises(ValueError, match="num_samples"):
            dist.mc_entropy(num_samples=0)

    def test_statistics(self):
        loc = torch.tensor([[0.3, -1.0, 2.0]], dtype=torch.float64)
        scale = torch.tensor([[0.5, 2.0, 0.1]], dtype=torch.float64)
        dist = TanhNormal(loc, scale, low=-2.0, high=3.0)
        torch.testing.assert_close(dist.deterministic_sample, 0.5 + 2.5 * torch.tanh(loc))
        torch.testing.assert_close(dist.median, dist.deterministic_sample)
        # The mode is the argmax of the density: compare with a fine grid.
        grid = torch.linspace(-2, 3, 200001, dtype=torch.float64)[1:-1]
        lp = TanhNormal(loc.T, scale.T, low=-2.0, high=3.0, event_dims=0).log_prob(grid)
        torch.testing.assert_close(dist.mode[0], grid[lp.argmax(-1)], atol=1e-4, rtol=0)
        with pytest.raises(NotImplementedError, match="mean"):
            dist.mean  # noqa: B018
        with pytest.raises(NotImplementedError, match="entropy"):
            dist.entropy()

    def test_tanh_loc_and_errors(self):
        dist = TanhNormal(torch.tensor([100.0]), torch.ones(1), upscale=2.0, tanh_loc=True)
        assert dist.loc.item() == pytest.approx(2.0)
        with pytest.raises(ValueError, match="greater than low"):
            TanhNormal(torch.zeros(1), torch.ones(1), low=1.0, high=0.0)

    def test_interaction_types(self):
        module = ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=TanhNormal,
            distribution_kwargs={"low": -2.0, "high": 2.0},
            return_log_prob=True,
        )
        td = TensorDict(loc=torch.randn(10, 2), scale=torch.ones(10, 2), batch_size=[10])
        with set_interaction_type(InteractionType.DETERMINISTIC):
            out = module(td.clone())
        torch.testing.assert_close(out["action"], 2 * torch.tanh(td["loc"]))
        with set_interaction_type(InteractionType.RANDOM):
            out = module(td.clone())
        dist = TanhNormal(td["loc"], td["scale"], low=-2.0, high=2.0)
        torch.testing.assert_close(
            out["action_log_prob"], dist.log_prob(out["action"]), rtol=1e-3, atol=1e-3
        )
        with set_interaction_type(InteractionType.MODE):
            torch.testing.assert_close(module(td.clone())["action"], dist.mode)
        with set_interaction_type(InteractionType.MEAN):
            assert module(td.clone())["action"].abs().max() < 2


class TestTruncatedNormal:
    def test_support_and_density(self):
        dist = TruncatedNormal(
            torch.tensor([[0.5]], dtype=torch.float64),
            torch.tensor([[0.8]], dtype=torch.float64),
            low=-1.0,
            high=2.0,
        )
        sample = dist.sample((1000,))
        assert ((sample >= -1) & (sample <= 2)).all()
        y = torch.linspace(-1, 2, 100001, dtype=torch.float64)
        density = dist.log_prob(y[:, None, None]).exp().squeeze(-1).squeeze(-1)
        assert abs(torch.trapezoid(density, y).item() - 1) < 1e-6
        assert torch.isfinite(dist.log_prob(torch.tensor([[2.0]], dtype=torch.float64))).all()
        assert dist.log_prob(torch.tensor([[2.1]], dtype=torch.float64)).item() == -math.inf

    def test_statistics(self):
        dist = TruncatedNormal(torch.tensor([0.2, 3.0, -4.0]), torch.ones(3), low=-1.0, high=1.0)
        torch.testing.assert_close(dist.deterministic_sample, torch.tensor([0.2, 1.0, -1.0]))
        assert (dist.mean.abs() <= 1).all()
        assert dist.entropy().shape == ()
        assert dist.log_prob(torch.zeros(3)).shape == ()


def test_independent_normal():
    loc, scale = torch.randn(4, 3), torch.rand(4, 3) + 0.1
    dist = IndependentNormal(loc, scale)
    value = torch.randn(4, 3)
    torch.testing.assert_close(dist.log_prob(value), D.Normal(loc, scale).log_prob(value).sum(-1))
    torch.testing.assert_close(dist.deterministic_sample, loc)


def test_tanh_delta_and_delta():
    dist = TanhDelta(
        torch.tensor([[0.0, 50.0, -50.0]]),
        low=torch.tensor([0.0, 0.0, -1.0]),
        high=torch.tensor([2.0, 1.0, 1.0]),
    )
    expected = torch.tensor([[1.0, 1.0, -1.0]])
    torch.testing.assert_close(dist.sample(), expected)
    torch.testing.assert_close(dist.deterministic_sample, expected)
    assert dist.log_prob(expected).item() == math.inf
    assert dist.log_prob(expected + 0.1).item() == -math.inf
    assert Delta(torch.ones(3)).mode.sum() == 3


@pytest.mark.parametrize(
    "mapping, expected",
    [("biased_softplus_1.0", 1.0), ("exp", 1.0), ("softplus", math.log(2.0))],
)
def test_normal_param_extractor(mapping, expected):
    loc, scale = NormalParamExtractor(scale_mapping=mapping)(torch.zeros(3, 4))
    assert loc.shape == scale.shape == (3, 2)
    torch.testing.assert_close(scale, torch.full((3, 2), expected))
    _, scale = NormalParamExtractor(scale_lb=0.5)(torch.full((1, 2), -100.0))
    assert scale.item() == 0.5


class TestMaskedCategorical:
    logits = torch.tensor([[5.0, 0.0, 1.0, 2.0], [0.0, 0.0, 0.0, 3.0]])
    mask = torch.tensor([[False, True, True, True], [True, True, False, False]])

    def test_masked_categories_have_no_mass(self):
        dist = MaskedCategorical(logits=self.logits, mask=self.mask)
        samples = dist.sample((5000,))
        picked = torch.nn.functional.one_hot(samples, 4).bool().any(0)
        assert not (picked & ~self.mask).any()
        assert (picked == self.mask).all()
        expected = torch.where(self.mask, self.logits, -math.inf).softmax(-1)
        torch.testing.assert_close(dist.probs, expected)

    def test_log_prob_entropy_mode(self):
        dist = MaskedCategorical(logits=self.logits, mask=self.mask)
        lp = dist.log_prob(torch.tensor([0, 1]))
        assert lp[0].item() == -math.inf and torch.isfinite(lp[1])
        # Entropy of the renormalised distribution over the allowed categories only.
        for row in range(2):
            allowed = self.logits[row][self.mask[row]]
            ref = D.Categorical(logits=allowed).entropy()
            torch.testing.assert_close(dist.entropy()[row], ref)
        # The best *allowed* category, although a masked one has a larger logit.
        torch.testing.assert_close(dist.deterministic_sample, torch.tensor([3, 0]))

    def test_sparse_indices_and_probs(self):
        indices = torch.tensor([[1, 2, 3], [0, 1, -1]])
        dist = MaskedCategorical(logits=self.logits, indices=indices, padding_value=-1)
        torch.testing.assert_close(dist.mask, self.mask)
        dense = MaskedCategorical(probs=self.logits.softmax(-1), mask=self.mask)
        torch.testing.assert_close(dense.probs, dist.probs)

    def test_errors(self):
        with pytest.raises(ValueError, match="mask"):
            MaskedCategorical(logits=self.logits)
        with pytest.raises(TypeError, match="boolean"):
            MaskedCategorical(logits=self.logits, mask=self.mask.long())
        with pytest.raises(ValueError, match="exactly one"):
            MaskedCategorical(mask=self.mask)

    def test_one_hot(self):
        dist = MaskedOneHotCategorical(logits=self.logits, mask=self.mask)
        sample = dist.sample((100,))
        assert sample.shape == (100, 2, 4) and (sample.sum(-1) == 1).all()
        assert not (sample.bool() & ~self.mask).any()
        torch.testing.assert_close(
            dist.log_prob(sample),
            MaskedCategorical(logits=self.logits, mask=self.mask).log_prob(sample.argmax(-1)),
        )
        torch.testing.assert_close(dist.mode, torch.tensor([[0, 0, 0, 1], [1, 0, 0, 0]]))
        assert dist.event_shape == (4,)

    def test_in_probabilistic_module(self):
        module = ProbabilisticTensorDictModule(
            in_keys={"logits": "logits", "mask": "action_mask"},
            out_keys=["action"],
            distribution_class=MaskedCategorical,
            return_log_prob=True,
        )
        td = TensorDict(logits=self.logits, action_mask=self.mask, batch_size=[2])
        with set_interaction_type(InteractionType.RANDOM):
            for _ in range(20):
                action = module(td.clone())["action"]
                assert self.mask.gather(-1, action[:, None]).all()
        with set_interaction_type(InteractionType.DETERMINISTIC):
            torch.testing.assert_close(module(td.clone())["action"], torch.tensor([3, 0]))


class TestOrdinal:
    def test_logits_formula(self):
        scores = torch.randn(3, 5)
        dist = Ordinal(scores)
        sig = scores.sigmoid()
        ref = torch.empty(3, 5)
        for k in range(5):
            ref[:, k] = sig[:, : k + 1].log().sum(-1) + (1 - sig[:, k + 1 :]).log().sum(-1)
        torch.testing.assert_close(dist.logits, ref.log_softmax(-1), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(dist.probs.sum(-1), torch.ones(3))
        assert dist.deterministic_sample.shape == (3,)

    def test_one_hot(self):
        dist = OneHotOrdinal(torch.tensor([9.0, 9.0, 9.0, -9.0]))
        torch.testing.assert_close(dist.deterministic_sample, torch.tensor([0, 0, 1, 0]))
        assert dist.sample((4,)).shape == (4, 4)


def test_one_hot_categorical():
    dist = OneHotCategorical(logits=torch.tensor([0.0, 3.0, 1.0]))
    assert dist.sample((10,)).sum(-1).eq(1).all()
    torch.testing.assert_close(dist.deterministic_sample, torch.tensor([0, 1, 0]))
