"""Building blocks shared by several losses: checks, reductions, distributions, actions.

Public names of a private module: the loss modules of :mod:`torchrl.objectives` import them;
users reach the same behaviour through the losses' arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import CompositeDistribution
from torch import Tensor, nn

from torchrl._keys import paper_era_log_prob_key
from torchrl._types import NestedKey
from torchrl.modules.distributions.continuous import TanhNormal
from torchrl.modules.distributions.utils import mc_entropy
from torchrl.modules.models.value_norm import DecodedValueOperator, encode_value
from torchrl.objectives.common import direct_call_inputs, wrapped_network
from torchrl.objectives.utils import LossFunction, Reduction, distance_loss

if TYPE_CHECKING:
    from torchrl.data.specs import TensorSpec
    from torchrl.objectives.common import LossModule

__all__ = [
    "UNSET",
    "AlphaOwner",
    "action_bounds",
    "action_log_prob",
    "alpha_loss",
    "as_batch",
    "check_action_shape",
    "check_loss_function",
    "check_probabilistic_actor",
    "check_reduction",
    "clamped_alpha",
    "critic_value_loss",
    "decoded_critic",
    "dist_entropy",
    "either_alias",
    "encoded_critic_data",
    "ensemble_distance",
    "find_mask_key",
    "gather_action_values",
    "get_log_prob",
    "masked_argmax",
    "reduce_loss",
    "reduced_distance",
    "register_log_alpha",
    "resolve_action_space",
    "resolve_target_entropy",
    "rsample_and_log_prob",
    "soft_actor_critic_terms",
    "td_error_priority",
    "without_greedy_head",
    "write_priority",
]

# ------------------------------------------------------------------------------------------
# Reductions and argument checks
# ------------------------------------------------------------------------------------------


def reduce_loss(tensor: Tensor, reduction: Reduction) -> Tensor:
    """Reduces a per-sample loss: ``"mean"``, ``"sum"`` or ``"none"``."""
    if reduction == "mean":
        return tensor.mean()
    if reduction == "sum":
        return tensor.sum()
    if reduction == "none":
        return tensor
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


# The aten ops behind ``F.mse_loss`` & co., with their trailing arguments: called directly, as
# the shapes are checked equal first, they skip the functional wrappers' broadcasting and
# legacy-argument handling (~5 us a call on a CPU, a third of a small loss op). Same kernels,
# same autograd nodes; ``_REDUCTIONS`` are ATen's reduction codes.
_FUSED_DISTANCE: dict[str, tuple[Any, tuple[float, ...]]] = {
    "l2": (torch.ops.aten.mse_loss.default, ()),
    "l1": (torch.ops.aten.l1_loss.default, ()),
    "smooth_l1": (torch.ops.aten.smooth_l1_loss.default, (1.0,)),
}
_REDUCTIONS = {"mean": 1, "sum": 2}


def reduced_distance(
    v1: Tensor,
    v2: Tensor,
    loss_function: LossFunction,
    reduction: Reduction,
    strict_shape: bool = True,
) -> Tensor:
    """``reduce_loss(distance_loss(v1, v2, loss_function, strict_shape), reduction)``, as one
    fused torch loss op (forward and backward) when the shapes agree and the reduction is
    ``"mean"`` or ``"sum"``."""
    fused = _FUSED_DISTANCE.get(loss_function)
    code = _REDUCTIONS.get(reduction)
    if fused is not None and code is not None and v1.shape == v2.shape:
        op, extra = fused
        return op(v1, v2, code, *extra)
    return reduce_loss(distance_loss(v1, v2, loss_function, strict_shape), reduction)


def ensemble_distance(
    pred: Tensor, target: Tensor, loss_function: LossFunction, reduction: Reduction
) -> Tensor:
    """``reduce_loss(sum_i d(pred_i, target), reduction)`` for the ``[n, *B, *F]`` predictions
    of ``n`` critics and their shared ``[*B, *F]`` target.

    Summed over the critics then averaged over the batch is ``n`` times the mean over all
    members, so ``"mean"`` and ``"sum"`` take one fused loss op."""
    target = target.expand_as(pred)
    if reduction == "none":
        return distance_loss(pred, target, loss_function).sum(0)
    reduced = reduced_distance(pred, target, loss_function, reduction)
    return reduced * pred.shape[0] if reduction == "mean" else reduced


def check_reduction(reduction: str) -> Reduction:
    """``reduction`` when it is ``"mean"``, ``"sum"`` or ``"none"``; raises otherwise."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return reduction  # type: ignore[return-value]


