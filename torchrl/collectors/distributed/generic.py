"""``DistributedDataCollector``: collector workers launched by submitit (Slurm) or as processes.

The trainer is rank 0 of a gloo group of its own (not torch's default group); worker ``i`` is
rank ``i + 1`` and runs a local collector. Small messages (a worker's batch layout, its pid, its
traceback when it fails) go through the group's ``TCPStore`` as JSON or text signed with
HMAC-SHA256 under a random per-run key that workers receive with their launch arguments, never
through the store; nothing read from the network is unpickled. Batches travel point to point
into buffers the trainer preallocated from the layout, one ``recv`` per leaf. The store and the
gloo devices listen on the address given as ``host`` (loopback by default). The trainer never
blocks on a worker without watching it: it polls the pending receives together with the worker's
process or job state, so that a dead worker becomes an error naming it.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import math
import os
import pickle
import queue
import secrets
import shutil
import socket
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, cast

import torch
import torch.distributed as dist
from tensordict import TensorDict, TensorDictBase

from torchrl._processes import (
    PARENT_POLL_S,
    exit_worker,
    parent_gone,
    use_temp_dir,
    watch_parent,
    worker_temp_dir,
)
from torchrl._types import ReplayBufferLike
from torchrl._utils import import_optional
from torchrl.collectors._base import DataCollectorBase, check_frames
from torchrl.collectors._options import RemoteCollectorOptions, WorkerOptions
from torchrl.collectors._policy import WeightsLike, copy_weights, named_weights
from torchrl.collectors._pool import WorkerError
from torchrl.collectors.distributed.utils import (
    WorkerCore,
    listening_store,
    policy_weights,
    sign_entry,
    verify_entry,
    worker_options,
)
from torchrl.collectors.sync import (
    PolicyLike,
    SyncDataCollector,
    check_weight_sync_schemes,
    extend_replay_buffer,
)
from torchrl.collectors.utils import split_trajectories
from torchrl.weight_update import (
    DistributedTransport,
    DistributedWeightSyncScheme,
    WeightSyncScheme,
)

__all__ = [
    "DELAYED_FOLDER_ENV",
    "DistributedCollector",
    "DistributedDataCollector",
    "DistributedSyncCollector",
    "DistributedSyncDataCollector",
    "submitit_delayed_launcher",
]

_COLLECT, _WEIGHTS, _STOP = 1, 2, 3

#: Set in the main job of :class:`submitit_delayed_launcher`: the folder where the collector
#: hands the workers' launch arguments to the waiting collection jobs.
DELAYED_FOLDER_ENV = "TORCHRL_DELAYED_FOLDER"
#: Set there too: how many collection jobs wait, and the rendezvous port to use.
DELAYED_JOBS_ENV = "TORCHRL_DELAYED_JOBS"
DELAYED_PORT_ENV = "TORCHRL_DELAYED_TCP_PORT"
_LAUNCH_FILE = "launch.pkl"
_OK, _FAILED = 0, 1


def _key_list(td: TensorDictBase) -> list[tuple[str, ...]]:
    return sorted(k if isinstance(k, tuple) else (k,) for k in td.keys(True, True))


def _gloo_group(store: dist.Store, rank: int, size: int, address: str, timeout: timedelta) -> Any:
    """A gloo group whose device listens on ``address`` (gloo's default device binds to
    whatever the hostname resolves to, often a public interface)."""
    try:
        # Private fields of torch's gloo options: the only way to pick the device's address
        # besides the process-wide GLOO_SOCKET_IFNAME.
        gloo = cast(Any, dist.ProcessGroupGloo)
        options = gloo._Options()
        options._devices = [gloo.create_device(hostname=address)]
        options._timeout = timeout
    except AttributeError as err:
        raise RuntimeError(
            "DistributedDataCollector: this torch version does not let the gloo device be "
            f"bound to {address!r} (ProcessGroupGloo._Options); refusing to listen on the "
            "address gloo would pick by itself"
        ) from err
    return gloo(dist.PrefixStore("torchrl_gloo/", store), rank, size, options)


def _local_address(host: str, port: int) -> str:
    """The address of this machine that reaches ``host`` (``host`` itself on loopback)."""
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass  # a host name
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    # Connecting a UDP socket sends nothing: it only asks the kernel for the route's source.
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect(address)
        return str(probe.getsockname()[0])


def _encode_layout(batch: TensorDictBase, keys: list[tuple[str, ...]]) -> bytes:
    leaves = []
    for k in keys:
        leaf = batch.get(k)
        leaves.append([list(k), list(leaf.shape), str(leaf.dtype).removeprefix("torch.")])
    layout = {"batch_size": list(batch.batch_size), "leaves": leaves, "pid": os.getpid()}
    return json.dumps(layout).encode()


def _decode_layout(payload: bytes, who: str) -> dict[str, Any]:
    """A layout from JSON, checked field by field (it came over the network)."""
    try:
        raw = json.loads(payload)
        leaves = []
        for key, shape, dtype_name in raw["leaves"]:
            dtype = getattr(torch, str(dtype_name), None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"unknown dtype {dtype_name!r}")
            leaves.append((tuple(str(p) for p in key), tuple(int(d) for d in shape), dtype))
        return {
            "batch_size": tuple(int(d) for d in raw["batch_size"]),
            "leaves": leaves,
            "pid": int(raw["pid"]),
        }
    except (ValueError, TypeError, KeyError) as err:
        raise RuntimeError(f"{who}: malformed batch layout: {err}") from err


def _run_worker(
    rank: int,
    world_size: int,
    host: str,
    port: int,
    backend: str,
    timeout_s: float,
    collector_class: Callable[..., DataCollectorBase],
    create_env_fn: Any,
    policy: Any,
    options: WorkerOptions,
    create_env_kwargs: dict[str, Any] | None,
    num_threads: int | None,
    key: bytes,
    weight_sync_scheme: WeightSyncScheme | None = None,
    parent_pid: int | None = None,
    temp_dir: str | None = None,
    cleanup: tuple[str, ...] = (),
) -> None:
    """The worker side: build the collector, report its layout, then serve commands.

    ``key`` signs what this worker writes into the store; it comes with the launch arguments
    (a ``spawn`` pipe, or submitit's job file in its private folder). ``parent_pid``: the
    trainer's pid when it runs on this machine; the worker then ends within a second of the
    trainer's death, whatever it is doing (idle on its socket or inside an env step; see
    :func:`torchrl._processes.watch_parent`), and removes ``temp_dir`` (its multiprocessing
    temp dir, made by the trainer) and the ``cleanup`` paths. Every error it reports names
    its rank and pid. New weights come through ``weight_sync_scheme`` (the receiver side of
    the trainer's :class:`~torchrl.weight_update.DistributedWeightSyncScheme`) over the group.
    """
    if temp_dir is not None:
        use_temp_dir(temp_dir)
    if parent_pid is not None:
        watch_parent(parent_pid, cleanup=(*cleanup, *((temp_dir,) if temp_dir else ())))
    who = f"DistributedDataCollector worker rank {rank} (pid {os.getpid()})"
    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    # The pid first: a failure before the layout is sent still names this process.
    store.set(f"pid{rank}", cast(Any, sign_entry(key, f"pid{rank}", str(os.getpid()).encode())))
    core = None
    try:
        core = WorkerCore(
            collector_class,
            create_env_fn,
            policy,
            options,
            index=rank - 1,
            num_workers=world_size - 1,
            num_threads=num_threads,
            create_env_kwargs=create_env_kwargs,
        )
        # The first batch tells the trainer the layout; it is also the first batch sent.
        batch, frames = core.next_batch()
        if batch is None:
            raise RuntimeError(
                "DistributedDataCollector: worker collectors must return batches "
                "(no replay_buffer in collector_kwargs)"
            )
        keys = _key_list(batch)
        name = f"layout{rank}"
        store.set(name, cast(Any, sign_entry(key, name, _encode_layout(batch, keys))))
        group = _gloo_group(store, rank, world_size, _local_address(host, port), timeout)
        core.use_weight_sync_scheme(
            weight_sync_scheme or DistributedWeightSyncScheme(), group=group, src=0
        )
        cmd = torch.zeros(2, dtype=torch.int64)
        pending: TensorDictBase | None = batch
        while True:
            group.recv([cmd], 0, 0).wait()
            op = int(cmd[0])
            if op == _STOP:
                break
            if op == _COLLECT:
                if pending is None:
                    pending, frames = core.next_batch()
                out = cast(TensorDictBase, pending)
                group.send([torch.tensor([_OK, frames], dtype=torch.int64)], 0, 0).wait()
                for k in keys:
                    group.send([out.get(k).contiguous()], 0, 0).wait()
                pending = None
            elif op == _WEIGHTS:
                core.update_weights()  # pulls header and tensors from the group
    except BaseException as err:
        name = f"error{rank}"
        text = f"{who} failed:\n{traceback.format_exc()}"
        if not parent_gone():
            try:
                store.set(name, cast(Any, sign_entry(key, name, text.encode())))
            except Exception:  # noqa: BLE001 - the trainer is unreachable
                pass
        # A dead trainer closes its sockets before this process learns that it is gone: the
        # error may be its closed connection (and a store ``set`` to a dead peer may still
        # succeed). Then nobody is left to tell, and the process ends quietly.
        if parent_pid is not None and _parent_goes(2 * PARENT_POLL_S):
            return  # (the finally clause ends the process)
        if isinstance(err, Exception):
            raise RuntimeError(f"{who} failed: {err!r}") from err
        raise
    finally:
        if core is not None:
            core.shutdown()
        if parent_gone():
            for path in cleanup:  # (exit_worker removes temp_dir)
                shutil.rmtree(path, ignore_errors=True)
            exit_worker(1)  # now, rather than after the interpreter's teardown


def _parent_goes(within: float) -> bool:
    """Whether the parent this worker watches is gone, or goes within ``within`` seconds."""
    deadline = time.monotonic() + within
    while not parent_gone():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


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
    traceback when it had one), and no wait lasts longer than ``timeout``. Every worker error
    names the worker's index, rank and pid.

    Workers on this machine (``launcher="mp"``, or submitit's ``"local"`` cluster) end by
    themselves within a second of this process's death, SIGKILL included, whether idle or
    inside an env step (see :func:`torchrl._processes.watch_parent`); an ``"mp"`` worker's
    temp dir and a submitit folder made here are removed. A Slurm job cannot watch this
    process: it fails at its next message to the trainer, or after ``timeout``.

    Network exposure: the rendezvous store and the gloo devices listen on ``host`` only
    (``127.0.0.1`` by default, so only processes of this machine can connect). Store messages
    are JSON or text signed with HMAC-SHA256 under a random key made for each collector and
    given to the workers with their launch arguments (with submitit, inside the job folder:
    keep it private); an unsigned entry raises a ``RuntimeError`` and is never decoded.
    Batches and weights are raw tensors received into preallocated buffers, never unpickled
    (weights through a :class:`~torchrl.weight_update.DistributedWeightSyncScheme`).
    A process that can reach ``host`` can still disturb a run (fail it, or feed it wrong
    tensors); see ``docs/scaling_out.rst``.

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
        launcher: ``"submitit"``, ``"mp"``, or ``"submitit_delayed"`` inside the main job of
            :class:`submitit_delayed_launcher` (its collection jobs are the workers).
        slurm_kwargs: parameters of the submitit executor (``cluster`` picks the executor, the
            rest go to ``update_parameters``: ``timeout_min``, ``slurm_partition``, ...).
        tcp_port: the port of the rendezvous store on ``host`` (default: a free one).
        backend: the ``torch.distributed`` backend. Only ``"gloo"`` is supported: batches and
            weights travel through CPU buffers.
        update_after_each_batch: (async) push current weights to a worker after each batch.
        max_weight_update_interval: (async) push weights to a worker that delivered more than
            this many batches since its last update (``-1``: never).
        replay_buffer: extend it with every batch; the iterator then yields ``None``.
        timeout: the longest wait, in seconds, for any worker message.
        num_threads: torch threads in each worker.
        host: the address this process listens on (store and gloo) and workers connect to.
            Keep the default (loopback) when the workers run on this machine; on a cluster
            give the address of the interface the jobs reach (e.g. ``"10.0.0.12"``), which
            exposes the ports to that network. ``"0.0.0.0"`` listens on every interface.
        weight_sync_schemes: ``{"policy": DistributedWeightSyncScheme()}`` (the default); the
            collector sets both ends up over its group. Its ``version`` counts the updates.
        weight_updater: a legacy ``DistributedWeightUpdater``; :meth:`update_policy_weights_`
            then calls its ``push_weights``.

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
        policy: PolicyLike | None = None,
        collector_class: Callable[..., DataCollectorBase] = SyncDataCollector,
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
        replay_buffer: ReplayBufferLike | None = None,
        timeout: float = 600.0,
        num_threads: int | None = 1,
        host: str = "127.0.0.1",
        weight_sync_schemes: dict[str, WeightSyncScheme] | None = None,
        weight_updater: Any = None,
    ) -> None:
        self._init_base()
        self._workers: list[Any] = []
        self._temp_dirs: list[str] = []
        self._joined = False
        self._group: Any = None
        name = type(self).__name__
        if launcher not in ("submitit", "mp", "submitit_delayed"):
            raise ValueError(
                f"{name}: launcher must be 'submitit', 'mp' or 'submitit_delayed', got {launcher!r}"
            )
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
        self.weight_sync_schemes = check_weight_sync_schemes(weight_sync_schemes, name)
        scheme = self.weight_sync_schemes.setdefault("policy", DistributedWeightSyncScheme())
        if not isinstance(scheme, DistributedWeightSyncScheme) or scheme.role is not None:
            raise ValueError(
                f"{name}: weight_sync_schemes['policy'] must be a DistributedWeightSyncScheme "
                f"not yet initialised (the collector sets both ends up), got {scheme!r}"
            )
        if weight_updater is not None and not callable(
            getattr(weight_updater, "push_weights", None)
        ):
            raise TypeError(
                f"{name}: weight_updater must be a WeightUpdaterBase (with push_weights), got "
                f"{type(weight_updater).__name__}"
            )
        self._policy_scheme = scheme
        self.weight_updater = weight_updater
        self.options = opts = RemoteCollectorOptions.build(
            name,
            workers_keyword="num_workers",
            num_workers=num_workers,
            per_worker=(create_env_fn, collector_kwargs),
            default_workers=2,
            sync=sync,
            frames_per_batch=frames_per_batch,
            total_frames=total_frames,
            update_after_each_batch=update_after_each_batch,
            max_weight_update_interval=max_weight_update_interval,
            replay_buffer=replay_buffer,
            timeout=timeout,
            num_threads=num_threads,
        )
        n = self.num_workers = opts.num_workers
        self.sync = opts.sync
        self.frames_per_batch, self.total_frames = check_frames(
            name, opts.frames_per_batch, opts.total_frames, 1
        )
        self.timeout = opts.timeout
        self.launcher = launcher
        self.policy = policy
        self.update_after_each_batch = opts.update_after_each_batch
        self.max_weight_update_interval = opts.max_weight_update_interval
        self.replay_buffer = opts.replay_buffer
        self.frames = 0
        env_fns = opts.per_worker(create_env_fn)
        # checked here, before any worker starts; each worker gets its options whole
        workers = [
            worker_options(collector_class, kw) for kw in opts.worker_kwargs(collector_kwargs)
        ]

        receiver = scheme.receiver_copy()
        payloads = [
            (collector_class, env_fns[i], policy, *workers[i], opts.num_threads) for i in range(n)
        ]
        self._start(host, tcp_port, backend, payloads, dict(slurm_kwargs or {}), receiver)
        self._stale = [False] * n
        self._since_update = [0] * n
        if weight_updater is not None:
            weight_updater.register_collector(self)

    # ------------------------------------------------------------------------------- launching
    def _start(
        self,
        host: str,
        tcp_port: int | None,
        backend: str,
        payloads: list[tuple[Any, ...]],
        slurm_kwargs: dict[str, Any],
        receiver: WeightSyncScheme | None = None,
    ) -> None:
        """Opens the rendezvous, launches the workers, reads their layouts, joins the group,
        sets the weight sync scheme up and starts one receiver thread per worker (everything
        is shut down on a failure)."""
        n = len(payloads)
        world = n + 1
        td = timedelta(seconds=self.timeout)
        if not tcp_port and self.launcher == "submitit_delayed":
            tcp_port = int(os.environ.get(DELAYED_PORT_ENV) or 0)
        self._store = listening_store(host, tcp_port or 0, world, td)
        port = self._store.port
        # Signs the store messages; travels with the launch arguments, never through the store.
        self._key = secrets.token_bytes(32)
        try:
            args = [
                (i + 1, world, host, port, backend, self.timeout, *payload, self._key, receiver)
                for i, payload in enumerate(payloads)
            ]
            self._launch(args, slurm_kwargs)
            layouts = [self._wait_layout(i) for i in range(n)]
            self.pids = [layout["pid"] for layout in layouts]
            self._group = _gloo_group(self._store, 0, world, host, td)
            self._joined = True
            # each send first tells the worker to receive weights
            self._policy_scheme.init_on_sender(
                self.policy if isinstance(self.policy, torch.nn.Module) else None,
                context=self,
                transports=[
                    DistributedTransport(
                        self._group, i + 1, preamble=functools.partial(self._command, i, _WEIGHTS)
                    )
                    for i in range(n)
                ],
            )
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

    def _launch(self, args: list[tuple[Any, ...]], slurm_kwargs: dict[str, Any]) -> None:
        """Starts the workers. Those on this machine (``"mp"``, submitit's ``"local"``
        cluster) watch this process and end with it; ``"mp"`` workers get a temp dir that
        :meth:`shutdown` removes however they ended."""
        if self.launcher == "submitit_delayed":
            _hand_over(args, type(self).__name__)
            return
        if self.launcher == "mp":
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            for a in args:
                temp_dir = worker_temp_dir()
                self._temp_dirs.append(temp_dir)
                proc = ctx.Process(
                    target=_run_worker, args=(*a, os.getpid(), temp_dir), daemon=True
                )
                proc.start()
                self._workers.append(proc)
            return
        submitit = import_optional("submitit", "submitit")
        folder = slurm_kwargs.pop("folder", None)
        if folder is None:
            # Ours (it holds the launch arguments, the key included): removed at shutdown.
            folder = tempfile.mkdtemp(prefix="torchrl_submitit_")
            self._temp_dirs.append(folder)
        cluster = slurm_kwargs.pop("cluster", None)
        executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
        slurm_kwargs.setdefault("timeout_min", 60)
        executor.update_parameters(**slurm_kwargs)
        # A local job runs on this machine (a child of this process or of submitit's
        # controller): it can watch this process. A Slurm job cannot; it fails at its next
        # message once the trainer is gone (or after ``timeout``).
        local = getattr(executor, "cluster", cluster) == "local"
        watch = (os.getpid(), None, tuple(self._temp_dirs)) if local else ()
        for a in args:
            self._workers.append(executor.submit(_run_worker, *a, *watch))

    def _pid(self, i: int) -> int | None:
        """Worker ``i``'s pid: from its layout, else from the store, else (mp) its process."""
        pids = getattr(self, "pids", None)
        if pids:
            return int(pids[i])
        name = f"pid{i + 1}"
        try:
            if self._store.check([name]):
                who = type(self).__name__
                return int(verify_entry(self._key, name, self._store.get(name), who).decode())
        except (RuntimeError, ValueError):
            pass
        if self.launcher == "mp" and i < len(self._workers):
            return self._workers[i].pid
        return None

    def _stored_error(self, i: int) -> str | None:
        """The traceback worker ``i`` left in the store, if any."""
        name = f"error{i + 1}"
        if not self._store.check([name]):
            return None
        message = self._store.get(name)
        return verify_entry(self._key, name, message, type(self).__name__).decode(errors="replace")

    def _dead(self, i: int) -> str | None:
        """Why worker ``i`` is gone (its traceback when it left one), or ``None`` if alive."""
        error = self._stored_error(i)
        if self.launcher == "submitit_delayed":
            # a job of the delayed launcher: no handle here, only what it reported
            return None if error is None else f"collection job failed\n{error}"
        worker = self._workers[i]
        mp = self.launcher == "mp"
        if error is None:
            running = worker.is_alive() if mp else not worker.done()
            if running:
                return None
            # A worker writes its traceback before it exits: one that ended between the first
            # look and the liveness check has it there now.
            error = self._stored_error(i)
        if mp:
            worker.join(1.0)
            code = worker.exitcode
            what = f"exit code {code}" if code is not None else "failed"
        else:
            what = f"job {worker.job_id}, state {worker.state}"
            if error is None:
                try:
                    exc = worker.exception()
                except Exception as err:  # noqa: BLE001 - the job's own failure, as text
                    exc = err
                error = str(exc) if exc is not None else None
        return f"{what}" + (f"\n{error}" if error else "")

    def _fail(self, i: int, why: str, what: str) -> None:
        pid = self._pid(i) or "unknown"
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
                    f"DistributedDataCollector: worker {i} (rank {i + 1}, pid "
                    f"{self._pid(i) or 'unknown'}) did not start within {self.timeout:.0f} s"
                )
            time.sleep(0.05)
        who = type(self).__name__
        return _decode_layout(verify_entry(self._key, key, self._store.get(key), who), who)

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
                self._group.recv([header], i + 1, 0).wait()
                for k in keys:
                    self._group.recv([buf.get(k)], i + 1, 0).wait()
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
                    late = ", ".join(
                        f"{i} (rank {i + 1}, pid {self._pid(i) or 'unknown'})"
                        for i in sorted(pending)
                    )
                    raise TimeoutError(
                        f"DistributedDataCollector: workers {late} sent no batch within "
                        f"{self.timeout:.0f} s"
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
            self._group.send([torch.tensor([op, arg], dtype=torch.int64)], i + 1, 0).wait()
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
    @property
    def policy_version(self) -> int:
        """The version of the latest weights (updates so far)."""
        return self._policy_scheme.version

    def _send_weights(self, workers: Sequence[int]) -> None:
        """Sends the policy's current weights, under the current version, to ``workers``."""
        weights = policy_weights(self.policy)
        for i in workers:
            try:
                self._policy_scheme.connect(worker_idx=i, weights=weights)
            except RuntimeError as err:
                self._fail(i, self._dead(i) or repr(err), "receiving weights")
            self._stale[i] = False
            self._since_update[i] = 0

    def update_policy_weights_(self, policy_or_weights: WeightsLike | None = None) -> None:
        """Sends the policy's current weights to the workers (and increments the version).

        With ``sync=True`` (workers idle between batches) every worker gets them at once;
        with ``sync=False`` each worker receives them before its next batch request.

        Args:
            policy_or_weights: a state dict of weights to load into the policy first (default:
                the policy's current weights).
        """
        self._check_open()
        updater = self.weight_updater
        if updater is not None:
            if updater.owns_scheme:
                updater.push_weights(policy_or_weights)
                self._policy_scheme.send({}, worker_ids=[])  # the version counts here too
                return
            policy_or_weights = updater.prepare_weights(policy_or_weights)
        if policy_or_weights is not None:
            copy_weights(named_weights(cast(Any, self.policy)), policy_or_weights)
        self._policy_scheme.send({}, worker_ids=[])  # the version moves now
        if self.sync:
            self._send_weights(range(self.num_workers))
        else:
            self._stale = [True] * self.num_workers
        if updater is not None:
            updater.run_post_hooks()

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
                threading.Thread(target=_send_stop, args=(self._group, i + 1), daemon=True)
                for i in range(self.num_workers)
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
        for path in self._temp_dirs:
            shutil.rmtree(path, ignore_errors=True)
        self._temp_dirs = []
        if self._joined:
            self._joined = False
            # The group closes its connections when the last reference (a receiver thread's,
            # until its worker is gone) goes.
            self._group = None

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


def _send_stop(group: Any, rank: int) -> None:
    try:
        group.send([torch.tensor([_STOP, 0], dtype=torch.int64)], rank, 0).wait()
    except Exception:  # noqa: BLE001 - a dead worker needs no STOP
        pass


def _allocate(layout: dict[str, Any]) -> TensorDictBase:
    out = TensorDict({}, batch_size=layout["batch_size"])
    for key, shape, dtype in layout["leaves"]:
        out.set(key, torch.empty(shape, dtype=dtype))
    return out


#: Keywords of the local collectors that :class:`DistributedCollector` also takes directly
#: (passed on to every worker's collector when given), with their "not given" values.
COLLECTOR_KEYWORDS: dict[str, Any] = {
    "device": None,
    "storing_device": None,
    "env_device": None,
    "policy_device": None,
    "max_frames_per_traj": -1,
    "init_random_frames": -1,
    "reset_at_each_iter": False,
    "exploration_type": None,
    "compile_policy": None,
    "cudagraph_policy": None,
}


class DistributedCollector(DistributedDataCollector):
    """TorchRL's current name and signature of :class:`DistributedDataCollector`.

    The local collectors' keywords may be given directly (``device``, ``storing_device``,
    ``env_device``, ``policy_device``, ``max_frames_per_traj``, ``init_random_frames``,
    ``reset_at_each_iter``, ``exploration_type``, ``compile_policy``, ``cudagraph_policy``):
    they are merged into every worker's ``collector_kwargs`` (each worker compiles its own
    policy). ``split_trajs`` and ``postproc`` run here, on the batches the
    workers deliver (whose layout is fixed). Workers are local ``spawn`` processes by default
    (``launcher="mp"``); ``launcher="submitit"`` submits them as jobs. Everything listens on
    ``host`` (loopback by default); a worker that dies or fails raises
    :class:`~torchrl.collectors.WorkerError` naming it, and local workers end with this
    process.

    Args:
        create_env_fn: an env constructor (picklable), or one per worker.
        policy: the policy (each worker gets a copy), or ``None`` for random actions.
        frames_per_batch: frames in each delivered batch.
        total_frames: frames in all (``-1``: no end).
        postproc: applied to every delivered batch (after ``split_trajs``).
        split_trajs: split delivered batches into padded trajectories.
        collector_class: the local collector of each worker.
        collector_kwargs: its other keywords, or one dict per worker.
        sync: gather one batch from every worker per iteration (``True``) or yield batches as
            they come (``False``).
        launcher: ``"mp"`` (local processes, the default) or ``"submitit"``.
        **kwargs: the local collectors' keywords listed above, and the other keywords of
            :class:`DistributedDataCollector` (``num_workers``, ``slurm_kwargs``,
            ``tcp_port``, ``backend``, ``host``, ``timeout``, ...).

    Examples:
        >>> from torchrl.collectors.distributed import DistributedCollector
        >>> from torchrl.envs import PendulumEnv
        >>> collector = DistributedCollector(
        ...     PendulumEnv, None, frames_per_batch=20, total_frames=40, num_workers=2, sync=True
        ... )  # doctest: +SKIP
        >>> [batch.numel() for batch in collector]  # doctest: +SKIP
        [20, 20]
        >>> collector.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        policy: PolicyLike | None = None,
        *,
        frames_per_batch: int,
        total_frames: int | None = -1,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool = False,
        collector_class: Callable[..., DataCollectorBase] = SyncDataCollector,
        collector_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        num_workers_per_collector: int = 1,
        sync: bool = False,
        launcher: str = "mp",
        **kwargs: Any,
    ) -> None:
        given = {
            k: kwargs.pop(k)
            for k in list(kwargs)
            if k in COLLECTOR_KEYWORDS and kwargs[k] != COLLECTOR_KEYWORDS[k]
        }
        for k in COLLECTOR_KEYWORDS:
            kwargs.pop(k, None)
        if given:
            collector_kwargs = merge_collector_kwargs(type(self).__name__, collector_kwargs, given)
        if postproc is not None and not callable(postproc):
            raise TypeError(f"{type(self).__name__}: postproc must be callable, got {postproc!r}")
        self.postproc = postproc
        self.split_trajs = bool(split_trajs)
        super().__init__(
            create_env_fn,
            policy,
            collector_class,
            collector_kwargs,
            num_workers_per_collector,
            sync,
            frames_per_batch=frames_per_batch,
            total_frames=total_frames,
            launcher=launcher,
            **kwargs,
        )

    def _deliver(self, batch: TensorDictBase) -> TensorDictBase | None:
        if self.split_trajs:
            batch = split_trajectories(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
        return super()._deliver(batch)


class DistributedSyncCollector(DistributedCollector):
    """A :class:`DistributedCollector` that gathers a share of every batch from every worker.

    Every iteration asks each worker for ``frames_per_batch / num_workers`` frames and
    concatenates them; workers are idle while the batch is used, so a batch always comes
    from the latest weights sent by :meth:`update_policy_weights_`.

    Args:
        create_env_fn: an env constructor (picklable), or one per worker.
        policy: the policy (each worker gets a copy), or ``None`` for random actions.
        **kwargs: the keywords of :class:`DistributedCollector` but ``sync``.

    Examples:
        >>> from torchrl.collectors.distributed import DistributedSyncCollector
        >>> from torchrl.envs import PendulumEnv
        >>> collector = DistributedSyncCollector(
        ...     PendulumEnv, None, frames_per_batch=20, total_frames=40, num_workers=2
        ... )  # doctest: +SKIP
        >>> [batch.numel() for batch in collector]  # doctest: +SKIP
        [20, 20]
        >>> collector.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        policy: PolicyLike | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.pop("sync", True) is not True:
            raise ValueError(
                "DistributedSyncCollector always collects with sync=True "
                "(use DistributedCollector(..., sync=False))"
            )
        super().__init__(create_env_fn, policy, sync=True, **kwargs)


def merge_collector_kwargs(
    name: str,
    collector_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None,
    given: dict[str, Any],
) -> dict[str, Any] | list[dict[str, Any]]:
    """``given`` added to the collector keywords (each worker's), refusing a double entry."""
    many = isinstance(collector_kwargs, Sequence) and not isinstance(collector_kwargs, Mapping)
    dicts: list[Mapping[str, Any] | None] = (
        list(cast(Sequence[dict[str, Any]], collector_kwargs))
        if many
        else [cast("dict[str, Any] | None", collector_kwargs)]
    )
    merged = []
    for kw in dicts:
        both = sorted(set(kw or {}) & set(given))
        if both:
            raise ValueError(f"{name}: {both} given both directly and in collector_kwargs")
        merged.append({**(kw or {}), **given})
    return merged if many else merged[0]


#: The paper-era name of :class:`DistributedSyncCollector` (equal, no warning).
DistributedSyncDataCollector = DistributedSyncCollector


# ------------------------------------------------------------------- delayed submitit launcher
def _hand_over(args: list[tuple[Any, ...]], who: str) -> None:
    """Main job side: writes each rank's launch arguments for the waiting collection jobs."""
    folder = os.environ.get(DELAYED_FOLDER_ENV)
    if not folder:
        raise RuntimeError(
            f"{who}(launcher='submitit_delayed') runs inside the main job of "
            f"submitit_delayed_launcher (which sets {DELAYED_FOLDER_ENV})"
        )
    expected = int(os.environ.get(DELAYED_JOBS_ENV) or len(args))
    if expected != len(args):
        raise ValueError(
            f"{who}: {len(args)} workers requested but submitit_delayed_launcher started "
            f"{expected} collection jobs"
        )
    path = os.path.join(folder, _LAUNCH_FILE)
    if os.path.exists(path):
        raise RuntimeError(f"{who}: {path} exists: one collector per delayed launch")
    # Written to a temporary name and renamed: a job never reads half a file.
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".launch-")
    with os.fdopen(fd, "wb") as f:
        pickle.dump(args, f)
    os.replace(tmp, path)


