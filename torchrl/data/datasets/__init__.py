"""Offline datasets as replay buffers: readers for standard on-disk formats, exports, a registry.

Every reader takes a local path or cache directory, converts the raw data once into a memory-mapped
TensorDict (TED layout) and reopens it instantly afterwards; see ``docs/offline_data.rst``.
"""

from torchrl.data.datasets.atari_dqn import AtariDQNExperienceReplay, FrameStackStorage
from torchrl.data.datasets.common import (
    DATASETS_ROOT_ENV,
    EPISODE,
    BaseDatasetExperienceReplay,
    DatasetFormatError,
    DatasetNotFoundError,
    default_root,
    ted_from_arrays,
)
from torchrl.data.datasets.d4rl import (
    D4RL_DATASET_DIR_ENV,
    D4RL_DATASET_URLS,
    D4RLExperienceReplay,
    export_d4rl,
)
from torchrl.data.datasets.gen_dgrl import GenDGRLExperienceReplay
from torchrl.data.datasets.lerobot import LeRobotExperienceReplay, lerobot_columns_to_tensordict
from torchrl.data.datasets.minari_data import (
    MINARI_DATASETS_PATH_ENV,
    MinariExperienceReplay,
    export_minari,
    minari_dataset_path,
    space_to_spec,
)
from torchrl.data.datasets.openml import OpenMLExperienceReplay
from torchrl.data.datasets.openx import OpenXExperienceReplay
from torchrl.data.datasets.registry import list_datasets, load_dataset, register_dataset
from torchrl.data.datasets.roboset import RobosetExperienceReplay
from torchrl.data.datasets.vd4rl import VD4RLExperienceReplay

__all__ = [
    "AtariDQNExperienceReplay",
    "FrameStackStorage",
    "LeRobotExperienceReplay",
    "lerobot_columns_to_tensordict",
    "OpenMLExperienceReplay",
    "GenDGRLExperienceReplay",
    "OpenXExperienceReplay",
    "RobosetExperienceReplay",
    "VD4RLExperienceReplay",
    "MINARI_DATASETS_PATH_ENV",
    "MinariExperienceReplay",
    "export_minari",
    "minari_dataset_path",
    "space_to_spec",
    "D4RL_DATASET_DIR_ENV",
    "D4RL_DATASET_URLS",
    "D4RLExperienceReplay",
    "export_d4rl",
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
