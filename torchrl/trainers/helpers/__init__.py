"""Builders of envs, collectors, losses, replay buffers and trainers from a config object."""

from __future__ import annotations

from torchrl.trainers.helpers.collectors import (
    OffPolicyCollectorConfig,
    OnPolicyCollectorConfig,
    make_collector_offpolicy,
    make_collector_onpolicy,
    sync_async_collector,
    sync_sync_collector,
)
from torchrl.trainers.helpers.config import HelpersConfig
from torchrl.trainers.helpers.envs import (
    EnvConfig,
    correct_for_frame_skip,
    get_stats_random_rollout,
    parallel_env_constructor,
    transformed_env_constructor,
)
from torchrl.trainers.helpers.losses import LossConfig, make_dqn_loss, make_target_updater
from torchrl.trainers.helpers.replay_buffer import ReplayArgsConfig, make_replay_buffer
from torchrl.trainers.helpers.trainers import TrainerConfig, make_trainer

__all__ = [
    "EnvConfig",
    "HelpersConfig",
    "LossConfig",
    "OffPolicyCollectorConfig",
    "OnPolicyCollectorConfig",
    "ReplayArgsConfig",
    "TrainerConfig",
    "correct_for_frame_skip",
    "get_stats_random_rollout",
    "make_collector_offpolicy",
    "make_collector_onpolicy",
    "make_dqn_loss",
    "make_replay_buffer",
    "make_target_updater",
    "make_trainer",
    "parallel_env_constructor",
    "sync_async_collector",
    "sync_sync_collector",
    "transformed_env_constructor",
]