def check_loss_function(loss_function: str) -> LossFunction:
    """``loss_function`` when :func:`~torchrl.objectives.distance_loss` knows it; raises otherwise."""
    if loss_function not in ("l1", "l2", "smooth_l1"):
        raise ValueError(
            f"loss_function must be one of 'l1', 'l2', 'smooth_l1', got {loss_function!r}"
        )
    return loss_function  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------
# Distribution helpers shared by the policy-gradient and entropy-regularised losses
# ------------------------------------------------------------------------------------------


def _is_composite(dist: torch.distributions.Distribution) -> bool:
    return isinstance(dist, CompositeDistribution)


def action_log_prob(
    dist: torch.distributions.Distribution, tensordict: TensorDictBase, action_key: NestedKey
) -> Tensor:
    """Log-probability of the stored action(s), summed over event dims (``[*B]``)."""
    if _is_composite(dist):
        from tensordict.nn import set_composite_lp_aggregate

        with set_composite_lp_aggregate(True):
            return dist.log_prob(tensordict)
    return dist.log_prob(tensordict.get(action_key))


# ``entropy`` methods that only raise NotImplementedError.
_NO_CLOSED_FORM_ENTROPY = (torch.distributions.Distribution.entropy, TanhNormal.entropy)


def dist_entropy(dist: torch.distributions.Distribution, samples_mc: int = 1) -> Tensor:
    """Entropy of ``dist`` (``[*B]``): closed form, else a Monte-Carlo estimate."""
    if _is_composite(dist):
        from tensordict.nn import set_composite_lp_aggregate

        with set_composite_lp_aggregate(True):
            return dist.entropy(samples_mc)  # type: ignore[call-arg]
    if type(dist).entropy not in _NO_CLOSED_FORM_ENTROPY:  # (known to raise: no exception)
        try:
            return dist.entropy()
        except NotImplementedError:
            pass
    if dist.has_rsample and callable(getattr(dist, "rsample_and_log_prob", None)):
        # Scored from its own draw (a TanhNormal's pre-tanh value): the exact density,
        # without the atanh(tanh(x)) round trip of log_prob(rsample()) and its backward.
        return mc_entropy(dist, samples_mc)
    sample = dist.rsample((samples_mc,)) if dist.has_rsample else dist.sample((samples_mc,))
    return -dist.log_prob(sample).mean(0)


def rsample_and_log_prob(dist: torch.distributions.Distribution) -> tuple[Tensor, Tensor]:
    """A reparameterised sample and its log-probability (``[*B, *E]``, ``[*B]``)."""
    fn = getattr(dist, "rsample_and_log_prob", None)
    if fn is not None:
        return fn()
    sample = dist.rsample()
    return sample, dist.log_prob(sample)


def get_log_prob(tensordict: TensorDictBase, key: NestedKey) -> Tensor | None:
    """The stored log-probability at ``key``; ``None`` when absent.

    A key whose last part is the default ``"action_log_prob"`` also finds the paper-era
    ``"sample_log_prob"`` beside it, so data collected with that name still trains.
    """
    value = tensordict.get(key, None)
    if value is None:
        legacy = paper_era_log_prob_key(key)
        if legacy is not None:
            value = tensordict.get(legacy, None)
    return value


def as_batch(value: Tensor, like: Tensor, what: str, loss: str) -> Tensor:
    """Reshapes ``value`` to ``like``'s shape when only a trailing singleton dim differs."""
    if value.shape == like.shape:
        return value
    if value.numel() == like.numel():
        return value.reshape_as(like)  # (a torch.Size argument costs ~1.5 us more)
    raise ValueError(
        f"{loss}: {what} has shape {tuple(value.shape)}, expected {tuple(like.shape)} "
        "(the batch shape of the action log-probabilities)"
    )


# ------------------------------------------------------------------------------------------
# The critic term of the on-policy losses (A2C, PPO, REINFORCE)
# ------------------------------------------------------------------------------------------


