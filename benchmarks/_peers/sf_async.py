"""Sample Factory 2's APPO on CartPole-v1 or HalfCheetah, for ``benchmarks/async_throughput.py``.

Runs INSIDE the Sample Factory venv (``SF_PYTHON``, default ``/work/sf-venv/bin/python``; our
package is also called ``torchrl``, so the driver starts this script with a working directory
outside our repository). Usage::

    python sf_async.py --task cartpole --seed 0 --out result.json [--target-return 475]
        [--stop-at-target] [--max-frames N] [--max-seconds S] [--network matched|sf_default]
        [-- EXTRA_SF_FLAGS...]

Every figure comes from Sample Factory's own bookkeeping, read while it trains:

- frames: the runner's ``env_steps[0]``, the env steps the learner has consumed (what SF prints
  as "Total num frames").
- average training return: the mean of the runner's ``policy_avg_stats["reward"][0]``, the last
  ``--stats_avg`` (100) finished training episodes; SF prints it as "Avg episode reward". The
  target counts once that window is full (as in our examples).
- policy lag: the learner's ``version_diff_min/avg/max`` train statistics (current policy version
  minus the version that collected each sample of a minibatch; one version per SGD step), caught
  from every train-stats message the runner receives (SF prints the latest as "Policy #0 lag").
- SF's own frames/s: the "Fps is (10 sec: ...)" reports and the final "Collected ..., FPS: ..."
  line, caught from SF's ``rl`` logger.

Times: ``t0`` is when this script started (before importing torch and SF), ``on_start`` when SF's
event loop starts (its ``AlgoObserver.on_start``: the sampler and learner processes start right
then), and each training iteration is time-stamped in ``AlgoObserver.on_training_step``. SF 2.1.1
never advances ``total_train_seconds``, so ``--train_for_seconds`` has no effect; this script ends
a run by setting ``cfg.train_for_env_steps`` below the frames done, which SF's runner checks after
every training iteration (the same path as a normal end of training).

The result (one JSON object) is written to ``--out``; SF's logs go to stdout/stderr.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

# Network and sampling settings shared by both tasks: the worker layout and a 2x64 tanh
# MLP for the actor and (separately, as ours) for the critic. With ``use_rnn False`` SF's core is
# the identity and the decoder is empty by default, so each head is one linear layer on top of
# its own 2x64 encoder.
COMMON_FLAGS = [
    "--algo=APPO",
    "--device=cpu",
    "--num_workers=2",
    "--num_envs_per_worker=8",
    "--use_rnn=False",
    "--recurrence=1",
    "--encoder_mlp_layers",
    "64",
    "64",
    "--nonlinearity=tanh",
    "--actor_critic_share_weights=False",
    "--async_rl=True",
    # No periodic checkpoints while timing (SF still saves once when training stops).
    "--save_every_sec=1000000",
    "--save_best_every_sec=1000000",
]
# ``--network sf_default``: SF's own default network for the task instead of ours, one encoder
# shared by actor and critic: 2x512 ELU for CartPole (what SF's CartPole example trains with),
# 2x64 tanh for HalfCheetah (SF's MuJoCo defaults).
SF_DEFAULT_NETWORK_FLAGS = {
    "cartpole": ["--encoder_mlp_layers", "512", "512", "--nonlinearity=elu"],
    "halfcheetah": [],
}
# CartPole: the settings of SF's own CartPole example (sf_examples/train_gym_env.py docstring),
# except the worker layout above.
CARTPOLE_FLAGS = [
    "--env=CartPole-v1",
    "--with_vtrace=False",
    "--batch_size=512",
    "--reward_scale=0.1",
]
# HalfCheetah: SF's MuJoCo defaults (sf_examples/mujoco/mujoco_params.py) apply, then the flags
# above override the worker layout and the (already 2x64 tanh) network; async_rl is turned on
# (the MuJoCo defaults run SF synchronously).


def halfcheetah_id() -> str:
    """The newest HalfCheetah version this gymnasium registers (0.29 stops at v4; v5 is 1.x)."""
    import gymnasium as gym

    for version in ("v5", "v4"):
        if f"HalfCheetah-{version}" in gym.envs.registry:
            return f"HalfCheetah-{version}"
    raise RuntimeError("gymnasium registers neither HalfCheetah-v5 nor HalfCheetah-v4")


def make_gym_env(full_env_name, cfg=None, env_config=None, render_mode=None):
    """SF's env factory: the env name registered with SF is the gymnasium id."""
    import gymnasium as gym

    return gym.make(full_env_name, render_mode=render_mode)


