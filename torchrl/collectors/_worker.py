"""The worker process of the multi-process collectors, and how its failures reach the parent.

A worker builds its env and a :class:`~torchrl.collectors.SyncDataCollector`, whose batch
buffers live in shared memory. It sends each buffer to the parent once (the pickle carries a
file descriptor, not the data); after that a batch is announced by a small message naming the
buffer and how many steps it holds. New weights arrive through the worker's receiver-side
:class:`~torchrl.weight_update.WeightSyncScheme`: by default the policy reads its weights
from shared-memory tensors that the parent updates in place
(:class:`~torchrl.weight_update.SharedMemWeightSyncScheme`); with
:class:`~torchrl.weight_update.MultiProcessWeightSyncScheme` they come as a ``"weights"``
message.

Messages from the parent: ``("collect", None)`` (sync mode), ``("release", slot)`` (async
mode: the parent is done reading a buffer), ``("seed", (seed, static))``, ``("state_dict",
None)``, ``("load_state_dict", sd)``, ``("update", None)``, ``("weights", (weights,
version))``, ``("reset", None)``, ``("close", None)``. Messages to the parent: ``("ready", info)``, ``("batch", (slot, steps, buffer or
None))``, ``("reply", value)``, ``("error", (exception or None, traceback text))``.
"""

from __future__ import annotations

import os
import pickle
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from torchrl._processes import exit_worker, parent_gone, use_temp_dir, watch_parent
from torchrl.collectors._options import CollectorOptions
from torchrl.collectors.sync import SyncDataCollector
from torchrl.weight_update import WeightSyncScheme

__all__ = ["RemoteTraceback", "SharedFlag", "WorkerSpec", "worker_main"]


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker process (chained as ``__cause__``).

    Examples:
        >>> from torchrl.collectors import MultiSyncDataCollector
        >>> from torchrl.envs import PendulumEnv
        >>> def failing_policy(td):
        ...     raise ValueError("bad action")
        >>> collector = MultiSyncDataCollector(
        ...     [PendulumEnv], failing_policy, frames_per_batch=4, total_frames=8
        ... )
        >>> try:
        ...     next(iter(collector))
        ... except ValueError as err:
        ...     remote = err.__cause__
        >>> isinstance(remote, RemoteTraceback), "bad action" in remote.text
        (True, True)
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


class SharedFlag:
    """A stop flag in shared memory, read by workers at every step (a byte read, no syscall).

    Passed as a collector's ``interruptor``: ``collection_stopped()`` is true while the parent
    has the flag raised (to preempt stragglers of a sync batch, or to shut down).
    """

    def __init__(self) -> None:
        self._tensor = torch.zeros(1, dtype=torch.uint8).share_memory_()
        self._array: np.ndarray | None = None
        self._array_pid = -1

    def _view(self) -> np.ndarray:
        if self._array is None or self._array_pid != os.getpid():
            self._array = self._tensor.numpy()
            self._array_pid = os.getpid()
        return self._array

    def set(self) -> None:
        self._view()[0] = 1

    def clear(self) -> None:
        self._view()[0] = 0

    def collection_stopped(self) -> bool:
        return bool(self._view()[0])

    def __getstate__(self) -> dict[str, Any]:
        return {"_tensor": self._tensor}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._tensor = state["_tensor"]
        self._array = None
        self._array_pid = -1


def send_error(conn: Connection, err: BaseException) -> None:
    text = traceback.format_exc()
    try:
        payload = pickle.dumps(err)
        pickle.loads(payload)
    except Exception:  # noqa: BLE001 - an exception that does not pickle travels as text only
        err = None  # type: ignore[assignment]
    try:
        conn.send(("error", (err, text)))
    except (OSError, ValueError):
        pass


