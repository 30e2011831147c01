"""``RPCCollector``: local collectors in worker processes, driven through ``torch.distributed.rpc``.

The trainer is RPC worker ``"trainer"`` (rank 0, it hosts the rendezvous store); worker ``i`` is
``"collector<i+1>"`` (rank ``i + 1``) and holds a :class:`~torchrl.collectors.distributed.WorkerCore`.
The trainer asks for batches with ``rpc_async`` and waits on the futures with a timeout while it
watches the worker processes, so a worker that dies or raises is an error naming it, not a hang.

Network exposure: RPC unpickles every message it receives, so whoever reaches an RPC agent runs
code in it. Everything here stays on this machine: the rendezvous store listens on ``127.0.0.1``,
TensorPipe uses its shared-memory transport only and the gloo group of the start binds to the
loopback interface (the helpers of :mod:`~torchrl.collectors.distributed.rpc_replay`).
"""

from __future__ import annotations

import math
import os
import queue
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import torch
from tensordict import TensorDictBase

from torchrl._processes import use_temp_dir, watch_parent, worker_temp_dir
from torchrl._types import ReplayBufferLike
from torchrl.collectors._base import DataCollectorBase, check_frames
from torchrl.collectors._options import RemoteCollectorOptions, WorkerOptions
from torchrl.collectors._policy import WeightsLike, copy_weights, named_weights
from torchrl.collectors._pool import WorkerError
from torchrl.collectors.distributed.generic import COLLECTOR_KEYWORDS, merge_collector_kwargs
from torchrl.collectors.distributed.rpc_replay import (
    RENDEZVOUS_SCHEME,
    free_loopback_port,
    gloo_on_loopback,
    rpc_backend_options,
    rpc_initialized,
)
from torchrl.collectors.distributed.utils import WorkerCore, policy_weights, worker_options
from torchrl.collectors.sync import (
    PolicyLike,
    SyncDataCollector,
    check_weight_sync_schemes,
    extend_replay_buffer,
)
from torchrl.collectors.utils import split_trajectories
from torchrl.weight_update import RPCTransport, RPCWeightSyncScheme, WeightSyncScheme

__all__ = ["RPCCollector", "RPCDataCollector"]

_TRAINER = "trainer"

# Worker side: this process's collector, and the event that ends it.
_CORE: dict[str, WorkerCore] = {}
_STOP = threading.Event()
# Trainer side: whether a collector already ran RPC in this process. A second start of RPC as
# rank 0 after a shutdown hangs in torch's gloo set-up (torch 2.13 checked), so it is refused.
_RAN = {"rpc": False}


# ----------------------------------------------------------------- functions run in workers
def _rpc_collect() -> tuple[TensorDictBase, int]:
    batch, frames = _CORE["core"].next_batch()
    if batch is None:
        raise RuntimeError(
            "RPCCollector: worker collectors must return batches (no replay_buffer in "
            "collector_kwargs)"
        )
    # a copy: the local collector refills its buffer at the next call
    return batch.clone(), frames


def _rpc_update(weights: dict[str, torch.Tensor], version: int | None = None) -> int:
    return _CORE["core"].update_weights(weights, version)


def _rpc_stop() -> None:
    _STOP.set()


def _rpc_worker_main(
    rank: int,
    world_size: int,
    init_method: str,
    rpc_timeout: float,
    collector_class: Callable[..., DataCollectorBase],
    create_env_fn: Any,
    policy: Any,
    options: WorkerOptions,
    create_env_kwargs: dict[str, Any] | None,
    num_threads: int | None,
    parent_pid: int,
    temp_dir: str,
    error_path: str,
    weight_sync_scheme: WeightSyncScheme | None = None,
) -> None:
    """A worker process: build the collector, join the group, serve until told to stop.

    A failure before joining is written to ``error_path`` for the trainer to report. The worker
    ends within a second of the trainer's death (:func:`torchrl._processes.watch_parent`).
    """
    from torch.distributed import rpc

    use_temp_dir(temp_dir)
    watch_parent(parent_pid, cleanup=(temp_dir,))
    try:
        _CORE["core"] = WorkerCore(
            collector_class,
            create_env_fn,
            policy,
            options,
            index=rank - 1,
            num_workers=world_size - 1,
            num_threads=num_threads,
            create_env_kwargs=create_env_kwargs,
            weight_sync_scheme=weight_sync_scheme,
        )
    except BaseException:
        with open(error_path, "w") as f:
            f.write(f"rank {rank} (pid {os.getpid()}):\n{traceback.format_exc()}")
        raise
    with gloo_on_loopback(True):
        rpc.init_rpc(
            f"collector{rank}",
            rank=rank,
            world_size=world_size,
            rpc_backend_options=rpc_backend_options(init_method, rpc_timeout, 4, True),
        )
    _STOP.wait()
    _CORE.pop("core").shutdown()
    # Not graceful: that would wait for every member of the static group to leave too.
    rpc.shutdown(graceful=False)