def _critic_value(critic: Any, tensordict: TensorDictBase, key: NestedKey) -> Tensor:
    """``critic(inputs).get(key)`` on a selection of ``tensordict``; the critic's network is
    called directly when its wrapper only reads, calls and writes ``key`` (see
    :func:`~torchrl.objectives.common.calls_network_directly`)."""
    args = direct_call_inputs(critic, tensordict, [key])
    if args is not None:
        return wrapped_network(critic)(*args)
    return critic(tensordict.select(*critic.in_keys, strict=False)).get(key)


def critic_value_loss(
    loss: LossModule,
    tensordict: TensorDictBase,
    critic_name: str,
    loss_type: LossFunction,
    clip_value: float | None,
    detach_shared_with: str | None,
    reduction: Reduction,
) -> tuple[Tensor, Tensor | None]:
    """Critic loss ``d(value_target, V(s))`` of the on-policy losses, reduced by ``reduction``.

    With ``clip_value`` the PPO2 clipped variant ``max(d(target, V), d(target, V_clipped))``
    where ``V_clipped = V_old + clamp(V - V_old, -clip_value, clip_value)`` and ``V_old`` is the
    value stored in the data. Returns ``(loss, clip_fraction or None)``.
    """
    keys = loss.tensor_keys
    name = type(loss).__name__
    target = tensordict.get(keys.value_target, None)
    if target is None:
        raise KeyError(
            f"{name}: the input has no {keys.value_target!r} entry (written by the value estimator)"
        )
    critic = getattr(loss, critic_name)
    if detach_shared_with is not None:
        inputs = tensordict.select(*critic.in_keys, strict=False)
        tensors = loss.network_tensors(critic_name, detach_shared_with=detach_shared_with)
        with loss.using_tensors(critic_name, tensors):
            value = critic(inputs).get(keys.value)
    else:
        value = _critic_value(critic, tensordict, keys.value)
    target = target.detach()
    if clip_value is None:
        return reduced_distance(target, value, loss_type, reduction, strict_shape=False), None
    per_sample = distance_loss(target, value, loss_type, strict_shape=False)
    old_value = tensordict.get(keys.value, None)
    if old_value is None:
        raise KeyError(
            f"{name}: clip_value needs the old value {keys.value!r} in the input (the value "
            "estimator writes it)"
        )
    old_value = old_value.detach()
    delta = value - old_value
    clipped = old_value + delta.clamp(-clip_value, clip_value)
    per_sample = torch.maximum(per_sample, distance_loss(target, clipped, loss_type, False))
    clip_fraction = (delta.abs() > clip_value).to(delta.dtype).mean().detach()
    return reduce_loss(per_sample, reduction), clip_fraction


# ------------------------------------------------------------------------------------------
# Discrete actions
# ------------------------------------------------------------------------------------------

_DISCRETE_SPACES = ("one_hot", "categorical")


def resolve_action_space(
    loss: str, action_space: str | TensorSpec | None, network: nn.Module
) -> str:
    """``"one_hot"`` or ``"categorical"``, from the argument, the network or its spec."""
    if action_space is None:
        for sub in network.modules() if isinstance(network, nn.Module) else ():
            space = getattr(sub, "action_space", None)
            if isinstance(space, str):
                action_space = space
                break
        else:
            spec = getattr(network, "spec", None)
            action_space = spec if spec is not None else None
    if action_space is not None and not isinstance(action_space, str):
        from torchrl.modules._spec_utils import leaf_spec, spec_kind

        leaf = leaf_spec(action_space, "action") if hasattr(action_space, "keys") else action_space
        action_space = spec_kind(leaf) if leaf is not None else None
    if action_space is None:
        raise ValueError(
            f"{loss}: cannot infer the action space; pass action_space='one_hot' or "
            "'categorical' (or an action spec)"
        )
    if action_space not in _DISCRETE_SPACES:
        raise ValueError(
            f"{loss}: action_space must be 'one_hot' or 'categorical', got {action_space!r}"
        )
    return action_space


