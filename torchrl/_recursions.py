"""Backward recursions over time: the machinery behind value estimates and reward-to-go.

Argument checks, the solvers of the backward recursion ``y_t = x_t + c_t * y_{t+1}`` (a torch loop
over time, a blocked scan, and the torch-free C++ kernel of ``csrc/value.cpp``), and the drivers
that :mod:`torchrl.objectives.value.functional` and the replay-buffer transform
:class:`~torchrl.envs.transforms.Reward2GoTransform` share. It sits at the bottom layer so that
both can use it; the public API is in :mod:`torchrl.objectives.value.functional`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, TypeGuard

import torch
import torch.nn.functional as nnf
from torch import Tensor

from torchrl._utils import warn_once

# The compiled kernels are optional: without them the torch loop takes over (see
# kernel_usable, which announces it once). Tests and benchmarks set ``_C = None`` here to
# exercise that path.
_C: Any
try:
    import torchrl._C as _compiled
except ImportError as _err:
    _C = None
    _C_IMPORT_ERROR: ImportError | None = _err
else:
    _C = _compiled
    _C_IMPORT_ERROR = None

Discount = float | Tensor

# Modes of the C++ kernel (csrc/value.cpp).
GAE_MODE, TD_LAMBDA_MODE, DISCOUNTED_SUM_MODE = 0, 1, 2

# Steps per block of the vectorized solver (see solve_rows); 8 measured fastest on CPU.
VEC_BLOCK = 8


# --------------------------------------------------------------------------------------------
# Argument handling
# --------------------------------------------------------------------------------------------


class Layout:
    """The reward's shape viewed as ``[N, T, F]`` (batch, time, features)."""

    __slots__ = ("shape", "n", "t", "f")

    def __init__(self, fn: str, reward: Tensor, time_dim: int) -> None:
        if not isinstance(reward, Tensor):
            raise TypeError(f"{fn}: `reward` must be a torch.Tensor, got {type(reward).__name__}")
        ndim = reward.ndim
        if ndim == 0 or not -ndim <= time_dim < ndim:
            raise ValueError(
                f"{fn}: time_dim={time_dim} is out of range for `reward` of shape "
                f"{tuple(reward.shape)}; inputs are laid out [*B, T, *F] with time at time_dim"
            )
        dim = time_dim % ndim
        self.shape = reward.shape
        self.n = math.prod(reward.shape[:dim])
        self.t = reward.shape[dim]
        self.f = math.prod(reward.shape[dim + 1 :])

    def ntf(self, x: Tensor) -> Tensor:
        return x.reshape(self.n, self.t, self.f)

    def back(self, x: Tensor) -> Tensor:
        return x.reshape(self.shape)


def check_tensors(fn: str, reward: Tensor, **tensors: Tensor | None) -> None:
    for name, value in tensors.items():
        if value is None:
            continue
        if not isinstance(value, Tensor):
            raise TypeError(f"{fn}: `{name}` must be a torch.Tensor, got {type(value).__name__}")
        if value.shape != reward.shape:
            raise ValueError(
                f"{fn}: `{name}` has shape {tuple(value.shape)} but `reward` has shape "
                f"{tuple(reward.shape)}; all inputs must share one [*B, T, *F] shape"
            )


def as_flag(value: Tensor) -> Tensor:
    return value if value.dtype == torch.bool else value != 0


def as_discount(fn: str, name: str, value: Discount, shape: torch.Size) -> Discount:
    """Returns a float, a one-element tensor, or a tensor expanded to ``shape``."""
    if isinstance(value, Tensor):
        if value.numel() == 1:
            return value.reshape(())
        try:
            expanded = torch.broadcast_shapes(value.shape, shape)
        except RuntimeError:
            expanded = None
        if expanded != shape:
            raise ValueError(
                f"{fn}: `{name}` of shape {tuple(value.shape)} does not broadcast to the "
                f"reward's shape {tuple(shape)}; pass a number or a per-step tensor"
            )
        return value.expand(shape)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{fn}: `{name}` must be a number or a tensor, got {type(value).__name__}")
    return float(value)


def is_varying(value: Discount) -> TypeGuard[Tensor]:
    return isinstance(value, Tensor) and value.ndim > 0


