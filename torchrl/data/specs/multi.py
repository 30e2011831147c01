"""Discrete specs over several independent sets of categories: ``MultiCategorical`` (one index
per sub-action) and ``MultiOneHot`` (concatenated one-hot vectors)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from torchrl._types import DeviceLike, ShapeLike
from torchrl.data.specs.base import (
    BoxList,
    CategoricalBox,
    TensorSpec,
    as_device,
    as_raw_tensor,
    as_size,
    as_spec_shape,
    check_discrete_dtype,
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

# randint(2**62) % n is uniform up to a bias of n / 2**62: exact enough, and stays in int64.
_RAND_HIGH = 2**62


def _nvec_tensor(nvec: Any, owner: str) -> torch.Tensor:
    try:
        t = torch.as_tensor(nvec).detach()
    except (RuntimeError, TypeError, OverflowError) as err:
        raise ValueError(
            f"{owner}: nvec must be a non-empty sequence of ints, got {nvec!r}"
        ) from err
    if t.dim() == 0 or t.numel() == 0:
        raise ValueError(f"{owner}: nvec must be a non-empty sequence of ints, got {nvec!r}")
    if t.is_floating_point():
        if not bool((t == t.round()).all()):
            raise ValueError(f"{owner}: nvec must hold integers, got {format_value(t)}")
    elif t.dtype is torch.bool or t.is_complex():
        raise ValueError(f"{owner}: nvec must hold integers, got dtype {t.dtype}")
        if bool((t.double() >= 2.0**63).any()):
            raise ValueError(
                f"{owner}: nvec entries must be at most 2**63 - 1, got {format_value(t)}"
            )
    t = t.long()
    if bool((t <= 0).any()):
        raise ValueError(f"{owner}: every entry of nvec must be > 0, got {format_value(t)}")
    return t


def _check_groups(mask: torch.Tensor, nvec: list[int], owner: str) -> None:
    for i, part in enumerate(mask.split(nvec, -1)):
        if part.numel() and not bool(part.any(-1).all()):
            raise ValueError(f"{owner}: the mask allows no value in group {i} for some entries")


class MultiCategorical(TensorSpec):
    """One category index per sub-action: ``value[..., i]`` lies in ``{0, ..., nvec[i] - 1}``.

    Args:
        nvec: categories of each sub-action; a tensor may also vary along batch dims.
        shape: the value's shape, ending with ``len(nvec)`` (default ``nvec``'s shape).
        device: where values live (``None``: wherever they come).
        dtype: an integer dtype (default ``torch.int64``).
        mask: bool tensor broadcastable to ``[*shape[:-1], sum(nvec)]``, the groups' masks
            concatenated; ``False`` forbids a category.

    Raises:
        ValueError: for non-positive ``nvec`` entries, a shape not ending with ``len(nvec)``, a
            float dtype, a dtype that cannot hold ``max(nvec) - 1``, or a bad mask.

    Examples:
        >>> import torch
        >>> spec = MultiCategorical([2, 3])
        >>> spec.nvec
        tensor([2, 3])
        >>> spec.is_in(torch.tensor([1, 2])), spec.is_in(torch.tensor([2, 0]))
        (True, False)
        >>> spec.to_one_hot(torch.tensor([1, 2]))
        tensor([False,  True, False, False,  True])
    """

    _feature_ndim = 1
    _tensor_fields = ("nvec", "mask")

    def __init__(
        self,
        nvec: Sequence[int] | torch.Tensor,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        dtype: torch.dtype | None = None,
        mask: torch.Tensor | None = None,
    ) -> None:
        nvec_t = _nvec_tensor(nvec, "MultiCategorical")
        self.shape = nvec_t.shape if shape is None else as_spec_shape(shape, "MultiCategorical")
        try:
            ok = bool(self.shape) and torch.broadcast_shapes(nvec_t.shape, self.shape) == self.shape
        except RuntimeError:
            ok = False
        if not ok or self.shape[-1] != nvec_t.shape[-1]:
            raise ValueError(
                f"MultiCategorical: nvec of shape {tuple(nvec_t.shape)} does not fit the shape "
                f"{tuple(self.shape)} (its last dim must be len(nvec))"
            )
        self.dtype = check_discrete_dtype(
            torch.int64 if dtype is None else dtype, "MultiCategorical"
        )
        if self.dtype is torch.bool and bool((nvec_t > 2).any()):
            raise ValueError("MultiCategorical: a bool dtype holds at most 2 categories per entry")
        check_n_fits(int(nvec_t.max()), self.dtype, "MultiCategorical", "max(nvec)")
        self.device = as_device(device)
        self.nvec = nvec_t.to(self.device or "cpu").expand(self.shape)
        rows = nvec_t.reshape(-1, nvec_t.shape[-1])
        # The per-group layout of masks needs the same nvec for every batch entry.
        uniform = bool((rows == rows[0]).all())
        self._nvec_list: list[int] | None = rows[0].tolist() if uniform else None
        self.mask: torch.Tensor | None = None
        if mask is not None:
            self.update_mask(mask)

    @property
    def domain(self) -> str:
        """Always ``"discrete"``."""
        return "discrete"

    @property
    def space(self) -> BoxList:
        """A ``BoxList`` with one ``CategoricalBox`` per sub-action."""
        if self._nvec_list is None:
            raise ValueError("MultiCategorical: nvec varies along batch dims; read .nvec instead")
        return BoxList([CategoricalBox(n) for n in self._nvec_list])

    def update_mask(self, mask: torch.Tensor | None) -> None:
        """Sets (or clears, with ``None``) the mask of allowed categories, in place.

        Args:
            mask: bool tensor broadcastable to ``[*shape[:-1], sum(nvec)]``.
        """
        if mask is None:
            self.mask = None
            return
        if self._nvec_list is None:
            raise ValueError("MultiCategorical: masks need the same nvec for every batch entry")
        shape = self.shape[:-1] + (sum(self._nvec_list),)
        mask = prepare_mask(mask, shape, self.device, "MultiCategorical", check_rows=False)
        _check_groups(mask, self._nvec_list, "MultiCategorical")
        self.mask = mask

    def _with_dtype(self, dtype: torch.dtype) -> TensorSpec:
        return MultiCategorical(self.nvec, self.shape, self.device, dtype, self.mask)

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Independent uniform categories per sub-action (allowed ones when masked).

        Args:
            shape: extra leading batch dims.

        Returns:
            A tensor of shape ``[*shape, *self.shape]``.
        """
        lead = as_size(shape)
        if self.mask is None:
            r = torch.randint(_RAND_HIGH, lead + self.shape, device=self.nvec.device)
            return (r % self.nvec).to(self.dtype)
        assert self._nvec_list is not None
        parts = self.mask.split(self._nvec_list, -1)
        return torch.stack([sample_masked(p, lead) for p in parts], -1).to(self.dtype)

    def _why_not_in(self, val: Any) -> str | None:
        reason = self._check_tensor(val)
        if reason is not None:
            return reason
        nvec = self.nvec if self.nvec.device == val.device else self.nvec.to(val.device)
        ok = (val >= 0) & (val < nvec)
        if not bool(ok.all()):
            where = first_bad_index(~ok)
            n = nvec[where[len(where) - self.ndim :]].item()
            return (
                f"value out of range: {format_location(where)} = {val[where].item()} is not in "
                f"{{0, ..., {n - 1}}} (nvec={format_value(self.nvec)})"
            )
        if self.mask is not None:
            assert self._nvec_list is not None
            mask = self.mask.to(val.device)
            for i, part in enumerate(mask.split(self._nvec_list, -1)):
                sub = val[..., i].long().unsqueeze(-1)
                allowed = part.expand(*sub.shape[:-1], part.shape[-1]).gather(-1, sub)
                if not bool(allowed.all()):
                    where = first_bad_index(~allowed.squeeze(-1))
                    return (
                        f"value masked out: sub-action {i} of {format_location(where)} = "
                        f"{val[where].tolist()} is forbidden by the mask {format_value(self.mask)}"
                    )
        return None

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Rounds and clamps each sub-action into range; masked-out values go to the nearest
        allowed category.

        NaN entries count as 0.

        Args:
            val: a numeric tensor whose shape broadcasts to the spec's shape.

        Returns:
            A tensor in the spec.

        Raises:
            ValueError: when ``val``'s shape does not broadcast to the spec's shape.
        """
        val = self._project_input(val)
        high = (self.nvec - 1).to(val.device)
        idx = round_index(val, high)
        if self.mask is not None:
            assert self._nvec_list is not None
            parts = self.mask.split(self._nvec_list, -1)
            idx = torch.stack([nearest_allowed(idx[..., i], p) for i, p in enumerate(parts)], -1)
        return idx.to(self.dtype)

    def to_one_hot(self, val: torch.Tensor, safe: bool = False) -> torch.Tensor:
        """Converts indices to concatenated bool one-hot vectors.

        Args:
            val: indices of shape ``[*batch, *self.shape]``.
            safe: check ``val`` with ``assert_is_in`` first.

        Returns:
            A bool tensor of shape ``[*batch, *self.shape[:-1], sum(nvec)]``.
        """
        if safe:
            self.assert_is_in(val)
        if self._nvec_list is None:
            raise ValueError("MultiCategorical: one-hot needs the same nvec for every batch entry")
        parts = [F.one_hot(val[..., i].long(), n) for i, n in enumerate(self._nvec_list)]
        return torch.cat(parts, -1).bool()

    def to_one_hot_spec(self) -> MultiOneHot:
        """The ``MultiOneHot`` spec of the one-hot encoding of this spec's values."""
        if self._nvec_list is None:
            raise ValueError("MultiCategorical: one-hot needs the same nvec for every batch entry")
        shape = self.shape[:-1] + (sum(self._nvec_list),)
        return MultiOneHot(self._nvec_list, shape, self.device, torch.bool, self.mask)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, MultiCategorical)
            and self._same_meta(other)
            and torch.equal(self.nvec, other.nvec)
            and masks_equal(self.mask, other.mask)
        )

    def __repr__(self) -> str:
        return (
            f"MultiCategorical(nvec={format_value(self.nvec)}, shape={self.shape}, dtype={self.dtype}, "
            f"device={self.device}{mask_repr(self.mask)})"
        )