def gather_action_values(
    values: Tensor, action: Tensor, action_space: str, loss: str, action_key: NestedKey = "action"
) -> Tensor:
    """Values ``[*B, n]`` of the taken actions, as ``[*B, 1]``; checks the action's shape."""
    n = values.shape[-1]
    batch = values.shape[:-1]
    if action_space == "one_hot":
        if action.shape != values.shape:
            raise ValueError(
                f"{loss}: one-hot action {action_key!r} has shape {tuple(action.shape)}, "
                f"expected {tuple(values.shape)} (the action values' shape)"
            )
        if action.dtype == torch.bool:
            action = action.view(torch.uint8)  # the same bytes, without a copy
        # The hot index, then a gather: two cheap ops, and a non-finite value of an action
        # not taken stays out (0 * inf is nan in a product with the one-hot).
        return values.gather(-1, action.argmax(-1, keepdim=True))
    if action.shape == batch + (1,):
        index = action
    elif action.shape == batch:
        index = action.unsqueeze(-1)
    else:
        raise ValueError(
            f"{loss}: categorical action {action_key!r} has shape {tuple(action.shape)}, "
            f"expected {tuple(batch)} or {tuple(batch) + (1,)} for {n} actions"
        )
    if action.is_floating_point():
        index = index.round()
    return values.gather(-1, index.long())


def masked_argmax(values: Tensor, mask: Tensor | None, keepdim: bool = False) -> Tensor:
    if mask is not None:
        values = values.masked_fill(~mask.bool().expand_as(values), float("-inf"))
    return values.argmax(-1, keepdim=keepdim)


def write_priority(
    tensordict: TensorDictBase,
    key: NestedKey,
    pred: Tensor,
    target: Tensor,
    ensemble: bool = False,
) -> Tensor:
    """Writes the per-sample priority ``|pred - target|`` (``[*B]``) at ``key``, without a graph.

    Args:
        tensordict: the loss's input ``[*B]``, written in place.
        key: where the priority goes (the loss's ``priority`` key).
        pred: the predicted values, ``[*B, 1]`` (or ``[n, *B, 1]`` with ``ensemble``).
        target: their targets, ``[*B, 1]``.
        ensemble: ``pred`` has one row per critic; the priority is the largest of the ``n``
            errors.

    Returns:
        The error in ``target``'s shape (``[*B, 1]``), before the reshape to the batch.
    """
    error = (pred.detach() - target).abs_()
    if ensemble:
        error = error.amax(0)
    tensordict.set(key, td_error_priority(error, tensordict.batch_size))
    return error


def td_error_priority(td_error: Tensor, batch_shape: torch.Size) -> Tensor:
    """Per-sample priorities ``[*B]`` from a ``[*B, 1]`` (or ``[*B]``) error, without a graph."""
    if td_error.requires_grad:
        td_error = td_error.detach()
    if td_error.shape != batch_shape and td_error.numel() == batch_shape.numel():
        # The sizes unpacked: a torch.Size argument costs ~1.5 us more to parse.
        return td_error.reshape(*batch_shape) if batch_shape else td_error.reshape(())
    return td_error


def find_mask_key(network: nn.Module) -> NestedKey | None:
    for sub in network.modules() if isinstance(network, nn.Module) else ():
        key = getattr(sub, "action_mask_key", None)
        if key is not None:
            return key
    return None


# ------------------------------------------------------------------------------------------
# Continuous actions
# ------------------------------------------------------------------------------------------


def _leaf_action_spec(
    action_spec: TensorSpec | None, actor: nn.Module, action_key: NestedKey
) -> Any:
    """The action's leaf spec: ``action_spec`` (leaf or composite) or the actor's ``spec``."""
    from torchrl.modules._spec_utils import leaf_spec

    for spec in (action_spec, getattr(actor, "spec", None)):
        if spec is None:
            continue
        if hasattr(spec, "keys"):
            leaf = leaf_spec(spec, action_key)
            if leaf is not None:
                return leaf
        else:
            return spec
    return None


def action_bounds(
    loss: str,
    action_spec: TensorSpec | None,
    bounds: tuple[Any, Any] | None,
    actor: nn.Module,
    action_key: NestedKey,
) -> tuple[Tensor, Tensor]:
    """``(low, high)`` of the actions: from ``bounds``, ``action_spec`` or the actor's spec."""
    if bounds is not None:
        low, high = bounds
    else:
        leaf = _leaf_action_spec(action_spec, actor, action_key)
        low = getattr(leaf, "low", None) if leaf is not None else None
        high = getattr(leaf, "high", None) if leaf is not None else None
        if low is None or high is None:
            raise ValueError(
                f"{loss}: needs the action bounds; pass bounds=(low, high) or a Bounded "
                f"action_spec (got {type(leaf).__name__ if leaf is not None else None})"
            )
    low_t = torch.as_tensor(low, dtype=torch.float32).detach().clone()
    high_t = torch.as_tensor(high, dtype=torch.float32).detach().clone()
    if not bool((high_t > low_t).all()):
        raise ValueError(f"{loss}: the action bounds need high > low, got {low_t}, {high_t}")
    return low_t, high_t


