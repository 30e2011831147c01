"""SAC on Pendulum-v1 built from a config file: ``examples/configs/sac_pendulum.yaml``.

The run of ``sac_pendulum_trainer.py`` (same networks, SAC loss, replay buffer, soft target
updates, evaluation and early stopping), but every part is described by a ``SACTrainerConfig``
read from YAML and built by ``torchrl.trainers.algorithms.configs.build`` into a
``SACTrainer``.

Usage: ``python examples/sac_pendulum_hydra.py [key=value ...]``, e.g. ``loss.tau=0.01
replay_buffer.batch_size=128 trainer.seed=1``. With ``hydra-core`` installed, Hydra reads the
command line; without it, ``key=value`` overrides are still understood. ``--out DIR`` and
``--no-progress`` are accepted too.
"""

from __future__ import annotations

from pathlib import Path

from _common import run_config_example, train_from_config

from torchrl.trainers.algorithms.configs import SACTrainerConfig

CONFIG = Path(__file__).resolve().parent / "configs" / "sac_pendulum.yaml"
train = train_from_config

if __name__ == "__main__":
    run_config_example(
        SACTrainerConfig, str(CONFIG), "sac_pendulum_hydra", "SAC (config) Pendulum-v1"
    )
