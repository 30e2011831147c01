"""The validated options of the collectors, built once from their keywords.

Every collector keeps its TorchRL keywords; its constructor turns them into one of these frozen
dataclasses, which checks each value once (a wrong value raises ``ValueError`` naming the
collector, the keyword, what was expected and what came) and holds it in a normalized form
(counts as ``int``, devices as ``torch.device``, no end as ``math.inf``). Workers receive the
options whole: a multi-process worker gets the :class:`CollectorOptions` of its local
collector, a Ray or distributed worker the options of the collector class it runs.

- :class:`CollectorOptions`: a local collector (:class:`~torchrl.collectors.SyncDataCollector`).
- :class:`MultiCollectorOptions`: the multi-process collectors: the options of each worker's
  local collector plus those of the processes.
- :class:`RemoteCollectorOptions`: the Ray and distributed collectors: the trainer's side.

A field has the name of the keyword it comes from, so ``CollectorOptions(**kwargs)`` takes a
collector's keywords (an unknown one is a ``TypeError`` naming it).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np
import torch
from tensordict import TensorDictBase

from torchrl._compile import compile_options
from torchrl._types import DeviceLike, ReplayBufferLike
from torchrl.collectors._base import check_count
from torchrl.envs.utils import ExplorationType

__all__ = [
    "CollectorOptions",
    "Interruptor",
    "MultiCollectorOptions",
    "RemoteCollectorOptions",
    "check_total_frames",
    "policy_compile_options",
    "policy_cudagraph_options",
]


@runtime_checkable
class Interruptor(Protocol):
    """Ends a collector's batch early: the collector asks before every step."""

    def collection_stopped(self) -> bool: ...


def _device(value: DeviceLike, owner: str, name: str) -> torch.device | None:
    if value is None:
        return None
    try:
        return torch.device(value)
    except (RuntimeError, TypeError) as err:
        raise ValueError(
            f"{owner}: {name} must be a torch.device, a device string or index, or None; got "
            f"{value!r} ({type(value).__name__})"
        ) from err


def _flag(value: Any, owner: str, name: str, default: bool) -> bool:
    """A yes/no keyword: a bool (numpy's too) or the integers 0 and 1; ``None``: the default."""
    if value is None:
        return default
    if isinstance(value, (bool, np.bool_)) or (
        not isinstance(value, float) and isinstance(value, numbers.Integral) and value in (0, 1)
    ):
        return bool(value)
    raise ValueError(
        f"{owner}: {name} must be True or False, got {value!r} ({type(value).__name__})"
    )


def _exploration(value: Any, owner: str) -> ExplorationType | None:
    """An :class:`ExplorationType`, its name (any case), or ``None`` (modules' own default)."""
    if value is None or isinstance(value, ExplorationType):
        return value
    if isinstance(value, str):
        for member in ExplorationType:
            if value.lower() in (member.name.lower(), str(member.value).lower()):
                return member
    names = [m.name for m in ExplorationType]
    raise ValueError(
        f"{owner}: exploration_type must be an ExplorationType, one of the names {names}, or "
        f"None; got {value!r} ({type(value).__name__})"
    )


def policy_compile_options(value: object, owner: str) -> dict[str, Any] | None:
    """Validates a ``compile_policy`` keyword: ``torch.compile`` keyword arguments or ``None``.

    Args:
        value: ``None``/``False`` (eager), ``True`` (``torch.compile`` defaults) or a dict of
            :func:`torch.compile` keywords, plus ``"warmup"`` (eager calls before compiling).
        owner: the collector's class name, for messages.

    Returns:
        ``None``, or a new dict of keyword arguments.

    Examples:
        >>> policy_compile_options(True, "Collector")
        {}
        >>> policy_compile_options({"backend": "eager", "warmup": 2}, "Collector")
        {'backend': 'eager', 'warmup': 2}
        >>> policy_compile_options({"fullgraf": True}, "Collector")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Collector: compile_policy has unknown keys ['fullgraf']; torch.compile takes [...
    """
    options = compile_options(
        cast("bool | Mapping[str, Any] | None", value), owner, "compile_policy"
    )
    if options is None:
        return None
    allowed = sorted(_torch_compile_keywords())
    unknown = sorted(k for k in options if k not in allowed and k != "warmup")
    if unknown:
        raise ValueError(
            f"{owner}: compile_policy has unknown keys {unknown}; torch.compile takes "
            f"{allowed} (and 'warmup': eager calls before compiling)"
        )
    warmup = options.get("warmup", 0)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"{owner}: compile_policy['warmup'] must be an int >= 0, got {warmup!r}")
    return options


