"""Agents (torchrl/agents/agent.py, env_agent.py, module_agent.py, data_agent.py).

``CountingEnv`` (observation = step count, reward = action, sub-env ``i`` ends after
``max_steps[i]`` steps) makes every expected value easy to write down.
"""

from __future__ import annotations

import pytest
import torch
from _envs import CountingEnv
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.agents import (
    Agent,
    Agents,
    DataLoaderAgent,
    EnvAgent,
    ModelAgent,
    ModuleAgent,
    TemporalAgent,
    Workspace,
    replay,
)
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import InitTracker, TransformedEnv
from torchrl.envs.utils import ExplorationType
from torchrl.modules import LSTMModule


class Constant(nn.Module):
    def __init__(self, value: int = 1) -> None:
        super().__init__()
        self.value = value

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.full_like(obs, self.value, dtype=torch.int64)


def _policy(value: int = 1) -> ModuleAgent:
    return ModuleAgent(TensorDictModule(Constant(value), ["observation"], ["action"]))


class Tick(Agent):
    """Writes ``"done"`` True for row ``i`` from step ``ends[i]`` on, and counts its calls."""

    def __init__(self, ends: list[int]) -> None:
        super().__init__()
        self.ends = torch.tensor(ends)
        self.calls: list[int] = []

    def forward(self, workspace: Workspace, t: int = 0, **kwargs) -> None:
        self.calls.append(t)
        workspace.set("done", t, (t >= self.ends).unsqueeze(-1))


# ---------------------------------------------------------------------- TemporalAgent
def test_temporal_agent_n_steps_and_t0() -> None:
    tick = Tick([100, 100])
    ws = Workspace(batch_size=[2])
    TemporalAgent(tick, n_steps=3)(ws)
    assert tick.calls == [0, 1, 2] and ws.time_length == 3
    TemporalAgent(tick, n_steps=3, t0=5)(ws)
    assert tick.calls[3:] == [5, 6, 7] and ws.time_length == 8
    TemporalAgent(tick, n_steps=3)(ws, t=1, n_steps=2)  # call arguments override
    assert tick.calls[6:] == [1, 2]
    assert ws.time_length == 3  # a run from t replaces the steps from t on


def test_temporal_agent_stop_variable() -> None:
    tick = Tick([2, 4])
    ws = Workspace(batch_size=[2])
    TemporalAgent(tick, stop_variable="done")(ws)
    assert tick.calls == [0, 1, 2, 3, 4]  # stops after the first step where all rows are done
    tick.calls.clear()
    TemporalAgent(tick, n_steps=3, stop_variable="done")(Workspace(batch_size=[2]))
    assert tick.calls == [0, 1, 2]  # n_steps first
    tick.calls.clear()
    TemporalAgent(tick, n_steps=10, stop_variable="done")(Workspace(batch_size=[2]), t=6)
    assert tick.calls == [6]  # already done at its first step


def test_temporal_agent_errors() -> None:
    with pytest.raises(ValueError, match="needs n_steps, a stop_variable"):
        TemporalAgent(Tick([1]))(Workspace(batch_size=[1]))
    with pytest.raises(ValueError, match="n_steps must be >= 1"):
        TemporalAgent(Tick([1]), n_steps=0)(Workspace(batch_size=[1]))
    with pytest.raises(TypeError, match="must be an Agent"):
        TemporalAgent(nn.Linear(1, 1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="argument 1 must be an Agent.*ModuleAgent"):
        Agents(Tick([1]), nn.Linear(1, 1))  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="must implement forward"):
        Agent()(Workspace(batch_size=[1]), t=0)


# ---------------------------------------------------------------------- env agent
def test_env_agent_writes_the_rollout_layout() -> None:
    env = CountingEnv(batch_size=[2], max_steps=[3, 5])
    ws = Workspace()
    acq = TemporalAgent(Agents(EnvAgent(env), _policy(1)))
    acq(ws, t=0, n_steps=7)
    ref = CountingEnv(batch_size=[2], max_steps=[3, 5]).rollout(
        6, TensorDictModule(Constant(1), ["observation"], ["action"]), break_when_any_done=False
    )
    got = ws.to_tensordict()[:, :-1]  # the last step has no transition yet
    for key in [
        "observation",
        "action",
        ("next", "observation"),
        ("next", "reward"),
        ("next", "done"),
        ("next", "terminated"),
        "done",
    ]:
        assert torch.equal(got[key], ref[key]), key


def test_env_agent_continues_across_runs() -> None:
    env = CountingEnv(batch_size=[2], max_steps=[3, 4])
    acq = TemporalAgent(Agents(EnvAgent(env), _policy(1)))
    ws = Workspace()
    acq(ws, t=0, n_steps=5)
    first = ws.to_tensordict()[:, :-1].clone()
    ws.copy_n_last_steps(1)
    acq(ws, t=1, n_steps=4)
    second = ws.to_tensordict()[:, :-1].clone()
    ref = CountingEnv(batch_size=[2], max_steps=[3, 4]).rollout(
        8, TensorDictModule(Constant(1), ["observation"], ["action"]), break_when_any_done=False
    )
    both = torch.cat([first, second], -1)
    for key in ["observation", ("next", "observation"), ("next", "done")]:
        assert torch.equal(both[key], ref[key]), key
    # a run at t=0 on a fresh workspace goes on from the env's state too (auto_reset=True)
    ws2 = Workspace()
    acq(ws2, t=0, n_steps=2)
    assert torch.equal(ws2.get("observation", 0), ws.get("observation", -1))


