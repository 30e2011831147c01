"""Wrappers for external simulators; each imports its library lazily."""

from __future__ import annotations

from torchrl._utils import has_module
from torchrl.envs.libs._marl import MarlGroupMapType, check_marl_grouping
from torchrl.envs.libs.atari import atari_game_env, make_atari_env, register_ale_envs
from torchrl.envs.libs.brax import BraxEnv, BraxWrapper
from torchrl.envs.libs.dm_control import DMControlEnv, DMControlWrapper
from torchrl.envs.libs.envpool import MultiThreadedEnv, MultiThreadedEnvWrapper
from torchrl.envs.libs.genesis import GenesisEnv, GenesisWrapper
from torchrl.envs.libs.gym import (
    BaseInfoDictReader,
    GymEnv,
    GymWrapper,
    default_info_dict_reader,
)
from torchrl.envs.libs.gymnax import GymnaxEnv, GymnaxWrapper
from torchrl.envs.libs.jumanji import JumanjiEnv, JumanjiWrapper
from torchrl.envs.libs.libero import LiberoEnv, LiberoWrapper
from torchrl.envs.libs.mjlab import MJLabEnv, MJLabWrapper
from torchrl.envs.libs.mo_gym import MOGymEnv, MOGymWrapper
from torchrl.envs.libs.mujoco_playground import (
    MujocoPlaygroundAgentMapping,
    MujocoPlaygroundAgentSpec,
    MujocoPlaygroundEnv,
    MujocoPlaygroundWrapper,
)
from torchrl.envs.libs.openenv import OpenEnvEnv, OpenEnvWrapper
from torchrl.envs.libs.openml import OpenMLEnv
from torchrl.envs.libs.openspiel import OpenSpielEnv, OpenSpielWrapper
from torchrl.envs.libs.pettingzoo import PettingZooEnv, PettingZooWrapper
from torchrl.envs.libs.procgen import ProcgenEnv, ProcgenWrapper
from torchrl.envs.libs.vmas import VmasEnv, VmasWrapper

__all__ = [
    "BaseInfoDictReader",
    "BraxEnv",
    "BraxWrapper",
    "DMControlEnv",
    "DMControlWrapper",
    "GymEnv",
    "GymWrapper",
    "GymnaxEnv",
    "GymnaxWrapper",
    "JumanjiEnv",
    "JumanjiWrapper",
    "MOGymEnv",
    "MOGymWrapper",
    "GenesisEnv",
    "GenesisWrapper",
    "LiberoEnv",
    "LiberoWrapper",
    "MJLabEnv",
    "MJLabWrapper",
    "MujocoPlaygroundAgentMapping",
    "MujocoPlaygroundAgentSpec",
    "MujocoPlaygroundEnv",
    "MujocoPlaygroundWrapper",
    "OpenEnvEnv",
    "OpenEnvWrapper",
    "OpenMLEnv",
    "OpenSpielEnv",
    "OpenSpielWrapper",
    "ProcgenEnv",
    "ProcgenWrapper",
    "MarlGroupMapType",
    "MultiThreadedEnv",
    "MultiThreadedEnvWrapper",
    "PettingZooEnv",
    "PettingZooWrapper",
    "VmasEnv",
    "VmasWrapper",
    "atari_game_env",
    "check_marl_grouping",
    "default_info_dict_reader",
    "get_available_libraries",
    "make_atari_env",
    "register_ale_envs",
]

# The simulator each wrapper module needs (the import name of its package).
_LIBRARIES = {
    "atari": "ale_py",
    "brax": "brax",
    "dm_control": "dm_control",
    "envpool": "envpool",
    "genesis": "genesis",
    "gym": "gymnasium",
    "gymnax": "gymnax",
    "jumanji": "jumanji",
    "libero": "libero",
    "mjlab": "mjlab",
    "mujoco_playground": "mujoco_playground",
    "mo_gym": "mo_gymnasium",
    "openenv": "openenv",
    "openspiel": "pyspiel",
    "pettingzoo": "pettingzoo",
    "procgen": "procgen",
    "vmas": "vmas",
}


def get_available_libraries() -> set[str]:
    """Returns the names of the simulator libraries that are installed (a cheap spec lookup).

    Returns:
        A subset of the wrapper names (``"atari"``, ``"brax"``, ``"dm_control"``, ``"envpool"``,
        ``"genesis"``, ``"gym"``, ``"gymnax"``, ``"jumanji"``, ``"libero"``, ``"mjlab"``,
        ``"mujoco_playground"``, ``"mo_gym"``, ``"openenv"``, ``"openspiel"``, ``"pettingzoo"``,
        ``"procgen"``, ``"vmas"``); ``"gym"`` stands for ``gymnasium``. ``OpenMLEnv`` needs no
        simulator (it reads tables with ``torchrl[offline]``).

    Examples:
        >>> from torchrl.envs.libs import get_available_libraries
        >>> "gym" in get_available_libraries()  # gymnasium is installed here
        True
    """
    return {name for name, package in _LIBRARIES.items() if has_module(package)}
