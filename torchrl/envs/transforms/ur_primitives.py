"""URScript-style macro primitives for a six-joint arm with a scalar gripper command.

A specialisation of :class:`MacroPrimitiveTransform`: the policy writes a
:class:`RobotMacroAction` (a primitive id among :class:`URScriptPrimitive` and its arguments:
joint targets, a Cartesian pose, a duration) and the transform expands it into a sequence of
seven-dimensional low-level actions (six joint positions and one gripper command),
interpolated from the arm's current joint positions. ``REACH_POSE`` goes through a Cartesian
solver (inverse kinematics) given by the user or by the env.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import Any

import torch
from tensordict import TensorDictBase

from torchrl._keys import ACTION
from torchrl._types import NestedKey
from torchrl.data.specs import Bounded, Categorical, Composite, Unbounded
from torchrl.envs.transforms._utils import get, missing_key_error, unravel_key
from torchrl.envs.transforms.macro import MacroAction, MacroPrimitiveTransform, long_column

__all__ = ["RobotMacroAction", "URScriptPrimitive", "URScriptPrimitiveTransform"]

_N_JOINTS = 6
_POSE_DIM = 7  # position (3) and orientation quaternion (4)


class URScriptPrimitive(IntEnum):
    """The primitive ids of :class:`URScriptPrimitiveTransform`.

    ``WAIT`` and ``MOVE`` are :class:`MacroPrimitive`'s; ``MOVE_JOINTS`` (URScript's
    ``movej``) goes to joint targets, ``REACH_POSE`` (``movel``) to a Cartesian pose, and the
    gripper primitives set the gripper command while the arm holds still.

    Examples:
        >>> from torchrl.envs.transforms import URScriptPrimitive
        >>> str(URScriptPrimitive.OPEN_GRIPPER), int(URScriptPrimitive.REACH_POSE)
        ('open_gripper', 3)
    """

    WAIT = 0
    MOVE = 1
    MOVE_JOINTS = 2
    REACH_POSE = 3
    OPEN_GRIPPER = 4
    CLOSE_GRIPPER = 5

    def __str__(self) -> str:
        return self.name.lower()


class RobotMacroAction(MacroAction):
    """A URScript-style macro action: ``mode``, ``steps``, ``settle_steps`` and the arguments.

    The arguments are ``joints`` (``[*batch, 6]``, for ``MOVE_JOINTS``), ``pose``
    (``[*batch, 7]``: position and quaternion, for ``REACH_POSE``) and ``target``
    (``[*batch, 7]``: a raw low-level action, for ``MOVE``); unused ones are zeros. Build them
    with the class methods.

    Examples:
        >>> import torch
        >>> from torchrl.envs.transforms import RobotMacroAction
        >>> a = RobotMacroAction.move_joints(torch.zeros(2, 6), steps=4)
        >>> a.mode.squeeze(-1).tolist(), a.joints.shape
        ([2, 2], torch.Size([2, 6]))
    """

    @property
    def joints(self) -> torch.Tensor:
        """The joint targets (``[*batch, 6]``)."""
        return self.get("joints")

    @property
    def pose(self) -> torch.Tensor:
        """The Cartesian pose targets (``[*batch, 7]``)."""
        return self.get("pose")

    @classmethod
    def _make(
        cls,
        mode: URScriptPrimitive,
        batch: torch.Size,
        steps: int,
        settle_steps: int,
        **args: torch.Tensor,
    ) -> RobotMacroAction:
        fields = {
            "joints": torch.zeros(*batch, _N_JOINTS),
            "pose": torch.zeros(*batch, _POSE_DIM),
            "target": torch.zeros(*batch, _N_JOINTS + 1),
        }
        fields.update({k: v.to(torch.get_default_dtype()) for k, v in args.items()})
        return cls(
            long_column(int(mode), batch),
            long_column(steps, batch),
            long_column(settle_steps, batch),
            batch_size=batch,
            **fields,
        )

    @classmethod
    def move_joints(
        cls, joints: torch.Tensor, *, steps: int = 16, settle_steps: int = 0
    ) -> RobotMacroAction:
        """Go to joint positions ``joints`` (``[*batch, 6]``) in ``steps`` steps."""
        return cls._make(
            URScriptPrimitive.MOVE_JOINTS, joints.shape[:-1], steps, settle_steps, joints=joints
        )

    @classmethod
    def reach_pose(
        cls, pose: torch.Tensor, *, steps: int = 16, settle_steps: int = 0
    ) -> RobotMacroAction:
        """Go to the Cartesian pose ``pose`` (``[*batch, 7]``) in ``steps`` steps."""
        return cls._make(
            URScriptPrimitive.REACH_POSE, pose.shape[:-1], steps, settle_steps, pose=pose
        )

    @classmethod
    def open_gripper(
        cls, *, steps: int = 4, settle_steps: int = 0, batch_size: Any = ()
    ) -> RobotMacroAction:
        """Open the gripper (the arm holds its joints)."""
        return cls._make(
            URScriptPrimitive.OPEN_GRIPPER, torch.Size(batch_size), steps, settle_steps
        )

    @classmethod
    def close_gripper(
        cls, *, steps: int = 4, settle_steps: int = 0, batch_size: Any = ()
    ) -> RobotMacroAction:
        """Close the gripper (the arm holds its joints)."""
        return cls._make(
            URScriptPrimitive.CLOSE_GRIPPER, torch.Size(batch_size), steps, settle_steps
        )

    @classmethod
    def wait(  # type: ignore[override]
        cls, *, steps: int = 1, settle_steps: int = 0, batch_size: Any = ()
    ) -> RobotMacroAction:
        """Hold the current action for ``steps`` steps."""
        return cls._make(URScriptPrimitive.WAIT, torch.Size(batch_size), steps, settle_steps)


CartesianSolver = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class URScriptPrimitiveTransform(MacroPrimitiveTransform):
    """Expands :class:`RobotMacroAction` s into seven-dimensional joint + gripper actions.

    The interpolation starts from the arm's joint observation (``robot_qpos_key``, 6 values)
    and the gripper's (``gripper_qpos_key``: its first value is the current command). A
    ``REACH_POSE`` target is turned into joint targets by ``cartesian_solver(pose, start)``
    (``[*B, 7]`` poses and start actions to ``[*B, 7]`` actions), or, without one, by the
    parent env's ``_cartesian_pose_to_joint_target`` method.

    Args:
        action_key: the low-level action key (also where the macro action is written).
        robot_qpos_key: the six arm joint positions.
        gripper_qpos_key: the gripper joint positions.
        macro_steps: interpolated low-level actions per primitive.
        settle_steps: held low-level actions appended per primitive.
        action_dim: the low-level action size (must be 7: six joints and the gripper).
        cartesian_solver: the inverse-kinematics callable for ``REACH_POSE``.
        open_gripper_ctrl: the gripper command of ``OPEN_GRIPPER``.
        close_gripper_ctrl: the gripper command of ``CLOSE_GRIPPER``.
        execute: return ``Compose(MultiAction(...), transform)`` (runs the whole sequence in
            one outer step).
        multi_action_dim, stack_rewards, stack_observations: forwarded to that ``MultiAction``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import RobotMacroAction, URScriptPrimitiveTransform
        >>> t = URScriptPrimitiveTransform(macro_steps=4)
        >>> td = TensorDict(robot_qpos=torch.zeros(6), gripper_qpos=torch.zeros(2))
        >>> td["action"] = RobotMacroAction.move_joints(torch.ones(6), steps=2)
        >>> t.inv(td)["action"][:, 0].tolist()
        [0.5, 1.0, 1.0, 1.0]
    """

    def __init__(
        self,
        action_key: NestedKey = ACTION,
        robot_qpos_key: NestedKey = "robot_qpos",
        gripper_qpos_key: NestedKey = "gripper_qpos",
        macro_steps: int = 16,
        settle_steps: int = 0,
        action_dim: int = _N_JOINTS + 1,
        cartesian_solver: CartesianSolver | None = None,
        open_gripper_ctrl: float = 0.0,
        close_gripper_ctrl: float = 1.0,
        *,
        execute: bool = False,
        multi_action_dim: int = 1,
        stack_rewards: bool = True,
        stack_observations: bool = False,
    ) -> None:
        if action_dim != _N_JOINTS + 1:
            raise ValueError(
                f"URScriptPrimitiveTransform: action_dim must be 7 (six joints and one "
                f"gripper command), got {action_dim}"
            )
        super().__init__(
            action_key,
            macro_steps,
            settle_steps,
            action_dim,
            multi_action_dim=multi_action_dim,
        )
        self.robot_qpos_key = unravel_key(robot_qpos_key)
        self.gripper_qpos_key = unravel_key(gripper_qpos_key)
        self.cartesian_solver = cartesian_solver
        self.open_gripper_ctrl = float(open_gripper_ctrl)
        self.close_gripper_ctrl = float(close_gripper_ctrl)

    def current_action(self, tensordict: TensorDictBase, action_dim: int) -> torch.Tensor:
        """The arm's joint positions and the gripper's first joint: ``[*batch, 7]``."""
        parts = []
        for key, width in ((self.robot_qpos_key, _N_JOINTS), (self.gripper_qpos_key, 1)):
            value = get(tensordict, key)
            if value is None:
                raise missing_key_error(self, key, tensordict)
            if value.shape[-1] < width:
                raise ValueError(
                    f"URScriptPrimitiveTransform: {key!r} has {value.shape[-1]} values, at "
                    f"least {width} expected"
                )
            parts.append(value[..., :width].to(torch.get_default_dtype()))
        return torch.cat(parts, dim=-1)

    def _solve(self, pose: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        solver = self.cartesian_solver
        if solver is None:
            env = self.parent
            while env is not None and solver is None:
                solver = getattr(env, "_cartesian_pose_to_joint_target", None)
                env = getattr(env, "base_env", None)
        if solver is None:
            raise RuntimeError(
                "URScriptPrimitiveTransform: a REACH_POSE needs a cartesian_solver (or a parent "
                "env with a _cartesian_pose_to_joint_target method)"
            )
        out = solver(pose, start)
        if out.shape != start.shape:
            raise ValueError(
                f"URScriptPrimitiveTransform: the cartesian solver returned shape "
                f"{tuple(out.shape)}, expected {tuple(start.shape)}"
            )
        return out.to(start.dtype)

    def _resolve(
        self, macro: TensorDictBase, start: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        mode = macro.get("mode")
        known = [int(p) for p in URScriptPrimitive]
        unknown = ~torch.isin(mode, torch.tensor(known, device=mode.device))
        if bool(unknown.any()):
            raise ValueError(
                f"URScriptPrimitiveTransform: unknown primitive mode(s) "
                f"{sorted(set(mode[unknown].tolist()))}; known: {known}"
            )

        def is_(p: URScriptPrimitive) -> torch.Tensor:
            return mode == int(p)

        target = start.clone()
        arm, grip = target[..., :_N_JOINTS], target[..., _N_JOINTS:]
        if bool(is_(URScriptPrimitive.MOVE).any()):
            raw = macro.get("target").to(start.dtype)
            target = torch.where(is_(URScriptPrimitive.MOVE), raw, target)
            arm, grip = target[..., :_N_JOINTS], target[..., _N_JOINTS:]
        if bool(is_(URScriptPrimitive.MOVE_JOINTS).any()):
            joints = macro.get("joints").to(start.dtype)
            arm = torch.where(is_(URScriptPrimitive.MOVE_JOINTS), joints, arm)
        if bool(is_(URScriptPrimitive.REACH_POSE).any()):
            solved = self._solve(macro.get("pose").to(start.dtype), start)
            reach = is_(URScriptPrimitive.REACH_POSE)
            arm = torch.where(reach, solved[..., :_N_JOINTS], arm)
            grip = torch.where(reach, solved[..., _N_JOINTS:], grip)
        grip = torch.where(is_(URScriptPrimitive.OPEN_GRIPPER), self.open_gripper_ctrl, grip)
        grip = torch.where(is_(URScriptPrimitive.CLOSE_GRIPPER), self.close_gripper_ctrl, grip)
        return start, torch.cat([arm, grip], -1), macro.get("steps"), macro.get("settle_steps")

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        action_spec = super().transform_action_spec(action_spec)
        macro = action_spec[self.action_key]
        batch, device = action_spec.shape, macro.device
        macro["mode"] = Categorical(len(URScriptPrimitive), shape=(*batch, 1), device=device)
        macro["joints"] = Unbounded(shape=(*batch, _N_JOINTS), device=device)
        macro["pose"] = Unbounded(shape=(*batch, _POSE_DIM), device=device)
        if not isinstance(macro["target"], Bounded):
            macro["target"] = Unbounded(shape=(*batch, _N_JOINTS + 1), device=device)
        return action_spec

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, robot_qpos_key={self.robot_qpos_key!r}, "
            f"gripper_qpos_key={self.gripper_qpos_key!r}"
        )
