"""``ParallelEnv``: one process per worker, data through shared memory, commands through pipes.

The parent allocates three buffers from the specs (``spec.zero()``), puts them in shared
memory, and gives worker ``i`` the slice ``[i]`` of each: the inputs (actions, states,
``"_reset"`` masks), the step outputs (observations, rewards, done flags) and the reset outputs
(observations, done flags, states). A step is: the parent copies the inputs into the buffer,
sends one byte to every worker, blocks until each answers one byte, and clones the outputs out
of the buffer. Nothing of the data is pickled.

Waiting blocks in ``poll`` on the workers' pipes and process sentinels together, so a worker
that raises is reported with its traceback, and one that dies is noticed as soon as it exits;
a worker that stays silent for longer than the env's ``timeout`` is taken as hung. After any of
these, all workers are shut down. Workers end by themselves when the parent dies
(:func:`torchrl._processes.watch_parent`). :class:`_WorkerPool` owns the processes, pipes and
buffers, apart from the env, so that a ``weakref.finalize`` on the env can shut them down when
the env is garbage-collected without keeping it alive.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import numbers
import os
import pickle
import select
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.connection import Connection
from typing import Any, NoReturn

import torch
from tensordict import TensorDictBase

from torchrl._processes import default_start_method, describe_exit, stop_processes
from torchrl._types import DeviceLike
from torchrl.envs._key_paths import path_to_key
from torchrl.envs._writes import STEP_MASK, set_leaf
from torchrl.envs.batched._layout import Layout, get_leaf
from torchrl.envs.batched._worker import (
    CLOSE,
    FRAMES,
    PICKLED,
    READY,
    RESET_DONE,
    STEP,
    STEP_RESET,
    frame,
    read_frame,
    worker_main,
    write_frame,
)
from torchrl.envs.batched.base import BatchedEnvBase, Merge
from torchrl.envs.common import EnvBase

__all__ = ["ParallelEnv"]

# A waiting parent wakes up this often to check that its workers are alive, in case a
# worker's exit did not close its sentinel (a grandchild process holding it open).
_POLL_MS = 1000
# How long close() waits for workers to exit before terminating them.
_JOIN_S = 3.0
# How long a worker may take to answer a command (start, step, reset, seed) by default.
DEFAULT_TIMEOUT_S = 600.0
_START_METHODS = ("fork", "spawn", "forkserver")


def _mp_context(method: str | None) -> Any:
    """The multiprocessing context of the workers, chosen here and never set globally.

    ``fork`` starts fastest and needs nothing picklable; it is the default on Linux as long as
    CUDA is not initialised in this process (a forked child cannot use it). Elsewhere,
    ``spawn``.
    """
    if method is None:
        method = default_start_method()
    if method not in _START_METHODS or method not in mp.get_all_start_methods():
        raise ValueError(
            f"ParallelEnv: mp_start_method must be one of "
            f"{[m for m in _START_METHODS if m in mp.get_all_start_methods()]} or None, "
            f"got {method!r}"
        )
    return mp.get_context(method)


class _WorkerPool:
    """The parent's side of the workers: processes, pipes and buffers; shuts down once."""

    def __init__(
        self,
        name: str,
        ctx: Any,
        fns: Sequence[Callable[..., EnvBase]],
        kwargs: Sequence[dict[str, Any]],
        num_threads: int,
        layouts: tuple[Layout, Layout, Layout],
        buffers: tuple[TensorDictBase, TensorDictBase, TensorDictBase],
        step_present: list[bool],
        memmap_dir: str | None,
        timeout: float | None = None,
    ) -> None:
        self.name = name
        self.timeout = timeout
        self.procs: list[Any] = []
        self.conns: list[Connection] = []
        self.conn_fds: list[int] = []
        self.buffers: tuple[TensorDictBase, ...] | None = buffers
        self.memmap_dir = memmap_dir
        self.closed = False
        self.poller = select.poll()
        # fd -> (is_sentinel, worker index)
        self.fds: dict[int, tuple[bool, int]] = {}
        method = ctx.get_start_method()
        try:
            for i, (fn, kw) in enumerate(zip(fns, kwargs)):
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                # A forked child holds copies of every parent-side end opened so far: it closes
                # them, so that the parent's death reaches it as an end of file.
                inherited = [*self.conns, parent_conn] if method == "fork" else []
                proc = ctx.Process(
                    target=worker_main,
                    args=(
                        i,
                        fn,
                        kw,
                        child_conn,
                        inherited,
                        num_threads,
                        layouts,
                        buffers,
                        step_present,
                        os.getpid(),
                        torch.initial_seed(),
                    ),
                    name=f"{name}-worker-{i}",
                    daemon=False,  # a worker may start processes of its own
                )
                try:
                    proc.start()
                except (pickle.PicklingError, AttributeError, TypeError) as err:
                    parent_conn.close()
                    child_conn.close()
                    raise TypeError(
                        f"{name}: could not send create_env_fn[{i}] ({fn!r}) or its kwargs to a "
                        f"worker started with {method!r}: they must pickle with the standard "
                        f"pickle (a top-level function or class, or a functools.partial of "
                        f"one; not a lambda or a local function), or use "
                        f"mp_start_method='fork'"
                    ) from err
                child_conn.close()
                self.procs.append(proc)
                self.conns.append(parent_conn)
                self.conn_fds.append(parent_conn.fileno())
                self._register(parent_conn.fileno(), False, i)
                self._register(proc.sentinel, True, i)
            self.send(range(len(self.procs)), None)
        except BaseException:
            self.shutdown(graceful=False)
            raise

    def _register(self, fd: int, is_sentinel: bool, index: int) -> None:
        self.poller.register(fd, select.POLLIN)
        self.fds[fd] = (is_sentinel, index)

    # ------------------------------------------------------------------------- messages
    def broadcast(self, message: bytes, command: str) -> list[bytes]:
        """Sends ``message`` to every worker and returns their replies, in worker order."""
        return self.send(range(len(self.conns)), message, command)

    def send(
        self, workers: Iterable[int], message: bytes | None, command: str = "start"
    ) -> list[bytes]:
        """Sends ``message`` to ``workers`` (``None``: wait for READY) and returns their replies."""
        workers = list(workers)
        fds = self.conn_fds
        try:
            if message is not None:
                data = FRAMES.get(message) or frame(message)
                for i in workers:
                    try:
                        write_frame(fds[i], data)
                    except OSError:
                        self._fail_dead(i, command)
            return self._gather(workers, command)
        except BaseException:
            # A failure or an interrupt leaves replies in flight: nothing can be trusted.
            self.shutdown(graceful=False)
            raise

    def _gather(self, workers: list[int], command: str) -> list[bytes]:
        replies: dict[int, bytes] = {}
        pending = set(workers)
        conns = self.conns
        poll = self.poller.poll
        fds = self.fds
        timeout = self.timeout
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while pending:
            wait_ms = _POLL_MS
            if timeout is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._fail_hung(sorted(pending), command)
                wait_ms = min(wait_ms, math.ceil(left * 1000))
            events = poll(wait_ms)
            if not events:
                for i in pending:
                    if self.procs[i].exitcode is not None:
                        self._fail_dead(i, command)
                continue
            for fd, _ in events:
                is_sentinel, i = fds[fd]
                if is_sentinel:
                    # Its last words (an error report) may still be in the pipe.
                    if conns[i].poll(0):
                        self._read(i, command)
                    self._fail_dead(i, command)
                message = self._read(i, command)
                if command == "start" and message != READY:
                    raise RuntimeError(
                        f"{self.name} worker {i} (pid {self.procs[i].pid}): unexpected message "
                        f"{message!r}"
                    )
                replies[i] = message
                pending.discard(i)
        return [replies[i] for i in workers]

    def _read(self, i: int, command: str) -> bytes:
        try:
            message = read_frame(self.conn_fds[i])
        except (EOFError, OSError):
            self._fail_dead(i, command)
        if message[0] == PICKLED:
            reply = pickle.loads(message)
            if reply[0] == "error":
                _, index, cmd, kind, text, trace = reply
                pid = self.procs[index].pid
                self.shutdown(graceful=False)
                raise RuntimeError(
                    f"{self.name} worker {index} (pid {pid}) raised {kind} during {cmd}: {text}\n"
                    f"All workers were shut down. Traceback in the worker:\n{trace}"
                )
        return message

    def _fail_dead(self, i: int, command: str) -> NoReturn:
        proc = self.procs[i]
        proc.join(2.0)  # a killed worker exits at once; one that closed its pipe may linger
        code = proc.exitcode
        if code is None:
            how = "closed its pipe"
        elif code < 0:
            how = f"was {describe_exit(code)}"
        else:
            how = f"exited with code {code}"
        pid = proc.pid
        self.shutdown(graceful=False)
        raise RuntimeError(
            f"{self.name} worker {i} (pid {pid}) {how} during {command}; all workers were shut down"
        )

    def _fail_hung(self, hung: list[int], command: str) -> NoReturn:
        named = ", ".join(f"worker {i} (pid {self.procs[i].pid})" for i in hung)
        for i in hung:
            # a hung worker would not answer CLOSE: no need to wait for it
            self.procs[i].terminate()
        self.shutdown(graceful=False)
        raise TimeoutError(
            f"{self.name} {named} sent no answer to {command} within timeout={self.timeout} s: "
            f"a hung env? All workers were shut down and the env is closed (its next use starts "
            f"new workers); pass a larger timeout for slower envs, or timeout=None to wait "
            f"forever"
        )

    # ------------------------------------------------------------------------- shutdown
    def shutdown(self, graceful: bool = True) -> None:
        """Stops every worker (asks, then terminates, then kills) and frees the buffers.

        Idempotent; never raises.
        """
        if self.closed:
            return
        self.closed = True
        for fd in self.conn_fds:
            try:
                write_frame(fd, FRAMES[CLOSE])
            except OSError:
                pass
        stop_processes(self.procs, _JOIN_S if graceful else 1.0)
        for fd in list(self.fds):
            try:
                self.poller.unregister(fd)
            except (KeyError, ValueError, OSError):
                pass
        self.fds.clear()
        for conn in self.conns:
            conn.close()
        for proc in self.procs:
            try:
                proc.close()
            except ValueError:
                pass
        self.buffers = None
        if self.memmap_dir is not None:
            shutil.rmtree(self.memmap_dir, ignore_errors=True)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


