"""Reading a config: any object with attributes, falling back to a config dataclass's default."""

from __future__ import annotations

import dataclasses
from typing import Any


def cfg_value(cfg: Any, name: str, config_cls: type) -> Any:
    """``cfg.<name>``, or the default of field ``name`` of the dataclass ``config_cls``.

    Args:
        cfg: any object (a dataclass, ``argparse.Namespace``, OmegaConf ``DictConfig``, ...);
            ``None`` reads every default.
        name: the field.
        config_cls: the dataclass that defines the field and its default.

    Returns:
        The value.
    """
    if cfg is not None and hasattr(cfg, name):
        return getattr(cfg, name)
    for f in dataclasses.fields(config_cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    raise AttributeError(f"{config_cls.__name__} has no field {name!r}")
