"""What every torchrl worker process shares: the parent watchdog, and a temp dir left nowhere.

The parent's side is here too: the default start method (:func:`default_start_method`), how
workers are stopped (:func:`stop_processes`) and how a dead one is described
(:func:`describe_exit`), the same for :class:`~torchrl.envs.ParallelEnv` and the collectors.

A worker process (of :class:`~torchrl.envs.ParallelEnv` or of a multi-process collector) must
not outlive the process that started it: the parent's pipes may stay open after its death (a
process forked later holds copies of them), so a worker blocked on a pipe, a semaphore or a
long env step would wait forever. A worker calls :func:`watch_parent` first thing, with the pid
of its parent; once it sees its parent gone (:func:`parent_gone`) and has closed its env, it
ends with :func:`exit_worker`. A worker that sends file descriptors to its parent
(shared-memory tensors) needs a multiprocessing temp dir: :func:`worker_temp_dir` and
:func:`use_temp_dir` give it one that its parent removes even if the worker is killed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from multiprocessing.process import BaseProcess
from typing import NoReturn

__all__ = [
    "EXIT_GRACE_S",
    "PARENT_POLL_S",
    "default_start_method",
    "describe_exit",
    "exit_worker",
    "parent_gone",
    "stop_processes",
    "use_temp_dir",
    "watch_parent",
    "worker_temp_dir",
]

# How long a worker whose parent died may take to end by itself (a worker idle on its pipe
# sees the end of file and closes its env) before the watchdog ends it.
EXIT_GRACE_S = 0.5
# How often a watchdog looks at its parent where the OS gives no notification of its death
# (no pidfd: not Linux, or a kernel older than 5.3).
PARENT_POLL_S = 0.2


def default_start_method() -> str:
    """``"fork"`` on Linux while CUDA is not initialized in this process, else ``"spawn"``.

    fork starts a worker in milliseconds and needs nothing picklable; a forked child cannot use
    CUDA once the parent initialized it, and fork is unsafe with macOS system libraries.
    """
    import torch

    fork_ok = sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods()
    return "fork" if fork_ok and not torch.cuda.is_initialized() else "spawn"


def describe_exit(exitcode: int | None) -> str:
    """How a process ended, for an error message: ``"killed by SIGKILL"``, ``"exit code 3"``."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def stop_processes(procs: Sequence[BaseProcess], wait_s: float) -> None:
    """Joins ``procs`` for ``wait_s`` seconds in all, then terminates, then kills what is left.

    The caller has asked the workers to exit first (a close message, a stop flag); this only
    makes sure none outlives the call. Never raises.
    """
    deadline = time.monotonic() + wait_s
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.exitcode is None:
            proc.terminate()
            proc.join(1.0)
        if proc.exitcode is None:
            proc.kill()
            proc.join()


# (parent pid, whether it is this process's parent), set by watch_parent
_watched: tuple[int, bool] | None = None
# set by the watchdog thread once it has seen the parent exit (a pidfd tells at the exit, before
# the dead parent is reaped: until then, a process that is not its child still sees its pid)
_parent_exited = threading.Event()


def worker_temp_dir() -> str:
    """Creates the multiprocessing temp dir of a worker about to start (call in the parent).

    ``multiprocessing`` creates a ``pymp-*`` directory in a process the first time it needs
    one (a worker that sends a file descriptor to its parent, as shared-memory tensors do), and
    removes it when that process exits normally: a worker that is killed leaves it behind.
    Made by the parent, the directory's name is known to the parent, which removes it once the
    worker has ended however it ended; the worker adopts it with :func:`use_temp_dir`.

    Returns:
        The new, empty directory (``torchrl-mp-*`` in the system's temp dir).

    Examples:
        >>> import os, shutil
        >>> path = worker_temp_dir()
        >>> os.path.basename(path).startswith("torchrl-mp-"), os.listdir(path)
        (True, [])
        >>> shutil.rmtree(path)
    """
    return tempfile.mkdtemp(prefix="torchrl-mp-")


