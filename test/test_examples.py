"""Smoke runs: every example and tutorial script runs end to end with a tiny budget.

The scripts run in this process (``runpy``) with patched ``sys.argv``, so the ~3 s import of
torch and tensordict is paid once for the whole file instead of once per script.
"""

from __future__ import annotations

import os
import runpy
import sys

import pytest

pytest.importorskip("gymnasium")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
TUTORIALS = os.path.join(ROOT, "tutorials")

# Script -> the flags that make it a few-second run.
OFF_POLICY_TINY = [
    "--frames",
    "400",
    "--frames-per-batch",
    "100",
    "--init-random-frames",
    "200",
    "--batch-size",
    "32",
    "--eval-every",
    "200",
    "--eval-episodes",
    "2",
    "--final-eval-episodes",
    "2",
]
OFFLINE_TINY = [
    "--behaviour-frames",
    "400",
    "--dataset-frames",
    "400",
    "--offline-steps",
    "20",
    "--eval-every",
    "10",
    "--batch-size",
    "32",
    "--eval-episodes",
    "2",
    "--final-eval-episodes",
    "2",
]
EXAMPLE_ARGS = {
    "ppo_jumanji.py": [
        "--frames",
        "512",
        "--num-envs",
        "4",
        "--steps-per-env",
        "64",
        "--minibatch-size",
        "128",
        "--eval-every",
        "256",
        "--eval-episodes",
        "2",
    ],
    "ppo_cartpole.py": ["--frames", "512", "--epochs", "2", "--eval-every", "256"],
    "demo.py": ["--frames", "512", "--epochs", "2", "--eval-every", "256"],
    "a2c_cartpole.py": ["--frames", "512", "--eval-every", "256"],
    "reinforce_cartpole.py": ["--frames", "512", "--eval-every", "256"],
    "dqn_cartpole.py": [
        "--frames",
        "512",
        "--frames-per-batch",
        "128",
        "--init-random-frames",
        "256",
        "--updates-per-batch",
        "4",
        "--eval-every",
        "256",
        "--eval-episodes",
        "2",
        "--final-eval-episodes",
        "2",
    ],
    "ppo_cartpole_trainer.py": [
        "--frames",
        "512",
        "--optim-steps-per-batch",
        "2",
        "--eval-every",
        "256",
    ],
    "sac_pendulum.py": OFF_POLICY_TINY,
    "cql_pendulum_offline.py": OFFLINE_TINY,
    "iql_pendulum_offline.py": OFFLINE_TINY,
    "sac_pendulum_trainer.py": [
        "--frames",
        "400",
        "--frames-per-batch",
        "100",
        "--init-random-frames",
        "200",
        "--batch-size",
        "32",
        "--eval-every",
        "200",
        "--eval-episodes",
        "2",
        "--final-eval-episodes",
        "2",
    ],
    "ddpg_pendulum.py": OFF_POLICY_TINY,
    "crossq_pendulum.py": [*OFF_POLICY_TINY, "--critic-hidden", "32"],
    "tqc_pendulum.py": OFF_POLICY_TINY,
    "td3_pendulum.py": OFF_POLICY_TINY,
    "sac_mujoco.py": [
        *OFF_POLICY_TINY,
        "--frames",
        "300",
        "--eval-every",
        "300",
        "--updates-per-frame",
        "0.25",
        "--hidden",
        "32",
        "--buffer-size",
        "1000",
        "--max-episode-steps",
        "50",
    ],
    "ppo_mujoco.py": [
        "--frames",
        "256",
        "--steps-per-batch",
        "128",
        "--epochs",
        "2",
        "--eval-every",
        "128",
        "--max-episode-steps",
        "50",
        "--eval-episodes",
        "2",
        "--final-eval-episodes",
        "2",
    ],
    "act_pendulum_offline.py": [
        "--dataset-episodes",
        "4",
        "--steps",
        "20",
        "--eval-every",
        "10",
        "--batch-size",
        "32",
        "--eval-episodes",
        "2",
        "--final-eval-episodes",
        "2",
    ],
    "diffusion_bc_offline.py": [
        "--dataset-episodes",
        "4",
        "--steps",
        "20",
        "--eval-every",
        "10",
        "--batch-size",
        "32",
        "--eval-episodes",
        "2",
        "--final-eval-episodes",
        "2",
        "--num-steps",
        "5",
    ],
    "gail_cartpole.py": [
        "--expert-frames-max",
        "512",
        "--expert-frames",
        "256",
        "--gail-frames",
        "512",
        "--epochs",
        "2",
        "--eval-every",
        "256",
        "--eval-episodes",
        "2",
        "--final-eval-episodes",
        "2",
    ],
    "rnd_sparse.py": [
        "--frames",
        "2048",
        "--steps-per-env",
        "32",
        "--epochs",
        "1",
        "--eval-every",
        "1024",
    ],
    "ppo_cartpole_hydra.py": ["collector.total_frames=512", "eval.every=256", "eval.episodes=2"],
    "sac_pendulum_hydra.py": [
        "collector.total_frames=400",
        "collector.frames_per_batch=100",
        "collector.init_random_frames=200",
        "replay_buffer.batch_size=32",
        "eval.every=200",
        "eval.episodes=2",
    ],
}
EXAMPLE_ARGS["pbt_cartpole.py"] = [
    "--rounds", "2", "--round-frames", "256", "--population", "2", "--backend", "serial",
    "--final-eval-episodes", "2",
]  # fmt: skip
# Asynchronous examples: their smoke runs (train() with tiny budgets, one main()) are in
# test_examples_async.py.
SMOKED_ELSEWHERE = {
    "appo_cartpole.py",
    "appo_mujoco.py",
    "impala_cartpole.py",
    "multi_policy_cartpole.py",
    "ddpg_figure1.py",
    "mbpo_pendulum.py",  # test_examples_model_based.py
    "mpc_pendulum.py",
    "pilco_pendulum.py",  # modules/test_gp_world_model.py
    "tdmpc2_pendulum.py",  # objectives/test_tdmpc2.py
    "ppo_atari.py",  # test_examples_atari.py
    "dqn_atari.py",
    "openspiel_tictactoe.py",  # envs/test_libs_openspiel.py
    "ppo_stateless_cartpole.py",  # test_examples_recurrent.py
    "r2d2_stateless_cartpole.py",  # test_examples_r2d2.py
}
# Examples that need an optional simulator: skipped when it is not installed.
NEEDS = {"sac_mujoco.py": "mujoco", "ppo_mujoco.py": "mujoco", "ppo_jumanji.py": "jumanji"}


