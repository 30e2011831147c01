"""The service contracts: ``Service`` (an owner with a lifecycle), ``ServiceBase`` (a registry of
named services) and the ``ServiceBackend`` vocabulary.

Nothing here imports torch or an optional backend: a registry backend imports its library when
it is first used.
"""

from __future__ import annotations

import abc
import builtins
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Service", "ServiceBackend", "ServiceBase"]

#: Where a service runs: in the caller (``"direct"``), in a thread, in a process, in a Ray actor,
#: behind torch RPC, in a submitit job, on Monarch, or over ``torch.distributed``.
ServiceBackend = Literal[
    "direct", "thread", "process", "ray", "rpc", "submitit", "monarch", "distributed"
]

ClientT = TypeVar("ClientT", covariant=True)


@runtime_checkable
class Service(Protocol[ClientT]):
    """The owner side of a long-lived service: it starts, stops, and hands out clients.

    The owner holds the lifecycle and the heavy resources (a process, an actor, a server).
    :meth:`client` returns a cheap, picklable handle that workers use for the service's
    operations; a client has no ``start``/``shutdown``, so a worker cannot stop what it does not
    own. A service run in the caller's own process may return itself as its client. Any class
    with these four members is a ``Service`` (``isinstance`` checks them).

    Examples:
        >>> class Counter:
        ...     def __init__(self):
        ...         self.alive, self.count = False, 0
        ...     def start(self):
        ...         self.alive = True
        ...         return self
        ...     def shutdown(self, timeout=None):
        ...         self.alive = False
        ...     def client(self):
        ...         return self
        ...     @property
        ...     def is_alive(self):
        ...         return self.alive
        >>> counter = Counter().start()
        >>> isinstance(counter, Service), counter.client() is counter, counter.is_alive
        (True, True, True)
        >>> counter.shutdown()
    """

    def start(self) -> Self:
        """Starts the owned service and returns ``self``."""
        ...

    def shutdown(self, timeout: float | None = None) -> None:
        """Stops the owned service and releases its resources."""
        ...

    def client(self) -> ClientT:
        """A cheap, picklable client restricted to the service's operations."""
        ...

    @property
    def is_alive(self) -> bool:
        """Whether the owned service is running."""
        ...


class ServiceBase(abc.ABC):
    """A registry of named services that every worker of an application can look up.

    Use it like a dict: ``services.register(name, factory, ...)`` creates a service and makes
    it visible under ``name``; ``services[name]`` (or :meth:`get`) returns its handle, ``name in
    services`` checks for it, :meth:`list` names them all and :meth:`reset` removes them all.
    Registering a running :class:`Service` stores its client; the registry then does not own
    it, and :meth:`reset` only forgets it. Typical services: a tokenizer shared by inference
    workers, a replay buffer, a model store, a metrics aggregator.

    Examples:
        >>> from torchrl.services.local import LocalService
        >>> services = LocalService(namespace="doc_service_base")
        >>> isinstance(services, ServiceBase)
        True
        >>> _ = services.register("totals", dict, a=1)
        >>> "totals" in services, services["totals"], services.list()
        (True, {'a': 1}, ['totals'])
        >>> services.reset()
    """

    @abc.abstractmethod
    def register(self, name: str, service_factory: Any, *args: Any, **kwargs: Any) -> Any:
        """Creates the service ``service_factory(*args, **kwargs)`` under ``name``.

        Args:
            name: the unique name other workers look the service up by.
            service_factory: a class or callable building the service, or a running
                :class:`Service` whose client is stored (then no arguments are allowed).
            *args: positional arguments of the factory.
            **kwargs: keyword arguments of the factory (backends also take their placement
                options here, e.g. Ray's ``num_cpus``).

        Returns:
            The service's handle (what :meth:`get` returns).

        Raises:
            ValueError: ``name`` is taken or empty.
        """

    @abc.abstractmethod
    def get(self, name: str) -> Any:
        """The handle of the service named ``name``.

        Raises:
            KeyError: no service has that name.
        """

    @abc.abstractmethod
    def list(self) -> builtins.list[str]:
        """The registered names, sorted."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Removes every service; the ones the registry created are stopped."""

    def get_client(self, name: str) -> Any:
        """The restricted client of the registered :class:`Service` named ``name``.

        Raises:
            NotImplementedError: this backend does not store service clients.
            KeyError: no service has that name.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not store Service clients; use get({name!r})"
        )

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.list()

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    @staticmethod
    def _check_name(name: object) -> str:
        if not isinstance(name, str) or not name:
            raise ValueError(f"service name must be a non-empty str, got {name!r}")
        return name
