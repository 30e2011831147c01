"""Value and advantage estimates as plain functions on tensors.

Conventions shared by every function in this module:

- **Shapes.** Tensors are laid out ``[*B, T, *F]``: batch dims, time at ``time_dim`` (default
  ``-2``, so rewards and values carry a trailing feature dim, ``[*B, T, 1]``), then feature dims.
  Data without the trailing dim (``[*B, T]``) is passed with ``time_dim=-1``. Every tensor argument
  has the reward's shape; nothing is broadcast except ``gamma``/``lmbda``.
- **Episode ends.** ``done`` ends a trajectory: no recursion crosses it, so several trajectories
  can sit next to each other in one time row. ``terminated`` (defaults to ``done``) also drops the
  bootstrap from ``next_state_value``. A step that is done but not terminated is a truncation: it
  bootstraps from ``next_state_value`` and the recursion stops there. A terminated step counts as
  done. The last step of every row ends the recursion like a truncation (nothing later is known).
- **Discounts.** ``gamma`` and ``lmbda`` are numbers, one-element tensors, or tensors that broadcast
  to the reward's shape (per-step values). With per-step values the discount of step ``t`` weighs
  what comes after ``t``: ``G_t = r_t + gamma_t * (...)``.
- **Backends.** The recursive estimates on CPU tensors that need no gradient run in a torch-free
  C++ kernel (``torchrl._C``, one pass over the data). With autograd, on other devices, with other
  dtypes, or when the extension is missing (announced once), a torch loop over time, vectorized
  over the batch, gives the same answers; on non-CPU devices the blocked scan below replaces the
  loop. ``vectorized=True`` (or the ``vec_*`` name of a function) always solves the recursion with
  a blocked scan: O(log(T)) batched ops instead of ``T``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as nnf
from torch import Tensor

from torchrl._recursions import (
    GAE_MODE,
    Discount,
    Layout,
    as_discount,
    as_flag,
    check_tensors,
    is_varying,
    recursion,
    reward_to_go,
    solve,
    solve_discounted_sum,
    stops,
    td_lambda,
    td_lambda_advantage,
)

__all__ = [
    "generalized_advantage_estimate",
    "reward2go",
    "td0_advantage_estimate",
    "td0_return_estimate",
    "td1_advantage_estimate",
    "td1_return_estimate",
    "td_lambda_advantage_estimate",
    "td_lambda_return_estimate",
    "vec_generalized_advantage_estimate",
    "vec_td1_advantage_estimate",
    "vec_td1_return_estimate",
    "vec_td_lambda_advantage_estimate",
    "vec_td_lambda_return_estimate",
    "vtrace_advantage_estimate",
]


def _vectorized(vectorized: bool) -> bool:
    """``vectorized``, or True while ``torch.compile`` traces the caller.

    Traced, the C++ kernel is a graph break (and a round trip through numpy) and the loop over
    time puts one node per step in the graph (a new graph for every new ``T``); the blocked scan
    traces into a few ops whose count grows with ``log(T)`` only, and gives the same answers.
    """
    return vectorized or torch.compiler.is_compiling()


# --------------------------------------------------------------------------------------------
# TD(0)
# --------------------------------------------------------------------------------------------


def td0_return_estimate(
    gamma: Discount,
    next_state_value: Tensor,
    reward: Tensor,
    terminated: Tensor | None = None,
    *,
    done: Tensor | None = None,
) -> Tensor:
    """One-step bootstrapped return ``r_t + gamma_t * (1 - terminated_t) * V(s_{t+1})``.

    Args:
        gamma: discount, a number or a per-step tensor broadcastable to ``reward``.
        next_state_value: ``V(s_{t+1})``, shaped like ``reward`` (``[*B, T, *F]``).
        reward: rewards, ``[*B, T, *F]`` (any shape: the estimate is per element).
        terminated: bool, shaped like ``reward``; no bootstrap where True. Defaults to ``done``,
            or to no termination when both are None.
        done: kept for compatibility with older call sites: used as ``terminated`` when that is
            not given. Episode boundaries do not matter for a one-step estimate.

    Returns:
        The TD(0) return, shaped like ``reward``.

    Examples:
        >>> reward = torch.tensor([[1.0], [1.0]])
        >>> next_value = torch.tensor([[2.0], [2.0]])
        >>> terminated = torch.tensor([[False], [True]])
        >>> td0_return_estimate(0.5, next_value, reward, terminated)
        tensor([[2.],
                [1.]])
    """
    fn = "td0_return_estimate"
    if not isinstance(reward, Tensor):
        raise TypeError(f"{fn}: `reward` must be a torch.Tensor, got {type(reward).__name__}")
    if terminated is None:
        terminated = done
    check_tensors(fn, reward, next_state_value=next_state_value, terminated=terminated, done=done)
    gamma = as_discount(fn, "gamma", gamma, reward.shape)
    return _td0_target(gamma, next_state_value, reward, terminated)


def _td0_target(
    gamma: float | Tensor, next_state_value: Tensor, reward: Tensor, terminated: Tensor | None
) -> Tensor:
    """:func:`td0_return_estimate`'s arithmetic on checked inputs (``gamma`` a float or a tensor
    broadcastable to ``reward``); the estimator calls it directly when its checks are moot."""
    if isinstance(gamma, float):
        # One fused op for r + gamma * V (what the per-update losses call most).
        target = torch.add(reward, next_state_value, alpha=gamma)
    else:
        target = reward + gamma * next_state_value
    if terminated is None:
        return target
    # A select, not a product: a non-finite V after a terminal step does not leak.
    return torch.where(as_flag(terminated), reward, target)


def td0_advantage_estimate(
    gamma: Discount,
    state_value: Tensor,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
) -> Tensor:
    """One-step advantage ``r_t + gamma_t * (1 - terminated_t) * V(s_{t+1}) - V(s_t)``.

    Args:
        gamma: discount, a number or a per-step tensor broadcastable to ``reward``.
        state_value: ``V(s_t)``, shaped like ``reward`` (``[*B, T, *F]``).
        next_state_value: ``V(s_{t+1})``, shaped like ``reward``.
        reward: rewards, ``[*B, T, *F]``.
        done: bool end-of-trajectory flags, shaped like ``reward``.
        terminated: bool, shaped like ``reward``; no bootstrap where True. Defaults to ``done``.

    Returns:
        The TD(0) advantage, shaped like ``reward``.

    Examples:
        >>> value = torch.tensor([[1.0], [1.0]])
        >>> next_value = torch.tensor([[2.0], [2.0]])
        >>> reward = torch.tensor([[1.0], [1.0]])
        >>> done = torch.tensor([[False], [True]])
        >>> td0_advantage_estimate(0.5, value, next_value, reward, done)
        tensor([[1.],
                [0.]])
    """
    fn = "td0_advantage_estimate"
    check_tensors(fn, reward, state_value=state_value, done=done)
    if terminated is None:
        terminated = done
    return td0_return_estimate(gamma, next_state_value, reward, terminated) - state_value


# --------------------------------------------------------------------------------------------
# TD(1) and TD(lambda)
# --------------------------------------------------------------------------------------------


def td_lambda_return_estimate(
    gamma: Discount,
    lmbda: Discount,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
    rolling_gamma: bool | None = None,
    *,
    time_dim: int = -2,
    vectorized: bool = False,
) -> Tensor:
    """TD(lambda) return, computed by one backward recursion over time.

    ``G_t = r_t + gamma_t * (1 - terminated_t) * V(s_{t+1})`` at the end of a trajectory, else
    ``G_t = r_t + gamma_t * ((1 - lmbda_t) * V(s_{t+1}) + lmbda_t * G_{t+1})``.

    Args:
        gamma: discount, a number or a per-step tensor broadcastable to ``reward``.
        lmbda: the lambda of TD(lambda), a number or a per-step tensor.
        next_state_value: ``V(s_{t+1})``, shaped like ``reward`` (``[*B, T, *F]``).
        reward: rewards, ``[*B, T, *F]`` with time at ``time_dim``.
        done: bool end-of-trajectory flags, shaped like ``reward``.
        terminated: bool, shaped like ``reward``; no bootstrap where True. Defaults to ``done``.
        rolling_gamma: with per-step ``gamma``/``lmbda``: True (the default) applies each step's
            values to that step only (``G_1 = r_1 + g_1 (r_2 + g_2 (...))``); False applies the
            start step's values to its whole future (``G_1 = r_1 + g_1 r_2 + g_1**2 r_3 ...``),
            which costs O(numel * T) memory.
        time_dim: the time dimension. Defaults to ``-2``.
        vectorized: solve the recursion with a blocked scan (O(log(T)) batched ops, meant for
            GPUs where a loop over time is launch-bound) instead of the C++ kernel or the loop.
            Same results. Defaults to False.

    Returns:
        The TD(lambda) return, shaped like ``reward``.

    Examples:
        >>> reward = torch.ones(1, 4, 1)
        >>> next_value = torch.full((1, 4, 1), 2.0)
        >>> done = torch.tensor([[[False], [True], [False], [False]]])
        >>> td_lambda_return_estimate(0.5, 0.5, next_value, reward, done).squeeze(-1)
        tensor([[1.7500, 1.0000, 2.0000, 2.0000]])
    """
    return td_lambda(
        "vec_td_lambda_return_estimate" if vectorized else "td_lambda_return_estimate",
        gamma,
        lmbda,
        next_state_value,
        reward,
        done,
        terminated,
        rolling_gamma,
        time_dim,
        _vectorized(vectorized),
    )


def td1_return_estimate(
    gamma: Discount,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
    rolling_gamma: bool | None = None,
    *,
    time_dim: int = -2,
    vectorized: bool = False,
) -> Tensor:
    """TD(1) (Monte-Carlo, bootstrapped at truncations and at the end of the row) return.

    ``G_t = r_t + gamma_t * G_{t+1}`` inside a trajectory; at its last step
    ``G_t = r_t + gamma_t * (1 - terminated_t) * V(s_{t+1})``.

    Args:
        gamma: discount, a number or a per-step tensor broadcastable to ``reward``.
        next_state_value: ``V(s_{t+1})``, shaped like ``reward`` (``[*B, T, *F]``).
        reward: rewards, ``[*B, T, *F]`` with time at ``time_dim``.
        done: bool end-of-trajectory flags, shaped like ``reward``.
        terminated: bool, shaped like ``reward``; no bootstrap where True. Defaults to ``done``.
        rolling_gamma: see :func:`td_lambda_return_estimate`.
        time_dim: the time dimension. Defaults to ``-2``.
        vectorized: use the blocked scan (see :func:`td_lambda_return_estimate`).

    Returns:
        The TD(1) return, shaped like ``reward``.

    Examples:
        >>> reward = torch.ones(1, 3, 1)
        >>> next_value = torch.full((1, 3, 1), 10.0)
        >>> done = torch.tensor([[[False], [False], [True]]])
        >>> truncated_only = torch.zeros(1, 3, 1, dtype=torch.bool)
        >>> td1_return_estimate(0.5, next_value, reward, done).squeeze(-1)
        tensor([[1.7500, 1.5000, 1.0000]])
        >>> td1_return_estimate(0.5, next_value, reward, done, truncated_only).squeeze(-1)
        tensor([[3., 4., 6.]])
    """
    return td_lambda(
        "vec_td1_return_estimate" if vectorized else "td1_return_estimate",
        gamma,
        1.0,
        next_state_value,
        reward,
        done,
        terminated,
        rolling_gamma,
        time_dim,
        _vectorized(vectorized),
    )


def td1_advantage_estimate(
    gamma: Discount,
    state_value: Tensor,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
    rolling_gamma: bool | None = None,
    time_dim: int = -2,
    *,
    vectorized: bool = False,
) -> Tensor:
    """TD(1) advantage: :func:`td1_return_estimate` minus ``state_value``.

    Args:
        gamma: discount, a number or a per-step tensor broadcastable to ``reward``.
        state_value: ``V(s_t)``, shaped like ``reward`` (``[*B, T, *F]``).
        next_state_value: ``V(s_{t+1})``, shaped like ``reward``.
        reward: rewards, ``[*B, T, *F]`` with time at ``time_dim``.
        done: bool end-of-trajectory flags, shaped like ``reward``.
        terminated: bool, shaped like ``reward``; no bootstrap where True. Defaults to ``done``.
        rolling_gamma: see :func:`td_lambda_return_estimate`.
        time_dim: the time dimension. Defaults to ``-2``.
        vectorized: use the blocked scan (see :func:`td_lambda_return_estimate`).

    Returns:
        The TD(1) advantage, shaped like ``reward``.

    Examples:
        >>> value = torch.ones(1, 3, 1)
        >>> reward = torch.ones(1, 3, 1)
        >>> done = torch.tensor([[[False], [False], [True]]])
        >>> td1_advantage_estimate(0.5, value, value, reward, done).squeeze(-1)
        tensor([[0.7500, 0.5000, 0.0000]])
    """
    return td_lambda_advantage(
        "vec_td1_advantage_estimate" if vectorized else "td1_advantage_estimate",
        gamma,
        1.0,
        state_value,
        next_state_value,
        reward,
        done,
        terminated,
        rolling_gamma,
        time_dim,
        _vectorized(vectorized),
    )


def td_lambda_advantage_estimate(
    gamma: Discount,
    lmbda: Discount,
    state_value: Tensor,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
    rolling_gamma: bool | None = None,
    time_dim: int = -2,
    *,
    vectorized: bool = False,
) -> Tensor:
    """TD(lambda) advantage: :func:`td_lambda_return_estimate` minus ``state_value``.

    Args:
        gamma: discount, a number or a per-step tensor broadcastable to ``reward``.
        lmbda: the lambda of TD(lambda), a number or a per-step tensor.
        state_value: ``V(s_t)``, shaped like ``reward`` (``[*B, T, *F]``).
        next_state_value: ``V(s_{t+1})``, shaped like ``reward``.
        reward: rewards, ``[*B, T, *F]`` with time at ``time_dim``.
        done: bool end-of-trajectory flags, shaped like ``reward``.
        terminated: bool, shaped like ``reward``; no bootstrap where True. Defaults to ``done``.
        rolling_gamma: see :func:`td_lambda_return_estimate`.
        time_dim: the time dimension. Defaults to ``-2``.
        vectorized: use the blocked scan (see :func:`td_lambda_return_estimate`).

    Returns:
        The TD(lambda) advantage, shaped like ``reward``.

    Examples:
        >>> value = torch.ones(1, 3, 1)
        >>> reward = torch.ones(1, 3, 1)
        >>> done = torch.tensor([[[False], [False], [True]]])
        >>> td_lambda_advantage_estimate(0.5, 0.5, value, value, reward, done).squeeze(-1)
        tensor([[0.6250, 0.5000, 0.0000]])
    """
    return td_lambda_advantage(
        "vec_td_lambda_advantage_estimate" if vectorized else "td_lambda_advantage_estimate",
        gamma,
        lmbda,
        state_value,
        next_state_value,
        reward,
        done,
        terminated,
        rolling_gamma,
        time_dim,
        _vectorized(vectorized),
    )


# --------------------------------------------------------------------------------------------
# GAE
# --------------------------------------------------------------------------------------------


def generalized_advantage_estimate(
    gamma: Discount,
    lmbda: Discount,
    state_value: Tensor,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
    *,
    time_dim: int = -2,
    vectorized: bool = False,
) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimate (Schulman et al., 2016) and its value target.

    ``delta_t = r_t + gamma_t * (1 - terminated_t) * V(s_{t+1}) - V(s_t)`` and
    ``A_t = delta_t + gamma_t * lmbda_t * A_{t+1}``, the sum stopping at the end of each
    trajectory. One pass over the data in C++ on CPU (see the module notes for the other paths).

    Args:
        gamma: discount, a number or a per-step tensor broadcastable to ``reward``.
        lmbda: GAE's lambda, a number or a per-step tensor.
        state_value: ``V(s_t)``, shaped like ``reward`` (``[*B, T, *F]``).
        next_state_value: ``V(s_{t+1})``, shaped like ``reward``.
        reward: rewards, ``[*B, T, *F]`` with time at ``time_dim``.
        done: bool end-of-trajectory flags, shaped like ``reward``.
        terminated: bool, shaped like ``reward``; no bootstrap where True. Defaults to ``done``.
        time_dim: the time dimension. Defaults to ``-2``.
        vectorized: use the blocked scan (see :func:`td_lambda_return_estimate`).

    Returns:
        ``(advantage, value_target)``, both shaped like ``reward``, with
        ``value_target = advantage + state_value``.

    Examples:
        >>> value = torch.zeros(1, 3, 1)
        >>> next_value = torch.ones(1, 3, 1)
        >>> reward = torch.ones(1, 3, 1)
        >>> done = torch.tensor([[[False], [True], [False]]])
        >>> adv, target = generalized_advantage_estimate(0.5, 0.5, value, next_value, reward, done)
        >>> adv.squeeze(-1)
        tensor([[1.7500, 1.0000, 1.5000]])
    """
    adv, target = recursion(
        "vec_generalized_advantage_estimate" if vectorized else "generalized_advantage_estimate",
        GAE_MODE,
        gamma,
        lmbda,
        state_value,
        next_state_value,
        reward,
        done,
        terminated,
        time_dim,
        _vectorized(vectorized),
    )
    assert target is not None
    return adv, target


