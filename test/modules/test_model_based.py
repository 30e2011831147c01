"""Dreamer (v1/v2) networks: encoder/decoder shapes, Gaussian RSSM steps and rollouts, actor, WorldModel."""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from torchrl.data import Unbounded
from torchrl.modules.models.model_based import (
    DreamerActor,
    ObsDecoder,
    ObsEncoder,
    RSSMPosterior,
    RSSMPrior,
    RSSMRollout,
    WorldModel,
)

B, T = 2, 5
STATE, BELIEF, HIDDEN, ACT, EMBED = 4, 6, 8, 2, 5


def make_rssm(embed=EMBED, reset_key=None):
    prior = TensorDictModule(
        RSSMPrior(None, HIDDEN, BELIEF, STATE, action_dim=ACT),
        in_keys=["state", "belief", "action"],
        out_keys=[("next", "prior_mean"), ("next", "prior_std"), "_", ("next", "belief")],
    )
    posterior = TensorDictModule(
        RSSMPosterior(HIDDEN, STATE, rnn_hidden_dim=BELIEF, obs_embed_dim=embed),
        in_keys=[("next", "belief"), ("next", "encoded_latents")],
        out_keys=[("next", "posterior_mean"), ("next", "posterior_std"), ("next", "state")],
    )
    return prior, posterior, RSSMRollout(prior, posterior, reset_key=reset_key)


def make_data(embed=EMBED):
    return TensorDict(
        {
            "state": torch.zeros(B, T, STATE),
            "belief": torch.zeros(B, T, BELIEF),
            "action": torch.randn(B, T, ACT),
            ("next", "encoded_latents"): torch.randn(B, T, embed),
        },
        batch_size=[B, T],
    )


class TestObsEncoderDecoder:
    def test_pixel_encoder_64x64(self):
        enc = ObsEncoder(channels=8, in_channels=3)
        out = enc(torch.rand(B, T, 3, 64, 64))
        # 64 -> 31 -> 14 -> 6 -> 2 with kernel 4 / stride 2; last layer has 8 * 8 channels
        assert out.shape == (B, T, 64 * 2 * 2)

    def test_lazy_encoder_reads_channels(self):
        enc = ObsEncoder(channels=4)
        assert enc(torch.rand(3, 1, 64, 64)).shape == (3, 128)

    def test_state_encoder(self):
        enc = ObsEncoder(obs_dim=3, num_layers=2, num_cells=16)
        assert enc(torch.randn(B, T, 3)).shape == (B, T, 16)
        assert not any(isinstance(m, nn.Conv2d) for m in enc.modules())

    def test_pixel_decoder_64x64(self):
        dec = ObsDecoder(channels=4, latent_dim=STATE + BELIEF)
        out = dec(torch.randn(B, T, STATE), torch.randn(B, T, BELIEF))
        assert out.shape == (B, T, 3, 64, 64)

    def test_grayscale_and_lazy_decoder(self):
        dec = ObsDecoder(channels=4, out_channels=1)
        assert dec(torch.randn(3, STATE), torch.randn(3, BELIEF)).shape == (3, 1, 64, 64)

    def test_state_decoder(self):
        dec = ObsDecoder(obs_dim=3, latent_dim=STATE + BELIEF, num_cells=16)
        assert dec(torch.randn(B, T, STATE), torch.randn(B, T, BELIEF)).shape == (B, T, 3)

    def test_depth_is_channels(self):
        assert ObsEncoder(depth=4, in_channels=3).net[0].out_channels == 4
        with pytest.raises(ValueError, match="disagree"):
            ObsEncoder(channels=8, depth=4)

    def test_errors(self):
        with pytest.raises(ValueError, match=r"\[\*B, C, H, W\]"):
            ObsEncoder(channels=4, in_channels=3)(torch.zeros(4, 3))
        with pytest.raises(ValueError, match="kernel_sizes"):
            ObsDecoder(num_layers=3, kernel_sizes=[5, 5])
        with pytest.raises(ValueError, match="num_layers"):
            ObsEncoder(num_layers=0)


