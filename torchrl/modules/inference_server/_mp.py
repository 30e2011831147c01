"""Clients in other processes with free-form requests: pickled payloads on multiprocessing queues."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import time
from collections import deque
from multiprocessing.context import BaseContext
from typing import Any

import torch
from tensordict import TensorDictBase

from torchrl._processes import default_start_method
from torchrl.modules.inference_server._shared_memory import pid_alive
from torchrl.modules.inference_server._transport import (
    RESPONSE_ERROR,
    RESPONSE_GONE,
    RESPONSE_OK,
    InferenceTransport,
    SequencedClient,
    SequenceHandle,
    ServerGoneError,
    request_rows,
)

__all__ = ["MPClient", "MPTransport"]

_IDLE, _SERVING, _STOPPED = 0, 1, 2
_WAKE = -1


class MPClient(SequencedClient):
    """An :class:`MPTransport` client: its own response queue, any number of requests in flight.

    Made in the process owning the transport and handed to a worker as a ``Process`` argument.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules.inference_server import InferenceServer, MPClient, MPTransport
        >>> policy = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action"])
        >>> transport = MPTransport()
        >>> client = transport.client()
        >>> isinstance(client, MPClient)
        True
        >>> with InferenceServer(policy, transport):
        ...     handles = [client.submit(TensorDict(observation=torch.ones(3))) for _ in range(3)]
        ...     outs = [h.result(timeout=10.0) for h in handles]  # three requests in flight
        >>> [tuple(out["action"].shape) for out in outs]
        [(2,), (2,), (2,)]
    """

    def __init__(self, transport: MPTransport | None, client_id: int, responses: Any) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.client_id = client_id
        self._responses = responses
        self._requests = transport._requests if transport is not None else None
        self._state = transport._state if transport is not None else None
        self._poll_interval = transport.poll_interval if transport is not None else 0.5
        self._seq = 0
        self._arrived: dict[int, tuple[int, Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["transport"] = None
        state["_arrived"] = {}
        return state

    def submit(self, td: TensorDictBase) -> SequenceHandle:
        """Pickles ``td`` onto the request queue.

        Args:
            td: the request (any TensorDict; its tensors are copied).

        Returns:
            A handle whose ``result(timeout=None)`` gives the response.
        """
        if not isinstance(td, TensorDictBase):
            raise TypeError(f"a request must be a TensorDictBase, got {type(td).__name__}")
        assert self._state is not None and self._requests is not None
        if int(self._state[0]) == _STOPPED:
            raise ServerGoneError("the inference server was shut down")
        self._seq += 1
        # pickled here, by value: the queue's own pickler would move tensors to shared memory
        self._requests.put((self.client_id, self._seq, pickle.dumps(td)))
        return SequenceHandle(self, self._seq)

    def collect(self, seq: int, wait: float) -> tuple[int, Any] | None:
        """Takes what arrived for ``seq`` (waiting at most ``wait`` seconds), or ``None``."""
        deadline = time.monotonic() + wait
        while seq not in self._arrived:
            left = deadline - time.monotonic()
            try:
                got_seq, code, payload = (
                    self._responses.get(timeout=left) if left > 0 else self._responses.get_nowait()
                )
            except queue.Empty:
                return None
            self._arrived[got_seq] = (code, payload)
        return self._arrived[seq]

    def _decode(self, payload: Any) -> TensorDictBase:
        return pickle.loads(payload)

    def _check_server(self) -> None:
        assert self._state is not None
        state, pid = int(self._state[0]), int(self._state[1])
        if state == _STOPPED:
            raise ServerGoneError("the inference server was shut down")
        if not pid_alive(pid):
            raise ServerGoneError(f"the inference server process (pid {pid}) died")


class MPTransport(InferenceTransport):
    """Transport for clients in other processes, with requests of any layout (pickled).

    Requests go to the server on one ``multiprocessing`` queue, responses come back on one
    queue per client; payloads are pickled by value. Simpler than
    :class:`SharedMemoryTransport` (no layout to declare, several requests in flight per
    client) and slower (a pickle and a queue hop per request and per response). Make the
    clients before starting the worker processes and pass them as ``Process`` arguments.

    Args:
        ctx: the multiprocessing context (or its name) of the worker processes; the queues'
            locks must match it (default: ``"fork"`` on Linux without CUDA, else ``"spawn"``).

    Keyword Args:
        poll_interval: seconds between two looks at the server while a client waits.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules.inference_server import InferenceServer, MPTransport
        >>> policy = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action"])
        >>> transport = MPTransport()
        >>> client = transport.client()
        >>> with InferenceServer(policy, transport):
        ...     out = client(TensorDict(observation=torch.zeros(3)))
        >>> out["action"].shape
        torch.Size([2])
    """

    def __init__(self, ctx: BaseContext | str | None = None, *, poll_interval: float = 0.5) -> None:
        if ctx is None:
            ctx = default_start_method()
        self.ctx = mp.get_context(ctx) if isinstance(ctx, str) else ctx
        self.poll_interval = poll_interval
        self._requests = self.ctx.Queue()
        self._responses: list[Any] = []
        self._state = torch.zeros(2, dtype=torch.int64)
        self._state.share_memory_()
        self._state[1] = os.getpid()
        self._pending: deque[tuple[int, int, TensorDictBase]] = deque()
        self._frozen: str | None = None
        self._closed = False

    def client(self, example: TensorDictBase | None = None, **kwargs: Any) -> MPClient:
        """Makes a client with its own response queue.

        Args:
            example: ignored (requests may have any layout).
            **kwargs: none accepted.

        Returns:
            An :class:`MPClient`.
        """
        if kwargs:
            raise TypeError(f"MPTransport.client takes no options {sorted(kwargs)}")
        if self._frozen is not None:
            raise RuntimeError(f"no client can be added to this transport: {self._frozen}")
        if self._closed:
            raise RuntimeError("this MPTransport is closed")
        responses = self.ctx.Queue()
        self._responses.append(responses)
        return MPClient(self, len(self._responses) - 1, responses)

    def freeze(self, reason: str) -> None:
        """Forbids new clients from now on (a server process got the transport).

        Args:
            reason: said by the error :meth:`client` raises.
        """
        self._frozen = reason

    def submit(self, td: TensorDictBase) -> SequenceHandle:  # noqa: D102
        raise RuntimeError("MPTransport requests go through a client: use transport.client()")

    def _take(self, block: bool, timeout: float) -> bool:
        try:
            item = self._requests.get(block, timeout) if block else self._requests.get_nowait()
        except queue.Empty:
            return False
        client_id, seq, payload = item
        if client_id != _WAKE:
            self._pending.append((client_id, seq, pickle.loads(payload)))
        return True

    def wait_for_work(self, timeout: float) -> bool:  # noqa: D102
        if not self._pending:
            self._take(True, timeout)
        return bool(self._pending)

    def drain(self, max_items: int) -> tuple[list[TensorDictBase], list[Any]]:  # noqa: D102
        while self._take(False, 0.0):
            pass
        requests: list[TensorDictBase] = []
        callbacks: list[Any] = []
        rows = 0
        while self._pending:
            n = request_rows(self._pending[0][2])
            if requests and rows + n > max_items:
                break
            client_id, seq, td = self._pending.popleft()
            requests.append(td)
            callbacks.append((client_id, seq))
            rows += n
        return requests, callbacks

    def resolve(self, callback: Any, result: TensorDictBase) -> None:  # noqa: D102
        client_id, seq = callback
        self._responses[client_id].put((seq, RESPONSE_OK, pickle.dumps(result)))

    def resolve_exception(self, callback: Any, exc: BaseException) -> None:  # noqa: D102
        client_id, seq = callback
        code = RESPONSE_GONE if isinstance(exc, ServerGoneError) else RESPONSE_ERROR
        self._responses[client_id].put((seq, code, f"{type(exc).__name__}: {exc}"))

    def wake(self) -> None:  # noqa: D102
        if not self._closed:
            self._requests.put((_WAKE, 0, b""))

    def server_started(self) -> None:  # noqa: D102
        self._state[1] = os.getpid()
        self._state[0] = _SERVING

    def server_stopped(self, error: BaseException | None = None) -> None:  # noqa: D102
        self._state[0] = _STOPPED
        message = (
            "the inference server was shut down"
            if error is None
            else f"the inference server died: {error!r}"
        )
        while self._take(False, 0.0):
            pass
        while self._pending:
            client_id, seq, _ = self._pending.popleft()
            self.resolve_exception((client_id, seq), ServerGoneError(message))

    def close(self) -> None:
        """Marks the server stopped and closes the queues. Idempotent."""
        if self._closed:
            return
        self._state[0] = _STOPPED
        self._closed = True
        for q in [self._requests, *self._responses]:
            q.close()
            q.cancel_join_thread()
