"""PPO on CartPole-v1 with an auxiliary reward-prediction task sharing the policy's torso.

Two computation tasks learn from the same collector (8 CartPoles, one policy call per step for
all of them):

- ``"ppo"``: the clipped PPO loss of ``examples/ppo_cartpole.py``, on-policy: every batch of
  256 frames, GAE over it, then 10 epochs of full-batch steps; its buffer is emptied after
  each round;
- ``"reward"``: a head on the policy's torso predicts the reward of the next ``horizon``
  steps (``sum_{i<H} r_{t+i}``, less than ``H`` only when the episode terminates on the way:
  on CartPole, how close the pole is to falling). It keeps its own replay buffer of the last
  ``aux_buffer`` labelled frames and runs ``aux_updates`` steps of ``aux_batch`` items every
  ``aux_every`` frames. Its gradient moves the torso the policy uses.

Deterministic evaluations run in a background thread every ``eval_every`` frames
(:class:`~torchrl.agents.evaluation.EvaluationTask` over :class:`~torchrl.collectors.Evaluator`)
and go to a CSV logger with the losses. ``--aux false`` trains the same network with the PPO
task alone (the baseline). ``--compare true`` trains both on every seed of ``--seeds`` for the
whole ``--frames`` budget and writes the curves (``ppo_aux_reward.json``/``.png``).

Usage: ``python examples/agents/ppo_aux_reward.py [--aux true|false] [--frames N] [--seed S]
[--compare true --seeds 0,1,2] [--out DIR]``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, replace

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import evaluate, parse_config  # noqa: E402

from torchrl.agents.evaluation import EvaluationTask  # noqa: E402
from torchrl.agents.tasks import ComputationTask, TaskRunner  # noqa: E402
from torchrl.collectors import SyncDataCollector  # noqa: E402
from torchrl.envs import GymEnv  # noqa: E402
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator  # noqa: E402
from torchrl.objectives import ClipPPOLoss  # noqa: E402
from torchrl.objectives.value import GAE  # noqa: E402
from torchrl.record.loggers import CSVLogger  # noqa: E402


@dataclass
class Config:
    env_name: str = "CartPole-v1"
    frames: int = 24_576  # the whole budget (no early stop: the curves are compared)
    num_envs: int = 8
    steps_per_env: int = 32  # frames per batch = num_envs * steps_per_env
    epochs: int = 10
    minibatch_size: int = 256
    lr: float = 2e-3
    gamma: float = 0.98
    gae_lambda: float = 0.8
    clip_epsilon: float = 0.2
    max_grad_norm: float = 0.5
    hidden: int = 64
    aux: bool = True  # train the reward-prediction task too
    horizon: int = 10  # steps of reward the auxiliary head predicts
    aux_every: int = 256
    aux_updates: int = 4
    aux_batch: int = 256
    aux_buffer: int = 20_000
    aux_lr: float = 1e-3
    aux_coef: float = 1.0
    eval_every: int = 2048
    eval_episodes: int = 4
    final_eval_episodes: int = 10
    target_return: float = 475.0
    seed: int = 0
    compare: bool = False  # run PPO and PPO + aux on every seed of --seeds
    seeds: str = "0,1,2"
    out: str = "outputs"
    progress: bool = True


def make_networks(env: GymEnv, hidden: int) -> tuple[ProbabilisticActor, ValueOperator, nn.Module]:
    """Actor and auxiliary head on one torso; the critic has its own network."""
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    torso = nn.Sequential(nn.Linear(n_obs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
    actor = ProbabilisticActor(
        TensorDictModule(
            nn.Sequential(torso, nn.Linear(hidden, n_act)),
            in_keys=["observation"],
            out_keys=["logits"],
        ),
        in_keys=["logits"],
        spec=env.action_spec,
        distribution_class=OneHotCategorical,
        distribution_kwargs={"validate_args": False},
        return_log_prob=True,
    )
    critic = ValueOperator(
        MLP(
            in_features=n_obs, out_features=1, num_cells=[hidden, hidden], activation_class=nn.Tanh
        ),
        in_keys=["observation"],
    )
    reward_head = nn.Sequential(torso, nn.Linear(hidden, 1))
    return actor, critic, reward_head


def reward_to_go(batch: TensorDictBase, horizon: int) -> TensorDictBase:
    """Labels each frame with the reward of its next ``horizon`` steps (``[*B, T]`` batch).

    A window that runs past the batch's end, or past a truncation, has no label yet: the
    frame is dropped (the task keeps only what it can learn from).
    """
    reward = batch["next", "reward"].squeeze(-1)
    terminated = batch["next", "terminated"].squeeze(-1)
    truncated = batch["next", "truncated"].squeeze(-1)
    t_len = reward.shape[-1]
    target = torch.zeros_like(reward)
    alive = torch.ones_like(terminated)
    ended = torch.zeros_like(terminated)
    cut = torch.zeros_like(terminated)
    for i in range(horizon):
        r_i = torch.zeros_like(reward)
        r_i[..., : t_len - i] = reward[..., i:]
        term_i = torch.zeros_like(terminated)
        term_i[..., : t_len - i] = terminated[..., i:]
        trunc_i = torch.zeros_like(truncated)
        trunc_i[..., : t_len - i] = truncated[..., i:]
        target = target + alive * r_i
        cut |= alive & trunc_i & ~term_i
        ended |= alive & term_i
        alive = alive & ~term_i & ~trunc_i
    steps = torch.arange(t_len, device=reward.device)
    complete = (steps + horizon <= t_len) | ended
    keep = complete & ~cut
    return TensorDict(
        observation=batch["observation"][keep],
        reward_to_go=(target[keep] / horizon).unsqueeze(-1),
        batch_size=[int(keep.sum())],
    )


class RewardPrediction(nn.Module):
    """Mean squared error of the head's prediction of the (scaled) reward-to-go."""

    def __init__(self, head: nn.Module, coef: float) -> None:
        super().__init__()
        self.head = head
        self.coef = coef

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        error = self.head(td["observation"]) - td["reward_to_go"]
        return TensorDict(loss_reward=self.coef * error.pow(2).mean())


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    env = GymEnv(cfg.env_name, num_envs=cfg.num_envs)
    env.set_seed(cfg.seed)
    actor, critic, reward_head = make_networks(env, cfg.hidden)
    frames_per_batch = cfg.num_envs * cfg.steps_per_env
    collector = SyncDataCollector(
        env, actor, frames_per_batch=frames_per_batch, total_frames=cfg.frames
    )

    advantage = GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic)
    ppo_loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip_epsilon,
        entropy_bonus=False,
        normalize_advantage=True,
        loss_critic_type="l2",
        critic_coef=0.5,
    )
    tasks = [
        ComputationTask(
            "ppo",
            ppo_loss,
            torch.optim.Adam(ppo_loss.parameters(), lr=cfg.lr),
            every=frames_per_batch,
            updates=cfg.epochs * frames_per_batch // cfg.minibatch_size,
            batch_size=cfg.minibatch_size,
            on_policy=True,
            preprocess=advantage,  # GAE over the [envs, time] batch, before it is flattened
            max_grad_norm=cfg.max_grad_norm,
        )
    ]
    if cfg.aux:
        aux_loss = RewardPrediction(reward_head, cfg.aux_coef)
        tasks.append(
            ComputationTask(
                "reward",
                aux_loss,
                torch.optim.Adam(aux_loss.parameters(), lr=cfg.aux_lr),
                every=cfg.aux_every,
                updates=cfg.aux_updates,
                batch_size=cfg.aux_batch,
                buffer_size=cfg.aux_buffer,
                preprocess=lambda batch: reward_to_go(batch, cfg.horizon),
                max_grad_norm=cfg.max_grad_norm,
            )
        )

    name = "ppo_aux" if cfg.aux else "ppo"
    logger = CSVLogger(f"{name}_seed{cfg.seed}", log_dir=os.path.join(cfg.out, "ppo_aux_reward"))
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    evaluation = EvaluationTask.from_env(
        eval_env,
        actor,
        every=cfg.eval_every,
        num_trajectories=cfg.eval_episodes,
        max_steps=500,
        logger=logger,
    )
    runner = TaskRunner(collector, tasks, evaluations=[evaluation], logger=logger)

    start = time.perf_counter()
    last = [0]

    def progress(runner: TaskRunner, batches: dict) -> None:
        if cfg.progress and runner.frames - last[0] >= 2048:
            last[0] = runner.frames
            evals = evaluation.history
            shown = f"{evals[-1][1]['eval/reward']:.0f}" if evals else "-"
            print(f"{name} seed {cfg.seed}: {runner.frames} frames, last evaluation {shown}")

    runner.run(callback=progress)
    wall = time.perf_counter() - start
    runner.shutdown()
    curve = [(frames, metrics["eval/reward"]) for frames, metrics in evaluation.history]
    solved = next((f for f, r in curve if r >= cfg.target_return), None)
    final_env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
    final_env.set_seed(cfg.seed + 20_000)
    final_return = evaluate(final_env, actor, max_steps=500)
    final_env.close()
    logger.close()
    return {
        "name": name,
        "seed": cfg.seed,
        "eval": curve,
        "solved_at": solved,
        "final_return": final_return,
        "frames": runner.frames,
        "wall": wall,
        "rounds": {task.name: task.rounds for task in tasks},
        "updates": {task.name: task.updates_done for task in tasks},
    }


