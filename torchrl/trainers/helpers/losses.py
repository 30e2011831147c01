"""Loss builders from a config: the DQN loss and the target-network updater."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from torch import nn

from torchrl.trainers.helpers._cfg import cfg_value

if TYPE_CHECKING:
    from torchrl.objectives import DQNLoss, LossModule
    from torchrl.objectives.utils import TargetNetUpdater

__all__ = ["LossConfig", "make_dqn_loss", "make_target_updater"]


@dataclasses.dataclass
class LossConfig:
    """The loss fields read by the loss helpers (any object with these attributes works).

    Attributes:
        loss: ``"single"`` (no target network) or ``"double"`` (a target network, updated by
            the updater of :func:`make_target_updater`).
        hard_update: copy the target every ``value_network_update_interval`` steps instead of
            a soft update.
        loss_function: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.
        value_network_update_interval: steps between hard updates; a soft update moves the
            target by ``1 / value_network_update_interval`` of the way at each step.
        gamma: the discount.
        distributional: a :class:`~torchrl.objectives.DistributionalDQNLoss`.

    Examples:
        >>> from torch import nn
        >>> from torchrl.modules import QValueActor
        >>> from torchrl.trainers.helpers import make_dqn_loss
        >>> cfg = LossConfig(hard_update=True, value_network_update_interval=100, gamma=0.9)
        >>> qnet = QValueActor(nn.Linear(4, 2), action_space="categorical")
        >>> loss, updater = make_dqn_loss(qnet, cfg)
        >>> type(loss).__name__, type(updater).__name__
        ('DQNLoss', 'HardUpdate')
    """

    loss: str = "double"
    hard_update: bool = False
    loss_function: str = "smooth_l1"
    value_network_update_interval: int = 1000
    gamma: float = 0.99
    distributional: bool = False


def _get(cfg: Any, name: str) -> Any:
    return cfg_value(cfg, name, LossConfig)


def make_target_updater(cfg: Any, loss_module: LossModule) -> TargetNetUpdater | None:
    """The target-network updater of ``loss_module`` described by ``cfg``.

    With ``cfg.loss == "double"``: a :class:`~torchrl.objectives.HardUpdate` every
    ``value_network_update_interval`` steps when ``cfg.hard_update``, else a
    :class:`~torchrl.objectives.SoftUpdate` with ``eps = 1 - 1 / value_network_update_interval``.
    With ``"single"`` there is no target network and no updater.

    Args:
        cfg: the config (:class:`LossConfig` fields).
        loss_module: a loss with target parameters (for ``"double"``).

    Returns:
        The updater, or ``None``.

    Raises:
        RuntimeError: ``hard_update`` is set with a ``"single"`` loss.

    Examples:
        >>> from torch import nn
        >>> from torchrl.modules import QValueActor
        >>> from torchrl.objectives import DQNLoss
        >>> loss = DQNLoss(QValueActor(nn.Linear(4, 2), action_space="categorical"))
        >>> cfg = LossConfig(value_network_update_interval=10)
        >>> round(make_target_updater(cfg, loss).eps, 2)
        0.9
    """
    from torchrl.objectives import HardUpdate, SoftUpdate

    interval = int(_get(cfg, "value_network_update_interval"))
    if _get(cfg, "loss") == "double":
        if _get(cfg, "hard_update"):
            return HardUpdate(loss_module, value_network_update_interval=interval)
        return SoftUpdate(loss_module, eps=1.0 - 1.0 / interval)
    if _get(cfg, "hard_update"):
        raise RuntimeError(
            "make_target_updater: hard_update needs a target network: use loss='double'"
        )
    return None


def make_dqn_loss(model: nn.Module, cfg: Any) -> tuple[DQNLoss, TargetNetUpdater | None]:
    """A DQN loss for the Q-value network ``model`` and its target updater, from ``cfg``.

    ``cfg.distributional`` picks :class:`~torchrl.objectives.DistributionalDQNLoss` (the model
    carries the atoms' support); otherwise :class:`~torchrl.objectives.DQNLoss` with
    ``cfg.loss_function``. A ``"double"`` loss keeps target parameters; the value estimator
    uses ``cfg.gamma``.

    Args:
        model: a Q-value actor (e.g. :class:`~torchrl.modules.QValueActor`).
        cfg: the config (:class:`LossConfig` fields).

    Returns:
        ``(loss, target_net_updater)``; the updater is ``None`` for a ``"single"`` loss.

    Raises:
        NotImplementedError: ``cfg.loss`` is neither ``"single"`` nor ``"double"``.

    Examples:
        >>> from torch import nn
        >>> from torchrl.modules import QValueActor
        >>> model = QValueActor(nn.Linear(4, 2), action_space="categorical")
        >>> loss, updater = make_dqn_loss(model, LossConfig(loss="single"))
        >>> type(loss).__name__, updater
        ('DQNLoss', None)
    """
    from torchrl.objectives import DistributionalDQNLoss, DQNLoss

    kind = _get(cfg, "loss")
    if kind not in ("single", "double"):
        raise NotImplementedError(f"make_dqn_loss: loss must be 'single' or 'double', got {kind!r}")
    delay_value = kind == "double"
    gamma = float(_get(cfg, "gamma"))
    loss: Any
    if _get(cfg, "distributional"):
        loss = DistributionalDQNLoss(model, gamma=gamma, delay_value=delay_value)
    else:
        loss = DQNLoss(model, loss_function=_get(cfg, "loss_function"), delay_value=delay_value)
        loss.make_value_estimator(gamma=gamma)
    return loss, make_target_updater(cfg, loss)
