"""The losses' shortcuts give the generic path's results (direct network calls, TanhNormal)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

import torchrl.objectives.common as common
from torchrl.modules import MLP, Actor, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import SACLoss, TD3Loss
from torchrl.objectives._helpers import dist_entropy


def _batch(n: int = 6) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "observation": torch.randn(n, 3, generator=g),
            "action": torch.rand(n, 2, generator=g) * 1.8 - 0.9,
            "next": {
                "observation": torch.randn(n, 3, generator=g),
                "reward": torch.randn(n, 1, generator=g),
                "done": torch.zeros(n, 1, dtype=torch.bool),
                "terminated": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        [n],
    )


def _critic() -> ValueOperator:
    return ValueOperator(
        MLP(in_features=5, out_features=1, depth=1, num_cells=8), in_keys=["observation", "action"]
    )


def _losses(loss: nn.Module, data: TensorDict, seed: int = 1) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    out = loss(data.clone())
    total = sum(v for k, v in out.items() if k.startswith("loss"))
    total.backward()
    grads = {n: p.grad.clone() for n, p in loss.named_parameters() if p.grad is not None}
    loss.zero_grad(set_to_none=True)
    return {**{k: v.detach() for k, v in out.items()}, **grads}


@pytest.mark.parametrize("kind", ["td3", "sac"])
def test_direct_network_calls_match_generic_calls(monkeypatch, kind):
    torch.manual_seed(0)
    if kind == "td3":
        loss = TD3Loss(
            Actor(MLP(in_features=3, out_features=2, depth=1)), _critic(), bounds=(-1.0, 1.0)
        )
    else:
        net = TensorDictModule(
            nn.Sequential(MLP(in_features=3, out_features=4, depth=1), NormalParamExtractor()),
            ["observation"],
            ["loc", "scale"],
        )
        actor = ProbabilisticActor(net, in_keys=["loc", "scale"], distribution_class=TanhNormal)
        loss = SACLoss(actor, _critic(), target_entropy=-2.0)
    assert common._direct(loss.qvalue_network)
    data = _batch()
    direct = _losses(loss, data)
    monkeypatch.setattr(common, "_direct", lambda module: False)
    generic = _losses(loss, data)
    assert direct.keys() == generic.keys()
    for key in direct:
        torch.testing.assert_close(direct[key], generic[key], msg=key)


def test_hooked_network_takes_the_generic_call():
    critic = _critic()
    calls = []
    critic.register_forward_hook(lambda *args: calls.append(1))
    assert not common._direct(critic)
    loss = TD3Loss(Actor(MLP(in_features=3, out_features=2, depth=1)), critic, bounds=(-1.0, 1.0))
    loss(_batch())
    assert calls


def test_safe_actor_and_multi_output_modules_take_the_generic_call():
    from torchrl.data import Bounded

    spec = Bounded(-1.0, 1.0, shape=(2,))
    assert not common._direct(Actor(nn.Linear(3, 2), spec=spec, safe=True))
    assert common._direct(Actor(nn.Linear(3, 2)))
    two = TensorDictModule(nn.Linear(3, 2), ["observation"], ["a", "b"])
    assert not common._direct(two)
    assert not common._direct(TensorDictModule(nn.Tanh(), ["observation"], ["x"]))


def test_tanh_normal_unit_bounds_match_tensor_bounds():
    loc, scale = torch.randn(5, 2), torch.rand(5, 2) + 0.1
    fast = TanhNormal(loc, scale)
    slow = TanhNormal(loc, scale, low=torch.tensor(-1.0), high=torch.tensor(1.0))
    torch.manual_seed(0)
    a, lp_a = fast.rsample_and_log_prob()
    torch.manual_seed(0)
    b, lp_b = slow.rsample_and_log_prob()
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(lp_a, lp_b)
    torch.testing.assert_close(fast.log_prob(a), slow.log_prob(a))
    torch.testing.assert_close(fast.deterministic_sample, slow.deterministic_sample)
    assert fast.low.item() == -1.0 and fast.high.item() == 1.0
    assert bool(fast.support.check(a).all())


def test_monte_carlo_entropy_scores_its_own_draw():
    dist = TanhNormal(torch.zeros(4, 2), torch.ones(4, 2))
    torch.manual_seed(0)
    entropy = dist_entropy(dist, samples_mc=3)
    torch.manual_seed(0)
    sample = dist.rsample((3,))
    assert entropy.shape == (4,)
    torch.testing.assert_close(entropy, -dist.log_prob(sample).mean(0), rtol=1e-4, atol=1e-4)
