"""Helpers around the env contract: exploration modes, ``RandomPolicy``, and re-exports.

``step_mdp`` (from :mod:`torchrl.envs._mdp`) and ``check_env_specs``/``check_entry`` (from
:mod:`torchrl.envs._spec_checks`) are importable from here, where users look for them.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, interaction_type, set_interaction_type

from torchrl._keys import ACTION, ACTION_MASK
from torchrl._types import NestedKey
from torchrl.data.specs import TensorSpec
from torchrl.envs._mdp import step_mdp
from torchrl.envs._spec_checks import check_entry, check_env_specs

__all__ = [
    "ExplorationType",
    "RandomPolicy",
    "check_env_specs",
    "check_entry",
    "exploration_type",
    "masked_choice",
    "set_exploration_type",
    "step_mdp",
]

#: The exploration modes (``RANDOM``, ``MODE``, ``MEAN``, ``MEDIAN``, ``DETERMINISTIC``). It *is*
#: tensordict's :class:`~tensordict.nn.InteractionType`, so that probabilistic modules from
#: ``tensordict.nn`` and torchrl modules read one and the same setting.
ExplorationType = InteractionType


class set_exploration_type(set_interaction_type):
    """Sets the exploration type inside a ``with`` block or a decorated function.

    Probabilistic actors sample when the type is ``RANDOM`` and return their mode, mean or a
    deterministic value otherwise. The setting is tensordict's interaction type, so modules from
    ``tensordict.nn`` follow it too; the previous type comes back when the block ends.

    Args:
        type: an :class:`ExplorationType` or its name (``"random"``, ``"mode"``, ...); ``None``
            lets every module use its own default. Defaults to ``DETERMINISTIC``.
        thread_local: if ``True``, only the calling thread sees the new type.

    Examples:
        >>> from torchrl.envs.utils import ExplorationType, exploration_type, set_exploration_type
        >>> with set_exploration_type(ExplorationType.RANDOM):
        ...     print(exploration_type())
        random
        >>> @set_exploration_type("mode")
        ... def evaluate():
        ...     return exploration_type()
        >>> evaluate() is ExplorationType.MODE
        True
    """


def exploration_type() -> InteractionType | None:
    """Returns the exploration type in force, or ``None`` outside any :class:`set_exploration_type`.

    Returns:
        The current :class:`ExplorationType`, or ``None`` when modules use their own default.

    Examples:
        >>> from torchrl.envs.utils import exploration_type, set_exploration_type
        >>> print(exploration_type())
        None
        >>> with set_exploration_type("mean"):
        ...     print(exploration_type())
        mean
    """
    return interaction_type()


# -------------------------------------------------------------------------------- RandomPolicy
class RandomPolicy:
    """A policy that writes a random action drawn from an action spec.

    When the input holds an action mask (``mask_key``, boolean, ``[*B, n]``), categorical and
    one-hot actions are drawn uniformly among the allowed choices.

    Args:
        action_spec: the env's ``action_spec`` (a leaf) or ``full_action_spec`` (a ``Composite``).
        action_key: where a leaf action is written.
        mask_key: the key of an optional boolean action mask.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Categorical
        >>> from torchrl.envs.utils import RandomPolicy
        >>> policy = RandomPolicy(Categorical(4, shape=(2,)))
        >>> td = TensorDict(action_mask=torch.tensor([[False, False, True, False]] * 2), batch_size=[2])
        >>> policy(td)["action"]
        tensor([2, 2])
    """

    def __init__(
        self,
        action_spec: TensorSpec,
        action_key: NestedKey = ACTION,
        mask_key: NestedKey = ACTION_MASK,
    ) -> None:
        self.action_spec = action_spec
        self.action_key = action_key
        self.mask_key = mask_key
        kind = type(action_spec).__name__
        self._is_composite = kind in ("Composite", "CompositeSpec")
        self._maskable = kind in ("Categorical", "OneHot")

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._is_composite:
            return tensordict.update(self.action_spec.rand())
        mask = tensordict.get(self.mask_key, None) if self._maskable else None
        if mask is not None:
            action = masked_choice(self.action_spec, mask)
        else:
            action = self.action_spec.rand()
        tensordict.set(self.action_key, action)
        return tensordict

    def __repr__(self) -> str:
        return f"{type(self).__name__}(action_key={self.action_key!r}, spec={self.action_spec!r})"


def masked_choice(spec: TensorSpec, mask: torch.Tensor) -> torch.Tensor:
    """A uniform draw among the choices ``mask`` allows, for a ``Categorical`` or ``OneHot`` spec.

    Args:
        spec: the action spec (``Categorical`` or ``OneHot``), of shape ``[*B, ...]``.
        mask: a boolean mask ``[*B, n]`` of the allowed choices.

    Returns:
        An action of ``spec``'s shape and dtype: indices, or one-hot rows for a ``OneHot``.

    Examples:
        >>> import torch
        >>> from torchrl.data import Categorical
        >>> from torchrl.envs.utils import masked_choice
        >>> masked_choice(Categorical(3, shape=(2,)), torch.tensor([[False, True, False]] * 2))
        tensor([1, 1])
    """
    # argmax of uniform noise restricted to the allowed entries: a uniform draw among them,
    # vectorized over any batch shape.
    noise = torch.rand(mask.shape, device=mask.device).masked_fill_(~mask.bool(), -1.0)
    index = noise.argmax(-1)
    if type(spec).__name__ == "OneHot":
        return torch.nn.functional.one_hot(index, mask.shape[-1]).to(spec.dtype)
    return index.to(spec.dtype).reshape((*mask.shape[:-1], *spec.shape[mask.ndim - 1 :]))
