"""Small helpers shared by the examples: command-line config, deterministic evaluation, plot.

Nothing here is part of the library; each example keeps its training loop to itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from typing import Any, TypeVar

import torch

from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.objectives import total_loss

C = TypeVar("C")


def parse_config(cls: type[C], doc: str | None = None, argv: list[str] | None = None) -> C:
    """Builds a dataclass config from the command line: one ``--flag`` per field.

    A bool field ``progress`` becomes ``--no-progress``; other bools take ``true``/``false``.
    """
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else "")
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        flag = "--" + f.name.replace("_", "-")
        if isinstance(f.default, bool):
            if f.name == "progress":
                parser.add_argument("--no-progress", dest="progress", action="store_false")
            else:
                parser.add_argument(
                    flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=f.default
                )
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default)
    return cls(**vars(parser.parse_args(argv)))


@torch.no_grad()
def evaluate(env: Any, policy: Any, max_steps: int) -> float:
    """Mean return of one deterministic episode in each sub-env of a batched ``env``.

    The protocol of ``benchmarks/time_to_solve.py``: every call resets all sub-envs (fresh
    initial states; ``env`` is seeded once by the caller), runs the policy with its most likely
    action, and counts each sub-env's rewards up to (and including) its first ``done``; the
    rollout stops once every sub-env has finished or after ``max_steps`` steps. The episodes run
    side by side, as in SB3's vectorised ``evaluate_policy``, and are independent.
    """
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        rollout = env.rollout(max_steps, policy, break_when_all_done=True)
    reward = rollout["next", "reward"].reshape(*rollout.batch_size)
    done = rollout["next", "done"].reshape(*rollout.batch_size).long()
    alive_before = (done.cumsum(-1) - done) == 0
    return float((reward * alive_before).sum(-1).mean())


@torch.no_grad()
def evaluate_agents(env: Any, policy: Any, max_steps: int, group: str = "agents") -> float:
    """Mean per-agent return of one deterministic episode in each sub-env of a multi-agent ``env``.

    :func:`evaluate` for an env whose rewards are per agent (``("next", group, "reward")``,
    ``[E, T, n_agents, 1]``) and whose episodes end per sub-env (root ``("next", "done")``): each
    step's reward is averaged over the agents, then summed up to each sub-env's first ``done``.
    """
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        rollout = env.rollout(max_steps, policy, break_when_all_done=True)
    reward = rollout["next", group, "reward"].reshape(*rollout.batch_size, -1).mean(-1)
    done = rollout["next", "done"].reshape(*rollout.batch_size).long()
    alive_before = (done.cumsum(-1) - done) == 0
    return float((reward * alive_before).sum(-1).mean())


def evaluate_confirmed(
    env: Any, policy: Any, max_steps: int, target: float, confirm: bool = True
) -> float:
    """An :func:`evaluate` that, with ``confirm``, re-checks a passing score on fresh episodes.

    A policy that has just crossed the target often still fails some starting states, and a
    handful of evaluation episodes can pass by luck. With ``confirm``, a first evaluation that
    reaches ``target`` is followed by a second one on new initial states, and the lower of the two
    is returned: the caller counts the task solved only if both pass. A failing first evaluation
    is returned as it is (no second rollout).
    """
    ret = evaluate(env, policy, max_steps)
    if confirm and ret >= target:
        ret = min(ret, evaluate(env, policy, max_steps))
    return ret


def episode_returns(batch: Any, frames: int) -> list[tuple[int, float]]:
    """``(frames, return)`` for every episode that ends in ``batch`` (needs ``RewardSum``)."""
    nxt = batch["next"]
    if "episode_reward" not in nxt.keys():
        return []
    done = nxt["done"].squeeze(-1)
    return [(frames, float(r)) for r in nxt["episode_reward"].squeeze(-1)[done]]


def plot_curve(
    history: dict,
    path: str,
    title: str,
    target: float | None = None,
    xlabel: str = "frames",
    target_label: str = "target",
) -> str | None:
    """Writes a PNG of return vs frames (training episodes: dots, evaluations: line), says where.

    Returns the path written, or ``None`` when matplotlib is missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print('matplotlib is not installed, no plot: pip install "torchrl[plot]"')
        return None
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if history.get("train"):
        x, y = zip(*history["train"])
        ax.plot(x, y, ".", alpha=0.3, markersize=3, label="training episode return")
    if history.get("eval"):
        x, y = zip(*history["eval"])
        ax.plot(x, y, "o-", label="deterministic evaluation")
    if target is not None:
        ax.axhline(
            target, color="gray", linestyle="--", linewidth=1, label=f"{target_label} {target:.0f}"
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel("return")
    ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"learning curve written to {path}")
    return path