# --------------------------------------------------------------------------------------------
# The vec_* names: the functions above with ``vectorized=True``
# --------------------------------------------------------------------------------------------


def vec_td_lambda_return_estimate(
    gamma: Discount,
    lmbda: Discount,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
    rolling_gamma: bool | None = None,
    *,
    time_dim: int = -2,
) -> Tensor:
    """:func:`td_lambda_return_estimate` with ``vectorized=True`` (same arguments and results).

    Examples:
        >>> done = torch.tensor([[[False], [True], [False], [False]]])
        >>> args = (torch.full((1, 4, 1), 2.0), torch.ones(1, 4, 1), done)
        >>> vec_td_lambda_return_estimate(0.5, 0.5, *args).squeeze(-1)
        tensor([[1.7500, 1.0000, 2.0000, 2.0000]])
    """
    return td_lambda_return_estimate(
        gamma,
        lmbda,
        next_state_value,
        reward,
        done,
        terminated,
        rolling_gamma,
        time_dim=time_dim,
        vectorized=True,
    )


def vec_td1_return_estimate(
    gamma: Discount,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
    rolling_gamma: bool | None = None,
    time_dim: int = -2,
) -> Tensor:
    """:func:`td1_return_estimate` with ``vectorized=True`` (same arguments and results).

    Examples:
        >>> done = torch.tensor([[[False], [False], [True]]])
        >>> args = (torch.full((1, 3, 1), 10.0), torch.ones(1, 3, 1), done)
        >>> vec_td1_return_estimate(0.5, *args).squeeze(-1)
        tensor([[1.7500, 1.5000, 1.0000]])
    """
    return td1_return_estimate(
        gamma,
        next_state_value,
        reward,
        done,
        terminated,
        rolling_gamma,
        time_dim=time_dim,
        vectorized=True,
    )


