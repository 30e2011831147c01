"""MCTS: the child scores against hand-computed values, and the search policies playing
tic-tac-toe (winning moves, blocks, games against a random player) and a small chain env."""

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from torchrl.data import Categorical, Composite, OneHot, Unbounded
from torchrl.envs import EnvBase, PendulumEnv, TicTacToeEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules.mcts import (
    AlphaGoPolicy,
    AlphaStarPolicy,
    EXP3Score,
    MCTSPolicy,
    MCTSPolicyBase,
    MCTSScore,
    MCTSScores,
    MuZeroPolicy,
    PUCTScore,
    UCB1TunedScore,
    UCBScore,
)

# ------------------------------------------------------------------------------------ scores


def test_ucb_score_matches_formula():
    node = TensorDict(
        win_count=torch.tensor([2.0, 1.0, 0.0]),
        visits=torch.tensor([4.0, 1.0, 0.0]),
        total_visits=torch.tensor(5.0),
    )
    out = UCBScore(c=2.0)(node)
    assert out is node
    root5 = math.sqrt(5.0)
    expected = torch.tensor([0.5 + 2 * root5 / 5, 1.0 + 2 * root5 / 2, 0.0 + 2 * root5 / 1])
    torch.testing.assert_close(out["score"], expected)


def test_ucb_score_batched_nodes_and_custom_keys():
    # Two nodes, parent visits given per node ([2]), renamed keys.
    node = TensorDict(
        {
            ("stats", "w"): torch.tensor([[1.0, 0.0], [3.0, 1.0]]),
            ("stats", "n"): torch.tensor([[1.0, 0.0], [3.0, 1.0]]),
            "N": torch.tensor([1.0, 4.0]),
        },
        batch_size=[2],
    )
    score = UCBScore(
        c=1.0,
        win_count_key=("stats", "w"),
        visits_key=("stats", "n"),
        total_visits_key="N",
        score_key="s",
    )
    assert score.in_keys == [("stats", "w"), ("stats", "n"), "N"]
    assert score.out_keys == ["s"]
    expected = torch.tensor([[1.0 + 1 / 2, 0.0 + 1.0], [1.0 + 2 / 4, 1.0 + 2 / 2]])
    torch.testing.assert_close(score(node)["s"], expected)


def test_puct_score_matches_formula():
    node = TensorDict(
        win_count=torch.tensor([3.0, -1.0, 0.0]),
        visits=torch.tensor([3.0, 1.0, 0.0]),
        total_visits=torch.tensor(9.0),
        prior_prob=torch.tensor([0.5, 0.2, 0.3]),
    )
    scores = PUCTScore(c=1.5)(node)["score"]
    expected = torch.tensor(
        [1.0 + 1.5 * 0.5 * 3 / 4, -1.0 + 1.5 * 0.2 * 3 / 2, 0.0 + 1.5 * 0.3 * 3 / 1]
    )
    torch.testing.assert_close(scores, expected)
    assert PUCTScore().c == 1.0


def test_ucb1_tuned_score_matches_formula():
    n, big_n = torch.tensor([2.0, 5.0, 0.0]), 7.0
    w = torch.tensor([1.0, 4.0, 0.0])
    sq = torch.tensor([1.0, 4.0, 0.0])
    node = TensorDict(
        win_count=w, visits=n, total_visits=torch.tensor(big_n), sum_squared_rewards=sq
    )
    scores = UCB1TunedScore(exploration_constant=2.0)(node)["score"]
    expected = []
    for i in range(2):
        mean = float(w[i] / n[i])
        var = float(sq[i] / n[i]) - mean**2 + math.sqrt(2.0 * math.log(big_n) / float(n[i]))
        expected.append(mean + math.sqrt(math.log(big_n) / float(n[i]) * min(0.25, var)))
    torch.testing.assert_close(scores[:2], torch.tensor(expected))
    assert scores[2] == math.inf  # never visited: tried first


