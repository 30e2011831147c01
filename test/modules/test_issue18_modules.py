"""Safe modules, DDPG/DQN networks, Conv3dNet, Online DT actor, cross-group critic, consistent dropout."""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    TensorDictModule,
    TensorDictSequential,
    set_interaction_type,
)
from torch import distributions as D
from torch import nn

from torchrl.data import Bounded, Composite, Unbounded
from torchrl.modules.models.ddpg import DdpgCnnActor, DdpgCnnQNet, DdpgMlpActor, DdpgMlpQNet
from torchrl.modules.tensordict_module.safe import (
    SafeModule,
    SafeProbabilisticModule,
    SafeProbabilisticTensorDictSequential,
    SafeSequential,
)

# ----------------------------------------------------------------------------- safe modules


def _big_obs(batch=6, dim=3):
    return TensorDict(obs=torch.full((batch, dim), 100.0), batch_size=[batch])


@pytest.mark.parametrize("safe", [True, False])
def test_safe_module_projects_only_when_safe(safe):
    mod = SafeModule(
        nn.Linear(3, 2), ["obs"], ["out"], spec=Bounded(-1.0, 1.0, shape=(2,)), safe=safe
    )
    nn.init.constant_(mod.module.weight, 1.0)
    out = mod(_big_obs())["out"]
    assert out.shape == (6, 2)
    if safe:
        assert torch.equal(out, torch.ones(6, 2))
    else:
        assert bool((out > 1).all())


def test_safe_module_leaf_spec_describes_first_out_key_and_checks_keys():
    mod = SafeModule(
        lambda x: (x * 10, x * 10), ["obs"], ["a", "b"], spec=Bounded(-1.0, 1.0, (3,)), safe=True
    )
    assert list(mod.spec.keys()) == ["a"]
    td = mod(_big_obs())
    assert td["a"].max() == 1.0 and td["b"].max() == 1000.0
    with pytest.raises(ValueError, match="safe=True needs a spec"):
        SafeModule(nn.Linear(3, 2), ["obs"], ["out"], safe=True)
    with pytest.raises(KeyError, match="not one of the out_keys"):
        SafeModule(nn.Linear(3, 2), ["obs"], ["out"], spec=Composite(other=Unbounded(2)))


def test_safe_module_nested_out_key():
    spec = Composite({("agents", "action"): Bounded(-2.0, 2.0, shape=(2,))})
    mod = SafeModule(nn.Linear(3, 2), ["obs"], [("agents", "action")], spec=spec, safe=True)
    nn.init.constant_(mod.module.weight, 1.0)
    assert torch.equal(mod(_big_obs())["agents", "action"], torch.full((6, 2), 2.0))


def test_safe_probabilistic_module_projects_samples_not_log_prob():
    mod = SafeProbabilisticModule(
        ["loc", "scale"],
        ["action"],
        spec=Bounded(-1.0, 1.0, shape=(2,)),
        safe=True,
        distribution_class=D.Normal,
        return_log_prob=True,
    )
    td = TensorDict(loc=torch.full((4, 2), 10.0), scale=torch.ones(4, 2) * 0.01, batch_size=[4])
    with set_interaction_type("random"):
        td = mod(td)
    assert torch.equal(td["action"], torch.ones(4, 2))
    # the log-probability is the one of the drawn (unprojected) value: near the mode, not at 1
    assert bool((td["action_log_prob"] > 0).all())
    unsafe = SafeProbabilisticModule(["loc", "scale"], ["action"], distribution_class=D.Normal)
    assert unsafe.spec is None and not unsafe.safe
    with set_interaction_type("deterministic"):
        assert unsafe(td.exclude("action"))["action"].min() == 10.0


