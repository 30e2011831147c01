"""Where population members live: this process, worker processes, or Ray actors.

Every backend answers the same calls, by member index: ``train_all(amount) -> scores``,
``copy_states(pairs)`` (source weights, optimizer state and all, into targets),
``set_hparams``, ``get_state``/``set_state`` and ``close``. Errors of a member (an exception in
its code, a dead process or actor) are raised in the caller as :class:`PBTMemberError`.
"""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
import os
import shutil
import tempfile
import traceback
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, NoReturn

import torch

from torchrl._processes import (
    default_start_method,
    describe_exit,
    exit_worker,
    parent_gone,
    stop_processes,
    watch_parent,
)
from torchrl._utils import start_local_ray

__all__ = ["PBTMemberError", "make_backend"]

_has_ray = importlib.util.find_spec("ray") is not None

MemberFactory = Callable[[dict[str, Any], int], Any]
# How long a closing worker may take to end by itself before it is terminated.
_CLOSE_WAIT_S = 5.0
# The same after a failure: the other members may be busy training and will not answer soon.
_ABORT_WAIT_S = 1.0


class PBTMemberError(RuntimeError):
    """A population member failed: its code raised, or its process or actor died.

    Attributes:
        member: the index of the member.

    Examples:
        With the process backend, the worker's traceback is in the message (the failure stops
        every member's process):

        >>> from torchrl.trainers.pbt import ContinuousParam, PopulationBasedTraining
        >>> class Diverging:
        ...     def __init__(self, hparams, seed):
        ...         pass
        ...     def train(self, steps):
        ...         raise ValueError("the loss is NaN")
        ...     def state_dict(self):
        ...         return {}
        ...     def load_state_dict(self, state):
        ...         pass
        ...     def set_hparams(self, hparams):
        ...         pass
        >>> pbt = PopulationBasedTraining(Diverging, {"lr": ContinuousParam(0.001, 0.5)},
        ...     population_size=2, ready_interval=5, backend="process")
        >>> pbt.train(num_rounds=1)  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        ...
        PBTMemberError: PBT member 0: train failed in the worker: ... ValueError: the loss is NaN
    """

    def __init__(self, member: int, message: str) -> None:
        super().__init__(f"PBT member {member}: {message}")
        self.member = member


def _check_member(member: Any, index: int) -> None:
    missing = [
        name
        for name in ("train", "state_dict", "load_state_dict", "set_hparams")
        if not callable(getattr(member, name, None))
    ]
    if missing:
        raise TypeError(
            f"PBT member {index}: make_member returned a {type(member).__name__} without "
            f"{missing}; a member needs train, state_dict, load_state_dict and set_hparams"
        )


def _score(value: Any, index: int) -> float:
    try:
        return float(value)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"PBT member {index}: train() must return a number (the score), got {value!r}"
        ) from err


def _close_member(member: Any) -> None:
    close = getattr(member, "close", None)
    if callable(close):
        close()


class SerialBackend:
    """All members in this process, trained one after the other (deterministic)."""

    def __init__(self, make_member: MemberFactory, configs: Sequence[tuple[dict[str, Any], int]]):
        self.members: list[Any] = []
        try:
            for index, (hparams, seed) in enumerate(configs):
                member = make_member(dict(hparams), seed)
                _check_member(member, index)
                self.members.append(member)
        except BaseException:
            self.close()
            raise

    def train_all(self, amount: int) -> list[float]:
        return [_score(m.train(amount), i) for i, m in enumerate(self.members)]

    def copy_states(self, pairs: Sequence[tuple[int, int]]) -> None:
        states = {src: self.members[src].state_dict() for src, _ in pairs}
        for src, dst in pairs:
            self.members[dst].load_state_dict(states[src])

    def set_hparams(self, index: int, hparams: dict[str, Any]) -> None:
        self.members[index].set_hparams(dict(hparams))

    def get_state(self, index: int) -> dict[str, Any]:
        return self.members[index].state_dict()

    def set_state(self, index: int, state: dict[str, Any]) -> None:
        self.members[index].load_state_dict(state)

    def close(self) -> None:
        members, self.members = self.members, []
        for member in members:
            _close_member(member)


# -- worker processes ----------------------------------------------------------------------------
def _save_atomic(state: Any, path: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)


