"""Ball-to-bowl: a six-joint arm with a two-finger gripper puts a ball into a bowl (MuJoCo).

The scene is made of primitive geoms only and generated here, so the env needs nothing but the
``mujoco`` package. It is small on purpose: a task for tutorials on scripted primitives, macro
actions and imitation, not a benchmark.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from torchrl._types import DeviceLike, ShapeLike
from torchrl.envs.custom.mujoco._scene import MujocoSceneEnv, import_mujoco

__all__ = ["BallBowlEnv"]

_ARM_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow", "wrist_1", "wrist_2", "wrist_3")
_FINGER_JOINTS = ("left_finger", "right_finger")
_FINGER_TRAVEL = 0.04  # metres each finger slides open


def _vec(values: Sequence[float]) -> str:
    return " ".join(f"{float(v):.6g}" for v in values)


def _scene_xml(ball_position: Sequence[float], bowl_position: Sequence[float]) -> str:
    """The primitive ball-bowl scene: UR-like arm (links stacked along z at zero), gripper,
    ball on a free joint, a static open box as bowl. Arm links do not collide with anything
    (so scripted motions need no collision planning); fingers, ball, bowl and floor do."""
    tx, ty, tz = BallBowlEnv.BOWL_TARGET_OFFSET
    link = 'contype="0" conaffinity="0" rgba="0.55 0.6 0.65 1"'
    finger = 'type="box" size="0.012 0.006 0.035" friction="1.5 0.01 0.001" rgba="0.2 0.2 0.2 1"'
    wall = 'type="box" contype="1" conaffinity="1" rgba="0.25 0.6 0.55 0.8"'
    arm_range = f"{-math.pi:.6f} {math.pi:.6f}"
    return f"""