def compare(cfg: Config) -> dict:
    """Trains PPO and PPO + aux on every seed; writes the curves as JSON and PNG."""
    seeds = [int(s) for s in cfg.seeds.split(",") if s.strip()]
    runs = [train(replace(cfg, aux=aux, seed=seed)) for seed in seeds for aux in (False, True)]
    summary: dict = {"config": asdict(cfg), "runs": runs}
    for name in ("ppo", "ppo_aux"):
        mine = [run for run in runs if run["name"] == name]
        curves = [[r for _, r in run["eval"]] for run in mine]
        n = min(len(c) for c in curves)
        summary[name] = {
            "frames": [f for f, _ in mine[0]["eval"]][:n],
            "mean_eval": [sum(c[i] for c in curves) / len(curves) for i in range(n)],
            # mean evaluation return over the run: the area under the curve, per evaluation
            "mean_over_run": sum(sum(c[:n]) / n for c in curves) / len(curves),
            "solved_at": [run["solved_at"] for run in mine],
            "final_return": [run["final_return"] for run in mine],
        }
    os.makedirs(cfg.out, exist_ok=True)
    path = os.path.join(cfg.out, "ppo_aux_reward.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"curves written to {path}")
    plot(summary, os.path.join(cfg.out, "ppo_aux_reward.png"), cfg.target_return)
    return summary


def plot(summary: dict, path: str, target: float) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print('matplotlib is not installed, no plot: pip install "torchrl[plot]"')
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, color in (("ppo", "tab:blue"), ("ppo_aux", "tab:orange")):
        for run in summary["runs"]:
            if run["name"] == name and run["eval"]:
                x, y = zip(*run["eval"])
                ax.plot(x, y, color=color, alpha=0.25, linewidth=1)
        ax.plot(summary[name]["frames"], summary[name]["mean_eval"], color=color, label=name)
    ax.axhline(target, color="gray", linestyle="--", linewidth=1, label=f"target {target:.0f}")
    ax.set_xlabel("frames")
    ax.set_ylabel("deterministic evaluation return")
    ax.set_title("PPO vs PPO + reward prediction, CartPole-v1")
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"learning curves written to {path}")


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # tiny networks: more threads only add overhead on small machines
    if cfg.compare:
        summary = compare(cfg)
        for name in ("ppo", "ppo_aux"):
            s = summary[name]
            print(
                f"{name}: mean evaluation return over the run {s['mean_over_run']:.1f}; "
                f"solved at {s['solved_at']}; final returns {[round(r) for r in s['final_return']]}"
            )
        return
    run = train(cfg)
    print(
        f"{run['name']} CartPole-v1: final deterministic evaluation return "
        f"{run['final_return']:.1f}; first evaluation >= {cfg.target_return:g} at "
        f"{run['solved_at']} frames; {run['frames']} frames in {run['wall']:.1f} s; "
        f"rounds {run['rounds']}, gradient steps {run['updates']}"
    )


if __name__ == "__main__":
    main()
