"""TorchRL's ``torchrl.modules.models.decision_transformer`` path; the names live in :mod:`torchrl.modules.models`."""

from __future__ import annotations

from torchrl.modules.models.online_dt import OnlineDTActor
from torchrl.modules.models.transformer import (
    DecisionTransformer,
    DTActor,
)

__all__ = [
    "DTActor",
    "DecisionTransformer",
    "OnlineDTActor",
]
