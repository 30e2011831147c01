"""What :class:`SerialEnv` and :class:`ParallelEnv` share: arguments, specs, key layouts, steps.

A batched env runs ``n`` copies ("workers") of an env of batch ``[*inner]`` behind one env of
batch ``[n, *inner]``. The keys a worker reads (actions and states), the keys a step writes
(observations, rewards, done flags) and the keys a reset writes (observations, done flags and
states) are fixed by the specs, so they are listed once, as :class:`_Layout` objects, and every
step moves exactly those entries. Both batched envs step a worker's env the same way (its
``_step`` and the done-flag completion of ``EnvBase.step``) and reset its finished sub-envs with
:func:`_reset_finished`, so that they give identical results.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import DONE, NEXT, TERMINATED, TRUNCATED
from torchrl.data.specs import Composite, TensorSpec, stack_specs
from torchrl.envs._contract import _any, _complete_done, _set_next
from torchrl.envs.common import EnvBase
from torchrl.envs.utils import _apply_mdp_plan, _key_tuple

NestedKey = str | tuple[str, ...]
Path = tuple[str, ...]


# ------------------------------------------------------------------------------- metadata
class EnvMetaData:
    """What a batched env needs to know of a worker's env: its batch size, device and specs.

    Read once from a built env, without stepping it; it pickles (specs hold plain tensors).

    Args:
        batch_size: the env's batch size.
        device: the env's device.
        output_spec: the env's ``output_spec`` (a copy).
        input_spec: the env's ``input_spec`` (a copy).
        allow_done_after_reset: the env's flag of the same name.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.batched import EnvMetaData
        >>> meta = EnvMetaData.from_env(PendulumEnv(batch_size=[2]))
        >>> meta.batch_size, sorted(meta.output_spec["full_observation_spec"].keys())[0]
        (torch.Size([2]), 'observation')
    """

    __slots__ = ("allow_done_after_reset", "batch_size", "device", "input_spec", "output_spec")

    def __init__(
        self,
        batch_size: torch.Size,
        device: torch.device | None,
        output_spec: Composite,
        input_spec: Composite,
        allow_done_after_reset: bool = False,
    ) -> None:
        self.batch_size = torch.Size(batch_size)
        self.device = device
        self.output_spec = output_spec
        self.input_spec = input_spec
        self.allow_done_after_reset = bool(allow_done_after_reset)

    @classmethod
    def from_env(cls, env: EnvBase) -> EnvMetaData:
        """Reads the metadata of a built env.

        Args:
            env: the env (any :class:`~torchrl.envs.EnvBase`).

        Returns:
            Its :class:`EnvMetaData`, with copies of its specs.
        """
        if not isinstance(env, EnvBase):
            raise TypeError(
                f"create_env_fn must return a torchrl EnvBase, got a {type(env).__name__}"
            )
        return cls(
            env.batch_size,
            env.device,
            env.output_spec.clone(),
            env.input_spec.clone(),
            env.allow_done_after_reset,
        )

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"EnvMetaData(batch_size={self.batch_size}, device={self.device})"


# --------------------------------------------------------------------------------- layouts
def _get_leaf(td: Any, path: Path) -> Any:
    """The entry at ``path`` of a TensorDict, or ``None``; reads plain TensorDicts' dicts."""
    node = td
    for key in path:
        if type(node) is TensorDict:
            node = node._tensordict.get(key)
        else:
            node = node.get(key, None)
        if node is None:
            return None
    return node


def _is_non_tensor(spec: TensorSpec) -> bool:
    return type(spec).__name__ in ("NonTensor", "NonTensorSpec")


class _Node:
    """A level of a nested layout: its batch sizes (batched and per worker) and its entries."""

    __slots__ = ("entries", "full", "inner")

    def __init__(self, full: torch.Size, lead: int) -> None:
        self.full = torch.Size(full)
        self.inner = torch.Size(full[lead:])
        # name -> leaf index (int) or sub-node
        self.entries: dict[str, int | _Node] = {}


