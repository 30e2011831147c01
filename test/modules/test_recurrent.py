"""Recurrent modules: step-by-step collection equals recurrent mode over the collected sequence."""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase
from torchrl.envs.utils import step_mdp
from torchrl.modules import GRUModule, LSTMModule, recurrent_mode, set_recurrent_mode

HIDDEN, LAYERS = 8, 2


class EpisodicEnv(EnvBase):
    """Random observations shifted by the action; episodes end with probability ``p_done``.

    Its reset writes ``"is_init"`` and zero recurrent states, standing in for the InitTracker and
    TensorDictPrimer transforms (issue 3).
    """

    def __init__(self, batch_size, state_keys, p_done=0.2):
        super().__init__(batch_size=batch_size)
        b = self.batch_size
        self.rnn_state_keys = state_keys
        self.p_done = p_done
        self.observation_spec = Composite(
            observation=Unbounded(shape=(*b, 3)),
            is_init=Categorical(2, shape=(*b, 1), dtype=torch.bool),
            shape=b,
        )
        self.action_spec = Unbounded(shape=(*b, 1))
        self.reward_spec = Unbounded(shape=(*b, 1))

    def _reset(self, tensordict, **kwargs):
        b = self.batch_size
        out = TensorDict(
            observation=torch.randn(*b, 3),
            is_init=torch.ones(*b, 1, dtype=torch.bool),
            batch_size=b,
        )
        for key in self.rnn_state_keys:
            out[key] = torch.zeros(*b, LAYERS, HIDDEN)
        return out

    def _step(self, tensordict):
        b = self.batch_size
        return TensorDict(
            observation=torch.randn(*b, 3) + tensordict["action"],
            reward=torch.zeros(*b, 1),
            terminated=torch.rand(*b, 1) < self.p_done,
            is_init=torch.zeros(*b, 1, dtype=torch.bool),
            batch_size=b,
        )

    def _set_seed(self, seed):
        torch.manual_seed(seed)


def _collect(env, policy, steps):
    """A collector's loop: act, step, carry the next state, reset finished sub-envs."""
    state_out = [k for k in policy.out_keys if isinstance(k, tuple) and k[0] == "next"]
    td = env.reset()
    transitions = []
    for _ in range(steps):
        td = policy(td)
        # EnvBase.step replaces "next": keep the recurrent states the policy wrote there.
        next_states = {k: td[k] for k in state_out}
        td = env.step(td)
        for key, value in next_states.items():
            td[key] = value
        transitions.append(td.clone())
        td = step_mdp(td)
        done = td["done"]
        if done.any():
            td["_reset"] = done
            td = env.reset(td)
    return torch.stack(transitions, -1)


def _policy(rnn_module):
    return TensorDictSequential(
        TensorDictModule(nn.Linear(3, 5), ["observation"], ["embed"]),
        rnn_module,
        TensorDictModule(nn.Linear(HIDDEN, 1), ["features"], ["action"]),
    )


@pytest.mark.parametrize(
    "make, state_keys",
    [
        (
            lambda: LSTMModule(5, HIDDEN, LAYERS, in_key="embed", out_key="features"),
            ["recurrent_state_h", "recurrent_state_c"],
        ),
        (
            lambda: GRUModule(5, HIDDEN, LAYERS, in_key="embed", out_key="features"),
            ["recurrent_state"],
        ),
    ],
)
def test_step_by_step_equals_recurrent_mode(make, state_keys):
    torch.manual_seed(0)
    rnn = make()
    policy = _policy(rnn)
    env = EpisodicEnv([6], state_keys, p_done=0.25)
    with torch.no_grad():
        rollout = _collect(env, policy, steps=30)
    assert rollout.batch_size == (6, 30)
    # Episode starts inside the sequences (not only at t=0).
    assert rollout["is_init"][:, 1:].sum() >= 5
    replay = rollout.exclude("features", "action", "next")
    with torch.no_grad(), set_recurrent_mode(True):
        replay = policy(replay)
    torch.testing.assert_close(replay["features"], rollout["features"], rtol=0, atol=1e-5)
    torch.testing.assert_close(replay["action"], rollout["action"], rtol=0, atol=1e-5)
    # A slice that starts mid-episode uses the stored state of its first step.
    with torch.no_grad(), set_recurrent_mode(True):
        tail = policy(rollout[:, 13:].exclude("features", "action", "next"))
    torch.testing.assert_close(tail["features"], rollout["features"][:, 13:], rtol=0, atol=1e-5)


def test_recurrent_mode_gradients_and_shapes():
    lstm = LSTMModule(3, HIDDEN, in_key="x", out_key="y")
    td = TensorDict(
        x=torch.randn(2, 4, 7, 3, requires_grad=True),
        is_init=torch.rand(2, 4, 7, 1) < 0.3,
        recurrent_state_h=torch.randn(2, 4, 7, 1, HIDDEN),
        recurrent_state_c=torch.randn(2, 4, 7, 1, HIDDEN),
        batch_size=[2, 4, 7],
    )
    with set_recurrent_mode(True):
        out = lstm(td)["y"]
    assert out.shape == (2, 4, 7, HIDDEN)
    out.sum().backward()
    assert lstm.lstm.weight_hh_l0.grad is not None
    # Reference: a plain loop over time with explicit resets.
    x = td["x"].detach().reshape(8, 7, 3)
    is_init = td["is_init"].reshape(8, 7)
    h = td["recurrent_state_h"].reshape(8, 7, 1, HIDDEN)[:, 0].transpose(0, 1)
    c = td["recurrent_state_c"].reshape(8, 7, 1, HIDDEN)[:, 0].transpose(0, 1)
    ref = []
    for t in range(7):
        keep = (~is_init[:, t]).float()[None, :, None]
        y, (h, c) = lstm.lstm(x[:, t : t + 1], (h * keep, c * keep))
        ref.append(y)
    torch.testing.assert_close(
        out.detach().reshape(8, 7, HIDDEN), torch.cat(ref, 1), atol=1e-5, rtol=0
    )


