"""``DistributedDataCollector``: collector workers launched by submitit (Slurm) or as processes.

The trainer is rank 0 of a ``torch.distributed`` group (gloo over TCP by default); worker ``i``
is rank ``i + 1`` and runs a local collector. Small messages (a worker's batch layout, its pid,
its traceback when it fails) go through the group's ``TCPStore``; batches travel point to point
into buffers the trainer preallocated from the layout, one ``recv`` per leaf. The trainer never
blocks on a worker without watching it: it polls the pending receives together with the worker's
process or job state, so that a dead worker becomes an error naming it.
"""

from __future__ import annotations

import math
import os
import pickle
import queue
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any, cast

import torch
import torch.distributed as dist
from tensordict import TensorDict, TensorDictBase

from torchrl._utils import import_optional
from torchrl.collectors._base import DataCollectorBase, check_frames
from torchrl.collectors.distributed.utils import WorkerCore, policy_weights
from torchrl.collectors.multi import WorkerError
from torchrl.collectors.sync import SyncDataCollector, extend_replay_buffer

__all__ = ["DistributedDataCollector"]

_COLLECT, _WEIGHTS, _STOP = 1, 2, 3
_OK, _FAILED = 0, 1


def _key_list(td: TensorDictBase) -> list[tuple[str, ...]]:
    return sorted(k if isinstance(k, tuple) else (k,) for k in td.keys(True, True))


def _run_worker(
    rank: int,
    world_size: int,
    host: str,
    port: int,
    backend: str,
    timeout_s: float,
    collector_class: Callable[..., Any],
    create_env_fn: Any,
    policy: Any,
    collector_kwargs: dict[str, Any],
    num_threads: int | None,
) -> None:
    """The worker side: build the collector, report its layout, then serve commands."""
    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    core = None
    joined = False
    try:
        core = WorkerCore(
            collector_class,
            create_env_fn,
            policy,
            collector_kwargs,
            index=rank - 1,
            num_workers=world_size - 1,
            num_threads=num_threads,
        )
        # The first batch tells the trainer the layout; it is also the first batch sent.
        batch, frames = core.next_batch()
        if batch is None:
            raise RuntimeError(
                "DistributedDataCollector: worker collectors must return batches "
                "(no replay_buffer in collector_kwargs)"
            )
        keys = _key_list(batch)
        layout = {
            "batch_size": tuple(batch.batch_size),
            "leaves": [(k, tuple(batch.get(k).shape), batch.get(k).dtype) for k in keys],
            "pid": os.getpid(),
        }
        store.set(f"layout{rank}", cast(Any, pickle.dumps(layout)))
        dist.init_process_group(
            backend, store=store, rank=rank, world_size=world_size, timeout=timeout
        )
        joined = True
        names = sorted(policy_weights(policy))
        cmd = torch.zeros(2, dtype=torch.int64)
        pending: TensorDictBase | None = batch
        while True:
            dist.recv(cmd, src=0)
            op = int(cmd[0])
            if op == _STOP:
                break
            if op == _COLLECT:
                if pending is None:
                    pending, frames = core.next_batch()
                out = cast(TensorDictBase, pending)
                dist.send(torch.tensor([_OK, frames], dtype=torch.int64), dst=0)
                for k in keys:
                    dist.send(out.get(k).contiguous(), dst=0)
                pending = None
            elif op == _WEIGHTS:
                current = core.weights()
                for name in names:
                    if cmd[1] == 1:  # broadcast to every worker at once
                        dist.broadcast(current[name], src=0)
                    else:
                        dist.recv(current[name], src=0)
                core.update_weights(current)
    except BaseException:
        store.set(f"error{rank}", traceback.format_exc())
        raise
    finally:
        if core is not None:
            core.shutdown()
        if joined:
            dist.destroy_process_group()


