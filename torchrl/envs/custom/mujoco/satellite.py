"""Satellite attitude control with control moment gyros (CMGs), simulated with MuJoCo.

A free-floating bus (no gravity) carries 4 CMGs in a pyramid or 6 in an orthogonal cluster.
Each CMG is a rotor spun at a constant speed inside a gimbal; the agent commands the gimbal
rates, and tilting a spinning rotor exchanges angular momentum with the bus, which turns it.
The task is to slew to a random target attitude while keeping the cluster away from its
singular configurations, where the gimbal Jacobian loses rank and some torque directions can
no longer be produced. Singularity is measured by the manipulability ``sqrt(det(J J^T))``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import torch
from tensordict import TensorDictBase

from torchrl._keys import RESET
from torchrl._types import DeviceLike, ShapeLike
from torchrl.data.specs import Bounded, Composite, Unbounded
from torchrl.envs.custom.mujoco._scene import MujocoSceneEnv

__all__ = ["SatelliteEnv"]

_TARGET = "target_quat"
_INIT = "init_bus_quat"
# Added under the square root of det(J J^T), so the manipulability is never exactly 0.
_MANIP_EPS = 1e-8


def _pyramid_geometry() -> tuple[np.ndarray, np.ndarray]:
    """Gimbal axes and zero-angle rotor axes of the classic 4-CMG pyramid.

    The gimbal axes lean ``beta = acos(1 / sqrt(3))`` (about 54.7 degrees) from the bus z
    axis, one per face of the pyramid; at zero gimbal angles the rotors lie in the xy plane
    and their momenta cancel.
    """
    beta = math.acos(1.0 / math.sqrt(3.0))
    gimbals, rotors = [], []
    for i in range(4):
        theta = i * math.pi / 2
        gimbals.append(
            [math.sin(beta) * math.cos(theta), math.sin(beta) * math.sin(theta), math.cos(beta)]
        )
        rotors.append([-math.sin(theta), math.cos(theta), 0.0])
    return np.array(gimbals), np.array(rotors)


def _orthogonal_geometry() -> tuple[np.ndarray, np.ndarray]:
    """Six CMGs, two gimballed about each bus axis, with opposite rotors (zero net momentum)."""
    x, y, z = np.eye(3)
    gimbals = np.stack([x, x, y, y, z, z])
    rotors = np.stack([y, -y, z, -z, x, -x])
    return gimbals, rotors


def _rotor_axes(angles: np.ndarray, gimbals: np.ndarray, rotors0: np.ndarray) -> np.ndarray:
    # Rotating r0 (orthogonal to g) by delta about g: r0 cos(delta) + (g x r0) sin(delta).
    cos, sin = np.cos(angles)[:, None], np.sin(angles)[:, None]
    return rotors0 * cos + np.cross(gimbals, rotors0) * sin


def cmg_jacobian(
    angles: np.ndarray, gimbals: np.ndarray, rotors0: np.ndarray, rotor_h: float
) -> np.ndarray:
    """The ``3 x n`` map from gimbal rates to the rate of change of the cluster's momentum.

    Column ``i`` is ``rotor_h * (g_i x r_i(delta_i))``: turning gimbal ``i`` swings its rotor's
    momentum ``rotor_h * r_i`` about ``g_i``.

    Args:
        angles: gimbal angles ``delta``, shape ``[n]``.
        gimbals: unit gimbal axes, ``[n, 3]``.
        rotors0: unit rotor axes at zero gimbal angle, ``[n, 3]`` (orthogonal to the gimbals).
        rotor_h: the angular momentum of one rotor.

    Returns:
        The Jacobian, ``[3, n]``.
    """
    return rotor_h * np.cross(gimbals, _rotor_axes(angles, gimbals, rotors0)).T


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return np.array(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ]
    )


def _quat_log(q: np.ndarray) -> np.ndarray:
    """The logarithm of a unit quaternion ``(w, x, y, z)``: half the rotation angle times the
    axis, taking the shorter of the two rotations that ``q`` and ``-q`` describe."""
    if q[0] < 0:
        q = -q
    vec = q[1:]
    norm = float(np.linalg.norm(vec))
    if norm < 1e-12:
        return np.zeros(3)
    return math.atan2(norm, float(q[0])) * vec / norm


def _normalized(q: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(q))
    if not math.isfinite(norm) or norm < 1e-12:
        raise ValueError(f"SatelliteEnv: a quaternion must be finite and non-zero, got {q}")
    return q / norm


def _cmg_xml(
    gimbals: np.ndarray,
    rotors0: np.ndarray,
    bus_half: float,
    bus_mass: float,
    rotor_radius: float,
    rotor_mass: float,
) -> str:
    def vec(v: Any) -> str:
        return " ".join(f"{float(x):.6g}" for x in v)

    no_contact = 'contype="0" conaffinity="0"'
    bodies = []
    for i, (g, r) in enumerate(zip(gimbals, rotors0)):
        # Each CMG sits inside the bus, half-way out along its gimbal axis.
        pos = vec(0.5 * bus_half * g)
        half = 0.2 * rotor_radius
        bodies.append(
            f"""
      <body name="cmg{i}_gimbal" pos="{pos}">
        <joint name="cmg{i}_gimbal" type="hinge" axis="{vec(g)}"/>
        <geom type="sphere" size="{0.3 * rotor_radius:.6g}" mass="0.5" {no_contact}
              rgba="0.7 0.7 0.2 1"/>
        <body name="cmg{i}_rotor">
          <joint name="cmg{i}_rotor" type="hinge" axis="{vec(r)}"/>
          <geom type="cylinder" size="{rotor_radius:.6g}" mass="{rotor_mass:.6g}"
                fromto="{vec(-half * r)} {vec(half * r)}" {no_contact} rgba="0.8 0.3 0.2 1"/>
        </body>
      </body>"""
        )
    actuators = []
    for i in range(len(gimbals)):
        actuators.append(f'<velocity name="cmg{i}_gimbal_rate" joint="cmg{i}_gimbal" kv="20"/>')
    for i in range(len(gimbals)):
        actuators.append(f'<velocity name="cmg{i}_rotor_speed" joint="cmg{i}_rotor" kv="2"/>')
    return f"""
