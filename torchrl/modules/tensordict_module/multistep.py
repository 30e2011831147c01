"""``MultiStepActorWrapper``: TorchRL's name for playing a multi-action actor one step at a time.

The work is done by :class:`~torchrl.modules.tensordict_module.action_chunk.ActionChunkExecutor`;
this wrapper gives it TorchRL's signature: the actor writes its ``n_steps`` actions under the
action key itself (``[*B, n_steps, *action_shape]``), and the wrapper replaces that entry with the
action of the current step.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from torchrl._keys import IS_INIT
from torchrl._types import NestedKey
from torchrl.modules.tensordict_module.action_chunk import ActionChunkExecutor

__all__ = ["MultiStepActorWrapper"]


def _ends_with_action(key: NestedKey) -> bool:
    last = key if isinstance(key, str) else key[-1]
    return last.endswith("action")


class MultiStepActorWrapper(ActionChunkExecutor):
    """Plays the ``n_steps`` actions an actor outputs at once, one per env step (a macro).

    The actor writes its action entry with a time dim right after the batch dims
    (``[*B, n_steps, *action_shape]``). The wrapper calls it, hands out one action per call, and
    calls it again once the macro is played or where ``init_key`` marks an episode start (add
    :class:`~torchrl.envs.InitTracker` to the env). Each sub-env keeps its own macro.

    Args:
        actor: the multi-action actor.
        n_steps: actions played per macro, at most the actor's macro length (``None``: all).

    Keyword Args:
        action_keys: the action entry, as a one-element list (default: the actor's one out_key
            whose last name ends with ``"action"``).
        init_key: the episode-start flag.
        keep_dim: keep a time dim of size 1 in the action written (``[*B, 1, *action_shape]``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> macro = lambda obs: obs.unsqueeze(-2) + torch.arange(3.0).unsqueeze(-1)  # 3 actions
        >>> actor = TensorDictModule(macro, ["observation"], ["action"])
        >>> wrapper = MultiStepActorWrapper(actor, n_steps=3)
        >>> td = TensorDict(observation=torch.zeros(1), is_init=torch.zeros(1, dtype=torch.bool))
        >>> [wrapper(td.clone())["action"].item() for _ in range(4)]
        [0.0, 1.0, 2.0, 0.0]
    """

    def __init__(
        self,
        actor: TensorDictModuleBase,
        n_steps: int | None = None,
        *,
        action_keys: Sequence[NestedKey] | None = None,
        init_key: NestedKey = IS_INIT,
        keep_dim: bool = False,
    ) -> None:
        if action_keys is None:
            keys = [k for k in getattr(actor, "out_keys", []) if _ends_with_action(k)]
            where = f"the actor's out_keys ending with 'action' ({keys})"
        else:
            keys = [action_keys] if isinstance(action_keys, (str, tuple)) else list(action_keys)
            where = f"action_keys={keys}"
        if len(keys) != 1:
            raise ValueError(
                f"MultiStepActorWrapper plays one action entry; {where} gives {len(keys)}. "
                "Pass action_keys=[key] (an actor writing several action entries is not "
                "supported: pack them into one entry)"
            )
        if n_steps is not None and (not isinstance(n_steps, int) or n_steps < 1):
            raise ValueError(f"MultiStepActorWrapper: n_steps must be an int >= 1, got {n_steps!r}")
        super().__init__(
            actor, execute_steps=n_steps, chunk_key=keys[0], action_key=keys[0], init_key=init_key
        )
        self.n_steps = n_steps
        self.keep_dim = bool(keep_dim)

    @property
    def actor(self) -> TensorDictModuleBase:
        """The wrapped multi-action actor."""
        return self.policy

    @property
    def action_keys(self) -> list[NestedKey]:
        """The action entry, as a list."""
        return [self.action_key]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes this step's action, querying the actor when a new macro is needed.

        Args:
            tensordict: the env's current data (batch ``[*B]``).

        Returns:
            ``tensordict`` with the action of the step (``[*B, *action_shape]``, or
            ``[*B, 1, *action_shape]`` with ``keep_dim``).
        """
        tensordict = super().forward(tensordict)
        if self.keep_dim:
            action = tensordict.get(self.action_key)
            tensordict.set(self.action_key, action.unsqueeze(tensordict.batch_dims))
        return tensordict