def _worker_main(
    index: int,
    conn: Connection,
    make_member: MemberFactory,
    hparams: dict[str, Any],
    seed: int,
    parent_pid: int,
    num_threads: int,
    tmpdir: str,
    inherited: list[Connection],
) -> None:
    # a parent killed outright cannot remove its temp dir: the first worker to see it gone does
    watch_parent(parent_pid, cleanup=(tmpdir,))
    # a forked worker holds copies of the parent's ends of the pipes opened so far
    for parent_end in inherited:
        parent_end.close()
    torch.set_num_threads(num_threads)
    member = None
    orphaned = False
    try:
        member = make_member(hparams, seed)
        _check_member(member, index)
        conn.send(("ok", None))
        while True:
            try:
                command, arg = conn.recv()
            except EOFError:
                # the parent closes its end only after a "close": it died (it may still look
                # alive for a moment: its files close before its children are re-parented)
                orphaned = True
                break
            if command == "close":
                break
            try:
                if command == "train":
                    result: Any = _score(member.train(arg), index)
                elif command == "save":
                    _save_atomic(member.state_dict(), arg)
                    result = None
                elif command == "load":
                    # our own file, written by a member of this run: not untrusted input
                    member.load_state_dict(torch.load(arg, weights_only=False))
                    result = None
                elif command == "set_hparams":
                    member.set_hparams(arg)
                    result = None
                else:
                    raise ValueError(f"unknown command {command!r}")
            except Exception:
                conn.send(("error", traceback.format_exc()))
            else:
                conn.send(("ok", result))
    except Exception:
        try:
            conn.send(("error", traceback.format_exc()))
        except OSError:
            pass
    finally:
        if member is not None:
            _close_member(member)
        conn.close()
    if orphaned or parent_gone():
        # the pipe's end of file came before the watchdog acted: do its clean-up here
        shutil.rmtree(tmpdir, ignore_errors=True)
        exit_worker(1)


def _stop_workers(
    procs: list[BaseProcess], conns: list[Connection], tmpdir: str, failed: list[bool]
) -> None:
    for conn in conns:
        try:
            conn.send(("close", None))
        except (OSError, ValueError):
            pass
    stop_processes(procs, _ABORT_WAIT_S if failed[0] else _CLOSE_WAIT_S)
    for conn in conns:
        conn.close()
    shutil.rmtree(tmpdir, ignore_errors=True)


