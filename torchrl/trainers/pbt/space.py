"""Hyper-parameter spaces for population-based training: sample, perturb, resample."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ChoiceParam",
    "ContinuousParam",
    "IntegerParam",
    "HParamSpace",
    "check_perturb_factors",
    "explore",
    "make_space",
]


def check_perturb_factors(perturb_factors: Sequence[float]) -> tuple[float, ...]:
    """The factors as a tuple of floats; raises ``ValueError`` unless all are finite and > 0."""
    factors = tuple(float(f) for f in perturb_factors)
    if not factors or any(not math.isfinite(f) or f <= 0 for f in factors):
        raise ValueError(
            f"perturb_factors must be a non-empty sequence of finite numbers > 0, "
            f"got {perturb_factors!r}"
        )
    return factors


class ContinuousParam:
    """A real hyper-parameter in ``[low, high]``, sampled uniformly or log-uniformly.

    Perturbing multiplies the value by a factor and clips it into the bounds.

    Args:
        low: the smallest value.
        high: the largest value (``> low``).
        log: sample uniformly in log space (for learning rates); needs ``low > 0``.

    Examples:
        >>> import random
        >>> lr = ContinuousParam(1e-4, 1e-2, log=True)
        >>> lr.perturb(5e-3, 1.2), lr.perturb(9e-3, 1.2)
        (0.006, 0.01)
        >>> 1e-4 <= lr.sample(random.Random(0)) <= 1e-2
        True
    """

    def __init__(self, low: float, high: float, *, log: bool = False) -> None:
        low, high = float(low), float(high)
        if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
            raise ValueError(
                f"ContinuousParam: expected finite low < high, got low={low!r}, high={high!r}"
            )
        if log and low <= 0:
            raise ValueError(f"ContinuousParam: log=True needs low > 0, got low={low!r}")
        self.low = low
        self.high = high
        self.log = bool(log)

    def sample(self, rng: random.Random) -> float:
        """A value drawn from the whole range with ``rng``."""
        if self.log:
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)

    def perturb(self, value: Any, factor: float) -> float:
        """``value * factor``, clipped into ``[low, high]``."""
        return min(max(float(value) * factor, self.low), self.high)

    def validate(self, name: str, value: Any) -> None:
        """Raises ``ValueError`` naming ``name`` when ``value`` is out of the bounds."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"hyper-parameter {name!r}: expected a number, got {value!r}")
        if not self.low <= float(value) <= self.high:
            raise ValueError(
                f"hyper-parameter {name!r}: expected a value in [{self.low}, {self.high}], "
                f"got {value!r}"
            )

    def __repr__(self) -> str:
        return f"ContinuousParam(low={self.low}, high={self.high}, log={self.log})"


class IntegerParam:
    """An integer hyper-parameter in ``[low, high]`` (both included).

    Perturbing multiplies and rounds, moving at least one step in the factor's direction (a
    factor of 1.2 on 2 would round back to 2), then clips into the bounds.

    Args:
        low: the smallest value.
        high: the largest value (``>= low``).

    Examples:
        >>> epochs = IntegerParam(1, 10)
        >>> epochs.perturb(2, 1.2), epochs.perturb(2, 0.8), epochs.perturb(10, 1.2)
        (3, 1, 10)
    """

    def __init__(self, low: int, high: int) -> None:
        for name, value in (("low", low), ("high", high)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"IntegerParam: {name} must be an int, got {value!r}")
        if low > high:
            raise ValueError(f"IntegerParam: expected low <= high, got low={low}, high={high}")
        self.low = low
        self.high = high

    def sample(self, rng: random.Random) -> int:
        """A value drawn uniformly with ``rng``."""
        return rng.randint(self.low, self.high)

    def perturb(self, value: Any, factor: float) -> int:
        """``round(value * factor)``, at least one step away from ``value``, clipped."""
        value = int(value)
        new = int(round(value * factor))
        if factor > 1:
            new = max(new, value + 1)
        elif factor < 1:
            new = min(new, value - 1)
        return min(max(new, self.low), self.high)

    def validate(self, name: str, value: Any) -> None:
        """Raises ``ValueError`` naming ``name`` when ``value`` is not an int in the bounds."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"hyper-parameter {name!r}: expected an int, got {value!r}")
        if not self.low <= value <= self.high:
            raise ValueError(
                f"hyper-parameter {name!r}: expected an int in [{self.low}, {self.high}], "
                f"got {value!r}"
            )

    def __repr__(self) -> str:
        return f"IntegerParam(low={self.low}, high={self.high})"


class ChoiceParam:
    """A hyper-parameter taking one of an ordered list of values.

    Perturbing moves to the next value (factor > 1) or the previous one (factor < 1), staying
    at the ends; resampling picks any value.

    Args:
        values: the allowed values, in order (at least one; compared with ``==``).

    Examples:
        >>> batch = ChoiceParam([64, 128, 256])
        >>> batch.perturb(128, 1.2), batch.perturb(128, 0.8), batch.perturb(256, 1.2)
        (256, 64, 256)
    """

    def __init__(self, values: Sequence[Any]) -> None:
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ValueError(f"ChoiceParam: values must be a non-empty sequence, got {values!r}")
        self.values = list(values)

    def sample(self, rng: random.Random) -> Any:
        """A value drawn uniformly with ``rng``."""
        return self.values[rng.randrange(len(self.values))]

    def _index(self, value: Any) -> int:
        for i, candidate in enumerate(self.values):
            if candidate == value:
                return i
        raise ValueError(f"ChoiceParam: {value!r} is not one of {self.values}")

    def perturb(self, value: Any, factor: float) -> Any:
        """The neighbour of ``value`` in the factor's direction (``value`` itself at an end)."""
        i = self._index(value)
        step = 1 if factor > 1 else -1 if factor < 1 else 0
        return self.values[min(max(i + step, 0), len(self.values) - 1)]

    def validate(self, name: str, value: Any) -> None:
        """Raises ``ValueError`` naming ``name`` when ``value`` is not one of the values."""
        if not any(candidate == value for candidate in self.values):
            raise ValueError(
                f"hyper-parameter {name!r}: expected one of {self.values}, got {value!r}"
            )

    def __repr__(self) -> str:
        return f"ChoiceParam({self.values!r})"


