"""Stepping several single gymnasium envs as one batch: the fast path of ``SerialEnv``.

:class:`~torchrl.envs.SerialEnv` asks the class of its envs for a *batched stepper* with the
classmethod ``_batched_stepper(envs)`` (see :mod:`torchrl.envs.batched.serial`). For plain
:class:`~torchrl.envs.GymWrapper` envs, :class:`GymBatchStepper` turns the batch of actions
into gymnasium actions at once, calls each gymnasium env's ``step`` in a loop and builds the
stacked outputs from the lists of results, with one numpy array and one TensorDict per batched
step instead of a TensorDict per env plus a stack. Values are exactly those of the wrapper's
own ``_step`` and ``reset``: same dtypes, same casts, same seeds consumed. Which envs qualify
is decided by ``GymWrapper._batched_stepper``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import DONE, OBSERVATION, REWARD, TERMINATED, TRUNCATED
from torchrl._td_compat import new_unchecked
from torchrl.data.specs import Bounded, Composite, TensorSpec
from torchrl.envs._action_checks import make_action_check
from torchrl.envs.libs._gym_spaces import (
    INVALID,
    raise_if_bad_action,
    spaces_of,
)

if TYPE_CHECKING:
    from torchrl.envs.libs.gym import GymWrapper

__all__ = ["GymBatchStepper"]


def _batched_writer(env: GymWrapper) -> Callable[[torch.Tensor], list[Any]]:
    """Turns actions of batch ``[n]`` into ``n`` gymnasium actions, equal to the env's own."""
    space = env.env.action_space
    spaces = spaces_of(space)
    if type(space) is spaces.Discrete:
        start = int(space.start)
        dtype = np.dtype(space.dtype)
        if env._categorical:

            def write_index(action: torch.Tensor) -> list[Any]:
                # numpy scalars of the space's dtype, like the wrapper's own writer
                if action.device.type != "cpu":
                    action = action.cpu()
                if action.requires_grad:
                    action = action.detach()
                index = action.numpy().reshape(-1)
                if index.dtype != dtype:
                    index = index.astype(dtype)
                return list(index + start if start else index)

            return write_index

        def write_one_hot(action: torch.Tensor) -> list[Any]:
            # numpy's argmax takes bool one-hot tensors, which torch's does not
            index = action.detach().cpu().numpy().argmax(-1)
            return list((index + start if start else index).astype(dtype, copy=False))

        return write_one_hot
    if type(space) is spaces.Box:
        np_dtype = space.dtype

        def write_box(action: torch.Tensor) -> list[Any]:
            # rows of one array: the same values as the wrapper's cast of each row
            return list(np.asarray(action.detach().cpu().numpy(), dtype=np_dtype))

        return write_box
    write = env._write_action
    return lambda action: [write(a) for a in action.unbind(0)]


