"""OpenML classification tables as contextual-bandit data: features ``"X"``, class ``"y"``.

A table (an OpenML ARFF file, the parquet file the ``openml`` package caches, or any CSV or
parquet file) becomes a replay buffer of rows: ``"X"`` (float32 features, categorical columns
encoded as integer codes or one-hot) and ``"y"`` (int64 class index). A bandit agent sees
``"X"`` as its context, picks a class and is rewarded when it is ``"y"``.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl.data.datasets.common import (
    BaseDatasetExperienceReplay,
    DatasetFormatError,
    DatasetNotFoundError,
)
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.storages import Storage, TensorStorage
from torchrl.data.replay_buffers.writers import Writer

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["OPENML_TABLES", "OpenMLExperienceReplay", "read_arff"]

_has_pandas = importlib.util.find_spec("pandas") is not None
_has_openml = importlib.util.find_spec("openml") is not None

_INSTALL = 'pip install "torchrl[offline]"'
_SUFFIXES = (".parquet", ".pq", ".csv", ".arff")

OPENML_TABLES: dict[str, tuple[str, str | None, Literal["ordinal", "onehot"]]] = {
    "adult_num": ("adult", "class", "ordinal"),
    "adult_onehot": ("adult", "class", "onehot"),
    "mushroom_num": ("mushroom", "class", "ordinal"),
    "mushroom_onehot": ("mushroom", "class", "onehot"),
    "covertype": ("covertype", "class", "ordinal"),
    "shuttle": ("shuttle", "class", "ordinal"),
    "magic": ("MagicTelescope", "class:", "ordinal"),
}
"""The names TorchRL documents: name -> (OpenML table name, target column, encoding)."""

_ATTRIBUTE = re.compile(r"^@attribute\s+('(?:[^']|\\')*'|\"[^\"]*\"|\S+)\s+(.*)$", re.I)


def _pandas() -> Any:
    if not _has_pandas:
        raise ImportError(f"OpenMLExperienceReplay reads tables with pandas: {_INSTALL}")
    import pandas

    return pandas


def _split_values(text: str) -> list[str]:
    quote = '"' if '"' in text and "'" not in text else "'"
    row = next(csv.reader([text], quotechar=quote, skipinitialspace=True, escapechar="\\"))
    return [v.strip() for v in row]


def read_arff(path: str | Path) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """Reads a dense ARFF file (the format OpenML serves) into a pandas DataFrame.

    Numeric attributes become float columns, nominal and string ones object columns; ``?`` is a
    missing value (NaN / None).

    Args:
        path: the ``.arff`` file.

    Returns:
        ``(frame, nominal)``: the table and each nominal attribute's declared values.

    Raises:
        DatasetFormatError: a malformed header or row (the message names the file and line).

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "t.arff")
        >>> _ = open(path, "w").write(
        ...     "@relation t\\n@attribute x numeric\\n@attribute c {a,b}\\n@data\\n1.5,b\\n?,a\\n")
        >>> frame, nominal = read_arff(path)
        >>> frame["c"].tolist(), nominal
        (['b', 'a'], {'c': ['a', 'b']})
    """
    path = Path(path)
    names: list[str] = []
    kinds: list[str] = []
    nominal: dict[str, list[str]] = {}
    rows: list[list[str]] = []
    in_data = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("%"):
                continue
            if in_data:
                if line.startswith("{"):
                    raise DatasetFormatError(
                        f"{path}:{lineno}: sparse ARFF rows are not supported (dense rows only)"
                    )
                try:
                    values = _split_values(line)
                except (csv.Error, StopIteration) as err:
                    raise DatasetFormatError(f"{path}:{lineno}: unreadable row ({err})") from err
                if len(values) != len(names):
                    raise DatasetFormatError(
                        f"{path}:{lineno}: row has {len(values)} values, the header declares "
                        f"{len(names)} attributes"
                    )
                rows.append(values)
                continue
            lower = line.lower()
            if lower.startswith("@relation"):
                continue
            if lower.startswith("@data"):
                in_data = True
                continue
            match = _ATTRIBUTE.match(line)
            if match is None:
                raise DatasetFormatError(f"{path}:{lineno}: unexpected header line {line!r}")
            name, kind = match.group(1).strip("'\""), match.group(2).strip()
            names.append(name)
            if kind.startswith("{"):
                if not kind.endswith("}"):
                    raise DatasetFormatError(f"{path}:{lineno}: unclosed nominal values {kind!r}")
                nominal[name] = [v for v in _split_values(kind[1:-1]) if v]
                kinds.append("nominal")
            elif kind.lower() in ("numeric", "real", "integer"):
                kinds.append("numeric")
            elif kind.lower() == "string" or kind.lower().startswith("date"):
                kinds.append("string")
            else:
                raise DatasetFormatError(f"{path}:{lineno}: unknown attribute type {kind!r}")
    if not in_data:
        raise DatasetFormatError(f"{path}: no @data section (not an ARFF file?)")
    pandas = _pandas()
    columns: dict[str, Any] = {}
    for j, (name, kind) in enumerate(zip(names, kinds)):
        col = [r[j] for r in rows]
        if kind == "numeric":
            try:
                columns[name] = np.array([np.nan if v == "?" else float(v) for v in col])
            except ValueError as err:
                raise DatasetFormatError(
                    f"{path}: attribute {name!r} is numeric but holds {err}"
                ) from err
        else:
            columns[name] = [None if v == "?" else v for v in col]
    return pandas.DataFrame(columns, columns=names), nominal


def _read_table(path: Path) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    pandas = _pandas()
    suffix = path.suffix.lower()
    try:
        if suffix == ".arff":
            return read_arff(path)
        if suffix in (".parquet", ".pq"):
            return pandas.read_parquet(path), {}
        if suffix == ".csv":
            return pandas.read_csv(path), {}
    except DatasetFormatError:
        raise
    except Exception as err:
        raise DatasetFormatError(f"{path}: cannot read the table ({err})") from err
    raise DatasetFormatError(f"{path}: unknown table format {suffix!r}; expected {_SUFFIXES}")


def _declared_target(table: Path) -> str | None:
    """The class column declared beside a table: ``<table>.json`` (written by a download) or
    the ``description.xml`` of an OpenML cache folder."""
    sidecar = table.with_suffix(".json")
    if sidecar.is_file():
        return json.loads(sidecar.read_text()).get("target")
    description = table.parent / "description.xml"
    if description.is_file():
        try:
            tree = ET.parse(description)
        except ET.ParseError as err:
            raise DatasetFormatError(f"{description}: not valid XML ({err})") from err
        for element in tree.iter():
            if element.tag.endswith("default_target_attribute") and element.text:
                return element.text.strip()
    return None


class OpenMLExperienceReplay(BaseDatasetExperienceReplay):
    """Replay buffer of a classification table's rows, for contextual bandits.

    Samples hold ``"X"`` (float32 ``[B, D]``) and ``"y"`` (int64 ``[B]``). The table is
    ``data_file`` (an ``.arff``, ``.parquet``/``.pq`` or ``.csv`` file, or an OpenML cache folder
    holding one with its ``description.xml``), else ``<root>/raw/<table>.<ext>`` where
    ``<table>`` is the OpenML name of a documented dataset (``OPENML_TABLES``: ``"adult_num"``,
    ``"adult_onehot"``, ``"mushroom_num"``, ``"mushroom_onehot"``, ``"covertype"``,
    ``"shuttle"``, ``"magic"``) or ``name`` itself. Categorical columns become integer codes
    (``"ordinal"``) or one-hot columns (``"onehot"``); numeric ones stay as they are; rows with a
    missing value are dropped (counted in ``metadata["dropped_rows"]``). ``metadata`` also
    records the class names (``"classes"``, in code order) and the feature names. With
    ``download=True`` the table is fetched with the ``openml`` package (not installed by
    ``torchrl[offline]``: ``pip install openml``) and saved under ``<root>/raw``.

    Args:
        name: the dataset's name (a documented one, or any name with ``data_file``).
        batch_size: default number of rows per :meth:`sample`.
        root: cache directory (default ``$TORCHRL_DATASETS_ROOT/openml``).
        download: fetch the table with ``openml`` when it is missing.
        data_file: the table file or OpenML cache folder to read.
        target: the class column (default: declared beside the file, documented, or ``"class"``).
        encoding: ``"ordinal"`` or ``"onehot"`` for categorical features.
        dataset_id: same as ``name`` (the keyword :func:`load_dataset` passes).
        sampler: default ``RandomSampler()``.
        writer: default ``ImmutableDatasetWriter()``.
        collate_fn: as in :class:`ReplayBuffer`.
        pin_memory: as in :class:`ReplayBuffer`.
        prefetch: as in :class:`ReplayBuffer`.
        transform: as in :class:`ReplayBuffer`.

    Examples:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "toy.csv")
        >>> _ = open(path, "w").write("x,color,class\\n1.5,red,a\\n2.0,blue,b\\n0.5,red,a\\n")
        >>> data = OpenMLExperienceReplay("toy", 2, data_file=path, root=os.path.dirname(path))
        >>> data.sample()["X"].shape, data.metadata["classes"]
        (torch.Size([2, 2]), ['a', 'b'])
    """

    cache_name: ClassVar[str] = "openml"

    def __init__(
        self,
        name: str | None = None,
        batch_size: int | None = None,
        *,
        root: str | Path | None = None,
        download: bool | str = False,
        data_file: str | Path | None = None,
        target: str | None = None,
        encoding: Literal["ordinal", "onehot"] | None = None,
        dataset_id: str | None = None,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
    ) -> None:
        if (name is None) == (dataset_id is None):
            raise ValueError("give the dataset's name once: name= (or dataset_id=)")
        name = name if name is not None else dataset_id
        assert name is not None
        known = OPENML_TABLES.get(name)
        table, default_target, default_encoding = known or (name, None, "ordinal")
        if encoding is not None and encoding not in ("ordinal", "onehot"):
            raise ValueError(f"encoding must be 'ordinal' or 'onehot', got {encoding!r}")
        self.table = table
        self.encoding: Literal["ordinal", "onehot"] = encoding or default_encoding
        self._asked_encoding = encoding
        self._target = target
        self._default_target = default_target
        self._data_file = Path(data_file).expanduser() if data_file is not None else None
        super().__init__(
            name,
            batch_size,
            root=root,
            download=download,
            sampler=sampler,
            writer=writer,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
        )

    # -- where the table is ----------------------------------------------------------------------
    @property
    def raw_dir(self) -> Path:
        """Where tables are looked for (and downloaded to) when no ``data_file`` is given."""
        return self.root / "raw"

    @property
    def source_file(self) -> Path | None:
        """The table file to read (``None`` when none is found)."""
        if self._data_file is not None:
            if self._data_file.is_dir():
                found = sorted(
                    p for p in self._data_file.iterdir() if p.suffix.lower() in _SUFFIXES
                )
                return found[0] if found else None
            return self._data_file if self._data_file.is_file() else None
        for suffix in _SUFFIXES:
            candidate = self.raw_dir / f"{self.table}{suffix}"
            if candidate.is_file():
                return candidate
        return None

    def _source_exists(self) -> bool:
        return self.source_file is not None

    def _missing_message(self) -> str:
        where = (
            str(self._data_file)
            if self._data_file is not None
            else f"{self.raw_dir}/{self.table}.{{parquet,pq,csv,arff}}"
        )
        return (
            f"OpenML table {self.table!r} (dataset {self.dataset_id!r}) not found: expected a "
            f"classification table (ARFF, parquet or CSV, one row per sample, a class column) at "
            f"{where}. Obtain it online from https://www.openml.org (search {self.table!r}, "
            f"download the ARFF or parquet file) or with download=True (needs `pip install "
            f"openml`), then pass data_file= or copy it there."
        )

    def _download(self) -> None:
        if not _has_openml:
            raise ImportError(
                "download=True fetches OpenML tables with the `openml` package, which is not "
                "installed: pip install openml (or download the file by hand: "
                + self._missing_message()
                + ")"
            )
        import openml

        dataset = openml.datasets.get_dataset(self.table, download_data=True)
        frame, *_ = dataset.get_data(dataset_format="dataframe")
        self.raw_dir.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(self.raw_dir / f"{self.table}.parquet")
        if dataset.default_target_attribute:
            (self.raw_dir / f"{self.table}.json").write_text(
                json.dumps({"target": dataset.default_target_attribute})
            )

    # -- conversion ------------------------------------------------------------------------------
    def _resolve_target(self, path: Path, columns: list[str]) -> str:
        if self._target is not None:
            if self._target not in columns:
                raise DatasetFormatError(
                    f"{path}: target column {self._target!r} is not in the table "
                    f"(columns: {columns})"
                )
            return self._target
        for candidate in (_declared_target(path), self._default_target, "class"):
            if candidate is not None and candidate in columns:
                return candidate
        raise DatasetFormatError(
            f"{path}: no class column found (none declared, no 'class' column); pass target= "
            f"one of {columns}"
        )

    def _write(self, dest: Path) -> dict[str, Any]:
        path = self.source_file
        if path is None:
            raise DatasetNotFoundError(self._missing_message())
        frame, nominal = _read_table(path)
        columns = [str(c) for c in frame.columns]
        frame.columns = columns
        target = self._resolve_target(path, columns)
        before = len(frame)
        frame = frame.dropna()
        if not len(frame):
            raise DatasetFormatError(f"{path}: no complete row (every row misses a value)")
        pandas = _pandas()
        features: list[np.ndarray] = []
        names: list[str] = []
        for column in columns:
            if column == target:
                continue
            values = frame[column]
            if pandas.api.types.is_numeric_dtype(values) and not pandas.api.types.is_bool_dtype(
                values
            ):
                features.append(values.to_numpy(dtype=np.float32)[:, None])
                names.append(column)
                continue
            codes, categories = _checked_codes(path, values, nominal.get(column))
            if self.encoding == "onehot":
                features.append(np.eye(len(categories), dtype=np.float32)[codes])
                names.extend(f"{column}={c}" for c in categories)
            else:
                features.append(codes.astype(np.float32)[:, None])
                names.append(column)
        y, classes = _checked_codes(path, frame[target], nominal.get(target))
        x = np.concatenate(features, 1) if features else np.zeros((len(frame), 0), np.float32)
        data = TensorDict(
            {"X": torch.from_numpy(x), "y": torch.from_numpy(y.astype(np.int64))},
            batch_size=[len(frame)],
        )
        data.memmap_(prefix=dest)
        return {
            "format": "openml-table",
            "source": str(path),
            "table": self.table,
            "target": target,
            "encoding": self.encoding,
            "classes": classes,
            "feature_names": names,
            "rows": len(frame),
            "dropped_rows": before - len(frame),
        }

    def _convert(self) -> TensorDictBase:
        raise NotImplementedError("the OpenML copy is written by _write")

    def _make_storage(self, data: TensorDictBase) -> Storage:
        meta = self.metadata
        for key, asked in (("encoding", self._asked_encoding), ("target", self._target)):
            if asked is not None and meta.get(key) != asked:
                raise ValueError(
                    f"the converted copy at {self.data_path} was made with {key}="
                    f"{meta.get(key)!r}, not {asked!r}: pass download='force' to convert again"
                )
        return TensorStorage(data)

    @property
    def num_classes(self) -> int:
        """Number of classes (actions of the bandit)."""
        return len(self.metadata.get("classes", []))


def _checked_codes(
    path: Path, values: Any, declared: list[str] | None
) -> tuple[np.ndarray, list[str]]:
    try:
        return _codes(values, declared)
    except ValueError as err:
        raise DatasetFormatError(f"{path}: {err}") from err


def _codes(values: Any, declared: list[str] | None) -> tuple[np.ndarray, list[str]]:
    """Integer codes of a categorical column, in declared order (else sorted), and the names."""
    pandas = _pandas()
    if not declared and pandas.api.types.is_numeric_dtype(values):
        unique = np.unique(values.to_numpy())
        codes = np.searchsorted(unique, values.to_numpy())
        return codes.astype(np.int64), [str(v) for v in unique.tolist()]
    as_text = values.astype(str).to_numpy()
    categories = list(declared) if declared else sorted(set(as_text.tolist()))
    codes = pandas.Index(categories).get_indexer(as_text).astype(np.int64)
    if (codes < 0).any():
        unknown = sorted(set(as_text[codes < 0].tolist()))
        raise ValueError(
            f"column {values.name!r} holds values {unknown[:5]} outside its declared "
            f"categories {categories}"
        )
    return codes, categories
