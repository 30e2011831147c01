"""The transport contract between an inference server and its clients, and the client handle."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from tensordict import TensorDictBase

__all__ = [
    "InferenceClient",
    "InferenceTransport",
    "ResultHandle",
    "SequenceHandle",
    "SequencedClient",
    "ServerGoneError",
]


class ServerGoneError(RuntimeError):
    """Raised on the client side when the inference server stopped or died.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules.inference_server import InferenceServer, ThreadingTransport
        >>> policy = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action"])
        >>> transport = ThreadingTransport()
        >>> with InferenceServer(policy, transport):
        ...     client = transport.client()
        >>> client(TensorDict(observation=torch.zeros(3)))  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        ...
        ServerGoneError: the inference server was shut down
    """


class ResultHandle(Protocol):
    """What :meth:`InferenceClient.submit` returns: a :class:`concurrent.futures.Future` or alike."""

    def result(self, timeout: float | None = None) -> TensorDictBase:  # pragma: no cover
        """Blocks until the response is there (at most ``timeout`` seconds) and returns it."""
        ...

    def done(self) -> bool:  # pragma: no cover
        """Whether the response is there."""
        ...


class SequenceHandle:
    """The future-like handle of a request numbered ``seq`` by its client.

    For clients that may have several requests in flight and match responses to requests by
    number (:class:`MPClient`, :class:`RayClient`): the client's ``collect(seq, timeout)`` returns
    the response or ``None``, its ``wait(seq, timeout)`` blocks for it.
    """

    def __init__(self, client: Any, seq: int) -> None:
        self._client = client
        self._seq = seq

    def done(self) -> bool:
        """Whether the response is there."""
        return self._client.collect(self._seq, 0.0) is not None

    def result(self, timeout: float | None = None) -> TensorDictBase:
        """Blocks until the response is there and returns it.

        Args:
            timeout: the longest wait in seconds; ``None`` waits as long as the server lives.

        Returns:
            The response.
        """
        return self._client.wait(self._seq, timeout)


class InferenceTransport(abc.ABC):
    """How requests travel from clients to an :class:`InferenceServer` and responses back.

    The client side is :meth:`client` (a handle per actor) and :meth:`submit`. The server side
    is :meth:`wait_for_work` (block until a request is ready), :meth:`drain` (take the ready
    requests), :meth:`resolve` / :meth:`resolve_exception` (answer one), :meth:`wake`
    (interrupt a wait), and the lifecycle hooks :meth:`server_started` /
    :meth:`server_stopped`, which let clients tell a stopped or dead server from a slow one.

    A request is a TensorDict; its *rows* are the entries along its first batch dimension (an
    unbatched request is one row). The server concatenates the rows of all the requests it
    drained, runs the model once, and hands each request its own rows back.

    Examples:
        Both sides of a transport (here :class:`ThreadingTransport`), played by hand; an
        :class:`InferenceServer` runs the server side in real use:

        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.modules.inference_server import InferenceTransport, ThreadingTransport
        >>> transport = ThreadingTransport()
        >>> isinstance(transport, InferenceTransport)
        True
        >>> future = transport.submit(TensorDict(observation=torch.ones(3)))  # a client
        >>> transport.wait_for_work(timeout=1.0)  # the server
        True
        >>> requests, callbacks = transport.drain(max_items=8)
        >>> action = requests[0]["observation"].sum(-1, keepdim=True)
        >>> transport.resolve(callbacks[0], TensorDict(action=action))
        >>> future.result(timeout=1.0)["action"]
        tensor([3.])
    """

    @abc.abstractmethod
    def submit(self, td: TensorDictBase) -> ResultHandle:
        """Sends one request (client side) and returns a future-like handle to its response.

        Args:
            td: the request.

        Returns:
            An object with ``result(timeout=None)`` and ``done()``.
        """

    @abc.abstractmethod
    def wait_for_work(self, timeout: float) -> bool:
        """Blocks (server side) until a request is ready, or ``timeout`` seconds, or :meth:`wake`.

        Args:
            timeout: the longest wait in seconds.

        Returns:
            Whether a request may be ready (a spurious ``True`` is allowed).
        """

    @abc.abstractmethod
    def drain(self, max_items: int) -> tuple[list[TensorDictBase], list[Any]]:
        """Takes the ready requests (server side), up to ``max_items`` rows in all.

        A single request with more rows than ``max_items`` is taken alone rather than never.

        Args:
            max_items: the most rows to take (an unbatched request counts as one row).

        Returns:
            ``(requests, callbacks)``: the requests and, for each, an opaque handle that
            :meth:`resolve` takes.
        """

    @abc.abstractmethod
    def resolve(self, callback: Any, result: TensorDictBase) -> None:
        """Sends ``result`` to the client behind ``callback`` (server side).

        Args:
            callback: a handle from :meth:`drain`.
            result: the response, with the request's batch size.
        """

    @abc.abstractmethod
    def resolve_exception(self, callback: Any, exc: BaseException) -> None:
        """Makes the client behind ``callback`` raise ``exc`` (or an error describing it).

        Args:
            callback: a handle from :meth:`drain`.
            exc: the error to report.
        """

    def client(self, example: TensorDictBase | None = None, **kwargs: Any) -> InferenceClient:
        """Returns a client handle bound to this transport.

        Args:
            example: a representative request; transports with fixed layouts
                (:class:`SharedMemoryTransport`) need it, the others ignore it.
            **kwargs: transport-specific options.

        Returns:
            An :class:`InferenceClient`.
        """
        if kwargs:
            raise TypeError(f"{type(self).__name__}.client takes no options {sorted(kwargs)}")
        return InferenceClient(self)

    def wake(self) -> None:  # noqa: B027 - optional hook
        """Interrupts a :meth:`wait_for_work` in progress (shutdown, new weights)."""

    def bind_server(  # noqa: B027 - optional hook
        self, probe: Callable[[TensorDictBase], TensorDictBase]
    ) -> None:
        """Called by a server at construction with a function that runs its policy once.

        Transports with preallocated response buffers use it to learn the response layout
        of a request (see :class:`SharedMemoryTransport`); the others ignore it.

        Args:
            probe: maps an example request to the response the server would send.
        """

    def server_started(self) -> None:  # noqa: B027 - optional hook
        """Called by the server's loop in the serving thread before it serves."""

    def server_stopped(self, error: BaseException | None = None) -> None:  # noqa: B027
        """Called by the server's loop when it ends, normally or with ``error``.

        Pending and later requests must fail with a clear error instead of waiting.

        Args:
            error: why the loop ended, ``None`` for a normal shutdown.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Frees what the transport holds (buffers, queues). Idempotent."""


