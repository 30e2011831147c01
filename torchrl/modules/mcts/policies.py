"""Monte Carlo Tree Search policies: plan each move by searching a tree of future states.

One search runs per state of the input batch. A simulation walks down the tree, choosing at
each node the legal child with the best score (an :class:`~torchrl.modules.mcts.MCTSScore`),
expands the first node it reaches that has no statistics yet, evaluates it (random rollouts, a
value network or both), and adds the discounted return to the statistics of every node on the
way back up. The move played is the most visited child of the root.

Two kinds of model branch the tree:

- a real env whose state travels in the TensorDict (``batch_locked=False``, like
  :class:`~torchrl.envs.TicTacToeEnv`): the children of a node are one batched ``env.step`` of
  the node's state expanded over its legal actions. The env is assumed deterministic: a child's
  state is computed once and reused.
- a learned model (:class:`MuZeroPolicy`): representation, dynamics and prediction networks.

Several players are supported: returns are vectors with one entry per player (one per reward
key), and each node adds the entry of the player to move there. A node's player comes from
``turn_key`` (an integer index into the reward keys), or is always ``0`` without one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase

from torchrl._keys import ACTION, DONE, LOGITS, MASK, NEXT, REWARD, STATE_VALUE
from torchrl._types import NestedKey, TensorDictModuleLike
from torchrl.envs._key_paths import key_tuple
from torchrl.envs.utils import step_mdp
from torchrl.modules._spec_utils import exploring, module_keys, spec_kind
from torchrl.modules.mcts.scores import EXP3Score, MCTSScore, PUCTScore, UCBScore

if TYPE_CHECKING:
    from torchrl.data import TensorSpec
    from torchrl.envs.common import EnvBase

__all__ = [
    "AlphaGoPolicy",
    "AlphaStarPolicy",
    "MCTSPolicy",
    "MCTSPolicyBase",
    "MuZeroPolicy",
]


class _Expansion:
    """The children of one node: their states, the transition rewards and done flags.

    ``states`` holds the legal children only (row ``rows[a]`` for action ``a``); ``rewards`` is
    ``[A, P]`` (one column per player), ``done`` and ``legal`` are ``[A]``, ``prior`` ``[A]``.
    """

    __slots__ = ("done", "legal", "prior", "rewards", "rows", "states")

    def __init__(
        self,
        states: TensorDictBase,
        rewards: torch.Tensor,
        done: torch.Tensor,
        legal: torch.Tensor,
        prior: torch.Tensor,
    ) -> None:
        self.states = states
        self.rewards = rewards
        self.done = done
        self.legal = legal
        self.prior = prior
        self.rows = legal.long().cumsum(0) - 1


class _Node:
    """A state of the tree: its player, visit count, children and per-child statistics."""

    __slots__ = ("children", "expansion", "floor", "player", "state", "stats", "visit_count")

    def __init__(self, state: TensorDictBase, player: int) -> None:
        self.state = state
        self.player = player
        self.visit_count = 0
        self.expansion: _Expansion | None = None
        # The returns [P] of the player's best game-ending move, if the node has one.
        self.floor: torch.Tensor | None = None
        self.stats: TensorDictBase | None = None
        self.children: dict[int, _Node] = {}


def _stat_keys(score: MCTSScore) -> dict[str, NestedKey]:
    """Where ``score`` reads each statistic (its own keys, or the documented defaults)."""
    names = {
        "win_count": "win_count",
        "visits": "visits",
        "total_visits": "total_visits",
        "prior_prob": "prior_prob",
        "sum_squared_rewards": "sum_squared_rewards",
        "weights": "weights",
        "num_actions": "num_actions",
        "score": "score",
    }
    return {name: getattr(score, f"{name}_key", default) for name, default in names.items()}


def _num_actions(spec: TensorSpec) -> int:
    kind = spec_kind(spec)
    if kind not in ("categorical", "one_hot"):
        raise TypeError(
            f"MCTS searches over a finite set of actions: the action spec must be Categorical "
            f"or OneHot, got {type(spec).__name__}"
        )
    return int(spec.n)  # type: ignore[attr-defined]


def _player_values(value: torch.Tensor, player: torch.Tensor, num_players: int) -> torch.Tensor:
    """Per-player values ``[..., P]`` from values ``[...]`` seen by ``player`` (zero-sum)."""
    if num_players == 1:
        return value.unsqueeze(-1)
    if num_players != 2:
        raise ValueError(
            f"a scalar value or reward seen by one player splits into per-player values for "
            f"one or two (zero-sum) players only, got {num_players} players"
        )
    first = torch.where(player == 0, value, -value)
    return torch.stack([first, -first], -1)


def _stack_states(nodes: list[_Node]) -> TensorDictBase:
    """The states of ``nodes`` as one batch ``[k]``."""
    return TensorDict.stack([node.state for node in nodes])


def _masked_softmax(logits: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    probs = logits.float().masked_fill(~legal, -torch.inf).softmax(-1)
    return torch.nan_to_num(probs, nan=0.0)


class MCTSPolicyBase(TensorDictModuleBase):
    """Base of the MCTS policies: the tree, selection, backup and the choice of the move.

    A subclass says how to expand a node (:meth:`_expand`: the children's states, rewards, done
    flags, legal moves and priors), how to evaluate a new leaf (:meth:`_evaluate`: one value per
    player) and who plays at a state (:meth:`_player`). A move that ends the game gets one visit
    with its exact return as soon as its node is opened (its statistics count it).

    Args:
        action_spec: the spec of one action (``Categorical`` or ``OneHot``, no batch dims).
        num_players: the length of the return vectors.
        score: the child score (default :class:`~torchrl.modules.mcts.UCBScore`).
        num_simulations: simulations per search.
        simulation_batch_size: simulations whose new leaves are evaluated together, in one
            batched call (rollouts or networks); a pending simulation counts as a lost visit
            ("virtual loss") so that the others of the batch explore elsewhere (default ``1``).
        gamma: discount of the returns along the tree.
        temperature: ``0`` plays the most visited child; ``T > 0`` samples a child with
            probability proportional to ``visits ** (1 / T)``. Sampling and root noise only
            apply while exploring: ``set_exploration_type(ExplorationType.DETERMINISTIC)``
            (or ``MODE``, ...) plays the most visited child without noise.
        dirichlet_alpha: with ``exploration_fraction > 0``, the root priors are mixed with
            ``Dirichlet(dirichlet_alpha)`` noise (AlphaZero's root exploration).
        exploration_fraction: the weight of that noise (default ``0.0``: none).
        normalize_values: rescale each child's mean return to ``[0, 1]`` with the smallest and
            largest means seen in the search before scoring (MuZero's min-max normalisation).
        decisive_moves: a node is worth at least, to its player to move, the exact return of
            that player's best move that ends the game (new leaves are opened to see those
            moves before they are valued, and the returns backed up through a node are raised
            to that floor): a one-move lookahead that never misses an immediate win, nor lets
            the opponent's immediate win go unseen (default ``True``).
        action_key: where the chosen action is written.
        search_policy_key: where the root visit distribution (``[*B, A]``, the improved policy
            AlphaZero trains on) is written; ``None`` writes nothing.
        seed: seed of the search's own generator (ties, sampling); by default drawn from
            torch's global generator, which also draws the root noise.

    Examples:
        >>> import torch
        >>> from torchrl.data import OneHot
        >>> MCTSPolicyBase(action_spec=OneHot(3)).format_actions(torch.tensor(1))
        tensor([False,  True, False])
    """

    def __init__(
        self,
        *,
        action_spec: TensorSpec,
        num_players: int = 1,
        score: MCTSScore | None = None,
        num_simulations: int = 100,
        simulation_batch_size: int = 1,
        gamma: float = 1.0,
        temperature: float = 0.0,
        dirichlet_alpha: float = 0.3,
        exploration_fraction: float = 0.0,
        normalize_values: bool = False,
        decisive_moves: bool = True,
        action_key: NestedKey = ACTION,
        search_policy_key: NestedKey | None = "search_policy",
        seed: int | None = None,
    ) -> None:
        super().__init__()
        if num_simulations < 1:
            raise ValueError(f"num_simulations must be at least 1, got {num_simulations}")
        if simulation_batch_size < 1:
            raise ValueError(
                f"simulation_batch_size must be at least 1, got {simulation_batch_size}"
            )
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.action_spec = action_spec
        self.num_actions = _num_actions(action_spec)
        self.num_players = int(num_players)
        self.score = score if score is not None else UCBScore()
        self.num_simulations = int(num_simulations)
        self.simulation_batch_size = int(simulation_batch_size)
        self.gamma = float(gamma)
        self.temperature = float(temperature)
        self.dirichlet_alpha = float(dirichlet_alpha)
        self.exploration_fraction = float(exploration_fraction)
        self.normalize_values = bool(normalize_values)
        self.decisive_moves = bool(decisive_moves)
        self.action_key = action_key
        self.search_policy_key = search_policy_key
        self._keys = _stat_keys(self.score)
        if seed is None:
            seed = int(torch.randint(0, 2**62, ()))
        self.generator = torch.Generator().manual_seed(seed)
        self._value_bounds = [float("inf"), float("-inf")]
        out = [action_key] if search_policy_key is None else [action_key, search_policy_key]
        self.out_keys = module_keys(out)

    # ----------------------------------------------------------------- what subclasses define
    def _expand(self, node: _Node) -> _Expansion:
        """The children of ``node`` (states of its legal moves, rewards, done, priors)."""
        raise NotImplementedError

    def _evaluate(self, nodes: list[_Node]) -> torch.Tensor:
        """The values ``[k, P]`` (one entry per player) of ``k`` new, non-terminal leaves."""
        raise NotImplementedError

    def _player(self, state: TensorDictBase, parent: _Node | None) -> int:
        """The player to move at ``state`` (a child of ``parent``; ``None`` at the root)."""
        raise NotImplementedError

    def _root_state(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The root's state from one (unbatched) input entry."""
        return tensordict.exclude(NEXT, self.action_key).clone()

    # ------------------------------------------------------------------------------ search
    def search(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Runs ``num_simulations`` simulations from one state; returns the root statistics.

        Args:
            tensordict: one state (batch ``[]``).

        Returns:
            a TensorDict (batch ``[]``) with the root's per-child statistics, ``[A]`` each:
            ``"visits"``, ``"win_count"`` (summed returns of the root's player),
            ``"prior_prob"``, ``"sum_squared_rewards"``, ``"weights"``, the last scores, and
            ``"legal"`` (which children could be played), under the score's key names.
        """
        if tensordict.batch_dims:
            raise ValueError(
                f"{type(self).__name__}.search takes one state (batch []), got batch "
                f"{list(tensordict.batch_size)}; call the policy itself on batches"
            )
        with torch.no_grad():
            return self._search(tensordict)

    def _search(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._value_bounds = [float("inf"), float("-inf")]
        state = self._root_state(tensordict)
        root = _Node(state, self._player(state, None))
        self._open(root, is_root=True)
        assert root.expansion is not None
        if not bool(root.expansion.legal.any()):
            raise ValueError(f"{type(self).__name__}: the state has no legal action")
        done = 0
        while done < self.num_simulations:
            count = min(self.simulation_batch_size, self.num_simulations - done)
            self._simulate_batch(root, count)
            done += count
        assert root.stats is not None and root.expansion is not None
        stats = root.stats
        self._score(root)
        stats.set("legal", root.expansion.legal)
        return stats

    def _open(self, node: _Node, is_root: bool = False) -> None:
        expansion = self._expand(node)
        prior = expansion.prior
        noisy = is_root and self.exploration_fraction > 0 and exploring()
        if noisy and bool(expansion.legal.any()):
            concentration = torch.full((int(expansion.legal.sum()),), self.dirichlet_alpha)
            noise = torch.zeros_like(prior)
            # torch's Dirichlet takes no generator: this noise follows the global one.
            noise[expansion.legal] = torch.distributions.Dirichlet(concentration).sample()
            prior = (1 - self.exploration_fraction) * prior + self.exploration_fraction * noise
            expansion.prior = prior
        zeros = torch.zeros(self.num_actions)
        keys = self._keys
        node.stats = TensorDict(
            {
                keys["win_count"]: zeros.clone(),
                keys["visits"]: zeros.clone(),
                keys["total_visits"]: torch.zeros(()),
                keys["prior_prob"]: prior.float(),
                keys["sum_squared_rewards"]: zeros.clone(),
                keys["weights"]: expansion.legal.float(),
                keys["num_actions"]: torch.tensor(float(expansion.legal.sum().clamp_min(1))),
            },
            batch_size=[],
        )
        node.expansion = expansion
        # Moves that end the game have an exact return, known as soon as the node is opened:
        # count it as one visit now, so that an immediate win (or the opponent's immediate win
        # one level down) is seen at once instead of after a random draw among unvisited moves.
        terminal = (expansion.done & expansion.legal).nonzero().squeeze(-1)
        if terminal.numel():
            all_returns = expansion.rewards[terminal]
            returns = all_returns[:, node.player]
            node.stats.get(keys["visits"])[terminal] += 1
            node.stats.get(keys["win_count"])[terminal] += returns
            node.stats.get(keys["sum_squared_rewards"])[terminal] += returns**2
            if self.decisive_moves:
                node.floor = all_returns[returns.argmax()]

    def _score(self, node: _Node) -> torch.Tensor:
        stats = node.stats
        assert stats is not None
        keys = self._keys
        stats.set(keys["total_visits"], torch.tensor(float(max(node.visit_count, 1))))
        if not self.normalize_values:
            return self.score(stats).get(keys["score"])
        low, high = self._value_bounds
        visits = stats.get(keys["visits"])
        raw = stats.get(keys["win_count"])
        if high > low:
            means = (raw / visits.clamp_min(1) - low) / (high - low)
            stats.set(keys["win_count"], means * visits)
        scores = self.score(stats).get(keys["score"])
        stats.set(keys["win_count"], raw)
        return scores

    def _select(self, node: _Node) -> int:
        assert node.expansion is not None
        legal = node.expansion.legal
        scores = self._score(node).masked_fill(~legal, -torch.inf)
        if self.score.probabilistic:
            weights = scores.clamp_min(0).nan_to_num(0.0) * legal
            if float(weights.sum()) <= 0:
                weights = legal.float()
            return int(torch.multinomial(weights, 1, generator=self.generator))
        best = (scores == scores.max()).nonzero().squeeze(-1)
        if best.numel() == 1:
            return int(best)
        pick = torch.randint(best.numel(), (), generator=self.generator)
        return int(best[pick])

    def _descend(self, root: _Node) -> tuple[list[tuple[_Node, int]], _Node | None]:
        """Walks down from ``root``; returns the path and the leaf to evaluate (``None``: a
        terminal child, whose value is ``0``)."""
        path: list[tuple[_Node, int]] = []
        node = root
        while True:
            if node.expansion is None:
                self._open(node)
            expansion = node.expansion
            assert expansion is not None
            if not bool(expansion.legal.any()):
                # Not done, yet no legal move: the node's own estimate is all there is.
                return path, node
            action = self._select(node)
            path.append((node, action))
            if bool(expansion.done[action]):
                return path, None
            child = node.children.get(action)
            if child is None:
                state = expansion.states[int(expansion.rows[action])]
                child = _Node(state, self._player(state, node))
                node.children[action] = child
                return path, child
            if child.visit_count == 0:
                # Created earlier in this batch and not evaluated yet: share its evaluation.
                return path, child
            node = child

    def _virtual_loss(self, path: list[tuple[_Node, int]], sign: int) -> None:
        # A pending simulation counts as a visit that lost, so that the other simulations of
        # the batch spread over other children; it is taken back before the real backup.
        keys = self._keys
        for node, action in path:
            assert node.stats is not None
            node.stats.get(keys["visits"])[action] += sign
            node.stats.get(keys["win_count"])[action] -= sign
            node.visit_count += sign

    def _decisive_values(self, nodes: list[_Node], values: torch.Tensor) -> torch.Tensor:
        values = values.clone()
        for i, node in enumerate(nodes):
            if node.expansion is None:
                self._open(node)
            values[i] = self._floored(node, values[i])
        return values

    @staticmethod
    def _floored(node: _Node, value: torch.Tensor) -> torch.Tensor:
        # The player to move can always end the game with their best game-ending move: the
        # node is worth at least that exact return to them, whatever the estimate says.
        floor = node.floor
        if floor is not None and floor[node.player] > value[node.player]:
            return floor.clone()
        return value

    def _simulate_batch(self, root: _Node, count: int) -> None:
        pending: list[tuple[list[tuple[_Node, int]], _Node | None]] = []
        for _ in range(count):
            path, leaf = self._descend(root)
            self._virtual_loss(path, +1)
            pending.append((path, leaf))
        leaves: dict[int, _Node] = {}
        for _, leaf in pending:
            if leaf is not None:
                leaves.setdefault(id(leaf), leaf)
        values: dict[int, torch.Tensor] = {}
        if leaves:
            nodes = list(leaves.values())
            evaluated = self._evaluate(nodes)
            if self.decisive_moves:
                evaluated = self._decisive_values(nodes, evaluated)
            values = {key: evaluated[i] for i, key in enumerate(leaves)}
        zero = torch.zeros(self.num_players)
        for path, _ in pending:
            self._virtual_loss(path, -1)
        for path, leaf in pending:
            if leaf is not None and path:
                leaf.visit_count += 1
            self._backup(path, zero if leaf is None else values[id(leaf)])

    def _backup(self, path: list[tuple[_Node, int]], value: torch.Tensor) -> None:
        keys = self._keys
        ret = value.float()
        for node, action in reversed(path):
            assert node.expansion is not None and node.stats is not None
            ret = node.expansion.rewards[action] + self.gamma * ret
            mine = float(ret[node.player])
            stats = node.stats
            stats.get(keys["visits"])[action] += 1
            stats.get(keys["win_count"])[action] += mine
            stats.get(keys["sum_squared_rewards"])[action] += mine * mine
            node.visit_count += 1
            if self.normalize_values:
                mean = float(
                    stats.get(keys["win_count"])[action] / stats.get(keys["visits"])[action]
                )
                self._value_bounds[0] = min(self._value_bounds[0], mean)
                self._value_bounds[1] = max(self._value_bounds[1], mean)
            if isinstance(self.score, EXP3Score):
                # EXP3 wants rewards in [0, 1]: game returns in [-1, 1] are rescaled.
                self.score.update_weights(stats, action, min(max((mine + 1) / 2, 0.0), 1.0))
            if self.decisive_moves:
                ret = self._floored(node, ret)

    # ------------------------------------------------------------------------------ acting
    def _choose(self, stats: TensorDictBase) -> int:
        visits = stats.get(self._keys["visits"])
        legal = stats.get("legal")
        if not bool(legal.any()):
            raise ValueError(f"{type(self).__name__}: the state has no legal action")
        if self.temperature > 0 and exploring():
            weights = visits.clamp_min(0) ** (1.0 / self.temperature) * legal
            if float(weights.sum()) <= 0:
                weights = legal.float()
            return int(torch.multinomial(weights, 1, generator=self.generator))
        counts = visits.masked_fill(~legal, -1.0)
        best = (counts == counts.max()).nonzero().squeeze(-1)
        if best.numel() > 1:
            # Equal visits: prefer the better mean return.
            means = stats.get(self._keys["win_count"])[best] / counts[best].clamp_min(1)
            best = best[means == means.max()]
        pick = torch.randint(best.numel(), (), generator=self.generator)
        return int(best[pick])

    def format_actions(self, indices: torch.Tensor) -> torch.Tensor:
        """Actions in the format of ``action_spec`` from action indices ``[*B]``.

        Args:
            indices: integer action indices, any shape ``[*B]``.

        Returns:
            ``[*B, n]`` one-hot actions for a ``OneHot`` spec, ``[*B, *shape]`` indices for a
            ``Categorical`` one (``shape`` is ``()`` or ``(1,)``).
        """
        spec = self.action_spec
        if spec_kind(spec) == "one_hot":
            return torch.nn.functional.one_hot(indices.long(), self.num_actions).to(spec.dtype)
        return indices.reshape(*indices.shape, *spec.shape).to(spec.dtype)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Searches from every state of the batch; writes the chosen actions (and visits)."""
        batch = tensordict.batch_size
        flat = tensordict.reshape(-1) if len(batch) else tensordict.unsqueeze(0)
        chosen = []
        distributions = []
        with torch.no_grad():
            for i in range(flat.shape[0]):
                stats = self.search(flat[i])
                chosen.append(self._choose(stats))
                visits = stats.get(self._keys["visits"])
                distributions.append(visits / visits.sum().clamp_min(1))
        indices = torch.tensor(chosen, dtype=torch.long).reshape(batch)
        tensordict.set(self.action_key, self.format_actions(indices))
        if self.search_policy_key is not None:
            tensordict.set(self.search_policy_key, torch.stack(distributions).reshape(*batch, -1))
        return tensordict


class _EnvModel:
    """Branches and rolls out a stateless env: batched ``env.step`` calls over child states."""

    def __init__(
        self,
        env: EnvBase,
        action_key: NestedKey,
        action_mask_key: NestedKey | None,
        turn_key: NestedKey | None,
        reward_keys: Sequence[NestedKey] | None,
        owner: str,
    ) -> None:
        if env.batch_locked:
            raise ValueError(
                f"{owner} branches the env from stored states: it needs an env whose state "
                f"travels in the TensorDict and that accepts any batch size "
                f"(batch_locked=False), such as TicTacToeEnv; got a batch-locked "
                f"{type(env).__name__}"
            )
        self.env = env
        self.action_key = action_key
        self.action_mask_key = action_mask_key
        self.turn_key = turn_key
        self.reward_keys = list(env.reward_keys if reward_keys is None else reward_keys)
        self.done_keys = [k for k in env.done_keys if (k if isinstance(k, str) else k[-1]) == DONE]
        spec = env.full_action_spec[action_key]
        self.action_spec = spec[(0,) * len(env.batch_size)] if len(env.batch_size) else spec
        self.num_actions = _num_actions(self.action_spec)

    def legal(self, state: TensorDictBase) -> torch.Tensor:
        mask = None if self.action_mask_key is None else state.get(self.action_mask_key, None)
        if mask is None:
            return torch.ones(self.num_actions, dtype=torch.bool)
        return mask.reshape(-1, self.num_actions).all(0).bool().cpu()

    def player(self, state: TensorDictBase) -> int:
        if self.turn_key is None:
            return 0
        return int(state.get(self.turn_key).reshape(-1)[0])

    def rewards(self, stepped: TensorDictBase) -> torch.Tensor:
        n = stepped.batch_size[0]
        columns = [
            stepped.get((NEXT, *key_tuple(k))).reshape(n, -1).sum(-1) for k in self.reward_keys
        ]
        return torch.stack(columns, -1).float().cpu()

    def done(self, stepped: TensorDictBase) -> torch.Tensor:
        n = stepped.batch_size[0]
        flags = [stepped.get((NEXT, *key_tuple(k))).reshape(n, -1).any(-1) for k in self.done_keys]
        return torch.stack(flags, -1).any(-1).cpu()

    def next_states(self, stepped: TensorDictBase) -> TensorDictBase:
        return step_mdp(
            stepped,
            reward_keys=self.reward_keys,
            action_keys=[self.action_key],
            exclude_done=False,
        )

    def step_actions(
        self, state: TensorDictBase, actions: torch.Tensor, format_actions: Callable
    ) -> TensorDictBase:
        batch = state.expand(actions.shape[0]).clone()
        batch.set(self.action_key, format_actions(actions).to(state.device))
        return self.env.step(batch)

    def expand(
        self, node: _Node, prior_fn: Callable[[TensorDictBase, torch.Tensor], torch.Tensor], fmt
    ) -> _Expansion:
        legal = self.legal(node.state)
        num_players = len(self.reward_keys)
        rewards = torch.zeros(self.num_actions, num_players)
        done = torch.zeros(self.num_actions, dtype=torch.bool)
        actions = legal.nonzero().squeeze(-1)
        if actions.numel():
            stepped = self.step_actions(node.state, actions, fmt)
            rewards[actions] = self.rewards(stepped)
            done[actions] = self.done(stepped)
            states = self.next_states(stepped)
        else:
            states = node.state.expand(0).clone()
        return _Expansion(states, rewards, done, legal, prior_fn(node.state, legal))

    def rollout(
        self,
        states: TensorDictBase,
        policy: TensorDictModuleLike,
        num_rollouts: int,
        max_steps: int,
        gamma: float,
    ) -> torch.Tensor:
        """Mean discounted returns ``[k, P]`` of ``num_rollouts`` rollouts from each state.

        All ``k * num_rollouts`` games run as one batch; finished games leave it.
        """
        k = states.batch_size[0]
        td = states.unsqueeze(1).expand(k, num_rollouts).reshape(k * num_rollouts).clone()
        returns = torch.zeros(k * num_rollouts, len(self.reward_keys))
        alive = torch.arange(k * num_rollouts)
        discount = 1.0
        for _ in range(max_steps):
            td = policy(td)
            stepped = self.env.step(td)
            returns[alive] += discount * self.rewards(stepped)
            going = ~self.done(stepped)
            if not bool(going.any()):
                break
            td = self.next_states(stepped)
            if not bool(going.all()):
                # Finished games leave the batch: stepping them again could be illegal.
                td = td[going.to(td.device)]
                alive = alive[going]
            discount *= gamma
        return returns.reshape(k, num_rollouts, -1).mean(1)


class MCTSPolicy(MCTSPolicyBase):
    """Plain MCTS through a stateless env: uniform priors, leaves valued by random rollouts.

    Each simulation descends by ``score`` (UCB1 by default), opens the first new state it reaches
    and values it by ``num_rollouts`` batched rollouts of ``rollout_policy`` (the env's random
    legal actions by default) until the games end or ``max_rollout_steps``. Two-player games
    (and more) say who moves with ``turn_key``; each player's return is its own reward key.

    Args:
        env: a stateless env that accepts any batch size (``batch_locked=False``) with a
            ``Categorical`` or ``OneHot`` action, e.g. :class:`~torchrl.envs.TicTacToeEnv`.
        num_simulations: simulations per move (default ``100``).
        simulation_batch_size: new leaves rolled out together, as one batch (default ``8``;
            see :class:`MCTSPolicyBase`).
        score: the child score (default ``UCBScore(c=0.7)``).
        rollout_policy: plays the rollouts (default ``env.rand_action``).
        num_rollouts: rollouts per new leaf, run as one batch (default ``1``).
        max_rollout_steps: rollout length cap (default ``100``).
        gamma: discount (default ``1.0``).
        temperature: ``0`` plays the most visited move, ``T > 0`` samples by ``visits ** (1/T)``.
        action_key: the action entry.
        action_mask_key: a boolean entry ``[A]`` of legal actions (default ``"mask"``; all
            actions are legal when a state has none).
        turn_key: an integer entry naming the player to move (an index into ``reward_keys``);
            ``None``: a single player.
        reward_keys: one reward entry per player (default ``env.reward_keys``).
        search_policy_key: where the root visit distribution is written (``None``: nowhere).
        seed: seed of the search's generator.

    Examples:
        >>> import torch
        >>> from torchrl.envs import TicTacToeEnv
        >>> env = TicTacToeEnv(seed=0)
        >>> policy = MCTSPolicy(env, num_simulations=50, turn_key="turn", seed=0)
        >>> td = env.reset()
        >>> for cell in (0, 3, 1, 4):  # player0 threatens the top row; player0 to move
        ...     td["action"] = torch.tensor([cell])
        ...     td = env.step(td)["next"]
        >>> policy(td)["action"]
        tensor([2])
    """

    def __init__(
        self,
        env: EnvBase,
        *,
        num_simulations: int = 100,
        simulation_batch_size: int = 8,
        score: MCTSScore | None = None,
        rollout_policy: TensorDictModuleLike | None = None,
        num_rollouts: int = 1,
        max_rollout_steps: int = 100,
        gamma: float = 1.0,
        temperature: float = 0.0,
        action_key: NestedKey = ACTION,
        action_mask_key: NestedKey | None = MASK,
        turn_key: NestedKey | None = None,
        reward_keys: Sequence[NestedKey] | None = None,
        search_policy_key: NestedKey | None = "search_policy",
        seed: int | None = None,
    ) -> None:
        model = _EnvModel(env, action_key, action_mask_key, turn_key, reward_keys, "MCTSPolicy")
        super().__init__(
            action_spec=model.action_spec,
            num_players=len(model.reward_keys),
            # With UCB's sqrt(N) / (1 + n) bonus and returns in [-1, 1], the usual sqrt(2)
            # explores too much to see (and block) threats on a budget of tens of simulations.
            score=score if score is not None else UCBScore(c=0.7),
            num_simulations=num_simulations,
            simulation_batch_size=simulation_batch_size,
            gamma=gamma,
            temperature=temperature,
            action_key=action_key,
            search_policy_key=search_policy_key,
            seed=seed,
        )
        if num_rollouts < 1:
            raise ValueError(f"num_rollouts must be at least 1, got {num_rollouts}")
        self.env = env
        self._model = model
        self.rollout_policy = rollout_policy if rollout_policy is not None else env.rand_action
        self.num_rollouts = int(num_rollouts)
        self.max_rollout_steps = int(max_rollout_steps)
        self.in_keys = module_keys(env.observation_spec.keys(True, True))

    def _expand(self, node: _Node) -> _Expansion:
        def uniform(state: TensorDictBase, legal: torch.Tensor) -> torch.Tensor:
            return legal.float() / legal.sum().clamp_min(1)

        return self._model.expand(node, uniform, self.format_actions)

    def _evaluate(self, nodes: list[_Node]) -> torch.Tensor:
        states = _stack_states(nodes)
        return self._model.rollout(
            states, self.rollout_policy, self.num_rollouts, self.max_rollout_steps, self.gamma
        )

    def _player(self, state: TensorDictBase, parent: _Node | None) -> int:
        return self._model.player(state)


class _NetworkPrior:
    """Masked softmax of a network's logits: the priors of a node's children."""

    def __init__(self, network: TensorDictModuleLike, logits_key: NestedKey) -> None:
        self.network = network
        self.logits_key = logits_key

    def __call__(self, state: TensorDictBase, legal: torch.Tensor) -> torch.Tensor:
        out = self.network(state.clone(False))
        logits = out.get(self.logits_key).reshape(-1)
        return _masked_softmax(logits.cpu(), legal)


class _PriorSampler:
    """A rollout policy that samples legal actions from a network's masked softmax."""

    def __init__(self, prior: _NetworkPrior, model: _EnvModel, fmt: Callable) -> None:
        self.prior = prior
        self.model = model
        self.fmt = fmt

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = self.prior.network(tensordict.clone(False))
        n = tensordict.batch_size[0]
        logits = out.get(self.prior.logits_key).reshape(n, -1).cpu()
        mask_key = self.model.action_mask_key
        mask = None if mask_key is None else tensordict.get(mask_key, None)
        legal = torch.ones_like(logits, dtype=torch.bool) if mask is None else mask.reshape(n, -1)
        probs = _masked_softmax(logits, legal.cpu())
        indices = torch.multinomial(probs, 1).squeeze(-1)
        tensordict.set(self.model.action_key, self.fmt(indices).to(tensordict.device))
        return tensordict


class AlphaGoPolicy(MCTSPolicyBase):
    """AlphaGo-style search: PUCT with network priors, leaves valued by a network and rollouts.

    A policy network gives the prior of each child (a softmax of its logits over the legal
    moves). A new leaf is valued by ``(1 - lmbda) * v + lmbda * z``: ``v`` from the value
    network (for the player to move at the leaf), ``z`` the mean return of random rollouts, as
    AlphaGo mixed its value network with fast rollouts. ``lmbda=0`` drops the rollouts (AlphaZero);
    without a value network, ``lmbda`` is ``1``. Values and rewards are zero-sum between two
    players (or belong to the only one).

    Args:
        env: a stateless env (``batch_locked=False``) with a discrete action.
        prior_network: maps a state (batch ``[]``) to ``logits`` (``[A]``) at ``prior_key``.
        value_network: maps a state to a scalar ``state_value`` at ``value_key`` (for the player
            to move), or ``None``.
        num_simulations: simulations per move.
        simulation_batch_size: new leaves valued together (default ``8``).
        c: PUCT exploration constant (ignored when ``score`` is given).
        lmbda: weight of the rollouts in a leaf's value (default ``0.5``).
        score: the child score (default ``PUCTScore(c)``).
        rollout_policy: plays the rollouts (default ``env.rand_action``).
        num_rollouts, max_rollout_steps, gamma, temperature: as :class:`MCTSPolicy`.
        dirichlet_alpha, exploration_fraction: root noise, as :class:`MCTSPolicyBase`.
        action_key, action_mask_key, turn_key, reward_keys, search_policy_key, seed: as
            :class:`MCTSPolicy`.
        prior_key: the logits entry of ``prior_network``'s output (default ``"logits"``).
        value_key: the value entry of ``value_network``'s output (default ``"state_value"``).

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.envs import TicTacToeEnv
        >>> env = TicTacToeEnv(seed=0)
        >>> prior = TensorDictModule(
        ...     lambda board: torch.zeros(9), in_keys=["board"], out_keys=["logits"]
        ... )
        >>> policy = AlphaGoPolicy(env, prior, num_simulations=20, turn_key="turn", seed=0)
        >>> policy(env.reset())["search_policy"].shape
        torch.Size([9])
    """

    def __init__(
        self,
        env: EnvBase,
        prior_network: TensorDictModuleLike,
        value_network: TensorDictModuleLike | None = None,
        *,
        num_simulations: int = 100,
        simulation_batch_size: int = 8,
        c: float = 1.0,
        lmbda: float = 0.5,
        score: MCTSScore | None = None,
        rollout_policy: TensorDictModuleLike | None = None,
        num_rollouts: int = 1,
        max_rollout_steps: int = 100,
        gamma: float = 1.0,
        temperature: float = 0.0,
        dirichlet_alpha: float = 0.3,
        exploration_fraction: float = 0.0,
        action_key: NestedKey = ACTION,
        action_mask_key: NestedKey | None = MASK,
        turn_key: NestedKey | None = None,
        reward_keys: Sequence[NestedKey] | None = None,
        search_policy_key: NestedKey | None = "search_policy",
        prior_key: NestedKey = LOGITS,
        value_key: NestedKey = STATE_VALUE,
        seed: int | None = None,
    ) -> None:
        model = _EnvModel(env, action_key, action_mask_key, turn_key, reward_keys, "AlphaGoPolicy")
        super().__init__(
            action_spec=model.action_spec,
            num_players=len(model.reward_keys),
            score=score if score is not None else PUCTScore(c),
            num_simulations=num_simulations,
            simulation_batch_size=simulation_batch_size,
            gamma=gamma,
            temperature=temperature,
            dirichlet_alpha=dirichlet_alpha,
            exploration_fraction=exploration_fraction,
            action_key=action_key,
            search_policy_key=search_policy_key,
            seed=seed,
        )
        if not 0.0 <= lmbda <= 1.0:
            raise ValueError(f"lmbda must be in [0, 1], got {lmbda}")
        if value_network is not None and self.num_players > 2:
            raise ValueError("a value network serves one player or two zero-sum players")
        self.env = env
        self._model = model
        self.prior_network = prior_network
        self.value_network = value_network
        self.lmbda = 1.0 if value_network is None else float(lmbda)
        self.value_key = value_key
        self._prior = _NetworkPrior(prior_network, prior_key)
        self.rollout_policy = rollout_policy if rollout_policy is not None else env.rand_action
        self.num_rollouts = int(num_rollouts)
        self.max_rollout_steps = int(max_rollout_steps)
        self.in_keys = module_keys(env.observation_spec.keys(True, True))

    def _expand(self, node: _Node) -> _Expansion:
        return self._model.expand(node, self._prior, self.format_actions)

    def _evaluate(self, nodes: list[_Node]) -> torch.Tensor:
        states = _stack_states(nodes)
        value = torch.zeros(len(nodes), self.num_players)
        if self.value_network is not None and self.lmbda < 1:
            out = self.value_network(states.clone(False))
            v = out.get(self.value_key).reshape(len(nodes)).float().cpu()
            players = torch.tensor([node.player for node in nodes])
            value = (1 - self.lmbda) * _player_values(v, players, self.num_players)
        if self.lmbda > 0:
            z = self._model.rollout(
                states,
                self.rollout_policy,
                self.num_rollouts,
                self.max_rollout_steps,
                self.gamma,
            )
            value = value + self.lmbda * z
        return value

    def _player(self, state: TensorDictBase, parent: _Node | None) -> int:
        return self._model.player(state)


class AlphaStarPolicy(MCTSPolicyBase):
    """Search guided by one policy network only: its priors, its own rollouts, sampled moves.

    TorchRL documents no search for AlphaStar (whose agent acts with its policy network alone);
    this policy puts such a network inside a search, without a value network: children get
    the network's priors (PUCT, with Dirichlet noise at the root by default), new leaves are
    valued by rollouts that sample moves from the same network, and the move played is sampled
    from the root visit counts at ``temperature`` (default ``1.0``: exploratory self-play data,
    as for league training). ``temperature=0`` plays the most visited move.

    Args:
        env: a stateless env (``batch_locked=False``) with a discrete action.
        policy_network: maps states (batch ``[]`` or ``[n]``) to ``logits`` (``[..., A]``).
        num_simulations: simulations per move.
        simulation_batch_size: new leaves valued together (default ``8``).
        c: PUCT exploration constant (ignored when ``score`` is given).
        score: the child score (default ``PUCTScore(c)``).
        num_rollouts, max_rollout_steps, gamma: as :class:`MCTSPolicy`.
        temperature: see above (default ``1.0``).
        dirichlet_alpha: root noise concentration (default ``0.3``).
        exploration_fraction: root noise weight (default ``0.25``).
        action_key, action_mask_key, turn_key, reward_keys, search_policy_key, seed: as
            :class:`MCTSPolicy`.
        prior_key: the logits entry of the network's output (default ``"logits"``).

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.envs import TicTacToeEnv
        >>> env = TicTacToeEnv(seed=0)
        >>> net = TensorDictModule(
        ...     lambda mask: torch.zeros(mask.shape), in_keys=["mask"], out_keys=["logits"]
        ... )
        >>> policy = AlphaStarPolicy(env, net, num_simulations=20, turn_key="turn", seed=0)
        >>> bool(env.reset()["mask"][policy(env.reset())["action"]])
        True
    """

    def __init__(
        self,
        env: EnvBase,
        policy_network: TensorDictModuleLike,
        *,
        num_simulations: int = 100,
        simulation_batch_size: int = 8,
        c: float = 1.0,
        score: MCTSScore | None = None,
        num_rollouts: int = 1,
        max_rollout_steps: int = 100,
        gamma: float = 1.0,
        temperature: float = 1.0,
        dirichlet_alpha: float = 0.3,
        exploration_fraction: float = 0.25,
        action_key: NestedKey = ACTION,
        action_mask_key: NestedKey | None = MASK,
        turn_key: NestedKey | None = None,
        reward_keys: Sequence[NestedKey] | None = None,
        search_policy_key: NestedKey | None = "search_policy",
        prior_key: NestedKey = LOGITS,
        seed: int | None = None,
    ) -> None:
        model = _EnvModel(
            env, action_key, action_mask_key, turn_key, reward_keys, "AlphaStarPolicy"
        )
        super().__init__(
            action_spec=model.action_spec,
            num_players=len(model.reward_keys),
            score=score if score is not None else PUCTScore(c),
            num_simulations=num_simulations,
            simulation_batch_size=simulation_batch_size,
            gamma=gamma,
            temperature=temperature,
            dirichlet_alpha=dirichlet_alpha,
            exploration_fraction=exploration_fraction,
            action_key=action_key,
            search_policy_key=search_policy_key,
            seed=seed,
        )
        self.env = env
        self._model = model
        self.policy_network = policy_network
        self._prior = _NetworkPrior(policy_network, prior_key)
        self._sampler = _PriorSampler(self._prior, model, self.format_actions)
        self.num_rollouts = int(num_rollouts)
        self.max_rollout_steps = int(max_rollout_steps)
        self.in_keys = module_keys(env.observation_spec.keys(True, True))

    def _expand(self, node: _Node) -> _Expansion:
        return self._model.expand(node, self._prior, self.format_actions)

    def _evaluate(self, nodes: list[_Node]) -> torch.Tensor:
        states = _stack_states(nodes)
        return self._model.rollout(
            states, self._sampler, self.num_rollouts, self.max_rollout_steps, self.gamma
        )

    def _player(self, state: TensorDictBase, parent: _Node | None) -> int:
        return self._model.player(state)


class MuZeroPolicy(MCTSPolicyBase):
    """MuZero-style search in a learned model (no env): representation, dynamics, prediction.

    ``representation_network`` maps an observation to a latent state; ``dynamics_network`` maps
    a batch ``[A]`` of latent states and actions (all moves of a node, formatted by
    ``action_spec``) to the next latent states (same keys) and ``reward_key``;
    ``prediction_network`` maps latent states to ``prior_key`` logits and ``value_key``.
    Children are scored by PUCT on min-max normalised mean returns, as in MuZero. Legal moves
    come from ``action_mask_key``: in the observation at the root, in the dynamics output
    deeper (all moves when absent); a ``done_key`` in the dynamics output ends a branch. With
    ``num_players=2`` the players alternate, and rewards and values (seen by the player who
    moved, resp. the player to move) count negatively for the other one.

    Args:
        representation_network, dynamics_network, prediction_network: the learned model.
        action_spec: the spec of one action (``Categorical`` or ``OneHot``).
        num_simulations: simulations per move (default ``50``).
        simulation_batch_size: new latent states valued by one prediction call (default ``8``).
        c: PUCT exploration constant (default ``1.25``; ignored when ``score`` is given).
        score: the child score (default ``PUCTScore(c)``).
        num_players: ``1`` or ``2`` (alternating, zero-sum).
        gamma: discount (default ``0.997``).
        temperature, dirichlet_alpha, exploration_fraction: as :class:`MCTSPolicyBase`.
        action_key, action_mask_key: the action entry and the legal-move entry.
        turn_key: with two players, an observation entry naming the player to move at the root.
        reward_key, done_key: entries of the dynamics output.
        prior_key, value_key: entries of the prediction output.
        search_policy_key, seed: as :class:`MCTSPolicyBase`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule as Mod
        >>> from torchrl.data import Categorical
        >>> represent = Mod(lambda x: x.float(), ["observation"], ["latent"])
        >>> dynamics = Mod(lambda z, a: (z, a.float()), ["latent", "action"], ["latent", "reward"])
        >>> predict = Mod(
        ...     lambda z: (z * 0 + torch.zeros(2), z * 0), ["latent"], ["logits", "state_value"]
        ... )
        >>> policy = MuZeroPolicy(
        ...     represent, dynamics, predict, action_spec=Categorical(2, shape=(1,)), seed=0
        ... )
        >>> policy(TensorDict(observation=torch.zeros(1)))["action"]  # action 1 pays 1
        tensor([1])
    """

    def __init__(
        self,
        representation_network: TensorDictModuleLike,
        dynamics_network: TensorDictModuleLike,
        prediction_network: TensorDictModuleLike,
        *,
        action_spec: TensorSpec,
        num_simulations: int = 50,
        simulation_batch_size: int = 8,
        c: float = 1.25,
        score: MCTSScore | None = None,
        num_players: int = 1,
        gamma: float = 0.997,
        temperature: float = 0.0,
        dirichlet_alpha: float = 0.3,
        exploration_fraction: float = 0.0,
        action_key: NestedKey = ACTION,
        action_mask_key: NestedKey | None = MASK,
        turn_key: NestedKey | None = None,
        reward_key: NestedKey = REWARD,
        done_key: NestedKey = DONE,
        prior_key: NestedKey = LOGITS,
        value_key: NestedKey = STATE_VALUE,
        search_policy_key: NestedKey | None = "search_policy",
        seed: int | None = None,
    ) -> None:
        if num_players not in (1, 2):
            raise ValueError(f"MuZeroPolicy: num_players must be 1 or 2, got {num_players}")
        super().__init__(
            action_spec=action_spec,
            num_players=num_players,
            score=score if score is not None else PUCTScore(c),
            num_simulations=num_simulations,
            simulation_batch_size=simulation_batch_size,
            gamma=gamma,
            temperature=temperature,
            dirichlet_alpha=dirichlet_alpha,
            exploration_fraction=exploration_fraction,
            normalize_values=True,
            decisive_moves=False,
            action_key=action_key,
            search_policy_key=search_policy_key,
            seed=seed,
        )
        self.representation_network = representation_network
        self.dynamics_network = dynamics_network
        self.prediction_network = prediction_network
        self.action_mask_key = action_mask_key
        self.turn_key = turn_key
        self.reward_key = reward_key
        self.done_key = done_key
        self.prior_key = prior_key
        self.value_key = value_key
        self.in_keys = module_keys(getattr(representation_network, "in_keys", []))
        # The latest prediction of each latent state, keyed by node: an open node needs its
        # priors, a new leaf its value; one prediction call serves both.
        self._predictions: dict[int, TensorDictBase] = {}

    def _root_state(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._predictions = {}
        observation = tensordict.exclude(NEXT, self.action_key).clone()
        latent = self.representation_network(observation.clone(False))
        return latent

    def _predict(self, node: _Node) -> TensorDictBase:
        cached = self._predictions.get(id(node))
        if cached is None:
            cached = self.prediction_network(node.state.clone(False))
            self._predictions[id(node)] = cached
        return cached

    def _legal(self, state: TensorDictBase) -> torch.Tensor:
        mask = None if self.action_mask_key is None else state.get(self.action_mask_key, None)
        if mask is None:
            return torch.ones(self.num_actions, dtype=torch.bool)
        return mask.reshape(self.num_actions).bool().cpu()

    def _expand(self, node: _Node) -> _Expansion:
        legal = self._legal(node.state)
        logits = self._predict(node).get(self.prior_key).reshape(-1).cpu()
        prior = _masked_softmax(logits, legal)
        actions = torch.arange(self.num_actions)
        batch = node.state.expand(self.num_actions).clone()
        batch.set(self.action_key, self.format_actions(actions).to(node.state.device))
        out = self.dynamics_network(batch)
        reward = out.get(self.reward_key).reshape(self.num_actions).float().cpu()
        player = torch.full((self.num_actions,), node.player)
        rewards = _player_values(reward, player, self.num_players)
        done_flags = out.get(self.done_key, None)
        if done_flags is None:
            done = torch.zeros(self.num_actions, dtype=torch.bool)
        else:
            done = done_flags.reshape(self.num_actions, -1).any(-1).cpu()
        written = getattr(self.dynamics_network, "out_keys", None)
        if written is not None:
            # Only what the dynamics wrote describes the child (not the parent's mask).
            states = out.select(*written, strict=False)
        else:
            states = out.exclude(self.action_key)
        states = states.exclude(self.reward_key, self.done_key)
        return _Expansion(states[legal.to(states.device)], rewards, done, legal, prior)

    def _evaluate(self, nodes: list[_Node]) -> torch.Tensor:
        missing = [node for node in nodes if id(node) not in self._predictions]
        if missing:
            out = self.prediction_network(_stack_states(missing))
            for i, node in enumerate(missing):
                self._predictions[id(node)] = out[i]
        values = [self._predictions[id(node)].get(self.value_key).reshape(()) for node in nodes]
        players = torch.tensor([node.player for node in nodes])
        return _player_values(torch.stack(values).float().cpu(), players, self.num_players)

    def _player(self, state: TensorDictBase, parent: _Node | None) -> int:
        if parent is not None:
            return (parent.player + 1) % self.num_players
        if self.turn_key is None or self.num_players == 1:
            return 0
        turn = state.get(self.turn_key, None)
        return 0 if turn is None else int(turn.reshape(-1)[0])
