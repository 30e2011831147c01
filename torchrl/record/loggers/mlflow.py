"""A logger for MLflow tracking servers or local ``file:`` stores."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from torchrl._utils import has_module, import_optional
from torchrl.record.loggers.common import Logger, as_float, check_video, flatten_config

__all__ = ["MLFlowLogger"]

_has_mlflow = has_module("mlflow")


class MLFlowLogger(Logger):
    """Logs to an MLflow run (needs ``mlflow``).

    Args:
        exp_name: the MLflow experiment's name (created when missing).
        tracking_uri: the tracking server or store (``"file:///..."`` for a local folder).
        tags: tags of the run.
        **kwargs: passed to ``mlflow.start_run``.

    Raises:
        ImportError: mlflow is not installed.

    Examples:
        >>> logger = MLFlowLogger("exp", tracking_uri="file:///tmp/mlruns")  # doctest: +SKIP
        >>> logger.log_scalar("reward", 1.0, step=10)  # doctest: +SKIP
    """

    def __init__(
        self,
        exp_name: str,
        tracking_uri: str,
        tags: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._tracking_uri = str(tracking_uri)
        self._tags = tags
        self._run_kwargs = kwargs
        super().__init__(exp_name, self._tracking_uri)

    def _create_experiment(self) -> Any:
        mlflow = import_optional("mlflow")
        mlflow.set_tracking_uri(self._tracking_uri)
        found = mlflow.get_experiment_by_name(self.exp_name)
        exp_id = (
            found.experiment_id if found is not None else mlflow.create_experiment(self.exp_name)
        )
        self._run = mlflow.start_run(experiment_id=exp_id, tags=self._tags, **self._run_kwargs)
        return mlflow

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Logs one metric value."""
        self.experiment.log_metric(name, as_float(value), step=step)

    def log_hparams(self, cfg: object) -> None:
        """Logs the flattened configuration as run parameters."""
        self.experiment.log_params(flatten_config(cfg))

    def log_video(
        self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Stores the uint8 frames as a ``.pt`` artifact named ``<name>_<step>.pt``."""
        video = check_video(video, "MLFlowLogger.log_video").detach().cpu()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{name.replace('/', '_')}_{step}.pt"
            torch.save(video, path)
            self.experiment.log_artifact(os.fspath(path), artifact_path="videos")

    def log_histogram(
        self, name: str, data: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Stores the values as a ``.pt`` artifact (MLflow has no histogram type)."""
        values = torch.as_tensor(data).detach().cpu().reshape(-1)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{name.replace('/', '_')}_{step}.pt"
            torch.save(values, path)
            self.experiment.log_artifact(os.fspath(path), artifact_path="histograms")

    def close(self) -> None:
        """Ends the run."""
        self.experiment.end_run()
