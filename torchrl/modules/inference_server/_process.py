"""The inference server in a dedicated process, with weights updated through shared memory."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
import weakref
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from torchrl._keys import POLICY_VERSION
from torchrl._processes import default_start_method, describe_exit, stop_processes, watch_parent
from torchrl.modules.inference_server._mp import MPTransport
from torchrl.modules.inference_server._server import (
    InferenceDeviceConfig,
    InferenceServer,
    InferenceServerConfig,
    weights_of,
)
from torchrl.modules.inference_server._shared_memory import SharedMemoryTransport
from torchrl.modules.inference_server._threading import ThreadingTransport
from torchrl.modules.inference_server._transport import InferenceTransport, ServerGoneError

__all__ = ["ProcessInferenceServer"]


def _server_process(
    policy_factory: Callable[[], Any],
    transport: InferenceTransport,
    options: dict[str, Any],
    conn: Connection,
    weights: TensorDictBase | None,
    version: torch.Tensor,
    parent_pid: int,
    num_threads: int,
) -> None:
    """The server process: builds the policy, serves, and obeys the parent's commands."""
    watch_parent(parent_pid)
    torch.set_num_threads(num_threads)
    try:
        policy = policy_factory()
        server = InferenceServer(policy, transport, **options)
        # the serving thread writes each new version there (weight updates and those a
        # weight_sync scheme delivered) before it serves with it: the parent never reads a
        # version older than the data it got; only that thread writes it from now on
        version[0] = server.policy_version
        server._version_mirror = version
        server.start()
    except BaseException:  # noqa: BLE001 - sent to the parent
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    try:
        while True:
            if not conn.poll(0.05):
                if not server.is_alive:
                    conn.send(("died", repr(server.error)))
                    return
                continue
            try:
                command = conn.recv()
            except EOFError:  # the parent is gone
                break
            if command == "stop":
                break
            if command == "weights":
                assert weights is not None
                try:
                    server.update_weights(weights, wait=True)
                except BaseException:  # noqa: BLE001
                    conn.send(("error", traceback.format_exc()))
                    continue
                conn.send(("ok", server.policy_version))
            elif command == "stats":
                conn.send(("ok", server.stats()))
    finally:
        server.shutdown()
        try:
            conn.send(("stopped", None))
        except (OSError, ValueError):
            pass


def _stop_server_process(proc: Any, conn: Connection, timeout: float) -> None:
    """Asks the server process to stop, then joins it (terminating it if it does not stop)."""
    if proc.is_alive():
        try:
            conn.send("stop")
            deadline = time.monotonic() + timeout
            while proc.is_alive() and time.monotonic() < deadline:
                if conn.poll(0.1) and conn.recv()[0] == "stopped":
                    break
        except (OSError, EOFError, ValueError):
            pass
    stop_processes([proc], 5.0)
    conn.close()