<mujoco model="ball_bowl">
  <compiler angle="radian"/>
  <option timestep="0.002" integrator="implicitfast" cone="elliptic" impratio="10"/>
  <default>
    <joint damping="4" armature="0.01"/>
    <position kp="60" ctrlrange="{arm_range}"/>
  </default>
  <worldbody>
    <light name="top" pos="0 0 2" dir="0 0 -1" directional="true"/>
    <camera name="overview" pos="1.2 -0.9 0.9" xyaxes="0.6 0.8 0 -0.4 0.3 0.87"/>
    <geom name="floor" type="plane" size="1 1 0.05" rgba="0.85 0.85 0.8 1"/>
    <body name="base" pos="0 0 0">
      <geom name="base_geom" type="cylinder" size="0.06 0.05" pos="0 0 0.05" {link}/>
      <body name="shoulder" pos="0 0 0.1" gravcomp="1">
        <joint name="shoulder_pan" axis="0 0 1"/>
        <geom type="capsule" size="0.04" fromto="0 0 0 0 0 0.06" {link}/>
        <body name="upper_arm" pos="0 0 0.06" gravcomp="1">
          <joint name="shoulder_lift" axis="0 1 0"/>
          <geom type="capsule" size="0.03" fromto="0 0 0 0 0 0.25" {link}/>
          <body name="forearm" pos="0 0 0.25" gravcomp="1">
            <joint name="elbow" axis="0 1 0"/>
            <geom type="capsule" size="0.025" fromto="0 0 0 0 0 0.22" {link}/>
            <body name="wrist_1_link" pos="0 0 0.22" gravcomp="1">
              <joint name="wrist_1" axis="0 1 0"/>
              <geom type="capsule" size="0.02" fromto="0 0 0 0 0 0.05" {link}/>
              <body name="wrist_2_link" pos="0 0 0.05" gravcomp="1">
                <joint name="wrist_2" axis="0 0 1"/>
                <geom type="capsule" size="0.02" fromto="0 0 0 0 0 0.05" {link}/>
                <body name="wrist_3_link" pos="0 0 0.05" gravcomp="1">
                  <joint name="wrist_3" axis="0 1 0"/>
                  <geom type="cylinder" size="0.02 0.015" pos="0 0 0.015" {link}/>
                  <body name="hand" pos="0 0 0.03" gravcomp="1">
                    <geom name="palm" type="box" size="0.02 0.05 0.01" pos="0 0 0.01" {link}/>
                    <site name="pinch" pos="0 0 0.06" size="0.008" rgba="0.9 0.1 0.1 1"/>
                    <body name="left_finger_link" pos="0 0 0.02" gravcomp="1">
                      <joint name="left_finger" type="slide" axis="0 1 0" damping="1"
                             range="0 {_FINGER_TRAVEL}" limited="true"/>
                      <geom name="left_pad" pos="0 0.006 0.035" {finger}/>
                    </body>
                    <body name="right_finger_link" pos="0 0 0.02" gravcomp="1">
                      <joint name="right_finger" type="slide" axis="0 -1 0" damping="1"
                             range="0 {_FINGER_TRAVEL}" limited="true"/>
                      <geom name="right_pad" pos="0 -0.006 0.035" {finger}/>
                    </body>
                  </body>
                </body>
              </body>
            </body>
          </body>
        </body>
      </body>
    </body>
    <body name="bowl" pos="{_vec(bowl_position)}">
      <geom name="bowl_bottom" type="cylinder" size="0.075 0.008" contype="1" conaffinity="1"
            rgba="0.25 0.6 0.55 0.8"/>
      <geom name="bowl_wall_px" pos="0.072 0 0.035" size="0.006 0.078 0.035" {wall}/>
      <geom name="bowl_wall_nx" pos="-0.072 0 0.035" size="0.006 0.078 0.035" {wall}/>
      <geom name="bowl_wall_py" pos="0 0.072 0.035" size="0.078 0.006 0.035" {wall}/>
      <geom name="bowl_wall_ny" pos="0 -0.072 0.035" size="0.078 0.006 0.035" {wall}/>
      <site name="bowl_target" pos="{_vec((tx, ty, tz))}" size="0.01" rgba="0.1 0.9 0.1 0.7"/>
    </body>
    <body name="ball" pos="{_vec(ball_position)}">
      <freejoint name="ball_joint"/>
      <geom name="ball_geom" type="sphere" size="0.025" mass="0.045" friction="1.5 0.01 0.001"
            rgba="0.95 0.35 0.15 1"/>
    </body>
  </worldbody>
  <equality>
    <joint joint1="right_finger" joint2="left_finger" polycoef="0 1 0 0 0"/>
  </equality>
  <actuator>
    {"".join(f'<position name="{j}_act" joint="{j}"/>' for j in _ARM_JOINTS)}
    <position name="gripper_act" joint="left_finger" kp="1000"
              ctrlrange="0 {_FINGER_TRAVEL}" forcerange="-10 10"/>
  </actuator>
