"""Key layouts of a batched env: the entries that cross between it and its workers.

The keys a worker reads (actions and states), the keys a step writes (observations, rewards,
done flags) and the keys a reset writes (observations, done flags and states) are fixed by the
specs, so they are listed once, as :class:`Layout` objects, and every step moves exactly those
entries, as flat lists of values aligned with the layout's paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._td_compat import entries, new_unchecked
from torchrl.data.specs import TensorSpec

__all__ = ["Layout", "Path", "get_leaf"]

#: A key as a flat tuple of strings.
Path = tuple[str, ...]


def get_leaf(td: TensorDictBase, path: Path) -> Any:
    """The entry at ``path`` of a TensorDict, or ``None``; reads plain TensorDicts' dicts.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.batched._layout import get_leaf
        >>> td = TensorDict(agents=TensorDict(obs=torch.zeros(2)))
        >>> get_leaf(td, ("agents", "obs")).shape, get_leaf(td, ("agents", "x"))
        (torch.Size([2]), None)
    """
    node: Any = td
    for key in path:
        if type(node) is TensorDict:
            node = entries(node).get(key)
        else:
            node = node.get(key, None)
        if node is None:
            return None
    return node


class _Node:
    """A level of a nested layout: its batch sizes (batched and per worker) and its entries."""

    __slots__ = ("entries", "full", "inner")

    def __init__(self, full: torch.Size, lead: int) -> None:
        self.full = torch.Size(full)
        self.inner = torch.Size(full[lead:])
        # name -> leaf index (int) or sub-node
        self.entries: dict[str, int | _Node] = {}


class Layout:
    """An ordered list of leaf keys and the nested structure that holds them.

    Values move as flat lists aligned with :attr:`paths`; :meth:`build` turns such a list back
    into a (nested) TensorDict, of the batched shape (``full=True``) or of one worker's.

    Args:
        entries: ``(path, leaf_spec)`` pairs, leaf specs of the batched shape ``[n, *inner, ...]``.
        node_shape: the batched batch shape of a nested node, given its path (``()``: root).
        lead: the number of leading (worker) dims (1).
        device: the device of the TensorDicts built.

    Examples:
        >>> import torch
        >>> from torchrl.data import Unbounded
        >>> from torchrl.envs.batched._layout import Layout
        >>> entries = [(("obs",), Unbounded(shape=(2, 3)))]
        >>> layout = Layout(entries, lambda path: torch.Size([2]), 1, None)
        >>> layout.zeros()["obs"].shape, layout.build([torch.ones(3)], full=False).batch_size
        (torch.Size([2, 3]), torch.Size([]))
    """

    __slots__ = ("device", "flat_keys", "paths", "root", "shapes", "specs")

    def __init__(
        self,
        entries: Sequence[tuple[Path, TensorSpec]],
        node_shape: Callable[[Path], torch.Size],
        lead: int,
        device: torch.device | None,
    ) -> None:
        self.paths: list[Path] = []
        self.specs: list[TensorSpec] = []
        self.device = device
        self.root = _Node(node_shape(()), lead)
        nodes: dict[Path, _Node] = {(): self.root}
        for path, spec in entries:
            if path in nodes or path in self.paths:
                continue
            node = self.root
            for depth in range(1, len(path)):
                prefix = path[:depth]
                child = nodes.get(prefix)
                if child is None:
                    child = nodes[prefix] = _Node(node_shape(prefix), lead)
                    node.entries[prefix[-1]] = child
                node = child
            node.entries[path[-1]] = len(self.paths)
            self.paths.append(path)
            self.specs.append(spec)
        self.shapes = [spec.shape for spec in self.specs]
        # Most envs have no nested entries: their TensorDicts are built without recursion.
        flat = all(len(p) == 1 for p in self.paths)
        self.flat_keys: list[str] | None = [p[0] for p in self.paths] if flat else None

    def __len__(self) -> int:
        return len(self.paths)

    def build(self, values: Sequence[torch.Tensor | None], full: bool = True) -> TensorDict:
        """A TensorDict holding ``values`` (aligned with :attr:`paths`; ``None`` entries skipped)."""
        keys = self.flat_keys
        if keys is not None:
            items = {k: v for k, v in zip(keys, values) if v is not None}
            root = self.root
            # The values come from buffers or env outputs of the layout's shapes: skip the
            # checks of the public constructor.
            return new_unchecked(
                cast(dict, items),
                batch_size=root.full if full else root.inner,
                device=self.device,
                nested=False,
            )
        out = _build(self.root, values, full, self.device)
        if out is None:  # nothing given at all
            root = self.root
            out = new_unchecked(
                {}, batch_size=root.full if full else root.inner, device=self.device
            )
        return out

    def read(self, td: TensorDictBase) -> list[Any]:
        """The entries of ``td`` at :attr:`paths` (``None`` where missing)."""
        return [get_leaf(td, path) for path in self.paths]

    def zeros(self) -> TensorDict:
        """A TensorDict of zeros of the batched shape (the buffers of a batched env)."""
        return self.build([spec.zero() for spec in self.specs], full=True)


def _build(
    node: _Node, values: Sequence[Any], full: bool, device: torch.device | None
) -> TensorDict | None:
    items: dict[str, Any] = {}
    for name, entry in node.entries.items():
        if type(entry) is int:
            value = values[entry]
        else:
            value = _build(entry, values, full, device)  # type: ignore[arg-type]
        if value is not None:
            items[name] = value
    if not items and node.entries:
        return None
    return new_unchecked(
        cast(dict, items), batch_size=node.full if full else node.inner, device=device, nested=False
    )
