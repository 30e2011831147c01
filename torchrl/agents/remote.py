"""``NRemoteAgent``: one agent run in n processes over one shared-memory workspace.

Each worker process holds its own copy of the agent (its own env) and owns a block of rows of
the shared workspace: worker ``i``'s rows follow worker ``i - 1``'s, so the shared batch is the
concatenation of the workers' batches along the first batch dim. The workers write their steps
straight into shared memory; only small messages (run, done, errors) go through pipes. The
layout of the shared storage (variables, shapes, time capacity) is learned from the workers'
first run, and set again whenever a run writes a new variable or more steps than it holds.
"""

from __future__ import annotations

import multiprocessing.connection as mp_connection
import os
import shutil
import time
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.multiprocessing as torch_mp
from tensordict import TensorDict, TensorDictBase

from torchrl._processes import (
    default_start_method,
    describe_exit,
    stop_processes,
    use_temp_dir,
    watch_parent,
    worker_temp_dir,
)
from torchrl.agents.agent import Agent
from torchrl.agents.workspace import Workspace

__all__ = ["NRemoteAgent"]

# Seconds a closing worker has to end by itself before it is terminated.
_CLOSE_WAIT_S = 2.0

# {key: (feature shape, dtype)}, batch size, time length, capacity of a worker's workspace
_Layout = tuple[dict[Any, tuple[tuple[int, ...], torch.dtype]], tuple[int, ...], int, int]


def _layout_of(ws: Workspace) -> _Layout:
    nb = len(ws.batch_size or ())
    keys = {}
    for key in ws.keys():
        value = ws.get_full(key)
        keys[key] = (tuple(value.shape[nb + 1 :]), value.dtype)
    return keys, tuple(ws.batch_size or ()), ws.time_length, ws.capacity


def _worker_main(
    index: int,
    agent: Any,
    is_factory: bool,
    conn: Any,
    parent_pid: int,
    temp_dir: str,
    num_threads: int,
) -> None:
    use_temp_dir(temp_dir)
    watch_parent(parent_pid, cleanup=[temp_dir])
    torch.set_num_threads(num_threads)
    try:
        if is_factory:
            agent = agent(index)
            if not isinstance(agent, Agent):
                raise TypeError(
                    f"NRemoteAgent: the factory must return an Agent, got {type(agent).__name__}"
                )
        conn.send(("ready", None))
    except Exception:  # noqa: BLE001 - the parent raises it with this traceback
        conn.send(("error", traceback.format_exc()))
        return
    ws = Workspace()
    shared: TensorDictBase | None = None
    bound_keys: set[Any] = set()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break  # the parent is gone or closed the pipe
        cmd = msg[0]
        try:
            if cmd == "run":
                kwargs, length = msg[1], msg[2]
                if ws.storage is not None:
                    ws.set_time_length(min(length, ws.capacity))
                with torch.no_grad():
                    agent(ws, **kwargs)
                layout = _layout_of(ws)
                same = shared is not None and ws.storage is shared and set(layout[0]) == bound_keys
                conn.send(("done", (ws.time_length, None if same else layout)))
            elif cmd == "bind":
                new = msg[1]
                nb = new.ndim - 1
                length = ws.time_length
                for key in ws.keys():
                    new.get(key).narrow(nb, 0, length).copy_(ws.get_full(key))
                ws.load_tensordict(new)
                ws.set_time_length(length)
                shared = new
                bound_keys = set(new.keys(include_nested=True, leaves_only=True))
                conn.send(("bound", None))
            elif cmd == "seed":
                agent.seed(msg[1])
                conn.send(("seeded", None))
            elif cmd == "close":
                break
            else:
                raise ValueError(f"unknown command {cmd!r}")
        except Exception:  # noqa: BLE001 - the parent raises it with this traceback
            conn.send(("error", traceback.format_exc()))
    conn.close()


