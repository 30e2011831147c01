"""Helpers shared by the losses: estimator names, distances, reductions and target updates."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from torchrl.objectives.common import LossModule

__all__ = [
    "HardUpdate",
    "SoftUpdate",
    "TargetNetUpdater",
    "ValueEstimators",
    "default_value_kwargs",
    "distance_loss",
    "hold_out_net",
]

LossFunction = Literal["l1", "l2", "smooth_l1"]
Reduction = Literal["mean", "sum", "none"]


class ValueEstimators(enum.Enum):
    """The value estimators a loss can use (``loss.make_value_estimator(ValueEstimators.GAE)``).

    Examples:
        >>> ValueEstimators.GAE.name
        'GAE'
        >>> ValueEstimators("td0") is ValueEstimators.TD0
        True
    """

    TD0 = "td0"
    TD1 = "td1"
    TDLambda = "td_lambda"
    GAE = "gae"
    VTrace = "vtrace"

    @classmethod
    def _missing_(cls, value: object) -> ValueEstimators | None:
        # Accept the enum's name as well ("TDLambda", "gae", ...).
        if isinstance(value, str):
            for member in cls:
                if value.lower() in (member.name.lower(), member.value):
                    return member
        return None


_DEFAULT_KWARGS: dict[ValueEstimators, dict[str, float | bool]] = {
    ValueEstimators.TD0: {"gamma": 0.99, "differentiable": True},
    ValueEstimators.TD1: {"gamma": 0.99, "differentiable": True},
    ValueEstimators.TDLambda: {"gamma": 0.99, "lmbda": 0.95, "differentiable": True},
    ValueEstimators.GAE: {"gamma": 0.99, "lmbda": 0.95, "differentiable": False},
    ValueEstimators.VTrace: {"gamma": 0.99, "differentiable": False},
}


def default_value_kwargs(value_type: ValueEstimators | str) -> dict[str, float | bool]:
    """The default hyper-parameters of a value estimator.

    Args:
        value_type: a :class:`ValueEstimators` member (or its name).

    Returns:
        A new dict, e.g. ``{"gamma": 0.99, "lmbda": 0.95, "differentiable": False}`` for GAE.

    Examples:
        >>> default_value_kwargs(ValueEstimators.TD0)
        {'gamma': 0.99, 'differentiable': True}
    """
    return dict(_DEFAULT_KWARGS[ValueEstimators(value_type)])


def distance_loss(
    v1: Tensor,
    v2: Tensor,
    loss_function: LossFunction = "l2",
    strict_shape: bool = True,
) -> Tensor:
    """Element-wise distance between two tensors, not reduced.

    Args:
        v1: a tensor, e.g. predicted values ``[*B, 1]``.
        v2: a tensor of the same shape, e.g. targets ``[*B, 1]``.
        loss_function: ``"l1"`` (absolute error), ``"l2"`` (squared error) or ``"smooth_l1"``
            (Huber loss with threshold 1).
        strict_shape: raise when the shapes differ; otherwise broadcast them.

    Returns:
        The per-element distance, shaped like ``v1`` (or the broadcast shape).

    Examples:
        >>> distance_loss(torch.tensor([0.0, 3.0]), torch.tensor([1.0, 0.0]), "l2")
        tensor([1., 9.])
        >>> distance_loss(torch.tensor([0.0, 3.0]), torch.tensor([1.0, 0.0]), "smooth_l1")
        tensor([0.5000, 2.5000])
    """
    if v1.shape != v2.shape:
        if strict_shape:
            raise ValueError(
                f"distance_loss: the two inputs have different shapes {tuple(v1.shape)} and "
                f"{tuple(v2.shape)}; pass strict_shape=False to broadcast them"
            )
        v1, v2 = torch.broadcast_tensors(v1, v2)
    if loss_function == "l2":
        return (v1 - v2).pow(2)
    if loss_function == "l1":
        return (v1 - v2).abs()
    if loss_function == "smooth_l1":
        return nn.functional.smooth_l1_loss(v1, v2, reduction="none")
    raise ValueError(f"loss_function must be one of 'l1', 'l2', 'smooth_l1', got {loss_function!r}")


def _reduce(tensor: Tensor, reduction: Reduction) -> Tensor:
    """Reduces a per-sample loss: ``"mean"``, ``"sum"`` or ``"none"``."""
    if reduction == "mean":
        return tensor.mean()
    if reduction == "sum":
        return tensor.sum()
    if reduction == "none":
        return tensor
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_reduction(reduction: str) -> Reduction:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return reduction  # type: ignore[return-value]


def _check_loss_function(loss_function: str) -> LossFunction:
    if loss_function not in ("l1", "l2", "smooth_l1"):
        raise ValueError(
            f"loss_function must be one of 'l1', 'l2', 'smooth_l1', got {loss_function!r}"
        )
    return loss_function  # type: ignore[return-value]


@contextmanager
def hold_out_net(network: nn.Module) -> Iterator[None]:
    """Turns off gradients for the parameters of ``network`` inside the block.

    Gradients still flow *through* the network to its inputs (e.g. from a critic to the
    actions of an actor), but the network's own parameters get none.

    Args:
        network: the module to hold out.

    Examples:
        >>> net = nn.Linear(2, 1)
        >>> x = torch.ones(1, 2, requires_grad=True)
        >>> with hold_out_net(net):
        ...     net(x).sum().backward()
        >>> net.weight.grad is None, x.grad is not None
        (True, True)
    """
    params = [p for p in network.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


class TargetNetUpdater:
    """Base of :class:`SoftUpdate` and :class:`HardUpdate`: pairs of online and target tensors.

    Args:
        loss_module: a :class:`~torchrl.objectives.LossModule` with target parameters.
    """

    def __init__(self, loss_module: LossModule) -> None:
        names = loss_module.target_network_names
        if not names:
            raise ValueError(
                f"{type(loss_module).__name__} has no target parameters to update: build it "
                "with delay_value/delay_actor/delay_qvalue=True"
            )
        self.loss_module = loss_module
        self.initialized = False

    def _pairs(self) -> tuple[list[Tensor], list[Tensor], list[Tensor], list[Tensor]]:
        """``(float_targets, float_sources, other_targets, other_sources)``, all detached."""
        ft, fs, ot, os_ = [], [], [], []
        for name in self.loss_module.target_network_names:
            sources = self.loss_module._online_tensors(name)
            targets = self.loss_module._target_tensors(name)
            for target, source in zip(targets, sources):
                if target.is_floating_point():
                    ft.append(target.data)
                    fs.append(source.data)
                else:
                    ot.append(target.data)
                    os_.append(source.data)
        return ft, fs, ot, os_

    @torch.no_grad()
    def init_(self) -> None:
        """Copies the online parameters into the targets."""
        ft, fs, ot, os_ = self._pairs()
        if ft:
            torch._foreach_copy_(ft, fs)
        for target, source in zip(ot, os_):
            target.copy_(source)
        self.initialized = True

    def step(self) -> None:
        """Updates the targets (see the subclasses)."""
        raise NotImplementedError


class SoftUpdate(TargetNetUpdater):
    """Polyak averaging of the targets: ``target <- eps * target + (1 - eps) * online``.

    Call :meth:`step` after each optimizer step. Non-float buffers (e.g. counters) are copied.

    Args:
        loss_module: a loss with target parameters.
        eps: the weight of the old target (``1 - tau``), in ``[0, 1]``. Defaults to 0.999.
        tau: the weight of the online parameters; give ``eps`` or ``tau``, not both.

    Examples:
        >>> from torchrl.modules import QValueActor
        >>> from torchrl.objectives import DQNLoss
        >>> loss = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="categorical"))
        >>> updater = SoftUpdate(loss, tau=0.5)
        >>> with torch.no_grad():
        ...     _ = loss.value_network.module[0].module.weight.add_(1.0)
        >>> updater.step()
        >>> target = loss.target_value_network_params["module", "0", "module", "weight"]
        >>> online = loss.value_network.module[0].module.weight
        >>> bool(torch.allclose(target, online - 0.5))
        True
    """

    def __init__(
        self, loss_module: LossModule, *, eps: float | None = None, tau: float | None = None
    ) -> None:
        if eps is not None and tau is not None:
            raise ValueError("SoftUpdate: pass eps or tau, not both (eps = 1 - tau)")
        if eps is None:
            eps = 0.999 if tau is None else 1.0 - tau
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"SoftUpdate: eps must lie in [0, 1], got {eps}")
        super().__init__(loss_module)
        self.eps = float(eps)

    @torch.no_grad()
    def step(self) -> None:
        """Moves each target a fraction ``1 - eps`` of the way to its online parameters."""
        ft, fs, ot, os_ = self._pairs()
        if ft:
            torch._foreach_lerp_(ft, fs, 1.0 - self.eps)
        for target, source in zip(ot, os_):
            target.copy_(source)


class HardUpdate(TargetNetUpdater):
    """Copies the online parameters into the targets every ``value_network_update_interval`` steps.

    Args:
        loss_module: a loss with target parameters.
        value_network_update_interval: number of :meth:`step` calls between two copies.

    Examples:
        >>> from torchrl.modules import QValueActor
        >>> from torchrl.objectives import DQNLoss
        >>> loss = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="categorical"))
        >>> updater = HardUpdate(loss, value_network_update_interval=2)
        >>> with torch.no_grad():
        ...     _ = loss.value_network.module[0].module.weight.add_(1.0)
        >>> updater.step()  # 1 of 2: nothing yet
        >>> target = loss.target_value_network_params["module", "0", "module", "weight"]
        >>> bool(torch.equal(target, loss.value_network.module[0].module.weight))
        False
        >>> updater.step()
        >>> bool(torch.equal(target, loss.value_network.module[0].module.weight))
        True
    """

    def __init__(self, loss_module: LossModule, *, value_network_update_interval: int = 1000):
        if value_network_update_interval < 1:
            raise ValueError(
                "HardUpdate: value_network_update_interval must be >= 1, got "
                f"{value_network_update_interval}"
            )
        super().__init__(loss_module)
        self.value_network_update_interval = int(value_network_update_interval)
        self.counter = 0

    def step(self) -> None:
        """Counts one step; copies the parameters every ``value_network_update_interval``."""
        self.counter += 1
        if self.counter >= self.value_network_update_interval:
            self.counter = 0
            self.init_()


# ------------------------------------------------------------------------------------------
# Distribution helpers shared by the policy-gradient and entropy-regularised losses
# ------------------------------------------------------------------------------------------


def _is_composite(dist: torch.distributions.Distribution) -> bool:
    from tensordict.nn import CompositeDistribution

    return isinstance(dist, CompositeDistribution)


def _log_prob(dist: torch.distributions.Distribution, tensordict: Any, action_key: Any) -> Tensor:
    """Log-probability of the stored action(s), summed over event dims (``[*B]``)."""
    if _is_composite(dist):
        from tensordict.nn import set_composite_lp_aggregate

        with set_composite_lp_aggregate(True):
            return dist.log_prob(tensordict)
    return dist.log_prob(tensordict.get(action_key))


def _entropy(dist: torch.distributions.Distribution, samples_mc: int = 1) -> Tensor:
    """Entropy of ``dist`` (``[*B]``): closed form, else a Monte-Carlo estimate."""
    if _is_composite(dist):
        from tensordict.nn import set_composite_lp_aggregate

        with set_composite_lp_aggregate(True):
            return dist.entropy(samples_mc)  # type: ignore[call-arg]
    try:
        return dist.entropy()
    except NotImplementedError:
        sample = dist.rsample((samples_mc,)) if dist.has_rsample else dist.sample((samples_mc,))
        return -dist.log_prob(sample).mean(0)


def _rsample_and_log_prob(dist: torch.distributions.Distribution) -> tuple[Tensor, Tensor]:
    """A reparameterised sample and its log-probability (``[*B, *E]``, ``[*B]``)."""
    fn = getattr(dist, "rsample_and_log_prob", None)
    if fn is not None:
        return fn()
    sample = dist.rsample()
    return sample, dist.log_prob(sample)


def _as_batch(value: Tensor, like: Tensor, what: str, loss: str) -> Tensor:
    """Reshapes ``value`` to ``like``'s shape when only a trailing singleton dim differs."""
    if value.shape == like.shape:
        return value
    if value.numel() == like.numel():
        return value.reshape(like.shape)
    raise ValueError(
        f"{loss}: {what} has shape {tuple(value.shape)}, expected {tuple(like.shape)} "
        "(the batch shape of the action log-probabilities)"
    )


