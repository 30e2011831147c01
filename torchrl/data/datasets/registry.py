"""A name -> builder registry, so that scripts open any dataset with one call.

``load_dataset("d4rl/halfcheetah-medium-v2", root=...)`` looks up the family ``"d4rl"`` and calls
its builder with ``dataset_id="halfcheetah-medium-v2"``; a name registered whole (without a family
prefix) is called with the keywords alone. The built-in families are registered lazily, so listing
or loading one imports only that reader.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["list_datasets", "load_dataset", "register_dataset"]

_BUILTINS: dict[str, str] = {
    "d4rl": "torchrl.data.datasets.d4rl:D4RLExperienceReplay",
    "minari": "torchrl.data.datasets.minari_data:MinariExperienceReplay",
    "atari_dqn": "torchrl.data.datasets.atari_dqn:AtariDQNExperienceReplay",
    "lerobot": "torchrl.data.datasets.lerobot:LeRobotExperienceReplay",
    "openml": "torchrl.data.datasets.openml:OpenMLExperienceReplay",
    "gen_dgrl": "torchrl.data.datasets.gen_dgrl:GenDGRLExperienceReplay",
    "openx": "torchrl.data.datasets.openx:OpenXExperienceReplay",
    "roboset": "torchrl.data.datasets.roboset:RobosetExperienceReplay",
    "vd4rl": "torchrl.data.datasets.vd4rl:VD4RLExperienceReplay",
}
_REGISTRY: dict[str, Callable[..., Any] | str] = dict(_BUILTINS)


def register_dataset(name: str, builder: Callable[..., Any], *, overwrite: bool = False) -> None:
    """Registers ``builder`` under ``name`` for :func:`load_dataset`.

    Args:
        name: a family (``"mydata"``, then loaded as ``"mydata/<dataset_id>"``) or a whole
            dataset name.
        builder: a callable returning a replay buffer (a reader class, or a function).
        overwrite: replace an existing entry instead of raising.

    Examples:
        >>> from torchrl.data import ReplayBuffer, LazyTensorStorage
        >>> register_dataset("empty-demo", lambda batch_size=None: ReplayBuffer(
        ...     storage=LazyTensorStorage(10), batch_size=batch_size), overwrite=True)
        >>> len(load_dataset("empty-demo", batch_size=4))
        0
    """
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"a dataset name must be a non-empty string without '/', got {name!r}")
    if not callable(builder):
        raise TypeError(f"builder must be callable, got {type(builder).__name__}")
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"dataset {name!r} is already registered (pass overwrite=True)")
    _REGISTRY[name] = builder


def list_datasets() -> list[str]:
    """Returns the registered names (families and whole names), sorted.

    Examples:
        >>> names = list_datasets()
        >>> [n for n in ("atari_dqn", "d4rl", "lerobot", "minari", "openml") if n in names]
        ['atari_dqn', 'd4rl', 'lerobot', 'minari', 'openml']
    """
    return sorted(_REGISTRY)


def load_dataset(name: str, **kwargs: Any) -> Any:
    """Builds the dataset registered under ``name`` (``"family/dataset_id"`` or a whole name).

    Args:
        name: ``"<family>/<dataset_id>"`` (e.g. ``"d4rl/hopper-medium-v2"``) or a whole name.
        **kwargs: passed to the builder (``root=``, ``batch_size=``, ...).

    Returns:
        What the builder returns (a replay buffer).

    Examples:
        The ``"d4rl"`` family, reading a small file written with
        :func:`~torchrl.data.datasets.export_d4rl`:

        >>> import tempfile, torch
        >>> from torchrl.data.datasets import export_d4rl, ted_from_arrays
        >>> obs = torch.arange(4.0).unsqueeze(-1)
        >>> td = ted_from_arrays(obs, torch.zeros(4, 1), torch.ones(4),
        ...     torch.tensor([0, 1, 0, 1]), torch.zeros(4), obs + 1)
        >>> tmp = tempfile.TemporaryDirectory()
        >>> path = export_d4rl(td, f"{tmp.name}/tiny.hdf5")
        >>> data = load_dataset("d4rl/tiny", data_file=path, root=tmp.name, batch_size=2)
        >>> type(data).__name__, len(data)
        ('D4RLExperienceReplay', 4)
        >>> tmp.cleanup()
    """
    family, _, dataset_id = name.partition("/")
    builder = _REGISTRY.get(name) if name in _REGISTRY else _REGISTRY.get(family)
    if builder is None:
        raise KeyError(
            f"no dataset registered as {name!r} (or family {family!r}); registered: {list_datasets()}"
        )
    if isinstance(builder, str):
        module, _, attr = builder.partition(":")
        builder = getattr(importlib.import_module(module), attr)
        _REGISTRY[family] = builder
    if dataset_id and name not in _REGISTRY:
        return builder(dataset_id=dataset_id, **kwargs)
    return builder(**kwargs)
