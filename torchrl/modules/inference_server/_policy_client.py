"""A TensorDict policy module that asks an inference server for its outputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from torchrl.modules.inference_server._transport import InferenceTransport

__all__ = ["PolicyClientModule"]


def _leaf_keys(td: TensorDictBase | None) -> list[NestedKey]:
    if td is None:
        return []
    return list(td.keys(include_nested=True, leaves_only=True))


class PolicyClientModule(TensorDictModuleBase):
    """A policy whose forward sends the TensorDict to an inference server client.

    ``module(td)`` sends ``td`` through the client, writes the entries of the response
    (``out_keys``, or all of them when ``out_keys`` is not given) into ``td`` and returns
    ``td``, like a local ``TensorDictModule`` would. It holds no weights.

    Args:
        client: an :class:`InferenceClient` (or any callable mapping a TensorDict to the
            response), or a transport, whose :meth:`~InferenceTransport.client` is then used.

    Keyword Args:
        in_keys: the keys the module reads (default: the client's request layout, if fixed).
        out_keys: the keys written back (default: the client's response layout, if fixed,
            else every entry of each response).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules.inference_server import (
        ...     InferenceServer, PolicyClientModule, ThreadingTransport)
        >>> policy = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action"])
        >>> transport = ThreadingTransport()
        >>> remote = PolicyClientModule(transport, in_keys=["observation"], out_keys=["action"])
        >>> with InferenceServer(policy, transport):
        ...     td = remote(TensorDict(observation=torch.zeros(3)))
        ...     # or in two halves, other work running in between:
        ...     other = TensorDict(observation=torch.ones(3))
        ...     handle = remote.submit(other)
        ...     other = remote.complete(other, handle)
        >>> sorted(td.keys()), other["action"].shape
        (['action', 'observation'], torch.Size([2]))
    """

    def __init__(
        self,
        client: Callable[[TensorDictBase], TensorDictBase] | InferenceTransport,
        *,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(client, InferenceTransport):
            client = client.client()
        if not callable(client):
            raise TypeError(
                f"client must be an InferenceClient, a callable or a transport, got "
                f"{type(client).__name__}"
            )
        self.client = client
        self._all_out = out_keys is None and getattr(client, "response", None) is None
        if in_keys is None:
            in_keys = _leaf_keys(getattr(client, "request", None))
        if out_keys is None:
            out_keys = _leaf_keys(getattr(client, "response", None))
        self.in_keys = list(in_keys)  # type: ignore[arg-type]
        self.out_keys = list(out_keys)  # type: ignore[arg-type]

    def submit(self, tensordict: TensorDictBase) -> Any:
        """Sends ``tensordict`` to the server without waiting for the answer.

        Args:
            tensordict: the request.

        Returns:
            A handle for :meth:`complete` (the client's future-like result; a client that only
            answers blocking calls has answered already). The class example shows both halves.
        """
        submit = getattr(self.client, "submit", None)
        if submit is None:
            return _Answered(self.client(tensordict))
        return submit(tensordict)

    def complete(self, tensordict: TensorDictBase, handle: Any) -> TensorDictBase:
        """Waits for the answer to :meth:`submit` and writes its entries into ``tensordict``.

        Args:
            tensordict: the request that was submitted.
            handle: what :meth:`submit` returned for it.

        Returns:
            ``tensordict``, with the response entries written in.
        """
        response = handle.result()
        if self._all_out:
            return tensordict.update(response)
        for key in self.out_keys:
            tensordict.set(key, response.get(key))
        return tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Sends ``tensordict`` to the server and writes the response's entries into it.

        Args:
            tensordict: the request.

        Returns:
            ``tensordict``, with the response entries written in.
        """
        return self.complete(tensordict, self.submit(tensordict))


class _Answered:
    """The handle of a request a blocking client already answered."""

    def __init__(self, response: TensorDictBase) -> None:
        self.response = response

    def result(self, timeout: float | None = None) -> TensorDictBase:
        return self.response
