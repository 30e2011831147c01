"""Config files and command-line overrides, with or without Hydra.

A config is a tree of dataclasses. :func:`load_config` reads a YAML (PyYAML), JSON or TOML file
into nested dicts, :func:`parse_overrides` reads ``section.key=value`` arguments,
:func:`apply_overrides` writes them into the dicts and :func:`config_from_dict` checks every key
and value against the dataclasses. :func:`run_with_config` runs a script's ``main(cfg)`` under
Hydra when ``hydra-core`` is installed, and with this parser otherwise.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "apply_overrides",
    "compose_config",
    "config_from_dict",
    "config_to_dict",
    "load_config",
    "parse_overrides",
    "parse_value",
    "run_with_config",
]

_has_hydra = importlib.util.find_spec("hydra") is not None
_has_yaml = importlib.util.find_spec("yaml") is not None

_HYDRA_HINT = 'pip install "torchrl[hydra]"'

C = TypeVar("C")


def parse_value(text: str) -> Any:
    """Reads one override value: numbers, booleans, ``null``, ``[a, b]`` lists or a string.

    ``1e-4`` is a float (YAML 1.1 would read it as a string); quotes keep a string as it is.

    Args:
        text: the text after ``=``.

    Returns:
        An int, float, bool, ``None``, list or str.

    Examples:
        >>> parse_value("1e-4"), parse_value("8"), parse_value("true"), parse_value("[64, 64]")
        (0.0001, 8, True, [64, 64])
        >>> parse_value("'8'"), parse_value("CartPole-v1"), parse_value("null")
        ('8', 'CartPole-v1', None)
    """
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    lowered = text.lower()
    if lowered in ("null", "none", "~"):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [parse_value(part) for part in inner.split(",")] if inner else []
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_overrides(args: Sequence[str]) -> dict[str, Any]:
    """Reads ``key=value`` arguments (dotted keys for nested sections) into a flat dict.

    Hydra's other command-line features (``--multirun``, ``--cfg``, ``+key``/``~key``, sweeps
    ``a=1,2``, ``hydra.*`` keys) need Hydra itself.

    Args:
        args: the arguments, e.g. ``sys.argv[1:]``.

    Returns:
        ``{"optim.lr": 1e-4, ...}`` in argument order.

    Raises:
        ValueError: an argument is not ``key=value``.
        ImportError: an argument uses a Hydra-only feature and Hydra is not installed.

    Examples:
        >>> parse_overrides(["env.name=Pendulum-v1", "optim.lr=1e-4"])
        {'env.name': 'Pendulum-v1', 'optim.lr': 0.0001}
    """
    out: dict[str, Any] = {}
    for arg in args:
        feature = _hydra_feature(arg)
        if feature is not None:
            raise ImportError(
                f"the argument {arg!r} uses {feature}, which needs Hydra: {_HYDRA_HINT} (without "
                "Hydra, only key=value overrides are understood)"
            )
        key, sep, value = arg.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"override {arg!r} is not of the form key=value (e.g. optim.lr=1e-4)")
        out[key] = parse_value(value)
    return out


def _hydra_feature(arg: str) -> str | None:
    if arg.startswith("-"):
        return "a Hydra command-line flag"
    if arg[:1] in "+~":
        return "Hydra's add/remove syntax"
    key, _, value = arg.partition("=")
    if key.startswith("hydra.") or key == "hydra":
        return "Hydra's own settings"
    if "@" in key:
        return "Hydra's package syntax"
    stripped = value.strip()
    if "," in stripped and not stripped.startswith("[") and stripped[:1] not in "'\"":
        return "a Hydra sweep (a,b,...)"
    return None


def apply_overrides(config: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Returns a copy of a nested dict config with dotted ``overrides`` written into it.

    Only existing keys can be overridden; a new key is a typo far more often than an intent.

    Args:
        config: nested dicts (e.g. from :func:`load_config` or :func:`config_to_dict`).
        overrides: ``{"section.key": value}``.

    Returns:
        The new nested dict.

    Raises:
        KeyError: a key (or one of its sections) is not in the config; the message names it
            and lists the keys that exist there.

    Examples:
        >>> apply_overrides({"optim": {"lr": 1e-3}}, {"optim.lr": 1e-4})
        {'optim': {'lr': 0.0001}}
    """
    out = _deep_copy(config)
    for dotted, value in overrides.items():
        node = out
        parts = dotted.split(".")
        for depth, part in enumerate(parts):
            if not isinstance(node, dict) or part not in node:
                where = ".".join(parts[:depth]) or "the top level"
                known = sorted(node) if isinstance(node, dict) else []
                raise KeyError(
                    f"override {dotted!r}: no key {part!r} at {where} (keys there: {known})"
                )
            if depth == len(parts) - 1:
                node[part] = value
            else:
                node = node[part]
    return out


