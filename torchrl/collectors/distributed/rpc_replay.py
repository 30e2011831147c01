"""``RPCReplayBuffer``: one replay buffer hosted in an RPC worker, shared by collectors and trainer.

The buffer object lives in a single process (the *host*, an RPC worker called ``"replay_buffer"``
by default). Every other process holds a light client whose methods are forwarded with
``torch.distributed.rpc.rpc_sync`` to module-level functions that look the buffer up in a
registry of the host process.

With ``launcher="mp"`` the class starts the host itself (a ``spawn`` process) and forms a static
RPC group of ``2 + num_clients`` workers: the host (rank 0, it owns the rendezvous store), the
creating process (rank 1, ``client_name``) and one worker per :meth:`RPCReplayBuffer.client`
handle (ranks 2, 3, ...). Static groups are the well-tested path of ``torch.distributed.rpc``:
the dynamic mode (``world_size=None``) deadlocked here when one client joined while another
left. The price is that RPC starts lazily, at the first call of a process, and that first call
waits until every member of the group has made its own first call.
With ``launcher=None`` the class attaches to an RPC group the user already initialised (or
initialises this process from ``rank``/``world_size``/``init_method``) and builds the buffer in
the existing worker called ``name``.

Network exposure (``launcher="mp"``): RPC unpickles every call it receives, so whoever reaches
an RPC agent runs code in it; there is no way to authenticate torch RPC messages. What the class
starts therefore listens on loopback only: the rendezvous store is bound to ``127.0.0.1``
(``torchrl-tcp://`` rendezvous, registered here), the TensorPipe agents use the shared-memory
transport only (no TCP port), and the gloo group RPC builds to start a static group binds to the
loopback interface.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlparse

from torchrl._types import IndexLike, ReplayBufferLike

if TYPE_CHECKING:
    from pathlib import Path

    import torch

    from torchrl.data.replay_buffers.utils import Index

__all__ = ["RPCReplayBuffer"]

# Host side: buffers served by this process, by id.
_REGISTRY: dict[str, Any] = {}
_STOP = threading.Event()
# Client side: whether this process joined RPC through a buffer (then it leaves it too).
_JOINED: dict[str, Any] = {"by_us": False}


#: Rendezvous scheme whose master store listens on the URL's host only (torch's ``tcp://``
#: store listens on every interface).
_SCHEME = "torchrl-tcp"
_REGISTER_LOCK = threading.Lock()
_ENV_LOCK = threading.Lock()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bound_rendezvous(url: str, timeout: timedelta = timedelta(seconds=300), **kwargs: Any) -> Any:
    """``torchrl-tcp://host:port?rank=r&world_size=n``: rank 0 hosts a store bound to ``host``."""
    import torch.distributed as dist

    from torchrl.collectors.distributed.utils import listening_store

    parsed = urlparse(url)
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    if parsed.hostname is None or parsed.port is None or "rank" not in query:
        raise ValueError(f"{_SCHEME}:// rendezvous: host, port and rank are needed, got {url!r}")
    rank = int(query["rank"])
    world_size = int(query.get("world_size", -1))
    if rank == 0:
        store = listening_store(parsed.hostname, parsed.port, world_size, timeout)
    else:
        store = dist.TCPStore(parsed.hostname, parsed.port, world_size, timeout=timeout)
    yield (store, rank, world_size)
    raise RuntimeError(f"{_SCHEME}:// rendezvous: a group cannot rendezvous twice")


def _register_rendezvous() -> None:
    from torch.distributed.rendezvous import register_rendezvous_handler

    with _REGISTER_LOCK:
        with contextlib.suppress(RuntimeError):  # already registered in this process
            register_rendezvous_handler(_SCHEME, _bound_rendezvous)


def _loopback_interface() -> str:
    for _, name in socket.if_nameindex():
        if name.startswith("lo"):
            return name
    raise RuntimeError("RPCReplayBuffer: this machine has no loopback network interface")


