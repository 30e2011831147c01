"""DreamerV3: symlog/two-hot/KL helpers against their formulas, discrete RSSM, block GRU, image nets."""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import distributions as D
from torch import nn

from torchrl.modules.models.dreamer_v3 import (
    DreamerV3BlockGRU,
    DreamerV3BlockGRUCell,
    DreamerV3ImageDecoder,
    DreamerV3ImageEncoder,
    DreamerV3MLP,
    RSSMPosteriorV3,
    RSSMPriorV3,
    RSSMRolloutV3,
    RSSMStateEstimatorV3,
    SymExpTwoHot,
)
from torchrl.modules.models.dreamer_v3_functional import (
    categorical_kl_terms,
    straight_through_sample,
    symexp,
    symlog,
    two_hot_cross_entropy,
    two_hot_decode,
    two_hot_encode,
    unimix_probs,
)

B, T = 3, 6
CATS, CLASSES, BELIEF, HIDDEN, ACT, EMBED = 4, 5, 8, 16, 2, 6
STATE = CATS * CLASSES


def reference_two_hot(values, bins):
    """Two-hot by a plain loop over values (independent of the vectorised implementation)."""
    out = torch.zeros(len(values), len(bins), dtype=torch.float64)
    b = bins.tolist()
    for i, v in enumerate(values.tolist()):
        v = min(max(v, b[0]), b[-1])
        for k in range(len(b) - 1):
            if b[k] <= v <= b[k + 1]:
                w = (v - b[k]) / (b[k + 1] - b[k])
                out[i, k], out[i, k + 1] = 1 - w, w
                break
    return out


class TestSymlog:
    def test_inverse_and_formula(self):
        x = torch.cat([torch.linspace(-1e4, 1e4, 101), torch.tensor([0.0, 1e-3, -1e-3])]).double()
        torch.testing.assert_close(symexp(symlog(x)), x)
        torch.testing.assert_close(symlog(x), torch.sign(x) * torch.log1p(x.abs()))
        y = torch.linspace(-15, 15, 31).double()
        torch.testing.assert_close(symlog(symexp(y)), y)


class TestTwoHot:
    bins = torch.linspace(-2.0, 2.0, 9, dtype=torch.float64)

    def test_round_trip_inside_range(self):
        x = torch.empty(200, dtype=torch.float64).uniform_(-2, 2)
        enc = two_hot_encode(x, self.bins)
        torch.testing.assert_close(enc.sum(-1), torch.ones_like(x))
        torch.testing.assert_close((enc * self.bins).sum(-1), x)
        torch.testing.assert_close(two_hot_decode(enc.log(), self.bins), x)
        assert ((enc > 0).sum(-1) <= 2).all()

    def test_matches_reference_and_clips_outside(self):
        x = torch.tensor([-5.0, -2.0, -0.3, 0.0, 0.25, 1.99, 2.0, 7.0], dtype=torch.float64)
        enc = two_hot_encode(x, self.bins)
        torch.testing.assert_close(enc, reference_two_hot(x, self.bins))
        torch.testing.assert_close((enc * self.bins).sum(-1), x.clamp(-2, 2))

    def test_batch_shape_and_dtype(self):
        enc = two_hot_encode(torch.zeros(2, 3, 1), self.bins)
        assert enc.shape == (2, 3, 1, 9) and enc.dtype == torch.float32

    def test_decode_is_expectation(self):
        logits = torch.randn(4, 9, dtype=torch.float64)
        expected = (logits.softmax(-1) * self.bins).sum(-1)
        torch.testing.assert_close(two_hot_decode(logits, self.bins), expected)
        with pytest.raises(ValueError, match="classes"):
            two_hot_decode(torch.zeros(4, 8), self.bins)

    def test_cross_entropy_equals_direct_computation(self):
        logits = torch.randn(5, 9, dtype=torch.float64, requires_grad=True)
        target = torch.tensor([-3.0, -1.1, 0.0, 0.7, 1.5], dtype=torch.float64)
        loss = two_hot_cross_entropy(logits, target, self.bins)
        direct = -(reference_two_hot(target, self.bins) * logits.log_softmax(-1)).sum(-1)
        torch.testing.assert_close(loss, direct)
        # a trailing singleton target dim is accepted
        torch.testing.assert_close(two_hot_cross_entropy(logits, target[:, None], self.bins), loss)
        loss.sum().backward()
        assert logits.grad.abs().sum() > 0

    def test_errors(self):
        with pytest.raises(ValueError, match="bins must be 1-d"):
            two_hot_encode(torch.zeros(3), torch.zeros(2, 2))
        with pytest.raises(ValueError, match="target shape"):
            two_hot_cross_entropy(torch.zeros(5, 9), torch.zeros(4), self.bins)


