"""Parent side of test_processes.py: builds multi-process components, reports their workers' pids.

The test SIGKILLs the process running these functions and checks that the workers go too.
``run(kind, blocked, conn)`` runs in a process forked from the test (fast);
``python _orphan_child.py`` runs every component in a fresh interpreter and prints to stdout:
first ``ERROR <message>`` (a collector worker killed in a forked child; that child exits
normally) and ``LEFT <pymp dirs>`` (what it left in the temp dir), then ``PIDS <pids>`` once
every component is built, then waits to be killed.
"""

from __future__ import annotations

import glob
import multiprocessing as mp
import os
import signal
import tempfile
import time
from typing import Any

from _envs import CountingEnv

KINDS = ("ParallelEnv", "MultiSyncDataCollector", "MultiaSyncDataCollector")


class BlockingEnv(CountingEnv):
    """A ``CountingEnv`` whose step never returns: it creates ``<marker_dir>/<pid>`` and sleeps."""

    def __init__(self, marker_dir: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.marker_dir = marker_dir

    def _step(self, tensordict):
        open(os.path.join(self.marker_dir, str(os.getpid())), "w").close()
        time.sleep(120)
        return super()._step(tensordict)


class ClosingEnv(CountingEnv):
    """A ``CountingEnv`` that creates ``<closed_dir>/<pid>`` when it is closed."""

    def __init__(self, closed_dir: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.closed_dir = closed_dir

    def close(self, *args: Any, **kwargs: Any) -> None:
        open(os.path.join(self.closed_dir, str(os.getpid())), "w").close()
        super().close(*args, **kwargs)


def build(
    kind: str,
    marker_dir: str | None = None,
    closed_dir: str | None = None,
    start_method: str | None = None,
) -> tuple[Any, list[int]]:
    """Builds ``kind`` with 2 workers (stepping ``BlockingEnv`` if ``marker_dir`` is given;
    ``ClosingEnv`` if ``closed_dir`` is)."""
    from functools import partial

    from torchrl.collectors import MultiaSyncDataCollector, MultiSyncDataCollector
    from torchrl.envs import ParallelEnv

    env_fn: Any = CountingEnv
    if marker_dir is not None:
        env_fn = partial(BlockingEnv, marker_dir)
    elif closed_dir is not None:
        env_fn = partial(ClosingEnv, closed_dir)
    if kind == "ParallelEnv":
        env = ParallelEnv(2, env_fn, mp_start_method=start_method)
        env.reset()
        return env, env.worker_pids
    cls = {"MultiSyncDataCollector": MultiSyncDataCollector}.get(kind, MultiaSyncDataCollector)
    collector = cls([env_fn] * 2, frames_per_batch=4, total_frames=-1, mp_start_method=start_method)
    return collector, [p.pid for p in collector._procs]


def run(
    kind: str,
    marker_dir: str | None,
    conn: Any,
    closed_dir: str | None = None,
    start_method: str | None = None,
) -> None:
    """Builds ``kind``, sends its workers' pids, then waits (in a step that blocks if asked)."""
    component, pids = build(kind, marker_dir, closed_dir, start_method)
    if marker_dir is None:
        if kind != "ParallelEnv":
            component.next()  # workers are idle after a batch, waiting on their pipes
        conn.send(pids)
        time.sleep(120)
        return
    conn.send(pids)
    if kind == "ParallelEnv":
        component.rand_step(component.reset())  # blocks: the workers never answer
    else:
        component.next()


def _kill_a_worker(conn: Any) -> None:
    from torchrl.collectors import MultiSyncDataCollector, WorkerError

    collector = MultiSyncDataCollector([CountingEnv] * 2, frames_per_batch=4, total_frames=-1)
    collector.next()
    os.kill(collector._procs[1].pid, signal.SIGKILL)
    try:
        while True:
            collector.next()
    except WorkerError as err:
        conn.send(str(err))
    collector.shutdown()


def main() -> None:
    ctx = mp.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_kill_a_worker, args=(sender,))
    child.start()
    sender.close()  # the child holds the only write end: its death ends recv() with EOFError
    if not receiver.poll(120):
        child.kill()
        raise SystemExit("the collector child sent nothing within 120 s")
    try:
        print("ERROR", receiver.recv(), flush=True)
    except EOFError:
        child.join()
        raise SystemExit(f"the collector child died first (exit code {child.exitcode})") from None
    child.join()
    left = [os.path.join(tempfile.gettempdir(), pattern) for pattern in ("pymp-*", "torchrl-*")]
    print("LEFT", [path for pattern in left for path in glob.glob(pattern)], flush=True)
    built = [build(kind) for kind in KINDS]
    for component, _ in built[1:]:
        component.next()
    print("PIDS", " ".join(str(pid) for _, pids in built for pid in pids), flush=True)
    time.sleep(120)


if __name__ == "__main__":
    main()


# ------------------------------------------------------------------ distributed components
# Their workers are ``spawn`` processes (fresh interpreters): seconds to start, so they are not
# in KINDS (whose every case runs in the default suite).
DISTRIBUTED_KINDS = ("DistributedDataCollector", "RPCReplayBuffer")

from torchrl.data import ReplayBuffer  # noqa: E402 - (appended section)


class LateBlockingEnv(BlockingEnv):
    """A ``BlockingEnv`` that blocks from its ``after + 1``-th step on (a worker of
    ``DistributedDataCollector`` collects its first batch while it starts)."""

    def __init__(self, marker_dir: str, after: int = 4, **kwargs: Any) -> None:
        super().__init__(marker_dir, **kwargs)
        self.after = after
        self.steps = 0

    def _step(self, tensordict):
        self.steps += 1
        if self.steps <= self.after:
            return CountingEnv._step(self, tensordict)
        return super()._step(tensordict)


class BlockingBuffer(ReplayBuffer):
    """A ``ReplayBuffer`` whose ``extend`` never returns: it creates ``<marker_dir>/<pid>``."""

    def __init__(self, marker_dir: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.marker_dir = marker_dir

    def extend(self, data: Any) -> Any:
        open(os.path.join(self.marker_dir, str(os.getpid())), "w").close()
        time.sleep(120)
        return super().extend(data)


def build_distributed(
    kind: str, marker_dir: str | None = None, launcher: str = "mp"
) -> tuple[Any, list[int]]:
    """Builds ``kind`` (``DistributedDataCollector``: 1 worker, launched by ``launcher``:
    ``"mp"``, or ``"submitit"`` on its local cluster; ``RPCReplayBuffer``: its host),
    blocking in its step or ``extend`` if ``marker_dir`` is given. Returns it and the pids."""
    from functools import partial

    if kind == "RPCReplayBuffer":
        from torchrl.collectors.distributed import RPCReplayBuffer
        from torchrl.data import LazyTensorStorage

        if marker_dir is None:
            rb = RPCReplayBuffer(storage=LazyTensorStorage(10), rpc_timeout=60.0)
        else:
            rb = RPCReplayBuffer(marker_dir, replay_buffer_cls=BlockingBuffer, rpc_timeout=60.0)
        return rb, [rb._process.pid]
    from torchrl.collectors.distributed import DistributedDataCollector

    env_fn: Any = CountingEnv
    if marker_dir is not None:
        env_fn = partial(LateBlockingEnv, marker_dir, 4)
    # (no submitit folder given: the collector makes one in the temp dir)
    slurm = {"cluster": "local", "timeout_min": 5}
    collector = DistributedDataCollector(
        env_fn,
        None,
        num_workers=1,
        launcher=launcher,
        slurm_kwargs=slurm,
        frames_per_batch=4,
        total_frames=-1,
        timeout=60,
    )
    return collector, list(collector.pids)


def run_distributed(
    kinds: tuple[str, ...],
    marker_dir: str | None,
    conn: Any,
    temp_root: str | None = None,
    launcher: str = "mp",
) -> None:
    """Builds each of ``kinds``, makes it idle after one use (or blocked in it if
    ``marker_dir`` is given: one kind only), and sends the pids of their processes.

    ``temp_root``: this process's (and so the workers') temp dir, for the test to look at.
    """
    if temp_root is not None:
        os.environ["TMPDIR"] = temp_root
        tempfile.tempdir = None
    built = [build_distributed(kind, marker_dir, launcher) for kind in kinds]
    if marker_dir is None:
        for component, _ in built:
            if hasattr(component, "sample"):
                len(component)  # the RPC group is formed at the first call
            else:
                next(iter(component))  # the worker is idle on its socket after a batch
        conn.send([pid for _, pids in built for pid in pids])
        time.sleep(120)
        return
    ((component, pids),) = built
    conn.send(pids)
    if hasattr(component, "sample"):
        import torch
        from tensordict import TensorDict

        component.extend(TensorDict(obs=torch.zeros(2), batch_size=[2]))  # blocks
    else:
        it = iter(component)
        next(it)  # the batch collected at start
        next(it)  # blocks: the worker's env step never returns