class _Layout:
    """An ordered list of leaf keys and the nested structure that holds them.

    Values move as flat lists aligned with :attr:`paths`; :meth:`build` turns such a list back
    into a (nested) TensorDict, of the batched shape (``full=True``) or of one worker's.

    Args:
        entries: ``(path, leaf_spec)`` pairs, leaf specs of the batched shape ``[n, *inner, ...]``.
        node_shape: the batched batch shape of a nested node, given its path (``()``: root).
        lead: the number of leading (worker) dims (1).
    """

    __slots__ = ("device", "flat_keys", "paths", "root", "shapes", "specs")

    def __init__(
        self,
        entries: Sequence[tuple[Path, TensorSpec]],
        node_shape: Callable[[Path], torch.Size],
        lead: int,
        device: torch.device | None,
    ) -> None:
        self.paths: list[Path] = []
        self.specs: list[TensorSpec] = []
        self.device = device
        self.root = _Node(node_shape(()), lead)
        nodes: dict[Path, _Node] = {(): self.root}
        for path, spec in entries:
            if path in nodes or path in self.paths:
                continue
            node = self.root
            for depth in range(1, len(path)):
                prefix = path[:depth]
                child = nodes.get(prefix)
                if child is None:
                    child = nodes[prefix] = _Node(node_shape(prefix), lead)
                    node.entries[prefix[-1]] = child
                node = child
            node.entries[path[-1]] = len(self.paths)
            self.paths.append(path)
            self.specs.append(spec)
        self.shapes = [spec.shape for spec in self.specs]
        # Most envs have no nested entries: their TensorDicts are built without recursion.
        flat = all(len(p) == 1 for p in self.paths)
        self.flat_keys: list[str] | None = [p[0] for p in self.paths] if flat else None

    def __len__(self) -> int:
        return len(self.paths)

    def build(self, values: Sequence[Any], full: bool = True) -> TensorDict:
        """A TensorDict holding ``values`` (aligned with :attr:`paths`; ``None`` entries skipped)."""
        keys = self.flat_keys
        if keys is not None:
            items = {k: v for k, v in zip(keys, values) if v is not None}
            root = self.root
            # The values come from buffers or env outputs of the layout's shapes: skip the
            # checks of the public constructor.
            return TensorDict._new_unsafe(
                cast(dict, items),
                batch_size=root.full if full else root.inner,
                device=self.device,
                nested=False,
            )
        out = _build(self.root, values, full, self.device)
        if out is None:  # nothing given at all
            root = self.root
            out = TensorDict._new_unsafe(
                {}, batch_size=root.full if full else root.inner, device=self.device
            )
        return out

    def read(self, td: TensorDictBase) -> list[Any]:
        """The entries of ``td`` at :attr:`paths` (``None`` where missing)."""
        return [_get_leaf(td, path) for path in self.paths]

    def zeros(self) -> TensorDict:
        """A TensorDict of zeros of the batched shape (the buffers of a batched env)."""
        return self.build([spec.zero() for spec in self.specs], full=True)


def _build(node: _Node, values: Sequence[Any], full: bool, device: Any) -> TensorDict | None:
    items: dict[str, Any] = {}
    for name, entry in node.entries.items():
        if type(entry) is int:
            value = values[entry]
        else:
            value = _build(entry, values, full, device)  # type: ignore[arg-type]
        if value is not None:
            items[name] = value
    if not items and node.entries:
        return None
    return TensorDict._new_unsafe(
        cast(dict, items), batch_size=node.full if full else node.inner, device=device, nested=False
    )


# ------------------------------------------------------------------------- one worker's steps
def _fast_step(env: EnvBase) -> bool:
    """Whether ``env.step`` is ``EnvBase.step`` without checks: ``_step`` can be called directly."""
    return type(env).step is EnvBase.step and not env.run_type_checks


