"""``SerialEnv``: ``n`` envs stepped one after the other in this process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl.envs.batched._common import (
    _check_value,
    _complete,
    _get_leaf,
    _Layout,
    _reset_finished,
    _step_fn,
    _unravel,
)
from torchrl.envs.batched.base import BatchedEnvBase, _Merge
from torchrl.envs.common import EnvBase

__all__ = ["SerialEnv"]


class SerialEnv(BatchedEnvBase):
    """Runs ``num_workers`` envs one after the other in this process, as one batched env.

    The batched env has batch ``[num_workers, *inner]`` (``inner``: the batch of one env) and
    the envs' specs stacked on a first dim. Each step splits the input along that dim, steps
    every env and stacks the outputs: no process, no copy into buffers. Behaves exactly like
    :class:`ParallelEnv` (same keys, same values for envs seeded with :meth:`set_seed`), which
    is the one to use when the envs are slow enough to gain from processes.

    Args:
        num_workers: the number of envs ``n``.
        create_env_fn: a callable returning a torchrl env, or a list of ``n`` of them (their
            specs must agree in keys, shapes and dtypes).
        create_env_kwargs: keyword arguments of ``create_env_fn``: one dict for all, or a list
            of ``n`` dicts.

    Examples:
        >>> from torchrl.envs import GymEnv, SerialEnv
        >>> env = SerialEnv(3, GymEnv, create_env_kwargs={"env_name": "CartPole-v1"})
        >>> env.batch_size
        torch.Size([3])
        >>> seed = env.set_seed(0)  # worker i+1 gets the seed worker i returned
        >>> env.rollout(5, break_when_any_done=False)["next", "observation"].shape
        torch.Size([3, 5, 4])
        >>> env.close()
    """

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]],
        create_env_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
    ) -> None:
        self._envs: list[EnvBase] = []
        super().__init__(num_workers, create_env_fn, create_env_kwargs)

    def _keeps_built_envs(self) -> bool:
        # The envs built to read the specs become workers: no env is built twice.
        return True

    @property
    def envs(self) -> list[EnvBase]:
        """The workers' envs (empty until the env starts)."""
        return list(self._envs)

    # ------------------------------------------------------------------------- lifecycle
    def _start(self) -> None:
        built, self._built = self._built, {}
        envs = []
        try:
            for i, (fn, kw) in enumerate(zip(self._create_env_fn, self._create_env_kwargs)):
                env = built.pop(i, None)
                envs.append(env if env is not None else fn(**kw))
        except BaseException:
            for env in envs + list(built.values()):
                env.close()
            raise
        for env in built.values():
            env.close()
        self._envs = envs
        self._step_fns = [_step_fn(env) for env in envs]
        self._last_roots: list[TensorDictBase | None] = [None] * len(envs)

    def _stop(self) -> None:
        envs, self._envs = self._envs, []
        errors = []
        for env in envs:
            try:
                env.close()
            except Exception as err:  # close every env before reporting
                errors.append(err)
        if errors:
            raise errors[0]

    def _seed_worker(self, index: int, seed: int, static_seed: bool) -> int:
        return self._envs[index].set_seed(seed, static_seed=static_seed)

    # ----------------------------------------------------------------------------- steps
    def _split(self, values: list[Any]) -> list[TensorDictBase | None]:
        """One input TensorDict per worker (``None`` where nothing is given)."""
        n = self._num_workers
        if all(v is None for v in values):
            return [None] * n
        layout = self._input_layout
        keys = layout.flat_keys
        if keys is not None:
            present = [(k, v.unbind(0)) for k, v in zip(keys, values) if v is not None]
            inner, device = layout.root.inner, layout.device
            new = TensorDict._new_unsafe
            return [
                new({k: c[i] for k, c in present}, batch_size=inner, device=device, nested=False)
                for i in range(n)
            ]
        columns = [v.unbind(0) if v is not None else None for v in values]
        build = layout.build
        return [
            build([c[i] if c is not None else None for c in columns], full=False) for i in range(n)
        ]

    def _stack(self, outs: list[Any], layout: _Layout, what: str, fill: bool) -> TensorDictBase:
        """Stacks the workers' outputs along a first dim, entry by entry of ``layout``."""
        stacked = []
        for path, spec in zip(layout.paths, layout.specs):
            values: list[Any] = [_get_leaf(out, path) if out is not None else None for out in outs]
            for i, value in enumerate(values):
                if value is None and fill:
                    values[i] = spec.zero()[i]
                else:
                    _check_value(value, spec, path, i, what)
            stacked.append(torch.stack(values, 0))
        return layout.build(stacked, full=True)

    def _stack_steps(self, outs: list[TensorDictBase]) -> TensorDictBase:
        """Stacks the step outputs; the done flags the envs left out are derived first."""
        layout = self._step_layout
        keys = layout.flat_keys
        if keys is not None and all(type(out) is TensorDict for out in outs):
            # The common case, in a few tensor calls: plain TensorDicts with every entry.
            try:
                raws = [out._tensordict for out in outs]
                stacked = [torch.stack([raw[k] for raw in raws], 0) for k in keys]
            except (KeyError, RuntimeError):
                pass
            else:
                if all(v.shape == shape for v, shape in zip(stacked, layout.shapes)):
                    return layout.build(stacked, full=True)
        outs = [_complete(env, out) for env, out in zip(self._envs, outs)]
        return self._stack(outs, layout, "step", fill=False)

    def _finished(self, next_td: TensorDictBase) -> list[int]:
        """The workers with a done sub-env in a step's output."""
        cache = self._cache or self._spec_cache()
        n = self._num_workers
        found = None
        for group in cache.done_groups:
            flags = group.flags(next_td)
            if bool(flags.any()):
                per_worker = flags.reshape(n, -1).any(-1)
                found = per_worker if found is None else found | per_worker
        return [] if found is None else found.nonzero().flatten().tolist()

    def _run_step(self, values: list[Any], complete: bool) -> TensorDictBase:
        subs = cast(list[TensorDictBase], self._split(values))  # a step has actions
        outs = [step(sub) for step, sub in zip(self._step_fns, subs)]
        return self._stack_steps(outs)

    def _run_step_and_reset(
        self, values: list[Any], complete: bool
    ) -> tuple[TensorDictBase, _Merge | None]:
        subs = cast(list[TensorDictBase], self._split(values))  # a step has actions
        outs = [step(sub) for step, sub in zip(self._step_fns, subs)]
        next_td = self._stack_steps(outs)
        roots: dict[int, TensorDictBase] = {}
        for i in self._finished(next_td):
            env = self._envs[i]
            root = _reset_finished(env, subs[i], _complete(env, outs[i]))
            if root is not None:
                roots[i] = self._last_roots[i] = root
        if not roots:
            return next_td, None

        def merge(next_input: TensorDictBase) -> None:
            layout = self._root_layout
            for path, spec in zip(layout.paths, layout.specs):
                current = _get_leaf(next_input, path)
                if current is None:
                    current = spec.zero()
                columns = list(current.unbind(0))
                for i, root in roots.items():
                    value = _get_leaf(root, path)
                    columns[i] = value if value is not None else torch.zeros_like(columns[i])
                next_input.set(_unravel(path), torch.stack(columns, 0))

        return next_td, merge

    def _run_reset(
        self, values: list[Any], need: list[bool], kwargs: dict[str, Any]
    ) -> TensorDictBase:
        subs = self._split(values)
        roots = self._last_roots
        for i, (env, sub) in enumerate(zip(self._envs, subs)):
            if need[i]:
                roots[i] = env.reset(sub, **kwargs)
        return self._stack(roots, self._root_layout, "reset", fill=True)