def test_safe_sequential_merges_specs_and_projects():
    hidden = SafeModule(nn.Linear(3, 4), ["obs"], ["hidden"], spec=Unbounded(4))
    head = SafeModule(nn.Linear(4, 2), ["hidden"], ["out"], spec=Bounded(-1.0, 1.0, (2,)))
    seq = SafeSequential(hidden, head)
    assert sorted(seq.spec.keys()) == ["hidden", "out"]
    assert not seq.safe
    safe_seq = SafeSequential(hidden, head, safe=True)
    td = safe_seq(_big_obs())
    assert bool(td["out"].abs().max() <= 1.0)
    # an explicit leaf spec describes the last module's first output
    leaf = SafeSequential(hidden, head, spec=Bounded(-0.5, 0.5, (2,)), safe=True)
    assert list(leaf.spec.keys()) == ["out"]
    assert bool(leaf(_big_obs())["out"].abs().max() <= 0.5)
    with pytest.raises(ValueError, match="safe=True needs a spec"):
        SafeSequential(TensorDictModule(nn.Linear(3, 2), ["obs"], ["out"]), safe=True)


def test_safe_probabilistic_sequential_get_dist_and_projection():
    net = SafeModule(
        nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()), ["obs"], ["loc", "scale"]
    )
    sampler = SafeProbabilisticModule(
        ["loc", "scale"], ["action"], distribution_class=D.Normal, return_log_prob=True
    )
    policy = SafeProbabilisticTensorDictSequential(
        net, sampler, spec=Bounded(-1.0, 1.0, shape=(2,)), safe=True
    )
    assert list(policy.spec.keys()) == ["action"]
    td = TensorDict(obs=torch.randn(64, 3) * 100, batch_size=[64])
    with set_interaction_type("random"):
        out = policy(td.clone())
    assert bool(out["action"].abs().max() <= 1.0)
    assert bool((out["action"].abs() == 1.0).any())
    dist = policy.get_dist(td.clone())
    assert isinstance(dist, D.Normal) and dist.loc.shape == (64, 2)
    # the specs of the parts are merged when none is given; a safe sampler projects itself
    safe_sampler = SafeProbabilisticModule(
        ["loc", "scale"],
        ["action"],
        spec=Bounded(-0.1, 0.1, shape=(2,)),
        safe=True,
        distribution_class=D.Normal,
    )
    merged = SafeProbabilisticTensorDictSequential(net, safe_sampler)
    assert list(merged.spec.keys()) == ["action"] and not merged.safe
    with set_interaction_type("random"):
        assert bool(merged(td.clone())["action"].abs().max() <= 0.1)


# ----------------------------------------------------------------------------- DDPG networks


def test_ddpg_mlp_actor_lazy_and_explicit_sizes():
    actor = DdpgMlpActor(action_dim=4)
    assert actor(torch.randn(10, 6)).shape == (10, 4)
    assert [m.out_features for m in actor.mlp if isinstance(m, nn.Linear)] == [400, 300, 4]
    explicit = DdpgMlpActor(3, mlp_net_kwargs={"in_features": 5, "num_cells": [16, 8]})
    first = explicit.mlp[0]
    assert isinstance(first, nn.Linear) and first.in_features == 5 and first.out_features == 16
    assert explicit(torch.randn(2, 7, 5)).shape == (2, 7, 3)
    # the output layer starts small (paper init)
    assert explicit.mlp[-1].weight.abs().max() <= 3e-3


def test_ddpg_mlp_qnet_action_joins_after_first_layer():
    qnet = DdpgMlpQNet()
    obs, act = torch.randn(10, 6), torch.randn(10, 2)
    assert qnet(obs, act).shape == (10, 1)
    assert qnet.mlp1[0].in_features == 6 and qnet.mlp1[0].out_features == 400
    assert qnet.mlp2[0].in_features == 402  # 400 features + the 2-dim action
    explicit = DdpgMlpQNet(
        mlp_net_kwargs_net1={"in_features": 6, "out_features": 8},
        mlp_net_kwargs_net2={"in_features": 10, "num_cells": [4]},
    )
    out = explicit(obs, act)
    assert out.shape == (10, 1)
    out.sum().backward()
    assert explicit.mlp1[0].weight.grad is not None


