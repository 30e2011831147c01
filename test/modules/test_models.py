"""Behaviour of the networks in torchrl.modules.models."""

import pytest
import torch
from torch import nn

from torchrl.modules import (
    MLP,
    BatchRenorm1d,
    ConvNet,
    DecisionTransformer,
    DTActor,
    DTConfig,
    DuelingCnnDQNet,
    MultiAgentConvNet,
    MultiAgentMLP,
    NoisyLazyLinear,
    NoisyLinear,
    QMixer,
    VDNMixer,
    reset_noise,
)
from torchrl.modules.models.utils import ScalarBias


class TestMLP:
    def test_shapes_and_depth(self):
        mlp = MLP(in_features=4, out_features=3, num_cells=[8, 16])
        linears = [m for m in mlp if isinstance(m, nn.Linear)]
        assert [(m.in_features, m.out_features) for m in linears] == [(4, 8), (8, 16), (16, 3)]
        assert mlp(torch.randn(5, 7, 4)).shape == (5, 7, 3)

    def test_defaults(self):
        mlp = MLP(in_features=2, out_features=1)
        linears = [m for m in mlp if isinstance(m, nn.Linear)]
        assert len(linears) == 4 and all(m.out_features == 32 for m in linears[:-1])
        assert sum(isinstance(m, nn.Tanh) for m in mlp) == 3

    def test_depth_zero_is_one_linear(self):
        mlp = MLP(in_features=3, out_features=2, depth=0)
        assert len(mlp) == 1 and isinstance(mlp[0], nn.Linear)

    def test_lazy(self):
        mlp = MLP(out_features=2, depth=1, num_cells=4)
        assert isinstance(mlp[0], nn.LazyLinear)
        assert mlp(torch.randn(3, 9)).shape == (3, 2)
        assert mlp[0].weight.shape == (4, 9)

    def test_tuple_out_features(self):
        mlp = MLP(in_features=3, out_features=(2, 5), depth=1, num_cells=4)
        assert mlp(torch.randn(6, 3)).shape == (6, 2, 5)
        assert mlp[-1].out_features == 10

    def test_multiple_inputs_are_concatenated(self):
        mlp = MLP(in_features=5, out_features=1, depth=1, num_cells=4)
        obs, act = torch.randn(3, 4), torch.randn(3, 1)
        torch.testing.assert_close(mlp(obs, act), mlp(torch.cat([obs, act], -1)))

    def test_activate_last_layer_and_activation_kwargs(self):
        mlp = MLP(
            in_features=2,
            out_features=3,
            depth=1,
            num_cells=4,
            activation_class=nn.LeakyReLU,
            activation_kwargs=[{"negative_slope": 0.5}, {"negative_slope": 0.25}],
            activate_last_layer=True,
        )
        slopes = [m.negative_slope for m in mlp if isinstance(m, nn.LeakyReLU)]
        assert slopes == [0.5, 0.25]

    def test_norm_and_dropout(self):
        mlp = MLP(
            in_features=2,
            out_features=1,
            depth=2,
            num_cells=4,
            norm_class=nn.LayerNorm,
            norm_kwargs={"normalized_shape": 4},
            dropout=0.5,
        )
        kinds = [type(m) for m in mlp]
        assert kinds == [nn.Linear, nn.LayerNorm, nn.Tanh, nn.Dropout] * 2 + [nn.Linear]
        mlp.eval()
        x = torch.randn(3, 2)
        torch.testing.assert_close(mlp(x), mlp(x))

    def test_bias_options(self):
        assert MLP(in_features=2, out_features=3, depth=1, bias_last_layer=False)[-1].bias is None
        mlp = MLP(in_features=2, out_features=3, depth=1, single_bias_last_layer=True)
        assert mlp[-2].bias is None and isinstance(mlp[-1], ScalarBias)
        assert mlp[-1].bias.shape == (1,)

    def test_noisy_layer_class(self):
        mlp = MLP(out_features=2, depth=1, num_cells=4, layer_class=NoisyLinear)
        assert isinstance(mlp[0], NoisyLazyLinear)
        mlp(torch.randn(2, 3))
        assert type(mlp[0]) is NoisyLinear and isinstance(mlp[-1], NoisyLinear)

    def test_errors(self):
        with pytest.raises(ValueError, match="out_features"):
            MLP(in_features=2)
        with pytest.raises(ValueError, match="depth=3"):
            MLP(in_features=2, out_features=1, depth=3, num_cells=[4, 4])
        with pytest.raises(ValueError, match="lazy version"):
            MLP(out_features=1, layer_class=nn.Bilinear)
        with pytest.raises(TypeError, match="at least one"):
            MLP(in_features=2, out_features=1)()