def _torch_compile_keywords() -> set[str]:
    import inspect

    return set(inspect.signature(torch.compile).parameters) - {"model"}


#: The keywords of ``tensordict.nn.CudaGraphModule`` a collector passes on (it sets the keys).
_CUDAGRAPH_KEYWORDS = ("device", "warmup")


def policy_cudagraph_options(value: object, owner: str) -> dict[str, Any] | None:
    """Validates a ``cudagraph_policy`` keyword: ``CudaGraphModule`` keyword arguments or ``None``.

    CUDA graphs need CUDA: any value but ``None``/``False`` raises ``ValueError`` on a machine
    without it (the collector then checks that the policy runs on a CUDA device).

    Args:
        value: ``None``/``False`` (no graph), ``True`` (defaults) or a dict with the
            ``CudaGraphModule`` keywords ``"warmup"`` (the call that records the graph) and
            ``"device"``.
        owner: the collector's class name, for messages.

    Returns:
        ``None``, or a new dict of keyword arguments.

    Examples:
        >>> policy_cudagraph_options(None, "Collector") is None
        True
        >>> policy_cudagraph_options({"in_keys": ["x"]}, "Collector")
        Traceback (most recent call last):
        ...
        ValueError: Collector: cudagraph_policy has unknown keys ['in_keys']; allowed: ['device', 'warmup'] (the collector sets in_keys and out_keys from the policy)
    """
    options = compile_options(
        cast("bool | Mapping[str, Any] | None", value), owner, "cudagraph_policy"
    )
    if options is None:
        return None
    unknown = sorted(k for k in options if k not in _CUDAGRAPH_KEYWORDS)
    if unknown:
        raise ValueError(
            f"{owner}: cudagraph_policy has unknown keys {unknown}; allowed: "
            f"{sorted(_CUDAGRAPH_KEYWORDS)} (the collector sets in_keys and out_keys from the "
            "policy)"
        )
    warmup = options.get("warmup", 2)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
        raise ValueError(f"{owner}: cudagraph_policy['warmup'] must be an int >= 1, got {warmup!r}")
    if not torch.cuda.is_available():
        raise ValueError(
            f"{owner}: cudagraph_policy needs CUDA (CUDA graphs record GPU kernels), but "
            "torch.cuda.is_available() is False; leave cudagraph_policy=None on this machine"
        )
    return options


def check_total_frames(owner: str, total_frames: object) -> int | float:
    """Validates a ``total_frames``: a positive integer, or ``-1``/``None``/``inf`` for no end.

    Args:
        owner: the collector's class name, for messages.
        total_frames: what the caller passed.

    Returns:
        The count as a plain ``int``, or ``math.inf``.

    Examples:
        >>> check_total_frames("Collector", -1)
        inf
        >>> check_total_frames("Collector", 0)
        Traceback (most recent call last):
        ...
        ValueError: Collector: total_frames must be an integer >= 1, got 0 (-1 or None: collect forever)
    """
    if total_frames is None or total_frames == -1 or total_frames == math.inf:
        return math.inf
    try:
        return check_count(owner, "total_frames", total_frames, minimum=1)
    except ValueError as err:
        raise ValueError(f"{err} (-1 or None: collect forever)") from None


