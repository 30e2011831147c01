"""``RayService``: a service registry over Ray named actors."""

from __future__ import annotations

import builtins
import importlib.util
from typing import Any

from torchrl._utils import start_local_ray
from torchrl.services.base import Service, ServiceBase

__all__ = ["RayService"]

_has_ray = importlib.util.find_spec("ray") is not None

#: ``register`` keyword arguments that are Ray actor options, not factory arguments.
RAY_ACTOR_OPTIONS = frozenset(
    {
        "num_cpus",
        "num_gpus",
        "memory",
        "object_store_memory",
        "resources",
        "accelerator_type",
        "max_concurrency",
        "max_restarts",
        "max_task_retries",
        "max_pending_calls",
        "concurrency_groups",
        "runtime_env",
        "scheduling_strategy",
        "placement_group",
        "placement_group_bundle_index",
        "placement_group_capture_child_tasks",
        "label_selector",
        "enable_task_events",
    }
)
_REGISTRY_NAME = "__torchrl_service_registry__"


class _Registry:
    """The Ray actor holding a namespace's service names (and the clients of external
    Services): it makes ``list`` show our services only, never other named actors."""

    def __init__(self) -> None:
        self._entries: dict[str, Any] = {}
        self._pending: set[str] = set()

    def reserve(self, name: str) -> bool:
        if name in self._entries or name in self._pending:
            return False
        self._pending.add(name)
        return True

    def commit(self, name: str, client: Any) -> None:
        self._pending.discard(name)
        self._entries[name] = client

    def release(self, name: str) -> None:
        self._pending.discard(name)

    def lookup(self, name: str) -> tuple[bool, Any]:
        return (name in self._entries, self._entries.get(name))

    def names(self) -> list[str]:
        return sorted(self._entries)

    def clear(self) -> dict[str, Any]:
        entries, self._entries = self._entries, {}
        return entries


def _import_ray() -> Any:
    if not _has_ray:
        raise ImportError('RayService needs Ray: pip install "torchrl[ray]" (or: pip install ray)')
    import ray

    return ray


class RayService(ServiceBase):
    """A service registry whose services are Ray named actors, visible to every worker of the
    Ray cluster.

    ``register(name, cls, *args, **kwargs)`` starts ``cls(*args, **kwargs)`` as a detached
    named actor (it outlives the worker that registered it); any worker, in any process of the
    cluster, then gets its handle with ``services[name]``. Keyword arguments that are Ray actor
    options (``num_cpus``, ``num_gpus``, ``memory``, ``max_concurrency``, ``resources``,
    ``runtime_env``, ... see ``RAY_ACTOR_OPTIONS``) go to ``.options()``, the others to the
    constructor. A small registry actor per namespace keeps the names, so :meth:`list` shows
    this registry's services only. Registering a running :class:`~torchrl.services.Service`
    stores its (picklable) client instead. Ray is imported, and ``ray.init`` called when no
    cluster runs yet, on first use.

    Args:
        ray_init_config: keyword arguments of ``ray.init`` when this registry starts Ray
            (e.g. ``{"address": "auto"}`` or ``{"num_cpus": 2}``).
        namespace: the Ray namespace of the services; namespaces do not see each other.

    Examples:
        >>> services = RayService(namespace="doc_services")  # nothing started yet
        >>> services.namespace
        'doc_services'
        >>> # services.register("tokenizer", Tokenizer, num_cpus=1)
        >>> # services["tokenizer"].encode.remote("hello")
    """

    def __init__(
        self, ray_init_config: dict[str, Any] | None = None, namespace: str = "torchrl_services"
    ) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise ValueError(f"RayService: namespace must be a non-empty str, got {namespace!r}")
        if ray_init_config is not None and not isinstance(ray_init_config, dict):
            raise TypeError(
                f"RayService: ray_init_config must be a dict or None, got "
                f"{type(ray_init_config).__name__}"
            )
        self.ray_init_config = dict(ray_init_config or {})
        self.namespace = namespace
        self._registry_handle: Any = None

    # -- ray plumbing -----------------------------------------------------------------------------
    def _ray(self) -> Any:
        ray = _import_ray()
        if not ray.is_initialized():
            config = {"namespace": self.namespace, **self.ray_init_config}
            start_local_ray(ray, config, type(self).__name__)
        return ray

    def _registry(self) -> Any:
        ray = self._ray()
        if self._registry_handle is None:
            self._registry_handle = (
                ray.remote(_Registry)
                .options(
                    name=_REGISTRY_NAME,
                    namespace=self.namespace,
                    lifetime="detached",
                    get_if_exists=True,
                    num_cpus=0,
                )
                .remote()
            )
        return self._registry_handle

    # -- registry API -----------------------------------------------------------------------------
    def register(self, name: str, service_factory: Any, *args: Any, **kwargs: Any) -> Any:
        """Starts ``service_factory(*args, **kwargs)`` as the named actor ``name`` (or stores a
        running Service's client) and returns its handle."""
        name = self._check_name(name)
        ray = self._ray()
        registry = self._registry()
        external = not isinstance(service_factory, type) and isinstance(service_factory, Service)
        if external and (args or kwargs):
            raise TypeError(
                f"RayService.register({name!r}): a running Service takes no factory arguments"
            )
        if not external and not callable(service_factory):
            raise TypeError(
                f"RayService.register({name!r}): service_factory must be a class or a running "
                f"Service, got {type(service_factory).__name__}"
            )
        if not ray.get(registry.reserve.remote(name)):
            raise ValueError(
                f"RayService: a service named {name!r} is already registered in namespace "
                f"{self.namespace!r}"
            )
        try:
            if external:
                handle = service_factory.client()
                ray.get(registry.commit.remote(name, handle))
                return handle
            options = {k: kwargs.pop(k) for k in list(kwargs) if k in RAY_ACTOR_OPTIONS}
            actor_class = (
                service_factory
                if callable(getattr(service_factory, "options", None))
                and callable(getattr(service_factory, "remote", None))
                else ray.remote(service_factory)
            )
            handle = actor_class.options(
                name=name, namespace=self.namespace, lifetime="detached", **options
            ).remote(*args, **kwargs)
            ray.get(registry.commit.remote(name, None))
            return handle
        except BaseException:
            ray.get(registry.release.remote(name))
            raise

    def get(self, name: str) -> Any:
        """The actor handle (or stored client) of the service ``name``."""
        ray = self._ray()
        found, client = ray.get(self._registry().lookup.remote(name))
        if not found:
            raise KeyError(
                f"RayService: no service named {name!r} in namespace {self.namespace!r} "
                f"(registered: {self.list()})"
            )
        if client is not None:
            return client
        return ray.get_actor(name, namespace=self.namespace)

    def get_client(self, name: str) -> Any:
        """The client stored for a registered Service; for an actor, its handle."""
        return self.get(name)

    def list(self) -> builtins.list[str]:
        """The names registered in this namespace, sorted."""
        ray = self._ray()
        return list(ray.get(self._registry().names.remote()))

    def reset(self) -> None:
        """Kills the actors this registry started and forgets every name (external Services
        keep running: their owners stop them)."""
        ray = self._ray()
        entries = ray.get(self._registry().clear.remote())
        for name, client in entries.items():
            if client is not None:
                continue
            try:
                ray.kill(ray.get_actor(name, namespace=self.namespace))
            except ValueError:  # already gone
                pass

    def __repr__(self) -> str:
        return f"RayService(namespace={self.namespace!r})"
