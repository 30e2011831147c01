"""The weight synchronisation concept: a scheme, its transports, and how weights are read/written.

A :class:`WeightSyncScheme` keeps ONE model in step between a sender (the trainer) and one or
more receivers (collector workers, actors, remote processes). The same object type is set up on
both ends: :meth:`~WeightSyncScheme.init_on_sender` on the trainer side,
:meth:`~WeightSyncScheme.init_on_receiver` on the worker side (a scheme pickled to a worker
carries its configuration, never the sender's model or connections). Each
:meth:`~WeightSyncScheme.send` numbers the weights it sends: the scheme's ``version`` is the
policy version, and a receiver knows the version of the weights it holds.

How the bytes travel is a :class:`TransportBackend` (one per receiver on the sender side, one on
the receiver side); what is extracted from and written into a model is a
:class:`WeightStrategy`.
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from torchrl.weight_update.weights import (
    WeightsLike,
    bind_weights,
    copy_weights,
    flat_weights,
    named_weights,
)

__all__ = [
    "InitialSyncTransport",
    "NoWeightSyncScheme",
    "TransportBackend",
    "WeightStrategy",
    "WeightSyncScheme",
]

#: Weights as they travel between the two ends: tensors by dotted name.
FlatWeights = dict[str, torch.Tensor]


@runtime_checkable
class TransportBackend(Protocol):
    """How one sender/receiver pair exchanges weights.

    ``send_weights`` delivers ``weights`` numbered ``version`` (it may return before the
    receiver has them, see each scheme's ``sync``); ``receive_weights`` returns the next
    ``(weights, version)`` or ``None`` when nothing came within ``timeout`` seconds;
    ``check_connection`` says whether the peer is reachable.

    Examples:
        >>> from collections import deque
        >>> class MailboxTransport:  # both ends in one process: a queue of messages
        ...     def __init__(self):
        ...         self.box = deque()
        ...     def send_weights(self, weights, version):
        ...         self.box.append((dict(weights), version))
        ...     def receive_weights(self, timeout=None):
        ...         return self.box.popleft() if self.box else None
        ...     def check_connection(self):
        ...         return True
        >>> isinstance(MailboxTransport(), TransportBackend)
        True
    """

    def send_weights(self, weights: Mapping[str, torch.Tensor], version: int) -> None: ...

    def receive_weights(
        self, timeout: float | None = None
    ) -> tuple[Mapping[str, torch.Tensor], int] | None: ...

    def check_connection(self) -> bool: ...


class InitialSyncTransport:
    """A transport that delivers one snapshot of the weights, then nothing.

    For a receiver that gets its first weights with its launch arguments (pickled once, by a
    trusted parent) and no later update: :meth:`receive_weights` returns the snapshot once.

    Args:
        weights: the snapshot (tensors by name).
        version: its version.

    Examples:
        >>> transport = InitialSyncTransport({"bias": torch.ones(1)})
        >>> weights, version = transport.receive_weights()
        >>> version, transport.receive_weights()
        (0, None)
    """

    def __init__(self, weights: Mapping[str, torch.Tensor], version: int = 0) -> None:
        self._snapshot: tuple[Mapping[str, torch.Tensor], int] | None = (dict(weights), version)

    def send_weights(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        """Refused: this transport only carries the initial weights."""
        raise RuntimeError(
            "InitialSyncTransport carries the initial weights only; use a scheme with a "
            "channel to the receiver (e.g. MultiProcessWeightSyncScheme) for updates"
        )

    def receive_weights(
        self, timeout: float | None = None
    ) -> tuple[Mapping[str, torch.Tensor], int] | None:
        """The snapshot the first time, ``None`` afterwards."""
        out, self._snapshot = self._snapshot, None
        return out

    def check_connection(self) -> bool:
        """Always ``True`` (there is no peer)."""
        return True


class WeightStrategy:
    """Extracts weights from a model and writes them into one.

    Args:
        extract_as: ``"tensordict"`` (a TensorDict nested like the module) or ``"state_dict"``
            (a dict of dotted names).

    Examples:
        >>> strategy = WeightStrategy("state_dict")
        >>> sorted(strategy.extract_weights(torch.nn.Linear(2, 1)))
        ['bias', 'weight']
        >>> target = torch.nn.Linear(2, 1)
        >>> strategy.apply_weights(target, {"bias": torch.zeros(1)})
        >>> target.bias.item()
        0.0
    """

    def __init__(self, extract_as: Literal["tensordict", "state_dict"] = "tensordict") -> None:
        if extract_as not in ("tensordict", "state_dict"):
            raise ValueError(
                f"WeightStrategy: extract_as must be 'tensordict' or 'state_dict', got "
                f"{extract_as!r}"
            )
        self.extract_as = extract_as

    def extract_weights(self, source: WeightsLike) -> TensorDictBase | dict[str, torch.Tensor]:
        """Detached weights of ``source`` (a module, state dict or TensorDict), not copied."""
        flat = {k: v.detach() for k, v in flat_weights(source, "extract_weights").items()}
        if self.extract_as == "state_dict":
            return flat
        return TensorDict(flat, batch_size=[]).unflatten_keys(".")

    def apply_weights(
        self,
        destination: nn.Module | Mapping[str, torch.Tensor],
        weights: WeightsLike,
        inplace: bool = True,
    ) -> None:
        """Writes ``weights`` into ``destination`` (a module, or tensors by name).

        Args:
            destination: the model (or its tensors by name).
            weights: the new weights (a subset of the destination's names).
            inplace: copy into the destination's tensors (``True``) or make a module read the
                given tensors themselves (``False``, no copy).
        """
        if isinstance(destination, nn.Module):
            if inplace:
                copy_weights(named_weights(destination), weights)
            else:
                bind_weights(destination, flat_weights(weights, "apply_weights"))
            return
        if isinstance(destination, Mapping):
            copy_weights(destination, weights)
            return
        raise TypeError(
            f"apply_weights: the destination must be a module or a mapping of tensors, got "
            f"{type(destination).__name__}"
        )


class WeightSyncScheme(ABC):
    """How ONE model's weights go from a sender to its receivers, with a version number.

    Set up one end with :meth:`init_on_sender` (trainer) or :meth:`init_on_receiver`
    (worker), then call :meth:`connect` once both ends exist. :meth:`send` pushes new weights
    to every receiver (or ``worker_ids``) and increments :attr:`version`; a receiver takes
    them with :meth:`receive` (pulling from its transport, or applying weights pushed to it)
    and then holds that version. Subclasses say how to build a transport
    (:meth:`create_transport`) and how each end is initialised.

    Args:
        strategy: how weights are extracted (``"tensordict"`` or ``"state_dict"``), or a
            :class:`WeightStrategy`.

    Examples:
        A scheme whose sender and receiver share an in-process mailbox (the
        :class:`TransportBackend` example's ``MailboxTransport``, given as ready-made
        transports):

        >>> from collections import deque
        >>> class MailboxTransport:
        ...     def __init__(self):
        ...         self.box = deque()
        ...     def send_weights(self, weights, version):
        ...         self.box.append((dict(weights), version))
        ...     def receive_weights(self, timeout=None):
        ...         return self.box.popleft() if self.box else None
        ...     def check_connection(self):
        ...         return True
        >>> class MailboxScheme(WeightSyncScheme):
        ...     def create_transport(self, **kwargs):
        ...         return MailboxTransport()
        >>> trainer_net, worker_net = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
        >>> link = MailboxTransport()
        >>> sender, receiver = MailboxScheme(), MailboxScheme()
        >>> sender.init_on_sender(trainer_net, transports=[link])
        >>> receiver.init_on_receiver(worker_net, transport=link)
        >>> sender.send(), receiver.receive()
        (1, 1)
        >>> torch.equal(worker_net.weight, trainer_net.weight)
        True
    """

    def __init__(self, strategy: str | WeightStrategy = "tensordict") -> None:
        self.strategy = (
            strategy if isinstance(strategy, WeightStrategy) else WeightStrategy(strategy)  # type: ignore[arg-type]
        )
        self._version = 0
        self._role: str | None = None
        self.model: Any = None
        self.model_id = "policy"
        self.worker_idx: int | None = None
        self._context: Any = None
        self._transports: dict[int, TransportBackend] = {}

    # ---------------------------------------------------------------------------- state
    @property
    def version(self) -> int:
        """The policy version: sends so far (sender), or of the weights held (receiver)."""
        return self._version

    def _set_version(self, version: int) -> None:
        self._version = int(version)

    @property
    def context(self) -> Any | None:
        """The object that set this end up (e.g. the collector), if still alive."""
        ref = self._context
        return ref() if ref is not None else None

    @property
    def role(self) -> str | None:
        """``"sender"``, ``"receiver"`` or ``None`` (not initialised)."""
        return self._role

    @property
    def transports(self) -> dict[int, TransportBackend]:
        """The transports of this end, by worker index (one, index 0 or ``worker_idx``, on a
        receiver)."""
        return self._transports

    def __getstate__(self) -> dict[str, Any]:
        # What travels to a worker: the configuration, never the sender's model, context or
        # connections.
        state = dict(self.__dict__)
        state.update(_role=None, model=None, _context=None, _transports={})
        return state

    def receiver_copy(self) -> WeightSyncScheme:
        """A copy of this scheme as a worker receives it: configuration only, not initialised.

        What pickling a scheme gives too; use it where a worker gets the object without
        pickling (a ``fork``).

        Examples:
            >>> sender = NoWeightSyncScheme()
            >>> sender.init_on_sender(torch.nn.Linear(2, 1))
            >>> sender.receiver_copy().role is None
            True
        """
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__getstate__())
        return clone

    def _start(self, role: str, model: Any, context: Any, model_id: str) -> None:
        if self._role is not None:
            raise RuntimeError(
                f"{type(self).__name__} is already initialised as the {self._role}; use one "
                "scheme object per end"
            )
        if model is not None and not isinstance(model, (nn.Module, Mapping, TensorDictBase)):
            raise TypeError(
                f"{type(self).__name__}: model must be an nn.Module, a state dict or a "
                f"TensorDict of weights, got {type(model).__name__}"
            )
        self._role = role
        self.model = model
        self.model_id = model_id
        self._context = weakref.ref(context) if context is not None else None

    # ---------------------------------------------------------------------------- set up
    def init_on_sender(
        self,
        model: Any = None,
        *,
        context: Any = None,
        model_id: str = "policy",
        transports: Sequence[TransportBackend] | None = None,
        **kwargs: Any,
    ) -> None:
        """Sets this scheme up on the sender (trainer) side.

        Args:
            model: the model whose weights are sent (a module, or its weights).
            context: the object that owns this end (a collector), kept as a weak reference.
            model_id: the model's name (``"policy"``).
            transports: ready-made transports, one per receiver (else built from ``kwargs``
                by the subclass).
            **kwargs: what the subclass needs to reach its receivers.
        """
        self._start("sender", model, context, model_id)
        if transports is not None:
            self._transports = dict(enumerate(transports))
        self._init_sender(**kwargs)

    def init_on_receiver(
        self,
        model: Any = None,
        *,
        context: Any = None,
        model_id: str = "policy",
        worker_idx: int = 0,
        transport: TransportBackend | None = None,
        **kwargs: Any,
    ) -> None:
        """Sets this scheme up on a receiver (worker) side.

        Args:
            model: the model the received weights are written into.
            context: the object that owns this end (a worker's collector), kept weakly.
            model_id: the model's name (``"policy"``).
            worker_idx: this receiver's index among the sender's receivers.
            transport: a ready-made transport to the sender (else built from ``kwargs``).
            **kwargs: what the subclass needs to reach the sender.
        """
        self._start("receiver", model, context, model_id)
        self.worker_idx = worker_idx
        if transport is not None:
            self._transports = {worker_idx: transport}
        self._init_receiver(**kwargs)

    def _init_sender(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise TypeError(
                f"{type(self).__name__}.init_on_sender: unexpected arguments {sorted(kwargs)}"
            )

    def _init_receiver(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise TypeError(
                f"{type(self).__name__}.init_on_receiver: unexpected arguments {sorted(kwargs)}"
            )

    @abstractmethod
    def create_transport(self, **kwargs: Any) -> TransportBackend:
        """A transport to one peer, from transport-specific arguments."""

    def connect(self, *, worker_idx: int | None = None, weights: Any | None = None) -> None:
        """The rendezvous once both ends exist: receivers get their first copy of the weights.

        On the sender, sends the current weights (or ``weights``) to every receiver (or to
        ``worker_idx``) under the current version; on a receiver, takes them.

        Args:
            worker_idx: one receiver to connect (sender side; default all).
            weights: the weights to send instead of the model's.
        """
        if self._role == "sender":
            ids = None if worker_idx is None else [worker_idx]
            self._push(self._payload(weights), self.version, ids)
        elif self._role == "receiver":
            self.receive()
        else:
            raise RuntimeError(f"{type(self).__name__}.connect: call init_on_sender/receiver first")

    # ----------------------------------------------------------------------- exchange
    def _require(self, role: str, what: str) -> None:
        if self._role != role:
            now = "not initialised" if self._role is None else f"the {self._role}"
            raise RuntimeError(
                f"{type(self).__name__}.{what} runs on the {role}; this scheme is {now} "
                f"(call init_on_{role} first)"
            )

    def _payload(self, weights: Any | None) -> FlatWeights:
        """The weights to send, flat: ``weights`` if given, else the model's."""
        source = weights if weights is not None else self.model
        if source is None:
            raise ValueError(
                f"{type(self).__name__}.send: no weights given and no model to read them from"
            )
        return {k: v.detach() for k, v in flat_weights(source, "send: the weights").items()}

    def _worker_ids(self, worker_ids: int | Iterable[int] | None) -> list[int]:
        if worker_ids is None:
            return sorted(self._transports)
        ids = [worker_ids] if isinstance(worker_ids, int) else list(worker_ids)
        unknown = [i for i in ids if i not in self._transports]
        if unknown:
            raise ValueError(
                f"{type(self).__name__}.send: no receiver with worker ids {unknown} (known: "
                f"{sorted(self._transports)})"
            )
        return ids

    def _push(self, weights: FlatWeights, version: int, worker_ids: Any) -> None:
        for i in self._worker_ids(worker_ids):
            self._transports[i].send_weights(weights, version)

    def send(
        self, weights: Any | None = None, worker_ids: int | Iterable[int] | None = None
    ) -> int:
        """Sends new weights to the receivers and increments the version.

        Args:
            weights: the weights to send (a module, a state dict or a TensorDict); by default
                the model given to :meth:`init_on_sender`.
            worker_ids: the receivers to reach (default: all).

        Returns:
            The new version.
        """
        self._require("sender", "send")
        payload = self._payload(weights)
        version = self.version + 1
        self._push(payload, version, worker_ids)
        self._set_version(version)
        return version

    def receive(
        self,
        timeout: float | None = None,
        *,
        weights: Any | None = None,
        version: int | None = None,
    ) -> int | None:
        """Takes new weights and writes them into the model.

        Without ``weights``, pulls the next weights from this end's transport (``None`` comes
        back when nothing arrived within ``timeout`` seconds); with ``weights`` (pushed to
        this process by a Ray or RPC call), applies them.

        Args:
            timeout: how long to wait for weights (pull mode).
            weights: weights pushed to this receiver.
            version: their version (default: one more than the version held).

        Returns:
            The version now held, or ``None`` when nothing was received.
        """
        self._require("receiver", "receive")
        if weights is None:
            transport = self._transports.get(self.worker_idx or 0)
            if transport is None:
                raise RuntimeError(
                    f"{type(self).__name__}.receive: this receiver has no transport; weights "
                    "are pushed to it (pass weights=...)"
                )
            got = transport.receive_weights(timeout)
            if got is None:
                return None
            weights, version = got
        if self.model is not None:
            self.apply_weights(weights)
        self._set_version(self.version + 1 if version is None else version)
        return self.version

    def apply_weights(self, weights: Any, inplace: bool = True) -> None:
        """Writes ``weights`` into this end's model.

        Args:
            weights: the weights to apply (a module, a state dict or a TensorDict).
            inplace: copy into the model's tensors (else bind the module to them).
        """
        if self.model is None:
            raise RuntimeError(f"{type(self).__name__}.apply_weights: this end has no model")
        self.strategy.apply_weights(self.model, weights, inplace=inplace)

    def shutdown(self) -> None:
        """Closes this end's transports."""
        for transport in self._transports.values():
            close = getattr(transport, "close", None)
            if close is not None:
                close()
        self._transports = {}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(role={self._role}, version={self.version}, "
            f"receivers={len(self._transports)})"
        )


class NoWeightSyncScheme(WeightSyncScheme):
    """A scheme that never moves weights (receivers keep the weights they started with).

    :meth:`send` still counts versions, so that data collected "after an update" can be told
    apart; nothing reaches the receivers.

    Examples:
        >>> scheme = NoWeightSyncScheme()
        >>> scheme.init_on_sender(torch.nn.Linear(2, 1))
        >>> scheme.send()
        1
    """

    def create_transport(self, **kwargs: Any) -> TransportBackend:
        """A transport that carries nothing."""
        return _NullTransport()

    def _push(self, weights: FlatWeights, version: int, worker_ids: Any) -> None:
        return None

    def _payload(self, weights: Any | None) -> FlatWeights:
        return {}

    def receive(
        self,
        timeout: float | None = None,
        *,
        weights: Any | None = None,
        version: int | None = None,
    ) -> int | None:
        """Nothing is ever received: returns ``None``."""
        return None


class _NullTransport:
    def send_weights(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        return None

    def receive_weights(
        self, timeout: float | None = None
    ) -> tuple[Mapping[str, torch.Tensor], int] | None:
        return None

    def check_connection(self) -> bool:
        return True
