"""Value estimates against plain Python loops written from the published definitions.

The references below never use the backward recursion of the implementation: GAE is an explicit
sum of discounted TD errors, TD(lambda) is the lambda-weighted mixture of n-step returns, V-trace is
the sum of the IMPALA paper. They work on one time row of Python floats.
"""

from __future__ import annotations

import math

import pytest
import torch

import torchrl._recursions as recursions
import torchrl._utils
from torchrl.objectives.value import functional as vf

# ------------------------------------------------------------------------------------------------
# Scalar references on one row (lists of floats / bools)
# ------------------------------------------------------------------------------------------------


def _end(t, done, term):
    """Index of the last step of the trajectory that contains step t."""
    steps = len(done)
    k = t
    while k < steps - 1 and not (done[k] or term[k]):
        k += 1
    return k


def _boot(k, nv, term):
    return 0.0 if term[k] else nv[k]


def ref_gae(g, lam, v, nv, r, done, term):
    adv = []
    for t in range(len(r)):
        e = _end(t, done, term)
        total, weight = 0.0, 1.0
        for k in range(t, e + 1):
            delta = r[k] + g[k] * _boot(k, nv, term) - v[k]
            total += weight * delta
            weight *= g[k] * lam[k]
        adv.append(total)
    return adv, [a + b for a, b in zip(adv, v)]


def _n_step(t, n, g, nv, r, term):
    """n-step return from t, bootstrapped at step t + n - 1 (rolling per-step discounts)."""
    total, disc = 0.0, 1.0
    for k in range(t, t + n):
        total += disc * r[k]
        disc *= g[k]
    return total + disc * _boot(t + n - 1, nv, term)


def ref_td_lambda(g, lam, nv, r, done, term):
    out = []
    for t in range(len(r)):
        horizon = _end(t, done, term) - t + 1
        total, mass = 0.0, 1.0  # mass: product of the lambdas passed so far
        for n in range(1, horizon):
            total += mass * (1 - lam[t + n - 1]) * _n_step(t, n, g, nv, r, term)
            mass *= lam[t + n - 1]
        out.append(total + mass * _n_step(t, horizon, g, nv, r, term))
    return out


def ref_td_lambda_fixed(g, lam, nv, r, done, term):
    """rolling_gamma=False: the start step's gamma and lambda hold for its whole future."""
    out = []
    for t in range(len(r)):
        steps = len(r)
        out.append(ref_td_lambda([g[t]] * steps, [lam[t]] * steps, nv, r, done, term)[t])
    return out


def ref_reward2go(g, r, done):
    out = []
    for t in range(len(r)):
        e = _end(t, done, done)
        total, disc = 0.0, 1.0
        for k in range(t, e + 1):
            total += disc * r[k]
            disc *= g[k]
        out.append(total)
    return out


def ref_vtrace(g, log_pi, log_mu, v, nv, r, done, term, rho_bar, c_bar):
    steps = len(r)
    ratio = [math.exp(a - b) for a, b in zip(log_pi, log_mu)]
    rho = [min(rho_bar, x) for x in ratio]
    cs = [min(c_bar, x) for x in ratio]
    delta = [rho[k] * (r[k] + g[k] * _boot(k, nv, term) - v[k]) for k in range(steps)]
    vs = []
    for s in range(steps):
        e = _end(s, done, term)
        total, weight = v[s], 1.0
        for k in range(s, e + 1):
            total += weight * delta[k]
            weight *= g[k] * cs[k]
        vs.append(total)
    adv = []
    for s in range(steps):
        e = _end(s, done, term)
        v_next = nv[s] + (vs[s + 1] - v[s + 1] if s < e else 0.0)
        adv.append(rho[s] * (r[s] + (0.0 if term[s] else g[s] * v_next) - v[s]))
    return adv, vs


# ------------------------------------------------------------------------------------------------
# Running the references over any [*B, T, *F] layout
# ------------------------------------------------------------------------------------------------


