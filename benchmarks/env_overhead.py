"""Env-layer overhead: frames per second of single, serial and parallel envs against their peers.

For CartPole-v1 and Pendulum-v1, with random actions and no policy, every loop resetting
finished episodes (no stop at the first done):

- ``raw_gymnasium``: ``env.step(env.action_space.sample())``, reset at episode ends;
- ``GymEnv rollout`` and ``GymEnv step_and_maybe_reset`` (ours): one env; rollouts (here and
  below) are calls of ``rollout(--rollout-steps, break_when_any_done=False)``, 500 steps by
  default, as a collector makes them;
- ``SerialEnv(8)``: 8 ``GymEnv`` stepped in this process (as one batch: ``GymWrapper``'s
  batched stepper), ``rollout``;
- ``ParallelEnv(2x4)``: 2 worker processes holding a ``SerialEnv(4)`` each, ``rollout``
  (also ``ParallelEnv(2x4 vec)``, workers holding a gymnasium vector env of 4, and
  ``ParallelEnv(8)``, one process per env);
- gymnasium's ``SyncVectorEnv(8)`` and ``AsyncVectorEnv(8)``: ``envs.step(sample())`` with their
  default autoreset;
- ``bare 2-process hand-off(2x4)``: 2 forked processes stepping 4 raw gymnasium envs each, data
  in one shared ``mmap``, one byte per pipe each way and nothing else (no library code on either
  side): the floor of any process-based vector env that sleeps while it waits, to read the
  ``ParallelEnv`` figures against (``bare_handoff_vs_serial`` in the summary);
- TorchRL's ``GymEnv`` / ``SerialEnv(8)`` / ``ParallelEnv(2x4)`` and SB3's ``DummyVecEnv(8)`` /
  ``SubprocVecEnv(8)``, run by ``benchmarks/_peers/env_overhead_peers.py`` under the peers' python
  (``TORCHRL_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``; skipped with a note when
  absent).

``steps_per_s`` counts env frames (sub-env steps) per second of wall time, best of ``--repeats``
runs of ``--frames`` frames, the loops of one env timed round-robin (so that the varying load
of a shared machine hits them alike); ``cpu_us_per_frame`` is this process's CPU time per frame (for the
in-process loops; it is not inflated by other processes on a shared machine). Torch runs with 1
thread (``torch.set_num_threads(1)``), and so do the workers. A last line compares ratios with
the targets of the issue. Prints one JSON object per line.

Our envs check every action against the action spec (``validate_actions``, on by default);
``--no-validate-actions`` builds them without the check, to show what it costs (run once with
and once without; ``--breakdown`` also times the check alone).

Usage: ``python benchmarks/env_overhead.py [--frames 16000] [--repeats 3] [--no-peers]
[--envs CartPole-v1,Pendulum-v1] [--profile NAME] [--breakdown] [--crossover]
[--no-validate-actions]``
(``--profile`` prints a cProfile of the named measurement to stderr, e.g. ``--profile
"SerialEnv(8)"``; ``--breakdown`` adds the CPU cost of each layer of a batched step;
``--crossover`` times ``ParallelEnv(2x4)`` against ``SerialEnv(8)`` on a CartPole whose step
burns 0-200 extra microseconds of CPU, to show where processes start to pay).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from torchrl.envs import GymEnv, GymWrapper, ParallelEnv, SerialEnv

torch.set_num_threads(1)

N_ENVS = 8
ROLLOUT_STEPS = 500
RESULTS: dict[tuple[str, str], float] = {}
# Our envs check actions against their spec unless --no-validate-actions.
VALIDATE_ACTIONS = True
HANDOFF = "bare 2-process hand-off(2x4)"


def _emit(**record: object) -> None:
    print(json.dumps({"bench": "env_overhead", **record}), flush=True)


class _Case:
    """One loop to time: ``run()`` makes ``frames`` frames; ``close()`` releases its env."""

    def __init__(
        self,
        impl: str,
        loop: str,
        frames: int,
        run: Callable[[], None],
        close: Callable[[], None] = lambda: None,
    ) -> None:
        self.impl, self.loop, self.frames, self.run, self.close = impl, loop, frames, run, close
        self.best_wall = self.best_cpu = float("inf")


def _run_cases(env_name: str, cases: list[_Case], repeats: int) -> None:
    """Times the cases round-robin (each once per round), keeping each one's best run.

    Interleaving exposes every case alike to the load of a shared machine, which varies over a
    run; every case runs once untimed first (warm caches, workers up).
    """
    try:
        for case in cases:
            case.run()
        for _ in range(repeats):
            for case in cases:
                cpu, wall = time.process_time(), time.perf_counter()
                case.run()
                case.best_wall = min(case.best_wall, time.perf_counter() - wall)
                case.best_cpu = min(case.best_cpu, time.process_time() - cpu)
    finally:
        for case in cases:
            case.close()
    for case in cases:
        RESULTS[(env_name, case.impl)] = case.frames / case.best_wall
        _emit(
            env=env_name,
            impl=case.impl,
            loop=case.loop,
            steps_per_s=round(case.frames / case.best_wall),
            us_per_frame=round(case.best_wall / case.frames * 1e6, 2),
            cpu_us_per_frame=round(case.best_cpu / case.frames * 1e6, 2),
            torch_threads=torch.get_num_threads(),
            validate_actions=VALIDATE_ACTIONS,
        )


# ---------------------------------------------------------------------------------- gymnasium
def gymnasium_cases(env_name: str, frames: int) -> list[_Case]:
    import gymnasium as gym

    env = gym.make(env_name)
    env.reset(seed=0)
    env.action_space.seed(0)

    def raw() -> None:
        step, sample, reset = env.step, env.action_space.sample, env.reset
        for _ in range(frames):
            _, _, terminated, truncated, _ = step(sample())
            if terminated or truncated:
                reset()

    cases = [_Case("raw_gymnasium", "env.step loop", frames, raw, env.close)]
    make = partial(gym.make, env_name)
    for name, cls in (
        ("SyncVectorEnv(8)", gym.vector.SyncVectorEnv),
        ("AsyncVectorEnv(8)", gym.vector.AsyncVectorEnv),
    ):
        cases.append(_vector(name, cls([make] * N_ENVS), frames))
    handoff = _ProcessHandOff(env_name, workers=2, per_worker=N_ENVS // 2)
    steps = frames // N_ENVS

    def run_handoff() -> None:
        step = handoff.step
        for _ in range(steps):
            step()

    cases.append(_Case(HANDOFF, "step loop", steps * N_ENVS, run_handoff, handoff.close))
    return cases


class _ProcessHandOff:
    """The floor of a process-based vector env that sleeps while it waits (no spinning).

    ``workers`` forked processes each step ``per_worker`` raw gymnasium envs (reset at episode
    ends); actions, observations, rewards and done flags live in one shared ``mmap``; a step is
    one byte written to each worker's pipe and one byte read back from each: no library code on
    either side, no pickling, no checks. Every process-based design (ours, gymnasium's
    ``AsyncVectorEnv``, SB3's ``SubprocVecEnv``) pays at least these hand-offs, so a step cheaper
    than this one is only reachable in one process (or by spinning).
    """

    def __init__(self, env_name: str, workers: int, per_worker: int) -> None:
        import mmap

        import gymnasium as gym

        probe = gym.make(env_name)
        space = probe.action_space
        self.discrete = isinstance(space, gym.spaces.Discrete)
        n, obs_dim = workers * per_worker, int(np.prod(probe.observation_space.shape))
        act_dim = 1 if self.discrete else int(np.prod(space.shape))
        self.high = None if self.discrete else (space.low, space.high)
        probe.close()
        sizes = [(np.float32, n * obs_dim), (np.float32, n), (np.bool_, n)]
        sizes.append((np.int64 if self.discrete else np.float32, n * act_dim))
        self.memory = mmap.mmap(-1, sum(np.dtype(t).itemsize * k + 64 for t, k in sizes))
        arrays, offset = [], 0
        for dtype, count in sizes:
            arrays.append(np.frombuffer(self.memory, dtype, count, offset))
            offset += np.dtype(dtype).itemsize * count + 64
        obs, reward, done, action = arrays
        self.obs, self.reward, self.done = obs.reshape(n, obs_dim), reward, done
        self.action = action if self.discrete else action.reshape(n, act_dim)
        self.rng = np.random.default_rng(0)
        self.n, self.pids, self.pipes = n, [], []
        for w in range(workers):
            (cmd_r, cmd_w), (ack_r, ack_w) = os.pipe(), os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker
                os.close(cmd_w)
                os.close(ack_r)
                for _, theirs in self.pipes:
                    os.close(theirs)
                code = 0
                try:
                    self._serve(env_name, range(w * per_worker, (w + 1) * per_worker), cmd_r, ack_w)
                except BaseException:
                    code = 1
                os._exit(code)
            os.close(cmd_r)
            os.close(ack_w)
            self.pids.append(pid)
            self.pipes.append((ack_r, cmd_w))

    def _serve(self, env_name: str, rows: range, cmd: int, ack: int) -> None:
        import gymnasium as gym

        envs = [gym.make(env_name) for _ in rows]
        for row, env in zip(rows, envs):
            self.obs[row] = env.reset(seed=row)[0]
        obs, reward, done, action = self.obs, self.reward, self.done, self.action
        while os.read(cmd, 1) == b"s":
            for row, env in zip(rows, envs):
                o, r, terminated, truncated, _ = env.step(action[row])
                if terminated or truncated:
                    o = env.reset()[0]
                obs[row], reward[row], done[row] = o, r, terminated or truncated
            os.write(ack, b"k")

    def step(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Random actions in, fresh copies of the observations, rewards and dones out."""
        if self.discrete:
            self.action[:] = self.rng.integers(0, 2, self.n)
        else:
            self.action[:] = self.rng.uniform(*self.high, size=self.action.shape)
        for _, cmd in self.pipes:
            os.write(cmd, b"s")
        for ack, _ in self.pipes:
            if os.read(ack, 1) != b"k":
                raise RuntimeError("a hand-off worker died")
        return self.obs.copy(), self.reward.copy(), self.done.copy()

    def close(self) -> None:
        for ack, cmd in self.pipes:
            # a quit byte, not EOF: processes forked later (other cases' workers) hold copies
            # of the write end
            try:
                os.write(cmd, b"q")
            except OSError:  # that worker is gone already
                pass
            os.close(cmd)
            os.close(ack)
        for pid in self.pids:
            os.waitpid(pid, 0)
        self.pipes, self.pids = [], []


def _vector(name: str, envs, frames: int) -> _Case:
    envs.reset(seed=0)
    envs.action_space.seed(0)
    steps = frames // N_ENVS

    def run() -> None:
        step, sample = envs.step, envs.action_space.sample
        for _ in range(steps):
            step(sample())

    return _Case(name, "envs.step loop (autoreset)", steps * N_ENVS, run, envs.close)


# --------------------------------------------------------------------------------------- ours
def _rollout(env, steps: int) -> Callable[[], None]:
    """``steps`` steps as rollouts of ``ROLLOUT_STEPS`` steps (a collector's batch, not one
    rollout of ``steps``: a rollout keeps every step alive until it stacks them)."""

    def run() -> None:
        done = 0
        while done < steps:
            n = min(ROLLOUT_STEPS, steps - done)
            env.rollout(n, break_when_any_done=False)
            done += n

    return run


def _validated(env: Any) -> Any:
    """``env`` with ``validate_actions`` as asked (batched envs check at their own level)."""
    env.validate_actions = VALIDATE_ACTIONS
    return env


def our_cases(env_name: str, frames: int) -> list[_Case]:
    # the flag travels in the partial: worker processes build their envs from it
    make = partial(GymEnv, env_name, validate_actions=VALIDATE_ACTIONS)
    env = make()
    env.set_seed(0)

    def step_loop() -> None:
        td = env.reset()
        rand_action, step_and_maybe_reset = env.rand_action, env.step_and_maybe_reset
        for _ in range(frames):
            td = rand_action(td)
            _, td = step_and_maybe_reset(td)

    cases = [
        _Case("GymEnv", "rollout", frames, _rollout(env, frames)),
        _Case("GymEnv step_and_maybe_reset", "loop", frames, step_loop, env.close),
    ]
    steps = frames // N_ENVS
    vec = partial(GymEnv, env_name, num_envs=4, validate_actions=VALIDATE_ACTIONS)
    batched = [
        ("SerialEnv(8)", lambda: SerialEnv(N_ENVS, make)),
        ("ParallelEnv(2x4)", lambda: ParallelEnv(2, partial(SerialEnv, 4, make))),
        ("ParallelEnv(2x4 vec)", lambda: ParallelEnv(2, vec)),
        ("ParallelEnv(8)", lambda: ParallelEnv(N_ENVS, make)),
    ]
    for name, build in batched:
        benv = _validated(build())
        benv.set_seed(0)
        cases.append(_Case(name, "rollout", steps * N_ENVS, _rollout(benv, steps), benv.close))
    return cases


def _profile(case: _Case) -> None:
    profiler = cProfile.Profile()
    profiler.runcall(case.run)
    pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)


