"""TicTacToeEnv, ChessEnv and the MuJoCo locomotion envs of torchrl.envs.custom."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from torchrl.envs import (
    AntEnv,
    ChessEnv,
    HopperEnv,
    HumanoidEnv,
    MujocoEnv,
    ParallelEnv,
    RandomPolicy,
    SerialEnv,
    TicTacToeEnv,
    Walker2dEnv,
    check_env_specs,
)

_has_chess = importlib.util.find_spec("chess") is not None
_has_mujoco = (
    importlib.util.find_spec("mujoco") is not None
    and importlib.util.find_spec("gymnasium") is not None
)
needs_chess = pytest.mark.skipif(not _has_chess, reason="chess not installed")
needs_mujoco = pytest.mark.skipif(not _has_mujoco, reason="mujoco/gymnasium not installed")


@pytest.fixture(autouse=True)
def _in_tmp_dir(tmp_path, monkeypatch):
    # MuJoCo writes MUJOCO_LOG.TXT into the working directory.
    monkeypatch.chdir(tmp_path)


# ------------------------------------------------------------------------------------ tic-tac-toe
def _play(env, td, cells):
    for cell in cells:
        td["action"] = torch.tensor([cell])
        td = env.step(td)["next"]
    return td


@pytest.mark.parametrize("single_player", [False, True])
@pytest.mark.parametrize("batch", [(), (4,), (2, 3)])
def test_tictactoe_specs(batch, single_player):
    check_env_specs(TicTacToeEnv(batch_size=batch, single_player=single_player, seed=0))


def test_tictactoe_row_win_and_rewards():
    env = TicTacToeEnv()
    td = env.reset()
    assert td["board"].dtype == torch.int32 and (td["board"] == 0).all()
    assert td["turn"].item() == 0 and td["mask"].all()
    td = _play(env, td, [0, 3, 1, 4])
    assert not td["done"].item()
    assert td["turn"].item() == 0
    assert td["mask"].tolist() == [False, False, True, False, False, True, True, True, True]
    assert td["board"].tolist() == [[1, 1, 0], [2, 2, 0], [0, 0, 0]]
    td = _play(env, td, [2])
    assert td["done"].item() and td["terminated"].item() and not td["truncated"].item()
    assert td["player0", "reward"].item() == 1.0
    assert td["player1", "reward"].item() == -1.0


def test_tictactoe_player1_diagonal_win_and_draw():
    env = TicTacToeEnv()
    td = _play(env, env.reset(), [1, 0, 2, 4, 3, 8])  # player1 takes the main diagonal
    assert td["done"].item()
    assert td["player1", "reward"].item() == 1.0 and td["player0", "reward"].item() == -1.0
    # A full board without a line: a draw, zero reward to both.
    td = _play(env, env.reset(), [0, 1, 2, 4, 3, 5, 7, 6, 8])
    assert td["done"].item()
    assert td["player0", "reward"].item() == 0.0 and td["player1", "reward"].item() == 0.0


def test_tictactoe_illegal_move_raises():
    env = TicTacToeEnv(batch_size=[2])
    td = env.reset()
    td["action"] = torch.tensor([[4], [4]])
    td = env.step(td)["next"]
    td["action"] = torch.tensor([[0], [4]])
    with pytest.raises(ValueError, match="cell 4, which is taken"):
        env.step(td)


def test_tictactoe_batched_games_are_independent():
    env = TicTacToeEnv(batch_size=[2])
    td = env.reset()
    for cells in ([0, 0], [3, 1], [1, 2], [4, 3], [2, 4]):
        td["action"] = torch.tensor(cells).unsqueeze(-1)
        td = env.step(td)["next"]
    assert td["done"].squeeze(-1).tolist() == [True, False]


def test_tictactoe_rand_action_respects_mask_and_games_end():
    env = TicTacToeEnv(batch_size=[64], seed=0)
    rollout = env.rollout(9, break_when_any_done=False)
    # Random legal play never marks a taken cell (it would raise) and ends within 9 moves.
    assert rollout["next", "done"].any(-2).all()
    first_done = rollout["next", "done"].squeeze(-1).float().argmax(-1)
    assert (first_done >= 4).all()  # no line before the 5th move


def test_tictactoe_single_player():
    env = TicTacToeEnv(single_player=True, batch_size=[32], seed=0)
    td = env.reset()
    td["action"] = torch.full((32, 1), 4)
    td = env.step(td)["next"]
    # player1 answered in the same step: two marks, and it is player0's turn again.
    assert ((td["board"] != 0).sum((-1, -2)) == 2).all()
    assert (td["turn"] == 0).all()
    assert ((td["board"] == 2).sum((-1, -2)) == 1).all()


def test_tictactoe_seeding_and_unlocked_batch():
    a = TicTacToeEnv(batch_size=[8], seed=3).rollout(9, break_when_any_done=False)
    b = TicTacToeEnv(batch_size=[8], seed=3).rollout(9, break_when_any_done=False)
    assert torch.equal(a["action"], b["action"])
    r = TicTacToeEnv(seed=0).rollout(5, tensordict=TensorDict(batch_size=[5]))
    assert r.batch_size[0] == 5


def test_tictactoe_serial_env():
    env = SerialEnv(2, lambda: TicTacToeEnv(seed=0))
    policy = RandomPolicy(env.action_spec, mask_key="mask")
    # Lazy stacking: a batched env's reset drops the empty player groups that step_mdp keeps.
    rollout = env.rollout(9, policy=policy, break_when_any_done=False, return_contiguous=False)
    assert rollout.batch_size == torch.Size([2, 9])
    assert rollout["next", "player0", "reward"].shape == torch.Size([2, 9, 1])


# ------------------------------------------------------------------------------------------ chess
def _move(env, td, uci):
    td["action"] = torch.tensor(env.UCI_MOVES.index(uci))
    return env.step(td)


@needs_chess
def test_chess_action_space():
    moves = ChessEnv.UCI_MOVES
    assert len(moves) == len(set(moves)) == 1968
    assert "e2e4" in moves and "g1f3" in moves and "e7e8n" in moves and "a2a1q" in moves
    assert "a1h1" in moves and "a1b3" in moves and "a1c4" not in moves


@needs_chess
@pytest.mark.parametrize(
    "kwargs", [{}, {"include_legal_moves": True}, {"mask_actions": False}], ids=str
)
def test_chess_specs(kwargs):
    check_env_specs(ChessEnv(seed=0, **kwargs))


@needs_chess
@pytest.mark.parametrize("stateful", [True, False])
def test_chess_scholars_mate(stateful):
    env = ChessEnv(stateful=stateful, include_fen=True, include_san=True)
    td = env.reset()
    assert td["turn"].item() is True and int(td["action_mask"].sum()) == 20
    for uci in ["e2e4", "e7e5", "d1h5", "b8c6", "f1c4", "g8f6"]:
        td = _move(env, td, uci)
        assert td["next", "reward"].item() == 0.0 and not td["next", "done"].item()
        td = td["next"]
    td = _move(env, td, "h5f7")["next"]
    assert td["san"] == "Qxf7#"
    assert td["reward"].item() == 1.0 and td["done"].item() and td["terminated"].item()
    assert td["turn"].item() is False
    assert not td["action_mask"].any()


@needs_chess
def test_chess_illegal_move_raises():
    env = ChessEnv()
    td = env.reset()
    with pytest.raises(ValueError, match="illegal move 'e2e5'"):
        _move(env, td, "e2e5")


@needs_chess
def test_chess_reset_from_fen_and_mate_in_one():
    fen = "rnbqkbnr/pppp1ppp/8/4p3/6P1/5P2/PPPPP2P/RNBQKBNR b KQkq - 0 2"
    env = ChessEnv(include_fen=True)
    td = env.reset(TensorDict(fen=fen))
    assert td["fen"] == fen and td["turn"].item() is False
    td = _move(env, td, "d8h4")["next"]  # fool's mate
    assert td["reward"].item() == 1.0 and td["done"].item()
    with pytest.raises(ValueError, match="invalid 'fen'"):
        env.reset(TensorDict(fen="not a position"))


@needs_chess
def test_chess_stateless_reads_position_from_tensordict():
    env = ChessEnv(stateful=False, include_pgn=True, include_san=True)
    start = env.reset()
    after_e4 = _move(env, start.clone(), "e2e4")["next"]
    # The same env object continues any game: the position comes from the input.
    after_d4 = _move(env, start.clone(), "d2d4")["next"]
    assert after_e4["san"] == "e4" and after_d4["san"] == "d4"
    assert "1. e4" in after_e4["pgn"]
    reply = _move(env, after_e4, "e7e5")["next"]
    assert "1. e4 e5" in reply["pgn"]
    with pytest.raises(ValueError, match="include_fen=True or include_pgn=True"):
        ChessEnv(stateful=False)


@needs_chess
def test_chess_legal_moves_and_mask_agree():
    env = ChessEnv(include_legal_moves=True, seed=0)
    rollout = env.rollout(30, break_when_any_done=False)
    for t in range(rollout.batch_size[0]):
        legal = rollout["legal_moves"][t]
        legal = legal[legal >= 0]
        assert torch.equal(rollout["action_mask"][t].nonzero().squeeze(-1), legal)
        assert rollout["action_mask"][t, rollout["action"][t]]


@needs_chess
def test_chess_seeding_and_unsupported_options():
    a = ChessEnv(seed=1).rollout(20, break_when_any_done=False)
    b = ChessEnv(seed=1).rollout(20, break_when_any_done=False)
    assert torch.equal(a["action"], b["action"])
    with pytest.raises(NotImplementedError, match="pixels"):
        ChessEnv(pixels=True)
    with pytest.raises(ValueError, match="include_hash=True"):
        ChessEnv(include_hash=True)


@needs_chess
def test_chess_hashes_identify_positions():
    env = ChessEnv(include_fen=True, include_san=True, include_hash=True, seed=0)
    td = env.reset()
    start_hash = td["fen_hash"]
    assert env.observation_spec["fen_hash"].is_in(start_hash)
    assert start_hash.shape == torch.Size([4]) and start_hash.dtype == torch.int64
    # Knights out and back: the same position (up to the move counters) ...
    for uci in ["g1f3", "g8f6", "f3g1", "f6g8"]:
        td = _move(env, td, uci)["next"]
    assert td["fen"].split(" ")[:4] == env.reset()["fen"].split(" ")[:4]
    # ... and the same hash for the same string, a different one otherwise.
    assert torch.equal(env.reset()["fen_hash"], start_hash)
    assert not torch.equal(td["fen_hash"], start_hash)  # the move counters differ
    # SerialEnv stacks the strings; ParallelEnv moves tensors only and names the entry.
    serial = SerialEnv(2, lambda: ChessEnv(include_hash=True, include_san=True, seed=0))
    out = serial.reset()
    assert len(out["san"]) == 2 and out["san_hash"].shape == (2, 4)
    serial.close()
    with pytest.raises(NotImplementedError, match="non-tensor.*ExcludeTransform"):
        ParallelEnv(2, lambda: ChessEnv(include_hash=True, include_san=True, seed=0))


@needs_chess
def test_chess_serial_env():
    env = SerialEnv(2, lambda: ChessEnv(seed=0))
    rollout = env.rollout(10, policy=RandomPolicy(env.action_spec), break_when_any_done=False)
    assert rollout.batch_size == torch.Size([2, 10])
    assert rollout["action_mask"].gather(-1, rollout["action"].unsqueeze(-1)).all()


def test_chess_missing_package_names_the_extra(monkeypatch):
    import torchrl.envs.custom.chess as chess_module

    monkeypatch.setattr(chess_module, "_has_chess", False)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[chess\]"'):
        ChessEnv()


# ----------------------------------------------------------------------------------------- mujoco
_MUJOCO_ENVS = {
    HopperEnv: (11, 3, "Hopper-v5"),
    Walker2dEnv: (17, 6, "Walker2d-v5"),
    AntEnv: (27, 8, "Ant-v4"),
    HumanoidEnv: (348, 17, "Humanoid-v5"),
}


@needs_mujoco
@pytest.mark.parametrize("cls", list(_MUJOCO_ENVS), ids=lambda c: c.__name__)
@pytest.mark.parametrize("num_envs", [None, 3])
def test_mujoco_specs_and_shapes(cls, num_envs):
    env = cls(num_envs=num_envs, seed=0)
    check_env_specs(env)
    obs_dim, nu, _ = _MUJOCO_ENVS[cls]
    batch = () if num_envs is None else (num_envs,)
    assert env.batch_size == torch.Size(batch)
    assert env.observation_spec["observation"].shape == torch.Size([*batch, obs_dim])
    assert env.action_spec.shape == torch.Size([*batch, nu])
    assert isinstance(env, MujocoEnv)


@needs_mujoco
@pytest.mark.filterwarnings("ignore:.*Ant-v4 is out of date")
@pytest.mark.parametrize("cls", list(_MUJOCO_ENVS), ids=lambda c: c.__name__)
def test_mujoco_matches_gymnasium_step(cls):
    import gymnasium as gym

    gym_env = gym.make(_MUJOCO_ENVS[cls][2]).unwrapped
    gym_env.reset(seed=0)
    env = cls(seed=0)
    td = env.reset()
    gym_env.set_state(env.data[0].qpos.copy(), env.data[0].qvel.copy())
    action = np.random.default_rng(0).uniform(-0.4, 0.4, env.model.nu).astype(np.float32)
    td["action"] = torch.as_tensor(action)
    nxt = env.step(td)["next"]
    obs, reward, terminated, _, _ = gym_env.step(action)
    np.testing.assert_allclose(nxt["observation"].numpy(), obs, rtol=1e-4, atol=1e-4)
    assert nxt["reward"].item() == pytest.approx(reward, rel=1e-4, abs=1e-4)
    assert nxt["terminated"].item() == terminated


@needs_mujoco
def test_mujoco_reward_sign_follows_forward_motion():
    env = HopperEnv(seed=0, reset_noise_scale=0.0)
    td = env.reset()
    # Push the hopper forward / backward through its initial velocity (the root slider).
    for sign in (1.0, -1.0):
        env.reset()
        env.data[0].qvel[0] = sign * 2.0
        td["action"] = torch.zeros(3)
        reward = env.step(td)["next", "reward"].item()
        forward = reward - env.HEALTHY_REWARD
        assert np.sign(forward) == sign


@needs_mujoco
def test_mujoco_termination_when_unhealthy():
    env = HopperEnv(seed=0)
    td = env.reset()
    env.data[0].qpos[1] = 0.5  # torso below the healthy height
    td["action"] = torch.zeros(3)
    nxt = env.step(td)["next"]
    assert nxt["terminated"].item() and nxt["done"].item()
    # No healthy reward once unhealthy.
    assert nxt["reward"].item() < 0.5
    env = HopperEnv(seed=0, terminate_when_unhealthy=False)
    td = env.reset()
    env.data[0].qpos[1] = 0.5
    td["action"] = torch.zeros(3)
    assert not env.step(td)["next", "terminated"].item()
    # Random actions eventually make a hopper fall.
    rollout = HopperEnv(seed=0).rollout(500)
    assert rollout["next", "terminated"][-1].item()


@needs_mujoco
def test_mujoco_partial_reset_keeps_other_sims():
    env = Walker2dEnv(num_envs=2, seed=0)
    td = env.reset()
    td = env.rand_step(td)
    state = env.get_state()
    nxt = td["next"].clone()
    nxt["_reset"] = torch.tensor([[True], [False]])
    out = env.reset(nxt)
    after = env.get_state()
    assert torch.equal(after["qpos"][1], state["qpos"][1])
    assert not torch.equal(after["qpos"][0], state["qpos"][0])
    assert torch.equal(out["observation"][1], nxt["observation"][1])


@needs_mujoco
def test_mujoco_seeding():
    a = AntEnv(num_envs=2, seed=5).reset()["observation"]
    b = AntEnv(num_envs=2, seed=5).reset()["observation"]
    c = AntEnv(num_envs=2, seed=6).reset()["observation"]
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert not torch.equal(a[0], a[1])  # each sim gets its own noise


@needs_mujoco
def test_mujoco_serial_env():
    env = SerialEnv(2, lambda: HopperEnv(seed=0))
    rollout = env.rollout(5, break_when_any_done=False)
    assert rollout["observation"].shape == torch.Size([2, 5, 11])


@needs_mujoco
def test_mujoco_bad_arguments():
    with pytest.raises(ValueError, match="backend 'mjx' is not available"):
        HopperEnv(backend="mjx")
    with pytest.raises(ValueError, match="num_envs or batch_size"):
        HopperEnv(num_envs=2, batch_size=[2])
    with pytest.raises(ValueError, match=r"batch_size must be \[\] or \[n\]"):
        HopperEnv(batch_size=[2, 2])
    assert HopperEnv(batch_size=[2]).batch_size == torch.Size([2])


def test_mujoco_missing_package_names_the_extra(monkeypatch):
    import torchrl.envs.custom.mujoco._scene as scene

    monkeypatch.setattr(scene, "_has_mujoco", False)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[mujoco\]"'):
        HopperEnv()


def test_custom_envs_documented_paths():
    from torchrl.envs.custom import chess, mujoco, tictactoeenv
    from torchrl.envs.custom.mujoco import ant, base, hopper, humanoid, walker2d

    assert chess.ChessEnv is ChessEnv and tictactoeenv.TicTacToeEnv is TicTacToeEnv
    assert mujoco.MujocoEnv is base.MujocoEnv is MujocoEnv
    assert (ant.AntEnv, hopper.HopperEnv, humanoid.HumanoidEnv, walker2d.Walker2dEnv) == (
        AntEnv,
        HopperEnv,
        HumanoidEnv,
        Walker2dEnv,
    )
    assert os.path.basename(chess.__file__) == "chess.py"
