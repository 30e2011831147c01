"""Pure-torch environments shipped with torchrl."""

from torchrl.envs.custom.pendulum import PendulumEnv

__all__ = ["PendulumEnv"]
