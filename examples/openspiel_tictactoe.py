"""Tic-tac-toe against a random player: OpenSpiel through ``OpenSpielEnv``, policy gradient.

``OpenSpielEnv("tic_tac_toe")`` gives both players' boards (``("agents", "observation")``,
3 planes of 3x3: empty, crosses of ``player_0``, noughts of ``player_1``), their legal moves
(``("agents", "action_mask")``), whose turn it is (``"current_player"``) and per-player rewards
(+1 win, -1 loss, 0 draw, at the last move). ``num_envs`` games run in a ``SerialEnv``; in
game ``i`` the learner holds seat ``i % 2`` (it learns to play first and second), and a uniformly
random legal player holds the other seat. The policy writes both seats' actions; the env applies
the one whose turn it is.

The learner sees the board from its own side (planes: empty, mine, theirs), samples legal moves
only (``MaskedCategorical``) and is trained with PPO's clipped objective on Monte-Carlo
returns: each of its moves gets the game's final result, discounted by ``gamma`` per move played
after it, minus a learned baseline (a value head), for ``epochs`` updates per batch. Moves of
games that are still running when a batch ends are left out of that batch. The default budget
(102,400 moves, ~12,000 games) takes about 2 minutes on 2 busy CPU cores.

At the end the greedy learner (most likely legal move) and a random player each play
``eval_games`` games against the random player from each seat; the example prints win / draw /
loss rates of both. Random vs random: the first player wins ~59% and loses ~29%. The last line
is the summary: the greedy learner's mean game result (+1 win, 0 draw, -1 loss, averaged over
both seats: win rate minus loss rate, the score of the evaluations on the curve) beside the
random player's.

Usage: ``python examples/openspiel_tictactoe.py [--frames N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from _common import parse_config, plot_curve
from tensordict import TensorDictBase
from torch import nn
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.envs import SerialEnv
from torchrl.envs.libs.openspiel import OpenSpielEnv
from torchrl.modules import MLP, MaskedCategorical


@dataclass
class Config:
    frames: int = 102_400  # env steps (moves of both players), summed over games
    num_envs: int = 32
    steps_per_env: int = 32  # frames per batch = num_envs * steps_per_env
    lr: float = 2e-3
    epochs: int = 8  # clipped policy-gradient updates per batch (PPO's objective)
    clip_epsilon: float = 0.2
    gamma: float = 0.9  # per learner move: a quicker win is worth more
    entropy_coef: float = 0.01
    max_grad_norm: float = 1.0
    hidden: int = 128
    eval_every: int = 25_600
    eval_games: int = 200  # per seat
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_env(num_envs: int) -> SerialEnv:
    return SerialEnv(num_envs, lambda: OpenSpielEnv("tic_tac_toe", categorical_actions=True))


def own_view(board: torch.Tensor, seat: torch.Tensor) -> torch.Tensor:
    """Board planes ``[..., 3, 3, 3]`` (empty, player_0, player_1) -> (empty, mine, theirs), flat.

    ``seat`` (``[...]``, 0 or 1) is the learner's seat; the result is ``[..., 27]``.
    """
    swap = seat.bool()[..., None, None]
    mine = torch.where(swap, board[..., 2, :, :], board[..., 1, :, :])
    theirs = torch.where(swap, board[..., 1, :, :], board[..., 2, :, :])
    return torch.stack([board[..., 0, :, :], mine, theirs], -3).flatten(-3)


def pick(x: torch.Tensor, seat: torch.Tensor) -> torch.Tensor:
    """Row ``seat`` of the agent dim: ``x`` is ``[*B, 2, ...]``, ``seat`` is ``[*B]``."""
    index = seat.reshape(*seat.shape, 1, *([1] * (x.dim() - seat.dim() - 1)))
    return x.gather(seat.dim(), index.expand(*seat.shape, 1, *x.shape[seat.dim() + 1 :])).squeeze(
        seat.dim()
    )


class Learner(nn.Module):
    """Policy and value networks over the learner's view of the board."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.policy = MLP(in_features=27, out_features=9, num_cells=[hidden, hidden])
        self.value = MLP(in_features=27, out_features=1, num_cells=[hidden, hidden])

    def dist(self, view: torch.Tensor, legal: torch.Tensor) -> MaskedCategorical:
        # a finite logit for illegal moves: with -inf, the entropy's gradient is NaN
        return MaskedCategorical(logits=self.policy(view), mask=legal, neg_inf=-1e8)


class VersusRandom(nn.Module):
    """Writes both seats' moves: the learner's in seat ``seats[i]`` of game ``i``, random elsewhere.

    Args:
        learner: the networks (``None``: a random player in the learner's seat too).
        seats: ``[num_envs]`` seat of the learner in each game.
        greedy: play the most likely legal move instead of sampling.
    """

    def __init__(self, learner: Learner | None, seats: torch.Tensor, greedy: bool = False) -> None:
        super().__init__()
        self.learner = learner
        self.register_buffer("seats", seats)
        self.greedy = greedy

    @torch.no_grad()
    def forward(self, td: TensorDictBase) -> TensorDictBase:
        legal = td["agents", "action_mask"]  # [N, 2, 9]
        noise = torch.rand(legal.shape).masked_fill(~legal, -1.0)
        action = noise.argmax(-1)  # random legal moves for both seats
        if self.learner is not None:
            view = own_view(pick(td["agents", "observation"], self.seats), self.seats)
            dist = self.learner.dist(view, pick(legal, self.seats))
            move = dist.mode if self.greedy else dist.sample()
            action.scatter_(1, self.seats[:, None], move[:, None])
        td["agents", "action"] = action
        return td