class ProcessInferenceServer:
    """Runs an :class:`InferenceServer` in its own process; the policy is built there.

    The transport's clients (made before :meth:`start`) are served by the server process:
    a :class:`SharedMemoryTransport` or an :class:`MPTransport`. ``policy_factory`` is
    called once in this process too: that copy gives the response layouts of the
    shared-memory clients and the layout of the shared weight buffer. :meth:`update_weights`
    copies the weights into that buffer and has the server load them between two batches;
    :attr:`policy_version` reads the version the server serves. If the server process dies,
    clients raise :class:`RuntimeError` within their transport's poll interval, and so do
    this object's methods.

    Keyword Args:
        policy_factory: a picklable callable returning the policy.
        transport: a :class:`SharedMemoryTransport` or :class:`MPTransport`.
        max_batch_size: see :class:`InferenceServer`.
        min_batch_size: see :class:`InferenceServer`.
        timeout: see :class:`InferenceServer`.
        collate_fn: see :class:`InferenceServer` (picklable).
        device: see :class:`InferenceServer`.
        weight_sync: see :class:`InferenceServer` (picklable; polled in the server process).
        weight_sync_model_id: see :class:`InferenceServer`.
        policy_version: see :class:`InferenceServer`.
        policy_version_key: see :class:`InferenceServer`.
        exploration_type: see :class:`InferenceServer`.
        server_config: see :class:`InferenceServer`.
        device_config: see :class:`InferenceServer`.
        mp_context: the start method (or context) of the server process (default: fork on
            Linux without CUDA, else spawn).
        startup_timeout: seconds the server process has to build the policy and start.
        num_threads: torch threads of the server process.

    Examples:
        >>> import functools
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules.inference_server import (
        ...     ProcessInferenceServer, SharedMemoryTransport)
        >>> factory = functools.partial(  # picklable
        ...     TensorDictModule, torch.nn.Linear(3, 2), in_keys=["observation"], out_keys=["action"])
        >>> transport = SharedMemoryTransport()
        >>> request = TensorDict(observation=torch.ones(2, 3), batch_size=[2])
        >>> client = transport.client(example=request)
        >>> with ProcessInferenceServer(policy_factory=factory, transport=transport) as server:
        ...     server.update_weights(TensorDict.from_module(factory()).apply(torch.ones_like))
        ...     out = client(request)
        >>> out["action"].tolist(), out["policy_version"].tolist(), server.policy_version
        ([[4.0, 4.0], [4.0, 4.0]], [1, 1], 1)
    """

    def __init__(
        self,
        *,
        policy_factory: Callable[[], nn.Module | Callable[[TensorDictBase], TensorDictBase]],
        transport: InferenceTransport,
        max_batch_size: int = 64,
        min_batch_size: int = 1,
        timeout: float = 0.01,
        collate_fn: Callable[[list[TensorDictBase]], TensorDictBase] | None = None,
        device: torch.device | str | None = None,
        weight_sync: Any = None,
        weight_sync_model_id: str = "policy",
        policy_version: int = 0,
        policy_version_key: NestedKey | None = POLICY_VERSION,
        exploration_type: Any = None,
        server_config: InferenceServerConfig | None = None,
        device_config: InferenceDeviceConfig | None = None,
        mp_context: str | BaseContext | None = None,
        startup_timeout: float = 60.0,
        num_threads: int = 1,
    ) -> None:
        if not callable(policy_factory):
            raise TypeError(f"policy_factory must be callable, got {type(policy_factory).__name__}")
        if isinstance(transport, (ThreadingTransport,)) or not isinstance(
            transport, (SharedMemoryTransport, MPTransport)
        ):
            raise TypeError(
                "ProcessInferenceServer serves clients of a SharedMemoryTransport or an "
                f"MPTransport, got {type(transport).__name__}"
            )
        self.policy_factory = policy_factory
        self.transport = transport
        self._options: dict[str, Any] = {
            "max_batch_size": max_batch_size,
            "min_batch_size": min_batch_size,
            "timeout": timeout,
            "collate_fn": collate_fn,
            "device": device,
            "weight_sync": weight_sync,
            "weight_sync_model_id": weight_sync_model_id,
            "policy_version": policy_version,
            "policy_version_key": policy_version_key,
            "exploration_type": exploration_type,
            "server_config": server_config,
            "device_config": device_config,
        }
        # the local copy: response layouts (probed here) and the weight buffer's layout
        self._local_policy = policy_factory()
        prober = InferenceServer(self._local_policy, ThreadingTransport(), **self._options)
        transport.bind_server(prober.probe)
        self._weights: TensorDictBase | None = None
        if isinstance(self._local_policy, nn.Module):
            self._weights = weights_of(self._local_policy).detach().clone()
            self._weights.share_memory_()
        self._version = torch.full((1,), prober.policy_version, dtype=torch.int64)
        self._version.share_memory_()
        if mp_context is None:
            mp_context = default_start_method()
        self._ctx: Any = mp.get_context(mp_context) if isinstance(mp_context, str) else mp_context
        self.startup_timeout = startup_timeout
        self.num_threads = num_threads
        self._proc: Any = None
        self._conn: Connection | None = None
        self._closed = False
        # a "weights" command sent with wait=False whose reply was not read yet: the shared
        # weight buffer must not be overwritten before the server copied it
        self._unacked = False

    def start(self) -> ProcessInferenceServer:
        """Starts the server process and waits until it serves.

        Returns:
            The server itself.
        """
        if self._proc is not None or self._closed:
            raise RuntimeError("a ProcessInferenceServer starts once")
        freeze = getattr(self.transport, "freeze", None)
        if freeze is not None:
            freeze("its ProcessInferenceServer started: make every client before start()")
        parent_conn, child_conn = self._ctx.Pipe()
        self._conn = parent_conn
        self._proc = self._ctx.Process(
            target=_server_process,
            args=(
                self.policy_factory,
                self.transport,
                self._options,
                child_conn,
                self._weights,
                self._version,
                os.getpid(),
                self.num_threads,
            ),
            name="torchrl-inference-server",
            daemon=True,
        )
        self._proc.start()
        child_conn.close()
        # stops the process if this object is dropped without shutdown()
        self._finalizer = weakref.finalize(
            self, _stop_server_process, self._proc, parent_conn, 10.0
        )
        try:
            kind, payload = self._receive(self.startup_timeout, "start")
        except BaseException:
            self._stop_process()
            raise
        if kind != "ready":
            self._stop_process()
            raise RuntimeError(f"the inference server process failed to start:\n{payload}")
        return self

    def __enter__(self) -> ProcessInferenceServer:
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def pid(self) -> int | None:
        """The server process's pid (``None`` before :meth:`start`)."""
        return None if self._proc is None else self._proc.pid

    @property
    def is_alive(self) -> bool:
        """Whether the server process runs."""
        return self._proc is not None and self._proc.is_alive()

    @property
    def policy_version(self) -> int:
        """The version of the weights the server process serves."""
        return int(self._version[0])

    def _receive(self, timeout: float, doing: str) -> tuple[str, Any]:
        assert self._conn is not None and self._proc is not None
        deadline = time.monotonic() + timeout
        while not self._conn.poll(0.1):
            if not self._proc.is_alive():
                if self._conn.poll(0):
                    break
                raise ServerGoneError(
                    f"the inference server process (pid {self._proc.pid}) died "
                    f"({describe_exit(self._proc.exitcode)}) during {doing}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"the inference server process did not {doing} in {timeout} s")
        try:
            return self._conn.recv()
        except EOFError:
            raise ServerGoneError(
                f"the inference server process (pid {self._proc.pid}) died during {doing}"
            ) from None

    def _command(self, command: str, timeout: float, wait: bool = True) -> Any:
        if self._proc is None or self._closed:
            raise RuntimeError("the ProcessInferenceServer is not running")
        self.check_alive()
        assert self._conn is not None
        self._take_ack(timeout)
        self._conn.send(command)
        if not wait:
            self._unacked = True
            return None
        return self._reply(command, timeout)

    def _reply(self, command: str, timeout: float) -> Any:
        kind, payload = self._receive(timeout, command)
        if kind == "died":
            raise ServerGoneError(f"the inference server died in its process: {payload}")
        if kind != "ok":
            raise RuntimeError(f"the inference server process failed on {command!r}:\n{payload}")
        return payload

    def _take_ack(self, timeout: float) -> None:
        """Reads the reply of a weight update sent without waiting (it is usually there)."""
        if self._unacked:
            self._unacked = False
            self._reply("weights", timeout)

    def check_alive(self) -> None:
        """Raises :class:`RuntimeError` if the server process died."""
        if self._proc is not None and not self._proc.is_alive() and not self._closed:
            raise ServerGoneError(
                f"the inference server process (pid {self._proc.pid}) died "
                f"({describe_exit(self._proc.exitcode)})"
            )

    def update_weights(self, weights: Any, *, wait: bool = True, timeout: float = 30.0) -> None:
        """Has the server serve ``weights`` from its next batch on; bumps :attr:`policy_version`.

        Args:
            weights: an ``nn.Module``, a state dict or a TensorDict of weights.

        Keyword Args:
            wait: block until the server applied them. With ``False`` the call returns once
                the weights are in the shared buffer and the server was told: requests served
                meanwhile may still get the previous weights, and :attr:`policy_version`
                changes once the server applied them. The next call (or any other command)
                first waits for that update to be applied, so the buffer is never overwritten
                while the server copies it.
            timeout: seconds to wait for the server to apply them.
        """
        if self._weights is None:
            raise TypeError("update_weights needs a policy_factory that builds an nn.Module")
        self.check_alive()
        # the previous update must have left the shared buffer before it is written again
        self._take_ack(timeout)
        local = self._local_policy
        assert isinstance(local, nn.Module)
        if isinstance(weights, nn.Module):
            weights = weights_of(weights)
        if isinstance(weights, Mapping) and not isinstance(weights, TensorDictBase):
            local.load_state_dict(weights)  # raises on a mismatch, naming the keys
            weights = weights_of(local)
        if not isinstance(weights, TensorDictBase):
            raise TypeError(
                "weights must be an nn.Module, a state dict or a TensorDict, got "
                f"{type(weights).__name__}"
            )
        src, dst = set(weights.keys(True, True)), set(self._weights.keys(True, True))
        if src != dst:
            raise KeyError(
                f"weights do not match the policy: missing {sorted(dst - src, key=str)}, "
                f"unexpected {sorted(src - dst, key=str)}"
            )
        with torch.no_grad():
            self._weights.update_(weights)
        self._command("weights", timeout, wait=wait)

    def stats(self) -> dict[str, float]:
        """The server's counters (see :meth:`InferenceServer.stats`)."""
        return self._command("stats", 10.0)

    def _stop_process(self) -> None:
        if self._proc is not None:
            stop_processes([self._proc], 5.0)
        if self._conn is not None:
            self._conn.close()
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer.detach()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stops the server process and closes the transport. Idempotent.

        Args:
            timeout: seconds the process has to stop before it is terminated.
        """
        if self._closed:
            return
        self._closed = True
        if self._proc is not None and self._conn is not None:
            self._finalizer.detach()
            _stop_server_process(self._proc, self._conn, timeout)
        self.transport.close()
