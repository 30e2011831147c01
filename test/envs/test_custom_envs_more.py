"""FinancialRegimeEnv, BallBowlEnv and SatelliteEnv of torchrl.envs.custom."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from torchrl.envs import (
    BallBowlEnv,
    FinancialRegimeEnv,
    SatelliteEnv,
    SerialEnv,
    check_env_specs,
)

_has_mujoco = importlib.util.find_spec("mujoco") is not None
needs_mujoco = pytest.mark.skipif(not _has_mujoco, reason="mujoco not installed")


@pytest.fixture(autouse=True)
def _in_tmp_dir(tmp_path, monkeypatch):
    # MuJoCo writes MUJOCO_LOG.TXT into the working directory.
    monkeypatch.chdir(tmp_path)


# ------------------------------------------------------------------------------------- trading
def _step(env, td, action):
    td["action"] = torch.full((*td.batch_size, 1), action, dtype=torch.int64)
    return env.step(td)["next"]


@pytest.mark.parametrize("batch", [(), (3,)])
def test_trading_specs_and_rollout(batch):
    env = FinancialRegimeEnv(batch_size=batch, seed=0)
    check_env_specs(env)
    rollout = env.rollout(7)
    assert rollout.batch_size == torch.Size([*batch, 7])
    assert rollout["next", "price_history"].shape == torch.Size([*batch, 7, 50])
    assert rollout["next", "current_holdings"].dtype == torch.bool
    assert rollout["next", "step_count"][..., -1].eq(7).all()
    assert env.action_spec.n == 3


def test_trading_prices_shift_and_follow_gbm():
    env = FinancialRegimeEnv(batch_size=[2000], seed=1)
    td = env.reset()
    assert (td["price_history"] > 0).all()
    nxt = _step(env, td, 0)
    # The window shifts by one: the newest price is appended at the end.
    torch.testing.assert_close(nxt["price_history"][:, :-1], td["price_history"][:, 1:])
    log_ret = (nxt["price_history"][:, -1] / td["price_history"][:, -1]).log()
    dt = 1 / 252
    assert abs(float(log_ret.mean()) - 0.05 * dt) < 4 * 0.2 * math.sqrt(dt) / math.sqrt(2000)
    assert abs(float(log_ret.std()) - 0.2 * math.sqrt(dt)) < 0.1 * 0.2 * math.sqrt(dt)


def test_trading_zero_volatility_rewards():
    # With no volatility and no drift prices stay flat: rewards are the costs alone.
    params = FinancialRegimeEnv.gen_params(volatility=0.0, drift=0.0, transaction_cost=0.01)
    env = FinancialRegimeEnv(td_params=params, seed=0)
    td = env.reset()
    assert torch.allclose(td["price_history"], torch.full((50,), 100.0))
    buy = _step(env, td, 1)
    assert buy["current_holdings"].item() and buy["entry_price"].item() == pytest.approx(100.0)
    assert buy["reward"].item() == pytest.approx(-0.01 * 100.0)
    again = _step(env, buy, 1)  # buying while holding does nothing
    assert again["reward"].item() == pytest.approx(0.0)
    assert again["entry_price"].item() == pytest.approx(100.0)
    sell = _step(env, again, 2)
    assert not sell["current_holdings"].item() and sell["entry_price"].item() == 0.0
    assert sell["reward"].item() == pytest.approx(-0.01 * 100.0)
    idle = _step(env, sell, 2)  # selling while flat does nothing
    assert idle["reward"].item() == 0.0


def test_trading_profit_and_holding_shaping():
    params = FinancialRegimeEnv.gen_params(volatility=0.0, drift=2.52, transaction_cost=0.0)
    env = FinancialRegimeEnv(td_params=params, seed=0)
    growth = math.exp(2.52 / 252)  # one day of drift
    td = env.reset()
    held = _step(env, td, 1)
    # The position is open after the action: it earns 0.1 x the price's relative change.
    assert held["reward"].item() == pytest.approx(0.1 * (growth - 1), rel=1e-4)
    held = _step(env, held, 0)
    sold = _step(env, held, 2)
    # Sold at the price two moves after the entry; flat afterwards, so no shaping term.
    assert sold["reward"].item() == pytest.approx(growth**2 - 1, rel=1e-4)


def test_trading_truncation_seeding_and_params():
    params = FinancialRegimeEnv.gen_params(max_steps=5, window_size=8, batch_size=[2])
    env = FinancialRegimeEnv(td_params=params, batch_size=[2], seed=3)
    rollout = env.rollout(20, break_when_any_done=True)
    assert rollout.shape == torch.Size([2, 5])
    assert rollout["next", "truncated"][:, -1].all() and not rollout["next", "terminated"].any()
    assert rollout["price_history"].shape[-1] == 8
    a = FinancialRegimeEnv(seed=5).rollout(4)["next", "price_history"]
    b = FinancialRegimeEnv(seed=5).rollout(4)["next", "price_history"]
    c = FinancialRegimeEnv(seed=6).rollout(4)["next", "price_history"]
    assert torch.equal(a, b) and not torch.equal(a, c)
    # Stateless: a batch of another size goes through the same env.
    other = env.reset(TensorDict(batch_size=[4]))
    assert other["price_history"].shape == torch.Size([4, 8])


def test_trading_errors():
    with pytest.raises(ValueError, match="window_size"):
        FinancialRegimeEnv.gen_params(window_size=0)
    with pytest.raises(KeyError, match="params"):
        FinancialRegimeEnv(td_params=TensorDict({}, []))
    env = FinancialRegimeEnv(seed=0)
    env.validate_actions = False
    td = env.reset()
    td["action"] = torch.tensor([5])
    with pytest.raises(ValueError, match="0 .hold., 1 .buy. or 2 .sell."):
        env.step(td)


def test_trading_serial_env():
    env = SerialEnv(2, lambda: FinancialRegimeEnv(seed=0))
    rollout = env.rollout(4)
    assert rollout["next", "reward"].shape == torch.Size([2, 4, 1])
    env.close()


# ----------------------------------------------------------------------------------- ball bowl
@needs_mujoco
def test_ball_bowl_specs_rollout_and_tracking():
    env = BallBowlEnv(num_envs=2, seed=0, max_episode_steps=4)
    check_env_specs(env)
    rollout = env.rollout(10, break_when_any_done=True)
    assert rollout.shape == torch.Size([2, 4])
    assert rollout["next", "truncated"][:, -1].all()
    assert rollout["action"].shape[-1] == 7
    td = env.reset()
    torch.testing.assert_close(td["ball_pos"][0], torch.tensor([0.34, -0.14, 0.035]))
    torch.testing.assert_close(td["bowl_pos"][0], torch.tensor([0.28, 0.19, 0.05]))
    assert not td["success"].any()
    # Position control: the arm joints settle on their targets, both fingers open alike.
    target = torch.tensor([0.5, 0.3, -0.2, 0.1, 0.4, -0.3, 0.03]).expand(2, 7)
    for _ in range(60):
        td["action"] = target
        td = env.step(td)["next"]
    torch.testing.assert_close(td["robot_qpos"], target[:, :6], atol=5e-3, rtol=0)
    torch.testing.assert_close(td["gripper_qpos"], torch.full((2, 2), 0.03), atol=2e-3, rtol=0)
    # The ball was not touched: it rests on the floor; the reward is minus its distance.
    dist = (td["ball_pos"] - td["bowl_pos"]).norm(dim=-1, keepdim=True)
    torch.testing.assert_close(td["reward"], -dist)


@needs_mujoco
def test_ball_bowl_drop_into_bowl_succeeds():
    # A ball released above the bowl falls in: success, reward ~ 1 - distance, termination.
    env = BallBowlEnv(ball_position=(0.28, 0.19, 0.2), terminate_on_success=True, seed=0)
    td = env.reset()
    assert not td["success"].item()
    rollout = env.rollout(200, break_when_any_done=True)
    last = rollout[-1]["next"]
    assert last["success"].item() and last["terminated"].item()
    assert rollout.shape[0] < 200
    dist = (last["ball_pos"] - last["bowl_pos"]).norm()
    assert last["reward"].item() == pytest.approx(1.0 - dist.item(), abs=1e-5)
    # The ball lies on the bowl's bottom, inside its walls.
    assert abs(last["ball_pos"][0] - 0.28) < 0.07 and abs(last["ball_pos"][1] - 0.19) < 0.07


def _pinch_down_ik(env, q, target):
    """Damped least squares on the six arm joints: pinch at ``target``, fingers pointing down."""
    import mujoco

    model = env.model
    data = mujoco.MjData(model)
    jacp, jacr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
    q = q.copy()
    for _ in range(200):
        data.qpos[env._arm_qpos] = q
        mujoco.mj_forward(model, data)
        pos_err = target - data.site_xpos[env._pinch_site]
        z_axis = data.site_xmat[env._pinch_site].reshape(3, 3)[:, 2]
        err = np.concatenate([pos_err, np.cross(z_axis, [0.0, 0.0, -1.0])])
        mujoco.mj_jacSite(model, data, jacp, jacr, env._pinch_site)
        jac = np.vstack([jacp[:, env._arm_qvel], jacr[:, env._arm_qvel]])
        step = jac.T @ np.linalg.solve(jac @ jac.T + 1e-4 * np.eye(6), err)
        q = np.clip(q + 0.5 * step, -3.1, 3.1)
    return q


@needs_mujoco
def test_ball_bowl_scripted_pick_and_place():
    # The gripper can hold the ball: a scripted pick-and-place (IK, smooth joint-space moves)
    # carries it from its start into the bowl.
    env = BallBowlEnv(seed=0)
    td = env.reset()
    ball, bowl = td["ball_pos"].numpy(), td["bowl_pos"].numpy()
    q_prev, g_prev = np.array([0.0, 0.6, 1.5, 1.0, 0.0, 0.0]), 0.04
    plan = [
        (ball + [0, 0, 0.15], 0.04, 150),
        (ball + [0, 0, 0.01], 0.04, 150),
        (ball + [0, 0, 0.01], 0.0, 80),
        (ball + [0, 0, 0.2], 0.0, 150),
        (bowl + [0, 0, 0.15], 0.0, 150),
        (bowl + [0, 0, 0.15], 0.04, 200),
    ]
    for target, grip, n in plan:
        q = _pinch_down_ik(env, q_prev, target)
        for k in range(n):
            frac = min(1.0, (k + 1) / (0.7 * n))
            action = np.concatenate(
                [q_prev + frac * (q - q_prev), [g_prev + frac * (grip - g_prev)]]
            )
            td["action"] = torch.as_tensor(action, dtype=torch.float32)
            td = env.step(td)["next"]
        q_prev, g_prev = q, grip
        if grip == 0.0 and target[2] > ball[2] + 0.1:
            assert td["ball_pos"][2] > 0.1  # lifted, not dropped
    assert td["success"].item()
    assert td["reward"].item() > 0.9


@needs_mujoco
def test_ball_bowl_errors_and_serial():
    with pytest.raises(NotImplementedError, match="menagerie"):
        BallBowlEnv(robot_model="menagerie_ur5e")
    with pytest.raises(ValueError, match="robot_model"):
        BallBowlEnv(robot_model="nope")
    with pytest.raises(ValueError, match="backend"):
        BallBowlEnv(backend="mjx")
    with pytest.raises(ValueError, match="ball_position"):
        BallBowlEnv(ball_position=(0.0, 1.0))
    with pytest.raises(FileNotFoundError, match="xml_path"):
        BallBowlEnv(xml_path="/nonexistent/scene.xml")
    env = SerialEnv(2, lambda: BallBowlEnv(seed=0))
    assert env.rollout(3)["next", "pinch_pos"].shape == torch.Size([2, 3, 3])
    env.close()


# ----------------------------------------------------------------------------------- satellite
@needs_mujoco
@pytest.mark.parametrize("num_cmgs", [4, 6])
def test_satellite_specs_and_rollout(num_cmgs):
    env = SatelliteEnv(num_cmgs=num_cmgs, num_envs=2, seed=0, max_episode_steps=3)
    check_env_specs(env)
    rollout = env.rollout(5, break_when_any_done=False)
    assert rollout["action"].shape == torch.Size([2, 5, num_cmgs])
    assert rollout["next", "gimbal_angles"].shape[-1] == 2 * num_cmgs
    assert rollout["next", "truncated"][:, 2].all() and not rollout["next", "terminated"].any()
    td = env.reset()
    # Random targets are unit quaternions, different per sub-env.
    torch.testing.assert_close(td["target_quat"].norm(dim=-1), torch.ones(2))
    assert not torch.allclose(td["target_quat"][0], td["target_quat"][1])


@needs_mujoco
def test_satellite_gimbals_turn_the_bus():
    # Pyramid: equal gimbal rates change the cluster's momentum along z; the bus counter-rotates.
    env = SatelliteEnv(num_cmgs=4, seed=0)
    td = env.reset()
    for _ in range(50):
        td["action"] = torch.full((4,), 0.5)
        td = env.step(td)["next"]
    torch.testing.assert_close(td["gimbal_rates"], torch.full((4,), 1.5), atol=0.02, rtol=0)
    omega = td["bus_omega"]
    assert abs(omega[2]) > 0.01 and omega[:2].abs().max() < 0.1 * abs(omega[2])
    # Orthogonal pairs with opposite rotors: equal rates cancel, the bus stays (nearly) still.
    env6 = SatelliteEnv(num_cmgs=6, seed=0)
    td = env6.reset()
    for _ in range(50):
        td["action"] = torch.full((6,), 0.5)
        td = env6.step(td)["next"]
    assert td["bus_omega"].abs().max() < 0.01


@needs_mujoco
@pytest.mark.parametrize("num_cmgs", [4, 6])
def test_satellite_conserves_angular_momentum(num_cmgs):
    # Gimbal and rotor motors are internal torques: the bus gains the momentum the cluster
    # gives up, and the total stays put (up to integration error).
    import mujoco

    env = SatelliteEnv(num_cmgs=num_cmgs, seed=0)
    td = env.reset()
    data = env.data[0]

    def total_momentum():
        mujoco.mj_subtreeVel(env.model, data)
        return data.subtree_angmom[1].copy()  # the bus and everything it carries

    start = total_momentum()
    action = torch.rand(num_cmgs, generator=torch.Generator().manual_seed(0)) * 2 - 1
    for _ in range(100):
        td["action"] = action
        td = env.step(td)["next"]
    bus_momentum = np.abs(env.model.body_inertia[1] * data.qvel[3:6]).max()
    assert bus_momentum > 0.1
    assert np.abs(total_momentum() - start).max() < 0.02 * bus_momentum


@needs_mujoco
def test_satellite_attitude_error_and_reward():
    env = SatelliteEnv(num_cmgs=4, seed=0, omega_weight=0.0, ctrl_cost_weight=0.0)
    identity = torch.tensor([1.0, 0.0, 0.0, 0.0])
    half_turn = torch.tensor([0.0, 0.0, 0.0, 1.0])  # 180 degrees about z
    td = env.reset(TensorDict({"target_quat": half_turn, "init_bus_quat": identity}, []))
    torch.testing.assert_close(td["target_quat"], half_turn)
    torch.testing.assert_close(td["init_bus_quat"], identity)
    # The log of the error quaternion: half the angle (pi / 2) about z.
    torch.testing.assert_close(td["quat_err"], torch.tensor([0.0, 0.0, math.pi / 2]))
    td["action"] = torch.zeros(4)
    nxt = env.step(td)["next"]
    manip = env.manipulability(0) / env.rotor_h**3
    expected = -nxt["quat_err"].norm().item() - 0.5 / manip
    assert nxt["reward"].item() == pytest.approx(expected, rel=1e-4)
    assert nxt["manipulability"].item() == pytest.approx(env.manipulability(0), rel=1e-5)
    # Matching target: no attitude error.
    td = env.reset(TensorDict({"target_quat": identity, "init_bus_quat": identity}, []))
    assert td["quat_err"].abs().max() < 1e-6


@needs_mujoco
def test_satellite_singularity_penalty():
    import mujoco

    env = SatelliteEnv(num_cmgs=6, seed=0)
    env.reset()
    nominal = env.manipulability(0)
    # These gimbal angles put every torque direction of the cluster in the xy plane: rank 2.
    data = env.data[0]
    data.qpos[env._gimbal_qpos] = [-math.pi / 2, math.pi / 2, 0, 0, 0, 0]
    mujoco.mj_forward(env.model, data)
    assert env.manipulability(0) == pytest.approx(math.sqrt(1e-8), rel=1e-3)
    assert nominal > 1e3 * env.manipulability(0)
    inverse = env._reward(0, np.zeros(6))
    assert inverse < -1e5  # 0.5 / clamp_min dominates
    exp_env = SatelliteEnv(num_cmgs=6, seed=0, singularity_mode="exp", omega_weight=0.0)
    exp_env.reset()
    exp_env.data[0].qpos[:] = data.qpos
    mujoco.mj_forward(exp_env.model, exp_env.data[0])
    err = float(np.linalg.norm(exp_env._quat_err(0)))
    assert exp_env._reward(0, np.zeros(6)) == pytest.approx(-err - 0.5, rel=1e-6)


@needs_mujoco
def test_satellite_seeding_partial_reset_errors_and_serial():
    a = SatelliteEnv(num_envs=2, seed=7).reset()["target_quat"]
    b = SatelliteEnv(num_envs=2, seed=7).reset()["target_quat"]
    assert torch.equal(a, b)
    env = SatelliteEnv(num_envs=2, seed=0)
    td = env.reset()
    old = td["target_quat"].clone()
    # A partial reset draws a fresh target for the marked sub-env only, even though the input
    # still carries the old targets.
    td["_reset"] = torch.tensor([[True], [False]])
    td = env.reset(td)
    assert not torch.allclose(td["target_quat"][0], old[0])
    torch.testing.assert_close(td["target_quat"][1], old[1])
    with pytest.raises(ValueError, match="num_cmgs"):
        SatelliteEnv(num_cmgs=5)
    with pytest.raises(ValueError, match="singularity_mode"):
        SatelliteEnv(singularity_mode="log")
    with pytest.raises(ValueError, match="target_quat"):
        env.reset(TensorDict({"target_quat": torch.zeros(2, 3)}, [2]))
    serial = SerialEnv(2, lambda: SatelliteEnv(num_cmgs=4, seed=0))
    assert serial.rollout(3)["next", "reward"].shape == torch.Size([2, 3, 1])
    serial.close()
