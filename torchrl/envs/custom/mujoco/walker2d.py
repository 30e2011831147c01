"""Walker2d: a planar biped walking forward (gymnasium's ``Walker2d`` task, MuJoCo direct)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from torchrl.envs.custom.mujoco.base import MujocoEnv

if TYPE_CHECKING:
    import mujoco

__all__ = ["Walker2dEnv"]


class Walker2dEnv(MujocoEnv):
    """Planar two-legged walker: 6 actuators, a 17-dim observation.

    ``"observation"`` = ``qpos[1:]`` and ``qvel`` clipped to ``[-10, 10]``. Reward: forward
    velocity, ``+1`` while healthy, minus ``1e-3 * sum(action ** 2)``. Healthy: torso height
    within ``(0.8, 2.0)`` and torso angle within ``(-1, 1)`` rad. ``frame_skip=4``
    (``dt = 0.008`` s), reset noise ``5e-3``. The model is gymnasium's ``walker2d_v5.xml``.

    The constructor arguments are those of :class:`~torchrl.envs.custom.mujoco.MujocoEnv`.

    Examples:
        >>> from torchrl.envs import Walker2dEnv
        >>> env = Walker2dEnv(seed=0)
        >>> env.rollout(5)["observation"].shape
        torch.Size([5, 17])
    """

    XML_FILE = "walker2d_v5.xml"
    FRAME_SKIP = 4
    RESET_NOISE_SCALE = 5e-3
    CTRL_COST_WEIGHT = 1e-3
    HEALTHY_REWARD = 1.0
    HEALTHY_Z_RANGE = (0.8, 2.0)
    HEALTHY_ANGLE_RANGE = (-1.0, 1.0)

    def _observation(self, data: mujoco.MjData) -> np.ndarray:
        return np.concatenate([data.qpos[1:], np.clip(data.qvel, -10.0, 10.0)])

    def _forward_position(self, data: mujoco.MjData) -> float:
        return float(data.qpos[0])

    def _is_healthy(self, data: mujoco.MjData) -> bool:
        z, angle = data.qpos[1], data.qpos[2]
        low, high = self.HEALTHY_Z_RANGE
        a_low, a_high = self.HEALTHY_ANGLE_RANGE
        return bool(low < z < high and a_low < angle < a_high)
