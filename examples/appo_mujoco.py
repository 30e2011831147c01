"""APPO on HalfCheetah-v5: asynchronous PPO with V-trace on a MuJoCo task.

The loop of ``appo_cartpole.py`` (rollout workers, an inference server batching the policy
calls, V-trace advantages and targets, the PPO ratio against the behaviour policy) with the
MuJoCo recipe of ``ppo_mujoco.py``: separate 2x64 tanh actor and critic (the networks of the
synchronous PPO example and of the Sample Factory comparison), a Gaussian policy with a
state-independent learned scale, observations normalized and clipped to ``[-10, 10]`` (inside
the networks, with statistics the learner updates: see :func:`make_env`), rewards scaled by
``reward_scale`` in the losses. One difference: the Gaussian is squashed by a tanh
into the action bounds (``TanhNormal``) instead of being clipped on its way into the simulator,
because the rollout workers' ``SerialEnv`` checks the actions against the bounded action spec
before any inverse transform of the env could clip them. MuJoCo tasks have no
solved score: ``target_return`` defaults to none and training runs for ``total_frames``; the
figure to compare with ``ppo_mujoco.py`` is the average training return at a frame budget.

``train(**config)`` returns frames, wall time, frames/s, the return curve
``[(frames, wall_s, avg_return)]`` (average of the last ``return_window`` training episodes),
``reached_target`` and the policy lag (min/mean/max over the run). Needs ``mujoco``.

Measured (2 cores shared with other jobs, load average 3-4, 2026-11-28): with the defaults (one
rollout process of 32 envs in two double-buffered groups, 2 epochs of minibatches of 1024),
after 300k frames the average of the last 16 training episodes was 943 (seed 0; 28.5 s, 10.6k
frames/s; policy lag mean 0.18, max 1) and 768 (seed 1; 30.1 s, 10.0k frames/s), deterministic
evaluations 1807 and 1268. With one group of 16 envs (load 4-6, 2026-11-27): 712 (53 s, 5.7k
frames/s); after 200k frames (the slow learning test), 300 in 28 s. Before the throughput work, on the quiet
machine: minibatches of 512 and two rollout processes of 8 envs, 865 at 300k frames (39 s, 7.7k
frames/s); minibatches of 1024 with them, 808 (39 s, loaded); 10 epochs of minibatches of 256,
934 (61 s, 4.9k frames/s). Earlier, with ``VecNorm``
and ``RewardSum`` on every env (on a loaded machine): 999 at 300k frames in 706 s. The
synchronous ``ppo_mujoco.py`` (10 epochs of minibatches of 64 per 2048 frames) reached 1365 at
300k frames (1284 s on the loaded machine; deterministic evaluation 1504): it makes many more
gradient steps per frame. Uniformly random actions return about -230 (5 episodes).

Run as a script, it ends with a deterministic evaluation of the actor (its most likely action)
on ``final_eval_episodes`` fresh episodes of at most 1000 steps, the learning curve under
``--out`` and the summary line of every example.

Usage: ``python examples/appo_mujoco.py [--total-frames N] [--seed S] [--env-name Hopper-v5]
[--out DIR] [--no-progress]``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from _common import (
    AsyncRunTracker,
    appo_loss,
    evaluate,
    make_async_collector,
    parse_config,
    plot_curve,
    ppo_phase,
    report,
    run_async,
)
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.envs import EnvBase, GymEnv, RewardSum, RunningMeanStd, TransformedEnv
from torchrl.modules import (
    MLP,
    AddStateIndependentNormalScale,
    ProbabilisticActor,
    TanhNormal,
    ValueOperator,
)


@dataclass
class Config:
    env_name: str = "HalfCheetah-v5"
    total_frames: int = 300_000
    num_envs: int = 32
    rollout_length: int = 64  # T: steps of each trajectory chunk
    frames_per_batch: int = 2048
    # One rollout process, the inference server in a process of its own: on 2 cores it beat two
    # rollout processes of 8 envs each (CartPole 11.9k against 8.7-9.1k frames/s; the
    # collection's CPU time per frame 35 against 59 us for CartPole, 85 against 115 us for
    # HalfCheetah): each server batch and each worker step then serves more envs at once.
    # Two double-buffered groups (num_splits=2, stepped in turn by one thread: one group's envs
    # step while the other's actions are computed): with 16 envs, 11.1-11.9k frames/s against
    # 8.9-10.1k with one group of 16 (150-200k frames, quiet machine, 2026-11-27); the worker
    # waits less (89% busy instead of 71%). 32 envs in two groups of 16 halve the server's calls
    # per frame: 10.0-10.6k against 7.3-7.7k frames/s with 16 envs at 300k frames (load 3-4,
    # 2026-11-28), and at least as good a policy (training return 943 / 768 against 891 / 680,
    # deterministic evaluation 1807 / 1268 against 1579 / 1084, seeds 0 / 1). CartPole's steps
    # are too cheap for double buffering (appo_cartpole.py keeps num_splits=1).
    num_workers: int = 1
    num_splits: int = 2
    policy_backend: str = "multiprocessing"  # the inference server: its own process, or "threading"
    collector: str = "async_batched"  # or "multi_async" (MultiaSyncDataCollector)
    max_policy_lag: int = -1  # rows older than this are dropped; -1: keep all
    # 2 epochs of minibatches of 1024 per 2048 frames, as Sample Factory's MuJoCo defaults (2
    # passes, minibatches of 1024): minibatches of 512 reached 865 instead of 808 at 300k frames
    # with twice the gradient steps; 10 epochs of 256, 934, at 4.9k frames/s against 7.7k
    epochs: int = 2
    reward_scale: float = 0.1  # rewards are multiplied by this in the losses (not the returns)
    minibatch_size: int = 1024
    lr: float = 1e-3
    gamma: float = 0.99
    rho_thresh: float = 1.0
    c_thresh: float = 1.0
    clip_epsilon: float = 0.2
    entropy_coef: float = 0.0
    max_grad_norm: float = 0.5
    hidden: int = 64
    target_return: float = float("inf")  # no solved score: run the whole budget
    stop_at_target: bool = False
    return_window: int = 16
    final_eval_episodes: int = 5
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_env(num_envs: int = 1, env_name: str = "HalfCheetah-v5") -> EnvBase:
    """One MuJoCo env, bare (``num_envs=1``), or a vector of them with ``RewardSum``.

    The single envs run on the rollout workers without transforms: per-env transforms cost the
    workers about three times the physics step (measured: 229 against 62 us per frame for
    HalfCheetah), and would normalize each env with its own statistics. Observations are
    normalized inside the networks instead (:class:`ObsNorm`), with statistics the learner
    keeps; the learner sums the rewards per env for the returns. The vector (for the
    ``multi_async`` collector) keeps ``RewardSum``.
    """
    if num_envs == 1:
        return GymEnv(env_name)
    return TransformedEnv(GymEnv(env_name, num_envs=num_envs), RewardSum())


class ObsNorm(nn.Module):
    """Normalizes float64 MuJoCo observations with running statistics, clipped to ``[-10, 10]``.

    The learner updates the statistics from each batch (:meth:`update`); they are buffers, so
    they travel to the inference server with the weights.
    """

    def __init__(self, n_obs: int) -> None:
        super().__init__()
        self.stats = RunningMeanStd(shape=(n_obs,))

    def update(self, observation: torch.Tensor) -> None:
        self.stats.update(observation.to(torch.float32))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.stats.normalize(observation.to(torch.float32)).clamp(-10.0, 10.0)


def _bounds(low: torch.Tensor, high: torch.Tensor) -> dict[str, float | torch.Tensor]:
    """TanhNormal's bounds: numbers when every action dim has the same ones (MuJoCo's
    ``[-1, 1]``), which spares the distribution its per-call tensor work on the bounds (the
    inference server builds one per batch, the learner one per minibatch)."""
    if bool((low == low.flatten()[0]).all()) and bool((high == high.flatten()[0]).all()):
        return {"low": float(low.flatten()[0]), "high": float(high.flatten()[0])}
    return {"low": low, "high": high}


def make_agent(
    n_obs: int, n_act: int, hidden: int, low: torch.Tensor, high: torch.Tensor
) -> tuple[ProbabilisticActor, ValueOperator, list[ObsNorm]]:
    """Actor and critic (2x64 tanh MLPs), each behind its own :class:`ObsNorm`."""
    norms = [ObsNorm(n_obs), ObsNorm(n_obs)]
    actor = ProbabilisticActor(
        TensorDictModule(
            nn.Sequential(
                norms[0],
                MLP(n_obs, n_act, num_cells=[hidden, hidden], activation_class=nn.Tanh),
                AddStateIndependentNormalScale(n_act),
            ),
            in_keys=["observation"],
            out_keys=["loc", "scale"],
        ),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs=_bounds(low, high),
        return_log_prob=True,
    )
    critic = ValueOperator(
        nn.Sequential(
            norms[1], MLP(n_obs, 1, num_cells=[hidden, hidden], activation_class=nn.Tanh)
        ),
        in_keys=["observation"],
    )
    return actor, critic, norms


def train(**config) -> dict:
    """Trains APPO on MuJoCo with the :class:`Config` fields given as keywords; returns the run's figures."""
    cfg = Config(**config)
    torch.manual_seed(cfg.seed)
    probe = make_env(1, cfg.env_name)
    n_obs = probe.observation_spec["observation"].shape[-1]
    n_act = probe.action_spec.shape[-1]
    bounds = probe.action_spec.space
    probe.close()
    actor, critic, norms = make_agent(n_obs, n_act, cfg.hidden, bounds.low, bounds.high)
    loss_fn, optim = appo_loss(
        actor, critic, lr=cfg.lr, gamma=cfg.gamma, clip_epsilon=cfg.clip_epsilon,
        entropy_coef=cfg.entropy_coef, rho_thresh=cfg.rho_thresh, c_thresh=cfg.c_thresh,
    )  # fmt: skip

    tracker = AsyncRunTracker(cfg.target_return, cfg.return_window)
    collector = make_async_collector(cfg, EnvMaker(cfg.env_name), actor)

    def learn(batch):
        batch.set(("next", "reward"), batch.get(("next", "reward")) * cfg.reward_scale)
        for norm in norms:  # statistics of what the policy saw, before this phase
            norm.update(batch["observation"])
        ppo_phase(loss_fn, optim, batch, cfg.epochs, cfg.minibatch_size, cfg.max_grad_norm)

    wall = run_async(
        collector, tracker, learn, stop_at_target=cfg.stop_at_target, progress=cfg.progress
    )
    result = tracker.result(wall)
    result["config"] = dataclasses.asdict(cfg)
    result["actor"] = actor
    return result


class EnvMaker:
    """A picklable env constructor: ``EnvMaker(name)(n)`` builds ``n`` envs."""

    def __init__(self, env_name: str) -> None:
        self.env_name = env_name

    def __call__(self, num_envs: int = 1) -> EnvBase:
        return make_env(num_envs, self.env_name)


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    result = train(**dataclasses.asdict(cfg))
    print(
        f"APPO {cfg.env_name}: {result['frames']} frames in {result['wall_s']:.1f} s "
        f"({result['frames_per_s']:.0f} frames/s); average training return "
        f"{result['final_avg_return']} (last {cfg.return_window} episodes); "
        f"policy lag {result['policy_lag']}"
    )
    plot_curve(result, f"{cfg.out}/appo_mujoco.png", f"APPO, {cfg.env_name}")
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
    eval_env.set_seed(cfg.seed + 20_000)
    final_return = evaluate(eval_env, result["actor"], max_steps=1000)
    eval_env.close()
    report(f"APPO {cfg.env_name}", result, None, final_return, episodes=cfg.final_eval_episodes)


if __name__ == "__main__":
    main()
