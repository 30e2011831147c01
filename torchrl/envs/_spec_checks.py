"""Checks of env outputs against the env's specs: ``check_env_specs`` and what it builds on.

:func:`check_env_specs` runs a short rollout and compares every entry with the specs;
:func:`check_entry` compares one entry with one leaf spec. ``EnvBase`` uses the same checks on
every ``reset``/``step`` output when ``run_type_checks`` is on (:func:`check_against_specs`),
and checks spec shapes when a spec is set (:func:`check_spec_shape`). Actions are checked on
every step by the faster, specialised checks of :mod:`torchrl.envs._action_checks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase, is_leaf_nontensor, is_non_tensor

from torchrl._keys import NEXT
from torchrl._types import NestedKey
from torchrl.data.specs import Composite, TensorSpec

if TYPE_CHECKING:
    from torchrl.envs.common import EnvBase

__all__ = [
    "check_against_specs",
    "check_entry",
    "check_env_specs",
    "check_spec_shape",
    "leading_shape",
]


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        text = f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
        if value.numel() and (value.dtype.is_floating_point or value.dtype == torch.int64):
            text += f" (min {value.min().item():.4g}, max {value.max().item():.4g})"
        return text
    if isinstance(value, TensorDictBase) and is_non_tensor(value):
        return f"non-tensor data ({type(value).__name__}) of batch size {tuple(value.batch_size)}"
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
    spec: TensorSpec,
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
    shape = tuple(spec.shape)
    expected = (*shape[:batch_dims], *extra_dims, *shape[batch_dims:])
    if _is_non_tensor_spec(spec):
        # non-tensor data (strings, objects) holds any value: check its kind and batch size
        if not (isinstance(value, TensorDictBase) and is_non_tensor(value)):
            raise ValueError(
                f"{where}: entry {key!r} should be non-tensor data (NonTensorData or "
                f"NonTensorStack) described by {spec!r}, but {_describe(value)} came"
            )
        if tuple(value.batch_size) != expected:
            raise ValueError(
                f"{where}: entry {key!r} has batch size {tuple(value.batch_size)} but its spec "
                f"expects {expected} (spec: {spec!r})"
            )
        return
    if not isinstance(value, torch.Tensor):
        raise ValueError(
            f"{where}: entry {key!r} should be a tensor described by {spec!r}, "
            f"but {_describe(value)} came"
        )
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
    # non-tensor entries (strings, stacked or not) are leaves too, as NonTensor specs are
    data_keys = {
        k
        for k in data.keys(include_nested=True, leaves_only=True, is_leaf=is_leaf_nontensor)
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


def leading_shape(batch: torch.Size, env_batch: torch.Size) -> torch.Size | None:
    """The dims a TensorDict of batch ``batch`` has in front of an env's ``env_batch``.

    ``None`` when the two are equal; a ``ValueError`` when ``batch`` does not end with
    ``env_batch`` (data of a batch-unlocked env may come with extra leading dims).

    Examples:
        >>> import torch
        >>> from torchrl.envs._spec_checks import leading_shape
        >>> leading_shape(torch.Size([4, 2]), torch.Size([2]))
        torch.Size([4])
        >>> print(leading_shape(torch.Size([2]), torch.Size([2])))
        None
    """
    if batch == env_batch:
        return None
    n = len(env_batch)
    if n and tuple(batch[-n:]) != tuple(env_batch):
        raise ValueError(
            f"a TensorDict of batch size {list(batch)} cannot hold data of an env of batch size "
            f"{list(env_batch)}"
        )
    return batch[: len(batch) - n]


def check_spec_shape(owner: str, spec: TensorSpec, name: str, batch_size: torch.Size) -> None:
    """Raises unless ``spec`` (and every leaf of a ``Composite``) starts with ``batch_size``.

    Args:
        owner: the env's class name, for the message.
        spec: the spec being set.
        name: the attribute it is set as (``"observation_spec"``, ...).
        batch_size: the env's batch size.

    Examples:
        >>> import torch
        >>> from torchrl.data import Unbounded
        >>> from torchrl.envs._spec_checks import check_spec_shape
        >>> check_spec_shape("MyEnv", Unbounded(shape=(2, 3)), "observation_spec", torch.Size([2]))
        >>> check_spec_shape("MyEnv", Unbounded(shape=(3,)), "observation_spec", torch.Size([2]))
        Traceback (most recent call last):
        ...
        ValueError: MyEnv.observation_spec: the spec's shape (3,) must start with ...
    """
    n = len(batch_size)
    specs = [(name, spec)]
    if isinstance(spec, Composite):
        specs += [
            (f"{name}[{k!r}]", spec[k]) for k in spec.keys(include_nested=True, leaves_only=True)
        ]
    for label, s in specs:
        if tuple(s.shape[:n]) != tuple(batch_size):
            raise ValueError(
                f"{owner}.{label}: the spec's shape {tuple(s.shape)} must start "
                f"with the env batch size {tuple(batch_size)} (spec: {s!r})"
            )


def check_against_specs(env: EnvBase, td: TensorDictBase, where: str, next_: bool) -> None:
    """Checks a ``reset`` (``next_=False``) or ``step`` output of ``env`` against its specs.

    Args:
        env: the env.
        td: its output, batch ``[*lead, *env.batch_size]``.
        where: the method, for the message (``"step()"``).
        next_: a step's output (with rewards) rather than a reset's.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs._spec_checks import check_against_specs
        >>> env = PendulumEnv()
        >>> check_against_specs(env, env.reset(), "reset()", next_=False)
        >>> check_against_specs(env, env.reset().exclude("th"), "reset()", next_=False)
        Traceback (most recent call last):
        ...
        ValueError: PendulumEnv.reset(): entry 'th' declared in full_observation_spec ...
    """
    owner = type(env).__name__
    names: tuple[str, ...] = ("full_observation_spec", "full_done_spec")
    if next_:
        names += ("full_reward_spec",)
    # A batch-unlocked env may see inputs with extra leading dims: check against specs
    # expanded to them.
    lead = leading_shape(td.batch_size, env.batch_size)
    nb = td.batch_dims
    for name in names:
        spec = getattr(env, name)
        if lead:
            spec = spec.expand(*lead, *spec.shape)
        for key in spec.keys(include_nested=True, leaves_only=True):
            value = td.get(key, None)
            if value is None:
                raise ValueError(
                    f"{owner}.{where}: entry {key!r} declared in {name} "
                    f"({spec[key]!r}) is missing from the output"
                )
            check_entry(f"{owner}.{where}", key, spec[key], value, nb)