class TestConvNet:
    def test_shapes(self):
        net = ConvNet(in_features=3, num_cells=[4, 8], kernel_sizes=[3, 3], strides=[1, 2])
        out = net(torch.randn(2, 5, 3, 16, 16))
        # 16 -> 14 (k3 s1) -> 6 (k3 s2); 8 channels flattened
        assert out.shape == (2, 5, 8 * 6 * 6)
        assert net(torch.randn(3, 16, 16)).shape == (8 * 6 * 6,)

    def test_lazy_default(self):
        net = ConvNet()
        assert isinstance(net.layers[0], nn.LazyConv2d)
        assert net(torch.randn(1, 2, 10, 10)).shape == (1, 32 * 4 * 4)

    def test_squeeze_output(self):
        net = ConvNet(in_features=1, num_cells=[4], kernel_sizes=5, aggregator_class=None)
        net.squeeze_output = True
        assert net(torch.randn(7, 1, 5, 5)).shape == (7, 4)

    def test_errors(self):
        with pytest.raises(ValueError, match="different lengths"):
            ConvNet(num_cells=[4, 4], kernel_sizes=[3, 3, 3])
        with pytest.raises(ValueError, match="C, H, W"):
            ConvNet()(torch.randn(4, 4))


def test_dueling_cnn_dqnet():
    net = DuelingCnnDQNet(
        out_features=5,
        cnn_kwargs={"num_cells": [4], "kernel_sizes": [3], "strides": [1]},
        mlp_kwargs={"num_cells": 8},
    )
    x = torch.randn(3, 2, 8, 8)
    q = net(x)
    assert q.shape == (3, 5)
    # Dueling identity: the action-average of Q is the state value.
    value = net.value(net.features(x))
    torch.testing.assert_close(q.mean(-1, keepdim=True), value)


class TestNoisyLinear:
    def test_noise_train_vs_eval(self):
        layer = NoisyLinear(4, 3)
        x = torch.randn(2, 4)
        mean_out = nn.functional.linear(x, layer.weight_mu, layer.bias_mu)
        assert not torch.allclose(layer(x), mean_out)
        layer.eval()
        torch.testing.assert_close(layer(x), mean_out)

    def test_reset_noise_and_factorised_rank(self):
        layer = NoisyLinear(5, 4)
        x = torch.randn(2, 5)
        out1 = layer(x)
        torch.testing.assert_close(layer(x), out1)
        reset_noise(layer)
        assert not torch.allclose(layer(x), out1)
        assert torch.linalg.matrix_rank(layer.weight_epsilon) == 1
        # weight noise = outer(bias noise, input noise): every row is a multiple of one vector
        ratio = layer.weight_epsilon / layer.bias_epsilon[:, None]
        torch.testing.assert_close(ratio, ratio[:1].expand_as(ratio))

    def test_gradients_reach_sigma(self):
        layer = NoisyLinear(3, 2, std_init=0.5)
        assert torch.allclose(layer.weight_sigma, torch.full((2, 3), 0.5 / 3**0.5))
        layer(torch.randn(4, 3)).sum().backward()
        assert layer.weight_sigma.grad.abs().sum() > 0
        assert layer.bias_sigma.grad.abs().sum() > 0

    def test_no_bias_and_lazy(self):
        assert NoisyLinear(2, 2, bias=False).bias is None
        lazy = NoisyLazyLinear(3)
        assert lazy(torch.randn(4, 6)).shape == (4, 3)
        assert type(lazy) is NoisyLinear and lazy.in_features == 6


