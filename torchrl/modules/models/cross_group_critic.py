"""TorchRL's ``torchrl.modules.models.cross_group_critic`` path; the names live in :mod:`torchrl.modules.models.cross_group`."""

from __future__ import annotations

from torchrl.modules.models.cross_group import (
    CrossCriticGroupSpec,
    CrossGroupCritic,
    CrossGroupCriticSpec,
)

__all__ = [
    "CrossCriticGroupSpec",
    "CrossGroupCritic",
    "CrossGroupCriticSpec",
]