def kernel_usable(reward: Tensor, floats: Sequence[Tensor], discounts: Sequence[Discount]) -> bool:
    """Whether the C++ kernel can take these inputs (CPU, no autograd, one float dtype)."""
    tensors = [*floats, *(d for d in discounts if isinstance(d, Tensor))]
    if reward.dtype not in (torch.float32, torch.float64):
        return False
    if any(t.device.type != "cpu" for t in tensors):
        return False
    if any(t.dtype != reward.dtype for t in floats):
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    if _C is None or not hasattr(_C, "value_recurrence"):
        reason = _C_IMPORT_ERROR or "it predates the value kernels"
        warn_once(
            f"torchrl._C cannot be used ({reason}); value estimates fall back to a slower torch "
            "loop over time. Rebuild it with `python setup.py build_ext --inplace`."
        )
        return False
    return True


def as_numpy(x: Tensor, layout: Layout, dtype: torch.dtype | None = None):  # -> np.ndarray
    x = layout.ntf(x.detach())
    if dtype is not None:
        x = x.to(dtype)
    return x.contiguous().numpy()


def np_discount(value: Discount, layout: Layout, dtype: torch.dtype):  # float | np.ndarray
    if not isinstance(value, Tensor):
        return value
    if value.ndim == 0:
        return float(value)
    return as_numpy(value, layout, dtype)


# --------------------------------------------------------------------------------------------
# Solvers of y_t = x_t + c_t * y_{t+1} (y_T = 0) on [N, T, F] tensors
# --------------------------------------------------------------------------------------------


def solve_loop(x: Tensor, c: Tensor) -> Tensor:
    """One step at a time backwards, each step vectorized over the batch."""
    steps = x.shape[1]
    # Time-major copies make every step one contiguous op (twice as fast as strided columns).
    xt = x.transpose(0, 1).contiguous()
    ct = c.transpose(0, 1).contiguous()
    if torch.is_grad_enabled() and (x.requires_grad or c.requires_grad):
        ys = [xt[-1]]
        for t in range(steps - 2, -1, -1):
            ys.append(torch.addcmul(xt[t], ct[t], ys[-1]))
        return torch.stack(ys[::-1], 1)
    y = torch.empty_like(xt)
    y[-1] = xt[-1]
    for t in range(steps - 2, -1, -1):
        torch.addcmul(xt[t], ct[t], y[t + 1], out=y[t])
    return y.transpose(0, 1)