def drain_pipe(conn: Connection) -> None:
    """Reads (and drops) what the parent sent that this exiting worker will not answer.

    A socket closed with unread data in it resets the connection: the parent's next read then
    fails with ``ConnectionResetError`` and loses the messages still in transit, such as the
    error this worker just sent.
    """
    try:
        while conn.poll():
            conn.recv()
    except (EOFError, OSError):
        pass


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker process needs to build and run its collector (pickled to it once).

    Args:
        index: the worker's index (its trajectory ids are ``k * num_workers + index``).
        num_workers: how many workers the collector runs.
        create_env_fn: an env or a callable returning one.
        create_env_kwargs: keyword arguments for ``create_env_fn``.
        policy: the policy (``None`` for random actions).
        scheme: the receiver side of the collector's ``"policy"`` weight sync scheme (not yet
            initialised; the worker calls ``init_on_receiver``).
        options: the options of the worker's ``SyncDataCollector`` (the stop flag is its
            ``interruptor``).
        num_threads: torch threads in the worker.
        num_slots: batch buffers (2 in async mode: one is filled while the parent reads one).
        sync: wait for a ``"collect"`` message before each batch (else collect continuously).
        seed: seeds the worker's torch generator (a forked worker would otherwise draw the
            same random numbers as its siblings).
    """

    index: int
    num_workers: int
    create_env_fn: Any
    create_env_kwargs: dict[str, Any] | None
    policy: Any
    scheme: WeightSyncScheme
    options: CollectorOptions
    num_threads: int
    num_slots: int
    sync: bool
    seed: int


def worker_main(
    conn: Connection,
    parent_pid: int,
    temp_dir: str | None,
    inherited: tuple[Connection, ...],
    spec: WorkerSpec,
) -> None:
    """Runs one collector in a worker process until the parent says ``"close"``.

    Args:
        conn: the worker's end of the pipe to the parent.
        parent_pid: the parent's pid: the worker ends within a second of its death, whatever
            it is doing (see :func:`torchrl._processes.watch_parent`).
        temp_dir: this worker's multiprocessing temp dir, made by the parent (which removes it
            if this worker is killed); removed by this worker when it exits.
        inherited: the parent's ends of pipes that a fork copied here; closed at once, so that
            the parent's death ends this worker's wait for a message (it then closes its env).
        spec: what to build and run.
    """
    if temp_dir is not None:
        use_temp_dir(temp_dir)
    watch_parent(parent_pid, cleanup=(temp_dir,) if temp_dir is not None else ())
    for other in inherited:
        other.close()
    torch.set_num_threads(spec.num_threads)
    torch.manual_seed(spec.seed)
    collector = None
    try:
        scheme = spec.scheme
        scheme.init_on_receiver(
            spec.policy if isinstance(spec.policy, torch.nn.Module) else None,
            worker_idx=spec.index,
        )
        collector = SyncDataCollector.from_options(
            spec.create_env_fn,
            spec.policy,
            spec.options,
            spec.create_env_kwargs,
            worker_index=spec.index,
            num_workers=spec.num_workers,
            shared_slots=spec.num_slots,
            weight_sync_schemes={"policy": scheme},
        )
        conn.send(("ready", {"pid": os.getpid(), "batch_size": tuple(collector.env.batch_size)}))
        _serve(conn, collector, spec)
    except (KeyboardInterrupt, BrokenPipeError, EOFError):
        pass
    except BaseException as err:  # noqa: BLE001 - every failure goes to the parent
        send_error(conn, err)
    finally:
        if collector is not None:
            try:
                collector.shutdown()
            except Exception:  # noqa: BLE001 - the parent already knows, or is gone
                pass
        drain_pipe(conn)
        conn.close()
        if parent_gone():
            exit_worker()  # now, rather than after the interpreter's teardown


def _serve(conn: Connection, collector: SyncDataCollector, spec: WorkerSpec) -> None:
    sent: set[int] = set()
    free = list(range(spec.num_slots))
    flag = spec.options.interruptor
    assert flag is not None
    sync = spec.sync
    while True:
        # Async mode collects whenever a buffer is free and no message waits; otherwise (sync
        # mode, every buffer in the parent's hands, or a raised stop flag) it blocks on the pipe.
        if not sync and free and not flag.collection_stopped() and not conn.poll():
            _collect(conn, collector, free.pop(0), sent)
            continue
        cmd, arg = conn.recv()
        if cmd == "close":
            return
        if cmd == "collect":
            _collect(conn, collector, 0, sent)
        elif cmd == "release":
            free.append(arg)
        else:
            conn.send(("reply", _command(collector, spec, cmd, arg)))


def _collect(conn: Connection, collector: SyncDataCollector, slot: int, sent: set[int]) -> None:
    buffers = collector.batch_buffers
    buffers.slot = slot
    batch = collector.rollout()
    steps = batch.batch_size[buffers.batch_dims] if batch.batch_dims else 0
    buffer = None
    if slot not in sent and buffers.allocated:
        buffer = buffers.batch(slot)
        sent.add(slot)
    collector.frames += batch.numel()
    conn.send(("batch", (slot, steps, buffer)))


def _command(collector: SyncDataCollector, spec: WorkerSpec, cmd: str, arg: Any) -> Any:
    if cmd == "seed":
        seed, static = arg
        # the policy's random draws follow the seed too, so that a seeded run repeats
        torch.manual_seed(seed)
        return collector.set_seed(seed, static_seed=static)
    if cmd == "state_dict":
        return collector.state_dict()
    if cmd == "load_state_dict":
        collector.load_state_dict(arg)
        return None
    if cmd == "update":
        # Weights on another device than the shared ones are copies: refresh them.
        spec.scheme.receive()
        return spec.scheme.version
    if cmd == "weights":
        weights, version = arg
        spec.scheme.receive(weights=weights, version=version)
        return spec.scheme.version
    if cmd == "reset":
        collector.reset()
        return None
    raise ValueError(f"collector worker: unknown command {cmd!r}")
