"""Value estimators as modules: read rewards, values and episode ends, write advantages.

Each estimator reads a TensorDict laid out ``[*B, T]`` (time is the last batch dim unless
``time_dim`` says otherwise) with ``("next", "reward")``, ``("next", "done")`` and
``("next", "terminated")`` entries, computes ``V(s_t)`` and ``V(s_{t+1})`` with its
``value_network`` (or reads them when there is no network), and writes ``"advantage"`` and
``"value_target"``. The arithmetic lives in :mod:`torchrl.objectives.value.functional`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, TypedDict

import torch
from tensordict import TensorDictBase
from tensordict.nn import ProbabilisticTensorDictSequential, TensorDictModuleBase
from tensordict.nn import skip_existing as global_skip_existing
from torch import Tensor, nn

import torchrl.objectives.value.functional as vf
from torchrl._compile import compile_in_place
from torchrl._keys import (
    ACTION_LOG_PROB,
    ADVANTAGE,
    DONE,
    NEXT,
    REWARD,
    STATE_VALUE,
    TERMINATED,
    VALUE_TARGET,
    paper_era_log_prob_key,
)
from torchrl._types import DeviceLike, NestedKey

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "GAE",
    "EstimatorOptions",
    "TD0Estimator",
    "TD1Estimator",
    "TDLambdaEstimator",
    "VTrace",
    "ValueEstimatorBase",
    "next_key",
    "standardize",
]

STEPS_TO_NEXT_OBS = "steps_to_next_obs"


def next_key(key: NestedKey) -> NestedKey:
    """``("next", *key)``: where the entry ``key`` of the next step sits.

    Examples:
        >>> next_key("reward"), next_key(("agents", "reward"))
        (('next', 'reward'), ('next', 'agents', 'reward'))
    """
    return (NEXT, *key) if isinstance(key, tuple) else (NEXT, key)


class EstimatorOptions(TypedDict, total=False):
    """The keyword arguments every estimator takes (see :class:`ValueEstimatorBase`)."""

    value_network: TensorDictModuleBase | None
    shifted: bool
    differentiable: bool
    skip_existing: bool | None
    device: DeviceLike
    time_dim: int | None


@contextmanager
def _maybe_params(module: nn.Module, params: TensorDictBase | None) -> Iterator[None]:
    if params is None:
        yield
    else:
        with params.to_module(module):
            yield


class ValueEstimatorBase(nn.Module):
    """Base of the value estimators: keys, value-network calls and the write-back.

    Subclasses implement :meth:`_estimate` (advantage and value target from tensors).

    Args:
        gamma: the discount (a number or a tensor broadcastable to the reward).
        value_network: a tensordict module writing the state value (``"state_value"``);
            ``None`` when the values are already in the input.
        shifted: compute ``V(s_t)`` and ``V(s_{t+1})`` in one call of the value network (on
            the root and ``"next"`` data concatenated along time) instead of two.
        differentiable: keep the graph through the value network (default: no gradients).
        skip_existing: reuse values already in the input instead of recomputing them.
            ``None`` follows :func:`tensordict.nn.skip_existing`.
        device: unused (the tensors decide); kept for a TorchRL-compatible signature.
        time_dim: the time dim among the TensorDict's batch dims (default: the last).

    Examples:
        A one-step estimator (subclasses write ``_estimate``, which gets the values ``V(s)``
        and ``V(s')`` and returns the advantage and the value target):

        >>> import torch
        >>> from tensordict import TensorDict
        >>> class OneStep(ValueEstimatorBase):
        ...     def _estimate(self, td, value, next_value):
        ...         reward = td["next", self.tensor_keys.reward]
        ...         terminated = td["next", self.tensor_keys.terminated]
        ...         target = reward + self.gamma * (~terminated) * next_value
        ...         return target - value, target
        >>> td = TensorDict({"state_value": torch.zeros(1, 2, 1), "next": {
        ...     "state_value": torch.ones(1, 2, 1), "reward": torch.ones(1, 2, 1),
        ...     "done": torch.tensor([[[False], [True]]]),
        ...     "terminated": torch.tensor([[[False], [True]]])}}, batch_size=[1, 2])
        >>> out = OneStep(gamma=0.5)(td)
        >>> out["advantage"].squeeze(-1), out["value_target"].squeeze(-1)
        (tensor([[1.5000, 1.0000]]), tensor([[1.5000, 1.0000]]))
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Keys read and written by the estimators (change them with :meth:`set_keys`)."""

        advantage: NestedKey = ADVANTAGE
        value_target: NestedKey = VALUE_TARGET
        value: NestedKey = STATE_VALUE
        reward: NestedKey = REWARD
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED
        steps_to_next_obs: NestedKey = STEPS_TO_NEXT_OBS
        sample_log_prob: NestedKey = ACTION_LOG_PROB

    default_keys = _AcceptedKeys
    value_network: TensorDictModuleBase | None

    def __init__(
        self,
        *,
        gamma: float | Tensor,
        value_network: TensorDictModuleBase | None = None,
        shifted: bool = False,
        differentiable: bool = False,
        skip_existing: bool | None = None,
        device: DeviceLike = None,
        time_dim: int | None = None,
    ) -> None:
        super().__init__()
        if value_network is not None and not (
            hasattr(value_network, "in_keys") and hasattr(value_network, "out_keys")
        ):
            raise TypeError(
                f"{type(self).__name__}: value_network must be a tensordict module (with in_keys "
                f"and out_keys), got {type(value_network).__name__}"
            )
        self.gamma = gamma
        self.value_network = value_network
        self.shifted = shifted
        self.differentiable = differentiable
        self._skip_existing = skip_existing
        self.device = device
        self.time_dim = time_dim
        self._tensor_keys = self._AcceptedKeys()
        out_keys = list(getattr(value_network, "out_keys", None) or [])
        if out_keys and self._tensor_keys.value not in out_keys:
            # A sequence (trunk -> head) writes its result last.
            self._tensor_keys.value = out_keys[-1]

    # ---- keys ------------------------------------------------------------------------------

    @property
    def tensor_keys(self) -> _AcceptedKeys:
        """The keys in use (a dataclass; see :meth:`set_keys`)."""
        return self._tensor_keys

    def set_keys(self, **kwargs: NestedKey | None) -> ValueEstimatorBase:
        """Renames the entries the estimator reads or writes, e.g. ``set_keys(reward="r")``.

        Args:
            **kwargs: new keys by name (``advantage``, ``value_target``, ``value``, ``reward``,
                ``done``, ``terminated``, ``steps_to_next_obs``, ``sample_log_prob``); ``None``
                leaves a key unchanged.

        Returns:
            The estimator.
        """
        fields = {f.name for f in dataclasses.fields(self._tensor_keys)}
        for name, key in kwargs.items():
            if name not in fields:
                raise ValueError(
                    f"{type(self).__name__}.set_keys: unknown key name {name!r}; "
                    f"accepted: {sorted(fields)}"
                )
            if key is not None:
                setattr(self._tensor_keys, name, key)
        return self

    @property
    def in_keys(self) -> list[NestedKey]:
        """Entries read: the value network's inputs (root and ``"next"``), reward, done flags."""
        keys = self.tensor_keys
        net_keys = list(self.value_network.in_keys) if self.value_network is not None else []
        if self.value_network is None:
            net_keys = [keys.value]
        return [
            *net_keys,
            *(next_key(k) for k in net_keys),
            next_key(keys.reward),
            next_key(keys.done),
            next_key(keys.terminated),
        ]

    @property
    def out_keys(self) -> list[NestedKey]:
        """Entries written: the advantage and the value target."""
        return [self.tensor_keys.advantage, self.tensor_keys.value_target]

    @property
    def skip_existing(self) -> bool:
        """Whether values already in the input are reused."""
        if self._skip_existing is None:
            return bool(global_skip_existing())
        return self._skip_existing

    # ---- helpers -----------------------------------------------------------------------------

    def _get(self, td: TensorDictBase, key: NestedKey, what: str) -> Tensor:
        value = td.get(key, None)
        if value is None:
            raise KeyError(
                f"{type(self).__name__}: the input has no {what} entry {key!r} "
                f"(rename it with set_keys); keys present: {sorted(map(str, td.keys(True, True)))}"
            )
        return value

    def _reward_done(self, td: TensorDictBase) -> tuple[Tensor, Tensor, Tensor]:
        keys = self.tensor_keys
        reward = self._get(td, next_key(keys.reward), "reward")
        done = self._get(td, next_key(keys.done), "done")
        terminated = td.get(next_key(keys.terminated), None)
        if terminated is None:
            terminated = done
        if done.shape != reward.shape:
            done = done.reshape_as(reward)
        if terminated.shape != reward.shape:
            terminated = terminated.reshape_as(reward)
        return reward, done, terminated

    def _gamma(self, td: TensorDictBase, reward: Tensor) -> float | Tensor:
        """``gamma``, raised to the number of steps to the next observation when present."""
        steps = td.get(self.tensor_keys.steps_to_next_obs, None)
        if steps is None:
            return self.gamma
        return torch.as_tensor(self.gamma, device=reward.device, dtype=reward.dtype) ** steps.to(
            reward.dtype
        ).reshape(reward.shape)

    def _td_time_dim(self, td: TensorDictBase) -> int:
        """The time dim among the batch dims of ``td``, as a non-negative index."""
        if td.batch_dims == 0:
            raise ValueError(
                f"{type(self).__name__}: the input has no batch dims; value estimates need at "
                "least a time dim ([*B, T])"
            )
        return td.batch_dims - 1 if self.time_dim is None else self.time_dim % td.batch_dims

    def _tensor_time_dim(self, td: TensorDictBase, reward: Tensor) -> int:
        """The time dim of ``reward``, as a negative index (``-2`` for ``[*B, T, 1]``)."""
        return self._td_time_dim(td) - reward.ndim

    def _call_value_network(
        self,
        td: TensorDictBase,
        params: TensorDictBase | None,
        target_params: TensorDictBase | None,
    ) -> tuple[Tensor, Tensor]:
        """Returns ``(V(s_t), V(s_{t+1}))``, computing them with the network when needed."""
        key = self.tensor_keys.value
        next_td = td.get(NEXT, None)
        if next_td is None:
            raise KeyError(f"{type(self).__name__}: the input has no 'next' entry")
        net = self.value_network
        if net is None:
            return self._get(td, key, "value"), self._get(next_td, key, "next value")
        reuse = self.skip_existing
        value = td.get(key, None) if reuse else None
        next_value = next_td.get(key, None) if reuse else None
        if value is not None and next_value is not None:
            return value, next_value
        in_keys = list(net.in_keys)
        if (
            self.shifted
            and value is None
            and next_value is None
            and (params is None) == (target_params is None)
            and (params is None or params is target_params)
        ):
            dim = self._td_time_dim(td)
            both = torch.cat([td.select(*in_keys), next_td.select(*in_keys)], dim)
            with _maybe_params(net, params):
                both = net(both)
            value, next_value = both.get(key).chunk(2, dim)
            td.set(key, value)
            next_td.set(key, next_value)
            return value, next_value
        if value is None:
            with _maybe_params(net, params):
                value = net(td.select(*in_keys)).get(key)
            td.set(key, value)
        if next_value is None:
            with _maybe_params(net, target_params):
                next_value = net(next_td.select(*in_keys)).get(key)
            next_td.set(key, next_value)
        return value, next_value

    def _grad_context(self) -> AbstractContextManager[Any]:
        # Under an enclosing no_grad (a loss's target computation) a second one costs ~2 us.
        if self.differentiable or not torch.is_grad_enabled():
            return nullcontext()
        return torch.no_grad()

    # ---- API -----------------------------------------------------------------------------

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Compiles the estimator's call in place with :func:`torch.compile`.

        Traced, the recursions over time use the blocked scan (the ``vectorized`` solver: the
        C++ kernel would be a graph break and a loop over time one graph per ``T``), with the
        same results. With the default ``dynamic=None``, the first new batch size recompiles
        once and marks the sizes dynamic; later sizes reuse that graph, except that the scan
        has one more level each time ``T`` passes a power of its block size (8). When
        compilation fails, a ``RuntimeWarning`` naming the estimator is issued once and it runs
        eagerly from then on (:func:`torchrl.maybe_compile`).

        Args:
            *args: none accepted (``torch.compile`` takes keywords only).
            **kwargs: :func:`torch.compile` keyword arguments (``backend``, ``mode``,
                ``dynamic``, ...), plus ``warmup``: eager calls before compiling.

        Examples:
            >>> from tensordict import TensorDict
            >>> from torchrl.modules import ValueOperator
            >>> gae = GAE(gamma=0.9, lmbda=0.95, value_network=ValueOperator(nn.Linear(3, 1)))
            >>> gae.compile(backend="aot_eager")
            >>> for n in (4, 6):
            ...     td = TensorDict({"observation": torch.randn(n, 5, 3), "next": {
            ...         "observation": torch.randn(n, 5, 3), "reward": torch.randn(n, 5, 1),
            ...         "done": torch.zeros(n, 5, 1, dtype=torch.bool),
            ...         "terminated": torch.zeros(n, 5, 1, dtype=torch.bool)}}, batch_size=[n, 5])
            ...     print(gae(td)["advantage"].shape)
            torch.Size([4, 5, 1])
            torch.Size([6, 5, 1])
        """
        compile_in_place(self, args, kwargs)

    def forward(
        self,
        tensordict: TensorDictBase,
        *,
        params: TensorDictBase | None = None,
        target_params: TensorDictBase | None = None,
    ) -> TensorDictBase:
        """Writes the advantage and the value target into ``tensordict``.

        Args:
            tensordict: data ``[*B, T]`` with the value network's inputs (root and ``"next"``),
                ``("next", "reward")`` and the done flags (``[*B, T, 1]``).
            params: parameters to call the value network with on ``s_t`` (TensorDict).
            target_params: parameters for ``s_{t+1}`` (e.g. a target network).

        Returns:
            ``tensordict``, with ``"advantage"`` and ``"value_target"`` (``[*B, T, 1]``) and the
            values the network wrote.
        """
        with self._grad_context():
            value, next_value = self._call_value_network(tensordict, params, target_params)
            adv, target = self._estimate(tensordict, value, next_value)
        tensordict.set(self.tensor_keys.advantage, adv)
        tensordict.set(self.tensor_keys.value_target, target)
        return tensordict

    def value_estimate(
        self,
        tensordict: TensorDictBase,
        target_params: TensorDictBase | None = None,
        next_value: Tensor | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """Returns the value target only (the return estimate).

        Args:
            tensordict: data as in :meth:`forward`.
            target_params: parameters for ``V(s_{t+1})`` when the network computes it.
            next_value: ``V(s_{t+1})`` (``[*B, T, 1]``) when the caller has it already; no
                network call is made then.
            **kwargs: unused.

        Returns:
            The value target, shaped like the reward.
        """
        with self._grad_context():
            value = None
            if next_value is None:
                value, next_value = self._call_value_network(tensordict, None, target_params)
            return self._return_estimate(tensordict, value, next_value)

    def _return_estimate(
        self, td: TensorDictBase, value: Tensor | None, next_value: Tensor
    ) -> Tensor:
        if value is None:
            value = torch.zeros_like(next_value)
        return self._estimate(td, value, next_value)[1]

    def _estimate(
        self, td: TensorDictBase, value: Tensor, next_value: Tensor
    ) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, keys={self.tensor_keys}"


class TD0Estimator(ValueEstimatorBase):
    """One-step TD target ``r + gamma * (1 - terminated) * V(s')`` and its advantage.

    Args:
        gamma: the discount.
        average_rewards: standardize the rewards (zero mean, unit variance) first.
        **options: the options every estimator takes (``value_network``, ``shifted``,
            ``differentiable``, ``skip_existing``, ``device``, ``time_dim``): see
            :class:`ValueEstimatorBase`.

    Examples:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"state_value": torch.zeros(1, 2, 1), "next": {
        ...     "state_value": torch.ones(1, 2, 1), "reward": torch.ones(1, 2, 1),
        ...     "done": torch.tensor([[[False], [True]]]),
        ...     "terminated": torch.tensor([[[False], [True]]])}}, batch_size=[1, 2])
        >>> TD0Estimator(gamma=0.5)(td)["value_target"].squeeze(-1)
        tensor([[1.5000, 1.0000]])
    """

    def __init__(
        self,
        *,
        gamma: float | Tensor,
        average_rewards: bool = False,
        **options: Unpack[EstimatorOptions],
    ) -> None:
        super().__init__(gamma=gamma, **options)
        self.average_rewards = average_rewards

    def _target(self, td: TensorDictBase, next_value: Tensor) -> Tensor:
        keys = self._tensor_keys
        reward = td.get(next_key(keys.reward), None)
        terminated = td.get(next_key(keys.terminated), None)
        if (
            type(self.gamma) is float
            and not self.average_rewards
            and reward is not None
            and terminated is not None
            and reward.shape == terminated.shape == next_value.shape
            and terminated.dtype == torch.bool
            and td.get(keys.steps_to_next_obs, None) is None
        ):
            # The general path below without its read of ``done`` and the checks these
            # conditions make moot (~7 us of the ~12 a loss update spends here).
            return vf._td0_target(self.gamma, next_value, reward, terminated)
        reward, _, terminated = self._reward_done(td)
        reward = standardize(reward) if self.average_rewards else reward
        return vf.td0_return_estimate(self._gamma(td, reward), next_value, reward, terminated)

    def _estimate(
        self, td: TensorDictBase, value: Tensor, next_value: Tensor
    ) -> tuple[Tensor, Tensor]:
        target = self._target(td, next_value)
        return target - value, target

    def _return_estimate(
        self, td: TensorDictBase, value: Tensor | None, next_value: Tensor
    ) -> Tensor:
        # The target alone: no zero values and advantage made to be thrown away.
        return self._target(td, next_value)


class TD1Estimator(ValueEstimatorBase):
    """Monte-Carlo returns bootstrapped at truncations and at the end of the data (TD(1)).

    Args:
        gamma: the discount.
        average_rewards: standardize the rewards first.
        **options: the options every estimator takes (``value_network``, ``shifted``,
            ``differentiable``, ``skip_existing``, ``device``, ``time_dim``): see
            :class:`ValueEstimatorBase`.

    Examples:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"state_value": torch.zeros(1, 3, 1), "next": {
        ...     "state_value": torch.zeros(1, 3, 1), "reward": torch.ones(1, 3, 1),
        ...     "done": torch.zeros(1, 3, 1, dtype=torch.bool),
        ...     "terminated": torch.zeros(1, 3, 1, dtype=torch.bool)}}, batch_size=[1, 3])
        >>> TD1Estimator(gamma=0.5)(td)["value_target"].squeeze(-1)
        tensor([[1.7500, 1.5000, 1.0000]])
    """

    def __init__(
        self,
        *,
        gamma: float | Tensor,
        average_rewards: bool = False,
        **options: Unpack[EstimatorOptions],
    ) -> None:
        super().__init__(gamma=gamma, **options)
        self.average_rewards = average_rewards

    def _estimate(
        self, td: TensorDictBase, value: Tensor, next_value: Tensor
    ) -> tuple[Tensor, Tensor]:
        reward, done, terminated = self._reward_done(td)
        reward = standardize(reward) if self.average_rewards else reward
        target = vf.td1_return_estimate(
            self._gamma(td, reward),
            next_value,
            reward,
            done,
            terminated,
            time_dim=self._tensor_time_dim(td, reward),
        )
        return target - value, target


class TDLambdaEstimator(ValueEstimatorBase):
    """TD(lambda) returns: the lambda-weighted mixture of the n-step returns.

    Args:
        gamma: the discount.
        lmbda: lambda, in ``[0, 1]``.
        average_rewards: standardize the rewards first.
        vectorized: solve the recursion with O(log T) batched ops (for GPUs) instead of the
            C++/loop path.
        **options: the options every estimator takes (``value_network``, ``shifted``,
            ``differentiable``, ``skip_existing``, ``device``, ``time_dim``): see
            :class:`ValueEstimatorBase`.

    Examples:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"state_value": torch.zeros(1, 2, 1), "next": {
        ...     "state_value": torch.full((1, 2, 1), 2.0), "reward": torch.ones(1, 2, 1),
        ...     "done": torch.zeros(1, 2, 1, dtype=torch.bool),
        ...     "terminated": torch.zeros(1, 2, 1, dtype=torch.bool)}}, batch_size=[1, 2])
        >>> TDLambdaEstimator(gamma=0.5, lmbda=0.5)(td)["value_target"].squeeze(-1)
        tensor([[2., 2.]])
    """

    def __init__(
        self,
        *,
        gamma: float | Tensor,
        lmbda: float | Tensor,
        average_rewards: bool = False,
        vectorized: bool = False,
        **options: Unpack[EstimatorOptions],
    ) -> None:
        super().__init__(gamma=gamma, **options)
        self.lmbda = lmbda
        self.average_rewards = average_rewards
        self.vectorized = vectorized

    def _estimate(
        self, td: TensorDictBase, value: Tensor, next_value: Tensor
    ) -> tuple[Tensor, Tensor]:
        reward, done, terminated = self._reward_done(td)
        reward = standardize(reward) if self.average_rewards else reward
        target = vf.td_lambda_return_estimate(
            self._gamma(td, reward),
            self.lmbda,
            next_value,
            reward,
            done,
            terminated,
            time_dim=self._tensor_time_dim(td, reward),
            vectorized=self.vectorized,
        )
        return target - value, target


class GAE(ValueEstimatorBase):
    """Generalized advantage estimation (Schulman et al., 2016).

    Args:
        gamma: the discount.
        lmbda: GAE's lambda, in ``[0, 1]``.
        average_gae: standardize the advantage (zero mean, unit standard deviation).
        vectorized: use the O(log T) blocked solver (for GPUs) instead of the C++/loop path.
        **options: the options every estimator takes (``value_network``, ``shifted``,
            ``differentiable``, ``skip_existing``, ``device``, ``time_dim``): see
            :class:`ValueEstimatorBase`.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.modules import ValueOperator
        >>> critic = ValueOperator(nn.Linear(3, 1))
        >>> td = TensorDict({"observation": torch.randn(4, 10, 3), "next": {
        ...     "observation": torch.randn(4, 10, 3), "reward": torch.randn(4, 10, 1),
        ...     "done": torch.zeros(4, 10, 1, dtype=torch.bool),
        ...     "terminated": torch.zeros(4, 10, 1, dtype=torch.bool)}}, batch_size=[4, 10])
        >>> td = GAE(gamma=0.99, lmbda=0.95, value_network=critic)(td)
        >>> td["advantage"].shape, td["value_target"].shape
        (torch.Size([4, 10, 1]), torch.Size([4, 10, 1]))
    """

    def __init__(
        self,
        *,
        gamma: float | Tensor,
        lmbda: float | Tensor,
        average_gae: bool = False,
        vectorized: bool = False,
        **options: Unpack[EstimatorOptions],
    ) -> None:
        super().__init__(gamma=gamma, **options)
        self.lmbda = lmbda
        self.average_gae = average_gae
        self.vectorized = vectorized

    def _estimate(
        self, td: TensorDictBase, value: Tensor, next_value: Tensor
    ) -> tuple[Tensor, Tensor]:
        reward, done, terminated = self._reward_done(td)
        adv, target = vf.generalized_advantage_estimate(
            self._gamma(td, reward),
            self.lmbda,
            value,
            next_value,
            reward,
            done,
            terminated,
            time_dim=self._tensor_time_dim(td, reward),
            vectorized=self.vectorized,
        )
        if self.average_gae:
            adv = standardize(adv)
        return adv, target

    def value_estimate(
        self,
        tensordict: TensorDictBase,
        target_params: TensorDictBase | None = None,
        next_value: Tensor | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """Returns the GAE value target ``advantage + V(s_t)``.

        Args:
            tensordict: data as in :meth:`forward`.
            target_params: parameters for ``V(s_{t+1})``.
            next_value: ``V(s_{t+1})`` when already known (``V(s_t)`` is then read or computed).
            **kwargs: unused.

        Returns:
            The value target, shaped like the reward.
        """
        with self._grad_context():
            value, computed_next = self._call_value_network(tensordict, None, target_params)
            if next_value is None:
                next_value = computed_next
            return self._estimate(tensordict, value, next_value)[1]


class VTrace(ValueEstimatorBase):
    """V-trace off-policy targets and advantages (Espeholt et al., 2018).

    The behaviour policy's log-probabilities are read at ``"action_log_prob"`` (or the paper-era
    ``"sample_log_prob"`` when the data has only that); the learned
    policy's are computed with ``actor_network`` on the stored actions.

    Args:
        gamma: the discount.
        actor_network: a probabilistic actor (``get_dist(td)``) for the learned policy.
        rho_thresh: clip of the importance weights in the TD errors.
        c_thresh: clip of the importance weights in the trace.
        average_adv: standardize the advantage.
        **options: the options every estimator takes (``value_network``, ``shifted``,
            ``differentiable``, ``skip_existing``, ``device``, ``time_dim``): see
            :class:`ValueEstimatorBase`.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules import ProbabilisticActor, OneHotCategorical
        >>> actor = ProbabilisticActor(TensorDictModule(nn.Linear(3, 2), ["observation"],
        ...     ["logits"]), in_keys=["logits"], distribution_class=OneHotCategorical)
        >>> td = TensorDict({"observation": torch.randn(1, 5, 3),
        ...     "action": torch.nn.functional.one_hot(torch.randint(2, (1, 5)), 2),
        ...     "action_log_prob": torch.full((1, 5), -0.7), "state_value": torch.zeros(1, 5, 1),
        ...     "next": {"state_value": torch.zeros(1, 5, 1), "reward": torch.ones(1, 5, 1),
        ...     "done": torch.zeros(1, 5, 1, dtype=torch.bool),
        ...     "terminated": torch.zeros(1, 5, 1, dtype=torch.bool)}}, batch_size=[1, 5])
        >>> VTrace(gamma=0.9, actor_network=actor)(td)["advantage"].shape
        torch.Size([1, 5, 1])
    """

    actor_network: ProbabilisticTensorDictSequential

    def __init__(
        self,
        *,
        gamma: float | Tensor,
        actor_network: ProbabilisticTensorDictSequential,
        rho_thresh: float | Tensor = 1.0,
        c_thresh: float | Tensor = 1.0,
        average_adv: bool = False,
        **options: Unpack[EstimatorOptions],
    ) -> None:
        super().__init__(gamma=gamma, **options)
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                "VTrace: actor_network must be a probabilistic actor with get_dist(), got "
                f"{type(actor_network).__name__}"
            )
        self.actor_network = actor_network
        self.rho_thresh = rho_thresh
        self.c_thresh = c_thresh
        self.average_adv = average_adv
        self._action_keys = list(getattr(actor_network, "dist_sample_keys", None) or ["action"])

    def _estimate(
        self, td: TensorDictBase, value: Tensor, next_value: Tensor
    ) -> tuple[Tensor, Tensor]:
        reward, done, terminated = self._reward_done(td)
        key = self.tensor_keys.sample_log_prob
        legacy = paper_era_log_prob_key(key)
        if td.get(key, None) is None and legacy is not None and td.get(legacy, None) is not None:
            key = legacy  # data collected with the paper-era name
        log_mu = self._get(td, key, "behaviour log-probability")
        with torch.no_grad():
            dist = self.actor_network.get_dist(td.copy())
            log_pi = dist.log_prob(td.get(self._action_keys[0]))
        log_mu = log_mu.reshape(reward.shape)
        log_pi = log_pi.reshape(reward.shape)
        adv, target = vf.vtrace_advantage_estimate(
            self._gamma(td, reward),
            log_pi,
            log_mu,
            value,
            next_value,
            reward,
            done,
            terminated,
            rho_thresh=self.rho_thresh,
            c_thresh=self.c_thresh,
            time_dim=self._tensor_time_dim(td, reward),
        )
        if self.average_adv:
            adv = standardize(adv)
        return adv, target

    def _return_estimate(
        self, td: TensorDictBase, value: Tensor | None, next_value: Tensor
    ) -> Tensor:
        if value is None:
            value = self._get(td, self.tensor_keys.value, "value")
        return self._estimate(td, value, next_value)[1]


def standardize(x: Tensor, exclude_dims: tuple[int, ...] = ()) -> Tensor:
    """``(x - mean) / std`` over every dim but ``exclude_dims`` (std floored at 1e-6).

    Used to normalise advantages (``average_gae=True``, PPO's ``normalize_advantage``).

    Args:
        x: the tensor, any shape.
        exclude_dims: dims kept apart (e.g. the agent dim); by default, all elements together.

    Returns:
        The standardized tensor, shaped like ``x`` (unchanged when it has fewer than 2 elements).

    Examples:
        >>> standardize(torch.tensor([1.0, 3.0]))
        tensor([-0.7071,  0.7071])
    """
    if x.numel() < 2:
        return x
    if not exclude_dims:
        return (x - x.mean()) / x.std().clamp_min(1e-6)
    dims = tuple(d for d in range(x.ndim) if d not in {e % x.ndim for e in exclude_dims})
    mean = x.mean(dims, keepdim=True)
    std = x.std(dims, keepdim=True).clamp_min(1e-6)
    return (x - mean) / std
