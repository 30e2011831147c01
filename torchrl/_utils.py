"""Small helpers shared across torchrl: logging, lazy optional imports, one-time warnings."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import warnings
from types import ModuleType

logger = logging.getLogger("torchrl")

# package name -> the extra that installs it (``pip install "torchrl[extra]"``)
_EXTRAS = {
    "gymnasium": "gym",
    "mujoco": "mujoco",
    "dm_control": "dm_control",
    "brax": "brax",
    "jax": "brax",
    "vmas": "vmas",
    "h5py": "h5py",
    "ray": "ray",
    "submitit": "submitit",
    "tensorboard": "tensorboard",
    "wandb": "wandb",
    "matplotlib": "plot",
}


def has_module(name: str) -> bool:
    """Returns whether ``name`` is importable, without importing it.

    Examples:
        >>> has_module("numpy")
        True
        >>> has_module("surely_not_a_real_package")
        False
    """
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def import_optional(name: str, extra: str | None = None) -> ModuleType:
    """Imports an optional dependency, or raises an ``ImportError`` naming the extra to install.

    Args:
        name: the module to import, e.g. ``"gymnasium"``.
        extra: the torchrl extra that installs it; guessed from ``name`` when omitted.

    Returns:
        The imported module.

    Examples:
        >>> np = import_optional("numpy")
        >>> import_optional("surely_not_a_real_package", extra="gym")
        Traceback (most recent call last):
        ...
        ImportError: surely_not_a_real_package is required here but is not installed: pip install "torchrl[gym]"
    """
    try:
        return importlib.import_module(name)
    except ImportError as err:
        extra = extra or _EXTRAS.get(name.split(".")[0])
        hint = f'pip install "torchrl[{extra}]"' if extra else f"pip install {name}"
        raise ImportError(f"{name} is required here but is not installed: {hint}") from err


_warned: set[str] = set()


def warn_once(message: str, category: type[Warning] = UserWarning, stacklevel: int = 2) -> None:
    """Emits ``message`` as a warning the first time it is seen in this process only."""
    if message in _warned:
        return
    _warned.add(message)
    warnings.warn(message, category, stacklevel=stacklevel + 1)
