"""Bookkeeping behind the env contract: done flags, partial resets, key caches, stacking.

These helpers are private to :mod:`torchrl.envs.common`; they live apart so that ``EnvBase``
reads as the contract itself. Several read the dict behind a plain ``TensorDict`` directly on
hot paths (see :func:`_raw`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase
from torch import nn

from torchrl._keys import DONE, NEXT, RESET, TERMINATED, TRUNCATED
from torchrl.data.specs import Composite
from torchrl.envs.utils import _key_tuple, _mdp_plan, check_entry

if TYPE_CHECKING:
    from torchrl.envs.common import EnvBase

NestedKey = str | tuple[str, ...]


def _unravel(key: tuple[str, ...]) -> NestedKey:
    return key[0] if len(key) == 1 else key


class _DoneGroup:
    """The done flags living under one prefix (``()`` for the root, ``("agents",)`` nested)."""

    __slots__ = ("declared", "has", "prefix", "reset_key", "trailing")

    def __init__(self, prefix: tuple[str, ...], composite: Any) -> None:
        self.prefix = prefix
        self.reset_key = _unravel((*prefix, RESET))
        group_ndim = len(composite.shape)
        self.has = {name: name in composite.keys() for name in (DONE, TERMINATED, TRUNCATED)}
        self.declared = tuple(name for name, has in self.has.items() if has)
        # The shape of a done flag past the group's batch dims (usually ``(1,)``).
        self.trailing = next(
            (tuple(composite[name].shape[group_ndim:]) for name in self.declared), (1,)
        )

    def node(self, td: TensorDictBase) -> TensorDictBase | None:
        return td if not self.prefix else td.get(self.prefix, None)

    def flags(self, td: TensorDictBase) -> torch.Tensor:
        """The group's ``done`` (or ``terminated | truncated`` when no done is declared)."""
        node = td if not self.prefix else td.get(self.prefix)
        if self.has[DONE]:
            raw = _raw(node)
            return raw[DONE] if raw is not None else node.get(DONE)
        flags = [node.get(n) for n in (TERMINATED, TRUNCATED) if self.has[n]]
        return flags[0] if len(flags) == 1 else flags[0] | flags[1]


def _raw(td: Any) -> dict[str, Any] | None:
    """The dict behind a plain TensorDict (``None`` for other kinds).

    Hot paths read entries from it directly: a dict lookup costs a fraction of ``td.get``.
    """
    return td._tensordict if type(td) is TensorDict else None


def _set_leaf(tensordict: TensorDictBase, key: NestedKey, value: torch.Tensor) -> None:
    """``tensordict.set(key, value)``, skipping the checks for a value made from the env's specs.

    ``value`` must have the TensorDict's batch shape in front (a spec's ``rand()``/``zero()``).
    """
    if type(tensordict) is TensorDict and type(key) is str:
        device = tensordict._device
        if device is None or device == value.device:
            tensordict._set_str(key, value, inplace=False, validated=True)
            return
    tensordict.set(key, value)


def _set_next(tensordict: TensorDictBase, next_td: TensorDictBase) -> None:
    raw = _raw(tensordict)
    previous = raw.get(NEXT) if raw is not None else tensordict.get(NEXT, None)
    if previous is not None:
        # A policy may have written ("next", k) entries itself (a recurrent policy's next
        # hidden state): the env's outputs win, the policy's other entries are kept.
        for key, value in previous.items():
            if key not in next_td.keys():
                next_td.set(key, value)
    if (
        type(tensordict) is TensorDict
        and type(next_td) is TensorDict
        and next_td._batch_size == tensordict._batch_size
        and (tensordict._device is None or next_td._device == tensordict._device)
    ):
        # Batch size and device were just checked: skip tensordict's generic validation.
        tensordict._set_str(NEXT, next_td, inplace=False, validated=True)
    else:
        tensordict.set(NEXT, next_td)


