"""Learning tests of ``examples/offline/`` (slow; `make test-slow`): offline RL from a dataset file.

``make_dataset.py`` trains SAC on Pendulum-v1 for 10,000 frames (seed 0) and writes everything
it collected (medium-replay style) to a D4RL HDF5 file; IQL, CQL and TD3+BC then train on that
file alone (read back with ``D4RLExperienceReplay``), with seeds 0, 1 and 2, and each greedy
policy must beat the behaviour policy, i.e. the dataset's mean episode return, over 50 fresh
episodes. The
offline-to-online example (IQL pre-trained on the file, then fine-tuned online with
``OfflineToOnlineReplayBuffer``) must end above its offline start on the same 50 initial states.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import json
import os
import sys

import pytest
import torch

pytest.importorskip("gymnasium")
pytest.importorskip("h5py")

OFFLINE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "offline"
)

# The scripts whose code decides the dataset's content.
DATASET_SOURCES = (
    "offline/make_dataset.py",
    "offline/_offline.py",
    "iql_pendulum_offline.py",
    "sac_pendulum.py",
    "_common.py",
)


@pytest.fixture(scope="session")
def dataset_file(tmp_path_factory) -> tuple[str, float]:
    """``(--data value, behaviour return)`` of the D4RL file make_dataset.py writes (seed 0).

    SAC trains once: the file is kept in pytest's temporary root, in a folder named after the
    source of the scripts that make it (so an edit makes a new one), and pytest-xdist workers or
    concurrent sessions wait for the one making it on a lock file.
    """
    root = tmp_path_factory.getbasetemp().parent
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # above the session's folder of worker folders
    digest = hashlib.sha1()
    for name in DATASET_SOURCES:
        with open(os.path.join(os.path.dirname(OFFLINE), name), "rb") as f:
            digest.update(f.read())
    shared = root / f"offline_learning_dataset-{digest.hexdigest()[:12]}"
    shared.mkdir(exist_ok=True)
    info_path = shared / "info.json"
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # blocks until the worker making the file is done
        if not info_path.exists():
            sys.path.insert(0, OFFLINE)
            make_dataset = importlib.import_module("make_dataset")
            torch.set_num_threads(1)
            cfg = make_dataset.Config(seed=0, out=str(shared), minari=False, progress=False)
            info = make_dataset.make(cfg)
            info_path.write_text(json.dumps(info))
    info = json.loads(info_path.read_text())
    return f"d4rl:{info['d4rl_file']}", info["behaviour_return"]


@pytest.fixture(autouse=True)
def _offline_examples(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHRL_DATASETS_ROOT", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(OFFLINE)


def _train(name: str, data: str, seed: int, out: str) -> dict:
    module = importlib.import_module(name)
    torch.set_num_threads(1)
    cfg = module.Config(data=data, seed=seed, out=out, progress=False)
    return module.train(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("algo", ["iql", "cql", "td3_bc"])
def test_offline_beats_the_behaviour_policy(algo: str, seed: int, dataset_file, tmp_path) -> None:
    data, made_return = dataset_file
    history = _train(algo, data, seed, str(tmp_path))
    print(
        f"\noffline {algo} seed {seed}: learned {history['final_return']:.1f} vs behaviour "
        f"{history['behaviour_return']:.1f} (dataset mean episode return), "
        f"{history['wall']:.1f} s of training",
        file=sys.stderr,
    )
    # the reader gives back the score make_dataset.py wrote
    assert history["behaviour_return"] == pytest.approx(made_return, rel=1e-4)
    assert history["final_return"] > history["behaviour_return"]


@pytest.mark.slow
def test_offline_to_online_ends_above_its_offline_start(dataset_file, tmp_path) -> None:
    data, _ = dataset_file
    history = _train("offline_to_online", data, 0, str(tmp_path))
    print(
        f"\noffline_to_online seed 0: offline start {history['offline_return']:.1f} -> final "
        f"{history['final_return']:.1f} after {history['frames']} online frames (behaviour "
        f"{history['behaviour_return']:.1f})",
        file=sys.stderr,
    )
    assert history["final_return"] > history["offline_return"]