def vec_td1_advantage_estimate(
    gamma: Discount,
    state_value: Tensor,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
    rolling_gamma: bool | None = None,
    time_dim: int = -2,
) -> Tensor:
    """:func:`td1_advantage_estimate` with ``vectorized=True`` (same arguments and results).

    Examples:
        >>> value = torch.ones(1, 3, 1)
        >>> done = torch.tensor([[[False], [False], [True]]])
        >>> vec_td1_advantage_estimate(0.5, value, value, value, done).squeeze(-1)
        tensor([[0.7500, 0.5000, 0.0000]])
    """
    return td1_advantage_estimate(
        gamma,
        state_value,
        next_state_value,
        reward,
        done,
        terminated,
        rolling_gamma,
        time_dim,
        vectorized=True,
    )


def vec_td_lambda_advantage_estimate(
    gamma: Discount,
    lmbda: Discount,
    state_value: Tensor,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
    rolling_gamma: bool | None = None,
    time_dim: int = -2,
) -> Tensor:
    """:func:`td_lambda_advantage_estimate` with ``vectorized=True`` (same arguments, results).

    Examples:
        >>> value = torch.ones(1, 3, 1)
        >>> done = torch.tensor([[[False], [False], [True]]])
        >>> vec_td_lambda_advantage_estimate(0.5, 0.5, value, value, value, done).squeeze(-1)
        tensor([[0.6250, 0.5000, 0.0000]])
    """
    return td_lambda_advantage_estimate(
        gamma,
        lmbda,
        state_value,
        next_state_value,
        reward,
        done,
        terminated,
        rolling_gamma,
        time_dim,
        vectorized=True,
    )


