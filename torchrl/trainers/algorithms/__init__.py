"""Algorithm trainers: the :class:`~torchrl.trainers.Trainer` wired for one algorithm each.

On-policy (:class:`PPOTrainer`, :class:`A2CTrainer`, :class:`ReinforceTrainer`, built on
:class:`OnPolicyTrainer`), off-policy and offline (:class:`SACTrainer`, :class:`DQNTrainer`,
:class:`DDPGTrainer`, :class:`TD3Trainer`, :class:`IQLTrainer`, :class:`CQLTrainer`,
:class:`FQLTrainer`, built on :class:`OffPolicyTrainer`) and :class:`OfflineToOnlineTrainer`. Building them from YAML files
and ``key=value`` overrides: :mod:`torchrl.trainers.algorithms.configs`.
"""

from __future__ import annotations

from torchrl.trainers.algorithms.off_policy import (
    CQLTrainer,
    DDPGTrainer,
    DQNTrainer,
    FQLTrainer,
    IQLTrainer,
    OfflineIterations,
    OffPolicyTrainer,
    SACTrainer,
    TD3Trainer,
)
from torchrl.trainers.algorithms.offline_to_online import OfflineToOnlineTrainer
from torchrl.trainers.algorithms.on_policy import (
    A2CTrainer,
    OnPolicyTrainer,
    PPOTrainer,
    ReinforceTrainer,
)
from torchrl.trainers.algorithms.tdmpc2 import TdMpc2OptimizationStepper, TdMpc2Trainer

__all__ = [
    "A2CTrainer",
    "CQLTrainer",
    "DDPGTrainer",
    "DQNTrainer",
    "FQLTrainer",
    "IQLTrainer",
    "OffPolicyTrainer",
    "OfflineIterations",
    "OfflineToOnlineTrainer",
    "OnPolicyTrainer",
    "PPOTrainer",
    "ReinforceTrainer",
    "SACTrainer",
    "TD3Trainer",
    "TdMpc2OptimizationStepper",
    "TdMpc2Trainer",
]