def check_probabilistic_actor(loss: str, actor: Any) -> None:
    """Raises a ``TypeError`` unless ``actor`` has ``get_dist()`` (a probabilistic actor)."""
    if not hasattr(actor, "get_dist"):
        raise TypeError(
            f"{loss}: actor_network must be a probabilistic actor with get_dist() (e.g. "
            f"ProbabilisticActor), got {type(actor).__name__}"
        )


def resolve_target_entropy(
    loss: str,
    target_entropy: str | float,
    action_spec: TensorSpec | None,
    actor: nn.Module,
    action_key: NestedKey,
    fixed_alpha: bool = False,
) -> float:
    """``target_entropy``, or ``-prod(action shape)`` for ``"auto"``.

    With ``fixed_alpha`` an unknown action shape gives 0.0: a fixed temperature never reads the
    target entropy.
    """
    if target_entropy != "auto":
        return float(target_entropy)
    leaf = _leaf_action_spec(action_spec, actor, action_key)
    shape = getattr(leaf, "shape", None) if leaf is not None else None
    if shape is None:
        if fixed_alpha:
            return 0.0
        raise ValueError(
            f"{loss}: target_entropy='auto' needs the action's shape; pass an action_spec or a "
            "number"
        )
    # The action spec may carry the env's batch dims: only the last one counts.
    size = int(shape[-1]) if len(shape) else 1
    return -float(size)


# ------------------------------------------------------------------------------------------
# Entropy temperature (SAC, REDQ, CQL, online DT)
# ------------------------------------------------------------------------------------------


class AlphaOwner(Protocol):
    """A loss with a learned (or fixed) entropy temperature, set up by :func:`register_log_alpha`."""

    log_alpha: Tensor
    fixed_alpha: bool
    min_log_alpha: float | None
    max_log_alpha: float | None
    target_entropy: float

    def register_buffer(
        self, name: str, tensor: Tensor | None, persistent: bool = True
    ) -> None: ...

    def register_parameter(self, name: str, param: nn.Parameter | None) -> None: ...


def register_log_alpha(
    loss: AlphaOwner,
    alpha_init: float,
    fixed_alpha: bool,
    min_alpha: float | None,
    max_alpha: float | None,
) -> None:
    """Gives ``loss`` its entropy temperature: ``log_alpha`` (a parameter, or a buffer when fixed).

    Also sets ``fixed_alpha``, ``min_log_alpha`` and ``max_log_alpha`` (SAC, REDQ, CQL, online
    DT share this).
    """
    if alpha_init <= 0:
        raise ValueError(f"alpha_init must be positive, got {alpha_init}")
    log_alpha = torch.tensor(float(alpha_init)).log()
    if fixed_alpha:
        loss.register_buffer("log_alpha", log_alpha)
    else:
        loss.register_parameter("log_alpha", nn.Parameter(log_alpha))
    loss.fixed_alpha = fixed_alpha
    loss.min_log_alpha = None if min_alpha is None else float(torch.tensor(min_alpha).log())
    loss.max_log_alpha = None if max_alpha is None else float(torch.tensor(max_alpha).log())


def clamped_alpha(loss: AlphaOwner) -> Tensor:
    """``exp(log_alpha)`` clamped to ``[min_alpha, max_alpha]``, detached."""
    log_alpha = loss.log_alpha.detach()
    if loss.min_log_alpha is not None or loss.max_log_alpha is not None:
        log_alpha = log_alpha.clamp(loss.min_log_alpha, loss.max_log_alpha)
    return log_alpha.exp()


def alpha_loss(loss: AlphaOwner, log_prob: Tensor) -> Tensor:
    """Per-sample ``-log_alpha * (log_prob + target_entropy)`` (no gradient to the policy)."""
    if loss.fixed_alpha:
        return torch.zeros_like(log_prob)
    return -loss.log_alpha * (log_prob.detach() + loss.target_entropy)