def make_cfg(
    task: str,
    seed: int,
    train_dir: str,
    max_frames: int,
    extra: list[str],
    network: str = "matched",
):
    """Registers the env with SF and parses SF's full config for ``task``."""
    if network not in ("matched", "sf_default"):
        raise ValueError(f"network: expected 'matched' or 'sf_default', got {network!r}")
    from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
    from sample_factory.envs.env_utils import register_env

    argv = [*COMMON_FLAGS]
    if task == "cartpole":
        env_id = "CartPole-v1"
        argv += CARTPOLE_FLAGS
    elif task == "halfcheetah":
        env_id = halfcheetah_id()
        argv += [f"--env={env_id}"]
    else:
        raise ValueError(f"--task: expected 'cartpole' or 'halfcheetah', got {task!r}")

    register_env(env_id, make_gym_env)
    if network == "sf_default":
        argv += [*SF_DEFAULT_NETWORK_FLAGS[task], "--actor_critic_share_weights=True"]
    argv += [
        f"--seed={seed}",
        f"--train_dir={train_dir}",
        f"--experiment={task}_seed{seed}",
        f"--train_for_env_steps={max_frames}",
        *extra,
    ]
    parser, partial = parse_sf_args(argv=argv)
    if task == "halfcheetah":
        from sf_examples.mujoco.mujoco_params import mujoco_override_defaults

        mujoco_override_defaults(partial.env, parser)
    return parse_full_cfg(parser, argv), env_id, argv


class SFLogCatcher(logging.Handler):
    """Keeps SF's own frames/s reports from its ``rl`` logger."""

    FPS = re.compile(r"Fps is \(10 sec: ([-\w.]+), 60 sec: ([-\w.]+), 300 sec: ([-\w.]+)\)")
    FINAL = re.compile(r"Collected .*, FPS: ([\d.]+)")

    def __init__(self, clock) -> None:
        super().__init__(level=logging.DEBUG)
        self.clock = clock
        self.fps_reports: list[tuple[float, float, float]] = []  # (t, 10 s, 60 s)
        self.final_fps: float | None = None

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        match = self.FPS.search(message)
        if match:
            self.fps_reports.append((self.clock(), float(match.group(1)), float(match.group(2))))
            return
        match = self.FINAL.search(message)
        if match:
            self.final_fps = float(match.group(1))


def train(args: argparse.Namespace) -> dict:
    """Trains SF's APPO on ``args.task`` and returns the measured figures."""
    from sample_factory.algo.runners.runner import AlgoObserver
    from sample_factory.algo.utils.misc import TRAIN_STATS, ExperimentStatus
    from sample_factory.train import make_runner
    from sample_factory.utils.utils import log

    # SF's checkpoints, config and summaries go to a fresh folder, removed afterwards.
    train_dir = tempfile.mkdtemp(prefix="sf_async_", dir=args.train_dir_parent)
    cfg, env_id, argv = make_cfg(
        args.task, args.seed, train_dir, args.max_frames, args.extra, args.network
    )
    clock = time.perf_counter
    catcher = SFLogCatcher(clock)
    log.addHandler(catcher)
    state: dict = {
        "on_start": None,
        "steps": [],  # (t, frames, avg return or None, episodes in the average)
        "reached": None,
        "stop_reason": None,
        "lag": [],  # (min, avg, max) per train-stats report
    }

    def on_train_stats(runner, msg, policy_id) -> None:
        stats = msg[TRAIN_STATS]
        if policy_id == 0 and "version_diff_avg" in stats:
            state["lag"].append(
                (
                    float(stats["version_diff_min"]),
                    float(stats["version_diff_avg"]),
                    float(stats["version_diff_max"]),
                )
            )

    class Recorder(AlgoObserver):
        def on_start(self, runner) -> None:
            state["on_start"] = clock()

        def on_training_step(self, runner, training_iteration_since_resume: int) -> None:
            now = clock()
            frames = runner.env_steps.get(0)
            if frames is None:
                return
            rewards = runner.policy_avg_stats.get("reward", [[]])[0]
            avg = float(sum(rewards) / len(rewards)) if len(rewards) else None
            state["steps"].append((now, int(frames), avg, len(rewards)))
            # As our examples, count the target only once the average covers a full window.
            full = len(rewards) >= runner.cfg.stats_avg
            target = args.target_return
            if full and target is not None and avg >= target and state["reached"] is None:
                state["reached"] = (int(frames), now)
                if args.stop_at_target:
                    state["stop_reason"] = "target"
            if state["stop_reason"] is None and now - state["on_start"] > args.max_seconds:
                state["stop_reason"] = "max_seconds"
            if state["stop_reason"] is not None:
                # SF ends training after this call when every policy's frames exceed this.
                runner.cfg.train_for_env_steps = -1

    cfg, runner = make_runner(cfg)
    runner.register_observer(Recorder())
    runner.policy_msg_handlers[TRAIN_STATS].append(on_train_stats)
    try:
        status = runner.init()
        if status == ExperimentStatus.SUCCESS:
            status = runner.run()
    finally:
        t_exit = clock()
        log.removeHandler(catcher)
        shutil.rmtree(train_dir, ignore_errors=True)
    return summarize(args, state, catcher, t_exit, int(status), cfg, env_id, argv)