def test_exp3_score_probabilities_and_update():
    score = EXP3Score(gamma=0.2)
    node = TensorDict(weights=torch.tensor([1.0, 1.0, 2.0]))
    probs = score(node)["score"]
    expected = 0.8 * torch.tensor([0.25, 0.25, 0.5]) + 0.2 / 3
    torch.testing.assert_close(probs, expected)
    torch.testing.assert_close(node["action_prob"], expected)
    torch.testing.assert_close(probs.sum(), torch.tensor(1.0))
    # num_actions overrides K
    node["num_actions"] = torch.tensor(4.0)
    torch.testing.assert_close(
        score(node)["score"], 0.8 * torch.tensor([0.25, 0.25, 0.5]) + 0.2 / 4
    )
    del node["num_actions"]
    # update: w_a *= exp(gamma * r / p_a / K), then weights / max
    p0 = float(expected[0])
    factor = math.exp(0.2 * (1.0 / p0) / 3)
    score.update_weights(node, action=0, reward=1.0)
    raw = torch.tensor([factor, 1.0, 2.0])
    torch.testing.assert_close(node["weights"], raw / raw.max())
    assert EXP3Score.probabilistic and not UCBScore.probabilistic
    with pytest.raises(ValueError, match="gamma"):
        EXP3Score(gamma=1.5)


def test_mcts_scores_enum_builds_scores():
    assert isinstance(MCTSScores.PUCT(c=3.0), PUCTScore)
    assert MCTSScores.PUCT(c=3.0).c == 3.0
    assert isinstance(MCTSScores.UCB(), UCBScore)
    assert isinstance(MCTSScores.UCB1_TUNED(), UCB1TunedScore)
    assert isinstance(MCTSScores.EXP3(gamma=0.3), EXP3Score)
    assert MCTSScores("ucb1_tuned") is MCTSScores.UCB1_TUNED
    assert MCTSScores.EXP3.score_class is EXP3Score
    assert [m.name for m in MCTSScores] == ["PUCT", "UCB", "UCB1_TUNED", "EXP3"]


def test_mcts_score_base_is_abstract():
    with pytest.raises(NotImplementedError):
        MCTSScore()(TensorDict())


# ------------------------------------------------------------------------- tic-tac-toe helpers


def _position(env, cells):
    """The state after playing ``cells`` in turn (player0 first)."""
    td = env.reset()
    for cell in cells:
        td["action"] = torch.tensor([cell])
        td = env.step(td)["next"]
    return td


def _mcts(env, **kwargs):
    kwargs.setdefault("num_simulations", 200)
    kwargs.setdefault("num_rollouts", 4)
    kwargs.setdefault("seed", 0)
    return MCTSPolicy(env, turn_key="turn", **kwargs)


# ------------------------------------------------------------------------------ MCTSPolicy


@pytest.mark.parametrize(
    "cells, winning",
    [
        ((0, 3, 1, 4), 2),  # player0 to move, completes the top row
        ((0, 3, 8, 4, 1), 5),  # player1 to move, completes the middle row
    ],
)
def test_mcts_finds_the_winning_move(cells, winning):
    env = TicTacToeEnv(seed=0)
    td = _position(env, cells)
    out = _mcts(env)(td)
    assert out["action"].tolist() == [winning]
    assert out["search_policy"].argmax().item() == winning
    torch.testing.assert_close(out["search_policy"].sum(), torch.tensor(1.0))


def test_mcts_blocks_the_opponent():
    env = TicTacToeEnv(seed=0)
    # player0: 0, 1 (threatens 2); player1: 4; player1 to move must block at 2
    td = _position(env, (0, 4, 1))
    assert _mcts(env)(td)["action"].tolist() == [2]
    # player1 threatens the diagonal 2-4-6; player0 must block at 6
    td = _position(env, (0, 4, 1, 2))
    assert _mcts(env)(td)["action"].tolist() == [6]


def test_mcts_search_statistics():
    env = TicTacToeEnv(seed=0)
    td = _position(env, (0, 3, 1, 4))
    policy = _mcts(env, num_simulations=64, simulation_batch_size=1)
    stats = policy.search(td)
    legal = td["mask"]
    assert stats["legal"].tolist() == legal.tolist()
    # 64 simulations, plus the visit every game-ending move gets when its node opens (cell 2)
    assert stats["visits"].sum() == 64 + 1
    assert (stats["visits"][~legal] == 0).all()
    assert (stats["prior_prob"][legal] == 1 / legal.sum()).all()
    # Playing cell 2 always wins: its mean return is exactly 1.
    assert stats["win_count"][2] == stats["visits"][2]
    assert "score" in stats.keys()
    with pytest.raises(ValueError, match="one state"):
        policy.search(td.unsqueeze(0))


