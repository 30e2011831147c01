"""The loss updates of ``loss_cases.py`` written in plain PyTorch: the floor a library can reach.

Each class holds the same networks as the library cases (2x64 MLPs with ``tanh``, batch 256),
plain tensors for the batch, and computes the same loss terms with the same maths, written the
way a single-file script (CleanRL style) would: no TensorDict, no torchrl import. ``update()``
clears the gradients, computes the loss terms, runs one backward and the same target update
(``torch._foreach_lerp_``, as a careful script would write Polyak averaging); with
``optimizer=True`` it also takes an Adam step (``benchmarks/compile.py`` times that form).
``losses()`` returns the terms (for the tests that compare them with the library's).

Where a term needs the critic's output without a gradient to the critic (SAC's and TD3's actor
losses), the critic is called with detached weights, as the library does, so one backward
serves all terms.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

BATCH, OBS, ACT, N_ACTIONS, CELLS = 256, 8, 2, 4, 64
GAMMA = 0.99
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_LOG2 = math.log(2.0)
_EPS = torch.finfo(torch.float32).eps
# NormalParamExtractor's default scale map: softplus(x + b) + 0.01 with softplus(b) = 0.99.
_SCALE_MIN = 0.01
_SCALE_BIAS = math.log(math.expm1(1.0 - _SCALE_MIN))


class PlainMLP(nn.Sequential):
    """``Linear -> tanh -> Linear -> tanh -> Linear`` with 64 cells (the library's ``MLP``)."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__(
            nn.Linear(n_in, CELLS),
            nn.Tanh(),
            nn.Linear(CELLS, CELLS),
            nn.Tanh(),
            nn.Linear(CELLS, n_out),
        )

    def frozen(self, x: Tensor) -> Tensor:
        """The same function with detached weights: gradients reach ``x`` only."""
        for layer in self:
            if isinstance(layer, nn.Linear):
                x = F.linear(x, layer.weight.detach(), layer.bias.detach())
            else:
                x = layer(x)
        return x


def _target(net: nn.Module) -> nn.Module:
    target = copy.deepcopy(net)
    target.requires_grad_(False)
    return target


def _batch(continuous: bool) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(0)
    done = torch.zeros(BATCH, 1, dtype=torch.bool, device="cpu")
    done[::17] = True
    data = {
        "obs": torch.randn(BATCH, OBS, generator=g, device="cpu"),
        "next_obs": torch.randn(BATCH, OBS, generator=g, device="cpu"),
        "reward": torch.randn(BATCH, 1, generator=g, device="cpu"),
        "terminated": done,
    }
    if continuous:
        data["action"] = torch.rand(BATCH, ACT, generator=g, device="cpu") * 1.8 - 0.9
    else:
        data["action"] = torch.randint(N_ACTIONS, (BATCH, 1), generator=g, device="cpu")
    return _on_default_device(data)


def _on_default_device(data: dict[str, Tensor]) -> dict[str, Tensor]:
    """``data`` moved to the default device: the batches are drawn on the CPU with a seeded
    generator, so a case built in a ``with torch.device("cuda")`` block holds the same numbers."""
    device = torch.get_default_device()
    return {key: value.to(device) for key, value in data.items()}


def _loc_scale(out: Tensor) -> tuple[Tensor, Tensor]:
    loc, raw = out.chunk(2, -1)
    return loc, (F.softplus(raw + _SCALE_BIAS) + _SCALE_MIN).clamp_min(1e-4)


def _tanh_normal_rsample(loc: Tensor, scale: Tensor) -> tuple[Tensor, Tensor]:
    """A reparameterised ``tanh(N(loc, scale))`` draw in ``(-1, 1)`` and its log-density ``[B]``."""
    noise = torch.randn_like(loc)
    x = loc + scale * noise
    action = torch.tanh(x).clamp(-1 + _EPS, 1 - _EPS)
    # log(1 - tanh(x)^2) written without cancellation.
    log_det = 2 * (_LOG2 - x - F.softplus(-2 * x))
    log_prob = -0.5 * noise.pow(2) - scale.log() - _LOG_SQRT_2PI - log_det
    return action, log_prob.sum(-1)


def _tanh_normal_log_prob(loc: Tensor, scale: Tensor, action: Tensor) -> Tensor:
    """Log-density ``[B]`` of stored actions in ``(-1, 1)``."""
    unit = action.clamp(-1 + _EPS, 1 - _EPS)
    x = torch.atanh(unit)
    normal = -0.5 * ((x - loc) / scale).pow(2) - scale.log() - _LOG_SQRT_2PI
    return (normal - torch.log1p(-unit) - torch.log1p(unit)).sum(-1)


