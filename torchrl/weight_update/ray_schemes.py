"""Weights sent to Ray actors through the Ray object store."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from torchrl._utils import import_optional
from torchrl.weight_update.weight_sync_schemes import TransportBackend, WeightSyncScheme

__all__ = ["RayModuleTransformScheme", "RayTransport", "RayWeightSyncScheme"]

_has_ray = importlib.util.find_spec("ray") is not None


def _ray() -> Any:
    return import_optional("ray", "ray")


class RayTransport:
    """Calls ``actor.<method>.remote(weights, version)`` on one Ray actor.

    The weights go into the object store once per send (a ``ray.put`` shared by every actor
    of the scheme); the actor's method receives them resolved and applies them (typically
    with ``scheme.receive(weights=..., version=...)``). ``send_weights`` returns at once;
    :meth:`wait` blocks on the pending calls, turning a dead actor into a ``RuntimeError``
    and a silent one into a ``TimeoutError``.

    Args:
        actor: the Ray actor handle.
        method: the actor's method that takes ``(weights, version)``.
        timeout: the longest wait in :meth:`wait`, in seconds.

    Examples:
        With ``actor`` a Ray actor whose ``update_weights(weights, version)`` applies them
        (see :class:`RayWeightSyncScheme`):

        >>> import torch
        >>> transport = RayTransport(actor, method="update_weights")  # doctest: +SKIP
        >>> transport.send_weights({"bias": torch.ones(1)}, version=1)  # doctest: +SKIP
        >>> transport.wait()  # doctest: +SKIP
    """

    def __init__(self, actor: Any, method: str = "update_weights", timeout: float = 60.0) -> None:
        self.actor = actor
        self.method = method
        self.timeout = timeout
        self.pending: list[Any] = []

    def send_weights(self, weights: Any, version: int) -> None:
        """Starts the actor call (``weights``: a mapping or an object ref of one)."""
        ray = _ray()
        ref = weights if isinstance(weights, ray.ObjectRef) else ray.put(dict(weights))
        self.pending.append(getattr(self.actor, self.method).remote(ref, int(version)))

    def wait(self) -> None:
        """Waits until the actor has applied every weight sent so far."""
        ray = _ray()
        refs, self.pending = self.pending, []
        deadline = time.monotonic() + self.timeout
        for ref in refs:
            ready, _ = ray.wait([ref], timeout=max(deadline - time.monotonic(), 0.0))
            if not ready:
                raise TimeoutError(
                    f"RayTransport: the actor did not apply the weights within {self.timeout} s"
                )
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as err:
                raise RuntimeError(f"RayTransport: the actor died: {err}") from err

    def receive_weights(
        self, timeout: float | None = None
    ) -> tuple[Mapping[str, torch.Tensor], int] | None:
        """Nothing to pull: Ray pushes the weights into the actor's method."""
        return None

    def check_connection(self) -> bool:
        """Whether Ray is running (actors are checked by :meth:`wait`)."""
        return bool(_ray().is_initialized())


