"""Per-item compression used by ``CompressedListStorage``: codecs and compressed records.

A compressed item is a *record* made of plain containers (so that it saves and loads without
unpickling): a tensor becomes ``{"kind": "tensor", "bytes": uint8 tensor, "dtype", "shape"}`` and
a TensorDict ``{"kind": "td", "batch_size", "entries": {name: record}}``.

The default codec is zstd: Python's ``compression.zstd`` (3.14+) or the ``zstandard`` package when
installed; without either, the standard library's zlib is used instead, with a warning.
"""

from __future__ import annotations

import importlib.util
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._utils import warn_once

__all__ = ["Codec", "compress_item", "decompress_item", "default_codec"]

_has_stdlib_zstd = importlib.util.find_spec("compression") is not None and (
    importlib.util.find_spec("compression.zstd") is not None
)
_has_zstandard = importlib.util.find_spec("zstandard") is not None


class Codec:
    """A named pair of byte functions: ``compress(bytes) -> bytes``, ``decompress(bytes) -> bytes``.

    Args:
        name: saved with the data, so that loading can check it uses the same codec.
        compress: compresses bytes.
        decompress: the inverse of ``compress``.
    """

    def __init__(
        self, name: str, compress: Callable[[bytes], bytes], decompress: Callable[[bytes], bytes]
    ) -> None:
        self.name = name
        self.compress = compress
        self.decompress = decompress

    def __repr__(self) -> str:
        return f"Codec({self.name!r})"


def default_codec(level: int = 3) -> Codec:
    """The default codec: zstd at ``level`` when available, else zlib (with a warning).

    Args:
        level: the compression level (1-22 for zstd; clamped to 1-9 for zlib).

    Returns:
        A :class:`Codec`.

    Examples:
        >>> codec = default_codec(3)
        >>> codec.decompress(codec.compress(b"abc" * 10))
        b'abcabcabcabcabcabcabcabcabcabc'
    """
    if not isinstance(level, int) or isinstance(level, bool):
        raise TypeError(f"compression_level must be an int, got {level!r}")
    if _has_stdlib_zstd:
        from compression import zstd  # type: ignore[import-not-found]

        return Codec(
            "zstd",
            lambda b: zstd.compress(b, level=level),
            zstd.decompress,
        )
    if _has_zstandard:
        import zstandard  # type: ignore[import-not-found]

        compressor = zstandard.ZstdCompressor(level=level)
        decompressor = zstandard.ZstdDecompressor()
        return Codec("zstd", compressor.compress, decompressor.decompress)
    warn_once(
        "zstd is not available (Python < 3.14 and no 'zstandard' package): "
        "CompressedListStorage compresses with zlib instead; pip install zstandard for zstd"
    )
    zlevel = min(max(level, 1), 9)
    return Codec("zlib", lambda b: zlib.compress(b, zlevel), zlib.decompress)


def zstd_codec_or_raise(level: int = 3) -> Codec:
    """The zstd codec, or an ``ImportError`` naming the package that provides it."""
    if not (_has_stdlib_zstd or _has_zstandard):
        raise ImportError(
            "data saved with zstd needs a zstd implementation: Python 3.14+ or "
            "pip install zstandard"
        )
    return default_codec(level)


def _raw(t: torch.Tensor) -> tuple[np.ndarray, str]:
    t = t.detach().to("cpu").contiguous()
    dtype = str(t.dtype).replace("torch.", "")
    # numpy has no bfloat16 (nor the float8 types): go through same-size integers.
    if t.dtype.itemsize == 2 and t.dtype not in (torch.float16, torch.int16, torch.uint16):
        t = t.view(torch.int16)
    elif t.dtype.itemsize == 1 and t.dtype not in (torch.uint8, torch.int8, torch.bool):
        t = t.view(torch.uint8)
    return t.numpy().reshape(-1).view(np.uint8), dtype


def compress_item(
    item: Any, codec: Codec | None, compression_fn: Callable[[torch.Tensor], torch.Tensor] | None
) -> dict[str, Any]:
    """Compresses a tensor or a TensorDict of tensors into a record.

    Args:
        item: the item to compress.
        codec: the byte codec (used when ``compression_fn`` is ``None``).
        compression_fn: a user function mapping a tensor to a compressed ``uint8`` tensor.

    Returns:
        The record (plain containers).
    """
    if isinstance(item, TensorDictBase):
        entries = {}
        for key, value in item.items():
            if not isinstance(value, (torch.Tensor, TensorDictBase)):
                raise TypeError(
                    f"CompressedListStorage compresses tensors; entry {key!r} is a "
                    f"{type(value).__name__}"
                )
            entries[key] = compress_item(value, codec, compression_fn)
        return {"kind": "td", "batch_size": list(item.batch_size), "entries": entries}
    if not isinstance(item, torch.Tensor):
        raise TypeError(
            f"CompressedListStorage stores tensors and TensorDicts of tensors, got "
            f"{type(item).__name__}"
        )
    dtype = str(item.dtype).replace("torch.", "")
    if compression_fn is not None:
        out = compression_fn(item)
        if not isinstance(out, torch.Tensor) or out.dtype != torch.uint8:
            raise TypeError(
                f"compression_fn must return a uint8 tensor of compressed bytes, got "
                f"{type(out).__name__}{'' if not isinstance(out, torch.Tensor) else out.dtype}"
            )
        payload = out.reshape(-1).contiguous()
    else:
        assert codec is not None
        raw, dtype = _raw(item)
        payload = torch.frombuffer(bytearray(codec.compress(raw.tobytes())), dtype=torch.uint8)
    return {"kind": "tensor", "bytes": payload, "dtype": dtype, "shape": list(item.shape)}


def decompress_item(
    record: dict[str, Any],
    codec: Codec | None,
    decompression_fn: Callable[[torch.Tensor], torch.Tensor] | None,
    device: torch.device | None,
) -> Any:
    """The inverse of :func:`compress_item`.

    Args:
        record: a record from :func:`compress_item`.
        codec: the byte codec (used when ``decompression_fn`` is ``None``).
        decompression_fn: a user function mapping compressed bytes back to the tensor (or to
            its raw bytes, which are then read with the saved dtype and shape).
        device: where to put the result (``None``: CPU).

    Returns:
        The tensor or TensorDict.
    """
    if record["kind"] == "td":
        entries = {
            k: decompress_item(v, codec, decompression_fn, device)
            for k, v in record["entries"].items()
        }
        return TensorDict(entries, batch_size=record["batch_size"], device=device)
    dtype = getattr(torch, record["dtype"])
    shape = torch.Size(record["shape"])
    if decompression_fn is not None:
        out = decompression_fn(record["bytes"])
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"decompression_fn must return a tensor, got {type(out).__name__}")
        if out.shape != shape or out.dtype != dtype:
            nbytes = shape.numel() * dtype.itemsize
            if out.dtype != torch.uint8 or out.numel() != nbytes:
                raise ValueError(
                    f"decompression_fn returned a {out.dtype} tensor of shape "
                    f"{tuple(out.shape)}; expected the stored {dtype} tensor of shape "
                    f"{tuple(shape)} or its {nbytes} raw bytes"
                )
            out = out.contiguous().view(dtype).reshape(shape)
    else:
        assert codec is not None
        raw = bytearray(codec.decompress(record["bytes"].numpy().tobytes()))
        out = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.zeros(0, dtype=torch.uint8)
        out = out.view(dtype).reshape(shape)
    return out.to(device) if device is not None else out
