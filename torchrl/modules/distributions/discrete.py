"""Discrete action distributions: masked categoricals (index and one-hot) and ordinal ones."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict.nn.distributions import OneHotCategorical
from torch import distributions as D

ShapeLike = torch.Size | Sequence[int]
_NO_SAMPLE_DIMS = torch.Size()


def _indices_to_mask(
    indices: torch.Tensor, num_categories: int, padding_value: int | None
) -> torch.Tensor:
    """Dense boolean mask from a ``[*B, K]`` list of allowed indices (padded with padding_value)."""
    mask = torch.zeros(
        *indices.shape[:-1], num_categories + 1, dtype=torch.bool, device=indices.device
    )
    if padding_value is not None:
        # Route padding entries to an extra column that is dropped afterwards.
        indices = torch.where(indices == padding_value, num_categories, indices)
    mask.scatter_(-1, indices.long(), True)
    return mask[..., :num_categories]


class MaskedCategorical(D.Categorical):
    """A categorical distribution over indices that never picks masked-out categories.

    The logits of disallowed categories are replaced by ``neg_inf`` before normalisation, so
    their probability is 0, :meth:`sample` never returns them, their :meth:`log_prob` is
    ``neg_inf``, and :meth:`entropy` only counts allowed categories. Each row needs at least
    one allowed category.

    Args:
        logits: unnormalised log-probabilities ``[*B, N]`` (or pass ``probs``).
        probs: probabilities ``[*B, N]``.
        mask: boolean ``[*B, N]``, True where the category is allowed (e.g. an env's
            ``"action_mask"``).
        indices: alternatively, the allowed indices ``[*B, K]`` (a sparse mask).
        neg_inf: the logit given to masked categories.
        padding_value: value that pads ``indices`` rows with fewer than K allowed categories.

    Examples:
        >>> dist = MaskedCategorical(logits=torch.zeros(2, 4),
        ...                          mask=torch.tensor([[True, False, True, False]] * 2))
        >>> dist.probs
        tensor([[0.5000, 0.0000, 0.5000, 0.0000],
                [0.5000, 0.0000, 0.5000, 0.0000]])
        >>> dist.log_prob(torch.tensor([1, 2]))
        tensor([   -inf, -0.6931])
    """

    def __init__(
        self,
        logits: torch.Tensor | None = None,
        probs: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        indices: torch.Tensor | None = None,
        neg_inf: float = float("-inf"),
        padding_value: int | None = None,
    ) -> None:
        if (logits is None) == (probs is None):
            raise ValueError("pass exactly one of logits or probs")
        if logits is None:
            logits = probs.log()  # type: ignore[union-attr]
        if mask is None and indices is None:
            raise ValueError(f"{type(self).__name__} needs a boolean mask or allowed indices")
        if mask is None:
            mask = _indices_to_mask(indices, logits.shape[-1], padding_value)  # type: ignore[arg-type]
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a boolean tensor, got {mask.dtype}")
        mask = mask.expand_as(logits)
        self._mask = mask
        self.neg_inf = neg_inf
        super().__init__(logits=logits.masked_fill(~mask, neg_inf), validate_args=False)

    @property
    def mask(self) -> torch.Tensor:
        """The boolean mask of allowed categories ``[*B, N]``."""
        return self._mask

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        lp = super().log_prob(value)
        if self.neg_inf == float("-inf"):
            # Masked logits are -inf already, and so is their log-probability.
            return lp
        shape = torch.broadcast_shapes(value.shape, self._mask.shape[:-1])
        mask = self._mask.expand(*shape, self._mask.shape[-1])
        allowed = mask.gather(-1, value.long().expand(shape).unsqueeze(-1)).squeeze(-1)
        return torch.where(allowed, lp, torch.full_like(lp, self.neg_inf))

    def entropy(self) -> torch.Tensor:
        p_log_p = torch.where(self._mask, self.probs * self.logits, 0.0)
        return -p_log_p.sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The most likely allowed category."""
        return self.mode


class MaskedOneHotCategorical(MaskedCategorical):
    """A :class:`MaskedCategorical` whose values are one-hot ``[*B, N]`` (long) tensors.

    Args:
        logits: unnormalised log-probabilities ``[*B, N]`` (or pass ``probs``).
        probs: probabilities ``[*B, N]``.
        mask: boolean ``[*B, N]``, True where allowed.
        indices: alternatively, the allowed indices ``[*B, K]``.
        neg_inf: the logit given to masked categories.
        padding_value: value that pads ``indices``.

    Examples:
        >>> dist = MaskedOneHotCategorical(logits=torch.zeros(3), mask=torch.tensor([False, False, True]))
        >>> dist.sample()
        tensor([0, 0, 1])
        >>> dist.log_prob(torch.tensor([0, 0, 1]))
        tensor(0.)
    """

    def sample(self, sample_shape: ShapeLike = _NO_SAMPLE_DIMS) -> torch.Tensor:
        index = super().sample(sample_shape)
        return torch.nn.functional.one_hot(index, self.logits.shape[-1])

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return super().log_prob(value.argmax(-1))

    @property
    def mode(self) -> torch.Tensor:
        return torch.nn.functional.one_hot(self.logits.argmax(-1), self.logits.shape[-1])

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The one-hot encoding of the most likely allowed category."""
        return self.mode

    @property
    def event_shape(self) -> torch.Size:  # type: ignore[override]
        return self.logits.shape[-1:]


def _ordinal_logits(scores: torch.Tensor) -> torch.Tensor:
    # logit_k = sum_{i<=k} log sigmoid(s_i) + sum_{i>k} log(1 - sigmoid(s_i))
    log_s = torch.nn.functional.logsigmoid(scores)
    log_not_s = torch.nn.functional.logsigmoid(-scores)
    cum_not = log_not_s.cumsum(-1)
    return log_s.cumsum(-1) + (cum_not[..., -1:] - cum_not)


class Ordinal(D.Categorical):
    """A categorical over ordered categories, parameterised by per-category scores.

    Tang & Agrawal (2020): ``logit_k = sum_{i<=k} log sigmoid(s_i) + sum_{i>k} log(1 - sigmoid(s_i))``,
    which couples neighbouring categories (useful for discretised continuous actions).

    Args:
        scores: ``[*B, N]`` real scores.

    Examples:
        >>> dist = Ordinal(torch.tensor([10.0, 10.0, -10.0, -10.0]))
        >>> dist.deterministic_sample
        tensor(1)
    """

    def __init__(self, scores: torch.Tensor) -> None:
        super().__init__(logits=_ordinal_logits(scores), validate_args=False)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The most likely category."""
        return self.mode


class OneHotOrdinal(OneHotCategorical):
    """An :class:`Ordinal` distribution with one-hot values.

    Args:
        scores: ``[*B, N]`` real scores.

    Examples:
        >>> OneHotOrdinal(torch.tensor([10.0, -10.0, -10.0])).deterministic_sample
        tensor([1, 0, 0])
    """

    def __init__(self, scores: torch.Tensor) -> None:
        super().__init__(logits=_ordinal_logits(scores), validate_args=False)


__all__ = [
    "MaskedCategorical",
    "MaskedOneHotCategorical",
    "OneHotCategorical",
    "OneHotOrdinal",
    "Ordinal",
]
