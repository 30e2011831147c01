"""One config with every field the helpers read."""

from __future__ import annotations

import dataclasses

from torchrl.trainers.helpers.collectors import OffPolicyCollectorConfig
from torchrl.trainers.helpers.envs import EnvConfig
from torchrl.trainers.helpers.losses import LossConfig
from torchrl.trainers.helpers.replay_buffer import ReplayArgsConfig
from torchrl.trainers.helpers.trainers import TrainerConfig

__all__ = ["HelpersConfig"]


@dataclasses.dataclass
class HelpersConfig(
    TrainerConfig, OffPolicyCollectorConfig, EnvConfig, LossConfig, ReplayArgsConfig
):
    """The fields of :class:`TrainerConfig`, :class:`OffPolicyCollectorConfig`,
    :class:`EnvConfig`, :class:`LossConfig` and :class:`ReplayArgsConfig` in one dataclass.

    The helpers accept any object with these attributes (an ``argparse.Namespace``, an
    OmegaConf ``DictConfig``, ...); a missing attribute reads the default here.

    Examples:
        >>> cfg = HelpersConfig(env_name="Pendulum-v1", frames_per_batch=64, batch_size=32)
        >>> cfg.env_name, cfg.frames_per_batch, cfg.batch_size, cfg.loss
        ('Pendulum-v1', 64, 32, 'double')
    """