<mujoco model="satellite_{len(gimbals)}cmg">
  <option timestep="0.002" gravity="0 0 0" integrator="implicitfast"/>
  <worldbody>
    <light name="sun" pos="0 0 4" dir="0 0 -1" directional="true"/>
    <camera name="side" pos="4 -4 3" xyaxes="0.707 0.707 0 -0.35 0.35 0.87"/>
    <body name="bus" pos="0 0 0">
      <freejoint name="root"/>
      <geom name="bus_geom" type="box" size="{bus_half:.6g} {bus_half:.6g} {bus_half:.6g}"
            mass="{bus_mass:.6g}" {no_contact} rgba="0.6 0.65 0.75 0.5"/>{"".join(bodies)}
    </body>
  </worldbody>
  <actuator>
    {"".join(actuators)}
  </actuator>
</mujoco>
"""


class SatelliteEnv(MujocoSceneEnv):
    """Slew a satellite to a random attitude with 4 or 6 CMGs, avoiding singular clusters.

    Action (float32, ``[*B, n]`` in ``[-1, 1]``): gimbal rate commands, scaled by
    ``action_scale`` (rad/s); the rotors are held at :attr:`ROTOR_SPEED`. Observations
    (float32): ``"bus_quat"`` (``w, x, y, z``, ``[*B, 4]``), ``"quat_err"`` (the log of
    ``conj(bus_quat) * target_quat``: half the error angle times its axis, ``[*B, 3]``),
    ``"bus_omega"`` (body-frame angular velocity, ``[*B, 3]``), ``"gimbal_angles"`` (sines then
    cosines, ``[*B, 2n]``), ``"gimbal_rates"`` (``[*B, n]``) and ``"manipulability"``
    (``m = sqrt(det(J J^T) + 1e-8)`` of the gimbal Jacobian, ``[*B, 1]``). Reward::

        -attitude_weight * ||quat_err|| - penalty(m / rotor_h ** 3)
        - ctrl_cost_weight * ||action||^2 - omega_weight * ||bus_omega||^2

    with ``penalty(x) = singularity_weight / max(x, singularity_clamp_min)`` (``"inverse"``) or
    ``singularity_weight * exp(-singularity_exp_k * x)`` (``"exp"``). Nothing terminates;
    ``max_episode_steps`` truncates. A reset draws a target uniformly on ``SO(3)``; the bus
    starts at identity (plus ``1e-3`` noise) with zero gimbal angles. A full reset given
    ``"target_quat"`` / ``"init_bus_quat"`` (``[*B, 4]``) uses them instead (partial resets,
    marked by ``"_reset"``, always draw); both are in the reset output (``state_spec``).

    Args:
        num_cmgs: ``4`` (pyramid, rotors at 100 rad/s) or ``6`` (orthogonal, 200 rad/s).
        attitude_weight: weight of ``||quat_err||`` (default 1.0).
        singularity_weight: weight of the singularity penalty (default 0.5).
        singularity_clamp_min: floor of the normalized manipulability (default ``1e-6``).
        singularity_mode: ``"inverse"`` (default) or ``"exp"``.
        singularity_exp_k: the rate ``k`` of the ``"exp"`` penalty (default 5.0).
        ctrl_cost_weight: weight of ``||action||^2`` (default 0.01).
        omega_weight: weight of ``||bus_omega||^2`` (default 0.1).
        action_scale: gimbal rate, in rad/s, of a unit action (default 3.0).
        rotor_h: rotor momentum used in the Jacobian (default :attr:`ROTOR_SPEED`).
        num_envs: the number of simulations (batch ``[num_envs]``; default one, batch ``[]``).
        batch_size: an alternative to ``num_envs``.
        frame_skip: physics steps (2 ms each) per env step (default 10).
        max_episode_steps: truncate episodes after this many steps (default: never).
        backend: the physics backend; only ``"mujoco"`` is available.
        device: where the tensors live.
        seed: the seed of the targets and the reset noise.
        validate_actions: check the actions against the action spec.

    Examples:
        >>> from torchrl.envs import SatelliteEnv
        >>> env = SatelliteEnv(num_cmgs=4, num_envs=2, seed=0)
        >>> td = env.rollout(5)
        >>> td["next", "quat_err"].shape, td["action"].shape
        (torch.Size([2, 5, 3]), torch.Size([2, 5, 4]))
    """

    FRAME_SKIP = 10
    RESET_NOISE_SCALE = 0.001
    ROTOR_SPEED_4 = 100.0
    ROTOR_SPEED_6 = 200.0

    def __init__(
        self,
        *,
        num_cmgs: Literal[4, 6] = 4,
        attitude_weight: float = 1.0,
        singularity_weight: float = 0.5,
        singularity_clamp_min: float = 1e-6,
        singularity_mode: Literal["inverse", "exp"] = "inverse",
        singularity_exp_k: float = 5.0,
        ctrl_cost_weight: float = 0.01,
        omega_weight: float = 0.1,
        action_scale: float = 3.0,
        rotor_h: float | None = None,
        num_envs: int | None = None,
        batch_size: ShapeLike | None = None,
        frame_skip: int | None = None,
        max_episode_steps: int | None = None,
        backend: str = "mujoco",
        device: DeviceLike = None,
        seed: int | None = None,
        validate_actions: bool = True,
    ) -> None:
        if num_cmgs == 4:
            self.ROTOR_SPEED = self.ROTOR_SPEED_4
            gimbals, rotors0 = _pyramid_geometry()
            xml = _cmg_xml(gimbals, rotors0, 0.5, 100.0, 0.1, 5.0)
        elif num_cmgs == 6:
            self.ROTOR_SPEED = self.ROTOR_SPEED_6
            gimbals, rotors0 = _orthogonal_geometry()
            xml = _cmg_xml(gimbals, rotors0, 0.3, 30.0, 0.06, 2.0)
        else:
            raise ValueError(f"SatelliteEnv: num_cmgs must be 4 or 6, got {num_cmgs}")
        if singularity_mode not in ("inverse", "exp"):
            raise ValueError(
                "SatelliteEnv: singularity_mode must be 'inverse' or 'exp', got "
                f"{singularity_mode!r}"
            )
        if backend != "mujoco":
            raise ValueError(
                f"SatelliteEnv: backend {backend!r} is not available; only 'mujoco' (the MuJoCo "
                'C library, pip install "torchrl[mujoco]") is implemented'
            )
        if action_scale <= 0:
            raise ValueError(f"SatelliteEnv: action_scale must be > 0, got {action_scale}")
        self.num_cmgs = int(num_cmgs)
        self.N_GIMBALS = self.num_cmgs
        self.attitude_weight = float(attitude_weight)
        self.singularity_weight = float(singularity_weight)
        self.singularity_clamp_min = float(singularity_clamp_min)
        self.singularity_mode = singularity_mode
        self.singularity_exp_k = float(singularity_exp_k)
        self.ctrl_cost_weight = float(ctrl_cost_weight)
        self.omega_weight = float(omega_weight)
        self.action_scale = float(action_scale)
        self.rotor_h = float(rotor_h) if rotor_h is not None else self.ROTOR_SPEED
        self.gimbal_axes = gimbals
        self.rotor_axes = rotors0
        n = self.num_cmgs
        # qpos: bus position (3) and quaternion (3:7), then (gimbal, rotor) angle pairs;
        # qvel: bus linear (0:3) and body-frame angular (3:6) velocity, then the pairs' rates.
        self._gimbal_qpos = np.array([7 + 2 * i for i in range(n)])
        self._gimbal_qvel = np.array([6 + 2 * i for i in range(n)])
        self._rotor_qvel = self._gimbal_qvel + 1
        super().__init__(
            xml,
            num_envs=num_envs,
            batch_size=batch_size,
            frame_skip=self.FRAME_SKIP if frame_skip is None else frame_skip,
            max_episode_steps=max_episode_steps,
            device=device,
            seed=seed,
            validate_actions=validate_actions,
        )
        self._targets = np.tile(np.array([1.0, 0.0, 0.0, 0.0]), (self.num_envs, 1))
        self._inits = self._targets.copy()
        self._make_observation_spec()
        batch = self.batch_size
        self.action_spec = Bounded(low=-1.0, high=1.0, shape=(*batch, n))
        self.state_spec = Composite(
            {
                _TARGET: Unbounded(shape=(*batch, 4), dtype=torch.float32),
                _INIT: Unbounded(shape=(*batch, 4), dtype=torch.float32),
            },
            shape=batch,
        )

    # ----------------------------------------------------------------------------- CMG math
    def manipulability(self, index: int) -> float:
        """``sqrt(det(J J^T) + 1e-8)`` of sub-env ``index``'s gimbal Jacobian (unnormalized).

        Args:
            index: the sub-env (``0`` for an env with batch ``[]``).

        Returns:
            The manipulability, a float.
        """
        angles = self.data[index].qpos[self._gimbal_qpos]
        jac = cmg_jacobian(angles, self.gimbal_axes, self.rotor_axes, self.rotor_h)
        det = float(np.linalg.det(jac @ jac.T))
        return math.sqrt(max(det, 0.0) + _MANIP_EPS)

    def _quat_err(self, index: int) -> np.ndarray:
        bus = self.data[index].qpos[3:7]
        conj = bus * np.array([1.0, -1.0, -1.0, -1.0])
        return _quat_log(_quat_mul(conj, self._targets[index]))

    # --------------------------------------------------------------------------- the contract
    def _ctrl(self, action: np.ndarray) -> np.ndarray:
        rotor = np.full(self.num_cmgs, self.ROTOR_SPEED)
        return np.concatenate([action * self.action_scale, rotor])

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        # Overrides are honored on full resets only: an auto-reset input carries the previous
        # episode's entries, which must not be replayed.
        self._overrides: dict[str, np.ndarray] = {}
        if tensordict is not None and tensordict.get(RESET, None) is None:
            for key in (_TARGET, _INIT):
                value = tensordict.get(key, None)
                if value is not None:
                    if value.shape[-1] != 4:
                        raise ValueError(
                            f"SatelliteEnv: reset entry {key!r} must have a trailing dim of 4 "
                            f"(w, x, y, z), got shape {list(value.shape)}"
                        )
                    array = value.detach().cpu().to(torch.float64).reshape(-1, 4).numpy()
                    self._overrides[key] = np.broadcast_to(array, (self.num_envs, 4))
        return super()._reset(tensordict, **kwargs)

    def _reset_one(self, index: int, tensordict: TensorDictBase | None) -> None:
        overrides = getattr(self, "_overrides", {})
        if _TARGET in overrides:
            target = _normalized(overrides[_TARGET][index])
        else:
            # A normalized 4-d Gaussian is uniform on the unit sphere, hence on SO(3).
            target = _normalized(self.np_random.standard_normal(4))
        self._targets[index] = target
        data = self.data[index]
        scale = self.RESET_NOISE_SCALE
        data.qpos[:] += self.np_random.uniform(-scale, scale, self.model.nq)
        data.qvel[:] += self.np_random.uniform(-scale, scale, self.model.nv)
        if _INIT in overrides:
            data.qpos[3:7] = _normalized(overrides[_INIT][index])
        else:
            data.qpos[3:7] = _normalized(data.qpos[3:7])
        data.qvel[self._rotor_qvel] = self.ROTOR_SPEED
        self._inits[index] = data.qpos[3:7]

    def _extra_reset_entries(self) -> dict[str, torch.Tensor]:
        shape = (*self.batch_size, 4)
        return {
            _TARGET: torch.as_tensor(self._targets, dtype=torch.float32)
            .reshape(shape)
            .to(self.device),
            _INIT: torch.as_tensor(self._inits, dtype=torch.float32).reshape(shape).to(self.device),
        }

    def _observe(self, index: int) -> dict[str, np.ndarray]:
        data = self.data[index]
        angles = data.qpos[self._gimbal_qpos]
        return {
            "bus_quat": data.qpos[3:7].copy(),
            "quat_err": self._quat_err(index),
            "bus_omega": data.qvel[3:6].copy(),
            "gimbal_angles": np.concatenate([np.sin(angles), np.cos(angles)]),
            "gimbal_rates": data.qvel[self._gimbal_qvel].copy(),
            "manipulability": np.array([self.manipulability(index)]),
        }

    def _reward(self, index: int, action: np.ndarray) -> float:
        manip = self.manipulability(index) / self.rotor_h**3
        if self.singularity_mode == "exp":
            penalty = self.singularity_weight * math.exp(-self.singularity_exp_k * manip)
        else:
            penalty = self.singularity_weight / max(manip, self.singularity_clamp_min)
        omega = self.data[index].qvel[3:6]
        return float(
            -self.attitude_weight * np.linalg.norm(self._quat_err(index))
            - penalty
            - self.ctrl_cost_weight * float(np.square(action).sum())
            - self.omega_weight * float(np.square(omega).sum())
        )
