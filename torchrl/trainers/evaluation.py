"""Evaluation and stopping hooks: ``Recorder`` (deterministic evaluation rollouts) and
``EarlyStopping``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._keys import DONE, NEXT, REWARD
from torchrl._types import NestedKey, TensorDictModuleLike
from torchrl.collectors.evaluator import dump_videos, episode_returns
from torchrl.record.loggers.common import as_float
from torchrl.trainers.hooks import flat_key_name

if TYPE_CHECKING:
    from torchrl.envs.common import EnvBase
    from torchrl.envs.utils import ExplorationType
    from torchrl.trainers.trainer import Trainer

__all__ = ["EarlyStopping", "LogValidationReward", "Recorder", "episode_returns"]


class Recorder:
    """Evaluates the policy every ``record_interval`` iterations with a rollout, and logs it.

    Registered at ``"post_steps_log"``. The rollout runs ``record_frames`` steps (with resets)
    under ``torch.no_grad`` and ``set_exploration_type(exploration_type)`` (deterministic by
    default). It logs the mean of each ``log_keys`` entry (``"r_evaluation"`` for the reward)
    and the mean return of the episodes that finished (``"return_evaluation"``; the rollout's
    total when none did). ``VideoRecorder`` transforms of the env dump a video after each one.

    Args:
        record_interval: iterations between two evaluations.
        record_frames: steps of each evaluation rollout.
        frame_skip: env frames per step (scales the logged per-step reward).
        policy_exploration: the policy to evaluate.
        environment: the evaluation env (``recorder`` is an alias).
        exploration_type: the exploration mode of the rollout.
        log_keys: the entries to average (default ``[("next", "reward")]``).
        out_keys: logged names of ``log_keys`` (default ``{("next", "reward"): "r_evaluation"}``).
        suffix: appended to every logged name.
        log_pbar: show the values on the progress bar.
        recorder: alias of ``environment``.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> env = PendulumEnv()
        >>> rec = Recorder(record_interval=1, record_frames=10, policy_exploration=None,
        ...     environment=env)
        >>> sorted(rec(None))
        ['log_pbar', 'r_evaluation', 'return_evaluation']
    """

    def __init__(
        self,
        *,
        record_interval: int,
        record_frames: int,
        frame_skip: int = 1,
        policy_exploration: TensorDictModuleLike | None,
        environment: EnvBase | None = None,
        exploration_type: ExplorationType | None = None,
        log_keys: list[NestedKey] | None = None,
        out_keys: dict[NestedKey, str] | None = None,
        suffix: str | None = None,
        log_pbar: bool = False,
        recorder: EnvBase | None = None,
    ) -> None:
        from torchrl.envs.utils import ExplorationType

        environment = environment if environment is not None else recorder
        if environment is None:
            raise ValueError("Recorder: pass the evaluation env as environment= (or recorder=)")
        if record_interval < 1 or record_frames < 1:
            raise ValueError(
                f"Recorder: record_interval and record_frames must be >= 1, got {record_interval} "
                f"and {record_frames}"
            )
        self.record_interval = int(record_interval)
        self.record_frames = int(record_frames)
        self.frame_skip = int(frame_skip)
        self.policy_exploration = policy_exploration
        self.environment = environment
        self.exploration_type = (
            exploration_type if exploration_type is not None else ExplorationType.DETERMINISTIC
        )
        self.log_keys = list(log_keys) if log_keys is not None else [(NEXT, REWARD)]
        default_out: dict[NestedKey, str] = {(NEXT, REWARD): "r_evaluation"}
        self.out_keys = dict(out_keys) if out_keys is not None else default_out
        self.suffix = suffix or ""
        self.log_pbar = bool(log_pbar)
        self._count = 0

    @torch.no_grad()
    def __call__(self, batch: TensorDictBase | None = None) -> dict[str, Any] | None:
        """Runs the evaluation when due and returns the logged values (else ``None``)."""
        self._count += 1
        if (self._count - 1) % self.record_interval != 0:
            return None
        from torchrl.envs.utils import set_exploration_type

        policy = self.policy_exploration
        # a module in training mode is evaluated in eval mode, then put back
        training = policy if isinstance(policy, nn.Module) and policy.training else None
        if training is not None:
            training.eval()
        try:
            with set_exploration_type(self.exploration_type):
                rollout = self.environment.rollout(
                    self.record_frames, policy, auto_reset=True, break_when_any_done=False
                )
        finally:
            if training is not None:
                training.train()
        dump_videos(self.environment)
        out: dict[str, Any] = {}
        for key in self.log_keys:
            name = self.out_keys.get(key) or flat_key_name(key)
            value = rollout.get(key).float().mean()
            if key == (NEXT, REWARD):
                value = value / self.frame_skip
            out[f"{name}{self.suffix}"] = as_float(value)
        reward = rollout.get((NEXT, REWARD))
        done = rollout.get((NEXT, DONE))
        out[f"return_evaluation{self.suffix}"] = as_float(episode_returns(reward, done).mean())
        out["log_pbar"] = self.log_pbar
        return out

    def state_dict(self) -> dict[str, Any]:
        """The call counter."""
        return {"count": self._count}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the call counter."""
        self._count = int(state_dict["count"])

    def register(self, trainer: Trainer, name: str = "recorder") -> None:
        """Registers at ``"post_steps_log"`` and in the checkpoint."""
        trainer.register_op("post_steps_log", self)
        trainer.register_module(name, self)


#: TorchRL's current name of :class:`Recorder`.
LogValidationReward = Recorder


class EarlyStopping:
    """Stops training once a logged value reaches a threshold.

    Registered at ``"post_steps_log"`` (register it after the hook that logs ``key``, e.g. a
    :class:`Recorder`, so it sees the value of the same iteration). Reads the trainer's
    ``latest_logs``.

    Args:
        key: the logged name to watch (e.g. ``"return_evaluation"``).
        threshold: the target value.
        mode: ``"max"`` stops when the value is ``>= threshold``, ``"min"`` when ``<=``.

    Examples:
        >>> class FakeTrainer:
        ...     latest_logs = {"r": 5.0}
        ...     def request_stop(self, reason):
        ...         self.reason = reason
        >>> trainer = FakeTrainer()
        >>> stop = EarlyStopping("r", 4.0)
        >>> stop.trainer = trainer
        >>> _ = stop(None)
        >>> trainer.reason
        'r=5 reached the threshold 4'
    """

    def __init__(self, key: str, threshold: float, mode: Literal["max", "min"] = "max") -> None:
        if mode not in ("max", "min"):
            raise ValueError(f"EarlyStopping: mode must be 'max' or 'min', got {mode!r}")
        self.key = key
        self.threshold = float(threshold)
        self.mode = mode
        self.trainer: Any = None
        self.stopped = False

    def __call__(self, batch: TensorDictBase | None = None) -> None:
        """Requests a stop from the trainer when the watched value reached the threshold."""
        if self.trainer is None:
            raise RuntimeError("EarlyStopping: register the hook with a trainer first")
        value = self.trainer.latest_logs.get(self.key)
        if value is None:
            return None
        reached = value >= self.threshold if self.mode == "max" else value <= self.threshold
        if reached:
            self.stopped = True
            self.trainer.request_stop(
                f"{self.key}={value:g} reached the threshold {self.threshold:g}"
            )
        return None

    def register(self, trainer: Trainer, name: str | None = None) -> None:
        """Registers at ``"post_steps_log"``."""
        self.trainer = trainer
        trainer.register_op("post_steps_log", self)