class TestMultiAgentMLP:
    @pytest.mark.parametrize("centralized", [False, True])
    @pytest.mark.parametrize("share_params", [False, True])
    def test_shapes(self, centralized, share_params):
        net = MultiAgentMLP(
            4,
            2,
            n_agents=3,
            centralized=centralized,
            share_params=share_params,
            depth=1,
            num_cells=8,
        )
        assert net(torch.randn(5, 6, 3, 4)).shape == (5, 6, 3, 2)
        assert net(torch.randn(3, 4)).shape == (3, 2)

    def test_matches_per_agent_loop(self):
        net = MultiAgentMLP(
            4, 2, n_agents=3, centralized=False, share_params=False, depth=2, num_cells=8
        )
        x = torch.randn(7, 3, 4)
        out = net(x)
        params = dict(net.agent_net.named_parameters())
        assert params["0.weight"].shape == (3, 8, 4)
        for i in range(3):
            ref = torch.func.functional_call(
                net.agent_net, {k: v[i] for k, v in params.items()}, (x[:, i],)
            )
            torch.testing.assert_close(out[:, i], ref)

    @pytest.mark.parametrize("centralized", [False, True])
    def test_batched_matmul_path_matches_vmap(self, centralized):
        net = MultiAgentMLP(
            4, 3, n_agents=5, centralized=centralized, share_params=False, depth=2, num_cells=8
        )
        x = torch.randn(2, 7, 5, 4)
        fast = net(x)
        assert net._bmm_ok
        net._bmm_ok = False  # force the general vmap + functional_call path
        torch.testing.assert_close(fast, net(x))
        # Layers with parameters other than Linear (here LayerNorm) take the vmap path.
        normed = MultiAgentMLP(
            4,
            3,
            n_agents=5,
            centralized=False,
            share_params=False,
            depth=1,
            num_cells=8,
            norm_class=nn.LayerNorm,
            norm_kwargs={"normalized_shape": 8},
        )
        assert normed(x).shape == (2, 7, 5, 3) and not normed._bmm_ok

    def test_independent_parameters_differ(self):
        net = MultiAgentMLP(4, 2, n_agents=3, centralized=False, share_params=False)
        out = net(torch.ones(1, 3, 4).expand(1, 3, 4))
        assert not torch.allclose(out[:, 0], out[:, 1])
        shared = MultiAgentMLP(4, 2, n_agents=3, centralized=False, share_params=True)
        out = shared(torch.ones(1, 3, 4))
        torch.testing.assert_close(out[:, 0], out[:, 1])

    @pytest.mark.parametrize("share_params", [False, True])
    def test_centralized_sees_other_agents(self, share_params):
        x = torch.randn(2, 3, 4)
        x2 = x.clone()
        x2[:, 2] += 1.0
        for centralized in (True, False):
            net = MultiAgentMLP(
                4, 2, n_agents=3, centralized=centralized, share_params=share_params
            )
            changed = not torch.allclose(net(x)[:, 0], net(x2)[:, 0])
            assert changed == centralized

    def test_lazy_and_gradients(self):
        net = MultiAgentMLP(None, 2, n_agents=2, centralized=False, share_params=False)
        assert net.agent_net is None
        out = net(torch.randn(5, 2, 6))
        out.sum().backward()
        assert all(p.grad is not None for p in net.parameters())
        assert net.agent_net.get_parameter("0.weight").shape == (2, 32, 6)

    def test_errors(self):
        with pytest.raises(TypeError, match="centralized"):
            MultiAgentMLP(2, 2, n_agents=2)
        net = MultiAgentMLP(2, 2, n_agents=2, centralized=False, share_params=False)
        with pytest.raises(ValueError, match="n_agents=2"):
            net(torch.randn(4, 3, 2))


