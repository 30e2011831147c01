"""``step_mdp``: the next step's input built from a transition (``"next"`` moves to the root).

``step_mdp`` runs after every step of every rollout and collector, so what it drops is worked
out once per set of arguments (an :class:`MDPPlan`, cached), and applying a plan walks the
TensorDict's entry dicts directly and builds the next-step TensorDict once, without
``select``/``exclude``/``clone``. Envs keep the plan of their own keys in their spec cache and
call :func:`apply_mdp_plan` directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase, is_tensor_collection

from torchrl._keys import ACTION, DONE_KEYS, NEXT, REWARD
from torchrl._td_compat import entries, new_unchecked
from torchrl._types import DeviceLike, NestedKey
from torchrl.envs._key_paths import key_tuple

__all__ = ["MDPPlan", "apply_mdp_plan", "mdp_plan", "step_mdp"]

# An exclusion "tree" maps a first-level key to True (drop the entry) or to a sub-tree (copy the
# nested TensorDict without the entries the sub-tree drops).
_Tree = dict[str, Any]


def _keys_tuple(keys: NestedKey | Sequence[NestedKey] | None) -> tuple[tuple[str, ...], ...]:
    if keys is None:
        return ()
    if isinstance(keys, str) or (isinstance(keys, tuple) and all(isinstance(k, str) for k in keys)):
        return (key_tuple(keys),)
    return tuple(key_tuple(k) for k in keys)


def _build_tree(keys: Sequence[tuple[str, ...]]) -> _Tree:
    tree: _Tree = {}
    for key in keys:
        node = tree
        for part in key[:-1]:
            child = node.get(part)
            if child is True:
                break
            if child is None:
                child = node[part] = {}
            node = child
        else:
            node[key[-1]] = True
    return tree


class _Node:
    """A nested TensorDict under construction: the items gathered so far and its metadata."""

    __slots__ = ("batch_size", "device", "items")

    def __init__(self, like: TensorDictBase) -> None:
        self.batch_size = like.batch_size
        self.device = like.device
        self.items: dict[str, Any] = {}


def _gather(td: TensorDictBase, drop: _Tree | None, out: dict[str, Any]) -> None:
    """Copies the entries of ``td`` into ``out``, skipping ``drop``; nested TDs merge recursively.

    Nested TensorDicts are always rebuilt (a shallow copy), never shared: sharing one would let a
    later ``td.set(("group", "x"), ...)`` on the new step write into the previous step's data.
    """
    items = entries(td).items() if type(td) is TensorDict else td.items()
    for key, value in items:
        if drop:
            rule = drop.get(key)
            if rule is True:
                continue
        else:
            rule = None
        if isinstance(value, torch.Tensor) or not is_tensor_collection(value):
            out[key] = value
        elif _is_non_tensor(value):
            out[key] = value
        else:
            sub = cast(TensorDictBase, value)
            node = out.get(key)
            if not isinstance(node, _Node):
                node = _Node(sub)
                out[key] = node
            _gather(sub, rule, node.items)


def _is_non_tensor(value: Any) -> bool:
    # NonTensorData / NonTensorStack are tensor collections that hold a leaf value.
    return type(value).__name__ in ("NonTensorData", "NonTensorStack")


def _materialize(items: dict[str, Any], batch_size: torch.Size, device: DeviceLike) -> TensorDict:
    for key, value in items.items():
        if type(value) is _Node:
            items[key] = _materialize(value.items, value.batch_size, value.device)
    # The values come out of valid TensorDicts with the same batch size, so the checks of the
    # public constructor would only repeat work already done.
    return new_unchecked(cast(dict, items), batch_size=batch_size, device=device, nested=False)


class MDPPlan:
    """What ``step_mdp`` drops from the root and from ``"next"``, for one set of arguments.

    Args:
        reward_keys: the reward keys, as flat tuples.
        done_keys: the done keys, as flat tuples.
        action_keys: the action keys, as flat tuples.
        keep_other: keep root entries that are not in ``"next"``.
        exclude_reward: drop the reward keys.
        exclude_done: drop the done keys.
        exclude_action: drop the action keys.
    """

    __slots__ = (
        "flat_next_drop",
        "flat_root_drop",
        "keep_other",
        "next_drop",
        "root_drop",
        "root_keep",
    )

    def __init__(
        self,
        reward_keys: tuple[tuple[str, ...], ...],
        done_keys: tuple[tuple[str, ...], ...],
        action_keys: tuple[tuple[str, ...], ...],
        keep_other: bool,
        exclude_reward: bool,
        exclude_done: bool,
        exclude_action: bool,
    ) -> None:
        next_drop: list[tuple[str, ...]] = []
        if exclude_reward:
            next_drop.extend(reward_keys)
        if exclude_done:
            next_drop.extend(done_keys)
        root_drop = [(NEXT,), *next_drop]
        if exclude_action:
            root_drop.extend(action_keys)
        self.keep_other = keep_other
        self.root_drop = _build_tree(root_drop)
        self.next_drop = _build_tree(next_drop) or None
        # With keep_other=False only the actions survive from the root (when they are kept).
        self.root_keep = () if exclude_action else action_keys
        # Plans dropping root-level keys only also have a path for TensorDicts of plain tensors.
        flat = all(len(k) == 1 for k in root_drop) and all(len(k) == 1 for k in next_drop)
        self.flat_root_drop = frozenset(k[0] for k in root_drop) if flat else None
        self.flat_next_drop = frozenset(k[0] for k in next_drop) if flat else None


@lru_cache(maxsize=64)
def mdp_plan(
    reward_keys: tuple[tuple[str, ...], ...],
    done_keys: tuple[tuple[str, ...], ...],
    action_keys: tuple[tuple[str, ...], ...],
    keep_other: bool,
    exclude_reward: bool,
    exclude_done: bool,
    exclude_action: bool,
) -> MDPPlan:
    """The :class:`MDPPlan` of these arguments (cached: plans are shared, never modified).

    Examples:
        >>> from torchrl.envs._mdp import mdp_plan
        >>> plan = mdp_plan((("reward",),), (("done",),), (("action",),), True, True, False, True)
        >>> plan is mdp_plan((("reward",),), (("done",),), (("action",),), True, True, False, True)
        True
    """
    return MDPPlan(
        reward_keys,
        done_keys,
        action_keys,
        keep_other,
        exclude_reward,
        exclude_done,
        exclude_action,
    )


def apply_mdp_plan(
    tensordict: TensorDictBase,
    plan: MDPPlan,
    next_tensordict: TensorDictBase | None = None,
) -> TensorDictBase:
    """``step_mdp`` of ``tensordict`` along a plan made by :func:`mdp_plan`.

    Args:
        tensordict: a transition with batch ``[*B]`` holding a ``"next"`` entry.
        plan: what to drop.
        next_tensordict: if given, the result is written into it (and it is returned).

    Returns:
        The TensorDict for the next step, batch ``[*B]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs._mdp import apply_mdp_plan, mdp_plan
        >>> plan = mdp_plan((("reward",),), (("done",),), (("action",),), True, True, False, True)
        >>> td = TensorDict(obs=torch.zeros(1), action=torch.ones(1),
        ...                 next=TensorDict(obs=torch.ones(1), reward=torch.ones(1)))
        >>> sorted(apply_mdp_plan(td, plan).keys())
        ['obs']
    """
    if plan.flat_root_drop is not None and plan.keep_other and type(tensordict) is TensorDict:
        out = _flat_step(tensordict, plan.flat_root_drop, plan.flat_next_drop)
        if out is not None:
            if next_tensordict is not None:
                next_tensordict.update(out)
                return next_tensordict
            return out
    items: dict[str, Any] = {}
    if plan.keep_other:
        _gather(tensordict, plan.root_drop, items)
    else:
        for key in plan.root_keep:
            value = tensordict.get(key, None)
            if value is not None:
                _set_nested(items, key, value, tensordict)
    nxt = (
        entries(tensordict).get(NEXT)
        if type(tensordict) is TensorDict
        else tensordict.get(NEXT, None)
    )
    if nxt is not None:
        _gather(nxt, plan.next_drop, items)
    out = _materialize(items, tensordict.batch_size, tensordict.device)
    if next_tensordict is not None:
        next_tensordict.update(out)
        return next_tensordict
    return out


def _flat_step(
    tensordict: TensorDict, root_drop: frozenset[str], next_drop: frozenset[str] | None
) -> TensorDict | None:
    """``apply_mdp_plan`` for TensorDicts of plain tensors (``None`` when there is more)."""
    raw = entries(tensordict)
    items = {}
    tensor = torch.Tensor
    for key, value in raw.items():
        if key not in root_drop:
            if type(value) is not tensor:
                return None
            items[key] = value
    nxt = raw.get(NEXT)
    if nxt is not None:
        # No batch-size check: a nested TensorDict's leaves start with its parent's batch size,
        # so they fit the root whatever the batch size of "next" (the general path agrees).
        if type(nxt) is not TensorDict:
            return None
        for key, value in entries(nxt).items():
            if next_drop is None or key not in next_drop:
                if type(value) is not tensor:
                    return None
                items[key] = value
    return new_unchecked(
        cast(dict, items), batch_size=tensordict.batch_size, device=tensordict.device, nested=False
    )


def _set_nested(
    items: dict[str, Any], key: tuple[str, ...], value: Any, source: TensorDictBase
) -> None:
    for depth, part in enumerate(key[:-1]):
        node = items.get(part)
        if not isinstance(node, _Node):
            node = _Node(source.get(key[: depth + 1]))
            items[part] = node
        items = node.items
    items[key[-1]] = value


def step_mdp(
    tensordict: TensorDictBase,
    next_tensordict: TensorDictBase | None = None,
    keep_other: bool = True,
    exclude_reward: bool = True,
    exclude_done: bool = False,
    exclude_action: bool = True,
    reward_keys: NestedKey | Sequence[NestedKey] = REWARD,
    done_keys: NestedKey | Sequence[NestedKey] | None = None,
    action_keys: NestedKey | Sequence[NestedKey] = ACTION,
) -> TensorDictBase:
    """Builds the TensorDict of the next step: the ``"next"`` entries move to the root.

    The result holds the root entries (without ``"next"``, and without the actions when
    ``exclude_action``) overwritten by the entries of ``tensordict["next"]`` (without the rewards
    when ``exclude_reward``, without the done flags when ``exclude_done``). Excluded keys are
    dropped from the root too. Tensors are shared, not copied; nested TensorDicts are new objects,
    so writing into the result never changes ``tensordict``.

    Args:
        tensordict: a transition with batch ``[*B]`` holding a ``"next"`` entry.
        next_tensordict: if given, the result is written into it (and it is returned).
        keep_other: keep root entries that are not in ``"next"`` (e.g. a recurrent state).
        exclude_reward: drop the reward keys.
        exclude_done: drop the done keys.
        exclude_action: drop the action keys.
        reward_keys: the reward key(s); nested keys are tuples.
        done_keys: the done key(s); ``None`` means ``done``, ``terminated`` and ``truncated``.
            A tuple of strings is one nested key: pass several keys as a list.
        action_keys: the action key(s).

    Returns:
        The TensorDict for the next step, batch ``[*B]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs import step_mdp
        >>> td = TensorDict(
        ...     observation=torch.zeros(3),
        ...     action=torch.ones(1),
        ...     hidden=torch.ones(2),
        ...     next=TensorDict(
        ...         observation=torch.ones(3), reward=torch.ones(1), done=torch.zeros(1, dtype=torch.bool)
        ...     ),
        ... )
        >>> sorted(step_mdp(td).keys())
        ['done', 'hidden', 'observation']
        >>> step_mdp(td)["observation"]
        tensor([1., 1., 1.])
        >>> sorted(step_mdp(td, keep_other=False, exclude_reward=False).keys())
        ['done', 'observation', 'reward']
    """
    plan = mdp_plan(
        _keys_tuple(reward_keys),
        _keys_tuple(list(DONE_KEYS) if done_keys is None else done_keys),
        _keys_tuple(action_keys),
        bool(keep_other),
        bool(exclude_reward),
        bool(exclude_done),
        bool(exclude_action),
    )
    return apply_mdp_plan(tensordict, plan, next_tensordict)
