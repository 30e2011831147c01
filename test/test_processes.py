"""Worker processes never outlive their parent; temp dirs are removed (torchrl._processes).

Must show: SIGKILL of the parent of every multi-process component (ParallelEnv and both
multi-process collectors, idle or with workers blocked in a step) leaves no process after 2 s.
The parents run in processes forked from the test (``_orphan_child.run``), and once in a fresh
interpreter (``python _orphan_child.py``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from _collector_helpers import pid_alive as _alive
from _orphan_child import DISTRIBUTED_KINDS, KINDS, run, run_distributed

from torchrl._processes import use_temp_dir, watch_parent, worker_temp_dir

BOUND_S = 2.0  # the bound: workers are gone within 2 s of their parent's death
HERE = os.path.dirname(os.path.abspath(__file__))


def _gone_after(pids: list[int], start: float, limit: float = 10.0) -> float:
    """Seconds from ``start`` until none of ``pids`` runs (polls; gives up after ``limit``)."""
    while any(_alive(p) for p in pids) and time.monotonic() - start < limit:
        time.sleep(0.01)
    return time.monotonic() - start


def _kill_and_time(proc: mp.process.BaseProcess, pids: list[int]) -> float:
    assert pids and all(_alive(p) for p in pids)
    os.kill(proc.pid, signal.SIGKILL)  # type: ignore[arg-type]
    start = time.monotonic()
    proc.join()
    elapsed = _gone_after(pids, start)
    for pid in pids:  # never leave a process behind, even when the test fails
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    return elapsed


def _wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# ------------------------------------------------------------------------ every component
@pytest.mark.parametrize("blocked", [False, True], ids=["idle", "blocked-in-step"])
@pytest.mark.parametrize("kind", KINDS)
def test_workers_exit_when_parent_is_killed(kind, blocked, tmp_path):
    """Idle workers wait on a pipe; blocked ones sleep inside a never-ending env step."""
    ctx = mp.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    marker_dir = str(tmp_path) if blocked else None
    parent = ctx.Process(target=run, args=(kind, marker_dir, sender))
    parent.start()
    assert receiver.poll(30), "the parent did not report its workers"
    pids = receiver.recv()
    if blocked:  # every worker is inside its step
        _wait_for(lambda: sorted(os.listdir(tmp_path)) == sorted(map(str, pids)))
    elapsed = _kill_and_time(parent, pids)
    assert elapsed < BOUND_S, f"{kind} workers still alive {elapsed:.2f} s after their parent"


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
@pytest.mark.parametrize("kind", KINDS)
def test_workers_started_otherwise_exit_too(kind, start_method):
    """Workers in fresh interpreters: their parent's end of file must not wait for the
    interpreter's teardown (seconds with torch loaded); a fork server is not their parent."""
    ctx = mp.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    parent = ctx.Process(target=run, args=(kind, None, sender, None, start_method))
    parent.start()
    assert receiver.poll(120), "the parent did not report its workers"
    pids = receiver.recv()
    elapsed = _kill_and_time(parent, pids)
    assert elapsed < BOUND_S, f"{kind} workers still alive {elapsed:.2f} s after their parent"


def test_fresh_interpreter_parent(tmp_path):
    """As the issue saw it: a script's process is killed; and a killed worker's temp dir."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "_orphan_child.py")],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=HERE,
    )
    try:
        lines: dict[str, str] = {}
        while "PIDS" not in lines:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, f"the script ended early (exit code {proc.wait()})"
            key, _, rest = line.strip().partition(" ")
            lines[key] = rest
        # a killed collector worker is named, and leaves no pymp-* dir once its parent exits
        assert re.search(r"collector worker 1 \(pid \d+\) died", lines["ERROR"])
        assert lines["LEFT"] == "[]"
        pids = [int(p) for p in lines["PIDS"].split()]
        assert len(pids) == 2 * len(KINDS)
        os.kill(proc.pid, signal.SIGKILL)
        start = time.monotonic()
        proc.wait()
        elapsed = _gone_after(pids, start)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
    assert elapsed < BOUND_S, f"workers still alive {elapsed:.2f} s after their parent"
    # the collectors' workers' temp dirs are removed by them when the parent dies
    assert not [p for p in os.listdir(tmp_path) if p.startswith(("pymp-", "torchrl-"))]


# --------------------------------------------------------------------------- the watchdog
def test_idle_workers_close_their_envs_when_the_parent_dies(tmp_path):
    """Idle workers see their pipe's end of file and close their envs before exiting."""
    ctx = mp.get_context("fork")
    for kind in KINDS:
        receiver, sender = ctx.Pipe(duplex=False)
        closed = tmp_path / kind
        closed.mkdir()
        parent = ctx.Process(target=run, args=(kind, None, sender, str(closed)))
        parent.start()
        assert receiver.poll(30)
        pids = receiver.recv()
        assert _kill_and_time(parent, pids) < BOUND_S
        # (the env that ParallelEnv builds in the parent to read the specs is closed too)
        assert set(map(str, pids)) <= set(os.listdir(closed)), kind


