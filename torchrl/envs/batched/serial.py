"""``SerialEnv``: ``n`` envs stepped one after the other in this process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import NEXT
from torchrl._td_compat import entries, new_unchecked
from torchrl._types import DeviceLike, NestedKey
from torchrl.envs._key_paths import path_to_key
from torchrl.envs._writes import STEP_MASK, set_leaf
from torchrl.envs.batched._inner import check_value, complete_output, reset_finished, step_fn
from torchrl.envs.batched._layout import Layout, get_leaf
from torchrl.envs.batched.base import BatchedEnvBase, Merge
from torchrl.envs.common import EnvBase

__all__ = ["SerialEnv"]


class SerialEnv(BatchedEnvBase):
    """Runs ``num_workers`` envs one after the other in this process, as one batched env.

    The batched env has batch ``[num_workers, *inner]`` (``inner``: the batch of one env) and
    the envs' specs stacked on a first dim. Each step splits the input along that dim, steps
    every env and stacks the outputs: no process, no copy into buffers. Envs whose class offers
    a batched stepper (plain :class:`~torchrl.envs.GymEnv` / :class:`~torchrl.envs.GymWrapper`
    envs, not transformed ones) are stepped as one batch instead, with the same results and a
    fraction of the overhead (see :meth:`_make_stepper`). Behaves exactly like
    :class:`ParallelEnv` (same keys, same values for envs seeded with :meth:`set_seed`), which
    is the one to use when the envs are slow enough to gain from processes.

    Args:
        num_workers: the number of envs ``n``.
        create_env_fn: a callable returning a torchrl env, or a list of ``n`` of them (their
            specs must agree in keys, shapes and dtypes).
        create_env_kwargs: keyword arguments of ``create_env_fn``: one dict for all, or a list
            of ``n`` dicts.
        validate_actions: check the stacked actions of every step against the stacked action
            spec, once for all envs (the envs themselves are stepped without a second check).
        shared_memory, mp_start_method, num_sub_threads, serial_for_single: TorchRL's keywords
            of batched envs, accepted and without effect here: this env has no buffers, no
            processes and is always serial.
        device, num_threads, pin_memory, non_blocking: as for :class:`BatchedEnvBase`.
        share_individual_td, allow_step_when_done: as for :class:`BatchedEnvBase` (TorchRL's
            keywords; values with no meaning here raise ``NotImplementedError``).

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

    # outputs are stacked in this process: non-tensor entries (strings) stack as lists
    _moves_non_tensor = True

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]],
        create_env_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        *,
        validate_actions: bool = True,
        shared_memory: bool = True,
        mp_start_method: str | None = None,
        num_sub_threads: int = 1,
        serial_for_single: bool = False,
        device: DeviceLike = None,
        num_threads: int | None = None,
        pin_memory: bool = False,
        non_blocking: bool = False,
        share_individual_td: bool | None = None,
        allow_step_when_done: bool = False,
    ) -> None:
        self._envs: list[EnvBase] = []
        self._stepper: Any = None
        self._stepper_checks = False
        super().__init__(
            num_workers,
            create_env_fn,
            create_env_kwargs,
            validate_actions=validate_actions,
            device=device,
            num_threads=num_threads,
            pin_memory=pin_memory,
            non_blocking=non_blocking,
            share_individual_td=share_individual_td,
            allow_step_when_done=allow_step_when_done,
        )
        self.shared_memory = bool(shared_memory)
        self.mp_start_method = mp_start_method
        self.num_sub_threads = int(num_sub_threads)

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
        self._step_fns = [step_fn(env) for env in envs]
        # a worker's last reset entries, or (batched entries, row) until they are needed
        self._last_roots: list[Any] = [None] * len(envs)
        self._stepper = self._make_stepper(envs)
        self._stepper_checks = self._stepper is not None and self._let_stepper_check()
        if self._stepper_checks:
            self.empty_cache()  # the stepper checks the actions: no separate check (see below)

    def _let_stepper_check(self) -> bool:
        """Whether the batched stepper checks the actions itself, in its conversion."""
        enable = getattr(self._stepper, "enable_checks", None)
        if enable is None:
            return False
        key = self.action_keys[0]
        return type(key) is str and bool(
            enable(type(self).__name__, key, self.full_action_spec[key])
        )

    def _make_action_check(
        self, action_keys: list[NestedKey]
    ) -> Callable[[TensorDictBase], None] | None:
        # A stepper that checks while converting makes the generic check redundant.
        if self._stepper_checks:
            return None
        return super()._make_action_check(action_keys)

    def _make_stepper(self, envs: list[EnvBase]) -> Any:
        """The envs' batched stepper, when their class has one and the layouts allow it.

        An env class may define a classmethod ``_batched_stepper(envs)`` returning ``None`` or
        an object with ``step(action) -> TensorDict`` (the stacked ``"next"`` entries of all
        envs, batch ``[n, *inner]``) and ``reset(index) -> TensorDict`` (env ``index``'s
        entries after a full reset), equal to what stepping and resetting each env gives.
        Used for envs that read one action and no state; anything else (a transformed env, a
        subclass overriding the steps) is stepped env by env.
        """
        hook = getattr(type(envs[0]), "_batched_stepper", None)
        if hook is None or len(self._action_idx) != 1 or self._state_idx:
            return None
        if self._step_layout.flat_keys is None:
            return None
        return hook(envs)

    def _stop(self) -> None:
        envs, self._envs = self._envs, []
        self._stepper = None
        if self._stepper_checks:
            self._stepper_checks = False
            self.empty_cache()
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
            new = new_unchecked
            return [
                new({k: c[i] for k, c in present}, batch_size=inner, device=device, nested=False)
                for i in range(n)
            ]
        columns = [v.unbind(0) if v is not None else None for v in values]
        build = layout.build
        return [
            build([c[i] if c is not None else None for c in columns], full=False) for i in range(n)
        ]

    def _stack(self, outs: list[Any], layout: Layout, what: str, fill: bool) -> TensorDictBase:
        """Stacks the workers' outputs along a first dim, entry by entry of ``layout``."""
        stacked = []
        for path, spec in zip(layout.paths, layout.specs):
            values: list[Any] = [get_leaf(out, path) if out is not None else None for out in outs]
            for i, value in enumerate(values):
                if value is None and fill:
                    values[i] = spec.zero()[i]
                else:
                    check_value(value, spec, path, i, what)
            stacked.append(torch.stack(values, 0))
        return layout.build(stacked, full=True)

    def _stack_steps(self, outs: list[TensorDictBase]) -> TensorDictBase:
        """Stacks the step outputs; the done flags the envs left out are derived first."""
        layout = self._step_layout
        keys = layout.flat_keys
        if keys is not None and all(type(out) is TensorDict for out in outs):
            # The common case, in a few tensor calls: plain TensorDicts with every entry.
            try:
                raws = [entries(out) for out in outs]
                stacked = [torch.stack([raw[k] for raw in raws], 0) for k in keys]
            except (KeyError, RuntimeError):
                pass
            else:
                if all(v.shape == shape for v, shape in zip(stacked, layout.shapes)):
                    return layout.build(stacked, full=True)
        outs = [complete_output(env, out) for env, out in zip(self._envs, outs)]
        return self._stack(outs, layout, "step", fill=False)

    def _finished(self, next_td: TensorDictBase) -> list[int]:
        """The workers with a done sub-env in a step's output."""
        cache = self._cache or self._spec_cache()
        n = self._num_workers
        groups = cache.done_groups
        if len(groups) == 1:
            flags = groups[0].flags(next_td)
            if flags.numel() == n:  # one flag per worker: a list read beats reductions
                return [i for i, flag in enumerate(flags.reshape(n).tolist()) if flag]
        found = None
        for group in groups:
            flags = group.flags(next_td)
            if bool(flags.any()):
                per_worker = flags.reshape(n, -1).any(-1)
                found = per_worker if found is None else found | per_worker
        return [] if found is None else found.nonzero().flatten().tolist()

    def _run_step(self, values: list[Any], complete: bool) -> TensorDictBase:
        stepper = self._stepper
        if stepper is not None:
            if self._stepper_checks:
                return stepper.step(values[self._action_idx[0]], self.validate_actions)
            return stepper.step(values[self._action_idx[0]])
        subs = cast(list[TensorDictBase], self._split(values))  # a step has actions
        outs = [step(sub) for step, sub in zip(self._step_fns, subs)]
        return self._stack_steps(outs)

    def _run_step_subset(
        self,
        values: list[Any],
        complete: bool,
        stepped: list[bool],
        masks: list[torch.Tensor | None],
    ) -> TensorDictBase:
        # Env by env, even with a batched stepper: it steps all envs or none.
        subs = cast(list[TensorDictBase], self._split(values))
        outs: list[TensorDictBase | None] = [None] * len(subs)
        for i, sub in enumerate(subs):
            if not stepped[i]:
                continue
            inner_mask = masks[i]
            if inner_mask is None:
                outs[i] = self._step_fns[i](sub)
            else:
                sub.set(STEP_MASK, inner_mask)
                outs[i] = self._envs[i].step(sub).get(NEXT)
        template = next(out for out in outs if out is not None)
        filled = [out if out is not None else template.apply(torch.zeros_like) for out in outs]
        return self._stack_steps(cast(list[TensorDictBase], filled))

    def _run_step_and_reset(
        self, values: list[Any], complete: bool
    ) -> tuple[TensorDictBase, Merge | None]:
        if self._stepper is not None:
            return self._batched_step_and_reset(values[self._action_idx[0]])
        subs = cast(list[TensorDictBase], self._split(values))  # a step has actions
        outs = [step(sub) for step, sub in zip(self._step_fns, subs)]
        next_td = self._stack_steps(outs)
        roots: dict[int, TensorDictBase] = {}
        for i in self._finished(next_td):
            env = self._envs[i]
            root = reset_finished(env, subs[i], complete_output(env, outs[i]))
            if root is not None:
                roots[i] = self._last_roots[i] = root
        if not roots:
            return next_td, None

        def merge(next_input: TensorDictBase) -> None:
            layout = self._root_layout
            for path, spec in zip(layout.paths, layout.specs):
                current = get_leaf(next_input, path)
                if current is None:
                    current = spec.zero()
                columns = list(current.unbind(0))
                for i, root in roots.items():
                    value = get_leaf(root, path)
                    columns[i] = value if value is not None else torch.zeros_like(columns[i])
                next_input.set(path_to_key(path), torch.stack(columns, 0))

        return next_td, merge

    def _step_and_reset_outputs(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase | None]:
        stepper = self._stepper
        if stepper is None or self.run_type_checks:
            return super()._step_and_reset_outputs(tensordict)
        values, _ = self._step_values(tensordict)
        next_td, root, finished = stepper.step_and_reset(values[self._action_idx[0]])
        if root is not None:
            self._keep_roots(root, finished)
        return next_td, root

    def _keep_roots(self, root: TensorDictBase, finished: list[int]) -> None:
        # What a later partial reset shows for a worker it does not reset; row i of root is
        # taken only then (see _root_of).
        for i in finished:
            self._last_roots[i] = (root, i)

    def _root_of(self, i: int) -> TensorDictBase | None:
        root = self._last_roots[i]
        if type(root) is tuple:
            batched, row = root
            root = self._last_roots[i] = new_unchecked(
                {key: value[row] for key, value in batched.items()},
                batch_size=self._root_layout.root.inner,
                device=batched.device,
                nested=False,
            )
        return root

    def _batched_step_and_reset(self, action: Any) -> tuple[TensorDictBase, Merge | None]:
        if self._stepper_checks:
            next_td, root, finished = self._stepper.step_and_reset(action, self.validate_actions)
        else:
            next_td, root, finished = self._stepper.step_and_reset(action)
        if root is None:
            return next_td, None
        self._keep_roots(root, finished)

        def merge(next_input: TensorDictBase) -> None:
            # root holds every worker's next input, reset or not: it replaces the entries
            for key, value in root.items():
                set_leaf(next_input, key, value)

        return next_td, merge

    def _run_reset(
        self, values: list[Any], need: list[bool], kwargs: dict[str, Any]
    ) -> TensorDictBase:
        subs = self._split(values)
        roots = self._last_roots
        for i, (env, sub) in enumerate(zip(self._envs, subs)):
            if need[i]:
                roots[i] = env.reset(sub, **kwargs)
        current = [self._root_of(i) for i in range(len(roots))]
        return self._stack(current, self._root_layout, "reset", fill=True)