def test_mcts_batched_input_and_other_scores():
    env = TicTacToeEnv(batch_size=[2], seed=0)
    single = TicTacToeEnv(seed=0)
    # Each position has one winning move, and every other move loses.
    td = torch.stack([_position(single, (0, 3, 1, 4)), _position(single, (0, 4, 8, 3, 2))])
    for score in (UCB1TunedScore(), EXP3Score(gamma=0.1), PUCTScore(c=2.0)):
        out = _mcts(env, score=score, num_simulations=150)(td.clone())
        assert out["action"].shape == (2, 1)
        assert out["action"].squeeze(-1).tolist() == [2, 5], type(score).__name__
        assert out["search_policy"].shape == (2, 9)


def test_mcts_never_loses_against_a_random_player():
    env = TicTacToeEnv(seed=1)
    policy = _mcts(env, num_simulations=40, num_rollouts=4, simulation_batch_size=4)
    results = []
    for game in range(20):
        me = game % 2  # alternate who starts
        td = env.reset()
        while True:
            td = policy(td) if int(td["turn"]) == me else env.rand_action(td)
            nxt = env.step(td)["next"]
            if nxt["done"].item():
                results.append(nxt[("player0", "player1")[me], "reward"].item())
                break
            td = nxt
    assert min(results) >= 0, results
    assert sum(r > 0 for r in results) >= 15, results


def test_mcts_self_play_through_env_rollout():
    env = TicTacToeEnv(seed=0)
    policy = _mcts(env, num_simulations=40, simulation_batch_size=4)
    rollout = env.rollout(9, policy)
    steps = rollout.batch_size[0]
    assert rollout["next", "done"][-1].item()
    played = rollout["action"].squeeze(-1)
    assert rollout["mask"].gather(-1, played.unsqueeze(-1)).all()  # every move was legal
    assert rollout["search_policy"].shape == (steps, 9)
    # Both sides play well enough not to lose: a draw on a full board.
    assert steps == 9
    assert rollout["next", "player0", "reward"][-1].item() == 0


def test_mcts_temperature_samples_visited_legal_moves():
    env = TicTacToeEnv(seed=0)
    td = _position(env, (0, 4))
    policy = _mcts(env, num_simulations=16, temperature=1.0, search_policy_key=None)
    for _ in range(3):
        out = policy(td.clone())
        assert td["mask"][out["action"]].item()
        assert "search_policy" not in out.keys()


class ChainEnv(EnvBase):
    """One player. Action 0 stops with reward 0.5; action 1 walks right; a third step pays 1.

    From position 0: stopping pays 0.5 now, walking twice then stopping pays 1.
    """

    def __init__(self):
        super().__init__(batch_size=[])
        self.batch_locked = False
        self.observation_spec = Composite(position=Unbounded(shape=(1,)))
        self.action_spec = OneHot(2)
        self.reward_spec = Unbounded(shape=(1,))

    def _reset(self, tensordict, **kwargs):
        batch = tensordict.batch_size if tensordict is not None else self.batch_size
        return TensorDict(position=torch.zeros(*batch, 1), batch_size=batch)

    def _step(self, tensordict):
        position = tensordict["position"]
        walk = tensordict["action"][..., 1:].bool()
        at_end = position >= 2
        reward = torch.where(walk, 0.0, torch.where(at_end, 1.0, 0.5))
        return TensorDict(
            position=position + walk.float(),
            reward=reward,
            terminated=~walk | (position >= 4),
            batch_size=tensordict.batch_size,
        )

    def _set_seed(self, seed):
        torch.manual_seed(seed)


def test_mcts_single_player_one_hot_env_plans_ahead():
    env = ChainEnv()
    policy = MCTSPolicy(env, num_simulations=100, num_rollouts=2, seed=0)
    assert policy.num_players == 1
    out = policy(env.reset())
    assert out["action"].tolist() == [False, True] or out["action"].tolist() == [0, 1]
    # Heavy discounting makes the immediate 0.5 better than a 1 two steps later.
    greedy = MCTSPolicy(env, num_simulations=100, num_rollouts=2, gamma=0.3, seed=0)
    assert greedy(env.reset())["action"].long().argmax().item() == 0


def test_mcts_policy_errors():
    locked = ChainEnv()
    locked.batch_locked = True
    with pytest.raises(ValueError, match="batch_locked"):
        MCTSPolicy(locked)
    with pytest.raises(TypeError, match="Categorical or OneHot"):
        MCTSPolicy(PendulumEnv())
    env = TicTacToeEnv()
    with pytest.raises(ValueError, match="num_simulations"):
        MCTSPolicy(env, num_simulations=0)
    with pytest.raises(ValueError, match="num_rollouts"):
        MCTSPolicy(env, num_rollouts=0)
    with pytest.raises(ValueError, match="temperature"):
        MCTSPolicy(env, temperature=-1.0)
    full = _position(env, (0, 1, 2, 4, 3, 5, 7, 6))  # one empty cell left: 8
    full["mask"] = torch.zeros(9, dtype=torch.bool)
    with pytest.raises(ValueError, match="no legal action"):
        _mcts(env, num_simulations=2)(full)