@dataclass(frozen=True)
class CollectorOptions:
    """The options of a local collector, checked and normalized at construction.

    The fields are the keywords of :class:`~torchrl.collectors.SyncDataCollector` (see there
    for their meaning), but for ``create_env_fn``, ``policy`` and ``create_env_kwargs``.
    ``frames_per_batch`` and ``total_frames`` are validated here and rounded by the collector,
    which knows how many frames one step adds. ``owner`` names the collector in messages.

    Examples:
        >>> from torchrl.collectors import CollectorOptions
        >>> opts = CollectorOptions(frames_per_batch=8, total_frames=-1, device="cpu")
        >>> opts.total_frames, opts.device, opts.init_random_frames
        (inf, device(type='cpu'), 0)
        >>> CollectorOptions(frames_per_batch=8, max_frames_per_traj=0)
        Traceback (most recent call last):
        ...
        ValueError: SyncDataCollector: max_frames_per_traj must be an integer >= 1, got 0
    """

    frames_per_batch: int
    total_frames: int | float | None = -1
    device: DeviceLike = None
    storing_device: DeviceLike = None
    policy_device: DeviceLike = None
    env_device: DeviceLike = None
    max_frames_per_traj: int | None = None
    init_random_frames: int | None = None
    reset_at_each_iter: bool = False
    postproc: Callable[[TensorDictBase], TensorDictBase] | None = None
    split_trajs: bool | None = None
    exploration_type: ExplorationType | str | None = ExplorationType.RANDOM
    return_same_td: bool = False
    reset_when_done: bool = True
    interruptor: Interruptor | None = None
    set_truncated: bool = False
    use_buffers: bool | None = None
    replay_buffer: ReplayBufferLike | None = None
    trust_policy: bool | None = None
    extend_buffer: bool = True
    track_policy_version: bool = False
    # dicts (not hashable): left out of the dataclass hash
    compile_policy: bool | Mapping[str, Any] | None = field(default=None, hash=False)
    cudagraph_policy: bool | Mapping[str, Any] | None = field(default=None, hash=False)
    owner: str = field(default="SyncDataCollector", compare=False)

    def __post_init__(self) -> None:
        owner = self.owner
        put = object.__setattr__  # normalizing the fields of a frozen dataclass, once
        put(self, "compile_policy", policy_compile_options(self.compile_policy, owner))
        put(self, "cudagraph_policy", policy_cudagraph_options(self.cudagraph_policy, owner))
        put(
            self,
            "frames_per_batch",
            check_count(owner, "frames_per_batch", self.frames_per_batch, 1),
        )
        put(self, "total_frames", check_total_frames(owner, self.total_frames))
        for name in ("device", "storing_device", "policy_device", "env_device"):
            put(self, name, _device(getattr(self, name), owner, name))
        if self.max_frames_per_traj is not None:
            put(
                self,
                "max_frames_per_traj",
                check_count(owner, "max_frames_per_traj", self.max_frames_per_traj, 1),
            )
        put(
            self,
            "init_random_frames",
            check_count(owner, "init_random_frames", self.init_random_frames or 0),
        )
        flags = {
            "reset_at_each_iter": False,
            "split_trajs": False,
            "return_same_td": False,
            "reset_when_done": True,
            "set_truncated": False,
            "use_buffers": True,
            "trust_policy": False,
            "extend_buffer": True,
            "track_policy_version": False,
        }
        for name, default in flags.items():
            put(self, name, _flag(getattr(self, name), owner, name, default))
        if self.postproc is not None and not callable(self.postproc):
            raise ValueError(
                f"{owner}: postproc must be a callable or None, got {type(self.postproc).__name__}"
            )
        put(self, "exploration_type", _exploration(self.exploration_type, owner))
        if self.interruptor is not None and not callable(
            getattr(self.interruptor, "collection_stopped", None)
        ):
            raise ValueError(
                f"{owner}: interruptor must have a collection_stopped() method, got "
                f"{type(self.interruptor).__name__}"
            )
        if self.replay_buffer is not None:
            if not callable(getattr(self.replay_buffer, "extend", None)):
                raise ValueError(
                    f"{owner}: replay_buffer must have an extend() method, got "
                    f"{type(self.replay_buffer).__name__}"
                )
            if self.split_trajs:
                raise ValueError(f"{owner}: split_trajs cannot be used with a replay_buffer")

    def replace(self, **changes: Any) -> CollectorOptions:
        """A copy with some fields changed (and checked again)."""
        return dataclasses.replace(self, **changes)