def _rows(x, time_dim):
    x = x.movedim(time_dim, -1)
    return x.reshape(-1, x.shape[-1]).tolist(), x.shape


def _unrows(rows, moved_shape, time_dim, dtype):
    out = torch.tensor(rows, dtype=dtype).reshape(moved_shape)
    return out.movedim(-1, time_dim)


def apply_ref(ref, time_dim, *tensors, outputs=1, **consts):
    """Runs a row reference over every time row of same-shaped tensors."""
    rows = []
    moved = None
    for x in tensors:
        r, moved = _rows(x, time_dim)
        rows.append(r)
    results = [ref(*(row[i] for row in rows), **consts) for i in range(len(rows[0]))]
    if outputs == 1:
        return _unrows(results, moved, time_dim, torch.float64)
    return tuple(
        _unrows([res[j] for res in results], moved, time_dim, torch.float64) for j in range(outputs)
    )


def make_data(shape, time_dim=-2, seed=0, varying=False, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)

    def rand(lo=-1.0, hi=1.0):
        return torch.rand(shape, generator=gen, dtype=dtype) * (hi - lo) + lo

    done = torch.rand(shape, generator=gen) < 0.25
    # Half the episode ends are terminations, the rest truncations; a few terminated flags come
    # without done (treated as done).
    terminated = done & (torch.rand(shape, generator=gen) < 0.5)
    terminated |= torch.rand(shape, generator=gen) < 0.03
    data = {
        "state_value": rand(),
        "next_state_value": rand(),
        "reward": rand(),
        "done": done,
        "terminated": terminated,
        "gamma": rand(0.5, 1.0) if varying else 0.9,
        "lmbda": rand(0.3, 1.0) if varying else 0.8,
    }
    return data


def _full(x, like):
    return x if isinstance(x, torch.Tensor) else torch.full_like(like, x)


SHAPES = [
    ((9, 1), -2),
    ((3, 11, 1), -2),
    ((2, 3, 7, 1), -2),
    ((4, 10), -1),
    ((3, 8, 2), -2),
    ((6, 2, 3), 0),
]


def _use_backend(name, monkeypatch):
    if name == "cpp" and not hasattr(recursions._C, "value_recurrence"):
        pytest.skip("torchrl._C is not built")
    if name == "torch":
        monkeypatch.setattr(recursions, "_C", None)
        monkeypatch.setattr(torchrl._utils, "_warned", set())
    return name


@pytest.fixture(params=["cpp", "torch", "vec"])
def backend(request, monkeypatch):
    """The C++ kernel, the torch loop (extension hidden), or the vec_* variant."""
    return _use_backend(request.param, monkeypatch)


@pytest.fixture(params=["cpp", "torch"])
def kernel_backend(request, monkeypatch):
    """For the functions without a vec_* variant."""
    return _use_backend(request.param, monkeypatch)


def _gae(backend):
    return (
        vf.vec_generalized_advantage_estimate
        if backend == "vec"
        else vf.generalized_advantage_estimate
    )


def _tdl(backend):
    return vf.vec_td_lambda_return_estimate if backend == "vec" else vf.td_lambda_return_estimate


def _td1(backend):
    return vf.vec_td1_return_estimate if backend == "vec" else vf.td1_return_estimate


pytestmark = pytest.mark.filterwarnings("ignore:torchrl._C cannot be used")


