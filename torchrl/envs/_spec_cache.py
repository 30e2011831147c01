"""What an env derives from its specs once, for its hot paths: key lists, done groups, plans.

``EnvBase`` builds a :class:`SpecCache` on first use after a spec is set and drops it when a
spec changes (``EnvBase.empty_cache``), so that ``step``, ``reset`` and ``rollout`` read
ready-made lists instead of walking the specs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from torchrl._types import NestedKey
from torchrl.data.specs import Composite, OneHot, TensorSpec
from torchrl.envs._action_checks import ActionCheck
from torchrl.envs._done import DoneGroups
from torchrl.envs._key_paths import key_tuple
from torchrl.envs._mdp import MDPPlan, mdp_plan

__all__ = ["SpecCache", "fast_sampler"]


class SpecCache:
    """Key lists, done groups, the ``step_mdp`` plan and the action check of an env's specs.

    Args:
        action_spec: the env's ``full_action_spec``.
        observation_spec: its ``full_observation_spec``.
        reward_spec: its ``full_reward_spec``.
        done_spec: its ``full_done_spec``.
        state_spec: its ``full_state_spec``.
        make_action_check: builds the check of a step's actions from the action keys
            (``None``: no check), e.g. ``EnvBase._make_action_check``.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs._spec_cache import SpecCache
        >>> env = PendulumEnv()
        >>> cache = SpecCache(
        ...     env.full_action_spec,
        ...     env.full_observation_spec,
        ...     env.full_reward_spec,
        ...     env.full_done_spec,
        ...     env.full_state_spec,
        ...     lambda keys: None,
        ... )
        >>> cache.action_keys, cache.reset_keys
        (['action'], ['_reset'])
    """

    __slots__ = (
        "action_key",
        "action_keys",
        "action_leaf",
        "action_rand",
        "check_actions",
        "done_groups",
        "done_keys",
        "mdp_plan",
        "observation_keys",
        "reset_keys",
        "reward_keys",
        "state_keys",
    )

    def __init__(
        self,
        action_spec: Composite,
        observation_spec: Composite,
        reward_spec: Composite,
        done_spec: Composite,
        state_spec: Composite,
        make_action_check: Callable[[list[NestedKey]], ActionCheck | None],
    ) -> None:
        def leaves(spec: Composite) -> list[NestedKey]:
            return list(spec.keys(include_nested=True, leaves_only=True))

        self.action_keys = leaves(action_spec)
        self.reward_keys = leaves(reward_spec)
        self.done_keys = leaves(done_spec)
        self.observation_keys = leaves(observation_spec)
        self.state_keys = leaves(state_spec)
        self.action_key = self.action_keys[0] if len(self.action_keys) == 1 else None
        self.action_leaf: TensorSpec | None = (
            action_spec[self.action_key] if self.action_key is not None else None
        )
        self.action_rand = fast_sampler(self.action_leaf)
        self.check_actions: ActionCheck | None = make_action_check(self.action_keys)
        self.done_groups = DoneGroups(done_spec)
        self.reset_keys = self.done_groups.reset_keys
        self.mdp_plan: MDPPlan = mdp_plan(
            tuple(key_tuple(k) for k in self.reward_keys),
            tuple(key_tuple(k) for k in self.done_keys),
            tuple(key_tuple(k) for k in self.action_keys),
            True,
            True,
            False,
            True,
        )


def fast_sampler(spec: TensorSpec | None) -> Callable[[], torch.Tensor] | None:
    """``spec.rand()`` for an unmasked one-hot spec, at a third to a half of the cost.

    Draws the same indices as ``OneHot.rand`` (one ``torch.randint`` of the spec's leading
    shape), so seeded runs are unchanged, and copies rows of a precomputed identity matrix.
    ``None`` for other specs.

    Examples:
        >>> import torch
        >>> from torchrl.data import OneHot
        >>> from torchrl.envs._spec_cache import fast_sampler
        >>> spec = OneHot(4, shape=(2, 4))
        >>> torch.manual_seed(0); a = spec.rand()  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> torch.manual_seed(0); b = fast_sampler(spec)()  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> bool((a == b).all())
        True
    """
    if type(spec) is not OneHot or spec.ndim < 1 or spec.n > 256:
        return None
    one_hot: OneHot = spec
    n = int(one_hot.n)
    eye = torch.eye(n, dtype=one_hot.dtype, device=one_hot.device)
    rows = eye.unbind(0)
    lead = tuple(one_hot.shape[:-1])
    device = one_hot.device
    # the device argument alone costs half a microsecond: CPU draws go without it
    cpu = device is None or device.type == "cpu"
    randint = torch.randint if cpu else partial(torch.randint, device=device)

    def rand() -> torch.Tensor:
        if one_hot.mask is not None:  # a mask may be set on the spec later
            return one_hot.rand()
        if not lead:
            return rows[int(randint(0, n, ()))].clone()
        return eye[randint(0, n, lead)]  # advanced indexing copies the rows

    return rand
