"""Atomic checkpoint files and the random-number-generator states they carry."""

from __future__ import annotations

import os
import random
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch

from torchrl.data.replay_buffers.utils import safe_torch_load

__all__ = [
    "fsync_dir",
    "get_rng_states",
    "load_checkpoint",
    "save_checkpoint",
    "set_rng_states",
]

#: Bumped when the layout of a trainer checkpoint changes.
CHECKPOINT_VERSION = 1


def save_checkpoint(state: dict[str, Any], path: str | os.PathLike) -> Path:
    """Writes ``state`` with ``torch.save`` to ``path`` atomically.

    The data goes to a temporary file in the same folder, is flushed and ``fsync``-ed, and is
    then renamed over ``path`` (``os.replace``), so a crash at any moment leaves either the old
    checkpoint or the new one, never half a file. Temporary files left by writes that were
    killed are removed after the next successful write (one writer per ``path``).

    Args:
        state: any object ``torch.save`` can write.
        path: the checkpoint file; its folder is created if needed.

    Returns:
        The path written.

    Examples:
        >>> import tempfile
        >>> path = save_checkpoint({"frames": 10}, tempfile.mkdtemp() + "/ckpt.pt")
        >>> load_checkpoint(path)
        {'frames': 10}
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Same folder as the target: os.replace is atomic only within one filesystem. "xb" (not
    # mkstemp) so the file gets the usual umask permissions.
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "xb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        # Leave no stray temporary file behind, whatever interrupted the write.
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    # Temporary files of writes that were killed before their rename are garbage now.
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            stale.unlink()
        except FileNotFoundError:
            pass
    # Make the rename itself durable.
    fsync_dir(path.parent)
    return path


def fsync_dir(path: str | os.PathLike) -> None:
    """Flushes a folder's entries (new names, renames) to disk: POSIX needs this, after
    ``os.replace``, for the rename itself to survive a power loss. A no-op where folders cannot
    be opened (Windows).

    Args:
        path: the folder.
    """
    try:
        dir_fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def load_checkpoint(
    path: str | os.PathLike,
    map_location: torch.device | str | dict[str, str] | None = None,
    *,
    trusted: bool = False,
) -> Any:
    """Reads a file written by :func:`save_checkpoint`, without running code from it.

    The file is read with ``torch.load(..., weights_only=True)``: tensors, numbers, strings and
    lists/tuples/dicts of those (what a trainer checkpoint holds: parameters, optimizer and RNG
    states, counters) load; a file naming any other Python object is refused, since unpickling
    it could run arbitrary code. ``trusted=True`` lifts the restriction (with a warning), for
    checkpoints you wrote yourself that hold other objects.

    Args:
        path: the checkpoint file.
        map_location: passed to ``torch.load``.
        trusted: allow arbitrary pickled objects (they can run any code while loading).

    Returns:
        The saved object.

    Raises:
        FileNotFoundError: no file at ``path``.
        pickle.UnpicklingError: the file holds objects that need ``trusted=True``.

    Examples:
        >>> import tempfile, torch
        >>> from torchrl.trainers import save_checkpoint
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = save_checkpoint({"frames": 10, "w": torch.ones(2)}, f"{folder}/ckpt.pt")
        ...     state = load_checkpoint(path)
        >>> state["frames"], state["w"]
        (10, tensor([1., 1.]))
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    return safe_torch_load(
        path,
        trusted=trusted,
        map_location=map_location,
        hint="load_checkpoint(path, trusted=True) (or Trainer.load_from_file(path, trusted=True))",
        allow=_numpy_array_globals(),
    )


def _numpy_array_globals() -> list[Any]:
    """What unpickling a numpy array needs (checkpoints of earlier versions hold numpy's RNG
    state as an array). Rebuilding an array runs no user code: its elements, if objects, go
    through the same restricted unpickler."""
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
    return [_reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def get_rng_states() -> dict[str, Any]:
    """The states of the torch (CPU and CUDA), numpy and Python ``random`` generators.

    Returns:
        A dict to give back to :func:`set_rng_states`.

    Examples:
        >>> state = get_rng_states()
        >>> a = torch.rand(2)
        >>> set_rng_states(state)
        >>> torch.equal(a, torch.rand(2))
        True
    """
    # numpy's state as tensors and plain values, so that checkpoints load with weights_only.
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_states(state: dict[str, Any]) -> None:
    """Restores generator states returned by :func:`get_rng_states`.

    Args:
        state: the dict from :func:`get_rng_states`; missing entries are left alone.
    """
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "numpy" in state:
        saved = state["numpy"]
        if isinstance(saved, dict) and "key" in saved:
            saved = {
                "bit_generator": saved["bit_generator"],
                "state": {"key": np.asarray(saved["key"], dtype=np.uint32), "pos": saved["pos"]},
                "has_gauss": saved["has_gauss"],
                "gauss": saved["gauss"],
            }
        np.random.set_state(saved)
    if "python" in state:
        random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
