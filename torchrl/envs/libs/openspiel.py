"""OpenSpiel games behind the torchrl env contract: :class:`OpenSpielWrapper`, :class:`OpenSpielEnv`.

A game's players are agents named ``"player_0"``, ``"player_1"``, ... and grouped with a
``group_map`` (DESIGN.md §2; by default all in one group, ``"agents"``). Per group ``g`` with
``n`` players:

* ``(g, "observation")``: float32 ``[n, *shape]``, each player's ``observation_tensor`` (or its
  ``information_state_tensor`` for games that only provide that), in the game's shape;
* ``(g, "action_mask")``: bool ``[n, num_distinct_actions]``, the legal actions of the players
  who act next; players who do not act read all ``True`` (so that any masked policy can draw
  an action for them, which the env ignores);
* ``(g, "mask")``: bool ``[n]``, which players act next;
* ``(g, "action")``: ``[n]`` indices (``categorical_actions=True``) or ``[n, A]`` one-hot rows;
* ``(g, "reward")``: float32 ``[n, 1]``, each player's reward of the step (chance moves
  included); ``(g, "done"/"terminated"/"truncated")``: bool ``[n, 1]``.

The root holds ``"done"``, ``"terminated"``, ``"truncated"`` (bool ``[1]``; OpenSpiel games end
by termination only) and ``"current_player"`` (int64 ``[1]``, OpenSpiel's player id: ``-2`` at a
simultaneous-move node, ``-4`` once the game is over).

Turn-based games apply the action of the player whose turn it is; simultaneous-move games apply
every player's action at once. Chance nodes are resolved inside the env, by sampling their
outcomes with a generator that :meth:`~torchrl.envs.EnvBase.set_seed` seeds, so a policy only
sees states where a player acts. The env is unbatched: run copies in a
:class:`~torchrl.envs.SerialEnv` or :class:`~torchrl.envs.ParallelEnv`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from torchrl._keys import (
    ACTION,
    ACTION_MASK,
    DONE,
    MASK,
    OBSERVATION,
    RESET,
    REWARD,
    TERMINATED,
    TRUNCATED,
)
from torchrl._td_compat import new_unchecked
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import Categorical, Composite, NonTensor, OneHot, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.libs._marl import MarlGroupMapType, resolve_group_map
from torchrl.envs.libs.gym import ClassProperty
from torchrl.envs.utils import masked_choice

__all__ = ["OpenSpielEnv", "OpenSpielWrapper"]

_has_pyspiel = has_module("pyspiel")

CURRENT_PLAYER = "current_player"
STATE = "state"

# OpenSpiel's player id of a simultaneous-move node (pyspiel.PlayerId.SIMULTANEOUS)
_SIMULTANEOUS = -2


def _pyspiel() -> Any:
    return import_optional("pyspiel", extra="open_spiel")


def _available_games(cls: type) -> list[str]:
    """The short names of the games registered with OpenSpiel, sorted."""
    return sorted(game.short_name for game in _pyspiel().registered_games())


def _observation_of(game: Any, spiel_error: type[Exception]) -> tuple[str, tuple[int, ...]]:
    """The state method that gives a player's observation tensor, and the tensor's shape.

    The observation tensor when the game has one, else the information state tensor (some games
    declare a tensor that they do not implement: the next one is tried).
    """
    game_type = game.get_type()
    candidates = []
    if game_type.provides_observation_tensor:
        candidates.append(("observation_tensor", game.observation_tensor_shape))
    if game_type.provides_information_state_tensor:
        candidates.append(("information_state_tensor", game.information_state_tensor_shape))
    for method, shape_of in candidates:
        try:
            return method, tuple(shape_of())
        except spiel_error:
            continue
    raise ValueError(
        f"OpenSpielWrapper: the game {game_type.short_name!r} implements neither an observation "
        f"tensor nor an information state tensor; it cannot be wrapped"
    )


class _Group:
    """One group of players: its name, their OpenSpiel ids and the spec shapes it needs."""

    def __init__(self, name: str, players: list[int]) -> None:
        self.name = name
        self.players = players
        self.n = len(players)


class OpenSpielWrapper(EnvBase):
    """Wraps an OpenSpiel game (``pyspiel.Game``, or a ``pyspiel.State`` to start from).

    See the module docstring for the layout of the data. Each reset starts from a copy of the
    game's initial state (or of the state that was wrapped), with its chance moves resolved.

    Args:
        env: a ``pyspiel.Game``, or a ``pyspiel.State`` that every reset restarts from.
        group_map: a :class:`~torchrl.envs.MarlGroupMapType` or ``{group: ["player_0", ...]}``
            (default: ``ALL_IN_ONE_GROUP``, one group ``"agents"``).
        categorical_actions: actions as indices (``Categorical``) rather than one-hot vectors.
        return_state: add the serialized game state (a string, ``state.serialize()``) under
            ``"state"``; ``env.reset(td)`` with a ``"state"`` entry (and no ``"_reset"`` mask)
            restarts from that state instead of the initial one. Single envs only: SerialEnv and
            ParallelEnv carry tensors, not strings.
        device: the device of the output tensors.
        batch_size: must be empty (``[]``): one game per env.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`); illegal moves are refused whatever this says.

    Examples:
        >>> import pyspiel
        >>> import torch
        >>> from torchrl.envs.libs.openspiel import OpenSpielWrapper
        >>> env = OpenSpielWrapper(pyspiel.load_game("tic_tac_toe"), categorical_actions=True)
        >>> td = env.reset()
        >>> td["agents", "mask"], td["agents", "observation"].shape
        (tensor([ True, False]), torch.Size([2, 3, 3, 3]))
        >>> td["agents", "action"] = torch.tensor([4, 0])  # player_0 takes the centre
        >>> td = env.step(td)
        >>> td["next", "current_player"], td["next", "agents", "action_mask"][1, 4]
        (tensor([1]), tensor(False))
    """

    # a reset always restarts the one game (or nothing): no merge of old values
    _handles_partial_reset = True

    def __init__(
        self,
        env: Any = None,
        *,
        group_map: MarlGroupMapType | Mapping[str, Sequence[str]] | None = None,
        categorical_actions: bool = False,
        return_state: bool = False,
        device: DeviceLike = "cpu",
        batch_size: Sequence[int] | torch.Size | None = None,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        pyspiel = _pyspiel()
        if isinstance(env, pyspiel.State):
            game, initial = env.get_game(), env.clone()
        elif isinstance(env, pyspiel.Game):
            game, initial = env, env.new_initial_state()
        else:
            raise TypeError(
                f"OpenSpielWrapper: env must be a pyspiel.Game or pyspiel.State, got "
                f"{type(env).__name__}: {env!r}"
            )
        if batch_size is not None and torch.Size(batch_size) != torch.Size([]):
            raise ValueError(
                f"OpenSpielWrapper: batch_size must be [] (one game per env), got "
                f"{list(batch_size)}; run copies in a SerialEnv or ParallelEnv"
            )
        game_type = game.get_type()
        dynamics = game_type.dynamics
        if dynamics not in (game_type.Dynamics.SEQUENTIAL, game_type.Dynamics.SIMULTANEOUS):
            raise ValueError(
                f"OpenSpielWrapper: the game {game_type.short_name!r} has {dynamics} dynamics; "
                f"only sequential and simultaneous-move games are supported"
            )
        self._observe, obs_shape = _observation_of(game, pyspiel.SpielError)
        super().__init__(
            device=device,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self._game = game
        self._initial = initial
        self._state = initial.clone()
        self._obs_shape = obs_shape
        self._n_players = game.num_players()
        self._n_actions = game.num_distinct_actions()
        self._categorical = bool(categorical_actions)
        self.return_state = bool(return_state)
        self._rng = np.random.default_rng()
        self.agent_names = [f"player_{p}" for p in range(self._n_players)]
        self.group_map = resolve_group_map(
            group_map, self.agent_names, MarlGroupMapType.ALL_IN_ONE_GROUP
        )
        self._groups = [
            _Group(name, [self.agent_names.index(a) for a in agents])
            for name, agents in self.group_map.items()
        ]
        # where each player's row lives: (group, row in the group)
        self._where = {p: (g, j) for g in self._groups for j, p in enumerate(g.players)}
        self._make_specs()

    # ------------------------------------------------------------------------------ construction
    @property
    def game(self) -> Any:
        """The wrapped ``pyspiel.Game``."""
        return self._game

    @property
    def env(self) -> Any:
        """The wrapped ``pyspiel.Game`` (same as :attr:`game`)."""
        return self._game

    @property
    def state(self) -> Any:
        """The current ``pyspiel.State`` (the env's own: clone it before changing it)."""
        return self._state

    @property
    def group_names(self) -> list[str]:
        """The group names, in order."""
        return [g.name for g in self._groups]

    def _make_specs(self) -> None:
        device, n_actions = self.device, self._n_actions
        obs: dict[Any, Any] = {}
        act: dict[Any, Any] = {}
        rew: dict[Any, Any] = {}
        done: dict[Any, Any] = {}
        for group in self._groups:
            n = group.n
            shape = (n,)
            obs[group.name] = Composite(
                {
                    OBSERVATION: Unbounded(
                        shape=(n, *self._obs_shape), dtype=torch.float32, device=device
                    ),
                    ACTION_MASK: Categorical(
                        2, shape=(n, n_actions), dtype=torch.bool, device=device
                    ),
                    MASK: Categorical(2, shape=shape, dtype=torch.bool, device=device),
                },
                shape=shape,
                device=device,
            )
            action = (
                Categorical(n_actions, shape=shape, dtype=torch.int64, device=device)
                if self._categorical
                else OneHot(n_actions, shape=(n, n_actions), device=device)
            )
            act[group.name] = Composite({ACTION: action}, shape=shape, device=device)
            rew[group.name] = Composite(
                {REWARD: Unbounded(shape=(n, 1), dtype=torch.float32, device=device)},
                shape=shape,
                device=device,
            )
            flag = Categorical(2, shape=(n, 1), dtype=torch.bool, device=device)
            done[group.name] = Composite(
                {DONE: flag, TERMINATED: flag.clone(), TRUNCATED: flag.clone()},
                shape=shape,
                device=device,
            )
        obs[CURRENT_PLAYER] = Unbounded(shape=(1,), dtype=torch.int64, device=device)
        if self.return_state:
            obs[STATE] = NonTensor(shape=(), device=device, example_data="")
        flag = Categorical(2, shape=(1,), dtype=torch.bool, device=device)
        self.observation_spec = Composite(obs, device=device)
        self.full_action_spec = Composite(act, device=device)
        self.full_reward_spec = Composite(rew, device=device)
        self.full_done_spec = Composite(
            {DONE: flag, TERMINATED: flag.clone(), TRUNCATED: flag.clone(), **done},
            device=device,
        )

    # ---------------------------------------------------------------------------------- outputs
    def _output(self, rewards: np.ndarray | None) -> TensorDictBase:
        state = self._state
        terminal = bool(state.is_terminal())
        player = int(state.current_player())
        if terminal:
            acting: set[int] = set()
        elif player == _SIMULTANEOUS:
            acting = set(range(self._n_players))
        else:
            acting = {player}
        observe = getattr(state, self._observe)
        data: dict[Any, Any] = {}
        for group in self._groups:
            n = group.n
            obs = np.empty((n, *self._obs_shape), dtype=np.float32)
            legal = np.ones((n, self._n_actions), dtype=bool)
            for j, p in enumerate(group.players):
                obs[j] = np.asarray(observe(p), dtype=np.float32).reshape(self._obs_shape)
                if p in acting:
                    legal[j] = np.asarray(state.legal_actions_mask(p), dtype=bool)
            flags = torch.full((n, 1), terminal, dtype=torch.bool)
            entries: dict[Any, Any] = {
                OBSERVATION: torch.from_numpy(obs),
                ACTION_MASK: torch.from_numpy(legal),
                MASK: torch.tensor([p in acting for p in group.players], dtype=torch.bool),
                DONE: flags,
                TERMINATED: flags.clone(),
                TRUNCATED: torch.zeros((n, 1), dtype=torch.bool),
            }
            if rewards is not None:
                entries[REWARD] = torch.from_numpy(rewards[group.players].reshape(n, 1))
            data[group.name] = new_unchecked(entries, batch_size=torch.Size([n]))
        flags = torch.tensor([terminal, terminal, False], dtype=torch.bool)
        data[DONE] = flags[0:1]
        data[TERMINATED] = flags[1:2]
        data[TRUNCATED] = flags[2:3]
        data[CURRENT_PLAYER] = torch.tensor([player], dtype=torch.int64)
        out = new_unchecked(data, batch_size=self.batch_size)
        if self.return_state:
            out.set_non_tensor(STATE, state.serialize())
        device = self.device
        return out if device is None or device.type == "cpu" else out.to(device)

    # ---------------------------------------------------------------------------------- running
    def _set_seed(self, seed: int | None) -> None:
        # only chance moves are random in OpenSpiel: they are drawn from this generator
        self._rng = np.random.default_rng(seed)

    def _resolve_chance(self, rewards: np.ndarray) -> None:
        """Plays the chance moves until a player acts (or the game ends), adding their rewards."""
        state = self._state
        while state.is_chance_node():
            outcomes, probs = zip(*state.chance_outcomes())
            p = np.asarray(probs, dtype=np.float64)
            state.apply_action(int(outcomes[self._rng.choice(len(outcomes), p=p / p.sum())]))
            rewards += np.asarray(state.rewards(), dtype=np.float32)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        saved = None
        if tensordict is not None and self.return_state:
            # an auto-reset carries the "_reset" masks (and the last state, which must not be
            # restored); a state given by the user comes without them
            marked = any(
                key == RESET or (isinstance(key, tuple) and key[-1] == RESET)
                for key in tensordict.keys(include_nested=True)
            )
            if not marked and STATE in tensordict.keys():
                saved = tensordict.get_non_tensor(STATE)
        if saved is not None:
            if not isinstance(saved, str):
                raise TypeError(
                    f"OpenSpielWrapper.reset: the 'state' entry must be a string from "
                    f"state.serialize(), got {type(saved).__name__}"
                )
            try:
                self._state = self._game.deserialize_state(saved)
            except Exception as err:
                raise ValueError(
                    f"OpenSpielWrapper.reset: the 'state' entry {saved!r} is not a serialized "
                    f"state of the game {self._game.get_type().short_name!r}"
                ) from err
        else:
            self._state = self._initial.clone()
        self._resolve_chance(np.zeros(self._n_players, dtype=np.float32))
        return self._output(None)

    def _player_action(self, tensordict: TensorDictBase, player: int) -> int:
        group, row = self._where[player]
        key = (group.name, ACTION)
        value = tensordict.get(key)[row]
        action = int(value) if self._categorical else int(value.to(torch.int64).argmax(-1))
        legal = self._state.legal_actions(player)
        if action not in legal:
            raise ValueError(
                f"OpenSpielWrapper: the action {action} of player_{player} (entry {key}, row "
                f"{row}) is not legal here; legal actions: {legal} (see {group.name!r}'s "
                f"'action_mask')"
            )
        return action

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        state = self._state
        if state.is_terminal():
            raise RuntimeError(
                "OpenSpielWrapper.step: the game is over (done=True); reset the env first"
            )
        player = int(state.current_player())
        if player == _SIMULTANEOUS:
            actions = [self._player_action(tensordict, p) for p in range(self._n_players)]
            state.apply_actions(actions)
        else:
            state.apply_action(self._player_action(tensordict, player))
        rewards = np.asarray(state.rewards(), dtype=np.float32).copy()
        self._resolve_chance(rewards)
        return self._output(rewards)

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Writes random actions, drawn among the legal ones where the input has action masks.

        Args:
            tensordict: where to write them (a new TensorDict when ``None``).

        Returns:
            ``tensordict`` with one ``(group, "action")`` entry per group.
        """
        tensordict = super().rand_action(tensordict)
        for group in self._groups:
            mask = tensordict.get((group.name, ACTION_MASK), None)
            if mask is not None:
                spec = self.full_action_spec[group.name, ACTION]
                tensordict.set((group.name, ACTION), masked_choice(spec, mask))
        return tensordict

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(game={self._game.get_type().short_name}, "
            f"groups={self.group_map}, device={self.device})"
        )


class OpenSpielEnv(OpenSpielWrapper):
    """Loads an OpenSpiel game by name (``pyspiel.load_game``) and wraps it.

    Keyword arguments that are not the wrapper's are the game's parameters (for example
    ``players=3`` for ``"kuhn_poker"``). ``OpenSpielEnv.available_envs`` lists the game names.

    Args:
        game_string: the game's name, e.g. ``"tic_tac_toe"``, ``"kuhn_poker"``, or a full game
            string with parameters, ``"kuhn_poker(players=3)"``.
        group_map: see :class:`OpenSpielWrapper`.
        categorical_actions: see :class:`OpenSpielWrapper`.
        return_state: see :class:`OpenSpielWrapper`.
        device: see :class:`OpenSpielWrapper`.
        batch_size: see :class:`OpenSpielWrapper`.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: see :class:`OpenSpielWrapper`.
        **kwargs: the game's parameters.

    Examples:
        >>> from torchrl.envs import check_env_specs
        >>> from torchrl.envs.libs.openspiel import OpenSpielEnv
        >>> env = OpenSpielEnv("kuhn_poker", players=3)
        >>> env.set_seed(0) and None
        >>> check_env_specs(env)
        >>> env.group_map
        {'agents': ['player_0', 'player_1', 'player_2']}
        >>> "tic_tac_toe" in OpenSpielEnv.available_envs
        True
    """

    available_envs = ClassProperty(_available_games)

    def __init__(
        self,
        game_string: str,
        *,
        group_map: MarlGroupMapType | Mapping[str, Sequence[str]] | None = None,
        categorical_actions: bool = False,
        return_state: bool = False,
        device: DeviceLike = "cpu",
        batch_size: Sequence[int] | torch.Size | None = None,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
        **kwargs: Any,
    ) -> None:
        pyspiel = _pyspiel()
        if not isinstance(game_string, str):
            raise TypeError(
                f"OpenSpielEnv: game_string must be a game name (str), got "
                f"{type(game_string).__name__}; wrap a pyspiel.Game with OpenSpielWrapper"
            )
        try:
            game = (
                pyspiel.load_game(game_string, kwargs) if kwargs else pyspiel.load_game(game_string)
            )
        except pyspiel.SpielError as err:
            raise ValueError(
                f"OpenSpielEnv: cannot load the game {game_string!r} with parameters {kwargs} "
                f"({err}); see OpenSpielEnv.available_envs"
            ) from err
        super().__init__(
            game,
            group_map=group_map,
            categorical_actions=categorical_actions,
            return_state=return_state,
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self.game_string = game_string