class RPCCollector(DataCollectorBase):
    """Collects with local collectors in worker processes driven by ``torch.distributed.rpc``.

    Each of ``num_workers`` spawned processes builds ``collector_class(create_env_fn, policy,
    **collector_kwargs)``; the trainer asks for batches with ``rpc_async``. With ``sync=True``
    every iteration gathers ``frames_per_batch / num_workers`` frames from every worker
    (concatenated along the first dim); with ``sync=False`` each worker collects
    ``frames_per_batch`` frames and batches are yielded as they arrive. The local collectors'
    keywords (``device``, ``max_frames_per_traj``, ``init_random_frames``, ...) may be given
    directly; ``split_trajs`` and ``postproc`` run here. A worker that dies or raises makes
    the iterator raise :class:`~torchrl.collectors.WorkerError` naming it (with its traceback
    when it left one); workers end with this process. RPC serves one group per process, and
    cannot start again in a process once shut down: one RPCCollector per process. Everything
    listens on loopback only (see the module).

    Args:
        create_env_fn: an env constructor (picklable), or one per worker.
        policy: the policy (each worker gets a copy), or ``None`` for random actions.
        frames_per_batch: frames in each delivered batch.
        total_frames: frames in all (``-1``: no end).
        collector_class: the local collector of each worker.
        collector_kwargs: its other keywords, or one dict per worker.
        num_workers_per_collector: must be 1 (give a worker a batched env instead).
        sync: gather from every worker per batch, or yield batches as they come.
        update_after_each_batch: (async) send the current weights to a worker after each of
            its batches.
        max_weight_update_interval: (async) send weights to a worker that delivered more than
            this many batches since its last update (``-1``: never).
        launcher: ``"mp"`` (local ``spawn`` processes; the only launcher here).
        tcp_port: the port of the rendezvous store on ``127.0.0.1`` (default: a free one).
        num_workers: how many workers (default: the length of the per-worker lists, else 2).
        postproc: applied to every delivered batch (after ``split_trajs``).
        split_trajs: split delivered batches into padded trajectories.
        replay_buffer: extend it with every batch; the iterator then yields ``None``.
        timeout: the longest wait, in seconds, for a worker (start-up or batch).
        num_threads: torch threads of each worker.
        weight_sync_schemes: ``{"policy": RPCWeightSyncScheme(...)}`` (the default); the
            collector sets both ends up. Its ``version`` counts the updates.
        weight_updater: a legacy ``RPCWeightUpdater``; :meth:`update_policy_weights_` then
            calls its ``push_weights``.
        **collector_keywords: ``device``, ``storing_device``, ``env_device``,
            ``policy_device``, ``max_frames_per_traj``, ``init_random_frames``,
            ``reset_at_each_iter``, ``exploration_type``, ``compile_policy``,
            ``cudagraph_policy`` (passed to every worker's collector).

    Examples:
        >>> from torchrl.collectors.distributed import RPCCollector
        >>> from torchrl.envs import PendulumEnv
        >>> collector = RPCCollector(
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
        collector_class: Callable[..., DataCollectorBase] = SyncDataCollector,
        collector_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        num_workers_per_collector: int = 1,
        sync: bool = False,
        update_after_each_batch: bool = False,
        max_weight_update_interval: int = -1,
        launcher: str = "mp",
        tcp_port: int | None = None,
        num_workers: int | None = None,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool = False,
        replay_buffer: ReplayBufferLike | None = None,
        timeout: float = 600.0,
        num_threads: int | None = 1,
        weight_sync_schemes: dict[str, WeightSyncScheme] | None = None,
        weight_updater: Any = None,
        **collector_keywords: Any,
    ) -> None:
        self._init_base()
        self._procs: list[Any] = []
        self._temp_dirs: list[str] = []
        self._joined = False
        name = type(self).__name__
        if launcher != "mp":
            raise ValueError(
                f"{name}: launcher={launcher!r} is not supported; RPCCollector starts local "
                "processes (launcher='mp'). For Slurm jobs use "
                "DistributedCollector(launcher='submitit')"
            )
        if num_workers_per_collector != 1:
            raise ValueError(
                f"{name}: num_workers_per_collector must be 1; give each worker a batched env "
                "or a multi-process collector_class instead"
            )
        unknown = sorted(set(collector_keywords) - set(COLLECTOR_KEYWORDS))
        if unknown:
            raise TypeError(f"{name}: unexpected keyword arguments {unknown}")
        given = {k: v for k, v in collector_keywords.items() if v != COLLECTOR_KEYWORDS[k]}
        if given:
            collector_kwargs = merge_collector_kwargs(name, collector_kwargs, given)
        if postproc is not None and not callable(postproc):
            raise TypeError(f"{name}: postproc must be callable, got {postproc!r}")
        self.weight_sync_schemes = check_weight_sync_schemes(weight_sync_schemes, name)
        scheme = self.weight_sync_schemes.setdefault("policy", RPCWeightSyncScheme(sync=False))
        if not isinstance(scheme, RPCWeightSyncScheme) or scheme.role is not None:
            raise ValueError(
                f"{name}: weight_sync_schemes['policy'] must be an RPCWeightSyncScheme not yet "
                f"initialised (the collector sets both ends up), got {scheme!r}"
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
        if _RAN["rpc"]:
            raise RuntimeError(
                f"{name}: an RPCCollector already ran torch.distributed.rpc in this process, and "
                "RPC cannot start again here once shut down (its set-up hangs): run each "
                "RPCCollector in a process of its own, or use DistributedCollector"
            )
        if rpc_initialized():
            raise RuntimeError(
                f"{name}: torch.distributed.rpc is already running in this process (one group "
                "per process); shut it down first"
            )
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
        self.policy = policy
        self.postproc = postproc
        self.split_trajs = bool(split_trajs)
        self.update_after_each_batch = opts.update_after_each_batch
        self.max_weight_update_interval = opts.max_weight_update_interval
        self.replay_buffer = opts.replay_buffer
        self.frames = 0
        env_fns = opts.per_worker(create_env_fn)
        workers = [
            worker_options(collector_class, kw) for kw in opts.worker_kwargs(collector_kwargs)
        ]
        self._stale = [False] * n
        self._since_update = [0] * n
        self._init_method = f"{RENDEZVOUS_SCHEME}://127.0.0.1:{tcp_port or free_loopback_port()}"
        try:
            self._launch(collector_class, env_fns, policy, workers, opts.num_threads)
            self._join()
            scheme.init_on_sender(
                policy if isinstance(policy, torch.nn.Module) else None,
                context=self,
                worker_names=[f"collector{i + 1}" for i in range(n)],
                receive_fn=_rpc_update,
            )
        except BaseException:
            self.shutdown()
            raise
        if weight_updater is not None:
            weight_updater.register_collector(self)

    # ------------------------------------------------------------------------------- launching
    def _launch(
        self,
        collector_class: Callable[..., DataCollectorBase],
        env_fns: list[Any],
        policy: PolicyLike | None,
        workers: list[tuple[WorkerOptions, dict[str, Any] | None]],
        num_threads: int | None,
    ) -> None:
        import multiprocessing as mp

        # (the workers' own temp dirs go with them: their tracebacks are written here)
        self._error_dir = tempfile.mkdtemp(prefix="torchrl_rpc_collector_")
        self._temp_dirs.append(self._error_dir)
        ctx = mp.get_context("spawn")
        world = self.num_workers + 1
        for i, (options, env_kwargs) in enumerate(workers):
            temp_dir = worker_temp_dir()
            self._temp_dirs.append(temp_dir)
            proc = ctx.Process(
                target=_rpc_worker_main,
                args=(
                    i + 1,
                    world,
                    self._init_method,
                    self.timeout,
                    collector_class,
                    env_fns[i],
                    policy,
                    options,
                    env_kwargs,
                    num_threads,
                    os.getpid(),
                    temp_dir,
                    os.path.join(self._error_dir, f"worker{i}.txt"),
                    self._policy_scheme.receiver_copy(),
                ),
                daemon=True,
                name=f"RPCCollector-{i}",
            )
            proc.start()
            self._procs.append(proc)

    def _join(self) -> None:
        """Joins the group in a helper thread (joining blocks until every worker is in) while
        watching the workers, so that one that fails to start is reported at once."""
        from torch.distributed import rpc

        options = rpc_backend_options(self._init_method, self.timeout, 8, True)
        error: list[BaseException] = []

        def join() -> None:
            try:
                with gloo_on_loopback(True):
                    rpc.init_rpc(
                        _TRAINER,
                        rank=0,
                        world_size=self.num_workers + 1,
                        rpc_backend_options=options,
                    )
            except BaseException as err:  # noqa: BLE001 - re-raised below
                error.append(err)

        _RAN["rpc"] = True
        thread = threading.Thread(target=join, daemon=True, name="RPCCollector-join")
        thread.start()
        deadline = time.monotonic() + self.timeout
        while thread.is_alive():
            thread.join(0.1)
            if thread.is_alive():
                self._check_workers("starting")
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"RPCCollector: the workers did not all start within {self.timeout:.0f} s"
                    )
        if error:
            raise RuntimeError(f"RPCCollector: could not join the RPC group: {error[0]}") from (
                error[0]
            )
        self._joined = True
        self.pids = [p.pid for p in self._procs]

    def _dead(self, i: int) -> str | None:
        proc = self._procs[i]
        if proc.is_alive():
            return None
        proc.join(1.0)
        why = f"exit code {proc.exitcode}"
        path = os.path.join(self._error_dir, f"worker{i}.txt")
        if os.path.exists(path):
            with open(path) as f:
                why += f"\n{f.read()}"
        else:
            why += (
                " (no traceback: it failed before building its collector, e.g. while "
                "unpickling its arguments; see its stderr)"
            )
        return why

    def _fail(self, i: int, why: str, what: str) -> None:
        raise WorkerError(
            f"RPCCollector: worker {i} (rank {i + 1}, pid {self._procs[i].pid}) died while "
            f"{what}: {why}"
        )

    def _check_workers(self, what: str, which: Sequence[int] | None = None) -> None:
        for i in range(self.num_workers) if which is None else which:
            why = self._dead(i)
            if why is not None:
                self._fail(i, why, what)

    # ------------------------------------------------------------------------------ iteration
    def _request(self, i: int, results: queue.SimpleQueue) -> None:
        from torch.distributed import rpc

        if self._stale[i]:
            self._send_weights([i])
        future = rpc.rpc_async(f"collector{i + 1}", _rpc_collect, timeout=self.timeout)
        future.add_done_callback(lambda f: results.put((i, f)))

    def _wait(
        self, results: queue.SimpleQueue, pending: set[int]
    ) -> tuple[int, TensorDictBase, int]:
        """The next batch of one of the ``pending`` workers (watching them while waiting)."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                i, future = results.get(timeout=0.25)
            except queue.Empty:
                self._check_workers("collecting", sorted(pending))
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"RPCCollector: workers {sorted(pending)} sent no batch within "
                        f"{self.timeout:.0f} s"
                    ) from None
                continue
            pending.discard(i)
            try:
                batch, frames = future.wait()
            except Exception as err:
                why = self._dead(i) or f"raised:\n{err}"
                raise WorkerError(
                    f"RPCCollector: worker {i} (rank {i + 1}, pid {self._procs[i].pid}) failed "
                    f"while collecting: {why}"
                ) from err
            self.frames += frames
            self._since_update[i] += 1
            return i, batch, frames

    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yields batches until ``total_frames`` frames are delivered."""
        self._check_open()
        n = self.num_workers
        results: queue.SimpleQueue = queue.SimpleQueue()
        if self.sync:
            while self.frames < self.total_frames and not self._stop_requested():
                waiting = set(range(n))
                for i in range(n):
                    self._request(i, results)
                parts: list[Any] = [None] * n
                while waiting:
                    i, batch, _ = self._wait(results, waiting)
                    parts[i] = batch
                yield self._deliver(cast(TensorDictBase, torch.cat(parts, 0)))
            return
        pending: set[int] = set()
        try:
            for i in range(n):
                self._request(i, results)
                pending.add(i)
            while self.frames < self.total_frames and not self._stop_requested():
                i, batch, _ = self._wait(results, pending)
                interval = self.max_weight_update_interval
                if self.update_after_each_batch or (0 <= interval < self._since_update[i]):
                    self._stale[i] = True
                if self.frames + len(pending) * self.frames_per_batch < self.total_frames:
                    self._request(i, results)
                    pending.add(i)
                yield self._deliver(batch)
        finally:
            # Batches under way are received and dropped, so that every worker ends idle.
            before = self.frames
            while pending:
                try:
                    self._wait(results, pending)
                except Exception:  # noqa: BLE001 - a dead worker is reported on the next use
                    break
            self.frames = before

    def _deliver(self, batch: TensorDictBase) -> TensorDictBase | None:
        if self.split_trajs:
            batch = split_trajectories(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
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
        scheme = self._policy_scheme
        for i in workers:
            scheme.connect(worker_idx=i, weights=weights)
        for i in workers:
            transport = scheme.transports[i]
            try:
                if isinstance(transport, RPCTransport):
                    transport.wait()
            except RuntimeError as err:
                self._fail(i, self._dead(i) or repr(err.__cause__ or err), "receiving weights")
            self._stale[i] = False
            self._since_update[i] = 0

    def update_policy_weights_(self, policy_or_weights: WeightsLike | None = None) -> None:
        """Sends the policy's current weights to the workers.

        With ``sync=True`` (workers idle between batches) they are sent at once; with
        ``sync=False`` each worker receives them before its next batch request.

        Args:
            policy_or_weights: weights to load into the policy first (default: the policy's
                current weights).
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
        # the version moves now; the weights travel now (sync) or before each worker's next
        # batch (async)
        self._policy_scheme.send({}, worker_ids=[])
        if self.sync:
            self._send_weights(range(self.num_workers))
        else:
            self._stale = [True] * self.num_workers
        if updater is not None:
            updater.run_post_hooks()

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Not supported remotely: seed the envs in ``create_env_fn``."""
        raise NotImplementedError("RPCCollector.set_seed: seed the envs inside create_env_fn")

    def state_dict(self) -> dict[str, Any]:
        """The frame count (worker states stay in the workers)."""
        return {"frames": self.frames}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads the frame count of a :meth:`state_dict`."""
        self.frames = int(state_dict.get("frames", self.frames))

    # ------------------------------------------------------------------------------ shut down
    def shutdown(self, timeout: float = 10.0) -> None:
        """Stops the workers (killing those that do not stop) and leaves RPC (idempotent)."""
        if getattr(self, "_closed", True) and not getattr(self, "_procs", None):
            return
        self._closed = True
        procs, self._procs = self._procs, []
        if self._joined:
            from torch.distributed import rpc

            for i, proc in enumerate(procs):
                if proc.is_alive():
                    try:
                        rpc.rpc_sync(f"collector{i + 1}", _rpc_stop, timeout=2.0)
                    except Exception:  # noqa: BLE001 - a worker that is gone needs no stop
                        pass
            self._joined = False
            rpc.shutdown(graceful=False)
        deadline = time.monotonic() + timeout
        for proc in procs:
            proc.join(max(deadline - time.monotonic(), 0.1))
            if proc.is_alive():
                proc.kill()
                proc.join(5.0)
        for path in self._temp_dirs:
            shutil.rmtree(path, ignore_errors=True)
        self._temp_dirs = []

    def __del__(self) -> None:
        try:
            if getattr(self, "_procs", None):
                self.shutdown(timeout=1.0)
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass

    def __repr__(self) -> str:
        total = self.total_frames if self.total_frames != math.inf else -1
        return (
            f"RPCCollector(num_workers={self.num_workers}, sync={self.sync}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={total})"
        )


#: The paper-era name of :class:`RPCCollector` (equal, no warning).
RPCDataCollector = RPCCollector
