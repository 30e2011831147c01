"""Wrappers for external simulators; each imports its library lazily."""

from torchrl.envs.libs.gym import (
    BaseInfoDictReader,
    GymEnv,
    GymWrapper,
    default_info_dict_reader,
)

__all__ = [
    "BaseInfoDictReader",
    "GymEnv",
    "GymWrapper",
    "default_info_dict_reader",
]