def _standardize(x: Tensor, exclude_dims: tuple[int, ...] = ()) -> Tensor:
    """``(x - mean) / std`` over all dims but ``exclude_dims`` (std floored at 1e-6)."""
    if x.numel() < 2:
        return x
    dims = tuple(d for d in range(x.ndim) if d not in {e % x.ndim for e in exclude_dims})
    mean = x.mean(dims, keepdim=True)
    std = x.std(dims, keepdim=True).clamp_min(1e-6)
    return (x - mean) / std


def _value_loss(
    loss: LossModule,
    tensordict: Any,
    critic_name: str,
    loss_type: LossFunction,
    clip_value: float | None,
    detach_shared_with: str | None,
) -> tuple[Tensor, Tensor | None]:
    """Per-sample critic loss ``d(value_target, V(s))`` of the on-policy losses.

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
    old_value = tensordict.get(keys.value, None)
    critic = getattr(loss, critic_name)
    inputs = tensordict.select(*critic.in_keys, strict=False)
    if detach_shared_with is not None:
        tensors = loss._tensors_detaching_shared(critic_name, detach_shared_with)
        with loss._swapped(critic_name, tensors):
            value = critic(inputs).get(keys.value)
    else:
        value = critic(inputs).get(keys.value)
    target = target.detach()
    per_sample = distance_loss(target, value, loss_type, strict_shape=False)
    if clip_value is None:
        return per_sample, None
    if old_value is None:
        raise KeyError(
            f"{name}: clip_value needs the old value {keys.value!r} in the input (the value "
            "estimator writes it)"
        )
    old_value = old_value.detach()
    delta = value - old_value
    clipped = old_value + delta.clamp(-clip_value, clip_value)
    per_sample = torch.maximum(per_sample, distance_loss(target, clipped, loss_type, False))
    return per_sample, (delta.abs() > clip_value).to(delta.dtype).mean().detach()


# ------------------------------------------------------------------------------------------
# Discrete actions
# ------------------------------------------------------------------------------------------

_DISCRETE_SPACES = ("one_hot", "categorical")


def _resolve_action_space(loss: str, action_space: Any, network: Any) -> str:
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


def _gather_action_values(
    values: Tensor, action: Tensor, action_space: str, loss: str, action_key: Any = "action"
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
        return (values * action.to(values.dtype)).sum(-1, keepdim=True)
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


def _masked_argmax(values: Tensor, mask: Tensor | None) -> Tensor:
    if mask is not None:
        values = values.masked_fill(~mask.bool().expand_as(values), float("-inf"))
    return values.argmax(-1)


def _priority(td_error: Tensor, batch_shape: torch.Size) -> Tensor:
    """Per-sample priorities ``[*B]`` from a ``[*B, 1]`` (or ``[*B]``) error."""
    td_error = td_error.detach()
    if td_error.shape != batch_shape and td_error.numel() == batch_shape.numel():
        return td_error.reshape(batch_shape)
    return td_error


def _find_mask_key(network: Any) -> Any:
    for sub in network.modules() if isinstance(network, nn.Module) else ():
        key = getattr(sub, "action_mask_key", None)
        if key is not None:
            return key
    return None


# ------------------------------------------------------------------------------------------
# Continuous actions
# ------------------------------------------------------------------------------------------


def _leaf_action_spec(action_spec: Any, actor: Any, action_key: Any) -> Any:
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


def _action_bounds(
    loss: str, action_spec: Any, bounds: Any, actor: Any, action_key: Any
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


def _target_entropy(
    loss: str, target_entropy: Any, action_spec: Any, actor: Any, action_key: Any
) -> float:
    """``target_entropy``, or ``-prod(action shape)`` for ``"auto"``."""
    if target_entropy != "auto":
        return float(target_entropy)
    leaf = _leaf_action_spec(action_spec, actor, action_key)
    shape = getattr(leaf, "shape", None) if leaf is not None else None
    if shape is None:
        raise ValueError(
            f"{loss}: target_entropy='auto' needs the action's shape; pass an action_spec or a "
            "number"
        )
    # The action spec may carry the env's batch dims: only the last one counts.
    size = int(shape[-1]) if len(shape) else 1
    return -float(size)


class _Alpha:
    """Entropy temperature handling shared by SAC, REDQ, CQL and their discrete variants."""

    @staticmethod
    def init(
        loss: Any,
        alpha_init: float,
        fixed_alpha: bool,
        min_alpha: float | None,
        max_alpha: float | None,
    ) -> None:
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

    @staticmethod
    def value(loss: Any) -> Tensor:
        """``exp(log_alpha)`` clamped to ``[min_alpha, max_alpha]``, detached."""
        log_alpha = loss.log_alpha.detach()
        if loss.min_log_alpha is not None or loss.max_log_alpha is not None:
            log_alpha = log_alpha.clamp(loss.min_log_alpha, loss.max_log_alpha)
        return log_alpha.exp()

    @staticmethod
    def loss(loss: Any, log_prob: Tensor) -> Tensor:
        """Per-sample ``-log_alpha * (log_prob + target_entropy)`` (no gradient to the policy)."""
        if loss.fixed_alpha:
            return torch.zeros_like(log_prob)
        return -loss.log_alpha * (log_prob.detach() + loss.target_entropy)


def _check_action_shape(loss: str, key: Any, data: Tensor, policy: Tensor) -> None:
    """Raises when the data's actions and the policy's differ in shape (before any gradient)."""
    if data.shape != policy.shape:
        raise ValueError(
            f"{loss}: the data's action {key!r} has shape {tuple(data.shape)} but the policy "
            f"writes actions of shape {tuple(policy.shape)}; check the action spec and keys"
        )


_UNSET: Any = object()


def _either(loss: str, name: str, value: Any, alias: str, alias_value: Any, default: Any) -> Any:
    """One value from two equal spellings of an argument (``entropy_coef``/``entropy_coeff``)."""
    if value is not _UNSET and alias_value is not _UNSET and value != alias_value:
        raise ValueError(f"{loss}: {name}={value} and {alias}={alias_value} disagree; pass one")
    if value is not _UNSET:
        return value
    if alias_value is not _UNSET:
        return alias_value
    return default


def _without_greedy_head(network: Any) -> tuple[Any, ...]:
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


def _run_q(loss: Any, name: str, tensordict: Any, which: str) -> Any:
    """Runs ``loss._q_modules`` (network ``name`` minus its greedy head) on ``name``'s inputs.

    ``which`` picks the online, target or detached tensors, as in ``LossModule._call_network``.
    """
    out = tensordict.select(*getattr(loss, name).in_keys, strict=False)
    # The online tensors already sit in the slots: no swap needed.
    swap = nullcontext() if which == "online" else loss._swapped(name, loss._tensors(name, which))
    with swap:
        for module in loss._q_modules:
            out = module(out)
    return out
