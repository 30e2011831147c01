"""The inference server: one thread that batches requests, runs the policy and answers."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType, set_interaction_type
from tensordict.utils import NestedKey
from torch import nn

from torchrl._keys import POLICY_VERSION
from torchrl.modules.inference_server._transport import InferenceTransport, ServerGoneError

__all__ = ["InferenceDeviceConfig", "InferenceServer", "InferenceServerConfig"]

_DeviceLike = torch.device | str | int | None


def _as_device(device: _DeviceLike) -> torch.device | None:
    return None if device is None else torch.device(device)


@dataclass
class InferenceServerConfig:
    """The batching and versioning keywords of :class:`InferenceServer`, in one object.

    Args:
        max_batch_size: the most rows one forward pass takes.
        min_batch_size: the rows to wait for (at most ``timeout`` seconds) before a pass.
        timeout: seconds to wait for ``min_batch_size`` rows once a request is there.
        collate_fn: maps a list of requests to one batch (default: concatenation on dim 0).
        policy_version: the version of the initial weights.
        policy_version_key: the response entry holding the version, ``None`` for none.

    Examples:
        >>> config = InferenceServerConfig(max_batch_size=8)
        >>> config.max_batch_size, config.timeout
        (8, 0.01)
    """

    max_batch_size: int = 64
    min_batch_size: int = 1
    timeout: float = 0.01
    collate_fn: Callable[[list[TensorDictBase]], TensorDictBase] | None = None
    policy_version: int = 0
    policy_version_key: NestedKey | None = POLICY_VERSION

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "min_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.min_batch_size > self.max_batch_size:
            raise ValueError(
                f"min_batch_size ({self.min_batch_size}) must not exceed max_batch_size "
                f"({self.max_batch_size})"
            )
        if not isinstance(self.timeout, (int, float)) or self.timeout < 0:
            raise ValueError(f"timeout must be a number >= 0, got {self.timeout!r}")


@dataclass
class InferenceDeviceConfig:
    """Where the policy runs and where responses go.

    Args:
        policy_device: the device batches are moved to before the policy runs.
        output_device: the device of the responses (default: the device of the requests).
        env_device: the device of the env workers (a hint for collectors).
        storing_device: the device of collected data (a hint for collectors).

    Examples:
        >>> InferenceDeviceConfig(policy_device="cpu").policy_device
        device(type='cpu')
    """

    policy_device: _DeviceLike = None
    output_device: _DeviceLike = None
    env_device: _DeviceLike = None
    storing_device: _DeviceLike = None

    def __post_init__(self) -> None:
        for f in fields(self):
            setattr(self, f.name, _as_device(getattr(self, f.name)))


def concat_requests(requests: list[TensorDictBase]) -> TensorDictBase:
    """Concatenates requests along their first batch dim (an unbatched one counts as one row).

    Args:
        requests: the requests of one batch.

    Returns:
        One TensorDict with all their rows.
    """
    parts = [td if td.batch_dims else td.unsqueeze(0) for td in requests]
    if len(parts) == 1:
        return parts[0].clone()
    return cast(TensorDictBase, torch.cat(parts, 0))  # type: ignore[arg-type]


def weights_of(model: nn.Module) -> TensorDictBase:
    """The parameters and buffers of ``model`` as a TensorDict of its own tensors (views)."""
    return TensorDict.from_module(model)


class InferenceServer:
    """Serves a policy to many clients, running it once per batch of their requests.

    :meth:`start` runs the serving loop in a background thread: it blocks until requests are
    ready, takes every ready one (up to ``max_batch_size`` rows; once a request is there it
    waits at most ``timeout`` seconds for ``min_batch_size`` rows), concatenates them along
    the first batch dim, runs the model once under :func:`torch.no_grad`, and sends each
    client its own rows. With ``policy_version_key`` set, each response carries an int64
    entry (the request's batch shape) holding the version of the weights that computed it.

    The serving thread uses as many torch threads as the thread that called :meth:`start`.

    :meth:`update_weights` swaps weights between two batches and bumps :attr:`policy_version`;
    a ``weight_sync`` scheme is polled between batches (see the docs page). A failing model
    call fails the requests of that batch only. :meth:`shutdown` (or leaving the ``with``
    block) stops the loop, fails what is pending and closes the transport.

    Args:
        model: maps a batched TensorDict to a TensorDict (e.g. a ``TensorDictModule``).
        transport: the :class:`InferenceTransport` shared with the clients.

    Keyword Args:
        max_batch_size: the most rows per forward pass (a larger single request runs alone).
        min_batch_size: the rows to wait for before a forward pass.
        timeout: the longest wait, in seconds, for ``min_batch_size`` rows.
        collate_fn: maps a list of requests to one batch (default: :func:`concat_requests`).
        device: the device batches are moved to (the policy's device).
        weight_sync: a weight synchronisation scheme polled between batches (duck-typed).
        weight_sync_model_id: the model id this server serves in ``weight_sync``.
        policy_version: the version of the initial weights.
        policy_version_key: the response entry holding the version; ``None`` adds none.
        exploration_type: the interaction type the model runs under (an ``ExplorationType``
            or its name); ``None`` leaves the process's current setting alone.
        server_config: an :class:`InferenceServerConfig` instead of the batching keywords.
        device_config: an :class:`InferenceDeviceConfig` instead of ``device``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules.inference_server import InferenceServer, ThreadingTransport
        >>> policy = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        >>> transport = ThreadingTransport()
        >>> server = InferenceServer(policy, transport, max_batch_size=16).start()
        >>> client = transport.client()
        >>> _ = client(TensorDict(observation=torch.ones(3)))
        >>> server.update_weights({"module.weight": torch.zeros(1, 3), "module.bias": torch.ones(1)})
        >>> out = client(TensorDict(observation=torch.ones(3)))
        >>> out["action"].item(), out["policy_version"].item(), server.policy_version
        (1.0, 1, 1)
        >>> server.stats()["requests"]
        2
        >>> server.shutdown()
    """

    def __init__(
        self,
        model: nn.Module | Callable[[TensorDictBase], TensorDictBase],
        transport: InferenceTransport,
        *,
        max_batch_size: int = 64,
        min_batch_size: int = 1,
        timeout: float = 0.01,
        collate_fn: Callable[[list[TensorDictBase]], TensorDictBase] | None = None,
        device: _DeviceLike = None,
        weight_sync: Any = None,
        weight_sync_model_id: str = "policy",
        policy_version: int = 0,
        policy_version_key: NestedKey | None = POLICY_VERSION,
        exploration_type: InteractionType | str | None = None,
        server_config: InferenceServerConfig | None = None,
        device_config: InferenceDeviceConfig | None = None,
    ) -> None:
        if not callable(model):
            raise TypeError(f"model must be callable, got {type(model).__name__}")
        if not isinstance(transport, InferenceTransport):
            raise TypeError(
                f"transport must be an InferenceTransport, got {type(transport).__name__}"
            )
        given = {
            "max_batch_size": max_batch_size,
            "min_batch_size": min_batch_size,
            "timeout": timeout,
            "collate_fn": collate_fn,
            "policy_version": policy_version,
            "policy_version_key": policy_version_key,
        }
        if server_config is None:
            server_config = InferenceServerConfig(**given)  # type: ignore[arg-type]
        else:
            defaults = InferenceServerConfig()
            clash = [k for k, v in given.items() if v != getattr(defaults, k)]
            if clash:
                raise ValueError(f"pass {clash} through server_config or as keywords, not both")
        if device_config is None:
            device_config = InferenceDeviceConfig(policy_device=device)
        elif device is not None:
            raise ValueError("pass device through device_config or as a keyword, not both")
        self.model = model
        self.transport = transport
        self.server_config = server_config
        self.device_config = device_config
        self.max_batch_size = server_config.max_batch_size
        self.min_batch_size = server_config.min_batch_size
        self.timeout = float(server_config.timeout)
        self.collate_fn = server_config.collate_fn or concat_requests
        self.device = device_config.policy_device
        self.output_device = device_config.output_device
        self.policy_version_key = server_config.policy_version_key
        self.weight_sync = weight_sync
        self.weight_sync_model_id = weight_sync_model_id
        if isinstance(exploration_type, str):
            try:
                exploration_type = InteractionType(exploration_type)
            except ValueError:
                raise ValueError(
                    f"exploration_type must be one of {[t.value for t in InteractionType]}, "
                    f"got {exploration_type!r}"
                ) from None
        self.exploration_type = exploration_type
        self._version = int(server_config.policy_version)
        # a one-element int64 tensor mirroring the version (set by ProcessInferenceServer,
        # shared with its owner): written when the version changes, before any response
        # carries the new version, so a reader never sees data newer than the version
        self._version_mirror: torch.Tensor | None = None
        self._weights_lock = threading.Lock()
        # (weights, events of the callers waiting for them, updates they stand for): an update
        # made before the previous one was applied replaces it and counts for both
        self._pending_weights: tuple[Any, list[threading.Event], int] | None = None
        self._weights: TensorDictBase | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._stats = {"batches": 0, "requests": 0, "rows": 0, "max_rows": 0, "max_requests": 0}
        self._stats.update({"weight_updates": 0, "failed_batches": 0})
        transport.bind_server(self.probe)

    # ---- lifecycle
    def start(self) -> InferenceServer:
        """Starts the serving thread.

        Returns:
            The server itself.
        """
        if self._closed:
            raise RuntimeError("this InferenceServer was shut down; build a new one")
        if self._thread is not None:
            raise RuntimeError("the InferenceServer is already started")
        if self.weight_sync is not None:
            self._init_weight_sync()
        # OpenMP keeps its thread count per thread: a new thread would run the model with the
        # default count (all cores), 10-100x slower for small models on a busy machine
        num_threads = torch.get_num_threads()
        self._thread = threading.Thread(
            target=self._serve_forever,
            args=(num_threads,),
            name="torchrl-inference-server",
            daemon=True,
        )
        self._thread.start()
        return self

    @property
    def is_alive(self) -> bool:
        """Whether the serving thread runs."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def error(self) -> BaseException | None:
        """The exception that ended the serving loop, ``None`` if it did not fail."""
        return self._error

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stops the serving loop (after the batch in progress) and closes the transport.

        Pending requests fail with :class:`RuntimeError`. Idempotent.

        Args:
            timeout: seconds to wait for the serving thread.
        """
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self.transport.wake()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                raise RuntimeError(f"the inference server thread did not stop within {timeout} s")
        else:
            self.transport.server_stopped(None)
        self.transport.close()

    def __enter__(self) -> InferenceServer:
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ---- weights
    @property
    def policy_version(self) -> int:
        """The version of the weights now served (bumped by each weight update)."""
        return self._version

    def update_weights(self, weights: Any, *, wait: bool = True, timeout: float = 30.0) -> None:
        """Serves ``weights`` from the next batch on and bumps :attr:`policy_version`.

        Weights are copied into the model between two batches, never during one.

        Args:
            weights: an ``nn.Module`` (its parameters and buffers), a state dict, or a
                TensorDict of weights (``TensorDict.from_module`` layout).

        Keyword Args:
            wait: block until the server applied them (else copy them and return). Weights
                given before the previous ones were applied replace them: the server
                loads the newest once, and :attr:`policy_version` counts every update.
            timeout: seconds to wait with ``wait=True``.
        """
        prepared = self._prepare_weights(weights, copy=not wait)
        applied = threading.Event()
        with self._weights_lock:
            events, count = [applied], 1
            if self._pending_weights is not None:  # not applied yet: these weights replace it
                events += self._pending_weights[1]
                count += self._pending_weights[2]
            self._pending_weights = (prepared, events, count)
        if not self.is_alive:
            self._apply_pending_weights()
            return
        self.transport.wake()
        if not wait:
            return
        deadline = time.monotonic() + timeout
        while not applied.wait(0.05):
            if not self.is_alive:
                if applied.is_set():
                    return
                self._apply_pending_weights()  # the loop ended before it applied them
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server did not apply the weights within {timeout} s")

    def _model_weights(self) -> TensorDictBase:
        if not isinstance(self.model, nn.Module):
            raise TypeError(
                f"update_weights needs an nn.Module model, this server has a "
                f"{type(self.model).__name__}"
            )
        if self._weights is None:
            self._weights = weights_of(self.model)
        return self._weights

    def _prepare_weights(self, weights: Any, copy: bool) -> Any:
        dest = self._model_weights()
        if isinstance(weights, nn.Module):
            weights = weights_of(weights)
        if isinstance(weights, TensorDictBase):
            src_keys = set(weights.keys(True, True))
            dst_keys = set(dest.keys(True, True))
            if src_keys != dst_keys:
                raise KeyError(
                    f"weights do not match the served model: missing {sorted(dst_keys - src_keys, key=str)}, "
                    f"unexpected {sorted(src_keys - dst_keys, key=str)}"
                )
            for key in dst_keys:
                if weights.get(key).shape != dest.get(key).shape:
                    raise ValueError(
                        f"weight {key!r}: the served model has shape {tuple(dest.get(key).shape)}, "
                        f"got {tuple(weights.get(key).shape)}"
                    )
            return weights.detach().clone() if copy else weights.detach()
        if isinstance(weights, Mapping):
            assert isinstance(self.model, nn.Module)
            current = self.model.state_dict()
            missing = sorted(set(current) - set(weights))
            unexpected = sorted(set(weights) - set(current))
            if missing or unexpected:
                raise KeyError(
                    f"state dict does not match the served model: missing {missing}, "
                    f"unexpected {unexpected}"
                )
            for key, value in current.items():
                if tuple(weights[key].shape) != tuple(value.shape):
                    raise ValueError(
                        f"weight {key!r}: the served model has shape {tuple(value.shape)}, "
                        f"got {tuple(weights[key].shape)}"
                    )
            return {k: v.detach().clone() for k, v in weights.items()} if copy else dict(weights)
        raise TypeError(
            "weights must be an nn.Module, a state dict or a TensorDict, got "
            f"{type(weights).__name__}"
        )

    def _apply_pending_weights(self) -> None:
        with self._weights_lock:
            pending, self._pending_weights = self._pending_weights, None
        if pending is None:
            return
        weights, events, count = pending
        with torch.no_grad():
            if isinstance(weights, TensorDictBase):
                self._model_weights().update_(weights)
            else:
                assert isinstance(self.model, nn.Module)
                self.model.load_state_dict(weights)
        self._version += count
        self._stats["weight_updates"] += count
        if self._version_mirror is not None:
            self._version_mirror[0] = self._version
        for applied in events:
            applied.set()

    def _poll_weight_sync(self) -> None:
        scheme = self.weight_sync
        got = scheme.receive(timeout=0.0)
        if got is None or got is False:
            return
        version = getattr(scheme, "version", None)
        if isinstance(got, bool):  # True: the scheme wrote the weights into the model
            pass
        elif isinstance(got, int):  # the version the scheme now holds (it applied them)
            version = got
        else:  # the scheme handed the weights over: apply them here
            with torch.no_grad():
                prepared = self._prepare_weights(got, copy=False)
                if isinstance(prepared, TensorDictBase):
                    self._model_weights().update_(prepared)
                else:
                    assert isinstance(self.model, nn.Module)
                    self.model.load_state_dict(prepared)
        if not isinstance(version, int) or isinstance(version, bool):
            version = self._version + 1
        if version != self._version:
            self._version = version
            if self._version_mirror is not None:
                self._version_mirror[0] = version
            self._stats["weight_updates"] += 1

    def _init_weight_sync(self) -> None:
        scheme = self.weight_sync
        # a scheme that was not set up yet (role None) is set up as this model's receiver
        if getattr(scheme, "role", "") is None and hasattr(scheme, "init_on_receiver"):
            scheme.init_on_receiver(self.model, model_id=self.weight_sync_model_id, context=self)

    # ---- serving
    def probe(self, example: TensorDictBase) -> TensorDictBase:
        """Runs the model once on ``example``, as a batch of one request, and returns the response.

        Transports with preallocated response buffers call it to learn the response layout.

        Args:
            example: a representative request.

        Returns:
            The response the server would send for ``example``.
        """
        return self._respond_to([example])[0]

    def _run_model(self, batch: TensorDictBase) -> TensorDictBase:
        interaction = (
            contextlib.nullcontext()
            if self.exploration_type is None
            # thread-local: the serving thread's setting must not leak into the owner's threads
            # (two threads entering and leaving one global setting can leave it changed)
            else set_interaction_type(self.exploration_type, thread_local=True)
        )
        with torch.no_grad(), interaction:
            out = self.model(batch)
        if out is None:  # a module that writes into its input and returns nothing
            out = batch
        if not isinstance(out, TensorDictBase):
            raise TypeError(f"the model returned a {type(out).__name__}, not a TensorDict")
        return out

    def _compute(self, requests: list[TensorDictBase]) -> tuple[TensorDictBase, list[int]]:
        """Runs the model on the requests together; returns the output and each one's rows."""
        sizes = [td.batch_size[0] if td.batch_dims else 1 for td in requests]
        batch = self.collate_fn(requests)
        if self.device is not None:
            batch = batch.to(self.device)
        out = self._run_model(batch)
        if out.batch_size[:1] != batch.batch_size[:1]:
            raise RuntimeError(
                f"the model returned batch size {tuple(out.batch_size)} for a batch of "
                f"{tuple(batch.batch_size)}: it must keep the first batch dim"
            )
        if self.policy_version_key is not None:
            out.set(
                self.policy_version_key,
                torch.full(out.batch_size, self._version, dtype=torch.int64, device=out.device),
            )
        output_device = self.output_device or requests[0].device
        if output_device is not None and out.device != output_device:
            out = out.to(output_device)
        return out, sizes

    def _respond_to(self, requests: list[TensorDictBase]) -> list[TensorDictBase]:
        out, sizes = self._compute(requests)
        pieces = out.split(sizes, 0) if len(sizes) > 1 else (out,)
        return [
            piece if td.batch_dims else piece.squeeze(0)
            for piece, td in zip(pieces, requests, strict=True)
        ]

    def _serve_forever(self, num_threads: int | None = None) -> None:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        transport = self.transport
        error: BaseException | None = None
        idle_wait = 0.05 if self.weight_sync is not None else 1.0
        try:
            transport.server_started()
            while not self._stop.is_set():
                if self._pending_weights is not None:
                    self._apply_pending_weights()
                if self.weight_sync is not None:
                    self._poll_weight_sync()
                if not transport.wait_for_work(idle_wait):
                    continue
                requests, callbacks = transport.drain(self.max_batch_size)
                if not requests:
                    continue
                rows = sum(td.batch_size[0] if td.batch_dims else 1 for td in requests)
                if rows < self.min_batch_size and self.timeout > 0:
                    deadline = time.monotonic() + self.timeout
                    while rows < self.min_batch_size and not self._stop.is_set():
                        left = deadline - time.monotonic()
                        if left <= 0 or not transport.wait_for_work(left):
                            break
                        more, more_cbs = transport.drain(self.max_batch_size - rows)
                        requests += more
                        callbacks += more_cbs
                        rows += sum(td.batch_size[0] if td.batch_dims else 1 for td in more)
                self._serve_batch(requests, callbacks, rows)
        except BaseException as exc:  # noqa: BLE001 - reported to every client and the owner
            error = exc
            self._error = exc
        finally:
            transport.server_stopped(error)

    def _serve_batch(self, requests: list[TensorDictBase], callbacks: list[Any], rows: int) -> None:
        transport = self.transport
        by_rows = getattr(transport, "resolve_rows", None)
        batch_rows = getattr(transport, "resolve_rows_batch", None)
        try:
            if by_rows is not None and all(td.batch_dims for td in requests):
                # the transport copies each client's rows out of the batch's leaves itself:
                # no TensorDict per client
                out, sizes = self._compute(requests)
                leaves = dict(out.items(include_nested=True, leaves_only=True))
                if batch_rows is not None:
                    batch_rows(callbacks, leaves, sizes)
                else:
                    start = 0
                    for callback, size in zip(callbacks, sizes, strict=True):
                        by_rows(callback, leaves, start, start + size)
                        start += size
            else:
                responses = self._respond_to(requests)
                for callback, response in zip(callbacks, responses, strict=True):
                    transport.resolve(callback, response)
        except Exception as exc:  # noqa: BLE001 - the requesters get it
            self._stats["failed_batches"] += 1
            for callback in callbacks:
                transport.resolve_exception(callback, exc)
            return
        stats = self._stats
        stats["batches"] += 1
        stats["requests"] += len(requests)
        stats["rows"] += rows
        stats["max_rows"] = max(stats["max_rows"], rows)
        stats["max_requests"] = max(stats["max_requests"], len(requests))

    def stats(self) -> dict[str, float]:
        """Counters of the serving loop.

        Returns:
            ``batches``, ``requests``, ``rows`` (totals), ``mean_batch_rows``,
            ``max_batch_rows``, ``mean_batch_requests``, ``max_batch_requests``,
            ``weight_updates``, ``failed_batches`` and ``policy_version``.
        """
        s = dict(self._stats)
        batches = max(s["batches"], 1)
        return {
            "batches": s["batches"],
            "requests": s["requests"],
            "rows": s["rows"],
            "mean_batch_rows": s["rows"] / batches,
            "max_batch_rows": s["max_rows"],
            "mean_batch_requests": s["requests"] / batches,
            "max_batch_requests": s["max_requests"],
            "weight_updates": s["weight_updates"],
            "failed_batches": s["failed_batches"],
            "policy_version": self._version,
        }

    def check_alive(self) -> None:
        """Raises :class:`RuntimeError` if the serving loop died with an error."""
        if self._error is not None:
            raise ServerGoneError(f"the inference server died: {self._error!r}") from self._error
