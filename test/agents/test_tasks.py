"""Computation tasks, the task runner and evaluation tasks (torchrl/agents/tasks.py, evaluation.py).

Every test runs on the tiny ``CountingEnv`` of ``test/_envs.py`` (observation = step count,
action = reward) with a loss module that records what each gradient step saw, so that the
schedules (rounds per collected frames, steps per round, items per step) are checked exactly.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest
import torch
from _envs import CountingEnv
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.agents.evaluation import EvaluationTask
from torchrl.agents.tasks import ComputationTask, TaskRunner, shared_parameters
from torchrl.collectors import Evaluator, SyncDataCollector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.record.loggers import Logger


class RecordingLoss(nn.Module):
    """A squared-error loss on ``net(observation)`` that records each call's batch size."""

    def __init__(self, net: nn.Module, runner_ref: list[Any] | None = None) -> None:
        super().__init__()
        self.net = net
        self.calls: list[tuple[int, int]] = []  # (runner frames at the call, batch items)
        self.runner_ref = runner_ref
        self.seen: list[TensorDictBase] = []

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        frames = self.runner_ref[0].frames if self.runner_ref else -1
        self.calls.append((frames, td.numel()))
        self.seen.append(td.detach().clone())
        pred = self.net(td["observation"])
        return TensorDict(loss_fit=(pred - td["next", "reward"]).pow(2).mean())


class ListLogger(Logger):
    def _create_experiment(self) -> list:
        return []

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        self.experiment.append((name, float(value), step))

    def log_hparams(self, cfg: object) -> None:
        pass

    def log_video(self, name: str, video: Any, step: int | None = None, **kwargs: Any) -> None:
        pass

    def log_histogram(self, name: str, data: Any, step: int | None = None, **kwargs: Any) -> None:
        pass


def make_collector(total: int = 96, fpb: int = 8, n_env: int = 4, policy: Any = None):
    env = CountingEnv(batch_size=[n_env], max_steps=torch.arange(3, 3 + n_env))
    return SyncDataCollector(env, policy, frames_per_batch=fpb, total_frames=total)


def make_task(name: str, ref: list[Any] | None = None, **kwargs: Any) -> ComputationTask:
    loss = RecordingLoss(nn.Linear(1, 1), ref)
    return ComputationTask(name, loss, torch.optim.SGD(loss.parameters(), lr=1e-3), **kwargs)