def _grads(module, loss):
    module.zero_grad(set_to_none=True)
    loss.backward()
    return [p.grad.clone() for p in module.parameters()]


class TestConvFastPaths:
    """The channels-last / GEMM / sub-pixel / chunked conv paths equal the plain module calls."""

    @pytest.mark.parametrize("chunk_bytes", [None, 64 * 1024])  # one chunk; several chunks
    def test_encoder_matches_module_calls(self, monkeypatch, chunk_bytes):
        from torchrl.modules.models import model_based

        if chunk_bytes is not None:
            monkeypatch.setattr(model_based, "_CHUNK_BYTES", chunk_bytes)
        torch.manual_seed(0)
        enc = ObsEncoder(channels=4, in_channels=3)
        pixels = torch.rand(B, T, 3, 64, 64)
        out = enc(pixels)
        ref = enc.net(pixels.reshape(-1, 3, 64, 64)).reshape(B, T, -1)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        weights = torch.randn_like(ref)
        for got, want in zip(
            _grads(enc, (out * weights).sum()), _grads(enc, (ref * weights).sum())
        ):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    @pytest.mark.parametrize(
        "kwargs",
        [
            {},  # [5, 5, 6, 6]: a GEMM first layer, a sub-pixel last layer (no crop)
            {"num_layers": 3, "out_channels": 1},  # kernels of 5: the sub-pixel output is cropped
            {"num_layers": 2, "kernel_sizes": [4, 3], "out_channels": 16},  # last layer plain
        ],
    )
    @pytest.mark.parametrize("chunk_bytes", [None, 64 * 1024])
    def test_decoder_matches_module_calls(self, monkeypatch, kwargs, chunk_bytes):
        from torchrl.modules.models import model_based

        if chunk_bytes is not None:
            monkeypatch.setattr(model_based, "_CHUNK_BYTES", chunk_bytes)
        torch.manual_seed(0)
        dec = ObsDecoder(channels=4, latent_dim=STATE + BELIEF, **kwargs)
        state, belief = torch.randn(B, T, STATE), torch.randn(B, T, BELIEF)
        out = dec(state, belief)
        hidden = dec.proj(torch.cat([state, belief], -1)).reshape(-1, dec.proj_features, 1, 1)
        ref = dec.net(hidden)
        ref = ref.reshape(B, T, *ref.shape[1:])
        assert out.shape == ref.shape and out.is_contiguous()
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        weights = torch.randn_like(ref)
        for got, want in zip(
            _grads(dec, (out * weights).sum()), _grads(dec, (ref * weights).sum())
        ):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    def test_empty_batch(self):
        enc = ObsEncoder(channels=4, in_channels=3)
        dec = ObsDecoder(channels=4, latent_dim=STATE + BELIEF)
        assert enc(torch.rand(0, 3, 64, 64)).shape == (0, 4 * 8 * 2 * 2)
        assert dec(torch.randn(0, STATE), torch.randn(0, BELIEF)).shape == (0, 3, 64, 64)

    def test_cuda_matches_module_calls(self):
        if not torch.cuda.is_available():
            pytest.skip("needs CUDA")
        torch.manual_seed(0)
        enc = ObsEncoder(channels=4, in_channels=3, device="cuda")
        dec = ObsDecoder(channels=4, latent_dim=STATE + BELIEF, device="cuda")
        pixels = torch.rand(B, T, 3, 64, 64, device="cuda")
        ref = enc.net(pixels.reshape(-1, 3, 64, 64)).reshape(B, T, -1)
        torch.testing.assert_close(enc(pixels), ref, rtol=1e-4, atol=1e-4)
        state, belief = torch.randn(4, STATE, device="cuda"), torch.randn(4, BELIEF, device="cuda")
        hidden = dec.proj(torch.cat([state, belief], -1)).reshape(-1, dec.proj_features, 1, 1)
        torch.testing.assert_close(dec(state, belief), dec.net(hidden), rtol=1e-4, atol=1e-4)

    def test_hooked_layers_keep_their_module_calls(self):
        seen = []
        enc = ObsEncoder(channels=4, in_channels=3)
        enc.net[2].register_forward_hook(lambda module, args, out: seen.append(out.shape))
        dec = ObsDecoder(channels=4, latent_dim=STATE + BELIEF)
        dec.net[0].register_forward_hook(lambda module, args, out: seen.append(out.shape))
        enc(torch.rand(3, 3, 64, 64))
        dec(torch.randn(3, STATE), torch.randn(3, BELIEF))
        assert seen == [(3, 8, 14, 14), (3, 16, 5, 5)]

    def test_largest_activation_per_image(self):
        from torchrl.modules.models.model_based import _conv_stack_largest

        enc = ObsEncoder(channels=4, in_channels=3)
        x, largest = torch.zeros(1, 3, 64, 64), 3 * 64 * 64
        for layer in enc.net:
            x = layer(x)
            largest = max(largest, x.numel())
        assert _conv_stack_largest(list(enc.net), 3, (64, 64)) == largest
        dec = ObsDecoder(channels=4, latent_dim=STATE + BELIEF)
        x, largest = torch.zeros(1, dec.proj_features, 1, 1), dec.proj_features
        for layer in dec.net:
            x = layer(x)
            largest = max(largest, x.numel())
        assert _conv_stack_largest(list(dec.net), dec.proj_features, (1, 1)) == largest

    def test_gaussian_std_is_softplus_plus_bound(self):
        prior = RSSMPrior(None, HIDDEN, BELIEF, STATE, action_dim=ACT, scale_lb=0.2)
        state, belief, action = torch.randn(3, STATE), torch.randn(3, BELIEF), torch.randn(3, ACT)
        mean, std, _, next_belief = prior(state, belief, action)
        raw = prior.rnn_to_prior_projector(next_belief)
        torch.testing.assert_close(mean, raw[:, :STATE])
        torch.testing.assert_close(std, torch.nn.functional.softplus(raw[:, STATE:]) + 0.2)


