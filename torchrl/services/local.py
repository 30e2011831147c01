"""``LocalService``: the in-process (``"direct"``) service registry."""

from __future__ import annotations

import builtins
import threading
from typing import Any

from torchrl.services.base import Service, ServiceBase

__all__ = ["LocalService"]

# One store per namespace, shared by every LocalService of the process (what get_services
# promises: a name registered anywhere is found everywhere).
_STORES: dict[str, dict[str, tuple[Any, bool]]] = {}
_LOCK = threading.Lock()


def _is_running_service(obj: Any) -> bool:
    return not isinstance(obj, type) and isinstance(obj, Service)


class LocalService(ServiceBase):
    """A service registry in the current process (the ``"direct"`` backend, no dependency).

    Services are plain objects built in the caller's process; every ``LocalService`` with the
    same ``namespace`` in a process sees the same services (threads included). Handy for tests
    and single-process runs of code written against :func:`~torchrl.services.get_services`.

    Args:
        namespace: isolates groups of services; two namespaces never see each other's names.

    Examples:
        >>> services = LocalService(namespace="doc_local")
        >>> counter = services.register("counter", list)
        >>> counter.append(1)
        >>> LocalService(namespace="doc_local")["counter"]  # same process, same namespace
        [1]
        >>> "counter" in LocalService(namespace="other")
        False
        >>> services.reset()
    """

    def __init__(self, namespace: str = "torchrl_services") -> None:
        if not isinstance(namespace, str) or not namespace:
            raise ValueError(f"LocalService: namespace must be a non-empty str, got {namespace!r}")
        self.namespace = namespace

    @property
    def _store(self) -> dict[str, tuple[Any, bool]]:
        return _STORES.setdefault(self.namespace, {})

    def register(self, name: str, service_factory: Any, *args: Any, **kwargs: Any) -> Any:
        """Builds ``service_factory(*args, **kwargs)`` (or stores a running Service's client)
        under ``name`` and returns it."""
        name = self._check_name(name)
        with _LOCK:
            if name in self._store:
                raise ValueError(
                    f"LocalService: a service named {name!r} is already registered in namespace "
                    f"{self.namespace!r}"
                )
            if _is_running_service(service_factory):
                if args or kwargs:
                    raise TypeError(
                        f"LocalService.register({name!r}): a running Service takes no factory "
                        "arguments"
                    )
                handle, owned = service_factory.client(), False
            elif callable(service_factory):
                handle, owned = service_factory(*args, **kwargs), True
            else:
                raise TypeError(
                    f"LocalService.register({name!r}): service_factory must be callable or a "
                    f"running Service, got {type(service_factory).__name__}"
                )
            self._store[name] = (handle, owned)
        return handle

    def get(self, name: str) -> Any:
        """The object registered as ``name``."""
        try:
            return self._store[name][0]
        except KeyError:
            raise KeyError(
                f"LocalService: no service named {name!r} in namespace {self.namespace!r} "
                f"(registered: {self.list()})"
            ) from None

    def get_client(self, name: str) -> Any:
        """The client of the Service registered as ``name`` (a created Service's own client)."""
        handle = self.get(name)
        return handle.client() if _is_running_service(handle) else handle

    def list(self) -> builtins.list[str]:
        """The registered names, sorted."""
        return sorted(self._store)

    def reset(self) -> None:
        """Forgets every service; those this registry built and that have ``shutdown`` are
        shut down."""
        with _LOCK:
            entries = list(self._store.values())
            self._store.clear()
        for handle, owned in entries:
            if owned and callable(getattr(handle, "shutdown", None)):
                handle.shutdown()

    def __repr__(self) -> str:
        return f"LocalService(namespace={self.namespace!r}, services={self.list()})"
