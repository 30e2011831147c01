"""Clients in other processes: fixed-layout requests and responses in shared memory."""

from __future__ import annotations

import multiprocessing as mp
import os
import select
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from torchrl.modules.inference_server._transport import (
    InferenceClient,
    InferenceTransport,
    ServerGoneError,
    request_rows,
)

__all__ = ["SharedMemoryClient", "SharedMemoryTransport", "pid_alive"]

# server states, in the transport's shared ``state`` tensor
_IDLE, _SERVING, _STOPPED = 0, 1, 2
# one-byte response codes
_OK, _ERROR, _GONE = b"\x01", b"\x02", b"\x03"
# a client id that is not a client: wakes the server up
_WAKE = -1
_ERROR_BYTES = 4096
_ID_BYTES = 4
_READ_IDS = 1024  # ids read from the request pipe at once


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not reaped yet, counts as dead).

    Args:
        pid: a process id.

    Returns:
        ``False`` once the process has exited.

    Examples:
        >>> import os
        >>> pid_alive(os.getpid())
        True
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:  # no procfs: trust kill()
        return True
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
    return state not in (b"Z", b"X")


def _leaves(td: TensorDictBase) -> list[tuple[NestedKey, torch.Tensor]]:
    return [(key, td.get(key)) for key in td.keys(include_nested=True, leaves_only=True)]


def _layout(td: TensorDictBase, what: str) -> TensorDictBase:
    """A zeroed shared-memory copy of ``td``'s tensors, checked to be CPU tensors."""
    for key, value in _leaves(td):
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"{what} entry {key!r} is a {type(value).__name__}: a SharedMemoryTransport "
                "slot holds tensors only"
            )
        if value.device.type != "cpu":
            raise ValueError(
                f"{what} entry {key!r} is on {value.device}: a SharedMemoryTransport slot "
                "holds CPU tensors"
            )
    slot = td.detach().clone().zero_()
    slot.share_memory_()
    return slot


def _signature(td: TensorDictBase) -> tuple:
    return (tuple(td.batch_size),) + tuple(
        (key, tuple(value.shape), value.dtype) for key, value in _leaves(td)
    )


class _ServerSlot:
    """The server's view of one client: its buffers and the write end of its response pipe."""

    def __init__(self, request: TensorDictBase, respond: Connection) -> None:
        self.request = request
        self.rows = request_rows(request)
        self.respond = respond
        self.response: TensorDictBase | None = None
        self.response_leaves: list[tuple[NestedKey, torch.Tensor]] = []

    def set_response(self, response: TensorDictBase) -> None:
        self.response = response
        self.response_leaves = _leaves(response)


class SharedMemoryHandle:
    """The future-like handle of a :class:`SharedMemoryClient` request."""

    def __init__(self, client: SharedMemoryClient) -> None:
        self._client = client

    def done(self) -> bool:
        """Whether the response is there (or the request failed)."""
        return self._client.response_ready()

    def result(self, timeout: float | None = None) -> TensorDictBase:
        """Blocks until the response is there and returns it.

        Args:
            timeout: the longest wait in seconds; ``None`` waits as long as the server lives.

        Returns:
            The response (a copy, or the shared slot itself with ``copy_result=False``).
        """
        return self._client.wait_response(timeout)


