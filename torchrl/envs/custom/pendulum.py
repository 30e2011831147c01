"""A stateless, batched Pendulum in pure torch: the reference example of a custom env.

Read it top to bottom to learn how to write an env: set the specs in ``__init__``, write
``_reset``, ``_step`` and ``_set_seed``, and let :class:`~torchrl.envs.EnvBase` do the rest
(done flags, ``"next"``, partial resets, rollouts).

The physics are gymnasium's ``Pendulum-v1``. The env keeps no state between calls: the angle
``th``, the angular speed ``thdot`` and the physical ``params`` travel in the TensorDict, so
``_step`` is a pure (and differentiable) function of its input and the env accepts inputs of any
batch size (``batch_locked = False``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, OBSERVATION, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike, ShapeLike
from torchrl.data.specs import Bounded, Composite, Unbounded
from torchrl.envs.common import EnvBase

__all__ = ["PendulumEnv"]

_PARAMS = "params"
_PARAM_DEFAULTS = {
    "max_speed": 8.0,
    "max_torque": 2.0,
    "dt": 0.05,
    "g": 10.0,
    "m": 1.0,
    "l": 1.0,
}


def _angle_normalize(x: torch.Tensor) -> torch.Tensor:
    return ((x + math.pi) % (2 * math.pi)) - math.pi


class PendulumEnv(EnvBase):
    """The classic pendulum swing-up, batched and stateless, in pure torch.

    Observation ``"observation"`` = ``[cos th, sin th, thdot]`` (shape ``[*B, 3]``), action a
    torque in ``[-2, 2]`` (``[*B, 1]``), reward ``-(th^2 + 0.1 thdot^2 + 0.001 u^2)`` with ``th``
    normalized to ``[-pi, pi)``. The state entries ``"th"``, ``"thdot"`` (``[*B]``) and the
    ``"params"`` (``g``, ``m``, ``l``, ``dt``, ``max_speed``, ``max_torque``, each ``[*B]``) are
    both observations and inputs of the next step. The pendulum never terminates: add a step
    limit (a ``StepCounter`` transform) to truncate episodes.

    Args:
        batch_size: the number of pendulums, e.g. ``[16]`` (default ``[]``).
        device: where the tensors live.
        td_params: physical parameters as made by :meth:`gen_params` (defaults: gymnasium's).
        seed: the seed of the env's random generator (drawn from torch's when ``None``).
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`).

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv
        >>> env = PendulumEnv(batch_size=[8], seed=0)
        >>> rollout = env.rollout(100)
        >>> rollout.batch_size
        torch.Size([8, 100])
        >>> rollout["next", "reward"].shape
        torch.Size([8, 100, 1])
        >>> # _step is differentiable: gradients flow from rewards back to the actions.
        >>> td = env.reset()
        >>> td["action"] = torch.zeros(8, 1, requires_grad=True)
        >>> env.step(td)["next", "reward"].sum().backward()
        >>> td["action"].grad.shape
        torch.Size([8, 1])
    """

    def __init__(
        self,
        batch_size: ShapeLike | None = None,
        device: DeviceLike = None,
        td_params: TensorDictBase | None = None,
        seed: int | None = None,
        validate_actions: bool = True,
    ) -> None:
        super().__init__(device=device, batch_size=batch_size, validate_actions=validate_actions)
        # Inputs of any batch size are fine: everything the step needs is in the input.
        self.batch_locked = False
        if td_params is None:
            td_params = self.gen_params(self.batch_size, device=self.device)
        self.td_params = td_params
        self._make_specs(td_params)
        if seed is None:
            seed = int(torch.randint(0, 2**32 - 1, (), dtype=torch.int64))
        self.set_seed(seed)

    @staticmethod
    def gen_params(
        batch_size: Sequence[int] | None = None, device: DeviceLike = None, **overrides: float
    ) -> TensorDict:
        """Makes the physical parameters, one set per sub-env.

        Args:
            batch_size: the batch shape ``[*B]`` of the parameters.
            device: where they live.
            **overrides: values replacing the defaults (``g=9.81``, ``max_torque=1.0``, ...).

        Returns:
            A TensorDict with a ``"params"`` entry holding ``g``, ``m``, ``l``, ``dt``,
            ``max_speed`` and ``max_torque``, each of shape ``[*B]``.

        Examples:
            >>> from torchrl.envs import PendulumEnv
            >>> params = PendulumEnv.gen_params([4], g=9.81)
            >>> params["params", "g"]
            tensor([9.8100, 9.8100, 9.8100, 9.8100])
        """
        batch = torch.Size([] if batch_size is None else batch_size)
        unknown = set(overrides) - set(_PARAM_DEFAULTS)
        if unknown:
            raise KeyError(
                f"unknown pendulum parameters {sorted(unknown)}; known: {list(_PARAM_DEFAULTS)}"
            )
        values = {**_PARAM_DEFAULTS, **overrides}
        params = TensorDict(
            {k: torch.full(batch, float(v), device=device) for k, v in values.items()},
            batch_size=batch,
            device=device,
        )
        return TensorDict({_PARAMS: params}, batch_size=batch, device=device)

    def _make_specs(self, td_params: TensorDictBase) -> None:
        batch = self.batch_size
        max_speed = float(td_params[_PARAMS, "max_speed"].max())
        max_torque = float(td_params[_PARAMS, "max_torque"].max())
        obs_high = torch.tensor([1.0, 1.0, max_speed]).expand(*batch, 3)
        params_spec = Composite(
            {k: Unbounded(shape=batch, dtype=torch.float32) for k in _PARAM_DEFAULTS},
            shape=batch,
        )
        # "th", "thdot" and "params" are observations (so that each step hands them to the
        # next one, through step_mdp) and state (inputs _step reads besides the action).
        self.observation_spec = Composite(
            {
                OBSERVATION: Bounded(low=-obs_high, high=obs_high, shape=(*batch, 3)),
                "th": Unbounded(shape=batch, dtype=torch.float32),
                "thdot": Bounded(low=-max_speed, high=max_speed, shape=batch),
                _PARAMS: params_spec,
            },
            shape=batch,
        )
        self.state_spec = Composite(
            {
                "th": Unbounded(shape=batch, dtype=torch.float32),
                "thdot": Bounded(low=-max_speed, high=max_speed, shape=batch),
                _PARAMS: params_spec.clone(),
            },
            shape=batch,
        )
        self.action_spec = Bounded(low=-max_torque, high=max_torque, shape=(*batch, 1))
        self.reward_spec = Unbounded(shape=(*batch, 1), dtype=torch.float32)
        # The default done specs (done/terminated/truncated, bool, [*B, 1]) are the right ones.

    def _set_seed(self, seed: int | None) -> None:
        # A private generator: seeding the env does not touch torch's global random state.
        device = self.device if self.device is not None else torch.device("cpu")
        self.rng = torch.Generator(device=device)
        if seed is not None:
            self.rng.manual_seed(seed)
        else:
            self.rng.seed()

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        if tensordict is not None:
            batch = tensordict.batch_size
            params = tensordict.get(_PARAMS, None)
        else:
            batch, params = self.batch_size, None
        if params is None:
            params = self.td_params[_PARAMS]
            if params.batch_size != batch:
                params = params.expand(batch).clone()
        device = self.device
        # Every sub-env gets a fresh state; on a partial reset EnvBase puts back the entries of
        # the sub-envs that were not reset.
        th = (torch.rand(batch, generator=self.rng, device=self.rng.device) * 2 - 1) * math.pi
        thdot = torch.rand(batch, generator=self.rng, device=self.rng.device) * 2 - 1
        return TensorDict(
            {
                "th": th,
                "thdot": thdot,
                _PARAMS: params,
                OBSERVATION: torch.stack([th.cos(), th.sin(), thdot], -1),
            },
            batch_size=batch,
            device=device,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        th = tensordict["th"]
        thdot = tensordict["thdot"]
        params = tensordict[_PARAMS]
        g, m, length, dt = params["g"], params["m"], params["l"], params["dt"]
        max_speed, max_torque = params["max_speed"], params["max_torque"]
        u = tensordict[ACTION].squeeze(-1)
        u = torch.maximum(torch.minimum(u, max_torque), -max_torque)
        costs = _angle_normalize(th).pow(2) + 0.1 * thdot.pow(2) + 0.001 * u.pow(2)
        new_thdot = thdot + (3 * g / (2 * length) * th.sin() + 3.0 / (m * length**2) * u) * dt
        new_thdot = torch.maximum(torch.minimum(new_thdot, max_speed), -max_speed)
        new_th = th + new_thdot * dt
        done = torch.zeros((*tensordict.batch_size, 1), dtype=torch.bool, device=th.device)
        return TensorDict(
            {
                "th": new_th,
                "thdot": new_thdot,
                # A new container (same tensors): entries added to one step's params must not
                # appear in another's.
                _PARAMS: params.copy(),
                OBSERVATION: torch.stack([new_th.cos(), new_th.sin(), new_thdot], -1),
                REWARD: -costs.unsqueeze(-1),
                DONE: done,
                # The pendulum never terminates; truncation comes from a step limit.
                TERMINATED: done.clone(),
                TRUNCATED: done.clone(),
            },
            batch_size=tensordict.batch_size,
            device=self.device,
        )