class TestRSSMSteps:
    def test_prior_shapes_and_sample(self):
        spec = Unbounded(shape=(ACT,))
        prior = RSSMPrior(spec, HIDDEN, BELIEF, STATE, scale_lb=0.2)
        assert prior.action_dim == ACT and isinstance(prior.action_state_projector, nn.Linear)
        noise = torch.randn(B, T, STATE)
        mean, std, state, belief = prior(
            torch.randn(B, T, STATE), torch.randn(B, T, BELIEF), torch.randn(B, T, ACT), noise
        )
        assert mean.shape == std.shape == state.shape == (B, T, STATE)
        assert belief.shape == (B, T, BELIEF)
        assert (std >= 0.2).all()
        torch.testing.assert_close(state, mean + std * noise)

    def test_prior_belief_is_a_gru_step(self):
        prior = RSSMPrior(None, HIDDEN, BELIEF, STATE, action_dim=ACT)
        s, h, a = torch.randn(3, STATE), torch.randn(3, BELIEF), torch.randn(3, ACT)
        x = nn.functional.elu(prior.action_state_projector(torch.cat([s, a], -1)))
        torch.testing.assert_close(prior(s, h, a)[3], prior.rnn(x, h))

    def test_posterior(self):
        post = RSSMPosterior(HIDDEN, STATE, rnn_hidden_dim=BELIEF, obs_embed_dim=EMBED)
        noise = torch.randn(B, STATE)
        mean, std, state = post(torch.randn(B, BELIEF), torch.randn(B, EMBED), noise)
        assert state.shape == (B, STATE) and (std >= 0.1).all()
        torch.testing.assert_close(state, mean + std * noise)

    def test_lazy_layers(self):
        prior = RSSMPrior(None, HIDDEN, BELIEF, STATE)
        post = RSSMPosterior(HIDDEN, STATE)
        _, _, state, belief = prior(
            torch.zeros(2, STATE), torch.zeros(2, BELIEF), torch.zeros(2, 3)
        )
        assert post(belief, torch.zeros(2, 7))[2].shape == state.shape