class _Update:
    """Shared ``update()``: zero the grads, one backward of the summed terms, step, Polyak."""

    tau: float = 0.0

    def __init__(self, optimizer: bool) -> None:
        self.trainable: list[Tensor] = []
        self.targets: list[Tensor] = []
        self.sources: list[Tensor] = []
        self.optimizer: torch.optim.Optimizer | None = None
        self._with_optimizer = optimizer

    def _finish_init(self, online: list[nn.Module], targets: list[nn.Module]) -> None:
        for net, target in zip(online, targets):
            self.sources += list(net.parameters())
            self.targets += list(target.parameters())
        if self._with_optimizer:
            self.optimizer = torch.optim.Adam(self.trainable, lr=3e-4)

    def losses(self) -> dict[str, Tensor]:
        raise NotImplementedError

    def update(self) -> None:
        """One update: forward, backward, (Adam step), target update."""
        if self.optimizer is not None:
            # Dynamo's trace_autograd_ops (torch 2.13) fails on Adam.step after a loop that
            # clears the gradients by hand; zero_grad traces.
            self.optimizer.zero_grad(set_to_none=True)
        else:
            for p in self.trainable:
                p.grad = None
        total: Any = sum(self.losses().values())
        total.backward()
        if self.optimizer is not None:
            self.optimizer.step()
        if self.targets:
            with torch.no_grad():
                torch._foreach_lerp_(self.targets, self.sources, self.tau)


class PlainDQN(_Update):
    """Double DQN, squared error, soft target update (``tau = 0.01``)."""

    tau = 0.01

    def __init__(self, optimizer: bool = False) -> None:
        super().__init__(optimizer)
        self.qnet = PlainMLP(OBS, N_ACTIONS)
        self.qnet_target = _target(self.qnet)
        self.data = _batch(continuous=False)
        self.trainable = list(self.qnet.parameters())
        self._finish_init([self.qnet], [self.qnet_target])

    def losses(self) -> dict[str, Tensor]:
        d = self.data
        pred = self.qnet(d["obs"]).gather(-1, d["action"])
        with torch.no_grad():
            greedy = self.qnet(d["next_obs"]).argmax(-1, keepdim=True)
            next_q = self.qnet_target(d["next_obs"]).gather(-1, greedy)
            target = d["reward"] + GAMMA * (~d["terminated"]) * next_q
        return {"loss": F.mse_loss(pred, target)}


