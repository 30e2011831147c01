"""Computation tasks (FLARE style): a loss, its own buffer and its own schedule, fed by collectors.

A :class:`ComputationTask` bundles what one learning problem needs: a loss module (the model is
the networks inside it), an optimizer, a replay buffer of its own and a schedule: every
``every`` collected frames it runs ``updates`` gradient steps on batches of ``batch_size``
items of its buffer. Several tasks may hold the same modules (an auxiliary head on the policy's
torso, a manager and a worker sharing an encoder): an update of one then moves what the others
compute, because the parameters are the same tensors, never copies
(:func:`shared_parameters` lists them).

A :class:`TaskRunner` feeds every task from the same collectors. A collector over a batched env
runs the policy once per step for all its sub-envs (prediction is batched centrally); each
batch goes to the tasks it feeds, each task keeps the part it wants (``preprocess``) in its own
buffer, and every round that the schedules make due runs. With ``overlap=True`` the rounds run
in a background thread while the collectors gather the next batch. Evaluations
(:class:`~torchrl.agents.evaluation.EvaluationTask`) run on their own schedule, in the
background, and report through the logger.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, cast

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._utils import total_loss
from torchrl.collectors import DataCollectorBase, SyncDataCollector
from torchrl.data import (
    LazyTensorStorage,
    RandomSampler,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)
from torchrl.record.loggers.common import Logger, as_float

if TYPE_CHECKING:
    from torchrl.agents.evaluation import EvaluationTask

__all__ = ["ComputationTask", "TaskRunner", "shared_parameters"]

#: Items a task's default buffer keeps when the task is off-policy and no size is given.
DEFAULT_BUFFER_SIZE = 100_000


def _check_int(value: Any, name: str, who: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{who}: {name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{who}: {name} must be >= {minimum}, got {value}")
    return value


class ComputationTask:
    """A loss, an optimizer, a buffer of its own and a schedule: every k frames, m updates of b.

    The task counts the frames it is fed (:meth:`add`). Round ``i`` (``i = 1, 2, ...``) is due
    once ``frames >= start + i * every``; a round is ``updates`` gradient steps, each on
    ``batch_size`` items sampled from the task's buffer (all of it for ``None``). A step sums
    the loss module's ``loss_*`` entries (or ``loss_keys``), back-propagates, clips the
    gradient norm (``max_grad_norm``) and steps the optimizer. Tasks may share modules: each
    optimizes the parameters it is given, and shared ones are the same tensors.

    Args:
        name: the task's name (unique in a runner; the prefix of its logged metrics).
        loss_module: maps a TensorDict of data to a TensorDict of ``loss_*`` terms.
        optimizer: the optimizer of the task's parameters.
        every: collected frames between two rounds (>= 1).
        updates: gradient steps per round (>= 1).
        batch_size: items per gradient step (``None``: the whole buffer).
        buffer: the task's replay buffer (``None``: a ``TensorDictReplayBuffer`` over a
            ``LazyTensorStorage`` of ``buffer_size`` items); never shared between tasks.
        buffer_size: capacity of the default buffer (default: ``every`` when ``on_policy``,
            else 100,000).
        on_policy: empty the buffer after each round and sample without replacement (so that
            ``updates * batch_size / every`` is the number of epochs over the round's data).
        start: frames to collect before the first round can be due (>= 0).
        preprocess: maps each collected batch (under ``torch.no_grad``) to what the buffer
            stores, e.g. advantages or a subset of rows; ``None`` (returned) stores nothing.
        loss_keys: the loss entries to sum (default: every top-level entry starting with
            ``"loss"``; see :func:`~torchrl.objectives.total_loss`).
        max_grad_norm: clip the gradient norm of the optimized parameters to this.
        after_update: called with the task after every gradient step (e.g. a target update).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.agents.tasks import ComputationTask
        >>> net = torch.nn.Linear(3, 1)
        >>> class Regression(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = TensorDictModule(net, ["x"], ["y_hat"])
        ...     def forward(self, td):
        ...         y_hat = self.net(td.copy())["y_hat"]
        ...         return TensorDict(loss_mse=(y_hat - td["y"]).pow(2).mean())
        >>> task = ComputationTask(
        ...     "fit", Regression(), torch.optim.SGD(net.parameters(), lr=0.1),
        ...     every=8, updates=2, batch_size=4,
        ... )
        >>> data = TensorDict(x=torch.randn(8, 3), y=torch.zeros(8, 1), batch_size=[8])
        >>> task.add(data)
        >>> task.rounds_due
        1
        >>> _ = task.run_due()
        >>> task.rounds, task.updates_done
        (1, 2)
    """

    def __init__(
        self,
        name: str,
        loss_module: nn.Module | Callable[[TensorDictBase], TensorDictBase],
        optimizer: torch.optim.Optimizer,
        *,
        every: int,
        updates: int = 1,
        batch_size: int | None = None,
        buffer: TensorDictReplayBuffer | None = None,
        buffer_size: int | None = None,
        on_policy: bool = False,
        start: int = 0,
        preprocess: Callable[[TensorDictBase], TensorDictBase | None] | None = None,
        loss_keys: Sequence[str] | None = None,
        max_grad_norm: float | None = None,
        after_update: Callable[[ComputationTask], None] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"ComputationTask: name must be a non-empty string, got {name!r}")
        who = f"ComputationTask({name!r})"
        if not callable(loss_module):
            raise TypeError(f"{who}: loss_module must be callable, got {type(loss_module)}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"{who}: optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
            )
        self.every = _check_int(every, "every", who, 1)
        self.updates = _check_int(updates, "updates", who, 1)
        self.batch_size = (
            None if batch_size is None else _check_int(batch_size, "batch_size", who, 1)
        )
        self.start = _check_int(start, "start", who, 0)
        if max_grad_norm is not None and not max_grad_norm > 0:
            raise ValueError(f"{who}: max_grad_norm must be > 0, got {max_grad_norm}")
        if buffer is not None and buffer_size is not None:
            raise ValueError(f"{who}: pass buffer or buffer_size, not both")
        if buffer is None:
            size = buffer_size or (self.every if on_policy else DEFAULT_BUFFER_SIZE)
            _check_int(size, "buffer_size", who, 1)
            sampler = SamplerWithoutReplacement() if on_policy else RandomSampler()
            buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(size), sampler=sampler)
        self.name = name
        self.loss_module = loss_module
        self.optimizer = optimizer
        self.buffer = buffer
        self.on_policy = on_policy
        self.preprocess = preprocess
        self.loss_keys = None if loss_keys is None else list(loss_keys)
        self.max_grad_norm = max_grad_norm
        self.after_update = after_update
        self._params = [p for group in optimizer.param_groups for p in group["params"]]
        #: frames fed so far (before ``preprocess`` drops any).
        self.frames = 0
        #: rounds run so far.
        self.rounds = 0
        #: gradient steps run so far.
        self.updates_done = 0
        #: items written into the buffer so far.
        self.items_stored = 0

    # ------------------------------------------------------------------------------ schedule
    @property
    def rounds_due(self) -> int:
        """Rounds the schedule asks for that have not run yet."""
        if self.frames < self.start + self.every:
            return 0
        return (self.frames - self.start) // self.every - self.rounds

    def parameters(self) -> list[nn.Parameter]:
        """The parameters this task's optimizer updates."""
        return list(self._params)

    # ---------------------------------------------------------------------------------- data
    def add(self, batch: TensorDictBase) -> None:
        """Counts a collected batch and stores what ``preprocess`` keeps of it.

        Args:
            batch: collected frames, any batch shape (``batch.numel()`` frames); stored
                flattened to one batch dimension.
        """
        if not isinstance(batch, TensorDictBase):
            raise TypeError(
                f"ComputationTask({self.name!r}).add: expected a TensorDict batch, "
                f"got {type(batch).__name__}"
            )
        self.frames += batch.numel()
        data: TensorDictBase | None = batch
        if self.preprocess is not None:
            with torch.no_grad():
                data = self.preprocess(batch)
            if data is not None and not isinstance(data, TensorDictBase):
                raise TypeError(
                    f"ComputationTask({self.name!r}): preprocess must return a TensorDict or "
                    f"None, got {type(data).__name__}"
                )
        if data is None or data.numel() == 0:
            return
        flat = data.reshape(-1)
        self.buffer.extend(flat)
        self.items_stored += flat.numel()

    # ------------------------------------------------------------------------------ training
    def _sample(self) -> TensorDictBase:
        stored = len(self.buffer)
        if stored == 0:
            raise RuntimeError(
                f"ComputationTask({self.name!r}): a round is due after {self.frames} frames but "
                "its buffer is empty (did preprocess return None for every batch?)"
            )
        if self.batch_size is None:
            return cast(TensorDictBase, self.buffer[:stored])
        if self.on_policy and self.batch_size > stored:
            raise RuntimeError(
                f"ComputationTask({self.name!r}): batch_size={self.batch_size} but the buffer "
                f"holds {stored} items for this round; lower batch_size or raise every"
            )
        return cast(TensorDictBase, self.buffer.sample(self.batch_size))

    def _loss(self, losses: TensorDictBase) -> torch.Tensor:
        owner = f"ComputationTask({self.name!r})"
        if not isinstance(losses, TensorDictBase):
            raise TypeError(
                f"{owner}: the loss module must return a TensorDict of loss_* entries, got "
                f"{type(losses).__name__}"
            )
        return total_loss(losses, self.loss_keys, owner=owner, option="loss_keys")

    def update(self) -> dict[str, float]:
        """One gradient step on a batch from the buffer.

        Returns:
            The loss entries of the step as floats (``"<key>"``), plus ``"loss"`` (their sum).
        """
        data = self._sample()
        losses = self.loss_module(data)
        loss = self._loss(losses)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self._params, self.max_grad_norm)
        self.optimizer.step()
        self.updates_done += 1
        if self.after_update is not None:
            self.after_update(self)
        out = {
            str(k): float(v.detach())
            for k, v in losses.items()
            if isinstance(v, torch.Tensor) and v.numel() == 1
        }
        out["loss"] = float(loss.detach())
        return out

    def run_round(self) -> dict[str, float]:
        """One round: ``updates`` gradient steps, then (``on_policy``) an empty buffer.

        Returns:
            The mean of each loss entry over the round's steps.
        """
        sums: dict[str, float] = {}
        for _ in range(self.updates):
            for key, value in self.update().items():
                sums[key] = sums.get(key, 0.0) + value
        self.rounds += 1
        if self.on_policy:
            self.buffer.empty()
        return {key: value / self.updates for key, value in sums.items()}

    def run_due(self) -> list[dict[str, float]]:
        """Runs every round that is due.

        Returns:
            One metrics dict per round run (see :meth:`run_round`).

        Raises:
            RuntimeError: an on-policy task has several rounds due at once (its data would
                serve the first one only).
        """
        due = self.rounds_due
        if self.on_policy and due > 1:
            raise RuntimeError(
                f"ComputationTask({self.name!r}): {due} on-policy rounds are due at once "
                f"(every={self.every} frames, {self.frames} frames fed, {self.rounds} rounds "
                "run); the first round empties the buffer. Make every a multiple of the "
                "frames a collector batch brings"
            )
        return [self.run_round() for _ in range(due)]

    # ----------------------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        """Counters, optimizer, loss module and buffer state."""
        state: dict[str, Any] = {
            "frames": self.frames,
            "rounds": self.rounds,
            "updates_done": self.updates_done,
            "items_stored": self.items_stored,
            "optimizer": self.optimizer.state_dict(),
            "buffer": self.buffer.state_dict(),
        }
        if isinstance(self.loss_module, nn.Module):
            state["loss_module"] = self.loss_module.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores what :meth:`state_dict` saved.

        Args:
            state: a dict from :meth:`state_dict`.
        """
        missing = {"frames", "rounds", "updates_done", "optimizer", "buffer"} - set(state)
        if missing:
            raise KeyError(
                f"ComputationTask({self.name!r}).load_state_dict: missing {sorted(missing)}"
            )
        self.frames = int(state["frames"])
        self.rounds = int(state["rounds"])
        self.updates_done = int(state["updates_done"])
        self.items_stored = int(state.get("items_stored", 0))
        self.optimizer.load_state_dict(state["optimizer"])
        self.buffer.load_state_dict(state["buffer"])
        if "loss_module" in state and isinstance(self.loss_module, nn.Module):
            self.loss_module.load_state_dict(state["loss_module"])

    def __repr__(self) -> str:
        batch = "all" if self.batch_size is None else self.batch_size
        return (
            f"ComputationTask({self.name!r}, every={self.every}, updates={self.updates}, "
            f"batch_size={batch}, frames={self.frames}, rounds={self.rounds})"
        )


def shared_parameters(*tasks: ComputationTask) -> list[nn.Parameter]:
    """The parameters that every given task optimizes (the same tensors, not copies).

    Args:
        *tasks: two or more tasks.

    Returns:
        The shared parameters, in the first task's order.

    Examples:
        >>> import torch
        >>> from torchrl.agents.tasks import ComputationTask, shared_parameters
        >>> torso, head_a, head_b = (torch.nn.Linear(2, 2) for _ in range(3))
        >>> def make(name, head):
        ...     params = [*torso.parameters(), *head.parameters()]
        ...     return ComputationTask(name, head, torch.optim.SGD(params, lr=0.1), every=1)
        >>> len(shared_parameters(make("a", head_a), make("b", head_b)))
        2
    """
    if len(tasks) < 2:
        raise ValueError(f"shared_parameters: pass two tasks or more, got {len(tasks)}")
    common = {id(p) for p in tasks[0].parameters()}
    for task in tasks[1:]:
        common &= {id(p) for p in task.parameters()}
    return [p for p in tasks[0].parameters() if id(p) in common]


class TaskRunner:
    """Feeds computation tasks from collectors and runs each task's schedule exactly.

    Each :meth:`step` takes one batch from every collector (a collector over a batched env runs
    the policy once per step for all its sub-envs), gives it to the tasks it feeds, runs the
    rounds that are due, pushes the new weights to the collectors, then starts the evaluations
    that are due. After a step, a task fed ``n`` frames has run exactly
    ``max(0, (n - start) // every)`` rounds of ``updates`` gradient steps. With ``overlap``,
    the rounds of a step run in a background thread while the collectors gather the next
    batch (the data then lags the weights by one batch; :meth:`wait_training` waits for
    them); the collectors must run copies of the trained modules, refreshed from ``policy``
    after each round.

    Args:
        collectors: one collector, a sequence of them (named ``"0"``, ``"1"``, ...) or a
            mapping from names to collectors.
        tasks: the computation tasks (unique names, one buffer each).
        feeds: task name -> the collector names that feed it (default: every collector).
        evaluations: evaluation tasks started every so many collected frames.
        logger: receives every round's mean losses as ``"<task>/<entry>"`` at the frame count.
        overlap: train in a background thread while collecting the next batch.
        policy: the trained module whose weights every collector receives after a round
            (default: ``collector.update_policy_weights_()`` without argument).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.agents.tasks import ComputationTask, TaskRunner
        >>> from torchrl.collectors import SyncDataCollector
        >>> from torchrl.envs import PendulumEnv
        >>> collector = SyncDataCollector(
        ...     PendulumEnv(batch_size=[4], seed=0), None, frames_per_batch=16, total_frames=64
        ... )
        >>> net = torch.nn.Linear(3, 1)
        >>> def fit_reward(td):
        ...     pred = net(td["observation"])
        ...     return TensorDict(loss_reward=(pred - td["next", "reward"]).pow(2).mean())
        >>> task = ComputationTask(
        ...     "reward", fit_reward, torch.optim.Adam(net.parameters()),
        ...     every=32, updates=3, batch_size=8,
        ... )
        >>> runner = TaskRunner(collector, [task])
        >>> _ = runner.run()
        >>> runner.frames, task.rounds, task.updates_done
        (64, 2, 6)
        >>> runner.shutdown()
    """

    def __init__(
        self,
        collectors: DataCollectorBase
        | Sequence[DataCollectorBase]
        | Mapping[str, DataCollectorBase],
        tasks: Sequence[ComputationTask],
        *,
        feeds: Mapping[str, Sequence[str]] | None = None,
        evaluations: Sequence[EvaluationTask] = (),
        logger: Logger | None = None,
        overlap: bool = False,
        policy: nn.Module | None = None,
    ) -> None:
        self.collectors = self._named_collectors(collectors)
        tasks = list(tasks)
        if not tasks and not evaluations:
            raise ValueError("TaskRunner: pass at least one ComputationTask or EvaluationTask")
        names: set[str] = set()
        buffers: dict[int, str] = {}
        for task in tasks:
            if not isinstance(task, ComputationTask):
                raise TypeError(
                    f"TaskRunner: tasks must be ComputationTask instances, got {type(task).__name__}"
                )
            if task.name in names:
                raise ValueError(f"TaskRunner: two tasks are named {task.name!r}")
            names.add(task.name)
            other = buffers.setdefault(id(task.buffer), task.name)
            if other != task.name:
                raise ValueError(
                    f"TaskRunner: tasks {other!r} and {task.name!r} share one buffer; every task "
                    "needs its own (they may share modules, not data stores)"
                )
        self.tasks = tasks
        self.feeds = self._check_feeds(feeds, names)
        self.evaluations = list(evaluations)
        for evaluation in self.evaluations:
            if not callable(getattr(evaluation, "maybe_run", None)):
                raise TypeError(
                    "TaskRunner: evaluations must be EvaluationTask instances, got "
                    f"{type(evaluation).__name__}"
                )
        self.logger = logger
        self.overlap = bool(overlap)
        self.policy = policy
        if policy is not None and not isinstance(policy, nn.Module):
            raise TypeError(f"TaskRunner: policy must be an nn.Module, got {type(policy).__name__}")
        if self.overlap:
            self._check_overlap()
        #: frames collected so far, all collectors together.
        self.frames = 0
        #: ``(frames, task name, metrics)`` of every round run.
        self.history: list[tuple[int, str, dict[str, float]]] = []
        self._executor: ThreadPoolExecutor | None = None
        self._training: Future[list[tuple[str, dict[str, float]]]] | None = None
        self._iters: dict[str, Any] = {}
        self._exhausted = False
        self._closed = False
        #: seconds spent running rounds (in the background thread too, with ``overlap``).
        self.train_wall = 0.0

    @staticmethod
    def _named_collectors(collectors: Any) -> dict[str, DataCollectorBase]:
        if isinstance(collectors, Mapping):
            named = {str(k): v for k, v in collectors.items()}
        elif isinstance(collectors, DataCollectorBase):
            named = {"0": collectors}
        elif isinstance(collectors, Sequence) and not isinstance(collectors, str):
            named = {str(i): c for i, c in enumerate(collectors)}
        else:
            raise TypeError(
                "TaskRunner: collectors must be a collector, a sequence or a mapping of them, "
                f"got {type(collectors).__name__}"
            )
        if not named:
            raise ValueError("TaskRunner: no collector given")
        for name, collector in named.items():
            if not isinstance(collector, DataCollectorBase):
                raise TypeError(
                    f"TaskRunner: collector {name!r} is a {type(collector).__name__}, not a "
                    "torchrl collector"
                )
        return named

    def _check_feeds(
        self, feeds: Mapping[str, Sequence[str]] | None, names: set[str]
    ) -> dict[str, list[str]]:
        out = {name: list(self.collectors) for name in names}
        if feeds is None:
            return out
        for task_name, sources in feeds.items():
            if task_name not in names:
                raise KeyError(
                    f"TaskRunner: feeds names task {task_name!r}; the tasks are {sorted(names)}"
                )
            sources = [sources] if isinstance(sources, str) else list(sources)
            for source in sources:
                if source not in self.collectors:
                    raise KeyError(
                        f"TaskRunner: feeds[{task_name!r}] names collector {source!r}; the "
                        f"collectors are {sorted(self.collectors)}"
                    )
            out[task_name] = sources
        return out

    def _check_overlap(self) -> None:
        trained = {p.data_ptr() for task in self.tasks for p in task.parameters()}
        for name, collector in self.collectors.items():
            policy = getattr(collector, "policy", None)
            if not isinstance(collector, SyncDataCollector) or not isinstance(policy, nn.Module):
                continue
            if any(p.data_ptr() in trained for p in policy.parameters()):
                raise ValueError(
                    f"TaskRunner(overlap=True): collector {name!r} runs the parameters the tasks "
                    "train, which change while it collects; give it a copy "
                    "(copy.deepcopy(policy)) and pass the trained module as policy=..."
                )

    # ---------------------------------------------------------------------------------- steps
    def _collect(self) -> dict[str, TensorDictBase] | None:
        batches: dict[str, TensorDictBase] = {}
        for name, collector in self.collectors.items():
            it = self._iters.get(name)
            if it is None:
                it = self._iters[name] = iter(collector)
            try:
                batch = next(it)
            except StopIteration:
                return None
            if batch is None:
                raise RuntimeError(
                    f"TaskRunner: collector {name!r} yields None (it writes into its own "
                    "replay_buffer); build it without replay_buffer=, the tasks own the buffers"
                )
            batches[name] = batch
        return batches

    def _train(self) -> list[tuple[str, dict[str, float]]]:
        start = time.perf_counter()
        out = [(task.name, metrics) for task in self.tasks for metrics in task.run_due()]
        self.train_wall += time.perf_counter() - start
        return out

    def wait_training(self) -> None:
        """Waits for the rounds running in the background (``overlap``).

        The rounds are then recorded, the weights pushed and the tasks' counts exact; an
        exception raised in a round is raised again here.
        """
        future, self._training = self._training, None
        if future is None:
            return
        self._record(future.result())

    def _record(self, rounds: list[tuple[str, dict[str, float]]]) -> None:
        for name, metrics in rounds:
            self.history.append((self.frames, name, metrics))
            if self.logger is not None:
                for key, value in metrics.items():
                    self.logger.log_scalar(f"{name}/{key}", as_float(value), step=self.frames)
        if rounds:
            for collector in self.collectors.values():
                if self.policy is None:
                    collector.update_policy_weights_()
                else:
                    collector.update_policy_weights_(self.policy)

    def step(self) -> dict[str, TensorDictBase] | None:
        """Collects one batch per collector, feeds the tasks, runs the due rounds.

        Returns:
            The batches by collector name, or ``None`` once a collector has no more (the
            batches the other collectors gave in that step are then dropped).
        """
        if self._closed:
            raise RuntimeError("TaskRunner.step: the runner is shut down")
        if self._exhausted:
            return None
        batches = self._collect()  # (the previous rounds may still be running: overlap)
        self.wait_training()
        if batches is None:
            self._exhausted = True
            return None
        for batch in batches.values():
            self.frames += batch.numel()
        for task in self.tasks:
            for source in self.feeds[task.name]:
                task.add(batches[source])
        if self.overlap:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="torchrl-task-runner")
            self._training = self._executor.submit(self._train)
        else:
            self._record(self._train())
        for evaluation in self.evaluations:
            evaluation.poll()
            evaluation.maybe_run(self.frames)
        return batches

    def run(
        self,
        max_frames: int | None = None,
        callback: Callable[[TaskRunner, dict[str, TensorDictBase]], bool | None] | None = None,
        wait_evaluations: bool = True,
    ) -> list[tuple[int, str, dict[str, float]]]:
        """Steps until a collector ends, ``max_frames`` frames or ``callback`` returns True.

        Args:
            max_frames: stop once this many frames are collected (``None``: no limit).
            callback: called after each step with the runner and the batches; ``True`` stops.
            wait_evaluations: wait for the running evaluations before returning.

        Returns:
            :attr:`history`, the rounds run.
        """
        if max_frames is not None:
            _check_int(max_frames, "max_frames", "TaskRunner.run", 1)
        limit = math.inf if max_frames is None else max_frames
        while self.frames < limit:
            batches = self.step()
            if batches is None:
                break
            if callback is not None and callback(self, batches):
                break
        self.wait_training()
        if wait_evaluations:
            for evaluation in self.evaluations:
                evaluation.finish()
        return self.history

    # ------------------------------------------------------------------------------ life cycle
    def shutdown(self, close_collectors: bool = True) -> None:
        """Waits for running rounds, shuts the evaluations and (by default) the collectors down.

        Args:
            close_collectors: shut the collectors down too.
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self._training is not None:
                self._training.exception()
                self._training = None
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
            for evaluation in self.evaluations:
                evaluation.shutdown()
            if close_collectors:
                for collector in self.collectors.values():
                    collector.shutdown()

    def __enter__(self) -> TaskRunner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        tasks = ", ".join(task.name for task in self.tasks)
        return (
            f"TaskRunner(collectors={list(self.collectors)}, tasks=[{tasks}], "
            f"frames={self.frames}, overlap={self.overlap})"
        )
