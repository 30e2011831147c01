"""Dreamer v1/v3 losses, WorldModelLoss and ExponentialQuadraticCost against direct computations."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from torchrl.data import Bounded, OneHot
from torchrl.envs import DreamerEnv
from torchrl.modules import (
    MLP,
    DreamerActor,
    ObsDecoder,
    ObsEncoder,
    OneHotCategorical,
    ProbabilisticActor,
    RSSMPosterior,
    RSSMPrior,
    RSSMRollout,
    SymExpTwoHot,
    TanhNormal,
    ValueOperator,
    WorldModel,
)
from torchrl.modules.actors import WorldModelWrapper
from torchrl.objectives import SoftUpdate
from torchrl.objectives.dreamer import DreamerActorLoss, DreamerModelLoss, DreamerValueLoss
from torchrl.objectives.dreamer_v3 import (
    DreamerV3ActorLoss,
    DreamerV3ModelLoss,
    DreamerV3ValueLoss,
)
from torchrl.objectives.pilco import ExponentialQuadraticCost
from torchrl.objectives.world_model_loss import WorldModelLoss

S, H, A, OBS = 3, 5, 2, 4  # state, belief, action, observation sizes
B, T = 2, 3


def _close(a, b, tol=1e-5):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


class V1Parts:
    """A tiny state-based Dreamer: world model, imagination env, actor and value model."""

    def __init__(self, discrete: bool = False, obs_key: str = "pixels") -> None:
        torch.manual_seed(0)
        self.prior = RSSMPrior(None, 8, H, S, action_dim=A)
        self.posterior = RSSMPosterior(8, S, rnn_hidden_dim=H, obs_embed_dim=8)
        self.encoder = ObsEncoder(obs_dim=OBS, num_layers=1, num_cells=8)
        self.decoder = ObsDecoder(obs_dim=OBS, latent_dim=S + H, num_layers=1, num_cells=8)
        # The reward reads the latent state only: an actor gradient must cross the dynamics.
        self.reward_net = MLP(in_features=S + H, out_features=1, depth=1, num_cells=8)
        self.world_model = WorldModelWrapper(
            TensorDictSequential(
                TensorDictModule(self.encoder, [("next", obs_key)], [("next", "encoded_latents")]),
                RSSMRollout(
                    TensorDictModule(
                        self.prior,
                        ["state", "belief", "action"],
                        [("next", "prior_mean"), ("next", "prior_std"), "_", ("next", "belief")],
                    ),
                    TensorDictModule(
                        self.posterior,
                        [("next", "belief"), ("next", "encoded_latents")],
                        [
                            ("next", "posterior_mean"),
                            ("next", "posterior_std"),
                            ("next", "state"),
                        ],
                    ),
                ),
                TensorDictModule(
                    self.decoder, [("next", "state"), ("next", "belief")], [("next", "reco_pixels")]
                ),
            ),
            TensorDictModule(
                self.reward_net, [("next", "state"), ("next", "belief")], [("next", "reward")]
            ),
        )
        spec = OneHot(A) if discrete else Bounded(-1.0, 1.0, shape=(A,))
        self.env = DreamerEnv(
            WorldModelWrapper(
                TensorDictModule(
                    self.prior, ["state", "belief", "action"], ["_", "_", "state", "belief"]
                ),
                TensorDictModule(self.reward_net, ["state", "belief"], ["reward"]),
            ),
            prior_shape=(S,),
            belief_shape=(H,),
            action_spec=spec,
        )
        if discrete:
            self.actor = ProbabilisticActor(
                TensorDictModule(
                    MLP(in_features=S + H, out_features=A, depth=1, num_cells=8),
                    ["state", "belief"],
                    ["logits"],
                ),
                in_keys=["logits"],
                distribution_class=OneHotCategorical,
                spec=spec,
            )
        else:
            self.actor = ProbabilisticActor(
                TensorDictModule(
                    DreamerActor(A, depth=1, num_cells=8, in_features=S + H),
                    ["state", "belief"],
                    ["loc", "scale"],
                ),
                in_keys=["loc", "scale"],
                distribution_class=TanhNormal,
                spec=spec,
            )
        self.value = ValueOperator(
            MLP(in_features=S + H, out_features=1, depth=1, num_cells=8),
            in_keys=["state", "belief"],
        )

    def data(self) -> TensorDict:
        return TensorDict(
            {
                "state": torch.zeros(B, T, S),
                "belief": torch.zeros(B, T, H),
                "action": torch.rand(B, T, A) * 2 - 1,
                ("next", "pixels"): torch.randn(B, T, OBS),
                ("next", "reward"): torch.randn(B, T, 1),
            },
            batch_size=[B, T],
        )

    def model_params(self) -> list[nn.Parameter]:
        return list(self.world_model.parameters())


def _grads(loss, params):
    return torch.autograd.grad(loss, params, allow_unused=True, retain_graph=True)


def _lambda_return(reward, next_value, gamma, lmbda):
    """TD(lambda) over the time dim (-2), written out step by step."""
    steps = reward.shape[-2]
    out = torch.zeros_like(reward)
    later = next_value[..., -1, :]
    for t in reversed(range(steps)):
        if t == steps - 1:
            g = reward[..., t, :] + gamma * next_value[..., t, :]
        else:
            g = reward[..., t, :] + gamma * ((1 - lmbda) * next_value[..., t, :] + lmbda * later)
        out[..., t, :] = g
        later = g
    return out


# ------------------------------------------------------------------------------------------
# Dreamer v1
# ------------------------------------------------------------------------------------------


class TestDreamerModelLoss:
    @pytest.mark.parametrize(
        "delayed_clamp,global_average,free_nats",
        [(False, False, 0.5), (True, False, 0.5), (False, True, 0.01), (False, False, 0.0)],
    )
    def test_values_and_grads(self, delayed_clamp, global_average, free_nats):
        parts = V1Parts()
        loss = DreamerModelLoss(
            parts.world_model,
            lambda_kl=0.7,
            lambda_reco=1.3,
            lambda_reward=0.4,
            free_nats=free_nats,
            delayed_clamp=delayed_clamp,
            global_average=global_average,
        )
        data = parts.data()
        losses, out = loss(data)
        post = torch.distributions.Normal(
            out["next", "posterior_mean"], out["next", "posterior_std"]
        )
        prior = torch.distributions.Normal(out["next", "prior_mean"], out["next", "prior_std"])
        kl = torch.distributions.kl_divergence(post, prior)
        kl = kl.mean(-1) if global_average else kl.sum(-1)
        kl = kl.mean().clamp(min=free_nats) if delayed_clamp else kl.clamp(min=free_nats).mean()
        reco = (out["next", "reco_pixels"] - data["next", "pixels"]) ** 2
        reward = (out["next", "reward"] - data["next", "reward"]) ** 2
        if global_average:
            reco, reward = reco.mean(), reward.mean()
        else:
            reco, reward = reco.sum(-1).mean(), reward.sum(-1).mean()
        _close(losses["loss_model_kl"], 0.7 * kl)
        _close(losses["loss_model_reco"], 1.3 * reco)
        _close(losses["loss_model_reward"], 0.4 * reward)
        params = parts.model_params()
        ours = _grads(sum(losses.values()), params)
        direct = _grads(0.7 * kl + 1.3 * reco + 0.4 * reward, params)
        for g1, g2 in zip(ours, direct):
            if g1 is None or g2 is None:
                assert g1 is None and g2 is None
            else:
                _close(g1, g2)
        # the input is left alone: the reward is moved in a shallow copy
        assert ("next", "true_reward") not in data.keys(True)
        assert ("next", "true_reward") in out.keys(True)

    def test_free_nats_clamp(self):
        parts = V1Parts()
        losses, _ = DreamerModelLoss(parts.world_model, free_nats=1e6)(parts.data())
        assert losses["loss_model_kl"].item() == pytest.approx(1e6)
        grads = _grads(losses["loss_model_kl"], parts.model_params())
        assert all(g is None or not g.any() for g in grads)
        losses, _ = DreamerModelLoss(parts.world_model, free_nats=0.0)(parts.data())
        grads = _grads(losses["loss_model_kl"], list(parts.posterior.parameters()))
        assert any(g is not None and g.abs().sum() > 0 for g in grads)

    def test_keys_and_errors(self):
        parts = V1Parts()
        loss = DreamerModelLoss(parts.world_model)
        data = parts.data()
        del data["next", "reward"]
        with pytest.raises(KeyError, match="reward"):
            loss(data)
        # a renamed observation: the loss reads it under the new key
        parts = V1Parts(obs_key="obs")
        loss = DreamerModelLoss(parts.world_model)
        data = parts.data()
        data.rename_key_(("next", "pixels"), ("next", "obs"))
        with pytest.raises(KeyError, match="pixels"):
            loss(data)
        loss.set_keys(pixels="obs")
        assert ("next", "obs") in loss.in_keys
        losses, _ = loss(data)
        assert torch.isfinite(losses["loss_model_reco"])
        with pytest.raises(ValueError, match="reco_loss"):
            DreamerModelLoss(parts.world_model, reco_loss="l3")  # type: ignore[arg-type]

    def test_reward_shapes(self):
        parts = V1Parts()
        loss = DreamerModelLoss(parts.world_model)
        data = parts.data()
        data["next", "reward"] = data["next", "reward"].squeeze(-1)  # [B, T]: accepted
        losses, out = loss(data)
        direct = ((out["next", "reward"].squeeze(-1) - data["next", "reward"]) ** 2).mean()
        _close(losses["loss_model_reward"], direct)
        data["next", "reward"] = torch.zeros(B, T, 2)
        with pytest.raises(ValueError, match="reward target has shape"):
            loss(data)

    def test_missing_model_output(self):
        parts = V1Parts()
        loss = DreamerModelLoss(parts.world_model).set_keys(prior_mean="nope")
        with pytest.raises(KeyError, match="prior mean"):
            loss(parts.data())


class TestDreamerActorValueLoss:
    def _imagine(self, parts, **kwargs):
        _, data = DreamerModelLoss(parts.world_model)(parts.data())
        loss = DreamerActorLoss(
            parts.actor, parts.value, parts.env, imagination_horizon=4, **kwargs
        )
        return loss, data

    @pytest.mark.parametrize("discount_loss", [False, True])
    def test_actor_values(self, discount_loss):
        parts = V1Parts()
        loss, data = self._imagine(parts, discount_loss=discount_loss, gamma=0.9, lmbda=0.8)
        losses, fake = loss(data)
        assert fake.batch_size == (B * T, 4)
        # the rollout starts from the posterior states of the batch
        _close(fake["state"][:, 0], data["next", "state"].reshape(-1, S))
        with torch.no_grad():
            next_value = parts.value(fake["next"].select("state", "belief"))["state_value"]
        target = _lambda_return(fake["next", "reward"], next_value, 0.9, 0.8)
        _close(fake["lambda_target"], target)
        weights = 0.9 ** torch.arange(4.0).reshape(1, 4, 1) if discount_loss else 1.0
        _close(losses["loss_actor"], -(weights * target).sum((1, 2)).mean())

    def test_actor_grads_reach_actor_only(self):
        parts = V1Parts()
        loss, data = self._imagine(parts)
        losses, fake = loss(data)
        losses["loss_actor"].backward()
        actor_grads = [p.grad for p in parts.actor.parameters()]
        # the reward does not read the action: these gradients crossed the imagined dynamics
        assert all(g is not None for g in actor_grads)
        assert sum(g.abs().sum() for g in actor_grads) > 0
        assert all(p.grad is None for p in parts.world_model.parameters())
        assert all(p.grad is None for p in parts.value.parameters())
        # held-out parameters are trainable again afterwards
        assert all(p.requires_grad for p in parts.world_model.parameters())
        assert all(p.requires_grad for p in parts.value.parameters())
        assert not fake["lambda_target"].requires_grad

    def test_actor_gradient_finite_difference(self):
        # d loss / d (one actor weight) matches a central difference with fixed noise
        parts = V1Parts()
        loss, data = self._imagine(parts)
        weight = parts.actor.module[0].module.backbone[-1].bias

        def run():
            torch.manual_seed(1)
            return loss(data)[0]["loss_actor"]

        (grad,) = torch.autograd.grad(run(), [weight])
        eps = 1e-3
        with torch.no_grad():
            weight[0] += eps
            up = run()
            weight[0] -= 2 * eps
            down = run()
            weight[0] += eps
        assert grad[0].item() == pytest.approx(((up - down) / (2 * eps)).item(), rel=2e-2, abs=1e-4)

    def test_actor_errors(self):
        parts = V1Parts()
        loss = DreamerActorLoss(parts.actor, parts.value, parts.env)
        with pytest.raises(KeyError, match="belief"):
            loss(TensorDict({("next", "state"): torch.zeros(2, S)}, batch_size=[2]))
        with pytest.raises(TypeError, match="model_based_env"):
            DreamerActorLoss(parts.actor, parts.value, parts.world_model)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="imagination_horizon"):
            DreamerActorLoss(parts.actor, parts.value, parts.env, imagination_horizon=0)

    @pytest.mark.parametrize("discount_loss", [False, True])
    def test_value_loss(self, discount_loss):
        parts = V1Parts()
        actor_loss, data = self._imagine(parts)
        _, fake = actor_loss(data)
        loss = DreamerValueLoss(parts.value, discount_loss=discount_loss, gamma=0.5)
        losses, _ = loss(fake)
        value = parts.value(fake.select("state", "belief").clone())["state_value"]
        weights = 0.5 ** torch.arange(4.0).reshape(1, 4, 1) if discount_loss else 1.0
        direct = 0.5 * (weights * (value - fake["lambda_target"]) ** 2).sum((1, 2)).mean()
        _close(losses["loss_value"], direct)
        params = list(parts.value.parameters())
        for g1, g2 in zip(_grads(losses["loss_value"], params), _grads(direct, params)):
            _close(g1, g2)
        losses["loss_value"].backward()
        assert all(p.grad is None for p in parts.actor.parameters())
        assert all(p.grad is None for p in parts.world_model.parameters())
        del fake["lambda_target"]
        with pytest.raises(KeyError, match="lambda_target"):
            loss(fake)


# ------------------------------------------------------------------------------------------
# DreamerV3
# ------------------------------------------------------------------------------------------


class LeafLogits(nn.Module):
    """A stand-in world model whose outputs are leaf parameters (gradients are easy to read)."""

    def __init__(self, bins: int = 255) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.post = nn.Parameter(torch.randn(B, T, 2, 4))
        self.prior = nn.Parameter(torch.randn(B, T, 2, 4))
        self.reco = nn.Parameter(torch.randn(B, T, OBS))
        self.reward_logits = nn.Parameter(torch.randn(B, T, bins))
        self.reward = nn.Parameter(torch.randn(B, T, 1))
        self.cont = nn.Parameter(torch.randn(B, T, 1))

    def forward(self, pixels):
        return (
            self.post * 1.0,
            self.prior * 1.0,
            self.reco * 1.0,
            self.reward_logits * 1.0,
            self.reward * 1.0,
            self.cont * 1.0,
        )


def _v3_model():
    net = LeafLogits()
    wm = TensorDictModule(
        net,
        [("next", "pixels")],
        [
            ("next", "posterior_logits"),
            ("next", "prior_logits"),
            ("next", "reco_pixels"),
            ("next", "reward_logits"),
            ("next", "reward"),
            ("next", "continue_logits"),
        ],
    )
    data = TensorDict(
        {
            ("next", "pixels"): torch.randn(B, T, OBS) * 5,
            ("next", "reward"): torch.randn(B, T, 1) * 3,
            ("next", "terminated"): torch.rand(B, T, 1) < 0.3,
        },
        batch_size=[B, T],
    )
    return net, wm, data


def _symlog(x):
    return torch.sign(x) * torch.log1p(x.abs())


def _two_hot(x, bins):
    """Two-hot weights of scalars ``x`` over ascending ``bins``, written with a loop."""
    out = torch.zeros(*x.shape, len(bins))
    flat_x, flat_out = x.reshape(-1), out.reshape(-1, len(bins))
    for i, v in enumerate(flat_x.tolist()):
        v = min(max(v, bins[0].item()), bins[-1].item())
        k = (
            max(j for j in range(len(bins) - 1) if bins[j].item() <= v)
            if v < bins[-1]
            else len(bins) - 2
        )
        lo, hi = bins[k].item(), bins[k + 1].item()
        w = (v - lo) / (hi - lo)
        flat_out[i, k] = 1 - w
        flat_out[i, k + 1] = w
    return out


def _mixed_log_probs(logits, unimix=0.01):
    probs = torch.softmax(logits, -1)
    return ((1 - unimix) * probs + unimix / logits.shape[-1]).log()


class TestDreamerV3ModelLoss:
    def test_values(self):
        net, wm, data = _v3_model()
        loss = DreamerV3ModelLoss(wm, kl_alpha=0.8, free_bits=0.0, lambda_continue=0.5)
        losses, _ = loss(data)
        lp, lq = _mixed_log_probs(net.post), _mixed_log_probs(net.prior)
        kl = (lp.exp() * (lp - lq)).sum((-1, -2))  # summed over the categoricals
        _close(losses["loss_model_kl"], kl.mean())  # dyn == rep in value: 0.8 kl + 0.2 kl
        _close(losses["kl_dyn"], kl.mean())
        reco = ((net.reco - _symlog(data["next", "pixels"])) ** 2).sum(-1).mean()
        _close(losses["loss_model_reco"], reco)
        bins = torch.linspace(-20, 20, 255)
        target = _two_hot(_symlog(data["next", "reward"].squeeze(-1)), bins)
        ce = -(target * torch.log_softmax(net.reward_logits, -1)).sum(-1).mean()
        _close(losses["loss_model_reward"], ce)
        cont_target = 1.0 - data["next", "terminated"].float()
        bce = -(
            cont_target * torch.log(torch.sigmoid(net.cont))
            + (1 - cont_target) * torch.log(1 - torch.sigmoid(net.cont))
        ).mean()
        _close(losses["loss_model_continue"], 0.5 * bce)

    def test_symlog_mse_reward(self):
        net, wm, data = _v3_model()
        losses, _ = DreamerV3ModelLoss(wm, reward_two_hot=False, symlog_obs=False)(data)
        direct = ((_symlog(net.reward) - _symlog(data["next", "reward"])) ** 2).mean()
        _close(losses["loss_model_reward"], direct)
        _close(losses["loss_model_reco"], ((net.reco - data["next", "pixels"]) ** 2).sum(-1).mean())

    @pytest.mark.parametrize("alpha", [0.8, 0.3])
    def test_kl_balancing_split(self, alpha):
        # dyn trains the prior only, rep the posterior only, weighted alpha : 1 - alpha
        net, wm, data = _v3_model()
        losses, _ = DreamerV3ModelLoss(wm, kl_alpha=alpha, free_bits=0.0)(data)
        g_post, g_prior = torch.autograd.grad(losses["loss_model_kl"], [net.post, net.prior])
        lp, lq = _mixed_log_probs(net.post), _mixed_log_probs(net.prior)
        lp_sg, lq_sg = lp.detach(), lq.detach()
        dyn = (lp_sg.exp() * (lp_sg - lq)).sum((-1, -2)).mean()
        rep = (lp.exp() * (lp - lq_sg)).sum((-1, -2)).mean()
        (d_prior,) = torch.autograd.grad(dyn, [net.prior])
        (d_post,) = torch.autograd.grad(rep, [net.post])
        _close(g_prior, alpha * d_prior)
        _close(g_post, (1 - alpha) * d_post)

    def test_free_bits(self):
        net, wm, data = _v3_model()
        losses, _ = DreamerV3ModelLoss(wm, free_bits=1e3)(data)
        assert losses["loss_model_kl"].item() == pytest.approx(1e3)
        grads = torch.autograd.grad(
            losses["loss_model_kl"], [net.post, net.prior], allow_unused=True
        )
        assert all(g is None or not g.any() for g in grads)

    def test_errors(self):
        _, wm, data = _v3_model()
        with pytest.raises(ValueError, match="kl_alpha"):
            DreamerV3ModelLoss(wm, kl_alpha=1.5)
        loss = DreamerV3ModelLoss(wm).set_keys(reward_logits="missing")
        with pytest.raises(KeyError, match="reward logits"):
            loss(data)
        del data["next", "terminated"]
        with pytest.raises(KeyError, match="terminated"):
            DreamerV3ModelLoss(wm, lambda_continue=1.0)(data)


class TestDreamerV3ActorLoss:
    def _run(self, parts, **kwargs):
        _, data = DreamerModelLoss(parts.world_model)(parts.data())
        loss = DreamerV3ActorLoss(
            parts.actor, parts.value, parts.env, imagination_horizon=4, **kwargs
        )
        return loss, data

    def test_percentile_normalisation(self):
        parts = V1Parts()
        with torch.no_grad():
            parts.reward_net[-1].bias.fill_(0.0)
            parts.reward_net[-1].weight.mul_(200.0)  # returns spanning far more than 1
        loss, data = self._run(parts, percentile_rate=1.0, entropy_bonus=0.0, gamma=0.9)
        losses, fake = loss(data)
        target = fake["lambda_target"]
        q = torch.quantile(target.reshape(-1).double(), torch.tensor([0.05, 0.95]).double())
        scale = (q[1] - q[0]).clamp_min(1.0).float()
        assert scale > 1.0
        _close(losses["return_scale"], scale, tol=1e-4)
        weights = 0.9 ** torch.arange(4.0).reshape(1, 4, 1)
        _close(losses["loss_actor"], -(weights * target / scale).mean(), tol=1e-4)
        # a moving average: a second batch moves the percentiles by `rate` only
        loss.retnorm.rate = 0.5
        low, high = loss.retnorm.low.clone(), loss.retnorm.high.clone()
        _, fake2 = loss(data)
        q2 = torch.quantile(
            fake2["lambda_target"].reshape(-1).double(), torch.tensor([0.05, 0.95]).double()
        )
        _close(loss.retnorm.low, low + 0.5 * (q2[0] - low))
        _close(loss.retnorm.high, high + 0.5 * (q2[1] - high))

    def test_small_returns_floor_one(self):
        parts = V1Parts()
        with torch.no_grad():
            for p in parts.reward_net.parameters():
                p.mul_(1e-3)
        loss, data = self._run(parts, percentile_rate=1.0)
        losses, _ = loss(data)
        assert losses["return_scale"].item() == 1.0

    def test_reparam_grads(self):
        parts = V1Parts()
        loss, data = self._run(parts)
        losses, _ = loss(data)
        losses["loss_actor"].backward()
        assert all(p.grad is not None for p in parts.actor.parameters())
        assert all(p.grad is None for p in parts.world_model.parameters())
        assert all(p.grad is None for p in parts.value.parameters())

    def test_reinforce_discrete(self):
        parts = V1Parts(discrete=True)
        loss, data = self._run(parts, use_reinforce=True, entropy_bonus=0.1, gamma=0.8)
        losses, fake = loss(data)
        scale = losses["return_scale"]
        with torch.no_grad():
            baseline = parts.value(fake.select("state", "belief").clone())["state_value"]
        dist = parts.actor.get_dist(fake.select("state", "belief").clone())
        logp = dist.log_prob(fake["action"]).unsqueeze(-1)
        entropy = dist.entropy().unsqueeze(-1)
        adv = (fake["lambda_target"] - baseline) / scale
        weights = 0.8 ** torch.arange(4.0).reshape(1, 4, 1)
        direct = -(weights * (logp * adv + 0.1 * entropy)).mean()
        _close(losses["loss_actor"], direct)
        params = list(parts.actor.parameters())
        for g1, g2 in zip(_grads(losses["loss_actor"], params), _grads(direct, params)):
            _close(g1, g2)
        losses["loss_actor"].backward()
        assert all(p.grad is None for p in parts.world_model.parameters())
        assert all(p.grad is None for p in parts.value.parameters())

    def test_errors(self):
        parts = V1Parts()
        with pytest.raises(TypeError, match="get_dist"):
            DreamerV3ActorLoss(parts.value, parts.value, parts.env)
        with pytest.raises(ValueError, match="entropy_bonus"):
            DreamerV3ActorLoss(parts.actor, parts.value, parts.env, entropy_bonus=-1.0)


class TwoHotCritic(nn.Module):
    def __init__(self, two_hot: SymExpTwoHot) -> None:
        super().__init__()
        self.net = nn.Linear(3, two_hot.num_bins)
        self.two_hot = two_hot

    def forward(self, x):
        logits = self.net(x)
        return logits, self.two_hot(logits)


def _fake(n=4, h=5):
    torch.manual_seed(3)
    return TensorDict(
        state=torch.randn(n, h, 3), lambda_target=torch.randn(n, h, 1) * 4, batch_size=[n, h]
    )


class TestDreamerV3ValueLoss:
    def test_symlog_mse(self):
        torch.manual_seed(0)
        critic = ValueOperator(nn.Linear(3, 1), in_keys=["state"])
        fake = _fake()
        losses, _ = DreamerV3ValueLoss(critic, gamma=0.9)(fake)
        value = critic(fake.select("state").clone())["state_value"]
        weights = 0.9 ** torch.arange(5.0).reshape(1, 5, 1)
        direct = (weights * (_symlog(value) - _symlog(fake["lambda_target"])) ** 2).mean()
        _close(losses["loss_value"], direct)
        params = list(critic.parameters())
        for g1, g2 in zip(_grads(losses["loss_value"], params), _grads(direct, params)):
            _close(g1, g2)

    def test_two_hot_and_slow_critic(self):
        torch.manual_seed(0)
        two_hot = SymExpTwoHot(num_bins=11, low=-5.0, high=5.0)
        critic = TensorDictModule(
            TwoHotCritic(two_hot), ["state"], ["state_value_logits", "state_value"]
        )
        loss = DreamerV3ValueLoss(
            critic,
            value_loss="two_hot",
            discount_loss=False,
            value_two_hot_transform=two_hot,
            slow_critic_regularization=0.5,
        )
        assert loss.target_network_names == ["value_network"]
        updater = SoftUpdate(loss, tau=0.5)
        # move the online critic away from its slow copy
        with torch.no_grad():
            for p in critic.parameters():
                p.add_(torch.randn_like(p))
        fake = _fake()
        losses, _ = loss(fake)
        bins = torch.linspace(-5.0, 5.0, 11)
        logits = critic.module.net(fake["state"])
        target = _two_hot(_symlog(fake["lambda_target"].squeeze(-1)), bins)
        ce = -(target * torch.log_softmax(logits, -1)).sum(-1).mean()
        _close(losses["loss_value"], ce)
        slow_params = loss.network_params("value_network", target=True)
        slow_logits = nn.functional.linear(
            fake["state"],
            slow_params["module", "net", "weight"],
            slow_params["module", "net", "bias"],
        )
        slow_value = torch.sign((torch.softmax(slow_logits, -1) * bins).sum(-1)) * torch.expm1(
            (torch.softmax(slow_logits, -1) * bins).sum(-1).abs()
        )
        slow_target = _two_hot(_symlog(slow_value), bins)
        reg = -(slow_target * torch.log_softmax(logits, -1)).sum(-1).mean()
        _close(losses["loss_value_slow"], 0.5 * reg)
        # the slow critic gets no gradient and moves with the updater
        assert not any(t.requires_grad for t in slow_params.values(True, True))
        before = slow_params["module", "net", "bias"].clone()
        updater.step()
        expected = 0.5 * before + 0.5 * critic.module.net.bias.detach()
        _close(loss.network_params("value_network", target=True)["module", "net", "bias"], expected)

    def test_gamma_from_actor_loss_and_errors(self):
        parts = V1Parts()
        actor_loss = DreamerV3ActorLoss(parts.actor, parts.value, parts.env, gamma=0.5)
        loss = DreamerV3ValueLoss(parts.value, actor_loss=actor_loss)
        assert loss.gamma == 0.5
        actor_loss.make_value_estimator(gamma=0.25, lmbda=0.9)
        assert loss.gamma == 0.25
        critic = ValueOperator(nn.Linear(3, 1), in_keys=["state"])
        with pytest.raises(KeyError, match="state_value_logits"):
            DreamerV3ValueLoss(critic, value_loss="two_hot")(_fake())
        with pytest.raises(ValueError, match="value_loss"):
            DreamerV3ValueLoss(critic, value_loss="mse")  # type: ignore[arg-type]
        fake = _fake()
        del fake["lambda_target"]
        with pytest.raises(KeyError, match="lambda_target"):
            DreamerV3ValueLoss(critic)(fake)


# ------------------------------------------------------------------------------------------
# WorldModelLoss and ExponentialQuadraticCost
# ------------------------------------------------------------------------------------------


def _world_model():
    torch.manual_seed(0)
    return WorldModel(
        TensorDictModule(nn.Linear(3, 4), ["observation"], ["latent"]),
        TensorDictModule(
            MLP(in_features=5, out_features=4, depth=1, num_cells=8),
            ["latent", "action"],
            [("next", "latent")],
        ),
        TensorDictModule(nn.Linear(4, 1), [("next", "latent")], [("next", "reward")]),
        done_head=TensorDictModule(nn.Linear(4, 1), [("next", "latent")], [("next", "done")]),
        decoder=TensorDictModule(nn.Linear(4, 3), ["latent"], ["reco_observation"]),
    )


def _transitions():
    torch.manual_seed(1)
    return TensorDict(
        {
            "observation": torch.randn(6, 3),
            "action": torch.randn(6, 1),
            ("next", "observation"): torch.randn(6, 3),
            ("next", "reward"): torch.randn(6, 1),
            ("next", "done"): torch.rand(6, 1) < 0.5,
        },
        batch_size=[6],
    )


class TestWorldModelLoss:
    @pytest.mark.parametrize("done_loss", ["l2", "bce"])
    def test_values(self, done_loss):
        wm = _world_model()
        loss = WorldModelLoss(
            wm,
            losses=["reward", "done", "reconstruction", "latent"],
            done_loss=done_loss,
            lambda_latent=2.0,
        )
        data = _transitions()
        losses = loss(data)
        enc, dyn, rew, done, dec = (
            wm.encoder.module,
            wm.dynamics.module,
            wm.reward_head.module,
            wm.done_head.module,
            wm.decoder.module,
        )
        latent = enc(data["observation"])
        next_latent = dyn(latent, data["action"])
        true_done = data["next", "done"].float()
        _close(losses["loss_reward"], ((rew(next_latent) - data["next", "reward"]) ** 2).mean())
        if done_loss == "bce":
            p = torch.sigmoid(done(next_latent))
            expected = -(true_done * p.log() + (1 - true_done) * (1 - p).log()).mean()
        else:
            expected = ((done(next_latent) - true_done) ** 2).mean()
        _close(losses["loss_done"], expected)
        _close(losses["loss_reconstruction"], ((dec(latent) - data["observation"]) ** 2).mean())
        target = enc(data["next", "observation"]).detach()
        latent_loss = 2.0 * ((next_latent - target) ** 2).mean()
        _close(losses["loss_latent"], latent_loss)
        # the target latent is a stop-gradient: the latent term reaches the encoder only
        # through the predicted latent
        g_ours = _grads(losses["loss_latent"], list(enc.parameters()))
        g_direct = _grads(latent_loss, list(enc.parameters()))
        for g1, g2 in zip(g_ours, g_direct):
            _close(g1, g2)
        assert ("next", "true_reward") not in data.keys(True)

    def test_given_target_latent_and_errors(self):
        wm = _world_model()
        data = _transitions()
        data["next", "target_latent"] = torch.zeros(6, 4)
        losses = WorldModelLoss(wm, losses=["latent"])(data)
        next_latent = wm.dynamics.module(wm.encoder.module(data["observation"]), data["action"])
        _close(losses["loss_latent"], (next_latent**2).mean())
        with pytest.raises(ValueError, match="subset"):
            WorldModelLoss(wm, losses=["value"])  # type: ignore[list-item]
        with pytest.raises(ValueError, match="done_loss"):
            WorldModelLoss(wm, done_loss="hinge")  # type: ignore[arg-type]
        no_decoder = WorldModel(wm.encoder, wm.dynamics, wm.reward_head)
        with pytest.raises(ValueError, match="decoder"):
            WorldModelLoss(no_decoder, losses=["reconstruction"])
        del data["next", "reward"]
        with pytest.raises(KeyError, match="reward"):
            WorldModelLoss(wm)(data)


class TestExponentialQuadraticCost:
    def test_point_mass(self):
        target = torch.tensor([1.0, -1.0])
        weights = torch.tensor([[2.0, 0.5], [0.5, 1.0]])
        mean = torch.randn(5, 2)
        td = TensorDict(
            {("observation", "mean"): mean, ("observation", "var"): torch.zeros(5, 2)},
            batch_size=[5],
        )
        out = ExponentialQuadraticCost(target, weights, reduction="none")(td)["loss_cost"]
        d = mean - target
        expected = 1 - torch.exp(-0.5 * ((d @ weights) * d).sum(-1))
        _close(out, expected)

    def test_monte_carlo(self):
        torch.manual_seed(0)
        target = torch.tensor([0.5, 0.0, -0.5])
        weights = torch.diag(torch.tensor([1.0, 0.5, 0.0]))  # singular: one dim not penalised
        mean = torch.tensor([[0.2, -0.3, 1.0]])
        root = torch.tensor([[0.6, 0.0, 0.0], [0.2, 0.5, 0.0], [0.1, -0.2, 0.4]])
        cov = (root @ root.T).unsqueeze(0)
        td = TensorDict(
            {("observation", "mean"): mean, ("observation", "var"): cov}, batch_size=[1]
        )
        cost = ExponentialQuadraticCost(target, weights)(td)["loss_cost"]
        x = torch.distributions.MultivariateNormal(mean[0], cov[0]).sample((400_000,))
        d = x - target
        mc = (1 - torch.exp(-0.5 * ((d @ weights) * d).sum(-1))).mean()
        assert cost.item() == pytest.approx(mc.item(), abs=3e-3)
        # a diagonal variance is the diagonal covariance
        diag = TensorDict(
            {
                ("observation", "mean"): mean,
                ("observation", "var"): torch.tensor([[0.1, 0.2, 0.3]]),
            },
            batch_size=[1],
        )
        full = TensorDict(
            {
                ("observation", "mean"): mean,
                ("observation", "var"): torch.diag(torch.tensor([0.1, 0.2, 0.3])).unsqueeze(0),
            },
            batch_size=[1],
        )
        loss = ExponentialQuadraticCost(target, weights)
        _close(loss(diag)["loss_cost"], loss(full)["loss_cost"])

    def test_gradients_reductions_errors(self):
        mean = torch.randn(4, 2, requires_grad=True)
        var = torch.rand(4, 2) + 0.1
        td = TensorDict({("observation", "mean"): mean, ("observation", "var"): var}, [4])
        loss = ExponentialQuadraticCost()
        total = ExponentialQuadraticCost(reduction="sum")(td)["loss_cost"]
        _close(loss(td)["loss_cost"] * 4, total)
        (g,) = torch.autograd.grad(total, [mean])
        # closed form with W = I, diagonal S: d/dm = exp-term * m / (1 + s) per dim
        factor = torch.rsqrt((1 + var).prod(-1)) * torch.exp(-0.5 * (mean**2 / (1 + var)).sum(-1))
        _close(g, factor.unsqueeze(-1) * mean.detach() / (1 + var))
        loss.set_keys(loc="m", scale="s")
        assert loss.in_keys == ["m", "s"]
        with pytest.raises(KeyError, match="no entry"):
            loss(td)
        with pytest.raises(ValueError, match="covariance"):
            ExponentialQuadraticCost().expected_cost(torch.zeros(2, 3), torch.zeros(2, 2))
        with pytest.raises(ValueError, match="weights"):
            ExponentialQuadraticCost(weights=torch.zeros(2, 3))
        with pytest.raises(ValueError, match="reduction"):
            ExponentialQuadraticCost(reduction="max")  # type: ignore[arg-type]
        assert math.isfinite(loss.expected_cost(torch.zeros(1, 2), torch.zeros(1, 2)).item())


# ------------------------------------------------------------------------------------------
# The DreamerV3 wiring of docs/model_based.rst ("Model-based losses"), end to end
# ------------------------------------------------------------------------------------------


def test_dreamer_v3_full_wiring():
    from torchrl.modules import DreamerV3MLP, RSSMPosteriorV3, RSSMPriorV3, RSSMRolloutV3

    torch.manual_seed(0)
    K, C, HB, A, OB = 4, 5, 16, 2, 3  # categoricals, classes, belief, action, observation
    Z = K * C  # flat one-hot state size
    prior = RSSMPriorV3(None, 16, HB, K, C, action_dim=A)
    posterior = RSSMPosteriorV3(16, K, C, rnn_hidden_dim=HB, obs_embed_dim=16)

    class TwoHotHead(nn.Module):
        """An MLP giving two-hot logits and the value they decode to (reward, critic)."""

        def __init__(self, two_hot: SymExpTwoHot) -> None:
            super().__init__()
            self.mlp = DreamerV3MLP(Z + HB, two_hot.num_bins, depth=1, num_cells=16, outscale=0.0)
            self.two_hot = two_hot

        def forward(self, state, belief):
            logits = self.mlp(state, belief)
            return logits, self.two_hot(logits)

    reward_head = TwoHotHead(SymExpTwoHot(num_bins=41))
    critic_head = TwoHotHead(SymExpTwoHot(num_bins=41))
    continue_head = DreamerV3MLP(Z + HB, 1, depth=1, num_cells=16)

    world_model = TensorDictSequential(
        TensorDictModule(
            DreamerV3MLP(OB, 16, depth=1, num_cells=16),
            [("next", "observation")],
            [("next", "encoded_latents")],
        ),
        RSSMRolloutV3(
            TensorDictModule(
                prior,
                ["state", "belief", "action"],
                [("next", "prior_logits"), "_", ("next", "belief")],
            ),
            TensorDictModule(
                posterior,
                [("next", "belief"), ("next", "encoded_latents")],
                [("next", "posterior_logits"), ("next", "state")],
            ),
        ),
        TensorDictModule(
            DreamerV3MLP(Z + HB, OB, depth=1, num_cells=16),
            [("next", "state"), ("next", "belief")],
            [("next", "reco_observation")],
        ),
        TensorDictModule(
            reward_head,
            [("next", "state"), ("next", "belief")],
            [("next", "reward_logits"), ("next", "reward")],
        ),
        TensorDictModule(
            continue_head, [("next", "state"), ("next", "belief")], [("next", "continue_logits")]
        ),
    )
    model_loss = DreamerV3ModelLoss(
        world_model, lambda_continue=1.0, reward_two_hot_transform=reward_head.two_hot
    )
    model_loss.set_keys(pixels="observation", reco_pixels="reco_observation")

    # imagination: the same prior and reward head, stepping the latent state in place
    env = DreamerEnv(
        WorldModelWrapper(
            TensorDictModule(prior, ["state", "belief", "action"], ["_", "state", "belief"]),
            TensorDictModule(reward_head, ["state", "belief"], ["_", "reward"]),
        ),
        prior_shape=(Z,),
        belief_shape=(HB,),
        action_spec=Bounded(-1.0, 1.0, shape=(A,)),
    )
    actor = ProbabilisticActor(
        TensorDictModule(
            DreamerActor(A, depth=1, num_cells=16, in_features=Z + HB),
            ["state", "belief"],
            ["loc", "scale"],
        ),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        spec=env.action_spec,
    )
    critic = TensorDictModule(
        critic_head, ["state", "belief"], ["state_value_logits", "state_value"]
    )
    actor_loss = DreamerV3ActorLoss(actor, critic, env, imagination_horizon=5)
    value_loss = DreamerV3ValueLoss(
        critic,
        value_loss="two_hot",
        actor_loss=actor_loss,
        value_two_hot_transform=critic_head.two_hot,
        slow_critic_regularization=1.0,
    )
    slow_critic = SoftUpdate(value_loss, tau=0.02)

    data = TensorDict(
        {  # a replay-buffer sample: 2 sequences of 6 steps
            "state": torch.zeros(2, 6, Z),
            "belief": torch.zeros(2, 6, HB),
            "action": torch.rand(2, 6, A) * 2 - 1,
            "is_init": torch.zeros(2, 6, 1, dtype=torch.bool),
            ("next", "observation"): torch.randn(2, 6, OB),
            ("next", "reward"): torch.randn(2, 6, 1),
            ("next", "terminated"): torch.zeros(2, 6, 1, dtype=torch.bool),
        },
        batch_size=[2, 6],
    )
    model_losses, data = model_loss(data)
    actor_losses, imagined = actor_loss(data)
    value_losses, _ = value_loss(imagined)
    for losses in (model_losses, actor_losses, value_losses):
        sum(v for k, v in losses.items() if k.startswith("loss_")).backward()
    slow_critic.step()
    assert imagined.batch_size == (12, 5)
    assert set(model_losses.keys()) >= {"loss_model_kl", "loss_model_continue"}
    assert all(p.grad is not None for p in actor.parameters())
    assert all(p.grad is not None for p in critic.parameters())
    assert all(p.grad is not None for p in prior.parameters())