# ------------------------------------------------------------------------------------ schedules
@pytest.mark.parametrize("overlap", [False, True])
def test_schedules_run_exactly_as_configured(overlap: bool) -> None:
    ref: list[Any] = []
    tasks = [
        make_task("slow", ref, every=16, updates=3, batch_size=5),  # every 2nd batch
        make_task("fast", ref, every=4, updates=1),  # 2 rounds per batch, whole buffer
        make_task("late", ref, every=24, updates=2, batch_size=3, start=8),
        make_task("onpol", ref, every=8, updates=4, batch_size=4, on_policy=True),
    ]
    runner = TaskRunner(make_collector(), tasks, overlap=overlap)
    ref.append(runner)
    while runner.step() is not None:
        if overlap:  # the rounds of this step may still run; wait for them to count
            runner.wait_training()
        n = runner.frames
        expected = {"slow": n // 16, "fast": n // 4, "late": max(0, (n - 8) // 24), "onpol": n // 8}
        for task in tasks:
            assert task.frames == n
            assert task.rounds == expected[task.name], (task.name, n)
            assert task.updates_done == task.rounds * task.updates
            assert task.rounds_due == 0
    runner.shutdown()
    assert runner.frames == 96
    slow, fast, late, onpol = (t.loss_module for t in tasks)
    assert [b for _, b in slow.calls] == [5] * 18
    if not overlap:  # the frames at which each round ran: exactly the schedule's points
        assert [f for f, _ in slow.calls] == [f for f in range(16, 97, 16) for _ in range(3)]
        assert [f for f, _ in late.calls] == [f for f in (32, 56, 80) for _ in range(2)]
    # batch_size=None: the whole buffer, which grows by 8 frames per batch
    assert [b for _, b in fast.calls] == [n for n in range(8, 97, 8) for _ in range(2)]
    # on-policy: the buffer holds the round's 8 frames; 4 steps of 4 = 2 epochs, then empty
    assert len(onpol.calls) == 12 * 4 and len(tasks[3].buffer) == 0
    for r in range(12):
        obs = torch.cat([td["observation"] for td in onpol.seen[4 * r : 4 * r + 4]])
        assert obs.numel() == 16
        first, second = obs[:8].sort(0).values, obs[8:].sort(0).values
        assert torch.equal(first, second)  # each epoch sees the round's items once


def test_runner_history_and_logger() -> None:
    logger = ListLogger("tasks", None)
    task = make_task("fit", every=16, updates=2, batch_size=4)
    runner = TaskRunner(make_collector(total=64), [task], logger=logger)
    history = runner.run()
    runner.shutdown()
    assert [(f, name) for f, name, _ in history] == [
        (16, "fit"),
        (32, "fit"),
        (48, "fit"),
        (64, "fit"),
    ]
    assert {"loss", "loss_fit"} <= set(history[0][2])
    logged = [(name, step) for name, _, step in logger.experiment]
    assert ("fit/loss_fit", 16) in logged and ("fit/loss", 64) in logged


def test_run_stops_at_max_frames_and_callback() -> None:
    task = make_task("fit", every=8)
    runner = TaskRunner(make_collector(total=-1), [task])
    runner.run(max_frames=40)
    assert runner.frames == 40 and task.rounds == 5
    runner.run(callback=lambda r, batches: r.frames >= 56)
    assert runner.frames == 56 and task.rounds == 7
    runner.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        runner.step()


# -------------------------------------------------------------------------- shared parameters
def test_shared_parameters_are_the_same_tensors() -> None:
    torso = nn.Linear(1, 8)
    head_a, head_b = nn.Linear(8, 1), nn.Linear(8, 1)
    view_a, view_b = nn.Sequential(torso, head_a), nn.Sequential(torso, head_b)
    task_a = ComputationTask(
        "a", RecordingLoss(view_a), torch.optim.SGD(view_a.parameters(), lr=0.5), every=8
    )
    task_b = ComputationTask(
        "b", RecordingLoss(view_b), torch.optim.SGD(view_b.parameters(), lr=0.5), every=8
    )
    shared = shared_parameters(task_a, task_b)
    assert [id(p) for p in shared] == [id(torso.weight), id(torso.bias)]
    probe = torch.ones(3, 1)
    before_b = view_b(probe).detach().clone()
    head_b_before = [p.detach().clone() for p in head_b.parameters()]
    runner = TaskRunner(make_collector(total=8), [task_a, task_b], feeds={"b": []})
    runner.step()
    runner.shutdown()
    assert task_a.updates_done == 1 and task_b.updates_done == 0 and task_b.frames == 0
    # a's update moved the torso, so b's output moved although b never trained
    assert not torch.allclose(view_b(probe), before_b)
    assert all(torch.equal(p, q) for p, q in zip(head_b.parameters(), head_b_before))


def test_shared_parameters_needs_two_tasks() -> None:
    with pytest.raises(ValueError, match="two tasks"):
        shared_parameters(make_task("a", every=1))


# --------------------------------------------------------------------------------- buffers
def test_buffers_are_per_task() -> None:
    def ones_only(batch: TensorDictBase) -> TensorDictBase:
        return batch[batch["action"].squeeze(-1) == 1]

    everything = make_task("all", every=8, buffer_size=1000)
    ones = make_task("ones", every=8, buffer_size=1000, preprocess=ones_only)
    runner = TaskRunner(make_collector(total=48), [everything, ones])
    runner.run()
    runner.shutdown()
    assert everything.buffer is not ones.buffer
    assert len(everything.buffer) == 48 == everything.items_stored
    assert len(ones.buffer) == ones.items_stored < 48
    assert bool((ones.buffer[:]["action"] == 1).all())
    assert everything.frames == ones.frames == 48  # frames count before preprocess


def test_one_buffer_for_two_tasks_is_refused() -> None:
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    a = make_task("a", every=8, buffer=buffer)
    b = make_task("b", every=8, buffer=buffer)
    with pytest.raises(ValueError, match="share one buffer"):
        TaskRunner(make_collector(), [a, b])


def test_feeds_choose_collectors() -> None:
    a = make_task("a", every=8)
    b = make_task("b", every=8)
    runner = TaskRunner(
        {"left": make_collector(total=32), "right": make_collector(total=64, fpb=16)},
        [a, b],
        feeds={"b": "right"},
    )
    runner.run()
    runner.shutdown()
    assert runner.frames == 32 + 64
    assert a.frames == 96 and a.rounds == 12
    assert b.frames == 64 and b.rounds == 8


# ------------------------------------------------------------------ central batched prediction
class CountingPolicy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(1, 2)
        self.batches: list[int] = []

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        self.batches.append(obs.shape[0])
        return self.lin(obs).argmax(-1, keepdim=True)


def test_policy_runs_once_per_step_for_all_envs() -> None:
    net = CountingPolicy()
    policy = TensorDictModule(net, ["observation"], ["action"])
    task = make_task("fit", every=8)
    runner = TaskRunner(make_collector(total=64, n_env=4, policy=policy), [task])
    net.batches.clear()
    runner.run()
    runner.shutdown()
    assert net.batches == [4] * (64 // 4)  # one call per step, every env in it


def test_overlap_pushes_weights_to_the_collectors_copy() -> None:
    trained = TensorDictModule(CountingPolicy(), ["observation"], ["action"])
    loss = RecordingLoss(trained.module.lin)  # trains the policy's own layer (2 outputs)

    def fit(td: TensorDictBase) -> TensorDictBase:
        out = loss.net(td["observation"])
        return TensorDict(loss_fit=(out - 1).pow(2).mean())

    task = ComputationTask("fit", fit, torch.optim.SGD(trained.parameters(), lr=0.1), every=8)
    with pytest.raises(ValueError, match="give it a copy"):
        TaskRunner(make_collector(policy=trained), [task], overlap=True)
    runner = TaskRunner(
        make_collector(total=32, policy=copy.deepcopy(trained)),
        [task],
        overlap=True,
        policy=trained,
    )
    runner.run()
    assert task.rounds == 4
    # after the last round the collector's copy received the trained weights
    copied = runner.collectors["0"].policy.module.lin
    assert copied.weight is not trained.module.lin.weight
    assert torch.equal(copied.weight, trained.module.lin.weight)
    runner.shutdown()


def test_overlap_trains_while_collecting() -> None:
    """The rounds of a step run in another thread while the next batch is collected."""
    started, release = threading.Event(), threading.Event()
    threads: list[str] = []

    def blocking_loss(td: TensorDictBase) -> TensorDictBase:
        threads.append(threading.current_thread().name)
        started.set()
        assert release.wait(10), "the collector never ran while training waited"
        return TensorDict(loss_x=lin(td["observation"]).pow(2).mean())

    lin = nn.Linear(1, 1)
    task = ComputationTask("x", blocking_loss, torch.optim.SGD(lin.parameters(), lr=0.1), every=8)

    class Releasing(nn.Module):
        calls = 0

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            # the second batch: collected while the first batch's round waits on `release`
            if self.calls > 2 and started.wait(10):
                release.set()
            return torch.zeros(obs.shape[0], 1, dtype=torch.long)

    policy = TensorDictModule(Releasing(), ["observation"], ["action"])
    runner = TaskRunner(make_collector(total=16, policy=policy), [task], overlap=True)
    runner.run()
    runner.shutdown()
    assert task.rounds == 2 and release.is_set()
    assert all(name.startswith("torchrl-task-runner") for name in threads)


# ----------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"every": 0}, ValueError, "every must be >= 1, got 0"),
        ({"every": 2.5}, TypeError, "every must be an int"),
        ({"every": 8, "updates": 0}, ValueError, "updates must be >= 1"),
        ({"every": 8, "batch_size": 0}, ValueError, "batch_size must be >= 1"),
        ({"every": 8, "start": -1}, ValueError, "start must be >= 0"),
        ({"every": 8, "max_grad_norm": 0.0}, ValueError, "max_grad_norm must be > 0"),
        (
            {
                "every": 8,
                "buffer_size": 3,
                "buffer": TensorDictReplayBuffer(storage=LazyTensorStorage(3)),
            },
            ValueError,
            "buffer or buffer_size",
        ),
    ],
)
def test_task_argument_errors(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        make_task("t", **kwargs)


def test_task_errors_name_the_task() -> None:
    lin = nn.Linear(1, 1)
    with pytest.raises(TypeError, match="'t'.*optimizer must be a torch.optim.Optimizer"):
        ComputationTask("t", lin, lin.parameters(), every=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        ComputationTask("", lin, torch.optim.SGD(lin.parameters(), lr=0.1), every=1)
    batch = TensorDict(
        observation=torch.ones(4, 1), next={"reward": torch.ones(4, 1)}, batch_size=[4]
    )

    no_loss = ComputationTask(
        "noloss", lambda td: TensorDict(value=lin(td["observation"]).sum()),
        torch.optim.SGD(lin.parameters(), lr=0.1), every=4,
    )  # fmt: skip
    no_loss.add(batch)
    with pytest.raises(KeyError, match="'noloss'.*no entry starting with 'loss'.*'value'"):
        no_loss.run_due()
    wrong_key = make_task("wrongkey", every=4, loss_keys=["loss_other"])
    wrong_key.add(batch)
    with pytest.raises(
        KeyError, match=r"loss_keys \['loss_other'\] not in the loss output.*loss_fit"
    ):
        wrong_key.run_due()
    empty = make_task("empty", every=4, preprocess=lambda td: None)
    empty.add(batch)
    with pytest.raises(RuntimeError, match="'empty'.*buffer is empty"):
        empty.run_due()
    too_big = make_task("big", every=4, batch_size=16, on_policy=True)
    too_big.add(batch)
    with pytest.raises(RuntimeError, match="batch_size=16 but the buffer holds 4"):
        too_big.run_due()
    two_rounds = make_task("onpol", every=2, on_policy=True, buffer_size=4)
    two_rounds.add(batch)
    with pytest.raises(RuntimeError, match="'onpol'.*2 on-policy rounds are due at once"):
        two_rounds.run_due()
    bad_pre = make_task("pre", every=4, preprocess=lambda td: td["observation"])
    with pytest.raises(TypeError, match="preprocess must return a TensorDict or None"):
        bad_pre.add(batch)
    with pytest.raises(TypeError, match="expected a TensorDict batch"):
        bad_pre.add(torch.ones(3))  # type: ignore[arg-type]


def test_runner_errors() -> None:
    a, a2 = make_task("a", every=8), make_task("a", every=8)
    with pytest.raises(ValueError, match="two tasks are named 'a'"):
        TaskRunner(make_collector(), [a, a2])
    with pytest.raises(KeyError, match="feeds names task 'b'"):
        TaskRunner(make_collector(), [a], feeds={"b": ["0"]})
    with pytest.raises(KeyError, match="feeds\\['a'\\] names collector 'x'"):
        TaskRunner(make_collector(), [a], feeds={"a": ["x"]})
    with pytest.raises(TypeError, match="collector 'c' is a str"):
        TaskRunner({"c": "nope"}, [a])  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="must be ComputationTask"):
        TaskRunner(make_collector(), [object()])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="at least one"):
        TaskRunner(make_collector(), [])
    with pytest.raises(TypeError, match="evaluations must be EvaluationTask"):
        TaskRunner(make_collector(), [a], evaluations=[object()])  # type: ignore[list-item]
    env = CountingEnv(batch_size=[4])
    buffered = SyncDataCollector(
        env, None, frames_per_batch=8, total_frames=16,
        replay_buffer=TensorDictReplayBuffer(storage=LazyTensorStorage(16)),
    )  # fmt: skip
    runner = TaskRunner(buffered, [a])
    with pytest.raises(RuntimeError, match="yields None.*replay_buffer"):
        runner.step()
    runner.shutdown()


