"""Model-predictive control planners (CEM, MPPI) usable as policies.

A planner rolls candidate action sequences through an env (a real one that accepts any batch
size, or a learned model) from the current state, scores them, refines a Gaussian over action
sequences, and returns the first action of the final mean. All candidates run as one batched
rollout of batch ``[*B, num_candidates]``: the env must not be batch-locked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from torchrl._keys import ACTION, ADVANTAGE, DONE, NEXT, REWARD
from torchrl._types import NestedKey, TensorDictModuleLike
from torchrl.modules._spec_utils import module_keys

if TYPE_CHECKING:
    from torchrl.envs.common import EnvBase


class _ActionSequence:
    """A policy that plays ``actions[..., t, *A]`` at its t-th call."""

    def __init__(self, actions: torch.Tensor, time_dim: int, action_key: NestedKey) -> None:
        self.actions = actions
        self.time_dim = time_dim
        self.action_key = action_key
        self.t = 0

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set(self.action_key, self.actions.select(self.time_dim, self.t))
        self.t += 1
        return tensordict


class MPCPlannerBase(TensorDictModuleBase):
    """Base of the planners: holds the env, keys and the batched candidate rollout.

    Args:
        env: the env to plan through; must accept batch ``[*B, num_candidates]``.
        action_key: where the planned action is written.

    Examples:
        Random shooting: the first action of the best of 32 random sequences (unbatched
        states; subclasses write :meth:`planning`):

        >>> import torch
        >>> from torchrl.envs import PendulumEnv
        >>> class RandomShooting(MPCPlannerBase):
        ...     def planning(self, tensordict, horizon=5, n=32):
        ...         mean = torch.zeros(1, horizon, *self._action_shape)
        ...         actions = self._sample(mean, torch.ones_like(mean), n)  # [n, horizon, 1]
        ...         rollout = self._rollout(self._candidates(tensordict, n), actions, horizon)
        ...         best = rollout["next", "reward"].sum(-2).squeeze(-1).argmax()
        ...         return actions[best, 0]
        >>> env = PendulumEnv()
        >>> RandomShooting(env)(env.reset())["action"].shape
        torch.Size([1])
    """

    def __init__(self, env: EnvBase, action_key: NestedKey = ACTION) -> None:
        super().__init__()
        if getattr(env, "batch_locked", True):
            raise ValueError(
                f"{type(self).__name__} rolls out batches of candidates: it needs an env that "
                "accepts any batch size (batch_locked=False), such as a model-based env or "
                f"PendulumEnv; got a batch-locked {type(env).__name__}"
            )
        self.env = env
        self.action_key = action_key
        self.in_keys = module_keys(env.observation_spec.keys(True, True))
        self.out_keys = module_keys([action_key])
        action_spec = env.full_action_spec[action_key]
        self._action_spec = action_spec
        self._action_shape = action_spec.shape[len(env.batch_size) :]

    def _rollout(
        self, tensordict: TensorDictBase, actions: torch.Tensor, horizon: int
    ) -> TensorDictBase:
        """Plays ``actions [*B, N, H, *A]`` from ``tensordict [*B, N]``; returns ``[*B, N, H]``."""
        policy = _ActionSequence(actions, tensordict.ndim, self.action_key)
        return self.env.rollout(
            horizon,
            policy,
            auto_reset=False,
            tensordict=tensordict,
            break_when_any_done=False,
        )

    def _sample(self, mean: torch.Tensor, std: torch.Tensor, n: int) -> torch.Tensor:
        # mean is [*B, 1, H, *A]: draw n candidates along its singleton dim
        shape = list(mean.shape)
        shape[mean.ndim - len(self._action_shape) - 2] = n
        actions = mean + std * torch.randn(shape, dtype=mean.dtype, device=mean.device)
        return self._action_spec.project(actions)

    def _candidates(self, tensordict: TensorDictBase, n: int) -> TensorDictBase:
        return tensordict.unsqueeze(-1).expand(*tensordict.batch_size, n).clone()

    def planning(self, tensordict: TensorDictBase) -> torch.Tensor:
        """Returns the planned action ``[*B, *A]`` for the states in ``tensordict``."""
        raise NotImplementedError

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        with torch.no_grad():
            action = self.planning(tensordict)
        tensordict.set(self.action_key, action)
        return tensordict


def _episode_returns(rollout: TensorDictBase, reward_key: NestedKey, time_dim: int) -> torch.Tensor:
    """Sum of rewards up to each candidate's first done: ``[*B, N, 1]``."""
    reward = rollout.get(reward_key)
    done = rollout.get((NEXT, DONE), None)
    if done is not None:
        # A step counts if no earlier step of the candidate was done (later rewards would come
        # from an automatically reset episode).
        earlier_done = done.cumsum(time_dim) - done.long()
        reward = reward * (earlier_done == 0)
    return reward.sum(time_dim)