class DistributedDataCollector(DataCollectorBase):
    """Collects with local collectors in workers started by submitit or multiprocessing.

    The trainer (this process) is rank 0 of a ``torch.distributed`` group; each of
    ``num_workers`` workers builds ``collector_class(create_env_fn, policy,
    **collector_kwargs)`` and sends its batches point to point into buffers preallocated here.
    With ``sync=True`` every iteration gathers one batch of ``frames_per_batch / num_workers``
    frames from every worker (concatenated along the first batch dim); with ``sync=False`` each
    worker collects ``frames_per_batch`` frames and the first batch ready is yielded. Trajectory
    ids are unique across workers (worker ``i`` of ``n`` writes ``id * n + i``).

    Workers are started with ``launcher="submitit"`` (a ``submitit.AutoExecutor``: Slurm on a
    cluster; ``slurm_kwargs={"cluster": "local"}`` runs them as local processes) or
    ``launcher="mp"`` (spawned processes). The trainer watches them while it waits: a worker
    that dies or fails raises :class:`~torchrl.collectors.WorkerError` naming it (with its
    traceback when it had one), and no wait lasts longer than ``timeout``.

    Args:
        create_env_fn: an env constructor (picklable), or one per worker.
        policy: the policy (each worker gets a copy), or ``None`` for random actions.
        collector_class: the local collector of each worker.
        collector_kwargs: its keyword arguments (``frames_per_batch``/``total_frames`` are set
            here), or one dict per worker.
        num_workers_per_collector: kept for TorchRL compatibility: envs per worker are chosen
            through ``create_env_fn``/``collector_class``; must be 1.
        sync: gather one batch from every worker per iteration, or yield batches as they come.
        frames_per_batch: frames in each delivered batch.
        total_frames: frames in all (``-1``: no end).
        num_workers: how many workers (default: the length of the per-worker lists, else 2).
        launcher: ``"submitit"`` or ``"mp"``.
        slurm_kwargs: parameters of the submitit executor (``cluster`` picks the executor, the
            rest go to ``update_parameters``: ``timeout_min``, ``slurm_partition``, ...).
        tcp_port: the port of the rendezvous store on this host (default: a free one).
        backend: the ``torch.distributed`` backend. Only ``"gloo"`` is supported: batches and
            weights travel through CPU buffers.
        update_after_each_batch: (async) push current weights to a worker after each batch.
        max_weight_update_interval: (async) push weights to a worker that delivered more than
            this many batches since its last update (``-1``: never).
        replay_buffer: extend it with every batch; the iterator then yields ``None``.
        timeout: the longest wait, in seconds, for any worker message.
        num_threads: torch threads in each worker.
        host: the address workers use to reach this process.

    Examples:
        >>> from torchrl.collectors.distributed import DistributedDataCollector
        >>> from torchrl.envs import PendulumEnv
        >>> collector = DistributedDataCollector(
        ...     PendulumEnv, None, num_workers=2, sync=True, launcher="mp",
        ...     frames_per_batch=20, total_frames=100,
        ... )  # doctest: +SKIP
        >>> [batch.numel() for batch in collector]  # doctest: +SKIP
        [20, 20, 20, 20, 20]
        >>> collector.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        policy: Callable[[TensorDictBase], TensorDictBase | None] | None = None,
        collector_class: Callable[..., Any] = SyncDataCollector,
        collector_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        num_workers_per_collector: int = 1,
        sync: bool = False,
        *,
        frames_per_batch: int,
        total_frames: int | None = -1,
        num_workers: int | None = None,
        launcher: str = "submitit",
        slurm_kwargs: dict[str, Any] | None = None,
        tcp_port: int | None = None,
        backend: str = "gloo",
        update_after_each_batch: bool = False,
        max_weight_update_interval: int = -1,
        replay_buffer: Any = None,
        timeout: float = 600.0,
        num_threads: int | None = 1,
        host: str = "127.0.0.1",
    ) -> None:
        self._init_base()
        self._workers: list[Any] = []
        self._joined = False
        name = type(self).__name__
        if launcher not in ("submitit", "mp"):
            raise ValueError(f"{name}: launcher must be 'submitit' or 'mp', got {launcher!r}")
        if backend != "gloo":
            raise ValueError(
                f"{name}: backend={backend!r} is not supported (batches travel through CPU "
                "buffers): use 'gloo'"
            )
        if num_workers_per_collector != 1:
            raise ValueError(
                f"{name}: num_workers_per_collector must be 1; give each worker a batched env "
                "or a multi-process collector_class instead"
            )
        if dist.is_initialized():
            raise RuntimeError(
                f"{name}: this process already has a torch.distributed default group; the "
                "collector needs its own (run it in a process without one)"
            )
        n = num_workers
        for arg in (create_env_fn, collector_kwargs):
            if isinstance(arg, Sequence) and not isinstance(arg, (str, dict)):
                n = len(arg) if n is None else n
                if len(arg) != n:
                    raise ValueError(f"{name}: {len(arg)} per-worker entries for {n} workers")
        n = 2 if n is None else int(n)
        if n < 1:
            raise ValueError(f"{name}: num_workers must be >= 1, got {n}")
        self.num_workers = n
        self.sync = bool(sync)
        if self.sync and frames_per_batch % n:
            raise ValueError(
                f"{name}: with sync=True, frames_per_batch ({frames_per_batch}) must be a "
                f"multiple of num_workers ({n})"
            )
        self.frames_per_batch, self.total_frames = check_frames(
            name, frames_per_batch, total_frames, 1
        )
        self.timeout = float(timeout)
        self.launcher = launcher
        self.policy = policy
        self.update_after_each_batch = bool(update_after_each_batch)
        self.max_weight_update_interval = int(max_weight_update_interval)
        self.replay_buffer = replay_buffer
        self.frames = 0
        worker_frames = frames_per_batch // n if self.sync else frames_per_batch
        env_fns = _per_worker(create_env_fn, n)
        kwargs_list = [dict(k or {}) for k in _per_worker(collector_kwargs, n)]
        for kw in kwargs_list:
            for key in ("frames_per_batch", "total_frames"):
                if key in kw:
                    raise ValueError(f"{name}: give {key} to {name}, not in collector_kwargs")
            kw["frames_per_batch"] = worker_frames

        world = n + 1
        td = timedelta(seconds=self.timeout)
        self._store = dist.TCPStore(
            host, tcp_port or 0, world, is_master=True, timeout=td, wait_for_workers=False
        )
        port = self._store.port
        try:
            args = [
                (
                    i + 1,
                    world,
                    host,
                    port,
                    backend,
                    self.timeout,
                    collector_class,
                    env_fns[i],
                    policy,
                    kwargs_list[i],
                    num_threads,
                )
                for i in range(n)
            ]
            self._launch(args, dict(slurm_kwargs or {}))
            layouts = [self._wait_layout(i) for i in range(n)]
            self.pids = [layout["pid"] for layout in layouts]
            dist.init_process_group(
                backend, store=self._store, rank=0, world_size=world, timeout=td
            )
            self._joined = True
            self._buffers = [_allocate(layout) for layout in layouts]
            self._requests: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(n)]
            self._results: queue.SimpleQueue = queue.SimpleQueue()
            self._threads = [
                threading.Thread(target=self._receiver, args=(i,), daemon=True) for i in range(n)
            ]
            for t in self._threads:
                t.start()
        except BaseException:
            self.shutdown()
            raise
        self._weight_names = sorted(policy_weights(policy))
        self._stale = [False] * n
        self._since_update = [0] * n

    # ------------------------------------------------------------------------------- launching
    def _launch(self, args: list[tuple[Any, ...]], slurm_kwargs: dict[str, Any]) -> None:
        if self.launcher == "mp":
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            for a in args:
                proc = ctx.Process(target=_run_worker, args=a, daemon=True)
                proc.start()
                self._workers.append(proc)
            return
        submitit = import_optional("submitit", "submitit")
        folder = slurm_kwargs.pop("folder", None) or tempfile.mkdtemp(prefix="torchrl_submitit_")
        cluster = slurm_kwargs.pop("cluster", None)
        executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
        slurm_kwargs.setdefault("timeout_min", 60)
        executor.update_parameters(**slurm_kwargs)
        for a in args:
            self._workers.append(executor.submit(_run_worker, *a))

    def _dead(self, i: int) -> str | None:
        """Why worker ``i`` is gone (its traceback when it left one), or ``None`` if alive."""
        error = None
        if self._store.check([f"error{i + 1}"]):
            error = self._store.get(f"error{i + 1}").decode()
        worker = self._workers[i]
        if self.launcher == "mp":
            if error is None and worker.is_alive():
                return None
            worker.join(1.0)
            code = worker.exitcode
            what = f"exit code {code}" if code is not None else "failed"
        else:
            if error is None and not worker.done():
                return None
            what = f"job {worker.job_id}, state {worker.state}"
            if error is None:
                try:
                    exc = worker.exception()
                except Exception as err:  # noqa: BLE001 - the job's own failure, as text
                    exc = err
                error = str(exc) if exc is not None else None
        return f"{what}" + (f"\n{error}" if error else "")

    def _fail(self, i: int, why: str, what: str) -> None:
        pid = self.pids[i] if getattr(self, "pids", None) else "?"
        raise WorkerError(
            f"DistributedDataCollector: worker {i} (rank {i + 1}, pid {pid}) died while "
            f"{what}: {why}"
        )

    def _wait_layout(self, i: int) -> dict[str, Any]:
        key = f"layout{i + 1}"
        deadline = time.monotonic() + self.timeout
        while not self._store.check([key]):
            why = self._dead(i)
            if why is not None:
                self._fail(i, why, "starting")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"DistributedDataCollector: worker {i} did not start within "
                    f"{self.timeout:.0f} s"
                )
            time.sleep(0.05)
        return pickle.loads(self._store.get(key))

    def _receiver(self, i: int) -> None:
        """Thread body: receives worker ``i``'s batches into its buffer, one per request.

        gloo's point-to-point work cannot be polled, so the blocking receives happen here and
        the trainer waits on a queue it can time out, while it watches the worker's process.
        """
        buf = self._buffers[i]
        keys = _key_list(buf)
        header = torch.zeros(2, dtype=torch.int64)
        while self._requests[i].get() is not None:
            try:
                dist.recv(header, src=i + 1)
                for k in keys:
                    dist.recv(buf.get(k), src=i + 1)
                self._results.put((i, int(header[1]), None))
            except BaseException as err:  # noqa: BLE001 - handed to the trainer
                self._results.put((i, 0, err))
                return

    def _collect(self, pending: set[int], first: bool) -> list[int]:
        """Waits for the batches of ``pending`` workers (all, or the ``first`` one)."""
        deadline = time.monotonic() + self.timeout
        done: list[int] = []
        while pending and not (first and done):
            try:
                i, frames, err = self._results.get(timeout=0.25)
            except queue.Empty:
                for i in sorted(pending):
                    why = self._dead(i)
                    if why is not None:
                        self._fail(i, why, "collecting")
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"DistributedDataCollector: workers {sorted(pending)} sent no batch "
                        f"within {self.timeout:.0f} s"
                    ) from None
                continue
            pending.discard(i)
            if err is not None:
                self._fail(i, self._dead(i) or repr(err), "sending a batch")
            self.frames += frames
            self._since_update[i] += 1
            done.append(i)
        return done

    def _command(self, i: int, op: int, arg: int = 0) -> None:
        try:
            dist.send(torch.tensor([op, arg], dtype=torch.int64), dst=i + 1)
        except RuntimeError as err:
            self._fail(i, self._dead(i) or repr(err), "receiving a command")

    # ------------------------------------------------------------------------------ iteration
    def _request(self, i: int) -> None:
        if self._stale[i]:
            self._send_weights([i])
        self._command(i, _COLLECT)
        self._requests[i].put(True)

    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yields batches until ``total_frames`` frames are delivered."""
        self._check_open()
        n = self.num_workers
        if self.sync:
            while self.frames < self.total_frames and not self._stop_requested():
                for i in range(n):
                    self._request(i)
                self._collect(set(range(n)), first=False)
                yield self._deliver(_cat(self._buffers))
            return
        pending: set[int] = set()
        try:
            for i in range(n):
                self._request(i)
                pending.add(i)
            while self.frames < self.total_frames and not self._stop_requested():
                i = self._collect(pending, first=True)[0]
                batch = self._buffers[i].clone()
                interval = self.max_weight_update_interval
                if self.update_after_each_batch or (0 <= interval < self._since_update[i]):
                    self._stale[i] = True
                if self.frames + len(pending) * self.frames_per_batch < self.total_frames:
                    self._request(i)
                    pending.add(i)
                yield self._deliver(batch)
        finally:
            # Batches under way are received and dropped, so that every worker ends idle.
            if pending:
                before = self.frames
                try:
                    self._collect(pending, first=False)
                except Exception:  # noqa: BLE001 - a dead worker is reported on the next use
                    pass
                self.frames = before

    def _deliver(self, batch: TensorDictBase) -> TensorDictBase | None:
        if self.replay_buffer is not None:
            extend_replay_buffer(self.replay_buffer, batch)
            return None
        return batch

    # --------------------------------------------------------------------------------- weights
    def _send_weights(self, workers: Sequence[int], broadcast: bool = False) -> None:
        weights = policy_weights(self.policy)
        if broadcast:
            for i in workers:
                self._command(i, _WEIGHTS, 1)
            for name in self._weight_names:
                dist.broadcast(weights[name], src=0)
        else:
            for i in workers:
                self._command(i, _WEIGHTS, 0)
                for name in self._weight_names:
                    dist.send(weights[name], dst=i + 1)
        for i in workers:
            self._stale[i] = False
            self._since_update[i] = 0

    def update_policy_weights_(self, policy_or_weights: Any = None) -> None:
        """Sends the policy's current weights to the workers.

        With ``sync=True`` (workers idle between batches) the weights are broadcast from rank 0
        at once; with ``sync=False`` each worker receives them before its next batch request.

        Args:
            policy_or_weights: a state dict of weights to load into the policy first (default:
                the policy's current weights).
        """
        self._check_open()
        if policy_or_weights is not None:
            from torchrl.collectors._policy import copy_weights, named_weights

            copy_weights(named_weights(cast(Any, self.policy)), policy_or_weights)
        if not self._weight_names:
            return
        if self.sync:
            self._send_weights(range(self.num_workers), broadcast=True)
        else:
            self._stale = [True] * self.num_workers

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Not supported remotely: seed the envs in ``create_env_fn``."""
        raise NotImplementedError(
            "DistributedDataCollector.set_seed: seed the envs inside create_env_fn"
        )

    def state_dict(self) -> dict[str, Any]:
        """The frame count (worker states stay in the workers)."""
        return {"frames": self.frames}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads the frame count of a :meth:`state_dict`."""
        self.frames = int(state_dict.get("frames", self.frames))

    # ------------------------------------------------------------------------------ shut down
    def shutdown(self, timeout: float = 10.0) -> None:
        """Stops the workers (killing those that do not stop) and leaves the process group."""
        if getattr(self, "_closed", True) and not getattr(self, "_workers", None):
            return
        self._closed = True
        workers, self._workers = self._workers, []
        if self._joined:
            for q in self._requests:
                q.put(None)
            # A STOP to a dead or busy worker could block: each is sent from its own thread.
            stops = [
                threading.Thread(target=_send_stop, args=(i + 1,), daemon=True)
                for i in range(len(workers))
            ]
            for t in stops:
                t.start()
            for t in stops:
                t.join(2.0)
        deadline = time.monotonic() + timeout
        for w in workers:
            if self.launcher == "mp":
                w.join(max(deadline - time.monotonic(), 0.1))
                if w.is_alive():
                    w.kill()
                    w.join(5.0)
            else:
                while not w.done() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not w.done():
                    w.cancel(check=False)
        if self._joined:
            self._joined = False
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - best effort
                pass

    def __del__(self) -> None:
        try:
            if getattr(self, "_workers", None):
                self.shutdown(timeout=1.0)
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass

    def __repr__(self) -> str:
        total = self.total_frames if self.total_frames != math.inf else -1
        return (
            f"{type(self).__name__}(num_workers={self.num_workers}, launcher={self.launcher!r}, "
            f"sync={self.sync}, frames_per_batch={self.frames_per_batch}, total_frames={total})"
        )


def _cat(parts: list[TensorDictBase]) -> TensorDictBase:
    return cast(TensorDictBase, torch.cat(cast(Any, parts), 0))


def _send_stop(rank: int) -> None:
    try:
        dist.send(torch.tensor([_STOP, 0], dtype=torch.int64), dst=rank)
    except Exception:  # noqa: BLE001 - a dead worker needs no STOP
        pass


def _allocate(layout: dict[str, Any]) -> TensorDictBase:
    out = TensorDict({}, batch_size=layout["batch_size"])
    for key, shape, dtype in layout["leaves"]:
        out.set(key, torch.empty(shape, dtype=dtype))
    return out


def _per_worker(arg: Any, n: int) -> list[Any]:
    if isinstance(arg, Sequence) and not isinstance(arg, (str, dict)):
        return list(arg)
    return [arg] * n