def vec_generalized_advantage_estimate(
    gamma: Discount,
    lmbda: Discount,
    state_value: Tensor,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
    *,
    time_dim: int = -2,
) -> tuple[Tensor, Tensor]:
    """:func:`generalized_advantage_estimate` with ``vectorized=True`` (same arguments, results).

    Examples:
        >>> value, next_value = torch.zeros(1, 3, 1), torch.ones(1, 3, 1)
        >>> done = torch.tensor([[[False], [True], [False]]])
        >>> adv, _ = vec_generalized_advantage_estimate(0.5, 0.5, value, next_value, next_value, done)
        >>> adv.squeeze(-1)
        tensor([[1.7500, 1.0000, 1.5000]])
    """
    return generalized_advantage_estimate(
        gamma,
        lmbda,
        state_value,
        next_state_value,
        reward,
        done,
        terminated,
        time_dim=time_dim,
        vectorized=True,
    )


# --------------------------------------------------------------------------------------------
# V-trace and reward-to-go
# --------------------------------------------------------------------------------------------


def vtrace_advantage_estimate(
    gamma: Discount,
    log_pi: Tensor,
    log_mu: Tensor,
    state_value: Tensor,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
    rho_thresh: float | Tensor = 1.0,
    c_thresh: float | Tensor = 1.0,
    time_dim: int = -2,
) -> tuple[Tensor, Tensor]:
    """V-trace off-policy value targets and advantages (Espeholt et al., 2018, IMPALA).

    With ``ratio = exp(log_pi - log_mu)``, ``rho = min(rho_thresh, ratio)``,
    ``c = min(c_thresh, ratio)`` and
    ``delta_t = rho_t * (r_t + gamma_t * (1 - terminated_t) * V(s_{t+1}) - V(s_t))``, the target is
    ``v_t = V(s_t) + delta_t + gamma_t * c_t * (v_{t+1} - V(s_{t+1}))`` inside a trajectory, and
    the advantage ``rho_t * (r_t + gamma_t * (1 - terminated_t) * v'_t - V(s_t))`` where ``v'_t`` is
    ``next_state_value`` plus the next step's correction ``v_{t+1} - V(s_{t+1})`` (none after the
    end of a trajectory).

    Args:
        gamma: discount, a number or a per-step tensor broadcastable to ``reward``.
        log_pi: log-probability of the actions under the learned policy, shaped like ``reward``.
        log_mu: log-probability under the behaviour policy, shaped like ``reward``.
        state_value: ``V(s_t)``, shaped like ``reward`` (``[*B, T, *F]``).
        next_state_value: ``V(s_{t+1})``, shaped like ``reward``.
        reward: rewards, ``[*B, T, *F]`` with time at ``time_dim``.
        done: bool end-of-trajectory flags, shaped like ``reward``.
        terminated: bool, shaped like ``reward``; no bootstrap where True. Defaults to ``done``.
        rho_thresh: clip of the importance weights in ``delta``. Defaults to 1.
        c_thresh: clip of the importance weights in the trace. Defaults to 1.
        time_dim: the time dimension. Defaults to ``-2``.

    Returns:
        ``(advantage, value_target)``, both shaped like ``reward``.

    Examples:
        >>> value = torch.zeros(1, 3, 1)
        >>> reward = torch.ones(1, 3, 1)
        >>> log_p = torch.zeros(1, 3, 1)
        >>> done = torch.zeros(1, 3, 1, dtype=torch.bool)
        >>> adv, target = vtrace_advantage_estimate(0.5, log_p, log_p, value, value, reward, done)
        >>> target.squeeze(-1)
        tensor([[1.7500, 1.5000, 1.0000]])
        >>> adv.squeeze(-1)
        tensor([[1.7500, 1.5000, 1.0000]])
    """
    fn = "vtrace_advantage_estimate"
    layout = Layout(fn, reward, time_dim)
    check_tensors(
        fn,
        reward,
        log_pi=log_pi,
        log_mu=log_mu,
        state_value=state_value,
        next_state_value=next_state_value,
        done=done,
        terminated=terminated,
    )
    gamma = as_discount(fn, "gamma", gamma, reward.shape)
    if layout.n * layout.t * layout.f == 0:
        return torch.empty_like(reward), torch.empty_like(reward)
    d = layout.ntf(as_flag(done))
    term = d if terminated is None else layout.ntf(as_flag(terminated))
    g = layout.ntf(gamma) if is_varying(gamma) else gamma
    r = layout.ntf(reward)
    v = layout.ntf(state_value)
    nv = layout.ntf(next_state_value)
    ratio = (layout.ntf(log_pi) - layout.ntf(log_mu)).exp()
    rho = torch.clamp(ratio, max=rho_thresh)
    trace = torch.clamp(ratio, max=c_thresh)
    zero = torch.zeros((), dtype=r.dtype, device=r.device)
    stop = stops(d, term)
    boot = torch.where(term, zero, g * nv)
    delta = rho * (r + boot - v)
    coef = torch.where(stop, zero, g * trace)
    if torch.compiler.is_compiling():
        # The kernel would be a graph break: the blocked scan traces (same answers).
        correction = solve(delta, coef.expand_as(delta), vectorized=True)
    else:
        correction = solve_discounted_sum(delta, coef, stop)
    target = v + correction
    next_correction = torch.where(stop, zero, nnf.pad(correction[:, 1:], (0, 0, 0, 1)))
    next_target = nv + next_correction
    adv = rho * (r + torch.where(term, zero, g * next_target) - v)
    return layout.back(adv), layout.back(target)


def reward2go(
    reward: Tensor,
    done: Tensor,
    gamma: Discount = 1.0,
    *,
    time_dim: int = -2,
) -> Tensor:
    """Discounted reward-to-go ``G_t = r_t + gamma_t * G_{t+1}``, restarted at every ``done``.

    No bootstrap: the sum covers the rewards left in the trajectory (or in the row, for a
    trajectory cut by the end of the data).

    Args:
        reward: rewards, ``[*B, T, *F]`` with time at ``time_dim``.
        done: bool end-of-trajectory flags, shaped like ``reward``.
        gamma: discount, a number or a per-step tensor broadcastable to ``reward``. Defaults to 1.
        time_dim: the time dimension. Defaults to ``-2``.

    Returns:
        The reward-to-go, shaped like ``reward``.

    Examples:
        >>> reward = torch.ones(1, 6)
        >>> done = torch.tensor([[False, False, True, False, False, True]])
        >>> reward2go(reward, done, 0.5, time_dim=-1)
        tensor([[1.7500, 1.5000, 1.0000, 1.7500, 1.5000, 1.0000]])
    """
    return reward_to_go("reward2go", reward, done, gamma, time_dim)