@pytest.mark.parametrize("use_avg_pooling", [False, True])
def test_ddpg_cnn_actor_returns_action_and_hidden(use_avg_pooling):
    actor = DdpgCnnActor(action_dim=3, use_avg_pooling=use_avg_pooling)
    action, hidden = actor(torch.randn(2, 5, 3, 64, 64))
    assert action.shape == (2, 5, 3)
    assert hidden.shape == ((2, 5, 64) if use_avg_pooling else (2, 5, 64 * 6 * 6))
    small = DdpgCnnActor(
        2,
        conv_net_kwargs={"in_features": 3, "num_cells": [4, 4, 4]},
        mlp_net_kwargs={"num_cells": 8},
    )
    assert isinstance(small.convnet.layers[0], nn.Conv2d)
    assert small.convnet.layers[0].in_channels == 3
    assert small(torch.randn(1, 3, 64, 64))[1].shape == (1, 4 * 6 * 6)


def test_ddpg_cnn_qnet_value_shape_any_image_size_with_pooling():
    qnet = DdpgCnnQNet()
    assert qnet(torch.randn(2, 3, 64, 64), torch.randn(2, 4)).shape == (2, 1)
    # average pooling: the value head does not depend on the image size
    assert qnet(torch.randn(2, 3, 96, 80), torch.randn(2, 4)).shape == (2, 1)
    flat = DdpgCnnQNet(use_avg_pooling=False)
    assert flat(torch.randn(2, 3, 64, 64), torch.randn(2, 4)).shape == (2, 1)
    assert flat.mlp[0].in_features == 128 * 6 * 6 + 4


# ----------------------------------------------------------------------------- DQN / Conv3d / ODT


def test_distributional_dqnnet_normalises_over_atoms():
    from torchrl.modules import DistributionalQValueModule
    from torchrl.modules.models.distributional import DistributionalDQNnet

    logits = torch.randn(10, 51, 4)
    td = DistributionalDQNnet()(TensorDict(action_value=logits.clone(), batch_size=[10]))
    assert torch.allclose(td["action_value"], logits.log_softmax(-2))
    assert torch.allclose(td["action_value"].exp().sum(-2), torch.ones(10, 4))
    # chained with the greedy distributional module: net -> log-softmax -> action
    support = torch.linspace(-1.0, 1.0, 51)
    greedy = DistributionalQValueModule("categorical", support)
    assert greedy(td)["action"].shape == (10,)
    renamed = DistributionalDQNnet(in_keys=["logits"], out_keys=["log_p"])
    out = renamed(TensorDict(logits=logits, batch_size=[10]))
    assert torch.equal(out["logits"], logits) and "log_p" in out.keys()
    with pytest.raises(ValueError, match="n_atoms, n_actions"):
        DistributionalDQNnet()(TensorDict(action_value=torch.randn(10), batch_size=[10]))
    with pytest.raises(ValueError, match="differ in length"):
        DistributionalDQNnet(in_keys=["a", "b"], out_keys=["c"])


def test_conv3d_net_shapes_lazy_and_explicit():
    from torchrl.modules.models.conv3d import Conv3dNet

    lazy = Conv3dNet(num_cells=[4, 8], kernel_sizes=3, strides=1)
    assert isinstance(lazy.layers[0], nn.LazyConv3d)
    out = lazy(torch.randn(2, 3, 1, 5, 6, 6))  # two batch dims, [C, D, H, W] = [1, 5, 6, 6]
    assert out.shape == (2, 3, 8 * 1 * 2 * 2)
    explicit = Conv3dNet(
        in_features=2,
        num_cells=4,
        depth=2,
        paddings=1,
        norm_class=nn.BatchNorm3d,
        norm_kwargs={"num_features": 4},
    )
    assert explicit.depth == 2 and explicit.layers[0].in_channels == 2
    assert explicit(torch.randn(3, 2, 4, 4, 4)).shape == (3, 4 * 4 * 4 * 4)
    pooled = Conv3dNet(
        in_features=1,
        num_cells=[6],
        aggregator_class=nn.AdaptiveAvgPool3d,
        aggregator_kwargs={"output_size": 1},
        squeeze_output=True,
    )
    assert pooled(torch.randn(5, 1, 3, 7, 7)).shape == (5, 6)
    with pytest.raises(ValueError, match=r"\[\*B, C, D, H, W\]"):
        explicit(torch.randn(2, 4, 4))
    with pytest.raises(ValueError, match="different lengths"):
        Conv3dNet(num_cells=[4, 4], kernel_sizes=[3, 3, 3])