class _SoftActorCritic(AlphaOwner, Protocol):
    reduction: Reduction


def soft_actor_critic_terms(
    loss: _SoftActorCritic,
    loss_actor: Tensor,
    loss_qvalue: Tensor,
    log_prob: Tensor,
    alpha: Tensor,
) -> TensorDict:
    """The output of the SAC family: reduced actor, critic and temperature losses, ``alpha``
    and the entropy estimate ``-mean(log_prob)`` (detached)."""
    return TensorDict(
        {
            "loss_actor": reduce_loss(loss_actor, loss.reduction),
            "loss_qvalue": reduce_loss(loss_qvalue, loss.reduction),
            "loss_alpha": reduce_loss(alpha_loss(loss, log_prob), loss.reduction),
            "alpha": alpha,
            "entropy": -log_prob.detach().mean(),
        },
        batch_size=[],
    )


# ------------------------------------------------------------------------------------------
# Critics trained on normalised / transformed values (PPO, A2C)
# ------------------------------------------------------------------------------------------


def decoded_critic(loss: Any) -> nn.Module | None:
    """The critic as the value estimator should call it: real-scale values.

    ``loss.critic_network`` itself without ``value_norm``/``value_transform``; otherwise a
    :class:`~torchrl.modules.DecodedValueOperator` around it.
    """
    critic = loss.critic_network
    if critic is None or (loss.value_norm is None and loss.value_transform is None):
        return critic
    return DecodedValueOperator(
        critic,
        value_norm=loss.value_norm,
        value_transform=loss.value_transform,
        value_key=loss.tensor_keys.value,
    )


def encoded_critic_data(loss: Any, tensordict: TensorDictBase) -> TensorDictBase:
    """A shallow copy whose value target and old value are in the critic's prediction space.

    In training mode the normaliser's statistics move first (with the targets), so the targets
    are normalised with the statistics the critic is fit to.
    """
    keys = loss.tensor_keys
    target = tensordict.get(keys.value_target, None)
    if target is None:
        return tensordict
    data = tensordict.copy()
    norm, transform = loss.value_norm, loss.value_transform
    data.set(
        keys.value_target, encode_value(target.detach(), norm, transform, update=loss.training)
    )
    old_value = tensordict.get(keys.value, None)
    if old_value is not None:
        data.set(keys.value, encode_value(old_value, norm, transform))
    return data


# ------------------------------------------------------------------------------------------
# Arguments, action shapes and Q-networks
# ------------------------------------------------------------------------------------------


def check_action_shape(loss: str, key: NestedKey, data: Tensor, policy: Tensor) -> None:
    """Raises when the data's actions and the policy's differ in shape (before any gradient)."""
    if data.shape != policy.shape:
        raise ValueError(
            f"{loss}: the data's action {key!r} has shape {tuple(data.shape)} but the policy "
            f"writes actions of shape {tuple(policy.shape)}; check the action spec and keys"
        )


# The default of an argument that has two accepted spellings: tells "not given" from any value.
UNSET: Any = object()


def either_alias(
    loss: str, name: str, value: Any, alias: str, alias_value: Any, default: Any
) -> Any:
    """One value from two equal spellings of an argument (``entropy_coef``/``entropy_coeff``)."""
    if value is not UNSET and alias_value is not UNSET and value != alias_value:
        raise ValueError(f"{loss}: {name}={value} and {alias}={alias_value} disagree; pass one")
    if value is not UNSET:
        return value
    if alias_value is not UNSET:
        return alias_value
    return default


def without_greedy_head(network: nn.Module) -> tuple[nn.Module, ...]:
    """The modules of ``network`` that compute its action values.

    A Q-value actor ends with a greedy module (action, chosen value) that the losses do not
    need: they read the action values and choose the actions themselves. The modules are the
    network's own (shared parameters), so parameter swaps on ``network`` apply to them.
    """
    from tensordict.nn import TensorDictSequential

    if isinstance(network, TensorDictSequential) and len(network.module) > 1:
        last = network.module[-1]
        if getattr(last, "action_value_key", None) is not None and not any(
            True for _ in last.parameters()
        ):
            return tuple(network.module[:-1])
    return (network,)
