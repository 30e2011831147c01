"""TD-MPC2's objective: latent consistency, two-hot reward and value losses, policy prior.

Reference: Hansen, Su and Wang, "TD-MPC2: Scalable, Robust World Models for Continuous
Control" (ICLR 2024), https://arxiv.org/abs/2310.16828. The networks are those of
:mod:`torchrl.modules.tdmpc2`; :class:`~torchrl.trainers.algorithms.TdMpc2OptimizationStepper`
runs the two-phase update (model and Q first, then the policy prior).
"""

from __future__ import annotations

import dataclasses
from typing import cast

import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor
from torch.nn import functional as F

from torchrl._keys import ACTION, OBSERVATION, REWARD, TERMINATED
from torchrl._types import NestedKey
from torchrl.modules.tdmpc2 import (
    TdMpc2PolicyPrior,
    TdMpc2QEnsemble,
    TdMpc2WorldModel,
    symlog_two_hot,
)
from torchrl.objectives.common import LossModule, ParamSet, next_key

__all__ = ["TdMpc2Loss"]


def _two_hot_ce(logits: Tensor, target: Tensor, vmin: float, vmax: float) -> Tensor:
    """Cross-entropy of ``logits`` ``[..., K]`` against two-hot(symlog(target ``[..., 1]``))."""
    encoded = symlog_two_hot(target.detach(), vmin, vmax, logits.shape[-1])
    return -(encoded * logits.log_softmax(-1)).sum(-1)


