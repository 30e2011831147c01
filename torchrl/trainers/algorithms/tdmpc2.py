"""TD-MPC2 training: the two-phase optimization stepper and the trainer that wires it.

:class:`TdMpc2OptimizationStepper` sits at the trainer's ``"optimizer"`` hook point: it steps the
world model and the Q-ensemble on the model losses, then the policy prior on the actor
objective evaluated on the detached latents with the updated Q-functions, then soft-updates the
target Q-ensemble. :class:`TdMpc2Trainer` is an
:class:`~torchrl.trainers.algorithms.OffPolicyTrainer` whose replay buffer samples sub-trajectories
of ``horizon`` steps and whose collector acts with a
:class:`~torchrl.modules.tdmpc2.TdMpc2Planner` sharing the loss's networks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import COLLECTOR, TRAJ_IDS
from torchrl.modules.tdmpc2 import TdMpc2Planner
from torchrl.objectives.tdmpc2 import TdMpc2Loss
from torchrl.objectives.utils import SoftUpdate
from torchrl.record.loggers.common import Logger
from torchrl.trainers.algorithms._common import check_positive
from torchrl.trainers.algorithms.off_policy import OffPolicyTrainer
from torchrl.trainers.trainer import Trainer

__all__ = ["TdMpc2OptimizationStepper", "TdMpc2Trainer", "default_optimizers"]

_MODEL_TERMS = ("loss_consistency", "loss_reward", "loss_value")


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


class TdMpc2OptimizationStepper:
    """Runs TD-MPC2's update: model and Q first, then the policy prior, then the target Q.

    Called with the losses of a :class:`~torchrl.objectives.TdMpc2Loss` (at a trainer's
    ``"optimizer"`` point, see :meth:`register`), it back-propagates the sum of
    ``loss_consistency``, ``loss_reward`` and ``loss_value``, clips and steps
    ``optimizer_model``; then computes ``loss.actor_loss_from_latents(losses["latents"])`` with
    the updated Q-functions, steps ``optimizer_actor``; last, moves the target Q-ensemble a
    fraction ``target_tau`` towards the online one.

    Args:
        loss_module: the TD-MPC2 loss.
        optimizer_model: optimizer of the world model and the Q-ensemble.
        optimizer_actor: optimizer of the policy prior.
        target_tau: Polyak factor of the target Q-ensemble (``None``: no target update).
        zero_grad_set_to_none: passed to ``zero_grad``.
        clip_norm: gradient-norm clipping of each phase (``None``: none).

    Examples:
        >>> from torchrl.modules.tdmpc2 import TdMpc2PolicyPrior, TdMpc2QEnsemble, TdMpc2WorldModel
        >>> wm, pi = TdMpc2WorldModel(3, 1, latent_dim=16, mlp_dim=32), TdMpc2PolicyPrior(16, 1, mlp_dim=32)
        >>> loss = TdMpc2Loss(wm, pi, TdMpc2QEnsemble(16, 1, mlp_dim=32, num_q=2), horizon=2)
        >>> model_params = list(wm.parameters()) + list(loss.q_ensemble.parameters())
        >>> stepper = TdMpc2OptimizationStepper(loss, torch.optim.Adam(model_params),
        ...     torch.optim.Adam(pi.parameters()))
        >>> td = TensorDict({"observation": torch.randn(4, 2, 3), "action": torch.rand(4, 2, 1),
        ...     "next": {"observation": torch.randn(4, 2, 3), "reward": torch.randn(4, 2, 1),
        ...              "terminated": torch.zeros(4, 2, 1, dtype=torch.bool)}}, [4, 2])
        >>> out = stepper(loss(td))
        >>> stepper.update_count, "grad_norm_actor" in out
        (1, True)
    """

    def __init__(
        self,
        loss_module: TdMpc2Loss,
        optimizer_model: torch.optim.Optimizer,
        optimizer_actor: torch.optim.Optimizer,
        *,
        target_tau: float | None = 0.01,
        zero_grad_set_to_none: bool = True,
        clip_norm: float | None = 20.0,
    ) -> None:
        for name, opt in (
            ("optimizer_model", optimizer_model),
            ("optimizer_actor", optimizer_actor),
        ):
            if not isinstance(opt, torch.optim.Optimizer):
                raise TypeError(
                    f"TdMpc2OptimizationStepper: {name} must be a torch optimizer, got "
                    f"{type(opt).__name__}"
                )
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(
                f"TdMpc2OptimizationStepper: clip_norm must be > 0 or None, got {clip_norm!r}"
            )
        self.loss_module = loss_module
        self.optimizer_model = optimizer_model
        self.optimizer_actor = optimizer_actor
        self.zero_grad_set_to_none = bool(zero_grad_set_to_none)
        self.clip_norm = clip_norm
        self.target_updater = (
            SoftUpdate(loss_module, tau=target_tau) if target_tau is not None else None
        )
        self._model_params = _params(optimizer_model)
        self._actor_params = _params(optimizer_actor)
        self._count = 0

    @property
    def update_count(self) -> int:
        """Completed updates."""
        return self._count

    def register(self, trainer: Trainer, name: str = "optimization_stepper") -> None:
        """Puts the stepper at the trainer's ``"optimizer"`` point and in its checkpoint.

        Raises:
            ValueError: the trainer already has an ``"optimizer"`` op.
        """
        if trainer.ops("optimizer"):
            raise ValueError(
                "TdMpc2OptimizationStepper.register: the trainer already has an 'optimizer' op; "
                "build it without optimizer="
            )
        trainer.register_op("optimizer", self)
        trainer.register_module(name, self)

    def _phase(
        self, loss: torch.Tensor, optimizer: torch.optim.Optimizer, params: list[torch.Tensor]
    ) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=self.zero_grad_set_to_none)
        loss.backward()
        max_norm = self.clip_norm if self.clip_norm is not None else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        optimizer.step()
        return norm.detach()

    def __call__(self, losses: TensorDictBase) -> TensorDictBase:
        """Performs one update from the loss module's output; returns detached diagnostics."""
        missing = [k for k in (*_MODEL_TERMS, "latents") if k not in losses.keys()]
        if missing:
            raise KeyError(
                f"TdMpc2OptimizationStepper: the losses lack {missing}; expected the output of "
                "TdMpc2Loss"
            )
        model_loss = sum(losses.get(k) for k in _MODEL_TERMS)
        assert isinstance(model_loss, torch.Tensor)
        grad_model = self._phase(model_loss, self.optimizer_model, self._model_params)
        actor_loss, info = self.loss_module.actor_loss_from_latents(losses.get("latents"))
        grad_actor = self._phase(actor_loss, self.optimizer_actor, self._actor_params)
        # The actor phase evaluated Q with detached weights; its graph left no model gradients.
        if self.target_updater is not None:
            self.target_updater.step()
        self._count += 1
        out = TensorDict({k: losses.get(k).detach() for k in _MODEL_TERMS})
        out.set("loss_actor", actor_loss.detach())
        out.set("grad_norm_model", grad_model)
        out.set("grad_norm_actor", grad_actor)
        out.update(info)
        for key in ("td_target_mean",):
            if key in losses.keys():
                out.set(key, losses.get(key).detach())
        return out

    def step(self, trainer: Any, sub_batch: TensorDictBase) -> TensorDictBase:
        """Computes ``trainer.loss_module(sub_batch)`` and performs one update on it."""
        return self(trainer.loss_module(sub_batch))

    def state_dict(self) -> dict[str, Any]:
        """Both optimizers' states and the update count."""
        return {
            "optimizer_model": self.optimizer_model.state_dict(),
            "optimizer_actor": self.optimizer_actor.state_dict(),
            "update_count": self._count,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned."""
        self.optimizer_model.load_state_dict(state_dict["optimizer_model"])
        self.optimizer_actor.load_state_dict(state_dict["optimizer_actor"])
        self._count = int(state_dict["update_count"])


class _TargetsUpdatedByStepper:
    """Tells :class:`OffPolicyTrainer` that the stepper updates the targets (no-op ``step``)."""

    def step(self) -> None:
        return None


def default_optimizers(
    loss_module: TdMpc2Loss,
    *,
    lr: float = 3e-4,
    encoder_lr_scale: float = 0.3,
    actor_eps: float = 1e-5,
) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
    """TD-MPC2's Adam optimizers: encoder at ``lr * encoder_lr_scale``, the rest at ``lr``.

    Args:
        loss_module: the TD-MPC2 loss.
        lr: learning rate.
        encoder_lr_scale: factor of the encoder's learning rate.
        actor_eps: Adam epsilon of the policy optimizer.

    Returns:
        ``(optimizer_model, optimizer_actor)``.

    Examples:
        >>> from torchrl.modules.tdmpc2 import TdMpc2PolicyPrior, TdMpc2QEnsemble, TdMpc2WorldModel
        >>> loss = TdMpc2Loss(TdMpc2WorldModel(3, 1, latent_dim=16, mlp_dim=32),
        ...     TdMpc2PolicyPrior(16, 1, mlp_dim=32), TdMpc2QEnsemble(16, 1, mlp_dim=32, num_q=2))
        >>> model_opt, actor_opt = default_optimizers(loss)
        >>> [round(g["lr"], 6) for g in model_opt.param_groups]
        [9e-05, 0.0003]
    """
    wm = loss_module.world_model
    encoder = list(wm.encoder.parameters())
    encoder_ids = {id(p) for p in encoder}
    rest = [p for p in wm.parameters() if id(p) not in encoder_ids]
    rest += list(loss_module.q_ensemble.parameters())
    optimizer_model = torch.optim.Adam(
        [{"params": encoder, "lr": lr * encoder_lr_scale}, {"params": rest, "lr": lr}], lr=lr
    )
    optimizer_actor = torch.optim.Adam(loss_module.policy_prior.parameters(), lr=lr, eps=actor_eps)
    return optimizer_model, optimizer_actor


class TdMpc2Trainer(OffPolicyTrainer):
    """TD-MPC2 trainer: sequence replay, the two-phase stepper, planner weights for the collector.

    Every collected batch is stored (flat) in ``replay_buffer``, which must sample
    ``batch_size * horizon`` items as ``batch_size`` consecutive slices of ``horizon`` steps
    (a ``SliceSampler(slice_len=horizon, traj_key=("collector", "traj_ids"))``; one is built
    when ``replay_buffer`` is ``None``); the sample is reshaped to ``[batch_size, horizon]`` for
    the loss. ``optimization_stepper`` defaults to a :class:`TdMpc2OptimizationStepper` over
    ``optimizer_model``/``optimizer_actor`` (default: :func:`default_optimizers`). The planner
    must use the loss's world model, policy prior and Q-ensemble. Other keywords are
    :class:`~torchrl.trainers.algorithms.OffPolicyTrainer`'s.

    Args:
        collector: yields batches collected with ``planner`` as the policy.
        total_frames: frames to collect.
        loss_module: a :class:`~torchrl.objectives.TdMpc2Loss`.
        planner: a :class:`~torchrl.modules.tdmpc2.TdMpc2Planner` sharing its networks.
        optimizer_model, optimizer_actor: the two optimizers (see above).
        optimization_stepper: replaces the default stepper.
        replay_buffer: the sequence buffer (see above).
        batch_size: sequences per update.
        buffer_size: capacity of the default buffer.
        lr, encoder_lr_scale: of the default optimizers.
        target_tau: Polyak factor of the target Q-ensemble (default stepper).
        clip_norm: gradient-norm clipping of each phase (default stepper).

    Examples:
        >>> from torchrl.collectors import SyncDataCollector
        >>> from torchrl.envs import ActionScaling, PendulumEnv, StepCounter, TransformedEnv, Compose, InitTracker
        >>> from torchrl.modules.tdmpc2 import TdMpc2PolicyPrior, TdMpc2QEnsemble, TdMpc2WorldModel
        >>> wm, pi = TdMpc2WorldModel(3, 1, latent_dim=16, mlp_dim=32), TdMpc2PolicyPrior(16, 1, mlp_dim=32)
        >>> q = TdMpc2QEnsemble(16, 1, mlp_dim=32, num_q=2)
        >>> loss = TdMpc2Loss(wm, pi, q, horizon=3)
        >>> planner = TdMpc2Planner(wm, pi, q, horizon=3, num_samples=16, num_elites=4,
        ...     num_pi_trajs=2, iterations=1)
        >>> env = TransformedEnv(PendulumEnv(batch_size=[2]), Compose(ActionScaling(),
        ...     StepCounter(20), InitTracker(), planner.make_tensordict_primer()))
        >>> trainer = TdMpc2Trainer(collector=SyncDataCollector(env, planner, frames_per_batch=20,
        ...     total_frames=40), total_frames=40, loss_module=loss, planner=planner,
        ...     batch_size=4, optim_steps_per_batch=2, progress_bar=False)
        >>> trainer.train()
        >>> trainer.optim_count, trainer.optimization_stepper.update_count
        (4, 4)
    """

    def __init__(
        self,
        *,
        collector: Iterable[TensorDictBase | None] | None,
        total_frames: int,
        loss_module: TdMpc2Loss,
        planner: TdMpc2Planner,
        optimizer_model: torch.optim.Optimizer | None = None,
        optimizer_actor: torch.optim.Optimizer | None = None,
        optimization_stepper: TdMpc2OptimizationStepper | None = None,
        replay_buffer: Any = None,
        batch_size: int = 256,
        buffer_size: int = 1_000_000,
        lr: float = 3e-4,
        encoder_lr_scale: float = 0.3,
        target_tau: float = 0.01,
        clip_norm: float | None = 20.0,
        frame_skip: int = 1,
        optim_steps_per_batch: int = 1,
        logger: Logger | None = None,
        progress_bar: bool = True,
        seed: int | None = None,
        save_trainer_interval: int = 10000,
        log_interval: int = 10000,
        save_trainer_file: str | Path | None = None,
        enable_logging: bool = True,
        log_rewards: bool = True,
        log_actions: bool = True,
        lr_scheduler: Any = None,
        hooks: Sequence[Any] | None = None,
    ) -> None:
        if not isinstance(loss_module, TdMpc2Loss):
            raise TypeError(
                f"TdMpc2Trainer: loss_module must be a TdMpc2Loss, got {type(loss_module).__name__}"
            )
        if not isinstance(planner, TdMpc2Planner):
            raise TypeError(
                f"TdMpc2Trainer: planner must be a TdMpc2Planner, got {type(planner).__name__}"
            )
        if (
            planner.world_model is not loss_module.world_model
            or planner.policy_prior is not loss_module.policy_prior
            or planner.q_ensemble is not loss_module.q_ensemble
        ):
            raise ValueError(
                "TdMpc2Trainer: the planner must use the loss's world_model, policy_prior and "
                "q_ensemble (the same objects), or it would plan with untrained networks"
            )
        check_positive("batch_size", batch_size, allow_none=False)
        horizon = loss_module.horizon
        if replay_buffer is None:
            from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer

            replay_buffer = TensorDictReplayBuffer(
                storage=LazyTensorStorage(buffer_size),
                sampler=SliceSampler(slice_len=horizon, traj_key=(COLLECTOR, TRAJ_IDS)),
            )
        if optimization_stepper is None:
            if (optimizer_model is None) != (optimizer_actor is None):
                raise ValueError(
                    "TdMpc2Trainer: pass both optimizer_model and optimizer_actor, or neither"
                )
            if optimizer_model is None or optimizer_actor is None:
                optimizer_model, optimizer_actor = default_optimizers(
                    loss_module, lr=lr, encoder_lr_scale=encoder_lr_scale
                )
            optimization_stepper = TdMpc2OptimizationStepper(
                loss_module,
                optimizer_model,
                optimizer_actor,
                target_tau=target_tau,
                clip_norm=clip_norm,
            )
        self.optimization_stepper = optimization_stepper
        self.planner = planner
        self.horizon = horizon
        super().__init__(
            collector=collector,
            total_frames=total_frames,
            frame_skip=frame_skip,
            optim_steps_per_batch=optim_steps_per_batch,
            loss_module=loss_module,
            optimizer=None,
            logger=logger,
            clip_norm=None,
            progress_bar=progress_bar,
            seed=seed,
            save_trainer_interval=save_trainer_interval,
            log_interval=log_interval,
            save_trainer_file=save_trainer_file,
            replay_buffer=replay_buffer,
            batch_size=batch_size * horizon,
            target_net_updater=_TargetsUpdatedByStepper(),
            enable_logging=enable_logging,
            log_rewards=log_rewards,
            log_actions=log_actions,
            lr_scheduler=lr_scheduler,
            hooks=hooks,
        )
        self.register_op("process_optim_batch", self._to_sequences)
        optimization_stepper.register(self)

    def _to_sequences(self, sub_batch: TensorDictBase) -> TensorDictBase:
        if sub_batch.numel() % self.horizon:
            raise ValueError(
                f"TdMpc2Trainer: the replay buffer sampled {sub_batch.numel()} items, not a "
                f"multiple of horizon={self.horizon}; it must sample slices of horizon steps"
            )
        return sub_batch.reshape(-1, self.horizon)
