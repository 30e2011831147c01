"""Offline datasets as replay buffers: readers for standard on-disk formats, exports, a registry.

Every reader takes a local path or cache directory, converts the raw data once into a memory-mapped
TensorDict (TED layout) and reopens it instantly afterwards; see ``docs/offline_data.rst``.
"""

from torchrl.data.datasets.common import (
    DATASETS_ROOT_ENV,
    EPISODE,
    BaseDatasetExperienceReplay,
    DatasetFormatError,
    DatasetNotFoundError,
    default_root,
    ted_from_arrays,
)
from torchrl.data.datasets.registry import list_datasets, load_dataset, register_dataset

__all__ = [
    "DATASETS_ROOT_ENV",
    "EPISODE",
    "BaseDatasetExperienceReplay",
    "DatasetFormatError",
    "DatasetNotFoundError",
    "default_root",
    "list_datasets",
    "load_dataset",
    "register_dataset",
    "ted_from_arrays",
]
