"""``SyncDataCollector``: runs a policy in an env in the calling process, one batch at a time.

The hot loop is: policy on the current input (in place; a plain ``TensorDictModule`` is called
directly, see :class:`~torchrl.collectors._policy.DirectModuleCall`), ``env.step_and_maybe_reset``
and one ``torch._foreach_copy_`` of every key into time slice ``t`` of a batch preallocated from
the first transition. Nothing else happens per step: no TensorDict is built by the collector, no
spec is read, no check is made; trajectory ids are derived once per batch.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, cast

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._keys import DONE, NEXT, POLICY_VERSION, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike, ReplayBufferLike
from torchrl.collectors._base import DataCollectorBase, check_frames
from torchrl.collectors._buffer import BatchBuffers, StepWriter
from torchrl.collectors._options import CollectorOptions, Interruptor
from torchrl.collectors._policy import (
    DevicePolicy,
    DirectModuleCall,
    PolicyLike,
    WeightsLike,
    accelerated_policy,
    device_of,
    direct_call,
    named_weights,
    random_policy,
    wrap_policy,
)
from torchrl.collectors._trajectories import TrajectoryIds
from torchrl.collectors._views import ViewRing, collection_views
from torchrl.collectors.utils import split_trajectories
from torchrl.envs.common import EnvBase
from torchrl.envs.utils import ExplorationType, RandomPolicy, set_exploration_type, step_mdp
from torchrl.weight_update import (
    NoWeightSyncScheme,
    SharedMemWeightSyncScheme,
    WeightSyncScheme,
)

__all__ = [
    "POLICY_VERSION_KEY",
    "SyncDataCollector",
    "check_weight_sync_schemes",
    "extend_replay_buffer",
    "make_env",
]

#: The entry of every collected step that holds the version of the weights that produced it.
POLICY_VERSION_KEY = POLICY_VERSION

#: What a collector is given as its env: an env, a callable building one, or a one-element list.
EnvSource = EnvBase | Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]]


def make_env(
    create_env_fn: EnvSource, create_env_kwargs: dict[str, Any] | None, name: str
) -> EnvBase:
    """Returns the env given to a collector: an ``EnvBase``, or what a callable builds.

    Args:
        create_env_fn: an env, a callable returning one, or a one-element list of either.
        create_env_kwargs: keyword arguments for the callable.
        name: the collector's name, for messages.

    Returns:
        The env.
    """
    if isinstance(create_env_fn, Sequence) and not isinstance(create_env_fn, str):
        if len(create_env_fn) != 1:
            raise ValueError(
                f"{name} runs one env; got {len(create_env_fn)} env constructors. Batch them "
                "with SerialEnv/ParallelEnv, or use MultiSyncDataCollector"
            )
        create_env_fn = create_env_fn[0]
    if isinstance(create_env_fn, EnvBase):
        if create_env_kwargs:
            raise ValueError(f"{name}: create_env_kwargs needs an env constructor, not an env")
        env = create_env_fn
    elif callable(create_env_fn):
        env = create_env_fn(**(create_env_kwargs or {}))
    else:
        raise TypeError(
            f"{name}: create_env_fn must be an EnvBase or a callable returning one, got "
            f"{type(create_env_fn).__name__}"
        )
    if not isinstance(env, EnvBase):
        raise TypeError(
            f"{name}: the env constructor returned {type(env).__name__}, not an EnvBase"
        )
    return env


class SyncDataCollector(DataCollectorBase):
    """Collects batches of ``frames_per_batch`` frames by running a policy in an env.

    Batches have batch size ``[*env.batch_size, T]`` with ``T = frames_per_batch /
    env.batch_size.numel()`` (``frames_per_batch`` is rounded up to a multiple of the number of
    sub-envs, with a warning). Trajectories go on across batches, and ``("collector",
    "traj_ids")`` numbers them uniquely. Steps run under ``torch.no_grad`` and the exploration
    type. A batch is written in place into a buffer allocated from the first transition and
    returned as a batch of the caller's own (``return_same_td=False``): a copy of the buffer
    or, for big steps (thousands of vectorized envs), the buffer itself, the next batch going
    into an earlier batch the caller has dropped (or a new buffer). Keys that appear only later
    are not kept. Trajectory views the policy declares (``get_views(policy)``) are built before
    each policy call from per-env ring buffers and left out of the batches (see
    :class:`~torchrl.collectors.ViewRing`; :class:`~torchrl.collectors.ViewRebuilder` rebuilds
    them for a loss).

    Args:
        create_env_fn: an ``EnvBase`` or a callable returning one.
        policy: a TensorDict module (or callable) writing the action; ``None`` draws uniform
            random actions (:class:`~torchrl.envs.utils.RandomPolicy`). A plain ``nn.Module``
            whose ``forward`` arguments are observation keys is wrapped to read and write them.
        frames_per_batch: frames in each batch. This and the other frame counts take any
            integer type (``int``, ``numpy.int64``, ...); a wrong type or a negative count
            raises ``ValueError`` naming the argument.
        total_frames: frames in all; ``-1`` collects forever (rounded up to whole batches).
        device: default for ``env_device``, ``policy_device`` and ``storing_device``.
        storing_device: where batches are stored.
        policy_device: where the policy runs (a copy of it when it lives elsewhere; see
            :meth:`update_policy_weights_`).
        env_device: where the env runs.
        create_env_kwargs: keyword arguments for ``create_env_fn``.
        max_frames_per_traj: truncate (and reset) trajectories after this many steps (>= 1;
            ``None``: no limit).
        init_random_frames: collect this many first frames with random actions (>= 0).
        reset_at_each_iter: reset the env at the start of every batch.
        postproc: applied to every batch (e.g. :class:`~torchrl.data.MultiStep`).
        split_trajs: return batches split into zero-padded trajectories (see
            :func:`~torchrl.collectors.utils.split_trajectories`).
        exploration_type: the exploration type of the policy calls (default ``RANDOM``).
        return_same_td: return the internal buffer itself (overwritten by the next batch).
        reset_when_done: reset sub-envs that are done (``False`` leaves that to the env).
        interruptor: an object whose ``collection_stopped()`` ends a batch early when true.
        set_truncated: mark the last step of every batch truncated (and reset the env after).
        use_buffers: write into a preallocated batch (default); ``False`` stacks the steps,
            which handles data whose keys or shapes vary.
        replay_buffer: extend this buffer with every batch; the iterator then yields ``None``.
        trust_policy: use the policy as given, without wrapping it.
        extend_buffer: kept for TorchRL compatibility; batches are always written whole.
        weight_sync_schemes: ``{model_id: scheme}``; the ``"policy"`` scheme carries the
            weights of :meth:`update_policy_weights_` (default: a
            :class:`~torchrl.weight_update.SharedMemWeightSyncScheme` writing into the policy
            the loop runs). Schemes for other models must come initialised.
        weight_updater: a legacy :class:`~torchrl.collectors.WeightUpdaterBase`; when given,
            :meth:`update_policy_weights_` calls its ``push_weights``.
        track_policy_version: write a ``"policy_version"`` entry (int64, the env's batch
            shape) into every step: the version of the weights that produced it, incremented
            by each :meth:`update_policy_weights_` (see :attr:`policy_version`).
        compile_policy: ``True`` or a dict of :func:`torch.compile` keywords (plus
            ``"warmup"``, eager calls before compiling) to compile the policy call; a failed
            compilation warns once and runs eagerly. It pays off for bigger policies and many
            steps, mostly on GPUs: compilation costs seconds to minutes, once per process, and
            a small MLP on a few CPU envs ran slower compiled (measure before keeping it).
        cudagraph_policy: ``True`` or a dict (``"warmup"``, ``"device"``) to record the
            policy call in a ``tensordict.nn.CudaGraphModule`` and replay it; needs the policy
            on CUDA (``ValueError`` otherwise, and on a machine without CUDA). Weights updated
            in place are seen by compiled and recorded calls alike.

    Examples:
        >>> from torchrl.collectors import SyncDataCollector
        >>> from torchrl.envs import GymEnv
        >>> env = GymEnv("Pendulum-v1")
        >>> _ = env.set_seed(0)
        >>> collector = SyncDataCollector(env, None, frames_per_batch=50, total_frames=200)
        >>> for batch in collector:
        ...     pass
        >>> batch.batch_size, collector.frames
        (torch.Size([50]), 200)
        >>> batch["collector", "traj_ids"].unique().numel()
        1
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: EnvSource,
        policy: PolicyLike | None = None,
        *,
        frames_per_batch: int,
        total_frames: int | None = -1,
        device: DeviceLike = None,
        storing_device: DeviceLike = None,
        policy_device: DeviceLike = None,
        env_device: DeviceLike = None,
        create_env_kwargs: dict[str, Any] | None = None,
        max_frames_per_traj: int | None = None,
        init_random_frames: int | None = None,
        reset_at_each_iter: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool | None = None,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        return_same_td: bool = False,
        reset_when_done: bool = True,
        interruptor: Interruptor | None = None,
        set_truncated: bool = False,
        use_buffers: bool | None = None,
        replay_buffer: ReplayBufferLike | None = None,
        trust_policy: bool | None = None,
        extend_buffer: bool = True,
        weight_sync_schemes: dict[str, WeightSyncScheme] | None = None,
        weight_updater: Any = None,
        track_policy_version: bool = False,
        compile_policy: bool | dict[str, Any] | None = None,
        cudagraph_policy: bool | dict[str, Any] | None = None,
    ) -> None:
        options = CollectorOptions(
            frames_per_batch=frames_per_batch,
            total_frames=total_frames,
            device=device,
            storing_device=storing_device,
            policy_device=policy_device,
            env_device=env_device,
            max_frames_per_traj=max_frames_per_traj,
            init_random_frames=init_random_frames,
            reset_at_each_iter=reset_at_each_iter,
            postproc=postproc,
            split_trajs=split_trajs,
            exploration_type=exploration_type,
            return_same_td=return_same_td,
            reset_when_done=reset_when_done,
            interruptor=interruptor,
            set_truncated=set_truncated,
            use_buffers=use_buffers,
            replay_buffer=replay_buffer,
            trust_policy=trust_policy,
            extend_buffer=extend_buffer,
            track_policy_version=track_policy_version,
            compile_policy=compile_policy,
            cudagraph_policy=cudagraph_policy,
            owner=type(self).__name__,
        )
        self._setup(
            create_env_fn, policy, options, create_env_kwargs,
            weight_sync_schemes=weight_sync_schemes, weight_updater=weight_updater,
        )  # fmt: skip

    @classmethod
    def from_options(
        cls,
        create_env_fn: EnvSource,
        policy: PolicyLike | None,
        options: CollectorOptions,
        create_env_kwargs: dict[str, Any] | None = None,
        *,
        worker_index: int = 0,
        num_workers: int = 1,
        shared_slots: int = 0,
        weight_sync_schemes: dict[str, WeightSyncScheme] | None = None,
    ) -> SyncDataCollector:
        """Builds a collector from validated options (what workers of other collectors do).

        Args:
            create_env_fn: as for the constructor.
            policy: as for the constructor.
            options: the other keywords, validated.
            create_env_kwargs: as for the constructor.
            worker_index: this collector's index among the workers of a multi-process
                collector (its trajectory ids are ``id * num_workers + worker_index``).
            num_workers: how many workers that collector runs.
            shared_slots: batch buffers in shared memory a worker fills in turn (``0``: one
                buffer in this process's memory).
            weight_sync_schemes: as for the constructor; a worker passes its receiver-side
                ``"policy"`` scheme (its versions are then the sender's).

        Returns:
            The collector.

        Examples:
            >>> from torchrl.collectors import CollectorOptions, SyncDataCollector
            >>> from torchrl.envs import PendulumEnv
            >>> options = CollectorOptions(frames_per_batch=4, total_frames=8)
            >>> collector = SyncDataCollector.from_options(PendulumEnv, None, options)
            >>> [batch.numel() for batch in collector]
            [4, 4]
        """
        collector = cls.__new__(cls)
        collector._setup(
            create_env_fn, policy, options, create_env_kwargs, worker_index, num_workers,
            shared_slots, weight_sync_schemes=weight_sync_schemes,
        )  # fmt: skip
        return collector

    def _setup(
        self,
        create_env_fn: EnvSource,
        policy: PolicyLike | None,
        options: CollectorOptions,
        create_env_kwargs: dict[str, Any] | None,
        worker_index: int = 0,
        num_workers: int = 1,
        shared_slots: int = 0,
        weight_sync_schemes: dict[str, WeightSyncScheme] | None = None,
        weight_updater: Any = None,
    ) -> None:
        self._init_base()
        self.options = options
        name = options.owner
        env = make_env(create_env_fn, create_env_kwargs, name)
        device = cast("torch.device | None", options.device)
        env_device = options.env_device if options.env_device is not None else device
        if env_device is not None and env.device != env_device:
            env = env.to(env_device)
        self.env = env
        self.env_device = env.device
        storing = options.storing_device
        self.storing_device = cast(
            "torch.device | None", storing if storing is not None else device
        )
        self.n_env = int(env.batch_size.numel())
        self.frames_per_batch, self.total_frames = check_frames(
            name, options.frames_per_batch, options.total_frames, self.n_env
        )
        self._steps = self.frames_per_batch // self.n_env

        # The policy: the user's object, and what the loop calls (a copy on policy_device).
        policy = wrap_policy(policy, env, bool(options.trust_policy))
        pdev = cast("torch.device | None", options.policy_device or device)
        current = device_of(policy)
        # The policy the user holds, when the collector runs a copy of it on policy_device.
        self._policy_source: nn.Module | None = None
        if pdev is not None and current is not None and current != pdev:
            self._policy_source = cast(nn.Module, policy)
            policy = copy.deepcopy(self._policy_source).to(pdev)
        self.policy = policy
        self.policy_device = pdev if pdev is not None else current
        call = self._accelerated(policy, options)
        env_dev = self.env_device or torch.device("cpu")
        if self.policy_device is not None and self.policy_device != env_dev:
            call = DevicePolicy(call, self.policy_device, env_dev)
        self._policy_call = direct_call(call)
        self._random_call = random_policy(env)
        self._uses_random_policy = isinstance(policy, RandomPolicy)
        # Trajectory views the policy declares: built from per-env rings before each call,
        # left out of the batches (see torchrl.collectors._views).
        views = collection_views(policy)
        self._views: ViewRing | None = ViewRing(views, env, policy, name) if views else None
        self._init_weight_sync(weight_sync_schemes, weight_updater)
        self._track_version = bool(options.track_policy_version)

        self._step_fn = env.step_and_maybe_reset if options.reset_when_done else self._step_no_reset
        self._carrier: TensorDictBase | None = None
        self._needs_reset = True
        batch = env.batch_size
        self._batch_dims = len(batch)
        self._traj = TrajectoryIds(batch, self.storing_device, worker_index, num_workers)
        self._step_count = (
            torch.zeros(batch, dtype=torch.int64)
            if options.max_frames_per_traj is not None
            else None
        )
        self.batch_buffers = BatchBuffers(
            batch,
            self._steps,
            self.storing_device,
            slots=max(shared_slots, 1),
            shared=shared_slots > 0,
            may_hand_out=not options.return_same_td,
        )
        self.frames = 0
        self._iter = 0

    def _accelerated(self, policy: PolicyLike, options: CollectorOptions) -> PolicyLike:
        """The policy call compiled and/or recorded as a CUDA graph, as the options ask."""
        graph = cast("dict[str, Any] | None", options.cudagraph_policy)
        if graph is not None:
            device = self.policy_device
            if device is None or device.type != "cuda":
                raise ValueError(
                    f"{options.owner}: cudagraph_policy needs the policy on a CUDA device, but it "
                    f"runs on {device or 'the CPU'}; pass policy_device='cuda' (or a CUDA policy)"
                )
            graph = {"device": device, **graph}
        return accelerated_policy(
            policy,
            cast("dict[str, Any] | None", options.compile_policy),
            graph,
            options.owner,
        )

    # ------------------------------------------------------------------------------- options
    @property
    def max_frames_per_traj(self) -> int | None:
        """Steps after which a trajectory is truncated (``None``: no limit)."""
        return self.options.max_frames_per_traj

    @property
    def init_random_frames(self) -> int:
        """First frames collected with random actions."""
        return cast(int, self.options.init_random_frames)

    @property
    def reset_at_each_iter(self) -> bool:
        """Whether the env is reset at the start of every batch."""
        return bool(self.options.reset_at_each_iter)

    @property
    def postproc(self) -> Callable[[TensorDictBase], TensorDictBase] | None:
        """Applied to every batch."""
        return self.options.postproc

    @property
    def split_trajs(self) -> bool:
        """Whether batches are split into trajectories."""
        return bool(self.options.split_trajs)

    @property
    def exploration_type(self) -> ExplorationType | None:
        """The exploration type of the policy calls."""
        return cast("ExplorationType | None", self.options.exploration_type)

    @property
    def return_same_td(self) -> bool:
        """Whether the internal buffer itself is returned."""
        return bool(self.options.return_same_td)

    @property
    def reset_when_done(self) -> bool:
        """Whether sub-envs that are done are reset by the collector."""
        return bool(self.options.reset_when_done)

    @property
    def interruptor(self) -> Interruptor | None:
        """What ends a batch early (``None``: nothing)."""
        return self.options.interruptor

    @property
    def set_truncated(self) -> bool:
        """Whether the last step of every batch is marked truncated."""
        return bool(self.options.set_truncated)

    @property
    def use_buffers(self) -> bool:
        """Whether steps are written into a preallocated batch (else stacked)."""
        return bool(self.options.use_buffers)

    @property
    def replay_buffer(self) -> ReplayBufferLike | None:  # type: ignore[override]
        """The buffer every batch extends (``None``: batches are yielded)."""
        return self.options.replay_buffer

    @property
    def extend_buffer(self) -> bool:
        """Kept for TorchRL compatibility."""
        return bool(self.options.extend_buffer)

    @property
    def _fresh_buffers(self) -> bool:
        # whether delivered batches are the buffers themselves (see BatchBuffers.hand_out)
        return self.batch_buffers.hand_out

    @property
    def _defer(self) -> bool:
        return self.batch_buffers.defer

    # ------------------------------------------------------------------------------ iteration
    def iterator(self) -> Iterator[TensorDictBase | None]:
        """Yields batches until ``total_frames`` frames are collected.

        Yields:
            A TensorDict of batch ``[*env.batch_size, T]`` (post-processed / split when asked),
            or ``None`` when the collector writes into a ``replay_buffer``.
        """
        self._check_open()
        while self.frames < self.total_frames:
            self._check_open()
            if self._stop_requested():
                return
            batch = self.rollout()
            self.frames += batch.numel()
            self._iter += 1
            yield self._deliver(batch)

    def _deliver(self, batch: TensorDictBase) -> TensorDictBase | None:
        if self.replay_buffer is not None:
            if self.postproc is not None:
                batch = self.postproc(batch)
            extend_replay_buffer(self.replay_buffer, batch)
            return None
        if self.return_same_td:
            out = batch
        elif self.batch_buffers.hand_out:
            out = batch  # the next batch goes into another buffer (see BatchBuffers.renew)
            self.batch_buffers.renew()
        else:
            out = batch.clone()
        if self.split_trajs:
            out = split_trajectories(out)
        if self.postproc is not None:
            out = self.postproc(out)
        return out

    def rollout(self) -> TensorDictBase:
        """Collects one batch of ``frames_per_batch`` frames.

        Returns:
            The batch, ``[*env.batch_size, T]``: with buffers, the collector's own buffer
            (overwritten by the next call), neither post-processed nor split.

        Examples:
            >>> from torchrl.collectors import SyncDataCollector
            >>> from torchrl.envs import PendulumEnv
            >>> collector = SyncDataCollector(PendulumEnv(batch_size=[2]), frames_per_batch=8)
            >>> collector.rollout().batch_size
            torch.Size([2, 4])
        """
        policy, random = self._rollout_begin()
        with torch.no_grad(), set_exploration_type(self.exploration_type, thread_local=True):
            if self.use_buffers:
                steps = _run_through(self._rollout_buffered(policy, random))
                batch = self.batch_buffers.batch()
            else:
                batch = self._rollout_stacked(policy)
                steps = batch.batch_size[self._batch_dims]
        return self._rollout_end(batch, steps)

    def rollout_steps(self) -> Generator[TensorDictBase, TensorDictBase, TensorDictBase]:
        """:meth:`rollout` as a generator that hands each policy call to its caller.

        It yields the TensorDict the policy must act on, takes the policy's output back through
        ``send`` and finally returns the batch (``StopIteration.value``). One thread can thus
        drive several collectors in turn, each waiting for its actions while the others step
        their envs (what :class:`~torchrl.collectors.AsyncBatchedCollector`'s workers do with
        an inference server). The first step of the first batch and random-action steps
        (``init_random_frames``) call the policy inside, without yielding. The caller sets
        the grad mode and the exploration type (a generator's context managers would leak
        into the others'). Needs ``use_buffers``.

        Yields:
            The TensorDict of the current step, to be completed with the policy's outputs.

        Returns:
            The batch, as :meth:`rollout` returns it.

        Examples:
            >>> import torch
            >>> from torchrl.collectors import SyncDataCollector
            >>> from torchrl.envs import PendulumEnv
            >>> collector = SyncDataCollector(PendulumEnv(batch_size=[2]), frames_per_batch=8)
            >>> steps = collector.rollout_steps()
            >>> with torch.no_grad():
            ...     td = next(steps)
            ...     try:
            ...         while True:
            ...             td["action"] = torch.zeros(2, 1)
            ...             td = steps.send(td)
            ...     except StopIteration as stop:
            ...         batch = stop.value
            >>> batch.batch_size
            torch.Size([2, 4])
        """
        if not self.use_buffers:
            raise RuntimeError(
                "SyncDataCollector.rollout_steps needs use_buffers=True (the batch is written "
                "step by step into the collector's buffers)"
            )
        policy, random = self._rollout_begin()
        steps = yield from self._rollout_buffered(policy if random else None, random)
        return self._rollout_end(self.batch_buffers.batch(), steps)

    def _rollout_begin(self) -> tuple[Callable, bool]:
        """Checks, resets if needed; returns the policy to call and whether it is random."""
        self._check_open()
        random = (not self._uses_random_policy) and self.frames < self.init_random_frames
        policy = self._random_call if random else self._policy_call
        if type(policy) is DirectModuleCall:
            policy.refresh()
        if self._needs_reset or self.reset_at_each_iter or self._carrier is None:
            self._reset_all()
        return policy, random

    def _rollout_end(self, batch: TensorDictBase, steps: int) -> TensorDictBase:
        if steps < self._steps:
            batch = batch[(slice(None),) * self._batch_dims + (slice(0, steps),)]
        if steps:
            if self.set_truncated:
                self._truncate_last(batch, steps)
            self._traj.assign(batch)
        return batch

    # ---------------------------------------------------------------------------- the hot loop
    def _rollout_buffered(
        self, policy: Callable | None, random: bool
    ) -> Generator[TensorDictBase, TensorDictBase, int]:
        """Fills the buffers; returns the number of steps. With ``policy=None`` each policy
        call after the first step is yielded to the caller (see :meth:`rollout_steps`)."""
        td = self._carrier
        assert td is not None
        step = self._step_fn
        stop = self.interruptor
        start = 0
        if not self.batch_buffers.allocated:
            td = self._first_step(td, self._policy_call if policy is None else policy, random)
            start = 1
        writer = self.batch_buffers.writer(random)
        write = writer.write
        limit = self._count_step if self._step_count is not None else None
        steps = self._steps
        # The loop does the policy call, the env step and one copy per key: trajectory ids are
        # derived from the done flags once per batch (see TrajectoryIds.assign).
        stamp = self._stamp_version if self._track_version else None
        views = self._views
        for t in range(start, steps):
            if stop is not None and stop.collection_stopped():
                steps = t
                break
            if stamp is not None:
                stamp(td)
            if views is not None:
                views.build(td)
            if policy is None:
                td = yield td
            else:
                out = policy(td)
                if out is not None:
                    td = out
            transition, td = step(td)
            if views is not None:
                views.record(transition)
            write(transition, t)
            if limit is not None:
                td = limit(td, [flags[t] for flags in writer.done], writer, t, None)
        writer.flush()
        self._carrier = td
        return steps

    def _first_step(self, td: TensorDictBase, policy: Callable, random: bool) -> TensorDictBase:
        if self._track_version:
            self._stamp_version(td)
        views = self._views
        if views is not None:
            views.build(td)
        probe = td.clone() if random else None
        out = policy(td)
        if out is not None:
            td = out
        transition, td_next = self._step_fn(td)
        if views is not None:
            views.record(transition)
        extra: dict[tuple[str, ...], torch.Tensor] = {}
        if probe is not None:
            # Random actions do not produce the policy's other outputs (log-probs, ...): run the
            # policy once aside, without touching the global RNG, to allocate them too.
            with torch.random.fork_rng(devices=[]):
                out = self._policy_call(probe)
            probe = probe if out is None else out
            have = set(_paths(transition))
            extra = {p: probe.get(p) for p in _paths(probe) if p not in have}
        # view entries are not stored: the batch is allocated without them
        like = transition if views is None else views.exclude(transition)
        self.batch_buffers.allocate(like, extra, self.options.owner)
        writer = self.batch_buffers.writer(random)
        writer.write(transition, 0)
        if self._step_count is not None:
            td_next = self._count_step(td_next, [v[0] for v in writer.done], writer, 0, None)
        return td_next

    def _count_step(
        self,
        td: TensorDictBase,
        done_flags: list[torch.Tensor],
        writer: StepWriter | None,
        t: int,
        transition: TensorDictBase | None,
    ) -> TensorDictBase:
        """Counts the steps of each trajectory; truncates those reaching max_frames_per_traj."""
        count = self._step_count
        assert count is not None
        count += 1
        ended = self._episode_ends(done_flags)
        if ended is not None:
            count.masked_fill_(ended.to(count.device), 0)
        hit = count >= self.max_frames_per_traj  # type: ignore[operator]
        if bool(hit.any()):
            td = self._truncate(td, hit, writer, t, transition)
            count.masked_fill_(hit, 0)
        return td

    def _episode_ends(self, flags: list[torch.Tensor]) -> torch.Tensor | None:
        ended = None
        for flag in flags:
            if flag.any():
                per_env = flag.reshape(*flag.shape[: self._batch_dims], -1).any(-1)
                ended = per_env if ended is None else ended | per_env
        return ended

    def _truncate(
        self,
        td: TensorDictBase,
        hit: torch.Tensor,
        writer: StepWriter | None,
        t: int,
        transition: TensorDictBase | None,
    ) -> TensorDictBase:
        """Marks the sub-envs in ``hit`` truncated at step ``t`` and resets them."""
        nb = self._batch_dims
        if writer is not None:
            for views in (*writer.truncated, *writer.done):
                flag = views[t]
                flag |= _expand_mask(hit, flag, nb).to(flag.device)
        elif transition is not None:
            for key in transition.get(NEXT).keys(True, True):
                key_t = _as_tuple(key)
                if key_t[-1] in (TRUNCATED, DONE):
                    flag = transition.get((NEXT, *key_t))
                    transition.set((NEXT, *key_t), flag | _expand_mask(hit, flag, nb))
        for key in self.env.reset_keys:
            prefix = key[:-1] if isinstance(key, tuple) else ()
            done = td.get((*prefix, DONE), None)
            shape = done.shape if done is not None else (*self.env.batch_size, 1)
            mask = hit.reshape(*hit.shape, *([1] * (len(shape) - nb))).expand(shape)
            td.set(key, mask.to(self.env_device) if self.env_device is not None else mask)
        if self._views is not None:
            self._views.start(hit)
        return self.env.reset(td)

    def _truncate_last(self, batch: TensorDictBase, steps: int) -> None:
        index = (slice(None),) * self._batch_dims + (steps - 1,)
        last = batch[index]
        for key in last.get(NEXT).keys(True, True):
            key_t = _as_tuple(key)
            if key_t[-1] == TRUNCATED:
                term = last.get((NEXT, *key_t[:-1], TERMINATED), None)
                value = ~term if term is not None else torch.ones_like(last.get((NEXT, *key_t)))
                batch.get((NEXT, *key_t))[index] |= value
            elif key_t[-1] == DONE:
                batch.get((NEXT, *key_t))[index] = True
        self._needs_reset = True

    def _rollout_stacked(self, policy: Callable) -> TensorDictBase:
        td = self._carrier
        assert td is not None
        step = self._step_fn
        stop = self.interruptor
        done_keys = [(NEXT, *_as_tuple(k)) for k in self.env.done_keys if _as_tuple(k)[-1] == DONE]
        tds = []
        stamp = self._stamp_version if self._track_version else None
        views = self._views
        for t in range(self._steps):
            if stop is not None and stop.collection_stopped():
                break
            if stamp is not None:
                stamp(td)
            if views is not None:
                views.build(td)
            out = policy(td)
            if out is not None:
                td = out
            transition, td = step(td)
            if views is not None:
                views.record(transition)
                transition = views.exclude(transition)
            tds.append(transition)
            if self._step_count is not None:
                flags = [transition.get(k) for k in done_keys]
                td = self._count_step(td, flags, None, t, transition)
        self._carrier = td
        if not tds:
            raise RuntimeError(f"{type(self).__name__}: the batch was interrupted before any step")
        out = cast(TensorDictBase, torch.stack(cast(Any, tds), dim=self._batch_dims))
        if self.storing_device is not None:
            out = out.to(self.storing_device)
        return out

    def _step_no_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        td = self.env.step(td)
        return td, step_mdp(
            td,
            reward_keys=self.env.reward_keys,
            done_keys=self.env.done_keys,
            action_keys=self.env.action_keys,
        )

    def _reset_all(self) -> None:
        self._carrier = self.env.reset()
        self._traj.start()
        if self._views is not None:
            self._views.start()
        if self._step_count is not None:
            self._step_count.zero_()
        self._needs_reset = False

    # -------------------------------------------------------------------------------- controls
    def reset(self, index: int | slice | Sequence[int] | torch.Tensor | None = None) -> None:
        """Resets the env; the next batch starts new trajectories.

        Args:
            index: which sub-envs of a batched env to reset (all when ``None``).
        """
        if index is None or self._carrier is None:
            self._needs_reset = True
            return
        mask = torch.zeros(self.env.batch_size, dtype=torch.bool)
        mask[index] = True
        td = self._carrier
        for key in self.env.reset_keys:
            td.set(key, mask.unsqueeze(-1))
        self._carrier = self.env.reset(td)
        self._traj.start(mask)
        if self._views is not None:
            self._views.start(mask)
        if self._step_count is not None:
            self._step_count.masked_fill_(mask, 0)

    # ---------------------------------------------------------------------------- weights
    def _init_weight_sync(self, schemes: dict[str, WeightSyncScheme] | None, updater: Any) -> None:
        name = self.options.owner
        self.weight_sync_schemes = check_weight_sync_schemes(schemes, name)
        scheme = self.weight_sync_schemes.get("policy")
        if scheme is None:
            scheme = self.weight_sync_schemes["policy"] = SharedMemWeightSyncScheme()
        running = self.policy if isinstance(self.policy, nn.Module) else None
        if scheme.role is None:
            source = self._policy_source if self._policy_source is not None else running
            if isinstance(scheme, SharedMemWeightSyncScheme):
                # in-process: the "shared" tensors are those the loop's policy reads
                weights = named_weights(running) if running is not None else {}
                scheme.init_on_sender(source, context=self, weights=weights)
            elif isinstance(scheme, NoWeightSyncScheme):
                scheme.init_on_sender(source, context=self)
            else:
                raise ValueError(
                    f"{name}: weight_sync_schemes['policy'] is a {type(scheme).__name__} that "
                    "was not initialised; this collector runs its policy in this process: use "
                    "SharedMemWeightSyncScheme or NoWeightSyncScheme, or call init_on_sender "
                    "on the scheme first"
                )
        elif scheme.role == "receiver":
            # a worker's collector: received weights go into the policy the loop runs
            scheme.model = running
        self._policy_scheme = scheme
        if updater is not None:
            push = getattr(updater, "push_weights", None)
            if not callable(push):
                raise TypeError(
                    f"{name}: weight_updater must be a WeightUpdaterBase (with push_weights), "
                    f"got {type(updater).__name__}"
                )
            register = getattr(updater, "register_collector", None)
            if callable(register):
                register(self)
        self.weight_updater = updater

    @property
    def policy_version(self) -> int:
        """The version of the weights the policy holds (updates so far).

        Examples:
            >>> from torchrl.collectors import SyncDataCollector
            >>> from torchrl.envs import PendulumEnv
            >>> collector = SyncDataCollector(PendulumEnv(), frames_per_batch=4)
            >>> collector.update_policy_weights_()
            >>> collector.policy_version
            1
        """
        return self._policy_scheme.version

    def _stamp_version(self, td: TensorDictBase) -> None:
        # a fresh tensor per step: stacked (use_buffers=False) steps keep their own
        version = self._policy_scheme.version
        td.set(
            POLICY_VERSION_KEY,
            torch.full(self.env.batch_size, version, dtype=torch.int64, device=td.device),
        )

    def update_policy_weights_(self, policy_or_weights: WeightsLike | None = None) -> None:
        """Makes the collecting policy use new weights, through the ``"policy"`` scheme.

        Without an argument, copies the weights of the policy given at construction into the
        copy the collector runs (when it runs one on another device; else nothing to copy).
        Either way the policy version is incremented.

        Args:
            policy_or_weights: a module, a state dict or a TensorDict of weights to load.

        Examples:
            >>> import torch
            >>> from tensordict.nn import TensorDictModule
            >>> from torchrl.collectors import SyncDataCollector
            >>> from torchrl.envs import PendulumEnv
            >>> policy = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
            >>> collector = SyncDataCollector(PendulumEnv(), policy, frames_per_batch=4)
            >>> collector.update_policy_weights_({"module.bias": torch.ones(1)})
            >>> policy.module.bias
            Parameter containing:
            tensor([1.], requires_grad=True)
        """
        updater = self.weight_updater
        scheme = self._policy_scheme
        if updater is not None:
            if updater.owns_scheme:
                updater.push_weights(policy_or_weights)
                scheme.send({}, worker_ids=[])  # the version counts here too
                return
            policy_or_weights = updater.prepare_weights(policy_or_weights)
        if scheme.role == "receiver":
            scheme.receive(weights=policy_or_weights)
        else:
            if not isinstance(self.policy, nn.Module):
                policy_or_weights = {}  # nothing to copy; the version still counts
            scheme.send(policy_or_weights)
        if updater is not None:
            updater.run_post_hooks()

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the env; returns the seed for the next env of a chain.

        Args:
            seed: the seed.
            static_seed: return ``seed`` itself.

        Returns:
            The next seed (see :meth:`torchrl.envs.EnvBase.set_seed`).
        """
        out = self.env.set_seed(seed, static_seed=static_seed)
        self._needs_reset = True
        return out

    def state_dict(self) -> dict[str, Any]:
        """The env's and the policy's state dicts and the frame counters.

        Returns:
            ``{"env_state_dict", "policy_state_dict", "frames", "iter", "traj_counter"}``.
        """
        return {
            "env_state_dict": self.env.state_dict(),
            "policy_state_dict": self.policy.state_dict()
            if isinstance(self.policy, nn.Module)
            else {},
            "frames": self.frames,
            "iter": self._iter,
            "traj_counter": self._traj.counter,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a :meth:`state_dict`.

        Args:
            state_dict: what :meth:`state_dict` returned.
        """
        if state_dict.get("env_state_dict"):
            self.env.load_state_dict(state_dict["env_state_dict"])
        if state_dict.get("policy_state_dict") and isinstance(self.policy, nn.Module):
            self.policy.load_state_dict(state_dict["policy_state_dict"])
        self.frames = int(state_dict.get("frames", 0))
        self._iter = int(state_dict.get("iter", 0))
        self._traj.counter = int(state_dict.get("traj_counter", self._traj.counter))

    def shutdown(self) -> None:
        """Closes the env; calling it again does nothing."""
        if self._closed:
            return
        # a batch in progress in the background thread finishes before the env closes
        self._stop_background(None)
        self._closed = True
        if not self.env.is_closed:
            self.env.close()
        self.batch_buffers.clear()
        self._carrier = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={type(self.env).__name__}, frames_per_batch="
            f"{self.frames_per_batch}, total_frames={self.total_frames}, frames={self.frames})"
        )


