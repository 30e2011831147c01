"""Tests of the OpenSpiel wrappers (skipped when open_spiel is not installed, but for one)."""

import sys

import pytest
import torch
from tensordict import TensorDict

from torchrl.envs import MarlGroupMapType, ParallelEnv, SerialEnv, check_env_specs
from torchrl.envs.libs.openspiel import OpenSpielEnv, OpenSpielWrapper
from torchrl.envs.utils import step_mdp


def test_missing_open_spiel_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspiel", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[open_spiel\]"'):
        OpenSpielEnv("tic_tac_toe")


pyspiel = pytest.importorskip("pyspiel")


def _play(env, moves):
    """Plays ``moves`` (action indices of the player to move) and returns the last transition."""
    td = env.reset()
    out = None
    for move in moves:
        player = int(td["current_player"])
        action = torch.zeros(2, dtype=torch.int64)
        action[player] = move
        td["agents", "action"] = action
        out = env.step(td)
        td = step_mdp(out)
    return out


def test_tic_tac_toe_layout_and_specs():
    env = OpenSpielEnv("tic_tac_toe")
    check_env_specs(env)
    assert env.group_map == {"agents": ["player_0", "player_1"]}
    spec = env.full_action_spec["agents", "action"]
    assert spec.shape == (2, 9)  # one-hot by default, as TorchRL documents
    td = env.reset()
    assert td["agents", "observation"].shape == (2, 3, 3, 3)
    assert td["agents", "observation"].dtype == torch.float32
    assert td["agents", "mask"].tolist() == [True, False]
    assert td["agents", "action_mask"].all()  # all moves legal; player_1 does not act: all True
    assert td["current_player"].tolist() == [0]
    assert not td["done"].any() and not td["agents", "done"].any()


def test_turns_masks_and_terminal_rewards():
    env = OpenSpielEnv("tic_tac_toe", categorical_actions=True)
    # player_0 plays 0, 1, 2 (top row) while player_1 plays 3, 4
    first = _play(env, [0])
    nxt = first["next"]
    assert nxt["current_player"].tolist() == [1]
    assert nxt["agents", "mask"].tolist() == [False, True]
    assert nxt["agents", "action_mask"][1].tolist() == [False] + [True] * 8
    assert nxt["agents", "action_mask"][0].all()
    assert nxt["agents", "reward"].tolist() == [[0.0], [0.0]]
    last = _play(env, [0, 3, 1, 4, 2])["next"]
    assert last["done"].tolist() == [True] and last["terminated"].tolist() == [True]
    assert last["truncated"].tolist() == [False]
    assert last["agents", "done"].all()
    assert last["agents", "reward"].squeeze(-1).tolist() == [1.0, -1.0]
    assert last["current_player"].tolist() == [-4]
    assert not last["agents", "mask"].any()


def test_illegal_move_is_refused_naming_the_entry():
    env = OpenSpielEnv("tic_tac_toe", categorical_actions=True)
    td = step_mdp(_play(env, [4]))
    td["agents", "action"] = torch.tensor([0, 4])  # player_1 on the taken centre
    with pytest.raises(ValueError, match=r"action 4 of player_1 .*'agents', 'action'.*legal"):
        env.step(td)


def test_step_after_the_end_raises():
    env = OpenSpielEnv("tic_tac_toe", categorical_actions=True)
    td = step_mdp(_play(env, [0, 3, 1, 4, 2]))
    with pytest.raises(RuntimeError, match="game is over"):
        env.step(td)


def test_one_group_per_agent_and_bad_group_map():
    env = OpenSpielEnv(
        "tic_tac_toe", group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT, categorical_actions=True
    )
    check_env_specs(env)
    td = env.reset()
    assert td["player_0", "observation"].shape == (1, 3, 3, 3)
    assert td["player_1", "mask"].tolist() == [False]
    with pytest.raises(ValueError, match="leaves out the agents"):
        OpenSpielEnv("tic_tac_toe", group_map={"x": ["player_0"]})


