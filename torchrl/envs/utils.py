"""Helpers around the env contract: ``step_mdp``, ``check_env_specs``, exploration modes.

``step_mdp`` is on the hot path of every rollout and collector, so it works on the TensorDict's
items directly and builds the next-step TensorDict once, without ``select``/``exclude``/``clone``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

import torch
from tensordict import TensorDict, TensorDictBase, is_tensor_collection
from tensordict.nn import InteractionType, interaction_type, set_interaction_type

from torchrl._keys import ACTION, ACTION_MASK, DONE_KEYS, NEXT, REWARD

if TYPE_CHECKING:
    from torchrl.envs.common import EnvBase

NestedKey = str | tuple[str, ...]

__all__ = [
    "ExplorationType",
    "RandomPolicy",
    "check_env_specs",
    "exploration_type",
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


# ------------------------------------------------------------------------------------ step_mdp
# An exclusion "tree" maps a first-level key to True (drop the entry) or to a sub-tree (copy the
# nested TensorDict without the entries the sub-tree drops).
_Tree = dict[str, Any]


def _key_tuple(key: NestedKey) -> tuple[str, ...]:
    if isinstance(key, str):
        return (key,)
    out: list[str] = []
    for part in key:
        out.extend(_key_tuple(part))
    return tuple(out)


def _keys_tuple(keys: NestedKey | Sequence[NestedKey] | None) -> tuple[tuple[str, ...], ...]:
    if keys is None:
        return ()
    if isinstance(keys, str) or (isinstance(keys, tuple) and all(isinstance(k, str) for k in keys)):
        return (_key_tuple(keys),)
    return tuple(_key_tuple(k) for k in keys)


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
    items = td._tensordict.items() if type(td) is TensorDict else td.items()
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


def _materialize(items: dict[str, Any], batch_size: torch.Size, device: Any) -> TensorDict:
    for key, value in items.items():
        if type(value) is _Node:
            items[key] = _materialize(value.items, value.batch_size, value.device)
    # The values come out of valid TensorDicts with the same batch size, so the checks of the
    # public constructor would only repeat work already done.
    return TensorDict._new_unsafe(
        cast(dict, items), batch_size=batch_size, device=device, nested=False
    )


class _MDPPlan:
    """What ``step_mdp`` drops from the root and from ``"next"``, for one set of arguments."""

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
def _mdp_plan(*args: Any) -> _MDPPlan:
    return _MDPPlan(*args)


def _apply_mdp_plan(
    tensordict: TensorDictBase,
    plan: _MDPPlan,
    next_tensordict: TensorDictBase | None = None,
) -> TensorDictBase:
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
        tensordict._tensordict.get(NEXT)
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
    """``_apply_mdp_plan`` for TensorDicts of plain tensors (``None`` when there is more)."""
    raw = tensordict._tensordict
    items = {}
    tensor = torch.Tensor
    for key, value in raw.items():
        if key not in root_drop:
            if type(value) is not tensor:
                return None
            items[key] = value
    nxt = raw.get(NEXT)
    if nxt is not None:
        if type(nxt) is not TensorDict or nxt._batch_size != tensordict._batch_size:
            return None
        for key, value in nxt._tensordict.items():
            if next_drop is None or key not in next_drop:
                if type(value) is not tensor:
                    return None
                items[key] = value
    return TensorDict._new_unsafe(
        cast(dict, items),
        batch_size=tensordict._batch_size,
        device=tensordict._device,
        nested=False,
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
        >>> from torchrl.envs.utils import step_mdp
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
    plan = _mdp_plan(
        _keys_tuple(reward_keys),
        _keys_tuple(list(DONE_KEYS) if done_keys is None else done_keys),
        _keys_tuple(action_keys),
        bool(keep_other),
        bool(exclude_reward),
        bool(exclude_done),
        bool(exclude_action),
    )
    return _apply_mdp_plan(tensordict, plan, next_tensordict)


# ----------------------------------------------------------------------------- check_env_specs
def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        text = f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
        if value.numel() and (value.dtype.is_floating_point or value.dtype == torch.int64):
            text += f" (min {value.min().item():.4g}, max {value.max().item():.4g})"
        return text
    return f"a {type(value).__name__}"


def _is_non_tensor_spec(spec: Any) -> bool:
    return type(spec).__name__ in ("NonTensor", "NonTensorSpec")


def _leaf_specs(composite: Any, lead: tuple[int, ...] = ()) -> dict[NestedKey, Any]:
    if lead:
        composite = composite.expand(*lead, *composite.shape)
    return {k: composite[k] for k in composite.keys(include_nested=True, leaves_only=True)}


def check_entry(
    where: str,
    key: NestedKey,
    spec: Any,
    value: Any,
    batch_dims: int,
    extra_dims: Sequence[int] = (),
    check_dtype: bool = True,
) -> None:
    """Raises a ``ValueError`` naming ``key`` when ``value`` does not match ``spec``.

    Args:
        where: where the entry came from, for the message (e.g. ``"step()"``).
        key: the entry's key.
        spec: its leaf spec, shape ``[*B, *leaf]``.
        value: the entry, shape ``[*B, *extra_dims, *leaf]``.
        batch_dims: ``len(B)``, the env's batch dims.
        extra_dims: dims inserted after the batch dims (e.g. ``(T,)`` for a rollout).
        check_dtype: compare dtypes.

    Examples:
        >>> import torch
        >>> from torchrl.data import Unbounded
        >>> from torchrl.envs.utils import check_entry
        >>> check_entry("step()", "obs", Unbounded(shape=(3,)), torch.zeros(3), 0)
        >>> check_entry("step()", "obs", Unbounded(shape=(3,)), torch.zeros(4), 0)
        Traceback (most recent call last):
        ...
        ValueError: step(): entry 'obs' has shape (4,) but its spec expects (3,) ...
    """
    if _is_non_tensor_spec(spec):
        return
    if not isinstance(value, torch.Tensor):
        raise ValueError(
            f"{where}: entry {key!r} should be a tensor described by {spec!r}, "
            f"but {_describe(value)} came"
        )
    shape = tuple(spec.shape)
    expected = (*shape[:batch_dims], *extra_dims, *shape[batch_dims:])
    if tuple(value.shape) != expected:
        raise ValueError(
            f"{where}: entry {key!r} has shape {tuple(value.shape)} but its spec expects "
            f"{expected} (spec: {spec!r})"
        )
    if check_dtype and value.dtype != spec.dtype:
        raise ValueError(
            f"{where}: entry {key!r} has dtype {value.dtype} but its spec expects {spec.dtype} "
            f"(spec: {spec!r}; came {_describe(value)})"
        )
    if not check_dtype and value.dtype != spec.dtype:
        value = value.to(spec.dtype)
    if extra_dims:
        # A spec describes one step: check the entry slice by slice along the extra dims.
        n = len(extra_dims)
        moved = value.movedim(tuple(range(batch_dims, batch_dims + n)), tuple(range(n)))
        slices = moved.reshape(-1, *shape).unbind(0)
    else:
        slices = (value,)
    for piece in slices:
        if not spec.is_in(piece):
            raise ValueError(
                f"{where}: entry {key!r} is out of its spec: came {_describe(value)}, "
                f"spec: {spec!r}"
            )


def check_env_specs(
    env: EnvBase,
    return_contiguous: bool = True,
    check_dtype: bool = True,
    seed: int | None = None,
    tensordict: TensorDictBase | None = None,
) -> None:
    """Runs a short random rollout and compares every entry with the env's specs.

    Each entry of the root (observations, states, actions, done flags) and of ``"next"``
    (observations, rewards, done flags) must be declared by a spec, have the spec's shape (with
    the time dim after the batch dims), its dtype, and lie in it; every declared key must come
    out. The first disagreement raises a ``ValueError`` naming the key, the spec and what came.

    Args:
        env: the env to check; it is reset and stepped 3 times with random actions (sub-envs that
            finish are reset in between).
        return_contiguous: stack the rollout contiguously (``False`` tests lazy stacking).
        check_dtype: compare dtypes too.
        seed: if given, the env is seeded with it first.
        tensordict: an optional input for the first ``reset`` (e.g. parameters).

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.utils import check_env_specs
        >>> check_env_specs(PendulumEnv(batch_size=[2]), seed=0)
    """
    if seed is not None:
        env.set_seed(seed)
    steps = 3
    rollout = env.rollout(
        steps,
        return_contiguous=return_contiguous,
        tensordict=tensordict,
        break_when_any_done=False,
    )
    time = rollout.batch_size[-1] if rollout.batch_dims else 0
    if time != steps:
        raise ValueError(f"check_env_specs: the rollout has {time} steps, expected {steps}")
    # The data's batch dims: the env's, plus leading ones when a batch-unlocked env got a
    # bigger input; the specs are expanded to them.
    data_batch = rollout.batch_size[:-1]
    env_batch = env.batch_size
    if tuple(data_batch[len(data_batch) - len(env_batch) :]) != tuple(env_batch):
        raise ValueError(
            f"check_env_specs: the rollout's batch size {list(rollout.batch_size)} does not end "
            f"with the env batch size {list(env_batch)} and a time dim"
        )
    lead = tuple(data_batch[: len(data_batch) - len(env_batch)])
    batch_dims = len(data_batch)
    root_specs: dict[NestedKey, tuple[str, Any]] = {}
    for name in ("full_observation_spec", "full_state_spec", "full_done_spec", "full_action_spec"):
        for key, spec in _leaf_specs(getattr(env, name), lead).items():
            root_specs[key] = (name, spec)
    next_specs: dict[NestedKey, tuple[str, Any]] = {}
    for name in ("full_observation_spec", "full_reward_spec", "full_done_spec"):
        for key, spec in _leaf_specs(getattr(env, name), lead).items():
            next_specs[key] = (name, spec)
    next_td = rollout.get(NEXT, None)
    if next_td is None:
        raise ValueError("check_env_specs: the rollout has no 'next' entry")
    _compare(rollout, root_specs, "root", batch_dims, time, check_dtype, skip=(NEXT,))
    _compare(next_td, next_specs, "'next'", batch_dims, time, check_dtype, skip=())


def _compare(
    data: TensorDictBase,
    specs: dict[NestedKey, tuple[str, Any]],
    where: str,
    batch_dims: int,
    time: int,
    check_dtype: bool,
    skip: tuple[str, ...],
) -> None:
    data_keys = {
        k
        for k in data.keys(include_nested=True, leaves_only=True)
        if (k if isinstance(k, str) else k[0]) not in skip
    }
    for key, (name, spec) in specs.items():
        if key not in data_keys:
            raise ValueError(
                f"check_env_specs: key {key!r} is declared in env.{name} ({spec!r}) "
                f"but is missing from the rollout's {where} entries (found: {sorted(map(str, data_keys))})"
            )
    for key in data_keys:
        if key not in specs:
            raise ValueError(
                f"check_env_specs: key {key!r} came out of the env at the {where} level "
                f"({_describe(data.get(key))}) but no spec declares it"
            )
    for key, (name, spec) in specs.items():
        check_entry(
            f"check_env_specs ({where}, env.{name})",
            key,
            spec,
            data.get(key),
            batch_dims,
            (time,),
            check_dtype,
        )


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
        self, action_spec: Any, action_key: NestedKey = ACTION, mask_key: NestedKey = ACTION_MASK
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
            action = _masked_choice(self.action_spec, mask)
        else:
            action = self.action_spec.rand()
        tensordict.set(self.action_key, action)
        return tensordict

    def __repr__(self) -> str:
        return f"{type(self).__name__}(action_key={self.action_key!r}, spec={self.action_spec!r})"


def _masked_choice(spec: Any, mask: torch.Tensor) -> torch.Tensor:
    # argmax of uniform noise restricted to the allowed entries: a uniform draw among them,
    # vectorized over any batch shape.
    noise = torch.rand(mask.shape, device=mask.device).masked_fill_(~mask.bool(), -1.0)
    index = noise.argmax(-1)
    if type(spec).__name__ == "OneHot":
        return torch.nn.functional.one_hot(index, mask.shape[-1]).to(spec.dtype)
    return index.to(spec.dtype).reshape((*mask.shape[:-1], *spec.shape[mask.ndim - 1 :]))
