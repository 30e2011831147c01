"""Weights sent point to point through a ``torch.distributed`` (gloo) process group."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from torchrl.weight_update.weight_sync_schemes import TransportBackend, WeightSyncScheme
from torchrl.weight_update.weights import flat_weights

__all__ = ["DistributedTransport", "DistributedWeightSyncScheme"]


class DistributedTransport:
    """Raw tensors over a process group: a header ``[version, count]`` then each tensor.

    Nothing is pickled: the receiver ``recv``s into tensors it allocated from its own model, in
    the order of the sorted weight names, so both ends must hold the same model structure (a
    different one fails with the group's size error). The group must be one of torch's
    ``ProcessGroup`` objects (``send``/``recv`` returning works).

    Args:
        group: the process group.
        peer: the other end's rank.
        buffers: receiver side: the tensors to receive into, by name.
        tag: the message tag.
        preamble: sender side: called before each send (e.g. to send the peer the command
            that makes it receive).

    Examples:
        >>> import torch
        >>> DistributedTransport(group=None, peer=1).check_connection()  # no group yet
        False

        With a two-rank gloo group, rank 0 sends and rank 1 receives into its own tensors:

        >>> from datetime import timedelta
        >>> import torch.distributed as dist
        >>> store = dist.TCPStore("127.0.0.1", 29500, 2, is_master=True)  # doctest: +SKIP
        >>> group = dist.ProcessGroupGloo(store, 0, 2, timedelta(seconds=30))  # doctest: +SKIP
        >>> DistributedTransport(group, peer=1).send_weights(  # doctest: +SKIP
        ...     {"bias": torch.ones(1)}, version=1
        ... )

        and on rank 1 (``store`` with ``is_master=False``, ``group`` with rank 1):

        >>> receiver = DistributedTransport(  # doctest: +SKIP
        ...     group, peer=0, buffers={"bias": torch.zeros(1)}
        ... )
        >>> receiver.receive_weights()  # doctest: +SKIP
        ({'bias': tensor([1.])}, 1)
    """

    def __init__(
        self,
        group: Any,
        peer: int,
        buffers: Mapping[str, torch.Tensor] | None = None,
        tag: int = 0,
        preamble: Callable[[], None] | None = None,
    ) -> None:
        self.preamble = preamble
        self.group = group
        self.peer = peer
        self.tag = tag
        self.buffers = dict(sorted((buffers or {}).items()))

    def send_weights(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        """Sends the header and every tensor (CPU, contiguous) to the peer."""
        names = sorted(weights)
        header = torch.tensor([int(version), len(names)], dtype=torch.int64)
        if self.preamble is not None:
            self.preamble()
        try:
            self.group.send([header], self.peer, self.tag).wait()
            for name in names:
                tensor = weights[name].detach().to("cpu").contiguous()
                self.group.send([tensor], self.peer, self.tag).wait()
        except RuntimeError as err:
            raise RuntimeError(
                f"DistributedTransport: could not send weights to rank {self.peer}: {err}"
            ) from err

    def receive_weights(
        self, timeout: float | None = None
    ) -> tuple[Mapping[str, torch.Tensor], int] | None:
        """Receives the next weights (blocks up to the group's timeout)."""
        header = torch.zeros(2, dtype=torch.int64)
        self.group.recv([header], self.peer, self.tag).wait()
        version, count = int(header[0]), int(header[1])
        if count != len(self.buffers):
            raise RuntimeError(
                f"DistributedTransport: rank {self.peer} sends {count} tensors, this model has "
                f"{len(self.buffers)} ({sorted(self.buffers)})"
            )
        for tensor in self.buffers.values():
            self.group.recv([tensor], self.peer, self.tag).wait()
        return self.buffers, version

    def check_connection(self) -> bool:
        """Whether a group is set."""
        return self.group is not None


class DistributedWeightSyncScheme(WeightSyncScheme):
    """Weight synchronisation through a ``torch.distributed`` group (gloo: CPU tensors).

    The sender is given the group and the receivers' ranks (``group=``, ``ranks=[...]``);
    each receiver the group and the sender's rank (``group=``, ``src=0``). :meth:`send`
    sends the weights to each rank in turn; a receiver takes them with :meth:`receive` (the
    two calls must pair up, as every point-to-point exchange). The group's stores and devices
    listen where the caller set them up (our collectors: loopback only).

    Args:
        backend: the group's backend; only ``"gloo"`` is supported.
        sync: kept for TorchRL compatibility (sends complete before :meth:`send` returns).
        timeout: the group's timeout for one exchange, in seconds (informative: the group
            carries its own).

    Examples:
        >>> import torch
        >>> policy = torch.nn.Linear(2, 1)
        >>> scheme = DistributedWeightSyncScheme()
        >>> DistributedWeightSyncScheme.model_names(policy)  # the order weights travel in
        ['bias', 'weight']

        With a two-rank gloo ``group`` (see :class:`DistributedTransport`), on the trainer
        (rank 0):

        >>> scheme.init_on_sender(policy, group=group, ranks=[1])  # doctest: +SKIP
        >>> scheme.send()  # doctest: +SKIP
        1

        and on the worker (rank 1), whose policy has the same structure:

        >>> scheme.init_on_receiver(policy, group=group, src=0)  # doctest: +SKIP
        >>> scheme.receive()  # doctest: +SKIP
        1
    """

    def __init__(
        self,
        backend: str = "gloo",
        sync: bool = True,
        timeout: float = 3600.0,
        strategy: str = "tensordict",
    ) -> None:
        super().__init__(strategy)
        if backend != "gloo":
            raise ValueError(
                f"DistributedWeightSyncScheme: backend must be 'gloo' (weights travel through "
                f"CPU tensors), got {backend!r}"
            )
        self.backend = backend
        self.sync = sync
        self.timeout = timeout

    def create_transport(self, **kwargs: Any) -> TransportBackend:
        """A :class:`DistributedTransport` (``group=``, ``peer=``, ``buffers=``)."""
        return DistributedTransport(**kwargs)

    def _init_sender(self, group: Any = None, ranks: Sequence[int] | None = None) -> None:
        if group is None or ranks is None:
            if self._transports:
                return
            raise ValueError("DistributedWeightSyncScheme.init_on_sender: give group= and ranks=")
        self._transports = {
            i: self.create_transport(group=group, peer=r) for i, r in enumerate(ranks)
        }

    def _init_receiver(self, group: Any = None, src: int = 0) -> None:
        if group is None:
            if self._transports:
                return
            raise ValueError("DistributedWeightSyncScheme.init_on_receiver: give group=")
        weights = flat_weights(self.model, "model") if self.model is not None else {}
        buffers = {k: torch.empty(v.shape, dtype=v.dtype) for k, v in weights.items()}
        self._transports = {
            self.worker_idx or 0: self.create_transport(group=group, peer=src, buffers=buffers)
        }

    def receive(
        self,
        timeout: float | None = None,
        *,
        weights: Any | None = None,
        version: int | None = None,
    ) -> int | None:
        """Receives the next weights from the sender (blocking) and applies them."""
        return super().receive(timeout, weights=weights, version=version)

    @staticmethod
    def model_names(model: nn.Module) -> list[str]:
        """The order in which weights travel (sorted names)."""
        return sorted(flat_weights(model))