class CEMPlanner(MPCPlannerBase):
    """Cross-Entropy-Method planner: refit a Gaussian to the ``top_k`` best action sequences.

    Args:
        env: the env (or model) to plan through, not batch-locked.
        planning_horizon: length of the action sequences.
        optim_steps: refinement iterations.
        num_candidates: sequences sampled per iteration.
        top_k: elite sequences the Gaussian is refit to.
        reward_key: the reward entry of the rollout.
        action_key: the action entry.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> env = PendulumEnv()
        >>> planner = CEMPlanner(env, planning_horizon=5, optim_steps=2, num_candidates=16, top_k=4)
        >>> td = planner(env.reset())
        >>> td["action"].shape
        torch.Size([1])
    """

    def __init__(
        self,
        env: EnvBase,
        planning_horizon: int,
        optim_steps: int,
        num_candidates: int,
        top_k: int,
        reward_key: NestedKey = (NEXT, REWARD),
        action_key: NestedKey = ACTION,
    ) -> None:
        super().__init__(env, action_key)
        if not 0 < top_k <= num_candidates:
            raise ValueError(f"need 0 < top_k <= num_candidates, got {top_k} and {num_candidates}")
        self.planning_horizon = planning_horizon
        self.optim_steps = optim_steps
        self.num_candidates = num_candidates
        self.top_k = top_k
        self.reward_key = reward_key

    def planning(self, tensordict: TensorDictBase) -> torch.Tensor:
        batch = tensordict.batch_size
        cand_dim = len(batch)
        shape = (*batch, 1, self.planning_horizon, *self._action_shape)
        dtype = self._action_spec.dtype or torch.float32
        mean = torch.zeros(shape, dtype=dtype, device=tensordict.device)
        std = torch.ones_like(mean)
        start = self._candidates(tensordict, self.num_candidates)
        for _ in range(self.optim_steps):
            actions = self._sample(mean, std, self.num_candidates)
            rollout = self._rollout(start.clone(), actions, self.planning_horizon)
            returns = _episode_returns(rollout, self.reward_key, cand_dim + 1)  # [*B, N, 1]
            elite = returns.squeeze(-1).topk(self.top_k, dim=cand_dim).indices  # [*B, K]
            index = elite.reshape(*elite.shape, *([1] * (actions.ndim - elite.ndim)))
            best = actions.gather(
                cand_dim, index.expand(*elite.shape, *actions.shape[cand_dim + 1 :])
            )
            mean = best.mean(cand_dim, keepdim=True)
            std = best.std(cand_dim, keepdim=True, correction=0)
        return mean.select(cand_dim, 0).select(cand_dim, 0)


class MPPIPlanner(MPCPlannerBase):
    """Model Predictive Path Integral planner: softmax(advantage / temperature)-weighted refit.

    Each iteration samples ``num_candidates`` sequences, rolls them out, lets
    ``advantage_module`` write ``advantage_key`` into the ``[*B, N, H]`` rollout (e.g. a
    TD(lambda) estimator with a value network), keeps the ``top_k`` candidates by their advantage
    at the first step, and refits mean and std with weights ``softmax(advantage / temperature)``.

    Args:
        env: the env (or model) to plan through, not batch-locked.
        advantage_module: a module writing ``advantage_key`` into a rollout.
        temperature: softmax temperature (smaller: greedier).
        planning_horizon: length of the action sequences.
        optim_steps: refinement iterations.
        num_candidates: sequences sampled per iteration.
        top_k: candidates kept for the refit.
        reward_key: the reward entry of the rollout.
        action_key: the action entry.
        advantage_key: the entry ``advantage_module`` writes.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> def reward_to_go(rollout):  # a stand-in for a value estimator
        ...     r = rollout["next", "reward"]
        ...     return rollout.set("advantage", r.flip(-2).cumsum(-2).flip(-2))
        >>> env = PendulumEnv()
        >>> planner = MPPIPlanner(env, reward_to_go, temperature=1.0, planning_horizon=5,
        ...                       optim_steps=2, num_candidates=16, top_k=4)
        >>> planner(env.reset())["action"].shape
        torch.Size([1])
    """

    def __init__(
        self,
        env: EnvBase,
        advantage_module: TensorDictModuleLike,
        temperature: float,
        planning_horizon: int,
        optim_steps: int,
        num_candidates: int,
        top_k: int,
        reward_key: NestedKey = (NEXT, REWARD),
        action_key: NestedKey = ACTION,
        advantage_key: NestedKey = ADVANTAGE,
    ) -> None:
        super().__init__(env, action_key)
        if not 0 < top_k <= num_candidates:
            raise ValueError(f"need 0 < top_k <= num_candidates, got {top_k} and {num_candidates}")
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.advantage_module = advantage_module
        self.temperature = temperature
        self.planning_horizon = planning_horizon
        self.optim_steps = optim_steps
        self.num_candidates = num_candidates
        self.top_k = top_k
        self.reward_key = reward_key
        self.advantage_key = advantage_key

    def planning(self, tensordict: TensorDictBase) -> torch.Tensor:
        batch = tensordict.batch_size
        cand_dim = len(batch)
        shape = (*batch, 1, self.planning_horizon, *self._action_shape)
        dtype = self._action_spec.dtype or torch.float32
        mean = torch.zeros(shape, dtype=dtype, device=tensordict.device)
        std = torch.ones_like(mean)
        start = self._candidates(tensordict, self.num_candidates)
        for _ in range(self.optim_steps):
            actions = self._sample(mean, std, self.num_candidates)
            rollout = self._rollout(start.clone(), actions, self.planning_horizon)
            out = self.advantage_module(rollout)
            rollout = rollout if out is None else out
            advantage = rollout.get(self.advantage_key, None)
            if advantage is None:
                raise KeyError(f"the advantage module did not write {self.advantage_key!r}")
            first = advantage.select(cand_dim + 1, 0).squeeze(-1)  # [*B, N]
            top = first.topk(self.top_k, dim=cand_dim)
            weights = torch.softmax(top.values / self.temperature, dim=cand_dim)  # [*B, K]
            index = top.indices.reshape(*top.indices.shape, *([1] * (actions.ndim - cand_dim - 1)))
            best = actions.gather(
                cand_dim, index.expand(*top.indices.shape, *actions.shape[cand_dim + 1 :])
            )
            w = weights.reshape(*weights.shape, *([1] * (actions.ndim - cand_dim - 1)))
            mean = (w * best).sum(cand_dim, keepdim=True)
            std = (w * (best - mean).pow(2)).sum(cand_dim, keepdim=True).sqrt()
        return mean.select(cand_dim, 0).select(cand_dim, 0)
