"""Small helpers shared across torchrl: logging, lazy optional imports, one-time warnings,
version-dependent implementations, the TransformedEnv unwrap setting and CUDA memory stats."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import logging
import os
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from tensordict import TensorDictBase
    from torch import Tensor

    from torchrl._types import NestedKey

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
    "ale_py": "atari",
    "pyspiel": "open_spiel",
    "mo_gymnasium": "mo_gym",
    "jumanji": "jumanji",
    "gymnax": "gymnax",
    "craftax": "gymnax",
    "procgen": "procgen",
    "minari": "offline",
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


def start_local_ray(ray: ModuleType, config: dict[str, Any], who: str) -> None:
    """Calls ``ray.init(**config)`` with the dashboard off, warning when Ray starts unauthenticated.

    Every part of torchrl that starts Ray calls this one function (replay buffers, collectors,
    PBT, the Ray logger, the service registry). Ray's gRPC servers listen on every
    interface and Ray offers no setting to change it; what keeps other machines out is Ray's
    token authentication, which Ray (2.60 checked) turns on for a new local instance when
    ``RAY_AUTH_MODE`` is unset. With ``RAY_AUTH_MODE=disabled`` anyone who can reach this
    machine can run code in the instance, so a warning says so.

    Args:
        ray: the imported ``ray`` module.
        config: keyword arguments of ``ray.init`` (``include_dashboard`` defaults to ``False``).
        who: the name of the caller, written in the warning.
    """
    config = {"include_dashboard": False, **config}
    starts_local = config.get("address") in (None, "local")
    if starts_local and os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        warnings.warn(
            f"{who}: starting Ray with RAY_AUTH_MODE=disabled: Ray's servers listen on every "
            "network interface without authentication, so any host that can reach this one "
            "can run code here. Unset RAY_AUTH_MODE (Ray then uses token authentication) "
            "unless this machine is isolated.",
            UserWarning,
            stacklevel=3,
        )
    ray.init(**config)


def warn_once(message: str, category: type[Warning] = UserWarning, stacklevel: int = 2) -> None:
    """Emits ``message`` as a warning the first time it is seen in this process only."""
    if message in _warned:
        return
    _warned.add(message)
    warnings.warn(message, category, stacklevel=stacklevel + 1)


# ------------------------------------------------------------------------------ implement_for


def _version_tuple(version: str) -> tuple[int, ...]:
    # "2.1.0+cu121" -> (2, 1, 0); "1.0rc1" -> (1, 0): pre-release tags count as the release.
    parts: list[int] = []
    for piece in str(version).split("+")[0].split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _module_version(module: ModuleType, name: str) -> str:
    version = getattr(module, "__version__", None)
    if version is None:
        import importlib.metadata

        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError as err:
            raise ImportError(f"implement_for: cannot tell the version of module {name!r}") from err
    return str(version)


class implement_for:
    """Decorator choosing, at the first call, the implementation that fits an installed version.

    Decorate several functions of the same name (same module and qualified name), each with the
    version range of ``module_name`` it supports; calling the name runs the one whose range
    holds the installed version (the last one declared wins where ranges overlap). When the
    module is missing, or no range fits, the call raises an ``ImportError`` naming the module,
    its version and the ranges declared.

    Args:
        module_name: the module whose version is checked (e.g. ``"gymnasium"``), or a
            callable returning that module.
        from_version: the first version supported (``None``: no lower bound).
        to_version: the first version no longer supported (``None``: no upper bound).
        class_method: make the dispatched name a ``classmethod``.
        compilable: resolve the implementation (importing the module) when decorating instead
            of at the first call, so that compiled code never sees the import.

    Examples:
        >>> from torchrl import implement_for
        >>> @implement_for("torch", None, "1.0")
        ... def flavour():
        ...     return "ancient torch"
        >>> @implement_for("torch", "1.0")
        ... def flavour():  # noqa: F811
        ...     return "modern torch"
        >>> flavour()
        'modern torch'
    """

    # (module, qualname) -> [(implement_for, function), ...] in declaration order
    _registry: dict[tuple[str, str], list[tuple[implement_for, Any]]] = {}
    _resolved: dict[tuple[str, str], Any] = {}

    def __init__(
        self,
        module_name: str | Callable[[], ModuleType],
        from_version: str | None = None,
        to_version: str | None = None,
        *,
        class_method: bool = False,
        compilable: bool = False,
    ) -> None:
        if not (isinstance(module_name, str) or callable(module_name)):
            raise TypeError(
                f"implement_for: module_name must be a str or a callable returning a module, "
                f"got {type(module_name).__name__}"
            )
        self.module_name = module_name
        self.from_version = from_version
        self.to_version = to_version
        self.class_method = class_method
        self.compilable = compilable

    def __repr__(self) -> str:
        low = self.from_version or "-inf"
        high = self.to_version or "inf"
        return f"implement_for({self._name()!r}, [{low}, {high}))"

    def _name(self) -> str:
        if isinstance(self.module_name, str):
            return self.module_name
        return getattr(self.module_name, "__name__", repr(self.module_name))

    def _fits(self) -> tuple[bool, str | None]:
        """Returns whether the installed module's version is in range, and that version."""
        try:
            if isinstance(self.module_name, str):
                module = importlib.import_module(self.module_name)
                name = self.module_name
            else:
                module = self.module_name()
                name = module.__name__
        except ImportError:
            return False, None
        version = _module_version(module, name.split(".")[0])
        current = _version_tuple(version)
        if self.from_version is not None and current < _version_tuple(self.from_version):
            return False, version
        if self.to_version is not None and current >= _version_tuple(self.to_version):
            return False, version
        return True, version

    @classmethod
    def _resolve(cls, key: tuple[str, str]) -> Any:
        found = cls._resolved.get(key)
        if found is not None:
            return found
        seen: list[str] = []
        chosen = None
        for spec, fn in cls._registry[key]:
            fits, version = spec._fits()
            seen.append(f"{spec!r} (installed: {version or 'missing'})")
            if fits:
                chosen = fn
        if chosen is None:
            raise ImportError(
                f"no implementation of {key[1]} fits the installed versions; declared: "
                + "; ".join(seen)
            )
        cls._resolved[key] = chosen
        return chosen

    def __call__(self, fn: Callable[..., Any]) -> Any:
        key = (fn.__module__, fn.__qualname__)
        self._registry.setdefault(key, []).append((self, fn))
        # A new declaration may change the choice.
        self._resolved.pop(key, None)
        if self.compilable:
            try:
                self._resolve(key)
            except ImportError:
                pass  # raised again, with the same message, on the first call

        @functools.wraps(fn)
        def dispatch(*args: Any, **kwargs: Any) -> Any:
            return implement_for._resolve(key)(*args, **kwargs)

        if self.class_method:
            return classmethod(dispatch)
        return dispatch

    @classmethod
    def reset(cls) -> None:
        """Forgets the implementations chosen so far (they are chosen again on the next call)."""
        cls._resolved.clear()


