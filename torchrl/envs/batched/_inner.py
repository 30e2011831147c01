"""One worker's env, stepped and reset the same way by :class:`SerialEnv` and :class:`ParallelEnv`.

Both batched envs step a worker's env with its ``_step`` and the done-flag completion of
``EnvBase.step`` (the ``"next"`` bookkeeping is done once, for all workers, by the batched env),
and reset its finished sub-envs with :func:`reset_finished`, so that they give identical results.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tensordict import TensorDictBase

from torchrl._keys import NEXT
from torchrl.data.specs import TensorSpec
from torchrl.envs._key_paths import path_to_key
from torchrl.envs._mdp import apply_mdp_plan
from torchrl.envs._writes import set_next
from torchrl.envs.batched._layout import Path
from torchrl.envs.common import EnvBase

__all__ = [
    "check_value",
    "complete_output",
    "fast_step",
    "inner_step",
    "reset_finished",
    "step_fn",
]


def fast_step(env: EnvBase) -> bool:
    """Whether ``env.step`` is ``EnvBase.step`` without checks: ``_step`` can be called directly."""
    return type(env).step is EnvBase.step and not env.run_type_checks


def step_fn(env: EnvBase) -> Callable[[TensorDictBase], TensorDictBase]:
    """A worker's raw step: ``env._step`` when that is all ``env.step`` would do, else ``step``.

    Done flags are completed by the caller (:func:`complete_output`), where needed.
    """
    if fast_step(env):
        return env._step

    def step(tensordict: TensorDictBase) -> TensorDictBase:
        return env.step(tensordict).get(NEXT)

    return step


def complete_output(env: EnvBase, out: TensorDictBase) -> TensorDictBase:
    """``out`` (a ``_step`` output of ``env``) with the done flags ``env.step`` would derive."""
    (env._cache or env._spec_cache()).done_groups.complete(out)
    return out


def inner_step(env: EnvBase, tensordict: TensorDictBase, fast: bool) -> TensorDictBase:
    """One step of a worker's env; returns its ``"next"`` entries (done flags completed)."""
    if fast:
        # EnvBase.step minus the "next" bookkeeping, which the batched env does once for all.
        out = env._step(tensordict)
        (env._cache or env._spec_cache()).done_groups.complete(out)
        return out
    return env.step(tensordict).get(NEXT)


def reset_finished(
    env: EnvBase, tensordict: TensorDictBase, next_out: TensorDictBase
) -> TensorDictBase | None:
    """Resets the finished sub-envs of a worker after a step (``None`` when none finished).

    Does what ``env.step_and_maybe_reset`` does after its step: the next step's input is built
    by ``step_mdp`` and the done flags become the ``"_reset"`` masks of a partial reset.
    """
    cache = env._cache or env._spec_cache()
    groups = cache.done_groups
    flags = groups.done_flags(next_out)
    if flags is None:
        return None
    td = tensordict.copy()
    set_next(td, next_out)
    next_td = apply_mdp_plan(td, cache.mdp_plan)
    groups.set_reset(next_td, flags)
    return env.reset(next_td)


def check_value(value: Any, spec: TensorSpec, path: Path, worker: int, what: str) -> Any:
    """Raises a clear error when a worker's output lacks an entry or has the wrong shape."""
    if value is None:
        raise KeyError(
            f"worker {worker}: the env's {what} output has no entry {path_to_key(path)!r}, which "
            f"its specs declare ({spec!r})"
        )
    if value.shape != spec.shape[1:]:
        raise ValueError(
            f"worker {worker}: the env's {what} output {path_to_key(path)!r} has shape "
            f"{tuple(value.shape)}, its spec expects {tuple(spec.shape[1:])} ({spec!r})"
        )
    return value