def test_env_agent_episodes_freeze_finished_envs() -> None:
    env = CountingEnv(batch_size=[3], max_steps=[2, 4, 3])
    ws = Workspace()
    episode = TemporalAgent(Agents(EnvAgent(env, auto_reset=False), _policy(1)))
    episode(ws, t=0, stop_variable="done", n_steps=50)
    assert ws.time_length == 5  # the longest episode has 4 transitions
    reward = ws.get_full(("next", "reward")).squeeze(-1)
    assert reward.sum(-1).tolist() == [2.0, 4.0, 3.0]  # zero reward once frozen
    obs = ws.get_full("observation").squeeze(-1)
    assert obs[0].tolist() == [0.0, 1.0, 2.0, 2.0, 2.0]
    # a new episode run resets every sub-env
    episode(ws, t=0, stop_variable="done", n_steps=50)
    assert ws.get("observation", 0).abs().sum() == 0


def test_env_agent_errors() -> None:
    with pytest.raises(TypeError, match="env must be an EnvBase"):
        EnvAgent(object())  # type: ignore[arg-type]
    agent = EnvAgent(CountingEnv(batch_size=[2]))
    ws = Workspace(batch_size=[2])
    ws.set("action", 0, torch.zeros(2, 1, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="never reset; start a run at t=0"):
        agent(ws, t=1)
    with pytest.raises(ValueError, match="batch size"):
        agent(Workspace(batch_size=[3]), t=0)


def test_env_agent_seed() -> None:
    env = CountingEnv(batch_size=[2])
    agent = EnvAgent(env)
    Agents(agent, _policy()).seed(3)
    assert env.seeds == [3]


# ---------------------------------------------------------------------- module agent
def test_module_agent_outputs_and_errors() -> None:
    module = TensorDictModule(nn.Linear(1, 2), ["observation"], ["out"])
    ws = Workspace(batch_size=[3])
    ws.set("observation", 0, torch.ones(3, 1))
    ModuleAgent(module)(ws, t=0)
    assert torch.allclose(ws.get("out", 0), module.module(torch.ones(3, 1)))
    with pytest.raises(KeyError, match="did not write 'missing' at step 0"):
        ModuleAgent(module, out_keys=["missing"])(ws, t=0)
    with pytest.raises(ValueError, match="has no out_keys"):
        ModuleAgent(lambda td: td)  # type: ignore[arg-type]


def test_module_agent_exploration_type() -> None:
    from torchrl.envs.utils import exploration_type

    seen = []

    def record(td):
        seen.append(exploration_type())
        td["y"] = td["observation"]
        return td

    record.out_keys = ["y"]  # type: ignore[attr-defined]
    ws = Workspace(batch_size=[1])
    ws.set("observation", 0, torch.ones(1, 1))
    ModuleAgent(record, exploration_type=ExplorationType.DETERMINISTIC)(ws, t=0)  # type: ignore[arg-type]
    assert seen == [ExplorationType.DETERMINISTIC]


# ---------------------------------------------------------------------- replay
def test_replay_equals_acting_feedforward() -> None:
    torch.manual_seed(0)
    net = TensorDictModule(nn.Linear(1, 4), ["observation"], ["features"])
    acq = TemporalAgent(
        Agents(
            EnvAgent(CountingEnv(batch_size=[2], max_steps=[3, 4])), ModuleAgent(net), _policy(1)
        )
    )
    ws = Workspace()
    with torch.no_grad():
        acq(ws, t=0, n_steps=9)
    acted = ws.get_full("features").clone()
    replay(acq, ws)
    assert torch.allclose(ws.get_full("features"), acted, atol=1e-6)
    assert ws.get_full("features").requires_grad  # replay keeps the graph for a loss


def test_replay_equals_acting_recurrent() -> None:
    torch.manual_seed(0)
    lstm = LSTMModule(input_size=1, hidden_size=8, in_key="observation", out_key="features")
    env = TransformedEnv(CountingEnv(batch_size=[3], max_steps=[3, 4, 6]), InitTracker())
    env = env.append_transform(lstm.make_tensordict_primer())
    acq = TemporalAgent(Agents(EnvAgent(env), ModuleAgent(lstm), _policy(1)))
    ws = Workspace()
    with torch.no_grad():
        acq(ws, t=0, n_steps=6)
        ws.copy_n_last_steps(1)  # the stored state at step 0 is not zero: replay must use it
        acq(ws, t=1, n_steps=10)
    assert ws.get_full("is_init").any() and ws.get("recurrent_state_h", 0).abs().sum() > 0
    acted = ws.get_full("features").clone()
    with torch.no_grad():
        replay(acq, ws)
    assert torch.allclose(ws.get_full("features"), acted, atol=1e-5)
    # from t0 > 0 the stored state at t0 is the starting point
    ws.get_full("features").zero_()
    with torch.no_grad():
        replay(acq, ws, t0=4)
    assert torch.allclose(ws.get_full("features")[:, 4:], acted[:, 4:], atol=1e-5)
    assert ws.get_full("features")[:, :4].abs().sum() == 0


def test_replay_default_loops_over_steps() -> None:
    tick = Tick([1, 2])
    ws = Workspace(batch_size=[2])
    TemporalAgent(tick, n_steps=4)(ws)
    tick.calls.clear()
    replay(TemporalAgent(tick), ws, t0=1)
    assert tick.calls == [1, 2, 3]
    with pytest.raises(ValueError, match="t0 must be in"):
        replay(tick, ws, t0=9)
    with pytest.raises(TypeError, match="must be an Agent"):
        replay(nn.Linear(1, 1), ws)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- model agent
def test_model_agent_imagines_like_the_env() -> None:
    class Dynamics(nn.Module):
        def forward(self, obs: torch.Tensor, action: torch.Tensor):
            return obs + 1, action.float()

    model = TensorDictModule(
        Dynamics(), ["observation", "action"], [("next", "observation"), ("next", "reward")]
    )
    real = Workspace()
    TemporalAgent(Agents(EnvAgent(CountingEnv(batch_size=[2], max_steps=100)), _policy(1)))(
        real, t=0, n_steps=5
    )
    imagined = Workspace(batch_size=[2])
    imagined.set("observation", 0, real.get("observation", 0))  # start from real states
    TemporalAgent(Agents(ModelAgent(model), _policy(1)))(imagined, t=0, n_steps=5)
    for key in ["observation", ("next", "observation"), ("next", "reward")]:
        a, b = imagined.get_full(key)[:, :4], real.get_full(key)[:, :4]
        assert torch.equal(a, b.to(a.dtype)), key
    with pytest.raises(KeyError, match="did not write"):
        ModelAgent(model, out_keys=[("next", "nope")])(imagined, t=1)


def test_world_model_env_in_an_env_agent() -> None:
    from torchrl.data import Composite, Unbounded
    from torchrl.envs.model_based import WorldModelEnv

    class Dyn(nn.Module):
        def forward(self, obs: torch.Tensor, action: torch.Tensor):
            return obs + action, -obs.pow(2).sum(-1, keepdim=True)

    world = TensorDictModule(Dyn(), ["observation", "action"], ["observation", "reward"])
    env = WorldModelEnv(
        world,
        observation_spec=Composite(observation=Unbounded(shape=(1,))),
        action_spec=Unbounded(shape=(1,)),
        start_states=TensorDict({"observation": torch.zeros(4, 1)}, [4]),
        batch_size=[3],
    )

    class Push(Agent):
        def forward(self, workspace: Workspace, t: int = 0, **kwargs) -> None:
            workspace.set("action", t, torch.ones(3, 1))

    ws = Workspace()
    TemporalAgent(Agents(EnvAgent(env), Push()))(ws, t=0, n_steps=4)
    assert ws.get_full("observation")[0, :, 0].tolist() == [0.0, 1.0, 2.0, 3.0]


# ---------------------------------------------------------------------- data-loader agent
def test_data_loader_agent_iterable_and_buffer() -> None:
    batches = [TensorDict({"obs": torch.full((2, 1), float(i))}, [2]) for i in range(3)]
    loader = DataLoaderAgent(batches)
    ws = Workspace()
    TemporalAgent(loader, n_steps=4)(ws)
    assert ws.get_full("obs")[0, :, 0].tolist() == [0.0, 1.0, 2.0, 0.0]  # cycles
    once = DataLoaderAgent(batches[:1], cycle=False)
    once(Workspace(), t=0)
    with pytest.raises(StopIteration):
        once(Workspace(), t=0)

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
    rb.extend(TensorDict({"obs": torch.arange(10.0).unsqueeze(-1)}, [10]))
    ws = Workspace()
    DataLoaderAgent(rb)(ws, t=0)
    assert ws.batch_size == torch.Size([4]) and ws.get("obs", 0).shape == (4, 1)


def test_data_loader_agent_sequences_without_copy() -> None:
    seq = TensorDict({"obs": torch.randn(2, 5, 3)}, [2, 5])
    ws = Workspace()
    DataLoaderAgent([seq], time_dim=True)(ws)
    assert ws.time_length == 5 and ws.get_full("obs").data_ptr() == seq["obs"].data_ptr()
    with pytest.raises(ValueError, match="the workspace holds"):
        DataLoaderAgent([TensorDict({"obs": torch.zeros(3, 5)}, [3, 5])], time_dim=True)(ws)
    with pytest.raises(TypeError, match="replay buffer"):
        DataLoaderAgent(3)
    with pytest.raises(TypeError, match="expected a TensorDict"):
        DataLoaderAgent([torch.zeros(2)])(Workspace(), t=0)