_COLLECTOR_FIELDS = frozenset(f.name for f in dataclasses.fields(CollectorOptions)) - {"owner"}


@dataclass(frozen=True)
class MultiCollectorOptions:
    """The options of a multi-process collector: the workers' collector and the processes.

    ``collector`` holds the keywords a :class:`~torchrl.collectors.SyncDataCollector` takes
    too (as the user gave them, for the whole collector); the other fields are the keywords of
    the multi-process collectors (see :class:`~torchrl.collectors.MultiSyncDataCollector`).
    ``sync`` tells which of the two collectors these options are for. Build them from keywords
    with :meth:`from_kwargs`; each worker's local collector gets :meth:`worker_options`.

    Examples:
        >>> from torchrl.collectors import MultiCollectorOptions
        >>> opts = MultiCollectorOptions.from_kwargs(
        ...     "MultiSyncDataCollector", sync=True, frames_per_batch=8, preemptive_threshold=0.5
        ... )
        >>> opts.cat_results, opts.collector.frames_per_batch
        (-1, 8)
    """

    collector: CollectorOptions
    sync: bool = True
    num_workers: int | None = None
    update_at_each_batch: bool = False
    preemptive_threshold: float | None = None
    num_threads: int | None = None
    num_sub_threads: int = 1
    cat_results: str | int | None = None
    mp_start_method: str | None = None
    timeout: float | None = 600.0
    owner: str = field(default="MultiSyncDataCollector", compare=False)

    @classmethod
    def from_kwargs(cls, owner: str, sync: bool, **kwargs: Any) -> MultiCollectorOptions:
        """Splits a multi-process collector's keywords into the two kinds of options.

        Args:
            owner: the collector's class name, for messages.
            sync: for ``MultiSyncDataCollector`` (``True``) or ``MultiaSyncDataCollector``.
            **kwargs: the collector's keywords (but ``create_env_fn``, ``policy`` and
                ``create_env_kwargs``).

        Returns:
            The validated options.
        """
        local = {k: kwargs.pop(k) for k in list(kwargs) if k in _COLLECTOR_FIELDS}
        return cls(CollectorOptions(**local, owner=owner), sync=sync, **kwargs, owner=owner)

    def __post_init__(self) -> None:
        owner, opts = self.owner, self.collector
        put = object.__setattr__  # normalizing the fields of a frozen dataclass, once
        put(self, "sync", bool(self.sync))
        put(
            self,
            "update_at_each_batch",
            _flag(self.update_at_each_batch, owner, "update_at_each_batch", False),
        )
        timeout = self.timeout
        if timeout is not None and not (isinstance(timeout, numbers.Real) and timeout > 0):
            raise ValueError(
                f"{owner}: timeout must be a positive number of seconds or None, got {timeout!r}"
            )
        put(self, "timeout", None if timeout is None else float(timeout))
        if self.num_workers is not None:
            put(self, "num_workers", check_count(owner, "num_workers", self.num_workers, 1))
        put(self, "num_sub_threads", check_count(owner, "num_sub_threads", self.num_sub_threads, 1))
        if self.num_threads is not None:
            put(self, "num_threads", check_count(owner, "num_threads", self.num_threads, 1))
        if not opts.use_buffers:
            raise ValueError(
                f"{owner} moves data through shared-memory buffers: use_buffers=False is not "
                "supported"
            )
        if opts.storing_device is not None and torch.device(opts.storing_device).type != "cpu":
            raise ValueError(
                f"{owner}: batches are shared through CPU memory; storing_device must be the CPU "
                f"(got {opts.storing_device}); move the batches yourself"
            )
        threshold, cat = self.preemptive_threshold, self.cat_results
        if threshold is not None:
            if not self.sync:
                raise ValueError(f"{owner}: preemptive_threshold applies to MultiSyncDataCollector")
            if not (isinstance(threshold, numbers.Real) and 0.0 < threshold <= 1.0):
                raise ValueError(
                    f"{owner}: preemptive_threshold must be in (0, 1], got {threshold!r}"
                )
            if cat == "stack":
                raise ValueError(
                    f"{owner}: with preemptive_threshold, workers return batches of different "
                    "lengths, which cannot be stacked: use cat_results=-1 (the time dim)"
                )
        if cat is None:
            put(self, "cat_results", -1 if threshold is not None else "stack")
        elif cat != "stack" and (not isinstance(cat, int) or isinstance(cat, bool)):
            raise ValueError(f"{owner}: cat_results must be 'stack' or a dim (int), got {cat!r}")
        methods = ("fork", "spawn", "forkserver")
        if self.mp_start_method is not None and self.mp_start_method not in methods:
            raise ValueError(
                f"{owner}: mp_start_method must be one of {methods} or None, got "
                f"{self.mp_start_method!r}"
            )

    def worker_options(
        self, frames_per_batch: int, init_random_frames: int, interruptor: Interruptor
    ) -> CollectorOptions:
        """The options of one worker's local collector.

        It collects ``frames_per_batch`` frames per batch for ever, into CPU shared memory,
        returning its buffer itself (the parent reads it in place); post-processing, splitting
        and replay buffers are the parent's.

        Args:
            frames_per_batch: the frames of the worker's share of a batch.
            init_random_frames: the worker's share of the random frames.
            interruptor: the parent's stop flag.

        Returns:
            The worker collector's options.
        """
        return self.collector.replace(
            frames_per_batch=frames_per_batch,
            total_frames=-1,
            storing_device="cpu",
            init_random_frames=init_random_frames,
            return_same_td=True,
            postproc=None,
            split_trajs=False,
            replay_buffer=None,
            interruptor=interruptor,
            owner="SyncDataCollector",
        )

    def replace(self, **changes: Any) -> MultiCollectorOptions:
        """A copy with some fields changed (and checked again)."""
        return dataclasses.replace(self, **changes)