class MultiOneHot(TensorSpec):
    """Concatenated one-hot vectors, one per sub-action with ``nvec[i]`` categories.

    Args:
        nvec: categories of each sub-action.
        shape: the value's shape, ending with ``sum(nvec)`` (default ``(sum(nvec),)``).
        device: where values live (``None``: wherever they come).
        dtype: bool (default) or an integer dtype (any of them holds the 0/1 entries, whatever
            ``nvec``).
        mask: bool tensor broadcastable to ``shape``; ``False`` forbids a category.

    Raises:
        ValueError: for non-positive ``nvec`` entries, ``shape[-1] != sum(nvec)``, a float
            dtype, or a bad mask.

    Examples:
        >>> import torch
        >>> spec = MultiOneHot([2, 3])
        >>> spec.encode([1, 0])
        tensor([False,  True,  True, False, False])
        >>> spec.to_categorical(spec.encode([1, 2]))
        tensor([1, 2])
        >>> spec.is_in(torch.tensor([True, True, False, False, True]))
        False
    """

    _feature_ndim = 1
    _tensor_fields = ("mask",)

    def __init__(
        self,
        nvec: Sequence[int] | torch.Tensor,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        dtype: torch.dtype | None = None,
        mask: torch.Tensor | None = None,
    ) -> None:
        nvec_t = _nvec_tensor(nvec, "MultiOneHot")
        if nvec_t.dim() != 1:
            raise ValueError(f"MultiOneHot: nvec must be 1-d, got shape {tuple(nvec_t.shape)}")
        self.nvec: list[int] = nvec_t.tolist()
        total = sum(self.nvec)
        self.shape = torch.Size((total,)) if shape is None else as_spec_shape(shape, "MultiOneHot")
        if not self.shape or self.shape[-1] != total:
            raise ValueError(
                f"MultiOneHot: the last dim of shape must be sum(nvec)={total}, "
                f"got shape {tuple(self.shape)}"
            )
        self.dtype = check_discrete_dtype(torch.bool if dtype is None else dtype, "MultiOneHot")
        self.device = as_device(device)
        self._consts: dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.mask: torch.Tensor | None = None
        if mask is not None:
            self.update_mask(mask)

    def _constants(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``nvec``, group start offsets and group end indices as tensors on ``device`` (cached)."""
        consts = self._consts.get(device)
        if consts is None:
            nvec = torch.tensor(self.nvec, device=device)
            ends = nvec.cumsum(0)
            consts = (nvec, ends - nvec, ends - 1)
            self._consts[device] = consts
        return consts

    @property
    def domain(self) -> str:
        """Always ``"discrete"``."""
        return "discrete"

    @property
    def space(self) -> BoxList:
        """A ``BoxList`` with one ``CategoricalBox`` per sub-action."""
        return BoxList([CategoricalBox(n) for n in self.nvec])

    def update_mask(self, mask: torch.Tensor | None) -> None:
        """Sets (or clears, with ``None``) the mask of allowed categories, in place.

        Args:
            mask: bool tensor broadcastable to ``shape``, with an allowed category per group.
        """
        if mask is None:
            self.mask = None
            return
        mask = prepare_mask(mask, self.shape, self.device, "MultiOneHot", check_rows=False)
        _check_groups(mask, self.nvec, "MultiOneHot")
        self.mask = mask

    def _with_dtype(self, dtype: torch.dtype) -> TensorSpec:
        return MultiOneHot(self.nvec, self.shape, self.device, dtype, self.mask)

    def _scatter(self, idx: torch.Tensor, lead: torch.Size, device: Any) -> torch.Tensor:
        out = torch.zeros(lead + self.shape, dtype=self.dtype, device=device)
        return out.scatter_(-1, idx, 1)

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Independent uniform one-hot groups (among the allowed categories when masked).

        Args:
            shape: extra leading batch dims.

        Returns:
            A tensor of shape ``[*shape, *self.shape]``.
        """
        lead = as_size(shape)
        device = self.device or torch.device("cpu")
        nvec, starts, _ = self._constants(device)
        if self.mask is None:
            batch = lead + self.shape[:-1] + (len(self.nvec),)
            idx = torch.randint(_RAND_HIGH, batch, device=device) % nvec
        else:
            parts = self.mask.split(self.nvec, -1)
            idx = torch.stack([sample_masked(p, lead) for p in parts], -1)
        return self._scatter(idx + starts, lead, device)

    def _why_not_in(self, val: Any) -> str | None:
        reason = self._check_tensor(val)
        if reason is not None:
            return reason
        _, _, ends = self._constants(val.device)
        cums = val.cumsum(-1)[..., ends]
        sums = torch.diff(cums, dim=-1, prepend=torch.zeros_like(cums[..., :1]))
        ok = sums == 1
        if self.dtype is not torch.bool:
            ok &= val.amin(-1, keepdim=True) >= 0
        if not bool(ok.all()):
            where = first_bad_index(~ok)
            return (
                f"not multi-one-hot: group {where[-1]} of {format_location(where[:-1])} = "
                f"{val[where[:-1]].tolist()} has not exactly one 1 (nvec={self.nvec})"
            )
        return one_hot_mask_reason(val, self.mask)

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Keeps a valid value; otherwise one-hot of each group's (allowed) arg-max.

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
        idx = torch.stack([p.argmax(-1) for p in scores.split(self.nvec, -1)], -1)
        _, starts, _ = self._constants(val.device)
        lead = val.shape[: val.dim() - self.ndim]
        return self._scatter(idx + starts, lead, val.device)

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """Turns per-group indices (or an already one-hot value) into a multi-one-hot tensor.

        A value whose shape ends with ``shape`` is taken as one-hot; anything else as indices of
        shape ``[..., len(nvec)]``.

        Args:
            val: indices (list, numpy array, tensor) or one-hot values.
            ignore_device: keep the value's device instead of moving it to the spec's.

        Returns:
            A tensor of the spec's dtype and shape (extra leading dims kept).

        Raises:
            ValueError: for indices out of range or an incompatible shape.
        """
        raw = as_raw_tensor(val)
        n = self.ndim
        if raw.dim() < n or raw.shape[-n:] != self.shape:
            nvec, starts, _ = self._constants(raw.device)
            if (
                raw.dim() == 0
                or raw.shape[-1] != len(self.nvec)
                or raw.is_floating_point()
                or bool(((raw < 0) | (raw >= nvec)).any())
            ):
                raise ValueError(
                    f"{self._name}: cannot encode {format_value(raw)}: expected indices of shape "
                    f"[..., {len(self.nvec)}] within nvec={self.nvec}, or one-hot values of "
                    f"shape {tuple(self.shape)}"
                )
            lead = raw.shape[:-1]
            raw = torch.zeros(lead + (self.shape[-1],), dtype=self.dtype, device=raw.device)
            raw.scatter_(-1, as_raw_tensor(val).long() + starts, 1)
        return self._fit_shape(self._as_tensor(raw, ignore_device))

    def to_categorical(self, val: torch.Tensor, safe: bool = False) -> torch.Tensor:
        """Converts multi-one-hot values to per-group indices.

        Args:
            val: values of shape ``[*batch, *self.shape]``.
            safe: check ``val`` with ``assert_is_in`` first.

        Returns:
            An int64 tensor of shape ``[*batch, *self.shape[:-1], len(nvec)]``.
        """
        if safe:
            self.assert_is_in(val)
        if val.dtype is torch.bool:
            val = val.view(torch.uint8)
        return torch.stack([p.argmax(-1) for p in val.split(self.nvec, -1)], -1)

    def to_categorical_spec(self) -> MultiCategorical:
        """The ``MultiCategorical`` spec of the per-group indices of this spec's values."""
        shape = self.shape[:-1] + (len(self.nvec),)
        return MultiCategorical(self.nvec, shape, self.device, torch.int64, self.mask)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, MultiOneHot)
            and self._same_meta(other)
            and self.nvec == other.nvec
            and masks_equal(self.mask, other.mask)
        )

    def __repr__(self) -> str:
        return (
            f"MultiOneHot(nvec={self.nvec}, shape={self.shape}, dtype={self.dtype}, "
            f"device={self.device}{mask_repr(self.mask)})"
        )
