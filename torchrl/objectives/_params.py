"""Which tensors a loss calls its networks with, and how they get into the network.

- :class:`ParamSet` names the three sets a loss uses: the online parameters (trained), the
  target copy (delayed, updated by :class:`~torchrl.objectives.SoftUpdate` /
  :class:`~torchrl.objectives.HardUpdate`) and a detached view of the online ones (gradients
  flow through the network to its inputs, not to its weights).
- :class:`TensorSlots` puts a list of tensors into a module's parameter and buffer slots and
  takes them out again. It is the only code of the objectives that touches
  ``nn.Module._parameters`` / ``_buffers`` (torch private API), for the reasons given there.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from torch import Tensor, nn

__all__ = ["ParamSet", "TensorSlots"]


class ParamSet(enum.Enum):
    """The tensors a loss calls one of its networks with.

    - ``ONLINE``: the network's own parameters and buffers (they get gradients).
    - ``TARGET``: the delayed copy made with ``create_target_params=True``; a network without
      one uses its online tensors, detached.
    - ``DETACHED``: the online tensors, detached (no gradient to the weights, but through them).

    Examples:
        >>> from torchrl.modules import QValueActor
        >>> from torchrl.objectives import DQNLoss
        >>> loss = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="categorical"))
        >>> online = loss.network_tensors("value_network", ParamSet.ONLINE)
        >>> target = loss.network_tensors("value_network", ParamSet.TARGET)
        >>> online[0].requires_grad, target[0].requires_grad
        (True, False)
    """

    ONLINE = "online"
    TARGET = "target"
    DETACHED = "detached"


class TensorSlots:
    """The parameter and buffer slots of a module, as one flat list.

    ``keys`` are the dotted paths of :meth:`tensordict.TensorDict.from_module` as tuples
    (``("0", "weight")``); the slots keep the order of ``keys``.

    The slots are read and written through the modules' ``_parameters`` and ``_buffers`` dicts:
    ``setattr`` refuses a plain tensor (a target copy, a detached view, an ensemble member under
    :func:`torch.vmap`) in a parameter slot, and the public alternatives
    (``TensorDict.to_module``, ``torch.func.functional_call``) cost several times more per call
    than these few dict writes on the small networks of RL. Keeping every such access in this
    class leaves one place to change if torch changes them.

    Args:
        module: the network.
        keys: the paths of its parameters and buffers.

    Examples:
        >>> net = nn.Linear(2, 1)
        >>> slots = TensorSlots(net, [("weight",), ("bias",)])
        >>> import torch
        >>> with slots.swapped([torch.zeros(1, 2), torch.ones(1)]):
        ...     net(torch.ones(1, 2))
        tensor([[1.]])
        >>> isinstance(net.weight, nn.Parameter)
        True
    """

    def __init__(self, module: nn.Module, keys: Sequence[tuple[str, ...]]) -> None:
        self._stores: list[dict[str, Any]] = []
        self._names: list[str] = []
        for key in keys:
            owner = module.get_submodule(".".join(key[:-1])) if len(key) > 1 else module
            name = key[-1]
            store: dict[str, Any]
            if name in owner._parameters:
                store = owner._parameters
            elif name in owner._buffers:
                store = owner._buffers
            else:  # pragma: no cover - from_module lists only parameters and buffers
                raise KeyError(f"{'.'.join(key)} is neither a parameter nor a buffer")
            self._stores.append(store)
            self._names.append(name)

    def __len__(self) -> int:
        return len(self._names)

    def read(self) -> list[Tensor]:
        """The tensors now in the slots, in the order of the keys."""
        return [store[name] for store, name in zip(self._stores, self._names)]

    def write(self, tensors: Sequence[Tensor | None]) -> list[Tensor | None]:
        """Puts ``tensors`` into the slots; returns what was there."""
        old = []
        for store, name, tensor in zip(self._stores, self._names, tensors):
            old.append(store[name])
            store[name] = tensor
        return old

    def clear(self) -> None:
        """Empties every slot (an ensemble template keeps no tensors of its own)."""
        self.write([None] * len(self._names))

    @contextmanager
    def swapped(self, tensors: Sequence[Tensor]) -> Iterator[None]:
        """Runs the block with ``tensors`` in the slots, then puts the old ones back."""
        old = self.write(tensors)
        try:
            yield
        finally:
            self.write(old)