HParam = ContinuousParam | IntegerParam | ChoiceParam
#: A space: one entry per searched hyper-parameter.
HParamSpace = dict[str, HParam]


def make_space(space: Mapping[str, Any]) -> HParamSpace:
    """Builds a space from param objects or shorthands.

    ``(low, high)`` with two ints is an :class:`IntegerParam`, with floats a
    :class:`ContinuousParam`; a list is a :class:`ChoiceParam`.

    Args:
        space: names to params or shorthands (at least one entry).

    Returns:
        A dict of names to param objects.

    Raises:
        ValueError: an entry is neither a param nor a shorthand.

    Examples:
        >>> make_space({"lr": (1e-4, 1e-2), "epochs": (1, 8), "act": ["tanh", "relu"]})
        {'lr': ContinuousParam(low=0.0001, high=0.01, log=False), 'epochs': IntegerParam(low=1, high=8), 'act': ChoiceParam(['tanh', 'relu'])}
    """
    if not isinstance(space, Mapping) or not space:
        raise ValueError(f"hparam_space must be a non-empty mapping, got {space!r}")
    out: HParamSpace = {}
    for name, spec in space.items():
        if not isinstance(name, str):
            raise ValueError(f"hparam_space: keys must be str, got {name!r}")
        if isinstance(spec, (ContinuousParam, IntegerParam, ChoiceParam)):
            out[name] = spec
        elif isinstance(spec, list):
            out[name] = ChoiceParam(spec)
        elif isinstance(spec, tuple) and len(spec) == 2:
            if all(isinstance(v, int) and not isinstance(v, bool) for v in spec):
                out[name] = IntegerParam(spec[0], spec[1])
            else:
                out[name] = ContinuousParam(spec[0], spec[1])
        else:
            raise ValueError(
                f"hparam_space[{name!r}]: expected a ContinuousParam, IntegerParam, ChoiceParam, "
                f"a (low, high) tuple or a list of choices, got {spec!r}"
            )
    return out


def explore(
    hparams: Mapping[str, Any],
    space: HParamSpace,
    rng: random.Random,
    perturb_factors: Sequence[float] = (0.8, 1.2),
    resample_probability: float = 0.25,
) -> dict[str, Any]:
    """New hyper-parameters near ``hparams``: each searched one is resampled from its space with
    probability ``resample_probability``, else perturbed by a factor drawn from
    ``perturb_factors``. Entries outside ``space`` are copied unchanged.

    Args:
        hparams: the current values (every key of ``space`` must be there).
        space: what to search (see :func:`make_space`).
        rng: the random generator (draws happen in the order of ``space``'s keys).
        perturb_factors: the factors to choose from.
        resample_probability: the chance of resampling each searched hyper-parameter.

    Returns:
        A new dict with the same keys as ``hparams``.

    Examples:
        >>> import random
        >>> space = make_space({"lr": (1e-4, 1e-2)})
        >>> new = explore({"lr": 1e-3, "gamma": 0.99}, space, random.Random(0),
        ...     resample_probability=0.0)
        >>> round(new["lr"] / 1e-3, 6) in (0.8, 1.2), new["gamma"]
        (True, 0.99)
    """
    factors = check_perturb_factors(perturb_factors)
    if not 0.0 <= resample_probability <= 1.0:
        raise ValueError(f"resample_probability must be in [0, 1], got {resample_probability!r}")
    out = dict(hparams)
    for name, param in space.items():
        if name not in out:
            raise KeyError(f"explore: hyper-parameter {name!r} of the space is not in {out}")
        if rng.random() < resample_probability:
            out[name] = param.sample(rng)
        else:
            out[name] = param.perturb(out[name], factors[rng.randrange(len(factors))])
    return out
