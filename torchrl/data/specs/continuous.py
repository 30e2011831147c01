"""Box-like specs: ``Unbounded`` (any value) and ``Bounded`` (element-wise ``[low, high]``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from torchrl._types import DeviceLike, ShapeLike
from torchrl.data.specs.base import (
    INT64_MAX,
    ContinuousBox,
    TensorSpec,
    as_device,
    as_size,
    as_spec_shape,
    cast_int,
    check_spec_dtype,
    dtype_int_range,
    first_bad_index,
    format_location,
    format_value,
    is_int_dtype,
    round_clamp,
)


def _bound_tensor(bound: Any, name: str) -> torch.Tensor:
    """A bound as a real tensor; NaN (and values no tensor can hold) are rejected."""
    if isinstance(bound, torch.Tensor):
        t = bound.detach()
    else:
        # Through numpy: python floats stay float64 (torch would make 1e300 a float32 inf).
        arr = np.asarray(bound)
        if arr.dtype == np.uint64:
            arr = arr.astype(np.float64)
        if arr.dtype.kind not in "biuf":
            raise ValueError(f"Bounded: {name}={bound!r} is not a real number or tensor")
        t = torch.as_tensor(arr)
    if t.is_complex():
        raise ValueError(f"Bounded: {name} must be real, got dtype {t.dtype}")
    if t.is_floating_point() and bool(t.isnan().any()):
        raise ValueError(f"Bounded: {name} contains NaN: {format_value(t)}")
    return t


def _at(name: str, where: tuple[int, ...]) -> str:
    return f"{name}{list(where)}" if where else name


def _float_bounds(t: torch.Tensor, name: str, dtype: torch.dtype) -> torch.Tensor:
    """``t`` cast to a float dtype. A finite bound past the dtype's range becomes its largest
    finite value, which keeps exactly the same finite values in the spec (``high=1e6`` in
    ``float16`` is ``65504``); a ``low`` above that range (or a ``high`` below it) leaves no
    finite value, and is rejected."""
    out = t.to(dtype)
    over = out.isinf() & t.isfinite()
    if not bool(over.any()):
        return out
    limit = torch.finfo(dtype).max
    empty = over & ((t > 0) if name == "low" else (t < 0))
    if bool(empty.any()):
        where = first_bad_index(empty)
        side = "above the largest" if name == "low" else "below the smallest"
        raise ValueError(
            f"Bounded: {_at(name, where)} = {t[where].item()!r} is {side} finite value of dtype "
            f"{dtype} ({limit!r}): no finite value lies in [low, high]; use a wider dtype"
        )
    return torch.where(over, torch.full((), -limit if name == "low" else limit, dtype=dtype), out)


def _int_bounds(
    low: torch.Tensor, high: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds in an integer ``dtype``: real bounds rounded inwards, ``-inf``/``inf`` at the
    dtype's minimum/maximum; finite bounds outside the dtype's range are rejected."""
    imin, imax = dtype_int_range(dtype)
    out = []
    for name, t in (("low", low), ("high", high)):
        if t.is_floating_point():
            t = t.double().ceil() if name == "low" else t.double().floor()
            # imin and imax + 1 are powers of two, exact in float64 (imax itself is not).
            bad = t.isfinite() & ((t < imin) | (t >= float(imax) + 1.0))
        else:
            t = t.long()
            bad = (t < imin) | (t > imax)
        if bool(bad.any()):
            where = first_bad_index(bad)
            raise ValueError(
                f"Bounded: {_at(name, where)} = {t[where].item()!r} does not fit dtype {dtype}, "
                f"whose values lie in [{imin}, {imax}]"
            )
        if t.is_floating_point():
            wrong_inf = math.inf if name == "low" else -math.inf
            if bool((t == wrong_inf).any()):
                raise ValueError(
                    f"Bounded: {name}={format_value(t)}: no {dtype} value lies beyond {wrong_inf}"
                )
            finite = t.isfinite()
            ints = t.where(finite, torch.zeros((), dtype=torch.float64)).long()
            fill = torch.tensor(imin if name == "low" else imax, dtype=torch.int64)
            t = torch.where(finite, ints, fill)
        out.append(t)
    low_i, high_i = out
    if bool((low_i > high_i).any()):
        raise ValueError(
            f"Bounded: no {dtype} value lies between low={format_value(low)} and high={format_value(high)}"
        )
    return low_i.to(dtype), high_i.to(dtype)


