"""``Evaluator``: evaluation rollouts run inline or in a background thread during training.

The evaluator owns an eval env and its own copy of the policy. Each evaluation first copies
the training weights into that copy (in the caller's thread, so training may go on changing
its weights), then runs episodes with the exploration mode switched off and reports metrics:
to the caller (:meth:`Evaluator.poll`, :meth:`Evaluator.wait`), to an ``on_result`` callback
and to a :class:`~torchrl.record.loggers.Logger`. The episode statistics (:func:`episode_returns`,
:func:`first_episodes`) are shared with the trainers' ``Recorder`` hook.
"""

from __future__ import annotations

import copy
import os
import shutil
import threading
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection, wait
from typing import Any, Literal, cast

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from torchrl._keys import DONE, NEXT, REWARD
from torchrl._processes import describe_exit, use_temp_dir, watch_parent, worker_temp_dir
from torchrl._types import NestedKey
from torchrl.collectors._policy import WeightsLike, copy_weights, named_weights
from torchrl.collectors._pool import WorkerError
from torchrl.envs.common import EnvBase
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.record.loggers.common import Logger, as_float

__all__ = [
    "Evaluator",
    "dump_videos",
    "episode_returns",
    "first_episodes",
    "rollout_entry",
]

#: Steps of one evaluation rollout when ``max_steps`` is not given (an episode that has not
#: ended by then is counted as it stands).
DEFAULT_MAX_STEPS = 10_000