def test_step_mode_resets_where_is_init():
    gru = GRUModule(3, HIDDEN, in_key="x", out_key="y")
    x = torch.randn(2, 3)
    state = torch.randn(2, 1, HIDDEN)
    td = TensorDict(
        x=x, recurrent_state=state, is_init=torch.tensor([[True], [False]]), batch_size=[2]
    )
    out = gru(td)
    zero_state = gru(
        TensorDict(
            x=x,
            recurrent_state=torch.zeros_like(state),
            is_init=torch.zeros(2, 1, dtype=torch.bool),
            batch_size=[2],
        )
    )
    torch.testing.assert_close(out["y"][0], zero_state["y"][0])
    assert not torch.allclose(out["y"][1], zero_state["y"][1])
    assert out["next", "recurrent_state"].shape == (2, 1, HIDDEN)


def test_missing_keys_name_the_transform():
    lstm = LSTMModule(3, HIDDEN, in_key="x", out_key="y")
    td = TensorDict(x=torch.randn(2, 3), is_init=torch.ones(2, 1, dtype=torch.bool), batch_size=[2])
    with pytest.raises(KeyError, match="TensorDictPrimer"):
        lstm(td)
    td = TensorDict(
        x=torch.randn(2, 3),
        recurrent_state_h=torch.zeros(2, 1, HIDDEN),
        recurrent_state_c=torch.zeros(2, 1, HIDDEN),
        batch_size=[2],
    )
    with pytest.raises(KeyError, match="InitTracker"):
        lstm(td)


@pytest.mark.parametrize("cls", [LSTMModule, GRUModule])
def test_primer_drives_env_rollout_like_recurrent_mode(cls):
    # With InitTracker + the module's primer, env.rollout carries the hidden state step to step,
    # and the outputs match recurrent mode over the collected [B, T] sequence.
    from tensordict.nn import TensorDictModule, TensorDictSequential

    from torchrl.envs import PendulumEnv
    from torchrl.envs.transforms import InitTracker, StepCounter, TransformedEnv

    rnn = cls(3, HIDDEN, in_key="observation", out_key="features")
    head = TensorDictModule(nn.Linear(HIDDEN, 1), ["features"], ["action"])
    policy = TensorDictSequential(rnn, head)
    env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), InitTracker())
    env.append_transform(StepCounter(max_steps=7))
    env.append_transform(rnn.make_tensordict_primer())
    with torch.no_grad():
        data = env.rollout(20, policy, break_when_any_done=False)
        assert data["is_init"][:, 7].all() and not data["is_init"][:, 1:7].any()
        replay = TensorDictSequential(rnn.set_recurrent_mode(True), head)(data.clone())
    torch.testing.assert_close(replay["features"], data["features"], atol=1e-5, rtol=0)


def test_modes_keys_and_errors():
    lstm = LSTMModule(3, HIDDEN, in_key="x", out_key="y")
    assert lstm.in_keys == ["x", "recurrent_state_h", "recurrent_state_c", "is_init"]
    assert lstm.state_keys == ["recurrent_state_h", "recurrent_state_c"]
    viewed = LSTMModule(3, HIDDEN, in_key="x", out_key="y", state_views=True)
    assert viewed.in_keys == ["x", "recurrent_state_h", "recurrent_state_c"]  # is_init optional
    torchrl_layout = GRUModule(3, 4, in_keys=["x", "h", "first"], out_keys=["y", ("next", "h")])
    assert torchrl_layout.is_init_key == "first" and torchrl_layout.in_keys[-1] == "first"
    assert lstm.out_keys == ["y", ("next", "recurrent_state_h"), ("next", "recurrent_state_c")]
    assert not lstm.recurrent_mode
    seq = lstm.set_recurrent_mode(True)
    assert seq.recurrent_mode and not lstm.recurrent_mode
    assert seq.lstm is lstm.lstm
    with set_recurrent_mode(False):
        assert not seq.recurrent_mode and recurrent_mode() is False
    assert recurrent_mode() is None
    with set_recurrent_mode("recurrent"):  # TorchRL's names for the two modes
        assert recurrent_mode() is True
    with set_recurrent_mode("sequential"):
        assert recurrent_mode() is False
    with pytest.raises(ValueError, match="'recurrent' or 'sequential'"):
        set_recurrent_mode("sequence")
    custom = GRUModule(
        gru=nn.GRU(3, 4, batch_first=True), in_keys=["x", "h"], out_keys=["y", ("next", "h")]
    )
    assert custom.gru.hidden_size == 4
    with pytest.raises(ValueError, match="batch_first"):
        LSTMModule(lstm=nn.LSTM(3, 4), in_key="x", out_key="y")
    with pytest.raises(ValueError, match="bidirectional"):
        GRUModule(3, 4, bidirectional=True, in_key="x", out_key="y")
    with pytest.raises(ValueError, match="exactly one"):
        LSTMModule(3, 4, in_key="x", in_keys=["x", "h", "c"], out_key="y")
    with pytest.raises(ValueError, match="in_keys"):
        LSTMModule(3, 4, in_keys=["x", "h"], out_key="y")
    with pytest.raises(ValueError, match="time dim"):
        with set_recurrent_mode(True):
            lstm(TensorDict(x=torch.randn(3)))
