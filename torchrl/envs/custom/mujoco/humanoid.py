"""Humanoid: a 3D biped walking forward (gymnasium's ``Humanoid`` task, MuJoCo direct)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from torchrl.envs.custom.mujoco.base import MujocoEnv

if TYPE_CHECKING:
    import mujoco

__all__ = ["HumanoidEnv"]


class HumanoidEnv(MujocoEnv):
    """3D humanoid: 17 actuators, a 348-dim observation.

    ``"observation"`` = ``qpos[2:]``, ``qvel``, and per body but the world: inertia ``cinert``,
    velocity ``cvel``, external contact forces ``cfrc_ext``, plus the actuated joints'
    ``qfrc_actuator``. Reward: ``1.25 *`` the forward velocity of the center of mass, ``+5``
    while healthy, minus ``0.1 * sum(action ** 2)`` and the contact cost
    ``min(5e-7 * sum(cfrc_ext ** 2), 10)``. Healthy: torso height within ``(1.0, 2.0)``.
    ``frame_skip=5`` (``dt = 0.015`` s), reset noise ``1e-2``. The model is gymnasium's
    ``humanoid.xml``.

    The constructor arguments are those of :class:`~torchrl.envs.custom.mujoco.MujocoEnv`.

    Examples:
        >>> from torchrl.envs import HumanoidEnv
        >>> env = HumanoidEnv(seed=0)
        >>> env.rollout(3)["observation"].shape
        torch.Size([3, 348])
    """

    XML_FILE = "humanoid.xml"
    FRAME_SKIP = 5
    RESET_NOISE_SCALE = 1e-2
    FORWARD_REWARD_WEIGHT = 1.25
    CTRL_COST_WEIGHT = 0.1
    HEALTHY_REWARD = 5.0
    HEALTHY_Z_RANGE = (1.0, 2.0)
    CONTACT_COST_WEIGHT = 5e-7
    CONTACT_COST_MAX = 10.0

    def _observation(self, data: mujoco.MjData) -> np.ndarray:
        return np.concatenate(
            [
                data.qpos[2:],
                data.qvel,
                data.cinert[1:].ravel(),
                data.cvel[1:].ravel(),
                data.qfrc_actuator[6:],
                data.cfrc_ext[1:].ravel(),
            ]
        )

    def _forward_position(self, data: mujoco.MjData) -> float:
        mass = self.model.body_mass
        return float((mass * data.xipos[:, 0]).sum() / mass.sum())

    def _is_healthy(self, data: mujoco.MjData) -> bool:
        low, high = self.HEALTHY_Z_RANGE
        return bool(low < data.qpos[2] < high)

    def _after_physics(self, data: mujoco.MjData) -> None:
        # cfrc_ext (observed and costed) is only filled in by this extra pass.
        self._mujoco.mj_rnePostConstraint(self.model, data)

    def _contact_cost(self, data: mujoco.MjData) -> float:
        cost = self.CONTACT_COST_WEIGHT * float(np.square(data.cfrc_ext).sum())
        return min(cost, self.CONTACT_COST_MAX)
