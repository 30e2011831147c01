"""Discrete action distributions: masked categoricals (index and one-hot) and ordinal ones."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import torch
from tensordict.nn.distributions import OneHotCategorical as _OneHotCategorical
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


def _scatter_one_hot(index: torch.Tensor, num_categories: int) -> torch.Tensor:
    """Long one-hot of ``index [*B, 1]`` (``F.one_hot`` also range-checks its input: slower)."""
    shape = (*index.shape[:-1], num_categories)
    return torch.zeros(shape, dtype=torch.long, device=index.device).scatter_(-1, index, 1)


class ReparamGradientStrategy(Enum):
    """How :meth:`OneHotCategorical.rsample` passes gradients through a one-hot sample.

    Both give one-hot (float) values; they differ in the gradient:

    - ``PassThrough``: straight-through, ``sample + probs - probs.detach()`` (the gradient
      of the probabilities, Bengio et al., 2013);
    - ``RelaxedOneHot``: the gradient of a Gumbel-softmax sample
      (:class:`torch.distributions.RelaxedOneHotCategorical`, temperature 1) whose argmax is
      the returned one-hot value.

    Examples:
        >>> ReparamGradientStrategy.PassThrough.name
        'PassThrough'
    """

    PassThrough = 1
    RelaxedOneHot = 2


class OneHotCategorical(_OneHotCategorical):
    """A categorical distribution with one-hot (long) values, tuned for small per-step batches.

    The same distribution and interface as tensordict's ``OneHotCategorical`` (of which it is
    a subclass): ``sample``, ``mode``/``deterministic_sample`` return ``[*B, N]`` long one-hot
    tensors, ``log_prob`` takes one. Policies call it once per env step on a few rows, where
    each kernel launch counts: the logits are normalised with one ``log_softmax``, samples are
    drawn with the Gumbel-max trick (multinomial when built from ``probs``), and ``log_prob``
    reads the log-probability through the one-hot value (no index conversion).

    Args:
        logits: unnormalised log-probabilities ``[*B, N]`` (a trailing size-1 dim is dropped).
        probs: probabilities ``[*B, N]``; pass ``logits`` or ``probs``.
        grad_method: how :meth:`rsample` carries gradients (a
            :class:`ReparamGradientStrategy`; default ``PassThrough``).
        validate_args: check the arguments (torch's default when ``None``).

    Examples:
        >>> dist = OneHotCategorical(logits=torch.tensor([[0.0, 2.0, 1.0]]))
        >>> dist.mode
        tensor([[0, 1, 0]])
        >>> dist.sample().sum(-1)
        tensor([1])
        >>> dist.log_prob(torch.tensor([[0, 1, 0]]))
        tensor([-0.4076])
    """

    def __init__(
        self,
        logits: torch.Tensor | None = None,
        probs: torch.Tensor | None = None,
        grad_method: ReparamGradientStrategy = ReparamGradientStrategy.PassThrough,
        validate_args: bool | None = None,
    ) -> None:
        if not isinstance(grad_method, ReparamGradientStrategy):
            raise TypeError(
                "OneHotCategorical: grad_method must be a ReparamGradientStrategy, got "
                f"{grad_method!r}"
            )
        self.grad_method = grad_method
        self._gumbel = False
        if logits is None or probs is not None:
            super().__init__(logits=logits, probs=probs, validate_args=validate_args)
            return
        self._gumbel = True
        if logits.shape[-1] == 1:
            logits = logits[..., 0]
        if logits.dim() < 1:
            raise ValueError("`logits` parameter must be at least one-dimensional.")
        # Same normalisation as torch's ``logits - logits.logsumexp(-1)``, in one kernel.
        self.logits = self._param = logits.log_softmax(-1)
        self._num_events = logits.shape[-1]
        D.Distribution.__init__(self, logits.shape[:-1], validate_args=validate_args)

    def sample(self, sample_shape: ShapeLike | None = None) -> torch.Tensor:
        """Draws one-hot ``[*sample_shape, *B, N]`` long samples."""
        if not self._gumbel:
            # Logits derived from probabilities are clamped (log 0 is finite there): a zero
            # probability must stay impossible, which multinomial guarantees.
            return super().sample(sample_shape)
        logits = self.logits.detach()
        if sample_shape:
            logits = logits.expand(*sample_shape, *logits.shape)
        # Gumbel-max: argmax(logits - log(E)) with E ~ Exp(1) is an exact draw, in fewer
        # kernels than multinomial + one_hot.
        noise = torch.empty_like(logits).exponential_().log_()
        return _scatter_one_hot((logits - noise).argmax(-1, keepdim=True), self._num_events)

    def rsample(self, sample_shape: ShapeLike | None = None) -> torch.Tensor:
        """Draws one-hot float ``[*sample_shape, *B, N]`` samples that carry gradients.

        The gradient follows :attr:`grad_method` (see :class:`ReparamGradientStrategy`).
        """
        shape = torch.Size(sample_shape or ())
        if self.grad_method is ReparamGradientStrategy.RelaxedOneHot:
            temperature = torch.ones((), dtype=self.logits.dtype, device=self.logits.device)
            relaxed = D.RelaxedOneHotCategorical(temperature, logits=self.logits).rsample(shape)
            index = relaxed.argmax(-1, keepdim=True)
            hard = torch.zeros_like(relaxed).scatter_(-1, index, 1.0)
            return hard + (relaxed - relaxed.detach())
        probs = self.probs
        hard = self.sample(shape).to(probs.dtype)
        return hard + (probs - probs.detach())

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """Log-probability ``[*B]`` of the category marked in the one-hot ``value [*B, N]``."""
        if self._validate_args:
            return super().log_prob(value)
        # A select, not a product: 0 * -inf (a masked logit) would be nan.
        return torch.where(value.bool(), self.logits, 0.0).sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        """One-hot of the most likely category (the first one when several tie)."""
        return _scatter_one_hot(self.logits.argmax(-1, keepdim=True), self._num_events)

    deterministic_sample = mode


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