class Unbounded(TensorSpec):
    """A spec with no bounds: any value of the right shape and dtype is in it.

    An integer dtype makes it a discrete spec (``domain == "discrete"``) whose ``rand`` draws
    integers over the dtype's range; a float dtype draws standard normal values.

    Args:
        shape: the value's shape (default ``(1,)``; an int means ``(int,)``).
        device: where values live (``None``: wherever they come).
        dtype: the values' dtype (default ``torch.float32``).

    Examples:
        >>> import torch
        >>> spec = Unbounded(shape=(3, 4))
        >>> spec
        Unbounded(shape=torch.Size([3, 4]), dtype=torch.float32, device=None)
        >>> spec.rand((2,)).shape
        torch.Size([2, 3, 4])
        >>> spec.is_in(torch.zeros(3, 4)), spec.is_in(torch.zeros(3, 4, dtype=torch.int64))
        (True, False)
    """

    dtype: torch.dtype
    _default_dtype: torch.dtype = torch.float32

    def __init__(
        self,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        name = type(self).__name__
        self.shape = torch.Size((1,)) if shape is None else as_spec_shape(shape, name)
        self.device = as_device(device)
        self.dtype = check_spec_dtype(self._default_dtype if dtype is None else dtype, name)

    @property
    def domain(self) -> str:
        """``"continuous"`` for float dtypes, ``"discrete"`` otherwise."""
        return "continuous" if self.dtype.is_floating_point else "discrete"

    @property
    def space(self) -> ContinuousBox:
        """A ``ContinuousBox`` with infinite (or dtype-range) bounds."""
        if self.dtype.is_floating_point:
            low, high = -math.inf, math.inf
        else:
            low, high = dtype_int_range(self.dtype)
        full = torch.full((), low, dtype=self.dtype, device=self.device).expand(self.shape)
        return ContinuousBox(full, torch.full_like(full, high).expand(self.shape))

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Standard-normal floats, or integers uniform over the dtype's range.

        Args:
            shape: extra leading batch dims.

        Returns:
            A tensor of shape ``[*shape, *self.shape]``.
        """
        size = as_size(shape) + self.shape
        if self.dtype.is_floating_point:
            return torch.randn(size, dtype=self.dtype, device=self.device)
        low, high = dtype_int_range(self.dtype)
        if self.dtype is torch.bool:
            high = 2  # randint's high is exclusive; elsewhere the top value is simply skipped
        return torch.randint(low, high, size, dtype=self.dtype, device=self.device)

    def _why_not_in(self, val: Any) -> str | None:
        return self._check_tensor(val)

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Casts ``val`` to the spec's dtype (rounding floats for integer specs).

        Values outside an integer dtype's range are clamped to it (never wrapped around) and
        NaN becomes 0.

        Args:
            val: a tensor whose shape broadcasts to the spec's shape.

        Returns:
            The cast tensor.

        Raises:
            ValueError: when ``val``'s shape does not broadcast to the spec's shape.
        """
        val = self._project_input(val)
        if val.dtype == self.dtype:
            return val
        if is_int_dtype(self.dtype):
            return cast_int(val, self.dtype)
        return val.to(self.dtype)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unbounded) and self._same_meta(other)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype}, device={self.device})"
        )


