"""Weights sent to ``torch.distributed.rpc`` workers."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from torchrl.weight_update.weight_sync_schemes import TransportBackend, WeightSyncScheme

__all__ = ["RPCTransport", "RPCWeightSyncScheme", "receive_rpc_weights"]

# Receiver-side schemes of this process by model id (for :func:`receive_rpc_weights`).
_RECEIVERS: dict[str, WeightSyncScheme] = {}


def receive_rpc_weights(model_id: str, weights: Mapping[str, torch.Tensor], version: int) -> int:
    """Run by RPC on a worker: hands pushed weights to the receiver registered for
    ``model_id`` (see :meth:`RPCWeightSyncScheme.init_on_receiver`)."""
    scheme = _RECEIVERS.get(model_id)
    if scheme is None:
        raise RuntimeError(
            f"receive_rpc_weights: no RPCWeightSyncScheme receiver for model {model_id!r} in "
            f"this process (known: {sorted(_RECEIVERS)})"
        )
    out = scheme.receive(weights=weights, version=version)
    return int(out if out is not None else version)


class RPCTransport:
    """Calls a function on one RPC worker with ``(weights, version)``.

    RPC pickles its messages: use it between processes of one job that trust each other
    (our collectors keep every RPC agent on the loopback interface).

    Args:
        worker_name: the RPC name of the receiver.
        receive_fn: the function run there; by default :func:`receive_rpc_weights` bound to
            ``model_id``.
        model_id: the model's name (for the default ``receive_fn``).
        timeout: the RPC timeout, in seconds.

    Examples:
        >>> import torch
        >>> transport = RPCTransport("worker1")
        >>> transport.check_connection()  # this process has not joined an RPC group
        False

        Once ``torch.distributed.rpc.init_rpc("trainer", ...)`` has run here and
        ``init_rpc("worker1", ...)`` on the worker:

        >>> transport.send_weights({"bias": torch.ones(1)}, version=1)  # doctest: +SKIP
        >>> transport.wait()  # doctest: +SKIP
    """

    def __init__(
        self,
        worker_name: str,
        receive_fn: Callable[..., Any] | None = None,
        model_id: str = "policy",
        timeout: float = 60.0,
    ) -> None:
        self.worker_name = worker_name
        self.receive_fn = receive_fn
        self.model_id = model_id
        self.timeout = timeout
        self.pending: list[Any] = []

    def send_weights(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        """Starts the remote call (:meth:`wait` completes it)."""
        from torch.distributed import rpc

        with torch.no_grad():
            cpu = {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}
        if self.receive_fn is None:
            fn: Callable[..., Any] = receive_rpc_weights
            args: tuple[Any, ...] = (self.model_id, cpu, int(version))
        else:
            fn, args = self.receive_fn, (cpu, int(version))
        self.pending.append(rpc.rpc_async(self.worker_name, fn, args=args, timeout=self.timeout))

    def wait(self) -> None:
        """Waits for the remote calls started so far (their errors are raised here)."""
        futures, self.pending = self.pending, []
        for future in futures:
            try:
                future.wait()
            except Exception as err:
                raise RuntimeError(
                    f"RPCTransport: worker {self.worker_name!r} did not apply the weights: {err}"
                ) from err

    def receive_weights(
        self, timeout: float | None = None
    ) -> tuple[Mapping[str, torch.Tensor], int] | None:
        """Nothing to pull: RPC pushes the weights."""
        return None

    def check_connection(self) -> bool:
        """Whether the worker is known to this process's RPC agent."""
        from torch.distributed import rpc

        try:
            rpc.get_worker_info(self.worker_name)
        except Exception:  # noqa: BLE001 - not initialised, or no such worker
            return False
        return True


class RPCWeightSyncScheme(WeightSyncScheme):
    """Weight synchronisation with ``torch.distributed.rpc`` workers.

    The sender is given the workers' RPC names (``worker_names=[...]``, and optionally the
    function each runs, ``receive_fn``); each receiver calls :meth:`init_on_receiver` with its
    model, which registers it for :func:`receive_rpc_weights`. :meth:`send` makes one RPC per
    worker and, with ``sync``, waits for all of them.

    Args:
        strategy: ``"tensordict"`` or ``"state_dict"``.
        sync: wait until every worker has applied the weights.
        timeout: the RPC timeout, in seconds.

    Examples:
        The worker's side: the receiver registered here is what the trainer's RPC reaches
        (:func:`receive_rpc_weights` is the function it runs):

        >>> import torch
        >>> from torchrl.weight_update.rpc_scheme import receive_rpc_weights
        >>> policy = torch.nn.Linear(2, 1)
        >>> receiver = RPCWeightSyncScheme()
        >>> receiver.init_on_receiver(policy)
        >>> receive_rpc_weights("policy", {"bias": torch.ones(1)}, 1)
        1
        >>> policy.bias.item()
        1.0
        >>> receiver.shutdown()

        The trainer's side, once ``torch.distributed.rpc.init_rpc`` has run in both processes:

        >>> sender = RPCWeightSyncScheme()
        >>> sender.init_on_sender(torch.nn.Linear(2, 1), worker_names=["worker1"])
        >>> sender.send()  # doctest: +SKIP
        1
    """

    def __init__(self, strategy: str = "tensordict", sync: bool = True, timeout: float = 60.0):
        super().__init__(strategy)
        self.sync = sync
        self.timeout = timeout

    def create_transport(self, **kwargs: Any) -> TransportBackend:
        """An :class:`RPCTransport` (``worker_name=``, ``receive_fn=``)."""
        kwargs.setdefault("timeout", self.timeout)
        kwargs.setdefault("model_id", self.model_id)
        return RPCTransport(**kwargs)

    def _init_sender(
        self,
        worker_names: Sequence[str] | None = None,
        receive_fn: Callable[..., Any] | None = None,
    ) -> None:
        if worker_names is not None:
            self._transports = {
                i: self.create_transport(worker_name=n, receive_fn=receive_fn)
                for i, n in enumerate(worker_names)
            }
        elif not self._transports:
            raise ValueError("RPCWeightSyncScheme.init_on_sender: give worker_names=[...]")

    def _init_receiver(self) -> None:
        _RECEIVERS[self.model_id] = self

    def _push(self, weights: dict[str, torch.Tensor], version: int, worker_ids: Any) -> None:
        ids = self._worker_ids(worker_ids)
        for i in ids:
            self._transports[i].send_weights(weights, version)
        if self.sync:
            self.wait(ids)

    def wait(self, worker_ids: Any = None) -> None:
        """Waits for the pending sends to the given workers (default all)."""
        for i in self._worker_ids(worker_ids):
            transport = self._transports[i]
            if isinstance(transport, RPCTransport):
                transport.wait()

    def shutdown(self) -> None:
        """Forgets this receiver (and closes the sender's transports)."""
        if _RECEIVERS.get(self.model_id) is self:
            del _RECEIVERS[self.model_id]
        super().shutdown()