# ---------------------------------------------------------------------------------- breakdown
def breakdown(env_name: str, steps: int) -> None:
    """CPU microseconds per batched step of each layer of ``SerialEnv(8)`` and the parallel one.

    Random actions; finished episodes are reset as in a rollout. For ``ParallelEnv(2x4)``, the
    CPU time of the parent and of each worker (read from ``/proc``) per batched step.
    """
    make = partial(GymEnv, env_name, validate_actions=VALIDATE_ACTIONS)
    serial = _validated(SerialEnv(N_ENVS, make))
    serial.set_seed(0)
    envs = serial.envs
    actions = [serial.action_spec.rand()[i] for i in range(N_ENVS)]
    tds = [env.reset() for env in envs]
    for td, action in zip(tds, actions):
        td.set("action", action)
    gym_envs = [env.env for env in envs]
    gym_actions = [env._write_action(action) for env, action in zip(envs, actions)]

    def cpu_us(fn: Callable[[], None], calls: int = steps) -> float:
        fn()
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            for _ in range(calls):
                fn()
            best = min(best, time.process_time() - start)
        return best / calls * 1e6

    def gym_steps() -> None:
        for env, action in zip(gym_envs, gym_actions):
            if env.step(action)[2]:
                env.reset()

    def wrapper_steps() -> None:
        for env, td in zip(envs, tds):
            if env._step(td)["done"]:
                env._reset(None)

    state = {"td": serial.reset()}

    def serial_step() -> None:
        td = serial.rand_action(state["td"])
        state["td"] = serial.step_and_maybe_reset(td)[1]

    single = GymEnv(env_name)
    single_action = single.rand_action(single.reset())["action"]
    # a single env checks while converting its action: the checked conversion minus the plain
    checked, plain = single._checked_write, single._write_action
    state["td"] = serial.rand_action(state["td"])
    serial_check = serial._spec_cache().check_actions
    records = {
        "action check alone (GymEnv)": cpu_us(lambda: checked(single_action), steps * 10)
        - cpu_us(lambda: plain(single_action), steps * 10),
        "action check alone (SerialEnv(8))": cpu_us(lambda: serial_check(state["td"]), steps * 10),
        "gymnasium env.step x8": cpu_us(gym_steps),
        "GymEnv._step x8": cpu_us(wrapper_steps),
        "EnvBase.rand_action (batch 8)": cpu_us(lambda: serial.rand_action(state["td"])),
        "SerialEnv(8) rand_action + step_and_maybe_reset": cpu_us(serial_step),
        "SerialEnv(8) rollout, per step": cpu_us(_rollout(serial, ROLLOUT_STEPS), 1)
        / ROLLOUT_STEPS,
    }
    serial.close()
    single.close()
    for name, value in records.items():
        _emit(env=env_name, breakdown=name, cpu_us_per_batched_step=round(value, 1))
    parallel = _validated(ParallelEnv(2, partial(SerialEnv, 4, make)))
    parallel.set_seed(0)
    state["td"] = parallel.reset()

    def proc_cpu(pid: int) -> float:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def parallel_step() -> None:
        td = parallel.rand_action(state["td"])
        state["td"] = parallel.step_and_maybe_reset(td)[1]

    parallel_step()
    pids = parallel.worker_pids
    before = [proc_cpu(pid) for pid in pids]
    start, wall = time.process_time(), time.perf_counter()
    for _ in range(steps):
        parallel_step()
    parent = (time.process_time() - start) / steps * 1e6
    wall = (time.perf_counter() - wall) / steps * 1e6
    workers = [(proc_cpu(pid) - b) / steps * 1e6 for pid, b in zip(pids, before)]
    parallel.close()
    _emit(
        env=env_name,
        breakdown="ParallelEnv(2x4) rand_action + step_and_maybe_reset",
        wall_us_per_batched_step=round(wall, 1),
        parent_cpu_us_per_batched_step=round(parent, 1),
        worker_cpu_us_per_batched_step=[round(w, 1) for w in workers],
    )


