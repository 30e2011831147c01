"""Multi-process collectors: one :class:`SyncDataCollector` per worker, data in shared memory.

``MultiSyncDataCollector`` asks every worker for a share of a batch and returns them together;
``MultiaSyncDataCollector`` returns each worker's batch as soon as it is ready, while the worker
fills its second buffer. Workers write batches into shared-memory buffers and announce them with
a few bytes on a pipe; the parent blocks on ``multiprocessing.connection.wait`` over the pipes
and the process sentinels, so a worker that raises or dies is noticed at once. Workers end by
themselves when the parent dies (:func:`torchrl._processes.watch_parent`), and each uses a
multiprocessing temp dir made by the parent (:func:`torchrl._processes.worker_temp_dir`), which
the parent removes once the worker has ended, killed or not.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import pickle
import shutil
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, cast

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._processes import worker_temp_dir
from torchrl._utils import warn_once
from torchrl.collectors._base import DataCollectorBase, check_count, check_frames
from torchrl.collectors._policy import copy_weights, device_of, share_weights
from torchrl.collectors._worker import RemoteTraceback, SharedFlag, worker_main
from torchrl.collectors.sync import extend_replay_buffer
from torchrl.collectors.utils import split_trajectories
from torchrl.envs.utils import ExplorationType

__all__ = ["MultiSyncDataCollector", "MultiaSyncDataCollector"]

DeviceLike = torch.device | str | int | None

# How long a parent waits in one blocking call before it looks at a stop request.
_WAIT_SLICE_S = 1.0
# How long shutdown waits for a worker to exit by itself before terminating it.
_JOIN_TIMEOUT_S = 5.0


def _default_start_method() -> str:
    # fork starts a worker in milliseconds and shares the parent's imports; it is unsafe once
    # CUDA is initialized, so spawn then.
    methods = mp.get_all_start_methods()
    if "fork" in methods and not torch.cuda.is_initialized():
        return "fork"
    return "spawn"


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
    for proc in procs:
        proc.join(timeout)
        if proc.is_alive():
            proc.terminate()
            proc.join(1.0)
        if proc.is_alive():
            proc.kill()
            proc.join()
    for conn in conns:
        conn.close()
    # A worker that exited normally removed its directory; a killed one could not.
    for path in temp_dirs:
        shutil.rmtree(path, ignore_errors=True)


class WorkerError(RuntimeError):
    """A collector worker process died or could not be reached."""


class _MultiDataCollector(DataCollectorBase):
    """Shared machinery of the multi-process collectors (see the two public classes)."""

    _sync: bool = True

    def __init__(
        self,
        create_env_fn: Sequence[Callable[..., Any]] | Callable[..., Any],
        policy: Callable[[TensorDictBase], TensorDictBase | None] | None = None,
        *,
        num_workers: int | None = None,
        frames_per_batch: int,
        total_frames: int | None = -1,
        device: DeviceLike = None,
        storing_device: DeviceLike = None,
        env_device: DeviceLike = None,
        policy_device: DeviceLike = None,
        create_env_kwargs: Sequence[dict[str, Any]] | dict[str, Any] | None = None,
        max_frames_per_traj: int | None = None,
        init_random_frames: int | None = None,
        reset_at_each_iter: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool | None = None,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        reset_when_done: bool = True,
        update_at_each_batch: bool = False,
        preemptive_threshold: float | None = None,
        num_threads: int | None = None,
        num_sub_threads: int = 1,
        set_truncated: bool = False,
        use_buffers: bool | None = None,
        replay_buffer: Any = None,
        trust_policy: bool | None = None,
        cat_results: str | int | None = None,
        mp_start_method: str | None = None,
        timeout: float | None = 600.0,
    ) -> None:
        self._init_base()
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._temp_dirs: list[str] = []
        name = type(self).__name__
        if timeout is not None and not timeout > 0:
            raise ValueError(f"{name}: timeout must be a positive number of seconds or None")
        self.timeout = None if timeout is None else float(timeout)
        if num_workers is not None:
            num_workers = check_count(name, "num_workers", num_workers, minimum=1)
        fns, kwargs = _env_constructors(create_env_fn, create_env_kwargs, num_workers, name)
        n = len(fns)
        self.num_workers = n
        # before any process starts
        frames_per_batch, _ = check_frames(name, frames_per_batch, total_frames, 1)
        init_random_frames = check_count(name, "init_random_frames", init_random_frames or 0)
        if max_frames_per_traj is not None:
            max_frames_per_traj = check_count(name, "max_frames_per_traj", max_frames_per_traj, 1)
        num_sub_threads = check_count(name, "num_sub_threads", num_sub_threads, minimum=1)
        if num_threads is not None:
            num_threads = check_count(name, "num_threads", num_threads, minimum=1)
        if use_buffers is False:
            raise ValueError(
                f"{name} moves data through shared-memory buffers: use_buffers=False is not supported"
            )
        if storing_device is not None and torch.device(storing_device).type != "cpu":
            raise ValueError(
                f"{name}: batches are shared through CPU memory; storing_device must be the CPU "
                f"(got {storing_device}); move the batches yourself"
            )
        if replay_buffer is not None and split_trajs:
            raise ValueError(f"{name}: split_trajs cannot be used with a replay_buffer")
        if preemptive_threshold is not None:
            if not self._sync:
                raise ValueError(f"{name}: preemptive_threshold applies to MultiSyncDataCollector")
            if not 0.0 < preemptive_threshold <= 1.0:
                raise ValueError(
                    f"{name}: preemptive_threshold must be in (0, 1], got {preemptive_threshold}"
                )
            if cat_results == "stack":
                raise ValueError(
                    f"{name}: with preemptive_threshold, workers return batches of different "
                    "lengths, which cannot be stacked: use cat_results=-1 (the time dim)"
                )
        if cat_results is None:
            cat_results = -1 if preemptive_threshold is not None else "stack"
        if cat_results != "stack" and not isinstance(cat_results, int):
            raise ValueError(
                f"{name}: cat_results must be 'stack' or a dim (int), got {cat_results!r}"
            )
        self.cat_results = cat_results
        self.preemptive_threshold = preemptive_threshold
        self.update_at_each_batch = bool(update_at_each_batch)
        self.postproc = postproc
        self.split_trajs = bool(split_trajs)
        self.replay_buffer = replay_buffer
        self.exploration_type = exploration_type
        if num_threads is not None:
            torch.set_num_threads(num_threads)

        per_worker = -(-frames_per_batch // n) if self._sync else frames_per_batch
        worker_random = -(-init_random_frames // n)
        collector_kwargs = {
            "frames_per_batch": per_worker,
            "total_frames": -1,
            "device": device,
            "storing_device": "cpu",
            "env_device": env_device,
            "policy_device": policy_device,
            "max_frames_per_traj": max_frames_per_traj,
            "init_random_frames": worker_random,
            "reset_at_each_iter": reset_at_each_iter,
            "exploration_type": exploration_type,
            "return_same_td": True,
            "reset_when_done": reset_when_done,
            "set_truncated": set_truncated,
            "trust_policy": trust_policy,
        }
        self._policy = policy
        self._weights = share_weights(policy) if isinstance(policy, nn.Module) else None
        dev = policy_device or device
        self._update_by_message = bool(
            self._weights
            and (
                (dev is not None and torch.device(dev).type != "cpu")
                or (device_of(policy) or torch.device("cpu")).type != "cpu"
            )
        )
        method = mp_start_method or _default_start_method()
        ctx: Any = mp.get_context(method)
        self._flag = SharedFlag()
        num_slots = 1 if self._sync else 2
        # Drawn from torch's generator, so that torch.manual_seed makes the workers repeatable.
        base_seed = int(torch.randint(0, 2**31 - 1, ()))
        # Stops the workers started so far (and removes their temp dirs) if this collector is
        # garbage-collected without shutdown(), even when a later worker fails to start.
        self._finalizer = weakref.finalize(
            self, _stop_processes, self._procs, self._conns, self._flag, 1.0, self._temp_dirs
        )
        for i in range(n):
            parent, child = ctx.Pipe()
            # A forked worker holds copies of the parent-side ends opened so far: it closes
            # them, so that the parent's death reaches it as an end of file.
            inherited = (*self._conns, parent) if method == "fork" else ()
            temp_dir = worker_temp_dir()
            self._temp_dirs.append(temp_dir)
            args = (
                child, i, n, fns[i], kwargs[i], policy, self._weights, collector_kwargs,
                self._flag, num_sub_threads, num_slots, self._sync, base_seed + 7919 * i,
                os.getpid(), temp_dir, inherited,
            )  # fmt: skip
            proc = ctx.Process(
                target=worker_main, args=args, daemon=True, name=f"collector-worker-{i}"
            )
            try:
                proc.start()
            except (pickle.PicklingError, TypeError, AttributeError) as err:
                parent.close()
                child.close()
                self._finalizer()  # stops the workers started so far, once
                raise TypeError(
                    f"{name}: could not send the env constructor or the policy to a '{method}' "
                    f"worker ({err}); pass picklable callables, or use mp_start_method='fork'"
                ) from err
            child.close()
            self._procs.append(proc)
            self._conns.append(parent)
        # When each worker was last heard from or given work: a worker that owes an answer and
        # stays silent for longer than ``timeout`` is taken as hung.
        self._silent_since = [time.monotonic()] * n
        self._pending: list[deque[Any]] = [deque() for _ in range(n)]
        self._rr = 0
        self._buffers: list[dict[int, TensorDictBase]] = [{} for _ in range(n)]
        infos = [self._expect(i, "ready") for i in range(n)]
        sizes = [math.prod(info["batch_size"]) for info in infos]
        self._worker_frames = [-(-per_worker // s) * s for s in sizes]
        requested = frames_per_batch
        batch_frames = sum(self._worker_frames) if self._sync else self._worker_frames[0]
        if self._sync and batch_frames != requested:
            warn_once(f"{name}: frames_per_batch={requested} is collected as {batch_frames} frames")
        self.frames_per_batch, self.total_frames = check_frames(name, batch_frames, total_frames, 1)
        if (
            self._sync
            and cat_results == "stack"
            and len(set(map(tuple, (i["batch_size"] for i in infos)))) > 1
        ):
            self.shutdown()
            raise ValueError(
                f"{name}: workers' envs have different batch sizes; use cat_results=-1"
            )
        self.frames = 0
        self._iter = 0

    # -------------------------------------------------------------------------------- messaging
    def _send(self, i: int, cmd: str, arg: Any = None) -> None:
        try:
            self._conns[i].send((cmd, arg))
        except (BrokenPipeError, OSError) as err:
            self._raise_dead(i, err)
        self._silent_since[i] = time.monotonic()

    def _next_message(
        self, only: Sequence[int] | None = None, queued: bool = True
    ) -> tuple[int, str, Any]:
        """Blocks until a worker (of ``only``) sends a message; raises if one failed or died.

        Messages queued while waiting for a reply come first, unless ``queued`` is false.
        """
        workers = list(range(self.num_workers) if only is None else only)
        # Round robin: a fast worker must not starve the others' finished batches.
        start = self._rr % len(workers)
        workers = workers[start:] + workers[:start]
        if queued:
            for i in workers:
                if self._pending[i]:
                    kind, payload = self._pending[i].popleft()
                    self._rr = i + 1
                    return i, kind, payload
        conns = {self._conns[i]: i for i in workers}
        sentinels = {self._procs[i].sentinel: i for i in workers}
        while True:
            slice_s = _WAIT_SLICE_S
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
            if self._closed or self._bg_stop.is_set():
                raise RuntimeError(f"{type(self).__name__} was shut down or stopped")

    def _expect(self, i: int, kind: str) -> Any:
        """The next message of worker ``i`` of this kind (batches that come first are queued)."""
        while True:
            j, got, payload = self._next_message([i], queued=False)
            if got == kind:
                return payload
            self._pending[j].append((got, payload))
            if got != "batch":
                raise RuntimeError(f"{self._who(i)}: expected {kind!r}, got {got!r}")

    def _ask(self, i: int, cmd: str, arg: Any = None) -> Any:
        self._send(i, cmd, arg)
        return self._expect(i, "reply")

    def _who(self, i: int) -> str:
        return f"collector worker {i} (pid {self._procs[i].pid})"

    def _raise_remote(self, i: int, err: BaseException | None, text: str) -> None:
        who = self._who(i)
        self.shutdown()
        cause = RemoteTraceback(f"{who}: {text}")
        if err is None:
            raise RuntimeError(f"{who} failed:\n{text}") from cause
        _name_worker(err, who)
        raise err from cause

    def _raise_hung(self, i: int, silent_s: float) -> None:
        proc = self._procs[i]
        # A hung worker would not answer "close": stop it now rather than after a join timeout.
        proc.terminate()
        self.shutdown()
        raise TimeoutError(
            f"collector worker {i} (pid {proc.pid}) is alive but sent nothing for "
            f"{silent_s:.1f} s (timeout={self.timeout} s): a hung env or policy? All workers "
            "were shut down; raise the collector's timeout for slower batches"
        )

    def _raise_dead(self, i: int, err: BaseException | None) -> None:
        proc = self._procs[i]
        proc.join(0.5)
        code = proc.exitcode
        self.shutdown()
        how = f"exit code {code}"
        if code is not None and code < 0:
            import signal

            try:
                how = f"signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"signal {-code}"
        raise WorkerError(
            f"collector worker {i} (pid {proc.pid}) died unexpectedly ({how}); all workers were "
            "shut down"
        ) from err

    def _batch_view(self, i: int, slot: int, steps: int, buffer: Any) -> TensorDictBase:
        if buffer is not None:
            self._buffers[i][slot] = buffer
        full = self._buffers[i][slot]
        nb = full.batch_dims - 1
        if steps == full.batch_size[nb]:
            return full
        return full[(slice(None),) * nb + (slice(0, steps),)]

    # ------------------------------------------------------------------------------ delivering
    def _deliver(self, batch: TensorDictBase) -> TensorDictBase | None:
        if self.split_trajs:
            batch = split_trajectories(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
        if self.replay_buffer is not None:
            extend_replay_buffer(self.replay_buffer, batch)
            return None
        return batch

    # --------------------------------------------------------------------------------- controls
    def update_policy_weights_(self, policy_or_weights: Any = None) -> None:
        """Copies new weights into the shared memory every worker's policy reads.

        The copy is in place (no pickling): workers use the new weights from their next step
        (a sync collector's workers are idle between batches, so a batch never mixes weights).

        Args:
            policy_or_weights: a module, a state dict or a TensorDict of weights; by default
                the policy given at construction.
        """
        self._check_open()
        if self._weights is None:
            return
        copy_weights(
            self._weights, policy_or_weights if policy_or_weights is not None else self._policy
        )
        if self._update_by_message:
            for i in range(self.num_workers):
                self._ask(i, "update")

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the workers' envs in a chain (each from the seed the previous one returns).

        Args:
            seed: the first seed.
            static_seed: give every worker ``seed`` itself.

        Returns:
            The seed that follows the last worker's.
        """
        for i in range(self.num_workers):
            seed = self._ask(i, "seed", (seed, static_seed))
        return seed

    def reset(self) -> None:
        """Resets every worker's env: the next batches start new trajectories."""
        for i in range(self.num_workers):
            self._ask(i, "reset")

    def state_dict(self) -> dict[str, Any]:
        """The state dicts of the workers' collectors (``"worker0"``, ...) and the frame count.

        Returns:
            A dict of picklable state.
        """
        out: dict[str, Any] = {
            f"worker{i}": self._ask(i, "state_dict") for i in range(self.num_workers)
        }
        out["frames"] = self.frames
        out["iter"] = self._iter
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a :meth:`state_dict` into the workers.

        Args:
            state_dict: what :meth:`state_dict` returned.
        """
        for i in range(self.num_workers):
            self._ask(i, "load_state_dict", state_dict[f"worker{i}"])
        self.frames = int(state_dict.get("frames", 0))
        self._iter = int(state_dict.get("iter", 0))

    def shutdown(self) -> None:
        """Stops and joins the worker processes and frees the shared buffers (idempotent)."""
        if self._closed:
            return
        # the collecting thread notices the request within one wait slice
        self._stop_background(3 * _WAIT_SLICE_S)
        self._closed = True
        self._buffers = [{} for _ in self._procs]
        self._pending = [deque() for _ in self._procs]
        self._finalizer.detach()
        _stop_processes(self._procs, self._conns, self._flag, _JOIN_TIMEOUT_S, self._temp_dirs)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_workers={self.num_workers}, frames_per_batch="
            f"{self.frames_per_batch}, total_frames={self.total_frames}, frames={self.frames})"
        )


def _name_worker(err: BaseException, who: str) -> None:
    """Makes an exception raised again from a worker name it (in its message where it can)."""
    args = err.args
    if type(err).__str__ is BaseException.__str__ and (
        not args or (len(args) == 1 and isinstance(args[0], str))
    ):
        err.args = (f"{who}: {args[0]}" if args else who,)
    elif hasattr(err, "add_note"):  # Python >= 3.11: shown under the message
        err.add_note(f"raised in {who}")


def _env_constructors(
    create_env_fn: Any, create_env_kwargs: Any, num_workers: int | None, name: str
) -> tuple[list[Any], list[dict[str, Any] | None]]:
    if isinstance(create_env_fn, Sequence) and not isinstance(create_env_fn, str):
        fns = list(create_env_fn)
        if num_workers is not None and num_workers != len(fns):
            raise ValueError(f"{name}: num_workers={num_workers} but {len(fns)} env constructors")
    else:
        if num_workers is None:
            raise ValueError(f"{name}: pass a list of env constructors, or num_workers")
        fns = [create_env_fn] * num_workers
    if not fns:
        raise ValueError(f"{name} needs at least one worker")
    if create_env_kwargs is None or isinstance(create_env_kwargs, dict):
        kwargs = [create_env_kwargs] * len(fns)
    else:
        kwargs = list(create_env_kwargs)
        if len(kwargs) != len(fns):
            raise ValueError(f"{name}: {len(kwargs)} create_env_kwargs for {len(fns)} workers")
    return fns, kwargs


class MultiSyncDataCollector(_MultiDataCollector):
    """Runs one collector per worker process and returns their batches together.

    Each batch asks every worker for ``frames_per_batch / num_workers`` frames; the parts are
    stacked (``cat_results="stack"``: batch ``[num_workers, *env.batch_size, T]``) or
    concatenated along a dim (``cat_results=-1``: time). Workers wait while the batch is used,
    so a batch is always collected with the latest weights. Data moves through shared memory;
    a worker exception is raised again here with its traceback and the worker's index and pid
    (in its message, or as a note where the message is not a plain string), a dead worker
    raises :class:`WorkerError`, and :meth:`shutdown` stops every process. Workers end by
    themselves within a second if this process dies.

    Args:
        create_env_fn: one env constructor per worker (or one, with ``num_workers``). With the
            default ``fork`` start method, envs and lambdas work as they are.
        policy: the policy (``None``: random actions); workers read its weights from shared
            memory, refreshed by :meth:`update_policy_weights_`.
        num_workers: number of worker processes.
        frames_per_batch: frames of a whole batch (split between the workers).
        total_frames: frames in all (``-1``: forever).
        preemptive_threshold: once this fraction of the workers is done, the others stop early
            (their parts are shorter; results are concatenated along time).
        cat_results: ``"stack"`` or the dim to concatenate along.
        num_threads: torch threads of this process (unchanged by default).
        num_sub_threads: torch threads of each worker (1).
        mp_start_method: ``"fork"`` (default where available) , ``"spawn"`` or ``"forkserver"``.
        timeout: seconds a worker may stay silent while it owes an answer (a batch, a reply,
            its start-up) before it is taken as hung: the collector then stops every worker
            and raises ``TimeoutError`` naming it. The default, 600 s, leaves room for slow
            simulators and long batches; ``None`` waits forever. (A worker that dies or
            raises is reported at once, whatever the timeout.)
        **others: as :class:`~torchrl.collectors.SyncDataCollector` (``device``,
            ``storing_device`` (CPU only), ``env_device``, ``policy_device``,
            ``create_env_kwargs``, ``max_frames_per_traj``, ``init_random_frames``,
            ``reset_at_each_iter``, ``postproc``, ``split_trajs``, ``exploration_type``,
            ``reset_when_done``, ``update_at_each_batch``, ``set_truncated``, ``use_buffers``,
            ``replay_buffer``, ``trust_policy``).

    Examples:
        >>> from torchrl.collectors import MultiSyncDataCollector
        >>> from torchrl.envs import PendulumEnv
        >>> collector = MultiSyncDataCollector(
        ...     [PendulumEnv, PendulumEnv], frames_per_batch=20, total_frames=40
        ... )
        >>> [batch.batch_size for batch in collector]
        [torch.Size([2, 10]), torch.Size([2, 10])]
        >>> collector.shutdown()
    """

    _sync = True

    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yields batches until ``total_frames`` frames are collected."""
        self._check_open()
        n = self.num_workers
        threshold = (
            max(1, math.floor(self.preemptive_threshold * n))
            if self.preemptive_threshold is not None
            else None
        )
        while self.frames < self.total_frames:
            self._check_open()
            if self._stop_requested():
                return
            if self.update_at_each_batch:
                self.update_policy_weights_()
            for i in range(n):
                self._send(i, "collect")
            parts: list[TensorDictBase | None] = [None] * n
            waiting = list(range(n))
            finished = 0
            while waiting:
                i, kind, payload = self._next_message(waiting)
                if kind != "batch":
                    raise RuntimeError(f"{self._who(i)}: unexpected message {kind!r}")
                slot, steps, buffer = payload
                parts[i] = self._batch_view(i, slot, steps, buffer)
                waiting.remove(i)
                finished += 1
                if threshold is not None and finished >= threshold and waiting:
                    self._flag.set()
            self._flag.clear()
            chunks = [p for p in parts if p is not None and p.numel()]
            if self.replay_buffer is not None and self.postproc is None:
                for chunk in chunks:
                    extend_replay_buffer(self.replay_buffer, chunk)
                frames = sum(c.numel() for c in chunks)
                out = None
            else:
                if self.cat_results == "stack":
                    batch = cast(TensorDictBase, torch.stack(cast(Any, chunks), 0))
                else:
                    dim = cast(int, self.cat_results)
                    batch = cast(TensorDictBase, torch.cat(cast(Any, chunks), dim))
                frames = batch.numel()
                out = self._deliver(batch)
            self.frames += frames
            self._iter += 1
            yield out


class MultiaSyncDataCollector(_MultiDataCollector):
    """Runs one collector per worker process and returns each worker's batch when it is ready.

    Every batch holds one worker's ``frames_per_batch`` frames (batch ``[*env.batch_size, T]``).
    Workers keep collecting while the caller trains: each has two shared-memory buffers and
    fills one while the other is read. Batches may therefore be collected with weights one
    update old. Failures and shutdown behave as for :class:`MultiSyncDataCollector`, whose
    arguments this class takes (except ``preemptive_threshold`` and ``cat_results``).

    Examples:
        >>> from torchrl.collectors import MultiaSyncDataCollector
        >>> from torchrl.envs import PendulumEnv
        >>> collector = MultiaSyncDataCollector(
        ...     [PendulumEnv, PendulumEnv], frames_per_batch=10, total_frames=40
        ... )
        >>> sum(batch.numel() for batch in collector)
        40
        >>> collector.shutdown()
    """

    _sync = False

    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yields batches, in the order workers finish them, until ``total_frames`` frames."""
        self._check_open()
        while self.frames < self.total_frames:
            self._check_open()
            if self._stop_requested():
                return
            i, kind, payload = self._next_message()
            if kind != "batch":
                raise RuntimeError(f"{self._who(i)}: unexpected message {kind!r}")
            slot, steps, buffer = payload
            view = self._batch_view(i, slot, steps, buffer)
            if self.replay_buffer is not None and self.postproc is None:
                extend_replay_buffer(self.replay_buffer, view)
                batch = None
            else:
                batch = view.clone()
            self._send(i, "release", slot)
            self.frames += view.numel()
            self._iter += 1
            if self.update_at_each_batch:
                self.update_policy_weights_()
            yield self._deliver(batch) if batch is not None else None