def test_mcts_policy_base_requires_hooks():
    base = MCTSPolicyBase(action_spec=Categorical(3))
    assert base.num_actions == 3
    torch.testing.assert_close(base.format_actions(torch.tensor([2, 0])), torch.tensor([2, 0]))
    with pytest.raises(NotImplementedError):
        base.search(TensorDict())
    with pytest.raises(TypeError, match="Categorical or OneHot"):
        MCTSPolicyBase(action_spec=Unbounded(shape=(2,)))


# ------------------------------------------------------------------- AlphaGo / AlphaStar


def _constant_logits(cell=None):
    def logits(board):
        out = torch.zeros(*board.shape[:-2], 9)
        if cell is not None:
            out[..., cell] = 5.0
        return out

    return TensorDictModule(logits, in_keys=["board"], out_keys=["logits"])


def _zero_value():
    return TensorDictModule(
        lambda board: torch.zeros(*board.shape[:-2], 1), in_keys=["board"], out_keys=["state_value"]
    )


def test_alphago_prior_guides_the_first_simulation():
    env = TicTacToeEnv(seed=0)
    td = env.reset()
    # One simulation, one child visited: the prior's favourite.
    policy = AlphaGoPolicy(
        env, _constant_logits(7), num_simulations=1, simulation_batch_size=1, turn_key="turn"
    )
    out = policy(td)
    assert out["action"].tolist() == [7]
    stats = policy.search(td)
    torch.testing.assert_close(stats["prior_prob"].sum(), torch.tensor(1.0))
    assert stats["prior_prob"].argmax().item() == 7


def test_alphago_value_network_only_finds_win_and_block():
    env = TicTacToeEnv(seed=0)
    # lmbda=0: no rollouts (AlphaZero); the zero value network leaves the terminal rewards.
    policy = AlphaGoPolicy(
        env,
        _constant_logits(),
        _zero_value(),
        lmbda=0.0,
        num_simulations=200,
        turn_key="turn",
        seed=0,
    )
    assert policy(_position(env, (0, 3, 1, 4)))["action"].tolist() == [2]
    assert policy(_position(env, (0, 4, 1)))["action"].tolist() == [2]
    with pytest.raises(ValueError, match="lmbda"):
        AlphaGoPolicy(env, _constant_logits(), lmbda=2.0)


def test_alphago_value_network_perspective():
    # A value network that knows "player to move loses when the opponent owns the centre":
    # values come from the mover's side, and the search must prefer taking the centre.
    env = TicTacToeEnv(seed=0)

    def value(board, turn):
        centre = board.reshape(*board.shape[:-2], 9)[..., 4].long()
        mover_mark = turn.long() + 1
        opponent_has_centre = (centre != 0) & (centre != mover_mark.squeeze(-1))
        return torch.where(opponent_has_centre, -1.0, 0.0).unsqueeze(-1)

    net = TensorDictModule(value, in_keys=["board", "turn"], out_keys=["state_value"])
    policy = AlphaGoPolicy(
        env, _constant_logits(), net, lmbda=0.0, num_simulations=60, turn_key="turn", seed=0
    )
    assert policy(env.reset())["action"].tolist() == [4]


def test_alphastar_samples_legal_moves_and_wins_greedily():
    env = TicTacToeEnv(seed=0)
    net = _constant_logits()
    td = _position(env, (0, 4))
    policy = AlphaStarPolicy(env, net, num_simulations=24, turn_key="turn", seed=0)
    assert policy.temperature == 1.0 and policy.exploration_fraction == 0.25
    for _ in range(3):
        assert td["mask"][policy(td.clone())["action"]].item()
    # Root noise moves the priors away from the network's uniform ones.
    stats = policy.search(td)
    assert not torch.allclose(stats["prior_prob"][td["mask"]], torch.full((7,), 1 / 7))
    torch.testing.assert_close(stats["prior_prob"].sum(), torch.tensor(1.0))
    greedy = AlphaStarPolicy(
        env,
        net,
        num_simulations=200,
        num_rollouts=4,
        temperature=0.0,
        exploration_fraction=0.0,
        turn_key="turn",
        seed=0,
    )
    assert greedy(_position(env, (0, 3, 1, 4)))["action"].tolist() == [2]


