"""``VideoClipRef``: frames of encoded video files, referenced by address and decoded on demand.

A reference keeps the file paths and, per frame, the file (``file_id``) and the frame's position
in it (``frame_index``); never an open decoder, never pixels. Decoding uses ``torchcodec``
(extra ``torchrl[video]``), imported only by :meth:`VideoClipRef.decode`.
"""

from __future__ import annotations

import importlib.util
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorClass

from torchrl._utils import import_optional

__all__ = ["VideoClipRef", "clear_video_decoder_cache", "set_video_decoder_cache_size"]

_has_torchcodec = importlib.util.find_spec("torchcodec") is not None

# Open decoders of this process, by (path, stream, device), least recently used first.
_DECODERS: OrderedDict[tuple[str, int | None, str], Any] = OrderedDict()
_CACHE = {"size": 8}
_CACHE_LOCK = threading.Lock()


def set_video_decoder_cache_size(size: int) -> None:
    """Sets how many open decoders each process keeps (least recently used are closed first).

    Args:
        size: the number of decoders (0 disables the cache).

    Examples:
        >>> from torchrl.data import set_video_decoder_cache_size
        >>> set_video_decoder_cache_size(2)  # at most two video files open per process
        >>> set_video_decoder_cache_size(-1)
        Traceback (most recent call last):
        ...
        ValueError: the decoder cache size must be an int >= 0, got -1
        >>> set_video_decoder_cache_size(8)  # back to the default
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"the decoder cache size must be an int >= 0, got {size!r}")
    with _CACHE_LOCK:
        _CACHE["size"] = size
        while len(_DECODERS) > size:
            _DECODERS.popitem(last=False)


def clear_video_decoder_cache() -> None:
    """Closes every cached decoder of this process.

    Call it before the video files that clips point to are rewritten or deleted (a cached
    decoder keeps reading the file it opened).

    Examples:
        >>> from torchrl.data import clear_video_decoder_cache
        >>> clear_video_decoder_cache()
    """
    with _CACHE_LOCK:
        _DECODERS.clear()


def _decoder(path: str, stream: int | None, device: torch.device) -> Any:
    decoders = import_optional("torchcodec.decoders", extra="video")
    key = (path, stream, str(device))
    with _CACHE_LOCK:
        found = _DECODERS.get(key)
        if found is not None:
            _DECODERS.move_to_end(key)
            return found
    kwargs: dict[str, Any] = {"stream_index": stream}
    if device.type == "cuda":
        kwargs["device"] = str(device)
    decoder = decoders.VideoDecoder(path, **kwargs)
    with _CACHE_LOCK:
        if _CACHE["size"]:
            _DECODERS[key] = decoder
            while len(_DECODERS) > _CACHE["size"]:
                _DECODERS.popitem(last=False)
    return decoder


def _runs(sorted_index: torch.Tensor) -> list[tuple[int, int]]:
    """Contiguous runs ``[start, stop)`` of a sorted, duplicate-free index tensor."""
    if not sorted_index.numel():
        return []
    breaks = torch.nonzero(sorted_index[1:] != sorted_index[:-1] + 1).reshape(-1) + 1
    starts = torch.cat([torch.zeros(1, dtype=torch.long), breaks])
    stops = torch.cat([breaks, torch.tensor([sorted_index.numel()])])
    return [(int(sorted_index[a]), int(sorted_index[b - 1]) + 1) for a, b in zip(starts, stops)]


class VideoClipRef(TensorClass["nocast"]):  # type: ignore[type-arg,name-defined]
    """A lazy, picklable reference to frames inside encoded video files.

    The batch dims are the frames: ``ref[10:20]`` is another reference (nothing is decoded).
    ``sources`` holds each file path once; each frame has a ``file_id`` (position in
    ``sources``) and a ``frame_index`` (position in its file). :meth:`decode` reads the frames,
    grouped by file, with one ranged read per contiguous run, through ``torchcodec`` (extra
    ``torchrl[video]``; a missing package raises ``ImportError`` naming it). Decoders are cached
    per process (:func:`set_video_decoder_cache_size`), never stored in the reference.
    References stacked together (e.g. sampled from a ``ListStorage`` buffer) keep one
    ``sources`` tuple per stacked element; :attr:`source` and :meth:`decode` resolve both forms.

    Args:
        sources: a path, or a tuple of paths.
        frame_index: per-frame position in its file (int tensor of the batch shape).
        file_id: per-frame index into ``sources``; zeros by default.
        stream: the video stream to decode (the best one when ``None``).
        auto_decode: a flag for consumers that decode references they meet (stored as is).
        out_device: default device of :meth:`decode`.
        out_dtype: default dtype of :meth:`decode` (``torch.uint8`` when ``None``).
        batch_size: the frames' batch shape (keyword).

    Examples:
        >>> from torchrl.data import VideoClipRef
        >>> ref = VideoClipRef("clip.mp4", frame_index=torch.arange(100), batch_size=[100])
        >>> part = ref[50:60]
        >>> part.shape, part.frame_index[0].item(), part.source
        (torch.Size([10]), 50, 'clip.mp4')
    """

    sources: Any
    frame_index: torch.Tensor | None = None
    file_id: torch.Tensor | None = None
    stream: int | None = None
    auto_decode: bool = False
    out_device: Any = None
    out_dtype: Any = None

    def __post_init__(self) -> None:
        sources = self.sources
        if isinstance(sources, str) or hasattr(sources, "__fspath__"):
            sources = (str(sources),)
        if not isinstance(sources, Sequence) or not len(sources):
            raise TypeError(
                f"VideoClipRef: sources must be a path or a tuple of paths, got {sources!r}"
            )
        stacked = not all(isinstance(p, str) or hasattr(p, "__fspath__") for p in sources)
        if not stacked:  # stacked references keep their per-element tuples
            self.sources = tuple(str(p) for p in sources)
        if self.frame_index is None:
            raise ValueError("VideoClipRef: frame_index is required (one int per frame)")
        if self.frame_index.is_floating_point():
            raise TypeError(
                f"VideoClipRef: frame_index must be an int tensor, got {self.frame_index.dtype}"
            )
        if self.file_id is None:
            self.file_id = torch.zeros_like(self.frame_index, dtype=torch.long)
        if not stacked and self.file_id.numel():
            low, high = int(self.file_id.min()), int(self.file_id.max())
            if low < 0 or high >= len(self.sources):
                raise ValueError(
                    f"VideoClipRef: file_id values must lie in [0, {len(self.sources)}) (one "
                    f"per source), got [{low}, {high}]"
                )

    @classmethod
    def from_files(
        cls, sources: Sequence[str], frame_indices: Sequence[torch.Tensor], **kwargs: Any
    ) -> VideoClipRef:
        """A 1-dim reference spanning several files, frames of each file in order.

        Args:
            sources: the file paths.
            frame_indices: for each file, the frame positions referenced (1-dim int tensors).
            **kwargs: the other fields (``stream``, ``out_dtype``, ...).

        Returns:
            A reference of batch ``[sum of the lengths]``.
        """
        if len(sources) != len(frame_indices):
            raise ValueError(
                f"VideoClipRef.from_files: {len(sources)} sources but {len(frame_indices)} "
                f"frame index tensors"
            )
        index = [torch.as_tensor(i, dtype=torch.long).reshape(-1) for i in frame_indices]
        file_id = [torch.full_like(i, k) for k, i in enumerate(index)]
        frame_index = torch.cat(index) if index else torch.zeros(0, dtype=torch.long)
        file_ids = torch.cat(file_id) if file_id else torch.zeros(0, dtype=torch.long)
        return cls(
            tuple(sources),
            frame_index=frame_index,
            file_id=file_ids,
            batch_size=[frame_index.numel()],
            **kwargs,
        )

    def _addresses(self) -> tuple[tuple[str, ...], torch.Tensor, torch.Tensor]:
        """``(paths, file_id, frame_index)``, the last two flat, for plain or stacked refs."""
        assert self.frame_index is not None and self.file_id is not None  # see __post_init__
        sources = self.sources
        if isinstance(sources, tuple) and all(isinstance(p, str) for p in sources):
            return sources, self.file_id.reshape(-1).long(), self.frame_index.reshape(-1).long()
        # Stacked references: one sources tuple per element of the first dim.
        paths: dict[str, int] = {}
        file_ids, frames = [], []
        for i in range(self.batch_size[0]):
            sub_paths, sub_ids, sub_frames = self[i]._addresses()
            remap = torch.tensor([paths.setdefault(p, len(paths)) for p in sub_paths])
            file_ids.append(remap[sub_ids] if sub_ids.numel() else sub_ids)
            frames.append(sub_frames)
        return tuple(paths), torch.cat(file_ids), torch.cat(frames)

    @property
    def source(self) -> str:
        """The file path, when all frames come from one file."""
        paths, file_id, _ = self._addresses()
        used = torch.unique(file_id)
        if used.numel() > 1:
            raise ValueError(
                f"VideoClipRef.source: the frames come from {used.numel()} files; read "
                f"sources and file_id instead"
            )
        return paths[int(used[0]) if used.numel() else 0]

    def _stream(self) -> int | None:
        stream = self.stream
        while isinstance(stream, (list, tuple)):  # stacked references
            stream = stream[0] if stream else None
        return stream

    def decode(self, *, device: Any = None, dtype: Any = None) -> torch.Tensor:
        """Decodes the referenced frames to a dense ``[*batch, C, H, W]`` tensor.

        Args:
            device: output device (``out_device``, else CPU, when ``None``); a CUDA device asks
                torchcodec for GPU decoding.
            dtype: output dtype (``out_dtype``, else ``torch.uint8``, when ``None``).

        Returns:
            The frames, in the reference's order.

        Raises:
            ImportError: torchcodec is not installed (``pip install "torchrl[video]"``).
        """
        device = torch.device(device or self.out_device or "cpu")
        dtype = dtype or self.out_dtype or torch.uint8
        paths, files, frames = self._addresses()
        files, frames = files.cpu(), frames.cpu()
        out: torch.Tensor | None = None
        for fid in torch.unique(files).tolist():
            where = torch.nonzero(files == fid).reshape(-1)
            wanted, inverse = torch.unique(frames[where], return_inverse=True)
            decoder = _decoder(paths[fid], self._stream(), device)
            parts = [decoder.get_frames_in_range(start=a, stop=b).data for a, b in _runs(wanted)]
            decoded = torch.cat(parts).to(device)
            if out is None:
                out = decoded.new_empty((frames.numel(), *decoded.shape[1:]))
            out[where.to(device)] = decoded[inverse.to(device)]
        if out is None:  # no frames
            import_optional("torchcodec.decoders", extra="video")
            out = torch.zeros((0, 0, 0, 0), dtype=torch.uint8, device=device)
        out = out.reshape(*self.batch_size, *out.shape[1:])
        if dtype != out.dtype:
            out = out.to(dtype)
        return out