class SharedMemoryClient(InferenceClient):
    """A :class:`SharedMemoryTransport` client: a fixed request slot and response slot.

    Made by :meth:`SharedMemoryTransport.client` in the process that owns the transport,
    then handed to a worker process (as an argument of its ``Process``: it holds pipes).
    At most one request is in flight per client.

    Attributes:
        client_id: the client's index in its transport.
        request: the shared request slot (its layout is the example's).
        response: the shared response slot, ``None`` until the layout is known.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules.inference_server import (
        ...     InferenceServer, SharedMemoryClient, SharedMemoryTransport
        ... )
        >>> policy = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action"])
        >>> transport = SharedMemoryTransport()
        >>> client = transport.client(example=TensorDict(observation=torch.zeros(3)))
        >>> isinstance(client, SharedMemoryClient)
        True
        >>> with InferenceServer(policy, transport):
        ...     handle = client.submit(TensorDict(observation=torch.ones(3)))  # one at a time
        ...     out = handle.result(timeout=10.0)
        >>> client.request["observation"]  # the request went through the shared slot
        tensor([1., 1., 1.])
        >>> out["action"].shape
        torch.Size([2])
    """

    def __init__(
        self,
        transport: SharedMemoryTransport | None,
        client_id: int,
        request: TensorDictBase,
        submit_conn: Connection,
        response_conn: Connection,
        state: torch.Tensor,
        error: torch.Tensor,
        copy_result: bool,
        poll_interval: float,
    ) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.client_id = client_id
        self.request = request
        self.response: TensorDictBase | None = None
        self._request_leaves = _leaves(request)
        self._submit_conn = submit_conn
        self._response_conn = response_conn
        self._state = state
        self._error = error
        self._copy_result = copy_result
        self._poll_interval = poll_interval
        self._id_bytes = array("i", [client_id]).tobytes()
        self._in_flight = False
        self._setup()

    def _setup(self) -> None:
        # what a process rebuilds after unpickling: a poller and views (cheaper than tensors)
        self._handle = SharedMemoryHandle(self)
        self._state_view = self._state.numpy()
        self._submit_fd = self._submit_conn.fileno()
        self._response_fd = self._response_conn.fileno()
        self._poller = select.poll()
        self._poller.register(self._response_fd, select.POLLIN)
        self._checks = [(key, slot, slot.shape, slot.dtype) for key, slot in self._request_leaves]

    def __getstate__(self) -> dict[str, Any]:
        if self.response is None:
            raise RuntimeError(
                f"SharedMemoryTransport client {self.client_id} has no response layout yet: "
                "build the InferenceServer on its transport first (it runs the policy once on "
                "the example), or pass response_spec= to transport.client()"
            )
        state = self.__dict__.copy()
        state["transport"] = None  # the server's side stays with the server
        state["_in_flight"] = False
        for name in ("_handle", "_state_view", "_poller", "_checks", "_submit_fd", "_response_fd"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    def submit(self, td: TensorDictBase) -> SharedMemoryHandle:
        """Copies ``td`` into the request slot and signals the server.

        Args:
            td: the request; it must hold every entry of the slot's layout with the same
                shape and dtype (other entries are ignored).

        Returns:
            A handle whose ``result(timeout=None)`` gives the response.
        """
        if self._in_flight:
            raise RuntimeError(
                f"SharedMemoryTransport client {self.client_id} already has a request in "
                "flight: take its result first (one request in flight per client)"
            )
        if not isinstance(td, TensorDictBase):
            raise TypeError(f"a request must be a TensorDictBase, got {type(td).__name__}")
        for key, slot, shape, dtype in self._checks:
            value = td.get(key, None)
            if value is None:
                raise KeyError(
                    f"the request lacks {key!r}: SharedMemoryTransport client "
                    f"{self.client_id} expects the keys {[k for k, _ in self._request_leaves]}"
                )
            if value.shape != shape or value.dtype != dtype:
                raise ValueError(
                    f"request entry {key!r}: SharedMemoryTransport client {self.client_id} "
                    f"expects shape {tuple(slot.shape)} and {slot.dtype}, got shape "
                    f"{tuple(value.shape)} and {value.dtype}"
                )
            slot.copy_(value)
        if self._state_view[0] == _STOPPED:
            raise ServerGoneError(self._stopped_message())
        os.write(self._submit_fd, self._id_bytes)
        self._in_flight = True
        return self._handle

    def response_ready(self) -> bool:
        """Whether the response to the request in flight is there."""
        return self._in_flight and bool(self._poller.poll(0))

    def wait_response(self, timeout: float | None = None) -> TensorDictBase:
        """Blocks until the response to the request in flight is there; see :meth:`submit`.

        Args:
            timeout: the longest wait in seconds; ``None`` waits as long as the server lives.

        Returns:
            The response.
        """
        if not self._in_flight:
            raise RuntimeError(f"SharedMemoryTransport client {self.client_id} has no request")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = self._poll_interval
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            if self._poller.poll(wait * 1000):
                code = os.read(self._response_fd, 1)
                self._in_flight = False
                if code == _OK:
                    assert self.response is not None
                    return self.response.clone() if self._copy_result else self.response
                if code in (_GONE, b""):  # b"": every write end closed
                    raise ServerGoneError(self._stopped_message())
                raise RuntimeError(
                    f"the inference server failed on the request of client {self.client_id}: "
                    f"{self._error_message()}"
                )
            self._check_server()
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"no response for SharedMemoryTransport client {self.client_id} within "
                    f"{timeout} s (the request stays in flight: call result() again)"
                )

    def _check_server(self) -> None:
        state, pid = int(self._state_view[0]), int(self._state_view[1])
        if state == _STOPPED and not self._poller.poll(0):
            self._in_flight = False
            raise ServerGoneError(self._stopped_message())
        if not pid_alive(pid):
            self._in_flight = False
            who = "inference server process" if state == _SERVING else "transport's owner"
            raise ServerGoneError(
                f"the {who} (pid {pid}) died before answering client {self.client_id}"
            )

    def _error_message(self) -> str:
        raw = bytes(self._error.tolist())
        return raw.rstrip(b"\x00").decode("utf-8", errors="replace")

    def _stopped_message(self) -> str:
        message = self._error_message()
        if message:
            return f"the inference server died: {message}"
        return "the inference server was shut down"