def use_temp_dir(path: str) -> None:
    """Makes ``path`` this process's multiprocessing temp dir, removed when it exits normally.

    Call it first thing in a worker, with what :func:`worker_temp_dir` returned in the parent.
    Replaces the directory a fork or spawn would otherwise inherit from the parent (whose
    removal is the parent's business).

    Args:
        path: an existing directory.

    Examples:
        >>> import multiprocessing as mp
        >>> import os
        >>> def work(path):
        ...     use_temp_dir(path)
        >>> path = worker_temp_dir()
        >>> proc = mp.get_context("fork").Process(target=work, args=(path,))
        >>> proc.start(); proc.join(); os.path.exists(path)  # removed at the worker's exit
        False
    """
    from multiprocessing import current_process, util

    # multiprocessing keeps the directory in the process's private config; without it (another
    # Python), the worker keeps multiprocessing's default and the parent's removal does nothing
    config = getattr(current_process(), "_config", None)
    if not isinstance(config, dict):
        return
    config["tempdir"] = path
    # the removal multiprocessing registers for a directory it creates (same exit priority)
    util.Finalize(None, shutil.rmtree, args=(path, True), exitpriority=-100)


def watch_parent(
    parent_pid: int,
    cleanup: Sequence[str] = (),
    grace: float = EXIT_GRACE_S,
    interval: float = PARENT_POLL_S,
) -> None:
    """Ends this process soon after its parent is gone, whatever its main thread is doing.

    A daemon thread waits for the parent's death: on a Linux ``pidfd`` where there is one (it
    wakes up at once and never before), else by looking every ``interval`` seconds. It then
    leaves the process ``grace`` seconds to end by itself (a worker waiting on its pipe sees
    the end of file and closes its env: a simulator's own processes are stopped), removes the
    ``cleanup`` paths and ends it with ``os._exit(1)``. The thread runs while the main
    thread sleeps, blocks on a pipe, queue or semaphore, or runs Python code; not while C code
    holds the GIL without end. (A kernel parent-death signal would also end such a process, but
    at once: no env would be closed and no temp dir removed.) A worker started by a fork server,
    whose parent is the server, watches ``parent_pid`` all the same.

    Args:
        parent_pid: the pid of the process whose death ends this one.
        cleanup: paths to remove before ending the process (its temp dir).
        grace: seconds the process has to end by itself after the parent's death.
        interval: seconds between two looks where there is no ``pidfd``.

    Examples:
        >>> import multiprocessing as mp
        >>> import os
        >>> def work(parent_pid):
        ...     watch_parent(parent_pid)  # from now on, this process ends with its parent
        >>> proc = mp.get_context("fork").Process(target=work, args=(os.getpid(),))
        >>> proc.start(); proc.join(); proc.exitcode
        0
    """
    global _watched
    direct = os.getppid() == parent_pid  # False under a fork server, or if the parent is gone
    _watched = (parent_pid, direct)
    if not _alive(parent_pid, direct):
        _leave(tuple(cleanup), 0.0)
    threading.Thread(
        target=_watch,
        args=(parent_pid, direct, tuple(cleanup), grace, interval),
        name="torchrl-parent-watchdog",
        daemon=True,
    ).start()


def parent_gone() -> bool:
    """Whether the parent this process watches (see :func:`watch_parent`) has died.

    Returns:
        ``False`` while the parent lives, or when this process watches no parent.

    Examples:
        >>> parent_gone()  # this process watches no parent
        False
    """
    if _watched is None:
        return False
    return _parent_exited.is_set() or not _alive(*_watched)


def exit_worker(code: int = 0) -> NoReturn:
    """Ends this worker process now, once its parent is gone and its env is closed.

    Runs what a worker runs when it returns (``multiprocessing``'s exit handlers: sockets and
    temp dirs are removed), flushes the standard streams, and skips the interpreter's teardown,
    which takes seconds with torch loaded (``spawn`` and ``forkserver`` workers tear down;
    forked ones skip it anyway).

    Args:
        code: the exit code.

    Examples:
        >>> import multiprocessing as mp
        >>> proc = mp.get_context("fork").Process(target=exit_worker, args=(3,))
        >>> proc.start(); proc.join(); proc.exitcode
        3
    """
    from multiprocessing import util

    exit_handlers = getattr(util, "_exit_function", None)  # private: absent elsewhere
    if exit_handlers is not None:
        try:
            exit_handlers()
        except Exception:  # noqa: BLE001 - the process ends either way
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(code)


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


def _watch(pid: int, direct: bool, cleanup: tuple[str, ...], grace: float, interval: float) -> None:
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
    _parent_exited.set()
    _leave(cleanup, grace)


def _leave(cleanup: tuple[str, ...], grace: float) -> None:
    if grace > 0:
        time.sleep(grace)
    for path in cleanup:
        shutil.rmtree(path, ignore_errors=True)
    os._exit(1)
