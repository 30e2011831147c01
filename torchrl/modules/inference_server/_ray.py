"""Clients that are Ray actors or tasks: requests and responses on Ray queues."""

from __future__ import annotations

import importlib.util
import queue
import time
from collections import deque
from typing import Any

from tensordict import TensorDictBase

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

__all__ = ["RayClient", "RayTransport"]

_has_ray = importlib.util.find_spec("ray") is not None
_WAKE = -1


def _ray_queue_module() -> Any:
    if not _has_ray:
        raise ImportError('RayTransport needs ray: pip install "torchrl[ray]" (or pip install ray)')
    import ray.util.queue

    return ray.util.queue


class RayClient(SequencedClient):
    """A :class:`RayTransport` client: its own Ray response queue; picklable by Ray.

    Examples:
        Made by :meth:`RayTransport.client` (Ray must be running) and handed to Ray tasks or
        actors:

        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules.inference_server import InferenceServer, RayTransport
        >>> policy = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action"])
        >>> import ray  # doctest: +SKIP
        >>> _ = ray.init()  # doctest: +SKIP
        >>> transport = RayTransport()  # doctest: +SKIP
        >>> client = transport.client()  # doctest: +SKIP
        >>> @ray.remote  # doctest: +SKIP
        ... def act(client):
        ...     return client(TensorDict(observation=torch.ones(3)))["action"].shape
        >>> with InferenceServer(policy, transport):  # doctest: +SKIP
        ...     ray.get(act.remote(client))
        torch.Size([2])
    """

    def __init__(
        self, transport: RayTransport | None, client_id: int, requests: Any, responses: Any
    ) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.client_id = client_id
        self._requests = requests
        self._responses = responses
        self._poll_interval = transport.poll_interval if transport is not None else 0.5
        self._seq = 0
        self._arrived: dict[int, tuple[int, Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["transport"] = None
        state["_arrived"] = {}
        return state

    def submit(self, td: TensorDictBase) -> SequenceHandle:
        """Puts ``td`` on the request queue.

        Args:
            td: the request.

        Returns:
            A handle whose ``result(timeout=None)`` gives the response.
        """
        if not isinstance(td, TensorDictBase):
            raise TypeError(f"a request must be a TensorDictBase, got {type(td).__name__}")
        self._seq += 1
        try:
            self._requests.put((self.client_id, self._seq, td))
        except Exception as exc:  # the queue actor died with its owner
            raise ServerGoneError(f"the RayTransport request queue is gone: {exc!r}") from exc
        return SequenceHandle(self, self._seq)

    def collect(self, seq: int, wait: float) -> tuple[int, Any] | None:
        """Takes what arrived for ``seq`` (waiting at most ``wait`` seconds), or ``None``."""
        empty = _ray_queue_module().Empty
        deadline = time.monotonic() + wait
        while seq not in self._arrived:
            left = deadline - time.monotonic()
            try:
                if left > 0:
                    got_seq, code, payload = self._responses.get(block=True, timeout=left)
                else:
                    got_seq, code, payload = self._responses.get_nowait()
            except (empty, queue.Empty):
                return None
            except Exception as exc:  # the queue actor died with its owner
                raise ServerGoneError(f"the RayTransport response queue is gone: {exc!r}") from exc
            if code == RESPONSE_GONE:
                raise ServerGoneError(payload)
            self._arrived[got_seq] = (code, payload)
        return self._arrived[seq]


class RayTransport(InferenceTransport):
    """Transport for clients that are Ray actors or tasks, with requests of any layout.

    Requests travel on one ``ray.util.queue.Queue``, responses on one queue per client;
    Ray serializes the payloads. The server runs where the transport was made (usually the
    driver); clients are passed to Ray actors or tasks like any argument. Ray must be
    initialized (``ray.init()``) before the transport is made. When the server stops, each
    client's queue gets a message that makes a waiting client raise :class:`RuntimeError`.

    Keyword Args:
        max_queue_size: the most requests waiting in the request queue.
        poll_interval: seconds between two looks at the response queue.

    Examples:
        >>> import ray  # doctest: +SKIP
        >>> ray.init()  # doctest: +SKIP
        >>> transport = RayTransport()  # doctest: +SKIP
        >>> client = transport.client()  # doctest: +SKIP
    """

    def __init__(self, *, max_queue_size: int = 1000, poll_interval: float = 0.5) -> None:
        self._queues = _ray_queue_module()
        self.poll_interval = poll_interval
        self._requests = self._queues.Queue(maxsize=max_queue_size)
        self._responses: list[Any] = []
        self._pending: deque[tuple[int, int, TensorDictBase]] = deque()
        self._closed = False

    def client(self, example: TensorDictBase | None = None, **kwargs: Any) -> RayClient:
        """Makes a client with its own response queue.

        Args:
            example: ignored (requests may have any layout).
            **kwargs: none accepted.

        Returns:
            A :class:`RayClient`.
        """
        if kwargs:
            raise TypeError(f"RayTransport.client takes no options {sorted(kwargs)}")
        if self._closed:
            raise RuntimeError("this RayTransport is closed")
        responses = self._queues.Queue()
        self._responses.append(responses)
        return RayClient(self, len(self._responses) - 1, self._requests, responses)

    def submit(self, td: TensorDictBase) -> SequenceHandle:  # noqa: D102
        raise RuntimeError("RayTransport requests go through a client: use transport.client()")

    def _take_all(self, first_timeout: float | None) -> None:
        empty = self._queues.Empty
        items: list[Any] = []
        if first_timeout is not None:
            try:
                items.append(self._requests.get(block=True, timeout=first_timeout))
            except empty:
                return
        size = self._requests.size()
        if size:
            try:
                items.extend(self._requests.get_nowait_batch(size))
            except empty:
                pass
        for client_id, seq, td in items:
            if client_id != _WAKE:
                self._pending.append((client_id, seq, td))

    def wait_for_work(self, timeout: float) -> bool:  # noqa: D102
        if not self._pending:
            self._take_all(timeout)
        return bool(self._pending)

    def drain(self, max_items: int) -> tuple[list[TensorDictBase], list[Any]]:  # noqa: D102
        self._take_all(None)
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
        self._responses[client_id].put((seq, RESPONSE_OK, result))

    def resolve_exception(self, callback: Any, exc: BaseException) -> None:  # noqa: D102
        client_id, seq = callback
        code = RESPONSE_GONE if isinstance(exc, ServerGoneError) else RESPONSE_ERROR
        self._responses[client_id].put((seq, code, f"{type(exc).__name__}: {exc}"))

    def wake(self) -> None:  # noqa: D102
        if not self._closed:
            self._requests.put((_WAKE, 0, None))

    def server_stopped(self, error: BaseException | None = None) -> None:  # noqa: D102
        message = (
            "the inference server was shut down"
            if error is None
            else f"the inference server died: {error!r}"
        )
        if self._closed:
            return
        self._take_all(None)
        self._pending.clear()
        for responses in self._responses:
            responses.put((0, RESPONSE_GONE, message))

    def close(self) -> None:
        """Stops answering and kills the queue actors. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for q in [self._requests, *self._responses]:
            try:
                q.shutdown()
            except Exception:  # noqa: BLE001 - already gone with Ray
                pass
