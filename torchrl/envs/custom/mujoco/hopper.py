"""Hopper: a one-legged robot hopping forward (gymnasium's ``Hopper`` task, MuJoCo direct)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from torchrl.envs.custom.mujoco.base import MujocoEnv

if TYPE_CHECKING:
    import mujoco

__all__ = ["HopperEnv"]


class HopperEnv(MujocoEnv):
    """Planar one-legged hopper: 3 actuators, an 11-dim observation.

    ``"observation"`` = ``qpos[1:]`` (all but the forward position) and ``qvel`` clipped to
    ``[-10, 10]``. Reward: forward velocity of the torso, ``+1`` while healthy, minus
    ``1e-3 * sum(action ** 2)``. Healthy: torso height ``z >= 0.7``, torso angle within
    ``[-0.2, 0.2]`` rad, and every other state entry within ``[-100, 100]``. ``frame_skip=4``
    (``dt = 0.008`` s), reset noise ``5e-3``. The model is gymnasium's ``hopper.xml``.

    The constructor arguments are those of :class:`~torchrl.envs.custom.mujoco.MujocoEnv`.

    Examples:
        >>> from torchrl.envs import HopperEnv
        >>> env = HopperEnv(num_envs=2, seed=0)
        >>> env.rollout(5)["observation"].shape
        torch.Size([2, 5, 11])
    """

    XML_FILE = "hopper.xml"
    FRAME_SKIP = 4
    RESET_NOISE_SCALE = 5e-3
    CTRL_COST_WEIGHT = 1e-3
    HEALTHY_REWARD = 1.0
    HEALTHY_Z_MIN = 0.7
    HEALTHY_ANGLE_MAX = 0.2
    HEALTHY_STATE_MAX = 100.0

    def _observation(self, data: mujoco.MjData) -> np.ndarray:
        return np.concatenate([data.qpos[1:], np.clip(data.qvel, -10.0, 10.0)])

    def _forward_position(self, data: mujoco.MjData) -> float:
        return float(data.qpos[0])

    def _is_healthy(self, data: mujoco.MjData) -> bool:
        z, angle = data.qpos[1], data.qpos[2]
        rest = np.concatenate([data.qpos[2:], data.qvel])
        return bool(
            np.all(np.abs(rest) < self.HEALTHY_STATE_MAX)
            and z > self.HEALTHY_Z_MIN
            and abs(angle) < self.HEALTHY_ANGLE_MAX
        )
