"""NRemoteAgent (torchrl/agents/remote.py): same data as one process, errors, clean exits."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Any

import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.agents import (
    Agent,
    Agents,
    EnvAgent,
    ModuleAgent,
    NRemoteAgent,
    TemporalAgent,
    Workspace,
)
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase


class SeededEnv(EnvBase):
    """Sub-env ``j`` of an env seeded ``s`` starts at ``s + j`` and ends after ``2 + (s + j) % 3``.

    Deterministic given the seed, and sub-env ``j`` depends only on ``s + j``: an env of 4
    sub-envs seeded ``s`` equals two envs of 2 seeded ``s`` and ``s + 2``.
    """

    def __init__(self, batch: int) -> None:
        super().__init__(batch_size=[batch])
        self.observation_spec = Composite(observation=Unbounded(shape=(batch, 1)), shape=[batch])
        self.action_spec = Categorical(3, shape=(batch, 1))
        self.seed_ = 0
        self.start = torch.zeros(batch, 1)
        self.count = torch.zeros(batch, 1)

    def _set_seed(self, seed: int | None) -> None:
        self.seed_ = int(seed or 0)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        ids = self.seed_ + torch.arange(self.batch_size[0]).unsqueeze(-1).float()
        mask = None if tensordict is None else tensordict.get("_reset", None)
        mask = torch.ones_like(self.count, dtype=torch.bool) if mask is None else mask
        self.start = torch.where(mask, ids, self.start)
        self.count = torch.where(mask, 0.0, self.count)
        return TensorDict(observation=self.start + self.count, batch_size=self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.count = self.count + 1
        done = self.count >= 2 + self.start % 3
        obs = self.start + self.count
        return TensorDict(
            observation=obs,
            reward=tensordict["action"].float() * obs,
            done=done,
            terminated=done.clone(),
            batch_size=self.batch_size,
        )


class Policy(nn.Module):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs % 3).long()


def _acquisition(batch: int, seed: int = 0) -> TemporalAgent:
    env = SeededEnv(batch)
    env.set_seed(seed)
    policy = ModuleAgent(TensorDictModule(Policy(), ["observation"], ["action"]))
    return TemporalAgent(Agents(EnvAgent(env), policy))


class Fails(Agent):
    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def forward(self, workspace: Workspace, t: int = 0, **kwargs) -> None:
        workspace.set("x", t, torch.zeros(2))
        if t == self.at:
            raise ValueError(f"boom at step {t}")


class Dies(Agent):
    def forward(self, workspace: Workspace, t: int = 0, **kwargs) -> None:
        workspace.set("x", t, torch.zeros(2))
        if t == 2:
            os._exit(3)


class Sleeps(Agent):
    def forward(self, workspace: Workspace, t: int = 0, **kwargs) -> None:
        time.sleep(0.05)
        workspace.set("x", t, torch.full((2,), float(t)))


def _no_children_left() -> bool:
    deadline = time.monotonic() + 5
    while mp.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not mp.active_children()


def test_two_processes_give_the_one_process_workspace() -> None:
    single = Workspace()
    one = _acquisition(4, seed=0)
    one(single, t=0, n_steps=6)
    remote = NRemoteAgent(lambda i: _acquisition(2, seed=2 * i), num_processes=2)
    try:
        ws = Workspace()
        remote(ws, t=0, n_steps=6)
        assert ws.batch_size == torch.Size([4]) and ws.time_length == 6
        for key in single.keys():
            assert torch.equal(ws.get_full(key), single.get_full(key)), key
        # going on: copy the last step, run from t=1 (in place in shared memory)
        single.copy_n_last_steps(1)
        one(single, t=1, n_steps=5)
        ws.copy_n_last_steps(1)
        remote(ws, t=1, n_steps=5)
        for key in single.keys():
            assert torch.equal(ws.get_full(key), single.get_full(key)), key
        assert ws.storage is not None and ws.storage["observation"].is_shared()
    finally:
        remote.close()
    assert _no_children_left()


def test_seed_and_copied_agent() -> None:
    # an Agent instance is copied into each worker; seed() gives worker i seed + i * stride
    remote = NRemoteAgent(_acquisition(2), num_processes=2, seed_stride=2)
    single = Workspace()
    one = _acquisition(4)
    try:
        remote.seed(10)
        one.seed(10)
        ws = Workspace()
        remote(ws, t=0, n_steps=4)
        one(single, t=0, n_steps=4)
        assert torch.equal(ws.get_full("observation"), single.get_full("observation"))
    finally:
        remote.close()


def test_non_blocking_run() -> None:
    remote = NRemoteAgent(lambda i: TemporalAgent(Sleeps()), num_processes=2)
    try:
        ws = Workspace()
        remote(ws, t=0, n_steps=10, blocking=False)
        assert remote.is_running()  # 10 steps of 50 ms
        with pytest.raises(RuntimeError, match="still going on"):
            remote(ws, t=0, n_steps=1)
        while remote.is_running():
            time.sleep(0.05)
        assert ws.batch_size == torch.Size([4]) and ws.time_length == 10
        assert ws.get_full("x")[3].tolist() == [float(t) for t in range(10)]
        remote(Workspace(), t=0, n_steps=3, blocking=False)
        remote.wait(timeout=10)
        assert remote.workspace is not None and remote.workspace.time_length == 3
    finally:
        remote.close()


def test_parameters_are_shared_with_the_workers() -> None:
    class Scale(Agent):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))

        def forward(self, workspace: Workspace, t: int = 0, **kwargs) -> None:
            workspace.set("y", t, self.w.expand(2).clone())

    agent = TemporalAgent(Scale())
    remote = NRemoteAgent(agent, num_processes=2)
    try:
        ws = Workspace()
        remote(ws, t=0, n_steps=1)
        assert ws.get("y", 0).tolist() == [1.0] * 4
        with torch.no_grad():
            agent.agent.w.mul_(3)  # an optimizer step in the caller
        remote(Workspace(), t=0, n_steps=1)
        assert remote.workspace is not None
        assert remote.workspace.get("y", 0).tolist() == [3.0] * 4
    finally:
        remote.close()


def test_workers_that_stop_early_repeat_their_last_step() -> None:
    class Done(Agent):
        def __init__(self, end: int) -> None:
            super().__init__()
            self.end = end

        def forward(self, workspace: Workspace, t: int = 0, **kwargs) -> None:
            workspace.set("t", t, torch.full((1,), float(t)))
            workspace.set("done", t, torch.full((1,), t >= self.end))

    remote = NRemoteAgent(lambda i: TemporalAgent(Done(2 + 3 * i)), num_processes=2)
    try:
        ws = Workspace()
        remote(ws, t=0, stop_variable="done", n_steps=50)
        assert ws.time_length == 6
        assert ws.get_full("t").tolist() == [[0, 1, 2, 2, 2, 2], [0, 1, 2, 3, 4, 5]]
        # a longer run than the shared storage holds: the storage is laid out again
        remote(ws, t=0, n_steps=40)
        assert ws.time_length == 40 and ws.get_full("t")[1, -1] == 39
    finally:
        remote.close()


def test_worker_error_is_raised_with_its_traceback() -> None:
    remote = NRemoteAgent(lambda i: TemporalAgent(Fails(at=3 if i == 1 else 100)), num_processes=2)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"worker 1 raised(.|\n)*ValueError: boom at step 3"):
        remote(Workspace(), t=0, n_steps=5)
    assert time.monotonic() - start < 10
    assert _no_children_left()
    with pytest.raises(RuntimeError, match="closed"):
        remote(Workspace(), t=0, n_steps=5)


def test_worker_error_in_a_non_blocking_run() -> None:
    remote = NRemoteAgent(lambda i: TemporalAgent(Fails(at=1)), num_processes=1)
    remote(Workspace(), t=0, n_steps=5, blocking=False)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="boom at step 1"):
        while remote.is_running():
            time.sleep(0.02)
    assert time.monotonic() - start < 10
    assert _no_children_left()


def test_dead_worker_is_reported() -> None:
    remote = NRemoteAgent(lambda i: TemporalAgent(Dies()), num_processes=2)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="worker [01] .*died: exit code 3"):
        remote(Workspace(), t=0, n_steps=5)
    assert time.monotonic() - start < 10
    assert _no_children_left()


def test_factory_error_and_bad_arguments() -> None:
    def bad(i: int) -> Agent:
        raise KeyError("no such env")

    with pytest.raises(RuntimeError, match="KeyError: 'no such env'"):
        NRemoteAgent(bad, num_processes=2)
    with pytest.raises(RuntimeError, match="factory must return an Agent"):
        NRemoteAgent(lambda i: 3, num_processes=1)  # type: ignore[arg-type,return-value]
    assert _no_children_left()
    with pytest.raises(ValueError, match="num_processes must be >= 1"):
        NRemoteAgent(lambda i: Sleeps(), num_processes=0)
    with pytest.raises(TypeError, match="must be an Agent or a factory"):
        NRemoteAgent(3, num_processes=1)  # type: ignore[arg-type]


def test_foreign_workspace_with_data_is_refused() -> None:
    remote = NRemoteAgent(lambda i: TemporalAgent(Sleeps()), num_processes=1)
    try:
        ws = Workspace(batch_size=[2])
        ws.set("x", 0, torch.zeros(2))
        with pytest.raises(ValueError, match="empty workspace or the one this agent filled"):
            remote(ws, t=0, n_steps=1)
    finally:
        remote.close()
    assert _no_children_left()


def test_close_at_garbage_collection() -> None:
    import gc

    remote = NRemoteAgent(lambda i: TemporalAgent(Sleeps()), num_processes=2)
    remote(Workspace(), t=0, n_steps=1)
    del remote
    gc.collect()
    assert _no_children_left()
