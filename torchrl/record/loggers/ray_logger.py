"""A logger service running as a Ray actor (needs ``ray``: ``pip install "torchrl[ray]"``)."""

from __future__ import annotations

from typing import Any

from torchrl._utils import has_module, import_optional, start_local_ray
from torchrl.record.loggers.common import Logger
from torchrl.record.loggers.service import LOG_METHODS, LoggerClient, LoggerService

__all__ = ["RayLogger", "RayLoggerClient"]

_has_ray = has_module("ray")


class LoggerActor:
    """The body of the Ray actor: holds the concrete logger and runs the calls it receives.

    Args:
        logger_cls: the :class:`~torchrl.record.loggers.Logger` subclass to build.
        args: its positional arguments.
        kwargs: its keyword arguments.
    """

    def __init__(
        self, logger_cls: type[Logger], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self.logger = logger_cls(*args, **kwargs)

    def describe(self) -> tuple[str, str | None]:
        """The logger's ``exp_name`` and ``log_dir``."""
        return self.logger.exp_name, self.logger.log_dir

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Runs one logging call.

        Args:
            method: one of the ``log_*`` methods.
            args: its positional arguments.
            kwargs: its keyword arguments.
        """
        if method not in LOG_METHODS:
            raise ValueError(f"a logger service only runs {LOG_METHODS}, not {method!r}")
        getattr(self.logger, method)(*args, **kwargs)

    def close(self) -> None:
        """Closes the logger."""
        self.logger.close()


class RayLoggerClient(LoggerClient):
    """A worker's handle on a :class:`RayLogger`: picklable, sends ``log_*`` calls to the actor.

    Each call waits for the actor to run it, so a failing call raises in the worker that made
    it (Ray's ``RayTaskError``, with the actor's traceback).

    Args:
        actor: the logger actor's handle.
    """

    def __init__(self, actor: Any) -> None:
        self._actor = actor

    def submit(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Runs ``method(*args, **kwargs)`` on the actor and waits for it."""
        if method not in LOG_METHODS:
            raise ValueError(f"a logger client can only call {LOG_METHODS}, not {method!r}")
        ray = import_optional("ray", extra="ray")
        ray.get(self._actor.call.remote(method, args, kwargs))


class RayLogger(LoggerService):
    """Runs a logger as a Ray actor, owned by the driver; workers log through :meth:`client`.

    Ray is started here (``ray.init(**ray_init_config)``) when it is not running yet. The
    owner's own ``log_*`` calls also go to the actor and wait for it, so errors surface where
    the call was made. :meth:`shutdown` closes the logger and ends the actor (Ray keeps
    running).

    Args:
        logger_cls: the :class:`~torchrl.record.loggers.Logger` subclass to run.
        *args: positional arguments of ``logger_cls``.
        ray_actor_options: options of the actor (``ray.remote(**options)``, e.g.
            ``{"num_cpus": 1}``).
        ray_init_config: keyword arguments of ``ray.init`` when Ray is not running.
        **kwargs: keyword arguments of ``logger_cls``.

    Raises:
        ImportError: ray is not installed (names the ``ray`` extra).
        TypeError: ``logger_cls`` is not a :class:`Logger` subclass.

    Examples:
        >>> from torchrl.record.loggers import CSVLogger
        >>> logger = RayLogger(CSVLogger, exp_name="run", log_dir="/tmp/logs")  # doctest: +SKIP
        >>> client = logger.client()  # doctest: +SKIP
        >>> client.log_scalar("loss", 1.0, step=0)  # doctest: +SKIP
        >>> logger.shutdown()  # doctest: +SKIP
    """

    _client: RayLoggerClient

    def __init__(
        self,
        logger_cls: type[Logger],
        *args: Any,
        ray_actor_options: dict[str, Any] | None = None,
        ray_init_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not (isinstance(logger_cls, type) and issubclass(logger_cls, Logger)):
            raise TypeError(f"RayLogger: logger_cls must be a Logger subclass, got {logger_cls!r}")
        if issubclass(logger_cls, RayLogger):
            raise TypeError("RayLogger: cannot run a RayLogger inside a RayLogger")
        ray = import_optional("ray", extra="ray")
        if not ray.is_initialized():
            start_local_ray(ray, dict(ray_init_config or {}), "RayLogger")
        self.logger_cls = logger_cls
        options = dict(ray_actor_options or {})
        remote_cls = ray.remote(**options)(LoggerActor) if options else ray.remote(LoggerActor)
        self._actor = remote_cls.remote(logger_cls, args, kwargs)
        self._closed = False
        try:
            exp_name, log_dir = ray.get(self._actor.describe.remote())
        except Exception as err:
            ray.kill(self._actor)
            raise RuntimeError(
                f"RayLogger: building {logger_cls.__name__} in the Ray actor failed: {err}"
            ) from err
        self._client = RayLoggerClient(self._actor)
        super().__init__(exp_name, log_dir)

    def _create_experiment(self) -> Any:
        return self._actor

    def client(self) -> RayLoggerClient:
        """A picklable handle for workers (Ray tasks, actors, processes): ``log_*`` calls only.

        Returns:
            The client.
        """
        self._check_open()
        return self._client

    def flush(self) -> None:
        """A no-op kept for symmetry with :class:`ProcessLogger`: every call already waited."""
        self._check_open()

    def shutdown(self) -> None:
        """Closes the logger and ends the actor; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        ray = import_optional("ray", extra="ray")
        try:
            ray.get(self._actor.close.remote())
        finally:
            ray.kill(self._actor)
