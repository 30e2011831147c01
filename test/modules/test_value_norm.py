"""Value normalisers, value transforms, their functional forms and torchrl.modules.utils."""

from __future__ import annotations

import pytest
import tensordict.nn.utils as td_utils
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.modules import functional as F
from torchrl.modules import utils as modules_utils
from torchrl.modules.models.value_norm import (
    ComposeValueTransform,
    DecodedValueOperator,
    IdentityValueTransform,
    PercentileValueNorm,
    PopArtValueNorm,
    RunningValueNorm,
    SignedHyperbolicValueTransform,
    SymLogValueTransform,
    ValueNorm,
    ValueTransform,
    decode_value,
    encode_value,
)


class TestFunctional:
    def test_symlog_values_and_inverse(self) -> None:
        x = torch.tensor([-100.0, -1.0, 0.0, 1.0, 100.0])
        expected = torch.sign(x) * torch.log(1 + x.abs())
        torch.testing.assert_close(F.symlog(x), expected)
        torch.testing.assert_close(F.symexp(F.symlog(x)), x)

    def test_symlog_slope_one_at_zero(self) -> None:
        x = torch.zeros(3, requires_grad=True)
        F.symlog(x).sum().backward()
        assert x.grad is not None
        torch.testing.assert_close(x.grad, torch.ones(3))

    @pytest.mark.parametrize("eps", [1e-3, 1e-2])
    def test_signed_hyperbolic_formula_and_inverse(self, eps: float) -> None:
        x = torch.randn(500, dtype=torch.float64) * 1e3
        h = F.signed_hyperbolic(x, eps)
        torch.testing.assert_close(h, x.sign() * ((x.abs() + 1).sqrt() - 1) + eps * x)
        torch.testing.assert_close(F.signed_parabolic(h, eps), x)

    def test_signed_hyperbolic_default_eps(self) -> None:
        x = torch.tensor([99.0])  # sqrt(100) - 1 + 1e-3 * 99
        assert torch.allclose(F.signed_hyperbolic(x), torch.tensor([9.0 + 0.099]))

    def test_signed_parabolic_float32_round_trip(self) -> None:
        x = torch.randn(1000) * 1e3
        back = F.signed_parabolic(F.signed_hyperbolic(x))
        assert ((back - x).abs() / x.abs().clamp_min(1)).max() < 1e-5
        assert not torch.signbit(F.signed_parabolic(torch.zeros(1))).any()

    def test_signed_parabolic_rejects_nonpositive_eps(self) -> None:
        with pytest.raises(ValueError, match="eps > 0"):
            F.signed_parabolic(torch.ones(1), eps=0.0)


def test_modules_utils_are_tensordicts() -> None:
    assert modules_utils.mappings is td_utils.mappings
    assert modules_utils.inv_softplus is td_utils.inv_softplus
    assert modules_utils.biased_softplus is td_utils.biased_softplus
    y = torch.nn.functional.softplus(torch.tensor(modules_utils.inv_softplus(3.0)))
    assert abs(float(y) - 3.0) < 1e-5
    assert float(modules_utils.biased_softplus(2.0)(torch.zeros(1))) == pytest.approx(2.0)
    assert float(modules_utils.mappings("exp")(torch.zeros(()))) == 1.0


class TestRunningValueNorm:
    def test_identity_before_update(self) -> None:
        vn = RunningValueNorm()
        x = torch.randn(4, 1)
        torch.testing.assert_close(vn.normalize(x), x, atol=1e-4, rtol=1e-4)

    def test_matches_full_batch_statistics(self) -> None:
        torch.manual_seed(0)
        data = torch.randn(7, 13, 1) * 5.0 + 3.0
        vn = RunningValueNorm(shape=1)
        for chunk in data:
            vn.update(chunk)
        flat = data.reshape(-1, 1).double()
        torch.testing.assert_close(vn.mean, flat.mean(0))
        torch.testing.assert_close(vn.var, flat.var(0, unbiased=False))
        assert float(vn.count) == 91
        normed = vn.normalize(data.reshape(-1, 1))
        assert abs(float(normed.mean())) < 1e-5
        assert abs(float(normed.std(unbiased=False)) - 1.0) < 1e-4
        torch.testing.assert_close(vn.denormalize(normed), data.reshape(-1, 1))

    def test_multi_dim_shape_and_leading_dims(self) -> None:
        vn = RunningValueNorm(shape=(2,))
        vn.update(torch.tensor([[[0.0, 10.0]], [[2.0, 30.0]]]))  # [2, 1, 2]
        torch.testing.assert_close(vn.loc(), torch.tensor([1.0, 20.0]))

    def test_shape_mismatch_raises(self) -> None:
        vn = RunningValueNorm(shape=1)
        with pytest.raises(ValueError, match="trailing dims"):
            vn.update(torch.zeros(4, 3))

    def test_epsilon_must_be_positive(self) -> None:
        with pytest.raises(ValueError, match="epsilon"):
            RunningValueNorm(epsilon=0.0)

    def test_state_dict_round_trip(self) -> None:
        vn = RunningValueNorm()
        vn.update(torch.randn(20, 1) * 10 + 4)
        other = RunningValueNorm()
        other.load_state_dict(vn.state_dict())
        x = torch.randn(3, 1)
        torch.testing.assert_close(other.normalize(x), vn.normalize(x))
        assert set(vn.state_dict()) == {"count", "mean", "var"}


