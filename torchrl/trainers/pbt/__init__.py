"""Population-based training (PBT) of any trainer: see :class:`PopulationBasedTraining`."""

from __future__ import annotations

from torchrl.trainers.pbt.backends import PBTMemberError
from torchrl.trainers.pbt.member import (
    PBTMember,
    TrainerMember,
    set_loss_coefficient,
    set_optimizer_lr,
)
from torchrl.trainers.pbt.population import PBT, PBTRecord, PopulationBasedTraining
from torchrl.trainers.pbt.space import (
    ChoiceParam,
    ContinuousParam,
    IntegerParam,
    explore,
    make_space,
)

__all__ = [
    "PBT",
    "ChoiceParam",
    "ContinuousParam",
    "IntegerParam",
    "PBTMember",
    "PBTMemberError",
    "PBTRecord",
    "PopulationBasedTraining",
    "TrainerMember",
    "explore",
    "make_space",
    "set_loss_coefficient",
    "set_optimizer_lr",
]
