"""Wrappers for external simulators; each imports its library lazily."""

from __future__ import annotations

from torchrl.envs.libs._marl import MarlGroupMapType, check_marl_grouping
from torchrl.envs.libs.brax import BraxEnv, BraxWrapper
from torchrl.envs.libs.dm_control import DMControlEnv, DMControlWrapper
from torchrl.envs.libs.envpool import MultiThreadedEnv, MultiThreadedEnvWrapper
from torchrl.envs.libs.gym import (
    BaseInfoDictReader,
    GymEnv,
    GymWrapper,
    default_info_dict_reader,
)
from torchrl.envs.libs.pettingzoo import PettingZooEnv, PettingZooWrapper
from torchrl.envs.libs.vmas import VmasEnv, VmasWrapper

__all__ = [
    "BaseInfoDictReader",
    "BraxEnv",
    "BraxWrapper",
    "DMControlEnv",
    "DMControlWrapper",
    "GymEnv",
    "GymWrapper",
    "MarlGroupMapType",
    "MultiThreadedEnv",
    "MultiThreadedEnvWrapper",
    "PettingZooEnv",
    "PettingZooWrapper",
    "VmasEnv",
    "VmasWrapper",
    "check_marl_grouping",
    "default_info_dict_reader",
]
