"""MuJoCo locomotion envs driving the ``mujoco`` package directly (``pip install "torchrl[mujoco]"``).

The ``mujoco`` package is imported when an env is built, not when this module is imported.
"""

from __future__ import annotations

from torchrl.envs.custom.mujoco.ant import AntEnv
from torchrl.envs.custom.mujoco.ball_bowl import BallBowlEnv
from torchrl.envs.custom.mujoco.base import MujocoEnv
from torchrl.envs.custom.mujoco.hopper import HopperEnv
from torchrl.envs.custom.mujoco.humanoid import HumanoidEnv
from torchrl.envs.custom.mujoco.satellite import SatelliteEnv
from torchrl.envs.custom.mujoco.walker2d import Walker2dEnv

__all__ = [
    "AntEnv",
    "BallBowlEnv",
    "HopperEnv",
    "HumanoidEnv",
    "MujocoEnv",
    "SatelliteEnv",
    "Walker2dEnv",
]
