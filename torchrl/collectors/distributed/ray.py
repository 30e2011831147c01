"""``RayCollector``: local collectors run as Ray actors, driven by the trainer as one iterator.

Every worker is a Ray actor holding a local collector (a ``SyncDataCollector``, or a
multi-process one). The trainer asks each actor for batches and waits on the answers with
``ray.wait`` and a timeout, so that a dead actor or a stuck worker turns into an error that names
the worker instead of a hang. New policy weights travel through a
:class:`~torchrl.weight_update.RayWeightSyncScheme`: they go into the Ray object store once
(``ray.put``) and every actor reads them from there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import torch
from tensordict import TensorDictBase

from torchrl._types import ReplayBufferLike
from torchrl._utils import import_optional, logger
from torchrl.collectors._base import DataCollectorBase, check_frames
from torchrl.collectors._options import RemoteCollectorOptions, WorkerOptions
from torchrl.collectors._policy import WeightsLike
from torchrl.collectors._pool import WorkerError
from torchrl.collectors.distributed.utils import (
    WorkerCore,
    policy_weights,
    start_local_ray,
    worker_options,
)
from torchrl.collectors.multi import MultiaSyncDataCollector, MultiSyncDataCollector
from torchrl.collectors.sync import (
    PolicyLike,
    SyncDataCollector,
    check_weight_sync_schemes,
    extend_replay_buffer,
)
from torchrl.weight_update import RayTransport, RayWeightSyncScheme, WeightSyncScheme

__all__ = ["DEFAULT_REMOTE_CLASS_CONFIG", "RayCollector"]

#: Resources of one collector actor unless ``remote_configs`` says otherwise.
DEFAULT_REMOTE_CLASS_CONFIG: dict[str, Any] = {"num_cpus": 1, "num_gpus": 0}


def _ray() -> Any:
    return import_optional("ray", "ray")


class RayCollector(DataCollectorBase):
    """Collects batches with local collectors running as Ray actors, as one iterator.

    Each of the ``num_collectors`` workers is a Ray actor that builds
    ``collector_class(create_env_fn, policy, **collector_kwargs)`` and collects batches on
    demand. With ``sync=True`` every iteration gathers one batch from every worker and
    concatenates them along the first batch dim (each worker collects ``frames_per_batch /
    num_collectors`` frames); with ``sync=False`` each worker collects ``frames_per_batch``
    frames and the iterator yields whichever batch is ready first. The trainer counts the
    frames: exactly ``total_frames`` (rounded up to whole batches) are delivered.

    Trajectory ids are unique across workers (worker ``i`` of ``n`` writes ``id * n + i``).
    :meth:`update_policy_weights_` puts the weights in the object store once and every actor
    loads them before its next batch. Waits are bounded by ``timeout``: a dead actor raises
    :class:`~torchrl.collectors.WorkerError` naming the worker, a silent one a ``TimeoutError``.

    Ray is joined when it is already initialized or when ``ray_init_config`` has an
    ``"address"``; otherwise a local Ray instance is started, and :meth:`shutdown` stops it again.
    Ray's servers listen on every network interface (Ray has no setting for it); a local
    instance started here relies on Ray's token authentication (on unless ``RAY_AUTH_MODE`` is
    ``"disabled"``, which warns). Actors receive pickled arguments: anyone admitted to the
    cluster can run code in it.

    Args:
        create_env_fn: an env constructor (or an env, pickled to each worker); a list gives one
            per worker.
        policy: the policy (an ``nn.Module``/TensorDict module, or ``None`` for random actions).
        collector_class: the local collector each actor runs (a class, or ``"single"``,
            ``"sync"``, ``"async"`` for the three local collectors).
        collector_kwargs: keyword arguments for ``collector_class`` (``frames_per_batch`` and
            ``total_frames`` are set here); a list gives one dict per worker. Devices and
            ``compile_policy``/``cudagraph_policy`` go here: each actor compiles its own policy.
        num_collectors: how many actors (default: the length of the lists, else 1).
        ray_init_config: keyword arguments of ``ray.init`` (used when Ray is not running yet,
            or to join the cluster at ``"address"``).
        remote_configs: actor options (``num_cpus``, ``num_gpus``, ``memory``, ...), one dict
            for all actors or one per actor.
        sync: gather one batch from every worker per iteration (``True``) or yield batches as
            they come (``False``).
        frames_per_batch: frames in each delivered batch.
        total_frames: frames in all (``-1``: no end).
        update_after_each_batch: (async) push the current weights to a worker each time it
            delivers a batch.
        max_weight_update_interval: (async) push the current weights to a worker that has
            delivered more than this many batches since its last update (``-1``: never).
        replay_buffer: extend this buffer with every batch in the trainer; the iterator then
            yields ``None``. (For a buffer the workers extend themselves, give a
            :class:`~torchrl.collectors.distributed.RayReplayBuffer` in ``collector_kwargs``.)
        timeout: seconds to wait for any answer from the workers before raising.
        num_threads: torch threads in each worker.
        weight_sync_schemes: ``{"policy": RayWeightSyncScheme(...)}`` (the default); the
            scheme is set up here on both ends. Its ``version`` counts the updates.
        weight_updater: a legacy ``RayWeightUpdater``; :meth:`update_policy_weights_` then
            calls its ``push_weights``.

    Examples:
        >>> import os
        >>> os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # doctest: +SKIP
        >>> from torchrl.collectors.distributed import RayCollector
        >>> from torchrl.envs import GymEnv
        >>> collector = RayCollector(
        ...     lambda: GymEnv("CartPole-v1"), None, num_collectors=2, sync=True,
        ...     frames_per_batch=200, total_frames=1000,
        ...     ray_init_config={"num_cpus": 2},
        ... )  # doctest: +SKIP
        >>> sum(batch.numel() for batch in collector)  # doctest: +SKIP
        1000
        >>> collector.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        policy: PolicyLike | None = None,
        collector_class: Callable[..., DataCollectorBase] | str = SyncDataCollector,
        collector_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        num_collectors: int | None = None,
        ray_init_config: dict[str, Any] | None = None,
        remote_configs: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        sync: bool = False,
        *,
        frames_per_batch: int,
        total_frames: int | None = -1,
        update_after_each_batch: bool = False,
        max_weight_update_interval: int = -1,
        replay_buffer: ReplayBufferLike | None = None,
        timeout: float = 600.0,
        num_threads: int | None = 1,
        weight_sync_schemes: dict[str, WeightSyncScheme] | None = None,
        weight_updater: Any = None,
    ) -> None:
        self._init_base()
        self._actors: list[Any] = []
        self._started_ray = False
        self._closed = False
        name = type(self).__name__
        ray = _ray()
        self.options = opts = RemoteCollectorOptions.build(
            name,
            workers_keyword="num_collectors",
            num_workers=num_collectors,
            per_worker=(create_env_fn, collector_kwargs, remote_configs),
            default_workers=1,
            sync=sync,
            frames_per_batch=frames_per_batch,
            total_frames=total_frames,
            update_after_each_batch=update_after_each_batch,
            max_weight_update_interval=max_weight_update_interval,
            replay_buffer=replay_buffer,
            timeout=timeout,
            num_threads=num_threads,
        )
        n = self.num_collectors = opts.num_workers
        self.sync = opts.sync
        self.timeout = opts.timeout
        self.update_after_each_batch = opts.update_after_each_batch
        self.max_weight_update_interval = opts.max_weight_update_interval
        self.replay_buffer = opts.replay_buffer
        self.policy = policy
        self.weight_sync_schemes = check_weight_sync_schemes(weight_sync_schemes, name)
        scheme = self.weight_sync_schemes.setdefault("policy", RayWeightSyncScheme(sync=False))
        if not isinstance(scheme, RayWeightSyncScheme) or scheme.role is not None:
            raise ValueError(
                f"{name}: weight_sync_schemes['policy'] must be a RayWeightSyncScheme not yet "
                f"initialised (the collector sets both ends up), got {scheme!r}"
            )
        self._policy_scheme = scheme
        self.weight_updater = weight_updater
        if weight_updater is not None and not callable(
            getattr(weight_updater, "push_weights", None)
        ):
            raise TypeError(
                f"{name}: weight_updater must be a WeightUpdaterBase (with push_weights), got "
                f"{type(weight_updater).__name__}"
            )
        self.collector_class = _resolve_class(collector_class)
        self.frames_per_batch, self.total_frames = check_frames(
            name, opts.frames_per_batch, opts.total_frames, 1
        )
        self._worker_frames = opts.worker_frames
        self.frames = 0
        env_fns = opts.per_worker(create_env_fn)
        # checked here, before any actor starts; each actor gets its options whole
        workers = [
            worker_options(self.collector_class, kw) for kw in opts.worker_kwargs(collector_kwargs)
        ]
        remote_list = [
            {**DEFAULT_REMOTE_CLASS_CONFIG, **(r or {})} for r in opts.per_worker(remote_configs)
        ]

        self._connect(ray, dict(ray_init_config or {}))
        self._start_actors(ray, env_fns, policy, workers, remote_list)
        self._since_update = [0] * n
        self._last_weights: dict[str, torch.Tensor] | None = None
        scheme.init_on_sender(
            policy if isinstance(policy, torch.nn.Module) else None,
            context=self,
            actors=self._actors,
            method="update_weights",
        )
        if weight_updater is not None:
            weight_updater.register_collector(self)

    # ------------------------------------------------------------------------------- cluster
    def _start_actors(
        self,
        ray: Any,
        env_fns: list[Any],
        policy: PolicyLike | None,
        workers: list[tuple[WorkerOptions, dict[str, Any] | None]],
        remote_configs: list[dict[str, Any]],
    ) -> None:
        """Starts one actor per worker and waits until each has built its collector."""
        n = len(workers)
        try:
            actor_cls = ray.remote(WorkerCore)
            policy_ref = ray.put(policy)
            for i, (options, env_kwargs) in enumerate(workers):
                actor = actor_cls.options(**remote_configs[i]).remote(
                    self.collector_class,
                    env_fns[i],
                    policy_ref,
                    options,
                    i,
                    n,
                    self.options.num_threads,
                    env_kwargs,
                    self._policy_scheme.receiver_copy(),
                )
                self._actors.append(actor)
            # Fail early (with the worker's error) when an actor cannot start or build its
            # collector, or when the cluster cannot place it.
            self.pids = self._get([a.pid.remote() for a in self._actors], "starting")
        except BaseException:
            self.shutdown()
            raise

    def _connect(self, ray: Any, config: dict[str, Any]) -> None:
        if ray.is_initialized():
            if config.get("address") is not None:
                logger.info("RayCollector: Ray is already initialized; ignoring ray_init_config")
            return
        start_local_ray(ray, config, type(self).__name__)
        # Only a Ray instance started here (not a cluster joined by address) is ours to stop.
        self._started_ray = config.get("address") in (None, "local")

    def _worker_of(self, ref: Any, refs: dict[Any, int]) -> int:
        return refs[ref]

    def _raise_for(self, i: int, err: BaseException, what: str) -> None:
        ray = _ray()
        pid = self.pids[i] if getattr(self, "pids", None) else "?"
        if isinstance(err, ray.exceptions.RayActorError):
            raise WorkerError(
                f"RayCollector: worker {i} (Ray actor, pid {pid}) died while {what}: {err}"
            ) from err
        if isinstance(err, ray.exceptions.RayTaskError):
            raise WorkerError(
                f"RayCollector: worker {i} (pid {pid}) raised while {what}:\n{err}"
            ) from err
        raise err

    def _get(self, refs: list[Any], what: str) -> list[Any]:
        """``ray.get`` of one ref per worker, bounded by ``timeout``, errors naming the worker."""
        ray = _ray()
        index = {ref: i for i, ref in enumerate(refs)}
        deadline = time.monotonic() + self.timeout
        remaining = list(refs)
        out: dict[int, Any] = {}
        while remaining:
            left = deadline - time.monotonic()
            ready, remaining = ray.wait(remaining, num_returns=1, timeout=max(left, 0.0))
            if not ready:
                late = sorted(index[r] for r in remaining)
                raise TimeoutError(
                    f"RayCollector: workers {late} did not answer within {self.timeout:.0f} s "
                    f"while {what} (not enough cluster resources, or a stuck env?)"
                )
            for ref in ready:
                try:
                    out[index[ref]] = ray.get(ref)
                except BaseException as err:  # noqa: BLE001 - re-raised naming the worker
                    self._raise_for(index[ref], err, what)
        return [out[i] for i in range(len(refs))]

    # ------------------------------------------------------------------------------ iteration
    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yields batches until ``total_frames`` frames are delivered."""
        self._check_open()
        if self.sync:
            yield from self._iter_sync()
        else:
            yield from self._iter_async()

    def _iter_sync(self) -> Iterator[TensorDictBase | None]:
        while self.frames < self.total_frames and not self._stop_requested():
            results = self._get([a.next_batch.remote() for a in self._actors], "collecting")
            self.frames += sum(frames for _, frames in results)
            batches = [b for b, _ in results]
            if any(b is None for b in batches):
                yield None  # the workers wrote into a replay buffer themselves
                continue
            yield self._deliver(cast(TensorDictBase, torch.cat(cast(Any, batches), 0)))

    def _iter_async(self) -> Iterator[TensorDictBase | None]:
        ray = _ray()
        remaining = self.total_frames - self.frames
        wanted = len(self._actors)
        if remaining != math.inf:
            wanted = max(1, min(wanted, math.ceil(remaining / self._worker_frames)))
        first = self._actors[:wanted]
        pending = {a.next_batch.remote(): i for i, a in enumerate(first)}
        try:
            while self.frames < self.total_frames and not self._stop_requested():
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=self.timeout)
                if not ready:
                    raise TimeoutError(
                        f"RayCollector: no worker delivered a batch within {self.timeout:.0f} s "
                        f"(workers {sorted(pending.values())} pending)"
                    )
                ref = ready[0]
                i = pending.pop(ref)
                try:
                    batch, frames = ray.get(ref)
                except BaseException as err:  # noqa: BLE001 - re-raised naming the worker
                    self._raise_for(i, err, "collecting")
                self.frames += frames
                self._since_update[i] += 1
                interval = self.max_weight_update_interval
                if self.update_after_each_batch or (0 <= interval < self._since_update[i]):
                    self._push_weights([i])
                # Never more frames requested than remain: a batch under way at the end would
                # be lost, or (workers writing to a replay buffer) written anyway.
                if self.frames + len(pending) * self._worker_frames < self.total_frames:
                    pending[self._actors[i].next_batch.remote()] = i
                yield None if batch is None else self._deliver(batch)
        finally:
            # Batches still being collected are dropped; their actors stay usable.
            pending.clear()

    def _deliver(self, batch: TensorDictBase) -> TensorDictBase | None:
        if self.replay_buffer is not None:
            extend_replay_buffer(self.replay_buffer, batch)
            return None
        return batch

    # --------------------------------------------------------------------------------- weights
    @property
    def policy_version(self) -> int:
        """The version of the latest weights sent (updates so far)."""
        return self._policy_scheme.version

    def _pending_refs(self, workers: Sequence[int]) -> list[Any]:
        refs = []
        for i in workers:
            transport = self._policy_scheme.transports[i]
            if isinstance(transport, RayTransport):
                refs += transport.pending
                transport.pending = []
        return refs

    def _push_weights(self, workers: Sequence[int]) -> list[Any]:
        """Sends the latest weights again (same version) to ``workers``."""
        weights = self._last_weights
        if weights is None:
            weights = policy_weights(self.policy)
        for i in workers:
            self._policy_scheme.connect(worker_idx=i, weights=weights)
            self._since_update[i] = 0
        return self._pending_refs(workers)

    def update_policy_weights_(
        self, policy_or_weights: WeightsLike | None = None, worker_ids: Sequence[int] | None = None
    ) -> None:
        """Sends the policy's current (or the given) weights to the workers.

        The weights go into the Ray object store once and every actor reads them from there.
        Actors run their calls in order, so each worker's next batch uses the new weights. In
        sync mode (workers idle between batches) the call returns once every worker has loaded
        them; in async mode it returns at once.

        Args:
            policy_or_weights: a module or a state dict of weights; by default the policy given
                at construction.
            worker_ids: the workers to update (default: all).
        """
        self._check_open()
        updater = self.weight_updater
        workers = list(range(self.num_collectors) if worker_ids is None else worker_ids)
        if updater is not None:
            if updater.owns_scheme:
                updater.push_weights(policy_or_weights, worker_ids=worker_ids)
                self._policy_scheme.send({}, worker_ids=[])  # the version counts here too
                return
            policy_or_weights = updater.prepare_weights(policy_or_weights)
        source = self.policy if policy_or_weights is None else policy_or_weights
        weights = policy_weights(source)
        self._last_weights = weights
        self._policy_scheme.send(weights, workers)
        for i in workers:
            self._since_update[i] = 0
        refs = self._pending_refs(workers)
        if self.sync:
            self._get(refs, "loading new weights")
        if updater is not None:
            updater.run_post_hooks()

    def worker_weights(self, worker: int) -> dict[str, torch.Tensor]:
        """The weights worker ``worker``'s policy holds now (waits for its pending calls)."""
        return self._get([self._actors[worker].weights.remote()], "reading weights")[0]

    # -------------------------------------------------------------------------------- controls
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the workers one after the other, each with the seed the previous one returns.

        Returns:
            The seed that follows the last worker's.
        """
        self._check_open()
        for actor in self._actors:
            seed = self._get([actor.set_seed.remote(seed, static_seed)], "seeding")[0]
        return seed

    def state_dict(self) -> dict[str, Any]:
        """The workers' collector states (``"worker{i}"``) and the frame count."""
        self._check_open()
        states = self._get([a.state_dict.remote() for a in self._actors], "saving its state")
        out: dict[str, Any] = {f"worker{i}": s for i, s in enumerate(states)}
        out["frames"] = self.frames
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a :meth:`state_dict` into the workers."""
        self._check_open()
        refs = [
            a.load_state_dict.remote(state_dict[f"worker{i}"]) for i, a in enumerate(self._actors)
        ]
        self._get(refs, "loading its state")
        self.frames = int(state_dict.get("frames", self.frames))

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stops the workers and kills their actors; stops Ray if this collector started it.

        Args:
            timeout: seconds to give each worker to close its collector before it is killed.
        """
        if getattr(self, "_closed", True) and not getattr(self, "_actors", None):
            return
        self._closed = True
        ray = _ray()
        actors, self._actors = self._actors, []
        if actors:
            refs = [a.shutdown.remote() for a in actors]
            try:
                ray.wait(refs, num_returns=len(refs), timeout=timeout)
            except Exception:  # noqa: BLE001 - best effort: the actors are killed below
                pass
            for actor in actors:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:  # noqa: BLE001 - already dead
                    pass
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
            self._started_ray = False

    def __del__(self) -> None:
        try:
            if getattr(self, "_actors", None):
                self.shutdown(timeout=1.0)
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass

    def __repr__(self) -> str:
        total = self.total_frames if self.total_frames != math.inf else -1
        return (
            f"{type(self).__name__}(num_collectors={self.num_collectors}, sync={self.sync}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={total}, "
            f"frames={self.frames})"
        )


def _resolve_class(
    collector_class: Callable[..., DataCollectorBase] | str,
) -> Callable[..., DataCollectorBase]:
    if not isinstance(collector_class, str):
        return collector_class
    names = {
        "single": SyncDataCollector,
        "sync": MultiSyncDataCollector,
        "async": MultiaSyncDataCollector,
    }
    if collector_class not in names:
        raise ValueError(
            f"collector_class must be a class or one of {sorted(names)}, got {collector_class!r}"
        )
    return names[collector_class]
