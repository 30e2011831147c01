"""Shared ``torch.compile`` helpers: compiling after eager warm-up calls, normalising the
``compile_*=`` options that collectors and losses take, and compiling with an eager fallback."""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["compile_with_warmup", "compile_in_place", "compile_options", "maybe_compile"]


def compile_with_warmup(fn: Callable, *, warmup: int = 1, **compile_kwargs: Any) -> Callable:
    """Returns ``fn`` run eagerly for its first ``warmup`` calls, then ``torch.compile``\\ d.

    Eager warm-up calls let lazy modules initialise and caches fill before dynamo traces, so
    the graph it captures is the steady-state one. Compilation happens at the first call past
    the warm-up (never at construction). An ``nn.Module`` keeps its parameters: in-place weight
    updates are seen by both the eager and the compiled calls.

    Args:
        fn: the function or module to compile.
        warmup: how many calls run eagerly before compiling (``0`` compiles at once).
        **compile_kwargs: keyword arguments of :func:`torch.compile` (``backend``, ``mode``,
            ``fullgraph``, ``dynamic``, ...).

    Returns:
        A callable with ``fn``'s signature.

    Examples:
        >>> import torch
        >>> double = compile_with_warmup(lambda x: 2 * x, warmup=1, backend="eager")
        >>> double(torch.ones(2))  # eager
        tensor([2., 2.])
        >>> double(torch.ones(2))  # compiled
        tensor([2., 2.])
    """
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"compile_with_warmup: warmup must be an int >= 0, got {warmup!r}")
    return _Compiled(fn, {**compile_kwargs, "warmup": warmup}, "compile_with_warmup", False)


def compile_options(value: bool | Mapping[str, Any] | None, owner: str, name: str) -> dict | None:
    """Normalises a ``compile_policy=``-style option to ``torch.compile`` keyword arguments.

    Args:
        value: ``None`` or ``False`` (do not compile), ``True`` (compile with defaults) or a
            mapping of keyword arguments (copied).
        owner: the class or function taking the option, named in errors.
        name: the option's keyword, named in errors.

    Returns:
        ``None`` when nothing is to be compiled, else a new dict of keyword arguments.

    Examples:
        >>> compile_options(None, "SyncDataCollector", "compile_policy") is None
        True
        >>> compile_options(True, "SyncDataCollector", "compile_policy")
        {}
        >>> compile_options({"backend": "eager"}, "SyncDataCollector", "compile_policy")
        {'backend': 'eager'}
        >>> compile_options("yes", "SyncDataCollector", "compile_policy")
        Traceback (most recent call last):
        ...
        TypeError: SyncDataCollector: compile_policy must be a bool, a dict of keyword arguments or None, got str ('yes')
    """
    if value is None or value is False:
        return None
    if value is True:
        return {}
    if isinstance(value, Mapping):
        bad = [key for key in value if not isinstance(key, str)]
        if bad:
            raise TypeError(f"{owner}: {name} keys must be strings, got {bad!r}")
        return dict(value)
    raise TypeError(
        f"{owner}: {name} must be a bool, a dict of keyword arguments or None, "
        f"got {type(value).__name__} ({value!r})"
    )


