"""Helpers around the env contract: exploration modes, ``RandomPolicy``, and re-exports.

``step_mdp`` (from :mod:`torchrl.envs._mdp`) and ``check_env_specs``/``check_entry`` (from
:mod:`torchrl.envs._spec_checks`) are importable from here, where users look for them.
"""

from __future__ import annotations

import functools

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, interaction_type, set_interaction_type

from torchrl._keys import ACTION, ACTION_MASK, DONE_KEYS, RESET
from torchrl._types import NestedKey
from torchrl.data.specs import Composite, TensorSpec, Unbounded
from torchrl.envs._mdp import step_mdp
from torchrl.envs._spec_checks import check_entry, check_env_specs

__all__ = [
    "ExplorationType",
    "RandomPolicy",
    "check_env_specs",
    "check_entry",
    "exploration_type",
    "make_composite_from_td",
    "masked_choice",
    "set_exploration_type",
    "step_mdp",
    "terminated_or_truncated",
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


# ----------------------------------------------------------------------------- done and specs
def _as_tuple(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def terminated_or_truncated(
    data: TensorDictBase,
    full_done_spec: Composite | None = None,
    key: NestedKey | None = RESET,
    write_full_false: bool = False,
) -> bool:
    """ORs the done flags of each group of ``done``/``terminated``/``truncated`` entries, in place.

    A group is the set of done leaves under one prefix (the root, or e.g. ``"agents"``); its
    aggregate is written next to them under ``key`` (``"_reset"`` by default, so that the
    result can drive a partial reset). An entry already present under ``key`` is kept.

    Args:
        data: the data to read (and write), e.g. the ``"next"`` part of a step.
        full_done_spec: the env's ``full_done_spec``, naming the done leaves; ``None`` looks for
            leaves named ``"done"``, ``"terminated"`` or ``"truncated"`` in ``data``.
        key: where each aggregate goes, shape of the done leaves; ``None`` writes nothing.
        write_full_false: also write aggregates that are all ``False``.

    Returns:
        ``True`` when any done flag read is ``True``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.utils import terminated_or_truncated
        >>> data = TensorDict(
        ...     done=torch.tensor([[False], [False]]),
        ...     agents=TensorDict(truncated=torch.tensor([[True], [False]]), batch_size=[2]),
        ...     batch_size=[2],
        ... )
        >>> terminated_or_truncated(data)
        True
        >>> data["agents", "_reset"].squeeze(-1).tolist(), "_reset" in data.keys()
        ([True, False], False)
    """
    if full_done_spec is not None:
        leaves = [_as_tuple(k) for k in full_done_spec.keys(True, True)]
    else:
        leaves = [
            k
            for k in (_as_tuple(k) for k in data.keys(True, True))
            if k[-1] in DONE_KEYS and (key is None or k[-1] != _as_tuple(key)[-1])
        ]
    groups: dict[tuple[str, ...], list[torch.Tensor]] = {}
    for leaf in leaves:
        value = data.get(leaf, None)
        if value is not None:
            groups.setdefault(leaf[:-1], []).append(value)
    any_done = False
    for prefix, values in groups.items():
        done = functools.reduce(torch.logical_or, values)
        group_done = bool(done.any())
        any_done = any_done or group_done
        if key is None or not (group_done or write_full_false):
            continue
        out = prefix + _as_tuple(key)
        if data.get(out, None) is None:
            data.set(out, done.clone() if len(values) == 1 else done)
    return any_done


def make_composite_from_td(
    data: TensorDictBase, *, unsqueeze_null_shapes: bool = True, dynamic_shape: bool = False
) -> Composite:
    """Builds a ``Composite`` of ``Unbounded`` specs that matches a TensorDict's entries.

    Args:
        data: the TensorDict; its batch size becomes the Composite's shape, each leaf's shape,
            dtype and device its spec's.
        unsqueeze_null_shapes: give 0-dim leaves the shape ``(1,)``.
        dynamic_shape: not supported here (``True`` raises ``NotImplementedError``): specs
            have static shapes.

    Returns:
        The ``Composite``, nested like ``data``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.utils import make_composite_from_td
        >>> data = TensorDict(obs=torch.zeros(4, 3), next=TensorDict(r=torch.zeros(4, 1)))
        >>> data.batch_size = [4]
        >>> spec = make_composite_from_td(data)
        >>> spec["obs"].shape, spec["next", "r"].shape, spec.shape
        (torch.Size([4, 3]), torch.Size([4, 1]), torch.Size([4]))
    """
    if dynamic_shape:
        raise NotImplementedError(
            "make_composite_from_td(dynamic_shape=True): specs here have static shapes"
        )
    entries: dict[NestedKey, TensorSpec] = {}
    for name, value in data.items():
        if isinstance(value, TensorDictBase):
            entries[name] = make_composite_from_td(
                value, unsqueeze_null_shapes=unsqueeze_null_shapes
            )
        else:
            shape = value.shape if value.ndim or not unsqueeze_null_shapes else torch.Size([1])
            entries[name] = Unbounded(shape=shape, dtype=value.dtype, device=value.device)
    return Composite(entries, shape=data.batch_size, device=data.device)