def _scripts(folder: str) -> list[str]:
    if not os.path.isdir(folder):
        return []
    return sorted(f for f in os.listdir(folder) if f.endswith(".py") and not f.startswith("_"))


def _run(path: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [path, *args])
    monkeypatch.syspath_prepend(os.path.dirname(path))
    runpy.run_path(path, run_name="__main__")


def test_every_example_has_smoke_args() -> None:
    missing = [f for f in _scripts(EXAMPLES) if f not in EXAMPLE_ARGS and f not in SMOKED_ELSEWHERE]
    assert not missing, f"add tiny-budget flags for {missing} to EXAMPLE_ARGS"


@pytest.mark.parametrize("script", [s for s in EXAMPLE_ARGS if s in _scripts(EXAMPLES)])
def test_example_smoke(script: str, tmp_path, monkeypatch, capsys) -> None:
    if script in NEEDS:
        pytest.importorskip(NEEDS[script])
    args = [*EXAMPLE_ARGS[script], "--out", str(tmp_path), "--no-progress"]
    _run(os.path.join(EXAMPLES, script), args, monkeypatch)
    out = capsys.readouterr().out
    assert "final deterministic evaluation return" in out
    assert list(tmp_path.glob("*.png")), "no learning-curve plot written"


@pytest.mark.slow
def test_sac_pendulum_compiled_smoke(tmp_path, monkeypatch) -> None:
    """The compiled gradient step of ``sac_pendulum.py`` (an inductor compile: ~10-60 s here).

    The tiny smoke run above stays eager (its budget is under ``compile_min_updates``).
    """
    import warnings

    monkeypatch.syspath_prepend(EXAMPLES)
    import sac_pendulum

    cfg = sac_pendulum.Config(
        frames=400,
        frames_per_batch=100,
        init_random_frames=200,
        batch_size=32,
        eval_every=200,
        eval_episodes=2,
        final_eval_episodes=2,
        compile_min_updates=0,
        out=str(tmp_path),
        progress=False,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = sac_pendulum.train(cfg)
    assert history["compiled"]
    failed = [str(w.message) for w in caught if "torch.compile failed" in str(w.message)]
    assert not failed, failed
    assert history["first_update_wall"] > 0


def test_ddpg_figure1_smoke(monkeypatch, capsys) -> None:
    path = os.path.join(EXAMPLES, "ddpg_figure1.py")
    if not os.path.exists(path):
        pytest.skip("no ddpg_figure1.py")
    _run(path, ["--frames", "300"], monkeypatch)


@pytest.mark.parametrize("script", _scripts(TUTORIALS))
def test_tutorial_smoke(script: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _run(os.path.join(TUTORIALS, script), ["--smoke"], monkeypatch)
