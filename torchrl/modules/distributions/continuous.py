"""Continuous action distributions: squashed (tanh) normal, truncated normal, normal, deltas."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from tensordict.nn.distributions import Delta
from tensordict.nn.distributions import TruncatedNormal as _TruncatedNormalBase
from torch import distributions as D
from torch.distributions import constraints

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_LOG2 = math.log(2.0)

ShapeLike = torch.Size | Sequence[int]
_NO_SAMPLE_DIMS = torch.Size()


def _as_tensor(value: float | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(value, dtype=like.dtype, device=like.device)


def _check_bounds(low: float | torch.Tensor, high: float | torch.Tensor) -> None:
    # Checked only when it costs no device sync (numbers or CPU tensors) and not under tracing.
    if not isinstance(low, torch.Tensor) and not isinstance(high, torch.Tensor):
        if not high > low:
            raise ValueError(f"high must be greater than low, got low={low}, high={high}")
        return
    if torch.compiler.is_compiling():  # a data-dependent check would break the graph
        return
    if isinstance(low, torch.Tensor) and low.device.type != "cpu":
        return
    if isinstance(high, torch.Tensor) and high.device.type != "cpu":
        return
    if not bool(torch.all(torch.as_tensor(high) > torch.as_tensor(low))):
        raise ValueError(f"high must be greater than low, got low={low}, high={high}")


def _sum_event(value: torch.Tensor, event_dims: int) -> torch.Tensor:
    if event_dims == 1:  # the usual case, without a tuple of dims to build and parse
        return value.sum(-1)
    return value.sum(tuple(range(-event_dims, 0))) if event_dims else value


class TanhNormal(D.Distribution):
    """A normal distribution squashed by ``tanh`` and rescaled to ``[low, high]``.

    ``y = mid + half * tanh(x)`` with ``x ~ N(loc, scale)``, ``mid = (high + low) / 2`` and
    ``half = (high - low) / 2``. The density is ``N(atanh(u); loc, scale) / (half * (1 - u^2))``
    with ``u = (y - mid) / half``. Samples drawn through :meth:`rsample_and_log_prob` (which
    tensordict's probabilistic modules use) are scored from ``x`` with the exact, overflow-free
    ``log(1 - tanh(x)^2) = 2 (log 2 - x - softplus(-2x))``; :meth:`log_prob` of a stored value
    clips ``u`` one float-epsilon inside ``(-1, 1)`` so values on the bounds stay finite.

    Args:
        loc: location of the normal, ``[*B, *E]``.
        scale: its standard deviation (positive), broadcastable to ``loc``.
        upscale: with ``tanh_loc``, ``loc`` is mapped to ``upscale * tanh(loc / upscale)``.
        low: lower bound(s), a number or a tensor broadcastable to ``loc``.
        high: upper bound(s).
        event_dims: trailing dims summed by :meth:`log_prob` (default 1, or 0 for scalars).
        tanh_loc: bound ``loc`` softly (see ``upscale``).
        safe_tanh: keep samples one float-epsilon inside the bounds so their log-probability
            can be recomputed finitely from the stored value.

    Examples:
        >>> dist = TanhNormal(torch.zeros(3, 2), torch.ones(3, 2), low=-2.0, high=2.0)
        >>> action = dist.rsample()
        >>> action.shape, dist.log_prob(action).shape
        (torch.Size([3, 2]), torch.Size([3]))
        >>> bool((action.abs() < 2).all())
        True
        >>> dist.deterministic_sample
        tensor([[0., 0.],
                [0., 0.],
                [0., 0.]])
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    has_rsample = True

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        upscale: float | torch.Tensor = 5.0,
        low: float | torch.Tensor = -1.0,
        high: float | torch.Tensor = 1.0,
        event_dims: int | None = None,
        tanh_loc: bool = False,
        safe_tanh: bool = True,
    ) -> None:
        _check_bounds(low, high)
        if tanh_loc:
            loc = upscale * torch.tanh(loc / upscale)
        if loc.shape != scale.shape:
            loc, scale = torch.broadcast_tensors(loc, scale)
        self.loc = loc
        self.scale = scale
        self.upscale = upscale
        self.tanh_loc = tanh_loc
        self.safe_tanh = safe_tanh
        # The default bounds (numbers -1 and 1): tanh lands there already, so the affine map,
        # its clamp and log(half) = 0 are skipped (same values, no tensor ops for them; the
        # bound tensors are made when read).
        self._unit_bounds = (
            not isinstance(low, torch.Tensor)
            and not isinstance(high, torch.Tensor)
            and low == -1
            and high == 1
        )
        self._low: torch.Tensor | None = None
        self._high: torch.Tensor | None = None
        shape = loc.shape
        if not self._unit_bounds:
            low_t, high_t = _as_tensor(low, loc), _as_tensor(high, loc)
            self._low = low_t
            self._high = high_t
            self._half = (high_t - low_t) / 2
            self._mid = (high_t + low_t) / 2
        self._eps = torch.finfo(loc.dtype).eps
        if not self._unit_bounds and self._half.ndim and self._half.shape != shape:
            # torch.broadcast_shapes costs ~10 us per call: only bounds of another shape need it
            shape = torch.broadcast_shapes(shape, self._half.shape)
        if event_dims is None:
            event_dims = min(1, len(shape))
        if event_dims > len(shape):
            raise ValueError(f"event_dims={event_dims} exceeds the parameter dims {tuple(shape)}")
        self.event_dims = event_dims
        # Whether a draw has the parameters' shape (no bounds of another shape): one draw is
        # then randn_like(loc), without building its shape.
        self._loc_shaped = shape == loc.shape
        split = len(shape) - event_dims
        super().__init__(shape[:split], shape[split:], validate_args=False)

    @property
    def low(self) -> torch.Tensor:
        """Lower bound of the support."""
        if self._low is None:
            self._low = _as_tensor(-1.0, self.loc)
        return self._low

    @property
    def high(self) -> torch.Tensor:
        """Upper bound of the support."""
        if self._high is None:
            self._high = _as_tensor(1.0, self.loc)
        return self._high

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self) -> constraints.Constraint:
        return constraints.interval(self.low, self.high)

    def _squash(self, x: torch.Tensor) -> torch.Tensor:
        unit = torch.tanh(x)
        if self.safe_tanh:
            unit = unit.clamp(-1 + self._eps, 1 - self._eps)
        # mid + half * unit can round one float step past a bound: keep samples in the support
        # (envs check actions against their bounds)
        if self._unit_bounds:
            return unit
        return torch.clamp(self._mid + self._half * unit, self.low, self.high)

    def rsample(self, sample_shape: ShapeLike = _NO_SAMPLE_DIMS) -> torch.Tensor:
        return self.rsample_and_log_prob(sample_shape, _score=False)[0]

    def sample(self, sample_shape: ShapeLike = _NO_SAMPLE_DIMS) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample(sample_shape)

    def rsample_and_log_prob(
        self, sample_shape: ShapeLike = _NO_SAMPLE_DIMS, _score: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draws a reparameterised sample and scores the pre-tanh draw exactly.

        Args:
            sample_shape: leading sample dims.

        Returns:
            ``(sample [*S, *B, *E], log_prob [*S, *B])``.
        """
        noise, x = self._draw(sample_shape)
        sample = self._squash(x)
        if not _score:
            return sample, sample
        return sample, self._score_draw(noise, x)

    def mc_entropy(self, num_samples: int = 1) -> torch.Tensor:
        """A Monte-Carlo estimate of the entropy, ``-mean(log p(y))`` over reparameterised
        draws ``y`` (gradients reach ``loc`` and ``scale``).

        Each draw is scored from its pre-tanh value as in :meth:`rsample_and_log_prob`; the
        draws themselves are not squashed, since only their density is needed.

        Args:
            num_samples: the number of draws averaged (the estimate's variance falls as
                ``1 / num_samples``).

        Returns:
            The estimate, ``[*B]``.

        Examples:
            >>> dist = TanhNormal(torch.zeros(4, 2), torch.ones(4, 2))
            >>> dist.mc_entropy(num_samples=8).shape
            torch.Size([4])
        """
        if num_samples < 1:
            raise ValueError(f"mc_entropy: num_samples must be >= 1, got {num_samples}")
        if num_samples == 1:
            return self._score_draw(*self._draw(_NO_SAMPLE_DIMS)).neg()
        return self._score_draw(*self._draw((num_samples,))).mean(0).neg()

    def _draw(self, sample_shape: ShapeLike) -> tuple[torch.Tensor, torch.Tensor]:
        """``(noise, x)``: standard normal noise ``[*S, *B, *E]`` and the pre-tanh draw."""
        if not sample_shape and self._loc_shaped:
            noise = torch.randn_like(self.loc, memory_format=torch.contiguous_format)
        else:
            shape = self._extended_shape(torch.Size(sample_shape))
            noise = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return noise, self.loc + self.scale * noise

    def _score_draw(self, noise: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The log-density ``[*S, *B]`` of ``squash(x)``, exact and overflow-free in ``x``."""
        log_det = 2 * (_LOG2 - x - torch.nn.functional.softplus(-2 * x))
        if not self._unit_bounds:
            log_det = log_det + self._half.log()
        log_prob = -0.5 * noise.pow(2) - self.scale.log() - _LOG_SQRT_2PI - log_det
        return _sum_event(log_prob, self.event_dims)

    def sample_and_log_prob(
        self, sample_shape: ShapeLike = _NO_SAMPLE_DIMS
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Like :meth:`rsample_and_log_prob`, without gradients."""
        with torch.no_grad():
            return self.rsample_and_log_prob(sample_shape)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        unit = value if self._unit_bounds else (value - self._mid) / self._half
        unit = unit.clamp(-1 + self._eps, 1 - self._eps)
        x = torch.atanh(unit)
        normal_lp = -0.5 * ((x - self.loc) / self.scale).pow(2) - self.scale.log() - _LOG_SQRT_2PI
        # log(1 - u^2) as log1p(-u) + log1p(u): no cancellation next to the bounds.
        log_det = torch.log1p(-unit) + torch.log1p(unit)
        if not self._unit_bounds:
            log_det = log_det + self._half.log()
        return _sum_event(normal_lp - log_det, self.event_dims)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """``mid + half * tanh(loc)``, the median (tanh is monotonic)."""
        return self._squash(self.loc)

    @property
    def median(self) -> torch.Tensor:
        return self._squash(self.loc)

    @property
    def mode(self) -> torch.Tensor:
        """The most likely value, found by bisection (vectorised over all elements).

        In ``x = atanh(u)`` coordinates the log-density is ``h(x) = -(x-m)^2/(2s^2) + 2 log
        cosh x`` and ``h'(x) = 0 <=> m + 2 s^2 tanh(x) - x = 0``. Roots lie in
        ``[m - 2s^2, m + 2s^2]``; local maxima sit where the left side decreases, i.e. outside
        ``(-x*, x*)`` with ``cosh(x*) = sqrt(2) s`` (everywhere when ``2 s^2 <= 1``). We bisect
        on both sides of that interval and keep the higher of the two maxima.
        """
        with torch.no_grad():
            m = self.loc.double()
            s2 = self.scale.double().pow(2)
            x_star = torch.acosh((2 * s2).sqrt().clamp_min(1.0))

            def g(x: torch.Tensor) -> torch.Tensor:
                return m + 2 * s2 * torch.tanh(x) - x

            def h(x: torch.Tensor) -> torch.Tensor:
                # 2 log cosh x, written to avoid overflow of cosh
                return -(x - m).pow(2) / (2 * s2) + 2 * (
                    x.abs() + torch.log1p(torch.exp(-2 * x.abs())) - _LOG2
                )

            def bisect(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
                for _ in range(80):
                    mid = (lo + hi) / 2
                    positive = g(mid) > 0
                    lo = torch.where(positive, mid, lo)
                    hi = torch.where(positive, hi, mid)
                return (lo + hi) / 2

            lo_all, hi_all = m - 2 * s2 - 1, m + 2 * s2 + 1
            left = bisect(lo_all, torch.minimum(-x_star, hi_all))
            right = bisect(torch.maximum(x_star, lo_all), hi_all)
            # A side without a sign change has no maximum: its bisection collapses on an end.
            left_ok = g(torch.minimum(-x_star, hi_all)) <= 0
            right_ok = g(torch.maximum(x_star, lo_all)) >= 0
            h_left = torch.where(left_ok, h(left), -math.inf)
            h_right = torch.where(right_ok, h(right), -math.inf)
            x_mode = torch.where(h_right > h_left, right, left)
        return self._squash(x_mode.to(self.loc.dtype))

    @property
    def mean(self) -> torch.Tensor:
        raise NotImplementedError(
            "TanhNormal has no closed-form mean; average samples "
            "(dist.sample((N,)).mean(0)) or use deterministic_sample"
        )

    def entropy(self) -> torch.Tensor:
        raise NotImplementedError(
            "TanhNormal has no closed-form entropy; estimate it with -log_prob of samples"
        )


class IndependentNormal(D.Independent):
    """A diagonal normal whose last ``event_dim`` dims form one event.

    Args:
        loc: mean, ``[*B, *E]``.
        scale: standard deviation.
        upscale: with ``tanh_loc``, ``loc`` becomes ``upscale * tanh(loc / upscale)``.
        tanh_loc: bound ``loc`` softly.
        event_dim: number of event dims.

    Examples:
        >>> dist = IndependentNormal(torch.zeros(4, 2), torch.ones(4, 2))
        >>> dist.log_prob(torch.zeros(4, 2)).shape
        torch.Size([4])
    """

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        upscale: float = 5.0,
        tanh_loc: bool = False,
        event_dim: int = 1,
    ) -> None:
        if tanh_loc:
            loc = upscale * torch.tanh(loc / upscale)
        super().__init__(D.Normal(loc, scale, validate_args=False), event_dim, validate_args=False)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The mean."""
        return self.base_dist.loc


class TruncatedNormal(D.Independent):
    """A normal restricted to ``[low, high]`` (renormalised), the last dim being the event.

    Args:
        loc: location of the untruncated normal, ``[*B, E]``.
        scale: its standard deviation.
        upscale: with ``tanh_loc``, ``loc`` becomes ``upscale * tanh(loc / upscale)``.
        low: lower bound(s).
        high: upper bound(s).
        tanh_loc: bound ``loc`` softly.

    Examples:
        >>> dist = TruncatedNormal(torch.zeros(3, 2), torch.ones(3, 2), low=-0.5, high=0.5)
        >>> bool((dist.sample().abs() <= 0.5).all()), dist.log_prob(torch.zeros(3, 2)).shape
        (True, torch.Size([3]))
    """

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        upscale: float = 5.0,
        low: float | torch.Tensor = -1.0,
        high: float | torch.Tensor = 1.0,
        tanh_loc: bool = False,
    ) -> None:
        _check_bounds(low, high)
        if tanh_loc:
            loc = upscale * torch.tanh(loc / upscale)
        self.low = _as_tensor(low, loc)
        self.high = _as_tensor(high, loc)
        base = _TruncatedNormalBase(loc, scale, self.low, self.high, validate_args=False)
        super().__init__(base, min(1, loc.ndim), validate_args=False)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        lp = self.base_dist.log_prob(value)
        inside = (value >= self.low) & (value <= self.high)
        lp = torch.where(inside, lp, -math.inf)
        return _sum_event(lp, self.reinterpreted_batch_ndims)

    @property
    def mode(self) -> torch.Tensor:
        """``loc`` clipped to the bounds."""
        base = self.base_dist
        return torch.maximum(torch.minimum(base.loc, self.high), self.low)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The mode."""
        return self.mode


class TanhDelta(Delta):
    """A point mass at ``mid + half * tanh(param)``: a deterministic policy bounded to [low, high].

    Args:
        param: pre-squash value, ``[*B, *E]``.
        low: lower bound(s).
        high: upper bound(s).
        event_dims: trailing dims forming one event.
        atol: absolute tolerance of :meth:`log_prob`'s equality test.
        rtol: relative tolerance of :meth:`log_prob`'s equality test.

    Examples:
        >>> dist = TanhDelta(torch.tensor([[0.0, 100.0]]), low=0.0, high=2.0)
        >>> dist.sample()
        tensor([[1., 2.]])
    """

    def __init__(
        self,
        param: torch.Tensor,
        low: float | torch.Tensor = -1.0,
        high: float | torch.Tensor = 1.0,
        event_dims: int = 1,
        atol: float = 1e-6,
        rtol: float = 1e-6,
    ) -> None:
        _check_bounds(low, high)
        self.low = _as_tensor(low, param)
        self.high = _as_tensor(high, param)
        value = (self.high + self.low) / 2 + (self.high - self.low) / 2 * torch.tanh(param)
        split = value.ndim - event_dims
        super().__init__(
            value,
            atol=atol,
            rtol=rtol,
            batch_shape=value.shape[:split],
            event_shape=value.shape[split:],
        )