#: What a remote worker builds its collector from: options, or keywords of another class.
WorkerOptions = CollectorOptions | MultiCollectorOptions | Mapping[str, Any]


@dataclass(frozen=True)
class RemoteCollectorOptions:
    """The trainer-side options of the Ray and distributed collectors.

    Built by :meth:`build` from their shared keywords: the number of workers (given, or the
    length of the per-worker lists), the frame counts, the weight-update policy, the timeout.

    Examples:
        >>> from torchrl.collectors import RemoteCollectorOptions
        >>> opts = RemoteCollectorOptions.build(
        ...     "RayCollector", workers_keyword="num_collectors", num_workers=None,
        ...     per_worker=[[1, 2], None], default_workers=1, sync=True, frames_per_batch=8,
        ... )
        >>> opts.num_workers, opts.worker_frames
        (2, 4)
    """

    num_workers: int
    sync: bool
    frames_per_batch: int
    total_frames: int | float
    update_after_each_batch: bool = False
    max_weight_update_interval: int = -1
    replay_buffer: ReplayBufferLike | None = None
    timeout: float = 600.0
    num_threads: int | None = 1
    owner: str = field(default="RayCollector", compare=False)

    @classmethod
    def build(
        cls,
        owner: str,
        *,
        workers_keyword: str,
        num_workers: int | None,
        per_worker: Sequence[Any],
        default_workers: int,
        sync: bool,
        frames_per_batch: int,
        total_frames: int | None = -1,
        update_after_each_batch: bool = False,
        max_weight_update_interval: int = -1,
        replay_buffer: ReplayBufferLike | None = None,
        timeout: float = 600.0,
        num_threads: int | None = 1,
    ) -> RemoteCollectorOptions:
        """Checks the keywords shared by the Ray and distributed collectors.

        Args:
            owner: the collector's class name, for messages.
            workers_keyword: how the collector calls its number of workers.
            num_workers: that number, or ``None`` to take it from the per-worker lists.
            per_worker: the arguments that may be one entry per worker (lists other than
                dicts and strings count).
            default_workers: the number of workers when nothing gives it.
            others: the collector's keywords of the same names.

        Returns:
            The validated options.
        """
        n = num_workers
        for arg in per_worker:
            if isinstance(arg, Sequence) and not isinstance(arg, (str, dict)):
                n = len(arg) if n is None else n
                if len(arg) != n:
                    raise ValueError(
                        f"{owner}: got {len(arg)} entries in a per-worker list for "
                        f"{workers_keyword}={n}"
                    )
        n = check_count(owner, workers_keyword, default_workers if n is None else n, 1)
        frames = check_count(owner, "frames_per_batch", frames_per_batch, 1)
        if sync and frames % n:
            raise ValueError(
                f"{owner}: with sync=True, frames_per_batch ({frames}) must be a multiple of "
                f"{workers_keyword} ({n})"
            )
        if timeout is None or not (isinstance(timeout, numbers.Real) and timeout > 0):
            raise ValueError(
                f"{owner}: timeout must be a positive number of seconds, got {timeout!r}"
            )
        if num_threads is not None:
            num_threads = check_count(owner, "num_threads", num_threads, 1)
        try:
            interval = int(max_weight_update_interval)
        except (TypeError, ValueError):
            raise ValueError(
                f"{owner}: max_weight_update_interval must be an integer (-1: never), got "
                f"{max_weight_update_interval!r}"
            ) from None
        if replay_buffer is not None and not callable(getattr(replay_buffer, "extend", None)):
            raise ValueError(
                f"{owner}: replay_buffer must have an extend() method, got "
                f"{type(replay_buffer).__name__}"
            )
        return cls(
            num_workers=n,
            sync=bool(sync),
            frames_per_batch=frames,
            total_frames=check_total_frames(owner, total_frames),
            update_after_each_batch=bool(update_after_each_batch),
            max_weight_update_interval=interval,
            replay_buffer=replay_buffer,
            timeout=float(timeout),
            num_threads=num_threads,
            owner=owner,
        )

    @property
    def worker_frames(self) -> int:
        """The frames of one worker's batch (a share of a sync batch, or a whole batch)."""
        return self.frames_per_batch // self.num_workers if self.sync else self.frames_per_batch

    def per_worker(self, arg: object) -> list[Any]:
        """``arg`` for each worker: itself when it is a per-worker list, else repeated."""
        if isinstance(arg, Sequence) and not isinstance(arg, (str, dict)):
            return list(arg)
        return [arg] * self.num_workers

    def worker_kwargs(
        self, collector_kwargs: dict[str, Any] | Sequence[dict[str, Any] | None] | None
    ) -> list[dict[str, Any]]:
        """Each worker's collector keywords, with its ``frames_per_batch`` set here."""
        out = []
        for kwargs in self.per_worker(collector_kwargs):
            kwargs = dict(kwargs or {})
            for key in ("frames_per_batch", "total_frames"):
                if key in kwargs:
                    raise ValueError(
                        f"{self.owner}: give {key} to {self.owner} itself, not in collector_kwargs"
                    )
            kwargs["frames_per_batch"] = self.worker_frames
            out.append(kwargs)
        return out
