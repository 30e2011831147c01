"""In-process transports: clients are threads of the server's process."""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from typing import Any

from tensordict import TensorDictBase

from torchrl.modules.inference_server._transport import (
    InferenceClient,
    InferenceTransport,
    ServerGoneError,
    request_rows,
)

__all__ = ["SlotTransport", "ThreadingTransport"]

_STOPPED_MSG = "the inference server was shut down"


class ThreadingTransport(InferenceTransport):
    """In-process transport for clients that are threads: requests go by reference.

    Each request is a TensorDict put on a queue with a :class:`concurrent.futures.Future`;
    the server resolves the future with the response. Requests may have any layout, and a
    client may have several requests in flight.

    Examples:
        >>> import torch
        >>> from concurrent.futures import ThreadPoolExecutor
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules.inference_server import InferenceServer, ThreadingTransport
        >>> policy = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action"])
        >>> transport = ThreadingTransport()
        >>> with InferenceServer(policy, transport):
        ...     client = transport.client()
        ...     with ThreadPoolExecutor(4) as pool:
        ...         outs = list(pool.map(client, [TensorDict(observation=torch.ones(3))] * 8))
        >>> [tuple(out["action"].shape) for out in outs[:2]]
        [(2,), (2,)]
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[tuple[TensorDictBase, Future]] = deque()
        self._woken = False
        self._stopped: str | None = None

    def submit(self, td: TensorDictBase) -> Future:
        """Queues ``td`` and returns the :class:`~concurrent.futures.Future` of its response.

        Args:
            td: the request.

        Returns:
            A future resolved by the server.
        """
        if not isinstance(td, TensorDictBase):
            raise TypeError(f"a request must be a TensorDictBase, got {type(td).__name__}")
        future: Future = Future()
        with self._cond:
            if self._stopped is not None:
                raise ServerGoneError(self._stopped)
            self._queue.append((td, future))
            self._cond.notify()
        return future

    def wait_for_work(self, timeout: float) -> bool:  # noqa: D102
        with self._cond:
            if not self._queue and not self._woken:
                self._cond.wait(timeout)
            self._woken = False
            return bool(self._queue)

    def drain(self, max_items: int) -> tuple[list[TensorDictBase], list[Any]]:  # noqa: D102
        requests: list[TensorDictBase] = []
        futures: list[Future] = []
        rows = 0
        with self._cond:
            while self._queue:
                n = request_rows(self._queue[0][0])
                if requests and rows + n > max_items:
                    break
                td, future = self._queue.popleft()
                requests.append(td)
                futures.append(future)
                rows += n
        return requests, futures

    def resolve(self, callback: Any, result: TensorDictBase) -> None:  # noqa: D102
        callback.set_result(result)

    def resolve_exception(self, callback: Any, exc: BaseException) -> None:  # noqa: D102
        callback.set_exception(exc)

    def wake(self) -> None:  # noqa: D102
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def server_started(self) -> None:  # noqa: D102
        with self._cond:
            self._stopped = None

    def server_stopped(self, error: BaseException | None = None) -> None:  # noqa: D102
        message = _STOPPED_MSG if error is None else f"the inference server died: {error!r}"
        with self._cond:
            self._stopped = message
            pending = list(self._queue)
            self._queue.clear()
        for _, future in pending:
            future.set_exception(ServerGoneError(message))

    def close(self) -> None:  # noqa: D102
        self.server_stopped(None)


class _Slot:
    """One client's slot of a :class:`SlotTransport`: the request, the response, an event."""

    __slots__ = ("buffer", "done", "error", "request", "response", "slot_id")

    def __init__(self, slot_id: int) -> None:
        self.slot_id = slot_id
        self.request: TensorDictBase | None = None
        self.buffer: TensorDictBase | None = None
        self.response: TensorDictBase | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class SlotHandle:
    """The future-like handle of a :class:`SlotTransport` request."""

    def __init__(self, transport: SlotTransport, slot: _Slot) -> None:
        self._transport = transport
        self._slot = slot

    def done(self) -> bool:
        """Whether the response is there."""
        return self._slot.done.is_set()

    def result(self, timeout: float | None = None) -> TensorDictBase:
        """Blocks until the response is there and returns it.

        Args:
            timeout: the longest wait in seconds; ``None`` waits as long as the server runs.

        Returns:
            The response.
        """
        if not self._slot.done.wait(timeout):
            raise TimeoutError(f"no response on slot {self._slot.slot_id} within {timeout} s")
        slot = self._slot
        if slot.error is not None:
            raise slot.error
        assert slot.response is not None
        return slot.response


class SlotClient(InferenceClient):
    """A :class:`SlotTransport` client: owns one slot, at most one request in flight."""

    def __init__(self, transport: SlotTransport, slot_id: int) -> None:
        super().__init__(transport)
        self.slot_id = slot_id
        self._transport = transport

    def submit(self, td: TensorDictBase) -> SlotHandle:  # noqa: D102
        return self._transport.submit_slot(self.slot_id, td)