</mujoco>
"""


class BallBowlEnv(MujocoSceneEnv):
    """A UR-style arm picks up a ball and drops it into a bowl (MuJoCo, primitive geoms).

    Action (float32, ``[*B, 7]``): position targets of the six arm joints (radians, within
    ``[-pi, pi]``) and the gripper's opening (metres each finger, ``0`` closed to ``0.04``
    open). Observations (float32 unless said): ``"robot_qpos"``, ``"robot_qvel"`` (``[*B, 6]``),
    ``"gripper_qpos"``, ``"gripper_qvel"`` (``[*B, 2]``), ``"pinch_pos"`` (the point between
    the fingers, ``[*B, 3]``), ``"ball_pos"`` (``[*B, 3]``), ``"ball_quat"`` (``w, x, y, z``,
    ``[*B, 4]``), ``"bowl_pos"`` (the ``bowl_target`` site, ``bowl_position`` + ``(0, 0,
    0.04)``, ``[*B, 3]``) and ``"success"`` (bool, ``[*B, 1]``: ball within
    ``placement_tolerance`` of the target). Reward: ``-||ball_pos - bowl_pos|| + success``.
    Episodes terminate on success only if ``terminate_on_success``; ``max_episode_steps``
    truncates. A reset puts the arm at zero (upright), the gripper closed and the ball at
    ``ball_position`` at rest.

    Args:
        robot_model: ``"primitive"`` (the generated arm, the only model available here).
        menagerie_path: unused by ``"primitive"``.
        ball_position: initial ``(x, y, z)`` of the ball's centre (default
            ``(0.34, -0.14, 0.035)``).
        bowl_position: ``(x, y, z)`` of the bowl body (default ``(0.28, 0.19, 0.01)``).
        placement_tolerance: success radius around the bowl target, in metres (default 0.06).
        terminate_on_success: terminate episodes on success (default ``False``).
        backend: the physics backend; only ``"mujoco"`` is available.
        xml_path: an MJCF file replacing the generated scene; it must name the joints, sites
            and bodies of the generated one (``ball``, ``bowl``, ``pinch``, ``bowl_target``).
        num_envs: the number of simulations (batch ``[num_envs]``; default: one, batch ``[]``).
        batch_size: an alternative to ``num_envs``.
        frame_skip: physics steps (2 ms each) per env step (default 5).
        max_episode_steps: truncate episodes after this many steps (default: never).
        device: where the tensors live.
        seed: the seed of the env's random draws.
        validate_actions: check the actions against the action spec.

    Examples:
        >>> from torchrl.envs import BallBowlEnv
        >>> env = BallBowlEnv(max_episode_steps=50, seed=0)
        >>> td = env.rollout(3)
        >>> td["next", "ball_pos"].shape, td["action"].shape
        (torch.Size([3, 3]), torch.Size([3, 7]))
    """

    FRAME_SKIP = 5
    DEFAULT_BALL_POSITION = (0.34, -0.14, 0.035)
    DEFAULT_BOWL_POSITION = (0.28, 0.19, 0.01)
    BOWL_TARGET_OFFSET = (0.0, 0.0, 0.04)

    def __init__(
        self,
        *,
        robot_model: Literal["primitive", "menagerie_ur5e"] = "primitive",
        menagerie_path: str | Path | None = None,
        ball_position: Sequence[float] | None = None,
        bowl_position: Sequence[float] | None = None,
        placement_tolerance: float = 0.06,
        terminate_on_success: bool = False,
        backend: str = "mujoco",
        xml_path: str | Path | None = None,
        num_envs: int | None = None,
        batch_size: ShapeLike | None = None,
        frame_skip: int | None = None,
        max_episode_steps: int | None = None,
        device: DeviceLike = None,
        seed: int | None = None,
        validate_actions: bool = True,
    ) -> None:
        if robot_model == "menagerie_ur5e":
            raise NotImplementedError(
                "BallBowlEnv: robot_model='menagerie_ur5e' (the MuJoCo Menagerie UR5e + Robotiq "
                "scene) is not implemented in this torchrl; use robot_model='primitive'"
            )
        if robot_model != "primitive":
            raise ValueError(
                f"BallBowlEnv: robot_model must be 'primitive' or 'menagerie_ur5e', got "
                f"{robot_model!r}"
            )
        if backend != "mujoco":
            raise ValueError(
                f"BallBowlEnv: backend {backend!r} is not available; only 'mujoco' (the MuJoCo "
                'C library, pip install "torchrl[mujoco]") is implemented'
            )
        if placement_tolerance <= 0:
            raise ValueError(
                f"BallBowlEnv: placement_tolerance must be > 0, got {placement_tolerance}"
            )
        self.robot_model = robot_model
        self.ball_position = self._as_xyz(
            "ball_position", ball_position, self.DEFAULT_BALL_POSITION
        )
        self.bowl_position = self._as_xyz(
            "bowl_position", bowl_position, self.DEFAULT_BOWL_POSITION
        )
        self.placement_tolerance = float(placement_tolerance)
        self.terminate_on_success = bool(terminate_on_success)
        if xml_path is None:
            xml = _scene_xml(self.ball_position, self.bowl_position)
        else:
            xml = self._patched_user_xml(Path(xml_path))
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
        self._find_indices()
        self._make_observation_spec()
        self.action_spec = self._actuator_action_spec()

    @staticmethod
    def _as_xyz(
        name: str, value: Sequence[float] | None, default: tuple[float, float, float]
    ) -> tuple[float, float, float]:
        if value is None:
            return default
        values = tuple(float(v) for v in value)
        if len(values) != 3:
            raise ValueError(f"BallBowlEnv: {name} must have 3 entries (x, y, z), got {values}")
        return values[0], values[1], values[2]

    def _patched_user_xml(self, path: Path) -> str:
        if not path.exists():
            raise FileNotFoundError(f"BallBowlEnv: xml_path {str(path)!r} does not exist")
        root = ET.fromstring(path.read_text())
        for name, pos in (("ball", self.ball_position), ("bowl", self.bowl_position)):
            body = root.find(f".//body[@name='{name}']")
            if body is None:
                raise ValueError(f"BallBowlEnv: the MJCF at {str(path)!r} has no body {name!r}")
            body.set("pos", _vec(pos))
        return ET.tostring(root, encoding="unicode")

    def _find_indices(self) -> None:
        mj = import_mujoco("BallBowlEnv")
        model = self.model

        def ident(kind: Any, name: str) -> int:
            index = mj.mj_name2id(model, kind, name)
            if index < 0:
                raise ValueError(f"BallBowlEnv: the model has no {kind.name[6:].lower()} {name!r}")
            return int(index)

        joint = mj.mjtObj.mjOBJ_JOINT
        arm = [ident(joint, j) for j in _ARM_JOINTS]
        fingers = [ident(joint, j) for j in _FINGER_JOINTS]
        self._arm_qpos = np.array([model.jnt_qposadr[j] for j in arm])
        self._arm_qvel = np.array([model.jnt_dofadr[j] for j in arm])
        self._finger_qpos = np.array([model.jnt_qposadr[j] for j in fingers])
        self._finger_qvel = np.array([model.jnt_dofadr[j] for j in fingers])
        ball_joint = int(model.body_jntadr[ident(mj.mjtObj.mjOBJ_BODY, "ball")])
        self._ball_qpos = int(model.jnt_qposadr[ball_joint])
        self._pinch_site = ident(mj.mjtObj.mjOBJ_SITE, "pinch")
        self._target_site = ident(mj.mjtObj.mjOBJ_SITE, "bowl_target")

    def _ball_and_target(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        data = self.data[index]
        ball = data.qpos[self._ball_qpos : self._ball_qpos + 3]
        return ball, data.site_xpos[self._target_site]

    def _success(self, index: int) -> bool:
        ball, target = self._ball_and_target(index)
        return bool(np.linalg.norm(ball - target) <= self.placement_tolerance)

    def _observe(self, index: int) -> dict[str, np.ndarray]:
        data = self.data[index]
        ball, target = self._ball_and_target(index)
        start = self._ball_qpos
        return {
            "robot_qpos": data.qpos[self._arm_qpos].copy(),
            "robot_qvel": data.qvel[self._arm_qvel].copy(),
            "gripper_qpos": data.qpos[self._finger_qpos].copy(),
            "gripper_qvel": data.qvel[self._finger_qvel].copy(),
            "pinch_pos": data.site_xpos[self._pinch_site].copy(),
            "ball_pos": ball.copy(),
            "ball_quat": data.qpos[start + 3 : start + 7].copy(),
            "bowl_pos": target.copy(),
            "success": np.array([self._success(index)]),
        }

    def _reward(self, index: int, action: np.ndarray) -> float:
        ball, target = self._ball_and_target(index)
        return -float(np.linalg.norm(ball - target)) + float(self._success(index))

    def _terminated(self, index: int) -> bool:
        return self.terminate_on_success and self._success(index)
