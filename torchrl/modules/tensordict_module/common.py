"""TorchRL's ``torchrl.modules.tensordict_module.common`` path; the names live in :mod:`torchrl.modules.tensordict_module.safe`."""

from __future__ import annotations

from torchrl.modules.tensordict_module.safe import SafeModule

__all__ = [
    "SafeModule",
]