def _step_fn(env: EnvBase) -> Callable[[TensorDictBase], TensorDictBase]:
    """A worker's raw step: ``env._step`` when that is all ``env.step`` would do, else ``step``.

    Done flags are completed by the caller (:func:`_complete_done`), where needed.
    """
    if _fast_step(env):
        return env._step

    def step(tensordict: TensorDictBase) -> TensorDictBase:
        return env.step(tensordict).get(NEXT)

    return step


def _complete(env: EnvBase, out: TensorDictBase) -> TensorDictBase:
    _complete_done(out, (env._cache or env._spec_cache()).done_groups)
    return out


def _inner_step(env: EnvBase, tensordict: TensorDictBase, fast: bool) -> TensorDictBase:
    """One step of a worker's env; returns its ``"next"`` entries (done flags completed)."""
    if fast:
        # EnvBase.step minus the "next" bookkeeping, which the batched env does once for all.
        out = env._step(tensordict)
        _complete_done(out, (env._cache or env._spec_cache()).done_groups)
        return out
    return env.step(tensordict).get(NEXT)


def _reset_finished(
    env: EnvBase, tensordict: TensorDictBase, next_out: TensorDictBase
) -> TensorDictBase | None:
    """Resets the finished sub-envs of a worker after a step (``None`` when none finished).

    Does what ``env.step_and_maybe_reset`` does after its step: the next step's input is built
    by ``step_mdp`` and the done flags become the ``"_reset"`` masks of a partial reset.
    """
    cache = env._cache or env._spec_cache()
    groups = cache.done_groups
    flags = [group.flags(next_out) for group in groups]
    if not any(_any(f) for f in flags):
        return None
    td = tensordict.copy()
    _set_next(td, next_out)
    next_td = _apply_mdp_plan(td, cache.mdp_plan)
    for group, flag in zip(groups, flags):
        next_td.set(group.reset_key, flag)
    return env.reset(next_td)


def _check_value(value: Any, spec: TensorSpec, path: Path, worker: int, what: str) -> Any:
    """Raises a clear error when a worker's output lacks an entry or has the wrong shape."""
    if value is None:
        raise KeyError(
            f"worker {worker}: the env's {what} output has no entry {_unravel(path)!r}, which "
            f"its specs declare ({spec!r})"
        )
    if value.shape != spec.shape[1:]:
        raise ValueError(
            f"worker {worker}: the env's {what} output {_unravel(path)!r} has shape "
            f"{tuple(value.shape)}, its spec expects {tuple(spec.shape[1:])} ({spec!r})"
        )
    return value


def _unravel(path: Path) -> NestedKey:
    return path[0] if len(path) == 1 else path


# ----------------------------------------------------------------------------- arguments
def _normalize_args(
    num_workers: int,
    create_env_fn: Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]],
    create_env_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None,
    name: str,
) -> tuple[list[Callable[..., EnvBase]], list[dict[str, Any]]]:
    if not isinstance(num_workers, numbers.Integral) or isinstance(num_workers, bool):
        raise TypeError(f"{name}: num_workers must be a positive int, got {num_workers!r}")
    if num_workers < 1:
        raise ValueError(f"{name}: num_workers must be a positive int, got {num_workers!r}")
    num_workers = int(num_workers)
    if callable(create_env_fn):
        fns = [create_env_fn] * num_workers
    else:
        fns = list(create_env_fn)
        if len(fns) != num_workers:
            raise ValueError(
                f"{name}: create_env_fn is a list of {len(fns)} callables for "
                f"num_workers={num_workers}; give one per worker (or a single callable)"
            )
        for i, fn in enumerate(fns):
            if not callable(fn):
                raise TypeError(f"{name}: create_env_fn[{i}] is not callable: {fn!r}")
    return fns, _normalize_kwargs(num_workers, create_env_kwargs, name)


def _normalize_kwargs(
    num_workers: int, kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None, name: str
) -> list[dict[str, Any]]:
    if kwargs is None:
        return [{} for _ in range(num_workers)]
    if isinstance(kwargs, dict):
        return [dict(kwargs) for _ in range(num_workers)]
    out = [dict(k) for k in kwargs]
    if len(out) != num_workers:
        raise ValueError(
            f"{name}: create_env_kwargs is a list of {len(out)} dicts for num_workers="
            f"{num_workers}; give one per worker (or a single dict)"
        )
    return out


