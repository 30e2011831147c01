"""Asynchronous collection with an inference server: rollout workers only step envs.

:class:`AsyncBatchedCollector` is the Sample Factory architecture built from our parts:

- **rollout workers** (processes) own the envs and never run the policy. Each splits its envs
  into ``num_splits`` groups that one thread steps in turn: while a group waits for its
  actions, the other groups step their envs (double-buffered sampling for ``num_splits=2``). A
  group is a
  :class:`~torchrl.envs.SerialEnv` driven by a :class:`~torchrl.collectors.SyncDataCollector`
  whose policy is an :class:`~torchrl.modules.inference_server.InferenceClient`;
- an **inference server** (a thread of this process by default) owns the policy, batches
  whatever requests are ready from every group of every worker and answers each with its own
  rows; requests and answers travel through shared memory, messages carry slot ids;
- the **learner** (the loop iterating this collector) trains meanwhile. Workers write
  trajectory chunks ``[envs of the group, rollout_length]`` into shared-memory slots and
  announce them on their pipe; this process copies each chunk out and frees its slot, so a
  worker blocks only when the learner falls ``slots_per_group`` chunks behind.

Every step carries the version of the weights that chose its action (``"policy_version"``,
written by the server); :meth:`AsyncBatchedCollector.update_policy_weights_` hands new
weights to the server, which applies them between two batches and counts versions. Each batch
reports its policy lag (:attr:`AsyncBatchedCollector.last_policy_lag`), and ``max_policy_lag``
drops the rows that are too old.

A rollout worker that raises or dies is reported at once (:class:`WorkerError` or the
worker's exception, with its traceback); a dead inference server makes the waiting workers
fail within seconds, which is reported the same way. Shutdown stops every process and frees
every shared-memory slot; workers end by themselves if this process dies.
"""

from __future__ import annotations

import copy
import os
import queue
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, cast

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._keys import POLICY_VERSION
from torchrl._processes import (
    default_start_method,
    exit_worker,
    parent_gone,
    use_temp_dir,
    watch_parent,
)
from torchrl._types import DeviceLike, NestedKey, ReplayBufferLike
from torchrl.collectors._base import DataCollectorBase, check_count, check_frames
from torchrl.collectors._options import CollectorOptions
from torchrl.collectors._policy import accelerate_in_place
from torchrl.collectors._pool import WorkerPool
from torchrl.collectors._worker import SharedFlag, drain_pipe, send_error
from torchrl.collectors.policy_lag import policy_lag_stats
from torchrl.collectors.sync import SyncDataCollector, extend_replay_buffer
from torchrl.envs.batched_envs import SerialEnv
from torchrl.envs.common import EnvBase
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules.inference_server import (
    InferenceServer,
    InferenceTransport,
    PolicyClientModule,
    ProcessInferenceServer,
    SharedMemoryTransport,
)
from torchrl.weight_update import WeightSyncScheme

__all__ = ["AsyncBatchedCollector"]

#: the entry naming the env (its index in ``create_env_fn``) each row of a batch comes from
ENV_INDEX_KEY = ("collector", "env_index")
#: the entry naming the policy whose data a batch holds (with several policies)
POLICY_ID_KEY = ("collector", "policy_id")

PolicyArg = Callable[[TensorDictBase], TensorDictBase]


@dataclass
class RolloutSpec:
    """What one rollout worker builds: its env groups, their clients and their collectors."""

    index: int
    groups: list[list[_EnvMaker]]
    first_env: list[int]
    clients: list[PolicyClientModule]
    options: CollectorOptions
    num_groups: int
    slots_per_group: int
    seed: int
    num_threads: int