class TdMpc2Loss(LossModule):
    """TD-MPC2's model and policy losses on sampled sub-trajectories.

    The input has batch ``[B, T]`` (``T`` = ``horizon`` consecutive transitions). From the
    encoded first observation the dynamics are unrolled with the stored actions; step ``t`` is
    weighted ``rho ** t``. Terms (each already multiplied by its coefficient):
    ``loss_consistency`` (MSE between predicted latents and the encoded next observations,
    no gradient to the targets), ``loss_reward`` and ``loss_value`` (cross-entropy against
    symlog two-hot targets; the TD target is ``r + discount * (1 - terminated) * min`` of two
    random target Q-members at the policy's next action) and ``loss_actor``
    (:meth:`actor_loss_from_latents` on the detached latents: ``-(Q / scale + entropy_coef *
    entropy)``, ``scale`` a running 5-95 percentile range of Q). The target Q-ensemble is
    ``target_q_ensemble_params`` (update it with ``SoftUpdate(loss, tau=...)``). ``"latents"``
    (``[B, T + 1, latent_dim]``, detached) is returned for the stepper's actor phase.

    Args:
        world_model: a :class:`~torchrl.modules.tdmpc2.TdMpc2WorldModel`.
        policy_prior: a :class:`~torchrl.modules.tdmpc2.TdMpc2PolicyPrior`.
        q_ensemble: a :class:`~torchrl.modules.tdmpc2.TdMpc2QEnsemble`.
        horizon: transitions per sequence (checked against the input).
        discount: TD discount.
        rho: temporal weight.
        consistency_coef, reward_coef, value_coef: loss weights.
        entropy_coef: entropy bonus of the actor objective.
        scale_tau: averaging factor of the running Q scale.
        observation_key, action_key, reward_key, terminated_key: entries read (reward and
            terminated under ``"next"``; also settable with :meth:`set_keys`).

    Examples:
        >>> from torchrl.modules.tdmpc2 import TdMpc2PolicyPrior, TdMpc2QEnsemble, TdMpc2WorldModel
        >>> wm = TdMpc2WorldModel(3, 1, latent_dim=16, mlp_dim=32)
        >>> loss = TdMpc2Loss(wm, TdMpc2PolicyPrior(16, 1, mlp_dim=32),
        ...     TdMpc2QEnsemble(16, 1, mlp_dim=32, num_q=2), horizon=3)
        >>> td = TensorDict({"observation": torch.randn(4, 3, 3), "action": torch.rand(4, 3, 1),
        ...     "next": {"observation": torch.randn(4, 3, 3), "reward": torch.randn(4, 3, 1),
        ...              "terminated": torch.zeros(4, 3, 1, dtype=torch.bool)}}, [4, 3])
        >>> sorted(k for k in loss(td).keys() if k.startswith("loss"))
        ['loss_actor', 'loss_consistency', 'loss_reward', 'loss_value']
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Keys read by :class:`TdMpc2Loss`.

        Attributes:
            observation: the observation (and ``("next", observation)``).
            action: the action taken, in ``[-1, 1]``.
            reward: the reward, under ``"next"``.
            terminated: the termination flag, under ``"next"``.
        """

        observation: NestedKey = OBSERVATION
        action: NestedKey = ACTION
        reward: NestedKey = REWARD
        terminated: NestedKey = TERMINATED

    default_keys = _AcceptedKeys
    q_ensemble: TdMpc2QEnsemble
    value_scale: Tensor

    def __init__(
        self,
        world_model: TdMpc2WorldModel,
        policy_prior: TdMpc2PolicyPrior,
        q_ensemble: TdMpc2QEnsemble,
        *,
        horizon: int = 3,
        discount: float = 0.99,
        rho: float = 0.5,
        consistency_coef: float = 20.0,
        reward_coef: float = 0.1,
        value_coef: float = 0.1,
        entropy_coef: float = 1e-4,
        scale_tau: float = 0.01,
        observation_key: NestedKey = OBSERVATION,
        action_key: NestedKey = ACTION,
        reward_key: NestedKey = REWARD,
        terminated_key: NestedKey = TERMINATED,
    ) -> None:
        super().__init__()
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
            raise ValueError(f"TdMpc2Loss: horizon must be an int >= 1, got {horizon!r}")
        if not 0 < rho <= 1:
            raise ValueError(f"TdMpc2Loss: rho must lie in (0, 1], got {rho}")
        self.world_model = world_model
        self.policy_prior = policy_prior
        self.convert_to_functional(q_ensemble, "q_ensemble", create_target_params=True)
        self.horizon = horizon
        self.discount = float(discount)
        self.rho = float(rho)
        self.consistency_coef = float(consistency_coef)
        self.reward_coef = float(reward_coef)
        self.value_coef = float(value_coef)
        self.entropy_coef = float(entropy_coef)
        self.scale_tau = float(scale_tau)
        self.register_buffer("value_scale", torch.ones(()))
        # The loss reads whole sequences: a validity mask must not flatten them.
        self.loss_mask_key = None
        self.set_keys(
            observation=observation_key,
            action=action_key,
            reward=reward_key,
            terminated=terminated_key,
        )

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        return [
            keys.observation,
            keys.action,
            next_key(keys.observation),
            next_key(keys.reward),
            next_key(keys.terminated),
        ]

    def _rho_weights(self, steps: int, like: Tensor) -> Tensor:
        return self.rho ** torch.arange(steps, dtype=like.dtype, device=like.device)

    def model_loss(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, Tensor]:
        """The world-model and Q losses, and the detached latents for the actor phase.

        Args:
            tensordict: a ``[B, horizon]`` batch of consecutive transitions.

        Returns:
            ``(losses, latents)``: ``loss_consistency``, ``loss_reward``, ``loss_value`` plus
            detached diagnostics, and the latents ``[B, horizon + 1, latent_dim]`` (detached).
        """
        keys = self.tensor_keys
        if tensordict.ndim != 2 or tensordict.shape[-1] != self.horizon:
            raise ValueError(
                f"TdMpc2Loss: expected a batch [B, horizon={self.horizon}] of consecutive "
                f"transitions, got batch size {tuple(tensordict.shape)}"
            )
        obs = tensordict.get(keys.observation)
        action = tensordict.get(keys.action).to(obs.dtype)
        next_obs = tensordict.get(next_key(keys.observation))
        reward = tensordict.get(next_key(keys.reward)).to(obs.dtype)
        terminated = tensordict.get(next_key(keys.terminated)).to(obs.dtype)
        horizon = self.horizon
        wm = self.world_model

        with torch.no_grad():
            next_z = wm.encode(next_obs)  # [B, H, L]
            next_action, _, _ = self.policy_prior(next_z)
            with self.using_tensors(
                "q_ensemble", self.network_tensors("q_ensemble", ParamSet.TARGET)
            ) as target_q:
                next_q = cast(TdMpc2QEnsemble, target_q).reduce(next_z, next_action, "min")
            td_target = reward + self.discount * (1 - terminated) * next_q

        z = wm.encode(obs[:, 0])
        latents = [z]
        for t in range(horizon):
            z = wm.next(z, action[:, t])
            latents.append(z)
        zs = torch.stack(latents, 1)  # [B, H + 1, L]
        rho = self._rho_weights(horizon, zs)
        consistency = (F.mse_loss(zs[:, 1:], next_z, reduction="none").mean((0, 2)) * rho).sum()
        reward_ce = _two_hot_ce(wm.reward_logits(zs[:, :-1], action), reward, wm.vmin, wm.vmax)
        q = self.q_ensemble
        q_logits = q.logits(zs[:, :-1], action)  # [num_q, B, H, K]
        value_ce = _two_hot_ce(
            q_logits, td_target.expand(q.num_q, *td_target.shape), q.vmin, q.vmax
        )
        losses = TensorDict(
            loss_consistency=self.consistency_coef * consistency / horizon,
            loss_reward=self.reward_coef * (reward_ce.mean(0) * rho).sum() / horizon,
            loss_value=self.value_coef * (value_ce.mean((0, 1)) * rho).sum() / horizon,
            td_target_mean=td_target.mean().detach(),
        )
        return losses, zs.detach()

    def actor_loss_from_latents(self, latent_sequence: Tensor) -> tuple[Tensor, TensorDictBase]:
        """The policy-prior objective on detached latents; updates the running Q scale.

        The Q-ensemble is evaluated with detached parameters: gradients reach the policy only.

        Args:
            latent_sequence: ``[B, T, latent_dim]`` latents (detached).

        Returns:
            ``(loss_actor, info)`` with ``info`` holding ``entropy`` and ``value_scale``.
        """
        z = latent_sequence.detach()
        action, _, log_prob = self.policy_prior(z)
        entropy = -log_prob
        with self.using_tensors(
            "q_ensemble", self.network_tensors("q_ensemble", ParamSet.DETACHED)
        ) as q_net:
            q = cast(TdMpc2QEnsemble, q_net).reduce(z, action, "avg")
        if self.training:
            with torch.no_grad():
                first = q[:, 0].flatten().float()
                spread = torch.quantile(first, 0.95) - torch.quantile(first, 0.05)
                self.value_scale.lerp_(spread.to(self.value_scale.dtype), self.scale_tau)
        scaled = q / self.value_scale.clamp(min=1.0)
        rho = self._rho_weights(z.shape[1], z)
        per_step = -(self.entropy_coef * entropy + scaled).mean((0, 2))
        loss = (per_step * rho).sum() / rho.sum()
        info = TensorDict(
            entropy=entropy.mean().detach(), value_scale=self.value_scale.detach().clone()
        )
        return loss, info

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """All four loss terms, the diagnostics and the detached ``"latents"``.

        Args:
            tensordict: a ``[B, horizon]`` batch of consecutive transitions.

        Returns:
            A TensorDict with the ``loss_*`` terms, ``td_target_mean``, ``entropy``,
            ``value_scale`` and ``latents``.
        """
        losses, latents = self.model_loss(tensordict)
        actor_loss, info = self.actor_loss_from_latents(latents)
        losses.set("loss_actor", actor_loss)
        losses.update(info)
        losses.set("latents", latents)
        return losses