# ---------------------------------------------------------------------------------- crossover
def _burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _costly_cartpole(cost_us: float) -> GymWrapper:
    """CartPole whose step also burns ``cost_us`` of CPU: a stand-in for a costlier simulator.

    The cost is burnt inside the gymnasium env (a gymnasium wrapper), so that our envs step it
    as any gymnasium env, ``SerialEnv``'s batched path included.
    """
    import gymnasium as gym

    class Costly(gym.Wrapper):
        def step(self, action):
            _burn(cost_us * 1e-6)
            return self.env.step(action)

    return GymWrapper(Costly(gym.make("CartPole-v1")), validate_actions=VALIDATE_ACTIONS)


def crossover(repeats: int) -> None:
    """``ParallelEnv(2x4)`` against ``SerialEnv(8)`` as the env step gets costlier."""
    for cost in (0, 25, 50, 100, 200):
        make = partial(_costly_cartpole, cost)
        steps = 200
        cases = [
            _Case(f"SerialEnv(8) +{cost}us", "rollout", steps * N_ENVS, lambda: None),
            _Case(f"ParallelEnv(2x4) +{cost}us", "rollout", steps * N_ENVS, lambda: None),
        ]
        envs = [SerialEnv(N_ENVS, make), ParallelEnv(2, partial(SerialEnv, 4, make))]
        envs = [_validated(env) for env in envs]
        for case, env in zip(cases, envs):
            env.set_seed(0)
            case.run, case.close = _rollout(env, steps), env.close
        _run_cases(f"CartPole-v1 +{cost}us/step", cases, repeats)
        serial, parallel = (c.frames / c.best_wall for c in cases)
        _emit(env="CartPole-v1", extra_cost_us=cost, parallel_vs_serial=round(parallel / serial, 2))