class UnboundedDiscrete(Unbounded):
    """An ``Unbounded`` spec whose default dtype is ``torch.int64``.

    It equals an ``Unbounded`` spec with the same shape, dtype and device.

    Args:
        shape: the value's shape (default ``(1,)``).
        device: where values live.
        dtype: an integer dtype (default ``torch.int64``).

    Examples:
        >>> import torch
        >>> spec = UnboundedDiscrete(shape=(2,))
        >>> spec.dtype, spec.domain
        (torch.int64, 'discrete')
        >>> spec == Unbounded(shape=(2,), dtype=torch.int64)
        True
    """

    _default_dtype = torch.int64


class Bounded(TensorSpec):
    """A spec whose values lie element-wise in ``[low, high]``.

    Args:
        low: lower bounds, a number or a tensor broadcastable to ``shape``.
        high: upper bounds, a number or a tensor broadcastable to ``shape``.
        shape: the value's shape; inferred from ``low``/``high`` when omitted.
        device: where values live (``None``: wherever they come).
        dtype: a float or integer dtype (default ``torch.float32``).

    For an integer dtype, real bounds are rounded inwards (``low`` up, ``high`` down) and an
    infinite bound stands for the dtype's minimum or maximum; finite bounds must fit the dtype.
    For a float dtype, a finite bound past the dtype's range becomes its largest finite value
    (same finite values: ``high=1e6`` is ``65504`` in ``float16``), never ``inf``.

    Raises:
        ValueError: when ``low > high`` anywhere, when a bound is NaN, when a finite integer
            bound does not fit the dtype, when no (finite) value of the dtype lies in
            ``[low, high]``, when the bounds do not broadcast to ``shape``, or for a
            bool/complex dtype.

    Examples:
        >>> import torch
        >>> spec = Bounded(low=-1.0, high=torch.tensor([1.0, 2.0, 3.0]))
        >>> spec.shape
        torch.Size([3])
        >>> spec.project(torch.tensor([-5.0, 0.5, 5.0]))
        tensor([-1.0000,  0.5000,  3.0000])
        >>> spec.is_in(torch.tensor([0.0, 2.5, 0.0]))
        False
        >>> Bounded(0, 10, shape=(2,), dtype=torch.int64).rand().dtype
        torch.int64
    """

    dtype: torch.dtype
    _tensor_fields = ("low", "high", "_span")

    def __init__(
        self,
        low: float | torch.Tensor,
        high: float | torch.Tensor,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        dtype = check_spec_dtype(torch.float32 if dtype is None else dtype, "Bounded")
        if dtype is torch.bool:
            raise ValueError("Bounded: bool dtype is not supported; use Binary or Categorical")
        self.dtype = dtype
        self.device = as_device(device)
        low_t, high_t = _bound_tensor(low, "low"), _bound_tensor(high, "high")
        try:
            inferred = torch.broadcast_shapes(low_t.shape, high_t.shape)
        except RuntimeError as err:
            raise ValueError(
                f"Bounded: low of shape {tuple(low_t.shape)} and high of shape "
                f"{tuple(high_t.shape)} do not broadcast together"
            ) from err
        if shape is None:
            self.shape = inferred
        else:
            self.shape = as_spec_shape(shape, "Bounded")
            for name, t in (("low", low_t), ("high", high_t)):
                try:
                    ok = torch.broadcast_shapes(t.shape, self.shape) == self.shape
                except RuntimeError:
                    ok = False
                if not ok:
                    raise ValueError(
                        f"Bounded: {name} of shape {tuple(t.shape)} does not broadcast to the "
                        f"spec shape {tuple(self.shape)}"
                    )
        if bool((low_t > high_t).any()):
            raise ValueError(
                f"Bounded: low must be <= high everywhere, got low={format_value(low_t)}, "
                f"high={format_value(high_t)}"
            )
        if is_int_dtype(dtype):
            low_t, high_t = _int_bounds(low_t, high_t, dtype)
        else:
            low_t, high_t = _float_bounds(low_t, "low", dtype), _float_bounds(high_t, "high", dtype)
        target = self.device if self.device is not None else torch.device("cpu")
        self.low = low_t.to(device=target).expand(self.shape)
        self.high = high_t.to(device=target).expand(self.shape)
        self._set_cache()

    def _set_cache(self) -> None:
        """Precomputes what ``rand``/``is_in`` need so that they stay a couple of kernels."""
        low, high = self.low, self.high
        self._scalar: tuple[Any, Any] | None = None
        if low.numel():
            lo0, hi0 = low.reshape(-1)[0], high.reshape(-1)[0]
            if bool((low == lo0).all()) and bool((high == hi0).all()):
                self._scalar = (lo0.item(), hi0.item())
        if self.dtype.is_floating_point:
            self._finite = bool(low.isfinite().all()) and bool(high.isfinite().all())
            span = high.double() - low.double()
            self._wide = self._finite and bool((span > torch.finfo(self.dtype).max).any())
            self._exact_span = self._finite and bool(
                ((high - low).double() == span).all() and (low + (high - low) == high).all()
            )
        else:
            self._finite, self._wide, self._exact_span = True, False, True
        # Integer bounds that float64 holds exactly: ``project`` clamps floats before the cast.
        self._exact_in_f64 = self._scalar is not None and all(abs(b) < 2**53 for b in self._scalar)
        # ``high - low`` in the spec's dtype, for ``rand``; only trusted when exact.
        self._span = (high - low) if self._exact_span else None

    @property
    def domain(self) -> str:
        """``"continuous"`` for float dtypes, ``"discrete"`` for integer ones."""
        return "continuous" if self.dtype.is_floating_point else "discrete"

    @property
    def space(self) -> ContinuousBox:
        """A ``ContinuousBox`` holding ``low`` and ``high``."""
        return ContinuousBox(self.low, self.high)

    def _with_dtype(self, dtype: torch.dtype) -> TensorSpec:
        return Bounded(self.low, self.high, self.shape, self.device, dtype)

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Uniform samples in ``[low, high]`` (floats) or ``{low, ..., high}`` (integers).

        Where a bound is infinite, samples are ``bound -/+ |normal|`` (or normal when both are).

        Args:
            shape: extra leading batch dims.

        Returns:
            A tensor of shape ``[*shape, *self.shape]``.
        """
        size = as_size(shape) + self.shape
        dtype, device = self.dtype, self.device
        scalar = self._scalar
        if dtype.is_floating_point:
            if not self._finite:
                return self._rand_infinite(size)
            if scalar is not None and not self._wide:
                lo, hi = scalar
                out = torch.empty(size, dtype=dtype, device=device).uniform_(lo, hi)
                # With a span that the dtype holds exactly, rounding cannot overshoot ``hi``.
                return out if self._exact_span else out.clamp_(lo, hi)
            if self._span is not None:
                # low + u * span never passes high when the span is exact (rounding is monotonic).
                r = torch.rand(size, dtype=dtype, device=device)
                return torch.addcmul(self.low, r, self._span)
            low, high = self.low.double(), self.high.double()
            r = torch.rand(size, dtype=torch.float64, device=device)
            return torch.minimum(low + r * (high - low), high).to(dtype)
        if scalar is not None:
            lo, hi = int(scalar[0]), int(scalar[1])
            if hi < INT64_MAX:
                return torch.randint(lo, hi + 1, size, dtype=dtype, device=device)
            if lo > -INT64_MAX - 1:  # int64 up to its maximum: hi + 1 would overflow
                out = torch.randint(lo - 1, hi, size, dtype=dtype, device=device)
                return out.add_(1)
            return torch.empty(size, dtype=dtype, device=device).random_(lo, None)
        # Per-entry bounds: float64 arithmetic (approximate beyond 2**53), then an exact clamp.
        low, high = self.low, self.high
        r = torch.rand(size, dtype=torch.float64, device=device)
        span = high.double() - low.double() + 1.0
        out = cast_int(low.double() + (r * span).floor(), torch.int64)
        return torch.maximum(torch.minimum(out, high.long()), low.long()).to(dtype)

    def _rand_infinite(self, size: torch.Size) -> torch.Tensor:
        low, high = self.low, self.high
        low_fin, high_fin = low.isfinite(), high.isfinite()
        noise = torch.randn(size, dtype=self.dtype, device=self.device)
        finite_low = torch.where(low_fin, low, torch.zeros_like(low))
        finite_high = torch.where(high_fin, high, torch.zeros_like(high))
        r = torch.rand(size, dtype=torch.float64, device=self.device)
        uniform = (finite_low.double() + r * (finite_high.double() - finite_low.double())).to(
            self.dtype
        )
        out = torch.where(low_fin & high_fin, uniform, noise)
        out = torch.where(low_fin & ~high_fin, finite_low + noise.abs(), out)
        out = torch.where(~low_fin & high_fin, finite_high - noise.abs(), out)
        return out.clamp(low, high)

    def _why_not_in(self, val: Any) -> str | None:
        reason = self._check_tensor(val)
        if reason is not None:
            return reason
        scalar = self._scalar
        if scalar is not None:
            if not val.numel():
                return None
            # aminmax: one reduction; NaN propagates and fails both comparisons.
            lo, hi = torch.aminmax(val)
            if lo.item() >= scalar[0] and hi.item() <= scalar[1]:
                return None
            ok = (val >= scalar[0]) & (val <= scalar[1])
        else:
            low, high = self.low, self.high
            if low.device != val.device:
                low, high = low.to(val.device), high.to(val.device)
            # clamp + equal: two kernels; NaN never equals itself, so it fails too.
            if torch.equal(val.clamp(low, high), val):
                return None
            ok = (val >= low) & (val <= high)
        where = first_bad_index(~ok)
        inner = where[len(where) - self.ndim :]
        low_at, high_at = self.low[inner].item(), self.high[inner].item()
        return (
            f"value out of bounds: {format_location(where)} = {val[where].item()!r} is not in "
            f"[{low_at!r}, {high_at!r}] (low={format_value(self.low)}, high={format_value(self.high)})"
        )

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Clamps ``val`` into ``[low, high]`` (rounding first for integer specs).

        NaN entries count as 0 (and are clamped like any value); integer specs round first and
        never wrap around (``1e30`` becomes ``high``).

        Args:
            val: a tensor whose shape broadcasts to the spec's shape.

        Returns:
            The clamped tensor, with the spec's dtype.

        Raises:
            ValueError: when ``val``'s shape does not broadcast to the spec's shape.
        """
        val = self._project_input(val)
        scalar = self._scalar
        if is_int_dtype(self.dtype):
            if scalar is not None and val.is_floating_point() and self._exact_in_f64:
                return round_clamp(val, scalar[0], scalar[1], self.dtype)
            out = cast_int(val, self.dtype)
        elif not val.is_floating_point():
            out = val.to(self.dtype)
        elif val.dtype != self.dtype:
            out = torch.nan_to_num_(val.to(self.dtype), nan=0.0, posinf=math.inf, neginf=-math.inf)
        else:
            out = torch.nan_to_num(val, nan=0.0, posinf=math.inf, neginf=-math.inf)
        # ``out`` is a fresh tensor unless the cast was a no-op: clamp it in place then.
        clamp = out.clamp if out is val else out.clamp_
        if scalar is not None:
            # Python-number bounds: no broadcast of the bound tensors.
            return clamp(*scalar)
        low, high = self.low, self.high
        if low.device != val.device:
            low, high = low.to(val.device), high.to(val.device)
        return clamp(low, high)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Bounded)
            and self._same_meta(other)
            and torch.equal(self.low, other.low)
            and torch.equal(self.high, other.high)
        )

    def __repr__(self) -> str:
        return (
            f"Bounded(shape={self.shape}, low={format_value(self.low)}, high={format_value(self.high)}, "
            f"dtype={self.dtype}, device={self.device})"
        )
