"""Done groups: the ``done``/``terminated``/``truncated`` flags of an env, grouped by prefix.

An env's done flags live at the root (``"done"``) or under prefixes (``("agents", "done")``);
each prefix is a *group* with its own ``"_reset"`` key. :class:`DoneGroups` holds an env's
groups (built once from its done spec) and does everything the env contract needs from them:
derive missing flags after a step, read and drop the ``"_reset"`` masks of a partial reset, put
back the entries of sub-envs that were not reset, and tell whether any sub-env is done.

Reading the flags is on the step path: plain TensorDicts are read through their entry dict
(:func:`torchrl._td_compat.entries`), a fraction of the cost of ``td.get``.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import DONE, RESET, TERMINATED, TRUNCATED
from torchrl._td_compat import entries
from torchrl._types import NestedKey
from torchrl.data.specs import Composite
from torchrl.envs._key_paths import key_tuple, path_to_key

__all__ = ["DoneGroup", "DoneGroups", "all_flag", "any_flag"]

_FLAGS = (DONE, TERMINATED, TRUNCATED)


def any_flag(flags: torch.Tensor) -> bool:
    """Whether any entry of a boolean tensor is set.

    One flag (an unbatched env) is read without launching a reduction kernel.

    Examples:
        >>> import torch
        >>> from torchrl.envs._done import any_flag
        >>> any_flag(torch.tensor([False])), any_flag(torch.tensor([[False], [True]]))
        (False, True)
    """
    return flags.is_nonzero() if flags.numel() == 1 else bool(flags.any())


def all_flag(flags: torch.Tensor) -> bool:
    """Whether every entry of a boolean tensor is set (see :func:`any_flag`).

    Examples:
        >>> import torch
        >>> from torchrl.envs._done import all_flag
        >>> all_flag(torch.tensor([True])), all_flag(torch.tensor([[False], [True]]))
        (True, False)
    """
    return flags.is_nonzero() if flags.numel() == 1 else bool(flags.all())


class DoneGroup:
    """The done flags living under one prefix (``()`` for the root, ``("agents",)`` nested).

    Args:
        prefix: the path of the group's node.
        composite: the done spec of that node (its leaves are the group's flags).
    """

    __slots__ = ("declared", "has", "prefix", "reset_key", "trailing")

    def __init__(self, prefix: tuple[str, ...], composite: Composite) -> None:
        self.prefix = prefix
        self.reset_key = path_to_key((*prefix, RESET))
        group_ndim = len(composite.shape)
        self.has = {name: name in composite.keys() for name in _FLAGS}
        self.declared = tuple(name for name, has in self.has.items() if has)
        # The shape of a done flag past the group's batch dims (usually ``(1,)``).
        self.trailing = next(
            (tuple(composite[name].shape[group_ndim:]) for name in self.declared), (1,)
        )

    def node(self, td: TensorDictBase) -> TensorDictBase | None:
        """The group's node of ``td`` (``td`` itself for the root), or ``None``."""
        return td if not self.prefix else td.get(self.prefix, None)

    def flags(self, td: TensorDictBase) -> torch.Tensor:
        """The group's ``done`` (or ``terminated | truncated`` when no done is declared)."""
        node = td if not self.prefix else td.get(self.prefix)
        if self.has[DONE]:
            raw = entries(node) if type(node) is TensorDict else None
            return raw[DONE] if raw is not None else node.get(DONE)
        flags = [node.get(n) for n in (TERMINATED, TRUNCATED) if self.has[n]]
        return flags[0] if len(flags) == 1 else flags[0] | flags[1]


class DoneGroups:
    """The done groups of an env, in order of depth, and what the env contract does with them.

    Iterating gives the :class:`DoneGroup` objects; ``len``, indexing and truth work as on a
    tuple of them.

    Args:
        done_spec: the env's ``full_done_spec``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs._done import DoneGroups
        >>> groups = DoneGroups(PendulumEnv(batch_size=[2]).full_done_spec)
        >>> groups.reset_keys
        ['_reset']
        >>> out = TensorDict(terminated=torch.tensor([[False], [True]]), batch_size=[2])
        >>> groups.complete(out)  # derives "done" and "truncated"
        >>> out["done"].squeeze(-1), groups.any_done(out)
        (tensor([False,  True]), True)
    """

    __slots__ = ("groups", "reset_keys", "single")

    def __init__(self, done_spec: Composite) -> None:
        prefixes: list[tuple[str, ...]] = []
        for key in done_spec.keys(include_nested=True, leaves_only=True):
            path = key_tuple(key)
            if path[-1] in _FLAGS and path[:-1] not in prefixes:
                prefixes.append(path[:-1])
        self.groups: tuple[DoneGroup, ...] = tuple(
            DoneGroup(p, done_spec[p] if p else done_spec) for p in sorted(prefixes, key=len)
        )
        self.reset_keys: list[NestedKey] = [g.reset_key for g in self.groups]
        # The usual case of one group, read without a loop on the step path.
        self.single: DoneGroup | None = self.groups[0] if len(self.groups) == 1 else None

    def __len__(self) -> int:
        return len(self.groups)

    def __iter__(self) -> Iterator[DoneGroup]:
        return iter(self.groups)

    def __getitem__(self, index: int) -> DoneGroup:
        return self.groups[index]

    # ------------------------------------------------------------------------------ steps
    def complete(self, td: TensorDictBase) -> None:
        """Derives the done flags an env output left out (``done = terminated | truncated``)."""
        for group in self.groups:
            node = group.node(td)
            if node is None:
                raise KeyError(f"the env output has no entry {group.prefix!r} for its done flags")
            raw = entries(node) if type(node) is TensorDict else None
            if raw is not None:
                for name in group.declared:
                    if name not in raw:
                        break
                else:
                    continue  # the common case: the subclass wrote every declared flag
            _derive_flags(node, group)

    def any_done(self, next_td: TensorDictBase) -> bool:
        """Whether any sub-env is done in any group of ``next_td``."""
        for group in self.groups:
            if any_flag(group.flags(next_td)):
                return True
        return False

    def done_flags(self, next_td: TensorDictBase) -> list[torch.Tensor] | None:
        """Each group's flags when a sub-env is done (``None`` when none is).

        The flags, set as the ``"_reset"`` masks (:meth:`set_reset`), mark the sub-envs a
        partial reset restarts.
        """
        single = self.single
        if single is not None:
            flags = single.flags(next_td)
            # any_flag, inline: this runs after every step
            if flags.is_nonzero() if flags.numel() == 1 else bool(flags.any()):
                return [flags]
            return None
        flags_list = [group.flags(next_td) for group in self.groups]
        if any(any_flag(f) for f in flags_list):
            return flags_list
        return None

    def set_reset(self, td: TensorDictBase, flags: list[torch.Tensor]) -> None:
        """Writes ``flags`` (from :meth:`done_flags`) as the ``"_reset"`` masks of ``td``."""
        for group, mask in zip(self.groups, flags):
            td.set(group.reset_key, mask)

    def done_per_env(self, next_td: TensorDictBase) -> torch.Tensor:
        """A boolean of shape ``next_td.batch_size``: whether each sub-env is done in a group."""
        batch = next_td.batch_size
        out = torch.zeros(batch, dtype=torch.bool, device=next_td.device)
        for group in self.groups:
            out |= group.flags(next_td).reshape(*batch, -1).any(-1)
        return out

    # ------------------------------------------------------------------------- resets
    def read_masks(self, td: TensorDictBase) -> dict[tuple[str, ...], torch.Tensor]:
        """The ``"_reset"`` masks of ``td`` by group prefix (cast to bool, in ``td`` too)."""
        masks: dict[tuple[str, ...], torch.Tensor] = {}
        for group in self.groups:
            mask = td.get(group.reset_key, None)
            if mask is not None:
                if mask.dtype != torch.bool:
                    mask = mask.bool()
                    td.set(group.reset_key, mask)
                masks[group.prefix] = mask
        return masks

    def drop_reset(self, td: TensorDictBase) -> None:
        """Deletes the ``"_reset"`` entries of ``td``."""
        raw = entries(td) if type(td) is TensorDict else None
        for group in self.groups:
            key = group.reset_key
            present = key in raw if raw is not None and type(key) is str else key in td.keys(True)
            if present:
                del td[key]

    def keep_unreset(
        self,
        out: TensorDictBase,
        previous: TensorDictBase,
        masks: dict[tuple[str, ...], torch.Tensor],
    ) -> None:
        """Puts back into ``out`` the ``previous`` values of sub-envs not marked by ``masks``."""
        for key in list(out.keys(include_nested=True, leaves_only=True)):
            mask = self._covering_mask(masks, key_tuple(key)[:-1])
            if mask is None:
                continue
            old = previous.get(key, None)
            new = out.get(key)
            if not isinstance(old, torch.Tensor) or not isinstance(new, torch.Tensor):
                continue
            if old.shape != new.shape:
                continue
            out.set(key, torch.where(_broadcast(mask, new.ndim), new, old))

    def check_not_done(
        self, owner: str, out: TensorDictBase, masks: dict[tuple[str, ...], torch.Tensor]
    ) -> None:
        """Raises if a sub-env marked by ``masks`` (all when none) is still done after a reset."""
        for group in self.groups:
            flags = group.flags(out)
            mask = masks.get(group.prefix)
            if mask is None or mask.shape != flags.shape:
                mask = self._covering_mask(masks, group.prefix)
                if mask is not None:
                    mask = _broadcast(mask, flags.ndim)
            if mask is not None:
                flags = flags & mask
            if any_flag(flags):
                raise RuntimeError(
                    f"{owner}.reset(): sub-envs that were reset are still done "
                    f"(group {group.prefix or 'root'}); pass allow_done_after_reset=True if the "
                    f"env may start in a done state"
                )

    def _covering_mask(
        self, masks: dict[tuple[str, ...], torch.Tensor], prefix: tuple[str, ...]
    ) -> torch.Tensor | None:
        """The mask of the deepest group containing ``prefix``, reduced to its batch dims."""
        if not masks:
            return None
        trailing = {g.prefix: g.trailing for g in self.groups}
        for depth in range(len(prefix), -1, -1):
            mask = masks.get(prefix[:depth])
            if mask is not None:
                n = len(trailing.get(prefix[:depth], ()))
                if n:
                    mask = mask.reshape(*mask.shape[: mask.ndim - n], -1).any(-1)
                return mask
        return None


def _broadcast(mask: torch.Tensor, ndim: int) -> torch.Tensor:
    if mask.ndim < ndim:
        return mask.reshape(*mask.shape, *([1] * (ndim - mask.ndim)))
    return mask


def _derive_flags(node: TensorDictBase, group: DoneGroup) -> None:
    """Writes the declared flags of ``group`` missing from ``node``, derived from the others."""
    done = node.get(DONE, None)
    term = node.get(TERMINATED, None)
    trunc = node.get(TRUNCATED, None)
    if done is not None and term is not None and trunc is not None:
        return  # the common case: the subclass wrote all three
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
            done = (term if term is not None else trunc).clone()  # type: ignore[union-attr]
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
    has = group.has
    for name, value in ((DONE, done), (TERMINATED, term), (TRUNCATED, trunc)):
        if has[name]:
            node.set(name, value)
