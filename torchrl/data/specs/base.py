"""The ``TensorSpec`` base class, the small ``space`` records, and helpers shared by all specs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from torchrl._types import DeviceLike, IndexLike, ShapeLike

_EMPTY = torch.Size(())
_SCALARS = (bool, int, float, np.bool_, np.number)


def as_size(shape: ShapeLike | torch.Tensor | None) -> torch.Size:
    """Turns ``None``, an int or a sequence of ints into a ``torch.Size`` (hot path: keep cheap)."""
    if shape is None:
        return _EMPTY
    if type(shape) is torch.Size:
        return shape
    if isinstance(shape, (int, np.integer)):
        return torch.Size((int(shape),))
    if isinstance(shape, torch.Tensor):
        shape = shape.tolist()
    return torch.Size([int(s) for s in shape])


def as_spec_shape(shape: ShapeLike | torch.Tensor | None, owner: str) -> torch.Size:
    """Like ``as_size`` for a spec's own shape: rejects negative sizes with a ``ValueError``."""
    try:
        size = as_size(shape)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{owner}: shape must be a sequence of ints, got {shape!r}") from err
    if any(s < 0 for s in size):
        raise ValueError(f"{owner}: shape must have non-negative sizes, got {tuple(size)}")
    return size


def as_device(device: DeviceLike) -> torch.device | None:
    """Normalizes a device; a bare ``"cuda"`` gets the current index so that equality is stable."""
    if device is None:
        return None
    if type(device) is torch.device and (device.index is not None or device.type == "cpu"):
        return device
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def check_spec_dtype(dtype: object, owner: str) -> torch.dtype:
    """Returns ``dtype`` if it is a real torch dtype; raises ``ValueError`` naming ``owner``."""
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{owner}: dtype must be a torch.dtype, got {dtype!r}")
    if dtype.is_complex:
        raise ValueError(f"{owner}: complex dtypes are not supported, got {dtype}")
    return dtype


def check_discrete_dtype(dtype: object, owner: str) -> torch.dtype:
    """Like :func:`check_spec_dtype`, and also refuses floating dtypes (category indices)."""
    dtype = check_spec_dtype(dtype, owner)
    if dtype.is_floating_point:
        raise ValueError(
            f"{owner} holds integer values: its dtype must be an integer or bool dtype, got {dtype}"
        )
    return dtype


def is_int_dtype(dtype: torch.dtype) -> bool:
    """Whether ``dtype`` is an integer dtype (bool excluded)."""
    return not dtype.is_floating_point and not dtype.is_complex and dtype is not torch.bool


def dtype_int_range(dtype: torch.dtype) -> tuple[int, int]:
    """The smallest and largest value of an integer (or bool) dtype."""
    if dtype is torch.bool:
        return 0, 1
    info = torch.iinfo(dtype)
    return int(info.min), int(info.max)


# The largest float64 below 2**63: float64 cannot hold int64's max, and 2**63 wraps on a cast.
_F64_BELOW_2_63 = 2.0**63 - 1024.0


