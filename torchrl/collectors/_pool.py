"""The parent's side of the multi-process collectors' workers: start, talk, watch, stop.

:class:`WorkerPool` starts one process per worker (each with a multiprocessing temp dir made
here, :func:`torchrl._processes.worker_temp_dir`, and watching this process, see
:func:`torchrl._processes.watch_parent`), sends commands on their pipes and waits for their
messages on the pipes and the process sentinels together: a worker that raises is reported
with its traceback, one that dies as soon as it exits, one that stays silent for longer than
``timeout`` while it owes an answer as hung. After any of these every worker is stopped. The
pool holds no reference to its collector, so that a ``weakref.finalize`` stops the workers of
a collector garbage-collected without ``shutdown()``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import shutil
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, NoReturn

from tensordict import TensorDictBase

from torchrl._processes import describe_exit, stop_processes, worker_temp_dir
from torchrl.collectors._worker import RemoteTraceback, SharedFlag

__all__ = ["WAIT_SLICE_S", "WorkerError", "WorkerPool"]

#: How long a parent waits in one blocking call before it looks at a stop request.
WAIT_SLICE_S = 1.0
# How long shutdown waits for a worker to exit by itself before terminating it.
_JOIN_TIMEOUT_S = 5.0


class WorkerError(RuntimeError):
    """A collector worker process died or could not be reached.

    Examples:
        >>> import os
        >>> from torchrl.collectors import MultiSyncDataCollector
        >>> from torchrl.envs import PendulumEnv
        >>> def dying_policy(td):
        ...     os._exit(3)
        >>> collector = MultiSyncDataCollector(
        ...     [PendulumEnv], dying_policy, frames_per_batch=4, total_frames=8
        ... )
        >>> next(iter(collector))  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        ...
        WorkerError: collector worker 0 (pid 4242) died unexpectedly (exit code 3); all workers were shut down
    """


def _stop_processes(
    procs: list[Any],
    conns: list[Connection],
    flag: SharedFlag,
    timeout: float,
    temp_dirs: list[str],
) -> None:
    flag.set()
    for conn in conns:
        try:
            conn.send(("close", None))
        except (OSError, ValueError):
            pass
    stop_processes(procs, timeout)
    for conn in conns:
        conn.close()
    # A worker that exited normally removed its directory; a killed one could not.
    for path in temp_dirs:
        shutil.rmtree(path, ignore_errors=True)


def _name_worker(err: BaseException, who: str) -> None:
    """Makes an exception raised again from a worker name it (in its message where it can)."""
    args = err.args
    if type(err).__str__ is BaseException.__str__ and (
        not args or (len(args) == 1 and isinstance(args[0], str))
    ):
        err.args = (f"{who}: {args[0]}" if args else who,)
    elif hasattr(err, "add_note"):  # Python >= 3.11: shown under the message
        err.add_note(f"raised in {who}")


class WorkerPool:
    """Worker processes of a multi-process collector, with their pipes and shared buffers.

    Worker ``i`` runs ``target(conn, parent_pid, temp_dir, inherited, payloads[i])``. Messages
    are ``(kind, payload)`` pairs both ways; a worker reports a failure as ``("error",
    (exception or None, traceback text))``.

    Args:
        owner: the collector's class name, for messages.
        method: the multiprocessing start method.
        target: the workers' main function.
        payloads: one picklable argument per worker.
        flag: the shared stop flag the workers read (raised at shutdown).
        stop: an event that ends every wait with a ``RuntimeError`` (the collector's stop
            request).
        timeout: seconds a worker may stay silent while it owes an answer (``None``: forever).
    """

    def __init__(
        self,
        owner: str,
        method: str,
        target: Callable[..., None],
        payloads: Sequence[Any],
        flag: SharedFlag,
        stop: threading.Event,
        timeout: float | None,
    ) -> None:
        self.owner = owner
        self.flag = flag
        self.stop = stop
        self.timeout = timeout
        self.closed = False
        self.procs: list[Any] = []
        self.conns: list[Connection] = []
        self.temp_dirs: list[str] = []
        n = len(payloads)
        #: the shared-memory batches each worker sent, by slot
        self.buffers: list[dict[int, TensorDictBase]] = [{} for _ in range(n)]
        # Stops the workers started so far (and removes their temp dirs) if the pool is
        # garbage-collected without shutdown(), even when a later worker fails to start.
        self._finalizer = weakref.finalize(
            self, _stop_processes, self.procs, self.conns, flag, 1.0, self.temp_dirs
        )
        # When each worker was last heard from or given work: a worker that owes an answer and
        # stays silent for longer than ``timeout`` is taken as hung.
        self._silent_since = [time.monotonic()] * n
        self._pending: list[deque[Any]] = [deque() for _ in range(n)]
        self._rr = 0
        ctx: Any = mp.get_context(method)
        for i, payload in enumerate(payloads):
            parent, child = ctx.Pipe()
            # A forked worker holds copies of the parent-side ends opened so far: it closes
            # them, so that the parent's death reaches it as an end of file.
            inherited = (*self.conns, parent) if method == "fork" else ()
            temp_dir = worker_temp_dir()
            self.temp_dirs.append(temp_dir)
            proc = ctx.Process(
                target=target,
                args=(child, os.getpid(), temp_dir, inherited, payload),
                daemon=True,
                name=f"collector-worker-{i}",
            )
            try:
                proc.start()
            except (pickle.PicklingError, TypeError, AttributeError) as err:
                parent.close()
                child.close()
                self.shutdown(1.0)
                raise TypeError(
                    f"{owner}: could not send the env constructor or the policy to a "
                    f"'{method}' worker ({err}); pass picklable callables, or use "
                    "mp_start_method='fork'"
                ) from err
            child.close()
            self.procs.append(proc)
            self.conns.append(parent)
        self._silent_since = [time.monotonic()] * n

    def __len__(self) -> int:
        return len(self.procs)

    # -------------------------------------------------------------------------------- messaging
    def send(self, i: int, cmd: str, arg: object = None) -> None:
        """Sends a command to worker ``i``; raises :class:`WorkerError` if it is gone."""
        try:
            self.conns[i].send((cmd, arg))
        except (BrokenPipeError, OSError) as err:
            self._raise_dead(i, err)
        self._silent_since[i] = time.monotonic()

    def next_message(
        self, only: Sequence[int] | None = None, queued: bool = True
    ) -> tuple[int, str, Any]:
        """Blocks until a worker (of ``only``) sends a message; raises if one failed or died.

        Messages queued while waiting for a reply come first, unless ``queued`` is false.

        Returns:
            ``(worker index, kind, payload)``.
        """
        workers = list(range(len(self.procs)) if only is None else only)
        # Round robin: a fast worker must not starve the others' finished batches.
        start = self._rr % len(workers)
        workers = workers[start:] + workers[:start]
        if queued:
            for i in workers:
                if self._pending[i]:
                    kind, payload = self._pending[i].popleft()
                    self._rr = i + 1
                    return i, kind, payload
        conns = {self.conns[i]: i for i in workers}
        sentinels = {self.procs[i].sentinel: i for i in workers}
        while True:
            slice_s = WAIT_SLICE_S
            if self.timeout is not None:
                oldest = min(self._silent_since[i] for i in workers)
                slice_s = min(slice_s, max(oldest + self.timeout - time.monotonic(), 0.0) + 0.01)
            ready = set(wait([*conns, *sentinels], timeout=slice_s))
            if self.timeout is not None:
                # Checked even when another worker answered: in async mode a busy sibling
                # must not hide a hung worker.
                now = time.monotonic()
                for conn, i in conns.items():
                    if conn not in ready and now - self._silent_since[i] > self.timeout:
                        self._raise_hung(i, now - self._silent_since[i])
            for conn, i in conns.items():
                if conn not in ready:
                    continue
                try:
                    kind, payload = conn.recv()
                except (EOFError, OSError) as err:
                    self._raise_dead(i, err)
                if kind == "error":
                    self._raise_remote(i, *payload)
                self._rr = i + 1
                self._silent_since[i] = time.monotonic()
                return i, kind, payload
            for obj in ready:
                if obj in sentinels:
                    self._raise_dead(sentinels[obj], None)
            if self.closed or self.stop.is_set():
                raise RuntimeError(f"{self.owner} was shut down or stopped")

    def expect(self, i: int, kind: str) -> Any:
        """The next message of worker ``i`` of this kind (batches that come first are queued)."""
        while True:
            j, got, payload = self.next_message([i], queued=False)
            if got == kind:
                return payload
            self._pending[j].append((got, payload))
            if got != "batch":
                raise RuntimeError(f"{self.who(i)}: expected {kind!r}, got {got!r}")

    def ask(self, i: int, cmd: str, arg: object = None) -> Any:
        """Sends a command to worker ``i`` and returns its reply."""
        self.send(i, cmd, arg)
        return self.expect(i, "reply")

    def who(self, i: int) -> str:
        """How messages name worker ``i``."""
        return f"collector worker {i} (pid {self.procs[i].pid})"

    def batch_view(
        self, i: int, slot: int, steps: int, buffer: TensorDictBase | None
    ) -> TensorDictBase:
        """The ``steps`` first steps of worker ``i``'s batch in ``slot``.

        Args:
            i: the worker.
            slot: its buffer.
            steps: the steps it holds (fewer than the buffer's when interrupted).
            buffer: the buffer itself, sent once by the worker (``None`` afterwards).
        """
        if buffer is not None:
            self.buffers[i][slot] = buffer
        full = self.buffers[i][slot]
        nb = full.batch_dims - 1
        if steps == full.batch_size[nb]:
            return full
        return full[(slice(None),) * nb + (slice(0, steps),)]

    # ------------------------------------------------------------------------------- failures
    def _raise_remote(self, i: int, err: BaseException | None, text: str) -> NoReturn:
        who = self.who(i)
        self.shutdown()
        cause = RemoteTraceback(f"{who}: {text}")
        if err is None:
            raise RuntimeError(f"{who} failed:\n{text}") from cause
        _name_worker(err, who)
        raise err from cause

    def _raise_hung(self, i: int, silent_s: float) -> NoReturn:
        proc = self.procs[i]
        # A hung worker would not answer "close": stop it now rather than after a join timeout.
        proc.terminate()
        self.shutdown()
        raise TimeoutError(
            f"collector worker {i} (pid {proc.pid}) is alive but sent nothing for "
            f"{silent_s:.1f} s (timeout={self.timeout} s): a hung env or policy? All workers "
            "were shut down; raise the collector's timeout for slower batches"
        )

    def _raise_dead(self, i: int, err: BaseException | None) -> NoReturn:
        proc = self.procs[i]
        proc.join(0.5)
        code = proc.exitcode
        self.shutdown()
        how = describe_exit(code)
        raise WorkerError(
            f"collector worker {i} (pid {proc.pid}) died unexpectedly ({how}); all workers were "
            "shut down"
        ) from err

    # ------------------------------------------------------------------------------- shutdown
    def shutdown(self, timeout: float = _JOIN_TIMEOUT_S) -> None:
        """Stops and joins the workers, removes their temp dirs, drops the buffers (idempotent).

        Args:
            timeout: seconds each worker has to exit by itself before it is terminated.
        """
        if self.closed:
            return
        self.closed = True
        self.buffers = [{} for _ in self.buffers]
        self._pending = [deque() for _ in self._pending]
        self._finalizer.detach()
        _stop_processes(self.procs, self.conns, self.flag, timeout, self.temp_dirs)
