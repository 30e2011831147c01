"""Exploration: epsilon-greedy, additive Gaussian and Ornstein-Uhlenbeck noise on actions.

Each ``*Module`` is a tensordict module placed after a policy; it changes the action only while
exploring (exploration type ``RANDOM``, or none set: see ``_spec_utils.exploring``) and anneals
its noise with ``step(frames)``. The ``*Wrapper`` classes (the paper's names) are
``TensorDictSequential(policy, module)`` with the same ``step``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential

from torchrl._keys import ACTION, IS_INIT
from torchrl._types import NestedKey
from torchrl.modules._spec_utils import (
    exploring,
    leaf_spec,
    masked_uniform_index,
    module_keys,
    spec_kind,
)

if TYPE_CHECKING:
    from torchrl.data.specs.base import TensorSpec


class _Annealed(TensorDictModuleBase):
    """A scale annealed linearly from ``init`` to ``end`` over ``annealing_num_steps`` frames."""

    def __init__(self, init: float, end: float, annealing_num_steps: int, name: str) -> None:
        super().__init__()
        if annealing_num_steps < 0:
            raise ValueError(f"annealing_num_steps must be >= 0, got {annealing_num_steps}")
        self._scale_name = name
        self.annealing_num_steps = annealing_num_steps
        self.register_buffer(f"{name}_init", torch.tensor(float(init)))
        self.register_buffer(f"{name}_end", torch.tensor(float(end)))
        self.register_buffer(name, torch.tensor(float(init)))

    def step(self, frames: int = 1) -> None:
        """Moves the scale ``frames`` steps towards its final value (in place, no device sync).

        Args:
            frames: number of collected frames since the last call.
        """
        init = getattr(self, f"{self._scale_name}_init")
        end = getattr(self, f"{self._scale_name}_end")
        scale = getattr(self, self._scale_name)
        if self.annealing_num_steps == 0:
            scale.copy_(end)
            return
        scale.sub_(frames * (init - end) / self.annealing_num_steps)
        # Clip at the end value, whichever direction the annealing goes.
        scale.copy_(torch.where(init >= end, torch.maximum(scale, end), torch.minimum(scale, end)))


class EGreedyModule(_Annealed):
    """Epsilon-greedy exploration: with probability ``eps`` the action is replaced by a random one.

    One coin is flipped per batch element. Random actions are drawn from ``spec`` (uniformly
    among allowed actions when ``action_mask_key`` gives a boolean mask).

    Args:
        spec: the action spec (``OneHot``, ``Categorical``, ... or a ``Composite`` holding
            ``action_key``).
        eps_init: initial epsilon.
        eps_end: final epsilon.
        annealing_num_steps: frames to go from ``eps_init`` to ``eps_end``.
        action_key: the action entry.
        action_mask_key: optional boolean mask of allowed actions (True = allowed).
        device: device of the epsilon buffers.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import set_interaction_type
        >>> from torchrl.data import Categorical
        >>> explore = EGreedyModule(Categorical(4), eps_init=1.0, eps_end=0.0, annealing_num_steps=10)
        >>> td = TensorDict(action=torch.zeros(1000, dtype=torch.long), batch_size=[1000])
        >>> bool((explore(td.clone())["action"] != 0).any())
        True
        >>> with set_interaction_type("deterministic"):
        ...     bool((explore(td.clone())["action"] == 0).all())
        True
        >>> explore.step(5); explore.eps
        tensor(0.5000)
    """

    eps: torch.Tensor

    def __init__(
        self,
        spec: TensorSpec | None,
        eps_init: float = 1.0,
        eps_end: float = 0.1,
        annealing_num_steps: int = 1000,
        *,
        action_key: NestedKey = ACTION,
        action_mask_key: NestedKey | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        if spec is None:
            raise ValueError("EGreedyModule needs the action spec to draw random actions from")
        super().__init__(eps_init, eps_end, annealing_num_steps, "eps")
        self.spec = leaf_spec(spec, action_key)
        self.action_key = action_key
        self.action_mask_key = action_mask_key
        self.in_keys = module_keys([action_key] + ([action_mask_key] if action_mask_key else []))
        self.out_keys = module_keys([action_key])
        if device is not None:
            self.to(device)

    def _random_action(self, action: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if mask is None:
            lead = action.shape[: action.ndim - self.spec.ndim]
            return self.spec.rand(lead).to(device=action.device, dtype=action.dtype)
        kind = spec_kind(self.spec)
        index = masked_uniform_index(mask.bool())
        if kind == "one_hot":
            return torch.nn.functional.one_hot(index, mask.shape[-1]).to(action.dtype)
        if kind == "categorical":
            return index.to(action.dtype)
        raise NotImplementedError(
            f"action masks are supported for OneHot and Categorical specs, not {kind}"
        )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not exploring():
            return tensordict
        action = tensordict.get(self.action_key)
        mask = None
        if self.action_mask_key is not None:
            mask = tensordict.get(self.action_mask_key, None)
            if mask is None:
                raise KeyError(f"action_mask_key={self.action_mask_key!r} is not in the tensordict")
        batch = tensordict.batch_size
        coin = torch.rand(batch, device=action.device) < self.eps.to(action.device)
        coin = coin.reshape(*batch, *([1] * (action.ndim - len(batch))))
        tensordict.set(
            self.action_key, torch.where(coin, self._random_action(action, mask), action)
        )
        return tensordict


class AdditiveGaussianModule(_Annealed):
    """Adds ``sigma * N(mean, std)`` noise to the action, ``sigma`` annealed by :meth:`step`.

    Args:
        spec: the action spec; noisy actions are projected into it when ``safe``. ``None``
            adds noise without projection.
        sigma_init: initial noise scale.
        sigma_end: final noise scale.
        annealing_num_steps: frames to go from ``sigma_init`` to ``sigma_end``.
        mean: mean of the unit noise.
        std: standard deviation of the unit noise.
        action_key: the action entry.
        safe: project into ``spec``.
        device: device of the buffers.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Bounded
        >>> explore = AdditiveGaussianModule(Bounded(-1.0, 1.0, shape=(2,)), sigma_init=10.0)
        >>> out = explore(TensorDict(action=torch.zeros(100, 2), batch_size=[100]))["action"]
        >>> bool(out.abs().max() <= 1), bool(out.std() > 0.5)
        (True, True)
    """

    sigma: torch.Tensor  # type: ignore[assignment]

    def __init__(
        self,
        spec: TensorSpec | None = None,
        sigma_init: float = 1.0,
        sigma_end: float = 0.1,
        annealing_num_steps: int = 1000,
        mean: float = 0.0,
        std: float = 1.0,
        *,
        action_key: NestedKey = ACTION,
        safe: bool = True,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(sigma_init, sigma_end, annealing_num_steps, "sigma")
        self.spec = leaf_spec(spec, action_key)
        self.mean = mean
        self.std = std
        self.action_key = action_key
        self.safe = safe
        self.in_keys = module_keys([action_key])
        self.out_keys = module_keys([action_key])
        if device is not None:
            self.to(device)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not exploring():
            return tensordict
        action = tensordict.get(self.action_key)
        noise = torch.randn_like(action).mul_(self.std).add_(self.mean)
        noisy = action + noise * self.sigma.to(action)
        if self.safe and self.spec is not None:
            noisy = self.spec.project(noisy)
        tensordict.set(self.action_key, noisy)
        return tensordict


class OrnsteinUhlenbeckProcessModule(_Annealed):
    """Adds temporally correlated Ornstein-Uhlenbeck noise (DDPG) to the action.

    Per batch element, ``n_t = n_{t-1} + theta (mu - n_{t-1}) dt + sigma_t sqrt(dt) W`` with
    ``sigma_t`` going linearly from ``sigma`` to ``sigma_min`` over ``n_steps_annealing`` steps of
    the element's episode; the action becomes ``action + eps * n_t`` with ``eps`` going from
    ``eta`` to ``eta_end`` over ``annealing_num_steps`` frames of :meth:`step`. The noise and the
    step count live in the tensordict (``noise_key``, ``steps_key``), so every env keeps its own
    process; they start at ``x0``/0 when missing and restart where ``is_init_key`` is True.

    Args:
        spec: the action spec (projection when ``safe``); ``None`` skips the projection.
        eta: initial noise multiplier ``eps``.
        sigma: initial diffusion scale.
        theta: mean-reversion rate.
        mu: long-run mean of the noise.
        x0: noise at the start of an episode.
        sigma_min: final diffusion scale (``None``: constant ``sigma``).
        n_steps_annealing: episode steps over which ``sigma`` anneals.
        dt: time step of the process.
        annealing_num_steps: frames over which ``eps`` anneals (with :meth:`step`).
        eta_end: final ``eps`` (``None``: constant ``eta``).
        action_key: the action entry.
        is_init_key: boolean entry marking the first step of an episode.
        noise_key: where the noise state is kept.
        steps_key: where the per-episode step count is kept.
        safe: project into ``spec``.
        device: device of the buffers.

    Examples:
        >>> from tensordict import TensorDict
        >>> ou = OrnsteinUhlenbeckProcessModule(eta=1.0, sigma=1.0, theta=0.1)
        >>> td = TensorDict(action=torch.zeros(4, 2), is_init=torch.ones(4, 1, dtype=torch.bool),
        ...                 batch_size=[4])
        >>> td = ou(td)
        >>> td["_ou_steps"]
        tensor([1, 1, 1, 1])
    """

    eps: torch.Tensor

    def __init__(
        self,
        spec: TensorSpec | None = None,
        eta: float = 0.6,
        sigma: float = 0.2,
        theta: float = 0.15,
        mu: float = 0.0,
        x0: float = 0.0,
        sigma_min: float | None = None,
        n_steps_annealing: int = 1000,
        *,
        dt: float = 1e-2,
        annealing_num_steps: int = 1000,
        eta_end: float | None = None,
        action_key: NestedKey = ACTION,
        is_init_key: NestedKey = IS_INIT,
        noise_key: NestedKey = "_ou_prev_noise",
        steps_key: NestedKey = "_ou_steps",
        safe: bool = True,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(eta, eta if eta_end is None else eta_end, annealing_num_steps, "eps")
        self.spec = leaf_spec(spec, action_key)
        self.sigma = sigma
        self.theta = theta
        self.mu = mu
        self.x0 = x0
        self.sigma_min = sigma if sigma_min is None else sigma_min
        self.n_steps_annealing = n_steps_annealing
        self.dt = dt
        self.action_key = action_key
        self.is_init_key = is_init_key
        self.noise_key = noise_key
        self.steps_key = steps_key
        self.safe = safe
        self.in_keys = module_keys([action_key, is_init_key, noise_key, steps_key])
        self.out_keys = module_keys([action_key, noise_key, steps_key])
        if device is not None:
            self.to(device)

    def _current_sigma(self, steps: torch.Tensor) -> torch.Tensor:
        slope = (self.sigma - self.sigma_min) / max(self.n_steps_annealing, 1)
        return (self.sigma - slope * steps).clamp_min(self.sigma_min)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not exploring():
            return tensordict
        action = tensordict.get(self.action_key)
        batch = tensordict.batch_size
        noise = tensordict.get(self.noise_key, None)
        steps = tensordict.get(self.steps_key, None)
        if noise is None or steps is None:
            noise = torch.full_like(action, self.x0)
            steps = torch.zeros(batch, dtype=torch.long, device=action.device)
        is_init = tensordict.get(self.is_init_key, None)
        if is_init is not None:
            restart = is_init.reshape(*batch, -1).any(-1)
            steps = steps.masked_fill(restart, 0)
            restart = restart.reshape(*batch, *([1] * (action.ndim - len(batch))))
            noise = torch.where(restart, torch.full_like(noise, self.x0), noise)
        sigma_t = self._current_sigma(steps.to(action.dtype))
        sigma_t = sigma_t.reshape(*batch, *([1] * (action.ndim - len(batch))))
        noise = (
            noise
            + self.theta * (self.mu - noise) * self.dt
            + sigma_t * math.sqrt(self.dt) * torch.randn_like(action)
        )
        noisy = action + self.eps.to(action) * noise
        if self.safe and self.spec is not None:
            noisy = self.spec.project(noisy)
        tensordict.set(self.action_key, noisy)
        tensordict.set(self.noise_key, noise)
        tensordict.set(self.steps_key, steps + 1)
        return tensordict


def _policy_spec(
    policy: TensorDictModuleBase, spec: TensorSpec | None, action_key: NestedKey
) -> Any:
    if spec is not None:
        return spec
    policy_spec = getattr(policy, "spec", None)
    if policy_spec is None:
        return None
    return leaf_spec(policy_spec, action_key) if action_key in policy_spec else None


class _ExplorationWrapper(TensorDictSequential):
    def __init__(self, policy: TensorDictModuleBase, module: _Annealed) -> None:
        super().__init__(policy, module)

    @property
    def policy(self) -> TensorDictModuleBase:
        """The wrapped policy."""
        return cast(TensorDictModuleBase, self.module[0])

    @property
    def exploration_module(self) -> _Annealed:
        """The exploration module applied after the policy."""
        return cast(_Annealed, self.module[1])

    @property
    def spec(self) -> TensorSpec | None:
        return getattr(self.module[0], "spec", None)

    def step(self, frames: int = 1) -> None:
        """Anneals the exploration noise (see the module's ``step``)."""
        self.exploration_module.step(frames)


class EGreedyWrapper(_ExplorationWrapper):
    """``TensorDictSequential(policy, EGreedyModule(...))`` (the TorchRL paper's name).

    Args:
        policy: the greedy policy.
        eps_init: initial epsilon.
        eps_end: final epsilon.
        annealing_num_steps: frames to go from ``eps_init`` to ``eps_end``.
        action_key: the action entry.
        action_mask_key: optional boolean mask of allowed actions.
        spec: the action spec (default: the policy's ``spec``).

    Examples:
        >>> from torch import nn
        >>> from torchrl.modules import QValueActor
        >>> from torchrl.data import OneHot
        >>> policy = EGreedyWrapper(QValueActor(nn.Linear(3, 4), spec=OneHot(4)), annealing_num_steps=10)
        >>> policy.step(10); round(float(policy.exploration_module.eps), 4)
        0.1
    """

    def __init__(
        self,
        policy: TensorDictModuleBase,
        *,
        eps_init: float = 1.0,
        eps_end: float = 0.1,
        annealing_num_steps: int = 1000,
        action_key: NestedKey = ACTION,
        action_mask_key: NestedKey | None = None,
        spec: TensorSpec | None = None,
    ) -> None:
        module = EGreedyModule(
            _policy_spec(policy, spec, action_key),
            eps_init,
            eps_end,
            annealing_num_steps,
            action_key=action_key,
            action_mask_key=action_mask_key,
        )
        super().__init__(policy, module)


class AdditiveGaussianWrapper(_ExplorationWrapper):
    """``TensorDictSequential(policy, AdditiveGaussianModule(...))`` (the TorchRL paper's name).

    Args:
        policy: the deterministic policy.
        sigma_init: initial noise scale.
        sigma_end: final noise scale.
        annealing_num_steps: frames to go from ``sigma_init`` to ``sigma_end``.
        mean: mean of the unit noise.
        std: standard deviation of the unit noise.
        action_key: the action entry.
        spec: the action spec (default: the policy's ``spec``; none: no projection).
        safe: project into the spec.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torch import nn
        >>> actor = TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
        >>> policy = AdditiveGaussianWrapper(actor)
        >>> policy(TensorDict(observation=torch.zeros(4, 3), batch_size=[4]))["action"].shape
        torch.Size([4, 1])
    """

    def __init__(
        self,
        policy: TensorDictModuleBase,
        *,
        sigma_init: float = 1.0,
        sigma_end: float = 0.1,
        annealing_num_steps: int = 1000,
        mean: float = 0.0,
        std: float = 1.0,
        action_key: NestedKey = ACTION,
        spec: TensorSpec | None = None,
        safe: bool = True,
    ) -> None:
        module = AdditiveGaussianModule(
            _policy_spec(policy, spec, action_key),
            sigma_init,
            sigma_end,
            annealing_num_steps,
            mean,
            std,
            action_key=action_key,
            safe=safe,
        )
        super().__init__(policy, module)


class OrnsteinUhlenbeckProcessWrapper(_ExplorationWrapper):
    """``TensorDictSequential(policy, OrnsteinUhlenbeckProcessModule(...))`` (the paper's name).

    Args:
        policy: the deterministic policy.
        eta: initial noise multiplier.
        sigma: initial diffusion scale.
        theta: mean-reversion rate.
        mu: long-run mean of the noise.
        x0: noise at the start of an episode.
        sigma_min: final diffusion scale (``None``: constant).
        n_steps_annealing: episode steps over which ``sigma`` anneals.
        spec: the action spec (default: the policy's ``spec``; none: no projection).
        **kwargs: other :class:`OrnsteinUhlenbeckProcessModule` keyword arguments.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torch import nn
        >>> actor = TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
        >>> td = OrnsteinUhlenbeckProcessWrapper(actor)(TensorDict(observation=torch.zeros(4, 3), batch_size=[4]))
        >>> td["_ou_prev_noise"].shape
        torch.Size([4, 1])
    """

    def __init__(
        self,
        policy: TensorDictModuleBase,
        *,
        eta: float = 0.6,
        sigma: float = 0.2,
        theta: float = 0.15,
        mu: float = 0.0,
        x0: float = 0.0,
        sigma_min: float | None = None,
        n_steps_annealing: int = 1000,
        spec: TensorSpec | None = None,
        action_key: NestedKey = ACTION,
        **kwargs: Any,
    ) -> None:
        module = OrnsteinUhlenbeckProcessModule(
            _policy_spec(policy, spec, action_key),
            eta,
            sigma,
            theta,
            mu,
            x0,
            sigma_min,
            n_steps_annealing,
            action_key=action_key,
            **kwargs,
        )
        super().__init__(policy, module)