# ------------------------------------------------------------------------------------------------
# Must show 1: every function against its reference
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,time_dim", SHAPES)
@pytest.mark.parametrize("varying", [False, True])
def test_gae(backend, shape, time_dim, varying):
    d = make_data(shape, time_dim, varying=varying)
    adv, target = _gae(backend)(
        d["gamma"],
        d["lmbda"],
        d["state_value"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
        time_dim=time_dim,
    )
    g, lam = _full(d["gamma"], d["reward"]), _full(d["lmbda"], d["reward"])
    ref_adv, ref_target = apply_ref(
        ref_gae,
        time_dim,
        g,
        lam,
        d["state_value"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
        outputs=2,
    )
    assert adv.shape == target.shape == d["reward"].shape
    torch.testing.assert_close(adv, ref_adv, rtol=0, atol=1e-5)
    torch.testing.assert_close(target, ref_target, rtol=0, atol=1e-5)


@pytest.mark.parametrize("shape,time_dim", SHAPES[:3])
def test_gae_terminated_defaults_to_done(backend, shape, time_dim):
    d = make_data(shape, time_dim, seed=1)
    adv, _ = _gae(backend)(
        0.95, 0.9, d["state_value"], d["next_state_value"], d["reward"], d["done"]
    )
    full = torch.full_like(d["reward"], 0.95), torch.full_like(d["reward"], 0.9)
    ref_adv, _ = apply_ref(
        ref_gae,
        time_dim,
        *full,
        d["state_value"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["done"],
        outputs=2,
    )
    torch.testing.assert_close(adv, ref_adv, rtol=0, atol=1e-5)


@pytest.mark.parametrize("shape,time_dim", SHAPES)
@pytest.mark.parametrize("varying", [False, True])
def test_td_lambda(backend, shape, time_dim, varying):
    d = make_data(shape, time_dim, seed=2, varying=varying)
    out = _tdl(backend)(
        d["gamma"],
        d["lmbda"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
        time_dim=time_dim,
    )
    g, lam = _full(d["gamma"], d["reward"]), _full(d["lmbda"], d["reward"])
    ref = apply_ref(
        ref_td_lambda,
        time_dim,
        g,
        lam,
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
    )
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize("shape,time_dim", SHAPES[:4])
def test_td1(backend, shape, time_dim):
    d = make_data(shape, time_dim, seed=3, varying=True)
    out = _td1(backend)(
        d["gamma"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
        time_dim=time_dim,
    )
    ones = torch.ones_like(d["reward"])
    ref = apply_ref(
        ref_td_lambda,
        time_dim,
        d["gamma"],
        ones,
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
    )
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize("vec", [False, True])
@pytest.mark.parametrize("shape,time_dim", SHAPES[1:4])
def test_td_lambda_fixed_gamma(vec, shape, time_dim):
    d = make_data(shape, time_dim, seed=4, varying=True)
    fn = vf.vec_td_lambda_return_estimate if vec else vf.td_lambda_return_estimate
    out = fn(
        d["gamma"],
        d["lmbda"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
        rolling_gamma=False,
        time_dim=time_dim,
    )
    ref = apply_ref(
        ref_td_lambda_fixed,
        time_dim,
        d["gamma"],
        d["lmbda"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
    )
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)
    fn1 = vf.vec_td1_return_estimate if vec else vf.td1_return_estimate
    out1 = fn1(
        d["gamma"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
        rolling_gamma=False,
        time_dim=time_dim,
    )
    ref1 = apply_ref(
        ref_td_lambda_fixed,
        time_dim,
        d["gamma"],
        torch.ones_like(d["reward"]),
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
    )
    torch.testing.assert_close(out1, ref1, rtol=0, atol=1e-5)


def test_rolling_gamma_irrelevant_for_constant_gamma():
    d = make_data((3, 9, 1), seed=5)
    args = (d["next_state_value"], d["reward"], d["done"], d["terminated"])
    rolling = vf.td_lambda_return_estimate(0.9, 0.7, *args, rolling_gamma=True)
    gamma = torch.full_like(d["reward"], 0.9)
    fixed = vf.td_lambda_return_estimate(gamma, 0.7, *args, rolling_gamma=False)
    torch.testing.assert_close(rolling, fixed)


@pytest.mark.parametrize("shape,time_dim", SHAPES[:4])
def test_advantages_are_returns_minus_value(backend, shape, time_dim):
    d = make_data(shape, time_dim, seed=6, varying=True)
    vec = backend == "vec"
    args = (d["state_value"], d["next_state_value"], d["reward"], d["done"], d["terminated"])
    tdl_adv = (vf.vec_td_lambda_advantage_estimate if vec else vf.td_lambda_advantage_estimate)(
        d["gamma"], d["lmbda"], *args, time_dim=time_dim
    )
    ref = apply_ref(
        ref_td_lambda,
        time_dim,
        d["gamma"],
        d["lmbda"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
    )
    torch.testing.assert_close(tdl_adv, ref - d["state_value"], rtol=0, atol=1e-5)
    td1_adv = (vf.vec_td1_advantage_estimate if vec else vf.td1_advantage_estimate)(
        d["gamma"], *args, time_dim=time_dim
    )
    ref1 = apply_ref(
        ref_td_lambda,
        time_dim,
        d["gamma"],
        torch.ones_like(d["reward"]),
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
    )
    torch.testing.assert_close(td1_adv, ref1 - d["state_value"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("varying", [False, True])
def test_td0(varying):
    d = make_data((3, 5, 1), seed=7, varying=varying)
    g = _full(d["gamma"], d["reward"])
    ret = vf.td0_return_estimate(d["gamma"], d["next_state_value"], d["reward"], d["terminated"])
    expected = torch.tensor(
        [
            r + (0.0 if te else gg * nv)
            for r, te, gg, nv in zip(
                d["reward"].flatten().tolist(),
                d["terminated"].flatten().tolist(),
                g.flatten().tolist(),
                d["next_state_value"].flatten().tolist(),
            )
        ],
        dtype=torch.float64,
    ).reshape(d["reward"].shape)
    torch.testing.assert_close(ret, expected, rtol=0, atol=1e-5)
    adv = vf.td0_advantage_estimate(
        d["gamma"],
        d["state_value"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
    )
    torch.testing.assert_close(adv, expected - d["state_value"], rtol=0, atol=1e-5)
    # Legacy keyword: done stands for terminated when terminated is not given.
    legacy = vf.td0_return_estimate(
        d["gamma"], d["next_state_value"], d["reward"], done=d["terminated"]
    )
    torch.testing.assert_close(legacy, expected)
    no_end = vf.td0_return_estimate(d["gamma"], d["next_state_value"], d["reward"])
    torch.testing.assert_close(no_end, d["reward"] + g * d["next_state_value"])


@pytest.mark.parametrize("shape,time_dim", SHAPES)
@pytest.mark.parametrize("varying", [False, True])
def test_vtrace(kernel_backend, shape, time_dim, varying):
    d = make_data(shape, time_dim, seed=8, varying=varying)
    gen = torch.Generator().manual_seed(9)
    log_pi = torch.randn(shape, generator=gen, dtype=torch.float64) * 0.5
    log_mu = torch.randn(shape, generator=gen, dtype=torch.float64) * 0.5
    adv, target = vf.vtrace_advantage_estimate(
        d["gamma"],
        log_pi,
        log_mu,
        d["state_value"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
        rho_thresh=1.2,
        c_thresh=0.9,
        time_dim=time_dim,
    )
    ref_adv, ref_target = apply_ref(
        ref_vtrace,
        time_dim,
        _full(d["gamma"], d["reward"]),
        log_pi,
        log_mu,
        d["state_value"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
        outputs=2,
        rho_bar=1.2,
        c_bar=0.9,
    )
    torch.testing.assert_close(target, ref_target, rtol=0, atol=1e-5)
    torch.testing.assert_close(adv, ref_adv, rtol=0, atol=1e-5)


@pytest.mark.parametrize("shape,time_dim", SHAPES)
@pytest.mark.parametrize("varying", [False, True])
def test_reward2go(kernel_backend, shape, time_dim, varying):
    d = make_data(shape, time_dim, seed=10, varying=varying)
    out = vf.reward2go(d["reward"], d["done"], d["gamma"], time_dim=time_dim)
    ref = apply_ref(ref_reward2go, time_dim, _full(d["gamma"], d["reward"]), d["reward"], d["done"])
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# Backends agree; gradients; long rows
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("varying", [False, True])
def test_cpp_torch_vec_agree_long_rows(monkeypatch, dtype, varying):
    if not hasattr(recursions._C, "value_recurrence"):
        pytest.skip("torchrl._C is not built")
    # T = 700 > 16**2 exercises three levels of the blocked solver; 9 rows leave a partial group
    # of lanes in the C++ kernel.
    d = make_data((9, 700, 1), seed=11, varying=varying, dtype=dtype)
    d["done"] = torch.rand(9, 700, 1) < 0.01
    d["terminated"] = d["done"] & (torch.rand(9, 700, 1) < 0.5)
    args = (
        d["gamma"],
        d["lmbda"],
        d["state_value"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
    )
    cpp = vf.generalized_advantage_estimate(*args)
    cpp_ret = vf.td_lambda_return_estimate(*args[:2], *args[3:])
    vec = vf.vec_generalized_advantage_estimate(*args)
    vec_ret = vf.vec_td_lambda_return_estimate(*args[:2], *args[3:])
    monkeypatch.setattr(recursions, "_C", None)
    loop = vf.generalized_advantage_estimate(*args)
    loop_ret = vf.td_lambda_return_estimate(*args[:2], *args[3:])
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 0, "atol": 1e-9}
    for a, b, c in zip(cpp + (cpp_ret,), loop + (loop_ret,), vec + (vec_ret,)):
        assert a.dtype == b.dtype == c.dtype == dtype
        torch.testing.assert_close(a, b, **tol)
        torch.testing.assert_close(a, c, **tol)


@pytest.mark.parametrize("shape", [(2, 4500, 3), (9, 2100, 1)])
def test_cpp_tiles_and_feature_lanes(monkeypatch, shape):
    """Rows longer than the kernel's time tile (2048), feature lanes, partial lane groups."""
    if not hasattr(recursions._C, "value_recurrence"):
        pytest.skip("torchrl._C is not built")
    d = make_data(shape, seed=17, varying=True)
    args = (
        d["gamma"],
        d["lmbda"],
        d["state_value"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
    )
    cpp = vf.generalized_advantage_estimate(*args)
    cpp_ret = vf.td_lambda_return_estimate(*args[:2], *args[3:])
    cpp_r2g = vf.reward2go(d["reward"], d["done"], d["gamma"])
    monkeypatch.setattr(recursions, "_C", None)
    loop = vf.generalized_advantage_estimate(*args)
    loop_ret = vf.td_lambda_return_estimate(*args[:2], *args[3:])
    loop_r2g = vf.reward2go(d["reward"], d["done"], d["gamma"])
    for a, b in zip((*cpp, cpp_ret, cpp_r2g), (*loop, loop_ret, loop_r2g)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-9)


@pytest.mark.parametrize("vec", [False, True])
def test_gradients_flow(vec):
    d = make_data((2, 6, 1), seed=12, varying=True)
    value = d["state_value"].clone().requires_grad_()
    next_value = d["next_state_value"].clone().requires_grad_()
    gamma = d["gamma"].clone().requires_grad_()
    fn = vf.vec_generalized_advantage_estimate if vec else vf.generalized_advantage_estimate
    adv, target = fn(gamma, d["lmbda"], value, next_value, d["reward"], d["done"], d["terminated"])
    assert adv.requires_grad and target.requires_grad
    (adv.square().sum() + target.sum()).backward()
    for t in (value, next_value, gamma):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0

    def gae_adv(v, nv, g):
        return fn(g, d["lmbda"], v, nv, d["reward"], d["done"], d["terminated"])[0]

    inputs = (
        d["state_value"].clone().requires_grad_(),
        d["next_state_value"].clone().requires_grad_(),
        d["gamma"].clone().requires_grad_(),
    )
    assert torch.autograd.gradcheck(gae_adv, inputs)


def test_gradients_td_lambda_vtrace_agree_across_paths():
    d = make_data((2, 40, 1), seed=13, varying=True)

    def grads(fn, *args):
        nv = d["next_state_value"].clone().requires_grad_()
        out = fn(*args[:2], nv, *args[2:])
        out.pow(2).sum().backward()
        return out.detach(), nv.grad

    args = (d["gamma"], d["lmbda"], d["reward"], d["done"], d["terminated"])
    out_loop, grad_loop = grads(vf.td_lambda_return_estimate, *args)
    out_vec, grad_vec = grads(vf.vec_td_lambda_return_estimate, *args)
    torch.testing.assert_close(out_loop, out_vec)
    torch.testing.assert_close(grad_loop, grad_vec)
    log_pi = torch.zeros(2, 40, 1, dtype=torch.float64, requires_grad=True)
    adv, target = vf.vtrace_advantage_estimate(
        d["gamma"],
        log_pi,
        torch.zeros(2, 40, 1, dtype=torch.float64),
        d["state_value"],
        d["next_state_value"],
        d["reward"],
        d["done"],
        d["terminated"],
        rho_thresh=2.0,
    )
    adv.sum().backward()
    assert log_pi.grad is not None and log_pi.grad.abs().sum() > 0


def test_no_grad_mode_uses_kernel_with_grad_inputs():
    if not hasattr(recursions._C, "value_recurrence"):
        pytest.skip("torchrl._C is not built")
    d = make_data((2, 6, 1), seed=14)
    value = d["state_value"].clone().requires_grad_()
    with torch.no_grad():
        adv, _ = vf.generalized_advantage_estimate(
            0.9, 0.8, value, d["next_state_value"], d["reward"], d["done"]
        )
    assert not adv.requires_grad
    ref, _ = vf.vec_generalized_advantage_estimate(
        0.9, 0.8, d["state_value"], d["next_state_value"], d["reward"], d["done"]
    )
    torch.testing.assert_close(adv, ref)


def test_mixed_dtypes_and_tensor_scalars():
    d = make_data((2, 6, 1), seed=15, dtype=torch.float32)
    args = (d["state_value"], d["next_state_value"], d["reward"], d["done"], d["terminated"])
    plain, _ = vf.generalized_advantage_estimate(0.9, 0.8, *args)
    scalar_tensors, _ = vf.generalized_advantage_estimate(
        torch.tensor(0.9), torch.tensor([0.8]), *args
    )
    torch.testing.assert_close(plain, scalar_tensors)
    # A float64 value with float32 rewards promotes like torch would.
    mixed, _ = vf.generalized_advantage_estimate(0.9, 0.8, args[0].double(), *args[1:])
    assert mixed.dtype == torch.float64
    torch.testing.assert_close(mixed.float(), plain)
    # Integer done flags are accepted.
    ints, _ = vf.generalized_advantage_estimate(
        0.9, 0.8, *args[:3], d["done"].long(), d["terminated"].to(torch.uint8)
    )
    torch.testing.assert_close(ints, plain)


def test_per_step_gamma_broadcasts():
    d = make_data((3, 8, 1), seed=16)
    args = (d["state_value"], d["next_state_value"], d["reward"], d["done"], d["terminated"])
    per_batch = torch.tensor([0.9, 0.8, 0.7], dtype=torch.float64).view(3, 1, 1)
    out, _ = vf.generalized_advantage_estimate(per_batch, 0.8, *args)
    full, _ = vf.generalized_advantage_estimate(per_batch.expand(3, 8, 1).clone(), 0.8, *args)
    torch.testing.assert_close(out, full)
    for b, g in enumerate([0.9, 0.8, 0.7]):
        row, _ = vf.generalized_advantage_estimate(g, 0.8, *(a[b : b + 1] for a in args))
        torch.testing.assert_close(out[b : b + 1], row)


def test_empty_inputs():
    x = torch.zeros(3, 0, 1)
    done = torch.zeros(3, 0, 1, dtype=torch.bool)
    adv, target = vf.generalized_advantage_estimate(0.9, 0.9, x, x, x, done)
    assert adv.shape == target.shape == (3, 0, 1)
    assert vf.reward2go(x, done, 0.9).shape == (3, 0, 1)


# ------------------------------------------------------------------------------------------------
# Errors and the fallback warning
# ------------------------------------------------------------------------------------------------


def test_shape_mismatch_names_argument():
    x = torch.zeros(2, 5, 1)
    done = torch.zeros(2, 5, 1, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"generalized_advantage_estimate: `next_state_value`"):
        vf.generalized_advantage_estimate(0.9, 0.9, x, x[:, :4], x, done)
    with pytest.raises(ValueError, match=r"`done` has shape \(2, 5\)"):
        vf.td_lambda_return_estimate(0.9, 0.9, x, x, done.squeeze(-1))
    with pytest.raises(ValueError, match="time_dim=3 is out of range"):
        vf.reward2go(x, done, 0.9, time_dim=3)
    with pytest.raises(ValueError, match="`gamma` of shape \\(4,\\) does not broadcast"):
        vf.reward2go(x, done, torch.ones(4))
    with pytest.raises(TypeError, match="`lmbda` must be a number or a tensor"):
        vf.td_lambda_return_estimate(0.9, "0.9", x, x, done)
    with pytest.raises(TypeError, match="`state_value` must be a torch.Tensor"):
        vf.generalized_advantage_estimate(0.9, 0.9, [0.0], x, x, done)
    with pytest.raises(ValueError, match="`log_mu` has shape"):
        vf.vtrace_advantage_estimate(0.9, x, x[0], x, x, x, done)


def test_kernel_validates_buffers():
    if not hasattr(recursions._C, "value_recurrence"):
        pytest.skip("torchrl._C is not built")
    r = torch.zeros(2, 3, 1).numpy()
    done = torch.zeros(2, 3, 1, dtype=torch.bool).numpy()
    out = torch.zeros(2, 3, 1).numpy()
    with pytest.raises(ValueError, match="`next_state_value` has shape"):
        recursions._C.value_recurrence(1, r, None, r[:, :2], done, None, 0.9, 0.9, out, None)
    with pytest.raises(ValueError, match="`done` has dtype"):
        recursions._C.value_recurrence(2, r, None, None, r, None, 0.9, 0.9, out, None)
    with pytest.raises(ValueError, match="`out` has dtype float64"):
        recursions._C.value_recurrence(
            2, r, None, None, done, None, 0.9, 0.9, out.astype("f8"), None
        )
    with pytest.raises(ValueError, match="C-contiguous"):
        strided = torch.zeros(2, 6, 1).numpy()[:, ::2]
        recursions._C.value_recurrence(2, r, None, None, done, None, 0.9, 0.9, strided, None)
    with pytest.raises(ValueError, match="mode must be"):
        recursions._C.value_recurrence(5, r, None, None, done, None, 0.9, 0.9, out, None)


def test_missing_extension_warns_once(monkeypatch):
    monkeypatch.setattr(recursions, "_C", None)
    monkeypatch.setattr(torchrl._utils, "_warned", set())
    x = torch.zeros(2, 5, 1)
    done = torch.zeros(2, 5, 1, dtype=torch.bool)
    with pytest.warns(UserWarning, match="torchrl._C cannot be used"):
        vf.reward2go(x, done, 0.9)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vf.reward2go(x, done, 0.9)
