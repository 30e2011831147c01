"""QMIX / VDN loss against a hand-written reference (Rashid et al. 2018)."""

from __future__ import annotations

import pytest
import torch
from _loss_helpers import assert_matches, float64, linears, mlp, ref_mlp, stacked_linears
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch.nn import functional as F

from torchrl.modules import QMixer, QValueModule, VDNMixer
from torchrl.objectives import QMixerLoss, ValueEstimators

N_AGENTS, N_ACT, B = 3, 4, 6


def _local():
    net = TensorDictModule(mlp(5, N_ACT), [("agents", "observation")], [("agents", "action_value")])
    greedy = QValueModule(
        action_space="categorical",
        action_value_key=("agents", "action_value"),
        out_keys=[
            ("agents", "action"),
            ("agents", "action_value"),
            ("agents", "chosen_action_value"),
        ],
    )
    return TensorDictSequential(net, greedy), net


def _data(index):
    g = torch.Generator().manual_seed(0)
    dt = torch.get_default_dtype()
    terminated = torch.zeros(B, 1, dtype=torch.bool)
    terminated[::3] = True
    return TensorDict(
        {
            "agents": TensorDict(
                observation=torch.randn(B, N_AGENTS, 5, generator=g, dtype=dt),
                action=index,
                batch_size=[B, N_AGENTS],
            ),
            "state": torch.randn(B, 7, generator=g, dtype=dt),
            "next": {
                "agents": TensorDict(
                    observation=torch.randn(B, N_AGENTS, 5, generator=g, dtype=dt),
                    batch_size=[B, N_AGENTS],
                ),
                "state": torch.randn(B, 7, generator=g, dtype=dt),
                "reward": torch.randn(B, 1, generator=g, dtype=dt),
                "done": terminated.clone(),
                "terminated": terminated,
            },
        },
        batch_size=[B],
    )


def _ref_qmix(w, chosen, state):
    """QMIX mixing network with hypernetwork weights ``w`` (a dict of linear layers)."""
    w1 = F.linear(state, *w["hyper_w_1"]).abs().view(-1, N_AGENTS, 8)
    b1 = F.linear(state, *w["hyper_b_1"]).view(-1, 1, 8)
    hidden = F.elu(torch.bmm(chosen.view(-1, 1, N_AGENTS), w1) + b1)
    w_final = F.linear(state, *w["hyper_w_final"]).abs().view(-1, 8, 1)
    v = F.linear(torch.relu(F.linear(state, *w["V0"])), *w["V2"])
    return torch.bmm(hidden, w_final).view(-1, 1) + v


def _qmix_weights(params):
    def get(*path):
        return params.get((*path, "weight")), params.get((*path, "bias"))

    return {
        "hyper_w_1": get("module", "hyper_w_1"),
        "hyper_b_1": get("module", "hyper_b_1"),
        "hyper_w_final": get("module", "hyper_w_final"),
        "V0": get("module", "V", "0"),
        "V2": get("module", "V", "2"),
    }


@pytest.mark.parametrize("mixer_kind", ["vdn", "qmix"])
def test_qmixer_matches_reference(mixer_kind):
    with float64():
        torch.manual_seed(0)
        local, net = _local()
        if mixer_kind == "vdn":
            mixer_net = VDNMixer(n_agents=N_AGENTS)
            mixer = TensorDictModule(
                mixer_net, [("agents", "chosen_action_value")], ["chosen_action_value"]
            )
        else:
            mixer_net = QMixer(state_shape=(7,), mixing_embed_dim=8, n_agents=N_AGENTS)
            mixer = TensorDictModule(
                mixer_net, [("agents", "chosen_action_value"), "state"], ["chosen_action_value"]
            )
        index = torch.randint(N_ACT, (B, N_AGENTS))
        td = _data(index)
        loss = QMixerLoss(local, mixer)
        loss.make_value_estimator(ValueEstimators.TD0, gamma=0.8)
        with torch.no_grad():
            for p in [*net.parameters(), *mixer_net.parameters()]:
                p.add_(0.1 * torch.randn_like(p))
        out = loss(td)

        q = ref_mlp(td["agents", "observation"], linears(net))
        chosen = q.gather(-1, index.unsqueeze(-1))  # [B, agents, 1]
        local_t = stacked_linears(loss.target_local_value_network_params)
        next_chosen = ref_mlp(td["next", "agents", "observation"], local_t).max(-1).values
        if mixer_kind == "vdn":
            pred = chosen.sum(-2)
            next_value = next_chosen.sum(-1, keepdim=True)
        else:
            online = {
                "hyper_w_1": (mixer_net.hyper_w_1.weight, mixer_net.hyper_w_1.bias),
                "hyper_b_1": (mixer_net.hyper_b_1.weight, mixer_net.hyper_b_1.bias),
                "hyper_w_final": (mixer_net.hyper_w_final.weight, mixer_net.hyper_w_final.bias),
                "V0": (mixer_net.V[0].weight, mixer_net.V[0].bias),
                "V2": (mixer_net.V[2].weight, mixer_net.V[2].bias),
            }
            pred = _ref_qmix(online, chosen, td["state"])
            target_w = _qmix_weights(loss.target_mixer_network_params)
            next_value = _ref_qmix(target_w, next_chosen, td["next", "state"])
        y = td["next", "reward"] + 0.8 * (~td["next", "terminated"]).double() * next_value
        params = [*net.parameters(), *mixer_net.parameters()]
        assert_matches(out["loss"], (pred - y).pow(2).mean(), params)
        assert loss.tensor_keys.action == ("agents", "action")


def test_qmixer_errors():
    local, _ = _local()
    mixer = TensorDictModule(
        VDNMixer(n_agents=N_AGENTS), [("agents", "chosen_action_value")], ["chosen_action_value"]
    )
    loss = QMixerLoss(local, mixer)
    td = _data(torch.randint(N_ACT, (B, N_AGENTS)))
    with pytest.raises(KeyError, match="QMixerLoss.*reward"):
        loss(td.exclude(("next", "reward")))
    with pytest.raises(TypeError, match="tensordict module"):
        QMixerLoss(local, VDNMixer(n_agents=N_AGENTS))
