"""``DataLoaderAgent``: batches of a dataset or a replay buffer, put into a workspace."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from tensordict import TensorDictBase

from torchrl.agents.agent import Agent
from torchrl.agents.workspace import Workspace

__all__ = ["DataLoaderAgent"]


class DataLoaderAgent(Agent):
    """Writes the next batch of ``data`` into the workspace at each call.

    ``data`` is a replay buffer (anything with ``sample()``: each call samples a batch) or an
    iterable of TensorDicts (a ``DataLoader``, a list, a collector), started again once it is
    exhausted when ``cycle``. A batch with a time dim (``time_dim=True``: batch ``[*B, T]``,
    e.g. from a ``SliceSampler``) replaces the workspace's content, key by key, without
    copies; a batch of single steps (``[*B]``) is written at step ``t``.

    Args:
        data: a replay buffer or an iterable of TensorDicts.
        time_dim: whether the batches carry a time dim (last batch dim).
        cycle: restart an exhausted iterable (else ``StopIteration`` propagates).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batches = [TensorDict({"obs": torch.full((2, 3), float(i))}, [2]) for i in range(2)]
        >>> loader = DataLoaderAgent(batches)
        >>> ws = Workspace(batch_size=[2])
        >>> loader(ws, t=0); loader(ws, t=1); loader(ws, t=2)
        >>> ws.get_full("obs")[0, :, 0]
        tensor([0., 1., 0.])
    """

    def __init__(self, data: Any, time_dim: bool = False, cycle: bool = True) -> None:
        super().__init__()
        if not hasattr(data, "sample") and not isinstance(data, Iterable):
            raise TypeError(
                "DataLoaderAgent: data must be a replay buffer (with sample()) or an iterable "
                f"of TensorDicts, got {type(data).__name__}"
            )
        self.data = data
        self.time_dim = time_dim
        self.cycle = cycle
        self._iterator: Iterator[Any] | None = None

    def next_batch(self) -> TensorDictBase:
        """The next batch: a sample of the buffer, or the iterable's next item."""
        if hasattr(self.data, "sample"):
            batch = self.data.sample()
        else:
            if self._iterator is None:
                self._iterator = iter(self.data)
            try:
                batch = next(self._iterator)
            except StopIteration:
                if not self.cycle:
                    raise
                self._iterator = iter(self.data)
                batch = next(self._iterator)
        if not isinstance(batch, TensorDictBase):
            raise TypeError(
                f"DataLoaderAgent: the data gave a {type(batch).__name__}, expected a TensorDict"
            )
        return batch

    def forward(self, workspace: Workspace, t: int = 0, **kwargs: Any) -> None:
        batch = self.next_batch()
        if not self.time_dim:
            workspace.set_step(t, batch)
            return
        if batch.ndim < 1:
            raise ValueError("DataLoaderAgent(time_dim=True): the batch has no time dim")
        if workspace.batch_size is not None and batch.batch_size[:-1] != workspace.batch_size:
            raise ValueError(
                f"DataLoaderAgent: the batch has size {list(batch.batch_size)}, the workspace "
                f"holds [{list(workspace.batch_size)}, T]"
            )
        # The batch becomes the workspace's storage: no copy.
        workspace.load_tensordict(batch)

    def replay(self, workspace: Workspace, t0: int = 0, **kwargs: Any) -> None:
        """Nothing to do: the stored steps are the data."""
