"""``ActionChunkExecutor``: play a chunk policy's actions one env step at a time.

A chunk policy (ACT, Diffusion Policy with a horizon, VLAs) predicts the next ``k`` actions at
once. The executor calls it, then hands out the chunk's actions on the following steps, and
calls it again after ``execute_steps`` actions (receding horizon: ``execute_steps < k``
discards the tail of each chunk) or when an episode starts.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import Tensor

from torchrl._keys import ACTION, IS_INIT
from torchrl._types import NestedKey
from torchrl.modules._spec_utils import module_keys

__all__ = ["ActionChunkExecutor"]


class ActionChunkExecutor(TensorDictModuleBase):
    """Executes a predicted action chunk step by step, re-querying the policy every k steps.

    Each sub-env (the tensordict's batch) keeps its own chunk and position. The policy is
    called, on the sub-envs that need it only, at the first call, after ``execute_steps``
    actions of the current chunk, and where ``init_key`` is ``True`` (an episode start: add
    :class:`~torchrl.envs.InitTracker` to the env, or call :meth:`reset` between rollouts).

    Args:
        policy: a tensordict module writing ``chunk_key`` (``[*B, k, *action_shape]``).
        execute_steps: actions played per chunk, ``1 <= execute_steps <= k`` (default: ``k``).
        chunk_key: where the policy writes its chunk.
        action_key: where the executor writes the action of the step.
        init_key: the episode-start flag (``[*B, 1]``); ignored when absent from the input.

    Attributes:
        num_queries: how many times the policy has been called (on any number of sub-envs).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> chunk = lambda obs: obs.unsqueeze(-2) + torch.arange(3.0).unsqueeze(-1)  # k = 3
        >>> policy = TensorDictModule(chunk, ["observation"], ["action_chunk"])
        >>> executor = ActionChunkExecutor(policy, execute_steps=2)
        >>> td = TensorDict(observation=torch.zeros(1), batch_size=[])
        >>> [executor(td.clone())["action"].item() for _ in range(4)], executor.num_queries
        ([0.0, 1.0, 0.0, 1.0], 2)
    """

    def __init__(
        self,
        policy: TensorDictModuleBase,
        execute_steps: int | None = None,
        *,
        chunk_key: NestedKey = "action_chunk",
        action_key: NestedKey = ACTION,
        init_key: NestedKey = IS_INIT,
    ) -> None:
        super().__init__()
        if execute_steps is not None and execute_steps < 1:
            raise ValueError(
                f"ActionChunkExecutor: execute_steps must be >= 1, got {execute_steps}"
            )
        self.policy = policy
        self.execute_steps = execute_steps
        self.chunk_key = chunk_key
        self.action_key = action_key
        self.init_key = init_key
        policy_in: Sequence[NestedKey] = list(getattr(policy, "in_keys", []))
        self.in_keys = module_keys([*policy_in, init_key])
        self.out_keys = module_keys([action_key])
        self.num_queries = 0  # calls of the policy (over any number of sub-envs) so far
        self._chunk: Tensor | None = None
        self._cursor: Tensor | None = None

    def reset(self) -> None:
        """Forgets the current chunks: the next call queries the policy for every sub-env."""
        self._chunk = None
        self._cursor = None

    def _query(self, tensordict: TensorDictBase, where: Tensor | None) -> Tensor:
        inputs = tensordict.copy() if where is None else tensordict[where]
        chunk = self.policy(inputs).get(self.chunk_key)
        self.num_queries += 1
        batch = inputs.batch_dims
        if chunk.ndim <= batch:
            raise ValueError(
                f"ActionChunkExecutor: the policy wrote {self.chunk_key!r} of shape "
                f"{tuple(chunk.shape)}; a chunk needs a step dim after the batch dims "
                f"{tuple(inputs.batch_size)}"
            )
        length = chunk.shape[batch]
        steps = length if self.execute_steps is None else self.execute_steps
        if steps > length:
            raise ValueError(
                f"ActionChunkExecutor: execute_steps={steps} but the policy's chunks hold "
                f"{length} actions"
            )
        return chunk.detach()

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the action of this step at ``action_key``, querying the policy if needed.

        Args:
            tensordict: the env's current data (batch ``[*B]``).

        Returns:
            ``tensordict``, with the action written.
        """
        batch = tensordict.batch_size
        chunks, cursor = self._chunk, self._cursor
        if chunks is None or cursor is None or cursor.shape != batch:
            chunks = self._query(tensordict, None)
            cursor = torch.zeros(batch, dtype=torch.long, device=chunks.device)
        else:
            tail = chunks.shape[len(batch) :]
            need = cursor >= (tail[0] if self.execute_steps is None else self.execute_steps)
            init = tensordict.get(self.init_key, None)
            if init is not None:
                need = need | init.reshape(batch).to(need.device)
            if need.any():
                every = bool(need.all())
                new = self._query(tensordict, None if every else need)
                if new.shape[new.ndim - len(tail) :] != tail:
                    raise ValueError(
                        f"ActionChunkExecutor: the policy's chunk shape changed from "
                        f"{tuple(tail)} to {tuple(new.shape[new.ndim - len(tail) :])}"
                    )
                if every:
                    chunks = new
                else:
                    chunks = chunks.clone()
                    chunks[need] = new
            cursor = torch.where(need, 0, cursor)
        # the action at each sub-env's position in its chunk
        flat = chunks.reshape(-1, *chunks.shape[len(batch) :])
        action = flat[torch.arange(flat.shape[0], device=flat.device), cursor.reshape(-1)]
        tensordict.set(self.action_key, action.reshape(*batch, *action.shape[1:]))
        self._chunk, self._cursor = chunks, cursor + 1
        return tensordict