def test_online_dt_actor_gaussian_heads_and_default_config():
    from torchrl.modules.models.online_dt import OnlineDTActor
    from torchrl.modules.models.transformer import DTConfig

    cfg = DTConfig(n_embd=16, n_layer=1, n_head=2, n_inner=32)
    actor = OnlineDTActor(4, 2, cfg, log_std_min=-3.0, log_std_max=1.0)
    obs, act, rtg = torch.randn(8, 10, 4), torch.randn(8, 10, 2), torch.randn(8, 10, 1)
    mu, std = actor(obs, act, rtg)
    assert mu.shape == std.shape == (8, 10, 2)
    assert bool((std >= torch.exp(torch.tensor(-3.0))).all())
    assert bool((std <= torch.exp(torch.tensor(1.0))).all())
    (mu.sum() + std.sum()).backward()
    assert actor.transformer.embed_state.weight.grad is not None
    # causal: the outputs at step t do not depend on later steps (eval: no dropout)
    actor.eval()
    obs2 = obs.clone()
    obs2[:, 5:] += 10
    mu1, _ = actor(obs, act, rtg)
    mu2, _ = actor(obs2, act, rtg)
    assert torch.allclose(mu1[:, :5], mu2[:, :5], atol=1e-5)
    assert not torch.allclose(mu1[:, 5:], mu2[:, 5:])
    assert OnlineDTActor.default_config().n_embd == 512
    assert OnlineDTActor(3, 1).transformer.config.n_layer == 4
    with pytest.raises(ValueError, match="log_std_min"):
        OnlineDTActor(4, 2, cfg, log_std_min=1.0, log_std_max=0.0)