def test_error_in_background_round_is_raised() -> None:
    def broken(td: TensorDictBase) -> TensorDictBase:
        raise ValueError("boom in the loss")

    lin = nn.Linear(1, 1)
    task = ComputationTask("broken", broken, torch.optim.SGD(lin.parameters(), lr=0.1), every=8)
    runner = TaskRunner(make_collector(total=32), [task], overlap=True)
    with pytest.raises(ValueError, match="boom in the loss"):
        runner.run()
    runner.shutdown()


def test_state_dict_round_trip() -> None:
    task = make_task("fit", every=8, updates=2, batch_size=4)
    runner = TaskRunner(make_collector(total=24), [task])
    runner.run()
    runner.shutdown()
    clone = make_task("fit", every=8, updates=2, batch_size=4)
    clone.load_state_dict(task.state_dict())
    assert (clone.frames, clone.rounds, clone.updates_done) == (24, 3, 6)
    assert len(clone.buffer) == 24
    assert torch.equal(clone.loss_module.net.weight, task.loss_module.net.weight)
    with pytest.raises(KeyError, match="missing \\['buffer'"):
        clone.load_state_dict({"frames": 1, "rounds": 0, "updates_done": 0, "optimizer": {}})


# ------------------------------------------------------------------------------- evaluation
def _eval_env() -> CountingEnv:
    return CountingEnv(batch_size=[2], max_steps=4)