class _SpecCache:
    """Key lists derived from the specs; rebuilt only after a spec changes."""

    __slots__ = (
        "action_key",
        "action_keys",
        "action_leaf",
        "action_rand",
        "check_actions",
        "done_groups",
        "done_keys",
        "mdp_plan",
        "observation_keys",
        "reset_keys",
        "reward_keys",
        "state_keys",
    )

    def __init__(self, env: EnvBase) -> None:
        def leaves(spec: Composite) -> list[NestedKey]:
            return list(spec.keys(include_nested=True, leaves_only=True))

        action_spec = env.full_action_spec
        done_spec = env.full_done_spec
        self.action_keys = leaves(action_spec)
        self.reward_keys = leaves(env.full_reward_spec)
        self.done_keys = leaves(done_spec)
        self.observation_keys = leaves(env.full_observation_spec)
        self.state_keys = leaves(env.full_state_spec)
        self.action_key = self.action_keys[0] if len(self.action_keys) == 1 else None
        self.action_leaf = action_spec[self.action_key] if self.action_key is not None else None
        self.action_rand = _fast_sampler(self.action_leaf)
        self.check_actions = env._make_action_check(self.action_keys)
        prefixes: list[tuple[str, ...]] = []
        for key in self.done_keys:
            key_t = _key_tuple(key)
            if key_t[-1] in (DONE, TERMINATED, TRUNCATED) and key_t[:-1] not in prefixes:
                prefixes.append(key_t[:-1])
        self.done_groups = [
            _DoneGroup(p, done_spec[p] if p else done_spec) for p in sorted(prefixes, key=len)
        ]
        self.reset_keys = [g.reset_key for g in self.done_groups]
        self.mdp_plan = _mdp_plan(
            tuple(_key_tuple(k) for k in self.reward_keys),
            tuple(_key_tuple(k) for k in self.done_keys),
            tuple(_key_tuple(k) for k in self.action_keys),
            True,
            True,
            False,
            True,
        )


def _fast_sampler(spec: Any) -> Callable[[], torch.Tensor] | None:
    """``spec.rand()`` for an unmasked one-hot spec, at a third to a half of the cost.

    Draws the same indices as ``OneHot.rand`` (one ``torch.randint`` of the spec's leading
    shape), so seeded runs are unchanged, and copies rows of a precomputed identity matrix.
    ``None`` for other specs.
    """
    if type(spec).__name__ != "OneHot" or spec.ndim < 1 or spec.n > 256:
        return None
    n = int(spec.n)
    eye = torch.eye(n, dtype=spec.dtype, device=spec.device)
    rows = eye.unbind(0)
    lead = tuple(spec.shape[:-1])
    device = spec.device
    # the device argument alone costs half a microsecond: CPU draws go without it
    cpu = device is None or device.type == "cpu"
    randint = torch.randint if cpu else partial(torch.randint, device=device)

    def rand() -> torch.Tensor:
        if spec.mask is not None:  # a mask may be set on the spec later
            return spec.rand()
        if not lead:
            return rows[int(randint(0, n, ()))].clone()
        return eye[randint(0, n, lead)]  # advanced indexing copies the rows

    return rand


def _complete_done(td: TensorDictBase, groups: list[_DoneGroup]) -> None:
    """Derives the done flags a subclass left out: ``done = terminated | truncated``."""
    for group in groups:
        node = group.node(td)
        if node is None:
            raise KeyError(f"the env output has no entry {group.prefix!r} for its done flags")
        raw = _raw(node)
        if raw is not None:
            for name in group.declared:
                if name not in raw:
                    break
            else:
                continue  # the common case: the subclass wrote every declared flag
        done = node.get(DONE, None)
        term = node.get(TERMINATED, None)
        trunc = node.get(TRUNCATED, None)
        if done is not None and term is not None and trunc is not None:
            continue  # the common case: the subclass wrote all three
        has = group.has
        done, term, trunc = (
            x if x is None or x.dtype == torch.bool else x.bool() for x in (done, term, trunc)
        )
        if done is None and term is None and trunc is None:
            shape = (*node.batch_size, *group.trailing)
            done = torch.zeros(shape, dtype=torch.bool, device=node.device)
            term, trunc = done.clone(), done.clone()
        elif done is None:
            if term is not None and trunc is not None:
                done = term | trunc
            else:
                # A clone keeps the entries distinct tensors: an in-place edit of one flag must
                # not silently change another.
                done = (term if term is not None else trunc).clone()
            if term is None:
                term = done & ~trunc
            if trunc is None:
                trunc = done & ~term
        else:
            if term is None:
                # Without a truncated flag, an episode end counts as a termination.
                term = done & ~trunc if trunc is not None else done.clone()
            if trunc is None:
                trunc = done & ~term
        for name, value in ((DONE, done), (TERMINATED, term), (TRUNCATED, trunc)):
            if has[name]:
                node.set(name, value)


