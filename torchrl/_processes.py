"""What every torchrl worker process shares: the parent watchdog and the parent's temp dir.

A worker process (of :class:`~torchrl.envs.ParallelEnv` or of a multi-process collector) must
not outlive the process that started it: the parent's pipes may stay open after its death (a
sibling forked later holds copies of them), so a worker blocked on a pipe, a semaphore or a
long env step would wait forever. The parent calls :func:`worker_parent` right before starting
its workers and passes the result to each; a worker calls :func:`watch_parent` first thing.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["PARENT_POLL_S", "WorkerParent", "share_temp_dir", "watch_parent", "worker_parent"]

# How often a watchdog looks at its parent where the OS gives no notification of its death
# (no pidfd: not Linux, or a kernel older than 5.3).
PARENT_POLL_S = 0.2
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


class WorkerParent(NamedTuple):
    """The process a worker watches, as :func:`worker_parent` describes it (picklable).

    Attributes:
        pid: the parent's process id.
        from_main_thread: whether the parent starts its workers from its main thread (a
            kernel parent-death signal follows the thread that forked, see :func:`watch_parent`).
    """

    pid: int
    from_main_thread: bool


def worker_parent() -> WorkerParent:
    """Describes this process for the workers it is about to start.

    Call it in the thread that starts the workers, and pass the result to each of them.

    Returns:
        A :class:`WorkerParent` for :func:`watch_parent`.

    Examples:
        >>> import os
        >>> worker_parent().pid == os.getpid()
        True
    """
    return WorkerParent(os.getpid(), threading.current_thread() is threading.main_thread())


def share_temp_dir() -> str | None:
    """Makes the workers started after this call use this process's multiprocessing temp dir.

    ``multiprocessing`` creates a ``pymp-*`` directory in a process the first time it needs
    one (a worker that sends a file descriptor to its parent, as shared-memory tensors do), and
    removes it when that process exits normally: a worker that is killed leaves its directory
    behind. Created here, in the parent, the directory is inherited by the workers started
    afterwards (fork and spawn alike), holds their sockets, and is removed when the parent
    exits; if the parent is killed, its workers remove it (see ``cleanup`` in
    :func:`watch_parent`).

    Returns:
        The directory, or ``None`` if this Python has no ``multiprocessing.util.get_temp_dir``
        (workers then make their own).

    Examples:
        >>> import os
        >>> path = share_temp_dir()
        >>> path is None or os.path.basename(path).startswith("pymp-")
        True
    """
    try:
        from multiprocessing.util import get_temp_dir
    except ImportError:  # pragma: no cover - every CPython since 3.4 has it
        return None
    return get_temp_dir()


def watch_parent(
    parent: WorkerParent, cleanup: Sequence[str] = (), interval: float = PARENT_POLL_S
) -> None:
    """Ends this process (``os._exit(1)``) as soon as its parent is gone.

    A daemon thread waits for the parent's death: on a Linux ``pidfd`` where there is one (it
    wakes up at once and never before), else by looking every ``interval`` seconds. The thread
    runs while the main thread sleeps, blocks on a pipe, queue or semaphore, or runs Python
    code. When there is nothing to clean up, Linux is also asked to kill this process when its
    parent dies (``PR_SET_PDEATHSIG``), which works even while the main thread holds the GIL in
    C code; only if the parent started this process from its main thread, since the signal
    follows the thread that forked. A worker started by a fork server (whose parent is the
    server) is watched by the thread only.

    Args:
        parent: what :func:`worker_parent` returned in the parent.
        cleanup: paths to remove once the parent is gone (the parent's temp dir).
        interval: seconds between two looks where there is no ``pidfd``.

    Examples:
        >>> import multiprocessing as mp
        >>> def work(parent):
        ...     watch_parent(parent)  # from now on, this process ends with its parent
        >>> proc = mp.get_context("fork").Process(target=work, args=(worker_parent(),))
        >>> proc.start(); proc.join(); proc.exitcode
        0
    """
    pid = parent.pid
    direct = os.getppid() == pid  # False under forkserver, or if the parent is already gone
    if not _alive(pid, direct):
        _leave(cleanup)
    if direct and parent.from_main_thread and not cleanup and sys.platform.startswith("linux"):
        _set_parent_death_signal(signal.SIGKILL)
        if not _alive(pid, direct):  # the parent died before the request took effect
            _leave(cleanup)
    threading.Thread(
        target=_watch,
        args=(pid, direct, tuple(cleanup), interval),
        name="torchrl-parent-watchdog",
        daemon=True,
    ).start()


def _alive(pid: int, direct: bool) -> bool:
    if direct:
        # an orphan is adopted by another process at once (at its parent's exit, not reaping)
        return os.getppid() == pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _set_parent_death_signal(sig: int) -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - no prctl: the thread still watches
        pass


def _watch(pid: int, direct: bool, cleanup: tuple[str, ...], interval: float) -> None:
    fd = None
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            fd = pidfd_open(pid)
        except OSError:
            fd = None
    # Checked after opening: the pidfd then surely refers to the parent, not to a new process
    # that took its pid.
    if fd is not None and _alive(pid, direct):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not poller.poll():  # readable once the parent has exited
            pass
    else:
        while _alive(pid, direct):
            time.sleep(interval)
    _leave(cleanup)


def _leave(cleanup: Sequence[str]) -> None:
    for path in cleanup:
        shutil.rmtree(path, ignore_errors=True)
    os._exit(1)
