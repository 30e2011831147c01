"""Service registries: register a service (a tokenizer, a replay buffer, a model store) once under
a name, and look it up from any worker.

Importing this package is cheap: it imports neither torch nor Ray; Ray loads when a
:class:`RayService` is first used.
"""

from __future__ import annotations

import typing
from typing import Any

from torchrl.services.base import Service, ServiceBackend, ServiceBase
from torchrl.services.local import LocalService
from torchrl.services.ray_service import RayService

__all__ = [
    "LocalService",
    "RayService",
    "Service",
    "ServiceBackend",
    "ServiceBase",
    "get_services",
]

_BACKENDS: dict[str, type[ServiceBase]] = {
    "ray": RayService,
    "direct": LocalService,
    "local": LocalService,
}


def get_services(backend: str = "ray", **init_kwargs: Any) -> ServiceBase:
    """A service registry of the given backend.

    Services registered through a registry are visible to every registry of the same backend
    and namespace: across the Ray cluster for ``"ray"``, across the current process for
    ``"direct"`` (alias ``"local"``).

    Args:
        backend: ``"ray"`` (:class:`RayService`) or ``"direct"``/``"local"``
            (:class:`LocalService`, in-process, no dependency).
        **init_kwargs: the registry's arguments: ``namespace`` for both, ``ray_init_config``
            (``ray.init`` arguments, used when no Ray cluster runs yet) for Ray.

    Returns:
        The registry.

    Raises:
        ValueError: an unknown backend.
        ImportError: at first use of a Ray registry, when Ray is not installed.

    Examples:
        >>> services = get_services("direct", namespace="doc_get_services")
        >>> _ = services.register("config", dict, lr=3e-4)
        >>> get_services("direct", namespace="doc_get_services")["config"]["lr"]
        0.0003
        >>> services.reset()
    """
    try:
        cls = _BACKENDS[backend]
    except KeyError:
        known = typing.get_args(ServiceBackend)
        what = "is not implemented here" if backend in known else "is unknown"
        raise ValueError(
            f"get_services: backend {backend!r} {what}; expected one of {sorted(_BACKENDS)}"
        ) from None
    return cls(**init_kwargs)