def _compile_failures() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "compilation failed", as opposed to an error of the user's code."""
    from torch._dynamo import exc as dynamo_exc
    from torch._inductor import exc as inductor_exc

    failures: list[type[BaseException]] = [
        dynamo_exc.Unsupported,
        dynamo_exc.BackendCompilerFailed,  # inductor's InductorError included
        dynamo_exc.InternalTorchDynamoError,
        inductor_exc.CppCompileError,
        inductor_exc.InvalidCxxCompiler,
    ]
    # Names that moved between torch releases: taken where they exist.
    for module, attr in (
        (inductor_exc, "TritonMissing"),
        (inductor_exc, "GPUTooOldForTriton"),
        (torch.fx.experimental.symbolic_shapes, "GuardOnDataDependentSymNode"),
    ):
        cls = getattr(module, attr, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            failures.append(cls)
    return tuple(failures)


class _Compiled:
    """``fn`` run eagerly for ``warmup`` calls, then compiled by ``torch.compile`` (at the first call past
    the warm-up, never at construction). With ``fallback``, a compilation failure makes it run
    ``fn`` eagerly for good, with one warning. Pickling drops the compiled function: a copy in
    another process compiles its own."""

    def __init__(self, fn: Callable, options: dict[str, Any], owner: str, fallback: bool) -> None:
        options = dict(options)
        warmup = options.pop("warmup", 0)
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ValueError(
                f"{owner}: compile option 'warmup' must be an int >= 0, got {warmup!r}"
            )
        self.fn = fn
        self.owner = owner
        self.fallback = fallback
        self.compile_kwargs = options
        self.warmup = warmup
        self.calls = 0
        self.failed: BaseException | None = None
        self._compiled: Callable | None = None
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.failed is not None:
            return self.fn(*args, **kwargs)
        if self.calls < self.warmup:
            self.calls += 1
            return self.fn(*args, **kwargs)
        if self._compiled is None:
            with self._lock:
                if self._compiled is None:
                    self._compiled = torch.compile(self.fn, **self.compile_kwargs)
        try:
            return self._compiled(*args, **kwargs)
        except _compile_failures() as err:
            if not self.fallback:
                raise
            # Compilation happens before the graph runs, so the eager call below does the
            # work once (a graph broken into pieces may have run the pieces before the
            # failing one: documented in maybe_compile).
            self.failed = err
            warnings.warn(
                f"{self.owner}: torch.compile failed ({type(err).__name__}: "
                f"{_first_line(err)}); running eagerly from now on.",
                RuntimeWarning,
                stacklevel=2,
            )
            return self.fn(*args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_compiled"] = None
        state["failed"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(fn={self.fn!r}, owner={self.owner!r}, "
            f"compile_kwargs={self.compile_kwargs!r}, warmup={self.warmup})"
        )


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "no message"


def maybe_compile(fn: Callable, options: Mapping[str, Any] | None, *, owner: str) -> Callable:
    """Compiles ``fn`` with ``options``, running it eagerly instead if compilation fails.

    When ``torch.compile`` cannot compile ``fn`` (dynamo cannot trace it, the backend fails,
    no C++ compiler is installed, ...), the returned callable warns once (a ``RuntimeWarning``
    naming ``owner`` and the original error) and runs ``fn`` eagerly from then on. Errors
    raised by ``fn``'s own code propagate unchanged. If ``fn`` is traced in several graphs
    (graph breaks) and a later one fails to compile, the earlier ones have already run
    once before the eager call: keep side effects out of compiled functions.

    Args:
        fn: the function or module to compile.
        options: ``None`` (return ``fn`` itself) or :func:`torch.compile` keyword arguments,
            e.g. from :func:`compile_options`; the extra key ``"warmup"`` (an int, default 0)
            is the number of eager calls before compiling.
        owner: the component compiling ``fn``, named in the warning.

    Returns:
        ``fn`` itself, or a callable with ``fn``'s signature.

    Examples:
        >>> import torch
        >>> f = maybe_compile(torch.sin, None, owner="demo")
        >>> f is torch.sin
        True
        >>> g = maybe_compile(lambda x: x + 1, {"backend": "eager", "warmup": 1}, owner="demo")
        >>> g(torch.zeros(2))
        tensor([1., 1.])
    """
    if options is None:
        return fn
    if not isinstance(options, Mapping):
        raise TypeError(
            f"{owner}: compile options must be a dict or None, got {type(options).__name__}"
        )
    return _Compiled(fn, dict(options), owner, True)


def compile_in_place(module: torch.nn.Module, args: tuple, kwargs: Mapping[str, Any]) -> None:
    """What ``module.compile(*args, **kwargs)`` does for our losses and value estimators.

    Like :meth:`torch.nn.Module.compile`, ``module(...)`` then runs the compiled call (hooks
    included), here through :func:`maybe_compile` (eager fallback when compiling fails).

    Args:
        module: the module whose call is compiled.
        args: positional arguments given to ``compile`` (none are accepted).
        kwargs: :func:`torch.compile` keyword arguments, plus ``"warmup"``.

    Examples:
        >>> import torch
        >>> lin = torch.nn.Linear(2, 1)
        >>> compile_in_place(lin, (), {"backend": "eager"})
        >>> lin(torch.zeros(3, 2)).shape
        torch.Size([3, 1])
    """
    owner = f"{type(module).__name__}.compile"
    if args:
        raise TypeError(
            f"{owner} takes torch.compile's keyword arguments only, got {len(args)} "
            f"positional argument(s)"
        )
    # nn.Module.__call__ runs _compiled_call_impl when set (nn.Module.compile sets it too).
    module._compiled_call_impl = maybe_compile(module._call_impl, kwargs, owner=owner)
