"""PPO on CartPole-v1 built from a config file: ``examples/configs/ppo_cartpole.yaml``.

The run of ``ppo_cartpole_trainer.py`` (same networks, GAE, clipped PPO loss, evaluation and
early stopping), but every part is described by a ``PPOTrainerConfig`` read from YAML and built
by ``torchrl.trainers.algorithms.configs.build`` into a ``PPOTrainer``.

Usage: ``python examples/ppo_cartpole_hydra.py [key=value ...]``, e.g. ``optim.lr=1e-3
env.num_envs=4 trainer.seed=1``. With ``hydra-core`` installed, Hydra reads the command line
(``--multirun`` sweeps, ``--cfg job`` and the rest work); without it, ``key=value`` overrides
are still understood. ``--out DIR`` (logs and plot) and ``--no-progress`` are accepted too.
"""

from __future__ import annotations

from pathlib import Path

from _common import run_config_example, train_from_config

from torchrl.trainers.algorithms.configs import PPOTrainerConfig

CONFIG = Path(__file__).resolve().parent / "configs" / "ppo_cartpole.yaml"
train = train_from_config

if __name__ == "__main__":
    run_config_example(
        PPOTrainerConfig, str(CONFIG), "ppo_cartpole_hydra", "PPO (config) CartPole-v1"
    )
