"""Dataclass configs of the algorithm trainers, one section per component.

A ``PPOTrainerConfig`` or ``SACTrainerConfig`` holds everything :func:`from_config` needs to
build a run: the env, the networks, the loss, the optimizer, the collector, the replay buffer,
the logger, the evaluation and the trainer's own keywords. Every field is a plain value, so a
config reads from and writes to YAML/JSON and takes ``section.key=value`` overrides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "CollectorConfig",
    "EnvConfig",
    "EvalConfig",
    "LoggerConfig",
    "NetworkConfig",
    "OptimConfig",
    "PPOLossConfig",
    "PPOTrainerConfig",
    "ReplayBufferConfig",
    "SACLossConfig",
    "SACTrainerConfig",
    "TrainerConfig",
]


@dataclass
class EnvConfig:
    """A Gymnasium env (:class:`~torchrl.envs.GymEnv`).

    Args:
        name: the Gymnasium id.
        num_envs: sub-envs stepped together (a vector env when > 1).
        reward_sum: add a ``RewardSum`` transform (finished-episode returns get logged).

    Examples:
        >>> EnvConfig(name="Pendulum-v1").num_envs
        1
    """

    name: str = "CartPole-v1"
    num_envs: int = 1
    reward_sum: bool = True


@dataclass
class NetworkConfig:
    """The MLPs of the actor and of the critic (or Q-value network).

    Args:
        num_cells: hidden layer widths.
        activation: ``"tanh"``, ``"relu"`` or ``"elu"``.

    Examples:
        >>> NetworkConfig().num_cells
        [64, 64]
    """

    num_cells: list[int] = field(default_factory=lambda: [64, 64])
    activation: Literal["tanh", "relu", "elu"] = "tanh"


@dataclass
class OptimConfig:
    """A torch optimizer over all of the loss's parameters.

    Args:
        name: ``"Adam"``, ``"AdamW"``, ``"SGD"`` or ``"RMSprop"``.
        lr: learning rate.
        weight_decay: L2 penalty.

    Examples:
        >>> OptimConfig().name
        'Adam'
    """

    name: Literal["Adam", "AdamW", "SGD", "RMSprop"] = "Adam"
    lr: float = 3e-4
    weight_decay: float = 0.0


@dataclass
class CollectorConfig:
    """A :class:`~torchrl.collectors.SyncDataCollector`.

    Args:
        frames_per_batch: frames per collected batch (over all sub-envs).
        total_frames: frames to collect in all (an upper bound when evaluation stops early).
        init_random_frames: first frames taken with random actions.

    Examples:
        >>> CollectorConfig().frames_per_batch
        1000
    """

    frames_per_batch: int = 1000
    total_frames: int = 100_000
    init_random_frames: int = 0


@dataclass
class ReplayBufferConfig:
    """A :class:`~torchrl.data.TensorDictReplayBuffer` over a ``LazyTensorStorage``.

    Args:
        size: capacity in transitions.
        batch_size: transitions per optimization batch.

    Examples:
        >>> ReplayBufferConfig().batch_size
        256
    """

    size: int = 100_000
    batch_size: int = 256


@dataclass
class LoggerConfig:
    """An experiment logger (see :func:`~torchrl.record.loggers.get_logger`).

    Args:
        backend: ``"csv"``, ``"tensorboard"``, ``"wandb"``, ``"mlflow"``, ``"trackio"`` or
            ``""`` (no logger).
        exp_name: the experiment's name.
        log_dir: the folder logs go to.

    Examples:
        >>> LoggerConfig().backend
        'csv'
    """

    backend: str = "csv"
    exp_name: str = "experiment"
    log_dir: str = "outputs"


@dataclass
class EvalConfig:
    """Periodic deterministic evaluation (``Recorder``) and early stopping.

    Args:
        every: frames between two evaluations (``0``: no evaluation).
        episodes: episodes per evaluation (run side by side).
        max_steps: steps of each evaluation rollout.
        target_return: stop training once the evaluation return reaches it (``None``: never).

    Examples:
        >>> EvalConfig().target_return is None
        True
    """

    every: int = 0
    episodes: int = 5
    max_steps: int = 1000
    target_return: float | None = None


@dataclass
class TrainerConfig:
    """The keywords of the algorithm trainer itself.

    Args:
        optim_steps_per_batch: gradient steps per batch (``None``: the trainer's default).
        num_epochs: passes over each batch (on-policy; ``None``: the trainer's default).
        clip_norm: gradient-norm clipping threshold (``None``: no clipping).
        progress_bar: show a progress bar.
        seed: seeds torch, numpy, ``random``, the envs and the collector.
        log_interval: frames between two writes of one value to the logger.
        save_trainer_file: checkpoint file (``None``: no checkpoint).
        save_trainer_interval: frames between two checkpoints.

    Examples:
        >>> TrainerConfig().seed
        0
    """

    optim_steps_per_batch: int | None = None
    num_epochs: int | None = None
    clip_norm: float | None = None
    progress_bar: bool = True
    seed: int = 0
    log_interval: int = 10000
    save_trainer_file: str | None = None
    save_trainer_interval: int = 10000


@dataclass
class PPOLossConfig:
    """A :class:`~torchrl.objectives.ClipPPOLoss` and its GAE.

    Args:
        clip_epsilon: the ratio clipping range.
        entropy_bonus: add the entropy bonus.
        entropy_coef: its weight.
        critic_coef: weight of the critic loss.
        loss_critic_type: ``"l2"``, ``"l1"`` or ``"smooth_l1"``.
        normalize_advantage: standardize advantages per minibatch.
        gamma: discount.
        lmbda: GAE lambda.
        minibatch_size: items per minibatch (``None``: the whole batch).

    Examples:
        >>> PPOLossConfig().clip_epsilon
        0.2
    """

    clip_epsilon: float = 0.2
    entropy_bonus: bool = True
    entropy_coef: float = 0.01
    critic_coef: float = 1.0
    loss_critic_type: Literal["l2", "l1", "smooth_l1"] = "smooth_l1"
    normalize_advantage: bool = False
    gamma: float = 0.99
    lmbda: float = 0.95
    minibatch_size: int | None = 64


@dataclass
class SACLossConfig:
    """A :class:`~torchrl.objectives.SACLoss` and its target updates.

    Args:
        num_qvalue_nets: critics in the ensemble.
        loss_function: ``"l2"``, ``"l1"`` or ``"smooth_l1"``.
        alpha_init: initial entropy temperature.
        gamma: discount.
        tau: weight of the online parameters in each ``SoftUpdate``.

    Examples:
        >>> SACLossConfig().tau
        0.005
    """

    num_qvalue_nets: int = 2
    loss_function: Literal["l2", "l1", "smooth_l1"] = "smooth_l1"
    alpha_init: float = 1.0
    gamma: float = 0.99
    tau: float = 0.005


@dataclass
class PPOTrainerConfig:
    """Everything :func:`from_config` needs for a :class:`~torchrl.trainers.algorithms.PPOTrainer`.

    Sections: ``env``, ``network``, ``loss``, ``optim``, ``collector``, ``logger``, ``eval``,
    ``trainer`` (see their classes). Discrete action spaces get a categorical actor,
    continuous ones a tanh-normal actor.

    Examples:
        >>> cfg = PPOTrainerConfig()
        >>> cfg.env.name, cfg.optim.lr
        ('CartPole-v1', 0.0003)
    """

    env: EnvConfig = field(default_factory=EnvConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    loss: PPOLossConfig = field(default_factory=PPOLossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)


@dataclass
class SACTrainerConfig:
    """Everything :func:`from_config` needs for a :class:`~torchrl.trainers.algorithms.SACTrainer`.

    Sections: ``env``, ``network``, ``loss``, ``optim``, ``collector``, ``replay_buffer``,
    ``logger``, ``eval``, ``trainer``. The action space must be continuous (bounded).

    Examples:
        >>> SACTrainerConfig().env.name
        'Pendulum-v1'
    """

    env: EnvConfig = field(default_factory=lambda: EnvConfig(name="Pendulum-v1"))
    network: NetworkConfig = field(default_factory=lambda: NetworkConfig(activation="relu"))
    loss: SACLossConfig = field(default_factory=SACLossConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-3))
    collector: CollectorConfig = field(
        default_factory=lambda: CollectorConfig(frames_per_batch=200, init_random_frames=1000)
    )
    replay_buffer: ReplayBufferConfig = field(default_factory=ReplayBufferConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
