"""What an env needs for a recurrent policy: its state primers and the episode-start flag.

A recurrent module (:class:`~torchrl.modules.LSTMModule`, :class:`~torchrl.modules.GRUModule`,
or any module with a ``make_tensordict_primer()`` method) reads its state from the TensorDict
and resets it where ``"is_init"`` is set. The env must therefore write zero states at reset (a
:class:`~torchrl.envs.transforms.TensorDictPrimer`) and mark episode starts (an
:class:`~torchrl.envs.transforms.InitTracker`). These helpers gather both from a whole policy.
"""

from __future__ import annotations

import functools
import warnings

import torch
from tensordict import TensorDict
from torch import nn

from torchrl._keys import IS_INIT
from torchrl.envs.transforms import Compose, InitTracker, TensorDictPrimer, Transform

__all__ = ["get_env_transforms_from_module", "get_primers_from_module"]


def _primers_of(module: nn.Module, strict: bool) -> list[tuple[nn.Module, TensorDictPrimer]]:
    found, failed = [], []
    for sub in module.modules():
        make = getattr(sub, "make_tensordict_primer", None)
        if not callable(make):
            continue
        try:
            primer = make()
        except Exception:
            if strict:
                raise
            failed.append(type(sub).__name__)
            continue
        if primer is not None:
            found.append((sub, primer))
    if failed:
        warnings.warn(
            f"get_primers_from_module: make_tensordict_primer() failed for {sorted(set(failed))}; "
            "their states are not primed (strict=True raises the original error)",
            UserWarning,
            stacklevel=3,
        )
    return found


def get_primers_from_module(
    module: nn.Module, warn: bool = True, strict: bool = True
) -> TensorDictPrimer | Compose | None:
    """The primer(s) of every recurrent submodule of ``module``, ready to append to an env.

    Each submodule with a ``make_tensordict_primer()`` method (LSTM/GRU modules, GTrXL, ...)
    contributes the state entries it reads. A module reached twice (shared by actor and critic)
    counts once. Two different modules declaring the same state key would overwrite each
    other's state: that is an error naming the key.

    Args:
        module: the policy (any ``nn.Module``; its submodules are searched).
        warn: warn when no submodule needs a primer.
        strict: let an exception of a ``make_tensordict_primer()`` propagate; ``False`` skips
            that submodule and warns, naming its type.

    Returns:
        One :class:`~torchrl.envs.transforms.TensorDictPrimer` holding every state entry, with
        each module's default values and per-env specs (always expanded by the env's batch
        dims); the modules' own primers (a :class:`~torchrl.envs.transforms.Compose` of them
        when several) when one draws random values; ``None`` when nothing needs priming.

    Raises:
        ValueError: two modules declare the same state key.

    Examples:
        >>> from tensordict.nn import TensorDictModule, TensorDictSequential
        >>> from torchrl.modules import GRUModule, LSTMModule
        >>> gru = GRUModule(3, 8, in_key="observation", out_key="h1")
        >>> lstm = LSTMModule(8, 4, in_keys=["h1", "lstm_h", "lstm_c"], out_key="features")
        >>> primer = get_primers_from_module(TensorDictSequential(gru, lstm))
        >>> sorted(primer.primers.keys())
        ['lstm_c', 'lstm_h', 'recurrent_state']
    """
    found = _primers_of(module, strict)
    if not found:
        if warn:
            warnings.warn(
                f"get_primers_from_module: no submodule of {type(module).__name__} needs a "
                "primer (none has a make_tensordict_primer() method)",
                UserWarning,
                stacklevel=2,
            )
        return None
    owner: dict[object, str] = {}
    for sub, primer in found:
        for key in primer.primers.keys(include_nested=True, leaves_only=True):
            if key in owner:
                raise ValueError(
                    f"get_primers_from_module: the state entry {key!r} is declared by both "
                    f"{owner[key]} and {type(sub).__name__}; give each recurrent module its own "
                    "state keys (in_keys/out_keys), or they overwrite each other's state"
                )
            owner[key] = type(sub).__name__
    primers = [primer for _, primer in found]
    if any(primer.random for primer in primers):
        return primers[0] if len(primers) == 1 else Compose(*primers)
    # One primer with each entry's default value (what each primer writes on an empty batch).
    # A module's primer declares one env's state: its specs always get the env's batch dims
    # (expand_specs=True), even when a state dim happens to equal the batch size (a GTrXL
    # memory of 16 steps in 16 envs), which the default rule would take for batch dims.
    specs, defaults = {}, {}
    for primer in primers:
        filled = primer(TensorDict(batch_size=[]))
        for key, spec in primer.primers.items(include_nested=True, leaves_only=True):
            specs[key] = spec
            defaults[key] = functools.partial(torch.clone, filled.get(key))
    return TensorDictPrimer(specs, default_value=defaults, expand_specs=True)


def get_env_transforms_from_module(
    module: nn.Module, init_key: str = IS_INIT
) -> Compose | InitTracker:
    """The env transforms a recurrent policy needs: ``InitTracker`` and its state primers.

    Pass the result to :class:`~torchrl.envs.transforms.TransformedEnv` (or ``append_transform``)
    so that the env marks episode starts (``init_key``) and writes zero states at every reset.

    Args:
        module: the policy; its recurrent submodules are found by :func:`get_primers_from_module`.
        init_key: the episode-start flag written by the ``InitTracker``; it must be the one the
            recurrent modules read (their ``is_init_key``).

    Returns:
        ``Compose(InitTracker(init_key), primers...)``, or a bare ``InitTracker`` when no
        submodule has a state.

    Raises:
        ValueError: a recurrent submodule reads another episode-start key than ``init_key``.

    Examples:
        >>> from torchrl.envs import PendulumEnv, TransformedEnv
        >>> from torchrl.modules import LSTMModule
        >>> lstm = LSTMModule(3, 8, in_key="observation", out_key="features")
        >>> transforms = get_env_transforms_from_module(lstm)
        >>> env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), transforms)
        >>> td = env.reset()
        >>> td["is_init"].all().item(), td["recurrent_state_h"].shape
        (True, torch.Size([2, 1, 8]))
    """
    for sub in module.modules():
        key = getattr(sub, "is_init_key", None)
        if key is not None and callable(getattr(sub, "make_tensordict_primer", None)):
            if key != init_key:
                raise ValueError(
                    f"get_env_transforms_from_module: {type(sub).__name__} reads the episode-start "
                    f"flag {key!r} but init_key={init_key!r}; pass init_key={key!r}"
                )
    tracker = InitTracker(init_key)
    primer = get_primers_from_module(module, warn=False)
    if primer is None:
        return tracker
    parts: list[Transform] = [tracker]
    parts.extend(list(primer) if isinstance(primer, Compose) else [primer])
    return Compose(*parts)
