"""Deep Q-learning losses: DQN / double DQN (Mnih et al., 2015; van Hasselt et al., 2016) and C51."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, dispatch
from torch import Tensor, nn

from torchrl._keys import (
    ACTION,
    ACTION_VALUE,
    ADVANTAGE,
    DONE,
    NEXT,
    PRIORITY,
    REWARD,
    TERMINATED,
    VALUE_TARGET,
    WEIGHT,
)
from torchrl._types import NestedKey
from torchrl.objectives._helpers import (
    check_loss_function,
    check_reduction,
    find_mask_key,
    gather_action_values,
    masked_argmax,
    reduce_loss,
    reduced_distance,
    resolve_action_space,
    without_greedy_head,
    write_priority,
)
from torchrl.objectives.common import (
    LossModule,
    ParamSet,
    calls_network_directly,
    loss_output,
    network_inputs,
    next_key,
)
from torchrl.objectives.utils import ValueEstimators, distance_loss
from torchrl.objectives.value.estimators import STEPS_TO_NEXT_OBS

if TYPE_CHECKING:
    from torchrl.data.specs import TensorSpec

__all__ = ["DQNLoss", "DistributionalDQNLoss"]

CHOSEN_ACTION_VALUE = "chosen_action_value"


def _as_value_network(value_network: Any, action_space: Any) -> Any:
    """Wraps a plain network into a :class:`~torchrl.modules.QValueActor`."""
    if hasattr(value_network, "in_keys") and hasattr(value_network, "out_keys"):
        return value_network
    if not isinstance(value_network, nn.Module):
        raise TypeError(f"value_network must be an nn.Module, got {type(value_network).__name__}")
    from torchrl.modules import QValueActor

    return QValueActor(value_network, action_space=action_space)


def _weighted_distance(
    loss: DQNLoss, tensordict: TensorDictBase, pred: Tensor, target: Tensor
) -> Tensor:
    """The reduced distance of ``pred`` to ``target``, each sample weighted by the importance
    weight of a prioritized buffer when ``use_prioritized_weights`` finds (or requires) one."""
    use = loss.use_prioritized_weights
    weight = None if use is False else tensordict.get(WEIGHT, None)
    if weight is None:
        if use is True:
            raise KeyError(f"use_prioritized_weights=True but the batch has no {WEIGHT!r} entry")
        return reduced_distance(pred, target, loss.loss_function, loss.reduction)
    per_sample = distance_loss(pred, target, loss.loss_function)
    per_sample = per_sample * weight.reshape(weight.shape + (1,) * (per_sample.ndim - weight.ndim))
    return reduce_loss(per_sample, loss.reduction)


class DQNLoss(LossModule):
    """The DQN loss ``d(Q(s, a), r + gamma * (1 - terminated) * max_a' Q_target(s', a'))``.

    With ``double_dqn=True`` the next action is chosen by the online network and evaluated by
    the target network. Actions are one-hot (``[*B, n]``) or categorical (``[*B]``/``[*B, 1]``);
    when the value network reads an action mask (``action_mask_key``), the next-step maximum
    only ranges over allowed actions. ``|Q - target|`` is written into the input at
    ``"td_error"`` for prioritized replay.

    Args:
        value_network: a network writing ``"action_value"`` (``[*B, n]``), e.g. a
            :class:`~torchrl.modules.QValueActor`; a plain ``nn.Module`` is wrapped in one.
        loss_function: ``"l2"``, ``"l1"`` or ``"smooth_l1"``.
        delay_value: keep target parameters (update them with ``SoftUpdate``/``HardUpdate``);
            without, the online network (detached) gives the targets.
        double_dqn: choose the next action with the online network.
        action_space: ``"one_hot"``, ``"categorical"`` or a spec (inferred from the network
            when omitted).
        priority_key: where to write the TD error (default ``"td_error"``).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        use_prioritized_weights: weigh samples by ``"_weight"`` (``"auto"``: when present).

    Examples:
        >>> from torchrl.modules import QValueActor
        >>> loss = DQNLoss(QValueActor(nn.Linear(4, 3), action_space="categorical"))
        >>> out = loss(observation=torch.randn(8, 4), action=torch.randint(3, (8,)),
        ...            next_observation=torch.randn(8, 4), next_reward=torch.randn(8, 1),
        ...            next_done=torch.zeros(8, 1, dtype=torch.bool),
        ...            next_terminated=torch.zeros(8, 1, dtype=torch.bool))
        >>> out.shape
        torch.Size([])
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read and written by :class:`DQNLoss`."""

        advantage: NestedKey = ADVANTAGE
        value_target: NestedKey = VALUE_TARGET
        value: NestedKey = CHOSEN_ACTION_VALUE
        action_value: NestedKey = ACTION_VALUE
        action: NestedKey = ACTION
        priority: NestedKey = PRIORITY
        reward: NestedKey = REWARD
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED
        steps_to_next_obs: NestedKey = STEPS_TO_NEXT_OBS

    default_keys = _AcceptedKeys
    value_network: TensorDictModuleBase
    default_value_estimator = ValueEstimators.TD0
    _supported_estimators = (ValueEstimators.TD0, ValueEstimators.TD1, ValueEstimators.TDLambda)
    out_keys = ["loss"]

    def __init__(
        self,
        value_network: nn.Module,
        *,
        loss_function: str = "l2",
        delay_value: bool = True,
        double_dqn: bool = False,
        action_space: str | TensorSpec | None = None,
        priority_key: NestedKey | None = None,
        reduction: str = "mean",
        use_prioritized_weights: bool | str = "auto",
    ) -> None:
        super().__init__()
        value_network = _as_value_network(value_network, action_space)
        self.action_space = resolve_action_space(type(self).__name__, action_space, value_network)
        self.convert_to_functional(value_network, "value_network", create_target_params=delay_value)
        self.delay_value = delay_value
        self.double_dqn = double_dqn
        self.loss_function = check_loss_function(loss_function)
        self.reduction = check_reduction(reduction)
        self.use_prioritized_weights = use_prioritized_weights
        self._mask_key = find_mask_key(value_network)
        self._q_modules = without_greedy_head(value_network)
        self.out_keys = ["loss"]
        for sub in value_network.modules():
            key = getattr(sub, "action_value_key", None)
            if key is not None:
                self._tensor_keys.action_value = key
                break
        if priority_key is not None:
            self._tensor_keys.priority = priority_key
        self._refresh_keys()

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        return [
            *self._net_in_keys(self.value_network),
            keys.action,
            next_key(keys.reward),
            next_key(keys.done),
            next_key(keys.terminated),
        ]

    def _direct_q(self) -> nn.Module | None:
        """The Q-network when the loss may call it directly (:func:`calls_network_directly`,
        writing the action values only), else ``None``: checked once per call of the loss."""
        if len(self._q_modules) != 1:
            return None
        qnet = self._q_modules[0]
        return qnet if calls_network_directly(qnet, [self.tensor_keys.action_value]) else None

    def _action_values(
        self, tensordict: TensorDictBase, qnet: nn.Module | None, *param_sets: ParamSet
    ) -> list[Tensor]:
        """The action values ``[*B, n]`` of ``tensordict`` under each of ``param_sets``; a
        Q-network called directly (``qnet``, from :meth:`_direct_q`) reads its inputs once
        for all of them."""
        if qnet is not None:
            args = network_inputs(qnet, tensordict)
            if args is not None:
                return [self._run_direct("value_network", qnet, args, p) for p in param_sets]
        inputs = tensordict.select(*self.value_network.in_keys, strict=False)
        return [
            self._call_network("value_network", inputs.copy(), p, modules=self._q_modules).get(
                self.tensor_keys.action_value
            )
            for p in param_sets
        ]

    def _next_value(self, tensordict: TensorDictBase, qnet: nn.Module | None) -> Tensor:
        """``Q_target(s', a*)``, ``a*`` greedy w.r.t. the online (double) or target network."""
        next_td = tensordict.get(NEXT)
        if self.double_dqn:
            target_values, chooser = self._action_values(
                next_td, qnet, ParamSet.TARGET, ParamSet.DETACHED
            )
        else:
            (target_values,) = self._action_values(next_td, qnet, ParamSet.TARGET)
            chooser = target_values
        mask = next_td.get(self._mask_key, None) if self._mask_key is not None else None
        return target_values.gather(-1, masked_argmax(chooser, mask, keepdim=True))

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes ``loss`` and writes the TD error at the priority key.

        Args:
            tensordict: a batch ``[*B]`` with the network's inputs (root and ``"next"``), the
                actions and ``("next", "reward"/"done"/"terminated")`` (``[*B, 1]``).

        Returns:
            A TensorDict with ``loss`` and the detached ``td_error`` (mean).
        """
        keys = self.tensor_keys
        self._check_inputs(tensordict)
        qnet = self._direct_q()
        (values,) = self._action_values(tensordict, qnet, ParamSet.ONLINE)
        pred = gather_action_values(
            values, tensordict.get(keys.action), self.action_space, "DQNLoss", keys.action
        )
        with torch.no_grad():
            next_value = self._next_value(tensordict, qnet)
            target = self.value_estimator.value_estimate(tensordict, next_value=next_value)
        write_priority(tensordict, keys.priority, pred, target)
        loss = _weighted_distance(self, tensordict, pred, target)
        return loss_output({"loss": loss})


class DistributionalDQNLoss(LossModule):
    """Categorical distributional DQN (C51, Bellemare et al., 2017).

    The target distribution ``r + gamma * (1 - terminated) * z`` of the greedy next action
    (greedy w.r.t. the target network's expected values) is projected onto the fixed support
    ``z`` and the loss is its cross-entropy with the predicted distribution of the taken action.

    Args:
        value_network: writes log-probabilities ``[*B, n_atoms, n_actions]`` at
            ``"action_value"``, e.g. a :class:`~torchrl.modules.DistributionalQValueActor`.
        gamma: the discount.
        support: the ``[n_atoms]`` atom values (read from the network when omitted).
        delay_value: keep target parameters.
        action_space: ``"one_hot"`` or ``"categorical"`` (inferred when omitted).
        priority_key: where to write the per-sample loss for prioritized replay.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Examples:
        >>> from torchrl.modules import DistributionalQValueActor, MLP
        >>> net = MLP(in_features=4, out_features=(11, 3), depth=1)
        >>> actor = DistributionalQValueActor(net, torch.linspace(-5, 5, 11),
        ...                                   action_space="categorical")
        >>> loss = DistributionalDQNLoss(actor, gamma=0.9)
        >>> out = loss(observation=torch.randn(8, 4), action=torch.randint(3, (8,)),
        ...            next_observation=torch.randn(8, 4), next_reward=torch.randn(8, 1),
        ...            next_done=torch.zeros(8, 1, dtype=torch.bool),
        ...            next_terminated=torch.zeros(8, 1, dtype=torch.bool))
        >>> bool(out > 0)
        True
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read and written by :class:`DistributionalDQNLoss`."""

        action_value: NestedKey = ACTION_VALUE
        action: NestedKey = ACTION
        priority: NestedKey = PRIORITY
        reward: NestedKey = REWARD
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED
        steps_to_next_obs: NestedKey = STEPS_TO_NEXT_OBS

    default_keys = _AcceptedKeys
    value_network: TensorDictModuleBase
    default_value_estimator = ValueEstimators.TD0
    _supported_estimators = (ValueEstimators.TD0,)
    out_keys = ["loss"]
    support: Tensor

    def __init__(
        self,
        value_network: nn.Module,
        *,
        gamma: float,
        support: Tensor | None = None,
        delay_value: bool = True,
        action_space: str | TensorSpec | None = None,
        priority_key: NestedKey | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        if support is None:
            for sub in value_network.modules():
                found = getattr(sub, "support", None)
                if isinstance(found, Tensor):
                    support = found
                    break
        if support is None:
            raise ValueError(
                "DistributionalDQNLoss: pass the atoms' support (the value network has none)"
            )
        support = torch.as_tensor(support, dtype=torch.float32).detach().clone()
        if support.ndim != 1 or support.numel() < 2 or not bool((support.diff() > 0).all()):
            raise ValueError("support must be a 1-d increasing tensor of at least 2 atoms")
        self.register_buffer("support", support)
        self.action_space = resolve_action_space(type(self).__name__, action_space, value_network)
        self.convert_to_functional(value_network, "value_network", create_target_params=delay_value)
        self.gamma = float(gamma)
        self.reduction = check_reduction(reduction)
        self._mask_key = find_mask_key(value_network)
        self._q_modules = without_greedy_head(value_network)
        self.out_keys = ["loss"]
        if priority_key is not None:
            self._tensor_keys.priority = priority_key
        self._refresh_keys()

    def make_value_estimator(
        self, value_type: ValueEstimators | str | None = None, **hyperparams: Any
    ) -> DistributionalDQNLoss:
        """Only TD(0) applies; ``gamma`` updates the discount."""
        value_type = ValueEstimators(value_type or ValueEstimators.TD0)
        if value_type is not ValueEstimators.TD0:
            raise NotImplementedError(
                f"DistributionalDQNLoss supports the TD0 estimator only, got {value_type.name}"
            )
        if "gamma" in hyperparams:
            self.gamma = float(hyperparams["gamma"])
        self.value_type = value_type
        return self

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        return [
            *self._net_in_keys(self.value_network),
            keys.action,
            next_key(keys.reward),
            next_key(keys.done),
            next_key(keys.terminated),
        ]

    def _log_probs(self, tensordict: TensorDictBase, param_set: ParamSet) -> Tensor:
        out = self._call_network(
            "value_network",
            tensordict.select(*self.value_network.in_keys, strict=False),
            param_set,
            modules=self._q_modules,
        )
        log_p = out.get(self.tensor_keys.action_value)
        if log_p.shape[-2] != self.support.numel():
            raise ValueError(
                f"DistributionalDQNLoss: expected [*B, n_atoms={self.support.numel()}, n_actions] "
                f"action values, got {tuple(log_p.shape)}"
            )
        return log_p

    def _project(self, p_next: Tensor, reward: Tensor, terminated: Tensor, gamma: Any) -> Tensor:
        """Projects the atoms ``r + gamma (1 - term) z`` with masses ``p_next`` onto ``z``."""
        z = self.support.to(p_next.dtype)
        v_min, v_max = float(z[0]), float(z[-1])
        n_atoms = z.numel()
        delta = (v_max - v_min) / (n_atoms - 1)
        not_term = (~terminated.bool()).to(p_next.dtype)
        tz = (reward + gamma * not_term * z).clamp(v_min, v_max)  # [*B, n_atoms]
        b = (tz - v_min) / delta
        lower = b.floor()
        upper = b.ceil()
        # When b lands on an atom, lower == upper: all the mass goes to that atom.
        w_lower = (upper - b) + (lower == upper).to(b.dtype)
        w_upper = b - lower
        m = torch.zeros_like(p_next)
        m.scatter_add_(-1, lower.long().clamp(0, n_atoms - 1), p_next * w_lower)
        m.scatter_add_(-1, upper.long().clamp(0, n_atoms - 1), p_next * w_upper)
        return m

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes the cross-entropy ``loss`` and writes it as the priority.

        Args:
            tensordict: a batch ``[*B]`` with the network's inputs (root and ``"next"``), the
                actions and ``("next", "reward"/"done"/"terminated")`` (``[*B, 1]``).

        Returns:
            A TensorDict with ``loss``.
        """
        keys = self.tensor_keys
        self._check_inputs(tensordict)
        log_p = self._log_probs(tensordict, ParamSet.ONLINE)  # [*B, atoms, n]
        action = tensordict.get(keys.action)
        n_atoms = log_p.shape[-2]
        # Gather the taken action's distribution: move actions first, reuse the value gather.
        flat = log_p.transpose(-1, -2)  # [*B, n, atoms]
        if self.action_space == "one_hot":
            if action.shape != flat.shape[:-1]:
                raise ValueError(
                    f"DistributionalDQNLoss: one-hot action {keys.action!r} has shape "
                    f"{tuple(action.shape)}, expected {tuple(flat.shape[:-1])}"
                )
            log_p_a = (flat * action.unsqueeze(-1).to(flat.dtype)).sum(-2)
        else:
            batch = flat.shape[:-2]
            if action.shape not in (batch, batch + (1,)):
                raise ValueError(
                    f"DistributionalDQNLoss: categorical action {keys.action!r} has shape "
                    f"{tuple(action.shape)}, expected {tuple(batch)}"
                )
            index = action.reshape(*batch, 1, 1).long().expand(*batch, 1, n_atoms)
            log_p_a = flat.gather(-2, index).squeeze(-2)
        with torch.no_grad():
            next_td = tensordict.get(NEXT)
            next_p = self._log_probs(next_td, ParamSet.TARGET).exp()
            q_next = (next_p * self.support.to(next_p.dtype).unsqueeze(-1)).sum(-2)
            mask = next_td.get(self._mask_key, None) if self._mask_key is not None else None
            best = masked_argmax(q_next, mask)
            index = best.reshape(*best.shape, 1, 1).expand(*best.shape, n_atoms, 1)
            p_best = next_p.gather(-1, index).squeeze(-1)  # [*B, atoms]
            reward = tensordict.get(next_key(keys.reward))
            terminated = tensordict.get(next_key(keys.terminated), None)
            if terminated is None:
                terminated = tensordict.get(next_key(keys.done))
            gamma: Any = self.gamma
            steps = tensordict.get(keys.steps_to_next_obs, None)
            if steps is not None:
                gamma = gamma ** steps.to(reward.dtype).reshape(reward.shape)
            m = self._project(p_best, reward, terminated.reshape(reward.shape), gamma)
        loss = -(m * log_p_a).sum(-1)
        tensordict.set(keys.priority, loss.detach())
        return TensorDict({"loss": reduce_loss(loss, self.reduction)}, batch_size=[])