def test_evaluation_task_schedule_and_logging() -> None:
    logger = ListLogger("eval", None)
    policy = TensorDictModule(CountingPolicy(), ["observation"], ["action"])
    evaluation = EvaluationTask.from_env(
        _eval_env, policy, every=32, num_trajectories=2, max_steps=10, logger=logger
    )
    task = make_task("fit", every=8)
    runner = TaskRunner(make_collector(total=96, policy=policy), [task], evaluations=[evaluation])
    runner.run()
    runner.shutdown()
    assert 1 <= evaluation.started <= 3 and not evaluation.pending
    assert len(evaluation.history) == evaluation.started
    frames = [f for f, _ in evaluation.history]
    assert frames[0] == 32 and all(f % 8 == 0 and f >= 32 for f in frames)
    for _, metrics in evaluation.history:
        assert metrics["eval/num_episodes"] == 2.0 and metrics["eval/episode_length"] == 4.0
    assert ("eval/reward", 32) in [(n, s) for n, _, s in logger.experiment]


def test_evaluation_uses_current_weights_and_runs_in_background() -> None:
    gate = threading.Event()

    class Gated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bias = nn.Parameter(torch.zeros(()))

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            assert gate.wait(10)
            return (self.bias > 0).long().expand(obs.shape[0], 1).clone()

    policy = TensorDictModule(Gated(), ["observation"], ["action"])
    evaluation = EvaluationTask(
        Evaluator(_eval_env, policy, num_trajectories=2, max_steps=10), policy, every=10
    )
    with torch.no_grad():
        policy.module.bias.fill_(1.0)  # reward 1 per step once the copy has these weights
    assert evaluation.maybe_run(10)
    assert not evaluation.maybe_run(20)  # one runs: the next starts after it
    assert evaluation.poll() is None and evaluation.pending  # blocked on the gate
    gate.set()
    frames, metrics = evaluation.finish(timeout=30)
    assert frames == 10 and metrics["eval/reward"] == 4.0
    assert evaluation.maybe_run(20)  # the delayed one
    evaluation.finish(timeout=30)
    assert [f for f, _ in evaluation.history] == [10, 20]
    assert evaluation.finish() is None
    evaluation.shutdown()