def report(
    name: str,
    history: dict,
    target: float | None,
    final_return: float,
    episodes: int | None = None,
) -> None:
    """Prints the one-line summary every example ends with.

    ``target=None`` (an example without a solve threshold) leaves out the target and whether it
    was reached; ``episodes`` says how many episodes the final evaluation averaged.
    """
    head = f"{name}: final deterministic evaluation return {final_return:.1f}"
    if target is None:
        head += f" ({episodes} episodes)" if episodes is not None else ""
    else:
        solved = history.get("solved_at")
        when = f"solved at {solved} frames" if solved is not None else "not solved"
        head += f" (target {target:g}); {when}"
    print(f"{head}; {history['frames']} frames in {history['wall']:.1f} s")


def train_from_config(cfg: Any, final_eval_episodes: int = 10) -> dict:
    """Builds the trainer ``cfg`` describes, trains it, then evaluates on fresh episodes.

    Args:
        cfg: a ``PPOTrainerConfig``/``SACTrainerConfig`` (see
            :mod:`torchrl.trainers.algorithms.configs`).
        final_eval_episodes: episodes of the final deterministic evaluation.

    Returns:
        The history: evaluations, frames, wall time, ``solved_at`` and ``final_return``.
    """
    from torchrl.envs import GymEnv
    from torchrl.trainers.algorithms.configs import build

    built = build(cfg)
    history: dict = {"train": [], "eval": built.eval_history, "solved_at": None}
    start = time.perf_counter()
    built.trainer.train()
    history["wall"] = time.perf_counter() - start
    history["frames"] = built.trainer.collected_frames
    if built.stopper is not None and built.stopper.stopped:
        history["solved_at"] = built.trainer.collected_frames
    if built.eval_env is not None:
        built.eval_env.close()
    final_env = GymEnv(cfg.env.name, num_envs=final_eval_episodes)
    final_env.set_seed(cfg.trainer.seed + 20_000)
    history["final_return"] = evaluate(final_env, built.actor, max_steps=cfg.eval.max_steps)
    final_env.close()
    return history


def split_script_flags(argv: list[str]) -> list[str]:
    """Turns ``--out DIR`` and ``--no-progress`` into config overrides; keeps the other arguments."""
    args, out = list(argv), []
    if "--no-progress" in args:
        args.remove("--no-progress")
        out.append("trainer.progress_bar=false")
    if "--out" in args:
        i = args.index("--out")
        out.append(f"logger.log_dir={args[i + 1]}")
        del args[i : i + 2]
    return args + out


def run_config_example(config_cls: type, config_file: str, name: str, title: str) -> None:
    """The ``__main__`` of a config-driven example: parse overrides, train, plot, report.

    Args:
        config_cls: the config dataclass (e.g. ``PPOTrainerConfig``).
        config_file: the YAML file with the example's defaults.
        name: the plot's file name (without ``.png``).
        title: the plot's and the report's title.
    """
    import sys

    from torchrl.trainers.algorithms.configs import run_with_config

    def main(cfg: Any) -> None:
        torch.set_num_threads(1)  # small networks: more threads only add overhead
        history = train_from_config(cfg)
        target = cfg.eval.target_return
        plot_curve(history, f"{cfg.logger.log_dir}/{name}.png", title, target)
        report(title, history, target, history["final_return"])

    sys.argv = [sys.argv[0], *split_script_flags(sys.argv[1:])]
    run_with_config(main, config_cls, config_file)