def _batched_checked_writer(
    env: GymWrapper, spec: TensorSpec, n: int
) -> Callable[[Any], list[Any] | object] | None:
    """A batched writer that also checks the actions against ``spec`` (batch ``[n]``).

    Check and conversion share one ``tolist()`` of the action, so that the check costs next to
    nothing on top of the conversion. Returns the ``n`` gymnasium actions (the values
    :func:`_batched_writer` gives), or :data:`INVALID` when the action may not fit (wrong type,
    shape or dtype kind, out of range, not one-hot, NaN, a mask on the spec): the caller then
    runs the generic check, which raises the detailed error or vouches for the action.
    ``None`` for spaces without such a writer.
    """
    space = env.env.action_space
    spaces = spaces_of(space)
    if type(space) is spaces.Discrete:
        size, start = int(space.n), int(space.start)
        dtype = np.dtype(space.dtype)
        if env._categorical:

            def write_index(action: object) -> list[Any] | object:
                if type(action) is not torch.Tensor or spec.mask is not None:  # type: ignore[attr-defined]
                    return INVALID
                index = action.tolist()
                if type(index) is not list or len(index) != n or type(index[0]) is not int:
                    return INVALID
                if not (0 <= min(index) and max(index) < size):
                    return INVALID
                return list(
                    np.array(index, dtype=dtype) + start if start else np.array(index, dtype=dtype)
                )

            return write_index
        eye = [[i == j for j in range(size)] for i in range(size)]

        def write_one_hot(action: object) -> list[Any] | object:
            if type(action) is not torch.Tensor or spec.mask is not None:  # type: ignore[attr-defined]
                return INVALID
            rows = action.tolist()
            if type(rows) is not list or len(rows) != n or type(rows[0]) is not list:
                return INVALID
            kind = type(rows[0][0]) if rows[0] else None
            if kind is not bool and kind is not int:  # float one-hot rows: wrong dtype kind
                return INVALID
            # every row is a row of the identity (True == 1: int rows match too)
            found = 0
            for one_hot_row in eye:
                found += rows.count(one_hot_row)
            if found != n:
                return INVALID
            index = np.array([row.index(1) for row in rows], dtype=dtype)
            return list(index + start if start else index)

        return write_one_hot
    if (
        type(space) is spaces.Box
        and len(space.shape) == 1
        and np.dtype(space.dtype).kind == "f"
        and isinstance(spec, Bounded)
    ):
        np_dtype = space.dtype
        lows: list[float] = spec.low.expand(spec.shape).reshape(-1).tolist()
        highs: list[float] = spec.high.expand(spec.shape).reshape(-1).tolist()
        width = int(space.shape[0])

        def write_box(action: object) -> list[Any] | object:
            if type(action) is not torch.Tensor or action.shape != spec.shape:
                return INVALID
            rows = action.tolist()
            if type(rows[0][0]) is not float:  # the dtype kind
                return INVALID
            k = 0
            for row in rows:
                for value in row:
                    if not lows[k] <= value <= highs[k]:  # NaN fails both comparisons
                        return INVALID
                    k += 1
            # the same float32 values as the plain writer's cast of the tensor
            return list(np.array(rows, dtype=np_dtype).reshape(n, width))

        return write_box
    return None


def _batched_reader(env: GymWrapper) -> Callable[[Sequence[Any]], dict[str, torch.Tensor]]:
    """Turns ``n`` gymnasium observations into the stacked observation entries."""
    space = env.env.observation_space
    spaces = spaces_of(space)
    if type(space) is spaces.Box and list(env.observation_keys) == [OBSERVATION]:
        np_dtype = space.dtype

        def read_box(obs: Sequence[Any]) -> dict[str, torch.Tensor]:
            # np.array of a list of equal arrays stacks them, at a quarter of np.stack's cost
            return {OBSERVATION: torch.from_numpy(np.array(obs, dtype=np_dtype))}

        return read_box
    read = env._read_obs

    def read_all(obs: Sequence[Any]) -> dict[str, torch.Tensor]:
        reads = [read(o) for o in obs]
        return {key: torch.stack([r[key] for r in reads]) for key in reads[0]}

    return read_all


