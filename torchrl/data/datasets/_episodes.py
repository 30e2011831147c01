"""Helpers shared by the episode-file readers (Gen-DGRL, V-D4RL, RoboSet, Open X-Embodiment).

Those datasets store one episode per file (or per group, or per pickled record). The readers turn
each episode into a TED chunk and write the chunks, one after the other, into a memory-mapped copy
allocated once from the first chunk, so that a dataset larger than memory converts with about one
episode in RAM.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase

from torchrl._utils import import_optional
from torchrl.data.datasets.common import (
    BaseDatasetExperienceReplay,
    DatasetFormatError,
    default_root,
    drop_stale_copies,
)

# What a pickled episode may refer to: numpy arrays, dtypes and scalars; nothing that runs code.
_SAFE_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
    ("collections", "OrderedDict"),
}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"refusing {module}.{name}: an episode may hold only numpy arrays, numbers, text, "
            f"lists and dicts"
        )


def safe_unpickle(data: bytes | io.BufferedIOBase, where: str) -> Any:
    """Unpickles an episode that holds only numpy arrays and plain data (no code can run).

    Some releases (Gen-DGRL's ``.npy`` files, the Open X-Embodiment WebDataset shards) store
    episodes as pickles; a plain ``pickle.load`` of a downloaded file would run whatever it
    names. This loader resolves only numpy's array, dtype and scalar constructors.

    Args:
        data: the pickle's bytes, or a binary stream positioned at it.
        where: the file (and member) it came from, for the error message.

    Returns:
        The unpickled object.

    Raises:
        DatasetFormatError: the pickle is malformed or names anything else.

    Examples:
        >>> import numpy as np
        >>> safe_unpickle(pickle.dumps({"a": np.arange(3)}), "x.pkl")["a"].tolist()
        [0, 1, 2]
    """
    stream = io.BytesIO(data) if isinstance(data, bytes | bytearray) else data
    try:
        return _ArrayUnpickler(stream).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as err:
        raise DatasetFormatError(f"{where}: not a readable pickled episode ({err})") from err


def following_rows(
    x: torch.Tensor | TensorDictBase, last: torch.Tensor
) -> torch.Tensor | TensorDictBase:
    """The row after each row of ``x``, zeros where ``last`` is set (the next value is unknown).

    Args:
        x: ``[N, ...]`` rows (a tensor or a TensorDict of batch ``[N]``).
        last: ``[N]`` bool, true at the last row of each episode.

    Returns:
        ``[N, ...]``, like ``x``.
    """
    n = last.shape[0]
    index = torch.arange(n) + (~last).long()
    out = x[index.clamp_max(n - 1)].clone()
    out[last] = 0
    return out


def source_signature(paths: Iterable[Path]) -> list[list[Any]]:
    """Name, size and modification time of each raw file (converted copies record it)."""
    out = []
    for path in sorted(paths):
        stat = path.stat()
        out.append([str(path), stat.st_size, stat.st_mtime_ns])
    return out


def write_chunks(
    dest: Path, total: int, chunks: Iterator[tuple[str, TensorDictBase]]
) -> TensorDictBase:
    """Writes ``(source_name, ted_chunk)`` pairs one after the other into a memmap at ``dest``.

    Args:
        dest: the folder of the memory-mapped copy.
        total: the number of rows all chunks hold together.
        chunks: the chunks, each named by the file (or record) it came from.

    Returns:
        The memory-mapped TensorDict of batch ``[total]``.

    Raises:
        DatasetFormatError: a chunk's entries differ from the first chunk's, or the chunks do not
            hold ``total`` rows.
    """
    out: TensorDictBase | None = None
    first_name = ""
    start = 0
    for name, chunk in chunks:
        n = chunk.shape[0]
        if n == 0:
            continue
        if out is None:
            out = chunk[:1].expand(total).memmap_like(prefix=dest)
            first_name = name
        if start + n > total:
            raise DatasetFormatError(
                f"{name}: holds more steps than counted before converting ({start + n} > {total})"
            )
        expected = set(out.keys(True, True))
        got = set(chunk.keys(True, True))
        if got != expected:
            raise DatasetFormatError(
                f"{name}: entries {sorted(map(str, got ^ expected))} differ from those of "
                f"{first_name}; every episode must hold the same keys"
            )
        for key in expected:
            have, want = chunk.get(key), out.get(key)
            if have.shape[1:] != want.shape[1:]:
                raise DatasetFormatError(
                    f"{name}: key {key!r} has per-step shape {list(have.shape[1:])}, expected "
                    f"{list(want.shape[1:])} (as in {first_name})"
                )
        out[start : start + n] = chunk
        start += n
    if out is None:
        raise DatasetFormatError(f"{dest}: no step to convert (every episode was empty)")
    if start != total:
        raise DatasetFormatError(f"{dest}: wrote {start} steps, expected {total}")
    return out


class EpisodeFilesReplay(BaseDatasetExperienceReplay):
    """The plumbing the four episode-file readers share: where the raw files are, and stale copies.

    A subclass lists its source files (``_source_files``) and calls ``_init_reader`` from its
    ``__init__``: the raw files are looked for in ``data_dir=`` or under
    ``<root>/raw/<dataset_id>`` (``_raw_dir``), and a converted copy made from other files than
    the ones found now is dropped before the base class reopens or rebuilds it.
    """

    _data_dir: Path | None
    available_datasets: ClassVar[list[str]] = []

    def _init_reader(
        self,
        dataset_id: str,
        batch_size: int | None,
        *,
        root: str | Path | None,
        download: bool | str,
        data_dir: str | Path | None,
        **buffer_kwargs: Any,
    ) -> None:
        self._data_dir = Path(data_dir).expanduser() if data_dir is not None else None
        self.dataset_id = dataset_id
        self.root = Path(root).expanduser() if root is not None else default_root(self.cache_name)
        if isinstance(dataset_id, str) and dataset_id and download != "force":
            files = self._source_files()
            if files:
                drop_stale_copies(self.root / dataset_id, source_signature(files))
        BaseDatasetExperienceReplay.__init__(
            self, dataset_id, batch_size, root=root, download=download, **buffer_kwargs
        )

    def _raw_dir(self) -> Path:
        return self.root / "raw" / self.dataset_id

    @property
    def data_dir(self) -> Path:
        """The folder the raw files are read from (``data_dir=``, else under ``root``)."""
        return self._data_dir if self._data_dir is not None else self._raw_dir()

    def _source_files(self) -> list[Path]:
        raise NotImplementedError

    def _source_exists(self) -> bool:
        return bool(self._source_files())

    def _convert(self) -> TensorDictBase:
        raise NotImplementedError(f"{type(self).__name__} writes its copy episode by episode")

    def _unlisted_note(self) -> str:
        """`` (... is not one of X.available_datasets)`` for an id the class does not list, else ""."""
        if self.dataset_id in self.available_datasets:
            return ""
        return f" ({self.dataset_id!r} is not one of {type(self).__name__}.available_datasets)"

    def _download_from_hub(self, repo_id: str, pattern: str) -> None:
        """Fetches the files of the Hugging Face dataset ``repo_id`` matching ``pattern``."""
        hub = import_optional("huggingface_hub", extra="offline")
        hub.snapshot_download(
            repo_id=repo_id,
            repo_type="dataset",
            allow_patterns=[pattern],
            local_dir=str(self.root / "raw"),
        )