class AsyncRunTracker:
    """Bookkeeping of an asynchronous run: frames, wall time, training returns, policy lag.

    The running average training return is the mean of the last ``window`` finished training
    episodes (Sample Factory's "Avg episode reward" uses its last 100). ``update`` takes each
    batch the learner trains on and says whether that average has reached ``target_return``.
    Episode returns come from ``RewardSum``'s ``("next", "episode_reward")`` when the batch has
    it, else from the rewards themselves, summed per env (``("collector", "env_index")``)
    across the chunks of :class:`~torchrl.collectors.AsyncBatchedCollector`, which arrive in
    order: no per-env transform on the rollout workers' hot path (``RewardSum`` on each env
    costs them more than the env step).
    """

    def __init__(self, target_return: float | None, window: int = 100) -> None:
        import collections

        self.target_return = target_return
        self.returns: collections.deque[float] = collections.deque(maxlen=window)
        self.start = time.perf_counter()
        self.frames = 0
        self.curve: list[tuple[int, float, float]] = []
        self.episodes: list[tuple[int, float]] = []
        self.reached: dict | None = None
        self.lag_min, self.lag_max, self.lag_sum, self.lag_frames = None, None, 0.0, 0
        self._partial: dict[int, float] = {}  # return so far of each env's current episode

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def update(self, batch: Any, current_version: int | None, lag_stats: Any = None) -> bool:
        """Counts ``batch``; ``lag_stats`` is ``policy_lag_stats`` (skipped without versions)."""
        n = batch.batch_size.numel()
        self.frames += n
        if current_version is not None and "policy_version" in batch.keys() and n:
            s = lag_stats(batch, current_version)
            self.lag_min = s["min"] if self.lag_min is None else min(self.lag_min, s["min"])
            self.lag_max = s["max"] if self.lag_max is None else max(self.lag_max, s["max"])
            self.lag_sum += s["mean"] * n
            self.lag_frames += n
        finished = episode_returns(batch, self.frames)
        if not finished and ("collector", "env_index") in batch.keys(True):
            finished = self._summed_returns(batch)
        self.episodes += finished
        self.returns.extend(r for _, r in finished)
        if not finished:
            return self.reached is not None
        avg = sum(self.returns) / len(self.returns)
        wall = self.elapsed()
        self.curve.append((self.frames, wall, avg))
        full = len(self.returns) == self.returns.maxlen
        if (
            self.reached is None
            and self.target_return is not None
            and full
            and avg >= self.target_return
        ):
            self.reached = {"frames": self.frames, "wall_s": wall}
        return self.reached is not None

    def _summed_returns(self, batch: Any) -> list[tuple[int, float]]:
        """Returns of the episodes that end in ``batch``, from rewards summed per env."""
        rows = batch.batch_size[0]
        rewards = batch["next", "reward"].reshape(rows, -1).double()
        done = batch["next", "done"].reshape(rows, -1)
        envs = batch["collector", "env_index"][:, 0].tolist()
        out = []
        for row, env in enumerate(envs):
            carry = self._partial.get(env, 0.0)
            sums = rewards[row].cumsum(0)
            before = 0.0
            for end in done[row].nonzero().flatten().tolist():
                out.append((self.frames, carry + float(sums[end]) - before))
                before, carry = float(sums[end]), 0.0
            self._partial[env] = carry + float(sums[-1]) - before
        return out

    def result(self, wall_s: float) -> dict:
        """The figures every asynchronous example returns."""
        lag = None
        if self.lag_frames:
            lag = {"min": self.lag_min, "mean": self.lag_sum / self.lag_frames, "max": self.lag_max}
        return {
            "frames": self.frames,
            "wall_s": wall_s,
            "frames_per_s": self.frames / wall_s if wall_s > 0 else 0.0,
            "return_curve": self.curve,
            "reached_target": self.reached,
            "final_avg_return": self.curve[-1][2] if self.curve else None,
            "policy_lag": lag,
            # for plot_curve / report
            "train": self.episodes,
            "eval": [],
            "wall": wall_s,
            "solved_at": None if self.reached is None else self.reached["frames"],
        }


def optimizer_step(
    loss_fn: Any,
    optim: Any,
    loss: torch.Tensor,
    max_grad_norm: float,
    params: list[torch.Tensor] | None = None,
) -> None:
    """One gradient step with the gradient norm clipped (over ``params``, default: the loss's)."""
    optim.zero_grad()
    loss.backward()
    params = params if params is not None else list(loss_fn.parameters())
    torch.nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True)
    optim.step()


def ppo_phase(
    loss_fn: Any, optim: Any, batch: Any, epochs: int, minibatch_size: int, max_grad_norm: float
) -> None:
    """APPO's optimisation phase on one batch ``[rows, T]``: V-trace once, then PPO epochs.

    Advantages and value targets come from the loss's value estimator (V-trace) with the
    networks as they are before the phase; each epoch visits the flattened steps in random
    minibatches.
    """
    with torch.no_grad():
        loss_fn.value_estimator(batch)
    flat = batch.reshape(-1)
    params = list(loss_fn.parameters())
    n = flat.batch_size.numel()
    for _ in range(epochs):
        if minibatch_size >= n:  # one minibatch: the whole batch (its order does not matter)
            optimizer_step(loss_fn, optim, total_loss(loss_fn(flat)), max_grad_norm, params)
            continue
        for idx in torch.randperm(n).split(minibatch_size):
            optimizer_step(loss_fn, optim, total_loss(loss_fn(flat[idx])), max_grad_norm, params)


