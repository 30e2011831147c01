"""Random network distillation: ``RNDTransform`` writes an intrinsic reward, the error of a
trained predictor against a fixed random network; ``RunningMeanStd`` keeps the running
statistics it normalizes observations and rewards with; ``rnd_prediction_error`` is the error
itself, shared by the transform and by :class:`~torchrl.objectives.RNDLoss` (which trains the
predictor on it).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._keys import OBSERVATION
from torchrl._types import NestedKey
from torchrl.data.specs import Composite, Unbounded
from torchrl.envs.transforms._utils import get, missing_key_error, set_
from torchrl.envs.transforms.base import Transform

__all__ = ["RNDTransform", "RunningMeanStd", "rnd_prediction_error"]


class RunningMeanStd(nn.Module):
    """Running mean and variance of a stream of batches (parallel Welford / Chan et al.).

    The statistics are buffers: they are in ``state_dict()`` and follow ``.to(device)``.

    Args:
        shape: the shape of one sample (``()`` for scalars).
        epsilon: the initial count (avoids dividing by zero before the first update).

    Examples:
        >>> import torch
        >>> from torchrl.envs.transforms import RunningMeanStd
        >>> rms = RunningMeanStd(shape=(2,))
        >>> rms.update(torch.tensor([[0.0, 2.0], [2.0, 4.0]]))
        >>> rms.mean.round(decimals=2), rms.var.round(decimals=2)
        (tensor([1., 3.]), tensor([1., 1.]))
        >>> rms.normalize(torch.tensor([1.0, 3.0])).abs().max() < 1e-3
        tensor(True)
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: Sequence[int] | torch.Size = (), epsilon: float = 1e-4) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(tuple(shape)))
        self.register_buffer("var", torch.ones(tuple(shape)))
        self.register_buffer("count", torch.tensor(float(epsilon)))

    def update(self, x: torch.Tensor) -> None:
        """Adds a batch: every leading dim of ``x`` is a batch dim.

        Args:
            x: samples ``[*batch, *shape]``.

        Raises:
            ValueError: when ``x`` does not end with ``shape``.
        """
        shape = self.mean.shape
        if x.ndim < len(shape) or tuple(x.shape[x.ndim - len(shape) :]) != tuple(shape):
            raise ValueError(
                f"RunningMeanStd: samples of shape {tuple(x.shape)} do not end with the tracked "
                f"shape {tuple(shape)}"
            )
        flat = x.detach().reshape(-1, *shape).to(self.mean.dtype)
        n = flat.shape[0]
        if n == 0:
            return
        batch_mean = flat.mean(0)
        batch_var = flat.var(0, unbiased=False)
        total = self.count + n
        delta = batch_mean - self.mean
        # Chan et al.: merge the two sets' means and sums of squared deviations.
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * self.count * n / total
        self.mean.add_(delta * n / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    @property
    def std(self) -> torch.Tensor:
        """The running standard deviation."""
        return self.var.sqrt()

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - mean) / sqrt(var + 1e-8)``.

        Args:
            x: samples ending with ``shape``.

        Returns:
            The normalized samples.
        """
        return (x - self.mean) / (self.var + 1e-8).sqrt()


def rnd_prediction_error(
    predictor_network: nn.Module,
    target_network: nn.Module,
    observation: torch.Tensor,
    batch_ndim: int = 1,
    obs_rms: RunningMeanStd | None = None,
    obs_clip: float = 5.0,
) -> torch.Tensor:
    """The per-sample squared error of an RND predictor against its fixed random target.

    The observation is normalized with ``obs_rms`` (read, never updated) and clipped to
    ``[-obs_clip, obs_clip]`` when ``obs_rms`` is given; the target runs without gradients, the
    predictor with them, and the squared difference is averaged over the feature dims.

    Args:
        predictor_network: the trained network.
        target_network: the fixed random network (same output shape).
        observation: ``[*batch, *feature]`` (cast to the default float dtype when integral).
        batch_ndim: how many leading dims of ``observation`` are batch dims.
        obs_rms: running observation statistics (``None``: no normalization).
        obs_clip: the clip of normalized observations.

    Returns:
        The error, shaped ``[*batch]``.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Linear(3, 4)
        >>> rnd_prediction_error(net, net, torch.randn(5, 3)).abs().max().item()
        0.0
    """
    obs = observation
    if not obs.is_floating_point():
        obs = obs.to(torch.get_default_dtype())
    if obs_rms is not None:
        obs = obs_rms.normalize(obs).clamp(-obs_clip, obs_clip)
    with torch.no_grad():
        target = target_network(obs)
    pred = predictor_network(obs)
    return (pred - target).pow(2).reshape(*obs.shape[:batch_ndim], -1).mean(-1)


class RNDTransform(Transform):
    """Random network distillation: an intrinsic reward that is high on unfamiliar states.

    At each step the observation (optionally normalized with running statistics and clipped to
    ``[-obs_clip, obs_clip]``) goes through the frozen ``target_network`` and the
    ``predictor_network``; the mean squared difference of their outputs is written at
    ``out_keys[0]`` (shape ``[*B, 1]``), optionally divided by its running standard deviation
    and clipped to ``[0, reward_clip]``. The networks run under ``torch.no_grad()``; train the
    predictor on collected observations (e.g. with :meth:`prediction_error`) so that familiar
    states earn less. Statistics are updated in training mode only (``eval()`` freezes them).
    Burda et al., "Exploration by Random Network Distillation" (2018).

    Args:
        target_network: the fixed random network (its parameters are frozen here).
        predictor_network: the trained network, with the same output shape.
        in_keys: the observation (default ``["observation"]``; one key).
        out_keys: the intrinsic reward (default ``["intrinsic_reward"]``).
        normalize_obs: normalize observations with running statistics.
        normalize_reward: divide the reward by its running standard deviation.
        obs_clip: the clip of normalized observations.
        reward_clip: the clip of normalized rewards.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import RNDTransform, TransformedEnv
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> rnd = RNDTransform(nn.Linear(3, 8), nn.Linear(3, 8))
        >>> env = TransformedEnv(PendulumEnv(seed=0), rnd)
        >>> r = env.rollout(5)
        >>> r["next", "intrinsic_reward"].shape, bool((r["next", "intrinsic_reward"] >= 0).all())
        (torch.Size([5, 1]), True)
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        target_network: nn.Module,
        predictor_network: nn.Module,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        normalize_obs: bool = True,
        normalize_reward: bool = True,
        obs_clip: float = 5.0,
        reward_clip: float = 5.0,
    ) -> None:
        if not isinstance(target_network, nn.Module) or not isinstance(
            predictor_network, nn.Module
        ):
            raise TypeError("RNDTransform: target_network and predictor_network must be Modules")
        super().__init__(
            [OBSERVATION] if in_keys is None else in_keys,
            ["intrinsic_reward"] if out_keys is None else out_keys,
        )
        if len(self.in_keys) != 1:
            raise ValueError(f"RNDTransform reads one observation key, got {self.in_keys}")
        if obs_clip <= 0 or reward_clip <= 0:
            raise ValueError("RNDTransform: obs_clip and reward_clip must be positive")
        for p in target_network.parameters():
            p.requires_grad_(False)
        self.target_network = target_network
        self.predictor_network = predictor_network
        self.normalize_obs = bool(normalize_obs)
        self.normalize_reward = bool(normalize_reward)
        self.obs_clip = float(obs_clip)
        self.reward_clip = float(reward_clip)
        # Made at the first observation (its feature shape is not known before).
        self.obs_rms: RunningMeanStd | None = None
        self.reward_rms = RunningMeanStd(shape=())

    def _obs_rms(self, obs: torch.Tensor, batch_ndim: int, update: bool) -> RunningMeanStd | None:
        """The observation statistics (made at the first observation), updated on request."""
        if not self.normalize_obs:
            return None
        if self.obs_rms is None:
            self.obs_rms = RunningMeanStd(shape=obs.shape[batch_ndim:]).to(obs.device)
        if update:
            floating = obs if obs.is_floating_point() else obs.to(torch.get_default_dtype())
            self.obs_rms.update(floating)
        return self.obs_rms

    def prediction_error(self, observation: torch.Tensor, batch_ndim: int = 1) -> torch.Tensor:
        """The per-sample squared error of the predictor (with gradients, for training it).

        Args:
            observation: observations ``[*batch, *feature]``.
            batch_ndim: how many leading dims are batch dims.

        Returns:
            The error, shaped ``[*batch]``.
        """
        return rnd_prediction_error(
            self.predictor_network,
            self.target_network,
            observation,
            batch_ndim,
            self._obs_rms(observation, batch_ndim, update=False),
            self.obs_clip,
        )

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        in_key, out_key = self._pairs[0]
        obs = get(next_tensordict, in_key)
        if obs is None:
            raise missing_key_error(self, in_key, next_tensordict)
        batch_ndim = next_tensordict.batch_dims
        update = self.training
        with torch.no_grad():
            rms = self._obs_rms(obs, batch_ndim, update)
            err = rnd_prediction_error(
                self.predictor_network, self.target_network, obs, batch_ndim, rms, self.obs_clip
            )
            reward = err.unsqueeze(-1)
            if self.normalize_reward:
                if update:
                    self.reward_rms.update(reward)
                reward = (reward / (self.reward_rms.var + 1e-8).sqrt()).clamp(0, self.reward_clip)
        set_(next_tensordict, out_key, reward)
        return next_tensordict

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        out_key = self._pairs[0][1]
        batch = reward_spec.shape
        reward_spec[out_key] = Unbounded(
            shape=(*batch, 1), device=reward_spec.device, dtype=torch.get_default_dtype()
        )
        return reward_spec

    def extra_repr(self) -> str:
        return (
            f"normalize_obs={self.normalize_obs}, normalize_reward={self.normalize_reward}, "
            f"{super().extra_repr()}"
        )
