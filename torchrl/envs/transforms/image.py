"""Image transforms: ``ToTensorImage``, ``Resize``, ``GrayScale``, ``CenterCrop``, ``Crop``.

Images are ``[..., C, H, W]`` after ``ToTensorImage`` (which reads ``[..., H, W, C]``); any
leading dims (env batch, time) are kept. Resizing uses ``torch.nn.functional.interpolate``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F  # noqa: N812

from torchrl._keys import PIXELS
from torchrl._types import NestedKey
from torchrl.data.specs import Bounded, Composite, TensorSpec, Unbounded
from torchrl.envs.transforms._utils import float_dtype, map_output_specs, spec_apply
from torchrl.envs.transforms.base import ObservationTransform

__all__ = ["CenterCrop", "Crop", "GrayScale", "Resize", "ToTensorImage"]

_INTERPOLATIONS = ("nearest", "nearest-exact", "bilinear", "bicubic", "area")


def _pixel_keys(in_keys: NestedKey | Sequence[NestedKey] | None) -> NestedKey | Sequence[NestedKey]:
    return [PIXELS] if in_keys is None else in_keys


def _scalar_bounds(leaf: TensorSpec, shape: torch.Size) -> TensorSpec:
    """A spec of ``shape`` keeping the overall value range of ``leaf`` (bounds cannot follow
    pixels through interpolation)."""
    if isinstance(leaf, Bounded):
        low, high = leaf.low.min(), leaf.high.max()
        return Bounded(low, high, shape=shape, device=leaf.device, dtype=leaf.dtype)
    return Unbounded(shape=shape, device=leaf.device, dtype=leaf.dtype)


class ToTensorImage(ObservationTransform):
    """Turns ``[..., H, W, C]`` images (uint8) into ``[..., C, H, W]`` floats in ``[0, 1]``.

    Args:
        from_int: divide by 255 (``None``: when the input has an integer dtype).
        unsqueeze: add a leading dim to single (3-dim) images.
        dtype: the output dtype (default ``torch.float32``).
        in_keys: the images (default ``["pixels"]``).
        out_keys: where to write them (default: in place).
        shape_tolerant: leave images alone whose last dim is not 1 or 3 (already ``CHW``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import ToTensorImage
        >>> img = torch.full((2, 8, 6, 3), 255, dtype=torch.uint8)
        >>> out = ToTensorImage()(TensorDict(pixels=img, batch_size=[2]))["pixels"]
        >>> out.shape, out.dtype, out.max()
        (torch.Size([2, 3, 8, 6]), torch.float32, tensor(1.))
    """

    def __init__(
        self,
        from_int: bool | None = None,
        unsqueeze: bool = False,
        dtype: torch.dtype | None = None,
        *,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        shape_tolerant: bool = False,
    ) -> None:
        super().__init__(_pixel_keys(in_keys), out_keys)
        self.from_int = from_int
        self.unsqueeze = unsqueeze
        self.dtype = torch.float32 if dtype is None else dtype
        if not self.dtype.is_floating_point:
            raise ValueError(f"ToTensorImage: dtype must be a float dtype, got {self.dtype}")
        self.shape_tolerant = shape_tolerant

    def _apply_transform(self, image: torch.Tensor) -> torch.Tensor:
        if image.ndim < 3:
            raise ValueError(
                f"ToTensorImage expects images of shape [..., H, W, C], got {tuple(image.shape)}"
            )
        scale = self.from_int if self.from_int is not None else not image.is_floating_point()
        if not (self.shape_tolerant and image.shape[-1] not in (1, 3)):
            image = image.movedim(-1, -3)
        image = image.to(self.dtype, memory_format=torch.contiguous_format)
        if scale:
            image = image.div_(255)
        if self.unsqueeze and image.ndim == 3:
            image = image.unsqueeze(0)
        return image

    def _spec(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        meta = self._apply_transform(torch.zeros(leaf.shape, dtype=leaf.dtype, device="meta"))
        scale = self.from_int if self.from_int is not None else float_dtype(leaf) != leaf.dtype
        if scale:
            return Bounded(0.0, 1.0, shape=meta.shape, device=leaf.device, dtype=self.dtype)
        if isinstance(leaf, Bounded):
            return spec_apply(leaf, self._apply_transform, "ToTensorImage")
        return Unbounded(shape=meta.shape, device=leaf.device, dtype=self.dtype)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        map_output_specs(self, output_spec, self._spec)
        return output_spec

    def extra_repr(self) -> str:
        return f"from_int={self.from_int}, dtype={self.dtype}, {super().extra_repr()}"


class Resize(ObservationTransform):
    """Resizes ``[..., C, H, W]`` images to ``[..., C, w, h]`` with ``F.interpolate``.

    Like TorchRL, ``w`` is the size of dim ``-2`` and ``h`` of dim ``-1``. Bilinear and bicubic
    resizing are antialiased; integer images are resized in float and rounded back.

    Args:
        w: the output size of dim ``-2``.
        h: the output size of dim ``-1`` (default ``w``).
        interpolation: ``"bilinear"`` (default), ``"nearest"``, ``"nearest-exact"``,
            ``"bicubic"`` or ``"area"``.
        in_keys: the images (default ``["pixels"]``).
        out_keys: where to write them (default: in place).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import Resize
        >>> td = TensorDict(pixels=torch.rand(2, 5, 3, 32, 48), batch_size=[2, 5])
        >>> Resize(16, 24)(td)["pixels"].shape
        torch.Size([2, 5, 3, 16, 24])
    """

    def __init__(
        self,
        w: int,
        h: int | None = None,
        interpolation: str = "bilinear",
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(_pixel_keys(in_keys), out_keys)
        self.w = int(w)
        self.h = int(w if h is None else h)
        if self.w < 1 or self.h < 1:
            raise ValueError(f"Resize: sizes must be positive, got w={w}, h={h}")
        interpolation = str(getattr(interpolation, "value", interpolation)).lower()
        if interpolation not in _INTERPOLATIONS:
            raise ValueError(
                f"Resize: interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}"
            )
        self.interpolation = interpolation

    def _apply_transform(self, image: torch.Tensor) -> torch.Tensor:
        if image.ndim < 3:
            raise ValueError(f"Resize expects images [..., C, H, W], got {tuple(image.shape)}")
        lead = image.shape[:-3]
        flat = image.reshape(-1, *image.shape[-3:])
        is_float = flat.is_floating_point()
        work = flat if is_float else flat.float()
        mode = self.interpolation
        kwargs = {}
        if mode in ("bilinear", "bicubic"):
            kwargs = {"align_corners": False, "antialias": True}
        out = F.interpolate(work, size=(self.w, self.h), mode=mode, **kwargs)
        if not is_float:
            info = torch.iinfo(flat.dtype)
            out = out.round_().clamp_(info.min, info.max).to(flat.dtype)
        return out.reshape(*lead, *out.shape[-3:])

    def _spec(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        if leaf.ndim < 3:
            raise ValueError(f"Resize: the spec of {key!r} is not an image spec: {leaf!r}")
        return _scalar_bounds(leaf, torch.Size((*leaf.shape[:-2], self.w, self.h)))

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        map_output_specs(self, output_spec, self._spec)
        return output_spec

    def extra_repr(self) -> str:
        return (
            f"w={self.w}, h={self.h}, interpolation={self.interpolation!r}, {super().extra_repr()}"
        )


class GrayScale(ObservationTransform):
    """Turns ``[..., 3, H, W]`` RGB images into ``[..., 1, H, W]`` luminance images.

    Args:
        in_keys: the images (default ``["pixels"]``).
        out_keys: where to write them (default: in place).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import GrayScale
        >>> GrayScale()(TensorDict(pixels=torch.ones(3, 4, 4)))["pixels"].shape
        torch.Size([1, 4, 4])
    """

    weights: torch.Tensor

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(_pixel_keys(in_keys), out_keys)
        # ITU-R 601-2 luma weights, as in PIL and torchvision.
        self.register_buffer("weights", torch.tensor([0.2989, 0.587, 0.114]), persistent=False)

    def _apply_transform(self, image: torch.Tensor) -> torch.Tensor:
        if image.ndim < 3 or image.shape[-3] != 3:
            raise ValueError(
                f"GrayScale expects RGB images [..., 3, H, W], got {tuple(image.shape)}"
            )
        is_float = image.is_floating_point()
        work = image if is_float else image.float()
        weights = self.weights.to(device=work.device, dtype=work.dtype)
        out = (work * weights.view(3, 1, 1)).sum(-3, keepdim=True)
        if not is_float:
            out = out.round_().to(image.dtype)
        return out

    def _spec(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        if leaf.ndim < 3 or leaf.shape[-3] != 3:
            raise ValueError(f"GrayScale: the spec of {key!r} is not an RGB image spec: {leaf!r}")
        return _scalar_bounds(leaf, torch.Size((*leaf.shape[:-3], 1, *leaf.shape[-2:])))

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        map_output_specs(self, output_spec, self._spec)
        return output_spec


class CenterCrop(ObservationTransform):
    """Crops the center of ``[..., C, H, W]`` images to ``[..., C, w, h]``.

    Like TorchRL, ``w`` is the size of dim ``-2`` and ``h`` of dim ``-1``.

    Args:
        w: the output size of dim ``-2``.
        h: the output size of dim ``-1`` (default ``w``).
        in_keys: the images (default ``["pixels"]``).
        out_keys: where to write them (default: in place).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import CenterCrop
        >>> img = torch.arange(25.0).reshape(1, 5, 5)
        >>> CenterCrop(3)(TensorDict(pixels=img))["pixels"][0, 0]
        tensor([6., 7., 8.])
    """

    def __init__(
        self,
        w: int,
        h: int | None = None,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(_pixel_keys(in_keys), out_keys)
        self.w = int(w)
        self.h = int(w if h is None else h)
        if self.w < 1 or self.h < 1:
            raise ValueError(f"CenterCrop: sizes must be positive, got w={w}, h={h}")

    def _apply_transform(self, image: torch.Tensor) -> torch.Tensor:
        size_a, size_b = image.shape[-2], image.shape[-1]
        if self.w > size_a or self.h > size_b:
            raise ValueError(
                f"CenterCrop({self.w}, {self.h}) is larger than the image's last dims "
                f"({size_a}, {size_b})"
            )
        top = (size_a - self.w) // 2
        left = (size_b - self.h) // 2
        return image[..., top : top + self.w, left : left + self.h]

    def _spec(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        return spec_apply(leaf, self._apply_transform, "CenterCrop")

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        map_output_specs(self, output_spec, self._spec)
        return output_spec

    def extra_repr(self) -> str:
        return f"w={self.w}, h={self.h}, {super().extra_repr()}"


class Crop(ObservationTransform):
    """Crops ``[..., C, H, W]`` images to ``[..., C, w, h]`` from a given corner.

    As with :class:`CenterCrop`, ``w`` is the size of dim ``-2`` and ``h`` of dim ``-1``; the
    crop starts at row ``top`` and column ``left``.

    Args:
        w: the output size of dim ``-2``.
        h: the output size of dim ``-1`` (default ``w``).
        top: the first row kept (dim ``-2``).
        left: the first column kept (dim ``-1``).
        in_keys: the images (default ``["pixels"]``).
        out_keys: where to write them (default: in place).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import Crop
        >>> img = torch.arange(25.0).reshape(1, 5, 5)
        >>> Crop(2, 3, top=1, left=2)(TensorDict(pixels=img))["pixels"][0]
        tensor([[ 7.,  8.,  9.],
                [12., 13., 14.]])
    """

    def __init__(
        self,
        w: int,
        h: int | None = None,
        top: int = 0,
        left: int = 0,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(_pixel_keys(in_keys), out_keys)
        self.w = int(w)
        self.h = int(w if h is None else h)
        self.top = int(top)
        self.left = int(left)
        if self.w < 1 or self.h < 1:
            raise ValueError(f"Crop: sizes must be positive, got w={w}, h={h}")
        if self.top < 0 or self.left < 0:
            raise ValueError(f"Crop: top and left must be >= 0, got top={top}, left={left}")

    def _apply_transform(self, image: torch.Tensor) -> torch.Tensor:
        size_a, size_b = image.shape[-2], image.shape[-1]
        if self.top + self.w > size_a or self.left + self.h > size_b:
            raise ValueError(
                f"Crop({self.w}, {self.h}, top={self.top}, left={self.left}) goes past the "
                f"image's last dims ({size_a}, {size_b})"
            )
        return image[..., self.top : self.top + self.w, self.left : self.left + self.h]

    def _spec(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        return spec_apply(leaf, self._apply_transform, "Crop")

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        map_output_specs(self, output_spec, self._spec)
        return output_spec

    def extra_repr(self) -> str:
        return f"w={self.w}, h={self.h}, top={self.top}, left={self.left}, {super().extra_repr()}"