def cast_int(val: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Casts a real tensor to an integer dtype without wraparound.

    Floats are rounded (NaN counts as 0) and every value is clamped to the dtype's range before
    the cast, so ``300`` becomes ``127`` for ``int8``, never ``44``. For ``int64``, floats past
    the largest float64 below ``2**63`` saturate there (``2**63 - 1024``): float64 has no value
    closer to int64's maximum that still fits.
    """
    if val.dtype == dtype:
        return val
    if val.dtype is torch.bool:
        return val.to(dtype)
    imin, imax = dtype_int_range(dtype)
    if val.is_floating_point():
        work = val.double() if val.dtype is not torch.float64 else val.clone()
        work = torch.nan_to_num_(work.round_(), nan=0.0)
        return work.clamp_(float(imin), min(float(imax), _F64_BELOW_2_63)).to(dtype)
    lo, hi = dtype_int_range(val.dtype)
    if lo < imin or hi > imax:
        val = val.clamp(max(lo, imin), min(hi, imax))
    return val.to(dtype)


def round_clamp(val: torch.Tensor, low: int, high: int, dtype: torch.dtype) -> torch.Tensor:
    """Rounds a float tensor (NaN counts as 0), clamps it to ``[low, high]`` and casts it.

    ``low`` and ``high`` must be exact in float64 (``|x| < 2**53``) and fit ``dtype``: then the
    clamp happens before the cast, in place, and nothing wraps around.
    """
    work = val.double() if val.dtype is not torch.float64 else val.clone()
    return torch.nan_to_num_(work.round_(), nan=0.0).clamp_(low, high).to(dtype)


def check_n_fits(n: int, dtype: torch.dtype, owner: str, what: str = "n") -> None:
    """Rejects ``n`` categories whose largest index ``n - 1`` does not fit ``dtype``."""
    imax = dtype_int_range(dtype)[1]
    if n - 1 > imax:
        raise ValueError(
            f"{owner}: {what}={n} does not fit dtype {dtype}: the largest category {n - 1} "
            f"exceeds its maximum {imax}; use a wider integer dtype"
        )


def format_value(value: object, max_numel: int = 8) -> str:
    """Short, readable rendering of a tensor (or anything) for reprs and error messages."""
    if not isinstance(value, torch.Tensor):
        return repr(value)
    if value.numel() == 0:
        return f"empty tensor of shape {tuple(value.shape)}"
    if value.is_nested:
        return f"nested tensor with {value.size(0)} elements"
    if value.device.type == "meta":
        return f"meta tensor of shape {tuple(value.shape)}"
    flat = value.detach().reshape(-1)
    if value.numel() == 1 or bool((flat == flat[0]).all()):
        return repr(flat[0].item())
    if value.dim() >= 2:
        rows = value.detach().reshape(-1, value.shape[-1])
        if bool((rows == rows[0]).all()):
            return f"{format_value(rows[0], max_numel)} (broadcast to {tuple(value.shape)})"
    if value.numel() <= max_numel:
        return repr(value.detach().cpu().tolist())
    if value.dtype is torch.bool:
        return f"bool tensor of shape {tuple(value.shape)} ({int(flat.sum())} True)"
    return (
        f"tensor of shape {tuple(value.shape)} "
        f"(min {flat.min().item()!r}, max {flat.max().item()!r})"
    )


def first_bad_index(bad: torch.Tensor) -> tuple[int, ...]:
    """The index of the first ``True`` entry of ``bad``, to point at one offending value."""
    return tuple(int(i) for i in bad.nonzero()[0].tolist())


def format_location(where: tuple[int, ...]) -> str:
    """``value[i, j]`` (or ``value`` for a 0-dim index), to point at an entry in messages."""
    return f"value{list(where)}" if where else "value"


def describe_value(val: object) -> str:
    """``a tensor of shape ... and dtype ...`` or ``a <type>``, for error messages."""
    if isinstance(val, torch.Tensor):
        return f"a tensor of shape {tuple(val.shape)} and dtype {val.dtype}"
    return f"a {type(val).__name__}"


def _shallow_copy(obj: Any) -> Any:
    """``copy.copy`` for our plain spec objects, without its generic (slow) protocol."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    return new


def as_raw_tensor(val: object) -> torch.Tensor:
    """A tensor from ``val`` without changing its dtype; numpy arrays are wrapped without a copy."""
    if isinstance(val, torch.Tensor):
        return val
    if isinstance(val, np.ndarray):
        if val.dtype.kind in "biuf" and val.flags.writeable and val.dtype.isnative:
            return torch.from_numpy(val)
        return torch.as_tensor(np.array(val))
    return torch.as_tensor(val)


def masks_equal(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Whether two optional masks are both absent or hold equal values."""
    if a is None or b is None:
        return a is None and b is None
    return torch.equal(a, b)


INT64_MAX = 2**63 - 1


def check_n(n: object, owner: str) -> int:
    """Returns a category count ``n`` as an int in ``[1, 2**63 - 1]``; raises ``ValueError``."""
    if isinstance(n, torch.Tensor) and n.numel() == 1:
        n = n.item()
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
        raise ValueError(f"{owner}: n must be a positive int, got {n!r}")
    if n > INT64_MAX:
        raise ValueError(f"{owner}: n must be at most 2**63 - 1 (int64's maximum), got {n!r}")
    return int(n)


def prepare_mask(
    mask: torch.Tensor | np.ndarray | Sequence[Any],
    shape: torch.Size,
    device: torch.device | None,
    owner: str,
    check_rows: bool = True,
) -> torch.Tensor:
    """Validates a boolean mask and expands it to ``shape``; every group needs an allowed entry."""
    mask = torch.as_tensor(mask)
    if mask.dtype is not torch.bool:
        raise ValueError(f"{owner}: the mask must be a bool tensor, got dtype {mask.dtype}")
    try:
        ok = torch.broadcast_shapes(mask.shape, shape) == shape
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"{owner}: a mask of shape {tuple(mask.shape)} does not broadcast to {tuple(shape)}"
        )
    mask = mask.to(device if device is not None else "cpu").expand(shape)
    if check_rows and mask.numel() and not bool(mask.any(-1).all()):
        raise ValueError(
            f"{owner}: the mask allows no value for some entries: {format_value(mask)}"
        )
    return mask


def mask_repr(mask: torch.Tensor | None) -> str:
    """The ``, mask=...`` part of a spec's repr (empty without a mask)."""
    return "" if mask is None else f", mask={format_value(mask)}"


def round_index(val: torch.Tensor, high: int | torch.Tensor) -> torch.Tensor:
    """Rounds and clamps any numeric tensor to int64 indices in ``[0, high]`` (NaN gives 0)."""
    if isinstance(high, int) and high < 2**53 and val.is_floating_point():
        return round_clamp(val, 0, high, torch.int64)
    idx = cast_int(val, torch.int64).clamp(min=0)
    return torch.minimum(idx, torch.as_tensor(high, device=val.device))


def one_hot_mask_reason(val: torch.Tensor, mask: torch.Tensor | None) -> str | None:
    """Why a one-hot ``val`` selects a category that ``mask`` forbids (``None`` if it does not)."""
    if mask is None:
        return None
    bad = val.bool() & ~mask.to(val.device)
    if not bool(bad.any()):
        return None
    where = first_bad_index(bad.any(-1))
    return (
        f"value masked out: {format_location(where)} = {val[where].tolist()} selects a "
        f"category forbidden by the mask {format_value(mask)}"
    )


def masked_scores(val: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``val`` as float64 scores for an arg-max: NaN counts as 0, forbidden categories as -inf."""
    scores = torch.nan_to_num(val.double(), nan=0.0)
    if mask is not None:
        scores = scores.masked_fill(~mask.to(val.device), float("-inf"))
    return scores


def sample_masked(mask: torch.Tensor, lead: torch.Size) -> torch.Tensor:
    """Uniform indices among the allowed entries of ``mask[..., n]``, with ``lead`` extra dims."""
    scores = torch.rand(lead + mask.shape, device=mask.device)
    return scores.masked_fill_(~mask, -1.0).argmax(-1)


def nearest_allowed(idx: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Replaces each index by the nearest index allowed by ``mask[..., n]`` (ties go low)."""
    n = mask.shape[-1]
    categories = torch.arange(n, device=idx.device, dtype=torch.float32)
    dist = (idx.unsqueeze(-1).float() - categories).abs()
    return dist.masked_fill_(~mask.to(idx.device), float("inf")).argmin(-1)


def expand_ellipsis(idx: IndexLike, ndim: int) -> tuple:
    """Spells out ``...`` so that leaves, which have more dims, index the same batch dims."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    if not any(i is Ellipsis for i in idx):
        return idx
    pos = next(i for i, x in enumerate(idx) if x is Ellipsis)
    consumed = sum(
        (i.dim() if isinstance(i, torch.Tensor) and i.dtype is torch.bool else 1)
        for i in idx
        if i is not Ellipsis and i is not None
    )
    return idx[:pos] + (slice(None),) * (ndim - consumed) + idx[pos + 1 :]


def indexed_shape(shape: torch.Size, idx: IndexLike, owner: str) -> torch.Size:
    """The shape that indexing a tensor of ``shape`` with ``idx`` gives, without real data."""
    try:
        return torch.zeros((), dtype=torch.bool).expand(shape)[idx].shape
    except IndexError as err:
        raise IndexError(
            f"{owner}: index {idx!r} does not fit the indexable (batch) shape {tuple(shape)}"
        ) from err


def checked_expand_shape(
    old: torch.Size, new: Sequence[int], fixed_tail: int, owner: str
) -> torch.Size:
    """Validates an ``expand`` target; ``-1`` keeps a size, singletons broadcast like ``torch``."""
    new = list(new)
    lead = len(new) - len(old)
    if lead < 0:
        raise ValueError(
            f"{owner}: cannot expand shape {tuple(old)} to the shorter shape {tuple(new)}"
        )
    for i, s in enumerate(new):
        if i < lead:
            if s < 0:
                raise ValueError(f"{owner}: new leading dims must be >= 0, got {tuple(new)}")
            continue
        o = old[i - lead]
        if s == -1:
            new[i] = o
        elif s != o and (o != 1 or i >= len(new) - fixed_tail):
            raise ValueError(
                f"{owner}: cannot expand shape {tuple(old)} to {tuple(new)}: trailing sizes must "
                f"match the current ones (only batch singletons can grow)"
            )
    return torch.Size(new)


class ContinuousBox:
    """The ``space`` of a continuous spec: its ``low`` and ``high`` tensors.

    Args:
        low: lower bounds, shape of the spec.
        high: upper bounds, shape of the spec.

    Examples:
        >>> import torch
        >>> box = ContinuousBox(torch.zeros(2), torch.ones(2))
        >>> box.high
        tensor([1., 1.])
    """

    __slots__ = ("low", "high")

    def __init__(self, low: torch.Tensor, high: torch.Tensor) -> None:
        self.low = low
        self.high = high

    def __repr__(self) -> str:
        return f"ContinuousBox(low={format_value(self.low)}, high={format_value(self.high)})"


class CategoricalBox:
    """The ``space`` of a categorical or one-hot spec: the number of categories ``n``.

    Args:
        n: number of categories.

    Examples:
        >>> CategoricalBox(4)
        CategoricalBox(n=4)
    """

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __repr__(self) -> str:
        return f"CategoricalBox(n={self.n})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CategoricalBox) and other.n == self.n


class BinaryBox:
    """The ``space`` of a binary spec: the number of bits ``n``.

    Args:
        n: number of binary entries.

    Examples:
        >>> BinaryBox(3)
        BinaryBox(n=3)
    """

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __repr__(self) -> str:
        return f"BinaryBox(n={self.n})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BinaryBox) and other.n == self.n


class BoxList:
    """The ``space`` of a multi-categorical spec: one ``CategoricalBox`` per sub-action.

    Args:
        boxes: the boxes, in order.

    Examples:
        >>> BoxList([CategoricalBox(2), CategoricalBox(3)]).nvec
        [2, 3]
    """

    __slots__ = ("boxes",)

    def __init__(self, boxes: Sequence[CategoricalBox]) -> None:
        self.boxes = list(boxes)

    @property
    def nvec(self) -> list[int]:
        """The number of categories of each box."""
        return [box.n for box in self.boxes]

    def __repr__(self) -> str:
        return f"BoxList(boxes={self.boxes})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BoxList) and other.boxes == self.boxes


class TensorSpec(ABC):
    """Base class of all specs: describes the shape, dtype, device and domain of a value.

    A spec's ``shape`` may have leading *batch* dims; ``rand``/``zero``/``one`` take extra leading
    dims, and ``is_in`` accepts values with extra leading dims. Subclasses implement ``rand``,
    ``_why_not_in`` (``None`` when a value fits, else the reason) and ``project``; shape
    operations (``expand``, ``squeeze``, ``unsqueeze``, indexing) work on the tensors named in
    ``_tensor_fields``, whose layout is ``[*batch, *rest]``.

    Examples:
        >>> from torchrl.data import Bounded
        >>> spec = Bounded(-1.0, 1.0, shape=(3,))
        >>> spec.is_in(spec.rand((5,)))
        True
        >>> spec.expand(2, 3).shape
        torch.Size([2, 3])
    """

    shape: torch.Size
    dtype: torch.dtype | None
    device: torch.device | None

    #: Trailing dims that are not batch dims (the one-hot dim): indexing and stacking skip them.
    _feature_ndim: ClassVar[int] = 0
    #: Attributes holding tensors laid out as ``[*batch, *rest]``, moved along by shape ops.
    _tensor_fields: ClassVar[tuple[str, ...]] = ()
    #: True for dict-like specs (``Composite``, ``StackedComposite``).
    _is_composite: ClassVar[bool] = False

    # ----------------------------------------------------------------- basic attributes
    @property
    def ndim(self) -> int:
        """Number of dims of ``shape``."""
        return len(self.shape)

    def ndimension(self) -> int:
        """Number of dims of ``shape`` (same as ``ndim``)."""
        return len(self.shape)

    @property
    def _batch_ndim(self) -> int:
        return len(self.shape) - self._feature_ndim

    @property
    def _name(self) -> str:
        """Short description used in error messages."""
        return f"{type(self).__name__}(shape={tuple(self.shape)}, dtype={self.dtype})"

    # ----------------------------------------------------------------- sampling
    @abstractmethod
    def rand(self, shape: ShapeLike | None = None) -> Any:
        """Draws a random value in the spec.

        Args:
            shape: extra leading batch dims; the result has shape ``[*shape, *self.shape]``.

        Returns:
            A value for which ``is_in`` is true.
        """

    def zero(self, shape: ShapeLike | None = None) -> Any:
        """A zero-filled value of shape ``[*shape, *self.shape]`` (a placeholder, not a sample).

        Args:
            shape: extra leading batch dims.

        Returns:
            A tensor of zeros with the spec's dtype and device.
        """
        return torch.zeros(as_size(shape) + self.shape, dtype=self.dtype, device=self.device)

    def one(self, shape: ShapeLike | None = None) -> Any:
        """A one-filled value of shape ``[*shape, *self.shape]``.

        Args:
            shape: extra leading batch dims.

        Returns:
            A tensor of ones with the spec's dtype and device.
        """
        return torch.ones(as_size(shape) + self.shape, dtype=self.dtype, device=self.device)

    # ----------------------------------------------------------------- membership
    @abstractmethod
    def _why_not_in(self, val: Any) -> str | None:
        """``None`` when ``val`` is in the spec, else a sentence saying why it is not."""

    def _check_tensor(self, val: Any) -> str | None:
        """Common checks of a leaf value: a tensor with the right dtype and trailing shape."""
        if not isinstance(val, torch.Tensor):
            return f"expected a tensor, got {describe_value(val)}"
        if val.dtype != self.dtype:
            return f"wrong dtype: expected {self.dtype}, got {val.dtype}"
        shape = self.shape
        n = len(shape)
        if n and (val.dim() < n or val.shape[-n:] != shape):
            return (
                f"wrong shape: expected a shape ending with {tuple(shape)}, got {tuple(val.shape)}"
            )
        return None

    def is_in(self, val: Any) -> bool:
        """Whether ``val`` fits the spec (shape, dtype, bounds, mask).

        Args:
            val: a value of shape ``[*batch, *self.shape]`` (extra leading dims are allowed).

        Returns:
            ``True`` when the value is in the spec.
        """
        return self._why_not_in(val) is None

    def assert_is_in(self, val: Any) -> None:
        """Raises an ``AssertionError`` saying why ``val`` is not in the spec.

        Args:
            val: the value to check.

        Raises:
            AssertionError: naming the spec and what is wrong (shape, dtype, bounds, mask).
        """
        reason = self._why_not_in(val)
        if reason is not None:
            raise AssertionError(f"{self._name}: {reason}")

    @abstractmethod
    def project(self, val: Any) -> Any:
        """Maps a value into the spec (clamping, rounding or arg-maxing as the spec needs).

        Args:
            val: a value with the spec's trailing shape.

        Returns:
            A value for which ``is_in`` is true.

        Raises:
            ValueError: when ``val``'s shape does not broadcast to the spec's shape (extra
                leading dims are kept), or for a complex ``val``.
        """

    def _project_input(self, val: Any) -> torch.Tensor:
        """``val`` as a real tensor whose shape ends with ``self.shape`` (broadcast if needed)."""
        if not isinstance(val, torch.Tensor):
            val = as_raw_tensor(val)
        if val.dtype.is_complex:
            raise ValueError(f"{self._name}: cannot project a complex value ({val.dtype})")
        shape = self.shape
        n = len(shape)
        vshape = val.shape
        if vshape == shape or n == 0 or vshape[-n:] == shape:
            return val
        try:
            target: torch.Size | None = torch.broadcast_shapes(val.shape, shape)
        except RuntimeError:
            target = None
        if target is None or target[len(target) - n :] != shape:
            raise ValueError(
                f"{self._name}: cannot project a value of shape {tuple(val.shape)}: it does not "
                f"broadcast to the spec's shape {tuple(shape)}"
            )
        # A copy, not a view: the result may be written to in place later.
        return val.expand(target).contiguous()

    # ----------------------------------------------------------------- conversion
    def _as_tensor(self, val: Any, ignore_device: bool) -> torch.Tensor:
        device = None if ignore_device else self.device
        if not isinstance(val, (torch.Tensor, np.ndarray)):
            if isinstance(val, _SCALARS) and self.shape.numel() == 1:
                # One kernel for the common "reward is a python float" case.
                if isinstance(val, np.generic):
                    val = val.item()
                return torch.full(self.shape, val, dtype=self.dtype, device=device)
            return torch.as_tensor(val, dtype=self.dtype, device=device)
        if (
            isinstance(val, np.ndarray)
            and val.dtype.kind in "biuf"
            and val.flags.writeable
            and val.dtype.isnative
        ):
            # One conversion kernel (or none: a matching array is wrapped, not copied).
            return torch.as_tensor(val, dtype=self.dtype, device=device)
        out = as_raw_tensor(val)
        if out.dtype != self.dtype:
            out = out.to(self.dtype)
        if device is not None and out.device != device:
            out = out.to(device)
        return out

    def _fit_shape(self, out: torch.Tensor) -> torch.Tensor:
        shape = self.shape
        if out.shape == shape:
            return out
        n = len(shape)
        if out.dim() > n and (n == 0 or out.shape[-n:] == shape):
            return out
        if out.numel() == shape.numel():
            return out.reshape(shape)
        raise ValueError(
            f"{self._name}: cannot encode a value of shape {tuple(out.shape)}: expected the "
            f"shape {tuple(shape)} (or extra leading dims, or {shape.numel()} elements)"
        )

    def encode(self, val: Any, *, ignore_device: bool = False) -> Any:
        """Turns a numpy array, python number or list into a tensor of this spec.

        A writable numpy array whose dtype already matches is wrapped without a copy (the tensor
        shares its memory): copy the array first if its producer reuses it.

        Args:
            val: the value; a tensor is cast and moved as needed.
            ignore_device: keep the value's device instead of moving it to the spec's.

        Returns:
            A tensor with the spec's dtype, device and shape (``val`` reshaped when it has the same
            number of elements; extra leading dims are kept).

        Raises:
            ValueError: when the value cannot take the spec's shape.
        """
        return self._fit_shape(self._as_tensor(val, ignore_device))

    def to_numpy(self, val: Any, safe: bool = False) -> Any:
        """Converts a value of this spec to a numpy array.

        Args:
            val: a tensor in the spec.
            safe: check ``val`` with ``assert_is_in`` first.

        Returns:
            A numpy array (on CPU); ``bfloat16``, which numpy lacks, becomes ``float32``
            (exactly: every ``bfloat16`` value is a ``float32``).
        """
        if safe:
            self.assert_is_in(val)
        val = val.detach().cpu()
        if val.dtype is torch.bfloat16:
            val = val.float()
        return val.numpy()

    # ----------------------------------------------------------------- device and dtype
    def _copy_with(self, shape: torch.Size, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
        """A shallow copy with a new ``shape`` and ``fn`` applied to every tensor field."""
        new = _shallow_copy(self)
        new.shape = shape
        for name in self._tensor_fields:
            t = getattr(self, name)
            if t is not None:
                setattr(new, name, fn(t))
        return new

    def _with_dtype(self, dtype: torch.dtype) -> TensorSpec:
        new = _shallow_copy(self)
        new.dtype = dtype
        return new

    def to(self, dest: torch.dtype | DeviceLike) -> TensorSpec:
        """Returns the spec on another device or with another dtype (``self`` if unchanged).

        Args:
            dest: a ``torch.device`` / device string, or a ``torch.dtype``.

        Returns:
            The converted spec.
        """
        if isinstance(dest, torch.dtype):
            return self if dest == self.dtype else self._with_dtype(dest)
        device = as_device(dest)
        if device == self.device:
            return self
        new = self._copy_with(self.shape, lambda t: t.to(device))
        new.device = device
        return new

    def cpu(self) -> TensorSpec:
        """Returns the spec on CPU."""
        return self.to("cpu")

    def cuda(self, device: int | None = None) -> TensorSpec:
        """Returns the spec on a CUDA device."""
        return self.to("cuda" if device is None else torch.device("cuda", device))

    def clone(self) -> TensorSpec:
        """A copy that shares no tensors with this spec."""
        return self._copy_with(self.shape, lambda t: t.clone())

    # ----------------------------------------------------------------- shape operations
    def expand(self, *shape: int | Sequence[int]) -> TensorSpec:
        """Returns the spec with a new, larger shape (leading batch dims, grown singletons).

        Args:
            *shape: the full new shape (ints or one sequence); it must end with the current
                shape, where ``-1`` keeps a size and batch singletons may grow.

        Returns:
            The expanded spec.

        Raises:
            ValueError: when the new shape is not an expansion of the current one.
        """
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])  # type: ignore[arg-type]
        new_shape = checked_expand_shape(self.shape, shape, self._feature_ndim, self._name)  # type: ignore[arg-type]
        old_batch = self._batch_ndim
        new_batch = new_shape[: len(new_shape) - self._feature_ndim]
        return self._copy_with(
            new_shape, lambda t: t.expand(torch.Size((*new_batch, *t.shape[old_batch:])))
        )

    def _batch_dim(self, dim: int, extra: int = 0) -> int:
        """Normalizes ``dim`` and checks that it is a batch dim (``extra`` allows one past the end)."""
        ndim = self.ndim + extra
        if not -ndim <= dim < ndim:
            raise ValueError(f"{self._name}: dim {dim} is out of range")
        dim = dim % ndim if ndim else 0
        if dim > self._batch_ndim - 1 + extra:
            raise ValueError(
                f"{self._name}: dim {dim} is a feature dim (the last {self._feature_ndim}); "
                "only batch dims can be squeezed, unsqueezed, indexed or stacked"
            )
        return dim

    def squeeze(self, dim: int | None = None) -> TensorSpec:
        """Removes singleton batch dims (all of them when ``dim`` is None).

        Args:
            dim: the dim to remove; a dim whose size is not 1 is left as is, like ``torch``.

        Returns:
            The squeezed spec.
        """
        if dim is None:
            dims = tuple(i for i in range(self._batch_ndim) if self.shape[i] == 1)
        else:
            d = self._batch_dim(dim)
            dims = (d,) if self.shape[d] == 1 else ()
        shape = torch.Size(s for i, s in enumerate(self.shape) if i not in dims)
        return self._copy_with(shape, lambda t: t.squeeze(dims) if dims else t)

    def unsqueeze(self, dim: int) -> TensorSpec:
        """Inserts a batch dim of size 1 at ``dim``.

        Args:
            dim: where the new dim goes (negative counts from the end, like ``torch.unsqueeze``).

        Returns:
            The unsqueezed spec.
        """
        d = self._batch_dim(dim, extra=1)
        shape = torch.Size((*self.shape[:d], 1, *self.shape[d:]))
        return self._copy_with(shape, lambda t: t.unsqueeze(d))

    def __getitem__(self, idx: IndexLike) -> TensorSpec:
        """Indexes the batch dims of the spec like a tensor of shape ``self.shape``."""
        batch = self.shape[: self._batch_ndim]
        new_batch = indexed_shape(batch, idx, self._name)
        shape = torch.Size((*new_batch, *self.shape[len(batch) :]))
        return self._copy_with(shape, lambda t: t[idx])

    # ----------------------------------------------------------------- comparison, display
    def _same_meta(self, other: Any) -> bool:
        return (
            self.shape == other.shape and self.dtype == other.dtype and self.device == other.device
        )

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def __torch_function__(
        cls,
        func: Callable,
        types: tuple[type, ...],
        args: tuple = (),
        kwargs: dict | None = None,
    ) -> Any:
        """Lets ``torch.stack`` take a list of specs (see ``stack_specs``)."""
        if func is torch.stack:
            from torchrl.data.specs.stacked import stack_specs

            return stack_specs(*args, **(kwargs or {}))
        return NotImplemented
