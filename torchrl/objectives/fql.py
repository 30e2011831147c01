"""Flow Q-Learning loss for offline RL (Park, Li and Levine, 2025)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential, dispatch
from torch import Tensor, nn

from torchrl._keys import ACTION, DONE, NEXT, PRIORITY, REWARD, STATE_ACTION_VALUE, TERMINATED
from torchrl._types import NestedKey
from torchrl.modules.models.flow import FlowMatchingModel, OneStepModel
from torchrl.objectives._helpers import check_reduction, reduce_loss, write_priority
from torchrl.objectives.common import LossModule, ParamSet, next_key
from torchrl.objectives.utils import ValueEstimators

__all__ = ["FQLLoss"]


def _check_policy(name: str, policy: nn.Module, model_class: type[nn.Module]) -> None:
    """Raises unless ``policy`` (or its last module) wraps a ``model_class`` with 1-2 in_keys."""
    head: Any = policy
    if isinstance(policy, TensorDictSequential):
        head = list(policy.module)[-1]  # type: ignore[arg-type]
    if not isinstance(getattr(head, "module", None), model_class):
        raise TypeError(
            f"FQLLoss: {name} must be a tensordict module wrapping a {model_class.__name__} "
            f"(or a TensorDictSequential ending in one), got {type(policy).__name__}"
        )
    in_keys = list(getattr(head, "in_keys", []))
    if len(in_keys) not in (1, 2):
        raise ValueError(
            f"FQLLoss: the {name} head reads the observation and optionally the noise "
            f"(one or two in_keys), got {in_keys}"
        )


class FQLLoss(LossModule):
    """Flow Q-Learning: a flow-matching behaviour policy, a distilled one-step actor, TD critics.

    With ``z ~ N(0, I)``, data ``(s, a, r, s')``, ``t ~ U(0, 1)`` and
    ``x_t = (1 - t) z + t a``:

    - ``loss_flow = |v(s, x_t, t) - (a - z)|^2`` (trains the flow only);
    - ``loss_actor = alpha |mu(s, z) - flow(s, z)|^2 - mean_i Q_i(s, clip(mu(s, z)))``, the
      distillation on the unclipped student output, the flow's output and the critics detached;
    - ``loss_qvalue = mean_i (Q_i(s, a) - y)^2`` with
      ``y = r + gamma (1 - terminated) agg_i Q_target_i(s', mu(s', z'))`` (TD0 by default).

    Squared errors are averaged over the action coordinates, critic terms over the critics.

    Args:
        flow_policy: a tensordict module whose ``.module`` is a
            :class:`~torchrl.modules.FlowMatchingModel`, reading the observation (and
            optionally the noise), or a ``TensorDictSequential`` of encoders ending in one.
        actor_network: the same with a :class:`~torchrl.modules.OneStepModel`.
        qvalue_network: reads the observation and ``"action"``, writes
            ``"state_action_value"``; copied into ``num_qvalue_nets`` critics with targets
            (a list gives the critics themselves).
        num_qvalue_nets: number of critics.
        alpha: the distillation weight.
        q_aggregation: ``"mean"`` or ``"min"`` over the target critics.
        normalize_q_loss: divide the actor's Q term by the detached ``mean |Q|``.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Examples:
        >>> from tensordict.nn import TensorDictModule
        >>> from torch import nn
        >>> from torchrl.modules import MLP, ValueOperator
        >>> flow = TensorDictModule(FlowMatchingModel(nn.Linear(3 + 2 + 1, 2), 2),
        ...     ["observation"], ["action"])
        >>> actor = TensorDictModule(OneStepModel(nn.Linear(3 + 2, 2), 2),
        ...     ["observation"], ["action"])
        >>> critic = ValueOperator(MLP(in_features=5, out_features=1, depth=1),
        ...     in_keys=["observation", "action"])
        >>> loss = FQLLoss(flow, actor, critic, alpha=10.0)
        >>> false = torch.zeros(8, 1, dtype=torch.bool)
        >>> data = TensorDict(observation=torch.randn(8, 3), action=torch.rand(8, 2) * 2 - 1,
        ...     next=TensorDict(observation=torch.randn(8, 3), reward=torch.randn(8, 1),
        ...         done=false, terminated=false), batch_size=[8])
        >>> out = loss(data)
        >>> sorted(k for k in out.keys() if k.startswith("loss_"))
        ['loss_actor', 'loss_flow', 'loss_qvalue']
        >>> data["td_error"].shape  # written for prioritized replay
        torch.Size([8])
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read and written by :class:`FQLLoss`."""

        action: NestedKey = ACTION
        state_action_value: NestedKey = STATE_ACTION_VALUE
        priority: NestedKey = PRIORITY
        reward: NestedKey = REWARD
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED

    default_keys: Any = _AcceptedKeys
    default_value_estimator = ValueEstimators.TD0
    _supported_estimators = (ValueEstimators.TD0,)
    flow_policy: TensorDictModuleBase

    def __init__(
        self,
        flow_policy: TensorDictModuleBase,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase | Sequence[TensorDictModuleBase],
        *,
        num_qvalue_nets: int = 2,
        alpha: float = 10.0,
        q_aggregation: Literal["mean", "min"] = "mean",
        normalize_q_loss: bool = False,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        if q_aggregation not in ("mean", "min"):
            raise ValueError(
                f"FQLLoss: q_aggregation must be 'mean' or 'min', got {q_aggregation!r}"
            )
        if alpha < 0:
            raise ValueError(f"FQLLoss: alpha must be >= 0, got {alpha}")
        _check_policy("flow_policy", flow_policy, FlowMatchingModel)
        _check_policy("actor_network", actor_network, OneStepModel)
        critics = list(qvalue_network) if isinstance(qvalue_network, Sequence) else None
        if critics is not None:
            if not critics:
                raise ValueError("FQLLoss: qvalue_network is an empty list")
            num_qvalue_nets = len(critics)
            qvalue_network = critics[0]
        if not isinstance(qvalue_network, nn.Module):
            raise TypeError(
                f"FQLLoss: qvalue_network must be a tensordict module or a list of them, got "
                f"{type(qvalue_network).__name__}"
            )
        self.convert_to_functional(flow_policy, "flow_policy")
        self.convert_to_functional(actor_network, "actor_network")
        self.convert_to_functional(
            qvalue_network, "qvalue_network", expand_dim=num_qvalue_nets, create_target_params=True
        )
        if critics is not None and len(critics) > 1:
            # The ensemble starts from copies of the first critic: load each given critic's own
            # tensors into its slot (online and target).
            given = TensorDict.from_modules(*critics).data
            with torch.no_grad():
                for attr in ("qvalue_network_params", "target_qvalue_network_params"):
                    params: Any = getattr(self, attr)
                    params.data.update_(given)
        self._tensor_keys.action = (getattr(actor_network, "out_keys", None) or [ACTION])[-1]
        self._adopt_out_key("state_action_value", qvalue_network)
        self.num_qvalue_nets = num_qvalue_nets
        self.alpha = float(alpha)
        self.q_aggregation = q_aggregation
        self.normalize_q_loss = bool(normalize_q_loss)
        self.reduction = check_reduction(reduction)
        self.out_keys = [
            "loss_flow",
            "loss_actor",
            "loss_qvalue",
            "distillation",
            "state_action_value_actor",
            "pred_value",
            "target_value",
        ]
        self._refresh_keys()

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        critic_obs = [k for k in self.qvalue_network.in_keys if k != keys.action]
        return [
            *self._policy_in_keys("flow_policy", with_next=False),
            *self._policy_in_keys("actor_network", with_next=True),
            *critic_obs,
            *[next_key(k) for k in critic_obs],
            keys.action,
            next_key(keys.reward),
            next_key(keys.done),
            next_key(keys.terminated),
        ]

    def _parts(self, name: str) -> tuple[Any, list[nn.Module], Any]:
        """``(policy, encoders, head)`` of ``"flow_policy"`` or ``"actor_network"``."""
        policy: Any = getattr(self, name)
        if isinstance(policy, TensorDictSequential):
            modules = list(policy.module)  # type: ignore[arg-type]
            return policy, modules[:-1], modules[-1]
        return policy, [], policy

    def _policy_in_keys(self, name: str, *, with_next: bool) -> list[NestedKey]:
        policy, _, head = self._parts(name)
        # The noise key is optional: drawn when absent.
        noise = list(head.in_keys)[1:]
        keys = [k for k in policy.in_keys if k not in noise]
        return keys + ([next_key(k) for k in keys] if with_next else [])

    def _observation(self, name: str, data: TensorDictBase) -> tuple[Tensor, Tensor | None]:
        """The policy head's observation (after the encoders) and the stored noise, if any."""
        policy, encoders, head = self._parts(name)
        if encoders:
            data = data.select(*policy.in_keys, strict=False)
            for encoder in encoders:
                data = encoder(data)
        in_keys = list(head.in_keys)
        noise = data.get(in_keys[1], None) if len(in_keys) == 2 else None
        return data.get(in_keys[0]), noise

    def _model(self, name: str) -> Any:
        """The tensor model (FlowMatchingModel or OneStepModel) at the end of a policy."""
        return self._parts(name)[2].module

    def _q(self, data: TensorDictBase, action: Tensor, param_set: ParamSet) -> Tensor:
        """``[n_critics, *B, 1]`` values of ``action`` at the observations of ``data``."""
        keys = self.tensor_keys
        inputs = data.select(*self.qvalue_network.in_keys, strict=False).copy()
        inputs.set(keys.action, action)
        return self._call_ensemble("qvalue_network", inputs, [keys.state_action_value], param_set)[
            0
        ]

    def _student(self, data: TensorDictBase, noise: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(observation, unclipped action)`` of the one-step actor on ``data``."""
        obs, stored = self._observation("actor_network", data)
        model: OneStepModel = self._model("actor_network")
        if noise is None:
            noise = stored
        return obs, model(obs, noise, clamp=False)

    def _clip(self, action: Tensor) -> Tensor:
        model: OneStepModel = self._model("actor_network")
        return torch.minimum(torch.maximum(action, model.low.to(action)), model.high.to(action))

    def flow_loss(self, tensordict: TensorDictBase) -> Tensor:
        """Per-sample flow-matching loss ``[*B]`` (velocity regression on straight paths).

        Args:
            tensordict: a batch ``[*B]`` with the observation and the data action.

        Returns:
            The squared velocity error averaged over the action coordinates.
        """
        obs, _ = self._observation("flow_policy", tensordict)
        action = tensordict.get(self.tensor_keys.action).detach().to(obs.dtype)
        model: FlowMatchingModel = self._model("flow_policy")
        x0 = torch.randn_like(action)
        t = torch.rand(*action.shape[:-1], 1, device=action.device, dtype=action.dtype)
        x_t = (1 - t) * x0 + t * action
        pred = model.velocity(obs, x_t, t)
        return (pred - (action - x0)).pow(2).mean(-1)

    def actor_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """Per-sample actor loss ``[*B]``: ``alpha`` * distillation minus the mean critic value.

        Args:
            tensordict: a batch ``[*B]`` with the observation.

        Returns:
            The loss and detached diagnostics.
        """
        model: OneStepModel = self._model("actor_network")
        obs, noise = self._observation("actor_network", tensordict)
        if noise is None:
            # Teacher and student must see the same noise: draw it here.
            noise = torch.randn(
                *obs.shape[:-1], model.action_dim, device=obs.device, dtype=obs.dtype
            )
        with torch.no_grad():
            flow_obs, _ = self._observation("flow_policy", tensordict)
            teacher = self._model("flow_policy")(flow_obs, noise)
        student = model(obs, noise, clamp=False)
        distill = (student - teacher).pow(2).mean(-1)
        q = self._q(tensordict, self._clip(student), ParamSet.DETACHED).mean(0)  # [*B, 1]
        q_loss = -q.reshape(distill.shape)
        if self.normalize_q_loss:
            q_loss = q_loss / q.abs().mean().detach().clamp_min(1e-6)
        info = {
            "distillation": distill.detach().mean(),
            "state_action_value_actor": q.detach().mean(),
        }
        return self.alpha * distill + q_loss, info

    def qvalue_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """Per-sample critic loss ``[*B]``, averaged over the critics; writes the TD error.

        Args:
            tensordict: a batch ``[*B]`` with observation, action and ``"next"`` entries.

        Returns:
            The loss and detached diagnostics.
        """
        next_td = tensordict.get(NEXT)
        with torch.no_grad():
            _, next_action = self._student(next_td)
            next_q = self._q(next_td, self._clip(next_action), ParamSet.TARGET)
            next_value = next_q.mean(0) if self.q_aggregation == "mean" else next_q.min(0).values
            target = self.value_estimator.value_estimate(tensordict, next_value=next_value)
        action = tensordict.get(self.tensor_keys.action)
        pred = self._q(tensordict, action, ParamSet.ONLINE)  # [n, *B, 1]
        loss = (pred - target.expand_as(pred)).pow(2).mean(0)
        if loss.numel() == tensordict.batch_size.numel():
            loss = loss.reshape(tensordict.batch_size)
        write_priority(tensordict, self.tensor_keys.priority, pred, target, ensemble=True)
        info = {"pred_value": pred.detach().mean(), "target_value": target.mean()}
        return loss, info

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes ``loss_flow``, ``loss_actor``, ``loss_qvalue`` and detached diagnostics.

        Args:
            tensordict: a batch ``[*B]`` with the observation (root and ``"next"``), the data
                action ``[*B, action_dim]`` and ``("next", "reward"/"done"/"terminated")``
                (``[*B, 1]``).

        Returns:
            A TensorDict; sum its ``loss_*`` entries for one backward pass.
        """
        self._check_inputs(tensordict)
        loss_flow = self.flow_loss(tensordict)
        loss_actor, actor_info = self.actor_loss(tensordict)
        loss_qvalue, q_info = self.qvalue_loss(tensordict)
        out: dict[str, Tensor] = {
            "loss_flow": reduce_loss(loss_flow, self.reduction),
            "loss_actor": reduce_loss(loss_actor, self.reduction),
            "loss_qvalue": reduce_loss(loss_qvalue, self.reduction),
            **actor_info,
            **q_info,
        }
        return TensorDict(out, batch_size=[])
