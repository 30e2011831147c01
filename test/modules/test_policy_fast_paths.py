"""The per-step fast paths of the policy stack: ``OneHotCategorical`` and ``ProbabilisticActor``.

Both must give the same results as the generic tensordict code they shortcut.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    InteractionType,
    NormalParamExtractor,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    set_interaction_type,
)
from tensordict.nn.distributions import OneHotCategorical as TDOneHotCategorical
from torch import nn

from torchrl.modules import OneHotCategorical, ProbabilisticActor, TanhNormal

NEG_INF = float("-inf")


class TestOneHotCategorical:
    def test_matches_tensordict(self) -> None:
        logits = torch.randn(5, 4, requires_grad=True)
        ours = OneHotCategorical(logits=logits, validate_args=False)
        ref = TDOneHotCategorical(logits=logits)
        value = ref.sample()
        torch.testing.assert_close(ours.logits, ref.logits)
        torch.testing.assert_close(ours.log_prob(value), ref.log_prob(value))
        torch.testing.assert_close(ours.entropy(), ref.entropy())
        assert torch.equal(ours.mode, ref.mode)
        assert torch.equal(ours.deterministic_sample, ref.mode)
        ours.log_prob(value).sum().backward()
        assert logits.grad is not None

    @pytest.mark.parametrize("from_probs", [False, True])
    def test_sample_frequencies(self, from_probs: bool) -> None:
        probs = torch.tensor([[0.1, 0.6, 0.0, 0.3], [0.0, 0.0, 1.0, 0.0]])
        kwargs = {"probs": probs} if from_probs else {"logits": probs.log()}
        dist = OneHotCategorical(**kwargs)
        draws = dist.sample((20_000,))
        assert draws.shape == (20_000, 2, 4) and draws.dtype == torch.long
        assert bool((draws.sum(-1) == 1).all())
        assert int(draws[..., 2][:, 0].sum()) == 0  # zero probability: never drawn
        torch.testing.assert_close(draws.float().mean(0), probs, atol=0.015, rtol=0)

    def test_masked_logits(self) -> None:
        dist = OneHotCategorical(logits=torch.tensor([[NEG_INF, 0.0, 1.0]]), validate_args=False)
        value = torch.tensor([[0, 0, 1], [0, 1, 0]])
        ref = TDOneHotCategorical(logits=torch.tensor([[NEG_INF, 0.0, 1.0]]))
        torch.testing.assert_close(dist.log_prob(value), ref.log_prob(value))
        assert int(dist.sample((1000,))[..., 0].sum()) == 0

    def test_shapes(self) -> None:
        assert OneHotCategorical(logits=torch.zeros(3)).sample().shape == (3,)
        assert OneHotCategorical(logits=torch.zeros(2, 3, 1)).sample().shape == (2, 3)
        assert OneHotCategorical(logits=torch.zeros(2, 3)).sample((4, 5)).shape == (4, 5, 2, 3)


def _discrete_actor() -> ProbabilisticActor:
    return ProbabilisticActor(
        TensorDictModule(nn.Linear(3, 4), in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=OneHotCategorical,
        distribution_kwargs={"validate_args": False},
        return_log_prob=True,
    )


def _continuous_actor() -> ProbabilisticActor:
    net = nn.Sequential(nn.Linear(3, 4), NormalParamExtractor())
    return ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        return_log_prob=True,
    )


def _generic(actor: ProbabilisticActor, td: TensorDict) -> TensorDict:
    return ProbabilisticTensorDictSequential.forward(actor, td)


class TestProbabilisticActorFastPath:
    @pytest.mark.parametrize("make", [_discrete_actor, _continuous_actor])
    @pytest.mark.parametrize(
        "mode", [InteractionType.RANDOM, InteractionType.DETERMINISTIC, InteractionType.MODE, None]
    )
    def test_same_as_generic(self, make, mode) -> None:
        actor = make()
        assert actor.__dict__["_fast"] is not None
        obs = torch.randn(6, 3)
        outs = []
        for call in (actor, lambda td: _generic(actor, td)):
            torch.manual_seed(1)
            td = TensorDict(observation=obs, batch_size=[6])
            if mode is None:
                outs.append(call(td))
            else:
                with set_interaction_type(mode):
                    outs.append(call(td))
        fast, generic = outs
        assert set(fast.keys()) == set(generic.keys())
        for key in generic.keys():
            torch.testing.assert_close(fast[key], generic[key])

    def test_get_dist_same_as_generic(self) -> None:
        actor = _continuous_actor()
        td = TensorDict(observation=torch.randn(6, 3), batch_size=[6])
        fast = actor.get_dist(td.copy())
        generic = ProbabilisticTensorDictSequential.get_dist(actor, td.copy())
        torch.testing.assert_close(fast.loc, generic.loc)
        torch.testing.assert_close(fast.scale, generic.scale)

    def test_generic_layouts_keep_the_generic_path(self) -> None:
        # The parameter module already writes the sample key: the sampler must not draw.
        actor = ProbabilisticActor(
            TensorDictModule(nn.Linear(3, 4), in_keys=["observation"], out_keys=["action"]),
            in_keys={"logits": "action"},
            distribution_class=OneHotCategorical,
        )
        assert actor.__dict__["_fast"] is None
        td = actor(TensorDict(observation=torch.randn(2, 3), batch_size=[2]))
        assert td["action"].dtype == torch.float32

    def test_with_trunk_is_fast(self) -> None:
        trunk = TensorDictModule(nn.Linear(3, 3), in_keys=["observation"], out_keys=["observation"])
        actor = _discrete_actor().with_trunk(trunk)
        assert actor.__dict__["_fast"] is not None
        assert len(actor.__dict__["_fast"][0]) == 2
        td = actor(TensorDict(observation=torch.randn(2, 3), batch_size=[2]))
        assert td["action_log_prob"].shape == (2,)