def summarize(args, state, catcher, t_exit, status, cfg, env_id, argv) -> dict:
    """Turns the recorded training iterations into the benchmark's JSON record."""
    steps = state["steps"]
    if not steps or state["on_start"] is None:
        raise RuntimeError(f"Sample Factory recorded no training iteration (status {status})")
    t_start = state["on_start"]
    t_first, frames_first = steps[0][0], steps[0][1]
    t_last, frames = steps[-1][0], steps[-1][1]
    wall = t_last - t_start
    averages = [s for s in steps if s[2] is not None]
    curve, next_t = [], 0.0
    for t, f, avg, _ in averages:
        # One point a second keeps the record short.
        if t - t_start >= next_t or (t, f) == (t_last, frames):
            curve.append((f, round(t - t_start, 3), round(avg, 3)))
            next_t = t - t_start + 1.0
    lag = state["lag"]
    reached = state["reached"]
    sf_fps10 = [r[1] for r in catcher.fps_reports if not math.isnan(r[1])]
    return {
        "lib": "sample_factory",
        "task": args.task,
        "env_id": env_id,
        "network": args.network,
        "seed": args.seed,
        "status": status,
        "stop_reason": state["stop_reason"] or "max_frames",
        "frames": frames,
        "wall_s": round(wall, 3),
        "frames_per_s": round(frames / wall, 1) if wall > 0 else None,
        "startup_s": round(t_start - T0, 3),
        "wall_s_with_startup": round(t_last - T0, 3),
        "frames_per_s_with_startup": round(frames / (t_last - T0), 1),
        "first_iteration_s": round(t_first - t_start, 3),
        "steady_frames_per_s": (
            round((frames - frames_first) / (t_last - t_first), 1) if t_last > t_first else None
        ),
        "shutdown_s": round(t_exit - t_last, 3),
        "sf_fps_10s_median": (round(sorted(sf_fps10)[len(sf_fps10) // 2], 1) if sf_fps10 else None),
        "sf_fps_main_loop": catcher.final_fps,
        "target_return": args.target_return,
        "reached_target": (
            {"frames": reached[0], "wall_s": round(reached[1] - t_start, 3)} if reached else None
        ),
        "final_avg_return": round(averages[-1][2], 3) if averages else None,
        "return_curve": curve,
        "policy_lag": (
            {
                "min": min(x[0] for x in lag),
                "mean": round(sum(x[1] for x in lag) / len(lag), 3),
                "max": max(x[2] for x in lag),
                "reports": len(lag),
                "unit": "SGD steps (SF bumps the policy version after every optimizer step)",
            }
            if lag
            else None
        ),
        "sf_config": {
            "argv": argv,
            "batch_size": cfg.batch_size,
            "rollout": cfg.rollout,
            "num_epochs": cfg.num_epochs,
            "num_batches_per_epoch": cfg.num_batches_per_epoch,
            "learning_rate": cfg.learning_rate,
            "with_vtrace": cfg.with_vtrace,
            "worker_num_splits": cfg.worker_num_splits,
            "batched_sampling": cfg.batched_sampling,
            "encoder_mlp_layers": list(cfg.encoder_mlp_layers),
            "nonlinearity": cfg.nonlinearity,
            "actor_critic_share_weights": cfg.actor_critic_share_weights,
            "normalize_input": cfg.normalize_input,
            "stats_avg": cfg.stats_avg,
        },
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "python": sys.executable,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, choices=["cartpole", "halfcheetah"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="path of the JSON result")
    parser.add_argument(
        "--train-dir-parent", default=None, help="where SF's temporary train_dir goes"
    )
    parser.add_argument(
        "--target-return", type=float, default=None, help="average training return to reach"
    )
    parser.add_argument("--stop-at-target", action="store_true")
    parser.add_argument(
        "--network",
        default="matched",
        choices=["matched", "sf_default"],
        help="matched: our 2x64 tanh actor and critic; sf_default: SF's default shared encoder",
    )
    parser.add_argument("--max-frames", type=int, default=2_000_000)
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("extra", nargs="*", help="extra Sample Factory flags (after --)")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    result = train(args)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
