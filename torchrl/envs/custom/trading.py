"""A single-asset trading env over a simulated price path, batched and stateless, in pure torch.

Prices follow a geometric Brownian motion sampled one trading day at a time (``dt = 1/252``).
The agent holds at most one unit: it can hold, buy (open a position at the current price) or
sell (close it). Everything a step needs (the price window, the position, its entry price, the
step counter and the market ``params``) travels in the TensorDict, so one env serves inputs of
any batch size and each sub-env may carry its own drift, volatility and costs.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, REWARD, STEP_COUNT, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike, NestedKey, ShapeLike
from torchrl.data.specs import Binary, Categorical, Composite, TensorSpec, Unbounded
from torchrl.envs.common import EnvBase

__all__ = ["FinancialRegimeEnv"]

_PARAMS = "params"
_PRICES = "price_history"
_HOLDINGS = "current_holdings"
_ENTRY = "entry_price"
# One step is one trading day.
_DT = 1.0 / 252.0
# Action codes.
_HOLD, _BUY, _SELL = 0, 1, 2
# Weight of the per-step change of an open position's value in the reward (a shaping term).
_HOLDING_SHAPING = 0.1
_FLOAT_PARAMS = ("initial_price", "volatility", "drift", "transaction_cost")
_INT_PARAMS = ("window_size", "max_steps")


class FinancialRegimeEnv(EnvBase):
    """Trade one simulated asset: hold, buy or sell, from a window of past prices.

    Observations: ``"price_history"`` (float32, ``[*B, window_size]``, the newest price last),
    ``"current_holdings"`` (bool, ``[*B, 1]``: a position is open), ``"entry_price"``
    (float32, ``[*B, 1]``, ``0`` when flat), ``"step_count"`` (int64, ``[*B]``) and
    ``"params"`` (see :meth:`gen_params`); they are also the state the next step reads. The
    action (int64, ``[*B, 1]``) is ``0`` hold, ``1`` buy, ``2`` sell; buying while holding or
    selling while flat does nothing. Each step draws the next price
    ``p' = p * exp(drift * dt + volatility * sqrt(dt) * N(0, 1))``. Reward, with ``p`` the
    price before the move and ``c`` the ``transaction_cost``: ``-c * p`` for a buy,
    ``(p - entry) / entry - c * p`` for a sell, plus ``0.1 * (p' - p) / p`` while a position
    is open after the action. Episodes never terminate; they are truncated after
    ``max_steps`` steps. A reset draws a fresh window of ``window_size`` prices ending near
    ``initial_price``'s random walk.

    Args:
        td_params: market parameters as made by :meth:`gen_params` (defaults: its defaults
            with ``window_size``).
        seed: the seed of the env's random generator (default ``0``).
        device: where the tensors live.
        window_size: the length of the price window (default ``50``); ignored when
            ``td_params`` is given.
        batch_size: the number of sub-envs, e.g. ``[16]`` (default ``[]``). Inputs of other
            batch sizes are accepted too, since the env is stateless; without a ``"params"``
            entry they are reset with the first sub-env's parameters.

    Examples:
        >>> from torchrl.envs import FinancialRegimeEnv
        >>> env = FinancialRegimeEnv(batch_size=[4], seed=0)
        >>> rollout = env.rollout(10)
        >>> rollout["next", "price_history"].shape
        torch.Size([4, 10, 50])
        >>> rollout["action"].shape
        torch.Size([4, 10, 1])
    """

    DEFAULT_WINDOW_SIZE = 50
    DEFAULT_INITIAL_PRICE = 100.0
    DEFAULT_MAX_STEPS = 252

    def __init__(
        self,
        td_params: TensorDictBase | None = None,
        seed: int | None = None,
        device: DeviceLike = None,
        window_size: int | None = None,
        *,
        batch_size: ShapeLike | None = None,
    ) -> None:
        super().__init__(device=device, batch_size=batch_size)
        self.batch_locked = False
        if td_params is None:
            td_params = self.gen_params(
                window_size=window_size, batch_size=self.batch_size, device=self.device
            )
        else:
            self._check_params(td_params)
            if td_params.batch_size != self.batch_size:
                td_params = td_params.expand(self.batch_size).clone()
        self.td_params = td_params
        self.window_size = int(td_params[_PARAMS, "window_size"].reshape(-1)[0])
        self._make_specs()
        self.set_seed(0 if seed is None else seed)

    @staticmethod
    def gen_params(
        window_size: int | None = None,
        initial_price: float = 100.0,
        volatility: float = 0.2,
        drift: float = 0.05,
        transaction_cost: float = 0.001,
        max_steps: int = 252,
        batch_size: ShapeLike | None = None,
        device: DeviceLike = None,
    ) -> TensorDict:
        """Makes the market parameters, one set per sub-env.

        Args:
            window_size: the length of the price window (default ``50``).
            initial_price: the price the reset's random walk starts from.
            volatility: the yearly volatility of the log-price.
            drift: the yearly drift of the log-price.
            transaction_cost: the cost of a trade, as a fraction of the price.
            max_steps: the number of steps after which an episode is truncated.
            batch_size: the batch shape ``[*B]`` of the parameters (default ``[]``).
            device: where they live.

        Returns:
            A TensorDict with a ``"params"`` entry holding ``window_size`` and ``max_steps``
            (int64) and ``initial_price``, ``volatility``, ``drift`` and ``transaction_cost``
            (float32), each of shape ``[*B]``.

        Examples:
            >>> from torchrl.envs import FinancialRegimeEnv
            >>> params = FinancialRegimeEnv.gen_params(volatility=0.3, batch_size=[2])
            >>> params["params", "volatility"]
            tensor([0.3000, 0.3000])
        """
        if window_size is None:
            window_size = FinancialRegimeEnv.DEFAULT_WINDOW_SIZE
        if int(window_size) < 1:
            raise ValueError(f"FinancialRegimeEnv: window_size must be >= 1, got {window_size}")
        if int(max_steps) < 1:
            raise ValueError(f"FinancialRegimeEnv: max_steps must be >= 1, got {max_steps}")
        if volatility < 0:
            raise ValueError(f"FinancialRegimeEnv: volatility must be >= 0, got {volatility}")
        if initial_price <= 0:
            raise ValueError(f"FinancialRegimeEnv: initial_price must be > 0, got {initial_price}")
        if batch_size is None:
            batch = torch.Size([])
        elif isinstance(batch_size, int):
            batch = torch.Size([batch_size])
        else:
            batch = torch.Size(batch_size)
        floats = {
            "initial_price": initial_price,
            "volatility": volatility,
            "drift": drift,
            "transaction_cost": transaction_cost,
        }
        ints = {"window_size": int(window_size), "max_steps": int(max_steps)}
        entries: dict[str, torch.Tensor] = {
            k: torch.full(batch, float(v), dtype=torch.float32, device=device)
            for k, v in floats.items()
        }
        entries.update(
            {k: torch.full(batch, v, dtype=torch.int64, device=device) for k, v in ints.items()}
        )
        params = TensorDict(entries, batch_size=batch, device=device)
        return TensorDict({_PARAMS: params}, batch_size=batch, device=device)

    @staticmethod
    def _check_params(td_params: TensorDictBase) -> None:
        params = td_params.get(_PARAMS, None)
        if params is None:
            raise KeyError(
                "FinancialRegimeEnv: td_params has no 'params' entry; build it with "
                "FinancialRegimeEnv.gen_params()"
            )
        missing = [k for k in (*_FLOAT_PARAMS, *_INT_PARAMS) if k not in params.keys()]
        if missing:
            raise KeyError(f"FinancialRegimeEnv: td_params['params'] lacks {missing}")
        window = params["window_size"]
        if window.numel() and not bool((window == window.reshape(-1)[0]).all()):
            raise ValueError(
                "FinancialRegimeEnv: every sub-env must share one window_size, got "
                f"{window.unique().tolist()}"
            )

    def _make_specs(self) -> None:
        batch = self.batch_size
        window = self.window_size
        params_spec = Composite(
            {
                **{k: Unbounded(shape=batch, dtype=torch.float32) for k in _FLOAT_PARAMS},
                **{k: Unbounded(shape=batch, dtype=torch.int64) for k in _INT_PARAMS},
            },
            shape=batch,
        )
        state: dict[NestedKey, TensorSpec] = {
            _PRICES: Unbounded(shape=(*batch, window), dtype=torch.float32),
            _HOLDINGS: Binary(n=1, shape=(*batch, 1), dtype=torch.bool),
            _ENTRY: Unbounded(shape=(*batch, 1), dtype=torch.float32),
            STEP_COUNT: Unbounded(shape=batch, dtype=torch.int64),
        }
        # Everything observed is also read back by the next step (stateless env).
        self.observation_spec = Composite(
            {**state, _PARAMS: params_spec}, shape=batch, device=self.device
        )
        self.state_spec = self.observation_spec.clone()
        self.action_spec = Categorical(n=3, shape=(*batch, 1), dtype=torch.int64)
        self.reward_spec = Unbounded(shape=(*batch, 1), dtype=torch.float32)

    def _set_seed(self, seed: int | None) -> None:
        device = self.device if self.device is not None else torch.device("cpu")
        self.rng = torch.Generator(device=device)
        if seed is None:
            self.rng.seed()
        else:
            self.rng.manual_seed(seed)

    def _randn(self, shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
        return torch.randn(shape, generator=self.rng, device=self.rng.device)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        params = None
        batch = self.batch_size
        if tensordict is not None:
            batch = tensordict.batch_size
            params = tensordict.get(_PARAMS, None)
        if params is None:
            params = self.td_params[_PARAMS]
            if params.batch_size != batch:
                # An input of another batch size, without its own params: the first
                # sub-env's params serve every one of its entries.
                params = params.reshape(-1)[0].expand(batch).clone()
        device = self.device
        vol = params["volatility"].to(torch.float32)
        start = params["initial_price"].to(torch.float32)
        # A random walk of log-returns (no drift) from the initial price fills the window.
        shocks = self._randn((*batch, self.window_size)).to(device)
        log_path = torch.cumsum(shocks * vol.unsqueeze(-1) * math.sqrt(_DT), dim=-1)
        prices = start.unsqueeze(-1) * log_path.exp()
        return TensorDict(
            {
                _PRICES: prices,
                _HOLDINGS: torch.zeros((*batch, 1), dtype=torch.bool, device=device),
                _ENTRY: torch.zeros((*batch, 1), dtype=torch.float32, device=device),
                STEP_COUNT: torch.zeros(batch, dtype=torch.int64, device=device),
                _PARAMS: params.copy(),
            },
            batch_size=batch,
            device=device,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        prices = tensordict[_PRICES]
        holding = tensordict[_HOLDINGS].squeeze(-1)
        entry = tensordict[_ENTRY].squeeze(-1)
        step_count = tensordict.get(STEP_COUNT, None)
        if step_count is None:
            step_count = torch.zeros(tensordict.batch_size, dtype=torch.int64, device=prices.device)
        params = tensordict[_PARAMS]
        action = tensordict[ACTION].reshape(*tensordict.batch_size, -1)[..., 0]
        if bool(((action < _HOLD) | (action > _SELL)).any()):
            raise ValueError(
                "FinancialRegimeEnv: 'action' must be 0 (hold), 1 (buy) or 2 (sell), got "
                f"{action.unique().tolist()}"
            )
        price = prices[..., -1]
        cost = params["transaction_cost"].to(price.dtype) * price

        buys = (action == _BUY) & ~holding
        sells = (action == _SELL) & holding
        # Clamp only guards against a user-made entry price of 0 on an open position.
        safe_entry = entry.clamp_min(1e-6)
        reward = torch.where(buys, -cost, torch.zeros_like(price))
        reward = torch.where(sells, (price - safe_entry) / safe_entry - cost, reward)
        new_holding = (holding | buys) & ~sells
        new_entry = torch.where(buys, price, torch.where(sells, torch.zeros_like(entry), entry))

        drift = params["drift"].to(price.dtype)
        vol = params["volatility"].to(price.dtype)
        shock = self._randn(price.shape).to(price.device)
        next_price = price * torch.exp(drift * _DT + vol * math.sqrt(_DT) * shock)
        reward = reward + torch.where(
            new_holding, _HOLDING_SHAPING * (next_price - price) / price, torch.zeros_like(price)
        )

        new_count = step_count + 1
        truncated = (new_count >= params["max_steps"]).unsqueeze(-1)
        return TensorDict(
            {
                _PRICES: torch.cat([prices[..., 1:], next_price.unsqueeze(-1)], dim=-1),
                _HOLDINGS: new_holding.unsqueeze(-1),
                _ENTRY: new_entry.unsqueeze(-1),
                STEP_COUNT: new_count,
                # A new container (same tensors): entries added to one step's params must not
                # appear in another's.
                _PARAMS: params.copy(),
                REWARD: reward.unsqueeze(-1).to(torch.float32),
                DONE: truncated.clone(),
                TERMINATED: torch.zeros_like(truncated),
                TRUNCATED: truncated,
            },
            batch_size=tensordict.batch_size,
            device=self.device,
        )
