"""Pull-based monitoring: poll ``stats()`` snapshots of running objects and log them on a schedule.

Any object can be watched if it has a cheap ``stats()`` method returning a flat mapping of
scalars (counters, queue sizes, ...): torchrl's collectors report ``frames`` and ``batches``, and
replay buffers ``size``, ``capacity``, ``write_count``, ``sample_calls`` and ``samples_returned``.
:class:`LoggerMonitor` asks for the snapshots from its own thread (or when
:meth:`LoggerMonitor.step` is called), so no logging work ever runs on the hot paths of the
watched objects, and a slow logging backend only delays the next poll.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import threading
import time
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal

import torch

from torchrl.record.loggers.common import Logger

__all__ = ["Every", "LoggerMonitor"]

OnError = Literal["warn", "raise", "ignore"]
_ON_ERROR = ("warn", "raise", "ignore")


@dataclasses.dataclass(frozen=True)
class Every:
    """When :class:`LoggerMonitor` logs a watched object's snapshot.

    Build one with a factory: :meth:`seconds` (wall-clock time since the last log) or
    :meth:`counter` (a cumulative counter of the snapshot crossed a multiple of ``interval``).
    Counter schedules are checked when the monitor polls: a counter that crossed several
    multiples between two polls gives one log of the latest snapshot. A counter that went down
    (a reset, a restored checkpoint) starts the schedule again from its new value, without a log.

    Args:
        kind: ``"seconds"`` or ``"counter"``.
        interval: seconds between logs, or counter units between logs (> 0).
        key: the snapshot entry a ``"counter"`` schedule follows (``None`` for ``"seconds"``).

    Examples:
        >>> Every.seconds(5.0)
        Every(kind='seconds', interval=5.0, key=None)
        >>> Every.counter("frames", 1000).key
        'frames'
    """

    kind: Literal["seconds", "counter"]
    interval: float
    key: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("seconds", "counter"):
            raise ValueError(f"Every: kind must be 'seconds' or 'counter', got {self.kind!r}")
        if not isinstance(self.interval, (int, float)) or not self.interval > 0:
            raise ValueError(f"Every: interval must be a number > 0, got {self.interval!r}")
        if self.kind == "counter" and (not isinstance(self.key, str) or not self.key):
            raise ValueError(f"Every.counter needs the name of a counter, got key={self.key!r}")
        if self.kind == "seconds" and self.key is not None:
            raise ValueError(f"Every.seconds takes no key (got {self.key!r})")

    @classmethod
    def seconds(cls, interval: float) -> Every:
        """A schedule logging at most once every ``interval`` seconds.

        Args:
            interval: seconds between two logs (> 0).

        Returns:
            The schedule.
        """
        return cls("seconds", float(interval))

    @classmethod
    def counter(cls, key: str, interval: float) -> Every:
        """A schedule logging each time the snapshot's ``key`` crosses a multiple of ``interval``.

        Args:
            key: the cumulative counter (an entry of the ``stats()`` mapping).
            interval: counter units between two logs (> 0).

        Returns:
            The schedule.
        """
        return cls("counter", interval, key)


@dataclasses.dataclass
class _Target:
    obj: Any
    schedule: Every
    log_on_start: bool
    metrics: frozenset[str] | None
    rates: tuple[str, ...]
    primed: bool = False
    mark: float = 0.0  # the time of the last log, or the counter's last crossed multiple
    last_counter: float = 0.0
    last_logged: dict[str, float] = dataclasses.field(default_factory=dict)
    last_time: float = 0.0
    logs: int = 0


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach().reshape(()).item())
    return None


class LoggerMonitor:
    """Polls ``stats()`` snapshots of watched objects and logs them as ``"<name>/<metric>"``.

    Each watched object (anything with a ``stats()`` method returning a flat mapping of
    scalars) has its own :class:`Every` schedule. When a snapshot is due, its numeric entries
    are logged with ``logger.log_scalar``, plus ``"<counter>_per_second"`` rates for the
    counters named in ``rates`` (the counter's increase since the previous log over the time
    between the two). The monitor owns neither the logger nor the watched objects: stopping it
    leaves both running, and closing the logger stays the caller's job.

    Args:
        logger: where the metrics go (any :class:`~torchrl.record.loggers.Logger`, including a
            :class:`~torchrl.record.loggers.ProcessLogger` or its client).
        poll_interval: seconds between two polls of the background thread (> 0).
        background: poll from a daemon thread (started here) rather than only when
            :meth:`step` is called.
        on_error: what a failing ``stats()`` or logging call does: ``"warn"`` (and go on),
            ``"raise"`` (from :meth:`step`; the background thread stops and :meth:`stop`
            raises it), or ``"ignore"``.
        clock: the time source of schedules and rates (``time.monotonic``; tests pass a fake).

    Examples:
        >>> class Counter:
        ...     def __init__(self):
        ...         self.frames = 0
        ...     def stats(self):
        ...         return {"frames": self.frames}
        >>> class Printer(Logger):
        ...     def _create_experiment(self):
        ...         return []
        ...     def log_scalar(self, name, value, step=None):
        ...         self.experiment.append((name, value, step))
        ...     def log_hparams(self, cfg): ...
        ...     def log_video(self, name, video, step=None, **kwargs): ...
        ...     def log_histogram(self, name, data, step=None, **kwargs): ...
        >>> counter, logger = Counter(), Printer("demo", None)
        >>> monitor = LoggerMonitor(logger, background=False)
        >>> monitor.watch(counter, name="collector", schedule=Every.counter("frames", 100))
        'collector'
        >>> monitor.step()
        {'collector': {'frames': 0.0}}
        >>> counter.frames = 150
        >>> monitor.step()
        {'collector': {'frames': 150.0}}
        >>> logger.experiment[-1]
        ('collector/frames', 150.0, 150)
    """

    def __init__(
        self,
        logger: Logger,
        *,
        poll_interval: float = 1.0,
        background: bool = True,
        on_error: OnError = "warn",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not callable(getattr(logger, "log_scalar", None)):
            raise TypeError(
                f"LoggerMonitor: logger must have a log_scalar method, got {type(logger).__name__}"
            )
        if not isinstance(poll_interval, (int, float)) or not poll_interval > 0:
            raise ValueError(f"LoggerMonitor: poll_interval must be > 0, got {poll_interval!r}")
        if on_error not in _ON_ERROR:
            raise ValueError(
                f"LoggerMonitor: on_error must be one of {_ON_ERROR}, got {on_error!r}"
            )
        self.logger = logger
        self.poll_interval = float(poll_interval)
        self.on_error = on_error
        self._clock = clock
        self._targets: dict[str, _Target] = {}
        self._lock = threading.RLock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        if background:
            self.start()

    def watch(
        self,
        target: Any,
        *,
        name: str | None = None,
        schedule: Every | None = None,
        log_on_start: bool = True,
        metrics: Collection[str] | None = None,
        rates: Collection[str] = (),
    ) -> str:
        """Starts monitoring ``target``.

        Args:
            target: an object with a ``stats()`` method returning a mapping of scalars.
            name: the prefix of its metrics (default: its class name in lower case, with a
                ``_<n>`` suffix when taken).
            schedule: when to log (default: ``Every.seconds(poll_interval)``).
            log_on_start: log the first snapshot; otherwise it only starts the schedule.
            metrics: the snapshot entries to log (default: every numeric entry).
            rates: cumulative counters whose ``"<counter>_per_second"`` rate is logged too.

        Returns:
            The name the metrics are logged under.

        Raises:
            TypeError: ``target`` has no callable ``stats``.
            ValueError: ``name`` is already watched.
        """
        if not callable(getattr(target, "stats", None)):
            raise TypeError(
                f"LoggerMonitor.watch: a {type(target).__name__} has no stats() method to poll"
            )
        if schedule is None:
            schedule = Every.seconds(self.poll_interval)
        if not isinstance(schedule, Every):
            raise TypeError(f"LoggerMonitor.watch: schedule must be an Every, got {schedule!r}")
        with self._lock:
            if name is None:
                base = type(target).__name__.lower()
                name, n = base, 1
                while name in self._targets:
                    name, n = f"{base}_{n}", n + 1
            elif not isinstance(name, str) or not name:
                raise ValueError(f"LoggerMonitor.watch: name must be a non-empty str, got {name!r}")
            elif name in self._targets:
                raise ValueError(f"LoggerMonitor.watch: {name!r} is already watched")
            self._targets[name] = _Target(
                target,
                schedule,
                bool(log_on_start),
                None if metrics is None else frozenset(metrics),
                tuple(rates),
            )
        return name

    def unwatch(self, name: str) -> None:
        """Stops monitoring the object watched as ``name``.

        Args:
            name: the name :meth:`watch` returned.

        Raises:
            KeyError: nothing is watched under ``name``.
        """
        with self._lock:
            if name not in self._targets:
                raise KeyError(
                    f"LoggerMonitor: nothing watched as {name!r} (watched: {self.names})"
                )
            del self._targets[name]

    @property
    def names(self) -> list[str]:
        """The names of the watched objects."""
        with self._lock:
            return list(self._targets)

    def step(self) -> dict[str, dict[str, float]]:
        """Polls every watched object once and logs the snapshots that are due.

        Returns:
            For each object logged by this poll, the metrics logged (rates included).

        Raises:
            Exception: with ``on_error="raise"``, the first failure of ``stats()`` or of the
                logger (the other objects of this poll are still polled).
        """
        logged: dict[str, dict[str, float]] = {}
        first_error: BaseException | None = None
        with self._lock:
            for name, target in list(self._targets.items()):
                try:
                    out = self._poll(name, target)
                except Exception as err:
                    if self.on_error == "raise":
                        first_error = first_error or err
                    elif self.on_error == "warn":
                        warnings.warn(
                            f"LoggerMonitor: polling or logging {name!r} failed: "
                            f"{type(err).__name__}: {err}",
                            stacklevel=2,
                        )
                    continue
                if out is not None:
                    logged[name] = out
        if first_error is not None:
            raise first_error
        return logged

    def _poll(self, name: str, target: _Target) -> dict[str, float] | None:
        snapshot = target.obj.stats()
        if not isinstance(snapshot, Mapping):
            raise TypeError(
                f"{type(target.obj).__name__}.stats() must return a mapping, got "
                f"{type(snapshot).__name__}"
            )
        now = self._clock()
        values = {str(k): v for k, v in snapshot.items()}
        numeric = {k: x for k, v in values.items() if (x := _as_number(v)) is not None}
        schedule = target.schedule
        counter = None
        if schedule.kind == "counter":
            assert schedule.key is not None
            if schedule.key not in numeric:
                raise KeyError(
                    f"the schedule follows {schedule.key!r}, which {type(target.obj).__name__}"
                    f".stats() does not report (it has {sorted(values)})"
                )
            counter = numeric[schedule.key]
        due = self._due(target, now, counter)
        if not due:
            return None
        metrics = {
            k: v for k, v in numeric.items() if target.metrics is None or k in target.metrics
        }
        if target.logs and now > target.last_time:
            for key in target.rates:
                if key in numeric and key in target.last_logged:
                    delta = numeric[key] - target.last_logged[key]
                    if delta >= 0:
                        metrics[f"{key}_per_second"] = delta / (now - target.last_time)
        step = int(counter) if counter is not None else target.logs
        for metric, value in metrics.items():
            self.logger.log_scalar(f"{name}/{metric}", value, step=step)
        target.last_logged = numeric
        target.last_time = now
        target.logs += 1
        return metrics

    @staticmethod
    def _due(target: _Target, now: float, counter: float | None) -> bool:
        interval = target.schedule.interval
        if counter is None:  # a wall-clock schedule
            if not target.primed:
                target.primed, target.mark = True, now
                return target.log_on_start
            if now - target.mark >= interval:
                target.mark = now
                return True
            return False
        multiple = math.floor(counter / interval)
        if not target.primed or counter < target.last_counter:
            # First poll, or the counter went back: (re)start from here.
            first = not target.primed
            target.primed, target.mark, target.last_counter = True, multiple, counter
            if not first:
                target.last_logged = {}
            return first and target.log_on_start
        target.last_counter = counter
        if multiple > target.mark:
            target.mark = multiple
            return True
        return False

    def start(self) -> None:
        """Starts the background polling thread (a no-op when it runs)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop_event.clear()
        self._thread = threading.Thread(
            target=self._run, name="torchrl-logger-monitor", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop_event.wait(self.poll_interval):
            try:
                self.step()
            except BaseException as err:  # only with on_error="raise": keep it for stop()
                self._error = err
                return

    def stop(self, final_step: bool = False) -> None:
        """Stops the background thread; the logger and the watched objects keep running.

        Args:
            final_step: poll once more after the thread stopped (logs what is due).

        Raises:
            Exception: the failure that stopped the background thread (``on_error="raise"``).
        """
        self._stop_event.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise RuntimeError("LoggerMonitor: the background poll failed") from error
        if final_step:
            self.step()

    @property
    def running(self) -> bool:
        """Whether the background thread is polling."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> LoggerMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (
            f"LoggerMonitor(watched={self.names}, poll_interval={self.poll_interval}, "
            f"running={self.running})"
        )