class AsyncBatchedCollector(DataCollectorBase):
    """Collects with rollout worker processes and batched inference servers.

    Args:
        create_env_fn: one constructor per env (envs with an empty batch size). They are split
            evenly between ``num_workers`` processes, and in each into ``num_splits`` groups.
        policy: the policy, or a list of policies to train at once (see ``policy_map``); a
            server runs a copy of each (the modules you train stay yours), refreshed by
            :meth:`update_policy_weights_`.
        policy_factory: builds the server's policy instead of copying ``policy`` (a list of
            factories for several policies).
        policy_map: with several policies, the policy of each env (``policy_map[i]`` for
            ``create_env_fn[i]``); the envs of a group share one. Default: group ``g`` of the
            groups, numbered worker by worker, uses policy ``g % num_policies``.
        frames_per_batch: frames per yielded batch, a multiple of ``envs per group * rollout_length``.
        total_frames: frames in all (``-1``: forever).
        num_workers: rollout processes; by default as many as the groups allow, up to the CPU count.
        num_splits: env groups per worker (``2``: double-buffered sampling; ``1``: each worker
            waits for its actions).
        rollout_length: steps of each trajectory chunk; by default ``frames_per_batch`` divided
            by the number of envs (each env contributes one chunk per batch on average).
        slots_per_group: shared-memory chunks a group may fill before the learner copied the
            first one out (it then waits: this bounds the data a slow learner lets pile up).
        max_batch_size: most rows a server computes at once (default: every env).
        min_batch_size: rows a server waits for, at most ``server_timeout`` s, before it computes.
        server_timeout: see ``min_batch_size``.
        transport: the server's transport, for one policy (default: a new
            :class:`~torchrl.modules.inference_server.SharedMemoryTransport` per policy).
        policy_backend: where each server runs: ``"threading"`` (a thread of this process,
            the default) or ``"multiprocessing"`` (a
            :class:`~torchrl.modules.inference_server.ProcessInferenceServer`: the learner's
            Python work then never holds up inference).
        weight_sync_schemes: ``{model_id: scheme}`` (:mod:`torchrl.weight_update`): the scheme
            that carries a policy's weights to its server, ``"policy"`` (or ``"policy_<i>"``
            with several policies). The collector sets up its sender side on the policy; the
            server polls its receiver side between batches, so the version changes once the
            server took the weights. Default: the server's own weight buffer.
        exploration_type: the servers' exploration type while they compute actions.
        max_policy_lag: rows whose oldest step is more than this many versions behind the
            server's current weights are dropped from the batch (``None``: keep everything).
        postproc: applied to each batch before it is yielded.
        replay_buffer: batches are written there and the iterator yields ``None``.
        create_env_kwargs: keyword arguments for every env constructor.
        mp_start_method: start method of the rollout processes (default: fork on Linux).
        num_sub_threads: torch threads of each rollout process.
        timeout: seconds a worker may stay silent while the learner waits for data, before it is
            taken as hung (``None``: forever).
        seed: seeds the envs (env ``i`` gets ``seed + i``) and the workers; default: drawn
            from torch's generator.
        device: default for ``env_device``, ``policy_device`` and ``storing_device``.
        storing_device: where batches are stored: the CPU only (shared memory).
        env_device: where the workers' envs run (their requests travel through CPU memory).
        policy_device: where the servers run their policy (a copy is moved there).
        compile_policy: ``True`` or :func:`torch.compile` keywords (plus ``"warmup"``): each
            server compiles its copy of the policy (dynamic batch sizes); a failed
            compilation warns once and runs eagerly. It pays off for bigger policies and many
            steps; compilation is paid once per server (a ``"multiprocessing"`` server's
            policy is also run once in this process, to learn the response layout).
        cudagraph_policy: ``True`` or ``CudaGraphModule`` keywords: each server records one
            CUDA graph per batch size it computes; needs CUDA and a CUDA ``policy_device``.

    Each batch is ``[rows, rollout_length]``: every row a contiguous chunk of one env's steps,
    with ``("collector", "env_index")``, ``("collector", "traj_ids")`` and ``"policy_version"``.
    With several policies each batch holds one policy's data, named by
    ``("collector", "policy_id")`` and :attr:`last_policy_id`.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.collectors import AsyncBatchedCollector
        >>> from torchrl.envs import PendulumEnv
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Tanh())
        >>> policy = TensorDictModule(net, ["observation"], ["action"])
        >>> collector = AsyncBatchedCollector(
        ...     [PendulumEnv] * 4, policy=policy, frames_per_batch=32, total_frames=64,
        ...     num_workers=1, num_splits=2, seed=0)
        >>> [tuple(b.batch_size) for b in collector]
        [(4, 8), (4, 8)]
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: Sequence[Callable[..., EnvBase]],
        policy: PolicyArg | Sequence[PolicyArg] | None = None,
        *,
        policy_factory: Callable[[], PolicyArg] | Sequence[Callable[[], PolicyArg]] | None = None,
        policy_map: Sequence[int] | None = None,
        frames_per_batch: int,
        total_frames: int = -1,
        num_workers: int | None = None,
        num_splits: int = 2,
        rollout_length: int | None = None,
        slots_per_group: int = 2,
        max_batch_size: int | None = None,
        min_batch_size: int = 1,
        server_timeout: float = 0.001,
        transport: InferenceTransport | None = None,
        policy_backend: str = "threading",
        weight_sync_schemes: dict[str, WeightSyncScheme] | None = None,
        exploration_type: ExplorationType | str = ExplorationType.RANDOM,
        max_policy_lag: int | None = None,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        replay_buffer: ReplayBufferLike | None = None,
        create_env_kwargs: dict[str, Any] | None = None,
        mp_start_method: str | None = None,
        num_sub_threads: int = 1,
        timeout: float | None = 600.0,
        seed: int | None = None,
        device: DeviceLike = None,
        storing_device: DeviceLike = None,
        env_device: DeviceLike = None,
        policy_device: DeviceLike = None,
        compile_policy: bool | dict[str, Any] | None = None,
        cudagraph_policy: bool | dict[str, Any] | None = None,
    ) -> None:
        name = type(self).__name__
        self._init_base()
        self._pool: WorkerPool | None = None
        self._servers: list[InferenceServer | ProcessInferenceServer] = []
        fns = _env_fns(create_env_fn, create_env_kwargs, name)
        n_envs = len(fns)
        num_splits = check_count(name, "num_splits", num_splits, 1)
        slots = check_count(name, "slots_per_group", slots_per_group, 1)
        if num_workers is None:
            num_workers = max(1, min(n_envs // num_splits, os.cpu_count() or 1))
        num_workers = check_count(name, "num_workers", num_workers, 1)
        groups = num_workers * num_splits
        if n_envs % groups:
            raise ValueError(
                f"{name}: {n_envs} envs cannot be split evenly into num_workers={num_workers} x "
                f"num_splits={num_splits} groups; pass a multiple of {groups} envs"
            )
        per_group = n_envs // groups
        frames_per_batch = check_count(name, "frames_per_batch", frames_per_batch, 1)
        if rollout_length is None:
            rollout_length = max(1, frames_per_batch // n_envs)
        rollout_length = check_count(name, "rollout_length", rollout_length, 1)
        chunk = per_group * rollout_length
        if frames_per_batch % chunk:
            raise ValueError(
                f"{name}: frames_per_batch={frames_per_batch} must be a multiple of the frames of "
                f"one chunk, {per_group} envs per group x rollout_length={rollout_length} = {chunk}"
            )
        if max_policy_lag is not None:
            max_policy_lag = check_count(name, "max_policy_lag", max_policy_lag, 0)
        if postproc is not None and not callable(postproc):
            raise TypeError(f"{name}: postproc must be callable, got {type(postproc).__name__}")
        # devices and compile options, checked as a local collector checks them
        checked = CollectorOptions(
            frames_per_batch=1,
            device=device,
            storing_device=storing_device,
            env_device=env_device,
            policy_device=policy_device,
            compile_policy=compile_policy,
            cudagraph_policy=cudagraph_policy,
            owner=name,
        )
        default = checked.device
        storing = checked.storing_device or default
        if storing is not None and torch.device(storing).type != "cpu":
            raise ValueError(
                f"{name}: batches are shared through CPU memory; storing_device must be the CPU "
                f"(got {storing}); move the batches yourself"
            )
        workers_env_device = cast("torch.device | None", checked.env_device or default)
        server_device = cast("torch.device | None", checked.policy_device or default)
        if checked.cudagraph_policy is not None and (
            server_device is None or server_device.type != "cuda"
        ):
            raise ValueError(
                f"{name}: cudagraph_policy needs the servers' policy on a CUDA device, but it "
                f"runs on {server_device or 'the CPU'}; pass policy_device='cuda'"
            )
        self.policy_device = server_device
        self.env_device = workers_env_device
        self._accelerate = _Accelerate(
            server_device,
            cast("dict[str, Any] | None", checked.compile_policy),
            cast("dict[str, Any] | None", checked.cudagraph_policy),
            name,
        )
        served, self._policies = _served_policies(policy, policy_factory, name)
        n_policies = len(served)
        if policy_backend not in ("threading", "multiprocessing"):
            raise ValueError(
                f"{name}: policy_backend must be 'threading' or 'multiprocessing', got "
                f"{policy_backend!r}"
            )
        if transport is not None and n_policies > 1:
            raise ValueError(f"{name}: one transport cannot serve {n_policies} policies")
        self._group_policy = _group_policies(policy_map, n_policies, groups, per_group, name)
        self._schemes = _schemes_by_policy(weight_sync_schemes, self._policies, name)
        self.frames_per_batch, self.total_frames = check_frames(
            name, frames_per_batch, total_frames, 1
        )
        self.num_envs = n_envs
        self.num_workers = num_workers
        self.num_splits = num_splits
        self.num_policies = n_policies
        self.rollout_length = rollout_length
        self.envs_per_group = per_group
        self.max_policy_lag = max_policy_lag
        self.postproc = postproc
        self.replay_buffer = replay_buffer
        self.frames = 0
        #: min/mean/max policy lag of the last batch (before ``max_policy_lag`` dropped rows)
        self.last_policy_lag: dict[str, float] = {}
        #: the policy whose data the last batch holds
        self.last_policy_id = 0
        self._chunks_per_batch = frames_per_batch // chunk

        try:
            clients = self._make_servers(
                served, fns[0], transport, policy_backend, per_group, max_batch_size,
                min_batch_size, server_timeout, exploration_type, name,
            )  # fmt: skip
            if seed is None:
                seed = int(torch.randint(0, 2**31 - 1, ()))
            self._flag = SharedFlag()
            on_cpu = workers_env_device is None or workers_env_device.type == "cpu"
            options = CollectorOptions(
                frames_per_batch=chunk,
                total_frames=-1,
                env_device=workers_env_device,
                # the clients send CPU requests: envs elsewhere have their data moved
                policy_device=None if on_cpu else "cpu",
                storing_device="cpu",
                return_same_td=True,
                interruptor=self._flag,
                trust_policy=True,
                use_buffers=True,
                owner="SyncDataCollector",
            )
            specs = []
            for w in range(num_workers):
                mine = range(w * num_splits, (w + 1) * num_splits)
                first = [g * per_group for g in mine]
                specs.append(
                    RolloutSpec(
                        index=w,
                        groups=[fns[f : f + per_group] for f in first],
                        first_env=first,
                        clients=[clients[g] for g in mine],
                        options=options,
                        num_groups=groups,
                        slots_per_group=slots,
                        seed=seed,
                        num_threads=num_sub_threads,
                    )
                )
            self._pool = WorkerPool(
                name,
                mp_start_method or default_start_method(),
                rollout_main,
                specs,
                self._flag,
                self._bg_stop,
                timeout,
            )
            # Started once the workers are forked (a fork while a serving thread holds a lock
            # could leave a worker blocked on a copy of it); a server process serves the
            # clients made before it started.
            for server in self._servers:
                server.start()
            for w in range(num_workers):
                self._pool.expect(w, "ready")
        except BaseException:
            self.shutdown()
            raise

    def _make_servers(
        self,
        served: list[PolicyArg],
        probe_fn: Callable[[], EnvBase],
        transport: InferenceTransport | None,
        backend: str,
        per_group: int,
        max_batch_size: int | None,
        min_batch_size: int,
        server_timeout: float,
        exploration_type: ExplorationType | str,
        name: str,
    ) -> list[PolicyClientModule]:
        """Makes one server per policy (not started); returns one client policy per env group."""
        options: dict[str, Any] = {
            "max_batch_size": max_batch_size if max_batch_size is not None else self.num_envs,
            "min_batch_size": min_batch_size,
            "timeout": server_timeout,
            "exploration_type": exploration_type,
            "policy_version_key": POLICY_VERSION,
        }
        requests = []
        for p, model in enumerate(served):
            scheme = self._schemes[p]
            kwargs = dict(options)
            if scheme is not None:
                kwargs["weight_sync"] = scheme.receiver_copy()
            in_keys, example = _probe(probe_fn, model, name)
            transport_p = transport if transport is not None else SharedMemoryTransport()
            server: InferenceServer | ProcessInferenceServer
            kwargs["device"] = self.policy_device
            if backend == "multiprocessing":
                server = ProcessInferenceServer(
                    policy_factory=_Copy(model, self._accelerate), transport=transport_p, **kwargs
                )
            else:
                server = InferenceServer(self._accelerate(model), transport_p, **kwargs)
            self._servers.append(server)
            requests.append((transport_p, example.select(*in_keys).expand(per_group), in_keys))
        out = []
        for p in self._group_policy:
            transport_p, request, in_keys = requests[p]
            client = transport_p.client(example=request.clone())
            # every entry of the response is written back: the actions, what the policy
            # computed with them (log-probs, ...) and the policy version
            out.append(PolicyClientModule(client, in_keys=in_keys))
        return out

    # -------------------------------------------------------------------------------- weights
    @property
    def policy_version(self) -> int:
        """The version of the weights the (first) server uses now (``0`` before any update)."""
        return self.policy_versions[0] if self._servers else 0

    @property
    def policy_versions(self) -> list[int]:
        """The version of each policy's weights on its server."""
        return [int(server.policy_version) for server in self._servers]

    def update_policy_weights_(
        self, policy_or_weights: Any = None, *, policy_id: int | None = None, wait: bool = True
    ) -> None:
        """Hands new weights to the inference server(s), applied between two server batches.

        Args:
            policy_or_weights: a module, a state dict or a TensorDict of weights; by default
                the policy given at construction (every policy, unless ``policy_id``).
            policy_id: the policy to update, with several policies.
            wait: block until each server applied the weights (the default). With ``False``
                the weights are copied out of ``policy_or_weights`` and the call returns at
                once; the server applies them before its next batch or soon after, and
                :attr:`policy_version` changes then (the learner's next optimisation phase no
                longer waits for the server). Ignored with ``weight_sync_schemes``.
        """
        self._check_open()
        ids = range(self.num_policies) if policy_id is None else [policy_id]
        if policy_id is not None and not 0 <= policy_id < self.num_policies:
            raise IndexError(
                f"AsyncBatchedCollector: policy_id={policy_id}, but there are "
                f"{self.num_policies} policies"
            )
        if policy_or_weights is not None and policy_id is None and self.num_policies > 1:
            raise ValueError(
                "AsyncBatchedCollector: with several policies, say which one the weights are "
                "for (policy_id=...)"
            )
        for p in ids:
            source = policy_or_weights if policy_or_weights is not None else self._policies[p]
            if source is None:
                raise ValueError(
                    "AsyncBatchedCollector: built from a policy_factory, so pass the weights "
                    "to load"
                )
            scheme = self._schemes[p]
            if scheme is not None:
                scheme.send(policy_or_weights)
            else:
                self._servers[p].update_weights(source, wait=wait)

    def server_stats(self, policy_id: int = 0) -> dict[str, float]:
        """The counters of a policy's inference server (batches, requests, batch sizes)."""
        return dict(self._servers[policy_id].stats())

    # ------------------------------------------------------------------------------- iterating
    def _check_open(self) -> None:
        super()._check_open()
        if self._pool is None or self._pool.closed:
            raise RuntimeError("AsyncBatchedCollector: the collector is shut down")

    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yields batches of ``frames_per_batch`` frames until ``total_frames``."""
        self._check_open()
        pool = cast(WorkerPool, self._pool)
        per_group = self.envs_per_group
        pending: list[list[tuple[TensorDictBase, int]]] = [[] for _ in range(self.num_policies)]
        while self.frames < self.total_frames:
            if self._stop_requested():
                return
            w, kind, payload = pool.next_message()
            if kind != "batch":
                raise RuntimeError(f"{pool.who(w)}: unexpected message {kind!r}")
            group, slot, steps, buffer = payload
            view = pool.batch_view(w, slot, steps, buffer)
            g = w * self.num_splits + group
            p = self._group_policy[g]
            pending[p].append((view.clone(), g * per_group))
            pool.send(w, "release", slot)
            if len(pending[p]) < self._chunks_per_batch:
                continue
            chunks, pending[p] = pending[p], []
            batch = cast(TensorDictBase, torch.cat(cast(Any, [c for c, _ in chunks]), 0))
            index = torch.cat([torch.arange(f, f + per_group) for _, f in chunks])
            batch.set(ENV_INDEX_KEY, index.unsqueeze(-1).expand(batch.batch_size).contiguous())
            if self.num_policies > 1:
                batch.set(POLICY_ID_KEY, torch.full(batch.batch_size, p, dtype=torch.int64))
            self.frames += batch.numel()
            self.last_policy_id = p
            batch = self._filter_lag(batch, p)
            if self.postproc is not None:
                batch = self.postproc(batch)
            if self.replay_buffer is not None:
                extend_replay_buffer(self.replay_buffer, batch)
                yield None
            else:
                yield batch

    def _filter_lag(self, batch: TensorDictBase, policy_id: int) -> TensorDictBase:
        current = int(self._servers[policy_id].policy_version)
        self.last_policy_lag = policy_lag_stats(batch, current, POLICY_VERSION)
        if self.max_policy_lag is None:
            return batch
        oldest = batch.get(POLICY_VERSION).reshape(batch.shape[0], -1).amin(-1)
        keep = (current - oldest) <= self.max_policy_lag
        return batch if bool(keep.all()) else batch[keep]

    # -------------------------------------------------------------------------------- shutdown
    def shutdown(self) -> None:
        """Stops the rollout workers and the servers and frees their shared memory (idempotent)."""
        if self._pool is not None:
            self._pool.shutdown()
        for server in self._servers:
            server.shutdown()
        self._closed = True

    def __repr__(self) -> str:
        return (
            f"AsyncBatchedCollector(num_envs={self.num_envs}, num_workers={self.num_workers}, "
            f"num_splits={self.num_splits}, num_policies={self.num_policies}, "
            f"rollout_length={self.rollout_length}, frames_per_batch={self.frames_per_batch}, "
            f"total_frames={self.total_frames})"
        )


# ------------------------------------------------------------------------------------ helpers
def _env_fns(
    create_env_fn: Sequence[Callable[..., EnvBase]],
    kwargs: dict[str, Any] | None,
    name: str,
) -> list[_EnvMaker]:
    if callable(create_env_fn) or isinstance(create_env_fn, EnvBase):
        raise TypeError(
            f"{name}: create_env_fn must be a list of env constructors, one per env; got "
            f"{type(create_env_fn).__name__} (pass [make_env] * num_envs)"
        )
    fns = list(create_env_fn)
    if not fns:
        raise ValueError(f"{name}: create_env_fn is empty")
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(f"{name}: create_env_fn[{i}] is not callable ({type(fn).__name__})")
    return [_EnvMaker(fn, dict(kwargs or {})) for fn in fns]


@dataclass
class _Accelerate:
    """Moves a served policy (the collector's copy) to its device, compiles and records it."""

    device: torch.device | None
    compile_options: dict[str, Any] | None
    cudagraph_options: dict[str, Any] | None
    owner: str

    def __call__(self, policy: PolicyArg) -> PolicyArg:
        if self.device is not None and isinstance(policy, nn.Module):
            policy = policy.to(self.device)
        if self.compile_options is None and self.cudagraph_options is None:
            return policy
        graph = self.cudagraph_options
        if graph is not None:
            graph = {"device": self.device, **graph}
        module = cast(nn.Module, policy)
        return cast(PolicyArg, accelerate_in_place(module, self.compile_options, graph, self.owner))


@dataclass
class _Copy:
    """A picklable factory of copies of a policy (a server process builds its own)."""

    policy: PolicyArg
    accelerate: _Accelerate | None = None

    def __call__(self) -> PolicyArg:
        policy = copy.deepcopy(self.policy)
        return policy if self.accelerate is None else self.accelerate(policy)


@dataclass
class _EnvMaker:
    """An env constructor with its keyword arguments and seed (picklable, unlike a lambda)."""

    fn: Callable[..., EnvBase]
    kwargs: dict[str, Any]
    seed: int | None = None

    def __call__(self) -> EnvBase:
        env = self.fn(**self.kwargs)
        if self.seed is not None:
            env.set_seed(self.seed)
        return env


def _served_policies(
    policy: PolicyArg | Sequence[PolicyArg] | None,
    factory: Callable[[], PolicyArg] | Sequence[Callable[[], PolicyArg]] | None,
    name: str,
) -> tuple[list[PolicyArg], list[PolicyArg | None]]:
    """The servers' policies (copies, or built by the factories) and the caller's policies."""
    if policy is None and factory is None:
        raise TypeError(f"{name}: pass a policy or a policy_factory")
    if factory is not None:
        factories = list(factory) if isinstance(factory, Sequence) else [factory]
        for i, f in enumerate(factories):
            if not callable(f):
                raise TypeError(f"{name}: policy_factory[{i}] is not callable")
        callers: list[PolicyArg | None]
        if policy is None:
            callers = [None] * len(factories)
        else:
            callers = list(policy) if isinstance(policy, Sequence) else [policy]
        if len(callers) != len(factories):
            raise ValueError(
                f"{name}: {len(factories)} policy factories but {len(callers)} policies"
            )
        return [f() for f in factories], callers
    policies = cast("list[PolicyArg]", list(policy) if isinstance(policy, Sequence) else [policy])
    if not policies:
        raise ValueError(f"{name}: the list of policies is empty")
    for i, pol in enumerate(policies):
        if not callable(pol):
            raise TypeError(f"{name}: policy {i} is not callable ({type(pol).__name__})")
    return [copy.deepcopy(pol) for pol in policies], list(policies)


def _schemes_by_policy(
    schemes: dict[str, WeightSyncScheme] | None, policies: list[PolicyArg | None], name: str
) -> list[WeightSyncScheme | None]:
    """Each policy's weight-sync scheme, set up as a sender on that policy."""
    n = len(policies)
    ids = ["policy"] if n == 1 else [f"policy_{p}" for p in range(n)]
    if not schemes:
        return [None] * n
    unknown = sorted(set(schemes) - set(ids))
    if unknown:
        raise KeyError(f"{name}: weight_sync_schemes has {unknown}; the policies are {ids}")
    out: list[WeightSyncScheme | None] = []
    for model_id, policy in zip(ids, policies, strict=True):
        scheme = schemes.get(model_id)
        if scheme is not None and scheme.role is None:
            if policy is None:
                raise ValueError(
                    f"{name}: the {model_id!r} scheme needs the policy whose weights it sends "
                    "(built from a policy_factory only)"
                )
            scheme.init_on_sender(policy, model_id=model_id)
        out.append(scheme)
    return out


def _group_policies(
    policy_map: Sequence[int] | None, n_policies: int, groups: int, per_group: int, name: str
) -> list[int]:
    """The policy of each env group."""
    if policy_map is None:
        return [g % n_policies for g in range(groups)]
    ids = [int(i) for i in policy_map]
    if len(ids) != groups * per_group:
        raise ValueError(f"{name}: policy_map has {len(ids)} entries for {groups * per_group} envs")
    bad = [i for i in ids if not 0 <= i < n_policies]
    if bad:
        raise ValueError(f"{name}: policy_map names policies {bad}; there are {n_policies}")
    out = []
    for g in range(groups):
        mine = set(ids[g * per_group : (g + 1) * per_group])
        if len(mine) > 1:
            raise ValueError(
                f"{name}: envs {g * per_group}..{(g + 1) * per_group - 1} form one group (they "
                f"step together) but policy_map gives them policies {sorted(mine)}"
            )
        out.append(mine.pop())
    return out


def _probe(
    fn: Callable[[], EnvBase], policy: PolicyArg, name: str
) -> tuple[list[NestedKey], TensorDictBase]:
    """The policy's input keys and one reset TensorDict of an env (its request layout)."""
    env = fn()
    try:
        if tuple(env.batch_size):
            raise ValueError(
                f"{name}: each env must have an empty batch size (the collector batches them); "
                f"create_env_fn[0] made one of batch size {tuple(env.batch_size)}"
            )
        td = env.reset()
        in_keys = list(getattr(policy, "in_keys", None) or env.observation_keys)
        missing = [k for k in in_keys if k not in td.keys(True, True)]
        if missing:
            raise KeyError(
                f"{name}: the policy reads {missing}, which the env's reset does not give "
                f"(it gives {sorted(map(str, td.keys(True, True)))})"
            )
    finally:
        env.close()
    return in_keys, td


# ------------------------------------------------------------------------------ rollout worker
def rollout_main(
    conn: Connection,
    parent_pid: int,
    temp_dir: str | None,
    inherited: tuple[Connection, ...],
    spec: RolloutSpec,
) -> None:
    """Runs one rollout worker: one thread steps its env groups in turn, until ``"close"``."""
    if temp_dir is not None:
        use_temp_dir(temp_dir)
    watch_parent(parent_pid, cleanup=(temp_dir,) if temp_dir is not None else ())
    for other in inherited:
        other.close()
    torch.set_num_threads(spec.num_threads)
    torch.manual_seed(spec.seed + 7919 * (spec.index + 1))
    collectors: list[SyncDataCollector] = []
    driver: threading.Thread | None = None
    stop = threading.Event()
    send_lock = threading.Lock()
    released: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    try:
        for g, fns in enumerate(spec.groups):
            first = spec.first_env[g]
            makers = [_EnvMaker(f.fn, f.kwargs, spec.seed + first + j) for j, f in enumerate(fns)]
            env = SerialEnv(len(makers), makers)
            collector = SyncDataCollector.from_options(
                env,
                spec.clients[g],
                spec.options,
                worker_index=spec.index * len(spec.groups) + g,
                num_workers=spec.num_groups,
                shared_slots=spec.slots_per_group * len(spec.groups),
            )
            collectors.append(collector)
        for slot in range(spec.slots_per_group * len(collectors)):
            released.put(slot)
        conn.send(("ready", {"pid": os.getpid()}))
        driver = threading.Thread(
            target=_drive_groups,
            args=(conn, send_lock, collectors, spec, released, stop),
            daemon=True,
            name="rollout-groups",
        )
        driver.start()
        while True:
            cmd, arg = conn.recv()
            if cmd == "close":
                return
            if cmd == "release":
                released.put(arg)
            else:
                raise ValueError(f"rollout worker: unknown command {cmd!r}")
    except (KeyboardInterrupt, BrokenPipeError, EOFError):
        pass
    except BaseException as err:  # noqa: BLE001 - every failure goes to the parent
        with send_lock:
            send_error(conn, err)
    finally:
        stop.set()
        released.put(None)
        if driver is not None:
            driver.join(2.0)
        for collector in collectors:
            try:
                collector.shutdown()
            except Exception:  # noqa: BLE001 - the parent already knows, or is gone
                pass
        drain_pipe(conn)
        conn.close()
        if parent_gone():
            exit_worker()


class _GroupRollout:
    """One group's chunk in progress: its generator, slot, and the request in flight."""

    def __init__(self, steps: Generator[TensorDictBase, TensorDictBase, TensorDictBase], slot: int):
        self.steps = steps
        self.slot = slot
        self.td: TensorDictBase | None = None
        self.handle: Any = None


def _drive_groups(
    conn: Connection,
    send_lock: threading.Lock,
    collectors: list[SyncDataCollector],
    spec: RolloutSpec,
    released: queue.SimpleQueue[int | None],
    stop: threading.Event,
) -> None:
    """Steps every env group of a worker in one thread, fills free slots, announces chunks.

    Double-buffered sampling: each group sends its observations to the server and the thread
    steps the next group's envs while the actions are computed, then comes back for them
    (:meth:`~torchrl.collectors.SyncDataCollector.rollout_steps`). One thread instead of a
    thread per group: the groups never contend for the GIL. With envs off the CPU the requests
    go through the collector's device moves: the groups then run one after the other.
    """
    cooperative = spec.options.policy_device is None
    per_group = spec.slots_per_group
    free: list[list[int]] = [[] for _ in collectors]
    running: list[_GroupRollout | None] = [None] * len(collectors)
    sent: set[int] = set()
    clients = [cast(PolicyClientModule, c.policy) for c in collectors]
    exploration = collectors[0].exploration_type
    try:
        with torch.no_grad(), set_exploration_type(exploration, thread_local=True):
            while not stop.is_set():
                # Take the slots the learner released; block only when no group has work.
                block = not any(running) and not any(free)
                while True:
                    try:
                        slot = released.get(block=block)
                    except queue.Empty:
                        break
                    if slot is None:
                        return
                    free[slot // per_group].append(slot)
                    block = False
                for g, collector in enumerate(collectors):
                    if stop.is_set():
                        return
                    chunk = running[g]
                    if chunk is None and not cooperative and free[g]:
                        collector.batch_buffers.slot = slot = free[g].pop(0)
                        batch = collector.rollout()
                        _announce(conn, send_lock, g, slot, batch, collector, sent)
                        continue
                    if chunk is None:
                        if not free[g]:
                            continue
                        chunk = running[g] = _GroupRollout(
                            collector.rollout_steps(), free[g].pop(0)
                        )
                        collector.batch_buffers.slot = chunk.slot
                        answered = None
                    else:
                        answered = clients[g].complete(cast(TensorDictBase, chunk.td), chunk.handle)
                    try:
                        td = next(chunk.steps) if answered is None else chunk.steps.send(answered)
                    except StopIteration as done:
                        running[g] = None
                        _announce(conn, send_lock, g, chunk.slot, done.value, collector, sent)
                        continue
                    chunk.td = td
                    chunk.handle = clients[g].submit(td)
    except (BrokenPipeError, EOFError, OSError):
        stop.set()
    except BaseException as err:  # noqa: BLE001 - every failure goes to the parent
        if not stop.is_set():
            with send_lock:
                send_error(conn, err)
        stop.set()


def _announce(
    conn: Connection,
    send_lock: threading.Lock,
    group: int,
    slot: int,
    batch: TensorDictBase,
    collector: SyncDataCollector,
    sent: set[int],
) -> None:
    """Tells the parent that ``slot`` holds a chunk (with the buffer the first time)."""
    buffers = collector.batch_buffers
    steps = batch.batch_size[buffers.batch_dims] if batch.batch_dims else 0
    buffer = None
    if slot not in sent:
        buffer = buffers.batch(slot)
        sent.add(slot)
    with send_lock:
        conn.send(("batch", (group, slot, steps, buffer)))
