"""Pure-torch environments shipped with torchrl."""

from __future__ import annotations

from torchrl.envs.custom.pendulum import PendulumEnv

__all__ = ["PendulumEnv"]
