"""Converters between TED data (one transition per row) and per-trajectory layouts.

* :class:`TED2Nested` / :class:`Nested2TED`: a TED batch to a TensorDict of nested
  tensors whose row ``i`` is trajectory ``i``, and back.
* :class:`H5Split` / :class:`H5Combine`: the nested layout (or a TED batch) to one sub-TensorDict
  per trajectory, optionally written as one HDF5 group per trajectory, and back to a TED batch.

Each converter is a callable ``converter(data, path=None)``, so that it can also serve as a
storage save or load hook (``hook(data, path) -> data``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import DONE, NEXT
from torchrl._types import NestedKey
from torchrl._utils import import_optional

__all__ = ["H5Combine", "H5Split", "Nested2TED", "TED2Nested"]

_has_h5py = importlib.util.find_spec("h5py") is not None
_H5_FILE = "trajectories.h5"
_TRAJ_PREFIX = "traj_"


def _key_tuple(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(cast(tuple[str, ...], key))


def _tensor_items(td: TensorDictBase) -> list[tuple[tuple[str, ...], torch.Tensor]]:
    out = []
    for key in td.keys(include_nested=True, leaves_only=True):
        value = td.get(key)
        if isinstance(value, torch.Tensor):
            out.append((_key_tuple(key), value))
    return out


def _trajectory_lengths(data: TensorDictBase, done_key: tuple[str, ...]) -> list[int]:
    """Lengths of the trajectories of a TED batch, in row-major order of its batch."""
    if data.batch_dims < 1:
        raise ValueError("TED data needs at least one batch dim (time), got batch size []")
    done = data.get(done_key, None)
    if done is None:
        raise KeyError(f"the TED data has no done entry {done_key!r} to split trajectories at")
    ends = done.reshape(*data.batch_size, -1).any(-1)
    # The last step of each row ends a trajectory too (rows never share one).
    ends = ends.reshape(-1, data.batch_size[-1]).clone()
    ends[:, -1] = True
    stops = torch.nonzero(ends.reshape(-1)).squeeze(-1) + 1
    starts = torch.cat([stops.new_zeros(1), stops[:-1]])
    return (stops - starts).tolist()


def _to_nested(flat: TensorDictBase, lengths: list[int]) -> TensorDict:
    out = TensorDict(batch_size=[len(lengths)], device=flat.device)
    for key, value in _tensor_items(flat):
        parts = list(torch.split(value, lengths))
        out.set(key, torch.nested.nested_tensor(parts, layout=torch.strided))
    return out


def _rows(value: torch.Tensor) -> list[torch.Tensor]:
    """The rows of a nested tensor (views), or of a dense one."""
    return list(value.unbind(0))


def _nested_lengths(data: TensorDictBase) -> list[int]:
    items = _tensor_items(data)
    if not items:
        raise ValueError("the nested data holds no tensor entry")
    key, first = items[0]
    lengths = [row.shape[0] for row in _rows(first)]
    for other_key, value in items[1:]:
        other = [row.shape[0] for row in _rows(value)]
        if other != lengths:
            raise ValueError(
                f"nested entries {key!r} and {other_key!r} have different trajectory lengths: "
                f"{lengths} and {other}"
            )
    return lengths


class TED2Nested:
    """Converts TED data into a TensorDict of nested tensors, one row per trajectory.

    Trajectories end after each step whose ``done_key`` is set, and at the end of each row of
    the batch. The result has batch ``[N]`` (``N`` trajectories) and every tensor entry becomes
    a nested tensor of shape ``[N, T_i, *feature]``, in torch's strided nested layout, which
    tensordict can memory-map (so that a tensor storage can save it).

    Args:
        done_key: the flag ending a trajectory.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import TED2Nested
        >>> done = torch.tensor([False, True, False, False, True]).unsqueeze(-1)
        >>> data = TensorDict(obs=torch.arange(5), next=TensorDict(done=done), batch_size=[5])
        >>> nested = TED2Nested()(data)
        >>> nested.batch_size, [row.tolist() for row in nested["obs"].unbind(0)]
        (torch.Size([2]), [[0, 1], [2, 3, 4]])
    """

    def __init__(self, done_key: NestedKey = (NEXT, DONE)) -> None:
        self.done_key = _key_tuple(done_key)

    def __call__(self, data: TensorDictBase, path: Path | str | None = None) -> TensorDict:
        """Converts ``data`` (``path`` is ignored: it is there for the hook signature).

        Args:
            data: TED data of batch ``[*B, T]`` (time last).
            path: unused.

        Returns:
            The nested TensorDict of batch ``[N]``.
        """
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"TED2Nested expects a TensorDict, got {type(data).__name__}")
        lengths = _trajectory_lengths(data, self.done_key)
        return _to_nested(data.reshape(-1), lengths)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(done_key={self.done_key!r})"


class Nested2TED:
    """Converts a TensorDict of nested tensors (one row per trajectory) back into TED data.

    The rows are concatenated, in order, into a batch ``[sum T_i]``. Every trajectory but the
    last must end with its ``done_key`` set: otherwise two trajectories would merge in the
    result, and a ``ValueError`` says which.

    Args:
        done_key: the flag that ends a trajectory.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Nested2TED, TED2Nested
        >>> done = torch.tensor([False, True, False, False, True]).unsqueeze(-1)
        >>> data = TensorDict(obs=torch.arange(5), next=TensorDict(done=done), batch_size=[5])
        >>> back = Nested2TED()(TED2Nested()(data))
        >>> back.batch_size, back["obs"].tolist()
        (torch.Size([5]), [0, 1, 2, 3, 4])
    """

    def __init__(self, done_key: NestedKey = (NEXT, DONE)) -> None:
        self.done_key = _key_tuple(done_key)

    def __call__(self, data: TensorDictBase, path: Path | str | None = None) -> TensorDict:
        """Converts ``data`` (``path`` is ignored: it is there for the hook signature).

        Args:
            data: a TensorDict of batch ``[N]`` of nested (or dense) tensors ``[N, T_i, ...]``.
            path: unused.

        Returns:
            TED data of batch ``[sum T_i]``.
        """
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"Nested2TED expects a TensorDict, got {type(data).__name__}")
        if data.batch_dims != 1:
            raise ValueError(
                f"Nested2TED expects a batch [N] of trajectories, got {list(data.batch_size)}"
            )
        lengths = _nested_lengths(data)
        done = data.get(self.done_key, None)
        if done is None:
            raise KeyError(f"the nested data has no done entry {self.done_key!r}")
        for i, row in enumerate(_rows(done)[:-1]):
            if row.shape[0] and not bool(row[-1].any()):
                raise ValueError(
                    f"trajectory {i} does not end with {self.done_key!r} set: it would merge "
                    f"with trajectory {i + 1} in TED data"
                )
        out = TensorDict(batch_size=[sum(lengths)], device=data.device)
        for key, value in _tensor_items(data):
            out.set(key, torch.cat(_rows(value), 0))
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(done_key={self.done_key!r})"


def _h5_target(path: Path | str) -> Path:
    target = Path(path)
    return target if target.suffix in (".h5", ".hdf5") else target / _H5_FILE


class H5Split:
    """Splits trajectories into one sub-TensorDict each, optionally written to an HDF5 file.

    The input is the nested layout of :class:`TED2Nested` (each trajectory is then a view of
    its row) or TED data (split where ``done_key`` is set). The result maps ``"traj_<i>"`` to
    trajectory ``i`` (batch ``[T_i]``). With a ``path``, it is also written to an HDF5 file
    (``path`` itself when it ends with ``.h5``, else ``path / "trajectories.h5"``) with one group
    per trajectory; writing needs ``h5py`` (``pip install "torchrl[h5py]"``).

    Args:
        done_key: the flag that ends a trajectory in TED input.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import H5Split
        >>> done = torch.tensor([False, True, False, False, True]).unsqueeze(-1)
        >>> data = TensorDict(obs=torch.arange(5), next=TensorDict(done=done), batch_size=[5])
        >>> split = H5Split()(data)
        >>> sorted(split.keys()), split["traj_1", "obs"].tolist()
        (['traj_0', 'traj_1'], [2, 3, 4])
    """

    def __init__(self, done_key: NestedKey = (NEXT, DONE)) -> None:
        self.done_key = _key_tuple(done_key)

    def __call__(self, data: TensorDictBase, path: Path | str | None = None) -> TensorDict:
        """Splits ``data``, and writes the trajectories to HDF5 when ``path`` is given.

        Args:
            data: a nested TensorDict of batch ``[N]`` or TED data of batch ``[*B, T]``.
            path: where to write the HDF5 file (``None``: write nothing).

        Returns:
            A TensorDict (batch ``[]``) of the trajectories, under ``"traj_<i>"``.
        """
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"H5Split expects a TensorDict, got {type(data).__name__}")
        if path is not None and not _has_h5py:
            raise ImportError(
                "H5Split needs h5py to write HDF5 files, which is not installed: "
                'pip install "torchrl[h5py]"'
            )
        if not any(value.is_nested for _, value in _tensor_items(data)):
            data = TED2Nested(self.done_key)(data)
        lengths = _nested_lengths(data)
        trajectories = [TensorDict(batch_size=[n], device=data.device) for n in lengths]
        for key, value in _tensor_items(data):
            for traj, row in zip(trajectories, _rows(value), strict=True):
                traj.set(key, row)
        out = TensorDict(
            {f"{_TRAJ_PREFIX}{i}": traj for i, traj in enumerate(trajectories)}, batch_size=[]
        )
        if path is not None:
            _write_h5(out, _h5_target(path))
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(done_key={self.done_key!r})"


def _write_h5(trajectories: TensorDictBase, target: Path) -> None:
    h5py = import_optional("h5py", "h5py")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Written to a temporary name and renamed: a crash never leaves a half-written file.
    tmp = target.with_name(target.name + ".tmp")
    with h5py.File(tmp, "w") as f:
        for name in trajectories.keys():
            traj = trajectories.get(name)
            group = f.create_group(name)
            group.attrs["length"] = int(traj.batch_size[0])
            for key, value in _tensor_items(traj):
                group.create_dataset("/".join(key), data=value.detach().cpu().contiguous().numpy())
    tmp.replace(target)


def _read_h5(target: Path) -> TensorDict:
    h5py = import_optional("h5py", "h5py")
    if not target.exists():
        raise FileNotFoundError(f"H5Combine: no HDF5 file at {target}")
    out = TensorDict(batch_size=[])
    with h5py.File(target, "r") as f:
        for name in f.keys():
            group = f[name]
            traj = TensorDict(batch_size=[int(group.attrs["length"])])

            def visit(sub: str, obj: Any, traj: TensorDict = traj) -> None:
                if isinstance(obj, h5py.Dataset):
                    traj.set(tuple(sub.split("/")), torch.from_numpy(obj[()]))

            group.visititems(visit)
            out.set(name, traj)
    return out


def _traj_index(name: str) -> int:
    if not name.startswith(_TRAJ_PREFIX) or not name[len(_TRAJ_PREFIX) :].isdigit():
        raise ValueError(f"H5Combine: expected entries named '{_TRAJ_PREFIX}<i>', got {name!r}")
    return int(name[len(_TRAJ_PREFIX) :])


class H5Combine:
    """Combines per-trajectory sub-TensorDicts (as :class:`H5Split` makes them) into TED data.

    The trajectories ``"traj_0"``, ``"traj_1"``, ... are concatenated in index order into one
    TensorDict of batch ``[sum T_i]``. They come from ``data`` or, when ``data`` is ``None``,
    from the HDF5 file at ``path`` (reading needs ``h5py``: ``pip install "torchrl[h5py]"``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import H5Combine, H5Split
        >>> done = torch.tensor([False, True, False, False, True]).unsqueeze(-1)
        >>> data = TensorDict(obs=torch.arange(5), next=TensorDict(done=done), batch_size=[5])
        >>> H5Combine()(H5Split()(data))["obs"].tolist()
        [0, 1, 2, 3, 4]
    """

    def __call__(
        self, data: TensorDictBase | None = None, path: Path | str | None = None
    ) -> TensorDict:
        """Concatenates the trajectories of ``data`` (or of the HDF5 file at ``path``).

        Args:
            data: a TensorDict of trajectories under ``"traj_<i>"``, or ``None`` to read them.
            path: the HDF5 file (or its folder) to read when ``data`` is ``None``.

        Returns:
            TED data of batch ``[sum T_i]``.
        """
        if data is None:
            if path is None:
                raise ValueError("H5Combine needs the trajectories or the path of an HDF5 file")
            if not _has_h5py:
                raise ImportError(
                    "H5Combine needs h5py to read HDF5 files, which is not installed: "
                    'pip install "torchrl[h5py]"'
                )
            data = _read_h5(_h5_target(path))
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"H5Combine expects a TensorDict, got {type(data).__name__}")
        names = sorted(data.keys(), key=_traj_index)
        if not names:
            raise ValueError("H5Combine: there is no trajectory to combine")
        trajectories = [data.get(name) for name in names]
        keys = [key for key, _ in _tensor_items(trajectories[0])]
        for name, traj in zip(names, trajectories, strict=True):
            other = [key for key, _ in _tensor_items(traj)]
            if sorted(other) != sorted(keys):
                raise ValueError(
                    f"H5Combine: {name!r} has entries {sorted(other)}, "
                    f"{names[0]!r} has {sorted(keys)}"
                )
        total = sum(int(traj.batch_size[0]) for traj in trajectories)
        out = TensorDict(batch_size=[total], device=data.device)
        for key in keys:
            out.set(key, torch.cat([traj.get(key) for traj in trajectories], 0))
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
