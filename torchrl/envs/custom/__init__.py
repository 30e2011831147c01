"""Environments shipped with torchrl: pure-torch ones, chess and the MuJoCo locomotion tasks."""

from __future__ import annotations

from torchrl.envs.custom.chess import ChessEnv
from torchrl.envs.custom.llm_hashing import LLMHashingEnv
from torchrl.envs.custom.mujoco import (
    AntEnv,
    BallBowlEnv,
    HopperEnv,
    HumanoidEnv,
    MujocoEnv,
    SatelliteEnv,
    Walker2dEnv,
)
from torchrl.envs.custom.pendulum import PendulumEnv
from torchrl.envs.custom.stateless_cartpole import (
    DropCartPoleVelocities,
    StatelessCartPole,
    drop_cartpole_velocities,
    make_gym_stateless_cartpole,
)
from torchrl.envs.custom.tictactoeenv import TicTacToeEnv
from torchrl.envs.custom.trading import FinancialRegimeEnv

__all__ = [
    "DropCartPoleVelocities",
    "StatelessCartPole",
    "drop_cartpole_velocities",
    "make_gym_stateless_cartpole",
    "AntEnv",
    "BallBowlEnv",
    "ChessEnv",
    "FinancialRegimeEnv",
    "HopperEnv",
    "HumanoidEnv",
    "LLMHashingEnv",
    "MujocoEnv",
    "PendulumEnv",
    "SatelliteEnv",
    "TicTacToeEnv",
    "Walker2dEnv",
]
