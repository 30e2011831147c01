"""TD-MPC2: latent world model, policy prior, distributional Q ensemble and the MPPI planner.

Reference: Hansen, Su and Wang, "TD-MPC2: Scalable, Robust World Models for Continuous
Control" (ICLR 2024), https://arxiv.org/abs/2310.16828. The encoder and the latent dynamics end
in a simplicial normalisation (:func:`simnorm`); rewards and Q-values are predicted as
categorical distributions over a support that is uniform in symlog space and trained against
two-hot targets (:func:`symlog_two_hot`); the planner (:class:`TdMpc2Planner`) runs MPPI in
latent space, seeded with trajectories of the policy prior and warm-started from the previous
step's plan. The loss lives in :mod:`torchrl.objectives.tdmpc2`; the trainer in
:mod:`torchrl.trainers.algorithms.tdmpc2`. Actions are normalised to ``[-1, 1]`` throughout
(wrap an env with bounded actions in :class:`~torchrl.envs.transforms.ActionScaling`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn
from torch.nn import functional as F

if TYPE_CHECKING:
    from torchrl.envs.transforms import TensorDictPrimer

from torchrl._keys import ACTION, IS_INIT, NEXT, OBSERVATION
from torchrl._types import NestedKey
from torchrl.envs.utils import ExplorationType, exploration_type
from torchrl.modules._spec_utils import module_keys
from torchrl.modules.functional import symexp, symlog
from torchrl.modules.models.dreamer_v3_functional import two_hot_decode, two_hot_encode

__all__ = [
    "SimNorm",
    "SimplicialNormalization",
    "TdMpc2Planner",
    "TdMpc2PolicyPrior",
    "TdMpc2QEnsemble",
    "TdMpc2WorldModel",
    "simnorm",
    "symlog_two_hot",
    "symlog_two_hot_decode",
]


def simnorm(x: torch.Tensor, simplex_dim: int = 8) -> torch.Tensor:
    """Simplicial normalisation: a softmax over each group of ``simplex_dim`` features.

    Args:
        x: ``[..., D]`` with ``D`` a multiple of ``simplex_dim``.
        simplex_dim: the size of each simplex.

    Returns:
        ``[..., D]``: each consecutive group of ``simplex_dim`` entries is non-negative and sums
        to one.

    Examples:
        >>> out = simnorm(torch.randn(2, 16), simplex_dim=8)
        >>> torch.allclose(out.reshape(2, 2, 8).sum(-1), torch.ones(2, 2))
        True
    """
    if x.shape[-1] % simplex_dim:
        raise ValueError(
            f"simnorm: the last dim ({x.shape[-1]}) must be a multiple of simplex_dim "
            f"({simplex_dim})"
        )
    shape = x.shape
    return x.reshape(*shape[:-1], -1, simplex_dim).softmax(-1).reshape(shape)


class SimplicialNormalization(nn.Module):
    """Module form of :func:`simnorm` (TorchRL's name; :data:`SimNorm` is the same class).

    Args:
        dim: the size of each simplex; the input's last dim must be a multiple of it.

    Examples:
        >>> SimplicialNormalization(4)(torch.zeros(1, 8))
        tensor([[0.2500, 0.2500, 0.2500, 0.2500, 0.2500, 0.2500, 0.2500, 0.2500]])
    """

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"SimplicialNormalization: dim must be an int >= 1, got {dim!r}")
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalises ``x`` (see :func:`simnorm`)."""
        return simnorm(x, self.dim)


#: The paper's short name for :class:`SimplicialNormalization`.
SimNorm = SimplicialNormalization


def _support(vmin: float, vmax: float, num_bins: int, like: torch.Tensor) -> torch.Tensor:
    if num_bins < 2:
        raise ValueError(f"num_bins must be >= 2, got {num_bins}")
    if not vmax > vmin:
        raise ValueError(f"vmax must be greater than vmin, got vmin={vmin}, vmax={vmax}")
    return torch.linspace(vmin, vmax, num_bins, dtype=like.dtype, device=like.device)


def symlog_two_hot(value: torch.Tensor, vmin: float, vmax: float, num_bins: int) -> torch.Tensor:
    """Two-hot encoding of ``symlog(value)`` on ``num_bins`` points uniform in ``[vmin, vmax]``.

    Args:
        value: scalars, shape ``[..., 1]``.
        vmin: lowest support point (in symlog space).
        vmax: highest support point (in symlog space).
        num_bins: number of support points.

    Returns:
        ``[..., num_bins]`` targets summing to one, whose expected support point is
        ``symlog(value)`` (clipped to ``[vmin, vmax]``).

    Examples:
        >>> symlog_two_hot(torch.tensor([[0.0]]), -1.0, 1.0, 3)
        tensor([[0., 1., 0.]])
    """
    if value.shape[-1:] != (1,):
        raise ValueError(
            f"symlog_two_hot: value must have a trailing singleton dim, got {tuple(value.shape)}"
        )
    bins = _support(vmin, vmax, num_bins, value)
    return two_hot_encode(symlog(value.squeeze(-1)), bins)


def symlog_two_hot_decode(logits: torch.Tensor, vmin: float, vmax: float) -> torch.Tensor:
    """The scalar predicted by categorical ``logits`` on the symlog support: ``symexp(E[bin])``.

    Args:
        logits: ``[..., num_bins]``.
        vmin: lowest support point (in symlog space).
        vmax: highest support point (in symlog space).

    Returns:
        ``[..., 1]`` values.

    Examples:
        >>> target = symlog_two_hot(torch.tensor([[3.0]]), -5.0, 5.0, 11)
        >>> round(symlog_two_hot_decode(target.log(), -5.0, 5.0).item(), 4)
        3.0
    """
    bins = _support(vmin, vmax, logits.shape[-1], logits)
    return symexp(two_hot_decode(logits, bins)).unsqueeze(-1)


def _mlp(
    in_dim: int,
    mlp_dim: int,
    out_dim: int,
    *,
    num_layers: int = 2,
    out_act: nn.Module | None = None,
) -> nn.Sequential:
    """Linear -> LayerNorm -> Mish hidden layers, then a linear output (and ``out_act``)."""
    layers: list[nn.Module] = []
    dim = in_dim
    for _ in range(num_layers):
        layers += [nn.Linear(dim, mlp_dim), nn.LayerNorm(mlp_dim), nn.Mish()]
        dim = mlp_dim
    layers.append(nn.Linear(dim, out_dim))
    if out_act is not None:
        layers.append(out_act)
    return nn.Sequential(*layers)


def _zero_output(mlp: nn.Sequential) -> None:
    """Zeroes the last linear layer: its logits start uniform (a predicted value of ~0)."""
    last = [m for m in mlp if isinstance(m, nn.Linear)][-1]
    nn.init.zeros_(last.weight)
    nn.init.zeros_(last.bias)


class TdMpc2WorldModel(nn.Module):
    """TD-MPC2's encoder, latent dynamics and distributional reward head.

    ``encode(obs)`` and ``next(z, a)`` end in :class:`SimNorm`; ``reward_logits(z, a)`` gives
    ``num_bins`` logits on the symlog support ``[vmin, vmax]`` and ``reward(z, a)`` their
    decoded value. Sub-modules: ``encoder``, ``dynamics``, ``reward_head``.

    Args:
        observation_dim: size of the (flat) observation.
        action_dim: size of the action.
        latent_dim: size of the latent state (a multiple of ``simplex_dim``).
        mlp_dim: hidden width.
        simplex_dim: SimNorm group size.
        num_bins: reward support size.
        vmin: lowest support point (symlog space).
        vmax: highest support point (symlog space).

    Examples:
        >>> wm = TdMpc2WorldModel(3, 1, latent_dim=16, mlp_dim=32)
        >>> z = wm.encode(torch.randn(5, 3))
        >>> wm.next(z, torch.zeros(5, 1)).shape, wm.reward(z, torch.zeros(5, 1)).shape
        (torch.Size([5, 16]), torch.Size([5, 1]))
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        *,
        latent_dim: int = 512,
        mlp_dim: int = 512,
        simplex_dim: int = 8,
        num_bins: int = 101,
        vmin: float = -10.0,
        vmax: float = 10.0,
    ) -> None:
        super().__init__()
        if latent_dim % simplex_dim:
            raise ValueError(
                f"TdMpc2WorldModel: latent_dim ({latent_dim}) must be a multiple of simplex_dim "
                f"({simplex_dim})"
            )
        self.observation_dim = int(observation_dim)
        self.action_dim = int(action_dim)
        self.latent_dim = int(latent_dim)
        self.num_bins = int(num_bins)
        self.vmin = float(vmin)
        self.vmax = float(vmax)
        self.encoder = _mlp(observation_dim, mlp_dim, latent_dim, out_act=SimNorm(simplex_dim))
        self.dynamics = _mlp(
            latent_dim + action_dim, mlp_dim, latent_dim, out_act=SimNorm(simplex_dim)
        )
        self.reward_head = _mlp(latent_dim + action_dim, mlp_dim, num_bins)
        # TD-MPC2 starts the reward head at zero: a uniform distribution, value ~0.
        _zero_output(self.reward_head)

    def encode(self, observation: torch.Tensor) -> torch.Tensor:
        """The latent state ``[..., latent_dim]`` of ``observation`` ``[..., observation_dim]``."""
        return self.encoder(observation)

    def next(self, latent: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The predicted next latent state ``[..., latent_dim]``."""
        return self.dynamics(torch.cat([latent, action], -1))

    def reward_logits(self, latent: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Reward logits ``[..., num_bins]``."""
        return self.reward_head(torch.cat([latent, action], -1))

    def reward(self, latent: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The decoded reward ``[..., 1]``."""
        return symlog_two_hot_decode(self.reward_logits(latent, action), self.vmin, self.vmax)


class TdMpc2PolicyPrior(nn.Module):
    """TD-MPC2's policy prior: a tanh-squashed Gaussian over actions given a latent state.

    ``forward(z)`` returns ``(action, mode, log_prob)``: a sampled action in ``(-1, 1)``
    (``[..., action_dim]``), the squashed mean, and the sample's log-probability ``[..., 1]``
    (tanh-corrected). The log standard deviation is squashed into ``[log_std_min,
    log_std_max]``.

    Args:
        latent_dim: size of the latent state.
        action_dim: size of the action.
        mlp_dim: hidden width.
        log_std_min: lowest log standard deviation.
        log_std_max: highest log standard deviation.

    Examples:
        >>> pi = TdMpc2PolicyPrior(16, 2, mlp_dim=32)
        >>> action, mode, log_prob = pi(torch.randn(4, 16))
        >>> action.shape, log_prob.shape, bool(action.abs().max() <= 1)
        (torch.Size([4, 2]), torch.Size([4, 1]), True)
    """

    def __init__(
        self,
        latent_dim: int,
        action_dim: int,
        *,
        mlp_dim: int = 512,
        log_std_min: float = -10.0,
        log_std_max: float = 2.0,
    ) -> None:
        super().__init__()
        self.latent_dim = int(latent_dim)
        self.action_dim = int(action_dim)
        self.log_std_min = float(log_std_min)
        self.log_std_max = float(log_std_max)
        self.net = _mlp(latent_dim, mlp_dim, 2 * action_dim)

    def forward(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Samples an action for ``latent`` ``[..., latent_dim]``; see the class docstring."""
        mean, raw_log_std = self.net(latent).chunk(2, -1)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (
            torch.tanh(raw_log_std) + 1
        )
        eps = torch.randn_like(mean)
        pre_tanh = mean + eps * log_std.exp()
        log_prob = (-0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1, True)
        # log|d tanh(u)/du| = 2 * (log 2 - u - softplus(-2u)), stable for large |u|.
        log_prob = log_prob - (2 * (math.log(2.0) - pre_tanh - F.softplus(-2 * pre_tanh))).sum(
            -1, True
        )
        return torch.tanh(pre_tanh), torch.tanh(mean), log_prob


class TdMpc2QEnsemble(nn.Module):
    """An ensemble of ``num_q`` distributional Q-functions on (latent, action).

    ``logits(z, a)`` is ``[num_q, ..., num_bins]``; ``values(z, a)`` the decoded Q-values
    ``[num_q, ..., 1]``; ``reduce(z, a, mode)`` combines two randomly chosen members (``"min"``
    for TD targets, ``"avg"`` for planning and the policy objective), as TD-MPC2 does.

    Args:
        latent_dim: size of the latent state.
        action_dim: size of the action.
        mlp_dim: hidden width.
        num_q: ensemble size (>= 2).
        num_bins: support size.
        vmin: lowest support point (symlog space).
        vmax: highest support point (symlog space).
        dropout: dropout after the first hidden layer of each member.

    Examples:
        >>> q = TdMpc2QEnsemble(16, 2, mlp_dim=32, num_q=3)
        >>> z, a = torch.randn(4, 16), torch.zeros(4, 2)
        >>> q.logits(z, a).shape, q.reduce(z, a, "min").shape
        (torch.Size([3, 4, 101]), torch.Size([4, 1]))
    """

    def __init__(
        self,
        latent_dim: int,
        action_dim: int,
        *,
        mlp_dim: int = 512,
        num_q: int = 5,
        num_bins: int = 101,
        vmin: float = -10.0,
        vmax: float = 10.0,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if num_q < 2:
            raise ValueError(f"TdMpc2QEnsemble: num_q must be >= 2, got {num_q}")
        self.num_q = int(num_q)
        self.num_bins = int(num_bins)
        self.vmin = float(vmin)
        self.vmax = float(vmax)
        members = []
        for _ in range(num_q):
            member = _mlp(latent_dim + action_dim, mlp_dim, num_bins)
            if dropout > 0:
                member.insert(3, nn.Dropout(dropout))
            _zero_output(member)
            members.append(member)
        self.members = nn.ModuleList(members)

    def logits(self, latent: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Logits of every member, ``[num_q, ..., num_bins]``."""
        x = torch.cat([latent, action], -1)
        return torch.stack([member(x) for member in self.members])

    def values(self, latent: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Decoded Q-values of every member, ``[num_q, ..., 1]``."""
        return symlog_two_hot_decode(self.logits(latent, action), self.vmin, self.vmax)

    def reduce(self, latent: torch.Tensor, action: torch.Tensor, mode: str = "avg") -> torch.Tensor:
        """``min`` or ``avg`` of two random members' Q-values, ``[..., 1]``.

        Args:
            latent: ``[..., latent_dim]``.
            action: ``[..., action_dim]``.
            mode: ``"min"`` or ``"avg"``.

        Returns:
            ``[..., 1]`` Q-values.
        """
        if mode not in ("min", "avg"):
            raise ValueError(f"TdMpc2QEnsemble.reduce: mode must be 'min' or 'avg', got {mode!r}")
        idx = torch.randperm(self.num_q)[:2].tolist()
        x = torch.cat([latent, action], -1)
        pair = torch.stack([self.members[i](x) for i in idx])
        q = symlog_two_hot_decode(pair, self.vmin, self.vmax)
        return q.min(0).values if mode == "min" else q.mean(0)


class TdMpc2Planner(TensorDictModuleBase):
    """Acts with TD-MPC2's latent MPPI planner: encode, plan, return the first action.

    Candidate action sequences (``horizon`` steps, in ``[-1, 1]``) are ``num_pi_trajs``
    rollouts of the policy prior plus Gaussian samples around the current mean; each is scored
    by the discounted sum of predicted rewards plus the discounted ``avg`` Q-value of the
    policy's action at the last latent state. For ``iterations`` rounds the Gaussian is refit
    to the ``num_elites`` best with weights ``exp(temperature * (score - best))`` and its
    standard deviation clipped to ``[min_std, max_std]``. An elite drawn by weight gives the
    action (plus its std times noise unless the exploration type is ``DETERMINISTIC``). The
    fitted mean is written to ``("next", prev_mean_key)``: after ``step_mdp`` the next call reads
    it from ``prev_mean_key``, shifts it one step and starts from it (warm start); rows whose
    ``is_init_key`` is set, or a missing entry, start from zero. Add
    :meth:`make_tensordict_primer` to the env so that rollouts carry the entry.

    Args:
        world_model: a :class:`TdMpc2WorldModel`.
        policy_prior: a :class:`TdMpc2PolicyPrior`.
        q_ensemble: a :class:`TdMpc2QEnsemble`.
        horizon: planning horizon.
        discount: discount of imagined rewards and of the bootstrap Q-value.
        num_samples: candidate sequences per iteration (policy ones included).
        num_elites: elites refit per iteration.
        num_pi_trajs: policy-prior sequences (0 disables them).
        iterations: refitting rounds (two more when ``action_dim >= 20``, as TD-MPC2 does).
        min_std: lowest std of the fitted Gaussian.
        max_std: initial (and highest) std.
        temperature: inverse temperature of the elite weights.
        observation_key, action_key, is_init_key, prev_mean_key: the entries read/written.
        action_dim: defaults to ``policy_prior.action_dim``.

    Examples:
        >>> from tensordict import TensorDict
        >>> wm = TdMpc2WorldModel(3, 1, latent_dim=16, mlp_dim=32)
        >>> pi = TdMpc2PolicyPrior(16, 1, mlp_dim=32)
        >>> q = TdMpc2QEnsemble(16, 1, mlp_dim=32, num_q=2)
        >>> planner = TdMpc2Planner(wm, pi, q, horizon=3, num_samples=32, num_elites=8,
        ...     num_pi_trajs=4, iterations=2)
        >>> td = planner(TensorDict(observation=torch.randn(2, 3), batch_size=[2]))
        >>> td["action"].shape, td["next", "_tdmpc2_prev_mean"].shape
        (torch.Size([2, 1]), torch.Size([2, 3, 1]))
    """

    def __init__(
        self,
        world_model: TdMpc2WorldModel,
        policy_prior: TdMpc2PolicyPrior,
        q_ensemble: TdMpc2QEnsemble,
        *,
        horizon: int = 3,
        discount: float = 0.99,
        num_samples: int = 512,
        num_elites: int = 64,
        num_pi_trajs: int = 24,
        iterations: int = 6,
        min_std: float = 0.05,
        max_std: float = 2.0,
        temperature: float = 0.5,
        observation_key: NestedKey = OBSERVATION,
        action_key: NestedKey = ACTION,
        is_init_key: NestedKey = IS_INIT,
        prev_mean_key: NestedKey = "_tdmpc2_prev_mean",
        action_dim: int | None = None,
    ) -> None:
        super().__init__()
        for name, value, low in (
            ("horizon", horizon, 1),
            ("num_samples", num_samples, 1),
            ("num_elites", num_elites, 1),
            ("num_pi_trajs", num_pi_trajs, 0),
            ("iterations", iterations, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"TdMpc2Planner: {name} must be an int >= {low}, got {value!r}")
        if num_pi_trajs >= num_samples:
            raise ValueError(
                f"TdMpc2Planner: num_pi_trajs ({num_pi_trajs}) must be < num_samples "
                f"({num_samples})"
            )
        if num_elites > num_samples:
            raise ValueError(
                f"TdMpc2Planner: num_elites ({num_elites}) must be <= num_samples ({num_samples})"
            )
        if not 0 < min_std <= max_std:
            raise ValueError(
                f"TdMpc2Planner: need 0 < min_std <= max_std, got min_std={min_std}, "
                f"max_std={max_std}"
            )
        self.world_model = world_model
        self.policy_prior = policy_prior
        self.q_ensemble = q_ensemble
        self.action_dim = int(action_dim if action_dim is not None else policy_prior.action_dim)
        self.horizon = horizon
        self.discount = float(discount)
        self.num_samples = num_samples
        self.num_elites = num_elites
        self.num_pi_trajs = num_pi_trajs
        self.iterations = iterations + (2 if self.action_dim >= 20 else 0)
        self.min_std = float(min_std)
        self.max_std = float(max_std)
        self.temperature = float(temperature)
        self.observation_key = observation_key
        self.action_key = action_key
        self.is_init_key = is_init_key
        self.prev_mean_key = prev_mean_key
        next_prev = (
            (NEXT, *prev_mean_key) if isinstance(prev_mean_key, tuple) else (NEXT, prev_mean_key)
        )
        self.in_keys = module_keys([observation_key, is_init_key, prev_mean_key])
        self.out_keys = module_keys([action_key, next_prev])

    def make_tensordict_primer(self) -> TensorDictPrimer:
        """A transform that declares the warm-start entry: zeros at reset, carried by steps.

        Append it to the env (``TransformedEnv(env, planner.make_tensordict_primer())``) so
        that rollouts and collectors carry ``prev_mean_key`` (``[*B, horizon, action_dim]``).

        Returns:
            A :class:`~torchrl.envs.transforms.TensorDictPrimer`.

        Examples:
            >>> from torchrl.envs import PendulumEnv, TransformedEnv
            >>> wm = TdMpc2WorldModel(3, 1, latent_dim=16, mlp_dim=32)
            >>> planner = TdMpc2Planner(wm, TdMpc2PolicyPrior(16, 1, mlp_dim=32),
            ...     TdMpc2QEnsemble(16, 1, mlp_dim=32, num_q=2), num_samples=16, num_elites=4,
            ...     num_pi_trajs=2, iterations=1)
            >>> env = TransformedEnv(PendulumEnv(batch_size=[2]), planner.make_tensordict_primer())
            >>> env.reset()["_tdmpc2_prev_mean"].shape
            torch.Size([2, 3, 1])
        """
        from torchrl.data.specs import Unbounded
        from torchrl.envs.transforms import TensorDictPrimer

        spec = Unbounded(shape=(self.horizon, self.action_dim))
        return TensorDictPrimer({self.prev_mean_key: spec}, default_value=0.0)

    @torch.no_grad()
    def _value(self, z: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Scores sequences ``actions`` ``[B, N, H, A]`` from latents ``z`` ``[B, N, L]``."""
        value = torch.zeros(*z.shape[:-1], 1, dtype=z.dtype, device=z.device)
        weight = 1.0
        for t in range(self.horizon):
            value = value + weight * self.world_model.reward(z, actions[..., t, :])
            z = self.world_model.next(z, actions[..., t, :])
            weight *= self.discount
        action, _, _ = self.policy_prior(z)
        return value + weight * self.q_ensemble.reduce(z, action, "avg")

    @torch.no_grad()
    def plan(
        self, observation: torch.Tensor, prev_mean: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Plans from a batch of observations.

        Args:
            observation: ``[B, observation_dim]``.
            prev_mean: the warm-start mean ``[B, horizon, action_dim]`` (already shifted), or
                ``None`` for zeros.

        Returns:
            ``(action [B, action_dim], mean [B, horizon, action_dim])``.
        """
        batch, horizon, adim = observation.shape[0], self.horizon, self.action_dim
        z = self.world_model.encode(observation)
        num_pi = self.num_pi_trajs
        actions = torch.empty(
            batch, self.num_samples, horizon, adim, dtype=z.dtype, device=z.device
        )
        if num_pi:
            zp = z.unsqueeze(1).expand(batch, num_pi, z.shape[-1])
            for t in range(horizon):
                actions[:, :num_pi, t], _, _ = self.policy_prior(zp)
                zp = self.world_model.next(zp, actions[:, :num_pi, t])
        mean = torch.zeros(batch, horizon, adim, dtype=z.dtype, device=z.device)
        if prev_mean is not None:
            mean = mean + prev_mean
        std = torch.full_like(mean, self.max_std)
        zs = z.unsqueeze(1).expand(batch, self.num_samples, z.shape[-1])
        for _ in range(self.iterations):
            noise = torch.randn(
                batch, self.num_samples - num_pi, horizon, adim, dtype=z.dtype, device=z.device
            )
            actions[:, num_pi:] = (mean.unsqueeze(1) + std.unsqueeze(1) * noise).clamp(-1, 1)
            value = self._value(zs, actions).squeeze(-1).nan_to_num(0.0)  # [B, N]
            elite_value, elite_idx = value.topk(self.num_elites, dim=1)
            elite_actions = actions.gather(
                1, elite_idx[:, :, None, None].expand(-1, -1, horizon, adim)
            )
            score = torch.exp(
                self.temperature * (elite_value - elite_value.max(1, keepdim=True).values)
            )
            score = score / score.sum(1, keepdim=True)
            w = score[:, :, None, None]
            mean = (w * elite_actions).sum(1)
            std = ((w * (elite_actions - mean.unsqueeze(1)).pow(2)).sum(1)).sqrt()
            std = std.clamp(self.min_std, self.max_std)
        pick = torch.multinomial(score, 1).squeeze(1)
        action = elite_actions[torch.arange(batch, device=z.device), pick, 0]
        if exploration_type() is not ExplorationType.DETERMINISTIC:
            action = action + std[:, 0] * torch.randn_like(action)
        return action.clamp(-1, 1), mean

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Plans for every item of ``tensordict`` and writes the action and the fitted mean."""
        observation = tensordict.get(self.observation_key, None)
        if observation is None:
            raise KeyError(
                f"TdMpc2Planner: the input has no observation entry {self.observation_key!r}"
            )
        batch_shape = tensordict.batch_size
        flat_obs = observation.reshape(-1, observation.shape[-1])
        n = flat_obs.shape[0]
        prev = tensordict.get(self.prev_mean_key, None)
        shifted = None
        if prev is not None:
            prev = prev.reshape(n, self.horizon, self.action_dim)
            shifted = torch.cat([prev[:, 1:], torch.zeros_like(prev[:, :1])], 1)
            is_init = tensordict.get(self.is_init_key, None)
            if is_init is not None:
                keep = ~is_init.reshape(n, -1).any(-1)
                shifted = shifted * keep[:, None, None].to(shifted.dtype)
        action, mean = self.plan(flat_obs, shifted)
        tensordict.set(self.action_key, action.reshape(*batch_shape, self.action_dim))
        tensordict.set(self.out_keys[1], mean.reshape(*batch_shape, self.horizon, self.action_dim))
        return tensordict