class PlainSAC(_Update):
    """SAC v2: TanhNormal actor, two critics with targets, learned temperature."""

    tau = 0.005

    def __init__(self, optimizer: bool = False) -> None:
        super().__init__(optimizer)
        self.actor = PlainMLP(OBS, 2 * ACT)
        self.q1, self.q2 = PlainMLP(OBS + ACT, 1), PlainMLP(OBS + ACT, 1)
        self.q1_target, self.q2_target = _target(self.q1), _target(self.q2)
        self.log_alpha = nn.Parameter(torch.zeros(()))
        self.target_entropy = -float(ACT)
        self.data = _batch(continuous=True)
        self.trainable = [
            *self.actor.parameters(),
            *self.q1.parameters(),
            *self.q2.parameters(),
            self.log_alpha,
        ]
        self._finish_init([self.q1, self.q2], [self.q1_target, self.q2_target])

    def _sample(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        action, log_prob = _tanh_normal_rsample(*_loc_scale(self.actor(obs)))
        return action, log_prob.unsqueeze(-1)

    def losses(self) -> dict[str, Tensor]:
        d = self.data
        alpha = self.log_alpha.detach().exp()
        action, log_prob = self._sample(d["obs"])
        sa = torch.cat([d["obs"], action], -1)
        q_pi = torch.minimum(self.q1.frozen(sa), self.q2.frozen(sa))
        with torch.no_grad():
            next_action, next_log_prob = self._sample(d["next_obs"])
            nsa = torch.cat([d["next_obs"], next_action], -1)
            next_q = torch.minimum(self.q1_target(nsa), self.q2_target(nsa))
            next_v = next_q - alpha * next_log_prob
            target = d["reward"] + GAMMA * (~d["terminated"]) * next_v
        sa_data = torch.cat([d["obs"], d["action"]], -1)
        return {
            "loss_actor": (alpha * log_prob - q_pi).mean(),
            "loss_qvalue": F.smooth_l1_loss(self.q1(sa_data), target)
            + F.smooth_l1_loss(self.q2(sa_data), target),
            "loss_alpha": (-self.log_alpha * (log_prob.detach() + self.target_entropy)).mean(),
        }


class PlainTD3(_Update):
    """TD3: deterministic actor, two critics, target-policy smoothing; all targets Polyak."""

    tau = 0.005
    policy_noise, noise_clip = 0.2, 0.5

    def __init__(self, optimizer: bool = False) -> None:
        super().__init__(optimizer)
        self.actor = PlainMLP(OBS, ACT)
        self.q1, self.q2 = PlainMLP(OBS + ACT, 1), PlainMLP(OBS + ACT, 1)
        self.actor_target = _target(self.actor)
        self.q1_target, self.q2_target = _target(self.q1), _target(self.q2)
        self.data = _batch(continuous=True)
        self.trainable = [*self.actor.parameters(), *self.q1.parameters(), *self.q2.parameters()]
        self._finish_init(
            [self.actor, self.q1, self.q2], [self.actor_target, self.q1_target, self.q2_target]
        )

    def losses(self) -> dict[str, Tensor]:
        d = self.data
        action = self.actor(d["obs"])
        q_actor = self.q1.frozen(torch.cat([d["obs"], action], -1))
        with torch.no_grad():
            next_action = self.actor_target(d["next_obs"])
            noise = (torch.randn_like(next_action) * self.policy_noise).clamp(
                -self.noise_clip, self.noise_clip
            )
            next_action = (next_action + noise).clamp(-1.0, 1.0)
            nsa = torch.cat([d["next_obs"], next_action], -1)
            next_q = torch.minimum(self.q1_target(nsa), self.q2_target(nsa))
            target = d["reward"] + GAMMA * (~d["terminated"]) * next_q
        sa_data = torch.cat([d["obs"], d["action"]], -1)
        return {
            "loss_actor": -q_actor.mean(),
            "loss_qvalue": F.smooth_l1_loss(self.q1(sa_data), target)
            + F.smooth_l1_loss(self.q2(sa_data), target),
        }


class PlainPPO(_Update):
    """Clipped PPO on a minibatch that carries its advantage and value target."""

    clip_epsilon, entropy_coef, critic_coef = 0.2, 0.01, 0.5

    def __init__(self, optimizer: bool = False) -> None:
        super().__init__(optimizer)
        self.actor = PlainMLP(OBS, 2 * ACT)
        self.critic = PlainMLP(OBS, 1)
        self.data = _batch(continuous=True)
        g = torch.Generator().manual_seed(1)
        drawn = {
            "old_log_prob": torch.randn(BATCH, generator=g, device="cpu") * 0.1 - 1.0,
            "advantage": torch.randn(BATCH, generator=g, device="cpu"),
            "value_target": torch.randn(BATCH, 1, generator=g, device="cpu"),
        }
        self.data.update(_on_default_device(drawn))
        self.trainable = [*self.actor.parameters(), *self.critic.parameters()]
        self._finish_init([], [])

    def losses(self) -> dict[str, Tensor]:
        d = self.data
        loc, scale = _loc_scale(self.actor(d["obs"]))
        log_prob = _tanh_normal_log_prob(loc, scale, d["action"])
        ratio = (log_prob - d["old_log_prob"]).exp()
        adv = d["advantage"]
        eps = self.clip_epsilon
        gain = torch.minimum(ratio * adv, ratio.clamp(1 - eps, 1 + eps) * adv)
        # TanhNormal has no closed-form entropy: one-sample Monte-Carlo estimate.
        entropy = -_tanh_normal_rsample(loc, scale)[1]
        value = self.critic(d["obs"])
        return {
            "loss_objective": -gain.mean(),
            "loss_entropy": -self.entropy_coef * entropy.mean(),
            "loss_critic": self.critic_coef * F.smooth_l1_loss(value, d["value_target"]),
        }


PLAIN = {
    "dqn_update": PlainDQN,
    "sac_update": PlainSAC,
    "td3_update": PlainTD3,
    "ppo_minibatch_update": PlainPPO,
}


def make_plain_cases(optimizer: bool = False) -> dict[str, Callable[[], None]]:
    """``{name: update}`` with the names of ``loss_cases.make_cases``."""
    torch.manual_seed(0)
    return {name: cls(optimizer).update for name, cls in PLAIN.items()}


def time_call(
    fn: Callable[[], Any],
    seconds: float,
    repeats: int = 3,
    sync: Callable[[], Any] | None = None,
) -> tuple[float, float]:
    """Best-of-``repeats`` ``(wall, cpu)`` microseconds per call, each repeat ``seconds`` long.

    The CPU figure is this thread's CPU time (``time.thread_time``): with one torch thread all
    the work runs here, and time spent waiting for a core that another process holds is not
    counted, so it stays comparable on a loaded machine where wall clock does not. ``sync``
    (``torch.cuda.synchronize`` for GPU work) runs before each clock is read, so the wall figure
    counts the queued kernels; there the wall figure is the one to read.
    """
    import time

    sync = sync or (lambda: None)
    fn()
    sync()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < 0.05:
        fn()
        n += 1
    sync()
    reps = max(5, int(n * seconds / 0.05))
    best_wall = best_cpu = float("inf")
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.thread_time()
        for _ in range(reps):
            fn()
        sync()
        best_cpu = min(best_cpu, (time.thread_time() - cpu) / reps)
        best_wall = min(best_wall, (time.perf_counter() - wall) / reps)
    return best_wall * 1e6, best_cpu * 1e6


def paired_cpu(
    fn_a: Callable[[], Any], fn_b: Callable[[], Any], seconds: float, chunk: int = 10
) -> tuple[list[float], list[float]]:
    """This thread's CPU microseconds per call of ``fn_a`` and ``fn_b``, timed in alternating
    chunks of ``chunk`` calls for about ``seconds``: one pair per chunk.

    The two timings of a pair are taken milliseconds apart, so a machine whose speed drifts
    (other jobs, a shared host) moves both alike: the median of the pairs' ratios is steadier
    than a ratio of two best-of timings taken seconds apart.
    """
    import time

    clock = time.thread_time_ns
    for _ in range(chunk):
        fn_a()
        fn_b()
    a: list[float] = []
    b: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(a) < 5:
        t0 = clock()
        for _ in range(chunk):
            fn_a()
        t1 = clock()
        for _ in range(chunk):
            fn_b()
        t2 = clock()
        a.append((t1 - t0) / chunk / 1e3)
        b.append((t2 - t1) / chunk / 1e3)
    return a, b


def paired_summary(pairs: list[tuple[float, float]]) -> dict[str, Any]:
    """The record fields of :func:`paired_cpu`'s pairs ``(a, b)``: each side's median CPU time
    per call, the median of the ratios ``a / b`` and their quartiles (the spread a drifting
    machine leaves; with fewer than two pairs both quartiles are the one ratio)."""
    import statistics

    ratios = [a / b for a, b in pairs]
    low, high = statistics.quantiles(ratios, n=4)[::2] if len(ratios) > 1 else ratios * 2
    return {
        "paired_cpu_us_per_call": round(statistics.median(a for a, _ in pairs), 2),
        "plain_paired_cpu_us_per_call": round(statistics.median(b for _, b in pairs), 2),
        "ours_over_plain": round(statistics.median(ratios), 3),
        "ours_over_plain_quartiles": [round(low, 3), round(high, 3)],
        "pairs": len(pairs),
    }


def whole_step(case: _Update, compile_kwargs: dict[str, Any] | None = None) -> Callable[[], None]:
    """``case.update`` (built with ``optimizer=True``) compiled as one graph, written out by hand.

    The recipe ``torchrl.objectives.make_update_step`` applies, so that ``benchmarks/compile.py``
    compares like with like: ``Optimizer.step``/``zero_grad`` break a compiled graph, so Adam
    runs as torch's functional ``adam`` on the optimizer's own state and the gradients are set to
    ``None`` by hand; dynamo traces ``backward()`` (``trace_autograd_ops``, on for the first
    calls, which compile); the guards skip module attributes
    (``torch.compiler.skip_guard_on_all_nn_modules_unsafe``); inductor calls its kernels from
    C++ (``cpp_wrapper``). ``compile_kwargs`` (``torch.compile`` arguments) override these.
    """
    from torch.optim.adam import adam

    optimizer = case.optimizer
    if not isinstance(optimizer, torch.optim.Adam):
        raise ValueError("whole_step: build the case with optimizer=True (an Adam step)")
    (group,) = optimizer.param_groups
    params = list(group["params"])
    for p in params:
        optimizer.state[p] = {
            "step": torch.zeros((), dtype=torch.float32),
            "exp_avg": torch.zeros_like(p),
            "exp_avg_sq": torch.zeros_like(p),
        }
    states = [optimizer.state[p] for p in params]
    beta1, beta2 = group["betas"]

    def update() -> None:
        total: Any = sum(case.losses().values())
        total.backward()
        with torch.no_grad():
            adam(
                params,
                [p.grad for p in params],
                [s["exp_avg"] for s in states],
                [s["exp_avg_sq"] for s in states],
                [],
                [s["step"] for s in states],
                foreach=False,
                amsgrad=False,
                maximize=False,
                beta1=beta1,
                beta2=beta2,
                lr=group["lr"],
                weight_decay=group["weight_decay"],
                eps=group["eps"],
            )
            for p in params:
                p.grad = None
            if case.targets:
                torch._foreach_lerp_(case.targets, case.sources, case.tau)

    kwargs: dict[str, Any] = {
        "options": {
            "cpp_wrapper": True,
            "guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe,
        }
    }
    kwargs.update(compile_kwargs or {})
    compiled = torch.compile(update, **kwargs)
    calls = [0]

    def run() -> None:
        if calls[0] < 2:
            calls[0] += 1
            with torch._dynamo.config.patch(trace_autograd_ops=True):
                return compiled()
        return compiled()

    return run