class ProcessBackend:
    """One worker process per member; weights move through files in a private temp dir.

    The parent blocks on the members' pipes and process sentinels together, so a member that
    dies is reported (with how it ended) as soon as the OS says so. Workers end with their
    parent, and are stopped on :meth:`close`, on garbage collection and at interpreter exit.
    """

    def __init__(
        self,
        make_member: MemberFactory,
        configs: Sequence[tuple[dict[str, Any], int]],
        *,
        start_method: str | None = None,
        num_threads: int = 1,
        timeout: float | None = None,
    ) -> None:
        method = start_method or default_start_method()
        ctx: Any = mp.get_context(method)
        self.timeout = timeout
        self.tmpdir = tempfile.mkdtemp(prefix="torchrl-pbt-")
        self.procs: list[BaseProcess] = []
        self.conns: list[Connection] = []
        # set once a member failed: closing then does not wait long for busy members
        self._failed = [False]
        self._finalizer = weakref.finalize(
            self, _stop_workers, self.procs, self.conns, self.tmpdir, self._failed
        )
        try:
            for index, (hparams, seed) in enumerate(configs):
                parent_conn, child_conn = ctx.Pipe()
                inherited = [*self.conns, parent_conn] if method == "fork" else []
                proc = ctx.Process(
                    target=_worker_main,
                    args=(
                        index,
                        child_conn,
                        make_member,
                        dict(hparams),
                        seed,
                        os.getpid(),
                        num_threads,
                        self.tmpdir,
                        inherited,
                    ),
                    name=f"torchrl-pbt-member-{index}",
                    daemon=False,  # a member may start processes of its own (a ParallelEnv)
                )
                proc.start()
                child_conn.close()
                self.procs.append(proc)
                self.conns.append(parent_conn)
            self._gather(range(len(self.procs)), "start")
        except BaseException:
            self.close()
            raise

    def _gather(self, indices: Sequence[int] | range, what: str) -> dict[int, Any]:
        """Waits for one reply from each of ``indices``; raises on the first failure."""
        pending = {self.conns[i]: i for i in indices}
        results: dict[int, Any] = {}
        while pending:
            waitables: list[Any] = [*pending, *(self.procs[i].sentinel for i in pending.values())]
            ready = wait(waitables, self.timeout)
            if not ready:
                self._failed[0] = True
                late = sorted(pending.values())
                raise PBTMemberError(
                    late[0], f"no answer to {what!r} within {self.timeout} s (members {late})"
                )
            for conn, index in list(pending.items()):
                # a worker's last answer may still be in its pipe after it died: read it first
                if conn in ready or conn.poll():
                    del pending[conn]
                    try:
                        status, payload = conn.recv()
                    except (EOFError, OSError):
                        self._raise_dead(index, what)
                    if status == "error":
                        self._failed[0] = True
                        raise PBTMemberError(index, f"{what} failed in the worker:\n{payload}")
                    results[index] = payload
                elif self.procs[index].sentinel in ready:
                    self._raise_dead(index, what)
        return results

    def _raise_dead(self, index: int, what: str) -> NoReturn:
        self._failed[0] = True
        proc = self.procs[index]
        proc.join(1.0)
        raise PBTMemberError(
            index,
            f"its process (pid {proc.pid}) died during {what!r}: {describe_exit(proc.exitcode)}",
        )

    def _send(self, index: int, command: str, arg: Any) -> None:
        try:
            self.conns[index].send((command, arg))
        except (OSError, ValueError):
            self._raise_dead(index, command)

    def train_all(self, amount: int) -> list[float]:
        for index in range(len(self.procs)):
            self._send(index, "train", amount)
        results = self._gather(range(len(self.procs)), "train")
        return [results[i] for i in range(len(self.procs))]

    def copy_states(self, pairs: Sequence[tuple[int, int]]) -> None:
        sources = sorted({src for src, _ in pairs})
        for src in sources:
            self._send(src, "save", self._path(src))
        self._gather(sources, "save")
        targets = [dst for _, dst in pairs]
        for src, dst in pairs:
            self._send(dst, "load", self._path(src))
        self._gather(targets, "load")
        for src in sources:
            os.remove(self._path(src))

    def _path(self, index: int) -> str:
        return os.path.join(self.tmpdir, f"member-{index}.pt")

    def set_hparams(self, index: int, hparams: dict[str, Any]) -> None:
        self._send(index, "set_hparams", dict(hparams))
        self._gather([index], "set_hparams")

    def get_state(self, index: int) -> dict[str, Any]:
        path = self._path(index)
        self._send(index, "save", path)
        self._gather([index], "save")
        try:
            return torch.load(path, weights_only=False)
        finally:
            os.remove(path)

    def set_state(self, index: int, state: dict[str, Any]) -> None:
        path = self._path(index)
        _save_atomic(state, path)
        try:
            self._send(index, "load", path)
            self._gather([index], "load")
        finally:
            os.remove(path)

    def close(self) -> None:
        self._finalizer()


# -- Ray actors ----------------------------------------------------------------------------------
class _RayMember:
    """The body of a member's Ray actor."""

    def __init__(
        self,
        index: int,
        make_member: MemberFactory,
        hparams: dict[str, Any],
        seed: int,
        num_threads: int,
    ) -> None:
        torch.set_num_threads(num_threads)
        self.index = index
        self.member = make_member(hparams, seed)
        _check_member(self.member, index)

    def ready(self) -> bool:
        return True

    def train(self, amount: int) -> float:
        return _score(self.member.train(amount), self.index)

    def state_dict(self) -> dict[str, Any]:
        return self.member.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.member.load_state_dict(state)

    def set_hparams(self, hparams: dict[str, Any]) -> None:
        self.member.set_hparams(hparams)

    def close(self) -> None:
        _close_member(self.member)


