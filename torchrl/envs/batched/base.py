"""``BatchedEnvBase``: ``n`` copies of an env behind one env of batch ``[n, *inner]``."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import DONE, NEXT, TERMINATED, TRUNCATED
from torchrl._td_compat import entries
from torchrl._types import DeviceLike
from torchrl.data.specs import Composite, TensorSpec
from torchrl.envs._key_paths import key_tuple, path_to_key
from torchrl.envs._mdp import apply_mdp_plan
from torchrl.envs._writes import STEP_MASK, set_next
from torchrl.envs.batched._layout import Layout, Path, get_leaf
from torchrl.envs.batched._meta import EnvMetaData, stack_metas
from torchrl.envs.common import EnvBase
from torchrl.envs.env_creator import EnvCreator

__all__ = ["BatchedEnvBase", "Merge"]


def _check_unsupported(
    name: str, pin_memory: bool, share_individual_td: bool | None, allow_step_when_done: bool
) -> None:
    """Raises for TorchRL keyword values whose behaviour batched envs here do not have."""
    if pin_memory and torch.cuda.is_available():
        raise NotImplementedError(
            f"{name}: pin_memory=True is not supported when CUDA is available (the buffers are "
            f"not pinned); pass pin_memory=False"
        )
    if share_individual_td:
        raise NotImplementedError(
            f"{name}: share_individual_td=True (a lazy stack of per-worker TensorDicts) is not "
            f"supported; outputs are one stacked TensorDict"
        )
    if allow_step_when_done:
        raise NotImplementedError(f"{name}: allow_step_when_done=True is not supported")


#: Writes the entries of the sub-envs a step-and-reset reset into the next step's input.
Merge = Callable[[TensorDictBase], None]


class BatchedEnvBase(EnvBase):
    """Base of :class:`SerialEnv` and :class:`ParallelEnv`: ``n`` workers behind one env.

    Worker ``i`` runs ``create_env_fn[i](**create_env_kwargs[i])``, an env of batch ``[*inner]``;
    the batched env has batch ``[n, *inner]`` and the workers' specs stacked along a first dim.
    Workers start on first use (``reset``, ``step``, ``set_seed``) or on :meth:`start`, and stop
    on :meth:`close`; a closed batched env starts again on its next use.

    What moves between the batched env and its workers is fixed by the specs: a step hands each
    worker its actions and states (``full_action_spec`` and ``full_state_spec`` entries) and
    brings back observations, rewards and done flags; a reset hands the states and ``"_reset"``
    masks present in its input and brings back observations, done flags and states. Entries the
    specs do not declare do not cross. A partial reset resets only the workers with a ``True`` in
    their slice of ``"_reset"``; sub-envs that were not reset keep the input's entries.

    Subclasses implement ``_start``, ``_stop``, ``_run_step``, ``_run_step_and_reset``,
    ``_run_reset`` and ``_seed_worker``.

    Args:
        num_workers: the number of workers ``n``.
        create_env_fn: a callable returning a torchrl env, or a list of ``n`` of them.
        create_env_kwargs: keyword arguments of ``create_env_fn``: a dict for all workers or a
            list of ``n`` dicts.
        validate_actions: check the stacked actions of every step against the stacked action
            spec, once for all workers (see :class:`~torchrl.envs.EnvBase`).
        device: the batched env's device; ``None`` or the sub-envs' device (another one raises
            ``NotImplementedError``: wrap the env in a device-casting transform instead).
        num_threads: if given, ``torch.set_num_threads(num_threads)`` in this process.
        pin_memory: pin the data buffers for faster copies to CUDA. Without CUDA it has no effect;
            with CUDA ``True`` raises ``NotImplementedError`` (buffers are not pinned here).
        non_blocking: accepted for TorchRL compatibility; without effect, as every buffer and
            output lives on the sub-envs' device (no device copy to overlap).
        share_individual_td: only ``None``/``False`` (one stacked TensorDict per step); ``True``
            (a lazy stack of per-worker TensorDicts) raises ``NotImplementedError``.
        allow_step_when_done: only ``False``; ``True`` raises ``NotImplementedError``.

    Examples:
        >>> from torchrl.envs import BatchedEnvBase, PendulumEnv, SerialEnv
        >>> env = SerialEnv(2, PendulumEnv, {"batch_size": [3]})
        >>> isinstance(env, BatchedEnvBase), env.batch_size, env.is_started
        (True, torch.Size([2, 3]), False)
        >>> td = env.reset()  # starts the workers
        >>> env.is_started, td["observation"].shape
        (True, torch.Size([2, 3, 3]))
    """

    # Workers holding a batched env let it step and reset in one call (it resets its finished
    # sub-envs one by one, without the generic partial-reset merge).
    _fused_step_and_reset = True
    # whether the env moves non-tensor entries (strings...): only in-process stacking can
    _moves_non_tensor = False

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]],
        create_env_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        *,
        validate_actions: bool = True,
        device: DeviceLike = None,
        num_threads: int | None = None,
        pin_memory: bool = False,
        non_blocking: bool = False,
        share_individual_td: bool | None = None,
        allow_step_when_done: bool = False,
    ) -> None:
        name = type(self).__name__
        _check_unsupported(name, pin_memory, share_individual_td, allow_step_when_done)
        if num_threads is not None:
            if not isinstance(num_threads, numbers.Integral) or num_threads < 1:
                raise ValueError(f"{name}: num_threads must be a positive int, got {num_threads!r}")
            torch.set_num_threads(int(num_threads))
        fns, kwargs = _normalize_args(num_workers, create_env_fn, create_env_kwargs, name)
        num_workers = len(fns)  # a plain int, whatever integer type came
        metas, built = _read_metas(fns, kwargs, keep=self._keeps_built_envs())
        first = metas[0]
        # Sub-envs without a device hold their data on the CPU.
        have = first.device if first.device is not None else torch.device("cpu")
        if device is not None and torch.device(device) != have:
            for env in built.values():
                env.close()
            raise NotImplementedError(
                f"{name}: device={device!r} differs from the sub-envs' device {first.device}; "
                f"build the sub-envs on that device or wrap the env in a DeviceCastTransform"
            )
        self.pin_memory = bool(pin_memory)
        self.non_blocking = bool(non_blocking)
        super().__init__(
            device=first.device,
            batch_size=(num_workers, *first.batch_size),
            allow_done_after_reset=any(m.allow_done_after_reset for m in metas),
            validate_actions=validate_actions,
        )
        self._num_workers = num_workers
        self._create_env_fn = fns
        self._create_env_kwargs = kwargs
        self._started = False
        self._built: dict[int, EnvBase] = built
        try:
            self._apply_metas(metas)
        except BaseException:
            self._close()
            raise

    # ----------------------------------------------------------------------------- setup
    def _keeps_built_envs(self) -> bool:
        """Whether envs built in this process to read specs are kept (as workers) or closed."""
        return False

    def _apply_metas(self, metas: list[EnvMetaData]) -> None:
        name = type(self).__name__
        output_spec, input_spec = stack_metas(metas, name)
        self._metas = metas
        self._batch_size = torch.Size([self._num_workers, *metas[0].batch_size])
        self.output_spec = output_spec
        self.input_spec = input_spec
        specs = [getattr(self, n) for n in ("full_observation_spec", "full_reward_spec")]
        specs += [getattr(self, n) for n in ("full_done_spec", "full_action_spec")]
        specs.append(self.full_state_spec)
        for spec in specs:
            for key in spec.keys(True, True):
                if not self._moves_non_tensor and _is_non_tensor(spec[key]):
                    raise NotImplementedError(
                        f"{name}: entry {key!r} is a non-tensor spec ({spec[key]!r}); {name} "
                        f"moves tensors only (through shared memory). Drop the entry in each "
                        f"worker with TransformedEnv(env, ExcludeTransform({key!r})), or use "
                        f"SerialEnv, which stacks non-tensor data"
                    )

        def node_shape(prefix: Path) -> torch.Size:
            if not prefix:
                return self._batch_size
            for spec in specs:
                if prefix in spec:
                    return spec[prefix].shape
            return self._batch_size

        def leaves(spec: Composite) -> list[tuple[Path, Any]]:
            return [(key_tuple(k), spec[k]) for k in spec.keys(True, True)]

        obs = leaves(self.full_observation_spec)
        reward = leaves(self.full_reward_spec)
        done = leaves(self.full_done_spec)
        action = leaves(self.full_action_spec)
        state = leaves(self.full_state_spec)
        resets = _reset_entries(self)
        device = self.device
        self._input_layout = Layout(action + state + resets, node_shape, 1, device)
        self._step_layout = Layout(obs + reward + done, node_shape, 1, device)
        self._root_layout = Layout(obs + done + state, node_shape, 1, device)
        index = {path: i for i, path in enumerate(self._input_layout.paths)}
        self._action_idx = [index[p] for p, _ in action]
        self._state_idx = [index[p] for p, _ in state if index[p] not in self._action_idx]
        self._reset_idx = [index[p] for p, _ in resets]

    # ------------------------------------------------------------------------- attributes
    @property
    def num_workers(self) -> int:
        """The number of workers."""
        return self._num_workers

    @property
    def create_env_fn(self) -> list[Callable[..., EnvBase]]:
        """The env constructor of each worker."""
        return list(self._create_env_fn)

    @property
    def create_env_kwargs(self) -> list[dict[str, Any]]:
        """The keyword arguments of each worker's constructor (copies)."""
        return [dict(k) for k in self._create_env_kwargs]

    @property
    def meta_data(self) -> list[EnvMetaData]:
        """What was read from each worker's env: batch size, device, specs."""
        return list(self._metas)

    @property
    def is_started(self) -> bool:
        """Whether the workers are running."""
        return self._started

    # ------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Starts the workers (builds the envs); does nothing when they run already.

        Examples:
            >>> from torchrl.envs import PendulumEnv, SerialEnv
            >>> env = SerialEnv(2, PendulumEnv)
            >>> env.start(); env.is_started
            True
        """
        if self._started:
            return
        self._start()
        self._started = True
        self._closed = False

    def _close(self) -> None:
        if self._started:
            self._started = False
            self._stop()
        for env in self._built.values():
            env.close()
        self._built = {}

    def update_kwargs(self, kwargs: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        """Updates the constructor keyword arguments of the workers.

        Running workers are stopped; they start again, with the new arguments, on the next use.
        The specs are read again from an env built with the new arguments.

        Args:
            kwargs: a dict merged into every worker's arguments, or a list of one dict per worker.

        Examples:
            >>> from torchrl.envs import PendulumEnv, SerialEnv
            >>> env = SerialEnv(2, PendulumEnv, {"batch_size": [3]})
            >>> env.update_kwargs({"batch_size": [4]})
            >>> env.batch_size
            torch.Size([2, 4])
        """
        name = type(self).__name__
        if isinstance(kwargs, dict):
            updates = [kwargs] * self._num_workers
        else:
            updates = _normalize_kwargs(self._num_workers, kwargs, name)
        new_kwargs = [{**old, **up} for old, up in zip(self._create_env_kwargs, updates)]
        if self._started or self._built:
            self.close()
        metas, built = _read_metas(self._create_env_fn, new_kwargs, self._keeps_built_envs())
        self._create_env_kwargs = new_kwargs
        self._built = built
        self._apply_metas(metas)

    # ------------------------------------------------------------------------------ seeds
    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int:
        """Seeds the workers one after the other, each with the seed returned by the previous.

        Args:
            seed: the first worker's seed; ``None`` draws one from torch's global generator.
            static_seed: give every worker ``seed`` itself.

        Returns:
            The seed returned by the last worker (to seed a next env of a chain).

        Examples:
            >>> from torchrl.envs import PendulumEnv, SerialEnv
            >>> env = SerialEnv(2, PendulumEnv)
            >>> env.set_seed(0) == PendulumEnv().set_seed(PendulumEnv().set_seed(0))
            True
        """
        if seed is None:
            seed = int(torch.randint(0, 2**32 - 1, (), dtype=torch.int64))
        seed = int(seed)
        self.start()
        for i in range(self._num_workers):
            seed = int(self._seed_worker(i, seed, static_seed))
        return seed

    def _set_seed(self, seed: int | None) -> None:
        self.set_seed(seed)

    # ----------------------------------------------------------------------------- steps
    def _step_values(self, tensordict: TensorDictBase) -> tuple[list[Any], bool]:
        """The input entries of a step (actions and states), aligned with the input layout.

        Returns them and whether all of them are present.
        """
        layout = self._input_layout
        values: list[Any] = [None] * len(layout)
        paths = layout.paths
        for j in self._action_idx:
            value = get_leaf(tensordict, paths[j])
            if value is None:
                raise KeyError(
                    f"{type(self).__name__}.step: the input has no action entry "
                    f"{path_to_key(paths[j])!r} (spec: {layout.specs[j]!r})"
                )
            values[j] = value
        complete = True
        for j in self._state_idx:
            value = values[j] = get_leaf(tensordict, paths[j])
            if value is None:
                complete = False
        return values, complete

    def _reset_values(self, tensordict: TensorDictBase | None) -> tuple[list[Any], list[bool]]:
        """The input entries of a reset (states, ``"_reset"`` masks) and the workers to reset."""
        layout = self._input_layout
        values: list[Any] = [None] * len(layout)
        n = self._num_workers
        if tensordict is None:
            return values, [True] * n
        paths = layout.paths
        for j in self._state_idx:
            values[j] = get_leaf(tensordict, paths[j])
        need = None
        for j in self._reset_idx:
            mask = get_leaf(tensordict, paths[j])
            if mask is not None:
                values[j] = mask
                per_worker = mask.reshape(n, -1).any(-1)
                need = per_worker if need is None else need | per_worker
        return values, [True] * n if need is None else need.tolist()

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not self._started:
            self.start()
        values, complete = self._step_values(tensordict)
        return self._run_step(values, complete)

    def _step_masked(self, tensordict: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        # Only the workers with a marked sub-env step; a worker's inner mask goes along when it
        # marks some of its sub-envs only.
        if not self._started:
            self.start()
        n = self._num_workers
        per_worker = mask.reshape(n, -1)
        stepped = per_worker.any(-1).tolist()
        whole = per_worker.all(-1).tolist()
        inner = self.batch_size[1:]
        masks: list[torch.Tensor | None] = [
            None if whole[i] or not stepped[i] else per_worker[i].reshape(inner) for i in range(n)
        ]
        values, complete = self._step_values(tensordict)
        return self._run_step_subset(values, complete, stepped, masks)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        if not self._started:
            self.start()
        values, need = self._reset_values(tensordict)
        return self._run_reset(values, need, kwargs)

    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Steps, then resets the finished sub-envs; each worker does both in one go.

        Same contract as :meth:`EnvBase.step_and_maybe_reset`; a worker whose sub-envs are done
        resets them right after its step, without a second round trip.

        Args:
            tensordict: batch ``[n, *inner]`` with the actions.

        Returns:
            ``(tensordict, next_input)``: the transition and the next step's input.
        """
        if self._batch_locked and tensordict.batch_size != self._batch_size:
            self._check_batch(tensordict, "step_and_maybe_reset")
        raw = entries(tensordict) if type(tensordict) is TensorDict else None
        if (raw.get(STEP_MASK) if raw is not None else tensordict.get(STEP_MASK, None)) is not None:
            # A masked step goes through ``step`` (which honours the mask), then resets.
            return EnvBase.step_and_maybe_reset(self, tensordict)
        self._check_actions(tensordict)
        if not self._started:
            self.start()
        values, complete = self._step_values(tensordict)
        next_td, merge = self._run_step_and_reset(values, complete)
        cache = self._cache or self._spec_cache()
        cache.done_groups.complete(next_td)
        if self.run_type_checks:
            self._type_check(next_td, "step()", next_=True)
        set_next(tensordict, next_td)
        next_input = apply_mdp_plan(tensordict, cache.mdp_plan)
        if merge is not None:
            merge(next_input)
        return tensordict, next_input

    def _step_and_reset_outputs(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase | None]:
        """What a process worker holding this env needs of a step-and-reset.

        Returns the step's ``"next"`` entries and, when a sub-env was reset, the next step's
        input (``None`` otherwise). Subclasses may get them more directly.
        """
        transition, next_input = self.step_and_maybe_reset(tensordict)
        out = transition.get(NEXT)
        cache = self._cache or self._spec_cache()
        return out, next_input if cache.done_groups.any_done(out) else None

    # ------------------------------------------------------------------ subclass hooks
    def _start(self) -> None:
        raise NotImplementedError

    def _stop(self) -> None:
        raise NotImplementedError

    def _seed_worker(self, index: int, seed: int, static_seed: bool) -> int:
        raise NotImplementedError

    def _run_step(self, values: list[Any], complete: bool) -> TensorDictBase:
        raise NotImplementedError

    def _run_step_subset(
        self,
        values: list[Any],
        complete: bool,
        stepped: list[bool],
        masks: list[torch.Tensor | None],
    ) -> TensorDictBase:
        """Steps the workers where ``stepped`` holds (``masks[i]``: worker ``i``'s inner mask,
        ``None`` when all its sub-envs step); the other workers' entries are placeholders."""
        raise NotImplementedError

    def _run_step_and_reset(
        self, values: list[Any], complete: bool
    ) -> tuple[TensorDictBase, Merge | None]:
        raise NotImplementedError

    def _run_reset(
        self, values: list[Any], need: list[bool], kwargs: dict[str, Any]
    ) -> TensorDictBase:
        raise NotImplementedError

    def __repr__(self) -> str:
        head, rest = super().__repr__().split("(", 1)
        return f"{head}(\n    num_workers={self._num_workers},{rest}"


# ----------------------------------------------------------------------------- construction
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


def _reset_entries(env: EnvBase) -> list[tuple[Path, TensorSpec]]:
    """The ``"_reset"`` masks of a (batched) env: one per done group, shaped like its flags."""
    cache = env._cache or env._spec_cache()
    done_spec = env.full_done_spec
    out = []
    for group in cache.done_groups:
        flag = next(n for n in (DONE, TERMINATED, TRUNCATED) if group.has[n])
        out.append((key_tuple(group.reset_key), done_spec[group.prefix + (flag,)].clone()))
    return out


def _is_non_tensor(spec: TensorSpec) -> bool:
    return type(spec).__name__ in ("NonTensor", "NonTensorSpec")
