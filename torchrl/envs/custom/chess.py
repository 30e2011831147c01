"""Chess, on top of the ``chess`` package (python-chess), one move per step.

An action is an index into :attr:`ChessEnv.UCI_MOVES`, every move a piece could ever make on an
empty board in UCI notation (queen and knight geometry, plus the four promotions of each pawn
move to the last rank): 1968 moves. ``"action_mask"`` marks the legal ones.
"""

from __future__ import annotations

import importlib.util
import io
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, ACTION_MASK, DONE, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike, NestedKey
from torchrl.data.specs import Bounded, Categorical, Composite, NonTensor, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.transforms.hashing import Hash

if TYPE_CHECKING:
    import chess

__all__ = ["ChessEnv"]

_has_chess = importlib.util.find_spec("chess") is not None

_FEN = "fen"
_PGN = "pgn"
_SAN = "san"
_TURN = "turn"
_LEGAL_MOVES = "legal_moves"
# No position has more legal moves than this (the known maximum is 218).
_MAX_LEGAL_MOVES = 218
_START_SAN = "<start>"
_HASH = "_hash"
_FILES = "abcdefgh"


def _square(file: int, rank: int) -> str:
    return f"{_FILES[file]}{rank + 1}"


def _all_uci_moves() -> tuple[str, ...]:
    """Every move in UCI notation that a piece could make on some board, in a fixed order."""
    moves: list[str] = []
    knight = [(1, 2), (2, 1), (2, -1), (1, -2), (-1, -2), (-2, -1), (-2, 1), (-1, 2)]
    for rank in range(8):
        for file in range(8):
            targets = set()
            for df in (-1, 0, 1):
                for dr in (-1, 0, 1):
                    if df == dr == 0:
                        continue
                    for dist in range(1, 8):
                        f, r = file + df * dist, rank + dr * dist
                        if not (0 <= f < 8 and 0 <= r < 8):
                            break
                        targets.add((f, r))
            for df, dr in knight:
                f, r = file + df, rank + dr
                if 0 <= f < 8 and 0 <= r < 8:
                    targets.add((f, r))
            src = _square(file, rank)
            for f, r in sorted(targets, key=lambda t: (t[1], t[0])):
                moves.append(src + _square(f, r))
    # Promotions: a pawn on its 7th rank steps forward or captures diagonally onto the last.
    for src_rank, dst_rank in ((6, 7), (1, 0)):
        for file in range(8):
            for f in (file - 1, file, file + 1):
                if 0 <= f < 8:
                    for piece in "qrbn":
                        moves.append(_square(file, src_rank) + _square(f, dst_rank) + piece)
    return tuple(moves)


def _import_chess() -> Any:
    if not _has_chess:
        raise ImportError(
            'ChessEnv needs the "chess" package (python-chess): pip install "torchrl[chess]"'
        )
    import chess
    import chess.pgn

    return chess