class TestRSSMRollout:
    def test_sequence_equals_step_by_step(self):
        prior, posterior, rollout = make_rssm()
        data = make_data()
        torch.manual_seed(0)
        seq = rollout(data.clone())

        torch.manual_seed(0)
        step = data[:, 0].clone()
        steps = []
        for t in range(T):
            if t:
                step = data[:, t].clone()
                step["state"] = steps[-1]["next", "state"]
                step["belief"] = steps[-1]["next", "belief"]
            prior(step)
            posterior(step)
            steps.append(step)
        manual = torch.stack(steps, 1)
        for key in rollout.out_keys:
            torch.testing.assert_close(seq[key], manual[key])
        torch.testing.assert_close(seq["state"], manual["state"])

    def test_tensor_path_equals_tensordict_path(self):
        prior, posterior, fast = make_rssm(reset_key="is_init")
        slow = RSSMRollout(
            TensorDictSequential(prior), TensorDictSequential(posterior), reset_key="is_init"
        )
        assert fast.tensor_path and not slow.tensor_path
        data = make_data()
        data["is_init"] = torch.rand(B, T, 1) < 0.3
        torch.manual_seed(0)
        a = fast(data.clone())
        torch.manual_seed(0)
        b = slow(data.clone())
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in a.keys(True, True):
            torch.testing.assert_close(a[key], b[key])

    def test_state_and_belief_are_carried(self):
        _, _, rollout = make_rssm()
        out = rollout(make_data())
        torch.testing.assert_close(out["state"][:, 1:], out["next", "state"][:, :-1])
        torch.testing.assert_close(out["belief"][:, 1:], out["next", "belief"][:, :-1])
        assert out["next", "prior_mean"].shape == (B, T, STATE)
        assert set(rollout.in_keys) >= {"state", "belief", "action", ("next", "encoded_latents")}

    def test_pixels_world_model_shapes(self):
        # encoder -> rssm -> decoder on 64x64 sequences
        encoder = TensorDictModule(
            ObsEncoder(channels=4, in_channels=3),
            [("next", "pixels")],
            [("next", "encoded_latents")],
        )
        _, _, rollout = make_rssm(embed=128)
        decoder = TensorDictModule(
            ObsDecoder(channels=4, latent_dim=STATE + BELIEF),
            [("next", "state"), ("next", "belief")],
            [("next", "reco_pixels")],
        )
        data = make_data(embed=128).exclude(("next", "encoded_latents"))
        data["next", "pixels"] = torch.rand(B, T, 3, 64, 64)
        out = decoder(rollout(encoder(data)))
        assert out["next", "reco_pixels"].shape == (B, T, 3, 64, 64)
        loss = (out["next", "reco_pixels"] - out["next", "pixels"]).pow(2).mean()
        loss.backward()
        assert encoder.module.net[0].weight.grad.abs().sum() > 0

    def test_gradients_flow(self):
        prior, posterior, rollout = make_rssm()
        data = make_data()
        data["next", "encoded_latents"].requires_grad_(True)
        latents = data["next", "encoded_latents"]
        out = rollout(data)
        # the prior head only shapes the prior's parameters (the KL term of the loss)
        (out["next", "state"].pow(2).sum() + out["next", "prior_mean"].pow(2).sum()).backward()
        assert latents.grad is not None and latents.grad[:, 0].abs().sum() > 0
        for module in (prior, posterior):
            assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())

    def test_reset_zeroes_state_belief_and_action(self):
        prior, _, rollout = make_rssm(reset_key="is_init")
        data = make_data()
        data["is_init"] = torch.zeros(B, T, 1, dtype=torch.bool)
        data["is_init"][0, 3] = True
        action = data["action"].clone()
        out = rollout(data)
        assert (out["state"][0, 3] == 0).all() and (out["belief"][0, 3] == 0).all()
        assert (out["state"][1, 3] != 0).any()
        fresh = TensorDict(
            state=torch.zeros(STATE), belief=torch.zeros(BELIEF), action=torch.zeros(ACT)
        )
        prior(fresh)
        torch.testing.assert_close(out["next", "prior_mean"][0, 3], fresh["next", "prior_mean"])
        torch.testing.assert_close(out["action"], action)  # the data's actions are not changed

    def test_missing_primer_is_an_error(self):
        _, _, rollout = make_rssm()
        with pytest.raises(KeyError, match="belief"):
            rollout(make_data().exclude("belief"))

    def test_nothing_carried_is_an_error(self):
        prior = TensorDictModule(nn.Linear(2, 2), ["a"], ["b"])
        posterior = TensorDictModule(nn.Linear(2, 2), ["b"], ["c"])
        with pytest.raises(ValueError, match="carries over time"):
            RSSMRollout(prior, posterior)