def test_chance_nodes_are_resolved_and_seeded():
    env = OpenSpielEnv("kuhn_poker", categorical_actions=True)
    check_env_specs(env)

    def cards(seed):
        env.set_seed(seed)
        out = []
        for _ in range(6):
            td = env.reset()
            assert td["current_player"].item() >= 0  # the deal happened inside the env
            out.append(td["agents", "observation"].clone())
        return torch.stack(out)

    first, again = cards(3), cards(3)
    assert torch.equal(first, again)
    assert not torch.equal(first, cards(4))
    # rewards of a finished hand sum to zero (a zero-sum game)
    env.set_seed(0)
    rollout = env.rollout(10)
    assert rollout["next", "done"][-1].all()
    assert rollout["next", "agents", "reward"][-1].sum().abs() < 1e-6


def test_simultaneous_game_applies_every_action():
    env = OpenSpielEnv("matrix_rps", categorical_actions=True)
    check_env_specs(env)
    td = env.reset()
    assert td["current_player"].tolist() == [-2]
    assert td["agents", "mask"].tolist() == [True, True]
    td["agents", "action"] = torch.tensor([1, 0])  # paper beats rock
    out = env.step(td)["next"]
    assert out["done"].all()
    assert out["agents", "reward"].squeeze(-1).tolist() == [1.0, -1.0]


def test_return_state_and_reset_to_a_state():
    env = OpenSpielEnv("tic_tac_toe", categorical_actions=True, return_state=True)
    # (check_env_specs does not see NonTensor entries of a rollout yet: checked by hand)
    rollout = env.rollout(3)
    assert [len(s) for s in rollout["next", "state"].tolist()] == [2, 4, 6]  # "m\n" per move
    after = _play(env, [4, 0])["next"]
    saved = after["state"]
    assert isinstance(saved, str)
    td = env.reset()
    assert td["agents", "observation"][:, 0].sum() == 18  # an empty board for both players
    restored = env.reset(TensorDict({"state": saved}, batch_size=[]))
    assert torch.equal(restored["agents", "observation"], after["agents", "observation"])
    assert restored["current_player"].tolist() == [0]
    with pytest.raises(ValueError, match="not a serialized state"):
        env.reset(TensorDict({"state": "garbage\n99"}, batch_size=[]))


def test_wrapper_of_a_state_restarts_from_it():
    game = pyspiel.load_game("tic_tac_toe")
    state = game.new_initial_state()
    state.apply_action(4)
    env = OpenSpielWrapper(state, categorical_actions=True)
    for _ in range(2):
        td = env.reset()
        assert td["current_player"].tolist() == [1]
        assert td["agents", "action_mask"][1, 4].item() is False
        env.rollout(3)


def test_bad_arguments():
    with pytest.raises(TypeError, match="pyspiel.Game or pyspiel.State"):
        OpenSpielWrapper("tic_tac_toe")
    with pytest.raises(ValueError, match="batch_size must be"):
        OpenSpielEnv("tic_tac_toe", batch_size=[2])
    with pytest.raises(ValueError, match="cannot load the game 'no_such_game'"):
        OpenSpielEnv("no_such_game")
    # crossword declares an observation tensor that it does not implement
    with pytest.raises(ValueError, match="'crossword' implements neither"):
        OpenSpielEnv("crossword")
    assert "kuhn_poker" in OpenSpielEnv.available_envs


def test_one_hot_rand_action_is_legal():
    env = OpenSpielEnv("tic_tac_toe")
    env.set_seed(0)
    for _ in range(3):
        rollout = env.rollout(20)  # an illegal random move would raise
        assert rollout["next", "done"][-1].all()


def _masked_random_policy(td):
    mask = td["agents", "action_mask"]
    noise = torch.rand(mask.shape).masked_fill(~mask, -1.0)
    td["agents", "action"] = noise.argmax(-1)
    return td


