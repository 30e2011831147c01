"""Pieces shared by the distributed collectors: the worker-side loop and weight helpers.

The private helpers below are shared inside this folder only: a rendezvous store that listens on
one address (never on every interface), HMAC signing of the few messages that go through it, and
the start of a local Ray instance.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, cast

import torch
import torch.distributed as dist
from tensordict import TensorDictBase
from torch import nn

from torchrl._utils import start_local_ray
from torchrl.collectors._base import DataCollectorBase
from torchrl.collectors._buffer import TRAJ_KEY
from torchrl.collectors._options import CollectorOptions, MultiCollectorOptions, WorkerOptions
from torchrl.collectors._policy import PolicyLike
from torchrl.collectors.multi import MultiaSyncDataCollector, MultiSyncDataCollector
from torchrl.collectors.sync import EnvSource, SyncDataCollector
from torchrl.weight_update import MultiProcessWeightSyncScheme, WeightSyncScheme
from torchrl.weight_update.weights import policy_weights

__all__ = [
    "WorkerCore",
    "listening_store",
    "policy_weights",
    "sign_entry",
    "start_local_ray",
    "verify_entry",
    "worker_options",
]

_MAC_SIZE = hashlib.sha256().digest_size


def listening_store(host: str, port: int, world_size: int, timeout: timedelta) -> dist.TCPStore:
    """The master ``TCPStore`` of a rendezvous, listening on ``host`` only.

    ``TCPStore(host, ..., is_master=True)`` listens on every interface whatever ``host`` says;
    here the listening socket is bound to ``host`` first and handed over (the store owns and
    closes it). ``host="0.0.0.0"`` or ``"::"`` listens everywhere, as asked.
    """
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        port = sock.getsockname()[1]
    except BaseException:
        sock.close()
        raise
    # detach(): the store closes the descriptor; a Python socket closed under the store's
    # listener thread would make it abort the process.
    return dist.TCPStore(
        host,
        port,
        world_size,
        is_master=True,
        timeout=timeout,
        wait_for_workers=False,
        master_listen_fd=sock.detach(),
    )


def sign_entry(key: bytes, name: str, payload: bytes) -> bytes:
    """``payload`` prefixed with its HMAC-SHA256 under ``key`` (bound to the entry ``name``)."""
    mac = hmac.new(key, name.encode() + b"\0" + payload, hashlib.sha256).digest()
    return mac + payload


def verify_entry(key: bytes, name: str, message: bytes, who: str) -> bytes:
    """The payload of a :func:`sign_entry` message; raises if it was not signed with ``key``."""
    mac, payload = message[:_MAC_SIZE], message[_MAC_SIZE:]
    expected = hmac.new(key, name.encode() + b"\0" + payload, hashlib.sha256).digest()
    if len(message) < _MAC_SIZE or not hmac.compare_digest(mac, expected):
        raise RuntimeError(
            f"{who}: the store entry {name!r} ({len(message)} bytes) is not signed with this "
            "run's key: it was written by a process that is not one of our workers. Refusing "
            "to read it (nothing was decoded)."
        )
    return payload


def worker_options(
    collector_class: Callable[..., DataCollectorBase], kwargs: Mapping[str, Any]
) -> tuple[WorkerOptions, dict[str, Any] | None]:
    """The options a remote worker builds its collector from, checked here, before any launch.

    Args:
        collector_class: the worker's collector class.
        kwargs: its keywords (``create_env_fn`` and ``policy`` apart).

    Returns:
        ``(options, create_env_kwargs)``: validated :class:`~torchrl.collectors.CollectorOptions`
        or :class:`~torchrl.collectors.MultiCollectorOptions` for torchrl's own collectors (and
        their ``create_env_kwargs``), else the keywords themselves (and ``None``), for a class
        of another kind.

    Examples:
        >>> from torchrl.collectors import SyncDataCollector
        >>> options, env_kwargs = worker_options(SyncDataCollector, {"frames_per_batch": 8})
        >>> type(options).__name__, options.frames_per_batch, env_kwargs
        ('CollectorOptions', 8, None)
    """
    kwargs = dict(kwargs)
    if collector_class is SyncDataCollector:
        env_kwargs = kwargs.pop("create_env_kwargs", None)
        return CollectorOptions(**kwargs, owner=collector_class.__name__), env_kwargs
    if collector_class in (MultiSyncDataCollector, MultiaSyncDataCollector):
        env_kwargs = kwargs.pop("create_env_kwargs", None)
        sync = collector_class is MultiSyncDataCollector
        return MultiCollectorOptions.from_kwargs(
            collector_class.__name__, sync, **kwargs
        ), env_kwargs
    return kwargs, None


def _forever(options: WorkerOptions) -> WorkerOptions:
    """``options`` with no end of collection: the trainer counts the frames."""
    if isinstance(options, CollectorOptions):
        return options.replace(total_frames=-1)
    if isinstance(options, MultiCollectorOptions):
        return options.replace(collector=options.collector.replace(total_frames=-1))
    return {**options, "total_frames": -1}


class WorkerCore:
    """One remote worker's state: a local collector, its batch iterator and its rank.

    Ray actors and ``torch.distributed`` worker processes both drive one of these. The worker's
    collector runs without an end (``total_frames=-1``): the trainer counts the frames. Its
    trajectory ids are spread as ``id * num_workers + index`` so that ids from different
    workers never collide.

    Args:
        collector_class: the local collector class (e.g. ``SyncDataCollector``).
        create_env_fn: the env constructor given to it.
        policy: the policy given to it (the worker's own copy).
        options: the collector's options (see :func:`worker_options`; ``frames_per_batch``
            included), or the keywords of a collector class of another kind.
        index: this worker's rank among the workers, from 0.
        num_workers: how many workers there are.
        num_threads: torch threads in this worker (small machines suffer from more).
        create_env_kwargs: keyword arguments of ``create_env_fn`` (with options).
        weight_sync_scheme: the receiver side of the collector's ``"policy"`` scheme (as the
            trainer's scheme pickles), set up here on ``policy``; one that needs arguments
            known only later is set with :meth:`use_weight_sync_scheme`. By default weights
            pushed to :meth:`update_weights` are applied as they come.

    Examples:
        >>> from torchrl.collectors import CollectorOptions, SyncDataCollector
        >>> from torchrl.envs import PendulumEnv
        >>> core = WorkerCore(SyncDataCollector, PendulumEnv, None,
        ...                   CollectorOptions(frames_per_batch=8), index=1, num_workers=2)
        >>> batch, frames = core.next_batch()
        >>> frames, (batch["collector", "traj_ids"] % 2 == 1).all().item()
        (8, True)
        >>> core.shutdown()
    """

    def __init__(
        self,
        collector_class: Callable[..., DataCollectorBase],
        create_env_fn: EnvSource,
        policy: PolicyLike | None,
        options: WorkerOptions,
        index: int,
        num_workers: int,
        num_threads: int | None = 1,
        create_env_kwargs: dict[str, Any] | None = None,
        weight_sync_scheme: WeightSyncScheme | None = None,
    ) -> None:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        if not isinstance(options, (CollectorOptions, MultiCollectorOptions)):
            options, env_kwargs = worker_options(collector_class, options)
            create_env_kwargs = env_kwargs if env_kwargs is not None else create_env_kwargs
        options = _forever(options)
        self.policy = policy
        self.collector: DataCollectorBase
        if isinstance(options, (CollectorOptions, MultiCollectorOptions)):
            expected = (
                SyncDataCollector
                if isinstance(options, CollectorOptions)
                else MultiSyncDataCollector
                if options.sync
                else MultiaSyncDataCollector
            )
            if not (isinstance(collector_class, type) and issubclass(collector_class, expected)):
                raise TypeError(
                    f"WorkerCore: {type(options).__name__} builds a {expected.__name__}, not a "
                    f"{getattr(collector_class, '__name__', collector_class)}"
                )
            self.collector = collector_class.from_options(
                create_env_fn, policy, cast(Any, options), create_env_kwargs
            )
        else:
            self.collector = collector_class(create_env_fn, policy, **options)
        self.index = index
        self.num_workers = num_workers
        self._iter: Any = None
        self.weight_sync_scheme: WeightSyncScheme | None = None
        if weight_sync_scheme is None:
            # a receiver of weights pushed by the trainer (a Ray or RPC call), nothing more
            weight_sync_scheme = MultiProcessWeightSyncScheme(sync=False)
        self.use_weight_sync_scheme(weight_sync_scheme)

    def use_weight_sync_scheme(self, scheme: WeightSyncScheme, **receiver_kwargs: Any) -> None:
        """Sets ``scheme`` up as this worker's receiver of the policy's weights.

        Args:
            scheme: a scheme not initialised yet (what the trainer's scheme pickles to); it
                replaces the scheme set up before.
            **receiver_kwargs: what its ``init_on_receiver`` needs (e.g. a process group).
        """
        model = self.policy if isinstance(self.policy, nn.Module) else None
        scheme.init_on_receiver(model, worker_idx=self.index, **receiver_kwargs)
        old, self.weight_sync_scheme = self.weight_sync_scheme, scheme
        if old is not None:
            old.shutdown()

    @property
    def policy_version(self) -> int:
        """The version of the weights this worker's policy holds."""
        return self.weight_sync_scheme.version if self.weight_sync_scheme is not None else 0

    def next_batch(self) -> tuple[TensorDictBase | None, int]:
        """Collects one batch.

        Returns:
            ``(batch, frames)``; ``batch`` is ``None`` when the collector writes into a
            replay buffer itself.
        """
        if self._iter is None:
            self._iter = iter(self.collector)
        batch = next(self._iter)
        frames = int(self.collector.frames_per_batch)
        if batch is not None:
            ids = batch.get(TRAJ_KEY, None)
            if ids is not None and self.num_workers > 1:
                ids.mul_(self.num_workers).add_(self.index)
            frames = batch.numel()
        return batch, frames

    def update_weights(
        self, weights: dict[str, torch.Tensor] | None = None, version: int | None = None
    ) -> int:
        """Takes new weights through the worker's scheme, then updates the collector's copy.

        Args:
            weights: weights pushed to this worker (``None``: pull them from the scheme's
                transport, e.g. a process group).
            version: their version (default: one more than the version held).

        Returns:
            The version this worker holds now.
        """
        scheme = self.weight_sync_scheme
        assert scheme is not None
        scheme.receive(weights=weights, version=version)
        self.collector.update_policy_weights_()
        return scheme.version

    def weights(self) -> dict[str, torch.Tensor]:
        """The worker policy's current weights (CPU copies)."""
        return policy_weights(self.policy)

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the worker's collector; returns the next seed of the chain."""
        return int(self.collector.set_seed(seed, static_seed))

    def state_dict(self) -> dict[str, Any]:
        """The worker collector's state dict."""
        return self.collector.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a state dict into the worker's collector."""
        self.collector.load_state_dict(state_dict)

    def pid(self) -> int:
        """The worker's process id."""
        return os.getpid()

    def shutdown(self) -> None:
        """Shuts the worker's collector down."""
        self._iter = None
        self.collector.shutdown()
