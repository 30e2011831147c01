"""Discrete specs over one set of categories: ``Categorical``, ``OneHot`` and ``Binary``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from torchrl._types import DeviceLike, ShapeLike
from torchrl.data.specs.base import (
    BinaryBox,
    CategoricalBox,
    TensorSpec,
    as_device,
    as_raw_tensor,
    as_size,
    as_spec_shape,
    check_discrete_dtype,
    check_n,
    check_n_fits,
    first_bad_index,
    format_location,
    format_value,
    mask_repr,
    masked_scores,
    masks_equal,
    nearest_allowed,
    one_hot_mask_reason,
    prepare_mask,
    round_index,
    sample_masked,
)

# Up to this many categories, one-hot samples are rows of a cached identity matrix.
_EYE_MAX_N = 256


class Categorical(TensorSpec):
    """Integer values in ``{0, ..., n - 1}``, optionally restricted by a mask.

    Args:
        n: number of categories (> 0).
        shape: the value's shape (default ``()``, one category index).
        device: where values live (``None``: wherever they come).
        dtype: an integer dtype (default ``torch.int64``), or ``torch.bool`` when ``n <= 2``.
        mask: bool tensor broadcastable to ``[*shape, n]``; ``False`` forbids a category.

    Raises:
        ValueError: for ``n <= 0``, a float dtype, a dtype that cannot hold ``n - 1`` (``n=300``
            with ``torch.uint8``), or a bad mask.

    Examples:
        >>> import torch
        >>> spec = Categorical(4, shape=(2,), mask=torch.tensor([True, False, True, False]))
        >>> spec
        Categorical(n=4, shape=torch.Size([2]), dtype=torch.int64, device=None, mask=[True, False, True, False] (broadcast to (2, 4)))
        >>> bool((spec.rand((100,)) % 2 == 0).all())
        True
        >>> spec.is_in(torch.tensor([0, 1]))
        False
        >>> spec.to_one_hot(torch.tensor([0, 2]))
        tensor([[ True, False, False, False],
                [False, False,  True, False]])
    """

    _tensor_fields = ("mask",)

    def __init__(
        self,
        n: int,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        dtype: torch.dtype | None = None,
        mask: torch.Tensor | None = None,
    ) -> None:
        name = type(self).__name__
        self.n = check_n(n, name)
        self.dtype = check_discrete_dtype(torch.int64 if dtype is None else dtype, name)
        if self.dtype is torch.bool and self.n > 2:
            raise ValueError(f"{name}: a bool dtype holds at most 2 categories, got n={self.n}")
        check_n_fits(self.n, self.dtype, name)
        self.shape = torch.Size(()) if shape is None else as_spec_shape(shape, name)
        self.device = as_device(device)
        self.mask: torch.Tensor | None = None
        if mask is not None:
            self.update_mask(mask)

    @property
    def domain(self) -> str:
        """Always ``"discrete"``."""
        return "discrete"

    @property
    def space(self) -> CategoricalBox:
        """A ``CategoricalBox`` holding ``n``."""
        return CategoricalBox(self.n)

    def update_mask(self, mask: torch.Tensor | None) -> None:
        """Sets (or clears, with ``None``) the mask of allowed categories, in place.

        Args:
            mask: bool tensor broadcastable to ``[*shape, n]`` with an allowed category per entry.
        """
        if mask is None:
            self.mask = None
            return
        self.mask = prepare_mask(mask, self.shape + (self.n,), self.device, type(self).__name__)

    def _with_dtype(self, dtype: torch.dtype) -> TensorSpec:
        return type(self)(self.n, self.shape, self.device, dtype, self.mask)

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Uniform categories (among the allowed ones when masked).

        Args:
            shape: extra leading batch dims.

        Returns:
            A tensor of shape ``[*shape, *self.shape]``.
        """
        lead = as_size(shape)
        if self.mask is None:
            return torch.randint(0, self.n, lead + self.shape, dtype=self.dtype, device=self.device)
        return sample_masked(self.mask, lead).to(self.dtype)

    def _why_not_in(self, val: Any) -> str | None:
        reason = self._check_tensor(val)
        if reason is not None:
            return reason
        if self.dtype is torch.bool:
            if self.n == 1 and bool(val.any()):
                return f"value out of range: n=1 allows only False, got {format_value(val)}"
        elif val.numel():
            lo, hi = torch.aminmax(val)
            if lo.item() < 0 or hi.item() >= self.n:
                ok = (val >= 0) & (val < self.n)
                where = first_bad_index(~ok)
                return (
                    f"value out of range: {format_location(where)} = {val[where].item()} is not in "
                    f"{{0, ..., {self.n - 1}}}"
                )
        if self.mask is not None:
            mask = self.mask.to(val.device)
            if val.dim() != self.ndim:
                mask = mask.expand(*val.shape, self.n)
            allowed = mask.gather(-1, val.long().unsqueeze(-1)).squeeze(-1)
            if not bool(allowed.all()):
                where = first_bad_index(~allowed)
                return (
                    f"value masked out: {format_location(where)} = {val[where].item()} is not allowed "
                    f"by the mask {format_value(self.mask)}"
                )
        return None

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Rounds and clamps ``val`` to ``{0, ..., n - 1}``; masked-out values go to the nearest
        allowed category.

        NaN entries count as 0.

        Args:
            val: a numeric tensor whose shape broadcasts to the spec's shape.

        Returns:
            A tensor in the spec.

        Raises:
            ValueError: when ``val``'s shape does not broadcast to the spec's shape.
        """
        idx = round_index(self._project_input(val), self.n - 1)
        if self.mask is not None:
            idx = nearest_allowed(idx, self.mask)
        return idx.to(self.dtype)

    def to_one_hot(self, val: torch.Tensor, safe: bool = False) -> torch.Tensor:
        """Converts category indices to bool one-hot vectors.

        Args:
            val: indices of shape ``[*batch, *self.shape]``.
            safe: check ``val`` with ``assert_is_in`` first.

        Returns:
            A bool tensor of shape ``[*batch, *self.shape, n]``.
        """
        if safe:
            self.assert_is_in(val)
        return F.one_hot(val.long(), self.n).bool()

    def to_one_hot_spec(self) -> OneHot:
        """The ``OneHot`` spec of the one-hot encoding of this spec's values."""
        return OneHot(self.n, self.shape + (self.n,), self.device, torch.bool, self.mask)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Categorical)
            and type(other) is type(self)
            and self._same_meta(other)
            and self.n == other.n
            and masks_equal(self.mask, other.mask)
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n={self.n}, shape={self.shape}, dtype={self.dtype}, "
            f"device={self.device}{mask_repr(self.mask)})"
        )


