"""Recurrent helpers: get_primers_from_module, get_env_transforms_from_module,
MultiStepActorWrapper, set_recurrent_mode as context manager / decorator / module method."""

from __future__ import annotations

import warnings

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from torchrl.data import Unbounded
from torchrl.envs import PendulumEnv, TransformedEnv, check_env_specs
from torchrl.envs.custom.stateless_cartpole import StatelessCartPole
from torchrl.envs.transforms import Compose, InitTracker, TensorDictPrimer
from torchrl.modules import GRUModule, LSTMModule, recurrent_mode, set_recurrent_mode
from torchrl.modules.recurrent_utils import (
    get_env_transforms_from_module,
    get_primers_from_module,
)
from torchrl.modules.tensordict_module.multistep import MultiStepActorWrapper


def _policy() -> TensorDictSequential:
    lstm = LSTMModule(2, 8, in_key="observation", out_key="features")
    head = TensorDictModule(nn.Linear(8, 2), ["features"], ["logits"])
    return TensorDictSequential(lstm, head)


def _greedy(policy: TensorDictSequential):
    def act(td: TensorDict) -> TensorDict:
        td = policy(td)
        td["action"] = torch.nn.functional.one_hot(td["logits"].argmax(-1), 2).bool()
        return td

    return act


# ------------------------------------------------------------------ get_primers_from_module
def test_primers_single_module() -> None:
    primer = get_primers_from_module(_policy())
    assert isinstance(primer, TensorDictPrimer)
    assert set(primer.primers.keys()) == {"recurrent_state_h", "recurrent_state_c"}
    assert primer.primers["recurrent_state_h"].shape == (1, 8)


def test_primers_merge_several_modules_into_one() -> None:
    gru = GRUModule(2, 4, in_key="observation", out_key="g")
    lstm = LSTMModule(4, 3, num_layers=2, in_keys=["g", "lh", "lc"], out_key="features")
    primer = get_primers_from_module(TensorDictSequential(gru, lstm))
    assert isinstance(primer, TensorDictPrimer)
    assert set(primer.primers.keys()) == {"recurrent_state", "lh", "lc"}
    env = TransformedEnv(PendulumEnv(batch_size=[3], seed=0), Compose(InitTracker(), primer))
    td = env.reset()
    assert td["lh"].shape == (3, 2, 3) and td["recurrent_state"].shape == (3, 1, 4)
    assert td["lh"].abs().sum() == 0


def test_primers_state_dim_equal_to_batch_size() -> None:
    # 2 layers in 2 envs: the state [2, 8] must still get the batch dim ([2, 2, 8])
    lstm = LSTMModule(2, 8, num_layers=2, in_key="observation", out_key="features")
    env = TransformedEnv(
        StatelessCartPole(batch_size=[2], seed=0), get_env_transforms_from_module(lstm)
    )
    assert env.reset()["recurrent_state_h"].shape == (2, 2, 8)
    check_env_specs(env)


def test_primers_shared_module_counts_once() -> None:
    lstm = LSTMModule(2, 8, in_key="observation", out_key="features")
    actor = TensorDictSequential(lstm, TensorDictModule(nn.Linear(8, 2), ["features"], ["a"]))
    critic = TensorDictSequential(lstm, TensorDictModule(nn.Linear(8, 1), ["features"], ["v"]))
    both = nn.ModuleList([actor, critic])
    primer = get_primers_from_module(both)
    assert set(primer.primers.keys()) == {"recurrent_state_h", "recurrent_state_c"}


def test_primers_conflicting_keys_raise() -> None:
    a = LSTMModule(2, 8, in_key="observation", out_key="f1")
    b = LSTMModule(2, 8, in_key="observation", out_key="f2")
    with pytest.raises(ValueError, match="recurrent_state_h.*declared by both"):
        get_primers_from_module(nn.ModuleList([a, b]))


def test_primers_none_warns() -> None:
    mlp = TensorDictModule(nn.Linear(2, 2), ["observation"], ["logits"])
    with pytest.warns(UserWarning, match="no submodule"):
        assert get_primers_from_module(mlp) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert get_primers_from_module(mlp, warn=False) is None


class _Broken(nn.Module):
    def make_tensordict_primer(self) -> TensorDictPrimer:
        raise RuntimeError("needs an input shape")


def test_primers_strict() -> None:
    policy = nn.ModuleList([_policy(), _Broken()])
    with pytest.raises(RuntimeError, match="needs an input shape"):
        get_primers_from_module(policy)
    with pytest.warns(UserWarning, match="_Broken"):
        primer = get_primers_from_module(policy, strict=False)
    assert set(primer.primers.keys()) == {"recurrent_state_h", "recurrent_state_c"}


class _RandomState(nn.Module):
    def make_tensordict_primer(self) -> TensorDictPrimer:
        return TensorDictPrimer({"noise": Unbounded(shape=(2,))}, random=True)


def test_primers_random_ones_are_composed() -> None:
    out = get_primers_from_module(nn.ModuleList([_policy(), _RandomState()]))
    assert isinstance(out, Compose) and len(out) == 2