def test_online_dt_actor_in_online_dt_loss():
    from torchrl.modules import ProbabilisticActor, TanhNormal
    from torchrl.modules.models.online_dt import OnlineDTActor
    from torchrl.modules.models.transformer import DTConfig
    from torchrl.objectives import OnlineDTLoss

    net = OnlineDTActor(3, 2, DTConfig(n_embd=16, n_layer=1, n_head=2, n_inner=32))
    actor = ProbabilisticActor(
        TensorDictModule(net, ["observation", "action", "return_to_go"], ["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
    )
    loss = OnlineDTLoss(actor, target_entropy=-2.0)
    td = TensorDict(
        observation=torch.randn(4, 10, 3),
        action=torch.rand(4, 10, 2) - 0.5,
        return_to_go=torch.randn(4, 10, 1),
        batch_size=[4, 10],
    )
    out = loss(td)
    out["loss_log_likelihood"].backward()
    assert torch.isfinite(out["loss_log_likelihood"])
    assert net.action_layer_mean.weight.grad is not None


# ----------------------------------------------------------------------------- cross-group critic


def _two_groups(detach=None, share_params=False):
    from torchrl.modules.models.cross_group import (
        CrossCriticGroupSpec,
        CrossGroupCritic,
        CrossGroupCriticSpec,
    )

    assert CrossGroupCriticSpec is CrossCriticGroupSpec  # the spelling

    group_map = {
        "red": CrossCriticGroupSpec(3, 2, ("red", "observation"), ("red", "state_value")),
        "blue": CrossCriticGroupSpec(5, 4, ("blue", "observation"), ("blue", "state_value")),
    }
    return CrossGroupCritic(
        group_map,
        d_model=16,
        trunk_depth=2,
        trunk_cells=32,
        share_params=share_params,
        detach_groups=detach,
    )


def _team(batch=64):
    return TensorDict(
        red=TensorDict(observation=torch.randn(batch, 2, 3), batch_size=[batch, 2]),
        blue=TensorDict(observation=torch.randn(batch, 4, 5), batch_size=[batch, 4]),
        batch_size=[batch],
    )


def test_cross_group_critic_keys_and_shapes():
    critic = _two_groups()
    assert critic.in_keys == [("red", "observation"), ("blue", "observation")]
    assert critic.out_keys == [("red", "state_value"), ("blue", "state_value")]
    td = critic(_team(7))
    assert td["red", "state_value"].shape == (7, 2, 1)
    assert td["blue", "state_value"].shape == (7, 4, 1)
    # red's values depend on blue's observations (the point of a cross-group critic)
    td2 = _team(7)
    td2["red", "observation"] = td["red", "observation"]
    assert not torch.allclose(critic(td2)["red", "state_value"], td["red", "state_value"])
    shared = _two_groups(share_params=True)
    assert len(shared.module.heads) == 1 and len(critic.module.heads) == 2
    # with one shared head the agents of a group still get their own values
    values = shared(_team(3))["blue", "state_value"]
    assert not torch.allclose(values[:, 0], values[:, 1])


def test_cross_group_critic_learns_a_two_group_toy_problem():
    # red's value is the sum of blue's observations, blue's value the mean of red's
    critic = _two_groups()
    optim = torch.optim.Adam(critic.parameters(), lr=3e-3)

    def loss_of(td):
        td = critic(td)
        red_target = td["blue", "observation"].sum((-2, -1)).reshape(-1, 1, 1).expand(-1, 2, 1)
        blue_target = td["red", "observation"].mean((-2, -1)).reshape(-1, 1, 1).expand(-1, 4, 1)
        return (td["red", "state_value"] - red_target).pow(2).mean() + (
            td["blue", "state_value"] - blue_target
        ).pow(2).mean()

    held_out = _team(256)
    with torch.no_grad():
        before = loss_of(held_out.clone()).item()
    for _ in range(300):
        loss = loss_of(_team(64))
        optim.zero_grad()
        loss.backward()
        optim.step()
    with torch.no_grad():
        after = loss_of(held_out.clone()).item()
    assert after < 0.2 * before, (before, after)


def test_cross_group_critic_detach_groups_and_errors():
    from torchrl.modules.models.cross_group import CrossCriticGroupSpec, CrossGroupCritic

    critic = _two_groups(detach=["blue"])
    td = critic(_team(5))
    td["red", "state_value"].sum().backward()
    blue_encoder, red_encoder = critic.module.encoders[1], critic.module.encoders[0]
    assert blue_encoder[0].weight.grad is None
    assert red_encoder[0].weight.grad is not None and red_encoder[0].weight.grad.abs().sum() > 0
    spec = CrossCriticGroupSpec(3, 2, "obs", "value")
    with pytest.raises(KeyError, match="detach_groups"):
        CrossGroupCritic({"a": spec}, detach_groups=["b"])
    with pytest.raises(ValueError, match="at least one group"):
        CrossGroupCritic({})
    with pytest.raises(TypeError, match="CrossCriticGroupSpec"):
        CrossGroupCritic({"a": (3, 2, "obs", "value")})
    bad = _team(5)
    bad["blue", "observation"] = torch.randn(5, 4, 6)
    with pytest.raises(ValueError, match="group 'blue' expects"):
        critic(bad)


# ----------------------------------------------------------------------------- consistent dropout


def test_consistent_dropout_layer():
    from torchrl.modules.models.consistent_dropout import ConsistentDropout

    drop = ConsistentDropout(p=0.25)
    x = torch.ones(1000, 8)
    mask = drop.make_mask(x)
    assert mask.dtype == torch.bool and 0.65 < mask.float().mean() < 0.85
    out = drop(x, mask)
    assert torch.equal(out, drop(x, mask))
    assert torch.allclose(out, mask.float() / 0.75)
    assert not torch.equal(drop(x), drop(x))  # fresh masks without one given
    drop.eval()
    assert drop(x) is x
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        ConsistentDropout(p=1.0)


def test_consistent_dropout_module_reuses_the_stored_mask_in_the_loss():
    from torchrl.modules.models.consistent_dropout import ConsistentDropoutModule

    policy = TensorDictSequential(
        TensorDictModule(nn.Linear(3, 16), ["observation"], ["hidden"]),
        ConsistentDropoutModule(0.5, "hidden", mask_key="mask"),
        TensorDictModule(nn.Linear(16, 2), ["hidden"], ["action"]),
    )
    obs = TensorDict(observation=torch.randn(32, 3), batch_size=[32])
    with torch.no_grad():
        acted = policy(obs.clone())
    assert acted["mask"].shape == (32, 16) and acted["mask"].dtype == torch.bool
    # the loss replays the stored transition: same mask, same action, with gradients
    replayed = policy(acted.select("observation", "mask"))
    assert torch.allclose(replayed["action"], acted["action"])
    replayed["action"].sum().backward()
    # without the stored mask the outputs differ
    assert not torch.allclose(policy(obs.clone())["action"], acted["action"])
    policy.eval()
    evaluated = policy(obs.clone())
    assert "mask" not in evaluated.keys()
    with pytest.raises(ValueError, match="one entry"):
        ConsistentDropoutModule(0.5, ["a", "b"])
    with pytest.raises(TypeError, match="in_keys"):
        ConsistentDropoutModule(0.5)
    bad = acted.select("observation", "mask")
    bad["mask"] = torch.ones(32, 4, dtype=torch.bool)
    policy.train()
    with pytest.raises(ValueError, match="mask at 'mask' has shape"):
        policy(bad)


def test_consistent_dropout_primer_redraws_the_mask_at_reset():
    from torchrl.envs import PendulumEnv, TransformedEnv
    from torchrl.modules.models.consistent_dropout import ConsistentDropoutModule

    dropout = ConsistentDropoutModule(0.5, "observation", "dropped", input_shape=(3,), mask_key="m")
    head = SafeModule(
        nn.Linear(3, 1), ["dropped"], ["action"], spec=Bounded(-2.0, 2.0, (1,)), safe=True
    )
    policy = TensorDictSequential(dropout, head)
    env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), dropout.make_tensordict_primer())
    assert env.observation_spec["m"].shape == (2, 3)
    masks = []
    for _ in range(6):
        with torch.no_grad():
            rollout = env.rollout(4, policy)
        # one mask for the whole episode, as the policy saw it at each step
        assert bool((rollout["m"] == rollout["m"][:, :1]).all())
        assert torch.equal(rollout["dropped"], rollout["observation"] * rollout["m"] / 0.5)
        masks.append(rollout["m"][:, 0])
    assert any(not torch.equal(masks[0], m) for m in masks[1:])
    with pytest.raises(ValueError, match="input_shape"):
        ConsistentDropoutModule(0.5, "x").make_tensordict_primer()