class SharedMemoryTransport(InferenceTransport):
    """Transport for clients in other processes: requests and responses in shared memory.

    Each client gets, at :meth:`client` time, a request slot and a response slot: TensorDicts
    in shared memory with a fixed layout (keys, shapes, dtypes; the batch size ``[B]`` may
    differ between clients). A request is copied into the slot and only the client's id (4
    bytes) travels, through one pipe shared by all clients; the server writes the response
    into the response slot and one byte into the client's own pipe. Nothing is pickled per
    request. Each client has at most one request in flight.

    Layouts are known before the workers start. The request layout is the ``example`` passed
    to :meth:`client`. The response layout is either ``response_spec`` or, by default, probed:
    the :class:`InferenceServer` built on this transport runs its policy once on each distinct
    request layout (at its construction, or at :meth:`client` for clients made later) and the
    slot holds the entries the policy wrote (those not in the request) plus the policy version.

    Clients are picklable while a process is being started (pass them as ``Process``
    arguments; ``fork`` and ``spawn`` both work). A waiting client looks at the server every
    ``poll_interval`` seconds and raises :class:`RuntimeError` once it stopped or its process
    died. :meth:`close` (called by the server's shutdown) frees the slots and pipes.

    Keyword Args:
        copy_result: return a copy of the response slot (``True``) or the slot itself, which
            the next request of the client overwrites.
        poll_interval: seconds between two looks at the server while a client waits.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules.inference_server import InferenceServer, SharedMemoryTransport
        >>> policy = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action"])
        >>> transport = SharedMemoryTransport()
        >>> example = TensorDict(observation=torch.zeros(4, 3), batch_size=[4])
        >>> client = transport.client(example=example)
        >>> with InferenceServer(policy, transport):  # probes the response layout
        ...     out = client(example)  # in a worker process, in real use
        >>> sorted(out.keys())
        ['action', 'policy_version']
    """

    def __init__(self, *, copy_result: bool = True, poll_interval: float = 0.5) -> None:
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be > 0, got {poll_interval}")
        self.copy_result = copy_result
        self.poll_interval = poll_interval
        self._requests_in, self._requests_out = mp.Pipe(duplex=False)
        # [state, pid]: the server's pid once it serves, the creator's before
        self._state = torch.zeros(2, dtype=torch.int64)
        self._state.share_memory_()
        self._state[1] = os.getpid()
        self._error = torch.zeros(_ERROR_BYTES, dtype=torch.uint8)
        self._error.share_memory_()
        self._slots: list[_ServerSlot] = []
        self._pending: deque[int] = deque()
        self._frozen: str | None = None
        self._closed = False
        self._lock = threading.Lock()
        # the creating process only: the clients and the server's probe
        self._clients: list[SharedMemoryClient] = []
        self._probe: Callable[[TensorDictBase], TensorDictBase] | None = None
        self._probed: dict[tuple, TensorDictBase] = {}
        self._setup()

    def _setup(self) -> None:
        self._requests_fd = self._requests_in.fileno()
        self._poller = select.poll()
        self._poller.register(self._requests_fd, select.POLLIN)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_clients", "_probe", "_probed", "_lock", "_poller", "_requests_fd"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._clients = []
        self._probe = None
        self._probed = {}
        self._lock = threading.Lock()
        self._setup()

    @property
    def num_clients(self) -> int:
        """How many clients :meth:`client` made."""
        return len(self._slots)

    def client(
        self,
        example: TensorDictBase | None = None,
        *,
        request_spec: TensorDictBase | None = None,
        response_spec: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> SharedMemoryClient:
        """Makes a client whose requests have the layout of ``example``.

        Args:
            example: a representative request (CPU tensors); its values are not kept.

        Keyword Args:
            request_spec: the same as ``example`` (TorchRL's name); give one of the two.
            response_spec: a representative response (every entry the client gets back,
                the policy version included); by default the server probes it.
            **kwargs: none accepted.

        Returns:
            A :class:`SharedMemoryClient`.
        """
        if kwargs:
            raise TypeError(f"SharedMemoryTransport.client takes no options {sorted(kwargs)}")
        if (example is None) == (request_spec is None):
            raise ValueError(
                "SharedMemoryTransport.client needs the request layout: pass example= "
                "(or request_spec=), exactly one of them"
            )
        example = example if example is not None else request_spec
        if not isinstance(example, TensorDictBase):
            raise TypeError(f"example must be a TensorDictBase, got {type(example).__name__}")
        if self._frozen is not None:
            raise RuntimeError(f"no client can be added to this transport: {self._frozen}")
        if self._closed:
            raise RuntimeError("this SharedMemoryTransport is closed")
        request = _layout(example, "request")
        response_in, response_out = mp.Pipe(duplex=False)
        slot = _ServerSlot(request, response_out)
        with self._lock:
            client_id = len(self._slots)
            self._slots.append(slot)
            client = SharedMemoryClient(
                self,
                client_id,
                request,
                self._requests_out,
                response_in,
                self._state,
                self._error,
                self.copy_result,
                self.poll_interval,
            )
            self._clients.append(client)
        if response_spec is not None:
            self._set_response(client_id, _layout(response_spec, "response_spec"))
        elif self._probe is not None:
            self._probe_client(client_id, example)
        else:
            # kept until a server binds: it probes then
            client._example = example.detach().clone()  # type: ignore[attr-defined]
        return client

    def bind_server(self, probe: Callable[[TensorDictBase], TensorDictBase]) -> None:
        """Probes the response layout of every client that lacks one; see the class doc.

        Args:
            probe: maps an example request to the server's response.
        """
        self._probe = probe
        for client in list(self._clients):
            example = getattr(client, "_example", None)
            if client.response is None and example is not None:
                self._probe_client(client.client_id, example)
                del client._example  # type: ignore[attr-defined]

    def freeze(self, reason: str) -> None:
        """Forbids new clients from now on (a server process got the transport).

        Args:
            reason: said by the error :meth:`client` raises.
        """
        self._frozen = reason

    def _probe_client(self, client_id: int, example: TensorDictBase) -> None:
        assert self._probe is not None
        key = _signature(example)
        layout = self._probed.get(key)
        if layout is None:
            out = self._probe(example.detach().clone())
            request_keys = {k for k, _ in _leaves(example)}
            new_keys = [k for k, _ in _leaves(out) if k not in request_keys]
            if not new_keys:
                raise ValueError(
                    "the policy wrote no entry that the request lacks: nothing to send back "
                    f"(its output keys: {[k for k, _ in _leaves(out)]})"
                )
            # a server whose policy runs on a GPU answers with GPU tensors: the slots are
            # shared CPU memory, and resolve() copies each answer into them
            layout = out.select(*new_keys).to("cpu")
            self._probed[key] = layout
        self._set_response(client_id, _layout(layout, "response"))

    def _set_response(self, client_id: int, response: TensorDictBase) -> None:
        slot = self._slots[client_id]
        if response.batch_size != slot.request.batch_size:
            raise ValueError(
                f"the response layout has batch size {tuple(response.batch_size)}, the "
                f"request {tuple(slot.request.batch_size)}: they must be equal"
            )
        slot.set_response(response)
        if client_id < len(self._clients):
            self._clients[client_id].response = response

    # ---- server side
    def submit(self, td: TensorDictBase) -> SharedMemoryHandle:  # noqa: D102
        raise RuntimeError(
            "SharedMemoryTransport requests go through a client: use transport.client(example=td)"
        )

    def _read_ids(self) -> None:
        data = os.read(self._requests_fd, _ID_BYTES * _READ_IDS)
        for client_id in array("i", data):
            if client_id != _WAKE:
                self._pending.append(client_id)

    def wait_for_work(self, timeout: float) -> bool:  # noqa: D102
        if self._pending:
            return True
        if self._poller.poll(timeout * 1000):
            self._read_ids()
        return bool(self._pending)

    def drain(self, max_items: int) -> tuple[list[TensorDictBase], list[Any]]:  # noqa: D102
        if self._poller.poll(0):
            self._read_ids()
        requests: list[TensorDictBase] = []
        ids: list[int] = []
        rows = 0
        pending = self._pending
        while pending:
            slot = self._slots[pending[0]]
            if requests and rows + slot.rows > max_items:
                break
            ids.append(pending.popleft())
            requests.append(slot.request)
            rows += slot.rows
        return requests, ids

    def resolve(self, callback: Any, result: TensorDictBase) -> None:  # noqa: D102
        slot = self._slots[callback]
        try:
            for key, dst in slot.response_leaves:
                dst.copy_(result.get(key))
        except Exception as exc:  # noqa: BLE001 - reported to the client instead
            self.resolve_exception(
                callback,
                RuntimeError(
                    f"the policy's output does not fit client {callback}'s response slot "
                    f"{[k for k, _ in slot.response_leaves]}: {exc}"
                ),
            )
            return
        self._respond(slot, _OK)

    def resolve_rows(
        self, callback: Any, leaves: dict[NestedKey, torch.Tensor], start: int, stop: int
    ) -> None:
        """Answers a request with rows ``start:stop`` of a batch's output leaves.

        The server's fast path: the same as :meth:`resolve` with that slice of the output,
        without building a TensorDict for it.

        Args:
            callback: the request's handle from :meth:`drain`.
            leaves: the batch output's leaves by key.
            start: the request's first row in the batch.
            stop: the row after its last.
        """
        slot = self._fill(callback, leaves, start, stop)
        if slot is not None:
            self._respond(slot, _OK)

    def _fill(
        self, callback: Any, leaves: dict[NestedKey, torch.Tensor], start: int, stop: int
    ) -> _ServerSlot | None:
        """Copies rows ``start:stop`` of ``leaves`` into the request's response slot; returns
        the slot, or ``None`` after reporting an output that does not fit to the client."""
        slot = self._slots[callback]
        try:
            for key, dst in slot.response_leaves:
                dst.copy_(leaves[key][start:stop])
        except Exception as exc:  # noqa: BLE001 - reported to the client instead
            self.resolve_exception(
                callback,
                RuntimeError(
                    f"the policy's output does not fit client {callback}'s response slot "
                    f"{[k for k, _ in slot.response_leaves]}: {exc}"
                ),
            )
            return None
        return slot

    def resolve_rows_batch(
        self, callbacks: list[Any], leaves: dict[NestedKey, torch.Tensor], sizes: list[int]
    ) -> None:
        """Answers every request of a batch: :meth:`resolve_rows` for each, signals last.

        Each client's rows are copied into its response slot first, then every client is
        signalled, back to back: a client woken by the first signal may take this CPU from the
        server (on a busy machine), and the others then do not wait for the server to be
        scheduled again.

        Args:
            callbacks: the requests' handles from :meth:`drain`, in batch order.
            leaves: the batch output's leaves by key.
            sizes: the rows of each request, in batch order.
        """
        ready: list[_ServerSlot] = []
        start = 0
        for callback, size in zip(callbacks, sizes, strict=True):
            slot = self._fill(callback, leaves, start, start + size)
            if slot is not None:
                ready.append(slot)
            start += size
        for slot in ready:
            self._respond(slot, _OK)

    def resolve_exception(self, callback: Any, exc: BaseException) -> None:  # noqa: D102
        self._write_error(f"{type(exc).__name__}: {exc}")
        self._respond(self._slots[callback], _ERROR)

    def _respond(self, slot: _ServerSlot, code: bytes) -> None:
        try:
            os.write(slot.respond.fileno(), code)
        except OSError:  # closed by close(): the client sees the stopped state
            pass

    def _write_error(self, message: str) -> None:
        raw = message.encode("utf-8", errors="replace")[: _ERROR_BYTES - 1]
        self._error.zero_()
        if raw:
            self._error[: len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)

    def wake(self) -> None:  # noqa: D102
        if not self._closed:
            try:
                os.write(self._requests_out.fileno(), array("i", [_WAKE]).tobytes())
            except OSError:
                pass

    def server_started(self) -> None:  # noqa: D102
        self._error.zero_()
        self._state[1] = os.getpid()
        self._state[0] = _SERVING

    def server_stopped(self, error: BaseException | None = None) -> None:  # noqa: D102
        if error is not None:
            self._write_error(f"{type(error).__name__}: {error}")
        self._state[0] = _STOPPED
        if self._closed:
            return
        # the requests read but not served, and those still in the pipe, fail at once
        while self._poller.poll(0):
            self._read_ids()
        while self._pending:
            self._respond(self._slots[self._pending.popleft()], _GONE)

    def close(self) -> None:
        """Marks the server stopped and closes the pipes; the slots are freed with the clients."""
        if self._closed:
            return
        self._state[0] = _STOPPED
        self._closed = True
        for conn in (self._requests_in, self._requests_out):
            conn.close()
        for slot in self._slots:
            slot.respond.close()
        self._slots = []
        self._pending.clear()
        self._probed.clear()