def test_evaluation_errors() -> None:
    with pytest.raises(TypeError, match="torchrl.collectors.Evaluator"):
        EvaluationTask(object(), every=1)  # type: ignore[arg-type]
    evaluator = Evaluator(_eval_env, None, num_trajectories=1, max_steps=3)
    with pytest.raises(ValueError, match="every must be an int >= 1, got 0"):
        EvaluationTask(evaluator, every=0)
    with pytest.raises(TypeError, match="policy must be an nn.Module"):
        EvaluationTask(evaluator, lambda td: td, every=1)  # type: ignore[arg-type]
    evaluator.shutdown()

    def broken(td: TensorDictBase) -> TensorDictBase:
        raise ValueError("policy exploded")

    failing = EvaluationTask(Evaluator(_eval_env, broken, max_steps=3), every=1)
    assert failing.maybe_run(1)
    with pytest.raises(RuntimeError, match="evaluation failed") as info:
        failing.finish(timeout=30)
    assert "policy exploded" in repr(info.value.__cause__)
    failing.shutdown()


def test_runner_with_an_inference_server_collector() -> None:
    """Envs step in 2 worker processes, the policy runs here on batched requests; the rounds
    run on the learner's schedule and each round's weights reach the server."""
    from functools import partial

    from torchrl.collectors import AsyncBatchedCollector
    from torchrl.envs import PendulumEnv

    net = nn.Sequential(nn.Linear(3, 1), nn.Tanh())
    policy = TensorDictModule(net, ["observation"], ["action"])
    collector = AsyncBatchedCollector(
        [partial(PendulumEnv, seed=0)] * 4, policy, frames_per_batch=64, total_frames=256,
        num_workers=2,
    )  # fmt: skip

    def fit(td: TensorDictBase) -> TensorDictBase:
        return TensorDict(loss_a=(net(td["observation"]) - 1).pow(2).mean())

    task = ComputationTask(
        "t", fit, torch.optim.SGD(net.parameters(), lr=0.01), every=64, updates=2, batch_size=16
    )
    versions: list[int] = []
    runner = TaskRunner(collector, [task])
    try:
        runner.run(callback=lambda r, b: versions.append(int(b["0"]["policy_version"].max())))
    finally:
        runner.shutdown()
    assert runner.frames == 256 and task.rounds == 4 and task.updates_done == 8
    assert versions[0] == 0 and versions[-1] >= 1  # later batches come from pushed weights