def appo_loss(
    actor: Any,
    critic: Any,
    *,
    lr: float,
    gamma: float,
    clip_epsilon: float = 0.2,
    entropy_coef: float = 0.0,
    rho_thresh: float = 1.0,
    c_thresh: float = 1.0,
) -> tuple[Any, Any]:
    """APPO's loss (``ClipPPOLoss`` with V-trace targets and advantages) and its Adam."""
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.utils import ValueEstimators

    loss_fn = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=clip_epsilon,
        entropy_coef=entropy_coef,
        entropy_bonus=entropy_coef > 0,
        normalize_advantage=True,
        loss_critic_type="l2",
        critic_coef=0.5,
    )
    loss_fn.make_value_estimator(
        ValueEstimators.VTrace, gamma=gamma, rho_thresh=rho_thresh, c_thresh=c_thresh
    )
    return loss_fn, torch.optim.Adam(loss_fn.parameters(), lr=lr, fused=True)


def run_async(
    collector: Any,
    tracker: AsyncRunTracker,
    learn: Any,
    *,
    stop_at_target: bool,
    progress: bool,
) -> float:
    """The asynchronous examples' loop; returns its wall time and shuts the collector down.

    Each batch is counted by ``tracker`` (returns, policy lag), handed to ``learn(batch)``,
    and the new weights go to the collector's inference server. With ``stop_at_target`` the
    loop ends once the tracker's average training return reached its target.
    """
    import inspect

    from torchrl.collectors import policy_lag_stats

    # AsyncBatchedCollector: the learner hands the weights over and goes on; the server applies
    # them before its next batch (the learner does not wait for that round trip)
    push = collector.update_policy_weights_
    no_wait = {"wait": False} if "wait" in inspect.signature(push).parameters else {}
    next_print = 0
    try:
        for batch in collector:
            if batch is None or batch.batch_size.numel() == 0:
                continue
            version = getattr(collector, "policy_version", None)
            if tracker.update(batch, version, policy_lag_stats) and stop_at_target:
                break
            learn(batch)
            push(**no_wait)
            if progress and tracker.curve and tracker.frames >= next_print:
                next_print += 10_000
                f, w, r = tracker.curve[-1]
                print(f"frames {f:>8d}  {w:6.1f} s  avg return {r:6.1f}  version {version}")
    finally:
        wall = tracker.elapsed()
        collector.shutdown()
    return wall


def make_async_collector(cfg: Any, make_env: Any, policy: Any) -> Any:
    """The collector of the asynchronous examples, from their config's fields.

    ``cfg.collector == "async_batched"``: :class:`~torchrl.collectors.AsyncBatchedCollector` (rollout
    workers and an inference server; batches ``[rows, T]`` with ``"policy_version"``).
    ``"multi_async"``: :class:`~torchrl.collectors.MultiaSyncDataCollector`, each worker
    running ``num_envs // num_workers`` envs (``make_env(n)`` builds ``n`` of them) and its own
    copy of the policy; its batches carry no policy version.
    """
    kind = cfg.collector
    if kind == "async_batched":
        from torchrl.collectors import AsyncBatchedCollector

        return AsyncBatchedCollector(
            create_env_fn=[make_env] * cfg.num_envs,
            policy=policy,
            frames_per_batch=cfg.frames_per_batch,
            total_frames=cfg.total_frames,
            num_workers=cfg.num_workers,
            num_splits=cfg.num_splits,
            max_policy_lag=None if cfg.max_policy_lag < 0 else cfg.max_policy_lag,
            seed=cfg.seed,
            policy_backend=cfg.policy_backend,
        )
    if kind == "multi_async":
        import functools

        from torchrl.collectors import MultiaSyncDataCollector

        per_worker = cfg.num_envs // cfg.num_workers
        collector = MultiaSyncDataCollector(
            [functools.partial(make_env, per_worker)] * cfg.num_workers,
            policy,
            frames_per_batch=cfg.frames_per_batch // cfg.num_workers,
            total_frames=cfg.total_frames,
        )
        collector.set_seed(cfg.seed)
        return collector
    raise ValueError(f"collector must be 'async_batched' or 'multi_async', got {kind!r}")