@contextlib.contextmanager
def _gloo_on_loopback(local: bool) -> Iterator[None]:
    """While RPC starts a static group, it builds a gloo group with gloo's default device,
    which listens on the address of the host name: ``GLOO_SOCKET_IFNAME`` is the only switch.
    Set for the duration of the start only, and restored."""
    if not local:
        yield
        return
    with _ENV_LOCK:
        old = os.environ.get("GLOO_SOCKET_IFNAME")
        os.environ["GLOO_SOCKET_IFNAME"] = _loopback_interface()
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("GLOO_SOCKET_IFNAME", None)
            else:
                os.environ["GLOO_SOCKET_IFNAME"] = old


def _options(
    init_method: str, rpc_timeout: float, num_worker_threads: int, local: bool = False
) -> Any:
    """RPC options; ``local``: one machine, TensorPipe over shared memory only (no TCP port)."""
    from torch.distributed import rpc

    extra: dict[str, Any] = {}
    if local:
        _register_rendezvous()
        extra = {"_transports": ["shm"], "_channels": ["basic"]}
    return rpc.TensorPipeRpcBackendOptions(
        init_method=init_method,
        rpc_timeout=rpc_timeout,
        num_worker_threads=num_worker_threads,
        **extra,
    )


def _rpc_initialized() -> bool:
    from torch.distributed.rpc.api import _is_current_rpc_agent_set

    return bool(_is_current_rpc_agent_set())


#: Public names of the helpers above, shared with the RPC collector
#: (:mod:`torchrl.collectors.distributed.rpc`).
RENDEZVOUS_SCHEME = _SCHEME
free_loopback_port = _free_port
gloo_on_loopback = _gloo_on_loopback
rpc_backend_options = _options
rpc_initialized = _rpc_initialized


