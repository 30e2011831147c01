"""Tic-tac-toe for two players (or one against a random opponent), batched, in pure torch.

The env is stateless: the board, whose turn it is and the mask of free cells travel in the
TensorDict, so any batch of games can be played at once and ``_step`` is a few tensor ops.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, MASK, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike, NestedKey, ShapeLike
from torchrl.data.specs import Categorical, Composite, Unbounded
from torchrl.envs.common import EnvBase

__all__ = ["TicTacToeEnv"]

_BOARD = "board"
_TURN = "turn"
_PLAYERS = ("player0", "player1")

# The 8 winning lines, as flat cell indices (rows, columns, diagonals).
_LINES = torch.tensor(
    [
        [0, 1, 2],
        [3, 4, 5],
        [6, 7, 8],
        [0, 3, 6],
        [1, 4, 7],
        [2, 5, 8],
        [0, 4, 8],
        [2, 4, 6],
    ]
)


class TicTacToeEnv(EnvBase):
    """Tic-tac-toe on a ``3 x 3`` board, batched and stateless, in pure torch.

    Cells of ``"board"`` (int32, ``[*B, 3, 3]``) hold ``0`` (empty), ``1`` (``"player0"``'s
    mark) or ``2`` (``"player1"``'s). ``"turn"`` (int32, ``[*B, 1]``) says who plays next
    (``0`` or ``1``; ``"player0"`` starts), ``"mask"`` (bool, ``[*B, 9]``) which cells are free.
    The action (int64, ``[*B, 1]``) is the flat index ``3 * row + col`` of the cell to mark;
    marking a taken cell raises a ``ValueError``. Rewards come per player, at
    ``("player0", "reward")`` and ``("player1", "reward")`` (``[*B, 1]``): ``+1`` to the winner,
    ``-1`` to the loser, ``0`` otherwise (draws included). The game terminates on a line of
    three or a full board. Policies must read ``"turn"`` and ``"mask"``; :meth:`rand_action`
    draws among the free cells.

    Args:
        single_player: if ``True``, ``"player1"`` plays uniformly random legal moves inside
            each step, so every step is a move of ``"player0"`` (default ``False``: the
            players alternate, one move per step).
        device: where the tensors live.
        batch_size: the number of games, e.g. ``[16]`` (default ``[]``). Inputs of other batch
            sizes are accepted too: ``env.reset(TensorDict(batch_size=[n]))``.
        seed: the seed of the random opponent and of :meth:`rand_action`.

    Examples:
        >>> import torch
        >>> from torchrl.envs import TicTacToeEnv
        >>> env = TicTacToeEnv(batch_size=[4], seed=0)
        >>> rollout = env.rollout(9, break_when_any_done=False)
        >>> rollout["board"].shape
        torch.Size([4, 9, 3, 3])
        >>> env = TicTacToeEnv()
        >>> td = env.reset()
        >>> for cell in (0, 3, 1, 4, 2):  # player0 fills the top row
        ...     td["action"] = torch.tensor([cell])
        ...     td = env.step(td)["next"]
        >>> td["player0", "reward"], td["player1", "reward"], td["done"]
        (tensor([1.]), tensor([-1.]), tensor([True]))
    """

    def __init__(
        self,
        *,
        single_player: bool = False,
        device: DeviceLike = None,
        batch_size: ShapeLike | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(device=device, batch_size=batch_size)
        self.batch_locked = False
        self.single_player = bool(single_player)
        batch = self.batch_size
        board = Categorical(3, shape=(*batch, 3, 3), dtype=torch.int32)
        turn = Categorical(2, shape=(*batch, 1), dtype=torch.int32)
        mask = Categorical(2, shape=(*batch, 9), dtype=torch.bool)
        # The empty player groups: step_mdp keeps a group after dropping its reward, so they
        # are (empty) observations too and every step's root has them.
        groups: dict[NestedKey, Any] = {p: Composite(shape=batch) for p in _PLAYERS}
        self.observation_spec = Composite(
            {_BOARD: board, _TURN: turn, MASK: mask, **groups}, shape=batch
        )
        self.state_spec = Composite(
            {_BOARD: board.clone(), _TURN: turn.clone(), MASK: mask.clone()}, shape=batch
        )
        self.action_spec = Categorical(9, shape=(*batch, 1))
        reward = Unbounded(shape=(*batch, 1), dtype=torch.float32)
        self.reward_spec = Composite(
            {p: Composite({REWARD: reward.clone()}, shape=batch) for p in _PLAYERS}, shape=batch
        )
        if seed is None:
            seed = int(torch.randint(0, 2**32 - 1, (), dtype=torch.int64))
        self.set_seed(seed)

    def _set_seed(self, seed: int | None) -> None:
        device = self.device if self.device is not None else torch.device("cpu")
        self.rng = torch.Generator(device=device)
        if seed is not None:
            self.rng.manual_seed(seed)
        else:
            self.rng.seed()

    def _random_cells(self, mask: torch.Tensor) -> torch.Tensor:
        # argmax of noise restricted to the free cells: a uniform draw among them. Rows with no
        # free cell give 0 (never used: those games are over).
        noise = torch.rand(mask.shape, generator=self.rng, device=self.rng.device)
        return noise.to(mask.device).masked_fill(~mask, -1.0).argmax(-1)

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Writes a random legal action: a uniform draw among the free cells of ``"mask"``.

        Args:
            tensordict: the current state (with ``"mask"``, ``[*B, 9]``); without a mask, any
                cell may be drawn.

        Returns:
            ``tensordict`` with ``"action"`` (int64, ``[*B, 1]``).

        Examples:
            >>> import torch
            >>> from torchrl.envs import TicTacToeEnv
            >>> env = TicTacToeEnv(seed=0)
            >>> td = env.reset()
            >>> td["mask"] = torch.tensor([False] * 8 + [True])
            >>> env.rand_action(td)["action"]
            tensor([8])
        """
        if tensordict is None:
            tensordict = TensorDict(batch_size=self.batch_size, device=self.device)
        mask = tensordict.get(MASK, None)
        if mask is None:
            return super().rand_action(tensordict)
        if not bool(mask.any(-1).all()):
            # Finished games (a full board): any action, the step of a done game is not used.
            mask = mask | ~mask.any(-1, keepdim=True)
        action = self._random_cells(mask)
        tensordict.set(ACTION, action.unsqueeze(-1))
        return tensordict

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        batch = tensordict.batch_size if tensordict is not None else self.batch_size
        device = self.device
        return TensorDict(
            {
                _BOARD: torch.zeros((*batch, 3, 3), dtype=torch.int32, device=device),
                _TURN: torch.zeros((*batch, 1), dtype=torch.int32, device=device),
                MASK: torch.ones((*batch, 9), dtype=torch.bool, device=device),
                **{p: TensorDict(batch_size=batch, device=device) for p in _PLAYERS},
            },
            batch_size=batch,
            device=device,
        )

    @staticmethod
    def _wins(board: torch.Tensor, mark: torch.Tensor) -> torch.Tensor:
        """Whether ``mark`` (``[*B]``) fills a line of the flat ``board`` (``[*B, 9]``)."""
        lines = board[..., _LINES.to(board.device)]  # [*B, 8, 3]
        return (lines == mark[..., None, None]).all(-1).any(-1)

    @staticmethod
    def _play(
        board: torch.Tensor, cell: torch.Tensor, player: torch.Tensor, active: torch.Tensor
    ) -> torch.Tensor:
        """Marks ``cell`` for ``player`` (``0``/``1``) where ``active``; returns a new board."""
        mark = (player + 1).to(board.dtype)
        placed = board.scatter(-1, cell.unsqueeze(-1), mark.unsqueeze(-1))
        return torch.where(active.unsqueeze(-1), placed, board)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        batch = tensordict.batch_size
        board = tensordict[_BOARD].reshape(*batch, 9)
        turn = tensordict[_TURN].squeeze(-1).long()
        cell = tensordict[ACTION].reshape(batch).long()
        free = board.gather(-1, cell.unsqueeze(-1)).squeeze(-1) == 0
        if not bool(free.all()):
            bad = (~free).nonzero()[0].tolist()
            raise ValueError(
                f"TicTacToeEnv: illegal move: game {bad} (batch index) plays cell "
                f"{int(cell[tuple(bad)])}, which is taken; the free cells are the True entries "
                f"of 'mask'"
            )
        everyone = torch.ones_like(turn, dtype=torch.bool)
        board = self._play(board, cell, turn, everyone)
        won = self._wins(board, turn + 1)
        full = (board != 0).all(-1)
        over = won | full
        winner = torch.where(won, turn, torch.full_like(turn, -1))
        next_turn = 1 - turn
        if self.single_player:
            # The random opponent answers in the same step, in the games that go on.
            reply = self._random_cells(board == 0)
            board = self._play(board, reply, next_turn, ~over)
            opp_won = ~over & self._wins(board, next_turn + 1)
            winner = torch.where(opp_won, next_turn, winner)
            full = (board != 0).all(-1)
            over = over | opp_won | full
            next_turn = turn
        zero = torch.zeros_like(turn, dtype=torch.float32)
        rewards = {}
        for index, name in enumerate(_PLAYERS):
            value = torch.where(winner == index, zero + 1, zero)
            value = torch.where((winner >= 0) & (winner != index), zero - 1, value)
            rewards[name] = TensorDict({REWARD: value.unsqueeze(-1)}, batch_size=batch)
        done = over.unsqueeze(-1)
        return TensorDict(
            {
                _BOARD: board.reshape(*batch, 3, 3),
                _TURN: next_turn.to(torch.int32).unsqueeze(-1),
                MASK: board == 0,
                **rewards,
                DONE: done,
                TERMINATED: done.clone(),
                TRUNCATED: torch.zeros_like(done),
            },
            batch_size=batch,
            device=self.device,
        )