def _deep_copy(config: Any) -> Any:
    if isinstance(config, Mapping):
        return {str(k): _deep_copy(v) for k, v in config.items()}
    if isinstance(config, list):
        return [_deep_copy(v) for v in config]
    return config


def load_config(path: str | Path) -> dict[str, Any]:
    """Reads a config file into nested dicts: ``.yaml``/``.yml`` (PyYAML), ``.json``, ``.toml``.

    Args:
        path: the file.

    Returns:
        The nested dicts.

    Raises:
        ImportError: a YAML file and PyYAML is not installed.
        ValueError: another suffix, or the file does not hold a mapping.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder, "ppo.toml")
        ...     _ = path.write_text('[env]\\nname = "Acrobot-v1"\\n[optim]\\nlr = 1e-4\\n')
        ...     load_config(path)
        {'env': {'name': 'Acrobot-v1'}, 'optim': {'lr': 0.0001}}
    """
    path = Path(path)
    suffix = path.suffix.lower()
    text = path.read_text()
    if suffix in (".yaml", ".yml"):
        if not _has_yaml:
            raise ImportError(
                f"reading {path} needs PyYAML: pip install pyyaml (or {_HYDRA_HINT}, which "
                "brings it)"
            )
        import yaml

        data = yaml.safe_load(text)
    elif suffix == ".json":
        data = json.loads(text)
    elif suffix == ".toml":
        import tomllib

        data = tomllib.loads(text)
    else:
        raise ValueError(f"{path}: unknown config format {suffix!r}; use .yaml, .json or .toml")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a mapping at the top level, got {type(data).__name__}")
    return data


def config_to_dict(config: Any) -> dict[str, Any]:
    """The nested dicts of a dataclass config (the inverse of :func:`config_from_dict`).

    Examples:
        >>> from torchrl.trainers.algorithms.configs import OptimConfig
        >>> config_to_dict(OptimConfig(lr=1e-4))["lr"]
        0.0001
    """
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"expected a dataclass instance, got {type(config).__name__}")
    return dataclasses.asdict(config)