class TestPopArtValueNorm:
    def test_debiased_first_update_is_batch_stats(self) -> None:
        vn = PopArtValueNorm(beta=0.99)
        batch = torch.tensor([[1.0], [3.0], [5.0]])
        vn.update(batch)
        torch.testing.assert_close(vn.loc(), torch.tensor([3.0]))
        expected_scale = (batch.var(unbiased=False) + vn.epsilon).sqrt().reshape(1)
        torch.testing.assert_close(vn.scale(), expected_scale)

    def test_beta_weights_recent_batches(self) -> None:
        vn = PopArtValueNorm(beta=0.5)
        vn.update(torch.zeros(4, 1))
        vn.update(torch.full((4, 1), 3.0))
        # m = 0.5 * 0.5 * 0 + 0.5 * 3, d = 0.75: mean 2
        torch.testing.assert_close(vn.loc(), torch.tensor([2.0]))

    def test_identity_before_update(self) -> None:
        vn = PopArtValueNorm()
        x = torch.randn(5, 1)
        torch.testing.assert_close(vn.denormalize(vn.normalize(x)), x)
        torch.testing.assert_close(vn.normalize(x), x, atol=1e-4, rtol=1e-4)

    def test_layer_outputs_preserved(self) -> None:
        torch.manual_seed(1)
        head = nn.Linear(6, 2)
        vn = PopArtValueNorm(shape=2, beta=0.7, layer=head)
        x = torch.randn(16, 6)
        with torch.no_grad():
            for scale in (10.0, 1000.0, 3.0):
                before = vn.denormalize(head(x))
                vn.update(torch.randn(64, 2) * scale + scale)
                torch.testing.assert_close(vn.denormalize(head(x)), before, rtol=1e-4, atol=1e-2)
        assert vn.layer is head
        # the layer's parameters are the critic's: not duplicated in the normaliser
        assert list(vn.state_dict()) == ["running_mean", "running_mean_sq", "debiasing_term"]

    def test_layer_validation(self) -> None:
        with pytest.raises(ValueError, match="outputs"):
            PopArtValueNorm(shape=1, layer=nn.Linear(3, 2))
        with pytest.raises(TypeError, match="nn.Linear"):
            PopArtValueNorm(layer=nn.Conv1d(1, 1, 1))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="beta"):
            PopArtValueNorm(beta=1.0)

    def test_state_dict_round_trip(self) -> None:
        vn = PopArtValueNorm(beta=0.9)
        vn.update(torch.randn(10, 1) * 7)
        other = PopArtValueNorm(beta=0.9)
        other.load_state_dict(vn.state_dict())
        x = torch.randn(4, 1)
        torch.testing.assert_close(other.normalize(x), vn.normalize(x))


class TestPercentileValueNorm:
    def test_moving_quantiles_and_scale(self) -> None:
        vn = PercentileValueNorm(quantiles=(0.1, 0.9), rate=0.5)
        batch = torch.linspace(0.0, 1000.0, 1001).unsqueeze(-1)
        vn.update(batch)
        torch.testing.assert_close(vn.low, torch.tensor([50.0], dtype=torch.float64))
        torch.testing.assert_close(vn.high, torch.tensor([450.0], dtype=torch.float64))
        torch.testing.assert_close(vn.scale(), torch.tensor([400.0]))
        torch.testing.assert_close(vn.loc(), torch.zeros(1))  # scale-only by default
        x = torch.tensor([[800.0]])
        torch.testing.assert_close(vn.normalize(x), torch.tensor([[2.0]]))
        torch.testing.assert_close(vn.denormalize(vn.normalize(x)), x)

    def test_min_scale_never_amplifies(self) -> None:
        vn = PercentileValueNorm(rate=1.0, min_scale=1.0)
        vn.update(torch.randn(100, 1) * 0.01)
        torch.testing.assert_close(vn.scale(), torch.ones(1))
        x = torch.tensor([[0.3]])
        torch.testing.assert_close(vn.normalize(x), x)

    def test_center_maps_range_to_unit_interval(self) -> None:
        vn = PercentileValueNorm(quantiles=(0.0, 1.0), rate=1.0, center=True)
        vn.update(torch.tensor([[10.0], [30.0], [20.0]]))
        out = vn.normalize(torch.tensor([[10.0], [30.0]]))
        torch.testing.assert_close(out, torch.tensor([[0.0], [1.0]]))

    def test_arguments_are_checked(self) -> None:
        with pytest.raises(ValueError, match="quantiles"):
            PercentileValueNorm(quantiles=(0.9, 0.1))
        with pytest.raises(ValueError, match="rate"):
            PercentileValueNorm(rate=0.0)
        with pytest.raises(ValueError, match="min_scale"):
            PercentileValueNorm(min_scale=-1.0)

    def test_state_dict(self) -> None:
        vn = PercentileValueNorm(rate=0.3)
        vn.update(torch.randn(50, 1) * 100)
        other = PercentileValueNorm(rate=0.3)
        other.load_state_dict(vn.state_dict())
        torch.testing.assert_close(other.scale(), vn.scale())
        assert set(vn.state_dict()) == {"low", "high"}


