"""Scores of the children of an MCTS node: which action the tree search should try next.

A score module reads the per-child statistics of one node (or a batch of nodes) from a
TensorDict (visit counts, summed returns, priors, EXP3 weights) and writes one score per child
under ``score_key``. The statistics have a trailing action dim ``[..., num_actions]``; the parent's
visit count (``total_visits``) is a scalar or a tensor that broadcasts against them.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from torchrl._types import NestedKey
from torchrl.modules._spec_utils import module_keys

__all__ = [
    "EXP3Score",
    "MCTSScore",
    "MCTSScores",
    "PUCTScore",
    "UCB1TunedScore",
    "UCBScore",
]


def _float(tensor: torch.Tensor) -> torch.Tensor:
    return tensor if tensor.is_floating_point() else tensor.to(torch.get_default_dtype())


def _per_node(total: torch.Tensor, visits: torch.Tensor) -> torch.Tensor:
    """``total`` (``[]``, ``[...]`` or ``[..., 1]``) made to broadcast against ``[..., A]``."""
    total = _float(total)
    if total.ndim and total.ndim == visits.ndim - 1:
        total = total.unsqueeze(-1)
    return total


def _mean(win_count: torch.Tensor, visits: torch.Tensor) -> torch.Tensor:
    # Unvisited children count as a mean of 0 instead of 0 / 0.
    return _float(win_count) / _float(visits).clamp_min(1.0)


class MCTSScore(TensorDictModuleBase):
    """Base of the MCTS scores: ``forward`` writes one score per child of a node.

    Subclasses set ``in_keys``/``out_keys`` and implement :meth:`forward`. The search picks the
    legal child with the highest score, or samples one with probability proportional to the score
    when :attr:`probabilistic` is ``True`` (scores that are selection probabilities, like EXP3's).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> class Greedy(MCTSScore):
        ...     in_keys = ["win_count"]
        ...     out_keys = ["score"]
        ...     def forward(self, node):
        ...         return node.set("score", node["win_count"].float())
        >>> Greedy()(TensorDict(win_count=torch.tensor([1, 3])))["score"]
        tensor([1., 3.])
    """

    #: ``True`` for scores that are selection probabilities (sampled, not maximised).
    probabilistic: bool = False

    def forward(self, node: TensorDictBase) -> TensorDictBase:
        """Writes the scores of the children of ``node`` and returns it."""
        raise NotImplementedError(f"{type(self).__name__} must implement forward")


class UCBScore(MCTSScore):
    """UCB1 score: mean return plus an exploration bonus that shrinks with the child's visits.

    ``score = win_count / visits + c * sqrt(total_visits) / (1 + visits)``; the mean term is ``0``
    for a child never visited.

    Args:
        c: the exploration constant (default ``sqrt(2)``).
        win_count_key: summed returns (or wins) of each child, ``[..., A]``.
        visits_key: visit count of each child, ``[..., A]``.
        total_visits_key: visit count ``N`` of the parent, scalar or broadcastable.
        score_key: where the scores (``[..., A]``) are written.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> node = TensorDict(
        ...     win_count=torch.tensor([3.0, 0.0]),
        ...     visits=torch.tensor([3.0, 1.0]),
        ...     total_visits=torch.tensor(4.0),
        ... )
        >>> UCBScore(c=1.0)(node)["score"]
        tensor([1.5000, 1.0000])
    """

    def __init__(
        self,
        c: float = math.sqrt(2.0),
        *,
        win_count_key: NestedKey = "win_count",
        visits_key: NestedKey = "visits",
        total_visits_key: NestedKey = "total_visits",
        score_key: NestedKey = "score",
    ) -> None:
        super().__init__()
        self.c = float(c)
        self.win_count_key = win_count_key
        self.visits_key = visits_key
        self.total_visits_key = total_visits_key
        self.score_key = score_key
        self.in_keys = module_keys([win_count_key, visits_key, total_visits_key])
        self.out_keys = module_keys([score_key])

    def forward(self, node: TensorDictBase) -> TensorDictBase:
        visits = _float(node.get(self.visits_key))
        total = _per_node(node.get(self.total_visits_key), visits)
        mean = _mean(node.get(self.win_count_key), visits)
        node.set(self.score_key, mean + self.c * total.sqrt() / (1.0 + visits))
        return node


class PUCTScore(MCTSScore):
    """PUCT score (AlphaGo, AlphaZero): UCB whose exploration bonus is weighted by a prior.

    ``score = win_count / visits + c * prior_prob * sqrt(total_visits) / (1 + visits)``; the mean
    term is ``0`` for a child never visited.

    Args:
        c: the exploration constant (default ``1.0``).
        win_count_key: summed returns of each child, ``[..., A]``.
        visits_key: visit count of each child, ``[..., A]``.
        total_visits_key: visit count ``N`` of the parent, scalar or broadcastable.
        prior_prob_key: prior probability of each child (from a policy network), ``[..., A]``.
        score_key: where the scores (``[..., A]``) are written.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> node = TensorDict(
        ...     win_count=torch.tensor([1.0, 0.0]),
        ...     visits=torch.tensor([1.0, 0.0]),
        ...     total_visits=torch.tensor(4.0),
        ...     prior_prob=torch.tensor([0.25, 0.75]),
        ... )
        >>> PUCTScore(c=2.0)(node)["score"]
        tensor([1.5000, 3.0000])
    """

    def __init__(
        self,
        c: float = 1.0,
        *,
        win_count_key: NestedKey = "win_count",
        visits_key: NestedKey = "visits",
        total_visits_key: NestedKey = "total_visits",
        prior_prob_key: NestedKey = "prior_prob",
        score_key: NestedKey = "score",
    ) -> None:
        super().__init__()
        self.c = float(c)
        self.win_count_key = win_count_key
        self.visits_key = visits_key
        self.total_visits_key = total_visits_key
        self.prior_prob_key = prior_prob_key
        self.score_key = score_key
        self.in_keys = module_keys([win_count_key, visits_key, total_visits_key, prior_prob_key])
        self.out_keys = module_keys([score_key])

    def forward(self, node: TensorDictBase) -> TensorDictBase:
        visits = _float(node.get(self.visits_key))
        total = _per_node(node.get(self.total_visits_key), visits)
        mean = _mean(node.get(self.win_count_key), visits)
        prior = _float(node.get(self.prior_prob_key))
        node.set(self.score_key, mean + self.c * prior * total.sqrt() / (1.0 + visits))
        return node


class UCB1TunedScore(MCTSScore):
    """UCB1-Tuned score (Auer et al., 2002): UCB with a bonus scaled by each child's variance.

    With ``n`` the child's visits, ``N`` the parent's, ``mean = win_count / n``:
    ``V = sum_squared_rewards / n - mean ** 2 + sqrt(exploration_constant * log(N) / n)`` and
    ``score = mean + sqrt(log(N) / n * min(0.25, V))``. Children never visited score ``+inf``
    (each is tried once first). The ``0.25`` cap assumes returns in ``[0, 1]``.

    Args:
        exploration_constant: the constant of the variance's bias term (default ``2.0``).
        win_count_key: summed returns of each child, ``[..., A]``.
        visits_key: visit count of each child, ``[..., A]``.
        total_visits_key: visit count ``N`` of the parent, scalar or broadcastable.
        sum_squared_rewards_key: summed squared returns of each child, ``[..., A]``.
        score_key: where the scores (``[..., A]``) are written.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> node = TensorDict(
        ...     win_count=torch.tensor([2.0, 0.0]),
        ...     visits=torch.tensor([4.0, 0.0]),
        ...     total_visits=torch.tensor(4.0),
        ...     sum_squared_rewards=torch.tensor([2.0, 0.0]),
        ... )
        >>> UCB1TunedScore()(node)["score"]
        tensor([0.7944,    inf])
    """

    def __init__(
        self,
        exploration_constant: float = 2.0,
        *,
        win_count_key: NestedKey = "win_count",
        visits_key: NestedKey = "visits",
        total_visits_key: NestedKey = "total_visits",
        sum_squared_rewards_key: NestedKey = "sum_squared_rewards",
        score_key: NestedKey = "score",
    ) -> None:
        super().__init__()
        self.exploration_constant = float(exploration_constant)
        self.win_count_key = win_count_key
        self.visits_key = visits_key
        self.total_visits_key = total_visits_key
        self.sum_squared_rewards_key = sum_squared_rewards_key
        self.score_key = score_key
        self.in_keys = module_keys(
            [win_count_key, visits_key, total_visits_key, sum_squared_rewards_key]
        )
        self.out_keys = module_keys([score_key])

    def forward(self, node: TensorDictBase) -> TensorDictBase:
        visits = _float(node.get(self.visits_key))
        n = visits.clamp_min(1.0)
        log_total = _per_node(node.get(self.total_visits_key), visits).clamp_min(1.0).log()
        mean = _float(node.get(self.win_count_key)) / n
        squares = _float(node.get(self.sum_squared_rewards_key)) / n
        variance = squares - mean**2 + (self.exploration_constant * log_total / n).sqrt()
        bonus = (log_total / n * variance.clamp(max=0.25)).clamp_min(0.0).sqrt()
        score = torch.where(visits > 0, mean + bonus, torch.full_like(mean, math.inf))
        node.set(self.score_key, score)
        return node


class EXP3Score(MCTSScore):
    """EXP3 selection probabilities: exponential weights mixed with uniform exploration.

    ``p_i = (1 - gamma) * w_i / sum_j w_j + gamma / K`` for ``K`` actions. The scores are
    probabilities (:attr:`probabilistic` is ``True``): the search samples a child from them.
    :meth:`update_weights` applies the EXP3 update after a child's return is known.

    Args:
        gamma: exploration factor in ``[0, 1]`` (default ``0.1``).
        weights_key: current weight of each action, ``[..., A]``.
        action_prob_key: where the probabilities are written too (default ``"action_prob"``).
        score_key: where the probabilities are written (default ``"score"``).
        num_actions_key: the number of actions ``K``; when absent from the input,
            ``K = weights.shape[-1]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> score = EXP3Score(gamma=0.5)
        >>> node = TensorDict(weights=torch.tensor([3.0, 1.0]))
        >>> score(node)["score"]
        tensor([0.6250, 0.3750])
        >>> _ = score.update_weights(node, action=1, reward=1.0)
        >>> node["weights"]
        tensor([1.0000, 0.6492])
    """

    probabilistic = True

    def __init__(
        self,
        gamma: float = 0.1,
        *,
        weights_key: NestedKey = "weights",
        action_prob_key: NestedKey = "action_prob",
        score_key: NestedKey = "score",
        num_actions_key: NestedKey = "num_actions",
    ) -> None:
        super().__init__()
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"EXP3Score: gamma must be in [0, 1], got {gamma}")
        self.gamma = float(gamma)
        self.weights_key = weights_key
        self.action_prob_key = action_prob_key
        self.score_key = score_key
        self.num_actions_key = num_actions_key
        self.in_keys = module_keys([weights_key])
        self.out_keys = module_keys([score_key, action_prob_key])

    def _probabilities(self, node: TensorDictBase) -> torch.Tensor:
        weights = _float(node.get(self.weights_key))
        num_actions = node.get(self.num_actions_key, None)
        k = weights.shape[-1] if num_actions is None else _per_node(num_actions, weights)
        normalised = weights / weights.sum(-1, keepdim=True)
        return (1.0 - self.gamma) * normalised + self.gamma / k

    def forward(self, node: TensorDictBase) -> TensorDictBase:
        probs = self._probabilities(node)
        node.set(self.score_key, probs)
        node.set(self.action_prob_key, probs)
        return node

    def update_weights(self, node: TensorDictBase, action: int, reward: float) -> TensorDictBase:
        """The EXP3 update of one node's weights after playing ``action`` and getting ``reward``.

        ``w_a <- w_a * exp(gamma * (reward / p_a) / K)``, with ``p_a`` the current probability of
        ``action``; the weights are then divided by their maximum (the probabilities do not
        change, the weights cannot overflow).

        Args:
            node: one node's statistics, with ``weights_key`` of shape ``[A]`` (updated in place).
            action: the index of the action played.
            reward: its reward, in ``[0, 1]``.

        Returns:
            ``node``.
        """
        weights = node.get(self.weights_key)
        probs = self._probabilities(node)
        k = weights.shape[-1]
        num_actions = node.get(self.num_actions_key, None)
        if num_actions is not None:
            k = float(num_actions)
        factor = math.exp(self.gamma * (float(reward) / float(probs[action])) / k)
        weights[action] = weights[action] * factor
        weights.div_(weights.max())
        return node


class MCTSScores(Enum):
    """The MCTS scores by name; calling a member builds the score: ``MCTSScores.PUCT(c=2.0)``.

    Members: ``PUCT`` (:class:`PUCTScore`), ``UCB`` (:class:`UCBScore`), ``UCB1_TUNED``
    (:class:`UCB1TunedScore`), ``EXP3`` (:class:`EXP3Score`). ``MCTSScores("ucb")`` looks a
    member up by its value.

    Examples:
        >>> score = MCTSScores.UCB(c=1.0)
        >>> type(score).__name__, score.c
        ('UCBScore', 1.0)
        >>> MCTSScores("puct") is MCTSScores.PUCT
        True
    """

    PUCT = "puct"
    UCB = "ucb"
    UCB1_TUNED = "ucb1_tuned"
    EXP3 = "exp3"

    @property
    def score_class(self) -> type[MCTSScore]:
        """The :class:`MCTSScore` subclass the member builds."""
        return _SCORE_CLASSES[self.value]

    def __call__(self, *args: Any, **kwargs: Any) -> MCTSScore:
        """Builds the score, passing the arguments to its constructor."""
        return self.score_class(*args, **kwargs)


_SCORE_CLASSES: dict[str, type[MCTSScore]] = {
    "puct": PUCTScore,
    "ucb": UCBScore,
    "ucb1_tuned": UCB1TunedScore,
    "exp3": EXP3Score,
}