class TestCategoricalHelpers:
    def test_unimix_floor(self):
        logits = torch.tensor([[50.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
        probs = unimix_probs(logits, 0.01)
        torch.testing.assert_close(probs.sum(-1), torch.ones(2))
        assert probs.min() >= 0.01 / 4 - 1e-7
        torch.testing.assert_close(probs[1], torch.full((4,), 0.25))
        with pytest.raises(ValueError, match="unimix"):
            unimix_probs(logits, 1.0)

    def test_straight_through_forward_one_hot_backward_probs(self):
        torch.manual_seed(0)
        logits = torch.randn(64, CATS, CLASSES, requires_grad=True)
        weights = torch.randn(CLASSES)
        sample = straight_through_sample(logits, 0.01)
        assert set(sample.detach().unique().tolist()) <= {0.0, 1.0}
        assert (sample.detach().sum(-1) == 1).all()
        (grad,) = torch.autograd.grad((sample * weights).sum(), logits)
        (expected,) = torch.autograd.grad((unimix_probs(logits, 0.01) * weights).sum(), logits)
        torch.testing.assert_close(grad, expected)
        assert grad.abs().sum() > 0

    def test_sample_frequencies_follow_mixture(self):
        torch.manual_seed(0)
        logits = torch.tensor([50.0, 0.0, 0.0, 0.0]).expand(20000, 4)
        counts = straight_through_sample(logits, 0.2).sum(0) / 20000
        torch.testing.assert_close(
            counts, torch.tensor([0.85, 0.05, 0.05, 0.05]), atol=0.01, rtol=0
        )
        assert straight_through_sample(logits, 0.0)[:, 0].all()
        mode = straight_through_sample(torch.tensor([[0.0, 3.0, 1.0]]), sample=False)
        assert mode.tolist() == [[0.0, 1.0, 0.0]]

    def test_kl_terms_equal_formula(self):
        torch.manual_seed(0)
        post = torch.randn(B, T, CATS, CLASSES, dtype=torch.float64) * 2
        prior = torch.randn(B, T, CATS, CLASSES, dtype=torch.float64) * 2
        for free in (0.0, 1.0, 3.0):
            dyn, rep = categorical_kl_terms(post, prior, free_nats=free, unimix=0.01)
            kl = D.kl_divergence(
                D.Categorical(probs=unimix_probs(post, 0.01)),
                D.Categorical(probs=unimix_probs(prior, 0.01)),
            ).sum(-1)
            expected = kl.clamp_min(free).mean()
            torch.testing.assert_close(dyn, expected)
            torch.testing.assert_close(rep, expected)
        dyn, _ = categorical_kl_terms(post, prior, unimix=0.0, reduction="none")
        raw_kl = D.kl_divergence(D.Categorical(logits=post), D.Categorical(logits=prior)).sum(-1)
        torch.testing.assert_close(dyn, raw_kl.clamp_min(1.0))
        assert dyn.shape == (B, T)

    def test_kl_stop_gradients_and_free_bits(self):
        post = torch.randn(B, CATS, CLASSES, requires_grad=True)
        prior = torch.randn(B, CATS, CLASSES, requires_grad=True)
        dyn, rep = categorical_kl_terms(post, prior, free_nats=0.0)
        g_post, g_prior = torch.autograd.grad(dyn, [post, prior], allow_unused=True)
        assert g_post is None and g_prior.abs().sum() > 0
        g_post, g_prior = torch.autograd.grad(rep, [post, prior], allow_unused=True)
        assert g_prior is None and g_post.abs().sum() > 0
        # below the free-bits threshold a term is constant: no gradient
        dyn, rep = categorical_kl_terms(post, prior, free_nats=1e6)
        assert torch.autograd.grad(dyn + rep, prior)[0].abs().sum() == 0
        assert dyn.item() == 1e6

    def test_kl_errors(self):
        with pytest.raises(ValueError, match="same shape"):
            categorical_kl_terms(torch.zeros(2, 3, 4), torch.zeros(2, 3, 5))
        with pytest.raises(ValueError, match="reduction"):
            categorical_kl_terms(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4), reduction="sum")


class TestSymExpTwoHot:
    def test_mean_and_log_prob_match_formulas(self):
        head = SymExpTwoHot(num_bins=41)
        bins = torch.linspace(-20, 20, 41)
        logits = torch.randn(B, T, 41, requires_grad=True)
        dist = head.get_dist(logits)
        expected_mean = symexp((logits.softmax(-1) * bins).sum(-1, keepdim=True))
        torch.testing.assert_close(dist.mean, expected_mean)
        torch.testing.assert_close(head(logits), expected_mean)
        value = torch.randn(B, T, 1) * 30
        flat = symlog(value).reshape(-1).double()
        target = reference_two_hot(flat, bins.double()).float().reshape(B, T, 41)
        expected = (target * logits.log_softmax(-1)).sum(-1)
        torch.testing.assert_close(dist.log_prob(value), expected)
        dist.log_prob(value).sum().backward()
        assert logits.grad.abs().sum() > 0

    def test_round_trip(self):
        head = SymExpTwoHot(num_bins=255)
        value = torch.tensor([-1234.5, -3.0, 0.0, 0.5, 77.0])
        torch.testing.assert_close(
            head.decode(head.encode(value).log()), value, rtol=1e-4, atol=1e-4
        )

    def test_raw_space(self):
        head = SymExpTwoHot(num_bins=5, space="raw")
        torch.testing.assert_close(head.bins, symexp(torch.linspace(-20, 20, 5)))
        logits = torch.randn(7, 5)
        torch.testing.assert_close(head.decode(logits), (logits.softmax(-1) * head.bins).sum(-1))

    def test_errors(self):
        with pytest.raises(ValueError, match="num_bins"):
            SymExpTwoHot(num_bins=1)
        with pytest.raises(ValueError, match="space"):
            SymExpTwoHot(space="log")


class TestDreamerV3MLP:
    def test_blocks(self):
        mlp = DreamerV3MLP(6, 3, depth=2, num_cells=8)
        assert sum(isinstance(m, nn.LayerNorm) for m in mlp.modules()) == 2
        assert sum(isinstance(m, nn.SiLU) for m in mlp.modules()) == 2
        assert mlp(torch.randn(4, 2), torch.randn(4, 4)).shape == (4, 3)
        rms = DreamerV3MLP(6, 3, depth=2, num_cells=8, norm="rms")
        assert sum(isinstance(m, nn.RMSNorm) for m in rms.modules()) == 2

    def test_outscale_and_hidden_output(self):
        assert (
            DreamerV3MLP(6, 2, depth=1, num_cells=8, outscale=0.0)(torch.randn(4, 6)) == 0
        ).all()
        hidden = DreamerV3MLP(6, None, depth=2, num_cells=8)
        assert hidden(torch.randn(4, 6)).shape == (4, 8) and hidden.out_features == 8
        with pytest.raises(ValueError, match="norm"):
            DreamerV3MLP(6, 2, norm="batch")


class TestBlockGRU:
    def test_blocks_are_independent(self):
        torch.manual_seed(0)
        cell = DreamerV3BlockGRUCell(5, 8, projection_size=4, num_blocks=2)
        x, h = torch.randn(3, 5), torch.randn(3, 8)
        h2 = h.clone()
        h2[:, :4] += 1.0
        out, out2 = cell(x, h), cell(x, h2)
        torch.testing.assert_close(out[:, 4:], out2[:, 4:])
        assert not torch.allclose(out[:, :4], out2[:, :4])

    def test_update_bias_keeps_state(self):
        torch.manual_seed(0)
        x, h = torch.randn(64, 5), torch.randn(64, 8)
        keep = DreamerV3BlockGRUCell(5, 8, projection_size=4, num_blocks=2, update_bias=-20.0)
        torch.testing.assert_close(keep(x, h), h, atol=1e-6, rtol=0)

    def test_sequence_equals_cell_loop_with_resets(self):
        torch.manual_seed(0)
        gru = DreamerV3BlockGRU(5, 8, projection_size=4, num_blocks=2, num_layers=2)
        x, h0 = torch.randn(3, T, 5), torch.randn(3, 8)
        is_init = torch.zeros(3, T, 1, dtype=torch.bool)
        is_init[1, 2] = True
        out, last = gru(x, h0, is_init)
        h, manual = h0, []
        for t in range(T):
            h = torch.where(is_init[:, t], torch.zeros_like(h), h)
            h = gru.cell(x[:, t], h)
            manual.append(h)
        torch.testing.assert_close(out, torch.stack(manual, 1))
        torch.testing.assert_close(last, manual[-1])

    def test_errors(self):
        with pytest.raises(ValueError, match="multiple of num_blocks"):
            DreamerV3BlockGRUCell(5, 9, num_blocks=2)
        with pytest.raises(ValueError, match="hidden_size"):
            DreamerV3BlockGRUCell(5, 8, num_blocks=2, projection_size=4)(
                torch.zeros(2, 5), torch.zeros(2, 6)
            )


class TestImageNets:
    def test_encoder_64x64_uint8_equals_float(self):
        enc = DreamerV3ImageEncoder(depth=4, mults=(1, 2, 2, 2))
        image = torch.randint(0, 256, (B, 2, 3, 64, 64), dtype=torch.uint8)
        out = enc(image)
        assert out.shape == (B, 2, enc.output_features((3, 64, 64))) == (B, 2, 8 * 4 * 4)
        torch.testing.assert_close(out, enc(image.float() / 255))

    def test_decoder_64x64(self):
        dec = DreamerV3ImageDecoder(STATE + BELIEF, depth=4, mults=(1, 2, 2, 2), num_blocks=4)
        out = dec(torch.randn(B, 2, STATE), torch.randn(B, 2, BELIEF))
        assert out.shape == (B, 2, 3, 64, 64)

    def test_errors(self):
        with pytest.raises(ValueError, match="odd"):
            DreamerV3ImageEncoder(kernel_size=4)
        with pytest.raises(ValueError, match="divisible"):
            DreamerV3ImageDecoder(8, image_shape=(3, 20, 20), mults=(1, 2, 2), num_blocks=2)
        with pytest.raises(ValueError, match=r"\[\*B, 3, H, W\]"):
            DreamerV3ImageEncoder(depth=2)(torch.zeros(2, 1, 16, 16))


def make_rssm_v3(recurrent_model="gru", unimix=0.01):
    prior_net = RSSMPriorV3(
        None, HIDDEN, BELIEF, CATS, CLASSES, action_dim=ACT,
        recurrent_model=recurrent_model, num_blocks=2, unimix=unimix,
    )  # fmt: skip
    post_net = RSSMPosteriorV3(
        HIDDEN, CATS, CLASSES, rnn_hidden_dim=BELIEF, obs_embed_dim=EMBED, unimix=unimix
    )
    prior = TensorDictModule(
        prior_net,
        in_keys=["state", "belief", "action"],
        out_keys=[("next", "prior_logits"), "_", ("next", "belief")],
    )
    posterior = TensorDictModule(
        post_net,
        in_keys=[("next", "belief"), ("next", "encoded_latents")],
        out_keys=[("next", "posterior_logits"), ("next", "state")],
    )
    return prior, posterior, RSSMRolloutV3(prior, posterior)


def make_data_v3():
    is_init = torch.zeros(B, T, 1, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[1, 3] = True
    return TensorDict(
        {
            "state": torch.zeros(B, T, STATE),
            "belief": torch.zeros(B, T, BELIEF),
            "action": torch.randn(B, T, ACT),
            "is_init": is_init,
            ("next", "encoded_latents"): torch.randn(B, T, EMBED),
        },
        batch_size=[B, T],
    )


class TestRSSMV3:
    @pytest.mark.parametrize("recurrent_model", ["gru", "block_gru"])
    def test_step_shapes_and_one_hot_samples(self, recurrent_model):
        prior, posterior, _ = make_rssm_v3(recurrent_model)
        logits, state, belief = prior.module(
            torch.zeros(B, T, STATE), torch.zeros(B, T, BELIEF), torch.zeros(B, T, ACT)
        )
        assert logits.shape == (B, T, CATS, CLASSES) and belief.shape == (B, T, BELIEF)
        one_hot = state.reshape(B, T, CATS, CLASSES)
        assert (one_hot.sum(-1) == 1).all() and set(one_hot.unique().tolist()) == {0.0, 1.0}
        post_logits, post_state = posterior.module(belief, torch.randn(B, T, EMBED))
        assert post_logits.shape == logits.shape and post_state.shape == state.shape

    def test_action_spec_or_shape(self):
        assert RSSMPriorV3(action_shape=(3,), hidden_dim=8, rnn_hidden_dim=8, num_categoricals=2,
                           num_classes=2).rnn.input_size == 8  # fmt: skip
        with pytest.raises(ValueError, match="not both"):
            RSSMPriorV3(action_spec=object(), action_shape=(3,))
        with pytest.raises(ValueError, match="block_gru"):
            RSSMPriorV3(recurrent_model="block_gru")
        with pytest.raises(ValueError, match="recurrent_model"):
            RSSMPriorV3(action_dim=2, recurrent_model="lstm")

    def test_unimix_floor_in_samples(self):
        torch.manual_seed(0)
        post = RSSMPosteriorV3(8, 1, 4, rnn_hidden_dim=2, obs_embed_dim=2, num_layers=0, unimix=0.2)
        with torch.no_grad():
            post.net.out.weight.zero_()
            post.net.out.bias.copy_(torch.tensor([50.0, 0.0, 0.0, 0.0]))
        _, state = post(torch.zeros(20000, 2), torch.zeros(20000, 2))
        freq = state.detach().mean(0)
        torch.testing.assert_close(freq, torch.tensor([0.85, 0.05, 0.05, 0.05]), atol=0.01, rtol=0)

    @pytest.mark.parametrize("recurrent_model", ["gru", "block_gru"])
    def test_sequence_equals_step_by_step(self, recurrent_model):
        prior, posterior, rollout = make_rssm_v3(recurrent_model)
        data = make_data_v3()
        torch.manual_seed(1)
        seq = rollout(data.clone())
        torch.manual_seed(1)
        steps = []
        for t in range(T):
            step = data[:, t].clone()
            if t:
                step["state"] = steps[-1]["next", "state"]
                step["belief"] = steps[-1]["next", "belief"]
            reset = step["is_init"]
            for key in ("state", "belief", "action"):
                step[key] = torch.where(reset, torch.zeros_like(step[key]), step[key])
            prior(step)
            posterior(step)
            steps.append(step)
        manual = torch.stack(steps, 1)
        for key in rollout.out_keys:
            torch.testing.assert_close(seq[key], manual[key])
        # the reset at [1, 3] started that stream from zeros
        assert (seq["belief"][1, 3] == 0).all() and (seq["belief"][0, 3] != 0).any()

    def test_tensor_path_equals_tensordict_path(self):
        prior, posterior, fast = make_rssm_v3()
        slow = RSSMRolloutV3(TensorDictSequential(prior), TensorDictSequential(posterior))
        assert fast.tensor_path and not slow.tensor_path
        torch.manual_seed(3)
        a = fast(make_data_v3())
        torch.manual_seed(3)
        b = slow(make_data_v3())
        for key in fast.out_keys:
            torch.testing.assert_close(a[key], b[key])

    def test_straight_through_gradients_reach_everything(self):
        prior, posterior, rollout = make_rssm_v3()
        data = make_data_v3()
        latents = data["next", "encoded_latents"].requires_grad_(True)
        out = rollout(data)
        dyn, rep = categorical_kl_terms(
            out["next", "posterior_logits"], out["next", "prior_logits"], 0.0
        )
        # a loss on the sampled states only reaches the logits through the straight-through path
        (out["next", "state"] * torch.randn(STATE)).sum().add(dyn + rep).backward()
        assert latents.grad.abs().sum() > 0
        for module in (prior, posterior):
            assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())

    def test_state_estimator_equals_manual_step(self):
        prior, posterior, _ = make_rssm_v3()
        est = RSSMStateEstimatorV3(prior.module, posterior.module)
        td = TensorDict(
            state=straight_through_sample(torch.randn(B, CATS, CLASSES)).flatten(-2),
            belief=torch.randn(B, BELIEF),
            previous_action=torch.randn(B, ACT),
            encoded_latents=torch.randn(B, EMBED),
            is_init=torch.tensor([[True], [False], [False]]),
            batch_size=[B],
        )
        torch.manual_seed(2)
        out = est(td.clone())
        torch.manual_seed(2)
        mask = td["is_init"]
        zeroed = [
            torch.where(mask, torch.zeros_like(td[k]), td[k])
            for k in ("state", "belief", "previous_action")
        ]
        belief = prior.module.advance(*zeroed)
        _, state = posterior.module(belief, td["encoded_latents"])
        torch.testing.assert_close(out["belief"], belief)
        torch.testing.assert_close(out["state"], state)
        with pytest.raises(KeyError, match="is_init"):
            est(td.exclude("is_init"))
        with pytest.raises(ValueError, match="5 keys"):
            RSSMStateEstimatorV3(prior.module, posterior.module, in_keys=["state"])