class OneHot(TensorSpec):
    """One-hot vectors over ``n`` categories: the last dim has size ``n`` and a single one.

    Args:
        n: number of categories (> 0).
        shape: the value's shape, ending with ``n`` (default ``(n,)``).
        device: where values live (``None``: wherever they come).
        dtype: bool (default) or an integer dtype (any of them holds the 0/1 entries, whatever
            ``n``; indices from ``to_categorical`` are int64).
        mask: bool tensor broadcastable to ``shape``; ``False`` forbids a category.

    Raises:
        ValueError: for ``n <= 0``, ``shape[-1] != n``, a float dtype, or a bad mask.

    Examples:
        >>> import torch
        >>> spec = OneHot(3)
        >>> spec.encode(2)
        tensor([False, False,  True])
        >>> spec.to_categorical(torch.tensor([[0, 1, 0], [1, 0, 0]], dtype=torch.bool))
        tensor([1, 0])
        >>> spec.project(torch.tensor([0.1, 0.7, 0.2]))
        tensor([False,  True, False])
        >>> spec.to_categorical_spec()
        Categorical(n=3, shape=torch.Size([]), dtype=torch.int64, device=None)
    """

    _feature_ndim = 1
    _tensor_fields = ("mask",)

    def __init__(
        self,
        n: int,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        dtype: torch.dtype | None = None,
        mask: torch.Tensor | None = None,
    ) -> None:
        self.n = check_n(n, "OneHot")
        self.dtype = check_discrete_dtype(torch.bool if dtype is None else dtype, "OneHot")
        self.shape = torch.Size((self.n,)) if shape is None else as_spec_shape(shape, "OneHot")
        if not self.shape or self.shape[-1] != self.n:
            raise ValueError(
                f"OneHot: the last dim of shape must be n={self.n}, got shape {tuple(self.shape)}"
            )
        self.device = as_device(device)
        self._eyes: dict[torch.device, torch.Tensor] = {}
        self.mask: torch.Tensor | None = None
        if mask is not None:
            self.update_mask(mask)

    @property
    def domain(self) -> str:
        """Always ``"discrete"``."""
        return "discrete"

    @property
    def space(self) -> CategoricalBox:
        """A ``CategoricalBox`` holding ``n``."""
        return CategoricalBox(self.n)

    def update_mask(self, mask: torch.Tensor | None) -> None:
        """Sets (or clears, with ``None``) the mask of allowed categories, in place.

        Args:
            mask: bool tensor broadcastable to ``shape`` with an allowed category per vector.
        """
        if mask is None:
            self.mask = None
            return
        self.mask = prepare_mask(mask, self.shape, self.device, "OneHot")

    def _with_dtype(self, dtype: torch.dtype) -> TensorSpec:
        return OneHot(self.n, self.shape, self.device, dtype, self.mask)

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Uniform one-hot vectors (among the allowed categories when masked).

        Args:
            shape: extra leading batch dims.

        Returns:
            A tensor of shape ``[*shape, *self.shape]``.
        """
        lead = as_size(shape)
        if self.mask is None:
            idx = torch.randint(0, self.n, lead + self.shape[:-1], device=self.device)
        else:
            idx = sample_masked(self.mask, lead)
        if self.n <= _EYE_MAX_N:
            # Rows of an identity matrix: one gather instead of zeros + scatter. A 0-dim index
            # would return a view of the cached matrix, hence the 1-element detour.
            eye = self._eye(idx.device)
            return eye[idx.reshape(1)][0] if idx.dim() == 0 else eye[idx]
        out = torch.zeros(lead + self.shape, dtype=self.dtype, device=idx.device)
        return out.scatter_(-1, idx.unsqueeze(-1), 1)

    def _eye(self, device: torch.device) -> torch.Tensor:
        eye = self._eyes.get(device)
        if eye is None:
            eye = self._eyes[device] = torch.eye(self.n, dtype=self.dtype, device=device)
        return eye

    def _why_not_in(self, val: Any) -> str | None:
        reason = self._check_tensor(val)
        if reason is not None:
            return reason
        sums = val.sum(-1)
        ok = sums == 1
        if self.dtype is not torch.bool:
            ok &= val.amin(-1) >= 0
        if not bool(ok.all()):
            where = first_bad_index(~ok)
            return f"not one-hot: {format_location(where)} = {val[where].tolist()} has not exactly one 1"
        return one_hot_mask_reason(val, self.mask)

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Keeps a valid one-hot value; otherwise one-hot of the (allowed) arg-max.

        NaN scores count as 0.

        Args:
            val: a numeric tensor (e.g. scores) whose shape broadcasts to the spec's shape.

        Returns:
            A tensor in the spec.

        Raises:
            ValueError: when ``val``'s shape does not broadcast to the spec's shape.
        """
        val = self._project_input(val)
        if self._why_not_in(val) is None:
            return val
        scores = masked_scores(val, self.mask)
        idx = scores.argmax(-1, keepdim=True)
        return torch.zeros(val.shape, dtype=self.dtype, device=val.device).scatter_(-1, idx, 1)

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """Turns a category index (or an already one-hot value) into a one-hot tensor.

        A value whose shape ends with ``shape`` is taken as one-hot; anything else as indices.

        Args:
            val: indices (python int, numpy array, tensor) or one-hot values.
            ignore_device: keep the value's device instead of moving it to the spec's.

        Returns:
            A tensor of the spec's dtype and shape (extra leading dims kept).

        Raises:
            ValueError: for indices out of ``{0, ..., n - 1}`` or an incompatible shape.
        """
        if isinstance(val, (int, np.integer)) and not isinstance(val, bool) and self.ndim == 1:
            if not 0 <= val < self.n:
                raise ValueError(
                    f"{self._name}: cannot encode {val!r}: expected an index in "
                    f"{{0, ..., {self.n - 1}}}"
                )
            out = torch.zeros(
                self.shape, dtype=self.dtype, device=None if ignore_device else self.device
            )
            out[val] = 1
            return out
        raw = as_raw_tensor(val)
        n = self.ndim
        if raw.dim() < n or raw.shape[-n:] != self.shape:
            if raw.is_floating_point() or bool(((raw < 0) | (raw >= self.n)).any()):
                raise ValueError(
                    f"{self._name}: cannot encode {format_value(raw)}: expected indices in "
                    f"{{0, ..., {self.n - 1}}} or one-hot values of shape {tuple(self.shape)}"
                )
            out = torch.zeros(raw.shape + (self.n,), dtype=self.dtype, device=raw.device)
            raw = out.scatter_(-1, raw.long().unsqueeze(-1), 1)
        return self._fit_shape(self._as_tensor(raw, ignore_device))

    def to_categorical(self, val: torch.Tensor, safe: bool = False) -> torch.Tensor:
        """Converts one-hot vectors to category indices.

        Args:
            val: one-hot values of shape ``[*batch, *self.shape]``.
            safe: check ``val`` with ``assert_is_in`` first.

        Returns:
            An int64 tensor of shape ``[*batch, *self.shape[:-1]]``.
        """
        if safe:
            self.assert_is_in(val)
        if val.dtype is torch.bool:
            val = val.view(torch.uint8)
        return val.argmax(-1)

    def to_categorical_spec(self) -> Categorical:
        """The ``Categorical`` spec of the indices of this spec's values."""
        return Categorical(self.n, self.shape[:-1], self.device, torch.int64, self.mask)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, OneHot)
            and self._same_meta(other)
            and masks_equal(self.mask, other.mask)
        )

    def __repr__(self) -> str:
        return (
            f"OneHot(n={self.n}, shape={self.shape}, dtype={self.dtype}, "
            f"device={self.device}{mask_repr(self.mask)})"
        )


