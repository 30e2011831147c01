"""Environments: the ``EnvBase`` contract, utilities, wrappers and custom envs."""

from __future__ import annotations

from torchrl.envs.batched import BatchedEnvBase, EnvMetaData, ParallelEnv, SerialEnv
from torchrl.envs.common import EnvBase
from torchrl.envs.custom import PendulumEnv
from torchrl.envs.env_creator import EnvCreator
from torchrl.envs.libs._marl import MarlGroupMapType, check_marl_grouping
from torchrl.envs.libs.brax import BraxEnv, BraxWrapper
from torchrl.envs.libs.dm_control import DMControlEnv, DMControlWrapper
from torchrl.envs.libs.envpool import MultiThreadedEnv, MultiThreadedEnvWrapper
from torchrl.envs.libs.gym import GymEnv, GymWrapper, default_info_dict_reader
from torchrl.envs.libs.pettingzoo import PettingZooEnv, PettingZooWrapper
from torchrl.envs.libs.vmas import VmasEnv, VmasWrapper
from torchrl.envs.transforms import (
    ActionDiscretizer,
    ActionMask,
    BurnInTransform,
    CatFrames,
    CatTensors,
    CenterCrop,
    ClipTransform,
    Compose,
    DoubleToFloat,
    DTypeCastTransform,
    ExcludeTransform,
    FlattenObservation,
    FrameSkipTransform,
    GrayScale,
    InitTracker,
    NoopResetEnv,
    ObservationNorm,
    ObservationTransform,
    PermuteTransform,
    RenameTransform,
    Resize,
    Reward2GoTransform,
    RewardClipping,
    RewardScaling,
    RewardSum,
    SelectTransform,
    SqueezeTransform,
    StepCounter,
    TargetReturn,
    TensorDictPrimer,
    TimeMaxPool,
    ToTensorImage,
    Transform,
    TransformedEnv,
    UnsqueezeTransform,
    VecNorm,
)
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
    "BraxEnv",
    "BraxWrapper",
    "DMControlEnv",
    "DMControlWrapper",
    "EnvBase",
    "EnvCreator",
    "EnvMetaData",
    "ExplorationType",
    "GymEnv",
    "GymWrapper",
    "MarlGroupMapType",
    "MultiThreadedEnv",
    "MultiThreadedEnvWrapper",
    "ParallelEnv",
    "PendulumEnv",
    "PettingZooEnv",
    "PettingZooWrapper",
    "RandomPolicy",
    "SerialEnv",
    "VmasEnv",
    "VmasWrapper",
    "check_env_specs",
    "check_marl_grouping",
    "default_info_dict_reader",
    "exploration_type",
    "set_exploration_type",
    "step_mdp",
]

# Env transforms (torchrl.envs.transforms).
__all__ += [
    "ActionDiscretizer",
    "ActionMask",
    "BurnInTransform",
    "CatFrames",
    "CatTensors",
    "CenterCrop",
    "ClipTransform",
    "Compose",
    "DTypeCastTransform",
    "DoubleToFloat",
    "ExcludeTransform",
    "FlattenObservation",
    "FrameSkipTransform",
    "GrayScale",
    "InitTracker",
    "NoopResetEnv",
    "ObservationNorm",
    "ObservationTransform",
    "PermuteTransform",
    "RenameTransform",
    "Resize",
    "Reward2GoTransform",
    "RewardClipping",
    "RewardScaling",
    "RewardSum",
    "SelectTransform",
    "SqueezeTransform",
    "StepCounter",
    "TargetReturn",
    "TensorDictPrimer",
    "TimeMaxPool",
    "ToTensorImage",
    "Transform",
    "TransformedEnv",
    "UnsqueezeTransform",
    "VecNorm",
]
