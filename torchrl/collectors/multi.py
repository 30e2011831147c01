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
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._processes import default_start_method
from torchrl._types import DeviceLike, ReplayBufferLike
from torchrl._utils import warn_once
from torchrl.collectors._base import DataCollectorBase, check_frames
from torchrl.collectors._options import MultiCollectorOptions
from torchrl.collectors._policy import WeightsLike, device_of
from torchrl.collectors._pool import WAIT_SLICE_S, WorkerError, WorkerPool
from torchrl.collectors._worker import SharedFlag, WorkerSpec, worker_main
from torchrl.collectors.sync import PolicyLike, check_weight_sync_schemes, extend_replay_buffer
from torchrl.collectors.utils import split_trajectories
from torchrl.envs.common import EnvBase
from torchrl.envs.utils import ExplorationType
from torchrl.weight_update import (
    MultiProcessWeightSyncScheme,
    NoWeightSyncScheme,
    SharedMemWeightSyncScheme,
    WeightSyncScheme,
)

__all__ = [
    "MultiCollector",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
    "WorkerError",
    "aSyncDataCollector",
]


class MultiCollector(DataCollectorBase):
    """One collector per worker process: TorchRL's unified multi-process collector.

    ``MultiCollector(..., sync=True)`` builds a :class:`MultiSyncDataCollector` (every batch
    gathers a share from every worker) and ``sync=False`` a :class:`MultiaSyncDataCollector`
    (each worker's batch is returned when ready); the object is an instance of that class,
    and of this one. Both subclasses also accept ``sync``, which must then match them.

    Args:
        create_env_fn: one env constructor per worker (or one, with ``num_workers``).
        policy: the policy (``None``: random actions).
        sync: gather every worker's share per batch (``True``, the default) or deliver
            batches as workers finish them (``False``).
        **kwargs: the keywords of :class:`MultiSyncDataCollector` (``frames_per_batch``,
            ``total_frames``, ``num_workers``, ...).

    Examples:
        >>> from torchrl.collectors import MultiCollector, MultiaSyncDataCollector
        >>> from torchrl.envs import PendulumEnv
        >>> collector = MultiCollector(
        ...     [PendulumEnv, PendulumEnv], frames_per_batch=10, total_frames=20, sync=False
        ... )
        >>> isinstance(collector, MultiaSyncDataCollector)
        True
        >>> sum(batch.numel() for batch in collector)
        20
        >>> collector.shutdown()
    """

    _sync: bool = True

    def __new__(cls, *args: Any, sync: bool | None = None, **kwargs: Any) -> MultiCollector:
        # A plain dispatch on ``sync`` (no metaclass): ``MultiCollector(...)`` returns one of
        # the two concrete classes, whose ``__init__`` then runs with the same arguments.
        target: type[MultiCollector] = cls
        if cls is MultiCollector:
            if sync is None:
                sync = True
            if not isinstance(sync, bool):
                raise TypeError(f"MultiCollector: sync must be a bool, got {sync!r}")
            target = MultiSyncDataCollector if sync else MultiaSyncDataCollector
        return super().__new__(target)

    def __init__(
        self,
        create_env_fn: Sequence[Callable[..., EnvBase]] | Callable[..., EnvBase],
        policy: PolicyLike | None = None,
        *,
        sync: bool | None = None,
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
        replay_buffer: ReplayBufferLike | None = None,
        trust_policy: bool | None = None,
        cat_results: str | int | None = None,
        mp_start_method: str | None = None,
        timeout: float | None = 600.0,
        weight_sync_schemes: dict[str, WeightSyncScheme] | None = None,
        weight_updater: Any = None,
        track_policy_version: bool = False,
        compile_policy: bool | dict[str, Any] | None = None,
        cudagraph_policy: bool | dict[str, Any] | None = None,
    ) -> None:
        if sync is not None and sync != self._sync:
            raise ValueError(
                f"{type(self).__name__} collects with sync={self._sync}, got sync={sync!r} "
                "(use MultiCollector(..., sync=...) to choose)"
            )
        options = MultiCollectorOptions.from_kwargs(
            type(self).__name__,
            sync=self._sync,
            num_workers=num_workers,
            frames_per_batch=frames_per_batch,
            total_frames=total_frames,
            device=device,
            storing_device=storing_device,
            env_device=env_device,
            policy_device=policy_device,
            max_frames_per_traj=max_frames_per_traj,
            init_random_frames=init_random_frames,
            reset_at_each_iter=reset_at_each_iter,
            postproc=postproc,
            split_trajs=split_trajs,
            exploration_type=exploration_type,
            reset_when_done=reset_when_done,
            update_at_each_batch=update_at_each_batch,
            preemptive_threshold=preemptive_threshold,
            num_threads=num_threads,
            num_sub_threads=num_sub_threads,
            set_truncated=set_truncated,
            use_buffers=use_buffers,
            replay_buffer=replay_buffer,
            trust_policy=trust_policy,
            cat_results=cat_results,
            mp_start_method=mp_start_method,
            timeout=timeout,
            track_policy_version=track_policy_version,
            compile_policy=compile_policy,
            cudagraph_policy=cudagraph_policy,
        )
        self._setup(
            create_env_fn, policy, options, create_env_kwargs,
            weight_sync_schemes=weight_sync_schemes, weight_updater=weight_updater,
        )  # fmt: skip

    @classmethod
    def from_options(
        cls,
        create_env_fn: Sequence[Callable[..., EnvBase]] | Callable[..., EnvBase],
        policy: PolicyLike | None,
        options: MultiCollectorOptions,
        create_env_kwargs: Sequence[dict[str, Any]] | dict[str, Any] | None = None,
    ) -> MultiCollector:
        """Builds a collector from validated options (what Ray and distributed workers do).

        Args:
            create_env_fn: as for the constructor.
            policy: as for the constructor.
            options: the other keywords, validated (``options.sync`` must match the class).
            create_env_kwargs: as for the constructor.

        Returns:
            The collector.
        """
        if cls is MultiCollector:
            cls = MultiSyncDataCollector if options.sync else MultiaSyncDataCollector
        if options.sync != cls._sync:
            raise ValueError(f"{cls.__name__}.from_options: options built for sync={options.sync}")
        collector = object.__new__(cls)
        collector._setup(create_env_fn, policy, options, create_env_kwargs)
        return collector

    def _setup(
        self,
        create_env_fn: Sequence[Callable[..., EnvBase]] | Callable[..., EnvBase],
        policy: PolicyLike | None,
        options: MultiCollectorOptions,
        create_env_kwargs: Sequence[dict[str, Any]] | dict[str, Any] | None,
        weight_sync_schemes: dict[str, WeightSyncScheme] | None = None,
        weight_updater: Any = None,
    ) -> None:
        self._init_base()
        self.options = options
        name = options.owner
        local = options.collector
        fns, kwargs = _env_constructors(create_env_fn, create_env_kwargs, options.num_workers, name)
        n = len(fns)
        self.num_workers = n
        self.timeout = options.timeout
        self.cat_results = options.cat_results
        self.preemptive_threshold = options.preemptive_threshold
        self.update_at_each_batch = options.update_at_each_batch
        self.postproc = local.postproc
        self.split_trajs = bool(local.split_trajs)
        self.replay_buffer = local.replay_buffer
        self.exploration_type = local.exploration_type
        if options.num_threads is not None:
            torch.set_num_threads(options.num_threads)

        requested = local.frames_per_batch
        per_worker = -(-requested // n) if self._sync else requested
        self._flag = SharedFlag()
        worker_options = options.worker_options(
            per_worker, -(-cast(int, local.init_random_frames) // n), self._flag
        )
        self._policy = policy
        scheme = self._init_weight_sync(weight_sync_schemes, weight_updater, policy)
        module = policy if isinstance(policy, nn.Module) else None
        dev = local.policy_device or local.device
        if local.cudagraph_policy is not None:
            runs_on = dev or device_of(policy)
            if runs_on is None or torch.device(runs_on).type != "cuda":
                raise ValueError(
                    f"{name}: cudagraph_policy needs the policy on a CUDA device, but the workers "
                    f"run it on {runs_on or 'the CPU'}; pass policy_device='cuda' (or a CUDA "
                    "policy)"
                )
        self._update_by_message = bool(
            isinstance(scheme, SharedMemWeightSyncScheme)
            and module is not None
            and _has_weights(module)
            and (
                (dev is not None and torch.device(dev).type != "cpu")
                or (device_of(policy) or torch.device("cpu")).type != "cpu"
            )
        )
        # Drawn from torch's generator, so that torch.manual_seed makes the workers repeatable.
        base_seed = int(torch.randint(0, 2**31 - 1, ()))
        specs = [
            WorkerSpec(
                index=i,
                num_workers=n,
                create_env_fn=fns[i],
                create_env_kwargs=kwargs[i],
                policy=policy,
                scheme=scheme.receiver_copy(),
                options=worker_options,
                num_threads=options.num_sub_threads,
                num_slots=1 if self._sync else 2,
                sync=self._sync,
                seed=base_seed + 7919 * i,
            )
            for i in range(n)
        ]
        self._pool = WorkerPool(
            name,
            options.mp_start_method or default_start_method(),
            worker_main,
            specs,
            self._flag,
            self._bg_stop,
            self.timeout,
        )
        if isinstance(scheme, MultiProcessWeightSyncScheme) and scheme.role is None:
            scheme.init_on_sender(
                module,
                context=self,
                transports=[_PoolTransport(self._pool, i) for i in range(n)],
            )
        infos = [self._pool.expect(i, "ready") for i in range(n)]
        sizes = [math.prod(info["batch_size"]) for info in infos]
        self._worker_frames = [-(-per_worker // s) * s for s in sizes]
        batch_frames = sum(self._worker_frames) if self._sync else self._worker_frames[0]
        if self._sync and batch_frames != requested:
            warn_once(f"{name}: frames_per_batch={requested} is collected as {batch_frames} frames")
        self.frames_per_batch, self.total_frames = check_frames(
            name, batch_frames, local.total_frames, 1
        )
        if (
            self._sync
            and self.cat_results == "stack"
            and len(set(map(tuple, (i["batch_size"] for i in infos)))) > 1
        ):
            self.shutdown()
            raise ValueError(
                f"{name}: workers' envs have different batch sizes; use cat_results=-1"
            )
        self.frames = 0
        self._iter = 0

    # ------------------------------------------------------------------------------- workers
    @property
    def _procs(self) -> list[Any]:
        # the worker processes (tests and tools look at their pids)
        return self._pool.procs

    @property
    def _temp_dirs(self) -> list[str]:
        return self._pool.temp_dirs

    def _check_open(self) -> None:
        # a worker failure stops the pool: the collector is then shut down too
        if self._pool.closed and not self._closed:
            self.shutdown()
        super()._check_open()

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
    def _init_weight_sync(
        self, schemes: dict[str, WeightSyncScheme] | None, updater: Any, policy: Any
    ) -> WeightSyncScheme:
        name = self.options.owner
        self.weight_sync_schemes = check_weight_sync_schemes(schemes, name)
        scheme = self.weight_sync_schemes.get("policy")
        if scheme is None:
            scheme = self.weight_sync_schemes["policy"] = SharedMemWeightSyncScheme()
        if not isinstance(
            scheme, (SharedMemWeightSyncScheme, MultiProcessWeightSyncScheme, NoWeightSyncScheme)
        ):
            raise ValueError(
                f"{name}: weight_sync_schemes['policy'] must be a SharedMemWeightSyncScheme, "
                f"a MultiProcessWeightSyncScheme or a NoWeightSyncScheme (workers are local "
                f"processes), got {type(scheme).__name__}"
            )
        if scheme.role is not None:
            raise ValueError(
                f"{name}: weight_sync_schemes['policy'] is already initialised (as the "
                f"{scheme.role}); give the collector a fresh scheme, it sets both ends up"
            )
        module = policy if isinstance(policy, nn.Module) else None
        if isinstance(scheme, SharedMemWeightSyncScheme):
            scheme.init_on_sender(module, context=self, weights=None if module else {})
        elif isinstance(scheme, NoWeightSyncScheme):
            scheme.init_on_sender(module, context=self)
        # (a MultiProcessWeightSyncScheme gets the worker pipes once they exist)
        self._policy_scheme = scheme
        if updater is not None:
            if not callable(getattr(updater, "push_weights", None)):
                raise TypeError(
                    f"{name}: weight_updater must be a WeightUpdaterBase (with push_weights), "
                    f"got {type(updater).__name__}"
                )
            register = getattr(updater, "register_collector", None)
            if callable(register):
                register(self)
        self.weight_updater = updater
        return scheme

    @property
    def policy_version(self) -> int:
        """The version of the weights sent to the workers (updates so far)."""
        return self._policy_scheme.version

    def update_policy_weights_(self, policy_or_weights: WeightsLike | None = None) -> None:
        """Sends new weights to every worker through the ``"policy"`` scheme.

        With the default :class:`~torchrl.weight_update.SharedMemWeightSyncScheme` the copy is
        in place (no pickling): workers use the new weights from their next step (a sync
        collector's workers are idle between batches, so a batch never mixes weights). With
        :class:`~torchrl.weight_update.MultiProcessWeightSyncScheme` each worker gets a copy
        and acknowledges it. Either way the policy version is incremented.

        Args:
            policy_or_weights: a module, a state dict or a TensorDict of weights; by default
                the policy given at construction.
        """
        self._check_open()
        updater = self.weight_updater
        scheme = self._policy_scheme
        if updater is not None:
            if updater.owns_scheme:
                updater.push_weights(policy_or_weights)
                scheme.send({}, worker_ids=[])  # the version counts here too
                return
            policy_or_weights = updater.prepare_weights(policy_or_weights)
        if not isinstance(self._policy, nn.Module):
            policy_or_weights = {}  # nothing to copy; the version still counts
        scheme.send(policy_or_weights)
        if self._update_by_message:
            for i in range(self.num_workers):
                self._pool.ask(i, "update")
        if updater is not None:
            updater.run_post_hooks()

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the workers' envs in a chain (each from the seed the previous one returns).

        Args:
            seed: the first seed.
            static_seed: give every worker ``seed`` itself.

        Returns:
            The seed that follows the last worker's.
        """
        for i in range(self.num_workers):
            seed = self._pool.ask(i, "seed", (seed, static_seed))
        return seed

    def reset(self) -> None:
        """Resets every worker's env: the next batches start new trajectories."""
        for i in range(self.num_workers):
            self._pool.ask(i, "reset")

    def state_dict(self) -> dict[str, Any]:
        """The state dicts of the workers' collectors (``"worker0"``, ...) and the frame count.

        Returns:
            A dict of picklable state.
        """
        out: dict[str, Any] = {
            f"worker{i}": self._pool.ask(i, "state_dict") for i in range(self.num_workers)
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
            self._pool.ask(i, "load_state_dict", state_dict[f"worker{i}"])
        self.frames = int(state_dict.get("frames", 0))
        self._iter = int(state_dict.get("iter", 0))

    def shutdown(self) -> None:
        """Stops and joins the worker processes and frees the shared buffers (idempotent)."""
        if self._closed:
            return
        # the collecting thread notices the request within one wait slice
        self._stop_background(3 * WAIT_SLICE_S)
        self._closed = True
        self._pool.shutdown()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_workers={self.num_workers}, frames_per_batch="
            f"{self.frames_per_batch}, total_frames={self.total_frames}, frames={self.frames})"
        )


class _PoolTransport:
    """Sends weights to one worker of a :class:`~torchrl.collectors._pool.WorkerPool` as a
    ``"weights"`` message and waits for its reply (a dead worker raises ``WorkerError``)."""

    def __init__(self, pool: WorkerPool, index: int) -> None:
        self.pool = pool
        self.index = index

    def send_weights(self, weights: Any, version: int) -> None:
        with torch.no_grad():
            payload = {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}
        self.pool.ask(self.index, "weights", (payload, int(version)))

    def receive_weights(self, timeout: float | None = None) -> None:
        return None

    def check_connection(self) -> bool:
        return not self.pool.closed


def _has_weights(module: nn.Module) -> bool:
    """Whether ``module`` has any parameter or buffer."""
    return any(True for _ in module.parameters()) or any(True for _ in module.buffers())


def _env_constructors(
    create_env_fn: Sequence[Callable[..., EnvBase]] | Callable[..., EnvBase],
    create_env_kwargs: Sequence[dict[str, Any]] | dict[str, Any] | None,
    num_workers: int | None,
    name: str,
) -> tuple[list[Callable[..., EnvBase]], list[dict[str, Any] | None]]:
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


class MultiSyncDataCollector(MultiCollector):
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
        mp_start_method: ``"fork"`` (default on Linux while CUDA is not initialized), ``"spawn"`` or
            ``"forkserver"``.
        timeout: seconds a worker may stay silent while it owes an answer (a batch, a reply,
            its start-up) before it is taken as hung: the collector then stops every worker
            and raises ``TimeoutError`` naming it. The default, 600 s, leaves room for slow
            simulators and long batches; ``None`` waits forever. (A worker that dies or
            raises is reported at once, whatever the timeout.)
        compile_policy: ``True`` or :func:`torch.compile` keywords (plus ``"warmup"``):
            each worker compiles its own copy of the policy call (see
            :class:`~torchrl.collectors.SyncDataCollector`). It pays off for bigger policies
            and many steps; every worker pays the compilation once.
        cudagraph_policy: ``True`` or ``CudaGraphModule`` keywords: each worker records its
            policy call as a CUDA graph (needs CUDA and a CUDA ``policy_device``).
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
                self._pool.send(i, "collect")
            parts: list[TensorDictBase | None] = [None] * n
            waiting = list(range(n))
            finished = 0
            while waiting:
                i, kind, payload = self._pool.next_message(waiting)
                if kind != "batch":
                    raise RuntimeError(f"{self._pool.who(i)}: unexpected message {kind!r}")
                slot, steps, buffer = payload
                parts[i] = self._pool.batch_view(i, slot, steps, buffer)
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


class MultiaSyncDataCollector(MultiCollector):
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
            i, kind, payload = self._pool.next_message()
            if kind != "batch":
                raise RuntimeError(f"{self._pool.who(i)}: unexpected message {kind!r}")
            slot, steps, buffer = payload
            view = self._pool.batch_view(i, slot, steps, buffer)
            if self.replay_buffer is not None and self.postproc is None:
                extend_replay_buffer(self.replay_buffer, view)
                batch = None
            else:
                batch = view.clone()
            self._pool.send(i, "release", slot)
            self.frames += view.numel()
            self._iter += 1
            if self.update_at_each_batch:
                self.update_policy_weights_()
            yield self._deliver(batch) if batch is not None else None


class aSyncDataCollector(MultiaSyncDataCollector):
    """Runs one collector in a worker process, which keeps collecting while batches are used.

    A :class:`MultiaSyncDataCollector` with a single worker: the worker fills one
    shared-memory buffer while the caller reads the other, so a batch may come from weights
    one update old. Failures and shutdown behave as for :class:`MultiSyncDataCollector`.

    Args:
        create_env_fn: the env constructor (or an env, with the ``fork`` start method).
        policy: the policy (``None``: random actions).
        create_env_kwargs: keyword arguments of ``create_env_fn``.
        **kwargs: the other keywords of :class:`MultiaSyncDataCollector`
            (``frames_per_batch``, ``total_frames``, ...), except ``num_workers``.

    Examples:
        >>> from torchrl.collectors import aSyncDataCollector
        >>> from torchrl.envs import PendulumEnv
        >>> collector = aSyncDataCollector(PendulumEnv, frames_per_batch=10, total_frames=20)
        >>> [batch.numel() for batch in collector]
        [10, 10]
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: Callable[..., EnvBase],
        policy: PolicyLike | None = None,
        *,
        create_env_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("num_workers", 1) != 1:
            raise ValueError(
                f"aSyncDataCollector runs exactly one worker, got num_workers="
                f"{kwargs['num_workers']!r} (use MultiaSyncDataCollector for more)"
            )
        if isinstance(create_env_fn, Sequence):
            raise TypeError(
                "aSyncDataCollector takes one env constructor, got a sequence "
                "(use MultiaSyncDataCollector for several workers)"
            )
        kwargs.pop("num_workers", None)
        super().__init__(
            [create_env_fn],
            policy,
            create_env_kwargs=[create_env_kwargs or {}],
            **kwargs,
        )