class TestMultiAgentConvNet:
    @pytest.mark.parametrize("centralized", [False, True])
    @pytest.mark.parametrize("share_params", [False, True])
    def test_shapes(self, centralized, share_params):
        net = MultiAgentConvNet(
            2, centralized=centralized, share_params=share_params, num_cells=[3], kernel_sizes=3
        )
        out = net(torch.randn(4, 2, 1, 6, 6))
        assert out.shape == (4, 2, 3 * 4 * 4)
        if centralized and share_params:
            torch.testing.assert_close(out[:, 0], out[:, 1])

    def test_non_lazy_and_dependence(self):
        net = MultiAgentConvNet(
            2, centralized=True, share_params=False, in_features=1, num_cells=[3]
        )
        assert net.agent_net.get_parameter("layers.0.weight").shape == (2, 3, 2, 3, 3)
        x = torch.randn(1, 2, 1, 5, 5)
        x2 = x.clone()
        x2[:, 1] += 1
        assert not torch.allclose(net(x)[:, 0], net(x2)[:, 0])


class TestMixers:
    def test_vdn(self):
        values = torch.randn(4, 5, 3, 1)
        torch.testing.assert_close(VDNMixer(3)(values), values.sum(-2))

    def test_qmix_shapes_and_monotonicity(self):
        mixer = QMixer(state_shape=(6,), mixing_embed_dim=8, n_agents=3)
        values = torch.randn(4, 5, 3, 1, requires_grad=True)
        state = torch.randn(4, 5, 6)
        total = mixer(values, state)
        assert total.shape == (4, 5, 1)
        (grad,) = torch.autograd.grad(total.sum(), values)
        assert (grad >= 0).all()

    def test_errors(self):
        mixer = QMixer(state_shape=4, mixing_embed_dim=8, n_agents=2)
        with pytest.raises(TypeError, match="state"):
            mixer(torch.randn(3, 2, 1))
        with pytest.raises(ValueError, match="state must be"):
            mixer(torch.randn(3, 2, 1), torch.randn(3, 5))
        with pytest.raises(ValueError, match="n_agents=2"):
            VDNMixer(2)(torch.randn(3, 3, 1))


class TestDecisionTransformer:
    cfg = DTConfig(n_embd=16, n_layer=2, n_head=2, n_inner=32, resid_pdrop=0.0, attn_pdrop=0.0)

    def test_shape_and_causality(self):
        dt = DecisionTransformer(3, 2, self.cfg)
        obs, act, rtg = torch.randn(2, 6, 3), torch.randn(2, 6, 2), torch.randn(2, 6, 1)
        out = dt(obs, act, rtg)
        assert out.shape == (2, 6, 16)
        # The future (t >= 4) cannot change the features at t < 4.
        obs2, act2 = obs.clone(), act.clone()
        obs2[:, 4:] += 1
        act2[:, 3:] += 1  # a_3 comes after the state token s_3
        out2 = dt(obs2, act2, rtg)
        torch.testing.assert_close(out2[:, :4], out[:, :4])
        assert not torch.allclose(out2[:, 4:], out[:, 4:])

    def test_errors(self):
        with pytest.raises(ValueError, match="n_positions"):
            DecisionTransformer(3, 2, {"n_embd": 8, "n_head": 2, "n_positions": 6})(
                torch.zeros(1, 3, 3), torch.zeros(1, 3, 2), torch.zeros(1, 3, 1)
            )
        with pytest.raises(ValueError, match="divisible"):
            DecisionTransformer(3, 2, {"n_embd": 10, "n_head": 3})

    def test_actor(self):
        actor = DTActor(3, 2, self.cfg)
        out = actor(torch.randn(4, 5, 3), torch.randn(4, 5, 2), torch.randn(4, 5, 1))
        assert out.shape == (4, 5, 2) and out.abs().max() <= 1


