"""Weights copied to worker processes through multiprocessing pipes."""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from multiprocessing.connection import Connection, wait
from typing import Any

import torch

from torchrl.weight_update.weight_sync_schemes import TransportBackend, WeightSyncScheme

__all__ = ["MPTransport", "MultiProcessWeightSyncScheme"]


class MPTransport:
    """One end of a ``multiprocessing`` pipe that carries weights (and acknowledgements).

    The sender's ``send_weights`` sends ``("weights", version, tensors)``; CPU tensors travel
    through shared memory (torch's multiprocessing reductions), the message itself is pickled
    between a parent and its own child, which trust each other. With ``sync=True`` it then
    waits for the receiver's acknowledgement while watching the receiver process: a dead
    receiver raises ``RuntimeError`` at once (its pipe closes, or its ``process`` ends), a
    silent one ``TimeoutError`` after ``timeout`` seconds.

    Args:
        conn: this end of the pipe.
        process: the peer process to watch (sender side; optional).
        sync: wait for the receiver's acknowledgement on each send.
        timeout: the longest wait for an acknowledgement, in seconds.

    Examples:
        Both ends of one pipe in this process (a collector gives the child end to a worker):

        >>> import multiprocessing as mp, torch
        >>> parent, child = mp.Pipe()
        >>> sender = MPTransport(parent, sync=False)  # sync=True also waits for the ack
        >>> receiver = MPTransport(child, sync=False)
        >>> sender.send_weights({"bias": torch.ones(1)}, version=1)
        >>> weights, version = receiver.receive_weights(timeout=5.0)
        >>> weights["bias"].tolist(), version
        ([1.0], 1)
        >>> sender.close(); receiver.close()
    """

    def __init__(
        self,
        conn: Connection,
        process: Any = None,
        sync: bool = True,
        timeout: float = 30.0,
    ) -> None:
        self.conn = conn
        self.process = process
        self.sync = sync
        self.timeout = timeout

    def _who(self) -> str:
        pid = getattr(self.process, "pid", None)
        return "the receiver process" + (f" (pid {pid})" if pid is not None else "")

    def _gone(self, err: BaseException | None = None) -> RuntimeError:
        code = getattr(self.process, "exitcode", None)
        why = f" (exit code {code})" if code is not None else ""
        return RuntimeError(f"MPTransport: {self._who()} is gone{why}: {err or 'pipe closed'}")

    def send_weights(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        """Sends CPU copies of ``weights``; waits for the acknowledgement when ``sync``."""
        with torch.no_grad():
            payload = {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}
        try:
            self.conn.send(("weights", int(version), payload))
        except (BrokenPipeError, EOFError, OSError) as err:
            raise self._gone(err) from err
        if self.sync:
            self.wait_ack(version)

    def wait_ack(self, version: int) -> None:
        """Blocks until the receiver acknowledges ``version`` (or fails, dies, times out)."""
        waitables: list[Any] = [self.conn]
        sentinel = getattr(self.process, "sentinel", None)
        if sentinel is not None:
            waitables.append(sentinel)
        ready = wait(waitables, timeout=self.timeout)
        if not ready:
            raise TimeoutError(
                f"MPTransport: {self._who()} did not acknowledge weights version {version} "
                f"within {self.timeout} s"
            )
        if self.conn not in ready:
            raise self._gone()
        try:
            kind, payload = self.conn.recv()
        except (EOFError, OSError) as err:
            raise self._gone(err) from err
        if kind == "error":
            raise RuntimeError(f"MPTransport: {self._who()} failed to apply weights:\n{payload}")
        if kind != "ack" or payload != version:
            raise RuntimeError(
                f"MPTransport: expected the acknowledgement of version {version}, got "
                f"{kind!r} {payload!r}"
            )

    def receive_weights(
        self, timeout: float | None = None
    ) -> tuple[Mapping[str, torch.Tensor], int] | None:
        """The next ``(weights, version)``, or ``None`` if none came within ``timeout``."""
        if not self.conn.poll(timeout):
            return None
        try:
            kind, version, weights = self.conn.recv()
        except (EOFError, OSError) as err:
            raise RuntimeError(f"MPTransport: the sender is gone: {err}") from err
        if kind != "weights":
            raise RuntimeError(f"MPTransport: unexpected message {kind!r}")
        return weights, version

    def acknowledge(self, version: int, error: str | None = None) -> None:
        """Tells the sender that ``version`` was applied (or why it was not)."""
        if self.sync:
            self.conn.send(("error", error) if error is not None else ("ack", int(version)))

    def check_connection(self) -> bool:
        """Whether the pipe is open and the watched process alive."""
        alive = self.process is None or self.process.is_alive()
        return alive and not self.conn.closed

    def close(self) -> None:
        """Closes this end of the pipe."""
        self.conn.close()


class MultiProcessWeightSyncScheme(WeightSyncScheme):
    """Weight synchronisation by copies sent to worker processes through pipes.

    Each worker keeps its own weights: a change on the sender (an optimizer step) reaches a
    worker only through :meth:`send`, which copies the weights at that moment. The sender has
    one :class:`MPTransport` per worker (``connections``, with the ``processes`` to watch); a
    receiver pulls with :meth:`receive` and acknowledges, so that a ``sync`` send returns once
    every worker holds the new version. Collectors pass their own transports (their worker
    pipes) instead.

    Args:
        strategy: ``"tensordict"`` or ``"state_dict"``.
        sync: wait for every receiver's acknowledgement in :meth:`send`.
        timeout: the longest wait for an acknowledgement, in seconds.

    Examples:
        >>> import multiprocessing as mp, torch
        >>> parent, child = mp.Pipe()
        >>> sender = MultiProcessWeightSyncScheme(sync=False)
        >>> sender.init_on_sender(torch.nn.Linear(2, 1), connections=[parent])
        >>> receiver = MultiProcessWeightSyncScheme(sync=False)
        >>> receiver.init_on_receiver(torch.nn.Linear(2, 1), connection=child)
        >>> sender.send(), receiver.receive(timeout=5.0)
        (1, 1)
    """

    def __init__(self, strategy: str = "tensordict", sync: bool = True, timeout: float = 30.0):
        super().__init__(strategy)
        self.sync = sync
        self.timeout = timeout

    def create_transport(self, **kwargs: Any) -> TransportBackend:
        """An :class:`MPTransport` (``conn=``, ``process=``)."""
        kwargs.setdefault("sync", self.sync)
        kwargs.setdefault("timeout", self.timeout)
        return MPTransport(**kwargs)

    def _init_sender(
        self,
        connections: list[Connection] | None = None,
        processes: list[Any] | None = None,
    ) -> None:
        if connections is None:
            if not self._transports:
                raise ValueError(
                    "MultiProcessWeightSyncScheme.init_on_sender: give connections=[...] (one "
                    "pipe end per worker) or transports=[...]"
                )
            return
        if processes is not None and len(processes) != len(connections):
            raise ValueError(
                f"MultiProcessWeightSyncScheme: {len(connections)} connections but "
                f"{len(processes)} processes"
            )
        procs = processes or [None] * len(connections)
        self._transports = {
            i: self.create_transport(conn=c, process=p)
            for i, (c, p) in enumerate(zip(connections, procs))
        }

    def _init_receiver(self, connection: Connection | None = None) -> None:
        if connection is not None:
            self._transports = {self.worker_idx or 0: self.create_transport(conn=connection)}

    def _push(self, weights: dict[str, torch.Tensor], version: int, worker_ids: Any) -> None:
        ids = self._worker_ids(worker_ids)
        for i in ids:
            transport = self._transports[i]
            if isinstance(transport, MPTransport):
                # every worker gets the weights before the first acknowledgement is awaited
                sync, transport.sync = transport.sync, False
                try:
                    transport.send_weights(weights, version)
                finally:
                    transport.sync = sync
            else:
                transport.send_weights(weights, version)
        for i in ids:
            transport = self._transports[i]
            if isinstance(transport, MPTransport) and transport.sync:
                transport.wait_ack(version)

    def receive(
        self,
        timeout: float | None = None,
        *,
        weights: Any | None = None,
        version: int | None = None,
    ) -> int | None:
        """Pulls (or takes pushed) weights, applies them and acknowledges them."""
        if weights is not None:
            return super().receive(timeout, weights=weights, version=version)
        self._require("receiver", "receive")
        transport = self._transports.get(self.worker_idx or 0)
        if transport is None:
            raise RuntimeError(
                "MultiProcessWeightSyncScheme.receive: no connection (give connection=... to "
                "init_on_receiver, or pass weights=...)"
            )
        got = transport.receive_weights(timeout)
        if got is None:
            return None
        new, new_version = got
        try:
            super().receive(weights=new, version=new_version)
        except Exception as err:
            if isinstance(transport, MPTransport):
                transport.acknowledge(new_version, error=traceback.format_exc())
            raise RuntimeError(
                f"MultiProcessWeightSyncScheme: could not apply weights: {err}"
            ) from err
        if isinstance(transport, MPTransport):
            transport.acknowledge(new_version)
        return self.version