# ------------------------------------------------------------------------------ auto unwrap

_AUTO_UNWRAP_ENV_VAR = "AUTO_UNWRAP_TRANSFORMED_ENV"
_auto_unwrap: list[bool | None] = [None]


def _parse_flag(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{_AUTO_UNWRAP_ENV_VAR} must be a boolean (1/0, true/false), got {value!r}")


def auto_unwrap_transformed_env(allow_none: bool = False) -> bool | None:
    """Returns whether a ``TransformedEnv`` wrapping another one should merge into it.

    The value comes from :class:`set_auto_unwrap_transformed_env` when one is active, else from
    the ``AUTO_UNWRAP_TRANSFORMED_ENV`` environment variable, else the default (``True``).

    Args:
        allow_none: return ``None`` instead of the default when nothing was set.

    Returns:
        The setting, or ``None`` (only with ``allow_none=True``).

    Examples:
        >>> from torchrl import auto_unwrap_transformed_env, set_auto_unwrap_transformed_env
        >>> with set_auto_unwrap_transformed_env(False):
        ...     auto_unwrap_transformed_env()
        False
    """
    value = _auto_unwrap[0]
    if value is None:
        import os

        raw = os.environ.get(_AUTO_UNWRAP_ENV_VAR)
        if raw is not None:
            value = _parse_flag(raw)
    if value is None and not allow_none:
        return True
    return value


class set_auto_unwrap_transformed_env(contextlib.ContextDecorator):
    """Context manager or decorator setting :func:`auto_unwrap_transformed_env`.

    Used as ``with set_auto_unwrap_transformed_env(False): ...`` or as a decorator, it sets the
    value for the block and restores the previous one after; ``.set()`` sets it for good.

    Args:
        mode: whether a ``TransformedEnv`` built around another one merges into it.

    Examples:
        >>> from torchrl import auto_unwrap_transformed_env, set_auto_unwrap_transformed_env
        >>> @set_auto_unwrap_transformed_env(False)
        ... def build():
        ...     return auto_unwrap_transformed_env()
        >>> build(), auto_unwrap_transformed_env()
        (False, True)
    """

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"set_auto_unwrap_transformed_env: mode must be a bool, got {mode!r}")
        self.mode = mode
        self._previous: list[bool | None] = []

    def set(self) -> None:
        """Sets the value for the rest of the process (no restoring)."""
        _auto_unwrap[0] = self.mode

    def __enter__(self) -> set_auto_unwrap_transformed_env:
        self._previous.append(_auto_unwrap[0])
        _auto_unwrap[0] = self.mode
        return self

    def __exit__(self, *exc: object) -> None:
        _auto_unwrap[0] = self._previous.pop()