def _make_device(device: Any) -> torch.device | None:
    if device is None:
        return None
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _single_or_all(spec: Composite) -> Any:
    keys = list(spec.keys(include_nested=True, leaves_only=True))
    return spec[keys[0]] if len(keys) == 1 else spec


def _only(keys: list[NestedKey], what: str) -> NestedKey:
    if len(keys) != 1:
        raise KeyError(f"the env has {len(keys)} {what} keys ({keys}); use env.{what}_keys")
    return keys[0]


def _leading_shape(batch: torch.Size, env_batch: torch.Size) -> torch.Size | None:
    if batch == env_batch:
        return None
    n = len(env_batch)
    if n and tuple(batch[-n:]) != tuple(env_batch):
        raise ValueError(
            f"a TensorDict of batch size {list(batch)} cannot hold data of an env of batch size "
            f"{list(env_batch)}"
        )
    return batch[: len(batch) - n]


def _next_seed(seed: int) -> int:
    # splitmix64: a cheap bijective mix, so chains seed -> next -> next never repeat early.
    z = (seed + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) % (2**32 - 1)


def _any(flags: torch.Tensor) -> bool:
    # One flag (an unbatched env) is read without launching a reduction kernel.
    return flags.is_nonzero() if flags.numel() == 1 else bool(flags.any())


def _all(flags: torch.Tensor) -> bool:
    return flags.is_nonzero() if flags.numel() == 1 else bool(flags.all())


def _stack_steps(tds: list[TensorDictBase]) -> TensorDictBase:
    """Stacks the steps of a rollout along a new last batch dim (time).

    Steps of a rollout share one structure, so the leaves are stacked key by key, which costs a
    fraction of ``torch.stack`` on TensorDicts; anything else falls back to ``torch.stack``.
    """
    first = tds[0]
    if type(first) is TensorDict and first._td_dim_names is None:
        try:
            out = _stack_plain(tds, first.batch_dims)
        except (_Heterogeneous, RuntimeError):
            out = None
        if out is not None:
            return out
    return cast(TensorDictBase, torch.stack(tds, dim=-1))  # type: ignore[arg-type]


class _Heterogeneous(Exception):
    pass