class InferenceClient:
    """The actor-side handle of an inference server: a callable policy.

    ``client(td)`` blocks until the server answered ``td`` and returns the response;
    ``client.submit(td)`` returns at once with a future-like object whose
    ``result(timeout=None)`` gives the response.

    Args:
        transport: the transport shared with the server.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules.inference_server import InferenceServer, ThreadingTransport
        >>> policy = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action"])
        >>> transport = ThreadingTransport()
        >>> with InferenceServer(policy, transport) as server:
        ...     client = transport.client()
        ...     out = client(TensorDict(observation=torch.zeros(4, 3), batch_size=[4]))
        >>> out["action"].shape, out["policy_version"].tolist()
        (torch.Size([4, 2]), [0, 0, 0, 0])
    """

    def __init__(self, transport: InferenceTransport) -> None:
        self.transport = transport

    def submit(self, td: TensorDictBase) -> ResultHandle:
        """Sends ``td`` and returns a future-like handle to the response.

        Args:
            td: the request.

        Returns:
            An object with ``result(timeout=None)`` (the response) and ``done()``.
        """
        return self.transport.submit(td)

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        """Sends ``td`` and blocks until the response is there.

        Args:
            td: the request.

        Returns:
            The response TensorDict.
        """
        return self.submit(td).result()


def make_future() -> Future:
    """A new :class:`concurrent.futures.Future` (one place to change the future type)."""
    return Future()


def request_rows(td: TensorDictBase) -> int:
    """How many rows a request holds: its first batch dimension, 1 when it is unbatched."""
    return td.batch_size[0] if td.batch_dims else 1


#: the status codes of a numbered response: answered, failed, server gone
RESPONSE_OK, RESPONSE_ERROR, RESPONSE_GONE = 0, 1, 2


class SequencedClient(InferenceClient):
    """A client that numbers its requests and may have several in flight (queue transports).

    Subclasses set ``client_id``, ``_seq``, ``_arrived`` (responses by number) and
    ``_poll_interval``, and implement :meth:`collect` (take what arrived on their queue);
    :meth:`_decode` turns a payload into the response and :meth:`_check_server` raises once the
    server is known to be gone.
    """

    client_id: int
    _seq: int
    _arrived: dict[int, tuple[int, Any]]
    _poll_interval: float

    def collect(self, seq: int, wait: float) -> tuple[int, Any] | None:  # pragma: no cover
        """Takes what arrived for ``seq`` (waiting at most ``wait`` seconds), or ``None``."""
        raise NotImplementedError

    def _decode(self, payload: Any) -> TensorDictBase:
        return payload

    def _check_server(self) -> None:
        """Raises :class:`ServerGoneError` if the server stopped or died (default: no check)."""

    def wait(self, seq: int, timeout: float | None) -> TensorDictBase:
        """Blocks until the response to request ``seq`` is there.

        Args:
            seq: the request's number.
            timeout: the longest wait in seconds; ``None`` waits as long as the server lives.

        Returns:
            The response.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = self._poll_interval
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            got = self.collect(seq, wait)
            if got is not None:
                del self._arrived[seq]
                code, payload = got
                if code == RESPONSE_OK:
                    return self._decode(payload)
                if code == RESPONSE_GONE:
                    raise ServerGoneError(payload)
                raise RuntimeError(f"the inference server failed on this request: {payload}")
            self._check_server()
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"no response within {timeout} s (request {seq} in flight)")
