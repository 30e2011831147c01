"""``ModuleAgent``: any TensorDict module (policy, critic, world model) as an agent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from torchrl._keys import NEXT
from torchrl._types import NestedKey
from torchrl.agents.agent import Agent
from torchrl.agents.workspace import Workspace
from torchrl.envs.utils import ExplorationType, exploration_type, set_exploration_type

__all__ = ["ModuleAgent"]


class ModuleAgent(Agent):
    """Runs a TensorDict module on step ``t`` of a workspace and writes its outputs there.

    At each call the module sees every variable of step ``t`` but those under ``"next"`` (a
    TensorDict ``[*B]`` of views), so it finds what it reads beyond its ``in_keys``
    (``"is_init"`` for a recurrent module);
    its ``out_keys`` are written back at ``t``. Replayed (:func:`~torchrl.agents.replay`), the
    module runs once on the whole sequence ``[*B, T]`` in recurrent mode.

    Args:
        module: a ``TensorDictModule``/``TensorDictSequential``/actor, or any
            ``TensorDictModuleBase``.
        out_keys: the outputs to write (default: the module's ``out_keys``); e.g. leave the
            sampled action out of an agent that replays a stochastic policy.
        exploration_type: run the module under this exploration type (e.g.
            ``ExplorationType.DETERMINISTIC`` for an evaluation agent); ``None`` keeps the
            caller's.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> agent = ModuleAgent(TensorDictModule(torch.nn.Linear(3, 2), ["obs"], ["out"]))
        >>> ws = Workspace(batch_size=[4])
        >>> ws.set("obs", 0, torch.ones(4, 3))
        >>> agent(ws, t=0)
        >>> ws.get("out", 0).shape
        torch.Size([4, 2])
    """

    def __init__(
        self,
        module: TensorDictModuleBase,
        out_keys: Sequence[NestedKey] | None = None,
        exploration_type: ExplorationType | None = None,
    ) -> None:
        super().__init__()
        if not callable(module):
            raise TypeError(f"ModuleAgent: module must be callable, got {type(module).__name__}")
        self.module = module
        keys = out_keys if out_keys is not None else getattr(module, "out_keys", None)
        if keys is None:
            raise ValueError(
                f"ModuleAgent: {type(module).__name__} has no out_keys; pass out_keys=[...]"
            )
        self.out_keys: list[NestedKey] = list(keys)
        self.exploration_type = exploration_type

    def _run(self, td: TensorDictBase) -> TensorDictBase:
        wanted = self.exploration_type
        if wanted is None or exploration_type() is wanted:
            out = self.module(td)  # already in force: no context to enter at every step
        else:
            with set_exploration_type(wanted):
                out = self.module(td)
        return td if out is None else out

    def forward(self, workspace: Workspace, t: int = 0, **kwargs: Any) -> None:
        out = self._run(workspace.get_step(t, exclude=(NEXT,)))
        try:
            workspace.set_step(t, out, keys=self.out_keys)
        except KeyError:
            missing = [k for k in self.out_keys if k not in out.keys(include_nested=True)]
            if not missing:
                raise
            raise KeyError(
                f"ModuleAgent: {type(self.module).__name__} did not write {missing[0]!r} "
                f"at step {t}"
            ) from None

    def replay(self, workspace: Workspace, t0: int = 0, **kwargs: Any) -> None:
        length = workspace.time_length
        if t0 >= length:
            return
        out = self._run(workspace.time_slice(t0, length))
        nb = len(workspace.batch_size or ())
        for key in self.out_keys:
            value = out.get(key, None)
            if value is None:
                continue  # a step-only output (a recurrent module's next state)
            if t0 == 0:
                workspace.set_full(key, value)
            else:
                if key not in workspace:
                    workspace.set(key, t0, value.select(nb, 0))
                workspace.get_full(key).narrow(nb, t0, length - t0).copy_(value)
