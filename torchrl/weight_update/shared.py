"""Weights in shared memory: receivers read the very tensors the sender writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from torchrl.weight_update.weight_sync_schemes import TransportBackend, WeightSyncScheme
from torchrl.weight_update.weights import bind_weights, copy_weights, named_weights, share_weights

__all__ = ["SharedMemTransport", "SharedMemWeightSyncScheme"]


class SharedMemTransport:
    """Weights and their version in memory that both ends map (no copy on the receiver side).

    ``send_weights`` copies the new weights into the shared tensors in place, then writes the
    version; a receiver bound to those tensors sees them at its next read. Shared-memory
    segments are freed with the last tensor that refers to them.

    Args:
        buffers: the shared tensors, by name.
        version: a one-element int64 tensor in shared memory.

    Examples:
        >>> import torch
        >>> shared = {"w": torch.zeros(2).share_memory_()}
        >>> transport = SharedMemTransport(shared, torch.zeros(1, dtype=torch.int64))
        >>> transport.send_weights({"w": torch.ones(2)}, version=3)
        >>> weights, version = transport.receive_weights()
        >>> weights["w"].tolist(), version
        ([1.0, 1.0], 3)
    """

    def __init__(self, buffers: Mapping[str, torch.Tensor], version: torch.Tensor) -> None:
        self.buffers = dict(buffers)
        self.version = version

    def send_weights(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        """Copies ``weights`` into the shared tensors, then publishes ``version``."""
        copy_weights(self.buffers, weights)
        self.version.fill_(version)

    def receive_weights(
        self, timeout: float | None = None
    ) -> tuple[Mapping[str, torch.Tensor], int] | None:
        """The shared tensors and the version last published (never waits)."""
        return self.buffers, int(self.version[0])

    def check_connection(self) -> bool:
        """Always ``True``: shared memory has no peer to lose."""
        return True


class SharedMemWeightSyncScheme(WeightSyncScheme):
    """Weight synchronisation through shared memory: receivers are bound to the sender's copy.

    :meth:`init_on_sender` copies the model's weights into CPU shared-memory tensors (or uses
    the tensors given as ``weights``, e.g. a local policy's own). Receivers (worker processes
    given this scheme, pickled) bind their model's parameters to those tensors, so a
    :meth:`send` (an in-place copy plus a version write) reaches every receiver at once,
    with no message. A receiver whose model lives on another device keeps a copy, refreshed
    by :meth:`receive`. The version sits in shared memory too: every receiver reads the
    current one.

    Args:
        strategy: ``"tensordict"`` or ``"state_dict"`` (see :class:`WeightStrategy`).

    Examples:
        >>> import torch
        >>> sender_model, worker_model = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
        >>> scheme = SharedMemWeightSyncScheme()
        >>> scheme.init_on_sender(sender_model)
        >>> import pickle
        >>> from multiprocessing.reduction import ForkingPickler
        >>> receiver = pickle.loads(ForkingPickler.dumps(scheme))  # what a worker gets
        >>> receiver.init_on_receiver(worker_model)
        >>> with torch.no_grad():
        ...     _ = sender_model.bias.fill_(3.0)
        >>> scheme.send()
        1
        >>> worker_model.bias.item(), receiver.version
        (3.0, 1)
    """

    def __init__(self, strategy: str = "tensordict") -> None:
        super().__init__(strategy)
        self._buffers: dict[str, torch.Tensor] | None = None
        self._version_tensor = torch.zeros(1, dtype=torch.int64).share_memory_()

    @property
    def version(self) -> int:
        """The version last published (shared by every end)."""
        return int(self._version_tensor[0])

    def _set_version(self, version: int) -> None:
        self._version_tensor.fill_(int(version))

    @property
    def shared_weights(self) -> dict[str, torch.Tensor] | None:
        """The tensors receivers read, by name (``None`` before :meth:`init_on_sender`)."""
        return self._buffers

    def create_transport(self, **kwargs: Any) -> TransportBackend:
        """A :class:`SharedMemTransport` over this scheme's tensors."""
        if self._buffers is None:
            raise RuntimeError("SharedMemWeightSyncScheme: call init_on_sender first")
        return SharedMemTransport(self._buffers, self._version_tensor)

    def _init_sender(self, weights: Mapping[str, torch.Tensor] | None = None) -> None:
        if weights is not None:
            self._buffers = dict(weights)
        elif isinstance(self.model, nn.Module):
            self._buffers = share_weights(self.model)
        elif self.model is not None:
            self._buffers = {
                k: v.detach().to("cpu", copy=True).share_memory_()
                for k, v in self._payload(None).items()
            }
        else:
            raise ValueError("SharedMemWeightSyncScheme.init_on_sender: give a model or weights")
        if not self._transports:
            self._transports = {0: self.create_transport()}

    def _init_receiver(self) -> None:
        if self._buffers is None:
            raise RuntimeError(
                "SharedMemWeightSyncScheme.init_on_receiver: this scheme carries no shared "
                "weights; give the receiver the scheme the sender initialised (pickled)"
            )
        self._transports = {self.worker_idx or 0: self.create_transport()}
        if isinstance(self.model, nn.Module):
            bind_weights(self.model, self._buffers)

    def _push(self, weights: dict[str, torch.Tensor], version: int, worker_ids: Any) -> None:
        # one shared copy serves every receiver, whatever worker_ids says
        assert self._buffers is not None
        copy_weights(self._buffers, weights)

    def receive(
        self,
        timeout: float | None = None,
        *,
        weights: Any | None = None,
        version: int | None = None,
    ) -> int | None:
        """Refreshes the model's copies (tensors not bound to shared memory) and returns the
        version they hold now."""
        self._require("receiver", "receive")
        assert self._buffers is not None
        if weights is not None:
            copy_weights(self._buffers, weights)
            if version is not None:
                self._set_version(version)
        if isinstance(self.model, nn.Module):
            current = named_weights(self.model)
            unbound = {
                k: v for k, v in self._buffers.items() if current[k].data_ptr() != v.data_ptr()
            }
            if unbound:
                copy_weights(current, unbound)
        return self.version