def test_deterministic_exploration_type_plays_greedily_without_noise():
    env = TicTacToeEnv(seed=0)
    td = _position(env, (0, 4))
    policy = AlphaStarPolicy(env, _constant_logits(), num_simulations=24, turn_key="turn", seed=0)
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        stats = policy.search(td)
        # no root noise: the network's uniform priors over the 7 free cells
        torch.testing.assert_close(stats["prior_prob"][td["mask"]], torch.full((7,), 1 / 7))
        for _ in range(3):
            out = policy(td.clone())
            # temperature 1 is ignored: the move is the most visited child of the search
            visited = out["search_policy"]
            assert visited[out["action"]].item() == visited.max().item()


# ---------------------------------------------------------------------------------- MuZero


def _tictactoe_model(one_hot=False):
    """The true tic-tac-toe rules as MuZero's three networks (the latent is the board)."""

    def represent(board):
        return board.reshape(*board.shape[:-2], 9).float()

    def dynamics(latent, action):
        cell = action.long().argmax(-1) if one_hot else action.reshape(latent.shape[:-1])
        turn = (latent != 0).sum(-1) % 2  # player0 moved on even counts
        mark = (turn + 1).float()
        free = latent.gather(-1, cell.unsqueeze(-1)).squeeze(-1) == 0
        nxt = latent.scatter(-1, cell.unsqueeze(-1), mark.unsqueeze(-1))
        nxt = torch.where(free.unsqueeze(-1), nxt, latent)
        lines = torch.tensor([[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8]])
        lines = torch.cat([lines, torch.tensor([[0, 4, 8], [2, 4, 6]])])
        won = (nxt[..., lines] == mark[..., None, None]).all(-1).any(-1) & free
        full = (nxt != 0).all(-1)
        reward = won.float()
        done = won | full | ~free
        return nxt, reward, done, nxt == 0

    def predict(latent):
        return torch.zeros(*latent.shape[:-1], 9), torch.zeros(*latent.shape[:-1], 1)

    return (
        TensorDictModule(represent, ["board"], ["latent"]),
        TensorDictModule(dynamics, ["latent", "action"], ["latent", "reward", "done", "mask"]),
        TensorDictModule(predict, ["latent"], ["logits", "state_value"]),
    )


@pytest.mark.parametrize("one_hot", [False, True])
def test_muzero_searches_the_learned_model(one_hot):
    env = TicTacToeEnv(seed=0)
    spec = OneHot(9) if one_hot else Categorical(9, shape=(1,))
    policy = MuZeroPolicy(
        *_tictactoe_model(one_hot),
        action_spec=spec,
        num_players=2,
        num_simulations=200,
        gamma=1.0,
        turn_key="turn",
        seed=0,
    )
    win = policy(_position(env, (0, 3, 1, 4)))["action"]
    block = policy(_position(env, (0, 4, 1)))["action"]
    if one_hot:
        assert win.long().argmax().item() == 2 and block.long().argmax().item() == 2
        assert win.dtype == torch.bool
    else:
        assert win.tolist() == [2] and block.tolist() == [2]
    with pytest.raises(ValueError, match="num_players"):
        MuZeroPolicy(*_tictactoe_model(), action_spec=spec, num_players=3)


def test_muzero_single_player_discounting():
    # Reward 1 for action 1 now, or 3 for action 0 after two more steps.
    represent = TensorDictModule(lambda x: x.float(), ["observation"], ["latent"])

    def dynamics(z, a):
        a = a.reshape(z.shape).float()
        reward = torch.where(a == 1, 1.0, torch.where(z >= 2, 3.0, 0.0))
        return z + 1, reward, (a == 1) | (z >= 2)

    dyn = TensorDictModule(dynamics, ["latent", "action"], ["latent", "reward", "done"])
    predict = TensorDictModule(
        lambda z: (torch.zeros(*z.shape[:-1], 2), torch.zeros(z.shape)),
        ["latent"],
        ["logits", "state_value"],
    )
    obs = TensorDict(observation=torch.tensor([0]))
    for gamma, best in ((1.0, 0), (0.3, 1)):
        policy = MuZeroPolicy(
            represent,
            dyn,
            predict,
            action_spec=Categorical(2, shape=(1,)),
            num_simulations=150,
            gamma=gamma,
            seed=0,
        )
        assert policy(obs.clone())["action"].tolist() == [best], gamma
