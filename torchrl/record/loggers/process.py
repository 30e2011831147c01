"""A logger service in a process of its own, fed through a bounded queue."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
import traceback
import uuid
from multiprocessing.context import BaseContext
from typing import Any

import torch

from torchrl.record.loggers.common import Logger
from torchrl.record.loggers.service import LOG_METHODS, LoggerClient, LoggerService

__all__ = ["ProcessLogger", "ProcessLoggerClient"]

# How often a waiting owner looks whether the service process is still alive.
_LIVENESS_POLL_S = 0.1


def _serve(
    logger_cls: type[Logger],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    requests: Any,
    replies: Any,
) -> None:
    """The service process: builds the logger, then runs the calls it receives in order."""
    # One thread is plenty for logging, and keeps a small machine's cores for the work.
    torch.set_num_threads(1)
    try:
        logger = logger_cls(*args, **kwargs)
    except BaseException:
        replies.put(("failed", traceback.format_exc()))
        return
    replies.put(("ready", logger.exp_name, logger.log_dir))
    errors: list[str] = []
    while True:
        message = requests.get()
        kind = message[0]
        if kind == "call":
            _, method, call_args, call_kwargs = message
            try:
                getattr(logger, method)(*call_args, **call_kwargs)
            except Exception:
                # Kept for the owner: the next flush or shutdown raises them.
                errors.append(f"{method}{tuple(call_args)!r:.200}:\n{traceback.format_exc()}")
        elif kind == "flush":
            replies.put(("flushed", message[1], errors))
            errors = []
        elif kind == "shutdown":
            try:
                logger.close()
            except Exception:
                errors.append(f"close():\n{traceback.format_exc()}")
            replies.put(("closed", message[1], errors))
            return


class ProcessLoggerClient(LoggerClient):
    """A worker's handle on a :class:`ProcessLogger`: submits ``log_*`` calls to its queue.

    Pass it to a worker process as an argument when the worker starts (the queue inside can
    only travel that way). A full queue blocks the caller up to ``send_timeout`` seconds.

    Args:
        requests: the service's request queue.
        send_timeout: how long a call may wait for room in the queue before it fails.
    """

    def __init__(self, requests: Any, send_timeout: float = 60.0) -> None:
        self._requests = requests
        self.send_timeout = float(send_timeout)

    def submit(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Queues ``method(*args, **kwargs)`` for the service.

        Raises:
            ValueError: ``method`` is not a logging call.
            RuntimeError: the queue stayed full for ``send_timeout`` seconds.
        """
        if method not in LOG_METHODS:
            raise ValueError(f"a logger client can only call {LOG_METHODS}, not {method!r}")
        try:
            self._requests.put(("call", method, args, kwargs), timeout=self.send_timeout)
        except queue.Full:
            raise RuntimeError(
                f"ProcessLogger: the request queue stayed full for {self.send_timeout} s; the "
                f"logger service is stuck or gone"
            ) from None


