"""The spec operations timed by ``benchmarks/specs.py``, written once for both libraries.

``make_cases(data)`` takes a ``torchrl.data`` module (ours, or TorchRL's under the peers' python)
and returns ``{name: zero-argument callable}``. Only names and signatures both libraries share
are used, so the two sides run the same code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def make_cases(data: Any) -> dict[str, Callable[[], Any]]:
    import numpy as np
    import torch

    bounded = data.Bounded(-1.0, 1.0, shape=(6,))
    bounded_t = data.Bounded(-torch.arange(1.0, 7.0), torch.arange(1.0, 7.0), shape=(6,))
    unbounded = data.Unbounded(shape=(4,))
    categorical = data.Categorical(4, shape=(1,))
    masked = data.Categorical(4, shape=(1,), mask=torch.tensor([True, False, True, True]))
    one_hot = data.OneHot(6)
    multi = data.MultiCategorical([3, 4, 5])
    multi_oh = data.MultiOneHot([3, 4, 5])
    binary = data.Binary(8)
    done = data.Categorical(2, shape=(1,), dtype=torch.bool)
    composite = data.Composite(
        observation=data.Unbounded(shape=(4,)),
        action=data.OneHot(2),
        next=data.Composite(reward=data.Unbounded(shape=(1,)), done=done),
    )
    batched = composite.expand(16)
    obs_np = np.zeros(4, dtype=np.float32)
    obs_np64 = np.zeros(4, dtype=np.float64)
    vals = {
        "bounded": bounded.rand(),
        "bounded_t": bounded_t.rand(),
        "categorical": categorical.rand(),
        "masked": masked.rand(),
        "one_hot": one_hot.rand(),
        "multi": multi.rand(),
        "multi_oh": multi_oh.rand(),
        "binary": binary.rand(),
    }
    td = composite.rand()
    tdb = batched.rand()
    return {
        "Bounded.rand": bounded.rand,
        "Bounded(tensor bounds).rand": bounded_t.rand,
        "Bounded.rand((16,))": lambda: bounded.rand((16,)),
        "Bounded.is_in": lambda: bounded.is_in(vals["bounded"]),
        "Bounded(tensor bounds).is_in": lambda: bounded_t.is_in(vals["bounded_t"]),
        "Bounded.project": lambda: bounded.project(vals["bounded"]),
        "Unbounded.rand": unbounded.rand,
        "Unbounded.encode(np.float32)": lambda: unbounded.encode(obs_np),
        "Unbounded.encode(np.float64)": lambda: unbounded.encode(obs_np64),
        "Unbounded.encode(float)": lambda: data.Unbounded(shape=(1,)).encode(1.0),
        "Categorical.rand": categorical.rand,
        "Categorical(mask).rand": masked.rand,
        "Categorical.is_in": lambda: categorical.is_in(vals["categorical"]),
        "Categorical(mask).is_in": lambda: masked.is_in(vals["masked"]),
        "Categorical(bool).encode(True)": lambda: done.encode(True),
        "OneHot.rand": one_hot.rand,
        "OneHot.is_in": lambda: one_hot.is_in(vals["one_hot"]),
        "OneHot.encode(int)": lambda: one_hot.encode(3),
        "MultiCategorical.rand": multi.rand,
        "MultiCategorical.is_in": lambda: multi.is_in(vals["multi"]),
        "MultiOneHot.rand": multi_oh.rand,
        "MultiOneHot.is_in": lambda: multi_oh.is_in(vals["multi_oh"]),
        "Binary.rand": binary.rand,
        "Binary.is_in": lambda: binary.is_in(vals["binary"]),
        "Bounded.expand(16, 6)": lambda: bounded.expand(16, 6),
        "Composite.rand (4 leaves)": composite.rand,
        "Composite.zero (4 leaves)": composite.zero,
        "Composite(batch 16).rand": batched.rand,
        "Composite.is_in": lambda: composite.is_in(td),
        "Composite(batch 16).is_in": lambda: batched.is_in(tdb),
        "Composite.expand(16)": lambda: composite.expand(16),
        'Composite["observation"]': lambda: composite["observation"],
        'Composite["next", "reward"]': lambda: composite["next", "reward"],
        "Composite.keys(True, True)": lambda: list(composite.keys(True, True)),
        "Composite.clone": composite.clone,
    }


def time_cases(cases: dict[str, Callable[[], Any]], seconds: float = 0.2) -> dict[str, float]:
    """Best-of-3 microseconds per call of each case, each repeat running about ``seconds``."""
    import time

    out = {}
    for name, fn in cases.items():
        fn()
        start = time.perf_counter()
        n = 0
        while time.perf_counter() - start < 0.02:
            fn()
            n += 1
        reps = max(10, int(n * seconds / 0.02))
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(reps):
                fn()
            best = min(best, (time.perf_counter() - start) / reps)
        out[name] = best * 1e6
    return out