def _watch_another_process(watched: int, conn) -> None:
    watch_parent(watched)  # not this process's parent: as under a fork server
    conn.send("watching")
    time.sleep(120)


def test_watchdog_of_a_process_that_is_not_the_parent():
    ctx = mp.get_context("fork")
    other = ctx.Process(target=time.sleep, args=(120,), daemon=True)
    other.start()
    receiver, sender = ctx.Pipe(duplex=False)
    watcher = ctx.Process(target=_watch_another_process, args=(other.pid, sender), daemon=True)
    watcher.start()
    assert receiver.poll(30) and receiver.recv() == "watching"
    time.sleep(0.3)
    assert watcher.is_alive()
    other.kill()
    start = time.monotonic()
    watcher.join(BOUND_S)
    assert time.monotonic() - start < BOUND_S
    assert watcher.exitcode == 1
    other.join()


def test_watchdog_exits_at_once_if_the_parent_is_already_gone():
    ctx = mp.get_context("fork")
    other = ctx.Process(target=time.sleep, args=(0,))
    other.start()
    other.join()
    late = ctx.Process(target=watch_parent, args=(other.pid,))
    start = time.monotonic()
    late.start()
    late.join(BOUND_S)
    assert late.exitcode == 1 and time.monotonic() - start < 0.5 * BOUND_S


def _adopt_temp_dir(path: str, conn) -> None:
    from multiprocessing.util import get_temp_dir

    use_temp_dir(path)
    conn.send(get_temp_dir())


def test_worker_temp_dir_is_used_by_the_worker_and_removed_at_its_exit():
    path = worker_temp_dir()
    ctx = mp.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_adopt_temp_dir, args=(path, sender))
    child.start()
    assert receiver.poll(30) and receiver.recv() == path
    child.join()
    assert not os.path.exists(path)


# -------------------------------------------------------------- distributed components
def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (workers, their children, a resource tracker, ...)."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill_distributed(kinds, tmp_path, blocked=False, launcher="mp", timeout=120):
    """Forks a parent building ``kinds``, SIGKILLs it once idle (or blocked), and returns
    the seconds until every process below it is gone, and what they left in their temp dir."""
    ctx = mp.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    markers, temp_root = tmp_path / "markers", tmp_path / "tmp"
    markers.mkdir()
    temp_root.mkdir()
    marker_dir = str(markers) if blocked else None
    args = (kinds, marker_dir, sender, str(temp_root), launcher)
    parent = ctx.Process(target=run_distributed, args=args)
    parent.start()
    try:
        assert receiver.poll(timeout), "the parent did not report its workers"
        pids = receiver.recv()
        if blocked:  # the worker is inside its step (the host inside extend)
            _wait_for(lambda: sorted(os.listdir(markers)) == sorted(map(str, pids)))
        everything = [p for p in _descendants(parent.pid) if _alive(p)]
        assert set(pids) <= set(everything)
    except BaseException:
        parent.kill()
        parent.join()
        raise
    elapsed = _kill_and_time(parent, everything)
    return elapsed, sorted(os.listdir(temp_root))


@pytest.mark.parametrize(
    "blocked", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["idle", "blocked"]
)
@pytest.mark.parametrize("kind", DISTRIBUTED_KINDS)
def test_distributed_worker_exits_when_parent_is_killed(kind, blocked, tmp_path):
    """DistributedDataCollector(launcher="mp")'s worker and RPCReplayBuffer(launcher="mp")'s
    host; blocked: the collector's worker sleeps in an env step, the buffer's host in extend
    (~4 s a case, for the spawn start: only the idle ones run by default)."""
    elapsed, left = _kill_distributed((kind,), tmp_path, blocked)
    assert elapsed < BOUND_S, f"{kind} worker still alive {elapsed:.2f} s after its parent"
    assert left == []


@pytest.mark.slow
@pytest.mark.parametrize("blocked", [False, True], ids=["idle", "blocked"])
def test_submitit_local_worker_exits_when_parent_is_killed(blocked, tmp_path, monkeypatch):
    """submitit's local jobs (children of its controller) watch the trainer too, and remove
    the submitit folder the collector made (in the temp dir)."""
    pytest.importorskip("submitit")
    # the job unpickles the test's env classes by module name
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    kinds = ("DistributedDataCollector",)
    elapsed, left = _kill_distributed(kinds, tmp_path, blocked, "submitit")
    assert elapsed < BOUND_S, f"submitit job still alive {elapsed:.2f} s after the trainer"
    assert left == []
