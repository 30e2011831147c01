"""Environments shipped with torchrl: pure-torch ones, chess and the MuJoCo locomotion tasks."""

from __future__ import annotations

from torchrl.envs.custom.chess import ChessEnv
from torchrl.envs.custom.mujoco import AntEnv, HopperEnv, HumanoidEnv, MujocoEnv, Walker2dEnv
from torchrl.envs.custom.pendulum import PendulumEnv
from torchrl.envs.custom.tictactoeenv import TicTacToeEnv

__all__ = [
    "AntEnv",
    "ChessEnv",
    "HopperEnv",
    "HumanoidEnv",
    "MujocoEnv",
    "PendulumEnv",
    "TicTacToeEnv",
    "Walker2dEnv",
]
