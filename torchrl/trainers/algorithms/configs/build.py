"""Builds a ready-to-train algorithm trainer from a dataclass config (or a config file)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl.trainers.algorithms.configs.loading import compose_config
from torchrl.trainers.algorithms.configs.trainers import (
    EnvConfig,
    EvalConfig,
    LoggerConfig,
    NetworkConfig,
    OptimConfig,
    PPOTrainerConfig,
    SACTrainerConfig,
)

__all__ = ["BuiltTrainer", "build", "from_config"]

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


@dataclasses.dataclass
class BuiltTrainer:
    """The trainer :func:`build` made and the parts it made it from.

    Attributes:
        trainer: the algorithm trainer (call ``trainer.train()``).
        env: the training env; ``eval_env``: the evaluation env (``None`` without evaluation).
        actor: the policy; ``critic``: the value (PPO) or Q-value (SAC) network.
        loss_module, optimizer, collector, replay_buffer, logger: the other parts.
        recorder, stopper: the evaluation and early-stopping hooks (or ``None``).
        eval_history: ``(frames, evaluation return)`` of every evaluation so far.

    Examples:
        >>> from torchrl.trainers.algorithms.configs import PPOTrainerConfig
        >>> built = build(PPOTrainerConfig(), ["collector.total_frames=64",
        ...     "collector.frames_per_batch=32", "trainer.progress_bar=false", "logger.backend="])
        >>> isinstance(built, BuiltTrainer)
        True
        >>> type(built.loss_module).__name__, type(built.collector).__name__
        ('ClipPPOLoss', 'SyncDataCollector')
        >>> built.collector.shutdown()
    """

    trainer: Any
    env: Any
    eval_env: Any
    actor: Any
    critic: Any
    loss_module: Any
    optimizer: torch.optim.Optimizer
    collector: Any
    replay_buffer: Any
    logger: Any
    recorder: Any
    stopper: Any
    eval_history: list[tuple[int, float]]


def from_config(
    config: PPOTrainerConfig | SACTrainerConfig | str | Path,
    overrides: Sequence[str] = (),
    config_cls: type | None = None,
) -> Any:
    """Builds the trainer a config describes (see :func:`build` for all the parts).

    Args:
        config: a ``PPOTrainerConfig``/``SACTrainerConfig``, or a config file.
        overrides: ``key=value`` overrides applied to the config.
        config_cls: the config type of a file (default: ``PPOTrainerConfig``).

    Returns:
        The :class:`~torchrl.trainers.algorithms.PPOTrainer` or ``SACTrainer``.

    Examples:
        >>> trainer = from_config(PPOTrainerConfig(), ["collector.total_frames=64",
        ...     "collector.frames_per_batch=32", "trainer.progress_bar=false", "logger.backend="])
        >>> type(trainer).__name__, trainer.total_frames
        ('PPOTrainer', 64)
    """
    return build(config, overrides, config_cls).trainer


def build(
    config: PPOTrainerConfig | SACTrainerConfig | str | Path,
    overrides: Sequence[str] = (),
    config_cls: type | None = None,
) -> BuiltTrainer:
    """Builds the env, networks, loss, optimizer, collector, logger, evaluation and trainer.

    Args:
        config: a ``PPOTrainerConfig``/``SACTrainerConfig``, or a config file.
        overrides: ``key=value`` overrides applied to the config.
        config_cls: the config type of a file (default: ``PPOTrainerConfig``).

    Returns:
        A :class:`BuiltTrainer`.

    Raises:
        TypeError: the config is of another type.

    Examples:
        >>> from torchrl.trainers.algorithms.configs import PPOTrainerConfig
        >>> built = build(PPOTrainerConfig(), ["collector.total_frames=64",
        ...     "collector.frames_per_batch=32", "trainer.progress_bar=false", "logger.backend="])
        >>> type(built.trainer).__name__, built.trainer.total_frames
        ('PPOTrainer', 64)
        >>> built.env.batch_size, built.eval_env  # no evaluation configured
        (torch.Size([]), None)
        >>> built.collector.shutdown()
    """
    if isinstance(config, (str, Path)):
        config = compose_config(config_cls or PPOTrainerConfig, config, overrides)
    elif overrides:
        from torchrl.trainers.algorithms.configs.loading import (
            apply_overrides,
            config_from_dict,
            config_to_dict,
            parse_overrides,
        )

        data = apply_overrides(config_to_dict(config), parse_overrides(overrides))
        config = config_from_dict(type(config), data)
    if isinstance(config, PPOTrainerConfig):
        return _build_ppo(config)
    if isinstance(config, SACTrainerConfig):
        return _build_sac(config)
    raise TypeError(
        f"build: expected a PPOTrainerConfig or SACTrainerConfig, got {type(config).__name__}"
    )


def _make_env(cfg: EnvConfig, num_envs: int, seed: int, reward_sum: bool) -> Any:
    from torchrl.envs import GymEnv, RewardSum, TransformedEnv

    env: Any = GymEnv(cfg.name, num_envs=num_envs) if num_envs > 1 else GymEnv(cfg.name)
    if reward_sum:
        env = TransformedEnv(env, RewardSum())
    env.set_seed(seed)
    return env


def _mlp(n_in: int, n_out: int, cfg: NetworkConfig) -> nn.Module:
    from torchrl.modules import MLP

    return MLP(
        in_features=n_in,
        out_features=n_out,
        num_cells=list(cfg.num_cells),
        activation_class=_ACTIVATIONS[cfg.activation],
    )


def _obs_dim(env: Any) -> int:
    return int(env.observation_spec["observation"].shape[-1])


def _make_actor(env: Any, cfg: NetworkConfig, discrete: bool, log_prob: bool) -> Any:
    from tensordict.nn import NormalParamExtractor, TensorDictModule

    from torchrl.modules import OneHotCategorical, ProbabilisticActor, TanhNormal

    spec = env.action_spec
    n_act = int(spec.shape[-1])
    if discrete:
        net = TensorDictModule(_mlp(_obs_dim(env), n_act, cfg), ["observation"], ["logits"])
        return ProbabilisticActor(
            net,
            in_keys=["logits"],
            spec=spec,
            distribution_class=OneHotCategorical,
            # Logits of our own network: torch's argument checks only cost time.
            distribution_kwargs={"validate_args": False},
            return_log_prob=log_prob,
        )
    net = TensorDictModule(
        nn.Sequential(_mlp(_obs_dim(env), 2 * n_act, cfg), NormalParamExtractor()),
        ["observation"],
        ["loc", "scale"],
    )
    return ProbabilisticActor(
        net,
        in_keys=["loc", "scale"],
        spec=spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": spec.space.low, "high": spec.space.high},
        return_log_prob=log_prob,
    )


def _is_discrete(env: Any) -> bool:
    from torchrl.data import OneHot

    spec = env.action_spec
    if isinstance(spec, OneHot):
        return True
    if spec.dtype.is_floating_point:
        return False
    raise TypeError(
        f"{type(spec).__name__} action spaces are not supported by the config builder: use a "
        "one-hot (OneHot) or a continuous action spec"
    )


def _make_optimizer(cfg: OptimConfig, params: Any) -> torch.optim.Optimizer:
    cls = getattr(torch.optim, cfg.name)
    return cls(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def _make_logger(cfg: LoggerConfig) -> Any:
    if not cfg.backend:
        return None
    from torchrl.record.loggers import get_logger

    return get_logger(cfg.backend, logger_name=cfg.log_dir, experiment_name=cfg.exp_name)


def _make_eval(
    cfg: EvalConfig, env_cfg: EnvConfig, actor: Any, frames_per_batch: int, seed: int
) -> tuple[Any, Any, Any, list[tuple[int, float]], list[Any]]:
    """``(eval_env, recorder, stopper, history, hooks)`` (``None``s without evaluation)."""
    history: list[tuple[int, float]] = []
    if cfg.every <= 0:
        return None, None, None, history, []
    from torchrl.trainers.evaluation import EarlyStopping, Recorder

    eval_env = _make_env(env_cfg, cfg.episodes, seed + 10_000, reward_sum=False)
    recorder = Recorder(
        record_interval=max(cfg.every // frames_per_batch, 1),
        record_frames=cfg.max_steps,
        policy_exploration=actor,
        environment=eval_env,
        log_pbar=True,
    )
    hooks: list[Any] = [_TrackedRecorder(recorder, history)]
    stopper = None
    if cfg.target_return is not None:
        stopper = EarlyStopping("return_evaluation", cfg.target_return)
        hooks.append(stopper)
    return eval_env, recorder, stopper, history, hooks


class _TrackedRecorder:
    """Registers a ``Recorder`` and keeps ``(frames, return)`` of each evaluation."""

    def __init__(self, recorder: Any, history: list[tuple[int, float]]) -> None:
        self.recorder = recorder
        self.history = history
        self.trainer: Any = None

    def __call__(self, batch: TensorDictBase | None) -> dict[str, Any] | None:
        logs = self.recorder(batch)
        if logs is not None:
            self.history.append((self.trainer.collected_frames, float(logs["return_evaluation"])))
        return logs

    def register(self, trainer: Any) -> None:
        self.trainer = trainer
        trainer.register_op("post_steps_log", self)
        trainer.register_module("recorder", self.recorder)


def _build_ppo(cfg: PPOTrainerConfig) -> BuiltTrainer:
    from torchrl.collectors import SyncDataCollector
    from torchrl.modules import ValueOperator
    from torchrl.objectives import ClipPPOLoss
    from torchrl.trainers.algorithms.on_policy import PPOTrainer

    seed = cfg.trainer.seed
    torch.manual_seed(seed)
    env = _make_env(cfg.env, cfg.env.num_envs, seed, cfg.env.reward_sum)
    actor = _make_actor(env, cfg.network, _is_discrete(env), log_prob=True)
    critic = ValueOperator(_mlp(_obs_dim(env), 1, cfg.network), in_keys=["observation"])
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.loss.clip_epsilon,
        entropy_bonus=cfg.loss.entropy_bonus,
        entropy_coef=cfg.loss.entropy_coef,
        critic_coef=cfg.loss.critic_coef,
        loss_critic_type=cfg.loss.loss_critic_type,
        normalize_advantage=cfg.loss.normalize_advantage,
    )
    optimizer = _make_optimizer(cfg.optim, loss.parameters())
    collector = SyncDataCollector(
        env,
        actor,
        frames_per_batch=cfg.collector.frames_per_batch,
        total_frames=cfg.collector.total_frames,
        init_random_frames=cfg.collector.init_random_frames,
    )
    logger = _make_logger(cfg.logger)
    eval_env, recorder, stopper, history, hooks = _make_eval(
        cfg.eval, cfg.env, actor, cfg.collector.frames_per_batch, seed
    )
    trainer = PPOTrainer(
        collector=collector,
        total_frames=cfg.collector.total_frames,
        optim_steps_per_batch=cfg.trainer.optim_steps_per_batch,
        loss_module=loss,
        optimizer=optimizer,
        logger=logger,
        clip_norm=cfg.trainer.clip_norm,
        progress_bar=cfg.trainer.progress_bar,
        seed=seed,
        save_trainer_interval=cfg.trainer.save_trainer_interval,
        log_interval=cfg.trainer.log_interval,
        save_trainer_file=cfg.trainer.save_trainer_file,
        num_epochs=cfg.trainer.num_epochs,
        batch_size=cfg.loss.minibatch_size,
        gamma=cfg.loss.gamma,
        lmbda=cfg.loss.lmbda,
        hooks=hooks,
    )
    return BuiltTrainer(
        trainer=trainer,
        env=env,
        eval_env=eval_env,
        actor=actor,
        critic=critic,
        loss_module=loss,
        optimizer=optimizer,
        collector=collector,
        replay_buffer=None,
        logger=logger,
        recorder=recorder,
        stopper=stopper,
        eval_history=history,
    )


def _build_sac(cfg: SACTrainerConfig) -> BuiltTrainer:
    from torchrl.collectors import SyncDataCollector
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.modules import ValueOperator
    from torchrl.objectives import SACLoss, SoftUpdate
    from torchrl.trainers.algorithms.off_policy import SACTrainer

    seed = cfg.trainer.seed
    torch.manual_seed(seed)
    env = _make_env(cfg.env, cfg.env.num_envs, seed, cfg.env.reward_sum)
    if _is_discrete(env):
        raise TypeError(f"SACTrainerConfig: {cfg.env.name} has a discrete action space")
    actor = _make_actor(env, cfg.network, discrete=False, log_prob=False)
    n_act = int(env.action_spec.shape[-1])
    qvalue = ValueOperator(
        _mlp(_obs_dim(env) + n_act, 1, cfg.network), in_keys=["observation", "action"]
    )
    loss = SACLoss(
        actor,
        qvalue,
        num_qvalue_nets=cfg.loss.num_qvalue_nets,
        loss_function=cfg.loss.loss_function,
        alpha_init=cfg.loss.alpha_init,
    )
    loss.make_value_estimator(gamma=cfg.loss.gamma)
    optimizer = _make_optimizer(cfg.optim, loss.parameters())
    collector = SyncDataCollector(
        env,
        actor,
        frames_per_batch=cfg.collector.frames_per_batch,
        total_frames=cfg.collector.total_frames,
        init_random_frames=cfg.collector.init_random_frames,
    )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.replay_buffer.size), batch_size=cfg.replay_buffer.batch_size
    )
    logger = _make_logger(cfg.logger)
    eval_env, recorder, stopper, history, hooks = _make_eval(
        cfg.eval, cfg.env, actor, cfg.collector.frames_per_batch, seed
    )
    steps = cfg.trainer.optim_steps_per_batch
    trainer = SACTrainer(
        collector=collector,
        total_frames=cfg.collector.total_frames,
        # Default: one gradient step per collected frame.
        optim_steps_per_batch=steps if steps is not None else cfg.collector.frames_per_batch,
        loss_module=loss,
        optimizer=optimizer,
        logger=logger,
        clip_norm=cfg.trainer.clip_norm,
        progress_bar=cfg.trainer.progress_bar,
        seed=seed,
        save_trainer_interval=cfg.trainer.save_trainer_interval,
        log_interval=cfg.trainer.log_interval,
        save_trainer_file=cfg.trainer.save_trainer_file,
        replay_buffer=buffer,
        batch_size=cfg.replay_buffer.batch_size,
        target_net_updater=SoftUpdate(loss, tau=cfg.loss.tau),
        hooks=hooks,
    )
    return BuiltTrainer(
        trainer=trainer,
        env=env,
        eval_env=eval_env,
        actor=actor,
        critic=qvalue,
        loss_module=loss,
        optimizer=optimizer,
        collector=collector,
        replay_buffer=buffer,
        logger=logger,
        recorder=recorder,
        stopper=stopper,
        eval_history=history,
    )