# -------------------------------------------------------------------------------------- peers
def bench_peers(envs: list[str], frames: int, repeats: int) -> None:
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    script = Path(__file__).parent / "_peers" / "env_overhead_peers.py"
    if not Path(python).exists():
        _emit(impl="peers", note=f"skipped: no peers python at {python}")
        return
    # Our package is also called torchrl: run the peers outside this repo's import path.
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environ["OMP_NUM_THREADS"] = "1"
    cmd = [python, str(script), "--frames", str(frames), "--repeats", str(repeats)]
    cmd += ["--envs", ",".join(envs), "--rollout-steps", str(ROLLOUT_STEPS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd="/", env=environ, timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            print(line, flush=True)
            record = json.loads(line)
            if "steps_per_s" in record:
                RESULTS[(record["env"], record["impl"])] = record["steps_per_s"]
    if proc.returncode != 0:
        _emit(impl="peers", note="failed", stderr=proc.stderr[-1500:])


def _summary(envs: list[str]) -> None:
    def ratio(env_name: str, a: str, b: str) -> float | None:
        x, y = RESULTS.get((env_name, a)), RESULTS.get((env_name, b))
        return round(x / y, 2) if x and y else None

    for env_name in envs:
        gym_env = RESULTS.get((env_name, "GymEnv"))
        _emit(
            env=env_name,
            summary="ratios (targets: GymEnv CartPole >= 15k/s and >= 4x TorchRL's; batched "
            ">= 0.5x gymnasium's vector envs; ParallelEnv >= 1x SerialEnv)",
            gymenv_steps_per_s=round(gym_env) if gym_env else None,
            gymenv_vs_torchrl=ratio(env_name, "GymEnv", "torchrl GymEnv"),
            gymenv_vs_raw=ratio(env_name, "GymEnv", "raw_gymnasium"),
            serial_vs_sync=ratio(env_name, "SerialEnv(8)", "SyncVectorEnv(8)"),
            bare_handoff_vs_serial=ratio(env_name, HANDOFF, "SerialEnv(8)"),
            parallel_2x4_vs_bare_handoff=ratio(env_name, "ParallelEnv(2x4)", HANDOFF),
            serial_vs_torchrl=ratio(env_name, "SerialEnv(8)", "torchrl SerialEnv(8)"),
            **{
                f"{name}_vs_{other}": ratio(env_name, impl, ref)
                for name, impl in (
                    ("parallel_2x4", "ParallelEnv(2x4)"),
                    ("parallel_2x4_vec", "ParallelEnv(2x4 vec)"),
                    ("parallel_8", "ParallelEnv(8)"),
                )
                for other, ref in (
                    ("async", "AsyncVectorEnv(8)"),
                    ("serial", "SerialEnv(8)"),
                    ("torchrl", "torchrl ParallelEnv(2x4)"),
                )
            },
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=16000, help="frames per timed run")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (the best is kept)")
    parser.add_argument("--envs", default="CartPole-v1,Pendulum-v1")
    parser.add_argument("--no-peers", action="store_true", help="skip TorchRL and SB3")
    parser.add_argument("--profile", default=None, help="cProfile one measurement of ours")
    parser.add_argument("--breakdown", action="store_true", help="CPU cost of each layer")
    parser.add_argument(
        "--crossover", action="store_true", help="ParallelEnv vs SerialEnv on costlier steps"
    )
    parser.add_argument("--rollout-steps", type=int, default=500, help="steps per rollout call")
    parser.add_argument(
        "--no-validate-actions",
        action="store_true",
        help="build our envs with validate_actions=False (no action checks)",
    )
    args = parser.parse_args()
    global ROLLOUT_STEPS, VALIDATE_ACTIONS
    ROLLOUT_STEPS = args.rollout_steps
    VALIDATE_ACTIONS = not args.no_validate_actions
    np.random.seed(0)
    torch.manual_seed(0)
    envs = args.envs.split(",")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    _emit(
        note="setup",
        torch_threads=1,
        cpus=os.cpu_count(),
        load_avg_1min=load,
        validate_actions=VALIDATE_ACTIONS,
    )
    for env_name in envs:
        cases = gymnasium_cases(env_name, args.frames) + our_cases(env_name, args.frames)
        for case in cases:
            if case.impl == args.profile:
                _profile(case)
        _run_cases(env_name, cases, args.repeats)
        if args.breakdown:
            breakdown(env_name, max(args.frames // N_ENVS, 100))
    if args.crossover:
        crossover(args.repeats)
    if not args.no_peers:
        bench_peers(envs, args.frames, args.repeats)
    _summary(envs)


if __name__ == "__main__":
    main()
