"""Environments: the ``EnvBase`` contract, utilities, wrappers and custom envs."""

from torchrl.envs.batched import BatchedEnvBase, EnvMetaData, ParallelEnv, SerialEnv
from torchrl.envs.common import EnvBase
from torchrl.envs.custom import PendulumEnv
from torchrl.envs.env_creator import EnvCreator
from torchrl.envs.libs.gym import GymEnv, GymWrapper, default_info_dict_reader
from torchrl.envs.utils import (
    ExplorationType,
    RandomPolicy,
    check_env_specs,
    exploration_type,
    set_exploration_type,
    step_mdp,
)

__all__ = [
    "BatchedEnvBase",
    "EnvBase",
    "EnvCreator",
    "EnvMetaData",
    "ExplorationType",
    "GymEnv",
    "GymWrapper",
    "ParallelEnv",
    "PendulumEnv",
    "RandomPolicy",
    "SerialEnv",
    "check_env_specs",
    "default_info_dict_reader",
    "exploration_type",
    "set_exploration_type",
    "step_mdp",
]