class ChessEnv(EnvBase):
    """A game of chess, one half-move per step, on top of the ``chess`` package.

    The action (int64, shape ``[]``) indexes :attr:`UCI_MOVES`; an illegal move raises a
    ``ValueError``. ``"turn"`` (bool, ``[1]``) is ``True`` when white is to move. The reward
    (``[1]``) goes to the side that just moved: ``1`` when its move checkmates, ``0`` otherwise
    (draws included). The game terminates when it is over (checkmate, stalemate, insufficient
    material, 75-move rule, fivefold repetition); add a step limit to truncate it.

    Args:
        stateful: keep the board inside the env (default). If ``False``, the position travels in
            the TensorDict (``"fen"`` or ``"pgn"``, one of them must be included) and is read
            back at each step, so one env object can serve any game.
        include_san: add ``"san"``, the move just played in standard algebraic notation
            (``"<start>"`` after a reset).
        include_fen: add ``"fen"``, the position in Forsyth-Edwards notation.
        include_pgn: add ``"pgn"``, the game so far in portable game notation.
        include_legal_moves: add ``"legal_moves"``, the indices of the legal moves (int64,
            ``[218]``, padded with ``-1``).
        include_hash: add ``"san_hash"``, ``"fen_hash"``, ``"pgn_hash"`` (for the included
            strings): int64 ``[4]`` SHA-256 hashes, as
            :meth:`~torchrl.envs.transforms.Hash.reproducible_hash` makes them.
        mask_actions: add ``"action_mask"`` (bool, ``[1968]``) and make :meth:`rand_action`
            draw legal moves only (default ``True``).
        pixels: not supported here (raises ``NotImplementedError``).
        device: where the tensors live.
        seed: the seed of :meth:`rand_action` (chess itself is deterministic).

    A reset starts from the initial position, or from the position of a ``"fen"`` (or
    ``"pgn"``) entry of its input: ``env.reset(TensorDict(fen=...))``.

    Examples:
        >>> import torch
        >>> from torchrl.envs import ChessEnv
        >>> env = ChessEnv(include_fen=True, include_san=True)
        >>> td = env.reset()
        >>> td["action"] = torch.tensor(env.UCI_MOVES.index("e2e4"))
        >>> td = env.step(td)
        >>> td["next", "san"], td["next", "turn"]
        ('e4', tensor([False]))
        >>> bool(env.rollout(5)["action_mask"].any(-1).all())
        True
    """

    UCI_MOVES: tuple[str, ...] = _all_uci_moves()

    def __init__(
        self,
        stateful: bool = True,
        include_san: bool = False,
        include_fen: bool = False,
        include_pgn: bool = False,
        include_legal_moves: bool = False,
        include_hash: bool = False,
        mask_actions: bool = True,
        pixels: bool = False,
        device: DeviceLike = None,
        seed: int | None = None,
    ) -> None:
        self._chess = _import_chess()
        if include_hash and not (include_san or include_fen or include_pgn):
            raise ValueError(
                "ChessEnv(include_hash=True) hashes the 'san', 'fen' and 'pgn' strings: include "
                "at least one of them"
            )
        if pixels:
            raise NotImplementedError(
                "ChessEnv(pixels=True): rendering the board to pixels is not supported here"
            )
        if not stateful and not (include_fen or include_pgn):
            raise ValueError(
                "ChessEnv(stateful=False) reads the position from the TensorDict: set "
                "include_fen=True or include_pgn=True"
            )
        super().__init__(device=device)
        self.stateful = bool(stateful)
        self.include_san = bool(include_san)
        self.include_fen = bool(include_fen)
        self.include_pgn = bool(include_pgn)
        self.include_legal_moves = bool(include_legal_moves)
        self.include_hash = bool(include_hash)
        self.mask_actions = bool(mask_actions)
        self.move_index = {uci: i for i, uci in enumerate(self.UCI_MOVES)}
        self.board = self._chess.Board()
        n = len(self.UCI_MOVES)
        obs: dict[NestedKey, Any] = {_TURN: Categorical(2, shape=(1,), dtype=torch.bool)}
        state: dict[NestedKey, Any] = {}
        if self.include_fen:
            obs[_FEN] = NonTensor(shape=(), example_data=self._chess.STARTING_FEN)
            state[_FEN] = obs[_FEN].clone()
        if self.include_pgn:
            obs[_PGN] = NonTensor(shape=(), example_data="*")
            state[_PGN] = obs[_PGN].clone()
        if self.include_san:
            obs[_SAN] = NonTensor(shape=(), example_data=_START_SAN)
        if self.include_hash:
            for key in (_SAN, _FEN, _PGN):
                if key in obs:
                    obs[key + _HASH] = Unbounded(shape=(4,), dtype=torch.int64)
        if self.include_legal_moves:
            obs[_LEGAL_MOVES] = Bounded(-1, n - 1, shape=(_MAX_LEGAL_MOVES,), dtype=torch.int64)
        if self.mask_actions:
            obs[ACTION_MASK] = Categorical(2, shape=(n,), dtype=torch.bool)
        self.observation_spec = Composite(obs)
        if not self.stateful:
            self.state_spec = Composite(state)
        self.action_spec = Categorical(n)
        self.reward_spec = Unbounded(shape=(1,), dtype=torch.float32)
        if seed is None:
            seed = int(torch.randint(0, 2**32 - 1, (), dtype=torch.int64))
        self.set_seed(seed)

    def _set_seed(self, seed: int | None) -> None:
        # Chess is deterministic; only rand_action draws, from this generator.
        self.rng = torch.Generator()
        if seed is not None:
            self.rng.manual_seed(seed)
        else:
            self.rng.seed()

    def legal_mask(self, board: chess.Board | None = None) -> torch.Tensor:
        """The mask of the legal moves of ``board`` (the env's board when ``None``).

        Args:
            board: a ``chess.Board``.

        Returns:
            A bool tensor of shape ``[len(UCI_MOVES)]``.

        Examples:
            >>> from torchrl.envs import ChessEnv
            >>> int(ChessEnv().legal_mask().sum())  # 20 opening moves
            20
        """
        board = self.board if board is None else board
        mask = torch.zeros(len(self.UCI_MOVES), dtype=torch.bool)
        index = [self.move_index[m.uci()] for m in board.legal_moves]
        if index:
            mask[torch.tensor(index)] = True
        return mask.to(self.device) if self.device is not None else mask

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Writes a random legal move (uniform among the legal ones).

        Args:
            tensordict: the current step's data; its ``"action_mask"`` (or position) says which
                moves are legal.

        Returns:
            ``tensordict`` with ``"action"``.

        Examples:
            >>> from torchrl.envs import ChessEnv
            >>> env = ChessEnv()
            >>> td = env.rand_action(env.reset())
            >>> env.UCI_MOVES[int(td["action"])] in [m.uci() for m in env.board.legal_moves]
            True
        """
        if tensordict is None:
            tensordict = TensorDict(batch_size=self.batch_size, device=self.device)
        mask = tensordict.get(ACTION_MASK, None)
        if mask is None:
            mask = self.legal_mask(self._board_from(tensordict))
        if not bool(mask.any()):
            return super().rand_action(tensordict)  # game over: any index
        noise = torch.rand(mask.shape, generator=self.rng)
        action = noise.masked_fill(~mask.cpu(), -1.0).argmax(-1)
        tensordict.set(ACTION, action.to(mask.device))
        return tensordict

    def _board_from(self, tensordict: TensorDictBase | None) -> chess.Board:
        """The position of ``tensordict`` (stateless mode), else the env's board."""
        if self.stateful or tensordict is None:
            return self.board
        return self._read_position(tensordict, required=True) or self.board

    def _read_position(self, tensordict: TensorDictBase, required: bool) -> chess.Board | None:
        keys = tensordict.keys()
        if self.include_pgn and _PGN in keys:
            game = self._chess.pgn.read_game(io.StringIO(str(tensordict[_PGN])))
            if game is None:
                raise ValueError(f"ChessEnv: cannot read the 'pgn' entry {tensordict[_PGN]!r}")
            return game.end().board()
        if _FEN in keys:
            try:
                return self._chess.Board(str(tensordict[_FEN]))
            except ValueError as err:
                raise ValueError(f"ChessEnv: invalid 'fen' entry {tensordict[_FEN]!r}") from err
        if required:
            raise KeyError(
                "ChessEnv(stateful=False): the input has no 'fen' or 'pgn' entry to read the "
                f"position from (keys: {sorted(map(str, keys))})"
            )
        return None

    def _observe(self, board: chess.Board, san: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            _TURN: torch.tensor([board.turn == self._chess.WHITE], device=self.device)
        }
        if self.include_fen:
            out[_FEN] = board.fen()
        if self.include_pgn:
            out[_PGN] = str(self._chess.pgn.Game.from_board(board))
        if self.include_san:
            out[_SAN] = san
        if self.include_hash:
            for key in (_SAN, _FEN, _PGN):
                if key in out:
                    out[key + _HASH] = Hash.reproducible_hash(out[key]).to(self.device)
        mask = None
        if self.mask_actions or self.include_legal_moves:
            mask = self.legal_mask(board)
        if self.include_legal_moves and mask is not None:
            legal = torch.full((_MAX_LEGAL_MOVES,), -1, dtype=torch.int64, device=mask.device)
            index = mask.nonzero().squeeze(-1)
            legal[: index.numel()] = index
            out[_LEGAL_MOVES] = legal
        if self.mask_actions:
            out[ACTION_MASK] = mask
        return out

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        board = None
        if tensordict is not None:
            board = self._read_position(tensordict, required=False)
        if board is None:
            board = self._chess.Board()
        if self.stateful:
            self.board = board
        return TensorDict(self._observe(board, _START_SAN), batch_size=[], device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        board = self._board_from(tensordict)
        if not self.stateful:
            board = board.copy()
        index = int(tensordict[ACTION])
        uci = self.UCI_MOVES[index]
        move = self._chess.Move.from_uci(uci)
        if not board.is_legal(move):
            raise ValueError(
                f"ChessEnv: illegal move {uci!r} (action {index}) in position {board.fen()!r}; "
                f"legal moves: {sorted(m.uci() for m in board.legal_moves)}"
            )
        san = board.san(move)
        board.push(move)
        over = board.is_game_over()
        won = board.is_checkmate()
        done = torch.tensor([over], device=self.device)
        out = self._observe(board, san)
        out[REWARD] = torch.tensor([1.0 if won else 0.0], device=self.device)
        out[DONE] = done
        out[TERMINATED] = done.clone()
        out[TRUNCATED] = torch.zeros_like(done)
        return TensorDict(out, batch_size=[], device=self.device)