class TestBatchRenorm:
    def test_warmup_is_batch_norm(self):
        norm = BatchRenorm1d(3, warmup_steps=5)
        x = torch.randn(32, 3) * 3 + 1
        ref = nn.functional.batch_norm(x, None, None, training=True, eps=1e-5)
        torch.testing.assert_close(norm(x), ref)

    def test_renorm_correction(self):
        norm = BatchRenorm1d(2, warmup_steps=0, momentum=0.5)
        x = torch.randn(16, 2) * 4 + 3
        out = norm(x)
        mean, std = x.mean(0), (x.var(0, unbiased=False) + 1e-5).sqrt()
        r = (std / 1.0).clamp(1 / 3, 3)
        d = (mean / 1.0).clamp(-5, 5)
        torch.testing.assert_close(out, (x - mean) / std * r + d, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(norm.running_mean, 0.5 * mean)
        assert int(norm.num_batches_tracked) == 1

    def test_smooth_warmup_ramps_in(self):
        x = torch.randn(16, 2) * 4 + 3
        plain = BatchRenorm1d(2, warmup_steps=4, smooth=False)
        smooth = BatchRenorm1d(2, warmup_steps=4, smooth=True)
        for norm in (plain, smooth):
            norm.running_mean.fill_(1.0)
            norm.num_batches_tracked.fill_(2)
        mean, std = x.mean(0), (x.var(0, unbiased=False) + 1e-5).sqrt()
        r = (std / (1 + 1e-5) ** 0.5).clamp(1 / 3, 3)
        d = ((mean - 1) / (1 + 1e-5) ** 0.5).clamp(-5, 5)
        x_hat = (x - mean) / std
        torch.testing.assert_close(plain(x), x_hat)  # still warming up: plain batch norm
        half = 1 + (r - 1) * 0.5
        torch.testing.assert_close(smooth(x), x_hat * half + d * 0.5, rtol=1e-4, atol=1e-4)

    def test_eval_uses_running_stats(self):
        norm = BatchRenorm1d(2)
        norm.running_mean.fill_(1.0)
        norm.running_var.fill_(4.0)
        norm.eval()
        torch.testing.assert_close(
            norm(torch.full((3, 2), 3.0)), torch.full((3, 2), 2.0 / (4 + 1e-5) ** 0.5)
        )


class TestAddStateIndependentNormalScale:
    def test_scale_is_mapped_broadcast_and_learned(self):
        from torchrl.modules import AddStateIndependentNormalScale

        head = AddStateIndependentNormalScale(3, init_value=-1.0)
        loc = torch.randn(4, 5, 3)
        out_loc, scale = head(loc)
        assert out_loc is loc
        assert scale.shape == loc.shape
        torch.testing.assert_close(scale, torch.full_like(loc, float(torch.tensor(-1.0).exp())))
        # the scale does not depend on the input, and gradients reach the parameter
        _, other = head(torch.randn(4, 5, 3))
        assert torch.equal(scale, other)
        scale.sum().backward()
        torch.testing.assert_close(
            head.scale.grad, torch.full((3,), 20 * float(scale.detach()[0, 0, 0]))
        )

    @pytest.mark.parametrize(
        "mapping,param,expected",
        [("softplus", 0.0, 0.6931471805599453), ("biased_softplus_1.0", 0.0, 1.0)],
    )
    def test_mappings(self, mapping, param, expected):
        from torchrl.modules import AddStateIndependentNormalScale

        head = AddStateIndependentNormalScale(2, scale_mapping=mapping, init_value=param)
        _, scale = head(torch.zeros(2))
        torch.testing.assert_close(scale, torch.full((2,), expected))

    def test_lower_bound_and_scalar_shape(self):
        from torchrl.modules import AddStateIndependentNormalScale

        head = AddStateIndependentNormalScale(None, scale_lb=0.5, init_value=-10.0)
        _, scale = head(torch.zeros(3, 2))
        assert torch.equal(scale, torch.full((3, 2), 0.5))

    def test_errors(self):
        from torchrl.modules import AddStateIndependentNormalScale

        with pytest.raises(ValueError, match="trailing shape \\(4,\\) does not match"):
            AddStateIndependentNormalScale(3)(torch.zeros(2, 4))
        with pytest.raises(ValueError, match="scale_lb must be >= 0"):
            AddStateIndependentNormalScale(3, scale_lb=-1.0)


def test_causal_transformer_old_name_builds_gpt_backbone():
    import warnings

    from torchrl.modules.models import CausalTransformer, DTConfig, GPTBackbone

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        net = CausalTransformer(DTConfig(n_embd=8, n_layer=1, n_head=2, n_inner=16))
    assert isinstance(net, GPTBackbone)
    assert net(torch.zeros(2, 3, 8)).shape == (2, 3, 8)
    # warn_once: the first construction in the process warns (an earlier one may have)
    assert all(issubclass(w.category, FutureWarning) for w in seen)
