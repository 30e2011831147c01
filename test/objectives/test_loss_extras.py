"""Lazy networks in losses, loss masks, random modules under vmap, the loss helper functions and
the multi-agent PPO losses."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

from torchrl.modules import (
    MLP,
    MultiAgentMLP,
    ProbabilisticActor,
    QValueActor,
    TanhNormal,
    ValueOperator,
)
from torchrl.objectives import (
    AUTO_LOSS_MASK_KEYS,
    RANDOM_MODULE_LIST,
    ClipPPOLoss,
    DQNLoss,
    IPPOLoss,
    MAPPOLoss,
    MultiAgentGAE,
    REDQLoss,
    SACLoss,
    SoftUpdate,
    add_random_module,
    group_optimizers,
    hold_out_params,
    next_state_value,
)
from torchrl.objectives.value import GAE


def lazy_actor(out=1):
    net = nn.Sequential(MLP(out_features=2 * out, num_cells=[16]), NormalParamExtractor())
    return ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        return_log_prob=True,
    )


def transitions(n=8, obs=3):
    nxt = TensorDict(
        observation=torch.randn(n, obs),
        reward=torch.randn(n, 1),
        done=torch.zeros(n, 1, dtype=torch.bool),
        terminated=torch.zeros(n, 1, dtype=torch.bool),
        batch_size=[n],
    )
    return TensorDict(
        observation=torch.randn(n, obs), action=torch.rand(n, 1) * 2 - 1, next=nxt, batch_size=[n]
    )


class TestLazyNetworks:
    def test_sac_ensemble_and_targets_follow(self):
        q = ValueOperator(MLP(out_features=1, num_cells=[16]), in_keys=["observation", "action"])
        loss = SACLoss(lazy_actor(), q, num_qvalue_nets=2, target_entropy=-1.0)
        updater = SoftUpdate(loss, tau=0.5)  # built before the networks have shapes
        assert loss.target_network_names == []
        out = loss(transitions())
        assert loss.target_network_names == ["qvalue_network"]
        online = loss.network_params("qvalue_network")
        target = loss.network_params("qvalue_network", target=True)
        assert online.batch_size == (2,)
        # the two critics were drawn independently and the targets start equal to them
        first = next(iter(online.values(True, True)))
        assert not torch.equal(first[0], first[1])
        for a, b in zip(online.values(True, True), target.values(True, True)):
            torch.testing.assert_close(a, b)
        opt = torch.optim.SGD(loss.parameters(), lr=0.1)
        sum(v for k, v in out.items() if k.startswith("loss_")).backward()
        opt.step()
        updater.step()
        moved = [
            not torch.equal(a, b)
            for a, b in zip(
                loss.network_params("qvalue_network").values(True, True),
                loss.network_params("qvalue_network", target=True).values(True, True),
            )
        ]
        assert any(moved)

    def test_ppo_and_dqn(self):
        critic = ValueOperator(MLP(out_features=1, num_cells=[16]), in_keys=["observation"])
        ppo = ClipPPOLoss(lazy_actor(), critic)
        td = transitions()
        with torch.no_grad():
            ppo.actor_network(td)
        assert set(ppo(td).keys()) >= {"loss_objective", "loss_critic"}
        dqn = DQNLoss(
            QValueActor(MLP(out_features=2, num_cells=[8]), action_space="categorical"),
            delay_value=True,
        )
        td = transitions()
        td["action"] = torch.randint(0, 2, (8,))
        assert dqn(td)["loss"].requires_grad
        assert dqn.target_network_names == ["value_network"]

    def test_needs_a_tensordict_first(self):
        critic = ValueOperator(MLP(out_features=1, num_cells=[16]), in_keys=["observation"])
        ppo = ClipPPOLoss(lazy_actor(), critic)
        with pytest.raises(TypeError, match="lazy parameters"):
            ppo(observation=torch.zeros(2, 3))


class TestLossMask:
    def test_masked_positions_do_not_count(self):
        q = ValueOperator(MLP(4, 1, num_cells=[8]), in_keys=["observation", "action"])
        loss = SACLoss(lazy_actor(), q, num_qvalue_nets=2, target_entropy=-1.0)
        td = transitions()
        td["observation"][5:] = float("nan")  # padding garbage
        assert AUTO_LOSS_MASK_KEYS[0] == ("collector", "mask")
        td["collector", "mask"] = torch.arange(8) < 5
        loss(td[:5].exclude("collector"))  # initialises the lazy actor (it draws numbers)
        torch.manual_seed(0)
        masked = loss(td)
        torch.manual_seed(0)
        clean = loss(td[:5].exclude("collector"))
        for key in ("loss_qvalue", "loss_actor"):
            assert torch.isfinite(masked[key])
            torch.testing.assert_close(masked[key], clean[key])
        loss.loss_mask_key = None
        assert not torch.isfinite(loss(td)["loss_qvalue"])
        loss.loss_mask_key = "valid"
        with pytest.raises(KeyError, match="loss_mask_key"):
            loss(td)

    def test_advantages_use_whole_sequences(self):
        critic = ValueOperator(nn.Linear(3, 1), in_keys=["observation"])
        ppo = ClipPPOLoss(lazy_actor(), critic)
        td = transitions(6).reshape(2, 3)
        with torch.no_grad():
            ppo.actor_network(td)
        td["shifted_valid"] = torch.tensor([[True, True, False], [True, False, False]])
        expected = td.clone()
        ppo.value_estimator(expected)
        seen = {}
        ppo.register_forward_pre_hook(lambda m, args: seen.setdefault("td", args[0]))
        ppo(td)
        assert seen["td"].shape == (3,)
        torch.testing.assert_close(
            seen["td"]["advantage"], expected["advantage"][td["shifted_valid"]]
        )


def test_random_modules_under_vmap():
    class Noise(nn.Module):
        def forward(self, x):
            return x + torch.randn_like(x)

    q = ValueOperator(MLP(4, 1, num_cells=[8], dropout=0.5), in_keys=["observation", "action"])
    loss = REDQLoss(lazy_actor(), q, num_qvalue_nets=3, target_entropy=-1.0)
    assert loss.vmap_randomness == "different"
    loss.train()
    assert torch.isfinite(loss(transitions())["loss_qvalue"])
    assert nn.Dropout in RANDOM_MODULE_LIST
    add_random_module(Noise)
    assert Noise in RANDOM_MODULE_LIST
    with pytest.raises(TypeError):
        add_random_module(Noise())
    plain = REDQLoss(
        lazy_actor(),
        ValueOperator(MLP(4, 1, num_cells=[8]), in_keys=["observation", "action"]),
        target_entropy=-1.0,
    )
    assert plain.vmap_randomness == "error"


def test_next_state_value_and_helpers():
    td = transitions(4)
    td["next", "terminated"][1] = True
    td["next", "reward"] = torch.ones(4, 1)
    v = ValueOperator(nn.Linear(3, 1), in_keys=["observation"])
    with torch.no_grad():
        expected = v(td["next"].clone())["state_value"]
    out = next_state_value(td, v, next_val_key="state_value", gamma=0.5)
    want = 1 + 0.5 * expected * torch.tensor([[1.0], [0.0], [1.0], [1.0]])
    torch.testing.assert_close(out, want)
    assert not out.requires_grad
    td["steps_to_next_obs"] = torch.full((4, 1), 2)
    out = next_state_value(td, gamma=0.5, pred_next_val=torch.full((4, 1), 4.0))
    torch.testing.assert_close(out.squeeze(-1), torch.tensor([2.0, 1.0, 2.0, 2.0]))
    with pytest.raises(ValueError, match="operator or pred_next_val"):
        next_state_value(td)

    net = nn.Linear(2, 1)
    with hold_out_params(net.parameters()) as (w, b):
        y = torch.ones(1, 2, requires_grad=True) @ w.T + b
    y.sum().backward()
    assert net.weight.grad is None

    a, b2 = nn.Linear(2, 2), nn.Linear(2, 1)
    opt = group_optimizers(
        torch.optim.Adam(a.parameters(), lr=0.1), torch.optim.Adam(b2.parameters(), lr=0.01)
    )
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.01]
    (a(torch.ones(2)).sum() + b2(torch.ones(2)).sum()).backward()
    before = b2.weight.clone()
    opt.step()
    assert not torch.equal(before, b2.weight)
    with pytest.raises(TypeError, match="every optimizer"):
        group_optimizers(torch.optim.Adam(a.parameters()), torch.optim.SGD(b2.parameters(), lr=1))


def multiagent_losses(cls, centralized):
    n_agents, obs = 3, 4
    net = nn.Sequential(
        MultiAgentMLP(obs, 2, n_agents=n_agents, centralized=False, share_params=True),
        NormalParamExtractor(),
    )
    actor = ProbabilisticActor(
        TensorDictModule(net, [("agents", "obs")], [("agents", "loc"), ("agents", "scale")]),
        in_keys={"loc": ("agents", "loc"), "scale": ("agents", "scale")},
        out_keys=[("agents", "action")],
        distribution_class=TanhNormal,
        return_log_prob=True,
    )
    critic = TensorDictModule(
        MultiAgentMLP(obs, 1, n_agents=n_agents, centralized=centralized, share_params=True),
        [("agents", "obs")],
        [("agents", "state_value")],
    )
    loss = cls(actor, critic)
    loss.set_keys(
        action=("agents", "action"),
        sample_log_prob=("agents", "action_log_prob"),
        reward=("agents", "reward"),
        value=("agents", "state_value"),
        advantage=("agents", "advantage"),
        value_target=("agents", "value_target"),
    )
    return loss, actor, n_agents, obs


@pytest.mark.parametrize(("cls", "centralized"), [(MAPPOLoss, True), (IPPOLoss, False)])
def test_multiagent_ppo(cls, centralized):
    loss, actor, n_agents, obs = multiagent_losses(cls, centralized)
    assert isinstance(loss.value_estimator, MultiAgentGAE)
    assert loss.normalize_advantage and loss.normalize_advantage_exclude_dims == (-2,)
    E, T = 2, 5
    td = TensorDict(
        agents=TensorDict(obs=torch.randn(E, T, n_agents, obs), batch_size=[E, T, n_agents]),
        next=TensorDict(
            agents=TensorDict(
                obs=torch.randn(E, T, n_agents, obs),
                reward=torch.randn(E, T, n_agents, 1),
                batch_size=[E, T, n_agents],
            ),
            done=torch.zeros(E, T, 1, dtype=torch.bool),
            terminated=torch.zeros(E, T, 1, dtype=torch.bool),
            batch_size=[E, T],
        ),
        batch_size=[E, T],
    )
    with torch.no_grad():
        actor(td)
        loss.value_estimator(td)
    assert td["agents", "advantage"].shape == (E, T, n_agents, 1)
    out = loss(td)
    total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
    total.backward()
    assert all(p.grad is not None for p in loss.critic_network.parameters())
    # any other estimator is used as it is
    loss.make_value_estimator("td0")
    assert not isinstance(loss.value_estimator, GAE)
