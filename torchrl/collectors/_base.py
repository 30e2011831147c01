"""What every collector shares: iteration, background collection, context-manager use."""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
from tensordict import TensorDictBase

from torchrl._types import ReplayBufferLike
from torchrl._utils import logger, warn_once
from torchrl.collectors._policy import WeightsLike


class DataCollectorBase:
    """Base class of collectors: an iterable of TensorDict batches with a common life cycle.

    Subclasses write :meth:`iterator`, :meth:`shutdown`, :meth:`set_seed`,
    :meth:`update_policy_weights_`, :meth:`state_dict` and :meth:`load_state_dict`. This class
    adds ``for batch in collector``, :meth:`next`, background collection into a replay buffer
    (:meth:`start` / :meth:`async_shutdown`) and ``with collector: ...``.

    Examples:
        Every collector (here :class:`~torchrl.collectors.Collector`) has this life cycle:

        >>> from torchrl.collectors import BaseCollector, Collector
        >>> from torchrl.envs import PendulumEnv
        >>> collector = Collector(PendulumEnv(), None, frames_per_batch=10, total_frames=20)
        >>> isinstance(collector, BaseCollector)
        True
        >>> with collector:  # shut down on exit
        ...     sizes = [batch.numel() for batch in collector]
        >>> sizes, collector.stats()
        ([10, 10], {'frames': 20, 'batches': 2})
    """

    frames_per_batch: int
    total_frames: float
    replay_buffer: ReplayBufferLike | None

    def _init_base(self) -> None:
        self._closed = False
        self._next_iter: Iterator[TensorDictBase | None] | None = None
        self._bg_thread: threading.Thread | None = None
        self._bg_stop = threading.Event()
        self._bg_error: BaseException | None = None

    # ------------------------------------------------------------------------------ iteration
    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yields batches until ``total_frames`` frames are collected."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[TensorDictBase | None]:
        return self.iterator()

    def next(self) -> TensorDictBase | None:
        """Returns the next batch (``None`` when writing into a replay buffer).

        Successive calls continue one iteration; once it is over, the next call starts another.
        """
        if self._next_iter is None:
            self._next_iter = self.iterator()
        try:
            return next(self._next_iter)
        except StopIteration:
            self._next_iter = None
            raise

    def stats(self) -> dict[str, int]:
        """A cheap snapshot of the collector's counters, for
        :class:`~torchrl.record.loggers.LoggerMonitor`.

        Returns:
            ``frames`` (frames delivered so far) and ``batches`` (batches delivered so far).
        """
        return {
            "frames": int(getattr(self, "frames", 0)),
            "batches": int(getattr(self, "_iter", 0)),
        }

    # --------------------------------------------------------------------- background collection
    def start(self) -> None:
        """Collects in a background thread, writing every batch into ``replay_buffer``.

        The thread runs until ``total_frames`` are collected or :meth:`async_shutdown` is
        called. An exception in the thread is raised again by :meth:`async_shutdown`.
        """
        if getattr(self, "replay_buffer", None) is None:
            raise RuntimeError(
                f"{type(self).__name__}.start() collects in the background into a replay "
                "buffer: build the collector with replay_buffer=..."
            )
        if self._bg_thread is not None and self._bg_thread.is_alive():
            raise RuntimeError(f"{type(self).__name__}.start(): already collecting")
        self._bg_stop.clear()
        self._bg_error = None
        self._bg_thread = threading.Thread(
            target=self._run_background, name=f"{type(self).__name__}-bg", daemon=True
        )
        self._bg_thread.start()

    def _run_background(self) -> None:
        try:
            for _ in self.iterator():
                if self._bg_stop.is_set():
                    break
        except BaseException as err:  # noqa: BLE001 - handed to the caller of async_shutdown
            if self._bg_stop.is_set():
                return  # interrupted by a shutdown: not a failure
            self._bg_error = err
            logger.error("background collection failed: %r", err)

    def _stop_background(self, timeout: float | None) -> None:
        """Asks the collecting thread to stop and waits for it (unless called from it)."""
        self._bg_stop.set()
        thread = self._bg_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                warn_once(f"{type(self).__name__}: the collecting thread did not stop in time")

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} was shut down; build a new collector")

    def _stop_requested(self) -> bool:
        return self._bg_stop.is_set()

    def async_shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stops background collection (see :meth:`start`), then shuts the collector down.

        Args:
            timeout: seconds to wait for the thread to finish its current batch.
            close_env: also close the envs (and workers). ``False`` keeps the collector usable.

        Raises:
            The exception that ended the background collection, if any.
        """
        self._stop_background(timeout)
        self._bg_thread = None
        if close_env:
            self.shutdown()
        else:
            self._bg_stop.clear()  # the collector stays usable
        error, self._bg_error = self._bg_error, None
        if error is not None:
            raise error

    def is_running(self) -> bool:
        """Whether background collection (see :meth:`start`) is under way."""
        return self._bg_thread is not None and self._bg_thread.is_alive()

    # ------------------------------------------------------------------------------- life cycle
    def shutdown(self) -> None:
        """Releases the envs (and worker processes); calling it again does nothing."""
        raise NotImplementedError

    def __enter__(self) -> DataCollectorBase:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # ----------------------------------------------------------------------------- the abstract
    def update_policy_weights_(self, policy_or_weights: WeightsLike | None = None) -> None:
        """Makes the collecting policy use the current (or given) weights."""
        raise NotImplementedError

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the env(s); returns the next seed of the chain."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The state of the envs, the policy and the frame counters."""
        raise NotImplementedError

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a :meth:`state_dict`."""
        raise NotImplementedError


def check_count(name: str, arg: str, value: object, minimum: int = 0) -> int:
    """Validates a count: any integer (``int``, ``numpy.int64``, ...) of at least ``minimum``.

    Args:
        name: the collector's class name, for messages.
        arg: the argument's name, for messages.
        value: what the caller passed.
        minimum: the smallest value accepted.

    Returns:
        ``value`` as a plain ``int``.

    Raises:
        ValueError: naming the argument and the value, for a bool, a float, any other
            non-integer, or an integer below ``minimum``.

    Examples:
        >>> import numpy as np
        >>> check_count("Collector", "frames_per_batch", np.int64(64), minimum=1)
        64
        >>> check_count("Collector", "init_random_frames", -5)
        Traceback (most recent call last):
        ...
        ValueError: Collector: init_random_frames must be an integer >= 0, got -5
    """
    try:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError
        count = operator.index(value)  # type: ignore[arg-type]  # a TypeError here is the check
    except TypeError:
        raise ValueError(
            f"{name}: {arg} must be an integer >= {minimum}, got {value!r} ({type(value).__name__})"
        ) from None
    if count < minimum:
        raise ValueError(f"{name}: {arg} must be an integer >= {minimum}, got {count}")
    return count


def check_frames(
    name: str, frames_per_batch: object, total_frames: object, unit: int
) -> tuple[int, float]:
    """Validates the frame counts; rounds them up to what a batch can hold.

    Args:
        name: the collector's class name, for messages.
        frames_per_batch: frames requested per batch: a positive integer of any integer type.
        total_frames: frames in all: a positive integer, or ``-1``, ``None`` or ``math.inf``
            for no end.
        unit: the frames one step adds (the number of envs stepped together).

    Returns:
        ``(frames_per_batch, total_frames)``: ``frames_per_batch`` rounded up to a multiple of
        ``unit``, ``total_frames`` rounded up to a multiple of it (``inf`` for no end).
    """
    frames_per_batch = check_count(name, "frames_per_batch", frames_per_batch, minimum=1)
    if frames_per_batch % unit:
        rounded = -(-frames_per_batch // unit) * unit
        warn_once(
            f"{name}: frames_per_batch={frames_per_batch} is not a multiple of the {unit} "
            f"frames of one step; batches hold {rounded} frames instead"
        )
        frames_per_batch = rounded
    if total_frames is None or total_frames == -1 or total_frames == math.inf:
        return frames_per_batch, math.inf
    try:
        total_frames = check_count(name, "total_frames", total_frames, minimum=1)
    except ValueError as err:
        raise ValueError(f"{err} (-1 or None: collect forever)") from None
    if total_frames % frames_per_batch:
        rounded = -(-total_frames // frames_per_batch) * frames_per_batch
        warn_once(
            f"{name}: total_frames={total_frames} is not a multiple of frames_per_batch="
            f"{frames_per_batch}; {rounded} frames will be collected"
        )
        total_frames = rounded
    return frames_per_batch, total_frames