class GymBatchStepper:
    """Steps ``n`` unbatched :class:`GymWrapper` envs of one kind as one env of batch ``[n]``.

    The interface :class:`~torchrl.envs.SerialEnv` expects of a batched stepper:
    ``step(action)`` and ``step_and_reset(action)``.

    Args:
        envs: the envs (built, with equal specs up to bounds).

    Examples:
        >>> import torch
        >>> from torchrl.envs import GymEnv
        >>> envs = [GymEnv("CartPole-v1") for _ in range(3)]
        >>> roots = [env.reset() for env in envs]
        >>> stepper = GymEnv._batched_stepper(envs)
        >>> out = stepper.step(torch.eye(2, dtype=torch.bool)[[0, 1, 0]])
        >>> out["observation"].shape, out["done"].shape
        (torch.Size([3, 4]), torch.Size([3, 1]))
    """

    def __init__(self, envs: Sequence[GymWrapper]) -> None:
        first = envs[0]
        self.envs = list(envs)
        self.gym_steps = [env.env.step for env in envs]
        self.n = len(envs)
        self.batch_size = torch.Size([self.n])
        self.device = first.device
        self.write = _batched_writer(first)
        self.checked_write: Callable[[Any], list[Any] | object] | None = None
        self._generic_check: Callable[[TensorDictBase], None] | None = None
        self._action_key = "action"
        self.read = _batched_reader(first)
        self.frame_skip = first.frame_skip
        self.shape = (self.n, 1)

    def enable_checks(self, owner: str, key: str, spec: TensorSpec) -> bool:
        """Lets ``step(..., check=True)`` check the actions against ``spec`` (batch ``[n]``).

        Args:
            owner: the batched env's class name, for the error messages.
            key: the action key.
            spec: the batched env's action spec of that key.

        Returns:
            Whether the stepper checks actions itself (its spaces have a checked writer).
        """
        self.checked_write = _batched_checked_writer(self.envs[0], spec, self.n)
        self._generic_check = make_action_check(
            owner, Composite({key: spec}, shape=[self.n]), [key], 1
        )
        self._action_key = key
        return self.checked_write is not None

    def _checked_actions(self, action: torch.Tensor) -> list[Any] | None:
        """The gymnasium actions, checked; ``None`` when the plain writer must convert them."""
        if self.checked_write is None:
            return None
        actions = self.checked_write(action)
        if actions is not INVALID:
            return cast(list[Any], actions)
        # raises the detailed error, or vouches for an action the shortcut cannot read
        if self._generic_check is not None:
            td = TensorDict({self._action_key: action}, batch_size=self.batch_size)
            self._generic_check(td)
        return None

    def _run(
        self, action: torch.Tensor, check: bool = False
    ) -> tuple[list[Any], TensorDictBase, list[int]]:
        checked = self._checked_actions(action) if check else None
        try:
            actions = checked if checked is not None else self.write(action)
            if self.frame_skip == 1:
                results = [step(act) for step, act in zip(self.gym_steps, actions)]
            else:
                results = [
                    env._repeat(act, *step(act))
                    for env, step, act in zip(self.envs, self.gym_steps, actions)
                ]
        except (TypeError, ValueError, AttributeError, IndexError, AssertionError) as err:
            raise_if_bad_action(self.envs[0], action, self.batch_size, err)
            raise
        obs, rewards, terms, truncs, _ = zip(*results)
        data = self.read(obs)
        shape = self.shape
        data[REWARD] = torch.from_numpy(np.array(rewards, dtype=np.float32).reshape(shape))
        terminated = np.array(terms, dtype=bool).reshape(shape)
        truncated = np.array(truncs, dtype=bool).reshape(shape)
        done = terminated | truncated
        data[TERMINATED] = torch.from_numpy(terminated)
        data[TRUNCATED] = torch.from_numpy(truncated)
        data[DONE] = torch.from_numpy(done)
        finished = np.flatnonzero(done).tolist() if any(terms) or any(truncs) else []
        return list(obs), self._td(data), finished

    def _td(self, data: dict[str, torch.Tensor]) -> TensorDictBase:
        device = self.device
        if device is None or device.type == "cpu":
            return new_unchecked(data, batch_size=self.batch_size, device=device, nested=False)
        return TensorDict(data, batch_size=self.batch_size, device=device)

    def step(self, action: torch.Tensor, check: bool = False) -> TensorDictBase:
        """Steps every env with its row of ``action`` (batch ``[n]``; checked with ``check``).

        Returns:
            The stacked ``"next"`` entries: observations, ``"reward"``, done flags (``[n, 1]``).
        """
        return self._run(action, check)[1]

    def step_and_reset(
        self, action: torch.Tensor, check: bool = False
    ) -> tuple[TensorDictBase, TensorDictBase | None, list[int]]:
        """Steps every env, then resets those that are done (with the seeds they were given).

        Returns:
            The stacked ``"next"`` entries; the entries of the next step's input (observations
            and done flags, with the reset envs' first observations), or ``None`` when no env
            is done; and the indices of the reset envs.
        """
        obs, next_td, finished = self._run(action, check)
        if not finished:
            return next_td, None, finished
        for i in finished:
            obs[i] = self.envs[i]._reset_gym()[0]
        root = self.read(obs)
        # every env of the next input is not done: the finished ones were just reset
        # (three distinct tensors: an in-place edit of one flag must not change another)
        terminated, truncated, done = np.zeros((3, *self.shape), dtype=bool)
        root[TERMINATED] = torch.from_numpy(terminated)
        root[TRUNCATED] = torch.from_numpy(truncated)
        root[DONE] = torch.from_numpy(done)
        return next_td, self._td(root), finished
