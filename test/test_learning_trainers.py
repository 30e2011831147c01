"""Learning tests of the algorithm trainers built from config files (slow; `make test-slow`).

``examples/ppo_cartpole_hydra.py`` (a ``PPOTrainer`` from ``configs/ppo_cartpole.yaml``) must
reach a deterministic evaluation return >= 475 on CartPole-v1, and
``examples/sac_pendulum_hydra.py`` (a ``SACTrainer`` from ``configs/sac_pendulum.yaml``) a final
mean deterministic return >= -200 on Pendulum-v1 over 10 fresh episodes: the criteria
``test_learning.py`` applies to ``ppo_cartpole_trainer.py`` and ``sac_pendulum_trainer.py``,
which these configs reproduce. ``pytest -s`` shows frames and wall time.
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

pytest.importorskip("gymnasium")
pytest.importorskip("yaml")

from torchrl.trainers.algorithms.configs import (  # noqa: E402
    PPOTrainerConfig,
    SACTrainerConfig,
    compose_config,
)

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
CONFIGS = os.path.join(EXAMPLES, "configs")


def _run(name: str, cls: type, seed: int, tmp_path, monkeypatch) -> tuple[object, dict]:
    monkeypatch.syspath_prepend(EXAMPLES)
    module = importlib.import_module(name)
    torch.set_num_threads(1)
    config_name = name.replace("_hydra", "")
    cfg = compose_config(
        cls,
        os.path.join(CONFIGS, f"{config_name}.yaml"),
        [f"trainer.seed={seed}", "trainer.progress_bar=false", f"logger.log_dir={tmp_path}"],
    )
    history = module.train(cfg)
    print(
        f"\n{name} seed {seed}: solved at {history['solved_at']} frames, {history['wall']:.1f} s, "
        f"final deterministic return {history['final_return']:.1f}",
        file=sys.stderr,
    )
    return cfg, history


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_trainer_solves_cartpole(seed: int, tmp_path, monkeypatch) -> None:
    cfg, history = _run("ppo_cartpole_hydra", PPOTrainerConfig, seed, tmp_path, monkeypatch)
    assert history["solved_at"] is not None, (
        f"PPOTrainer (seed {seed}) did not reach {cfg.eval.target_return} in "  # type: ignore[attr-defined]
        f"{history['frames']} frames; evaluations: {history['eval']}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sac_trainer_solves_pendulum(seed: int, tmp_path, monkeypatch) -> None:
    cfg, history = _run("sac_pendulum_hydra", SACTrainerConfig, seed, tmp_path, monkeypatch)
    assert history["final_return"] >= -200.0, (
        f"SACTrainer (seed {seed}): final evaluation {history['final_return']:.1f} after "
        f"{history['frames']} frames; evaluations: {history['eval']}"
    )