def episode_returns(reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
    """Returns of the episodes that end inside a rollout (all of it when none ends).

    Args:
        reward: ``[*B, T, 1]`` (or ``[*B, T]``) rewards.
        done: done flags of the same shape.

    Returns:
        A 1-D tensor with one return per finished episode (or per sub-env when none finished).

    Examples:
        >>> r = torch.ones(1, 5, 1)
        >>> d = torch.tensor([[0, 1, 0, 0, 1]]).bool().unsqueeze(-1)
        >>> episode_returns(r, d)
        tensor([2., 3.])
    """
    if reward.shape != done.shape:
        raise ValueError(
            f"episode_returns: reward {tuple(reward.shape)} and done {tuple(done.shape)} differ"
        )
    if reward.shape[-1] == 1 and reward.ndim >= 2:
        reward, done = reward.squeeze(-1), done.squeeze(-1)
    rows_r = reward.reshape(-1, reward.shape[-1]).float()
    rows_d = done.reshape(-1, done.shape[-1]).bool()
    if not rows_d.any():
        return rows_r.sum(-1)
    # Episode ids per row: steps after a done belong to the next episode.
    n, t = rows_r.shape
    episode = torch.cumsum(rows_d.long(), -1) - rows_d.long()
    ids = episode + torch.arange(n, device=episode.device).unsqueeze(-1) * (t + 1)
    sums = torch.zeros(n * (t + 1), device=rows_r.device).index_add_(
        0, ids.reshape(-1), rows_r.reshape(-1)
    )
    finished = ids[rows_d]
    return sums[finished]


def first_episodes(
    reward: torch.Tensor, done: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return and length of the first episode of every sub-env of a rollout.

    A sub-env that never finishes contributes the whole rollout (its episode is truncated).

    Args:
        reward: ``[*B, T, 1]`` (or ``[*B, T]``) rewards, time last (before the trailing 1).
        done: done flags of the same shape.

    Returns:
        ``(returns, lengths, finished)``: three 1-D tensors with one entry per sub-env
        (``prod(B)`` entries, one for an unbatched rollout).

    Examples:
        >>> r = torch.ones(2, 4, 1)
        >>> d = torch.tensor([[0, 1, 0, 1], [0, 0, 0, 0]]).bool().unsqueeze(-1)
        >>> first_episodes(r, d)
        (tensor([2., 4.]), tensor([2, 4]), tensor([ True, False]))
    """
    if reward.shape != done.shape:
        raise ValueError(
            f"first_episodes: reward {tuple(reward.shape)} and done {tuple(done.shape)} differ"
        )
    if reward.shape[-1] == 1 and reward.ndim >= 2:
        reward, done = reward.squeeze(-1), done.squeeze(-1)
    rows_r = reward.reshape(-1, reward.shape[-1]).float()
    rows_d = done.reshape(-1, done.shape[-1]).bool()
    # a step belongs to the first episode while no done came before it
    before = torch.cumsum(rows_d.long(), -1) - rows_d.long()
    first = before == 0
    returns = (rows_r * first).sum(-1)
    return returns, first.sum(-1), rows_d.any(-1)


def dump_videos(env: Any) -> None:
    """Writes the videos of the env's ``VideoRecorder`` transforms (one per evaluation).

    Args:
        env: an env; transforms with a ``dump()`` method and a ``logger`` are dumped.
    """
    transform = getattr(env, "transform", None)
    if not isinstance(transform, nn.Module):
        return
    for module in transform.modules():
        dump = getattr(module, "dump", None)
        if callable(dump) and hasattr(module, "logger"):
            dump()


@torch.no_grad()
def _evaluate_once(
    env: EnvBase,
    policy: Callable[[TensorDictBase], Any] | None,
    num_trajectories: int,
    max_steps: int | None,
    reward_key: NestedKey,
    done_key: NestedKey,
    exploration_type: ExplorationType,
    metrics_fn: Callable[[list[TensorDictBase]], dict[str, float]] | None,
    dump_video: bool,
) -> dict[str, torch.Tensor]:
    """One evaluation: rollouts until ``num_trajectories`` episodes, then their statistics."""
    training = isinstance(policy, nn.Module) and policy.training
    if training:
        cast(nn.Module, policy).eval()
    returns: list[torch.Tensor] = []
    lengths: list[torch.Tensor] = []
    rollouts: list[TensorDictBase] = []
    count = 0
    try:
        with set_exploration_type(exploration_type):
            while count < num_trajectories:
                rollout = env.rollout(
                    max_steps or DEFAULT_MAX_STEPS,
                    policy,
                    break_when_any_done=False,
                    break_when_all_done=True,
                )
                rollouts.append(rollout)
                r, n, _ = first_episodes(
                    rollout_entry(rollout, reward_key, "Evaluator"),
                    rollout_entry(rollout, done_key, "Evaluator"),
                )
                returns.append(r)
                lengths.append(n)
                count += r.numel()
    finally:
        if training:
            cast(nn.Module, policy).train()
    if dump_video:
        dump_videos(env)
    ret = torch.cat(returns)[:num_trajectories]
    length = torch.cat(lengths)[:num_trajectories].float()
    metrics = {
        "reward": ret.mean(),
        "reward_std": ret.std() if ret.numel() > 1 else torch.zeros(()),
        "episode_length": length.mean(),
        "num_episodes": torch.tensor(ret.numel()),
    }
    if metrics_fn is not None:
        for name, value in metrics_fn(rollouts).items():
            metrics[name] = torch.as_tensor(value)
    return metrics


class Evaluator:
    """Runs evaluation episodes of a policy, blocking or in the background (thread or process).

    :meth:`evaluate` blocks and returns the metrics; :meth:`trigger_eval` starts an evaluation
    in a background thread and returns at once; :meth:`poll` (non-blocking) and :meth:`wait`
    fetch its result, and :attr:`pending` says whether one runs. Every evaluation copies the
    given weights into the evaluator's own policy first, in the caller's thread. Results are
    TensorDicts of scalars: ``"<log_prefix>/reward"`` (mean return of the episodes),
    ``"<log_prefix>/reward_std"``, ``"<log_prefix>/episode_length"``,
    ``"<log_prefix>/num_episodes"``, ``"<log_prefix>/step"`` and the ``metrics_fn`` entries.
    An evaluation error is raised again by :meth:`poll`, :meth:`wait` or :meth:`evaluate`.

    Args:
        env: the eval env, or a function that builds it.
        policy: the policy to evaluate: a module is deep-copied (weights then come from
            :meth:`trigger_eval`), any other callable is used as is; ``None``: random actions.
        policy_factory: builds the evaluator's policy instead of copying ``policy``.
        num_trajectories: episodes per evaluation (the first episode of each sub-env of a
            batched env counts; rollouts are repeated until there are enough).
        max_steps: steps of a rollout at most (an unfinished episode counts as it stands).
        log_prefix: the prefix of the metric names.
        reward_keys: the reward entry of the rollouts.
        done_keys: the done entry of the rollouts.
        exploration_type: the exploration mode of the rollouts (deterministic by default).
        metrics_fn: extra metrics, computed from the list of rollouts of an evaluation.
        dump_video: dump the videos of the env's ``VideoRecorder`` transforms after each one.
        on_result: called with each result, in the thread that produced it (with
            ``backend="process"``, a thread of this process reading the result).
        busy_policy: what :meth:`trigger_eval` does while an evaluation runs: ``"skip"``
            (return ``False``) or ``"error"`` (raise ``RuntimeError``).
        backend: ``"thread"`` (this process) or ``"process"``: a ``spawn`` process builds
            ``env()`` (a picklable constructor) and its own policy, receives the weights of
            each evaluation and sends back the metrics; it ends with this process, and a
            crash fails the evaluation with :class:`~torchrl.collectors.WorkerError`. (See
            :class:`RayEvalWorker <torchrl.collectors.distributed.RayEvalWorker>` for a Ray
            actor.)
        logger: a logger receiving every metric (``log_scalar``) at ``step``.
        eval_interval: the frames between two evaluations of :meth:`maybe_trigger_eval`.

    Examples:
        >>> from torchrl.collectors import Evaluator
        >>> from torchrl.envs import PendulumEnv
        >>> evaluator = Evaluator(PendulumEnv, None, num_trajectories=2, max_steps=5)
        >>> result = evaluator.evaluate(step=100)
        >>> int(result["eval/num_episodes"]), int(result["eval/step"])
        (2, 100)
        >>> evaluator.shutdown()
    """

    def __init__(
        self,
        env: EnvBase | Callable[[], EnvBase],
        policy: Callable[[TensorDictBase], Any] | None = None,
        *,
        policy_factory: Callable[[], Callable[[TensorDictBase], Any]] | None = None,
        num_trajectories: int = 10,
        max_steps: int | None = None,
        log_prefix: str = "eval",
        reward_keys: NestedKey = (NEXT, REWARD),
        done_keys: NestedKey = (NEXT, DONE),
        exploration_type: ExplorationType = ExplorationType.DETERMINISTIC,
        metrics_fn: Callable[[list[TensorDictBase]], dict[str, float]] | None = None,
        dump_video: bool = True,
        on_result: Callable[[TensorDictBase], None] | None = None,
        busy_policy: Literal["skip", "error"] = "skip",
        backend: Literal["thread", "process"] = "thread",
        logger: Logger | None = None,
        eval_interval: int | None = None,
    ) -> None:
        if backend not in ("thread", "process"):
            raise ValueError(
                f"Evaluator: backend={backend!r} is not supported; use 'thread' or 'process' "
                "(or torchrl.collectors.distributed.RayEvalWorker for a Ray actor)"
            )
        if backend == "process" and (isinstance(env, EnvBase) or not callable(env)):
            raise TypeError(
                "Evaluator(backend='process') builds its env in the evaluation process: pass "
                f"a picklable env constructor, not {type(env).__name__}"
            )
        if busy_policy not in ("skip", "error"):
            raise ValueError(
                f"Evaluator: busy_policy must be 'skip' or 'error', got {busy_policy!r}"
            )
        if isinstance(num_trajectories, bool) or not isinstance(num_trajectories, int):
            raise TypeError(f"Evaluator: num_trajectories must be an int, got {num_trajectories!r}")
        if num_trajectories < 1:
            raise ValueError(f"Evaluator: num_trajectories must be >= 1, got {num_trajectories}")
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"Evaluator: max_steps must be >= 1, got {max_steps}")
        if eval_interval is not None and eval_interval < 1:
            raise ValueError(f"Evaluator: eval_interval must be >= 1, got {eval_interval}")
        if policy is not None and policy_factory is not None:
            raise ValueError("Evaluator: pass policy or policy_factory, not both")
        self.backend = backend
        self.env: EnvBase | None = None
        if backend == "thread":
            built = env if isinstance(env, EnvBase) else env()
            if not isinstance(built, EnvBase):
                raise TypeError(
                    f"Evaluator: env must be an EnvBase or build one, got {type(built)}"
                )
            self.env = built
        self._source = policy
        self.policy: Callable[[TensorDictBase], Any] | None
        if policy_factory is not None:
            self.policy = policy_factory()
        elif isinstance(policy, nn.Module):
            self.policy = copy.deepcopy(policy)
        else:
            self.policy = policy
        self._weights = named_weights(self.policy) if isinstance(self.policy, nn.Module) else {}
        self.num_trajectories = num_trajectories
        self.max_steps = max_steps
        self.log_prefix = log_prefix
        self.reward_key = reward_keys
        self.done_key = done_keys
        self.exploration_type = exploration_type
        self.metrics_fn = metrics_fn
        self.dump_video = dump_video
        self.on_result = on_result
        self.busy_policy = busy_policy
        self.logger = logger
        self.eval_interval = eval_interval
        self._next_eval = 0
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._future: Future[TensorDictBase] | None = None
        self._closed = False
        self._process: _EvalProcess | None = None
        if backend == "process":
            child_policy = None if policy_factory is not None else self.policy
            self._process = _EvalProcess(
                cast(Callable[[], EnvBase], env), child_policy, policy_factory, self._settings()
            )

    # -------------------------------------------------------------------------------- running
    @property
    def pending(self) -> bool:
        """Whether a background evaluation is under way."""
        return self._future is not None and not self._future.done()

    def _load(self, weights: WeightsLike | None) -> None:
        source = weights if weights is not None else self._source
        if not self._weights or source is None or source is self.policy:
            return
        if not isinstance(source, (nn.Module, TensorDictBase, dict)) and not hasattr(
            source, "items"
        ):
            raise TypeError(
                f"Evaluator: weights must be a module, a state dict or a TensorDict, got "
                f"{type(source).__name__}"
            )
        with torch.no_grad():
            copy_weights(self._weights, cast(WeightsLike, source))

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Evaluator was shut down; build a new one")

    def evaluate(
        self, weights: WeightsLike | None = None, step: int | None = None
    ) -> TensorDictBase:
        """Runs one evaluation now and returns its metrics.

        Args:
            weights: a module, a state dict or a TensorDict of weights for the evaluator's
                policy (default: the current weights of the ``policy`` given at construction).
            step: the training step (frames) the result is logged at.

        Returns:
            The metrics (see the class description).
        """
        self._check_open()
        if self.pending:
            raise RuntimeError("Evaluator.evaluate: a background evaluation is running; wait()")
        with self._lock:
            self._load(weights)
            if self._process is None:
                return self._run(step)
            future = self._process.submit(self._snapshot(), step, self._finish)
        future.exception()  # blocks until the evaluation process answers
        return self._result(future)

    def trigger_eval(self, weights: WeightsLike | None = None, step: int | None = None) -> bool:
        """Starts an evaluation in the background thread and returns at once.

        The weights are copied before this returns, so the caller may change its own.

        Args:
            weights: as for :meth:`evaluate`.
            step: as for :meth:`evaluate`.

        Returns:
            ``True`` when an evaluation started, ``False`` when one was running
            (``busy_policy="skip"``).

        Raises:
            RuntimeError: with ``busy_policy="error"``, when an evaluation is running.
        """
        self._check_open()
        if self.pending:
            if self.busy_policy == "error":
                raise RuntimeError(
                    "Evaluator.trigger_eval: an evaluation is already running "
                    "(busy_policy='error'); poll() or wait() for it first"
                )
            return False
        with self._lock:
            self._load(weights)
            if self._process is not None:
                self._future = self._process.submit(self._snapshot(), step, self._finish)
                return True
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="torchrl-evaluator")
        self._future = self._executor.submit(self._run_locked, step)
        return True

    def maybe_trigger_eval(self, weights: WeightsLike | None = None, step: int = 0) -> bool:
        """Triggers an evaluation when ``step`` reached the next multiple of ``eval_interval``.

        Args:
            weights: as for :meth:`evaluate`.
            step: the frames collected so far.

        Returns:
            Whether an evaluation started.
        """
        if self.eval_interval is None:
            raise RuntimeError("Evaluator.maybe_trigger_eval needs eval_interval=...")
        if step < self._next_eval:
            return False
        started = self.trigger_eval(weights, step)
        if started:
            self._next_eval = (step // self.eval_interval + 1) * self.eval_interval
        return started

    def poll(self) -> TensorDictBase | None:
        """The result of the last background evaluation once it is done (once), else ``None``.

        Raises:
            RuntimeError: the evaluation failed (the original error is chained).
        """
        future = self._future
        if future is None or not future.done():
            return None
        self._future = None
        return self._result(future)

    def wait(self, timeout: float | None = None) -> TensorDictBase | None:
        """Waits for the background evaluation and returns its result (``None``: none ran).

        Args:
            timeout: seconds to wait at most (``None``: no limit).

        Raises:
            TimeoutError: the evaluation did not end in time (it goes on; wait again).
            RuntimeError: the evaluation failed (the original error is chained).
        """
        future = self._future
        if future is None:
            return None
        try:
            future.exception(timeout)
        except TimeoutError:
            raise TimeoutError(
                f"Evaluator.wait: the evaluation did not end in {timeout} s"
            ) from None
        self._future = None
        return self._result(future)

    def _result(self, future: Future[TensorDictBase]) -> TensorDictBase:
        err = future.exception()
        if err is not None:
            raise RuntimeError(f"Evaluator: the evaluation failed: {err!r}") from err
        return future.result()

    def _run_locked(self, step: int | None) -> TensorDictBase:
        with self._lock:
            return self._run(step)

    def _snapshot(self) -> dict[str, torch.Tensor]:
        """A CPU copy of the staged weights, for the evaluation process."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self._weights.items()}

    def _settings(self) -> dict[str, Any]:
        return {
            "num_trajectories": self.num_trajectories,
            "max_steps": self.max_steps,
            "reward_key": self.reward_key,
            "done_key": self.done_key,
            "exploration_type": self.exploration_type,
            "metrics_fn": self.metrics_fn,
            "dump_video": self.dump_video,
        }

    def _run(self, step: int | None) -> TensorDictBase:
        assert self.env is not None  # (the thread backend owns its env)
        return self._finish(_evaluate_once(self.env, self.policy, **self._settings()), step)

    def _finish(self, metrics: dict[str, Any], step: int | None) -> TensorDictBase:
        """Names the metrics, logs them and hands them to ``on_result``."""
        p = self.log_prefix
        named = {f"{p}/{k}": torch.as_tensor(v) for k, v in metrics.items()}
        named[f"{p}/step"] = torch.tensor(-1 if step is None else int(step))
        result = TensorDict(named, batch_size=[])
        if self.logger is not None:
            for name, value in named.items():
                if not name.endswith("/step"):
                    self.logger.log_scalar(name, as_float(value), step=step)
        if self.on_result is not None:
            self.on_result(result)
        return result

    # ------------------------------------------------------------------------------ life cycle
    def shutdown(self, timeout: float | None = None) -> None:
        """Waits for a running evaluation (up to ``timeout``), then releases the thread and env.

        Args:
            timeout: seconds to wait for a running evaluation (``None``: until it ends).
        """
        if self._closed:
            return
        self._closed = True
        future = self._future
        if future is not None:
            try:
                future.exception(timeout)
            except TimeoutError:
                pass  # its thread is a daemon of the executor; it ends with its rollout
        if self._executor is not None:
            self._executor.shutdown(wait=timeout is None)
        if self._process is not None:
            self._process.close()
        if self.env is not None and (future is None or future.done()):
            self.env.close()

    def __del__(self) -> None:
        process = getattr(self, "_process", None)
        if process is not None:
            try:
                process.close()
            except Exception:  # noqa: BLE001 - interpreter teardown
                pass

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return (
            f"Evaluator(num_trajectories={self.num_trajectories}, max_steps={self.max_steps}, "
            f"log_prefix={self.log_prefix!r}, pending={self.pending})"
        )


def _eval_process_main(
    conn: Connection,
    env_fn: Callable[[], EnvBase],
    policy: Callable[[TensorDictBase], Any] | None,
    policy_factory: Callable[[], Callable[[TensorDictBase], Any]] | None,
    settings: dict[str, Any],
    parent_pid: int,
    temp_dir: str,
) -> None:
    """The evaluation process: build the env and policy, then answer evaluation requests.

    Every failure goes back to the parent as its traceback; the process ends within a second
    of its parent's death (:func:`torchrl._processes.watch_parent`).
    """
    use_temp_dir(temp_dir)
    watch_parent(parent_pid, cleanup=(temp_dir,))
    torch.set_num_threads(1)
    try:
        env = env_fn()
        if policy_factory is not None:
            policy = policy_factory()
        weights = named_weights(policy) if isinstance(policy, nn.Module) else {}
    except Exception:
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the parent closed its end
            break
        if message[0] == "stop":
            break
        _, new_weights, step = message
        try:
            if weights and new_weights:
                copy_weights(weights, new_weights)
            conn.send(("result", _evaluate_once(env, policy, **settings)))
        except Exception:
            conn.send(("error", traceback.format_exc()))
    env.close()


class _EvalProcess:
    """The parent's side of the evaluation process: one request at a time, read by a thread
    that also watches the process, so that a dead process fails the request at once."""

    def __init__(
        self,
        env_fn: Callable[[], EnvBase],
        policy: Callable[[TensorDictBase], Any] | None,
        policy_factory: Callable[[], Callable[[TensorDictBase], Any]] | None,
        settings: dict[str, Any],
    ) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._temp_dir = worker_temp_dir()
        self.proc = ctx.Process(
            target=_eval_process_main,
            args=(child, env_fn, policy, policy_factory, settings, os.getpid(), self._temp_dir),
            daemon=True,
            name="torchrl-evaluator",
        )
        try:
            self.proc.start()
            child.close()
            kind, payload = self._receive("starting")
            if kind != "ready":
                raise RuntimeError(
                    f"Evaluator: the evaluation process (pid {self.proc.pid}) could not build "
                    f"its env or policy:\n{payload}"
                )
        except BaseException:
            self.close()
            raise

    def _receive(self, what: str) -> tuple[str, Any]:
        ready = wait([self._conn, self.proc.sentinel])
        if self._conn in ready:
            try:
                return cast(tuple[str, Any], self._conn.recv())
            except EOFError:
                pass
        self.proc.join(1.0)
        raise WorkerError(
            f"Evaluator: the evaluation process (pid {self.proc.pid}) died while {what} "
            f"({describe_exit(self.proc.exitcode)})"
        )

    def submit(
        self,
        weights: dict[str, torch.Tensor],
        step: int | None,
        finish: Callable[[dict[str, Any], int | None], TensorDictBase],
    ) -> Future[TensorDictBase]:
        future: Future[TensorDictBase] = Future()
        self._conn.send(("eval", weights, step))

        def read() -> None:
            try:
                kind, payload = self._receive("evaluating")
                if kind != "result":
                    raise RuntimeError(
                        f"the evaluation process (pid {self.proc.pid}) raised:\n{payload}"
                    )
                future.set_result(finish(payload, step))
            except BaseException as err:  # noqa: BLE001 - handed to the caller
                future.set_exception(err)

        threading.Thread(target=read, daemon=True, name="torchrl-evaluator-reader").start()
        return future

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self._conn.send(("stop", None, None))
            except OSError:
                pass  # gone already
            self.proc.join(5.0)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5.0)
        self._conn.close()
        shutil.rmtree(self._temp_dir, ignore_errors=True)


def rollout_entry(td: TensorDictBase, key: NestedKey | Sequence[str], who: str) -> torch.Tensor:
    """The entry ``key`` of a rollout, or a ``KeyError`` naming it and the keys there are.

    Args:
        td: the rollout.
        key: the entry (a list is read as a nested key).
        who: the caller, for the message.

    Returns:
        The tensor.
    """
    key = tuple(key) if isinstance(key, list) else key
    value = td.get(cast(NestedKey, key), None)
    if value is None:
        raise KeyError(
            f"{who}: the rollouts have no entry {key!r} (keys: "
            f"{sorted(map(str, td.keys(True, True)))}); set reward_keys/done_keys"
        )
    return cast(torch.Tensor, value)