# ------------------------------------------------------------------------------ CUDA memory

_GB = 1024**3
_MEMORY_KEYS = ("allocated_gb", "reserved_gb", "max_allocated_gb", "max_reserved_gb")


def _cuda_device(device: Any) -> Any:
    """The CUDA device to query, or ``None`` when CUDA is unavailable or ``device`` is not CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    return dev if dev.type == "cuda" else None


def cuda_memory_stats(device: Any = None) -> dict[str, float]:
    """Returns the CUDA memory in use and its peaks on ``device``, in gigabytes (GiB).

    Without CUDA, or for a non-CUDA ``device``, every value is ``0.0``.

    Args:
        device: the CUDA device (``None``: the current one).

    Returns:
        ``{"allocated_gb", "reserved_gb", "max_allocated_gb", "max_reserved_gb"}`` as floats.

    Examples:
        >>> from torchrl import cuda_memory_stats
        >>> sorted(cuda_memory_stats("cpu").items())
        [('allocated_gb', 0.0), ('max_allocated_gb', 0.0), ('max_reserved_gb', 0.0), ('reserved_gb', 0.0)]
    """
    dev = _cuda_device(device)
    if dev is None:
        return dict.fromkeys(_MEMORY_KEYS, 0.0)
    import torch

    return {
        "allocated_gb": torch.cuda.memory_allocated(dev) / _GB,
        "reserved_gb": torch.cuda.memory_reserved(dev) / _GB,
        "max_allocated_gb": torch.cuda.max_memory_allocated(dev) / _GB,
        "max_reserved_gb": torch.cuda.max_memory_reserved(dev) / _GB,
    }


def reset_cuda_peak_stats(device: Any = None) -> None:
    """Resets the CUDA peak-memory counters of ``device``; does nothing without CUDA.

    Args:
        device: the CUDA device (``None``: the current one).

    Examples:
        >>> from torchrl import reset_cuda_peak_stats
        >>> reset_cuda_peak_stats()  # also fine on a machine without CUDA
    """
    dev = _cuda_device(device)
    if dev is not None:
        import torch

        torch.cuda.reset_peak_memory_stats(dev)


class cuda_memory_profile(contextlib.ContextDecorator):
    """Context manager or decorator measuring the CUDA memory of a block.

    On entry it (optionally) resets the peak counters and reads the memory in use; on exit it
    stores :func:`cuda_memory_stats` in ``stats``, the change of ``allocated_gb`` and
    ``reserved_gb`` over the block in ``delta``, and logs one line on the ``"torchrl"`` logger.
    Without CUDA every value is ``0.0``.

    Args:
        label: a name for the block, put in the log line and kept as ``label``.
        device: the CUDA device (``None``: the current one).
        log: log the line at exit (``INFO`` level).
        reset_peaks: reset the peak counters on entry, so that the ``max_*`` values cover the
            block only.

    Examples:
        >>> from torchrl import cuda_memory_profile
        >>> with cuda_memory_profile("warmup", log=False) as prof:
        ...     pass
        >>> sorted(prof.stats), sorted(prof.delta)
        (['allocated_gb', 'max_allocated_gb', 'max_reserved_gb', 'reserved_gb'], ['allocated_gb', 'reserved_gb'])
    """

    def __init__(
        self, label: str, *, device: Any = None, log: bool = True, reset_peaks: bool = True
    ) -> None:
        self.label = label
        self.device = device
        self.log = log
        self.reset_peaks = reset_peaks
        self.stats: dict[str, float] = {}
        self.delta: dict[str, float] = {}
        self._before: dict[str, float] = {}

    def __enter__(self) -> cuda_memory_profile:
        if self.reset_peaks:
            reset_cuda_peak_stats(self.device)
        self._before = cuda_memory_stats(self.device)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stats = cuda_memory_stats(self.device)
        self.delta = {
            key: self.stats[key] - self._before[key] for key in ("allocated_gb", "reserved_gb")
        }
        if self.log:
            logger.info(
                "[%s] CUDA memory: allocated %+.3f GB (now %.3f, peak %.3f), "
                "reserved %+.3f GB (now %.3f, peak %.3f)",
                self.label,
                self.delta["allocated_gb"],
                self.stats["allocated_gb"],
                self.stats["max_allocated_gb"],
                self.delta["reserved_gb"],
                self.stats["reserved_gb"],
                self.stats["max_reserved_gb"],
            )


def loss_terms(
    losses: TensorDictBase,
    keys: Sequence[NestedKey] | None = None,
    *,
    owner: str = "loss_terms",
    option: str = "keys",
) -> list[NestedKey]:
    """The entries of a loss module's output that add up to the loss to back-propagate.

    One rule for every part of the library that sums a loss output (the trainer's optimizer
    hook, :func:`~torchrl.objectives.make_update_step`, the mixed-precision stepper, the
    computation tasks): the ``keys`` given, or else every top-level entry whose name starts with
    ``"loss"`` (``"loss"``, ``"loss_actor"``, ...; diagnostics such as ``"alpha"`` or
    ``"entropy"`` are left out).

    Args:
        losses: what a loss module returned.
        keys: the entries to use (checked to be there); ``None`` for the default rule.
        owner: the name the errors start with (the calling component).
        option: how the errors name ``keys`` (the caller's option, e.g. ``"loss_keys"``).

    Returns:
        The keys of the terms, in the output's order (or the order of ``keys``).

    Raises:
        KeyError: an entry of ``keys`` is missing, or no entry starts with ``"loss"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> out = TensorDict(loss_actor=torch.tensor(1.0), loss_qvalue=torch.tensor(2.0),
        ...     alpha=torch.tensor(0.1))
        >>> loss_terms(out)
        ['loss_actor', 'loss_qvalue']
        >>> loss_terms(out, ["loss_qvalue"])
        ['loss_qvalue']
    """
    if keys is not None:
        chosen = list(keys)
        missing = [k for k in chosen if k not in losses.keys(include_nested=True)]
        if missing:
            raise KeyError(
                f"{owner}: {option} {missing} not in the loss output (entries: "
                f"{sorted(map(str, losses.keys(True)))})"
            )
        return chosen
    found: list[NestedKey] = [
        k for k in losses.keys() if isinstance(k, str) and k.startswith("loss")
    ]
    if not found:
        raise KeyError(
            f"{owner}: the loss output has no entry starting with 'loss' (entries: "
            f"{sorted(map(str, losses.keys()))}); name the terms with {option}"
        )
    return found


def total_loss(
    losses: TensorDictBase,
    keys: Sequence[NestedKey] | None = None,
    *,
    owner: str = "total_loss",
    option: str = "keys",
    dtype: torch.dtype | None = None,
) -> Tensor:
    """The sum of a loss output's terms (see :func:`loss_terms`), each a one-element tensor.

    Args:
        losses: what a loss module returned.
        keys: the entries to sum; ``None``: every top-level entry starting with ``"loss"``.
        owner: the name the errors start with.
        option: how the errors name ``keys``.
        dtype: cast each term to it before the sum (e.g. ``torch.float32`` for terms that
            autocast computed in half precision); ``None``: no cast.

    Returns:
        A scalar tensor.

    Raises:
        KeyError: see :func:`loss_terms`.
        ValueError: a term holds more than one element (a loss with ``reduction="none"``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> out = TensorDict(loss_actor=torch.tensor(1.0), loss_qvalue=torch.tensor(2.0),
        ...     alpha=torch.tensor(0.1))
        >>> total_loss(out)
        tensor(3.)
    """
    total: Tensor | None = None
    for key in loss_terms(losses, keys, owner=owner, option=option):
        term = losses.get(key)
        if term.numel() != 1:
            raise ValueError(
                f"{owner}: loss entry {key!r} must be a scalar (one element), got shape "
                f"{tuple(term.shape)} (reduce it, e.g. the loss's reduction='mean')"
            )
        term = term.reshape(()) if dtype is None else term.reshape(()).to(dtype)
        total = term if total is None else total + term
    assert total is not None
    return total
