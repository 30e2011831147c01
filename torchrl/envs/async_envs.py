"""Asynchronous env pools: sub-envs stepped and reset independently, results as they come.

:class:`AsyncEnvPool` holds ``n`` envs and lets a caller send a step (or reset) to any subset of
them with :meth:`~AsyncEnvPool.async_step_send`, then collect whichever results are ready with
:meth:`~AsyncEnvPool.async_step_recv`. Every result carries an ``"env_index"`` entry naming the
sub-env it comes from, so a policy can serve the fast envs without waiting for the slow ones.
The pool is also an ordinary :class:`~torchrl.envs.EnvBase` of batch ``[n, *inner]``: its
``step``, ``reset`` and ``rollout`` send to every sub-env and wait for all of them.

Two backends: :class:`ThreadingAsyncEnvPool` runs each env in this process, on a thread pool (for
envs that release the GIL: simulators in C, I/O-bound envs); :class:`ProcessorAsyncEnvPool` runs
each env in its own worker process. Workers read their inputs from and write their outputs into
shared-memory buffers preallocated from the specs; only short commands travel over pipes. They
use the worker-process helpers of :mod:`torchrl._processes` (a worker ends with its parent) and
the pipe framing of :class:`~torchrl.envs.ParallelEnv`.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import numbers
import os
import pickle
import queue
import select
import signal
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from multiprocessing.connection import Connection
from typing import Any, Literal, NoReturn, cast

import torch
from tensordict import TensorDict, TensorDictBase, lazy_stack, maybe_dense_stack

from torchrl._keys import NEXT
from torchrl._processes import (
    default_start_method,
    describe_exit,
    exit_worker,
    parent_gone,
    stop_processes,
    watch_parent,
)
from torchrl.data.specs import Composite
from torchrl.envs.batched import EnvMetaData
from torchrl.envs.batched._inner import fast_step, inner_step
from torchrl.envs.batched._meta import stack_metas
from torchrl.envs.batched._worker import frame, read_frame, write_frame
from torchrl.envs.common import EnvBase
from torchrl.envs.env_creator import EnvCreator

__all__ = ["AsyncEnvPool", "ProcessorAsyncEnvPool", "ThreadingAsyncEnvPool"]

#: The entry of every async result (and, optionally, of every async input) naming its sub-env.
ENV_INDEX_KEY = "env_index"

_STACKS = ("dense", "maybe_dense", "lazy")
_START_METHODS = ("fork", "spawn", "forkserver")
# How long a waiting parent sleeps in poll before it looks at its workers' exit codes, in case a
# worker's exit did not close its sentinel (a grandchild process holding it open).
_POLL_MS = 1000
# How long close() waits for workers to exit before terminating them.
_JOIN_S = 3.0
# ... and after a failure, when a worker may be hung
_FAILED_GRACE_S = 0.5
DEFAULT_TIMEOUT_S = 600.0

EnvMaker = Callable[..., EnvBase]

# op names, as sent to workers and as kept in the pending table
_STEP = "step"
_RESET = "reset"
_STEP_RESET = "step_and_maybe_reset"
_SEED = "seed"
_OK = b"k"
_READY = b"r"


class AsyncEnvPool(EnvBase):
    """A pool of envs stepped and reset asynchronously, with results routed by env index.

    ``AsyncEnvPool(..., backend=...)`` builds a :class:`ThreadingAsyncEnvPool`
    (``"threading"``, the default) or a :class:`ProcessorAsyncEnvPool` (``"multiprocessing"``).
    ``async_step_send(td)`` sends each row of ``td`` to the sub-env named by its ``"env_index"``
    entry (all sub-envs in order when there is none and ``td`` has the pool's batch size);
    ``async_step_recv(min_get)`` waits for at least ``min_get`` results and returns every result
    ready, stacked in the order they came, each with its ``"env_index"``. A sub-env takes one
    command at a time. ``step``/``reset``/``rollout`` behave as for any env of batch
    ``[n, *inner]``. A sub-env that raises, or a worker that dies, is reported with a
    ``RuntimeError`` naming the env (and the worker's traceback), after which the pool is shut
    down; ``close()`` stops every thread and process.

    Args:
        env_makers: an env, a callable returning one, or a list of either (one per sub-env).
        backend: ``"threading"`` or ``"multiprocessing"`` (``"asyncio"`` is not supported).
        stack: how results are stacked: ``"dense"``, ``"maybe_dense"`` or ``"lazy"``.
        create_env_kwargs: keyword arguments of the makers: one dict, or one per sub-env.
        mp_start_method: for ``"multiprocessing"``: ``"fork"``, ``"spawn"`` or ``"forkserver"``
            (default: ``"fork"`` on Linux without CUDA initialised, else ``"spawn"``).
        timeout: seconds a receive waits for a result before raising ``TimeoutError``
            (``None``: forever).

    Examples:
        >>> from torchrl.envs import AsyncEnvPool, PendulumEnv
        >>> pool = AsyncEnvPool([PendulumEnv, PendulumEnv], backend="threading")
        >>> pool.async_reset_send()
        >>> first = pool.async_reset_recv(min_get=2)
        >>> sorted(first["env_index"].tolist())
        [0, 1]
        >>> todo = first[:1]  # one row, routed by its "env_index"
        >>> todo["action"] = pool.action_spec_unbatched.rand((1,))
        >>> pool.async_step_send(todo)
        >>> pool.async_step_recv()["env_index"].tolist() == todo["env_index"].tolist()
        True
        >>> pool.close()
    """

    #: Minimum number of results a receive waits for when its ``min_get`` is ``None``.
    min_get: int = 1

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # A plain __new__ picks the backend's class; Python then runs its __init__.
        if cls is AsyncEnvPool:
            backend = kwargs.get("backend", "threading")
            cls = _backend_class(backend)
        return super().__new__(cls)

    def __init__(
        self,
        env_makers: EnvBase | EnvMaker | Sequence[EnvBase | EnvMaker],
        *,
        backend: Literal["threading", "multiprocessing", "asyncio"] = "threading",
        stack: Literal["dense", "maybe_dense", "lazy"] = "dense",
        create_env_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        mp_start_method: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
    ) -> None:
        name = type(self).__name__
        expected = _backend_class(backend)
        if not issubclass(type(self), expected):
            raise ValueError(
                f"{name}: backend={backend!r} belongs to {expected.__name__}; build "
                f"AsyncEnvPool(..., backend={backend!r}) or {expected.__name__}(...)"
            )
        if stack not in _STACKS:
            raise ValueError(f"{name}: stack must be one of {list(_STACKS)}, got {stack!r}")
        if timeout is not None and (
            not isinstance(timeout, numbers.Real)
            or isinstance(timeout, bool)
            or not 0 < timeout < math.inf
        ):
            raise ValueError(
                f"{name}: timeout must be a positive number of seconds or None, got {timeout!r}"
            )
        makers = _normalize_makers(env_makers, name)
        kwargs = _normalize_kwargs(len(makers), create_env_kwargs, name)
        self.backend: str = backend
        self.stack: str = stack
        self.timeout: float | None = None if timeout is None else float(timeout)
        self.mp_start_method: str | None = mp_start_method
        self.env_makers: list[EnvBase | EnvMaker] = makers
        self.create_env_kwargs: list[dict[str, Any]] = kwargs
        self.num_envs: int = len(makers)
        # per sub-env: the command in flight (None: idle) and the input row it was sent
        self._pending: list[str | None] = [None] * self.num_envs
        self._sent: list[TensorDictBase | None] = [None] * self.num_envs
        # results received but not yet returned, per op: (env index, result)
        self._ready: dict[str, list[tuple[int, Any]]] = {_STEP: [], _RESET: [], _STEP_RESET: []}
        self._failed: str | None = None
        metas = self._setup()
        first = metas[0]
        super().__init__(
            device=first.device,
            batch_size=(self.num_envs, *first.batch_size),
            allow_done_after_reset=any(m.allow_done_after_reset for m in metas),
        )
        try:
            output_spec, input_spec = stack_metas(metas, name)
            self.output_spec = output_spec
            self.input_spec = input_spec
            self._after_specs()
        except BaseException:
            self.shutdown()
            raise

    # ----------------------------------------------------------------------- backend hooks
    def _setup(self) -> list[EnvMetaData]:
        """Builds the sub-envs (or their workers) and returns their metadata."""
        raise NotImplementedError

    def _after_specs(self) -> None:
        """Runs once the pool's specs are set (allocate buffers, start workers)."""

    def _send(self, index: int, op: str, row: TensorDictBase | None, kwargs: dict) -> None:
        raise NotImplementedError

    def _collect(self, block: bool) -> list[tuple[int, str, Any]]:
        """Results now ready (waits for one at least when ``block``): ``(index, op, result)``."""
        raise NotImplementedError

    def _seed_one(self, index: int, seed: int, static_seed: bool) -> int:
        raise NotImplementedError

    def shutdown(self) -> None:
        """Stops the pool's threads or processes and closes the sub-envs; idempotent."""
        raise NotImplementedError

    def _close(self) -> None:
        self.shutdown()

    # --------------------------------------------------------------------------- async API
    def async_step_send(self, tensordict: TensorDictBase) -> None:
        """Sends one step to each sub-env named in ``tensordict``, without waiting.

        Args:
            tensordict: inputs of batch ``[k, *inner]``, one row per sub-env, with an
                ``"env_index"`` entry (``[k]``) naming the sub-envs; without it, ``k`` must be
                the number of sub-envs and row ``i`` goes to sub-env ``i``.
        """
        for index, row in self._split(tensordict, _STEP):
            self._dispatch(index, _STEP, row, {})

    def async_step_recv(self, min_get: int | None = None) -> TensorDictBase:
        """Waits for at least ``min_get`` step results and returns all those ready.

        Args:
            min_get: results to wait for (default :attr:`min_get`).

        Returns:
            The transitions (inputs with ``"next"``), stacked in arrival order, each with its
            ``"env_index"``.
        """
        results = self._receive(_STEP, min_get)
        return self._stack([r for _, r in results], [i for i, _ in results])

    def async_reset_send(
        self,
        tensordict: TensorDictBase | None = None,
        env_index: int | Sequence[int] | torch.Tensor | None = None,
        **kwargs: Any,
    ) -> None:
        """Sends a reset to sub-envs, without waiting.

        Args:
            tensordict: optional reset inputs (``[k, *inner]``, routed like
                :meth:`async_step_send`); rows with an all-``False`` ``"_reset"`` are skipped.
            env_index: the sub-envs to reset when ``tensordict`` is ``None`` (default: all).
            **kwargs: passed to each sub-env's ``reset``.
        """
        if tensordict is None:
            if env_index is None:
                indices = list(range(self.num_envs))
            else:
                indices = [int(i) for i in torch.as_tensor(env_index).reshape(-1).tolist()]
            self._check_indices(indices, _RESET)
            pairs: list[tuple[int, TensorDictBase | None]] = [(i, None) for i in indices]
        else:
            pairs = list(self._split(tensordict, _RESET))
        for index, row in pairs:
            if row is not None:
                mask = row.get("_reset", None)
                if mask is not None and not bool(mask.any()):
                    continue
                if mask is not None and mask.all() and row.batch_dims == 0:
                    row = row.exclude("_reset")
            self._dispatch(index, _RESET, row, kwargs)

    def async_reset_recv(self, min_get: int | None = None) -> TensorDictBase:
        """Waits for at least ``min_get`` reset results and returns all those ready.

        Args:
            min_get: results to wait for (default :attr:`min_get`).

        Returns:
            The reset outputs, stacked in arrival order, each with its ``"env_index"``.
        """
        results = self._receive(_RESET, min_get)
        return self._stack([r for _, r in results], [i for i, _ in results])

    def async_step_and_maybe_reset_send(self, tensordict: TensorDictBase) -> None:
        """Like :meth:`async_step_send`, but each sub-env resets itself when done.

        Args:
            tensordict: inputs routed as for :meth:`async_step_send`.
        """
        for index, row in self._split(tensordict, _STEP_RESET):
            self._dispatch(index, _STEP_RESET, row, {})

    def async_step_and_maybe_reset_recv(
        self, min_get: int | None = None
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Waits for at least ``min_get`` results of :meth:`async_step_and_maybe_reset_send`.

        Args:
            min_get: results to wait for (default :attr:`min_get`).

        Returns:
            ``(transitions, next_inputs)``, both in arrival order with ``"env_index"``: the
            transitions as :meth:`async_step_recv` returns them, and the inputs of each
            sub-env's next step (reset where the sub-env was done).
        """
        results = self._receive(_STEP_RESET, min_get)
        indices = [i for i, _ in results]
        steps = self._stack([r[0] for _, r in results], indices)
        nexts = self._stack([r[1] for _, r in results], indices)
        return steps, nexts

    @property
    def busy(self) -> list[int]:
        """The sub-envs with a command in flight or a result not yet received."""
        return [i for i, op in enumerate(self._pending) if op is not None]

    # ------------------------------------------------------------------------ bookkeeping
    def _check_open(self) -> None:
        if self._failed is not None:
            raise RuntimeError(
                f"{type(self).__name__} was shut down after a failure ({self._failed}); build a "
                f"new pool"
            )
        if self.is_closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    def _check_indices(self, indices: list[int], op: str) -> None:
        name = type(self).__name__
        self._check_open()
        if len(set(indices)) != len(indices):
            raise ValueError(f"{name}.{op}: env_index {indices} names a sub-env twice")
        for i in indices:
            if not 0 <= i < self.num_envs:
                raise IndexError(
                    f"{name}.{op}: env_index {i} is out of range for {self.num_envs} sub-envs"
                )
            if self._pending[i] is not None:
                raise RuntimeError(
                    f"{name}.{op}: sub-env {i} has a {self._pending[i]} in flight (or a result "
                    f"not yet received); receive it before sending it another command"
                )

    def _split(self, tensordict: TensorDictBase, op: str) -> list[tuple[int, TensorDictBase]]:
        name = type(self).__name__
        if not isinstance(tensordict, TensorDictBase):
            raise TypeError(f"{name}.{op}: expected a TensorDict, got {type(tensordict).__name__}")
        inner = self.batch_size[1:]
        batch = tensordict.batch_size
        if tuple(batch[1:]) != tuple(inner) or tensordict.batch_dims < 1:
            raise ValueError(
                f"{name}.{op}: expected a TensorDict of batch [k, {', '.join(map(str, inner))}] "
                f"(one row per sub-env), got batch {list(batch)}"
            )
        idx = tensordict.get(ENV_INDEX_KEY, None)
        if idx is None:
            if batch[0] != self.num_envs:
                raise ValueError(
                    f"{name}.{op}: without an {ENV_INDEX_KEY!r} entry the input must hold one "
                    f"row per sub-env ({self.num_envs}), got batch {list(batch)}"
                )
            indices = list(range(self.num_envs))
            rows = tensordict
        else:
            indices = [int(i) for i in idx.reshape(batch[0], -1)[:, 0].tolist()]
            rows = tensordict.exclude(ENV_INDEX_KEY)
        self._check_indices(indices, op)
        return [(i, rows[j]) for j, i in enumerate(indices)]

    def _dispatch(self, index: int, op: str, row: TensorDictBase | None, kwargs: dict) -> None:
        self._pending[index] = op
        self._sent[index] = row
        try:
            self._send(index, op, row, kwargs)
        except BaseException:
            self._pending[index] = None
            self._sent[index] = None
            raise

    def _receive(self, op: str, min_get: int | None) -> list[tuple[int, Any]]:
        name = type(self).__name__
        self._check_open()
        want = self.min_get if min_get is None else int(min_get)
        ready = self._ready[op]
        in_flight = sum(1 for i, p in enumerate(self._pending) if p == op) - len(ready)
        if want < 1:
            raise ValueError(f"{name}: min_get must be at least 1, got {want}")
        if want > len(ready) + in_flight:
            raise RuntimeError(
                f"{name}: asked for {want} {op} results, but only {len(ready) + in_flight} were "
                f"sent and not yet received; waiting would never end"
            )
        block = len(ready) < want
        while True:
            for index, got_op, result in self._collect(block):
                self._ready[got_op].append((index, result))
            block = len(ready) < want
            if not block:
                break
        out = list(ready)
        ready.clear()
        for index, _ in out:
            self._pending[index] = None
            self._sent[index] = None
        return out

    def _stack(self, tds: list[TensorDictBase], indices: list[int]) -> TensorDictBase:
        inner = self.batch_size[1:]
        for td, i in zip(tds, indices):
            td.set(ENV_INDEX_KEY, torch.full(inner, i, dtype=torch.int64, device=td.device))
        if self.stack == "lazy":
            return lazy_stack(tds, 0)
        if self.stack == "maybe_dense":
            return maybe_dense_stack(tds, 0)
        return cast(TensorDictBase, torch.stack(tds, 0))  # type: ignore[arg-type]

    def _fail(
        self,
        message: str,
        cause: BaseException | None = None,
        error: type[Exception] = RuntimeError,
    ) -> NoReturn:
        self._failed = message
        self.shutdown()
        self._closed = True
        text = f"{type(self).__name__}: {message}; the pool was shut down"
        if cause is not None:
            raise error(text) from cause
        raise error(text)

    def _check_idle(self, what: str) -> None:
        self._check_open()
        busy = self.busy
        if busy:
            raise RuntimeError(
                f"{type(self).__name__}.{what}: sub-envs {busy} have asynchronous commands in "
                f"flight; receive their results first"
            )

    # ---------------------------------------------------------------------- EnvBase contract
    def _step_keys(self) -> list:
        keys: list = []
        for spec in (self.full_observation_spec, self.full_reward_spec, self.full_done_spec):
            keys.extend(spec.keys(True, True))
        return keys

    def _root_template(self) -> TensorDictBase:
        root = TensorDict(batch_size=self.batch_size, device=self.device)
        for spec in (self.full_observation_spec, self.full_done_spec, self.full_state_spec):
            root.update(spec.zero())
        return root

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._check_idle("step")
        self.async_step_send(tensordict.exclude(ENV_INDEX_KEY, NEXT))
        results = dict(self._receive(_STEP, self.num_envs))
        keys = self._step_keys()
        nexts = [results[i].get(NEXT).select(*keys) for i in range(self.num_envs)]
        return cast(TensorDictBase, torch.stack(nexts, 0))  # type: ignore[arg-type]

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        self._check_idle("reset")
        n = self.num_envs
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            chosen = list(range(n))
        else:
            chosen = [i for i in range(n) if bool(mask[i].any())]
        if not chosen:
            return self._root_template()  # nothing to reset: EnvBase keeps the input's values
        if tensordict is None:
            self.async_reset_send(env_index=chosen, **kwargs)
        else:
            rows = tensordict.exclude(ENV_INDEX_KEY)[chosen]
            inner = self.batch_size[1:]
            index = torch.tensor(chosen, dtype=torch.int64).reshape(-1, *([1] * len(inner)))
            rows.set(ENV_INDEX_KEY, index.expand(len(chosen), *inner))
            self.async_reset_send(rows, **kwargs)
        results = dict(self._receive(_RESET, len(chosen)))
        out = self._root_template()
        keys = list(out.keys(True, True))
        for i, result in results.items():
            out[i] = result.select(*keys, strict=False).update(
                out[i].exclude(*result.keys(True, True))
            )
        return out

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int:
        """Seeds the sub-envs one after the other, each with the seed the previous returned.

        Args:
            seed: the first sub-env's seed; ``None`` draws one from torch's global generator.
            static_seed: give every sub-env ``seed`` itself.

        Returns:
            The seed returned by the last sub-env (to seed a next env of a chain).
        """
        self._check_idle("set_seed")
        if seed is None:
            seed = int(torch.randint(0, 2**32 - 1, (), dtype=torch.int64))
        seed = int(seed)
        for i in range(self.num_envs):
            seed = int(self._seed_one(i, seed, static_seed))
        return seed

    def _set_seed(self, seed: int | None) -> None:
        self.set_seed(seed)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_envs={self.num_envs}, backend={self.backend!r}, "
            f"batch_size={self.batch_size})"
        )


# ===================================================================================== threads
class ThreadingAsyncEnvPool(AsyncEnvPool):
    """An :class:`AsyncEnvPool` whose sub-envs live in this process and run on a thread pool.

    Each sub-env runs its commands on a worker thread (one thread per sub-env), so commands to
    different sub-envs overlap wherever the envs release the GIL. Envs that hold it (pure
    Python, small torch ops) gain nothing from threads: each step pays thread hand-offs (about 2x
    a :class:`~torchrl.envs.SerialEnv` step of 4 CountingEnvs on a busy 2-core machine). Takes
    the arguments of :class:`AsyncEnvPool` (``backend="threading"``).

    Examples:
        >>> from torchrl.envs import PendulumEnv, ThreadingAsyncEnvPool
        >>> pool = ThreadingAsyncEnvPool([PendulumEnv] * 3)
        >>> pool.rollout(4).batch_size
        torch.Size([3, 4])
        >>> pool.close()
    """

    def _setup(self) -> list[EnvMetaData]:
        self._envs: list[EnvBase] = []
        self._executor: ThreadPoolExecutor | None = None
        self._done: queue.SimpleQueue[tuple[int, str, Future]] = queue.SimpleQueue()
        self._running: dict[int, Future] = {}
        try:
            for i, (maker, kw) in enumerate(zip(self.env_makers, self.create_env_kwargs)):
                env = maker if isinstance(maker, EnvBase) else maker(**kw)
                if not isinstance(env, EnvBase):
                    raise TypeError(
                        f"{type(self).__name__}: env_makers[{i}] returned a "
                        f"{type(env).__name__}, expected a torchrl EnvBase"
                    )
                self._envs.append(env)
        except BaseException:
            for env in self._envs:
                env.close()
            raise
        self._executor = ThreadPoolExecutor(
            max_workers=self.num_envs, thread_name_prefix="torchrl-async-env"
        )
        return [EnvMetaData.from_env(env) for env in self._envs]

    @property
    def envs(self) -> list[EnvBase]:
        """The sub-envs (in this process)."""
        return list(self._envs)

    def _send(self, index: int, op: str, row: TensorDictBase | None, kwargs: dict) -> None:
        executor = self._executor
        if executor is None:
            raise RuntimeError(f"{type(self).__name__} is shut down")
        env = self._envs[index]
        future: Future[Any]
        if op == _STEP:
            future = executor.submit(env.step, row.copy())  # type: ignore[union-attr]
        elif op == _STEP_RESET:
            future = executor.submit(env.step_and_maybe_reset, row.copy())  # type: ignore[union-attr]
        else:
            future = executor.submit(env.reset, None if row is None else row.copy(), **kwargs)
        self._running[index] = future
        done = self._done
        future.add_done_callback(lambda f: done.put((index, op, f)))

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        # The synchronous step: the pool checked the actions, so each env's _step may be called
        # directly (as SerialEnv does), on the threads, and the results are stacked in order.
        self._check_idle("step")
        executor = self._executor
        if executor is None:
            raise RuntimeError(f"{type(self).__name__} is shut down")
        rows = tensordict.exclude(NEXT, ENV_INDEX_KEY).unbind(0)
        futures = [
            executor.submit(inner_step, env, row, fast_step(env))
            for env, row in zip(self._envs, rows)
        ]
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        keys = self._step_keys()
        outs = []
        for i, future in enumerate(futures):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                out = future.result(timeout=left)
            except FutureTimeout:
                self._running.update(enumerate(futures))
                self._fail(
                    f"sub-env {i} did not answer step within timeout={self.timeout} s: a hung env?",
                    error=TimeoutError,
                )
            except Exception as err:
                self._running.update(enumerate(futures))
                self._fail(f"sub-env {i} raised {type(err).__name__} during step: {err}", err)
            outs.append(out.select(*keys))
        return cast(TensorDictBase, torch.stack(outs, 0))  # type: ignore[arg-type]

    def _collect(self, block: bool) -> list[tuple[int, str, Any]]:
        out: list[tuple[int, str, Any]] = []
        done = self._done
        try:
            first = done.get(timeout=self.timeout) if block else done.get_nowait()
        except queue.Empty:
            if block:
                self._fail(
                    f"no sub-env answered within timeout={self.timeout} s (in flight: "
                    f"{self.busy}): a hung env?",
                    error=TimeoutError,
                )
            return out
        items = [first]
        while True:
            try:
                items.append(done.get_nowait())
            except queue.Empty:
                break
        for index, op, future in items:
            err = future.exception()
            if err is not None:
                self._fail(f"sub-env {index} raised {type(err).__name__} during {op}: {err}", err)
            out.append((index, op, future.result()))
        return out

    def _seed_one(self, index: int, seed: int, static_seed: bool) -> int:
        return self._envs[index].set_seed(seed, static_seed=static_seed)

    def shutdown(self) -> None:
        """Waits for the running commands, stops the threads and closes the sub-envs.

        After a failure (an env raised, or did not answer in time) it does not wait: a thread
        cannot be stopped from outside, so an env still running is left to finish (and is not
        closed under its feet).
        """
        executor, self._executor = getattr(self, "_executor", None), None
        if executor is None:
            return
        failed = self._failed is not None
        executor.shutdown(wait=not failed, cancel_futures=True)
        running = getattr(self, "_running", {})
        for i, env in enumerate(getattr(self, "_envs", [])):
            future = running.get(i)
            if failed and future is not None and not future.done():
                continue
            try:
                env.close()
            except Exception:
                traceback.print_exc()


# =================================================================================== processes
def _mp_context(method: str | None, name: str) -> Any:
    if method is None:
        method = default_start_method()
    if method not in _START_METHODS or method not in mp.get_all_start_methods():
        raise ValueError(
            f"{name}: mp_start_method must be one of "
            f"{[m for m in _START_METHODS if m in mp.get_all_start_methods()]} or None, got "
            f"{method!r}"
        )
    return mp.get_context(method)


class _Workers:
    """The parent's side of the worker processes: processes, pipes, poller; shuts down once."""

    def __init__(self) -> None:
        self.procs: list[Any] = []
        self.conns: list[Connection] = []
        self.poller = select.poll()
        # fd -> (is_sentinel, env index)
        self.fds: dict[int, tuple[bool, int]] = {}
        self.closed = False
        # seconds the workers get to exit after CLOSE; shortened after a failure (a hung
        # worker would not answer)
        self.grace = _JOIN_S

    def add(self, proc: Any, conn: Connection, index: int) -> None:
        self.procs.append(proc)
        self.conns.append(conn)
        for fd, sentinel in ((conn.fileno(), False), (proc.sentinel, True)):
            self.poller.register(fd, select.POLLIN)
            self.fds[fd] = (sentinel, index)

    def shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        close = frame(pickle.dumps(("close",)))
        for conn in self.conns:
            try:
                write_frame(conn.fileno(), close)
            except OSError:
                pass
        stop_processes(self.procs, self.grace)
        self.fds.clear()
        for conn in self.conns:
            conn.close()
        for proc in self.procs:
            try:
                proc.close()
            except ValueError:
                pass


class ProcessorAsyncEnvPool(AsyncEnvPool):
    """An :class:`AsyncEnvPool` running each sub-env in its own worker process.

    The parent allocates, from the specs, shared-memory buffers for the inputs, the step
    outputs and the reset outputs of every sub-env; a worker reads its row of the inputs, writes
    its rows of the outputs and answers one byte over its pipe. A worker that raises sends its
    traceback; a worker that dies is noticed as soon as it exits; either way the receive raises
    a ``RuntimeError`` naming the sub-env and the pool shuts down. Workers end by themselves
    when this process dies. Envs holding non-tensor entries are not supported. Takes the
    arguments of :class:`AsyncEnvPool` (``backend="multiprocessing"``); with the ``"spawn"``
    start method the makers must pickle.

    Examples:
        >>> from torchrl.envs import PendulumEnv, ProcessorAsyncEnvPool
        >>> pool = ProcessorAsyncEnvPool([PendulumEnv] * 2, backend="multiprocessing")
        >>> pool.async_reset_send(env_index=[1])
        >>> pool.async_reset_recv()["env_index"].tolist()
        [1]
        >>> pool.close()
    """

    def __init__(
        self,
        env_makers: EnvBase | EnvMaker | Sequence[EnvBase | EnvMaker],
        *,
        backend: Literal["threading", "multiprocessing", "asyncio"] = "multiprocessing",
        stack: Literal["dense", "maybe_dense", "lazy"] = "dense",
        create_env_kwargs: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        mp_start_method: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
    ) -> None:
        if mp_start_method is not None and mp_start_method not in _START_METHODS:
            raise ValueError(
                f"{type(self).__name__}: mp_start_method must be one of {list(_START_METHODS)} "
                f"or None, got {mp_start_method!r}"
            )
        super().__init__(
            env_makers,
            backend=backend,
            stack=stack,
            create_env_kwargs=create_env_kwargs,
            mp_start_method=mp_start_method,
            timeout=timeout,
        )

    def _setup(self) -> list[EnvMetaData]:
        self._workers: _Workers | None = None
        self._finalizer: weakref.finalize | None = None
        metas: list[EnvMetaData] = []
        seen: list[tuple[Any, dict[str, Any], EnvMetaData]] = []
        for i, (maker, kw) in enumerate(zip(self.env_makers, self.create_env_kwargs)):
            if isinstance(maker, EnvBase):
                metas.append(EnvMetaData.from_env(maker))
                continue
            meta = next((m for f, k, m in seen if f is maker and k == kw), None)
            if meta is None:
                if isinstance(maker, EnvCreator) and not kw:
                    meta = maker.meta_data
                else:
                    # built here once to read the specs, then closed: the worker builds its own
                    env = maker(**kw)
                    if not isinstance(env, EnvBase):
                        raise TypeError(
                            f"{type(self).__name__}: env_makers[{i}] returned a "
                            f"{type(env).__name__}, expected a torchrl EnvBase"
                        )
                    meta = EnvMetaData.from_env(env)
                    env.close()
                seen.append((maker, kw, meta))
            metas.append(meta)
        return metas

    def _after_specs(self) -> None:
        name = type(self).__name__
        if self.device is not None and self.device.type != "cpu":
            raise NotImplementedError(
                f"{name}: sub-envs on {self.device} are not supported; buffers live on the CPU"
            )
        inputs = TensorDict(batch_size=self.batch_size)
        steps = TensorDict(batch_size=self.batch_size)
        roots = TensorDict(batch_size=self.batch_size)
        specs: list[tuple[TensorDictBase, Composite]] = [
            (inputs, self.full_action_spec),
            (inputs, self.full_state_spec),
            (steps, self.full_observation_spec),
            (steps, self.full_reward_spec),
            (steps, self.full_done_spec),
            (roots, self.full_observation_spec),
            (roots, self.full_done_spec),
            (roots, self.full_state_spec),
        ]
        for buffer, spec in specs:
            for key in spec.keys(True, True):
                if type(spec[key]).__name__ in ("NonTensor", "NonTensorSpec"):
                    raise NotImplementedError(
                        f"{name}: entry {key!r} is a non-tensor spec ({spec[key]!r}); the "
                        f"multiprocessing backend moves tensors only (use backend='threading')"
                    )
            buffer.update(spec.zero())
        self._shared: tuple[TensorDictBase, TensorDictBase, TensorDictBase] = (
            inputs.share_memory_(),
            steps.share_memory_(),
            roots.share_memory_(),
        )
        self._input_keys = list(inputs.keys(True, True))
        self._step_messages: dict[tuple, bytes] = {}
        self._start_workers()

    def _start_workers(self) -> None:
        name = type(self).__name__
        ctx = _mp_context(self.mp_start_method, name)
        method = ctx.get_start_method()
        workers = _Workers()
        self._workers = workers
        # shuts the workers down if the pool is garbage-collected unclosed; refers to them only
        self._finalizer = weakref.finalize(self, workers.shutdown)
        try:
            for i, (maker, kw) in enumerate(zip(self.env_makers, self.create_env_kwargs)):
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                inherited = [*workers.conns, parent_conn] if method == "fork" else []
                proc = ctx.Process(
                    target=_worker_main,
                    args=(
                        i,
                        maker,
                        kw,
                        child_conn,
                        inherited,
                        self._shared,
                        os.getpid(),
                        torch.initial_seed(),
                    ),
                    name=f"{name}-worker-{i}",
                    daemon=False,  # a worker may start processes of its own
                )
                try:
                    proc.start()
                except (pickle.PicklingError, AttributeError, TypeError) as err:
                    parent_conn.close()
                    child_conn.close()
                    raise TypeError(
                        f"{name}: could not send env_makers[{i}] ({maker!r}) or its kwargs to a "
                        f"worker started with {method!r}: they must pickle (a top-level "
                        f"function or class, a functools.partial, an EnvCreator), or use "
                        f"mp_start_method='fork'"
                    ) from err
                child_conn.close()
                workers.add(proc, parent_conn, i)
            waiting = set(range(self.num_envs))
            while waiting:
                for i, reply in self._wait(block=True, command="start"):
                    if reply != _READY:
                        raise RuntimeError(f"{name}: worker {i} sent {reply!r} at start")
                    waiting.discard(i)
        except BaseException:
            self.shutdown()
            raise

    @property
    def worker_pids(self) -> list[int]:
        """The process ids of the workers (empty once shut down)."""
        workers = self._workers
        return [] if workers is None or workers.closed else [p.pid for p in workers.procs]

    def _live(self) -> _Workers:
        workers = self._workers
        if workers is None or workers.closed:
            raise RuntimeError(f"{type(self).__name__}: the workers are shut down")
        return workers

    def _send(self, index: int, op: str, row: TensorDictBase | None, kwargs: dict) -> None:
        workers = self._live()
        present: list = []
        if row is not None:
            buffer = self._shared[0][index]
            for key in self._input_keys:
                value = row.get(key, None)
                if value is not None:
                    target = buffer.get(key)
                    if value.shape != target.shape:
                        raise ValueError(
                            f"{type(self).__name__}.{op}: entry {key!r} of sub-env {index} has "
                            f"shape {tuple(value.shape)}, expected {tuple(target.shape)}"
                        )
                    target.copy_(value)
                    present.append(key)
            mask = row.get("_reset", None)
            extra = {"_reset": mask} if mask is not None else {}
        else:
            extra = {}
        message = frame(pickle.dumps((op, present, extra, kwargs, False), protocol=5))
        try:
            write_frame(workers.conns[index].fileno(), message)
        except OSError:
            self._dead(index, op)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        # The synchronous step moves the whole batch at once: one copy into the shared inputs,
        # one cached message per worker, one clone of the shared outputs.
        self._check_idle("step")
        workers = self._live()
        inputs, steps, _ = self._shared
        present = []
        for key in self._input_keys:
            value = tensordict.get(key, None)
            if value is None:
                continue
            target = inputs.get(key)
            if value.shape != target.shape:
                raise ValueError(
                    f"{type(self).__name__}.step: entry {key!r} has shape "
                    f"{tuple(value.shape)}, expected {tuple(target.shape)}"
                )
            target.copy_(value)
            present.append(key)
        signature = tuple(present)
        message = self._step_messages.get(signature)
        if message is None:
            message = frame(pickle.dumps((_STEP, present, {}, {}, True), protocol=5))
            self._step_messages[signature] = message
        everyone = range(self.num_envs)
        for i in everyone:
            self._pending[i] = _STEP
        try:
            for i in everyone:
                try:
                    write_frame(workers.conns[i].fileno(), message)
                except OSError:
                    self._dead(i, "step")
            waiting = set(everyone)
            while waiting:
                for i, _ in self._wait(True, "step"):
                    waiting.discard(i)
        finally:
            for i in everyone:
                self._pending[i] = None
        return steps.clone()

    def _wait(self, block: bool, command: str) -> list[tuple[int, bytes]]:
        """Replies now in the pipes, as ``(index, payload)``; raises for errors and deaths."""
        workers = self._live()
        timeout = self.timeout
        deadline = math.inf if timeout is None or not block else time.monotonic() + timeout
        while True:
            wait_ms = 0
            if block:
                wait_ms = _POLL_MS
                if timeout is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self._fail(
                            f"no worker answered {command} within timeout={timeout} s (in "
                            f"flight: {self.busy}): a hung env?",
                            error=TimeoutError,
                        )
                    wait_ms = min(wait_ms, math.ceil(left * 1000))
            events = workers.poller.poll(wait_ms)
            if not events:
                for i, proc in enumerate(workers.procs):
                    if proc.exitcode is not None:
                        self._dead(i, command)
                if block:
                    continue
                return []
            out: list[tuple[int, bytes]] = []
            for fd, _ in events:
                sentinel, i = workers.fds[fd]
                conn = workers.conns[i]
                if sentinel:
                    if conn.poll(0):  # its last words (an error report) may be in the pipe
                        self._read(i, command)
                    self._dead(i, command)
                out.append((i, self._read(i, command)))
            return out

    def _read(self, index: int, command: str) -> bytes:
        workers = self._live()
        try:
            message = read_frame(workers.conns[index].fileno())
        except (EOFError, OSError):
            self._dead(index, command)
        if message[:1] == b"\x80":
            reply = pickle.loads(message)
            if reply[0] == "error":
                _, op, kind, text, trace = reply
                pid = workers.procs[index].pid
                self._fail(
                    f"sub-env {index} (worker pid {pid}) raised {kind} during {op}: {text}\n"
                    f"Traceback in the worker:\n{trace}"
                )
        return message

    def _dead(self, index: int, command: str) -> NoReturn:
        workers = self._workers
        assert workers is not None
        proc = workers.procs[index]
        proc.join(2.0)  # a killed worker exits at once; one that closed its pipe may linger
        code = proc.exitcode
        how = "closed its pipe" if code is None else f"died ({describe_exit(code)})"
        self._fail(f"the worker of sub-env {index} (pid {proc.pid}) {how} during {command}")

    def _collect(self, block: bool) -> list[tuple[int, str, Any]]:
        out: list[tuple[int, str, Any]] = []
        for index, _ in self._wait(block, "receive"):
            op = self._pending[index]
            if op is None or op == _SEED:
                continue  # answers to set_seed are read by _seed_one
            out.append((index, op, self._result(index, op)))
        return out

    def _result(self, index: int, op: str) -> Any:
        _, steps, roots = self._shared
        if op == _RESET:
            return roots[index].clone()
        sent = self._sent[index]
        row = sent.copy() if sent is not None else TensorDict()
        row.set(NEXT, steps[index].clone())
        if op == _STEP:
            return row
        return row, roots[index].clone()

    def _seed_one(self, index: int, seed: int, static_seed: bool) -> int:
        workers = self._live()
        message = frame(pickle.dumps((_SEED, seed, static_seed), protocol=5))
        try:
            write_frame(workers.conns[index].fileno(), message)
        except OSError:
            self._dead(index, _SEED)
        self._pending[index] = _SEED
        try:
            while True:
                for i, reply in self._wait(True, _SEED):
                    if i == index:
                        return int(pickle.loads(reply)[1])
        finally:
            self._pending[index] = None

    def shutdown(self) -> None:
        """Asks every worker to exit, then terminates (and kills) those still running."""
        workers = getattr(self, "_workers", None)
        if workers is not None and self._failed is not None:
            workers.grace = _FAILED_GRACE_S
        finalizer, self._finalizer = getattr(self, "_finalizer", None), None
        if finalizer is not None:
            finalizer()
        elif workers is not None:
            workers.shutdown()


def _leaves(td: TensorDictBase) -> list[tuple[Any, torch.Tensor]]:
    """``(key, tensor)`` for every leaf of ``td``, read once (the worker's views of its rows)."""
    return [(key, td.get(key)) for key in td.keys(True, True)]


def _write_rows(leaves: list[tuple[Any, torch.Tensor]], td: TensorDictBase, what: str) -> None:
    for key, target in leaves:
        value = td.get(key, None)
        if value is None:
            if what == "reset":
                target.zero_()
                continue
            raise KeyError(f"the env's {what} output has no entry {key!r}, which its specs declare")
        if value.shape != target.shape:
            raise ValueError(
                f"the env's {what} output {key!r} has shape {tuple(value.shape)}, its spec "
                f"expects {tuple(target.shape)}"
            )
        target.copy_(value)


def _worker_main(
    index: int,
    maker: EnvBase | EnvMaker,
    kwargs: dict[str, Any],
    conn: Connection,
    inherited: list[Connection],
    buffers: tuple[TensorDictBase, TensorDictBase, TensorDictBase],
    parent_pid: int,
    base_seed: int,
) -> None:
    """One sub-env's process: builds the env, then serves commands until told to close."""
    watch_parent(parent_pid)
    # Ctrl-C goes to the whole process group: the parent handles it and closes the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for other in inherited:
        other.close()
    torch.set_num_threads(1)
    torch.manual_seed((base_seed + index) % 2**63)
    fd = conn.fileno()
    inputs, step_view, root_view = (b[index] for b in buffers)
    input_leaves = dict(_leaves(inputs))
    steps, roots = _leaves(step_view), _leaves(root_view)
    env: EnvBase | None = None
    op = "start"

    def error(err: BaseException) -> bytes:
        return frame(
            pickle.dumps(("error", op, type(err).__name__, str(err), traceback.format_exc()))
        )

    try:
        env = maker if isinstance(maker, EnvBase) else maker(**kwargs)
        if not isinstance(env, EnvBase):
            raise TypeError(f"the maker returned a {type(env).__name__}, not a torchrl EnvBase")
    except BaseException as err:
        try:
            write_frame(fd, error(err))
        except OSError:
            pass
        return
    ok = frame(_OK)
    fast = fast_step(env)
    try:
        write_frame(fd, frame(_READY))
        while True:
            command = pickle.loads(read_frame(fd))
            op = command[0]
            if op == "close":
                return
            try:
                if op == _SEED:
                    value = env.set_seed(command[1], static_seed=command[2])
                    write_frame(fd, frame(pickle.dumps((_SEED, int(value)))))
                    continue
                _, present, extra, kw, checked = command
                td = None
                if present or extra:
                    td = TensorDict(extra, batch_size=inputs.batch_size)
                    for key in present:
                        td.set(key, input_leaves[key].clone())
                if op == _STEP:
                    if checked:
                        # the pool checked the actions: the env's _step may be called directly
                        nxt = inner_step(env, td, fast)  # type: ignore[arg-type]
                    else:
                        nxt = env.step(td).get(NEXT)  # type: ignore[arg-type]
                    _write_rows(steps, nxt, "step")
                elif op == _STEP_RESET:
                    out, nxt = env.step_and_maybe_reset(td)  # type: ignore[arg-type]
                    _write_rows(steps, out.get(NEXT), "step")
                    _write_rows(roots, nxt, "reset")
                else:
                    _write_rows(roots, env.reset(td, **kw), "reset")
                reply = ok
            except BaseException as err:
                reply = error(err)
            write_frame(fd, reply)
    except (EOFError, OSError):
        pass  # the parent is gone, or closed the pipe to stop this worker
    finally:
        try:
            env.close()
        except Exception:
            traceback.print_exc()
        if parent_gone():
            exit_worker()


# ================================================================================ construction
def _backend_class(backend: Any) -> type[AsyncEnvPool]:
    if backend == "threading":
        return ThreadingAsyncEnvPool
    if backend == "multiprocessing":
        return ProcessorAsyncEnvPool
    if backend == "asyncio":
        raise NotImplementedError(
            "AsyncEnvPool: backend='asyncio' is not supported; use 'threading' or 'multiprocessing'"
        )
    raise ValueError(
        f"AsyncEnvPool: backend must be 'threading' or 'multiprocessing', got {backend!r}"
    )


def _normalize_makers(makers: Any, name: str) -> list[EnvBase | EnvMaker]:
    if isinstance(makers, EnvBase) or callable(makers):
        return [makers]
    if isinstance(makers, (str, bytes)) or not isinstance(makers, Sequence):
        raise TypeError(
            f"{name}: env_makers must be an env, a callable returning one, or a list of these; "
            f"got {type(makers).__name__}"
        )
    out = list(makers)
    if not out:
        raise ValueError(f"{name}: env_makers is empty; give at least one env or maker")
    for i, maker in enumerate(out):
        if not (isinstance(maker, EnvBase) or callable(maker)):
            raise TypeError(f"{name}: env_makers[{i}] is neither an env nor callable: {maker!r}")
    if len({id(m) for m in out if isinstance(m, EnvBase)}) < sum(
        isinstance(m, EnvBase) for m in out
    ):
        raise ValueError(f"{name}: the same env instance appears twice in env_makers")
    return out


def _normalize_kwargs(n: int, kwargs: Any, name: str) -> list[dict[str, Any]]:
    if kwargs is None:
        return [{} for _ in range(n)]
    if isinstance(kwargs, dict):
        return [dict(kwargs) for _ in range(n)]
    out = [dict(k) for k in kwargs]
    if len(out) != n:
        raise ValueError(
            f"{name}: create_env_kwargs is a list of {len(out)} dicts for {n} env makers; give "
            f"one per maker (or a single dict)"
        )
    return out
