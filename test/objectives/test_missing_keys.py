"""Every loss names a missing input key (which key, which loss, which keys the batch has)."""

from __future__ import annotations

import pytest
import torch
from _loss_helpers import (
    ConcatMLP,
    FixedNoiseTanhNormal,
    gaussian_actor,
    mlp,
    trajectory_batch,
    transition_batch,
)
from torch.nn import functional as F

from torchrl.data import Bounded
from torchrl.modules import Actor, QValueActor, ValueOperator
from torchrl.objectives import (
    A2CLoss,
    BCLoss,
    ClipPPOLoss,
    CQLLoss,
    DDPGLoss,
    DiscreteCQLLoss,
    DQNLoss,
    IQLLoss,
    PPOLoss,
    REDQLoss,
    ReinforceLoss,
    SACLoss,
    TD3Loss,
)

SPEC = Bounded(-1.0, 1.0, shape=(2,))


def _qvalue():
    return ValueOperator(ConcatMLP(5), in_keys=["observation", "action"])


def _tanh_actor():
    return gaussian_actor(3, 2, distribution_class=FixedNoiseTanhNormal)


def _trajectories():
    td = trajectory_batch(2, 5, 3)
    td["action"] = torch.randn(2, 5, 2) * 0.5
    td["sample_log_prob"] = torch.zeros(2, 5)
    return td


def _transitions():
    return transition_batch(8, 3, torch.rand(8, 2) * 1.6 - 0.8)


def _discrete():
    return transition_batch(8, 3, F.one_hot(torch.randint(3, (8,)), 3))


LOSSES = {
    "ClipPPOLoss": (
        lambda: ClipPPOLoss(gaussian_actor(3, 2), ValueOperator(mlp(3, 1))),
        _trajectories,
    ),
    "PPOLoss": (lambda: PPOLoss(gaussian_actor(3, 2), ValueOperator(mlp(3, 1))), _trajectories),
    "A2CLoss": (lambda: A2CLoss(gaussian_actor(3, 2), ValueOperator(mlp(3, 1))), _trajectories),
    "ReinforceLoss": (
        lambda: ReinforceLoss(gaussian_actor(3, 2), ValueOperator(mlp(3, 1))),
        _trajectories,
    ),
    "SACLoss": (lambda: SACLoss(_tanh_actor(), _qvalue(), action_spec=SPEC), _transitions),
    "TD3Loss": (lambda: TD3Loss(Actor(mlp(3, 2)), _qvalue(), bounds=(-1.0, 1.0)), _transitions),
    "DDPGLoss": (lambda: DDPGLoss(Actor(mlp(3, 2)), _qvalue()), _transitions),
    "IQLLoss": (lambda: IQLLoss(_tanh_actor(), _qvalue(), ValueOperator(mlp(3, 1))), _transitions),
    "CQLLoss": (lambda: CQLLoss(_tanh_actor(), _qvalue(), action_spec=SPEC), _transitions),
    "REDQLoss": (lambda: REDQLoss(_tanh_actor(), _qvalue(), action_spec=SPEC), _transitions),
    "BCLoss": (lambda: BCLoss(Actor(mlp(3, 2))), _transitions),
    "DQNLoss": (lambda: DQNLoss(QValueActor(mlp(3, 3), action_space="one_hot")), _discrete),
    "DiscreteCQLLoss": (
        lambda: DiscreteCQLLoss(QValueActor(mlp(3, 3), action_space="one_hot")),
        _discrete,
    ),
}


def test_clip_ppo_without_action_names_the_key():
    # the case of issue 15: a NoneType arithmetic error before
    torch.manual_seed(0)
    loss = ClipPPOLoss(gaussian_actor(3, 2), ValueOperator(mlp(3, 1)))
    td = _trajectories()
    del td["action"]
    with pytest.raises(KeyError) as info:
        loss(td)
    message = info.value.args[0]
    assert "ClipPPOLoss: the input tensordict has no entry 'action'" in message
    assert "'sample_log_prob'" in message  # the entries the batch has


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_read_key_missing_is_named(name):
    torch.manual_seed(0)
    build, data = LOSSES[name]
    loss = build()
    td = data()
    loss(td.clone())  # the full batch works
    named = 0
    for key in td.keys(include_nested=True, leaves_only=True):
        bad = td.clone()
        del bad[key]
        try:
            loss(bad)
        except KeyError as err:
            message = err.args[0]
            leaf = key if isinstance(key, str) else key[-1]
            assert name in message or "GAE" in message, message
            assert repr(leaf) in message or repr(key) in message, message
            assert "present" in message, message  # the keys the batch has
            named += 1
        # a key the loss does not read may be missing (e.g. "truncated")
    assert named >= 2


def test_advantage_given_needs_no_estimator_inputs():
    torch.manual_seed(0)
    loss = ClipPPOLoss(gaussian_actor(3, 2), ValueOperator(mlp(3, 1)), critic_coef=None)
    td = _trajectories()
    td["advantage"] = torch.randn(2, 5, 1)
    del td["next", "reward"]
    del td["next", "observation"]
    assert torch.isfinite(loss(td)["loss_objective"])
    td = _trajectories()
    del td["next", "observation"]  # needed by the critic for the advantage
    with pytest.raises(KeyError) as info:
        loss(td)
    assert "ClipPPOLoss" in info.value.args[0]
    assert "('next', 'observation')" in info.value.args[0]


def test_renamed_keys_are_the_ones_checked():
    torch.manual_seed(0)
    loss = DQNLoss(QValueActor(mlp(3, 3), action_space="one_hot"))
    loss.set_keys(reward="r")
    td = _discrete()
    with pytest.raises(KeyError) as info:
        loss(td)
    assert "DQNLoss" in info.value.args[0] and "('next', 'r')" in info.value.args[0]
    td["next", "r"] = td["next", "reward"]
    loss(td)


def test_key_checks_on_other_tensordict_kinds_and_shapes():
    # The check walks a plain TensorDict's entry dicts; a tensor where a sub-TensorDict should
    # be, a lazy stack, and a key nested deeper than the loss's keys all give the same answers
    # as tensordict's own key lookup.
    from tensordict import LazyStackedTensorDict

    torch.manual_seed(0)
    loss = DQNLoss(QValueActor(mlp(3, 3), action_space="one_hot"))
    td = _discrete()
    loss._check_inputs(td)
    loss._check_inputs(LazyStackedTensorDict.lazy_stack(list(td.unbind(0)), 0))
    loss._check_inputs(td, [("next", "observation"), "action"])
    td["deep"] = {"er": {"key": torch.zeros(8)}}
    loss._check_inputs(td, [("deep", "er", "key")])
    for key in [("deep", "er", "nokey"), ("deep", "no", "key"), ("action", "x"), ("no", "x")]:
        with pytest.raises(KeyError, match=r"DQNLoss: the input tensordict has no entry"):
            loss._check_inputs(td, [key])
    lazy = LazyStackedTensorDict.lazy_stack(list(td.unbind(0)), 0)
    with pytest.raises(KeyError) as info:
        loss._check_inputs(lazy, [("next", "nothing")])
    assert "no entry ('next', 'nothing')" in info.value.args[0]
    with pytest.raises(TypeError, match="takes a TensorDict"):
        loss._check_inputs({"observation": torch.zeros(3)})