def test_serial_env_partial_reset():
    env = SerialEnv(2, lambda: OpenSpielEnv("tic_tac_toe", categorical_actions=True))
    env.set_seed(0)
    td = env.reset()
    # sub-env 0 plays a won game (top row); sub-env 1 plays its lowest legal move, which
    # wins for nobody within five moves: only sub-env 0 is reset
    for move in [0, 3, 1, 4, 2]:
        player = td["current_player"].squeeze(-1)
        action = torch.zeros(2, 2, dtype=torch.int64)
        action[0, player[0]] = move
        action[1, player[1]] = td["agents", "action_mask"][1, player[1]].nonzero()[0, 0]
        td["agents", "action"] = action
        out, td = env.step_and_maybe_reset(td)
    assert not out["next", "done"][1].any()
    assert out["next", "done"][0].all()
    assert td["agents", "observation"][0].sum() == 18  # a fresh board for both players
    assert (
        td["agents", "observation"][1].sum() == 18
        and td["agents", "observation"][1, :, 0].sum() < 18
    )
    assert not td["done"].any()
    check_env_specs(env)


def test_parallel_env_and_collector():
    from torchrl.collectors import SyncDataCollector

    env = ParallelEnv(2, lambda: OpenSpielEnv("tic_tac_toe", categorical_actions=True))
    try:
        env.set_seed(1)
        collector = SyncDataCollector(
            env, _masked_random_policy, frames_per_batch=20, total_frames=40
        )
        batches = list(collector)
        collector.shutdown()
    finally:
        if not env.is_closed:
            env.close()
    assert len(batches) == 2
    batch = batches[0]
    assert batch["next", "agents", "reward"].shape == (2, 10, 2, 1)
    done = batch["next", "done"].squeeze(-1)
    rewards = batch["next", "agents", "reward"].squeeze(-1)
    # rewards only arrive when a game ends, and then they sum to zero
    assert (rewards[~done] == 0).all()
    assert rewards.sum(-1).abs().max() < 1e-6


# ------------------------------------------------------------------ examples/openspiel_tictactoe.py
EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples"


def _example(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import openspiel_tictactoe

    return openspiel_tictactoe


def test_example_smoke(monkeypatch, tmp_path, capsys):
    import runpy

    args = ["--frames", "512", "--num-envs", "4", "--steps-per-env", "32", "--eval-every", "256"]
    args += ["--eval-games", "4", "--out", str(tmp_path), "--no-progress"]
    monkeypatch.setattr(sys, "argv", ["openspiel_tictactoe.py", *args])
    monkeypatch.syspath_prepend(str(EXAMPLES))
    runpy.run_path(str(EXAMPLES / "openspiel_tictactoe.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "learner (greedy) in seat0 vs random, 4 games: win" in out
    assert "random player in seat1 vs random" in out


def test_example_learner_moves_and_returns(monkeypatch):
    example = _example(monkeypatch)
    env = example.make_env(2)
    env.set_seed(0)
    seats = torch.tensor([0, 1])
    torch.manual_seed(0)
    batch = env.rollout(20, example.VersusRandom(None, seats), break_when_any_done=False)
    data = example.learner_moves(batch, seats, gamma=0.5)
    # every kept move is the learner's, legal, and its return is the game's result discounted
    # once per learner move after it
    assert data["legal"].gather(-1, data["action"][:, None]).all()
    assert set(data["return"].abs().unique().tolist()) <= {0.0, 1.0, 0.5, 0.25, 0.125, 0.0625}
    assert data["results"].numel() >= 2
    view = example.own_view(batch["agents", "observation"][1, 0, 1], torch.tensor(1))
    board = batch["agents", "observation"][1, 0, 1]
    assert torch.equal(view.reshape(3, 3, 3)[1], board[2])  # seat 1: "mine" are the noughts


@pytest.mark.slow
def test_example_beats_random(monkeypatch):
    example = _example(monkeypatch)
    torch.set_num_threads(1)
    cfg = example.Config(frames=102_400, eval_every=10**9, eval_games=300, seed=1, progress=False)
    history = example.train(cfg)
    final, rand = history["final"], history["random"]
    # random vs random: seat 0 wins ~0.59 / loses ~0.29, seat 1 wins ~0.29 / loses ~0.59
    assert final["seat0"]["win"] >= 0.85 and final["seat0"]["loss"] <= 0.1, final
    assert final["seat1"]["win"] >= 0.5 and final["seat1"]["loss"] <= 0.3, final
    for seat in ("seat0", "seat1"):
        assert (
            final[seat]["win"] - final[seat]["loss"] >= rand[seat]["win"] - rand[seat]["loss"] + 0.4
        )
