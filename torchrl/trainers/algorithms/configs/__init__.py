"""Configuration from files: dataclass configs, YAML/JSON/TOML loading, ``key=value`` overrides.

:func:`from_config` (or :func:`build`) turns a :class:`PPOTrainerConfig` or
:class:`SACTrainerConfig` into a ready trainer; :func:`compose_config` reads a file and
overrides into one; :func:`run_with_config` runs a script under Hydra when ``hydra-core`` is
installed (``pip install "torchrl[hydra]"``) and with our own ``key=value`` parser otherwise.
"""

from __future__ import annotations

from torchrl.trainers.algorithms.configs.build import BuiltTrainer, build, from_config
from torchrl.trainers.algorithms.configs.loading import (
    apply_overrides,
    compose_config,
    config_from_dict,
    config_to_dict,
    load_config,
    parse_overrides,
    parse_value,
    run_with_config,
)
from torchrl.trainers.algorithms.configs.trainers import (
    CollectorConfig,
    EnvConfig,
    EvalConfig,
    LoggerConfig,
    NetworkConfig,
    OptimConfig,
    PPOLossConfig,
    PPOTrainerConfig,
    ReplayBufferConfig,
    SACLossConfig,
    SACTrainerConfig,
    TrainerConfig,
)

__all__ = [
    "BuiltTrainer",
    "CollectorConfig",
    "EnvConfig",
    "EvalConfig",
    "LoggerConfig",
    "NetworkConfig",
    "OptimConfig",
    "PPOLossConfig",
    "PPOTrainerConfig",
    "ReplayBufferConfig",
    "SACLossConfig",
    "SACTrainerConfig",
    "TrainerConfig",
    "apply_overrides",
    "build",
    "compose_config",
    "config_from_dict",
    "config_to_dict",
    "from_config",
    "load_config",
    "parse_overrides",
    "parse_value",
    "run_with_config",
]