class _StepStore:
    """Collects the steps of a rollout and stacks them along a new last batch dim (time).

    Steps are stacked in chunks of :attr:`CHUNK` as they come (then the chunks concatenated), so
    that a long rollout keeps a few large tensors alive rather than thousands of small ones:
    those would be walked again and again by Python's garbage collector, whose cost grows with
    the objects alive in the process. Steps whose structures differ are kept and stacked at the
    end (``torch.stack``), as are all steps when ``lazy`` (a lazy stack is returned).

    Args:
        lazy: return a ``LazyStackedTensorDict`` of the steps instead of one TensorDict.
    """

    CHUNK = 16

    def __init__(self, lazy: bool = False) -> None:
        self.lazy = lazy
        self.pending: list[TensorDictBase] = []
        self.chunks: list[TensorDict] = []

    def append(self, td: TensorDictBase) -> None:
        pending = self.pending
        pending.append(td)
        if len(pending) >= self.CHUNK and not self.lazy:
            chunk = _try_stack_plain(pending)
            if chunk is None:
                self.lazy_chunks()
            else:
                self.chunks.append(chunk)
                self.pending = []

    def lazy_chunks(self) -> None:
        """Gives up chunking: the steps will be stacked at the end, all at once."""
        self.pending = self._all_steps()
        self.chunks = []
        self.lazy = True

    def _all_steps(self) -> list[TensorDictBase]:
        steps: list[TensorDictBase] = []
        for chunk in self.chunks:
            steps.extend(chunk.unbind(chunk.batch_dims - 1))
        return steps + self.pending

    def result(self, contiguous: bool = True) -> TensorDictBase:
        """The steps stacked (``contiguous``) or lazily stacked along a last batch dim."""
        if not contiguous:
            return LazyStackedTensorDict.lazy_stack(self._all_steps(), dim=-1)
        if not self.chunks:
            return _stack_steps(self.pending)
        chunks = list(self.chunks)
        if self.pending:
            last = _try_stack_plain(self.pending)
            if last is None:
                return _stack_steps(self._all_steps())
            chunks.append(last)
        try:
            return _cat_plain(chunks, chunks[0].batch_dims - 1)
        except (_Heterogeneous, RuntimeError):
            return _stack_steps(self._all_steps())


def _try_stack_plain(tds: list[TensorDictBase]) -> TensorDict | None:
    first = tds[0]
    if type(first) is not TensorDict or first._td_dim_names is not None:
        return None
    try:
        return _stack_plain(tds, first.batch_dims)
    except (_Heterogeneous, RuntimeError):
        return None


def _cat_plain(tds: list[TensorDict], dim: int) -> TensorDict:
    """Concatenates plain TensorDicts of one structure along batch dim ``dim``, leaf by leaf."""
    return _join_plain(tds, dim, torch.cat)


def _stack_plain(tds: list[TensorDictBase], dim: int) -> TensorDict:
    """Stacks plain TensorDicts of one structure along a new batch dim ``dim``, leaf by leaf."""
    return _join_plain(tds, dim, torch.stack)


def _join_plain(tds: Sequence[TensorDictBase], dim: int, join: Callable) -> TensorDict:
    # raises _Heterogeneous unless every TensorDict is plain and keyed like the first
    first = tds[0]
    keys = first._tensordict.keys()
    raws = []
    for td in tds:
        if type(td) is not TensorDict or td._tensordict.keys() != keys:
            raise _Heterogeneous
        raws.append(td._tensordict)
    out: dict[str, Any] = {}
    for key, value in first._tensordict.items():
        if isinstance(value, torch.Tensor):
            out[key] = join([raw[key] for raw in raws], dim)
        else:
            out[key] = _join_plain([raw[key] for raw in raws], dim, join)
    batch = list(first.batch_size)
    if join is torch.cat:
        batch[dim] = sum(td.batch_size[dim] for td in tds)
    else:
        batch.insert(dim, len(tds))
    return TensorDict._new_unsafe(
        cast(dict, out), batch_size=torch.Size(batch), device=first.device, nested=False
    )


def _drop_reset_keys(td: TensorDictBase, groups: list[_DoneGroup]) -> None:
    raw = _raw(td)
    for group in groups:
        key = group.reset_key
        present = key in raw if raw is not None and type(key) is str else key in td.keys(True)
        if present:
            del td[key]


def _broadcast(mask: torch.Tensor, ndim: int) -> torch.Tensor:
    if mask.ndim < ndim:
        return mask.reshape(*mask.shape, *([1] * (ndim - mask.ndim)))
    return mask


def _covering_mask(
    masks: dict[tuple[str, ...], torch.Tensor],
    prefix: tuple[str, ...],
    groups: list[_DoneGroup],
) -> torch.Tensor | None:
    """The mask of the deepest group containing ``prefix``, reduced to that group's batch dims."""
    if not masks:
        return None
    trailing = {g.prefix: g.trailing for g in groups}
    for depth in range(len(prefix), -1, -1):
        mask = masks.get(prefix[:depth])
        if mask is not None:
            n = len(trailing.get(prefix[:depth], ()))
            if n:
                mask = mask.reshape(*mask.shape[: mask.ndim - n], -1).any(-1)
            return mask
    return None