class ProcessLogger(LoggerService):
    """Runs a logger in a dedicated process; this object (the owner) and its clients feed it.

    The concrete logger is built once, in the child process. Every ``log_*`` call (of the owner
    or of a :meth:`client`) is queued and runs there in order, so a slow backend never blocks
    the training loop beyond the queue's capacity. Only the owner can :meth:`flush` (wait until
    every queued call ran) and :meth:`shutdown` the service. A call that fails in the service
    is reported, with its traceback, by the next :meth:`flush` or :meth:`shutdown`. With the
    default ``"spawn"`` start method, ``logger_cls`` and its arguments must be picklable
    (importable classes, no lambdas).

    Args:
        logger_cls: the :class:`~torchrl.record.loggers.Logger` subclass to run.
        *args: positional arguments of ``logger_cls``.
        mp_context: a multiprocessing context or start-method name (default ``"spawn"``).
        max_queue_size: the most calls waiting in the queue (a full queue blocks the caller).
        startup_timeout: seconds to wait for the logger to be built.
        **kwargs: keyword arguments of ``logger_cls``.

    Raises:
        TypeError: ``logger_cls`` is not a :class:`Logger` subclass.
        RuntimeError: the logger could not be built (its traceback included), or the service
            did not start within ``startup_timeout``.

    Examples:
        >>> import tempfile
        >>> from torchrl.record.loggers import CSVLogger
        >>> logger = ProcessLogger(
        ...     CSVLogger, exp_name="run", log_dir=tempfile.mkdtemp(), mp_context="fork"
        ... )
        >>> worker_logger = logger.client()
        >>> worker_logger.log_scalar("loss", 1.0, step=0)
        >>> logger.shutdown()
    """

    def __init__(
        self,
        logger_cls: type[Logger],
        *args: Any,
        mp_context: str | BaseContext | None = None,
        max_queue_size: int = 1000,
        startup_timeout: float = 60.0,
        **kwargs: Any,
    ) -> None:
        if not (isinstance(logger_cls, type) and issubclass(logger_cls, Logger)):
            raise TypeError(
                f"ProcessLogger: logger_cls must be a Logger subclass, got {logger_cls!r}"
            )
        if logger_cls is ProcessLogger:
            raise TypeError("ProcessLogger: cannot run a ProcessLogger inside a ProcessLogger")
        if int(max_queue_size) < 1:
            raise ValueError(f"ProcessLogger: max_queue_size must be >= 1, got {max_queue_size}")
        ctx: Any = mp_context
        if not isinstance(mp_context, BaseContext):
            ctx = mp.get_context(mp_context or "spawn")
        self.logger_cls = logger_cls
        self._requests = ctx.Queue(maxsize=int(max_queue_size))
        self._replies = ctx.Queue()
        self._client = ProcessLoggerClient(self._requests)
        self._closed = False
        self._process = ctx.Process(
            target=_serve,
            args=(logger_cls, args, kwargs, self._requests, self._replies),
            name=f"torchrl-logger-{logger_cls.__name__}",
            daemon=True,
        )
        self._process.start()
        try:
            reply = self._wait("ready", float(startup_timeout), what="start")
        except BaseException:
            self._kill()
            raise
        super().__init__(reply[1], reply[2])

    def _create_experiment(self) -> Any:
        return self._process

    def _wait(self, kind: str, timeout: float | None, *, what: str, token: str = "") -> tuple:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                reply = self._replies.get(timeout=_LIVENESS_POLL_S)
            except queue.Empty:
                if not self._process.is_alive():
                    raise RuntimeError(
                        f"ProcessLogger({self.logger_cls.__name__}): the service process died "
                        f"(exit code {self._process.exitcode}) before it could {what}"
                    ) from None
                if deadline is not None and time.monotonic() > deadline:
                    raise RuntimeError(
                        f"ProcessLogger({self.logger_cls.__name__}): no answer within {timeout} s "
                        f"while waiting for the service to {what}"
                    ) from None
                continue
            if reply[0] == "failed":
                raise RuntimeError(
                    f"ProcessLogger: building {self.logger_cls.__name__} failed in the service "
                    f"process:\n{reply[1]}"
                )
            if reply[0] == kind and (not token or reply[1] == token):
                return reply

    @staticmethod
    def _raise_errors(errors: list[str]) -> None:
        if errors:
            raise RuntimeError(
                f"ProcessLogger: {len(errors)} logging call(s) failed in the service process:\n"
                + "\n".join(errors)
            )

    def client(self, send_timeout: float = 60.0) -> ProcessLoggerClient:
        """A handle for workers: it can submit ``log_*`` calls only.

        Args:
            send_timeout: how long one call may wait for room in the queue.

        Returns:
            The client (pass it to a worker process as a start argument).
        """
        self._check_open()
        return ProcessLoggerClient(self._requests, send_timeout=send_timeout)

    def flush(self, timeout: float | None = None) -> None:
        """Waits until every call queued before this one ran in the service.

        Args:
            timeout: seconds to wait (``None``: as long as the service lives).

        Raises:
            RuntimeError: calls failed in the service since the last flush (their tracebacks
                in the message), the service died, or ``timeout`` passed.
        """
        self._check_open()
        token = uuid.uuid4().hex
        self._requests.put(("flush", token))
        reply = self._wait("flushed", timeout, what="flush", token=token)
        self._raise_errors(reply[2])

    def shutdown(self, timeout: float | None = 60.0) -> None:
        """Runs the queued calls, closes the logger and ends the service process.

        Calling it again does nothing.

        Args:
            timeout: seconds to wait for the service to finish (then it is killed).

        Raises:
            RuntimeError: calls (or ``close``) failed in the service since the last flush.
        """
        if self._closed:
            return
        self._closed = True
        token = uuid.uuid4().hex
        try:
            self._requests.put(("shutdown", token))
            reply = self._wait("closed", timeout, what="shut down", token=token)
            self._process.join(timeout)
        finally:
            self._kill()
        self._raise_errors(reply[2])

    def _kill(self) -> None:
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        for q in (self._requests, self._replies):
            q.close()
            q.cancel_join_thread()

    @property
    def alive(self) -> bool:
        """Whether the service process runs."""
        return not self._closed and self._process.is_alive()

    def __repr__(self) -> str:
        return (
            f"ProcessLogger({self.logger_cls.__name__}, exp_name={self.exp_name!r}, "
            f"alive={self.alive})"
        )