# ----------------------------------------------------------------------------- exploration specs


def test_set_exploration_modules_spec_from_env():
    from torchrl.envs import PendulumEnv
    from torchrl.modules import AdditiveGaussianModule, OrnsteinUhlenbeckProcessModule
    from torchrl.modules.tensordict_module.exploration_spec import (
        set_exploration_modules_spec_from_env,
    )

    env = PendulumEnv(batch_size=[3])
    gaussian = AdditiveGaussianModule(spec=None, sigma_init=100.0)
    kept = Bounded(-0.5, 0.5, shape=(1,))
    ou = OrnsteinUhlenbeckProcessModule(spec=kept)
    policy = TensorDictSequential(
        TensorDictModule(nn.Linear(3, 1), ["observation"], ["action"]), gaussian, ou
    )
    set_exploration_modules_spec_from_env(policy, env)
    assert gaussian.spec == env.action_spec_unbatched
    assert ou.spec is kept
    td = policy(TensorDict(observation=torch.zeros(3, 3), batch_size=[3]))
    assert bool(td["action"].abs().max() <= 0.5)
    noisy = AdditiveGaussianModule(spec=None, sigma_init=100.0)
    out = noisy(TensorDict(action=torch.zeros(50, 1), batch_size=[50]))["action"]
    assert bool(out.abs().max() > 2.0)  # without a spec nothing is projected
    stray = AdditiveGaussianModule(spec=None, action_key=("agents", "action"))
    with pytest.raises(KeyError, match="not an action of the env"):
        set_exploration_modules_spec_from_env(TensorDictSequential(stray), env)