def _keep_unreset(
    out: TensorDictBase,
    previous: TensorDictBase,
    masks: dict[tuple[str, ...], torch.Tensor],
    groups: list[_DoneGroup],
) -> None:
    """Puts back the previous values of the sub-envs that were not reset."""
    for key in list(out.keys(include_nested=True, leaves_only=True)):
        key_t = _key_tuple(key)
        mask = _covering_mask(masks, key_t[:-1], groups)
        if mask is None:
            continue
        old = previous.get(key, None)
        new = out.get(key)
        if not isinstance(old, torch.Tensor) or not isinstance(new, torch.Tensor):
            continue
        if old.shape != new.shape:
            continue
        out.set(key, torch.where(_broadcast(mask, new.ndim), new, old))


def _cast_policy(policy: Callable, env_device: torch.device | None) -> Callable:
    params = policy.parameters() if isinstance(policy, nn.Module) else iter(())
    first = next(iter(params), None)
    if first is None:
        return policy
    policy_device = first.device

    def call(td: TensorDictBase) -> TensorDictBase:
        out = policy(td.to(policy_device))
        out = td if out is None else out
        return out.to(env_device) if env_device is not None else out

    return call


def _check_spec_shape(owner: str, spec: Any, name: str, batch_size: torch.Size) -> None:
    """Raises unless ``spec`` (and every leaf of a ``Composite``) starts with ``batch_size``."""
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


def _check_not_done(
    owner: str,
    out: TensorDictBase,
    masks: dict[tuple[str, ...], torch.Tensor],
    groups: list[_DoneGroup],
) -> None:
    """Raises if a sub-env marked by ``masks`` (all when none) is still done after its reset."""
    for group in groups:
        flags = group.flags(out)
        mask = masks.get(group.prefix)
        if mask is None or mask.shape != flags.shape:
            mask = _covering_mask(masks, group.prefix, groups)
            if mask is not None:
                mask = _broadcast(mask, flags.ndim)
        if mask is not None:
            flags = flags & mask
        if _any(flags):
            raise RuntimeError(
                f"{owner}.reset(): sub-envs that were reset are still done "
                f"(group {group.prefix or 'root'}); pass allow_done_after_reset=True if the "
                f"env may start in a done state"
            )


def _check_against_specs(env: EnvBase, td: TensorDictBase, where: str, next_: bool) -> None:
    """Checks a ``reset`` (``next_=False``) or ``step`` output of ``env`` against its specs."""
    owner = type(env).__name__
    names: tuple[str, ...] = ("full_observation_spec", "full_done_spec")
    if next_:
        names += ("full_reward_spec",)
    # A batch-unlocked env may see inputs with extra leading dims: check against specs
    # expanded to them.
    lead = _leading_shape(td.batch_size, env.batch_size)
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


def _any_group_done(next_td: TensorDictBase, groups: list[_DoneGroup]) -> bool:
    """Whether any sub-env is done in any done group of ``next_td``."""
    for group in groups:
        if _any(group.flags(next_td)):
            return True
    return False


def _done_per_env(next_td: TensorDictBase, groups: list[_DoneGroup]) -> torch.Tensor:
    """A boolean of shape ``next_td.batch_size``: whether each sub-env is done in any group."""
    batch = next_td.batch_size
    out = torch.zeros(batch, dtype=torch.bool, device=next_td.device)
    for group in groups:
        out |= group.flags(next_td).reshape(*batch, -1).any(-1)
    return out


def _spec_summary(spec: Composite) -> str:
    """``{key: (shape) dtype, ...}`` over the leaves of ``spec``, for ``EnvBase.__repr__``."""
    items = [
        f"{k!r}: {tuple(spec[k].shape)} {spec[k].dtype}"
        for k in spec.keys(include_nested=True, leaves_only=True)
    ]
    return "{" + ", ".join(items) + "}"
