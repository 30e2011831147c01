"""Dreamer v1 world-model training and imagination, timed with whichever ``torchrl`` imports.

Shared by ``benchmarks/model_based.py`` (our package, run from the repo) and TorchRL (run by
the peers' python, ``TORCHRL_PEERS_PYTHON``, from outside the repo so that ``import torchrl``
finds TorchRL). Both sides build the same networks from their own public names
(``ObsEncoder``, ``ObsDecoder``, ``RSSMPrior``, ``RSSMPosterior``, ``RSSMRollout``, ``MLP``,
``DreamerActor``, ``ProbabilisticActor`` + ``TanhNormal``, ``WorldModelWrapper``,
``DreamerEnv``) and run the same code around them; the losses are computed here, in plain
torch, identically for both (neither side's library loss is used). Cases:

- ``train``: one world-model update on a ``[batch, seq]`` batch of 64x64 pixels: encoder, RSSM
  rollout (prior + posterior) over the sequence, decoder, reward head, KL (free nats) +
  reconstruction + reward losses, backward, gradient clipping, Adam step. Rate: updates/s.
- ``imagine_env``: ``env.reset(starts)`` then ``DreamerEnv.rollout(horizon, actor,
  auto_reset=False, tensordict=...)`` from ``imag_batch`` start states (as Dreamer's actor loss
  does), under ``torch.no_grad``; the env's world model is the RSSM
  prior plus the reward head, the actor a ``TanhNormal`` ``ProbabilisticActor`` over
  ``DreamerActor``. Rate: imagined frames/s (``imag_batch * horizon`` per rollout).
- ``imagine_env_grad``: the same rollout with autograd on, plus the backward of the mean
  imagined reward (what the Dreamer actor loss does). Rate: imagined frames/s.
- ``imagine_loop``: the same prior + actor + reward head stepped by a plain Python loop on
  tensors (no env, no TensorDict), under ``torch.no_grad``. Rate: imagined frames/s.

Each case is warmed up, then repeated for at least ``--seconds`` (and ``--min-iters`` times);
the rate (``*_per_s``) is taken from the fastest call (what survives other load on a shared
machine best when a case runs only a few times), ``*_per_s_median`` from the median call and
``*_per_cpu_s`` from the median process CPU time (all threads), which load changes less.
Prints one JSON object per case.

Usage: ``python torchrl_model_based.py [--impl NAME] [--threads 1|default] [--seconds 10]
[--cases train,imagine_env,imagine_env_grad,imagine_loop] [--tiny]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

CASES = ("train", "imagine_env", "imagine_env_grad", "imagine_loop")


@dataclass(frozen=True)
class Shapes:
    """Sizes of one benchmark configuration (Dreamer v1 defaults)."""

    state: int = 30
    belief: int = 200
    hidden: int = 200
    channels: int = 32
    action: int = 6
    batch: int = 50
    seq: int = 50
    imag_batch: int = 1024
    horizon: int = 15
    free_nats: float = 3.0
    grad_clip: float = 100.0
    lr: float = 6e-4


# Small enough for a smoke test: pixels stay 64x64 (the decoder's kernels give that size).
TINY = Shapes(state=4, belief=8, hidden=8, channels=4, action=2, batch=2, seq=3, imag_batch=8)


def _latent_modules(lib: Any, s: Shapes) -> tuple[Any, Any, Any]:
    """RSSM prior, reward head and actor network (plain ``nn.Module`` objects)."""
    import torch

    m = lib.modules
    prior = m.RSSMPrior(
        lib.data.Bounded(-1.0, 1.0, shape=(s.action,)),
        hidden_dim=s.hidden,
        rnn_hidden_dim=s.belief,
        state_dim=s.state,
        action_dim=s.action,
    )
    reward = m.MLP(
        in_features=s.state + s.belief,
        out_features=1,
        depth=2,
        num_cells=s.hidden,
        activation_class=torch.nn.ELU,
    )
    actor = m.DreamerActor(s.action, num_cells=s.hidden)
    with torch.no_grad():  # initialise the actor's lazy first layer
        actor(torch.zeros(1, s.state), torch.zeros(1, s.belief))
    return prior, reward, actor


def dreamer_losses(td: Any, free_nats: float) -> dict[str, Any]:
    """Dreamer v1 world-model losses on a rolled-out ``[B, T]`` TensorDict (plain torch).

    ``loss_kl``: KL(posterior || prior) of the diagonal Gaussians summed over the state,
    clamped below at ``free_nats`` per step, averaged; ``loss_reco``: half the squared pixel
    error summed over the image, averaged; ``loss_reward``: half the squared reward error.
    """
    prior_mean, prior_std = td.get(("next", "prior_mean")), td.get(("next", "prior_std"))
    post_mean, post_std = td.get(("next", "posterior_mean")), td.get(("next", "posterior_std"))
    kl = (
        (prior_std / post_std).log()
        + (post_std.pow(2) + (post_mean - prior_mean).pow(2)) / (2 * prior_std.pow(2))
        - 0.5
    ).sum(-1)
    reco = td.get(("next", "reco_pixels")) - td.get(("next", "pixels"))
    reward = td.get(("next", "reward_pred")) - td.get(("next", "reward"))
    return {
        "loss_kl": kl.clamp_min(free_nats).mean(),
        "loss_reco": 0.5 * reco.pow(2).sum((-3, -2, -1)).mean(),
        "loss_reward": 0.5 * reward.pow(2).sum(-1).mean(),
    }


def make_train_step(lib: Any, s: Shapes, seed: int = 0) -> Callable[[], float]:
    """One world-model update; returns the total loss (a float, so the work is not skipped)."""
    import torch
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule, TensorDictSequential

    m = lib.modules
    torch.manual_seed(seed)
    encoder = TensorDictModule(
        m.ObsEncoder(channels=s.channels, in_channels=3),
        in_keys=[("next", "pixels")],
        out_keys=[("next", "encoded_latents")],
    )
    embed = s.channels * 8 * 2 * 2  # four stride-2 convolutions of a 64x64 image
    prior, reward_net, _ = _latent_modules(lib, s)
    rollout = m.RSSMRollout(
        TensorDictModule(
            prior,
            in_keys=["state", "belief", "action"],
            out_keys=[("next", "prior_mean"), ("next", "prior_std"), "_", ("next", "belief")],
        ),
        TensorDictModule(
            m.RSSMPosterior(
                hidden_dim=s.hidden,
                state_dim=s.state,
                rnn_hidden_dim=s.belief,
                obs_embed_dim=embed,
            ),
            in_keys=[("next", "belief"), ("next", "encoded_latents")],
            out_keys=[
                ("next", "posterior_mean"),
                ("next", "posterior_std"),
                ("next", "state"),
            ],
        ),
    )
    decoder = TensorDictModule(
        m.ObsDecoder(channels=s.channels, latent_dim=s.state + s.belief),
        in_keys=[("next", "state"), ("next", "belief")],
        out_keys=[("next", "reco_pixels")],
    )
    reward = TensorDictModule(
        reward_net,
        in_keys=[("next", "state"), ("next", "belief")],
        out_keys=[("next", "reward_pred")],
    )
    world_model = m.WorldModelWrapper(TensorDictSequential(encoder, rollout, decoder), reward)
    optim = torch.optim.Adam(world_model.parameters(), lr=s.lr)
    g = torch.Generator().manual_seed(seed)
    b, t = s.batch, s.seq
    data = TensorDict(
        {
            "state": torch.zeros(b, t, s.state),
            "belief": torch.zeros(b, t, s.belief),
            "action": torch.rand(b, t, s.action, generator=g) * 2 - 1,
            "next": {
                "pixels": torch.rand(b, t, 3, 64, 64, generator=g),
                "reward": torch.randn(b, t, 1, generator=g),
            },
        },
        batch_size=[b, t],
    )
    params = list(world_model.parameters())

    def step() -> float:
        td = world_model(data.clone(False))
        losses = dreamer_losses(td, s.free_nats)
        total = losses["loss_kl"] + losses["loss_reco"] + losses["loss_reward"]
        optim.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(params, s.grad_clip)
        optim.step()
        return float(total.detach())

    return step


def _make_imagination_env(lib: Any, s: Shapes, seed: int) -> tuple[Any, Any, Any]:
    """``(env, actor, starts)``: a DreamerEnv over the RSSM prior and reward head."""
    import torch
    from tensordict import TensorDict
    from tensordict.nn import InteractionType, TensorDictModule

    m, d = lib.modules, lib.data
    torch.manual_seed(seed)
    prior, reward_net, actor_net = _latent_modules(lib, s)
    model = m.WorldModelWrapper(
        TensorDictModule(
            prior, in_keys=["state", "belief", "action"], out_keys=["_", "_", "state", "belief"]
        ),
        TensorDictModule(reward_net, in_keys=["state", "belief"], out_keys=["reward"]),
    )
    n = s.imag_batch
    env = lib.envs.DreamerEnv(
        model, prior_shape=(s.state,), belief_shape=(s.belief,), batch_size=[n]
    )
    # Set the same specs on both libraries (TorchRL's DreamerEnv takes them from a real env).
    latent = d.Composite(
        state=d.Unbounded(shape=(n, s.state)), belief=d.Unbounded(shape=(n, s.belief)), shape=(n,)
    )
    env.observation_spec = latent
    env.state_spec = latent.clone()
    env.action_spec = d.Bounded(-1.0, 1.0, shape=(n, s.action))
    env.reward_spec = d.Unbounded(shape=(n, 1))
    actor = m.ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["state", "belief"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        out_keys=["action"],
        distribution_class=m.TanhNormal,
        default_interaction_type=InteractionType.RANDOM,
    )
    g = torch.Generator().manual_seed(seed)
    starts = TensorDict(
        state=torch.randn(n, s.state, generator=g),
        belief=torch.randn(n, s.belief, generator=g),
        batch_size=[n],
    )
    return env, actor, starts


def make_imagine_env(lib: Any, s: Shapes, seed: int = 0, grad: bool = False) -> Callable[[], float]:
    """One imagined rollout through ``DreamerEnv.rollout``; with ``grad``, plus its backward."""
    import torch

    env, actor, starts = _make_imagination_env(lib, s, seed)
    params = list(actor.parameters()) + list(env.world_model.parameters())

    def rollout() -> Any:
        # As Dreamer's actor loss does: reset from the start states (which adds the done
        # flags), then roll out without another reset.
        start = env.reset(starts.clone(False))
        return env.rollout(s.horizon, actor, auto_reset=False, tensordict=start)

    if not grad:

        def step() -> float:
            with torch.no_grad():
                out = rollout()
            return float(out.get(("next", "reward")).sum())

        return step

    def step_grad() -> float:
        for p in params:
            p.grad = None
        out = rollout()
        objective = out.get(("next", "reward")).mean()
        objective.backward()
        return float(objective.detach())

    return step_grad


def make_imagine_loop(lib: Any, s: Shapes, seed: int = 0) -> Callable[[], float]:
    """The same imagination as a plain loop over the modules, on tensors."""
    import torch

    torch.manual_seed(seed)
    prior, reward_net, actor_net = _latent_modules(lib, s)
    g = torch.Generator().manual_seed(seed)
    state0 = torch.randn(s.imag_batch, s.state, generator=g)
    belief0 = torch.randn(s.imag_batch, s.belief, generator=g)

    def step() -> float:
        total = 0.0
        with torch.no_grad():
            state, belief = state0, belief0
            for _ in range(s.horizon):
                loc, scale = actor_net(state, belief)
                action = torch.tanh(loc + scale * torch.randn_like(loc))
                _, _, state, belief = prior(state, belief, action)
                total += float(reward_net(state, belief).sum())
        return total

    return step


def make_case(lib: Any, case: str, s: Shapes) -> tuple[Callable[[], float], int, str]:
    """``(callable, units per call, unit name)`` of one case."""
    if case == "train":
        return make_train_step(lib, s), 1, "updates_per_s"
    frames = s.imag_batch * s.horizon
    if case == "imagine_env":
        return make_imagine_env(lib, s), frames, "frames_per_s"
    if case == "imagine_env_grad":
        return make_imagine_env(lib, s, grad=True), frames, "frames_per_s"
    if case == "imagine_loop":
        return make_imagine_loop(lib, s), frames, "frames_per_s"
    raise ValueError(f"case: expected one of {list(CASES)}, got {case!r}")


def time_case(
    fn: Callable[[], float], seconds: float, min_iters: int, warmup: int = 1
) -> tuple[list[float], list[float]]:
    """Wall-clock and process CPU seconds of each call after ``warmup`` calls.

    Calls are repeated for ``seconds`` of wall-clock time and at least ``min_iters`` times. The
    CPU time (all threads of the process) is what other load on a shared machine changes least.
    """
    for _ in range(warmup):
        fn()
    wall: list[float] = []
    cpu: list[float] = []
    start = time.perf_counter()
    while len(wall) < min_iters or time.perf_counter() - start < seconds:
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return wall, cpu


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Flags of one measuring process."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--impl", default=None, help="label of the rows (default torchrl-VERSION)")
    parser.add_argument("--threads", default="1", help="torch threads: an integer or 'default'")
    parser.add_argument("--seconds", type=float, default=10.0, help="timed seconds per case")
    parser.add_argument("--min-iters", type=int, default=2, help="timed calls per case, at least")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (smoke tests)")
    args = parser.parse_args(argv)
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    bad = [c for c in args.cases if c not in CASES]
    if bad or not args.cases:
        raise ValueError(f"--cases: expected a subset of {list(CASES)}, got {args.cases!r}")
    if args.threads != "default" and not (args.threads.isdigit() and int(args.threads) > 0):
        raise ValueError(
            f"--threads: expected a positive integer or 'default', got {args.threads!r}"
        )
    return args


def run(args: argparse.Namespace, lib: Any, emit: Callable[[dict], None]) -> None:
    """Times ``args.cases`` with the library namespace ``lib`` and emits one record per case."""
    import torch

    if args.threads != "default":
        torch.set_num_threads(int(args.threads))
    shapes = TINY if args.tiny else Shapes()
    impl = args.impl or f"torchrl-{lib.__version__}"
    for case in args.cases:
        fn, units, unit = make_case(lib, case, shapes)
        wall, cpu = time_case(fn, args.seconds, args.min_iters)
        median, median_cpu = statistics.median(wall), statistics.median(cpu)
        digits = 4 if case == "train" else 1
        emit(
            {
                "bench": "model_based",
                "impl": impl,
                "case": case,
                "threads": args.threads,
                "torch_threads": torch.get_num_threads(),
                unit: round(units / min(wall), digits),
                unit + "_median": round(units / median, digits),
                unit.replace("_per_s", "_per_cpu_s"): round(units / median_cpu, digits),
                "median_s": round(median, 6),
                "min_s": round(min(wall), 6),
                "median_cpu_s": round(median_cpu, 6),
                "iters": len(wall),
                "shapes": asdict(shapes),
                "torchrl_path": os.path.dirname(lib.__file__),
            }
        )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    try:
        import torchrl
        import torchrl.data
        import torchrl.envs
        import torchrl.modules
    except Exception as err:  # a peer that does not import is reported, not fatal
        print(json.dumps({"bench": "model_based", "impl": args.impl, "skipped": repr(err)[:300]}))
        return
    run(args, torchrl, lambda record: print(json.dumps(record), flush=True))


if __name__ == "__main__":
    sys.exit(main())
