"""TorchRL's ``torchrl.modules.tensordict_module.world_models`` path; the name lives in :mod:`torchrl.modules.actors`."""

from __future__ import annotations

from torchrl.modules.actors import WorldModelWrapper
from torchrl.modules.models.model_based import WorldModel

__all__ = ["WorldModel", "WorldModelWrapper"]
