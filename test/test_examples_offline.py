"""Smoke runs of ``examples/offline/``: a tiny dataset written as D4RL and Minari, every trainer.

``make_dataset.py`` runs once for the module (400 SAC frames, two episodes) into a temporary
folder, with the dataset caches (``TORCHRL_DATASETS_ROOT``, ``MINARI_DATASETS_PATH``) there too;
each trainer then runs a few gradient steps on the D4RL file or the Minari dataset, in this
process (``runpy``), and must print its final line and write its plot.
"""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import sys

import pytest
import torch

pytest.importorskip("gymnasium")
pytest.importorskip("h5py")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFFLINE = os.path.join(ROOT, "examples", "offline")
HAS_MINARI = (
    importlib.util.find_spec("minari") is not None
    and importlib.util.find_spec("torchrl.data.datasets.minari_data") is not None
)

TINY = [
    "--offline-steps", "20", "--eval-every", "10", "--batch-size", "32",
    "--eval-episodes", "2", "--final-eval-episodes", "2", "--hidden", "32",
]  # fmt: skip
TRAINER_ARGS = {
    "iql.py": TINY,
    "cql.py": TINY,
    "td3_bc.py": TINY,
    "bc.py": [*TINY, "--best-fraction", "0.5"],
    "dt.py": [
        "--offline-steps", "20", "--eval-every", "20", "--batch-size", "4", "--context", "5",
        "--embed-dim", "16", "--num-layers", "1", "--eval-episodes", "2",
        "--final-eval-episodes", "2",
    ],
    "offline_to_online.py": [
        *TINY, "--online-frames", "400", "--frames-per-batch", "200",
        "--eval-every-frames", "200",
    ],
}  # fmt: skip
DATASET_SCRIPTS = {"make_dataset.py"}


def _scripts() -> list[str]:
    return sorted(f for f in os.listdir(OFFLINE) if f.endswith(".py") and not f.startswith("_"))


def _run(script: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = os.path.join(OFFLINE, script)
    monkeypatch.setattr(sys, "argv", [path, *args])
    monkeypatch.syspath_prepend(OFFLINE)
    runpy.run_path(path, run_name="__main__")


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """Runs make_dataset.py once; yields the ``--data`` values and the written json."""
    tmp = tmp_path_factory.mktemp("offline_examples")
    patch = pytest.MonkeyPatch()
    patch.setenv("TORCHRL_DATASETS_ROOT", str(tmp / "cache"))
    patch.setenv("MINARI_DATASETS_PATH", str(tmp / "minari"))
    try:
        args = ["--behaviour-frames", "400", "--hidden", "32", "--batch-size", "32"]
        args += ["--out", str(tmp / "data"), "--no-progress"]
        if not HAS_MINARI:
            args += ["--minari", "false"]
        _run("make_dataset.py", args, patch)
        path = tmp / "data" / "pendulum-sac-medium-replay-v0.hdf5"
        info = json.loads(path.with_suffix(".json").read_text())
        specs = {"d4rl": f"d4rl:{path}"}
        if HAS_MINARI:
            specs["minari"] = f"minari:{info['minari_id']}"
        yield specs, info
    finally:
        patch.undo()


def test_every_offline_example_has_smoke_args() -> None:
    missing = [s for s in _scripts() if s not in TRAINER_ARGS and s not in DATASET_SCRIPTS]
    assert not missing, f"add tiny-budget flags for {missing} to TRAINER_ARGS"


def test_make_dataset_writes_what_the_readers_read(datasets) -> None:
    """The behaviour score make_dataset.py prints is the one each reader's data gives back."""
    from _offline import behaviour_return, open_dataset, transitions

    specs, info = datasets
    assert info["episodes"] == 2 and info["transitions"] == 400
    for spec in specs.values():
        dataset = open_dataset(spec, 8)
        assert len(dataset) == 400
        assert behaviour_return(dataset) == pytest.approx(info["behaviour_return"], rel=1e-5)
        data = transitions(dataset)
        assert data["episode"].unique().numel() == 2
        assert int(data["next", "done"].sum()) == 2


@pytest.mark.parametrize(
    "script, kind",
    [
        ("iql.py", "d4rl"),
        ("iql.py", "minari"),
        ("cql.py", "d4rl"),
        ("td3_bc.py", "minari"),
        ("bc.py", "d4rl"),
        ("dt.py", "minari"),
        ("dt.py", "d4rl"),
        ("offline_to_online.py", "d4rl"),
        ("offline_to_online.py", "minari"),
    ],
)
def test_offline_trainer_smoke(script, kind, datasets, tmp_path, monkeypatch, capsys) -> None:
    specs, _ = datasets
    if kind not in specs:
        pytest.skip(f"no {kind} reader here")
    torch.manual_seed(0)
    args = [*TRAINER_ARGS[script], "--data", specs[kind], "--out", str(tmp_path), "--no-progress"]
    _run(script, args, monkeypatch)
    out = capsys.readouterr().out
    assert "final deterministic evaluation return" in out
    assert list(tmp_path.glob("*.png")), "no learning-curve plot written"


def test_episode_returns_cut_by_episode_ids(monkeypatch) -> None:
    monkeypatch.syspath_prepend(OFFLINE)
    from _offline import episode_returns
    from tensordict import TensorDict

    done = torch.tensor([0, 1, 0, 0, 1, 0], dtype=torch.bool).unsqueeze(-1)
    data = TensorDict(
        episode=torch.tensor([0, 0, 1, 1, 1, 2]),
        next=TensorDict(reward=torch.arange(6.0).unsqueeze(-1), done=done, batch_size=[6]),
        batch_size=[6],
    )
    # the last episode is cut by the end of the data: left out
    assert episode_returns(data).tolist() == [1.0, 9.0]


def test_bad_data_flag(monkeypatch, tmp_path) -> None:
    monkeypatch.syspath_prepend(OFFLINE)
    from _offline import open_dataset

    with pytest.raises(ValueError, match="'d4rl:PATH' or 'minari:ID'"):
        open_dataset("pendulum.hdf5", 8)
    with pytest.raises(ValueError, match="must start with 'd4rl:' or 'minari:'"):
        open_dataset("csv:pendulum.csv", 8)
    with pytest.raises(FileNotFoundError, match="make_dataset.py"):
        open_dataset(f"d4rl:{tmp_path / 'missing.hdf5'}", 8)