def _delayed_collection_job(folder: str, rank: int, timeout_s: float) -> None:
    """Collection job side: waits for the main job's launch arguments, then serves as a worker."""
    path = os.path.join(folder, _LAUNCH_FILE)
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"submitit_delayed_launcher: collection job {rank} got no launch arguments in "
                f"{folder} within {timeout_s:.0f} s (did the main job build a "
                "DistributedCollector(launcher='submitit_delayed')?)"
            )
        time.sleep(0.2)
    # The folder is private to this launch (made with mode 0700, like submitit's own job files,
    # which submitit unpickles the same way).
    with open(path, "rb") as f:
        args = pickle.load(f)
    if not 1 <= rank <= len(args):
        raise RuntimeError(
            f"submitit_delayed_launcher: collection job of rank {rank}, but the collector has "
            f"{len(args)} workers"
        )
    _run_worker(*args[rank - 1])


def _delayed_main(
    folder: str,
    num_jobs: int,
    tcpport: int | None,
    main_fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Main job side: runs the user's function where its collector finds the folder."""
    os.environ[DELAYED_FOLDER_ENV] = folder
    os.environ[DELAYED_JOBS_ENV] = str(num_jobs)
    if tcpport is not None:
        os.environ[DELAYED_PORT_ENV] = str(tcpport)
    return main_fn(*args, **kwargs)


class submitit_delayed_launcher:
    """Pre-launches collection jobs with submitit, for clusters where jobs cannot submit jobs.

    Decorates the training function: calling it submits ``num_jobs`` collection jobs, which
    wait, and one main job running the function. Inside it, a
    ``DistributedCollector(..., launcher="submitit_delayed", num_workers=num_jobs)`` hands
    each collection job its launch arguments through a private folder (mode 0700) and the
    jobs join it as its workers. The call returns the main job (``job.result()`` is the
    function's return value). The collector listens on its ``host``: on a real cluster, pass
    the main node's address there. The folder is kept for inspection; remove it afterwards.

    Args:
        num_jobs: the number of collection jobs (the collector's ``num_workers``).
        framework: ``"distributed"`` (:class:`DistributedCollector`); ``"rpc"`` is not
            supported here (:class:`~torchrl.collectors.distributed.RPCCollector` starts
            local processes only).
        backend: the ``torch.distributed`` backend; only ``"gloo"``.
        tcpport: the rendezvous port the main job's collector uses (default: a free one).
        submitit_main_conf: parameters of the main job's executor (``cluster`` picks the
            executor, e.g. ``"local"``; the rest go to ``update_parameters``).
        submitit_collection_conf: the same for the collection jobs.
        folder: where the submitit folder is made (default: the current directory).
        timeout: seconds a collection job waits for the main job's collector.

    Examples:
        >>> from torchrl.collectors.distributed import submitit_delayed_launcher
        >>> @submitit_delayed_launcher(num_jobs=2, submitit_main_conf={"cluster": "local"},
        ...                            submitit_collection_conf={"cluster": "local"})
        ... def main():
        ...     collector = DistributedCollector(make_env, None, frames_per_batch=20,
        ...                                      total_frames=100, num_workers=2,
        ...                                      launcher="submitit_delayed")
        ...     return sum(batch.numel() for batch in collector)
        >>> main().result()  # doctest: +SKIP
        100
    """

    def __init__(
        self,
        num_jobs: int,
        framework: str = "distributed",
        backend: str = "gloo",
        tcpport: int | str | None = None,
        submitit_main_conf: dict[str, Any] | None = None,
        submitit_collection_conf: dict[str, Any] | None = None,
        folder: str | None = None,
        timeout: float = 600.0,
    ) -> None:
        if isinstance(num_jobs, bool) or not isinstance(num_jobs, int) or num_jobs < 1:
            raise ValueError(
                f"submitit_delayed_launcher: num_jobs must be an int >= 1, got {num_jobs!r}"
            )
        if framework == "rpc":
            raise NotImplementedError(
                "submitit_delayed_launcher(framework='rpc'): RPCCollector runs local processes "
                "only here; use framework='distributed'"
            )
        if framework != "distributed":
            raise ValueError(
                f"submitit_delayed_launcher: framework must be 'distributed', got {framework!r}"
            )
        if backend != "gloo":
            raise ValueError(
                f"submitit_delayed_launcher: backend={backend!r} is not supported; use 'gloo'"
            )
        self.num_jobs = num_jobs
        self.framework = framework
        self.backend = backend
        self.tcpport = int(tcpport) if tcpport is not None else None
        self.submitit_main_conf = dict(submitit_main_conf or {"timeout_min": 10})
        self.submitit_collection_conf = dict(submitit_collection_conf or {"timeout_min": 10})
        self.folder = folder
        self.timeout = float(timeout)

    def _executor(self, submitit: Any, folder: str, conf: dict[str, Any]) -> Any:
        conf = dict(conf)
        executor = submitit.AutoExecutor(folder=folder, cluster=conf.pop("cluster", None))
        executor.update_parameters(**conf)
        return executor

    def __call__(self, main_fn: Callable[..., Any]) -> Callable[..., Any]:
        """Wraps ``main_fn``: calling the result submits the jobs and returns the main job.

        Args:
            main_fn: the training function (picklable: a module-level function).

        Returns:
            The launching function.
        """

        def launch(*args: Any, **kwargs: Any) -> Any:
            submitit = import_optional("submitit", "submitit")
            parent = self.folder if self.folder is not None else os.getcwd()
            folder = tempfile.mkdtemp(prefix="torchrl_delayed_", dir=parent)
            collection = self._executor(submitit, folder, self.submitit_collection_conf)
            self.collection_jobs = [
                collection.submit(_delayed_collection_job, folder, rank, self.timeout)
                for rank in range(1, self.num_jobs + 1)
            ]
            main = self._executor(submitit, folder, self.submitit_main_conf)
            return main.submit(
                _delayed_main, folder, self.num_jobs, self.tcpport, main_fn, args, kwargs
            )

        launch.__name__ = getattr(main_fn, "__name__", "launch")
        launch.__doc__ = getattr(main_fn, "__doc__", None)
        return launch
