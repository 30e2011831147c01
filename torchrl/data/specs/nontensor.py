"""``NonTensor``: a spec for arbitrary Python data (strings, dicts, ...) carried in a TensorDict."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDictBase

from torchrl._types import DeviceLike, ShapeLike
from torchrl.data.specs.base import (
    TensorSpec,
    as_device,
    as_size,
    as_spec_shape,
)


class NonTensor(TensorSpec):
    """A spec for non-tensor data, stored in TensorDicts as ``tensordict.NonTensorData``.

    ``rand``, ``zero`` and ``one`` all return ``example_data`` wrapped in a ``NonTensorData`` with
    the requested batch size. Any Python object is in the spec; a ``NonTensorData`` or
    ``NonTensorStack`` must also have a batch size ending with ``shape``.

    Args:
        shape: the batch shape of the data (default ``()``).
        device: device of the ``NonTensorData`` wrappers.
        dtype: an optional dtype tag, kept for reference.
        example_data: what ``rand``/``zero`` return (default ``None``).

    Examples:
        >>> spec = NonTensor(shape=(2,), example_data="hello")
        >>> data = spec.rand()
        >>> type(data).__name__, data.batch_size, data.data
        ('NonTensorData', torch.Size([2]), 'hello')
        >>> spec.is_in(data), spec.is_in(NonTensor(shape=(3,)).zero())
        (True, False)
    """

    def __init__(
        self,
        shape: ShapeLike | None = (),
        device: DeviceLike = None,
        dtype: torch.dtype | None = None,
        example_data: Any = None,
    ) -> None:
        self.shape = as_spec_shape(shape, "NonTensor")
        self.device = as_device(device)
        self.dtype = dtype
        self.example_data = example_data

    @property
    def domain(self) -> None:
        """``None``: non-tensor data has no numeric domain."""
        return None

    def _wrap(self, data: Any, shape: ShapeLike | None) -> NonTensorData:
        return NonTensorData(data=data, batch_size=as_size(shape) + self.shape, device=self.device)

    def rand(self, shape: ShapeLike | None = None) -> NonTensorData:
        """``example_data`` wrapped with batch size ``[*shape, *self.shape]``.

        Args:
            shape: extra leading batch dims.

        Returns:
            A ``NonTensorData``.
        """
        return self._wrap(self.example_data, shape)

    def zero(self, shape: ShapeLike | None = None) -> NonTensorData:
        """Same as ``rand``: ``example_data`` wrapped with batch size ``[*shape, *self.shape]``."""
        return self._wrap(self.example_data, shape)

    def one(self, shape: ShapeLike | None = None) -> NonTensorData:
        """Same as ``rand``: ``example_data`` wrapped with batch size ``[*shape, *self.shape]``."""
        return self._wrap(self.example_data, shape)

    def _why_not_in(self, val: Any) -> str | None:
        if isinstance(val, (NonTensorData, NonTensorStack)):
            n = self.ndim
            batch = val.batch_size
            if n and (len(batch) < n or batch[-n:] != self.shape):
                return (
                    f"wrong shape: expected a batch size ending with {tuple(self.shape)}, "
                    f"got {tuple(batch)}"
                )
            return None
        if isinstance(val, TensorDictBase):
            return f"expected non-tensor data, got a {type(val).__name__}"
        return None

    def project(self, val: Any) -> Any:
        """Returns ``val`` unchanged when it is in the spec (any plain Python object is).

        Args:
            val: any Python object, or non-tensor data.

        Returns:
            ``val``.

        Raises:
            ValueError: for a TensorDict, or non-tensor data whose batch size does not end with
                the spec's shape: nothing can map those into the spec.
        """
        reason = self._why_not_in(val)
        if reason is not None:
            raise ValueError(f"{self._name}: cannot project: {reason}")
        return val

    def encode(self, val: Any, *, ignore_device: bool = False) -> NonTensorData | NonTensorStack:
        """Wraps ``val`` in a ``NonTensorData`` with the spec's shape (wrapped data passes).

        Args:
            val: any Python object.
            ignore_device: unused; kept for the common signature.

        Returns:
            A ``NonTensorData`` (or the given ``NonTensorData``/``NonTensorStack``).
        """
        if isinstance(val, (NonTensorData, NonTensorStack)):
            return val
        return self._wrap(val, None)

    def to_numpy(self, val: Any, safe: bool = False) -> Any:
        """Unwraps non-tensor data (the Python objects are returned as they are)."""
        if safe:
            self.assert_is_in(val)
        if isinstance(val, NonTensorData):
            return val.data
        if isinstance(val, NonTensorStack):
            return val.tolist()
        return val

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NonTensor) and self._same_meta(other)

    def __repr__(self) -> str:
        return f"NonTensor(shape={self.shape}, dtype={self.dtype}, device={self.device})"