def config_from_dict(cls: type[C], data: Mapping[str, Any], _path: str = "") -> C:
    """Builds the dataclass config ``cls`` from nested dicts, checking every key and value.

    Missing keys keep their defaults; values are converted to the field's type where that
    loses nothing (``8`` for a float field, ``1e5`` for an int field, a list for a tuple).

    Args:
        cls: a dataclass type whose fields are scalars, lists, optional values or dataclasses.
        data: the nested dicts.

    Returns:
        The config.

    Raises:
        KeyError: a key is not a field; the message names the dotted key and the fields.
        TypeError: a value does not fit its field's type (the message names the key).

    Examples:
        >>> from torchrl.trainers.algorithms.configs import OptimConfig
        >>> config_from_dict(OptimConfig, {"lr": 1, "weight_decay": 0}).lr
        1.0
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{cls!r} is not a dataclass type")
    if not isinstance(data, Mapping):
        raise TypeError(
            f"config {_path or 'root'}: expected a mapping for {cls.__name__}, got "
            f"{type(data).__name__}"
        )
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        where = _path or "the top level"
        raise KeyError(
            f"config key {_join(_path, str(unknown[0]))!r} is unknown: {cls.__name__} at {where} "
            f"has {sorted(fields)}"
        )
    kwargs = {
        name: _convert(hints[name], value, _join(_path, name)) for name, value in data.items()
    }
    return cls(**kwargs)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _convert(hint: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(option, value, path)
            except (TypeError, KeyError) as err:
                errors.append(str(err))
        raise TypeError(f"config key {path!r}: {value!r} fits none of {hint}: {errors}")
    if origin is typing.Literal:
        if value not in typing.get_args(hint):
            raise TypeError(
                f"config key {path!r}: {value!r} is not one of {list(typing.get_args(hint))}"
            )
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"config key {path!r}: expected a list, got {value!r}")
        args = typing.get_args(hint)
        item = args[0] if args else Any
        items = [_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict or hint is dict:
        if not isinstance(value, Mapping):
            raise TypeError(f"config key {path!r}: expected a mapping, got {value!r}")
        return dict(value)
    if hint is Any:
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if dataclasses.is_dataclass(value) and isinstance(value, hint):
            return value
        return config_from_dict(hint, value, path)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise TypeError(f"config key {path!r}: expected true or false, got {value!r}")
    if hint is int:
        if isinstance(value, bool):
            raise TypeError(f"config key {path!r}: expected an int, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise TypeError(f"config key {path!r}: expected an int, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            # PyYAML reads "1e-4" (no dot) as a string.
            try:
                return float(value)
            except ValueError:
                pass
        raise TypeError(f"config key {path!r}: expected a number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise TypeError(f"config key {path!r}: expected a string, got {value!r}")
    return value


def compose_config(
    cls: type[C], path: str | Path | None = None, overrides: Sequence[str] = ()
) -> C:
    """Builds a config from the defaults of ``cls``, a file, then ``key=value`` overrides.

    Args:
        cls: the dataclass config type.
        path: an optional config file (see :func:`load_config`).
        overrides: command-line style overrides (see :func:`parse_overrides`).

    Returns:
        The config.

    Examples:
        >>> from torchrl.trainers.algorithms.configs import PPOTrainerConfig
        >>> cfg = compose_config(PPOTrainerConfig, None, ["env.name=Acrobot-v1", "optim.lr=1e-4"])
        >>> cfg.env.name, cfg.optim.lr
        ('Acrobot-v1', 0.0001)
    """
    data = config_to_dict(cls())
    if path is not None:
        data = _merge(data, load_config(path), "")
    data = apply_overrides(data, parse_overrides(overrides))
    return config_from_dict(cls, data)


def _merge(base: dict[str, Any], update: Mapping[str, Any], path: str) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if key not in base:
            raise KeyError(
                f"config key {_join(path, str(key))!r} is unknown (keys there: {sorted(base)})"
            )
        if isinstance(base[key], dict) and isinstance(value, Mapping):
            out[key] = _merge(base[key], value, _join(path, key))
        else:
            out[key] = value
    return out


def run_with_config(
    main: Callable[[Any], Any],
    cls: type[C],
    config_path: str | Path,
    argv: Sequence[str] | None = None,
    use_hydra: bool | None = None,
) -> Any:
    """Runs ``main(cfg)`` with the config file ``config_path`` and command-line overrides.

    With Hydra installed (and ``use_hydra`` not ``False``) Hydra reads the command line (all of
    its features work: ``--multirun``, sweeps, ``--cfg``); the composed config is then checked
    into ``cls`` by :func:`config_from_dict`. Hydra only knows the keys of the file, so the file
    should list every field (the examples' files do); without Hydra, the dataclass defaults fill
    in missing keys and ``argv`` (default ``sys.argv[1:]``) is read by :func:`parse_overrides`.

    Args:
        main: called with the config.
        cls: the dataclass config type.
        config_path: the YAML file holding the defaults.
        argv: the overrides (only without Hydra).
        use_hydra: force (``True``) or refuse (``False``) Hydra; default: when installed.

    Returns:
        What ``main`` returns (``None`` under Hydra).

    Raises:
        ImportError: ``use_hydra=True`` and Hydra is not installed.

    Examples:
        A script's ``main`` with its YAML defaults and two overrides (``argv`` stands for the
        command line; ``use_hydra=False`` uses this module's parser even where Hydra is
        installed):

        >>> import tempfile
        >>> from torchrl.trainers.algorithms.configs import PPOTrainerConfig
        >>> def main(cfg):
        ...     return cfg.env.name, cfg.optim.lr, cfg.collector.total_frames
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder, "ppo.yaml")
        ...     _ = path.write_text("env:\\n  name: Acrobot-v1\\noptim:\\n  lr: 1.0e-3\\n")
        ...     argv = ["optim.lr=1e-4", "collector.total_frames=5000"]
        ...     run_with_config(main, PPOTrainerConfig, path, argv=argv, use_hydra=False)
        ('Acrobot-v1', 0.0001, 5000)
    """
    config_path = Path(config_path).resolve()
    if use_hydra is None:
        use_hydra = _has_hydra
    if not use_hydra:
        args = list(sys.argv[1:] if argv is None else argv)
        return main(compose_config(cls, config_path, args))
    if not _has_hydra:
        raise ImportError(f"use_hydra=True needs Hydra: {_HYDRA_HINT}")
    import hydra
    from omegaconf import OmegaConf

    def hydra_main(cfg: Any) -> None:
        container = OmegaConf.to_container(cfg, resolve=True)
        main(config_from_dict(cls, container))  # type: ignore[arg-type]

    wrapped = hydra.main(
        config_path=str(config_path.parent), config_name=config_path.stem, version_base="1.3"
    )(hydra_main)
    if argv is not None:
        saved = sys.argv
        sys.argv = [saved[0], *argv]
        try:
            return wrapped()
        finally:
            sys.argv = saved
    return wrapped()