def _read_metas(
    fns: list[Callable[..., EnvBase]], kwargs: list[dict[str, Any]], keep: bool
) -> tuple[list[EnvMetaData], dict[int, EnvBase]]:
    """The metadata of each worker's env, building one env per distinct (fn, kwargs) pair.

    Returns the metadata and, when ``keep``, the envs built (by worker index), for the caller
    to use; otherwise they are closed.
    """
    from torchrl.envs.env_creator import EnvCreator

    metas: list[EnvMetaData] = []
    built: dict[int, EnvBase] = {}
    seen: list[tuple[Callable, dict[str, Any], EnvMetaData]] = []
    for i, (fn, kw) in enumerate(zip(fns, kwargs)):
        meta = next((m for f, k, m in seen if f is fn and k == kw), None)
        if meta is None:
            if isinstance(fn, EnvCreator) and not kw:
                meta = fn.meta_data
            else:
                env = fn(**kw)
                meta = EnvMetaData.from_env(env)
                if keep:
                    built[i] = env
                else:
                    env.close()
            seen.append((fn, kw, meta))
        metas.append(meta)
    return metas, built


def _stack_metas(metas: list[EnvMetaData], name: str) -> tuple[Composite, Composite]:
    """The batched ``output_spec`` and ``input_spec``: the workers' specs stacked on a dim 0."""
    n = len(metas)
    first = metas[0]
    for i, meta in enumerate(metas[1:], 1):
        if meta is first:
            continue
        if meta.batch_size != first.batch_size or meta.device != first.device:
            raise ValueError(
                f"{name}: worker {i}'s env has batch size {list(meta.batch_size)} on "
                f"{meta.device}, worker 0's {list(first.batch_size)} on {first.device}; "
                f"a batched env needs one batch size and device"
            )
        for spec_name in ("output_spec", "input_spec"):
            a, b = getattr(first, spec_name), getattr(meta, spec_name)
            keys_a = set(a.keys(True, True))
            keys_b = set(b.keys(True, True))
            if keys_a != keys_b:
                raise ValueError(
                    f"{name}: the envs of workers 0 and {i} have different keys in their "
                    f"{spec_name}: only in worker 0: {sorted(map(str, keys_a - keys_b))}, only "
                    f"in worker {i}: {sorted(map(str, keys_b - keys_a))}"
                )
            for key in keys_a:
                sa, sb = a[key], b[key]
                if sa.shape != sb.shape or sa.dtype != sb.dtype or type(sa) is not type(sb):
                    raise ValueError(
                        f"{name}: entry {key!r} differs between the envs of workers 0 and {i} "
                        f"({sa!r} vs {sb!r}); the workers' specs must share shapes, dtypes and "
                        f"kinds to be stacked"
                    )
    specs = []
    for spec_name in ("output_spec", "input_spec"):
        base = getattr(first, spec_name)
        out = base.expand(n, *base.shape)
        if any(m is not first for m in metas):
            # Specs that differ only in their values (bounds, ...) stack lazily, leaf by leaf.
            for key in base.keys(True, True):
                leaves = [getattr(m, spec_name)[key] for m in metas]
                if any(leaf != leaves[0] for leaf in leaves[1:]):
                    out[key] = stack_specs(leaves, 0)
        specs.append(out)
    return specs[0], specs[1]


def _reset_entries(env: EnvBase) -> list[tuple[Path, TensorSpec]]:
    """The ``"_reset"`` masks of a (batched) env: one per done group, shaped like its flags."""
    cache = env._cache or env._spec_cache()
    done_spec = env.full_done_spec
    out = []
    for group in cache.done_groups:
        flag = next(n for n in (DONE, TERMINATED, TRUNCATED) if group.has[n])
        out.append((_key_tuple(group.reset_key), done_spec[group.prefix + (flag,)].clone()))
    return out
