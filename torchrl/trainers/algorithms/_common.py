"""Wiring shared by the algorithm trainers: logging ops, extra hooks, keyword checks.

Private to :mod:`torchrl.trainers.algorithms`; the trainers built on it are the public API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tensordict import TensorDictBase

from torchrl._keys import COLLECTOR, MASK, NEXT
from torchrl._types import NestedKey
from torchrl.record.loggers.common import as_float
from torchrl.trainers.hooks import LogReward, UpdateWeights

if TYPE_CHECKING:
    from torchrl.trainers.trainer import Trainer


def next_key(key: NestedKey) -> NestedKey:
    """``key`` under ``"next"``: ``"reward"`` -> ``("next", "reward")``."""
    return (NEXT, *key) if isinstance(key, tuple) else (NEXT, key)


def valid_items(batch: TensorDictBase) -> TensorDictBase:
    """The flattened items of a collected batch that are real data (padding dropped)."""
    flat = batch.reshape(-1)
    mask = flat.get((COLLECTOR, MASK), None)
    return flat[mask] if mask is not None else flat


class EntryNormLog:
    """Logs the mean L2 norm (over the last dim) of one entry of every collected batch."""

    def __init__(self, key: NestedKey, logname: str) -> None:
        self.key = key
        self.logname = logname

    def __call__(self, batch: TensorDictBase | None) -> dict[str, float] | None:
        if batch is None:
            return None
        value = batch.get(self.key, None)
        if value is None or value.numel() == 0:
            return None
        value = value.float()
        norm = value.norm(dim=-1) if value.ndim > batch.ndim else value.abs()
        return {self.logname: as_float(norm.mean())}


class EpisodeLog:
    """Logs the mean return of the episodes that end in a batch and the share of done steps."""

    def __init__(self, episode_reward_key: NestedKey, done_key: NestedKey) -> None:
        self.episode_reward_key = next_key(episode_reward_key)
        self.done_key = next_key(done_key)

    def __call__(self, batch: TensorDictBase | None) -> dict[str, float] | None:
        if batch is None:
            return None
        done = batch.get(self.done_key, None)
        if done is None:
            return None
        out = {"done_fraction": as_float(done.float().mean())}
        returns = batch.get(self.episode_reward_key, None)
        if returns is not None and bool(done.any()):
            out["episode_reward"] = as_float(returns[done].float().mean())
        return out


def register_common(
    trainer: Trainer,
    *,
    collector: Any,
    enable_logging: bool,
    log_rewards: bool,
    log_actions: bool,
    log_observations: bool,
    reward_key: NestedKey,
    action_key: NestedKey,
    observation_key: NestedKey,
    done_key: NestedKey,
    episode_reward_key: NestedKey,
    lr_scheduler: Any,
    hooks: Sequence[Any] | None,
) -> None:
    """Registers weight updates, the learning-rate scheduler, the logging ops and user hooks."""
    if collector is not None and callable(getattr(collector, "update_policy_weights_", None)):
        UpdateWeights(collector, update_weights_interval=1).register(trainer)
    if lr_scheduler is not None:
        if not callable(getattr(lr_scheduler, "step", None)):
            raise TypeError(
                f"lr_scheduler must have a step() method, got {type(lr_scheduler).__name__}"
            )
        # Stepped once per collected batch, after the optimization steps.
        trainer.register_op("post_steps", lr_scheduler.step)
        trainer.register_module("lr_scheduler", lr_scheduler)
    if enable_logging:
        if log_rewards:
            LogReward(log_pbar=True, reward_key=next_key(reward_key)).register(trainer)
            trainer.register_op("pre_steps_log", EpisodeLog(episode_reward_key, done_key))
        if log_actions:
            trainer.register_op("pre_steps_log", EntryNormLog(action_key, "action_norm"))
        if log_observations:
            trainer.register_op("pre_steps_log", EntryNormLog(observation_key, "observation_norm"))
    for hook in hooks or ():
        register = getattr(hook, "register", None)
        if not callable(register):
            raise TypeError(
                f"hooks: {type(hook).__name__} has no register(trainer) method; register plain "
                f"callables with trainer.register_op(dest, op)"
            )
        register(trainer)


def check_positive(name: str, value: Any, allow_none: bool = True) -> None:
    """Raises a ``ValueError`` naming ``name`` unless ``value`` is an int >= 1 (or None)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
