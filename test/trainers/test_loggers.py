"""Tests of the experiment loggers (CSV always; TensorBoard / W&B / MLflow when installed)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os

import pytest
import torch

from torchrl.record.loggers import (
    CSVLogger,
    Logger,
    TensorboardLogger,
    WandbLogger,
    generate_exp_name,
    get_logger,
)
from torchrl.record.loggers.common import flatten_config


@dataclasses.dataclass
class _Net:
    depth: int = 2
    cells: int = 64


@dataclasses.dataclass
class _Cfg:
    lr: float = 3e-4
    env: str = "Pendulum-v1"
    net: _Net = dataclasses.field(default_factory=_Net)


def test_flatten_config_kinds():
    expected = {"lr": 3e-4, "env": "Pendulum-v1", "net.depth": 2, "net.cells": 64}
    assert flatten_config(_Cfg()) == expected
    assert (
        flatten_config({"lr": 3e-4, "env": "Pendulum-v1", "net": {"depth": 2, "cells": 64}})
        == expected
    )
    ns = argparse.Namespace(lr=3e-4, env="Pendulum-v1", net=argparse.Namespace(depth=2, cells=64))
    assert flatten_config(ns) == expected
    with pytest.raises(TypeError, match="hyper-parameters"):
        flatten_config(3)


def test_logger_is_abstract():
    with pytest.raises(TypeError):
        Logger("x", None)  # type: ignore[abstract]


class TestCSVLogger:
    def test_scalars_flushed_and_nested(self, tmp_path):
        logger = CSVLogger("exp", log_dir=tmp_path)
        logger.log_scalar("reward", torch.tensor(1.5), step=10)
        logger.log_scalar("train/loss", 0.25, step=10)
        logger.log_scalar("reward", 2, step=20)
        # readable before close: every write is flushed
        assert (tmp_path / "exp" / "scalars" / "reward.csv").read_text() == "10,1.5\n20,2.0\n"
        assert (tmp_path / "exp" / "scalars" / "train" / "loss.csv").read_text() == "10,0.25\n"
        logger.close()

    def test_step_none_counts(self, tmp_path):
        logger = CSVLogger("exp", log_dir=tmp_path)
        for v in (1.0, 2.0, 3.0):
            logger.log_scalar("a", v)
        assert (tmp_path / "exp" / "scalars" / "a.csv").read_text().split() == [
            "0,1.0",
            "1,2.0",
            "2,3.0",
        ]
        logger.close()

    def test_scalar_rejects_vectors(self, tmp_path):
        logger = CSVLogger("exp", log_dir=tmp_path)
        with pytest.raises(ValueError, match="one element"):
            logger.log_scalar("a", torch.zeros(3))

    def test_hparams(self, tmp_path):
        logger = CSVLogger("exp", log_dir=tmp_path)
        logger.log_hparams(_Cfg())
        saved = json.loads((tmp_path / "exp" / "hparams.json").read_text())
        assert saved == {"lr": 3e-4, "env": "Pendulum-v1", "net.depth": 2, "net.cells": 64}

    def test_video_and_histogram(self, tmp_path):
        logger = CSVLogger("exp", log_dir=tmp_path)
        video = torch.randint(0, 255, (5, 3, 8, 8), dtype=torch.uint8)
        logger.log_video("rollout", video, step=7)
        loaded = torch.load(tmp_path / "exp" / "videos" / "rollout_7.pt")
        assert torch.equal(loaded, video)
        with pytest.raises(ValueError, match=r"\[T, C, H, W\]"):
            logger.log_video("bad", torch.zeros(3, 8, 8))
        data = torch.randn(4, 5)
        logger.log_histogram("weights", data, step=3)
        assert torch.equal(
            torch.load(tmp_path / "exp" / "histograms" / "weights_3.pt"), data.reshape(-1)
        )

    def test_bad_args(self, tmp_path):
        with pytest.raises(ValueError, match="video_format"):
            CSVLogger("exp", log_dir=tmp_path, video_format="gif")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="exp_name"):
            CSVLogger("", log_dir=tmp_path)

    def test_default_dir(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        logger = CSVLogger("exp")
        logger.log_scalar("a", 1.0, step=0)
        assert (tmp_path / "csv_logs" / "exp" / "scalars" / "a.csv").exists()
        logger.close()


def test_generate_exp_name_unique():
    a, b = generate_exp_name("SAC", "pend"), generate_exp_name("SAC", "pend")
    assert a != b and a.startswith("SAC_pend_") and b.startswith("SAC_pend_")


def test_get_logger(tmp_path):
    assert get_logger(None, str(tmp_path), "e") is None
    assert get_logger("", str(tmp_path), "e") is None
    logger = get_logger("csv", str(tmp_path), "e", video_format="pt")
    assert isinstance(logger, CSVLogger) and logger.root == tmp_path / "e"
    with pytest.raises(ValueError, match="unknown logger_type 'nope'"):
        get_logger("nope", str(tmp_path), "e")


def test_missing_package_names_extra(monkeypatch, tmp_path):
    import importlib

    real = importlib.import_module

    def fake(name, *args, **kwargs):
        if name == "wandb" or name.startswith("tensorboard"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", fake)
    with pytest.raises(ImportError, match=r"torchrl\[wandb\]"):
        WandbLogger("e", offline=True, save_dir=tmp_path)
    with pytest.raises(ImportError, match=r"torchrl\[tensorboard\]"):
        TensorboardLogger("e", log_dir=tmp_path)


def test_tensorboard_logger(tmp_path):
    pytest.importorskip("tensorboard")
    logger = TensorboardLogger("exp", log_dir=tmp_path)
    for i in range(3):
        logger.log_scalar("reward", float(i), step=i * 10)
    logger.log_histogram("weights", torch.randn(100), step=0)
    logger.log_hparams({"lr": 0.1, "net": {"depth": 2}, "act": torch.nn.Tanh})
    logger.close()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "exp"))
    acc.Reload()
    events = acc.Scalars("reward")
    assert [e.step for e in events] == [0, 10, 20]
    assert [e.value for e in events] == [0.0, 1.0, 2.0]
    assert "weights" in acc.Tags()["histograms"]
    via_factory = get_logger("tensorboard", str(tmp_path), "exp2")
    assert isinstance(via_factory, TensorboardLogger)
    via_factory.close()


def test_wandb_logger_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = WandbLogger("exp", offline=True, save_dir=tmp_path / "wb", project="torchrl-tests")
    try:
        logger.log_scalar("reward", 1.0, step=10)
        logger.log_scalar("reward", torch.tensor(2.0), step=20)
        logger.log_hparams({"lr": 0.1, "net": {"depth": 2}})
        logger.log_histogram("weights", torch.randn(50), step=20)
        assert logger.experiment.config["net.depth"] == 2
        summary = dict(logger.experiment.summary)
        assert summary["reward"] == 2.0 and summary["trainer/step"] == 20
    finally:
        logger.close()
    runs = list((tmp_path / "wb" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1


def test_mlflow_logger(tmp_path):
    pytest.importorskip("mlflow")
    from torchrl.record.loggers import MLFlowLogger

    logger = MLFlowLogger("exp", tracking_uri=(tmp_path / "mlruns").as_uri())
    logger.log_scalar("reward", 1.0, step=1)
    logger.log_hparams({"lr": 0.1})
    logger.close()
    assert os.path.isdir(tmp_path / "mlruns")


@pytest.mark.slow  # a fresh interpreter importing torch: 4-10 s on the shared 2 cores
def test_import_is_lazy():
    import subprocess
    import sys

    probe = (
        "import sys, warnings, multiprocessing\n"
        "import torch, tensordict\n"
        "before = list(warnings.filters)\n"
        "import torchrl.trainers, torchrl.record, torchrl.record.loggers\n"
        "assert warnings.filters == before\n"
        "assert multiprocessing.get_start_method(allow_none=True) is None\n"
        "for name in ('wandb', 'tensorboard', 'mlflow', 'torch.utils.tensorboard'):\n"
        "    assert name not in sys.modules, name\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize("sub", ["common", "csv", "mlflow", "tensorboard", "utils", "wandb"])
def test_trainers_paths_reexport_record_loggers(sub):
    import importlib

    import torchrl.record.loggers as record_loggers
    import torchrl.trainers.loggers as trainer_loggers

    old = importlib.import_module(f"torchrl.trainers.loggers.{sub}")
    new = importlib.import_module(f"torchrl.record.loggers.{sub}")
    assert old.__all__ == new.__all__
    assert all(getattr(old, name) is getattr(new, name) for name in new.__all__)
    assert all(
        getattr(trainer_loggers, name) is getattr(record_loggers, name)
        for name in record_loggers.__all__
    )