def _shutdown(procs: list[Any], conns: list[Any], temp_dirs: list[str]) -> None:
    for conn in conns:
        try:
            conn.send(("close", None))
        except (OSError, ValueError, BrokenPipeError):
            pass
    stop_processes(procs, _CLOSE_WAIT_S)
    for conn in conns:
        conn.close()
    for path in temp_dirs:
        shutil.rmtree(path, ignore_errors=True)


class NRemoteAgent(Agent):
    """Runs an agent in ``num_processes`` processes over one shared-memory workspace.

    A call ``remote(workspace, t=0, n_steps=..., blocking=True)`` runs the agent (typically a
    :class:`~torchrl.agents.TemporalAgent` over an env agent and a policy) in every worker
    under ``torch.no_grad``; ``workspace`` then views the shared storage: the rows of worker
    0, then worker 1's, ... With ``blocking=False`` the call returns at once; poll
    :meth:`is_running` or block on :meth:`wait` (both bind ``workspace`` once done). Workers
    whose run ended earlier (a stop variable) repeat their last step up to the longest run.
    Pass the same workspace again to go on from it (after ``copy_n_last_steps``), or an empty
    one. A worker's exception is raised here with its traceback, a dead worker is reported by
    name; either closes the remote agent. Workers run with ``num_threads`` torch threads.

    Args:
        agent: an :class:`Agent` copied into every worker (its parameters are moved to shared
            memory first, so the caller's optimizer steps reach the workers), or a factory
            ``make_agent(worker_index) -> Agent`` called in each worker.
        num_processes: the number of worker processes.
        seed_stride: worker ``i`` is seeded with ``seed + i * seed_stride`` (:meth:`seed`); use
            the number of sub-envs per worker to seed as one env of all their sub-envs.
        start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"`` (default: fork on Linux
            without CUDA, else spawn).
        num_threads: torch threads per worker.

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.agents import Agents, EnvAgent, TemporalAgent, Workspace
        >>> class Zero(Agent):
        ...     def forward(self, workspace, t=0, **kwargs):
        ...         workspace.set("action", t, torch.zeros(2, 1))
        >>> acq = TemporalAgent(Agents(EnvAgent(PendulumEnv(batch_size=[2], seed=0)), Zero()))
        >>> remote = NRemoteAgent(acq, num_processes=2)
        >>> ws = Workspace()
        >>> remote(ws, t=0, n_steps=5)
        >>> ws.batch_size, ws.time_length
        (torch.Size([4]), 5)
        >>> remote.close()
    """

    def __init__(
        self,
        agent: Agent | Callable[[int], Agent],
        num_processes: int,
        seed_stride: int = 1,
        start_method: str | None = None,
        num_threads: int = 1,
    ) -> None:
        super().__init__()
        if num_processes < 1:
            raise ValueError(f"NRemoteAgent: num_processes must be >= 1, got {num_processes}")
        is_factory = not isinstance(agent, Agent)
        if is_factory and not callable(agent):
            raise TypeError(
                "NRemoteAgent: agent must be an Agent or a factory make_agent(index) -> Agent, "
                f"got {type(agent).__name__}"
            )
        if not is_factory:
            for param in agent.parameters():  # type: ignore[union-attr]
                param.data.share_memory_()
            self.agent = agent
        self.num_processes = num_processes
        self.seed_stride = seed_stride
        ctx: Any = torch_mp.get_context(start_method or default_start_method())
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self._temp_dirs: list[str] = []
        self._finalizer = weakref.finalize(
            self, _shutdown, self._procs, self._conns, self._temp_dirs
        )
        for index in range(num_processes):
            parent_conn, child_conn = ctx.Pipe()
            temp_dir = worker_temp_dir()
            proc = ctx.Process(
                target=_worker_main,
                args=(index, agent, is_factory, child_conn, os.getpid(), temp_dir, num_threads),
                name=f"NRemoteAgent-worker-{index}",
                daemon=True,
            )
            self._temp_dirs.append(temp_dir)
            proc.start()
            child_conn.close()
            self._procs.append(proc)
            self._conns.append(parent_conn)
        self._shared: TensorDictBase | None = None
        self._rows: list[tuple[int, int]] = []
        self._pending: dict[int, Any] = {}
        self._expect: str | None = None
        self._target: Workspace | None = None
        self._closed = False
        self._gather("ready", range(num_processes))

    # ------------------------------------------------------------------ public API
    @property
    def workspace(self) -> Workspace | None:
        """The workspace of the last finished run (``None`` before the first)."""
        return self._target

    def forward(  # type: ignore[override]
        self, workspace: Workspace, blocking: bool = True, **kwargs: Any
    ) -> None:
        self._check_open()
        if self._expect is not None:
            raise RuntimeError("NRemoteAgent: a run is still going on; wait() for it first")
        if workspace.storage is not None and workspace.storage is not self._shared:
            if workspace.time_length:
                raise ValueError(
                    "NRemoteAgent: pass an empty workspace or the one this agent filled "
                    f"(got one with {workspace.time_length} steps of its own)"
                )
        length = workspace.time_length if workspace.storage is self._shared else 0
        self._target = workspace
        for conn in self._conns:
            conn.send(("run", kwargs, length))
        self._expect = "done"
        self._pending = {}
        if blocking:
            self.wait()

    def is_running(self) -> bool:
        """Whether the last non-blocking run goes on; raises a worker's error once it came."""
        self._check_open()
        if self._expect is None:
            return False
        for i, conn in enumerate(self._conns):
            if i not in self._pending and conn.poll():
                self._receive(i)
        if len(self._pending) < self.num_processes:
            self._check_alive()
            return True
        self._finish_run()
        return False

    def wait(self, timeout: float | None = None) -> None:
        """Blocks until the current run ends (at most ``timeout`` seconds, then ``TimeoutError``)."""
        self._check_open()
        if self._expect is None:
            return
        self._gather("done", range(self.num_processes), timeout, keep=True)
        self._finish_run()

    def seed(self, seed: int) -> None:
        """Seeds worker ``i``'s agent with ``seed + i * seed_stride``."""
        self._check_open()
        if self._expect is not None:
            raise RuntimeError("NRemoteAgent: cannot seed while a run goes on")
        for i, conn in enumerate(self._conns):
            conn.send(("seed", seed + i * self.seed_stride))
        self._gather("seeded", range(self.num_processes))

    def replay(self, workspace: Workspace, t0: int = 0, **kwargs: Any) -> None:
        agent = getattr(self, "agent", None)
        if agent is None:
            raise RuntimeError("NRemoteAgent built from a factory has no local agent to replay")
        agent.replay(workspace, t0=t0, **kwargs)

    def close(self) -> None:
        """Stops the workers (joined, then terminated) and frees the shared storage."""
        self._closed = True
        self._expect = None
        self._shared = None
        self._finalizer()

    # ------------------------------------------------------------------ internals
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("NRemoteAgent is closed")

    def _fail(self, message: str) -> None:
        self.close()
        raise RuntimeError(message)

    def _check_alive(self) -> None:
        for i, proc in enumerate(self._procs):
            if proc.exitcode is not None and i not in self._pending:
                if self._conns[i].poll():
                    self._receive(i)  # its last words (an error) come first
                self._dead(i)

    def _dead(self, i: int) -> None:
        proc = self._procs[i]
        proc.join(1.0)
        self._fail(f"NRemoteAgent worker {i} (pid {proc.pid}) died: {describe_exit(proc.exitcode)}")

    def _receive(self, i: int) -> None:
        try:
            kind, payload = self._conns[i].recv()
        except (EOFError, OSError):
            self._dead(i)
        if kind == "error":
            self._fail(f"NRemoteAgent worker {i} raised an exception:\n{payload}")
        self._pending[i] = (kind, payload)

    def _gather(
        self, kind: str, workers: Any, timeout: float | None = None, keep: bool = False
    ) -> dict[int, Any]:
        """Blocks until every worker of ``workers`` answered ``kind``; errors and deaths raise."""
        if not keep:
            self._pending = {}
        workers = list(workers)
        deadline = None if timeout is None else time.monotonic() + timeout
        while any(i not in self._pending for i in workers):
            waiting = [i for i in workers if i not in self._pending]
            handles = [self._conns[i] for i in waiting] + [self._procs[i].sentinel for i in waiting]
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = mp_connection.wait(handles, timeout=remaining)
            if not ready:
                raise TimeoutError(f"NRemoteAgent: workers {waiting} did not answer in time")
            for i in waiting:
                if self._conns[i].poll():
                    self._receive(i)
                elif self._procs[i].sentinel in ready:
                    self._dead(i)
        for i in workers:
            if self._pending[i][0] != kind:
                self._fail(
                    f"NRemoteAgent worker {i} answered {self._pending[i][0]!r}, not {kind!r}"
                )
        return self._pending

    def _finish_run(self) -> None:
        replies = {i: payload for i, (_, payload) in self._pending.items()}
        self._expect = None
        lengths = [replies[i][0] for i in range(self.num_processes)]
        layouts = [replies[i][1] for i in range(self.num_processes)]
        if any(layout is not None for layout in layouts):
            self._relayout(layouts)
        assert self._shared is not None and self._target is not None
        length = max(lengths)
        for (start, stop), own in zip(self._rows, lengths):
            for t in range(own, length):  # a worker that stopped early repeats its last step
                self._shared[start:stop, ..., t] = self._shared[start:stop, ..., own - 1]
        self._target.load_tensordict(self._shared)
        self._target.set_time_length(length)

    def _relayout(self, layouts: list[_Layout | None]) -> None:
        """Allocates a shared storage fitting every worker's variables and binds the workers."""
        old = self._shared
        keys: dict[Any, tuple[tuple[int, ...], torch.dtype]] = {}
        batch: list[tuple[int, ...]] = []
        capacity = 0 if old is None else old.batch_size[-1]
        for i, layout in enumerate(layouts):
            if layout is None:
                assert old is not None
                start, stop = self._rows[i]
                batch.append((stop - start, *old.batch_size[1:-1]))
                continue
            worker_keys, worker_batch, _, worker_capacity = layout
            if not worker_batch:
                self._fail(
                    f"NRemoteAgent worker {i}'s workspace has no batch dim: the shared workspace "
                    "stacks the workers' rows along the first batch dim"
                )
            batch.append(worker_batch)
            capacity = max(capacity, worker_capacity)
            for key, spec in worker_keys.items():
                if key in keys and keys[key] != spec:
                    self._fail(
                        f"NRemoteAgent: variable {key!r} has shape/dtype {keys[key]} in one worker "
                        f"and {spec} in worker {i}"
                    )
                keys[key] = spec
        if old is not None:
            nb = old.ndim - 1
            for key, value in old.items(include_nested=True, leaves_only=True):
                keys.setdefault(key, (tuple(value.shape[nb + 1 :]), value.dtype))
        if any(b[1:] != batch[0][1:] for b in batch):
            self._fail(
                f"NRemoteAgent: the workers' batch sizes {batch} differ beyond the first dim"
            )
        rows = [b[0] for b in batch]
        total = [sum(rows), *batch[0][1:], capacity]
        shared = TensorDict({}, batch_size=total)
        for key, (shape, dtype) in keys.items():
            shared.set(key, torch.zeros(*total, *shape, dtype=dtype))
        shared.share_memory_()
        self._rows = []
        start = 0
        for n in rows:
            self._rows.append((start, start + n))
            start += n
        for i, conn in enumerate(self._conns):
            start, stop = self._rows[i]
            conn.send(("bind", shared[start:stop]))
        self._gather("bound", range(self.num_processes))
        self._shared = shared
