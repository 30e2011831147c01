"""Trajectory views at collection time, and their rebuild on the collected batches.

A policy declares the time-shifted inputs it needs with
:class:`~torchrl.data.trajectory_views.TrajectoryView` objects (``views`` attributes, gathered by
:func:`~torchrl.data.trajectory_views.get_views`). A collector builds them with a
:class:`ViewRing`: one small ring buffer per source entry holds its last ``lookback`` steps for
every sub-env, cleared (zeros) or refilled (``padding="first"``) where an episode starts, and
kept across batches. Before each policy call the views are read from the rings (plus the current
step for shift 0) and written into the policy's input; the view entries are then left out of
the collected batch, so every column is stored once.

A loss that trains on collected batches straight away (on-policy) rebuilds the views with a
:class:`ViewRebuilder`, which carries each unfinished trajectory's last steps from one batch to
the next: the first steps of a batch then see the same lookback as the policy did. Off-policy
data is rebuilt by the replay buffer (see :mod:`torchrl.data.trajectory_views`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase

from torchrl._keys import COLLECTOR, DONE, IS_INIT, MASK, NEXT, TRAJ_IDS
from torchrl._types import NestedKey
from torchrl.data.trajectory_views import TrajectoryView, build_views, get_views
from torchrl.envs.common import EnvBase

__all__ = ["ViewPolicy", "ViewRebuilder", "ViewRing", "collection_views"]

Key = tuple[str, ...]


def _as_key(key: NestedKey) -> Key:
    return (key,) if isinstance(key, str) else tuple(key)


def _show(key: Key) -> str:
    return repr(key[0]) if len(key) == 1 else repr(key)


# What a ring needs to know of a source entry: one sub-env's shape and the dtype.
Feature = tuple[tuple[int, ...], torch.dtype]


def _leaf_specs(spec: Any, batch_dims: int = 0) -> dict[Key, Feature]:
    """``{key: (feature shape, dtype)}`` of a ``Composite``'s leaves (empty for ``None``).

    ``batch_dims`` leading dims of every leaf's shape (the env's batch) are left out.
    """
    if spec is None:
        return {}
    out: dict[Key, Feature] = {}
    for key in spec.keys(True, True):
        leaf = spec[key]
        out[_as_key(key)] = (tuple(leaf.shape[batch_dims:]), leaf.dtype)
    return out


def _primer_specs(policy: Any) -> dict[Key, Feature]:
    """State specs that the policy's recurrent blocks declare through their primers.

    A block with ``make_tensordict_primer()`` (``LSTMModule``, ``GRUModule``, ...) states the
    shape of the states it reads at the root and writes under ``"next"``: a view can then stand
    in for the env primer, and the collector still knows what zeros to start from.
    """
    out: dict[Key, Feature] = {}
    if not isinstance(policy, torch.nn.Module):
        return out
    for module in policy.modules():
        make = getattr(module, "make_tensordict_primer", None)
        if not callable(make):
            continue
        primers = getattr(make(), "primers", None)
        # primer specs leave out the env's batch dims
        for key, spec in _leaf_specs(primers).items():
            out.setdefault(key, spec)
            out.setdefault((NEXT, *key), spec)
    return out


def collection_views(policy: Any) -> list[TrajectoryView]:
    """The views a collector builds for ``policy`` (all of them, training or not).

    Args:
        policy: the collector's policy (any object; modules are walked with ``modules()``).

    Returns:
        ``get_views(policy)``, or ``[]`` for a policy that declares none.

    Examples:
        >>> import torch
        >>> from torchrl.data.trajectory_views import prev_action
        >>> net = torch.nn.Linear(2, 2)
        >>> collection_views(net)
        []
        >>> net.views = [prev_action()]
        >>> [v.out_key for v in collection_views(net)]
        ['prev_action']
    """
    return get_views(policy) if policy is not None else []


class _Ring:
    """The last ``size`` steps of one source entry (one padding), ``[*B, size, *F]``."""

    def __init__(
        self, key: Key, padding: str, size: int, feature: Feature, batch: torch.Size, device: Any
    ) -> None:
        self.key: NestedKey = key[0] if len(key) == 1 else key
        self.padding = padding
        self.size = size
        shape, dtype = feature
        self.buffer = torch.zeros((*batch, size, *shape), dtype=dtype, device=device)
        self.dims = len(batch)
        # one view per slot, made once: the per-step reads and writes index a list
        self.slots = [self.buffer.select(self.dims, i) for i in range(size)]
        # the slot the next step is written to; step t - k sits at (pos - k) % size
        self.pos = 0

    def past(self, shift: int) -> torch.Tensor:
        return self.slots[(self.pos + shift) % self.size]

    def restart(self, mask: torch.Tensor, td: TensorDictBase) -> None:
        """Empties the rows of the sub-envs in ``mask`` (zeros, or their current value)."""
        buffer = self.buffer
        where = mask.to(buffer.device).reshape(*mask.shape, *([1] * (buffer.ndim - self.dims)))
        if self.padding == "zeros":
            buffer.masked_fill_(where, 0)
        else:
            current = td.get(self.key).to(buffer.device).unsqueeze(self.dims)
            buffer.copy_(torch.where(where, current, buffer))

    def advance(self) -> torch.Tensor:
        """The slot the current step goes to; the next step goes to the one after."""
        slot = self.slots[self.pos]
        self.pos = (self.pos + 1) % self.size
        return slot


class ViewRing:
    """Builds a policy's trajectory views while a collector steps its env.

    Every source entry read with a lookback has a ring of its last steps per sub-env. Before
    each policy call :meth:`build` writes every view into the policy's input (read from the
    rings, and from the input itself for shift 0); after each env step :meth:`record` pushes the
    step's entries and notes which sub-envs finished. A sub-env's rings are cleared (zeros) or
    refilled with its first value (``padding="first"``) when its next episode starts, and are
    kept across batches. Views are checked against the env's specs and the policy's outputs at
    construction: a future shift, a ``("next", ...)`` entry at shift 0, a policy output at
    shift 0 or with ``padding="first"`` cannot be known before the policy runs, and a key that
    nothing provides is named with the keys available.

    Args:
        views: the views to build (e.g. ``get_views(policy)``).
        env: the collector's env (its specs, batch size, device and done keys).
        policy: the policy (its ``out_keys`` and recurrent blocks' primers count as sources).
        owner: the collector's name, for messages.

    Examples:
        >>> import torch
        >>> from torchrl.data.trajectory_views import TrajectoryView
        >>> from torchrl.envs import PendulumEnv
        >>> env = PendulumEnv(batch_size=[2], seed=0)
        >>> ring = ViewRing([TrajectoryView("observation", "-1:0")], env, None)
        >>> td = env.reset()
        >>> ring.build(td)["observation_view"].shape
        torch.Size([2, 2, 3])
        >>> bool((td["observation_view"][:, 0] == 0).all())  # t = 0: zero padding
        True
    """

    def __init__(
        self,
        views: Sequence[TrajectoryView],
        env: EnvBase,
        policy: Any = None,
        owner: str = "collector",
    ) -> None:
        self.views = list(views)
        self.owner = owner
        batch = env.batch_size
        self.batch_dims = len(batch)
        pre, post = self._sources(env, policy)
        self._check(pre, post)
        rings: dict[tuple[Key, str], _Ring] = {}
        sizes: dict[tuple[Key, str], int] = {}
        for view in self.views:
            if view.lookback:
                slot = (_as_key(view.key), view.padding)
                sizes[slot] = max(sizes.get(slot, 0), view.lookback)
        for (key, padding), size in sizes.items():
            feature = post[key]
            assert feature is not None  # checked
            rings[(key, padding)] = _Ring(key, padding, size, feature, batch, env.device)
        self._rings = list(rings.values())
        # per view: out_key, stacked, and one entry per shift: the ring (None: the input itself)
        self._plan: list[tuple[NestedKey, NestedKey, bool, list[tuple[_Ring | None, int]]]] = []
        for view in self.views:
            ring = rings.get((_as_key(view.key), view.padding))
            parts = [(None if s == 0 else ring, s) for s in view.shifts]
            self._plan.append((view.target_key, view.key, view.stacked, parts))
        #: the entries the collector leaves out of its batches
        self.out_keys: list[NestedKey] = [view.target_key for view in self.views]
        self._done_keys = [(NEXT, *_as_key(k)) for k in env.done_keys if _as_key(k)[-1] == DONE]
        self._pending = torch.ones(batch, dtype=torch.bool, device=env.device)
        self._any_pending = True

    # ------------------------------------------------------------------------ construction
    def _sources(self, env: EnvBase, policy: Any) -> tuple[set[Key], dict[Key, Feature | None]]:
        """Keys known before the policy runs, and every source key with its feature (or None)."""
        dims = self.batch_dims
        observation = _leaf_specs(env.full_observation_spec, dims)
        state = _leaf_specs(env.full_state_spec, dims)
        done = _leaf_specs(env.full_done_spec, dims)
        pre = {**observation, **state, **done}
        post: dict[Key, Feature | None] = dict(pre)
        post.update(_leaf_specs(env.full_action_spec, dims))
        for specs in (observation, _leaf_specs(env.full_reward_spec, dims), done):
            post.update({(NEXT, *key): spec for key, spec in specs.items()})
        primers = _primer_specs(policy)
        for key in getattr(policy, "out_keys", None) or []:
            key_t = _as_key(key)
            post.setdefault(key_t, primers.get(key_t))
        return set(pre), post

    def _check(self, pre: set[Key], post: dict[Key, Feature | None]) -> None:
        name = self.owner
        outs = {_as_key(view.target_key) for view in self.views}
        for view in self.views:
            key = _as_key(view.key)
            what = f"{name}: the view {view.target_key!r} (of {_show(key)}, shift {view.shift!r})"
            if view.lookahead:
                raise ValueError(
                    f"{what} reads {view.lookahead} step(s) ahead: the future does not exist "
                    "when the policy runs. Declare future shifts on loss-side views only (a "
                    "collector builds shifts <= 0)"
                )
            if key in outs:
                raise ValueError(f"{what} reads another view's out_key; views read stored entries")
            if key not in post:
                available = sorted(_show(k) for k in post)
                raise KeyError(
                    f"{what} reads {_show(key)}, which no spec of the env (observation, state, "
                    f"action, reward, done) and no out_key of the policy provides; available: "
                    f"{', '.join(available)}"
                )
            if key not in pre and (0 in view.shifts or view.padding == "first"):
                why = "at the current step" if 0 in view.shifts else "with padding='first'"
                raise ValueError(
                    f"{what} reads {_show(key)} {why}, but that entry is written by the policy "
                    "or the env step after the views are built; only the past (shift < 0, "
                    "padding='zeros') of it is available at collection"
                )
            if view.lookback and post[key] is None:
                raise ValueError(
                    f"{what} reads {_show(key)}, a policy output whose shape no spec declares: "
                    "the collector cannot tell what zeros to start from. Give the env a spec "
                    "for it (e.g. a TensorDictPrimer) or give the policy block a "
                    "make_tensordict_primer() method"
                )

    # ---------------------------------------------------------------------------- stepping
    def start(self, mask: torch.Tensor | None = None) -> None:
        """Starts new episodes at the next step, in every sub-env or those in ``mask`` (``[*B]``)."""
        if mask is None:
            self._pending.fill_(True)
        else:
            self._pending |= mask.to(self._pending.device).reshape(self._pending.shape)
        self._any_pending = True

    def build(self, td: TensorDictBase) -> TensorDictBase:
        """Writes every view into ``td`` (the policy's input at this step, batch ``[*B]``)."""
        if self._any_pending:
            pending = self._pending
            if bool(pending.any()):
                for ring in self._rings:
                    ring.restart(pending, td)
                pending.zero_()
            self._any_pending = False
        dims = self.batch_dims
        for out_key, key, stacked, parts in self._plan:
            values = [td.get(key) if ring is None else ring.past(s) for ring, s in parts]
            # a fresh tensor: a ring slot is overwritten a few steps later
            value = torch.stack(values, dims) if stacked else values[0].clone()
            td.set(out_key, value)
        return td

    def record(self, transition: TensorDictBase) -> None:
        """Pushes one step (batch ``[*B]``, with ``"next"``) and notes the finished sub-envs."""
        owners, dests, sources = [], [], []
        for ring in self._rings:
            slot = ring.advance()
            value = transition.get(ring.key, None)
            if value is None:  # a random-action step has no policy outputs: zeros, as stored
                slot.zero_()
            else:
                owners.append(ring)
                dests.append(slot)
                sources.append(value)
        if dests:
            try:
                torch._foreach_copy_(dests, sources)  # one dispatch for every ring
            except RuntimeError:
                self._copy_one_by_one(owners, dests, sources)
        dims = self.batch_dims
        for key in self._done_keys:
            flag = transition.get(key, None)
            if flag is None or not bool(flag.any()):  # most steps end no episode
                continue
            ended = flag.reshape(*flag.shape[:dims], -1).any(-1)
            self._pending |= ended.to(self._pending.device)
            self._any_pending = True

    def _copy_one_by_one(
        self, rings: list[_Ring], dests: list[torch.Tensor], sources: list[torch.Tensor]
    ) -> None:
        # e.g. devices that foreach does not mix; a shape that disagrees with its spec is named
        for ring, dest, source in zip(rings, dests, sources):
            try:
                dest.copy_(source)
            except RuntimeError as err:
                raise RuntimeError(
                    f"{self.owner}: the view source {ring.key!r} has shape "
                    f"{tuple(source.shape)} at this step, while its spec gives "
                    f"{tuple(dest.shape)} per step: {err}"
                ) from err

    def exclude(self, td: TensorDictBase) -> TensorDictBase:
        """``td`` without the view entries (a new TensorDict; ``td`` is untouched)."""
        return td.exclude(*self.out_keys)


class ViewPolicy(TensorDictModuleBase):
    """A policy that builds its own trajectory views: for ``env.rollout`` and hand-written loops.

    Collectors build a policy's views themselves; ``env.rollout(max_steps, policy)`` (e.g. an
    evaluation) does not. Wrapped in a ``ViewPolicy``, the policy gets them from a
    :class:`ViewRing`: each call first records the step the previous call's TensorDict went
    through (``env.step`` writes its ``"next"`` entries into it), then builds the views and runs
    the policy. Episodes start at the first call, after every done step, where ``"is_init"`` is
    set (an ``InitTracker`` in the env) and after :meth:`reset`: call it before a new rollout
    when the env has no ``InitTracker``. Give a collector the policy itself, not this wrapper.

    Args:
        policy: the policy (a TensorDict module declaring ``views``).
        env: the env it runs in (specs, batch size, device).
        views: the views to build (default: ``get_views(policy)``).

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.data.trajectory_views import TrajectoryView
        >>> from torchrl.envs import PendulumEnv
        >>> env = PendulumEnv(seed=0)
        >>> net = torch.nn.Sequential(torch.nn.Flatten(-2), torch.nn.Linear(6, 1), torch.nn.Tanh())
        >>> net.views = [TrajectoryView("observation", "-1:0")]
        >>> policy = ViewPolicy(TensorDictModule(net, ["observation_view"], ["action"]), env)
        >>> rollout = env.rollout(5, policy)
        >>> rollout["observation_view"].shape
        torch.Size([5, 2, 3])
        >>> torch.equal(rollout["observation_view"][1:, 0], rollout["observation"][:-1])
        True
    """

    def __init__(
        self,
        policy: Any,
        env: EnvBase,
        views: Sequence[TrajectoryView] | None = None,
    ) -> None:
        super().__init__()
        self.policy = policy
        views = get_views(policy) if views is None else list(views)
        self.ring = ViewRing(views, env, policy, owner="ViewPolicy")
        outs = {_as_key(k) for k in self.ring.out_keys}
        in_keys: list[NestedKey] = list(getattr(policy, "in_keys", []))
        out_keys: list[NestedKey] = [*getattr(policy, "out_keys", []), *self.ring.out_keys]
        # tensordict types keys as str | tuple[str]; ours are any nested keys
        self.in_keys = cast(Any, [k for k in in_keys if _as_key(k) not in outs])
        self.out_keys = cast(Any, out_keys)
        self._batch_dims = len(env.batch_size)
        self._last: TensorDictBase | None = None

    def reset(self) -> None:
        """Starts new episodes in every sub-env at the next call (a new rollout)."""
        self._last = None
        self.ring.start()

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        last = self._last
        if last is not None and last is not tensordict and last.get(NEXT, None) is not None:
            self.ring.record(last)
        is_init = tensordict.get(IS_INIT, None)
        if is_init is not None:
            dims = self._batch_dims
            self.ring.start(is_init.reshape(*is_init.shape[:dims], -1).any(-1))
        self.ring.build(tensordict)
        out = self.policy(tensordict)
        if out is not None:
            tensordict = out
        self._last = tensordict
        return tensordict


class ViewRebuilder:
    """Rebuilds the views of consecutive collected batches, lookback included, for a loss.

    A collector leaves view entries out of its batches. For on-policy training straight from
    the collector, call the rebuilder on every batch, in the order they come: it writes each
    view (those ``used_for_training``) exactly as the policy saw it. The first steps of a batch
    read their lookback from the previous batch of the same trajectory (matched by
    ``("collector", "traj_ids")``, so the batches of multi-process collectors, in any order,
    work too): the rebuilder keeps the last ``lookback`` steps of every unfinished trajectory.
    A trajectory whose earlier batch it never saw (a rebuilder made mid-run) is padded as if it
    had started with the batch.

    With ``next_views=True`` it also writes ``("next", out_key)``: the view as the policy would
    see it at the next step (e.g. a critic's input for the bootstrap value of GAE), from the
    stored ``("next", key)`` for shift 0 and from ``key`` for the past shifts; it is right at
    an episode's last step too, where no next step was collected.

    Args:
        views: the views, or a module declaring them (read with ``get_views``).
        training_only: rebuild only the views ``used_for_training`` (default).
        next_views: also write ``("next", out_key)`` for every view.
        traj_key: the trajectory-id entry of the batches.
        keep: how many batches an unfinished trajectory's tail is kept for without a sequel
            (then it is dropped: e.g. after a reset between batches).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data.trajectory_views import prev_action
        >>> rebuild = ViewRebuilder([prev_action()])
        >>> def batch(actions, ids):
        ...     return TensorDict({"action": torch.tensor(actions).unsqueeze(-1),
        ...         ("collector", "traj_ids"): torch.tensor(ids)}, [len(ids)])
        >>> rebuild(batch([1.0, 2.0], [0, 0]))["prev_action"].squeeze(-1)
        tensor([0., 1.])
        >>> rebuild(batch([3.0, 4.0], [0, 1]))["prev_action"].squeeze(-1)  # 2 comes from before
        tensor([2., 0.])
    """

    def __init__(
        self,
        views: Sequence[TrajectoryView] | TrajectoryView | Any,
        *,
        training_only: bool = True,
        next_views: bool = False,
        traj_key: NestedKey = (COLLECTOR, TRAJ_IDS),
        keep: int = 64,
    ) -> None:
        if isinstance(views, TrajectoryView):
            views = [views]
        elif not isinstance(views, (list, tuple)):
            views = get_views(views)
        for view in views:
            if not isinstance(view, TrajectoryView):
                raise TypeError(
                    f"ViewRebuilder: views must be TrajectoryView objects, got {view!r}"
                )
        self.views = [v for v in views if v.used_for_training or not training_only]
        self.lookback = max((v.lookback for v in self.views), default=0)
        self.traj_key = traj_key
        if keep < 1:
            raise ValueError(f"ViewRebuilder: keep must be >= 1, got {keep}")
        self.keep = keep
        keys: list[NestedKey] = []
        for view in self.views:
            if view.key not in keys:
                keys.append(view.key)
        self._keys = keys
        self.next_views = bool(next_views)
        # the next step's view: its shift k reads step t + 1 + k (the past part from the
        # window, which holds it), except shift 0, which reads ("next", key) at t
        self._next_plan: list[tuple[TrajectoryView, TrajectoryView, list[int]]] = []
        if self.next_views:
            for n, view in enumerate(self.views):
                moved = [s + 1 for s in view.shifts]
                shift: int | list[int] = moved if view.stacked else moved[0]
                temp = TrajectoryView(view.key, shift, ("_next_view", str(n)), view.padding)
                now = [i for i, s in enumerate(view.shifts) if s == 0]
                self._next_plan.append((view, temp, now))
        self._now_keys: list[NestedKey] = []
        for view, _, now in self._next_plan:
            key = (NEXT, *_as_key(view.key))
            if now and key not in self._now_keys:
                self._now_keys.append(key)
        # tails of unfinished trajectories: sources [M, L], their step ids [M, L], their age
        self._tails: TensorDictBase | None = None
        self._ages: torch.Tensor | None = None

    def reset(self) -> None:
        """Forgets every kept trajectory tail (the next batch starts afresh)."""
        self._tails = None
        self._ages = None

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        """Writes the views into ``batch`` (``[*B, T]``, time last) and returns it."""
        if not self.views:
            return batch
        if batch.batch_dims < 1:
            raise ValueError("ViewRebuilder needs a batch [*B, T] with a time dim")
        ids = batch.get(self.traj_key, None)
        if ids is None:
            raise KeyError(
                f"ViewRebuilder: the batch has no {self.traj_key!r} entry (the collector's "
                "trajectory ids), which tells which batch steps continue which trajectory"
            )
        if batch.get((COLLECTOR, MASK), None) is not None:
            raise ValueError(
                "ViewRebuilder: the batch was split into padded trajectories (it has "
                f"{(COLLECTOR, MASK)!r}); rebuild the views on the batches as collected "
                "(split_trajs=False), then split them"
            )
        missing = [k for k in [*self._keys, *self._now_keys] if batch.get(k, None) is None]
        if missing:
            raise KeyError(
                f"ViewRebuilder: the batch lacks the view source(s) {missing} "
                f"(keys: {sorted(map(str, batch.keys(True, True)))})"
            )
        lead = batch.batch_size
        steps = lead[-1]
        rows = lead[:-1].numel()
        flat_ids = ids.reshape(rows, steps)
        sources = TensorDict(
            {
                k: batch.get(k).reshape(rows, steps, *batch.get(k).shape[len(lead) :])
                for k in self._keys
            },
            batch_size=[rows, steps],
            device=batch.device,
        )
        lookback = self.lookback
        context, context_ids = self._context(flat_ids[:, 0], sources, lookback)
        window: TensorDictBase = sources
        window_ids = flat_ids
        if lookback:
            window = cast(TensorDictBase, torch.cat(cast(Any, [context, sources]), 1))
            window_ids = torch.cat([context_ids, flat_ids], 1)
        start = torch.ones_like(window_ids, dtype=torch.bool)
        start[:, 1:] = window_ids[:, 1:] != window_ids[:, :-1]
        if lookback:  # before the views are written into the window
            self._keep_tails(window[:, -lookback:], window_ids[:, -lookback:], batch)
        temps = [temp for _, temp, _ in self._next_plan]
        built = build_views(window, [*self.views, *temps], episode_start=start)
        for view in self.views:
            value = built.get(view.target_key)[:, lookback:]
            batch.set(view.target_key, value.reshape(*lead, *value.shape[2:]))
        for view, temp, now in self._next_plan:
            value = built.get(temp.target_key)[:, lookback:]
            if now:
                current = batch.get((NEXT, *_as_key(view.key)))
                current = current.reshape(rows, steps, *current.shape[len(lead) :])
                if view.stacked:
                    value[:, :, now] = current.unsqueeze(2).to(value.dtype)
                else:
                    value = current.clone()
            batch.set((NEXT, *_as_key(view.target_key)), value.reshape(*lead, *value.shape[2:]))
        return batch

    def _context(
        self, first_ids: torch.Tensor, sources: TensorDictBase, lookback: int
    ) -> tuple[TensorDictBase, torch.Tensor]:
        """The kept tails of the trajectories the rows go on with (zeros and id -1 if none)."""
        rows = first_ids.shape[0]
        context = sources[:, :1].expand(rows, lookback).apply(torch.zeros_like)
        assert context is not None
        context_ids = torch.full(
            (rows, lookback), -1, dtype=first_ids.dtype, device=first_ids.device
        )
        tails, ages = self._tails, self._ages
        if not lookback or tails is None or ages is None:
            return context, context_ids
        last = tails.get("_ids")[:, -1]
        match = first_ids.unsqueeze(1) == last.to(first_ids.device).unsqueeze(0)  # [rows, M]
        found = match.any(1)
        if bool(found.any()):
            which = match.long().argmax(1)[found]
            picked = tails[which.to(tails.device)]
            context[found] = picked.exclude("_ids")
            context_ids[found] = picked.get("_ids").to(context_ids.device)
            used = torch.zeros(last.shape[0], dtype=torch.bool, device=last.device)
            used[which.to(last.device)] = True
            self._tails, self._ages = tails[~used], ages[~used]
        return context, context_ids

    def _keep_tails(
        self, tail: TensorDictBase, tail_ids: torch.Tensor, batch: TensorDictBase
    ) -> None:
        """Keeps the last steps of the rows whose trajectory goes on in a later batch."""
        done = batch.get((NEXT, DONE), None)
        rows = tail.shape[0]
        if done is not None:
            ended = done.reshape(rows, batch.batch_size[-1], -1)[:, -1].any(-1)
        else:
            ended = torch.zeros(rows, dtype=torch.bool)
        keep = ~ended.to(tail_ids.device)
        tail = tail.clone()
        tail.set("_ids", tail_ids)
        new = tail[keep.to(tail.device)]
        new_ages = torch.zeros(new.shape[0], dtype=torch.int64)
        if self._tails is not None and self._ages is not None:
            ages = self._ages + 1
            old = ages < self.keep
            new = torch.cat([self._tails[old], new], 0)
            new_ages = torch.cat([ages[old], new_ages], 0)
        self._tails, self._ages = new, new_ages
