"""URScriptPrimitiveTransform: the URScript-style primitives expanded over a toy six-joint arm."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs import EnvBase, TransformedEnv, check_env_specs
from torchrl.envs.transforms import (
    RobotMacroAction,
    URScriptPrimitive,
    URScriptPrimitiveTransform,
)


class ToyArmEnv(EnvBase):
    """Position-controlled arm: the joints and the gripper take the commanded values."""

    def __init__(self, batch_size: Any = ()) -> None:
        super().__init__(batch_size=batch_size)
        b = self.batch_size
        self.observation_spec = Composite(
            robot_qpos=Unbounded(shape=(*b, 6)), gripper_qpos=Unbounded(shape=(*b, 2)), shape=b
        )
        self.action_spec = Bounded(-5.0, 5.0, shape=(*b, 7))
        self.reward_spec = Unbounded(shape=(*b, 1))
        self.home = torch.full((*b, 6), 0.5)

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _cartesian_pose_to_joint_target(self, pose, start):
        # A fake "IK": the joints are the position repeated twice; the gripper is unchanged.
        return torch.cat([pose[..., :3], pose[..., :3], start[..., 6:]], -1)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        return TensorDict(
            robot_qpos=self.home.clone(),
            gripper_qpos=torch.zeros(*self.batch_size, 2),
            batch_size=self.batch_size,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict["action"]
        return TensorDict(
            robot_qpos=action[..., :6],
            gripper_qpos=action[..., 6:].expand(*action.shape[:-1], 2),
            reward=torch.zeros(*self.batch_size, 1),
            batch_size=self.batch_size,
        )


def make_env(**kwargs):
    return TransformedEnv(
        ToyArmEnv(), URScriptPrimitiveTransform(macro_steps=4, execute=True, **kwargs)
    )


def test_primitive_names():
    assert str(URScriptPrimitive.CLOSE_GRIPPER) == "close_gripper"
    assert [int(p) for p in URScriptPrimitive] == list(range(6))


def test_move_joints_interpolates_from_observation():
    env = make_env()
    td = env.reset()
    td["action"] = RobotMacroAction.move_joints(torch.full((6,), 1.5), steps=2)
    out = env.step(td)["next"]
    torch.testing.assert_close(out["robot_qpos"], torch.full((6,), 1.5))
    # the gripper was held while the arm moved; 4 low-level steps were taken
    assert out["reward"].shape == (4, 1)
    assert out["gripper_qpos"].abs().sum() == 0


def test_gripper_and_reach_pose():
    env = make_env(close_gripper_ctrl=0.8)
    td = env.reset()
    td["action"] = RobotMacroAction.close_gripper(steps=1)
    td = env.step(td)["next"]
    torch.testing.assert_close(td["gripper_qpos"], torch.full((2,), 0.8))
    torch.testing.assert_close(td["robot_qpos"], torch.full((6,), 0.5))
    pose = torch.tensor([0.1, 0.2, 0.3, 1.0, 0.0, 0.0, 0.0])
    td["action"] = RobotMacroAction.reach_pose(pose, steps=4)
    td = env.step(td)["next"]
    torch.testing.assert_close(td["robot_qpos"], torch.tensor([0.1, 0.2, 0.3] * 2))
    torch.testing.assert_close(td["gripper_qpos"], torch.full((2,), 0.8))


def test_custom_solver_and_batch_of_mixed_modes():
    t = URScriptPrimitiveTransform(macro_steps=2, cartesian_solver=lambda pose, s: s + 1)
    a = RobotMacroAction.move_joints(torch.ones(2, 6), steps=1)
    a["mode"][1] = int(URScriptPrimitive.REACH_POSE)
    td = TensorDict(robot_qpos=torch.zeros(2, 6), gripper_qpos=torch.zeros(2, 2), batch_size=[2])
    td["action"] = a
    seq = t.inv(td)["action"]
    assert seq.shape == (2, 2, 7)
    torch.testing.assert_close(seq[0, -1], torch.cat([torch.ones(6), torch.zeros(1)]))
    torch.testing.assert_close(seq[1, -1], torch.ones(7))


def test_specs_and_errors():
    env = make_env()
    spec = env.full_action_spec["action"]
    assert spec["joints"].shape == (6,) and spec["pose"].shape == (7,)
    assert spec["mode"].space.n == len(URScriptPrimitive)
    check_env_specs(env)
    with pytest.raises(ValueError, match="action_dim must be 7"):
        URScriptPrimitiveTransform(action_dim=6)
    t = URScriptPrimitiveTransform(macro_steps=2)
    td = TensorDict(robot_qpos=torch.zeros(6), gripper_qpos=torch.zeros(2))
    td["action"] = RobotMacroAction.reach_pose(torch.zeros(7), steps=1)
    with pytest.raises(RuntimeError, match="cartesian_solver"):
        t.inv(td)
    td = TensorDict(gripper_qpos=torch.zeros(2))
    td["action"] = RobotMacroAction.wait(steps=1)
    with pytest.raises(KeyError, match="robot_qpos"):
        t.inv(td)
