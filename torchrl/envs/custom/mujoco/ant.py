"""Ant: a four-legged robot walking forward (gymnasium's ``Ant`` task, MuJoCo direct)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from torchrl.envs.custom.mujoco.base import MujocoEnv

if TYPE_CHECKING:
    import mujoco

__all__ = ["AntEnv"]


class AntEnv(MujocoEnv):
    """Quadruped on a free-floating torso: 8 actuators, a 27-dim observation.

    ``"observation"`` = ``qpos[2:]`` (all but the torso's x, y) and ``qvel``. Reward: forward
    (x) velocity of the torso, ``+1`` while healthy, minus ``0.5 * sum(action ** 2)`` (no
    contact cost). Healthy: every state entry finite and torso height within ``[0.2, 1.0]``.
    ``frame_skip=5`` (``dt = 0.05`` s); reset noise: uniform ``0.1`` on positions, gaussian
    ``0.1`` on velocities. The model is gymnasium's ``ant.xml``.

    The constructor arguments are those of :class:`~torchrl.envs.custom.mujoco.MujocoEnv`.

    Examples:
        >>> from torchrl.envs import AntEnv
        >>> env = AntEnv(num_envs=2, seed=0)
        >>> env.rollout(5)["observation"].shape
        torch.Size([2, 5, 27])
    """

    XML_FILE = "ant.xml"
    FRAME_SKIP = 5
    RESET_NOISE_SCALE = 0.1
    CTRL_COST_WEIGHT = 0.5
    HEALTHY_REWARD = 1.0
    HEALTHY_Z_RANGE = (0.2, 1.0)

    def _observation(self, data: mujoco.MjData) -> np.ndarray:
        return np.concatenate([data.qpos[2:], data.qvel])

    def _forward_position(self, data: mujoco.MjData) -> float:
        return float(data.xpos[1, 0])  # the torso (body 1)'s frame

    def _is_healthy(self, data: mujoco.MjData) -> bool:
        state = np.concatenate([data.qpos, data.qvel])
        low, high = self.HEALTHY_Z_RANGE
        return bool(np.isfinite(state).all() and low <= data.qpos[2] <= high)

    def _initial_state(self) -> tuple[np.ndarray, np.ndarray]:
        scale = self.reset_noise_scale
        qpos = self.init_qpos + self.np_random.uniform(-scale, scale, self.model.nq)
        qvel = self.init_qvel + scale * self.np_random.standard_normal(self.model.nv)
        return qpos, qvel
