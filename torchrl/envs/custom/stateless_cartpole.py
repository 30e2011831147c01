"""CartPole with the velocities hidden: a memory task for recurrent and frame-stacking policies.

The dynamics, thresholds, initial states and rewards are gymnasium's ``CartPole-v1`` (Euler
integration, 500-step truncation, reward 1 per step); only the observation changes: it holds the
cart position and the pole angle, ``[x, theta]``, without their velocities. A memoryless policy
cannot tell which way the pole is falling from one observation; a policy that remembers the
previous observations can estimate it, and solves the task.

Two ways to get it: :class:`StatelessCartPole`, a batched pure-torch env (no gymnasium needed,
tens of thousands of steps per second), and :func:`make_gym_stateless_cartpole`, gymnasium's own
``CartPole-v1`` behind :class:`DropCartPoleVelocities`, for comparisons with libraries that run
gymnasium's env.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, OBSERVATION, RESET, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike, NestedKey, ShapeLike
from torchrl.data.specs import Bounded, Categorical, Composite, OneHot, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.transforms.env import TransformedEnv
from torchrl.envs.transforms.unary import UnaryTransform

__all__ = [
    "DropCartPoleVelocities",
    "StatelessCartPole",
    "drop_cartpole_velocities",
    "make_gym_stateless_cartpole",
]

# gymnasium's CartPole-v1 constants
_GRAVITY = 9.8
_MASS_CART = 1.0
_MASS_POLE = 0.1
_TOTAL_MASS = _MASS_CART + _MASS_POLE
_HALF_LENGTH = 0.5
_POLE_MASS_LENGTH = _MASS_POLE * _HALF_LENGTH
_FORCE = 10.0
_TAU = 0.02
_THETA_THRESHOLD = 12 * 2 * math.pi / 360
_X_THRESHOLD = 2.4
_INIT_BOUND = 0.05
# Which entries of gymnasium's [x, x_dot, theta, theta_dot] stay visible.
_VISIBLE = (0, 2)
_VISIBLE_SLICE = slice(0, None, 2)  # the same entries, as a view


class StatelessCartPole(EnvBase):
    """Batched CartPole-v1 in pure torch, observing ``[x, theta]`` only (velocities hidden).

    Each sub-env follows gymnasium's ``CartPole-v1``: the same equations (Euler steps of 0.02 s,
    force +-10), termination when ``|x| > 2.4`` or ``|theta| > 12 deg``, truncation after
    ``max_episode_steps`` steps, reward 1 per step (the terminal one included) and initial
    states uniform in ``[-0.05, 0.05]``. The state ``[x, x_dot, theta, theta_dot]`` lives in the
    env (float64, as gymnasium computes it), never in the TensorDict, so a policy cannot read the
    velocities. Partial resets (``"_reset"``) reset only the marked sub-envs.

    Observation ``"observation"``: ``[*B, 2]`` float32. Action: one-hot ``[*B, 2]`` (bool, as
    ``GymEnv("CartPole-v1")``), or an index ``[*B]`` with ``categorical_action_encoding``; index 1
    pushes right.

    Args:
        batch_size: the number of carts, e.g. ``[8]`` (default ``[]``).
        device: where the tensors live.
        seed: seed of the env's own random generator (drawn from torch's when ``None``).
        max_episode_steps: steps after which an episode is truncated (gymnasium: 500).
        categorical_action_encoding: take action indices instead of one-hot actions.
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`).

    Examples:
        >>> from torchrl.envs import check_env_specs
        >>> env = StatelessCartPole(batch_size=[4], seed=0)
        >>> env.observation_spec["observation"].shape
        torch.Size([4, 2])
        >>> rollout = env.rollout(20, break_when_any_done=False)
        >>> rollout["next", "observation"].shape, float(rollout["next", "reward"][0, 0])
        (torch.Size([4, 20, 2]), 1.0)
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        batch_size: ShapeLike | None = None,
        device: DeviceLike = None,
        seed: int | None = None,
        max_episode_steps: int = 500,
        categorical_action_encoding: bool = False,
        validate_actions: bool = True,
    ) -> None:
        super().__init__(device=device, batch_size=batch_size, validate_actions=validate_actions)
        if not isinstance(max_episode_steps, int) or max_episode_steps < 1:
            raise ValueError(
                "StatelessCartPole: max_episode_steps must be an int >= 1, "
                f"got {max_episode_steps!r}"
            )
        self.max_episode_steps = max_episode_steps
        self.categorical_action_encoding = bool(categorical_action_encoding)
        batch = self.batch_size
        dev = self.device if self.device is not None else torch.device("cpu")
        high = torch.tensor([_X_THRESHOLD * 2, _THETA_THRESHOLD * 2], device=dev)
        self.observation_spec = Composite(
            {OBSERVATION: Bounded(-high.expand(*batch, 2), high.expand(*batch, 2), device=dev)},
            shape=batch,
        )
        if self.categorical_action_encoding:
            self.action_spec = Categorical(2, shape=batch, dtype=torch.int64, device=dev)
        else:
            self.action_spec = OneHot(2, shape=(*batch, 2), dtype=torch.bool, device=dev)
        self.reward_spec = Unbounded(shape=(*batch, 1), dtype=torch.float32, device=dev)
        self._state = torch.zeros(*batch, 4, dtype=torch.float64, device=dev)
        self._steps = torch.zeros(batch, dtype=torch.int64, device=dev)
        self._ones = torch.ones(*batch, 1, dtype=torch.float32, device=dev)
        inf = float("inf")
        self._limits = torch.tensor(
            [_X_THRESHOLD, inf, _THETA_THRESHOLD, inf], dtype=torch.float64, device=dev
        )
        if seed is None:
            seed = int(torch.randint(0, 2**32 - 1, (), dtype=torch.int64))
        self.set_seed(seed)

    @property
    def state(self) -> torch.Tensor:
        """The hidden state ``[*B, 4]`` = ``[x, x_dot, theta, theta_dot]`` (float64, a copy)."""
        return self._state.clone()

    def set_state(self, state: torch.Tensor, steps: torch.Tensor | None = None) -> None:
        """Overwrites the hidden state (for tests and comparisons with gymnasium).

        Args:
            state: ``[*B, 4]`` values of ``[x, x_dot, theta, theta_dot]``.
            steps: ``[*B]`` steps already taken in the episodes (default: unchanged).
        """
        if state.shape != self._state.shape:
            raise ValueError(
                f"StatelessCartPole.set_state: state must have shape {tuple(self._state.shape)} "
                f"([*batch_size, 4]), got {tuple(state.shape)}"
            )
        self._state.copy_(state)
        if steps is not None:
            self._steps.copy_(steps)

    def _set_seed(self, seed: int | None) -> None:
        # A private generator: seeding the env leaves torch's global random state alone.
        self.rng = torch.Generator(device=self._state.device)
        if seed is not None:
            self.rng.manual_seed(seed)
        else:
            self.rng.seed()

    def _observation(self) -> torch.Tensor:
        return self._state[..., _VISIBLE_SLICE].to(torch.float32)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        batch = self.batch_size
        fresh = torch.rand(*batch, 4, generator=self.rng, device=self._state.device)
        fresh = (fresh.double() * 2 - 1) * _INIT_BOUND
        mask = None if tensordict is None else tensordict.get(RESET, None)
        if mask is None:
            self._state.copy_(fresh)
            self._steps.zero_()
        else:
            where = mask.reshape(batch).to(self._state.device)
            self._state.copy_(torch.where(where.unsqueeze(-1), fresh, self._state))
            self._steps.masked_fill_(where, 0)
        return TensorDict({OBSERVATION: self._observation()}, batch_size=batch, device=self.device)

    def _advance(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The next state of every sub-env, its step count and whether it terminates."""
        if self.categorical_action_encoding:
            push_right = action.reshape(self.batch_size) == 1
        else:
            push_right = action[..., 1].bool()
        # gymnasium's equations, fused into few tensor ops (each costs more than its math here)
        x_dot, theta, theta_dot = self._state[..., 1], self._state[..., 2], self._state[..., 3]
        force = torch.where(push_right, _FORCE, -_FORCE)
        cos, sin = theta.cos(), theta.sin()
        temp = torch.addcmul(force, theta_dot.square(), sin, value=_POLE_MASS_LENGTH) / _TOTAL_MASS
        theta_acc = torch.addcmul(sin * _GRAVITY, cos, temp, value=-1.0) / (
            cos.square() * (-_HALF_LENGTH * _MASS_POLE / _TOTAL_MASS) + _HALF_LENGTH * 4.0 / 3.0
        )
        x_acc = torch.addcmul(temp, theta_acc, cos, value=-_POLE_MASS_LENGTH / _TOTAL_MASS)
        # gymnasium's "euler" integrator: positions move with the old velocities.
        state = torch.add(
            self._state, torch.stack([x_dot, x_acc, theta_dot, theta_acc], -1), alpha=_TAU
        )
        terminated = (state.abs() > self._limits).any(-1)
        return state, self._steps + 1, terminated

    def _output(self, terminated: torch.Tensor) -> TensorDictBase:
        terminated = terminated.unsqueeze(-1)
        # gymnasium's TimeLimit: truncated once the step budget is used, terminated or not.
        truncated = (self._steps >= self.max_episode_steps).unsqueeze(-1)
        return TensorDict(
            {
                OBSERVATION: self._observation(),
                REWARD: self._ones.clone(),
                DONE: terminated | truncated,
                TERMINATED: terminated,
                TRUNCATED: truncated,
            },
            batch_size=self.batch_size,
            device=self.device,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        state, steps, terminated = self._advance(tensordict.get(ACTION))
        self._state.copy_(state)
        self._steps.copy_(steps)
        return self._output(terminated)

    def _step_masked(self, tensordict: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        # Only the marked carts move; EnvBase overwrites the outputs of the others.
        state, steps, terminated = self._advance(tensordict.get(ACTION))
        self._state.copy_(torch.where(mask.unsqueeze(-1), state, self._state))
        self._steps.copy_(torch.where(mask, steps, self._steps))
        return self._output(terminated)


def drop_cartpole_velocities(observation: torch.Tensor) -> torch.Tensor:
    """CartPole observations ``[..., 4]`` (``[x, x_dot, theta, theta_dot]``) -> ``[x, theta]``.

    Args:
        observation: gymnasium CartPole observations, ``[..., 4]``.

    Returns:
        The positions only, ``[..., 2]``.

    Examples:
        >>> drop_cartpole_velocities(torch.tensor([1.0, 2.0, 3.0, 4.0]))
        tensor([1., 3.])
    """
    if observation.shape[-1:] != (4,):
        raise ValueError(
            "drop_cartpole_velocities: expected CartPole observations [..., 4] "
            f"([x, x_dot, theta, theta_dot]), got shape {tuple(observation.shape)}"
        )
    return observation[..., list(_VISIBLE)]


class DropCartPoleVelocities(UnaryTransform):
    """Hides the velocities of gymnasium's CartPole observations: keeps ``[x, theta]``.

    Put it on ``GymEnv("CartPole-v1")`` to get the same task as :class:`StatelessCartPole`
    from gymnasium's own env (see :func:`make_gym_stateless_cartpole`).

    Args:
        in_keys: the observation entries to rewrite (default ``["observation"]``).

    Examples:
        >>> t = DropCartPoleVelocities()
        >>> t(TensorDict(observation=torch.arange(4.0), batch_size=[]))["observation"]
        tensor([0., 2.])
    """

    def __init__(self, in_keys: NestedKey | list[NestedKey] | None = None) -> None:
        super().__init__(
            in_keys=[OBSERVATION] if in_keys is None else in_keys, fn=drop_cartpole_velocities
        )


def make_gym_stateless_cartpole(
    num_envs: int | None = None, env_name: str = "CartPole-v1", **kwargs: Any
) -> TransformedEnv:
    """gymnasium's ``CartPole-v1`` with the velocities dropped from the observation.

    The same task as :class:`StatelessCartPole`, stepped by gymnasium (its vector env when
    ``num_envs`` is given), for comparisons with libraries that run gymnasium's env.

    Args:
        num_envs: sub-envs of a gymnasium vector env (``None``: one env, no batch dim).
        env_name: the gymnasium id.
        **kwargs: passed to :class:`~torchrl.envs.GymEnv`.

    Returns:
        ``TransformedEnv(GymEnv(env_name, ...), DropCartPoleVelocities())``.

    Examples:
        >>> env = make_gym_stateless_cartpole(num_envs=2)
        >>> env.observation_spec["observation"].shape
        torch.Size([2, 2])
        >>> env.close()
    """
    from torchrl.envs.libs.gym import GymEnv

    if num_envs is not None:
        kwargs["num_envs"] = num_envs
    return TransformedEnv(GymEnv(env_name, **kwargs), DropCartPoleVelocities())