def learner_moves(batch: TensorDictBase, seats: torch.Tensor, gamma: float) -> dict:
    """The learner's moves of the complete games in ``batch`` (``[N, T]``) and their returns."""
    n, t = batch.batch_size
    seat_t = seats[:, None].expand(n, t)
    reward = pick(batch["next", "agents", "reward"].squeeze(-1), seat_t)  # [N, T]
    done = batch["next", "done"].squeeze(-1)
    mine = batch["current_player"].squeeze(-1) == seat_t
    # Monte-Carlo return per move, discounted per learner move, restarting at each game's end
    ret = torch.zeros(n, t)
    running = torch.zeros(n)
    for i in range(t - 1, -1, -1):
        running = torch.where(done[:, i], torch.zeros(n), running)
        running = reward[:, i] + running * torch.where(mine[:, i], gamma, 1.0)
        ret[:, i] = running
    # moves after a game's last end in this batch belong to a game still running: left out
    last_end = torch.where(done, torch.arange(t).expand(n, t), -1).amax(-1, keepdim=True)
    keep = mine & (torch.arange(t).expand(n, t) <= last_end)
    board = pick(batch["agents", "observation"], seat_t)
    return {
        "view": own_view(board, seat_t)[keep],
        "legal": pick(batch["agents", "action_mask"], seat_t)[keep],
        "action": pick(batch["agents", "action"], seat_t)[keep],
        "return": ret[keep],
        "results": reward[done],
    }


@torch.no_grad()
def play_vs_random(learner: Learner | None, games: int, seed: int) -> dict:
    """Win / draw / loss rates over ``games`` games in each seat against the random player."""
    out = {}
    for seat in (0, 1):
        env = make_env(games)
        env.set_seed(seed + seat)
        seats = torch.full((games,), seat, dtype=torch.int64)
        rollout = env.rollout(
            9, VersusRandom(learner, seats, greedy=True), break_when_all_done=True
        )
        env.close()
        # each game's result: the learner's reward at the game's first end
        done = rollout["next", "done"].squeeze(-1)
        first_end = done & (done.long().cumsum(-1) == 1)
        result = (rollout["next", "agents", "reward"][:, :, seat, 0] * first_end).sum(-1)
        out[f"seat{seat}"] = {
            "win": float((result > 0).float().mean()),
            "draw": float((result == 0).float().mean()),
            "loss": float((result < 0).float().mean()),
        }
    return out


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    env = make_env(cfg.num_envs)
    env.set_seed(cfg.seed)
    learner = Learner(cfg.hidden)
    seats = torch.arange(cfg.num_envs) % 2
    collector = SyncDataCollector(
        env,
        VersusRandom(learner, seats),
        frames_per_batch=cfg.num_envs * cfg.steps_per_env,
        total_frames=cfg.frames,
    )
    optim = torch.optim.Adam(learner.parameters(), lr=cfg.lr)
    history: dict = {"train": [], "eval": []}
    frames, next_eval = 0, cfg.eval_every
    start = time.perf_counter()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="tic-tac-toe")
    for batch in collector:
        frames += batch.numel()
        data = learner_moves(batch, seats, cfg.gamma)
        if data["return"].numel():
            with torch.no_grad():  # the sampling policy's log-probabilities (same weights)
                old_log_prob = learner.dist(data["view"], data["legal"]).log_prob(data["action"])
            for _ in range(cfg.epochs):
                dist = learner.dist(data["view"], data["legal"])
                value = learner.value(data["view"]).squeeze(-1)
                advantage = (data["return"] - value).detach()
                ratio = (dist.log_prob(data["action"]) - old_log_prob).exp()
                clipped = ratio.clamp(1 - cfg.clip_epsilon, 1 + cfg.clip_epsilon)
                loss = (
                    -torch.min(ratio * advantage, clipped * advantage).mean()
                    + 0.5 * (data["return"] - value).pow(2).mean()
                    - cfg.entropy_coef * dist.entropy().mean()
                )
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(learner.parameters(), cfg.max_grad_norm)
                optim.step()
            history["train"].append((frames, float(data["results"].mean())))
        bar.update(batch.numel())
        if frames >= next_eval:
            next_eval += cfg.eval_every
            rates = play_vs_random(learner, cfg.eval_games, cfg.seed + 1000 + frames)
            score = sum(r["win"] - r["loss"] for r in rates.values()) / 2
            history["eval"].append((frames, score))
            bar.set_postfix(win_minus_loss=f"{score:.2f}")
    bar.close()
    collector.shutdown()
    history["wall"] = time.perf_counter() - start
    history["frames"] = frames
    history["final"] = play_vs_random(learner, cfg.eval_games, cfg.seed + 20_000)
    history["random"] = play_vs_random(None, cfg.eval_games, cfg.seed + 20_000)
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)
    history = train(cfg)
    plot_curve(
        history,
        f"{cfg.out}/openspiel_tictactoe.png",
        "tic-tac-toe vs random (PPO, Monte-Carlo returns)",
    )
    print(f"{history['frames']} frames in {history['wall']:.1f} s")
    for who in ("final", "random"):
        name = "learner (greedy)" if who == "final" else "random player"
        for seat, r in history[who].items():
            print(
                f"{name} in {seat} vs random, {cfg.eval_games} games: win {r['win']:.2f} "
                f"draw {r['draw']:.2f} loss {r['loss']:.2f}"
            )
    final, rand = (
        sum(r["win"] - r["loss"] for r in history[who].values()) / 2 for who in ("final", "random")
    )
    print(
        f"Tic-tac-toe vs random (PPO): final deterministic evaluation return {final:.2f} "
        f"(mean game result over {2 * cfg.eval_games} games, both seats; random player "
        f"{rand:.2f}); {history['frames']} frames in {history['wall']:.1f} s"
    )


if __name__ == "__main__":
    main()