class TestDreamerActor:
    def test_shapes_and_scale(self):
        actor = DreamerActor(
            ACT, depth=2, num_cells=16, in_features=STATE + BELIEF, std_min_val=0.01
        )
        loc, scale = actor(torch.randn(B, T, STATE), torch.randn(B, T, BELIEF))
        assert loc.shape == scale.shape == (B, T, ACT)
        assert (scale > 0.01).all()

    def test_std_bias_widens_initial_scale(self):
        torch.manual_seed(0)
        wide = DreamerActor(ACT, depth=1, num_cells=8, in_features=4, std_bias=5.0)
        torch.manual_seed(0)
        narrow = DreamerActor(ACT, depth=1, num_cells=8, in_features=4, std_bias=-5.0)
        x = torch.randn(10, 2), torch.randn(10, 2)
        assert (wide(*x)[1] > narrow(*x)[1]).all()
        torch.testing.assert_close(wide(*x)[0], narrow(*x)[0])


class TestWorldModel:
    def parts(self):
        encoder = TensorDictModule(nn.Linear(3, 4), ["observation"], ["latent"])
        dynamics = TensorDictModule(
            lambda z, a: z + a.sum(-1, keepdim=True), ["latent", "action"], [("next", "latent")]
        )
        reward = TensorDictModule(nn.Linear(4, 1), [("next", "latent")], [("next", "reward")])
        done = TensorDictModule(
            lambda z: z.sum(-1, keepdim=True) > 0, [("next", "latent")], [("next", "done")]
        )
        decoder = TensorDictModule(nn.Linear(4, 3), ["latent"], ["reco_observation"])
        return encoder, dynamics, reward, done, decoder

    def data(self):
        return TensorDict(observation=torch.randn(5, 3), action=torch.randn(5, 2), batch_size=[5])

    def test_forward_runs_every_part(self):
        wm = WorldModel(*self.parts())
        out = wm(self.data())
        for key in [
            "latent",
            ("next", "latent"),
            ("next", "reward"),
            ("next", "done"),
            "reco_observation",
        ]:
            assert key in out.keys(include_nested=True)
        assert wm.in_keys == ["observation", "action"]

    def test_shortcuts(self):
        encoder, dynamics, reward, done, _ = self.parts()
        wm = WorldModel(encoder, dynamics, reward, done)
        td = wm.encode(self.data())
        assert "latent" in td.keys() and ("next", "reward") not in td.keys(include_nested=True)
        td = wm.step(td)
        expected = td["latent"] + td["action"].sum(-1, keepdim=True)
        torch.testing.assert_close(td["next", "latent"], expected)
        assert td["next", "done"].dtype == torch.bool
        assert ("next", "done") in wm.step_module.out_keys
        with pytest.raises(RuntimeError, match="without a decoder"):
            wm.decode(td)

    def test_parts_must_be_tensordict_modules(self):
        encoder, dynamics, _, _, _ = self.parts()
        with pytest.raises(TypeError, match="reward_head"):
            WorldModel(encoder, dynamics, nn.Linear(4, 1))