class Binary(TensorSpec):
    """Vectors of ``n`` independent 0/1 entries (gymnasium's ``MultiBinary``).

    Args:
        n: number of entries, the last dim of ``shape`` (inferred from ``shape`` when omitted).
        shape: the value's shape (default ``(n,)``).
        device: where values live (``None``: wherever they come).
        dtype: an integer or bool dtype (default ``torch.int8``; any of them holds 0/1).

    Raises:
        ValueError: when neither ``n`` nor ``shape`` is given, ``shape[-1] != n``, or a float
            dtype is asked for.

    Examples:
        >>> import torch
        >>> spec = Binary(3)
        >>> spec.is_in(torch.tensor([0, 1, 1], dtype=torch.int8))
        True
        >>> spec.project(torch.tensor([0.2, 0.9, -3.0]))
        tensor([0, 1, 0], dtype=torch.int8)
        >>> Binary(shape=(2, 4)).n
        4
    """

    _feature_ndim = 1

    def __init__(
        self,
        n: int | None = None,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if n is None and shape is None:
            raise ValueError("Binary: give n or shape")
        if shape is None:
            self.n = check_n(n, "Binary")
            self.shape = torch.Size((self.n,))
        else:
            self.shape = as_spec_shape(shape, "Binary")
            if not self.shape:
                raise ValueError("Binary: shape must have at least one dim (the n entries)")
            self.n = self.shape[-1] if n is None else check_n(n, "Binary")
            if self.shape[-1] != self.n:
                raise ValueError(
                    f"Binary: the last dim of shape must be n={self.n}, got {tuple(self.shape)}"
                )
        self.dtype = check_discrete_dtype(torch.int8 if dtype is None else dtype, "Binary")
        self.device = as_device(device)

    @property
    def domain(self) -> str:
        """Always ``"discrete"``."""
        return "discrete"

    @property
    def space(self) -> BinaryBox:
        """A ``BinaryBox`` holding ``n``."""
        return BinaryBox(self.n)

    def _with_dtype(self, dtype: torch.dtype) -> TensorSpec:
        return Binary(self.n, self.shape, self.device, dtype)

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Independent fair coin flips.

        Args:
            shape: extra leading batch dims.

        Returns:
            A tensor of shape ``[*shape, *self.shape]``.
        """
        return torch.randint(
            0, 2, as_size(shape) + self.shape, dtype=self.dtype, device=self.device
        )

    def _why_not_in(self, val: Any) -> str | None:
        reason = self._check_tensor(val)
        if reason is not None or self.dtype is torch.bool:
            return reason
        if not val.numel():
            return None
        lo, hi = torch.aminmax(val)
        if lo.item() < 0 or hi.item() > 1:
            where = first_bad_index((val != 0) & (val != 1))
            return f"value not binary: {format_location(where)} = {val[where].item()} is not 0 or 1"
        return None

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Maps values above 0.5 to 1 and the rest to 0.

        NaN becomes 0.

        Args:
            val: a numeric tensor whose shape broadcasts to the spec's shape.

        Returns:
            A tensor in the spec.

        Raises:
            ValueError: when ``val``'s shape does not broadcast to the spec's shape.
        """
        val = self._project_input(val)
        if val.dtype is torch.bool:
            return val.to(self.dtype)
        return (val > 0.5).to(self.dtype)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Binary) and self._same_meta(other)

    def __repr__(self) -> str:
        return f"Binary(n={self.n}, shape={self.shape}, dtype={self.dtype}, device={self.device})"