# ----------------------------------------------------------------- functions run on the host
def _host_create(buffer_id: str, cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    if buffer_id not in _REGISTRY:
        _REGISTRY[buffer_id] = cls(*args, **kwargs)
    return len(_REGISTRY[buffer_id])


def _host_call(buffer_id: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        buffer = _REGISTRY[buffer_id]
    except KeyError:
        raise KeyError(f"RPCReplayBuffer: no buffer {buffer_id!r} on this host") from None
    if method == "__len__":
        return len(buffer)
    return getattr(buffer, method)(*args, **kwargs)


def _host_release(buffer_id: str) -> None:
    _REGISTRY.pop(buffer_id, None)


def _host_stop() -> None:
    _STOP.set()


def _host_main(
    name: str,
    world_size: int,
    init_method: str,
    rpc_timeout: float,
    num_worker_threads: int,
    buffer_id: str,
    cls: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    parent_pid: int,
    temp_dir: str | None = None,
) -> None:
    """Body of the host process started by ``launcher="mp"``: serve until told to stop.

    The host ends within a second of its parent's death, whatever it is doing (waiting for
    the group, serving a call), and removes ``temp_dir`` (its multiprocessing temp dir, made
    by the parent): see :func:`torchrl._processes.watch_parent`.
    """
    from torchrl._processes import use_temp_dir, watch_parent

    if temp_dir is not None:
        use_temp_dir(temp_dir)
    watch_parent(parent_pid, cleanup=(temp_dir,) if temp_dir is not None else ())
    import torch
    from torch.distributed import rpc

    torch.set_num_threads(1)
    # Built before joining, so a bad argument fails the process before anyone waits on it.
    try:
        _host_create(buffer_id, cls, args, kwargs)
    except Exception as err:
        raise RuntimeError(
            f"RPCReplayBuffer: the host {name!r} (rank 0, pid {os.getpid()}) could not build "
            f"its buffer: {err!r}"
        ) from err
    with _gloo_on_loopback(True):
        rpc.init_rpc(
            name,
            rank=0,
            world_size=world_size,
            rpc_backend_options=_options(init_method, rpc_timeout, num_worker_threads, True),
        )
    # RPC threads serve the buffer; this thread waits for the end (the parent watchdog ends
    # an orphaned host).
    _STOP.wait()
    # Not graceful: a graceful shutdown of a static group waits for every member's own
    # shutdown; every call here is synchronous, so nothing is in flight to lose.
    rpc.shutdown(graceful=False)


# ----------------------------------------------------------------------------- the client
class RPCReplayBuffer:
    """A replay buffer living in one RPC worker, with the local buffer's API.

    ``RPCReplayBuffer(storage=..., sampler=..., batch_size=...)`` builds
    ``replay_buffer_cls(...)`` in the host worker; :meth:`extend`, :meth:`add`,
    :meth:`sample`, :meth:`update_priority`, ``len()``, :meth:`empty`, :meth:`state_dict`,
    :meth:`load_state_dict`, :meth:`dumps` and :meth:`loads` run there through
    ``torch.distributed.rpc.rpc_sync``. Data (TensorDicts included) travels by RPC pickling:
    every call copies its arguments and its result once, which suits batches of a few MB, not a
    zero-copy path.

    ``launcher="mp"`` starts the host as a local ``spawn`` process; RPC must not be running in
    this process yet. The group is static: this process and ``num_clients`` other processes,
    each given one handle of :meth:`client` (picklable; ``client(i)`` is used by exactly one
    process), join it at their first call, and that first call returns once all of them have
    joined. ``launcher=None`` attaches to the RPC group already running in this process, or
    initialises it here from ``rank``, ``world_size`` and ``init_method`` as ``client_name``,
    and builds the buffer in the existing worker ``name`` (then pickled copies work in any
    process of that group).

    Calls and data travel by RPC, which unpickles them: with ``launcher="mp"`` everything
    listens on loopback (rendezvous store on ``127.0.0.1``, shared-memory transport, no TCP
    port for RPC itself), so only processes of this machine can reach the buffer; with
    ``launcher=None``, what listens where is decided by the RPC group you set up (torch's
    ``tcp://`` store listens on every interface): keep it on a trusted network.

    Every call waits at most ``rpc_timeout`` seconds. A host that died raises a
    :class:`RuntimeError` naming it: at once when this process started it, otherwise as soon
    as RPC reports the broken connection (or the timeout). :meth:`shutdown` stops RPC in the
    processes the class initialised it in; on the creating object it also stops the host and
    leaves no process behind. It is idempotent. A host started with ``launcher="mp"`` also
    ends by itself within a second of this process's death (SIGKILL included), even while
    serving a call, and leaves no temp dir.

    Args:
        *args: positional arguments of ``replay_buffer_cls``.
        replay_buffer_cls: the buffer class to host (default
            :class:`~torchrl.data.ReplayBuffer`).
        launcher: ``"mp"`` (start the host here) or ``None`` (attach to existing RPC).
        num_clients: (``launcher="mp"``) processes besides this one and the host that use the
            buffer (through :meth:`client`).
        name: the RPC name of the host worker.
        client_name: the RPC name this process takes when the class initialises RPC.
        rank: (``launcher=None``) this process' rank when the class initialises RPC.
        world_size: (``launcher=None``) the group size when the class initialises RPC.
        init_method: (``launcher=None``) the rendezvous address, e.g. ``"tcp://host:port"``.
        tcp_port: (``launcher="mp"``) the rendezvous port, on 127.0.0.1 only (default: a free
            one).
        rpc_timeout: seconds any call (and the start of the group) may take.
        num_worker_threads: RPC threads of each process.
        **kwargs: keyword arguments of ``replay_buffer_cls`` (``storage``, ``sampler``,
            ``writer``, ``batch_size``, ...).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.collectors.distributed import RPCReplayBuffer
        >>> from torchrl.data import LazyTensorStorage
        >>> rb = RPCReplayBuffer(storage=LazyTensorStorage(100), batch_size=4)  # doctest: +SKIP
        >>> _ = rb.extend(TensorDict(obs=torch.arange(10), batch_size=[10]))  # doctest: +SKIP
        >>> len(rb), rb.sample().shape  # doctest: +SKIP
        (10, torch.Size([4]))
        >>> rb.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        *args: Any,
        replay_buffer_cls: Callable[..., ReplayBufferLike] | None = None,
        launcher: str | None = "mp",
        num_clients: int = 0,
        name: str = "replay_buffer",
        client_name: str = "trainer",
        rank: int | None = None,
        world_size: int | None = None,
        init_method: str | None = None,
        tcp_port: int | None = None,
        rpc_timeout: float = 60.0,
        num_worker_threads: int = 4,
        **kwargs: Any,
    ) -> None:
        if launcher not in ("mp", None):
            raise ValueError(f"RPCReplayBuffer: launcher must be 'mp' or None, got {launcher!r}")
        if num_clients < 0:
            raise ValueError(f"RPCReplayBuffer: num_clients must be >= 0, got {num_clients}")
        if replay_buffer_cls is None:
            from torchrl.data import ReplayBuffer

            replay_buffer_cls = ReplayBuffer
        self.name = name
        self.rpc_timeout = float(rpc_timeout)
        self.num_worker_threads = int(num_worker_threads)
        self._buffer_id = uuid.uuid4().hex
        self._owner = True
        self._closed = False
        self._process: Any = None
        self._temp_dir: str | None = None
        self._init_method: str | None = None
        self._world_size = 0
        # (rpc name, rank) this object joins with at its first call; None: RPC is not ours.
        self._member: tuple[str, int] | None = None
        self._joined_here = False

        if launcher == "mp":
            if _rpc_initialized():
                raise RuntimeError(
                    "RPCReplayBuffer(launcher='mp'): RPC is already initialised in this "
                    "process; use launcher=None to build the buffer in an existing worker"
                )
            self._init_method = f"{_SCHEME}://127.0.0.1:{tcp_port or _free_port()}"
            self._world_size = 2 + int(num_clients)
            self._member = (client_name, 1)
            import multiprocessing as mp

            from torchrl._processes import worker_temp_dir

            self._temp_dir = worker_temp_dir()
            ctx = mp.get_context("spawn")
            self._process = ctx.Process(
                target=_host_main,
                args=(
                    name,
                    self._world_size,
                    self._init_method,
                    self.rpc_timeout,
                    self.num_worker_threads,
                    self._buffer_id,
                    replay_buffer_cls,
                    args,
                    kwargs,
                    os.getpid(),
                    self._temp_dir,
                ),
                daemon=True,
                name=f"RPCReplayBuffer-{name}",
            )
            self._process.start()
        else:
            from torch.distributed import rpc

            if not _rpc_initialized():
                if rank is None or init_method is None:
                    raise RuntimeError(
                        "RPCReplayBuffer(launcher=None): RPC is not initialised in this process; "
                        "initialise it first or pass rank= and init_method= (and world_size=)"
                    )
                options = _options(init_method, self.rpc_timeout, self.num_worker_threads)
                rpc.init_rpc(
                    client_name, rank=rank, world_size=world_size, rpc_backend_options=options
                )
                self._joined_here = True
                _JOINED["by_us"] = True
            self._rpc(_host_create, (self._buffer_id, replay_buffer_cls, args, kwargs))

    def client(self, index: int) -> RPCReplayBuffer:
        """A handle for the ``index``-th client process (``launcher="mp"``).

        Args:
            index: which of the ``num_clients`` slots, from 0; give each to one process.

        Returns:
            A picklable client that joins the group as ``"<name>_client_<index>"``.
        """
        n = self._world_size - 2
        if self._init_method is None or not 0 <= index < n:
            raise ValueError(
                f"RPCReplayBuffer.client: index must be in [0, {n}) for a buffer started with "
                f"launcher='mp' and num_clients={n}, got {index}"
            )
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__getstate__())
        clone._member = (f"{self.name}_client_{index}", 2 + index)
        return clone

    # ------------------------------------------------------------------------ plumbing
    def _check_host(self) -> None:
        if self._process is not None and not self._process.is_alive():
            raise RuntimeError(
                f"RPCReplayBuffer: the host process of {self.name!r} (rank 0, "
                f"pid {self._process.pid}) died with exit code {self._process.exitcode}"
            )

    def _ensure_joined(self) -> None:
        from torch.distributed import rpc

        if _rpc_initialized():
            return
        if self._member is None or self._init_method is None:
            raise RuntimeError(
                f"RPCReplayBuffer: RPC is not initialised in process {os.getpid()}; initialise "
                f"it in the group of host {self.name!r}, or give this process a handle from "
                "RPCReplayBuffer.client(i)"
            )
        if self._process is not None:
            # Joining blocks until the whole group is in; a host that fails to start would
            # leave us waiting for the full timeout, so watch it from a helper thread.
            self._watch_host_while_joining()
            return
        member, rank = self._member
        options = _options(self._init_method, self.rpc_timeout, self.num_worker_threads, True)
        with _gloo_on_loopback(True):
            rpc.init_rpc(
                member, rank=rank, world_size=self._world_size, rpc_backend_options=options
            )
        self._joined_here = True
        _JOINED["by_us"] = True

    def _watch_host_while_joining(self) -> None:
        from torch.distributed import rpc

        assert self._member is not None and self._init_method is not None
        member, rank = self._member
        options = _options(self._init_method, self.rpc_timeout, self.num_worker_threads, True)
        error: list[BaseException] = []

        def join() -> None:
            try:
                with _gloo_on_loopback(True):
                    rpc.init_rpc(
                        member,
                        rank=rank,
                        world_size=self._world_size,
                        rpc_backend_options=options,
                    )
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller
                error.append(err)

        thread = threading.Thread(target=join, daemon=True)
        thread.start()
        # The rendezvous itself waits far longer than rpc_timeout for missing members.
        deadline = time.monotonic() + self.rpc_timeout
        while thread.is_alive():
            thread.join(0.1)
            if thread.is_alive():
                self._check_host()
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"RPCReplayBuffer: the group of host {self.name!r} was not complete "
                        f"after {self.rpc_timeout:.0f} s: are all {self._world_size - 2} "
                        "client(i) handles in use?"
                    )
        if error:
            raise RuntimeError(
                f"RPCReplayBuffer: could not join the group of host {self.name!r}: {error[0]}"
            ) from error[0]
        self._joined_here = True
        _JOINED["by_us"] = True

    def _rpc(self, fn: Any, args: tuple[Any, ...]) -> Any:
        from torch.distributed import rpc

        if self._closed:
            raise RuntimeError(f"RPCReplayBuffer: the client of {self.name!r} was shut down")
        self._check_host()
        self._ensure_joined()
        try:
            return rpc.rpc_sync(self.name, fn, args=args, timeout=self.rpc_timeout)
        except RuntimeError as err:
            if self._process is not None:
                # Give the OS a moment to reap the host so a crash is named as one.
                self._process.join(0.2)
                self._check_host()
            text = str(err).lower()
            if any(
                word in text
                for word in ("timeout", "timed out", "closed", "eof", "connect", "shut", "unknown")
            ):
                pid = f", pid {self._process.pid}" if self._process is not None else ""
                raise RuntimeError(
                    f"RPCReplayBuffer: the buffer host {self.name!r} (rank 0{pid}) did not "
                    f"answer (dead or unreachable): {err}"
                ) from err
            raise

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._rpc(_host_call, (self._buffer_id, method, args, kwargs))

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        # A copy of the creating object joins nothing by itself (it works in processes already
        # in the group); a copy of a client(i) handle keeps its slot.
        member = None if self._owner else self._member
        state.update(
            _owner=False, _process=None, _temp_dir=None, _joined_here=False, _member=member
        )
        return state

    # ------------------------------------------------------------------------------ the API
    def extend(self, data: Any) -> Index:
        """Writes a batch of items in the hosted buffer.

        Args:
            data: the items (e.g. a TensorDict with batch size ``[N]``).

        Returns:
            Their indices in the storage.
        """
        return self._call("extend", data)

    def add(self, data: Any) -> int | Index | None:
        """Writes one item.

        Args:
            data: the item.

        Returns:
            Its index in the storage.
        """
        return self._call("add", data)

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Samples a batch from the hosted buffer.

        Args:
            batch_size: items to sample (default: the buffer's ``batch_size``).
            return_info: also return the sampler's info (``"index"``, weights, ...).

        Returns:
            The batch, or ``(batch, info)`` with ``return_info=True``.
        """
        return self._call("sample", batch_size, return_info=return_info)

    def update_priority(self, index: IndexLike, priority: float | torch.Tensor) -> None:
        """Updates the priorities of sampled items.

        Args:
            index: the indices (shape ``[B]``).
            priority: their new priorities (shape ``[B]``).
        """
        self._call("update_priority", index, priority)

    def empty(self) -> None:
        """Empties the hosted buffer."""
        self._call("empty")

    def state_dict(self) -> dict[str, Any]:
        """Returns the hosted buffer's state dict."""
        return self._call("state_dict")

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a state dict into the hosted buffer.

        Args:
            state_dict: a dict from :meth:`state_dict`.
        """
        self._call("load_state_dict", state_dict)

    def dumps(self, path: str | Path) -> None:
        """Saves the buffer to ``path`` (a path on the host's machine)."""
        self._call("dumps", path)

    def loads(self, path: str | Path) -> None:
        """Loads the buffer from ``path`` (a path on the host's machine)."""
        self._call("loads", path)

    def __len__(self) -> int:
        return int(self._call("__len__"))

    # ------------------------------------------------------------------------- lifetime
    def shutdown(self, timeout: float | None = None) -> None:
        """Leaves RPC where this object started it; the creating object also stops the host.

        Idempotent. The creating object tells the host to stop, leaves RPC, then waits for
        the host process and kills it if it is still there after ``timeout`` seconds. Members
        leave without waiting for each other (all calls are synchronous, so no message is in
        flight); the peers still in the group log a closed-connection warning.

        Args:
            timeout: seconds each step may wait (default: ``rpc_timeout``).
        """
        if self._closed:
            return
        self._closed = True
        from torch.distributed import rpc

        wait = self.rpc_timeout if timeout is None else float(timeout)
        host_alive = self._process is None or self._process.is_alive()
        if self._owner and _rpc_initialized() and host_alive:
            try:
                if self._process is None:
                    rpc.rpc_sync(self.name, _host_release, args=(self._buffer_id,), timeout=wait)
                else:
                    rpc.rpc_sync(self.name, _host_stop, timeout=wait)
            except Exception:  # noqa: BLE001 - the host may already be gone
                host_alive = False
        if self._joined_here:
            self._joined_here = False
            _leave_rpc()
        if self._process is not None:
            self._process.join(wait)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(wait)
            self._process = None
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, owner={self._owner})"


_LEAVE_LOCK = threading.Lock()


def _leave_rpc() -> None:
    """Shuts RPC down in this process if a buffer initialised it (safe to call twice)."""
    from torch.distributed import rpc

    with _LEAVE_LOCK:
        if not _JOINED["by_us"] or not _rpc_initialized():
            _JOINED["by_us"] = False
            return
        _JOINED["by_us"] = False
        # Not graceful: in a static group that would wait for every other member to leave
        # too. All calls are rpc_sync, so no message is in flight when a member leaves.
        rpc.shutdown(graceful=False)