def solve_rows(x: Tensor, c: Tensor) -> Tensor:
    """Solves ``[L, T]`` rows with a blocked scan: no loop over ``T``.

    The rows are cut into blocks of ``VEC_BLOCK`` steps, all solved side by side (a fixed loop
    over the position inside the block, each step one op over every block of every row). Each
    block's first value and the product of its ``c`` (its "carry") form a ``T / VEC_BLOCK`` long
    recursion of the same kind, solved recursively; the block starts then flow back in with one
    multiply-add. O(numel) work and memory, O(VEC_BLOCK * log(T)) tensor ops.
    """
    rows, steps = x.shape
    size = VEC_BLOCK
    blocks = -(-steps // size)
    pad = blocks * size - steps
    if pad:
        # Padded steps come after the last real one, with x = 0: they add nothing.
        x = nnf.pad(x, (0, pad))
        c = nnf.pad(c, (0, pad))
    # Position-in-block first, so that each step below reads contiguous memory.
    xb = x.reshape(rows, blocks, size).permute(2, 0, 1).contiguous()
    cb = c.reshape(rows, blocks, size).permute(2, 0, 1).contiguous()
    ys = [xb[-1]]
    carries = [cb[-1]]
    for j in range(size - 2, -1, -1):
        ys.append(torch.addcmul(xb[j], cb[j], ys[-1]))
        carries.append(cb[j] * carries[-1])
    if blocks > 1:
        starts = solve_rows(ys[-1], carries[-1])
        next_start = nnf.pad(starts[:, 1:], (0, 1))
        ys = [torch.addcmul(y, carry, next_start) for y, carry in zip(ys, carries)]
    y = torch.stack(ys[::-1], -1)
    return y.reshape(rows, blocks * size)[:, :steps]


def solve_vec(x: Tensor, c: Tensor) -> Tensor:
    n, steps, f = x.shape
    rows_x = x.transpose(1, 2).reshape(n * f, steps)
    rows_c = c.transpose(1, 2).reshape(n * f, steps)
    return solve_rows(rows_x, rows_c).reshape(n, f, steps).transpose(1, 2)


def solve(x: Tensor, c: Tensor, vectorized: bool) -> Tensor:
    # Off CPU a Python loop costs a kernel launch per step: the blocked solver wins there.
    if vectorized or x.device.type != "cpu":
        return solve_vec(x, c)
    return solve_loop(x, c)


def stops(done: Tensor, terminated: Tensor) -> Tensor:
    """Where the recursion stops: episode ends, terminations and the last step of each row."""
    stop = done | terminated
    stop[:, -1] = True
    return stop


# --------------------------------------------------------------------------------------------
# Shared drivers
# --------------------------------------------------------------------------------------------


def recursion(
    fn: str,
    mode: int,
    gamma: Discount,
    lmbda: Discount,
    state_value: Tensor | None,
    next_state_value: Tensor | None,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None,
    time_dim: int,
    vectorized: bool,
) -> tuple[Tensor, Tensor | None]:
    """Runs one of the kernel's recursions; returns ``(y, y + state_value or None)``."""
    layout = Layout(fn, reward, time_dim)
    check_tensors(
        fn,
        reward,
        state_value=state_value,
        next_state_value=next_state_value,
        done=done,
        terminated=terminated,
    )
    gamma = as_discount(fn, "gamma", gamma, reward.shape)
    lmbda = as_discount(fn, "lmbda", lmbda, reward.shape)
    done = as_flag(done)
    terminated = None if terminated is None else as_flag(terminated)
    floats = [t for t in (reward, state_value, next_state_value) if t is not None]
    if layout.n * layout.t * layout.f == 0:
        empty = torch.empty_like(reward)
        return empty, (empty.clone() if mode == GAE_MODE else None)

    if not vectorized and kernel_usable(reward, floats, (gamma, lmbda)):
        dtype = reward.dtype
        out = torch.empty(layout.n, layout.t, layout.f, dtype=dtype)
        target = torch.empty_like(out) if mode == GAE_MODE else None
        _C.value_recurrence(
            mode,
            as_numpy(reward, layout),
            None if state_value is None else as_numpy(state_value, layout),
            None if next_state_value is None else as_numpy(next_state_value, layout),
            as_numpy(done, layout),
            None if terminated is None else as_numpy(terminated, layout),
            np_discount(gamma, layout, dtype),
            np_discount(lmbda, layout, dtype),
            out.numpy(),
            None if target is None else target.numpy(),
        )
        return layout.back(out), (None if target is None else layout.back(target))

    r = layout.ntf(reward)
    d = layout.ntf(done)
    term = d if terminated is None else layout.ntf(terminated)
    g = layout.ntf(gamma) if is_varying(gamma) else gamma
    lam = layout.ntf(lmbda) if is_varying(lmbda) else lmbda
    stop = stops(d, term)
    zero = torch.zeros((), dtype=r.dtype, device=r.device)
    if mode == DISCOUNTED_SUM_MODE:
        c = torch.where(stop, zero, torch.as_tensor(g, dtype=r.dtype, device=r.device))
        x = r
    else:
        assert next_state_value is not None
        nv = layout.ntf(next_state_value)
        c = torch.where(stop, zero, torch.as_tensor(g * lam, dtype=r.dtype, device=r.device))
        x = r + torch.where(term, zero, g * nv)
        if mode == GAE_MODE:
            assert state_value is not None
            x = x - layout.ntf(state_value)
        else:
            x = x - c * nv
    c = c.expand_as(x)
    y = solve(x, c, vectorized)
    if mode != GAE_MODE:
        return layout.back(y), None
    assert state_value is not None
    return layout.back(y), layout.back(y + layout.ntf(state_value))


def td_lambda_fixed_discount(
    fn: str,
    gamma: Discount,
    lmbda: Discount,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None,
    time_dim: int,
) -> Tensor:
    """TD(lambda) returns where each start step's gamma and lambda hold for its whole future.

    ``G_t = sum_{k=t..e} (g_t l_t)^(k-t) (r_k + g_t (1 - l_t) v'_k) + (g_t l_t)^(e-t) g_t l_t v'_e``
    with ``e`` the end of ``t``'s trajectory and ``v'`` zeroed on terminated steps. Built as a
    ``[T, T]`` matrix per row: O(numel * T) memory.
    """
    layout = Layout(fn, reward, time_dim)
    check_tensors(fn, reward, next_state_value=next_state_value, done=done, terminated=terminated)
    gamma = as_discount(fn, "gamma", gamma, reward.shape)
    lmbda = as_discount(fn, "lmbda", lmbda, reward.shape)
    done = as_flag(done)
    terminated = done if terminated is None else as_flag(terminated)
    steps = layout.t
    if layout.n * steps * layout.f == 0:
        return torch.empty_like(reward)

    def rows(x: Tensor) -> Tensor:  # [N, T, F] -> [N * F, T]
        return layout.ntf(x).transpose(1, 2).reshape(-1, steps)

    dtype, device = reward.dtype, reward.device
    r = rows(reward)
    term = rows(terminated)
    stop = rows(done) | term
    stop[:, -1] = True
    g = rows(gamma) if is_varying(gamma) else torch.as_tensor(gamma, dtype=dtype, device=device)
    lam = rows(lmbda) if is_varying(lmbda) else torch.as_tensor(lmbda, dtype=dtype, device=device)
    g = g.expand_as(r)
    lam = lam.expand_as(r)
    nv = torch.where(term, torch.zeros((), dtype=dtype, device=device), rows(next_state_value))
    # Steps [t, k] share a trajectory when no stop lies in [t, k - 1].
    stops_before = torch.cumsum(stop, -1) - stop.long()
    idx = torch.arange(steps, device=device)
    ahead = idx.unsqueeze(0) - idx.unsqueeze(1)  # k - t
    same = (ahead >= 0) & (stops_before.unsqueeze(-1) == stops_before.unsqueeze(-2))
    weights = torch.pow((g * lam).unsqueeze(-1), ahead.clamp(min=0).to(dtype)) * same
    ends = weights * stop.unsqueeze(-2)
    out = (
        (weights @ r.unsqueeze(-1)).squeeze(-1)
        + g * (1 - lam) * (weights @ nv.unsqueeze(-1)).squeeze(-1)
        + g * lam * (ends @ nv.unsqueeze(-1)).squeeze(-1)
    )
    return layout.back(out.reshape(layout.n, layout.f, steps).transpose(1, 2))


def td_lambda(
    fn: str,
    gamma: Discount,
    lmbda: Discount,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None,
    rolling_gamma: bool | None,
    time_dim: int,
    vectorized: bool,
) -> Tensor:
    if rolling_gamma is False and (is_varying_arg(gamma) or is_varying_arg(lmbda)):
        return td_lambda_fixed_discount(
            fn, gamma, lmbda, next_state_value, reward, done, terminated, time_dim
        )
    return recursion(
        fn,
        TD_LAMBDA_MODE,
        gamma,
        lmbda,
        None,
        next_state_value,
        reward,
        done,
        terminated,
        time_dim,
        vectorized,
    )[0]


def is_varying_arg(value: Discount) -> TypeGuard[Tensor]:
    return isinstance(value, Tensor) and value.numel() > 1


def td_lambda_advantage(
    fn: str,
    gamma: Discount,
    lmbda: Discount,
    state_value: Tensor,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None,
    rolling_gamma: bool | None,
    time_dim: int,
    vectorized: bool,
) -> Tensor:
    """The TD(1)/TD(lambda) advantage wrappers' shared body: the return minus ``state_value``."""
    check_tensors(fn, reward, state_value=state_value)
    ret = td_lambda(
        fn,
        gamma,
        lmbda,
        next_state_value,
        reward,
        done,
        terminated,
        rolling_gamma,
        time_dim,
        vectorized,
    )
    return ret - state_value


def solve_discounted_sum(x: Tensor, c: Tensor, stop: Tensor) -> Tensor:
    """``y_t = x_t + c_t * y_{t+1}`` on [N, T, F]; ``c`` must already be 0 where ``stop``."""
    if kernel_usable(x, [x, c], ()):
        layout = Layout("vtrace_advantage_estimate", x, -2)
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        _C.value_recurrence(
            DISCOUNTED_SUM_MODE,
            as_numpy(x, layout),
            None,
            None,
            as_numpy(stop, layout),
            None,
            as_numpy(c, layout),
            1.0,
            out.numpy(),
            None,
        )
        return out
    return solve(x, c.expand_as(x), vectorized=False)


def reward_to_go(fn: str, reward: Tensor, done: Tensor, gamma: Discount, time_dim: int) -> Tensor:
    """``G_t = r_t + gamma_t * G_{t+1}``, restarted after every ``done`` (no bootstrap).

    ``fn`` names the caller in error messages. See
    :func:`torchrl.objectives.value.functional.reward2go` for the arguments.
    """
    return recursion(
        fn,
        DISCOUNTED_SUM_MODE,
        gamma,
        1.0,
        None,
        None,
        reward,
        done,
        None,
        time_dim,
        vectorized=False,
    )[0]
