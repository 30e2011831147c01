"""A Gaussian-process dynamics model with moment-matching propagation (PILCO's world model)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torch import Tensor, nn

from torchrl.modules._gaussian_moments import se_expansion_moments, se_kernel

__all__ = ["GPWorldModel"]

_DEFAULT_IN_KEYS: list[NestedKey] = [
    ("action", "mean"),
    ("action", "var"),
    ("action", "cross_covariance"),
    ("observation", "mean"),
    ("observation", "var"),
]
_DEFAULT_OUT_KEYS: list[NestedKey] = [
    ("next", "observation", "mean"),
    ("next", "observation", "var"),
]


class GPWorldModel(nn.Module):
    """Gaussian-process world model with moment-matching uncertainty propagation (PILCO).

    One GP per state dimension ``a`` (ARD squared-exponential kernel, Gaussian noise) predicts the
    change ``x_{t+1, a} - x_{t, a}`` from ``[x_t, u_t]``; :meth:`fit` sets its hyper-parameters by
    maximising the log marginal likelihood. ``forward`` reads a Gaussian belief over the state, the
    action distribution and their cross-covariance (``in_keys``, in that order: action mean,
    action covariance, state-action cross-covariance, observation mean, observation covariance)
    and writes the next-state mean and covariance (``out_keys``). When both covariances are zero
    the GP's posterior mean and variance are used as they are (a diagonal covariance); otherwise
    the belief is propagated by exact moment matching (Deisenroth & Rasmussen, 2011, Sec. 2.2).
    Computations run in float64; results come back in the input's dtype.

    Args:
        obs_dim: ``D``, the size of the observation (state).
        action_dim: ``F``, the size of the action.
        in_keys: five keys (see above). Defaults to ``("action", "mean")``, ``("action", "var")``,
            ``("action", "cross_covariance")``, ``("observation", "mean")``,
            ``("observation", "var")``.
        out_keys: two keys for the next-state mean ``[*B, D]`` and covariance ``[*B, D, D]``.
            Defaults to ``("next", "observation", "mean")``, ``("next", "observation", "var")``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> _ = torch.manual_seed(0)
        >>> obs, act = torch.randn(30, 2), torch.randn(30, 1)
        >>> data = TensorDict({"observation": obs, "action": act,
        ...                    ("next", "observation"): obs + 0.1 * act}, batch_size=[30])
        >>> model = GPWorldModel(obs_dim=2, action_dim=1)
        >>> model.fit(data)
        >>> belief = TensorDict({
        ...     ("observation", "mean"): torch.zeros(4, 2), ("observation", "var"): 0.01 * torch.eye(2).expand(4, 2, 2),
        ...     ("action", "mean"): torch.ones(4, 1), ("action", "var"): 0.01 * torch.eye(1).expand(4, 1, 1),
        ...     ("action", "cross_covariance"): torch.zeros(4, 2, 1)}, batch_size=[4])
        >>> out = model(belief)
        >>> out["next", "observation", "mean"].shape, out["next", "observation", "var"].shape
        (torch.Size([4, 2]), torch.Size([4, 2, 2]))
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__()
        if obs_dim < 1 or action_dim < 0:
            raise ValueError(
                f"obs_dim must be >= 1 and action_dim >= 0, got {obs_dim} and {action_dim}"
            )
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.in_keys = list(_DEFAULT_IN_KEYS if in_keys is None else in_keys)
        self.out_keys = list(_DEFAULT_OUT_KEYS if out_keys is None else out_keys)
        if len(self.in_keys) != 5:
            raise ValueError(
                "in_keys must hold 5 keys (action mean, action covariance, state-action "
                f"cross-covariance, observation mean, observation covariance), got {self.in_keys}"
            )
        if len(self.out_keys) != 2:
            raise ValueError(
                f"out_keys must hold 2 keys (next-state mean, covariance), got {self.out_keys}"
            )
        dim = obs_dim + action_dim
        f64 = torch.float64
        self.log_lengthscales = nn.Parameter(torch.zeros(obs_dim, dim, dtype=f64))
        self.log_signal_var = nn.Parameter(torch.zeros(obs_dim, dtype=f64))
        self.log_noise_var = nn.Parameter(torch.full((obs_dim,), -4.0, dtype=f64))
        self.register_buffer("train_inputs", torch.zeros(0, dim, dtype=f64))
        self.register_buffer("beta", torch.zeros(obs_dim, 0, dtype=f64))
        self.register_buffer("kernel_inverse", torch.zeros(obs_dim, 0, 0, dtype=f64))

    # ---- hyper-parameters -------------------------------------------------------------------
    @property
    def lengthscales_sq(self) -> Tensor:
        """Squared ARD lengthscales, ``[D, D + F]``."""
        return torch.exp(2.0 * self.log_lengthscales)

    @property
    def signal_var(self) -> Tensor:
        """Signal variances ``alpha_a^2``, ``[D]``."""
        return torch.exp(self.log_signal_var)

    @property
    def noise_var(self) -> Tensor:
        """Noise variances ``sigma_a^2``, ``[D]`` (floored at 1e-8 for a stable Cholesky)."""
        return torch.exp(self.log_noise_var) + 1e-8

    @property
    def is_fitted(self) -> bool:
        """Whether :meth:`fit` has been called."""
        return self.train_inputs.shape[0] > 0

    def _gram(self, x: Tensor) -> Tensor:
        k = se_kernel(x, x, self.lengthscales_sq, self.signal_var)
        return k + torch.diag_embed(self.noise_var.unsqueeze(-1).expand(-1, x.shape[0]))

    def _neg_log_marginal_likelihood(self, x: Tensor, y: Tensor) -> Tensor:
        chol = torch.linalg.cholesky(self._gram(x))  # [D, n, n]
        alpha = torch.cholesky_solve(y.mT.unsqueeze(-1), chol).squeeze(-1)  # [D, n]
        fit = 0.5 * (y.mT * alpha).sum(-1)
        logdet = torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
        return (fit + logdet).sum() / x.shape[0]

    def fit(
        self,
        dataset: TensorDictBase,
        *,
        observation_key: NestedKey = "observation",
        action_key: NestedKey = "action",
        next_observation_key: NestedKey = ("next", "observation"),
        steps: int = 100,
        reset_hyperparameters: bool = True,
    ) -> None:
        """Fits the hyper-parameters to transitions by maximising the marginal likelihood.

        All batch dimensions of ``dataset`` are flattened into one set of ``n`` transitions. The
        optimiser is L-BFGS (``steps`` iterations). With ``reset_hyperparameters`` the lengthscales
        start at the inputs' standard deviations, the signal variance at the targets' variance and
        the noise at 1% of it; otherwise the previous fit is the starting point.

        Args:
            dataset: transitions with ``observation_key`` ``[..., D]``, ``action_key``
                ``[..., F]`` and ``next_observation_key`` ``[..., D]``.
            observation_key: key of ``x_t``.
            action_key: key of ``u_t``.
            next_observation_key: key of ``x_{t+1}``.
            steps: L-BFGS iterations.
            reset_hyperparameters: restart the hyper-parameters from data-driven values.
        """
        for key, size in (
            (observation_key, self.obs_dim),
            (action_key, self.action_dim),
            (next_observation_key, self.obs_dim),
        ):
            if key not in dataset.keys(include_nested=True):
                raise KeyError(f"GPWorldModel.fit: dataset has no entry {key!r}")
            if dataset.get(key).shape[-1] != size:
                raise ValueError(
                    f"GPWorldModel.fit: {key!r} must end with a dimension of {size}, "
                    f"got shape {tuple(dataset.get(key).shape)}"
                )
        f64 = torch.float64
        obs = dataset.get(observation_key).reshape(-1, self.obs_dim).to(f64)
        act = dataset.get(action_key).reshape(-1, self.action_dim).to(f64)
        nxt = dataset.get(next_observation_key).reshape(-1, self.obs_dim).to(f64)
        x = torch.cat([obs, act], -1).detach()
        y = (nxt - obs).detach()
        if x.shape[0] < 2:
            raise ValueError(f"GPWorldModel.fit needs at least 2 transitions, got {x.shape[0]}")
        with torch.no_grad():
            if reset_hyperparameters:
                std = x.std(0).clamp_min(1e-3)
                var = y.var(0).clamp_min(1e-6)
                self.log_lengthscales.copy_(torch.log(std).expand_as(self.log_lengthscales))
                self.log_signal_var.copy_(torch.log(var))
                self.log_noise_var.copy_(torch.log(0.01 * var))
        params = [self.log_lengthscales, self.log_signal_var, self.log_noise_var]
        optim = torch.optim.LBFGS(params, max_iter=steps, line_search_fn="strong_wolfe")

        def closure() -> Tensor:
            optim.zero_grad()
            loss = self._neg_log_marginal_likelihood(x, y)
            loss.backward()
            return loss

        with torch.enable_grad():
            optim.step(closure)
        with torch.no_grad():
            # Keep the noise from collapsing: a signal-to-noise ratio over ~1e4 makes K singular.
            floor = self.log_signal_var - 2 * torch.log(torch.tensor(1e4, dtype=f64))
            self.log_noise_var.copy_(torch.maximum(self.log_noise_var, floor))
            kinv = torch.cholesky_inverse(torch.linalg.cholesky(self._gram(x)))
            self.train_inputs = x
            self.kernel_inverse = kinv
            self.beta = (kinv @ y.mT.unsqueeze(-1)).squeeze(-1)

    def _check_fitted(self) -> None:
        if not self.is_fitted:
            raise RuntimeError("GPWorldModel has no data: call fit(dataset) first")

    # ---- prediction -------------------------------------------------------------------------
    def predict(self, observation: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """Posterior mean and variance of the next state at known ``(observation, action)``.

        Args:
            observation: ``[*B, D]``.
            action: ``[*B, F]``.

        Returns:
            ``(mean, var)``, both ``[*B, D]``: ``observation`` plus the GPs' mean change, and the
            GPs' predictive variance (noise included).
        """
        self._check_fitted()
        dtype = observation.dtype
        x = torch.cat([observation, action], -1).to(torch.float64)
        batch = x.shape[:-1]
        x = x.reshape(-1, x.shape[-1])
        k = se_kernel(x, self.train_inputs, self.lengthscales_sq, self.signal_var)  # [D, m, n]
        mean = (k * self.beta.unsqueeze(-2)).sum(-1).mT  # [m, D]
        reduce = ((k @ self.kernel_inverse) * k).sum(-1).mT
        var = (self.signal_var + self.noise_var - reduce).clamp_min(1e-12)
        mean = (x[:, : self.obs_dim] + mean).reshape(*batch, self.obs_dim)
        return mean.to(dtype), var.reshape(*batch, self.obs_dim).to(dtype)

    def propagate(
        self,
        observation_mean: Tensor,
        observation_cov: Tensor,
        action_mean: Tensor,
        action_cov: Tensor,
        cross_cov: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """Moment-matched next-state Gaussian for a Gaussian state-action belief.

        Args:
            observation_mean: ``[*B, D]``.
            observation_cov: ``[*B, D, D]``.
            action_mean: ``[*B, F]``.
            action_cov: ``[*B, F, F]``.
            cross_cov: ``Cov[x, u]``, ``[*B, D, F]``.

        Returns:
            ``(mean, cov)``: ``[*B, D]`` and ``[*B, D, D]``; the covariance includes ``Cov[x_t]``,
            the change's covariance and both cross terms ``Cov[x_t, delta]``.
        """
        self._check_fitted()
        dtype = observation_mean.dtype
        f64 = torch.float64
        mu = torch.cat([observation_mean, action_mean], -1).to(f64)
        top = torch.cat([observation_cov, cross_cov], -1)
        bottom = torch.cat([cross_cov.mT, action_cov], -1)
        sigma = torch.cat([top, bottom], -2).to(f64)
        m, s, c = se_expansion_moments(
            self.train_inputs,
            self.beta,
            self.lengthscales_sq,
            self.signal_var,
            mu,
            sigma,
            self.kernel_inverse,
        )
        s = s + torch.diag_embed(self.noise_var.expand_as(m))
        c_x = c[..., : self.obs_dim, :]  # Cov[x_t, delta]
        mean = observation_mean.to(f64) + m
        cov = observation_cov.to(f64) + s + c_x + c_x.mT
        return mean.to(dtype), (0.5 * (cov + cov.mT)).to(dtype)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the next-state mean and covariance (``out_keys``) of the belief in ``in_keys``."""
        values = []
        for key in self.in_keys:
            value = tensordict.get(key, None)
            if value is None:
                raise KeyError(f"GPWorldModel: the input has no entry {key!r} (in_keys)")
            values.append(value)
        act_mean, act_cov, cross, obs_mean, obs_cov = values
        d, f = self.obs_dim, self.action_dim
        expected = {0: (f,), 1: (f, f), 2: (d, f), 3: (d,), 4: (d, d)}
        for i, shape in expected.items():
            if tuple(values[i].shape[-len(shape) :]) != shape:
                raise ValueError(
                    f"GPWorldModel: {self.in_keys[i]!r} must end with {shape}, "
                    f"got {tuple(values[i].shape)}"
                )
        if not obs_cov.any() and not act_cov.any():
            mean, var = self.predict(obs_mean, act_mean)
            cov = torch.diag_embed(var)
        else:
            mean, cov = self.propagate(obs_mean, obs_cov, act_mean, act_cov, cross)
        tensordict.set(self.out_keys[0], mean)
        tensordict.set(self.out_keys[1], cov)
        return tensordict