class RayWeightSyncScheme(WeightSyncScheme):
    """Weight synchronisation with Ray actors: one ``ray.put`` per send, one call per actor.

    The sender is given the actors (``actors=[...]``) and the name of the method that
    applies weights on each; on the actor, a receiver-side scheme (this object, pickled to
    it) applies them with ``receive(weights=..., version=...)``. Ray passes objects between
    processes of one cluster that trust each other.

    Args:
        strategy: ``"tensordict"`` or ``"state_dict"``.
        sync: :meth:`send` waits until every actor has applied the weights.
        timeout: the longest such wait, in seconds.

    Examples:
        What each actor does with the weights it is sent (runs without Ray):

        >>> import torch
        >>> policy = torch.nn.Linear(2, 1)
        >>> worker_side = RayWeightSyncScheme()
        >>> worker_side.init_on_receiver(policy)
        >>> weights = {"bias": torch.ones(1), "weight": torch.ones(1, 2)}
        >>> worker_side.receive(weights=weights, version=1)
        1

        The trainer's side, with actors that hold such a receiver:

        >>> import ray  # doctest: +SKIP
        >>> @ray.remote  # doctest: +SKIP
        ... class Worker:
        ...     def __init__(self, scheme):
        ...         self.policy = torch.nn.Linear(2, 1)
        ...         self.scheme = scheme
        ...         scheme.init_on_receiver(self.policy)
        ...     def update_weights(self, weights, version):
        ...         return self.scheme.receive(weights=weights, version=version)
        >>> scheme = RayWeightSyncScheme()
        >>> actors = [Worker.remote(scheme) for _ in range(2)]  # doctest: +SKIP
        >>> scheme.init_on_sender(torch.nn.Linear(2, 1), actors=actors)  # doctest: +SKIP
        >>> scheme.send()  # doctest: +SKIP
        1
    """

    def __init__(self, strategy: str = "tensordict", sync: bool = True, timeout: float = 60.0):
        super().__init__(strategy)
        self.sync = sync
        self.timeout = timeout

    def create_transport(self, **kwargs: Any) -> TransportBackend:
        """A :class:`RayTransport` (``actor=``, ``method=``)."""
        kwargs.setdefault("timeout", self.timeout)
        return RayTransport(**kwargs)

    def _init_sender(
        self, actors: Sequence[Any] | None = None, method: str = "update_weights"
    ) -> None:
        if actors is not None:
            self._transports = {
                i: self.create_transport(actor=a, method=method) for i, a in enumerate(actors)
            }
        elif not self._transports:
            raise ValueError(f"{type(self).__name__}.init_on_sender: give actors=[...]")

    def _push(self, weights: dict[str, torch.Tensor], version: int, worker_ids: Any) -> None:
        ids = self._worker_ids(worker_ids)
        if not ids:
            return
        with torch.no_grad():
            cpu = {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}
        ref = _ray().put(cpu)  # once, for every actor
        for i in ids:
            self._transports[i].send_weights(ref, version)
        if self.sync:
            self.wait(ids)

    def send_async(self, weights: Any | None = None, worker_ids: Any = None) -> int:
        """Like :meth:`send` without waiting; :meth:`wait` (or the refs in each transport's
        ``pending``) completes it."""
        sync, self.sync = self.sync, False
        try:
            return self.send(weights, worker_ids)
        finally:
            self.sync = sync

    def wait(self, worker_ids: Any = None) -> None:
        """Waits until the given actors (default all) applied every weight sent to them."""
        for i in self._worker_ids(worker_ids):
            transport = self._transports[i]
            try:
                if isinstance(transport, RayTransport):
                    transport.wait()
            except (RuntimeError, TimeoutError) as err:
                raise type(err)(f"{type(self).__name__}: worker {i}: {err}") from err


class RayModuleTransformScheme(RayWeightSyncScheme):
    """Keeps a module that runs inside one Ray actor (e.g. a remote module transform) in step.

    The same as :class:`RayWeightSyncScheme` with a single receiver: give the actor as
    ``actor=`` to :meth:`init_on_sender`; its ``method`` applies ``(weights, version)``.

    Args:
        strategy: ``"tensordict"`` or ``"state_dict"``.
        sync: :meth:`send` waits until the actor has applied the weights.
        timeout: the longest such wait, in seconds.

    Examples:
        >>> import torch
        >>> module = torch.nn.Linear(2, 1)
        >>> RayModuleTransformScheme().init_on_sender(module, actors=[])
        Traceback (most recent call last):
        ...
        TypeError: RayModuleTransformScheme syncs one actor: give actor=, not actors=

        With ``actor`` the Ray actor that runs the module (its ``update_weights`` calls
        ``receive(weights=..., version=...)`` on its copy of the scheme, as in
        :class:`RayWeightSyncScheme`):

        >>> scheme = RayModuleTransformScheme()
        >>> scheme.init_on_sender(module, actor=actor)  # doctest: +SKIP
        >>> scheme.send()  # doctest: +SKIP
        1
    """

    def _init_sender(
        self,
        actors: Sequence[Any] | None = None,
        method: str = "update_weights",
        actor: Any = None,
    ) -> None:
        if actors is not None:
            raise TypeError("RayModuleTransformScheme syncs one actor: give actor=, not actors=")
        if actor is None and not self._transports:
            raise ValueError("RayModuleTransformScheme.init_on_sender: give actor=...")
        if actor is not None:
            self._transports = {0: self.create_transport(actor=actor, method=method)}
