"""TorchRL's ``torchrl.modules.tensordict_module.actors`` path; the names live in :mod:`torchrl.modules.actors` and :mod:`torchrl.modules.qvalue`."""

from __future__ import annotations

from torchrl.modules.actors import (
    Actor,
    ActorCriticOperator,
    ActorCriticWrapper,
    ActorValueOperator,
    ProbabilisticActor,
    TanhModule,
    ValueOperator,
)
from torchrl.modules.qvalue import (
    DistributionalQValueActor,
    DistributionalQValueModule,
    QValueActor,
    QValueModule,
)

__all__ = [
    "Actor",
    "ActorCriticOperator",
    "ActorCriticWrapper",
    "ActorValueOperator",
    "DistributionalQValueActor",
    "DistributionalQValueModule",
    "ProbabilisticActor",
    "QValueActor",
    "QValueModule",
    "TanhModule",
    "ValueOperator",
]
