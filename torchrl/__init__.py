"""torchrl: a modular, TensorDict-centric reinforcement-learning library for PyTorch.

Importing ``torchrl`` is cheap: subpackages (``torchrl.envs``, ``torchrl.data``, ...) load on first
access, and optional dependencies (gymnasium, dm_control, ...) load only when a wrapper needs them.
"""

from __future__ import annotations

import importlib
from typing import Any

from torchrl._utils import (
    auto_unwrap_transformed_env,
    cuda_memory_profile,
    cuda_memory_stats,
    implement_for,
    reset_cuda_peak_stats,
    set_auto_unwrap_transformed_env,
)

__version__ = "0.1.0"

_SUBPACKAGES = (
    "agents",
    "collectors",
    "data",
    "envs",
    "modules",
    "objectives",
    "record",
    "services",
    "trainers",
    "weight_update",
)

_COMPILE_HELPERS = ("compile_with_warmup", "maybe_compile")

__all__ = [
    "__version__",
    *_SUBPACKAGES,
    "auto_unwrap_transformed_env",
    "compile_with_warmup",
    "maybe_compile",
    "cuda_memory_profile",
    "cuda_memory_stats",
    "implement_for",
    "reset_cuda_peak_stats",
    "set_auto_unwrap_transformed_env",
]


def __getattr__(name: str) -> Any:
    # PEP 562 module attribute: lets ``torchrl.envs`` work after a bare ``import torchrl``
    # without paying for every subpackage at import time.
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _COMPILE_HELPERS:  # they import torch: loaded on first use like the subpackages
        return getattr(importlib.import_module("torchrl._compile"), name)
    raise AttributeError(f"module 'torchrl' has no attribute {name!r}")
