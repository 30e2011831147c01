"""Evaluation as a task: a :class:`~torchrl.collectors.Evaluator` started on a frame schedule.

The evaluator does the work (its own env and policy copy, rollouts in a background thread or
process, metrics sent to its logger); :class:`EvaluationTask` decides when, from the frames a
:class:`~torchrl.agents.tasks.TaskRunner` has collected, hands it the current weights, and
keeps the results. Training never waits for an evaluation: one that falls due while the
previous one still runs starts at the first step after it ended.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tensordict import TensorDictBase
from torch import nn

from torchrl.collectors import Evaluator
from torchrl.envs.common import EnvBase
from torchrl.record.loggers.common import as_float

__all__ = ["EvaluationTask"]


class EvaluationTask:
    """Runs an :class:`~torchrl.collectors.Evaluator` every ``every`` collected frames.

    Evaluation ``i`` (``i = 1, 2, ...``) is due once ``frames >= i * every``; it copies the
    weights of ``policy`` (in the caller's thread) and runs in the evaluator's background
    thread or process while training goes on. Evaluations that fall due together start once;
    one that is due while the previous one runs starts as soon as that one has ended. Results
    go to the evaluator's logger and ``on_result``, and to :attr:`history` as ``(frames,
    metrics)`` pairs once fetched (:meth:`poll`, :meth:`finish`; a
    :class:`~torchrl.agents.tasks.TaskRunner` calls both).

    Args:
        evaluator: the evaluator (it owns its env, its policy copy and its logger).
        policy: the trained module whose weights each evaluation uses (``None``: the policy
            the evaluator was built with, as it is then).
        every: collected frames between two evaluations (>= 1).

    Examples:
        >>> from torchrl.agents.evaluation import EvaluationTask
        >>> from torchrl.envs import PendulumEnv
        >>> task = EvaluationTask.from_env(PendulumEnv, None, every=100, max_steps=5,
        ...                                num_trajectories=1)
        >>> task.maybe_run(frames=50), task.maybe_run(frames=120)
        (False, True)
        >>> frames, metrics = task.finish()
        >>> frames, sorted(metrics)[:2]
        (120, ['eval/episode_length', 'eval/num_episodes'])
        >>> task.shutdown()
    """

    def __init__(
        self, evaluator: Evaluator, policy: nn.Module | None = None, *, every: int
    ) -> None:
        if not isinstance(evaluator, Evaluator):
            raise TypeError(
                "EvaluationTask: evaluator must be a torchrl.collectors.Evaluator, got "
                f"{type(evaluator).__name__}"
            )
        if policy is not None and not isinstance(policy, nn.Module):
            raise TypeError(
                f"EvaluationTask: policy must be an nn.Module or None, got {type(policy).__name__}"
            )
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"EvaluationTask: every must be an int >= 1, got {every!r}")
        self.evaluator = evaluator
        self.policy = policy
        self.every = every
        #: ``(frames, metrics)`` of every finished evaluation, metrics as floats.
        self.history: list[tuple[int, dict[str, float]]] = []
        #: evaluations started so far.
        self.started = 0
        self._next = every
        self._pending_frames: int | None = None

    @classmethod
    def from_env(
        cls,
        env: EnvBase | Callable[[], EnvBase],
        policy: nn.Module | None,
        *,
        every: int,
        **evaluator_kwargs: Any,
    ) -> EvaluationTask:
        """Builds the :class:`~torchrl.collectors.Evaluator` and the task in one call.

        Args:
            env: the eval env or its constructor (a constructor for ``backend="process"``).
            policy: the trained module (the evaluator evaluates a copy, refreshed each time).
            every: collected frames between two evaluations.
            **evaluator_kwargs: the other :class:`~torchrl.collectors.Evaluator` keywords
                (``num_trajectories``, ``max_steps``, ``backend``, ``logger``, ...).

        Returns:
            The task.
        """
        return cls(Evaluator(env, policy, **evaluator_kwargs), policy, every=every)

    @property
    def pending(self) -> bool:
        """Whether an evaluation started and its result has not been fetched yet."""
        return self._pending_frames is not None

    def maybe_run(self, frames: int) -> bool:
        """Starts an evaluation when one is due at ``frames`` and none runs.

        Args:
            frames: the frames collected so far.

        Returns:
            Whether an evaluation started.
        """
        if frames < self._next or self.pending:
            return False
        if not self.evaluator.trigger_eval(self.policy, step=frames):
            return False  # the evaluator is busy with an evaluation started elsewhere
        self.started += 1
        self._pending_frames = frames
        self._next = (frames // self.every + 1) * self.every
        return True

    def _record(self, result: TensorDictBase | None) -> tuple[int, dict[str, float]] | None:
        frames, self._pending_frames = self._pending_frames, None
        if result is None or frames is None:
            return None
        entry = (frames, {str(k): as_float(v) for k, v in result.items(True, True)})  # type: ignore[arg-type]
        self.history.append(entry)
        return entry

    def poll(self) -> tuple[int, dict[str, float]] | None:
        """The running evaluation's ``(frames, metrics)`` once it is done, else ``None``.

        Raises:
            RuntimeError: the evaluation failed (the evaluator's error is chained).
        """
        if not self.pending:
            return None
        result = self.evaluator.poll()
        if result is None:
            return None
        return self._record(result)

    def finish(self, timeout: float | None = None) -> tuple[int, dict[str, float]] | None:
        """Waits for the running evaluation; returns its ``(frames, metrics)`` (``None``: none).

        Args:
            timeout: seconds to wait at most (``None``: no limit).

        Raises:
            TimeoutError: it did not end in time (it goes on; call again).
            RuntimeError: the evaluation failed (the evaluator's error is chained).
        """
        if not self.pending:
            return None
        return self._record(self.evaluator.wait(timeout))

    def shutdown(self, timeout: float | None = None) -> None:
        """Shuts the evaluator down (waiting up to ``timeout`` for a running evaluation).

        Args:
            timeout: seconds to wait (``None``: until it ends).
        """
        self.evaluator.shutdown(timeout)

    def __repr__(self) -> str:
        return (
            f"EvaluationTask(every={self.every}, started={self.started}, "
            f"finished={len(self.history)}, pending={self.pending})"
        )
