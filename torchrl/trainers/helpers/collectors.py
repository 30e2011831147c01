"""Collector builders: synchronous or asynchronous collectors of batched envs, from a config."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from torchrl.trainers.helpers._cfg import cfg_value
from torchrl.trainers.helpers.envs import EnvConfig
from torchrl.trainers.helpers.losses import LossConfig

if TYPE_CHECKING:
    from torchrl.collectors import (
        MultiaSyncDataCollector,
        MultiSyncDataCollector,
        SyncDataCollector,
    )
    from torchrl.envs.common import EnvBase

__all__ = [
    "OffPolicyCollectorConfig",
    "OnPolicyCollectorConfig",
    "make_collector_offpolicy",
    "make_collector_onpolicy",
    "sync_async_collector",
    "sync_sync_collector",
]

EnvFn = Callable[..., "EnvBase"]


@dataclasses.dataclass
class OnPolicyCollectorConfig:
    """The collector fields read by :func:`make_collector_onpolicy` (any object with them works).

    Attributes:
        collector_device: where the collector runs the policy (``None``: the policy's device).
        pin_memory: unused (TorchRL compatibility).
        frames_per_batch: frames of each batch (all workers together).
        total_frames: frames in all.
        num_workers: envs in all (``num_workers // env_per_collector`` collectors).
        env_per_collector: envs stepped by each collector.
        seed: the collector's seed.
        exploration_mode: ``"random"``, ``"mode"``, ``"mean"``, ``"median"`` or
            ``"deterministic"``.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.trainers.helpers import make_collector_onpolicy
        >>> cfg = OnPolicyCollectorConfig(frames_per_batch=10, total_frames=20, seed=0)
        >>> collector = make_collector_onpolicy(PendulumEnv, None, cfg)
        >>> [batch.numel() for batch in collector]
        [10, 10]
        >>> collector.shutdown()
    """

    collector_device: str | None = None
    pin_memory: bool = False
    frames_per_batch: int = 1000
    total_frames: int = 50000
    num_workers: int = 1
    env_per_collector: int = 1
    seed: int = 42
    exploration_mode: str = "random"


@dataclasses.dataclass
class OffPolicyCollectorConfig(OnPolicyCollectorConfig):
    """The fields read by :func:`make_collector_offpolicy`: the on-policy ones plus these.

    Attributes:
        async_collection: asynchronous collectors (:func:`sync_async_collector`).
        init_random_frames: frames collected with random actions first.
        multi_step: rewrite transitions as n-step returns (:class:`~torchrl.data.MultiStep`,
            with the config's ``gamma``).
        n_steps_return: the ``n`` of the n-step returns.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.trainers.helpers import make_collector_offpolicy
        >>> cfg = OffPolicyCollectorConfig(frames_per_batch=10, total_frames=30,
        ...     init_random_frames=10)  # the first batch comes from random actions
        >>> collector = make_collector_offpolicy(PendulumEnv, None, cfg)
        >>> [batch.numel() for batch in collector]
        [10, 10, 10]
        >>> collector.shutdown()
    """

    async_collection: bool = False
    init_random_frames: int = 0
    multi_step: bool = False
    n_steps_return: int = 3


def _split(
    env_fns: EnvFn | Sequence[EnvFn],
    env_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None,
    num_env_per_collector: int | None,
    num_collectors: int | None,
) -> tuple[list[EnvFn], list[dict[str, Any]], int, int]:
    """Env constructors and kwargs for every env, with the per-collector and collector counts."""
    fns = list(env_fns) if isinstance(env_fns, Sequence) else None
    if fns is not None and not fns:
        raise ValueError("env_fns is an empty list")
    if num_collectors is None:
        num_collectors = 1
        if fns is not None and num_env_per_collector is not None:
            num_collectors = max(len(fns) // num_env_per_collector, 1)
    if num_env_per_collector is None:
        num_env_per_collector = len(fns) // num_collectors if fns is not None else 1
    if num_collectors < 1 or num_env_per_collector < 1:
        raise ValueError(
            f"num_collectors and num_env_per_collector must be >= 1, got {num_collectors} "
            f"and {num_env_per_collector}"
        )
    total = num_collectors * num_env_per_collector
    if fns is None:
        fns = [env_fns] * total  # type: ignore[list-item]
    elif len(fns) != total:
        raise ValueError(
            f"{len(fns)} env constructors for {num_collectors} collectors of "
            f"{num_env_per_collector} envs each ({total} envs)"
        )
    if env_kwargs is None:
        kwargs_list: list[dict[str, Any]] = [{} for _ in range(total)]
    elif isinstance(env_kwargs, dict):
        kwargs_list = [dict(env_kwargs) for _ in range(total)]
    else:
        kwargs_list = [dict(k) for k in env_kwargs]
        if len(kwargs_list) != total:
            raise ValueError(f"{len(kwargs_list)} env_kwargs for {total} env constructors")
    return fns, kwargs_list, num_env_per_collector, num_collectors


def _collector_envs(
    env_fns: EnvFn | Sequence[EnvFn],
    env_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None,
    num_env_per_collector: int | None,
    num_collectors: int | None,
    in_process: bool,
) -> tuple[list[EnvFn], list[dict[str, Any]]]:
    """One env constructor (a batched env for several envs) and its kwargs per collector."""
    from torchrl.envs.batched import ParallelEnv, SerialEnv

    fns, kwargs_list, per, count = _split(
        env_fns, env_kwargs, num_env_per_collector, num_collectors
    )
    # Workers of multi-process collectors are daemonic and cannot start processes: their envs
    # are stepped serially; an in-process collector steps its envs in worker processes.
    batched = ParallelEnv if in_process else SerialEnv
    out_fns: list[EnvFn] = []
    out_kwargs: list[dict[str, Any]] = []
    for i in range(count):
        group = slice(i * per, (i + 1) * per)
        if per == 1:
            out_fns.append(fns[i])
            out_kwargs.append(kwargs_list[i])
        else:
            out_fns.append(functools.partial(batched, per, fns[group], kwargs_list[group]))
            out_kwargs.append({})
    return out_fns, out_kwargs


def sync_sync_collector(
    env_fns: EnvFn | Sequence[EnvFn],
    env_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None,
    num_env_per_collector: int | None = None,
    num_collectors: int | None = None,
    **kwargs: Any,
) -> SyncDataCollector | MultiSyncDataCollector:
    """Synchronous collectors, each stepping a batch of envs.

    With one collector, a :class:`~torchrl.collectors.SyncDataCollector` in this process, whose
    envs (more than one) run in a :class:`~torchrl.envs.ParallelEnv`; otherwise a
    :class:`~torchrl.collectors.MultiSyncDataCollector` with one worker per collector, each
    stepping its envs in a :class:`~torchrl.envs.SerialEnv` (worker processes cannot start
    processes of their own). Envs may differ: pass one constructor per env in ``env_fns``.

    Args:
        env_fns: an env constructor, or one per env (``num_env_per_collector * num_collectors``).
        env_kwargs: keyword arguments of the constructors (one dict, or one per env).
        num_env_per_collector: envs per collector (default: all of ``env_fns`` over the
            collectors, else 1).
        num_collectors: collectors (default 1).
        **kwargs: the collector's keywords (``policy``, ``frames_per_batch``, ``total_frames``,
            ...).

    Returns:
        The collector.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> collector = sync_sync_collector(PendulumEnv, None, num_env_per_collector=2,
        ...     frames_per_batch=20, total_frames=40)
        >>> [batch.batch_size for batch in collector]
        [torch.Size([2, 10]), torch.Size([2, 10])]
        >>> collector.shutdown()
    """
    from torchrl.collectors import MultiSyncDataCollector, SyncDataCollector

    in_process = (num_collectors or 1) == 1
    fns, fn_kwargs = _collector_envs(
        env_fns, env_kwargs, num_env_per_collector, num_collectors, in_process
    )
    if len(fns) == 1:
        return SyncDataCollector(fns[0], create_env_kwargs=fn_kwargs[0], **kwargs)
    return MultiSyncDataCollector(fns, create_env_kwargs=fn_kwargs, **kwargs)


def sync_async_collector(
    env_fns: EnvFn | Sequence[EnvFn],
    env_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None,
    num_env_per_collector: int | None = None,
    num_collectors: int | None = None,
    **kwargs: Any,
) -> MultiaSyncDataCollector:
    """Asynchronous collectors (a :class:`~torchrl.collectors.MultiaSyncDataCollector`), each
    stepping a batch of envs.

    Each worker process runs one collector over its envs (a :class:`~torchrl.envs.SerialEnv`
    when it has several); batches are returned as workers finish them.

    Args:
        env_fns: an env constructor, or one per env (``num_env_per_collector * num_collectors``).
        env_kwargs: keyword arguments of the constructors (one dict, or one per env).
        num_env_per_collector: envs per collector (default: all of ``env_fns`` over the
            collectors, else 1).
        num_collectors: collectors (default 1).
        **kwargs: the collector's keywords (``policy``, ``frames_per_batch``, ...).

    Returns:
        The collector.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> collector = sync_async_collector(PendulumEnv, None, num_collectors=2,
        ...     frames_per_batch=10, total_frames=20)
        >>> sum(batch.numel() for batch in collector)
        20
        >>> collector.shutdown()
    """
    from torchrl.collectors import MultiaSyncDataCollector

    fns, fn_kwargs = _collector_envs(
        env_fns, env_kwargs, num_env_per_collector, num_collectors, in_process=False
    )
    return MultiaSyncDataCollector(fns, create_env_kwargs=fn_kwargs, **kwargs)


def _exploration_type(mode: str) -> Any:
    from torchrl.envs.utils import ExplorationType

    try:
        return ExplorationType(mode.lower())
    except ValueError:
        raise ValueError(
            f"exploration_mode must be one of {[m.value for m in ExplorationType]}, got {mode!r}"
        ) from None


def _make_collector(
    make_env: EnvFn,
    actor_model_explore: Any,
    cfg: Any,
    make_env_kwargs: dict[str, Any] | None,
    off_policy: bool,
) -> SyncDataCollector | MultiSyncDataCollector | MultiaSyncDataCollector:
    def get(name: str) -> Any:
        return cfg_value(cfg, name, OffPolicyCollectorConfig)

    env_per_collector = int(get("env_per_collector"))
    num_collectors = max(int(get("num_workers")) // env_per_collector, 1)
    max_frames = cfg_value(cfg, "max_frames_per_traj", EnvConfig)
    kwargs: dict[str, Any] = {
        "policy": actor_model_explore,
        "frames_per_batch": int(get("frames_per_batch")),
        "total_frames": int(get("total_frames")),
        # <= 0 means no limit, as in EnvConfig
        "max_frames_per_traj": int(max_frames) if max_frames and max_frames > 0 else None,
        "split_trajs": False,
        "device": get("collector_device"),
        "exploration_type": _exploration_type(str(get("exploration_mode"))),
    }
    helper: Callable[..., Any] = sync_sync_collector
    if off_policy:
        kwargs["init_random_frames"] = int(get("init_random_frames") or 0)
        if get("multi_step"):
            from torchrl.data.postprocs import MultiStep

            kwargs["postproc"] = MultiStep(
                gamma=float(cfg_value(cfg, "gamma", LossConfig)),
                n_steps=int(get("n_steps_return")),
            )
        if get("async_collection"):
            helper = sync_async_collector
    collector = helper(
        make_env,
        make_env_kwargs,
        num_env_per_collector=env_per_collector,
        num_collectors=num_collectors,
        **kwargs,
    )
    collector.set_seed(int(get("seed")))
    return collector


def make_collector_offpolicy(
    make_env: EnvFn,
    actor_model_explore: Any,
    cfg: Any,
    make_env_kwargs: dict[str, Any] | None = None,
) -> SyncDataCollector | MultiSyncDataCollector | MultiaSyncDataCollector:
    """A collector for off-policy training, built from ``cfg`` (:class:`OffPolicyCollectorConfig`).

    ``num_workers // env_per_collector`` collectors of ``env_per_collector`` envs each (see
    :func:`sync_sync_collector`; :func:`sync_async_collector` with ``async_collection``),
    ``init_random_frames`` random frames first, n-step returns with ``multi_step``, episodes
    cut at ``max_frames_per_traj``, seeded with ``seed``.

    Args:
        make_env: the env constructor.
        actor_model_explore: the exploration policy.
        cfg: the config.
        make_env_kwargs: keyword arguments of ``make_env``.

    Returns:
        The collector.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> cfg = OffPolicyCollectorConfig(frames_per_batch=10, total_frames=20)
        >>> collector = make_collector_offpolicy(PendulumEnv, None, cfg)
        >>> [batch.numel() for batch in collector]
        [10, 10]
    """
    return _make_collector(make_env, actor_model_explore, cfg, make_env_kwargs, off_policy=True)


def make_collector_onpolicy(
    make_env: EnvFn,
    actor_model_explore: Any,
    cfg: Any,
    make_env_kwargs: dict[str, Any] | None = None,
) -> SyncDataCollector | MultiSyncDataCollector:
    """A synchronous collector for on-policy training, from ``cfg`` (:class:`OnPolicyCollectorConfig`).

    ``num_workers // env_per_collector`` collectors of ``env_per_collector`` envs each (see
    :func:`sync_sync_collector`), episodes cut at ``max_frames_per_traj``, seeded with ``seed``.

    Args:
        make_env: the env constructor.
        actor_model_explore: the policy.
        cfg: the config.
        make_env_kwargs: keyword arguments of ``make_env``.

    Returns:
        The collector.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> cfg = OnPolicyCollectorConfig(frames_per_batch=10, total_frames=10)
        >>> collector = make_collector_onpolicy(PendulumEnv, None, cfg)
        >>> next(iter(collector)).batch_size
        torch.Size([10])
    """
    collector = _make_collector(
        make_env, actor_model_explore, cfg, make_env_kwargs, off_policy=False
    )
    return cast("SyncDataCollector | MultiSyncDataCollector", collector)