class RayBackend:
    """One Ray actor per member; weights move through Ray's object store.

    Starts Ray (``ray.init(**ray_init_config)``) when it is not running, and shuts it down on
    :meth:`close` only then.
    """

    def __init__(
        self,
        make_member: MemberFactory,
        configs: Sequence[tuple[dict[str, Any], int]],
        *,
        num_threads: int = 1,
        timeout: float | None = None,
        ray_init_config: dict[str, Any] | None = None,
        ray_actor_options: dict[str, Any] | None = None,
    ) -> None:
        if not _has_ray:
            raise ImportError('backend="ray" needs ray: pip install "torchrl[ray]" (or ray)')
        import ray

        self._ray = ray
        self.timeout = timeout
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            start_local_ray(ray, dict(ray_init_config or {}), "PopulationBasedTraining")
        actor_cls = ray.remote(_RayMember)
        options = dict(ray_actor_options or {})
        self.actors: list[Any] = []
        try:
            for index, (hparams, seed) in enumerate(configs):
                self.actors.append(
                    actor_cls.options(**options).remote(
                        index, make_member, dict(hparams), seed, num_threads
                    )
                )
            self._get([a.ready.remote() for a in self.actors], range(len(self.actors)), "start")
        except BaseException:
            self.close()
            raise

    def _get(self, refs: list[Any], indices: Sequence[int] | range, what: str) -> list[Any]:
        """The results of ``refs`` in order; raises on the first failure to come, so a dead
        actor is reported without waiting for the others to finish."""
        ray = self._ray
        pending = {
            ref: (pos, index) for pos, (ref, index) in enumerate(zip(refs, indices, strict=True))
        }
        results: list[Any] = [None] * len(refs)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=self.timeout)
            if not ready:
                late = sorted(index for _, index in pending.values())
                raise PBTMemberError(
                    late[0], f"no answer to {what!r} within {self.timeout} s (members {late})"
                )
            for ref in ready:
                pos, index = pending.pop(ref)
                try:
                    results[pos] = ray.get(ref)
                except ray.exceptions.RayActorError as err:
                    raise PBTMemberError(
                        index, f"its Ray actor died during {what!r}: {err}"
                    ) from err
                except ray.exceptions.RayTaskError as err:
                    raise PBTMemberError(index, f"{what} failed in the actor:\n{err}") from err
        return results

    def train_all(self, amount: int) -> list[float]:
        refs = [actor.train.remote(amount) for actor in self.actors]
        return self._get(refs, range(len(self.actors)), "train")

    def copy_states(self, pairs: Sequence[tuple[int, int]]) -> None:
        states = {src: self.actors[src].state_dict.remote() for src, _ in pairs}
        refs = [self.actors[dst].load_state_dict.remote(states[src]) for src, dst in pairs]
        self._get(refs, [dst for _, dst in pairs], "load")

    def set_hparams(self, index: int, hparams: dict[str, Any]) -> None:
        self._get([self.actors[index].set_hparams.remote(dict(hparams))], [index], "set_hparams")

    def get_state(self, index: int) -> dict[str, Any]:
        return self._get([self.actors[index].state_dict.remote()], [index], "state_dict")[0]

    def set_state(self, index: int, state: dict[str, Any]) -> None:
        self._get([self.actors[index].load_state_dict.remote(state)], [index], "load")

    def close(self) -> None:
        ray = self._ray
        actors, self.actors = self.actors, []
        if actors:
            refs = [actor.close.remote() for actor in actors]
            try:
                ray.wait(refs, num_returns=len(refs), timeout=_CLOSE_WAIT_S)
            except Exception:  # noqa: BLE001 - a dead actor has nothing to close
                pass
            for actor in actors:
                ray.kill(actor)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
            self._owns_ray = False


Backend = SerialBackend | ProcessBackend | RayBackend


def make_backend(
    name: str,
    make_member: MemberFactory,
    configs: Sequence[tuple[dict[str, Any], int]],
    *,
    start_method: str | None = None,
    num_threads: int = 1,
    timeout: float | None = None,
    ray_init_config: dict[str, Any] | None = None,
    ray_actor_options: dict[str, Any] | None = None,
) -> Backend:
    """Builds the backend called ``name`` (``"serial"``, ``"process"`` or ``"ray"``)."""
    if name == "serial":
        return SerialBackend(make_member, configs)
    if name == "process":
        return ProcessBackend(
            make_member,
            configs,
            start_method=start_method,
            num_threads=num_threads,
            timeout=timeout,
        )
    if name == "ray":
        return RayBackend(
            make_member,
            configs,
            num_threads=num_threads,
            timeout=timeout,
            ray_init_config=ray_init_config,
            ray_actor_options=ray_actor_options,
        )
    raise ValueError(f"backend must be 'serial', 'process' or 'ray', got {name!r}")