# --------------------------------------------------------- get_env_transforms_from_module
def test_env_transforms_make_a_runnable_recurrent_env() -> None:
    policy = _policy()
    transforms = get_env_transforms_from_module(policy)
    assert isinstance(transforms, Compose)
    assert isinstance(transforms[0], InitTracker)
    env = TransformedEnv(StatelessCartPole(batch_size=[4], seed=0), transforms)
    check_env_specs(env)
    td = env.rollout(5, _greedy(policy), break_when_any_done=False)
    assert td["next", "recurrent_state_h"].shape == (4, 5, 1, 8)
    # the state the policy wrote at t is the one it reads at t+1
    torch.testing.assert_close(
        td["recurrent_state_h"][:, 1:], td["next", "recurrent_state_h"][:, :-1]
    )


def test_env_transforms_without_state_is_init_tracker() -> None:
    mlp = TensorDictModule(nn.Linear(2, 2), ["observation"], ["logits"])
    assert isinstance(get_env_transforms_from_module(mlp), InitTracker)


def test_env_transforms_init_key_mismatch() -> None:
    lstm = LSTMModule(2, 8, in_key="observation", out_key="f", is_init_key="first")
    with pytest.raises(ValueError, match="reads the episode-start flag 'first'"):
        get_env_transforms_from_module(lstm)
    transforms = get_env_transforms_from_module(lstm, init_key="first")
    assert transforms[0].init_key == "first"


# ----------------------------------------------------------------- MultiStepActorWrapper
def _macro_actor(k: int) -> TensorDictModule:
    # action i of a macro = observation + i
    return TensorDictModule(
        lambda obs: obs.unsqueeze(-2) + torch.arange(float(k)).unsqueeze(-1),
        ["observation"],
        ["action"],
    )


def test_multistep_plays_macros_and_restarts_at_episode_start() -> None:
    wrapper = MultiStepActorWrapper(_macro_actor(3), n_steps=2)
    td = TensorDict(
        observation=torch.tensor([[0.0], [10.0]]),
        is_init=torch.zeros(2, 1, dtype=torch.bool),
        batch_size=[2],
    )
    actions = [wrapper(td.clone())["action"].squeeze(-1).tolist() for _ in range(3)]
    assert actions == [[0.0, 10.0], [1.0, 11.0], [0.0, 10.0]]
    assert wrapper.num_queries == 2
    # an episode start in sub-env 1 re-queries there only
    td["is_init"] = torch.tensor([[False], [True]])
    td["observation"] = torch.tensor([[5.0], [20.0]])
    assert wrapper(td.clone())["action"].squeeze(-1).tolist() == [1.0, 20.0]


def test_multistep_keep_dim_and_keys() -> None:
    wrapper = MultiStepActorWrapper(_macro_actor(2), keep_dim=True)
    td = TensorDict(observation=torch.zeros(4, 1), batch_size=[4])
    assert wrapper(td)["action"].shape == (4, 1, 1)
    assert wrapper.action_keys == ["action"] and wrapper.n_steps is None


def test_multistep_errors() -> None:
    two = TensorDictModule(lambda x: (x, x), ["observation"], ["action", ("agent", "action")])
    with pytest.raises(ValueError, match="one action entry"):
        MultiStepActorWrapper(two)
    with pytest.raises(ValueError, match="n_steps must be an int >= 1"):
        MultiStepActorWrapper(_macro_actor(2), n_steps=0)
    wrapper = MultiStepActorWrapper(_macro_actor(2), n_steps=3)
    with pytest.raises(ValueError, match="execute_steps=3"):
        wrapper(TensorDict(observation=torch.zeros(1), batch_size=[]))


# --------------------------------------------------------------------- set_recurrent_mode
def test_set_recurrent_mode_context_decorator_and_method() -> None:
    lstm = LSTMModule(2, 4, in_key="x", out_key="y")
    assert recurrent_mode() is None and not lstm.recurrent_mode
    with set_recurrent_mode(True):
        assert lstm.recurrent_mode
        with set_recurrent_mode(False):
            assert not lstm.recurrent_mode
        assert lstm.recurrent_mode
    assert recurrent_mode() is None

    @set_recurrent_mode(True)
    def inside() -> bool:
        return lstm.recurrent_mode

    assert inside() and not lstm.recurrent_mode
    seq = lstm.set_recurrent_mode(True)
    assert seq.recurrent_mode and not lstm.recurrent_mode
    assert seq.lstm is lstm.lstm  # shares the parameters


def test_sequence_mode_equals_step_mode_on_collected_data() -> None:
    policy = _policy()
    env = TransformedEnv(
        StatelessCartPole(batch_size=[2], seed=0, max_episode_steps=7),
        get_env_transforms_from_module(policy),
    )
    with torch.no_grad():
        data = env.rollout(20, _greedy(policy), break_when_any_done=False)
        step_features = data["features"].clone()
        with set_recurrent_mode(True):
            seq = policy(data.exclude("features"))
    torch.testing.assert_close(seq["features"], step_features, atol=1e-5, rtol=1e-5)
