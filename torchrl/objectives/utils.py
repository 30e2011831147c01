"""Public helpers of the losses: estimator names, distances, held-out networks, target updates."""

from __future__ import annotations

import enum
import operator
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import torch
from tensordict import TensorDictBase
from torch import Tensor, nn

from torchrl._types import NestedKey
from torchrl._utils import loss_terms, total_loss
from torchrl.objectives._params import ParamSet

if TYPE_CHECKING:
    from torchrl.objectives.common import LossModule

__all__ = [
    "HardUpdate",
    "SoftUpdate",
    "TargetNetUpdater",
    "ValueEstimators",
    "default_value_kwargs",
    "distance_loss",
    "group_optimizers",
    "hold_out_net",
    "hold_out_params",
    "loss_terms",
    "next_state_value",
    "total_loss",
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
        return nn.functional.mse_loss(v1, v2, reduction="none")
    if loss_function == "l1":
        return (v1 - v2).abs()
    if loss_function == "smooth_l1":
        return nn.functional.smooth_l1_loss(v1, v2, reduction="none")
    raise ValueError(f"loss_function must be one of 'l1', 'l2', 'smooth_l1', got {loss_function!r}")


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


@contextmanager
def hold_out_params(params: Iterable[Tensor]) -> Iterator[tuple[Tensor, ...]]:
    """Gives detached views of ``params`` inside the block (no gradient reaches the originals).

    Args:
        params: tensors (e.g. ``module.parameters()``).

    Yields:
        The detached tensors, in order; they share storage with ``params``.

    Examples:
        >>> net = nn.Linear(2, 1)
        >>> with hold_out_params(net.parameters()) as (w, b):
        ...     loss = (torch.ones(1, 2) @ w.T + b).sum()
        >>> loss.requires_grad, w.data_ptr() == net.weight.data_ptr()
        (False, True)
    """
    yield tuple(p.detach() for p in params)


@torch.no_grad()
def next_state_value(
    tensordict: TensorDictBase,
    operator: nn.Module | None = None,
    next_val_key: NestedKey = "state_action_value",
    gamma: float = 0.99,
    pred_next_val: Tensor | None = None,
    **kwargs: Any,
) -> Tensor:
    """The one-step target ``r + gamma ** n * (1 - terminated) * V(s')``, without gradient.

    Reads the reward and the end flag under ``"next"`` (``"terminated"``, else ``"done"``;
    root entries of the older layout are accepted too), and ``n`` from ``"steps_to_next_obs"``
    when the data went through a multi-step transform (1 otherwise).

    Args:
        tensordict: the transitions.
        operator: writes ``next_val_key`` when called on ``tensordict["next"]`` (not needed
            with ``pred_next_val``).
        next_val_key: the value the operator writes.
        gamma: the discount.
        pred_next_val: the next-state values, when already computed.
        **kwargs: ``reward_key``, ``done_key`` and ``steps_to_next_key`` rename the entries.

    Returns:
        The targets, shaped like the reward.

    Examples:
        >>> from tensordict import TensorDict
        >>> td = TensorDict(
        ...     next=TensorDict(reward=torch.ones(2, 1), terminated=torch.tensor([[False], [True]])),
        ...     batch_size=[2],
        ... )
        >>> next_state_value(td, gamma=0.5, pred_next_val=torch.full((2, 1), 4.0)).squeeze(-1)
        tensor([3., 1.])
    """
    nxt = tensordict.get("next", None)

    def read(name: str, *defaults: str) -> Tensor | None:
        for key in (kwargs.get(f"{name}_key"), *defaults):
            if key is None:
                continue
            for source in (nxt, tensordict):
                value = None if source is None else source.get(key, None)
                if value is not None:
                    return value
        return None

    reward = read("reward", "reward")
    if reward is None:
        raise KeyError("next_state_value: the input has no ('next', 'reward') entry")
    done = read("done", "terminated", "done")
    if pred_next_val is None:
        if operator is None:
            raise ValueError("next_state_value: give an operator or pred_next_val")
        if nxt is None:
            raise KeyError("next_state_value: the input has no 'next' entry for the operator")
        pred_next_val = operator(nxt.copy()).get(next_val_key)
    steps = read("steps_to_next", "steps_to_next_obs")
    discount = gamma if steps is None else gamma ** steps.reshape(reward.shape).to(reward.dtype)
    value = pred_next_val.reshape(reward.shape)
    if done is not None:
        value = value * (~done.reshape(reward.shape).bool())
    return reward + discount * value


def group_optimizers(*optimizers: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Merges optimizers of one class into one, keeping each one's parameter groups.

    Args:
        *optimizers: optimizers of the same class (their states must be empty).

    Returns:
        One optimizer stepping every group.

    Examples:
        >>> a, b = nn.Linear(2, 2), nn.Linear(2, 1)
        >>> opt = group_optimizers(
        ...     torch.optim.Adam(a.parameters(), lr=1e-3), torch.optim.Adam(b.parameters(), lr=1e-2)
        ... )
        >>> [g["lr"] for g in opt.param_groups]
        [0.001, 0.01]
    """
    if not optimizers:
        raise ValueError("group_optimizers: give at least one optimizer")
    cls = type(optimizers[0])
    if any(type(opt) is not cls for opt in optimizers):
        raise TypeError(
            f"group_optimizers: every optimizer must be a {cls.__name__}, got "
            f"{[type(opt).__name__ for opt in optimizers]}"
        )
    if any(opt.state for opt in optimizers):
        raise ValueError("group_optimizers: the optimizers must not have stepped yet")
    groups = [group for opt in optimizers for group in opt.param_groups]
    return cls(groups, **optimizers[0].defaults)


class TargetNetUpdater:
    """Base of :class:`SoftUpdate` and :class:`HardUpdate`: pairs of online and target tensors.

    Args:
        loss_module: a :class:`~torchrl.objectives.LossModule` with target parameters.

    Examples:
        An updater that copies the online weights every other step (subclasses write
        :meth:`step`; :meth:`init_` copies):

        >>> from torchrl.modules import QValueActor
        >>> from torchrl.objectives import DQNLoss
        >>> class EveryOtherStep(TargetNetUpdater):
        ...     def __init__(self, loss_module):
        ...         super().__init__(loss_module)
        ...         self.calls = 0
        ...     def step(self):
        ...         self.calls += 1
        ...         if self.calls % 2 == 0:
        ...             self.init_()
        >>> loss = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="categorical"))
        >>> updater = EveryOtherStep(loss)
        >>> online = loss.value_network.module[0].module.weight
        >>> with torch.no_grad():
        ...     _ = online.add_(1.0)
        >>> def synced():
        ...     target = loss.target_value_network_params["module", "0", "module", "weight"]
        ...     return bool(torch.equal(target, online))
        >>> updater.step(); synced()
        False
        >>> updater.step(); synced()
        True
    """

    def __init__(self, loss_module: LossModule) -> None:
        names = loss_module.target_network_names
        # Lazy networks get their targets on the loss's first call; until then nothing moves.
        pending = [n for n, (_, _, target) in loss_module._pending_lazy.items() if target]
        if not names and not pending:
            raise ValueError(
                f"{type(loss_module).__name__} has no target parameters to update: build it "
                "with delay_value/delay_actor/delay_qvalue=True"
            )
        self.loss_module = loss_module
        self.initialized = False

    def _pairs(self) -> tuple[list[Tensor], list[Tensor], list[Tensor], list[Tensor]]:
        """``(float_targets, float_sources, other_targets, other_sources)``, all detached.

        Made once and kept while the loss's tensors are the same objects on the same storage
        (``.data`` aliases share it, so in-place optimizer steps show through them); a
        ``.data`` assignment, ``load_state_dict(assign=True)`` or ``.to()`` makes new ones.
        """
        if torch.compiler.is_compiling():
            # Traced (a compiled update step), the walk costs nothing at run time, while the
            # kept pairs and their data pointers would be guarded on.
            return self._make_pairs()
        tensors: list[Tensor] = []
        for name in self.loss_module.target_network_names:
            tensors += self.loss_module.network_tensors(name, ParamSet.ONLINE)
            tensors += self.loss_module.network_tensors(name, ParamSet.TARGET)
        kept = self.__dict__.get("_kept_pairs")
        # The checks run in C (map over the lists): they are per step.
        pointers = list(map(Tensor.data_ptr, tensors))
        if (
            kept is not None
            and len(kept[0]) == len(tensors)
            and all(map(operator.is_, kept[0], tensors))
            and kept[1] == pointers
        ):
            return kept[2]
        pairs = self._make_pairs()
        self.__dict__["_kept_pairs"] = (tensors, pointers, pairs)
        return pairs

    def __getstate__(self) -> dict[str, Any]:
        # The kept aliases point into this loss's storage: copies and pickles make their own.
        state = self.__dict__.copy()
        state.pop("_kept_pairs", None)
        return state

    def _make_pairs(self) -> tuple[list[Tensor], list[Tensor], list[Tensor], list[Tensor]]:
        ft, fs, ot, os_ = [], [], [], []
        for name in self.loss_module.target_network_names:
            sources = self.loss_module.network_tensors(name, ParamSet.ONLINE)
            targets = self.loss_module.network_tensors(name, ParamSet.TARGET)
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

    def step(self) -> None:
        """Moves each target a fraction ``1 - eps`` of the way to its online parameters."""
        # The pairs are ``.data`` aliases: no graph is recorded without a no_grad block (whose
        # decorator form costs a context-manager copy per call).
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
