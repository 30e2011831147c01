"""Wrappers for external simulators; each imports its library lazily."""

from __future__ import annotations

from torchrl._utils import has_module
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
    "get_available_libraries",
]

# The simulator each wrapper module needs (the import name of its package).
_LIBRARIES = {
    "brax": "brax",
    "dm_control": "dm_control",
    "envpool": "envpool",
    "gym": "gymnasium",
    "pettingzoo": "pettingzoo",
    "vmas": "vmas",
}


def get_available_libraries() -> set[str]:
    """Returns the names of the simulator libraries that are installed (a cheap spec lookup).

    Returns:
        A subset of ``{"brax", "dm_control", "envpool", "gym", "pettingzoo", "vmas"}``; ``"gym"``
        stands for ``gymnasium``.

    Examples:
        >>> from torchrl.envs.libs import get_available_libraries
        >>> libraries = {"brax", "dm_control", "envpool", "gym", "pettingzoo", "vmas"}
        >>> get_available_libraries() <= libraries
        True
    """
    return {name for name, package in _LIBRARIES.items() if has_module(package)}