class SlotTransport(InferenceTransport):
    """In-process transport with one preallocated slot per client (per env thread).

    A client writes its request into its own slot and sets a ready flag; the server sweeps
    the slots, batches the ready ones and wakes each owner with its response. No queue and no
    future is allocated per request. Each client has at most one request in flight.

    Args:
        num_slots: the number of slots, i.e. the most clients :meth:`client` hands out.

    Keyword Args:
        preallocate: copy each request into a buffer allocated at the slot's first request
            (the caller may then reuse its TensorDict at once) instead of keeping a reference.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules.inference_server import InferenceServer, SlotTransport
        >>> policy = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action"])
        >>> transport = SlotTransport(num_slots=2)
        >>> with InferenceServer(policy, transport):
        ...     out = transport.client()(TensorDict(observation=torch.ones(5, 3), batch_size=[5]))
        >>> out["action"].shape
        torch.Size([5, 2])
    """

    def __init__(self, num_slots: int, *, preallocate: bool = False) -> None:
        if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError(f"num_slots must be a positive int, got {num_slots!r}")
        self.num_slots = num_slots
        self.preallocate = preallocate
        self._slots = [_Slot(i) for i in range(num_slots)]
        # per slot: 0 free, 1 ready (written, not yet taken), 2 taken by the server
        self._ready = [0] * num_slots
        self._next_client = 0
        self._lock = threading.Lock()
        self._work = threading.Event()
        self._stopped: str | None = None

    def client(self, example: TensorDictBase | None = None, **kwargs: Any) -> SlotClient:
        """Returns a client bound to the next free slot.

        Args:
            example: ignored (layouts are free).
            **kwargs: none accepted.

        Returns:
            A :class:`SlotClient`.
        """
        if kwargs:
            raise TypeError(f"SlotTransport.client takes no options {sorted(kwargs)}")
        with self._lock:
            if self._next_client >= self.num_slots:
                raise RuntimeError(
                    f"SlotTransport has num_slots={self.num_slots}: all slots have a client"
                )
            slot_id = self._next_client
            self._next_client += 1
        return SlotClient(self, slot_id)

    def submit(self, td: TensorDictBase) -> SlotHandle:  # noqa: D102
        raise RuntimeError("SlotTransport requests go through a client: use transport.client()")

    def submit_slot(self, slot_id: int, td: TensorDictBase) -> SlotHandle:
        """Writes ``td`` into slot ``slot_id`` and flags it ready (client side).

        Args:
            slot_id: the caller's slot.
            td: the request.

        Returns:
            A handle to the response.
        """
        if not isinstance(td, TensorDictBase):
            raise TypeError(f"a request must be a TensorDictBase, got {type(td).__name__}")
        if self._stopped is not None:
            raise ServerGoneError(self._stopped)
        slot = self._slots[slot_id]
        if self._ready[slot_id] != 0:
            raise RuntimeError(f"slot {slot_id} already has a request in flight")
        if self.preallocate:
            if slot.buffer is None:
                slot.buffer = td.clone()
            else:
                slot.buffer.update_(td)
            slot.request = slot.buffer
        else:
            slot.request = td
        slot.error = None
        slot.response = None
        slot.done.clear()
        # the flag is written before the event: a sweep that sees the event sees the flag
        self._ready[slot_id] = 1
        self._work.set()
        return SlotHandle(self, slot)

    def wait_for_work(self, timeout: float) -> bool:  # noqa: D102
        self._work.wait(timeout)
        # cleared before the sweep: a request flagged after the sweep sets the event again
        self._work.clear()
        return 1 in self._ready

    def drain(self, max_items: int) -> tuple[list[TensorDictBase], list[Any]]:  # noqa: D102
        requests: list[TensorDictBase] = []
        ids: list[int] = []
        rows = 0
        for slot_id, ready in enumerate(self._ready):
            if ready != 1:
                continue
            request = self._slots[slot_id].request
            assert request is not None
            n = request_rows(request)
            if requests and rows + n > max_items:
                self._work.set()  # what is left is served next round
                break
            requests.append(request)
            ids.append(slot_id)
            self._ready[slot_id] = 2
            rows += n
        return requests, ids

    def resolve(self, callback: Any, result: TensorDictBase) -> None:  # noqa: D102
        slot = self._slots[callback]
        slot.response = result
        self._ready[callback] = 0
        slot.done.set()

    def resolve_exception(self, callback: Any, exc: BaseException) -> None:  # noqa: D102
        slot = self._slots[callback]
        slot.error = exc
        self._ready[callback] = 0
        slot.done.set()

    def wake(self) -> None:  # noqa: D102
        self._work.set()

    def server_started(self) -> None:  # noqa: D102
        self._stopped = None

    def server_stopped(self, error: BaseException | None = None) -> None:  # noqa: D102
        message = _STOPPED_MSG if error is None else f"the inference server died: {error!r}"
        self._stopped = message
        for slot_id, ready in enumerate(self._ready):
            if ready:
                self.resolve_exception(slot_id, ServerGoneError(message))

    def close(self) -> None:  # noqa: D102
        self.server_stopped(None)