def test_encode_decode_value() -> None:
    vn = RunningValueNorm()
    transform = SymLogValueTransform()
    value = torch.tensor([[10.0], [1000.0]])
    encoded = encode_value(value, vn, transform, update=True)
    assert float(vn.count) == 2  # update=True folded the symlog'd values in first
    torch.testing.assert_close(vn.loc(), F.symlog(value).mean(0))
    torch.testing.assert_close(encoded, vn.normalize(F.symlog(value)))
    torch.testing.assert_close(decode_value(encoded, vn, transform), value)
    assert encode_value(value) is value and decode_value(value) is value
    encode_value(value, vn)  # update defaults to False
    assert float(vn.count) == 2


def test_value_norm_base_is_an_interface() -> None:
    vn = ValueNorm(shape=1)
    with pytest.raises(NotImplementedError):
        vn.update(torch.zeros(1, 1))
    with pytest.raises(NotImplementedError):
        vn.normalize(torch.zeros(1, 1))

    class Fixed(ValueNorm):
        def loc(self) -> torch.Tensor:
            return torch.tensor([10.0])

        def scale(self) -> torch.Tensor:
            return torch.tensor([2.0])

    fixed = Fixed()
    torch.testing.assert_close(fixed(torch.tensor([[14.0]])), torch.tensor([[2.0]]))
    torch.testing.assert_close(fixed.denormalize(torch.tensor([[2.0]])), torch.tensor([[14.0]]))


class TestValueTransforms:
    @pytest.mark.parametrize(
        "transform",
        [
            IdentityValueTransform(),
            SymLogValueTransform(),
            SignedHyperbolicValueTransform(epsilon=1e-2),
            ComposeValueTransform(SignedHyperbolicValueTransform(), SymLogValueTransform()),
        ],
    )
    def test_inverse_round_trip(self, transform: ValueTransform) -> None:
        x = torch.linspace(-500.0, 500.0, 101, dtype=torch.float64)
        torch.testing.assert_close(transform.inverse(transform(x)), x)

    def test_forward_values(self) -> None:
        x = torch.tensor([-100.0, 0.0, 100.0])
        torch.testing.assert_close(IdentityValueTransform()(x), x)
        torch.testing.assert_close(SymLogValueTransform()(x), F.symlog(x))
        torch.testing.assert_close(
            SignedHyperbolicValueTransform(epsilon=0.1)(x), F.signed_hyperbolic(x, 0.1)
        )

    def test_compose_order(self) -> None:
        a, b = SignedHyperbolicValueTransform(), SymLogValueTransform()
        x = torch.tensor([-50.0, 7.0])
        torch.testing.assert_close(ComposeValueTransform(a, b)(x), b(a(x)))
        torch.testing.assert_close(ComposeValueTransform(b, a)(x), a(b(x)))
        with pytest.raises(TypeError, match="ValueTransform"):
            ComposeValueTransform(nn.Identity())  # type: ignore[arg-type]

    def test_base_is_abstract_and_subclassable(self) -> None:
        with pytest.raises(NotImplementedError):
            ValueTransform()(torch.zeros(1))

        class Double(ValueTransform):
            def forward(self, value: torch.Tensor) -> torch.Tensor:
                return value * 2

            def inverse(self, value: torch.Tensor) -> torch.Tensor:
                return value / 2

        assert float(Double().inverse(Double()(torch.tensor(3.0)))) == 3.0

    def test_signed_hyperbolic_rejects_bad_epsilon(self) -> None:
        with pytest.raises(ValueError, match="epsilon"):
            SignedHyperbolicValueTransform(epsilon=-1.0)


def test_decoded_value_operator() -> None:
    critic = TensorDictModule(nn.Linear(3, 1), ["observation"], ["state_value"])
    vn = RunningValueNorm()
    vn.update(torch.tensor([[1.0], [5.0]]))  # loc 3, scale ~2
    transform = SymLogValueTransform()
    decoded = DecodedValueOperator(critic, value_norm=vn, value_transform=transform)
    assert decoded.in_keys == ["observation"] and decoded.out_keys == ["state_value"]
    td = TensorDict({"observation": torch.randn(4, 3)}, [4])
    raw = critic(td.clone())["state_value"]
    out = decoded(td)["state_value"]
    torch.testing.assert_close(out, F.symexp(raw * vn.scale() + vn.loc()))
    assert decoded.decode(torch.tensor([[0.0]])).item() == pytest.approx(F.symexp(vn.loc()).item())
