"""``VecGymEnvTransform``: consistent data from vector envs that reset their sub-envs themselves.

An auto-resetting vector env returns, on the step that ends an episode, the *first*
observation of the next episode, and stores the true last one elsewhere (gymnasium's
``"final_obs"`` info; an env wrapped for torchrl writes it under a ``"final"`` entry). This
transform puts the true last observation back into the step's output and keeps the reset
observation for the next ``reset()``, which then returns it without resetting those sub-envs
again.

torchrl's own :class:`~torchrl.envs.GymWrapper` drives vector envs with autoreset disabled and
does not need it; it serves envs that do autoreset and report a ``"final"`` entry.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDictBase

from torchrl._keys import RESET
from torchrl.data.specs import Composite
from torchrl.envs.transforms._utils import expand_right
from torchrl.envs.transforms.base import Transform

__all__ = ["VecGymEnvTransform"]


class VecGymEnvTransform(Transform):
    """Swaps the final observation of auto-reset sub-envs back into the step's output.

    On a step where a sub-env is done, each observation entry found under ``final_name`` (the
    true last observation) replaces the observation written by the env (the next episode's
    first one), which is kept; a done sub-env with no final entry gets ``missing_obs_value``.
    At the next ``reset()``, the sub-envs with a kept observation are taken out of the
    ``"_reset"`` mask the base env receives (they were reset already) and get the kept
    observation. The ``final_name`` entry is removed from the outputs and from the specs.

    Args:
        final_name: the entry holding the final observations (default ``"final"``).
        missing_obs_value: the fill of a done sub-env without a final observation.

    Examples:
        >>> # see test/envs/test_transforms_policy.py for an auto-resetting env
        >>> from torchrl.envs.transforms import VecGymEnvTransform
        >>> VecGymEnvTransform().final_name
        'final'
    """

    def __init__(self, final_name: str = "final", missing_obs_value: Any = math.nan) -> None:
        super().__init__()
        self.final_name = final_name
        self.missing_obs_value = missing_obs_value
        # The reset outputs of the sub-envs the base env reset by itself, and which ones.
        self._kept: TensorDictBase | None = None
        self._kept_mask: torch.Tensor | None = None

    def _obs_keys(self) -> list[Any]:
        parent = self.parent
        if parent is None:
            raise RuntimeError("VecGymEnvTransform must be used in a TransformedEnv")
        spec = parent.full_observation_spec
        return [
            k
            for k in spec.keys(include_nested=True, leaves_only=True)
            if (k if isinstance(k, str) else k[0]) != self.final_name
        ]

    def _done(self, td: TensorDictBase) -> torch.Tensor:
        done = td.get("done", None)
        if done is None:
            raise KeyError(
                f"VecGymEnvTransform: the step output has no 'done' entry (its keys: "
                f"{list(td.keys())})"
            )
        return done.reshape(td.batch_size)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        final = next_tensordict.get(self.final_name, None)
        if final is not None:
            next_tensordict = next_tensordict.exclude(self.final_name)
        done = self._done(next_tensordict)
        if not bool(done.any()):
            return next_tensordict
        keys = self._obs_keys()
        kept = next_tensordict.select(*keys).clone()
        for key in keys:
            value = next_tensordict.get(key)
            last = None if final is None else final.get(key, None)
            if last is None:
                last = torch.full_like(value, self.missing_obs_value)
            where = expand_right(done, value.ndim)
            next_tensordict.set(key, torch.where(where, last.to(value.dtype), value))
        if self._kept is None or self._kept_mask is None:
            self._kept, self._kept_mask = kept, done.clone()
        else:
            for key in keys:
                old = self._kept.get(key)
                where = expand_right(done, old.ndim)
                self._kept.set(key, torch.where(where, kept.get(key), old))
            self._kept_mask = self._kept_mask | done
        return next_tensordict

    def _reset_env_preprocess(self, tensordict: TensorDictBase) -> TensorDictBase:
        mask = self._kept_mask
        if mask is None:
            return tensordict
        reset = tensordict.get(RESET, None)
        if reset is None:
            return tensordict
        tensordict.set(RESET, reset & ~mask.reshape(reset.shape))
        return tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        out = tensordict_reset
        final = out.get(self.final_name, None)
        if final is not None:
            out = out.exclude(self.final_name)
        kept, mask = self._kept, self._kept_mask
        if kept is None or mask is None:
            return out
        reset = tensordict.get(RESET, None)
        if reset is None:
            # A full reset: the base env reset every sub-env, the kept outputs are stale.
            self._kept, self._kept_mask = None, None
            return out
        use = mask & reset.reshape(mask.shape)
        for key in kept.keys(include_nested=True, leaves_only=True):
            value = out.get(key, None)
            if value is None:
                continue
            where = expand_right(use, value.ndim)
            out.set(key, torch.where(where, kept.get(key).to(value.dtype), value))
        remaining = mask & ~use
        if bool(remaining.any()):
            self._kept_mask = remaining
        else:
            self._kept, self._kept_mask = None, None
        return out

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        if self.final_name in observation_spec.keys():
            del observation_spec[self.final_name]
        return observation_spec

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(
            "VecGymEnvTransform follows an env's auto-resets; use it in a TransformedEnv"
        )

    def extra_repr(self) -> str:
        return f"final_name={self.final_name!r}"