class ParallelEnv(BatchedEnvBase):
    """Runs ``num_workers`` envs, one process each, as one batched env.

    Same contract and results as :class:`SerialEnv` (batch ``[num_workers, *inner]``, specs
    stacked, partial resets, chained seeds). Data moves through buffers in shared memory,
    preallocated from the specs; the processes exchange only one-byte commands over pipes, and
    the parent blocks (no busy-waiting) until every worker answers. A worker may itself hold
    several envs (``create_env_fn`` returning a ``SerialEnv`` or a vector env).

    Processes pay off when a step of a worker's envs costs more than handing the step over to
    another process and back: every step wakes each worker and then the parent, and each
    process resumes with cold caches. On a small virtual machine that is some 50-100
    microseconds per step, more than 8 CartPoles cost in one process, so there a
    :class:`SerialEnv` (one process, a batched fast path for gymnasium envs) is faster; costlier
    simulators (MuJoCo, rendering, anything over ~50 us per env step) gain from processes.
    ``python benchmarks/env_overhead.py --crossover`` measures the break-even point on a machine.

    Workers start on first use or :meth:`start`. An exception in a worker is raised here as a
    ``RuntimeError`` naming the worker, its pid and the command, with the worker's traceback; a
    worker that dies is noticed as soon as it exits; one that does not answer within
    ``timeout`` raises ``TimeoutError``. Each time all workers are shut down and the env is
    closed (its next use starts new workers). Workers exit by themselves within a second of
    this process's death. :meth:`close` is idempotent; a garbage-collected env closes itself.
    Worker ``i`` seeds torch's global generator from this process's ``torch.initial_seed()`` and
    ``i``: forked workers would otherwise share one random stream.

    Args:
        num_workers: the number of worker processes ``n``.
        create_env_fn: a callable returning a torchrl env, or a list of ``n``. With the
            ``"spawn"`` or ``"forkserver"`` start methods it must pickle with the standard pickle
            (a top-level function or class, a ``functools.partial``, an :class:`EnvCreator`).
        create_env_kwargs: keyword arguments of ``create_env_fn``: one dict, or ``n`` dicts.
        num_sub_threads: torch threads in each worker (default 1: more oversubscribes small
            machines).
        mp_start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"``; default ``"fork"`` on Linux
            when CUDA is not initialised, else ``"spawn"``. Set for these workers only. Pass
            ``"spawn"`` when this process runs threads a fork may deadlock (JAX, ...).
        shared_memory: buffers in shared memory (``True``) or in memory-mapped files in a
            temporary directory removed on close (``False``).
        timeout: seconds a worker may take to answer a command (start, which builds its env;
            step; reset; seed) before it is taken as hung (default 600: room for slow
            simulators and env construction; ``None`` waits forever). Waiting costs nothing
            per step: the parent blocks in ``poll`` with this deadline.
        validate_actions: check the stacked actions of every step against the stacked action
            spec in this process, before they reach the workers.
        serial_for_single: with ``num_workers == 1``, build a :class:`SerialEnv` instead (the
            constructor returns it; the process-only keywords are dropped).
        device, num_threads, pin_memory, non_blocking: as for :class:`BatchedEnvBase`.
        share_individual_td, allow_step_when_done: as for :class:`BatchedEnvBase` (TorchRL's
            keywords; values with no meaning here raise ``NotImplementedError``).

    Examples:
        >>> from torchrl.envs import GymEnv, ParallelEnv
        >>> env = ParallelEnv(2, GymEnv, create_env_kwargs={"env_name": "CartPole-v1"})
        >>> env.batch_size
        torch.Size([2])
        >>> seed = env.set_seed(0)
        >>> env.rollout(5, break_when_any_done=False)["next", "observation"].shape
        torch.Size([2, 5, 4])
        >>> env.close()
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # TorchRL's ``serial_for_single``: one worker runs in this process. A plain ``__new__``
        # (no metaclass); pickling calls it without arguments and gets a ParallelEnv.
        num_workers = args[0] if args else kwargs.get("num_workers")
        if kwargs.get("serial_for_single") and num_workers == 1:
            from torchrl.envs.batched.serial import SerialEnv

            serial_kwargs = {
                k: v for k, v in kwargs.items() if k not in ("num_sub_threads", "timeout")
            }
            return SerialEnv(*args, **serial_kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]],
        create_env_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        *,
        num_sub_threads: int = 1,
        mp_start_method: str | None = None,
        shared_memory: bool = True,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        validate_actions: bool = True,
        serial_for_single: bool = False,
        device: DeviceLike = None,
        num_threads: int | None = None,
        pin_memory: bool = False,
        non_blocking: bool = False,
        share_individual_td: bool | None = None,
        allow_step_when_done: bool = False,
    ) -> None:
        if (
            not isinstance(num_sub_threads, numbers.Integral)
            or isinstance(num_sub_threads, bool)
            or num_sub_threads < 1
        ):
            raise ValueError(
                f"ParallelEnv: num_sub_threads must be a positive int, got {num_sub_threads!r}"
            )
        if mp_start_method is not None and mp_start_method not in _START_METHODS:
            raise ValueError(
                f"ParallelEnv: mp_start_method must be one of {list(_START_METHODS)} or None, "
                f"got {mp_start_method!r}"
            )
        if timeout is not None and (
            not isinstance(timeout, numbers.Real)
            or isinstance(timeout, bool)
            or not 0 < timeout < math.inf
        ):
            raise ValueError(
                f"ParallelEnv: timeout must be a positive number of seconds or None, got "
                f"{timeout!r}"
            )
        self._pool: _WorkerPool | None = None
        self._finalizer: weakref.finalize | None = None
        super().__init__(
            num_workers,
            create_env_fn,
            create_env_kwargs,
            validate_actions=validate_actions,
            device=device,
            num_threads=num_threads,
            pin_memory=pin_memory,
            non_blocking=non_blocking,
            share_individual_td=share_individual_td,
            allow_step_when_done=allow_step_when_done,
        )
        if self.device is not None and self.device.type != "cpu":
            raise NotImplementedError(
                f"ParallelEnv: envs on {self.device} are not supported; buffers live on the CPU"
            )
        self.num_sub_threads: int = int(num_sub_threads)
        self.mp_start_method: str | None = mp_start_method
        self.timeout: float | None = None if timeout is None else float(timeout)
        self.shared_memory: bool = bool(shared_memory)

    # ------------------------------------------------------------------------- lifecycle
    def _start(self) -> None:
        name = type(self).__name__
        ctx = _mp_context(self.mp_start_method)
        layouts = (self._input_layout, self._step_layout, self._root_layout)
        buffers = tuple(layout.zeros() for layout in layouts)
        memmap_dir = None
        if self.shared_memory:
            for buffer in buffers:
                buffer.share_memory_()
        else:
            memmap_dir = tempfile.mkdtemp(prefix="torchrl_parallel_env_")
            buffers = tuple(
                b.memmap_(prefix=os.path.join(memmap_dir, str(k))) for k, b in enumerate(buffers)
            )
        inputs, steps, roots = buffers
        self._in_bufs = [get_leaf(inputs, p) for p in self._input_layout.paths]
        self._step_bufs = [get_leaf(steps, p) for p in self._step_layout.paths]
        self._root_bufs = [get_leaf(roots, p) for p in self._root_layout.paths]
        step_idx = set(self._action_idx) | set(self._state_idx)
        self._step_idx = sorted(step_idx)
        step_present = [j in step_idx for j in range(len(self._input_layout))]
        try:
            pool = _WorkerPool(
                name,
                ctx,
                self._create_env_fn,
                self._create_env_kwargs,
                self.num_sub_threads,
                layouts,  # type: ignore[arg-type]
                buffers,  # type: ignore[arg-type]
                step_present,
                memmap_dir,
                self.timeout,
            )
        except BaseException:
            if memmap_dir is not None:
                shutil.rmtree(memmap_dir, ignore_errors=True)
            raise
        self._pool = pool
        # Shuts the workers down when the env is garbage-collected (or at exit) if close()
        # was not called; refers to the pool only, never to the env.
        self._finalizer = weakref.finalize(self, pool.shutdown)

    def _stop(self) -> None:
        finalizer, self._finalizer = self._finalizer, None
        self._pool = None
        self._in_bufs = self._step_bufs = self._root_bufs = []
        if finalizer is not None:
            finalizer()

    def _live_pool(self) -> _WorkerPool:
        pool = self._pool
        if pool is None or pool.closed:
            # The workers failed (or were closed behind our back): start afresh.
            self._started = False
            self._stop()
            self.start()
            pool = self._pool
        return pool  # type: ignore[return-value]

    def _after_failure(self) -> None:
        pool = self._pool
        if pool is not None and pool.closed:
            self._started = False
            self._closed = True
            self._stop()

    @property
    def worker_pids(self) -> list[int]:
        """The process ids of the running workers (empty when not started)."""
        return self._pool.pids if self._pool is not None and not self._pool.closed else []

    def _seed_worker(self, index: int, seed: int, static_seed: bool) -> int:
        pool = self._live_pool()
        message = pickle.dumps(("seed", seed, static_seed), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            reply = pool.send([index], message, "set_seed")[0]
        except BaseException:
            self._after_failure()
            raise
        return int(pickle.loads(reply)[1])

    # ----------------------------------------------------------------------------- steps
    def _write_inputs(self, values: list[Any], indices: Iterable[int]) -> None:
        buffers = self._in_bufs
        for j in indices:
            value = values[j]
            if value is not None:
                buffer = buffers[j]
                if value.shape != buffer.shape:
                    path = self._input_layout.paths[j]
                    raise ValueError(
                        f"{type(self).__name__}: input {path_to_key(path)!r} has shape "
                        f"{tuple(value.shape)}, expected {tuple(buffer.shape)} "
                        f"(spec: {self._input_layout.specs[j]!r})"
                    )
                buffer.copy_(value)

    def _step_message(self, values: list[Any], complete: bool, fast: bytes, op: str) -> bytes:
        if complete:
            return fast
        present = [values[j] is not None for j in range(len(values))]
        return pickle.dumps((op, present), protocol=pickle.HIGHEST_PROTOCOL)

    def _run_step(self, values: list[Any], complete: bool) -> TensorDictBase:
        pool = self._live_pool()
        self._write_inputs(values, self._step_idx)
        message = self._step_message(values, complete, STEP, "step")
        try:
            pool.broadcast(message, "step")
        except BaseException:
            self._after_failure()
            raise
        return self._step_layout.build([b.clone() for b in self._step_bufs])

    def _run_step_subset(
        self,
        values: list[Any],
        complete: bool,
        stepped: list[bool],
        masks: list[torch.Tensor | None],
    ) -> TensorDictBase:
        partial = [i for i, m in enumerate(masks) if m is not None]
        if partial:
            # The shared buffers carry no mask: a worker steps all its sub-envs or none.
            raise ValueError(
                f"{type(self).__name__}: the {STEP_MASK!r} mask marks only some of the sub-envs "
                f"of worker(s) {partial} (inner batch {list(self.batch_size[1:])}); a worker "
                "steps all of its sub-envs or none, so mark them all alike"
            )
        pool = self._live_pool()
        self._write_inputs(values, self._step_idx)
        message = self._step_message(values, complete, STEP, "step")
        workers = [i for i, flag in enumerate(stepped) if flag]
        try:
            pool.send(workers, message, "step")
        except BaseException:
            self._after_failure()
            raise
        # The workers left out keep their last outputs in the buffers; EnvBase.step replaces them.
        return self._step_layout.build([b.clone() for b in self._step_bufs])

    def _run_step_and_reset(
        self, values: list[Any], complete: bool
    ) -> tuple[TensorDictBase, Merge | None]:
        pool = self._live_pool()
        self._write_inputs(values, self._step_idx)
        message = self._step_message(values, complete, STEP_RESET, "step_reset")
        try:
            replies = pool.broadcast(message, "step_and_maybe_reset")
        except BaseException:
            self._after_failure()
            raise
        next_td = self._step_layout.build([b.clone() for b in self._step_bufs])
        if RESET_DONE not in replies:
            return next_td, None
        reset = torch.tensor([r == RESET_DONE for r in replies])
        paths = self._root_layout.paths
        root_bufs = self._root_bufs

        def merge(next_input: TensorDictBase) -> None:
            masks: dict[int, torch.Tensor] = {}
            for path, buffer in zip(paths, root_bufs):
                current = get_leaf(next_input, path)
                if current is None:
                    value = buffer.clone()
                else:
                    mask = masks.get(buffer.ndim)
                    if mask is None:
                        mask = masks[buffer.ndim] = reset.reshape(-1, *([1] * (buffer.ndim - 1)))
                    value = torch.where(mask, buffer, current)
                if len(path) == 1:
                    set_leaf(next_input, path[0], value)
                else:
                    next_input.set(path, value)

        return next_td, merge

    def _run_reset(
        self, values: list[Any], need: list[bool], kwargs: dict[str, Any]
    ) -> TensorDictBase:
        pool = self._live_pool()
        self._write_inputs(values, range(len(values)))
        present = [v is not None for v in values]
        message = pickle.dumps(("reset", present, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        workers = [i for i, flag in enumerate(need) if flag]
        try:
            pool.send(workers, message, "reset")
        except BaseException:
            self._after_failure()
            raise
        return self._root_layout.build([b.clone() for b in self._root_bufs])