def check_weight_sync_schemes(schemes: object, owner: str) -> dict[str, WeightSyncScheme]:
    """A collector's ``weight_sync_schemes`` keyword, checked: ``{model_id: scheme}``.

    Args:
        schemes: what the user gave (``None``: no scheme yet).
        owner: the collector's name, for messages.

    Returns:
        A new dict (the collector adds its default ``"policy"`` scheme to it).
    """
    if schemes is None:
        return {}
    if not isinstance(schemes, dict):
        raise TypeError(
            f"{owner}: weight_sync_schemes must be a dict {{model_id: WeightSyncScheme}}, got "
            f"{type(schemes).__name__}"
        )
    for key, value in schemes.items():
        if not isinstance(key, str) or not isinstance(value, WeightSyncScheme):
            raise TypeError(
                f"{owner}: weight_sync_schemes[{key!r}] must map a model name (str) to a "
                f"WeightSyncScheme, got {type(value).__name__}"
            )
    return dict(schemes)


def extend_replay_buffer(replay_buffer: ReplayBufferLike, batch: TensorDictBase) -> None:
    """Writes a ``[*B, T]`` batch into a replay buffer, flattened unless its storage is N-d."""
    storage = getattr(replay_buffer, "storage", None)
    ndim = getattr(storage, "ndim", 1)
    if ndim == 1 and batch.batch_dims > 1:
        batch = batch.reshape(-1)
    replay_buffer.extend(batch)


def _as_tuple(key: Any) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def _paths(td: TensorDictBase) -> list[tuple[str, ...]]:
    return [_as_tuple(k) for k in td.keys(True, True)]


def _expand_mask(mask: torch.Tensor, like: torch.Tensor, batch_dims: int) -> torch.Tensor:
    return mask.reshape(*mask.shape, *([1] * (like.ndim - batch_dims))).expand_as(like)


def _run_through(steps: Generator[Any, Any, int]) -> int:
    """Runs a generator that yields nothing (a rollout given its policy) to its return value."""
    try:
        next(steps)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("the rollout asked for a policy call it was given")  # pragma: no cover
