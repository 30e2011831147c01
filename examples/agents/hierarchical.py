"""A two-level policy on a small grid: a manager sets a nearby target cell every k steps, a worker walks.

The task (``GoalGrid``, defined here): a ``size x size`` grid, a random start and a random goal
cell in every episode, five actions (four moves and "stay"), reward 1 on reaching the goal (the
episode then ends), nothing else; episodes are cut after ``max_steps`` steps. The observation
is the agent's and the goal's coordinates. A uniformly random policy reaches the goal in about
a sixth of the episodes on the default 9 x 9 grid.

The policy has two levels that share an observation encoder:

- the **manager** chooses a sub-goal, a target cell at an offset of at most 2 cells on each
  axis from the agent (25 choices), at the first step of an episode and every ``k`` steps
  after; the sub-goal in force is carried from step to step as env state (a
  ``TensorDictPrimer`` entry the policy writes as ``("next", "subgoal")``);
- the **worker** chooses the action, seeing the observation and where the target cell lies.

Two computation tasks train them from the same collector (16 grids, one policy call per step
for all of them), each with its own view of the data, buffer and schedule:

- ``"manager"``: PPO on the env reward. GAE runs over every step with the manager's critic;
  only the steps where the manager chose are kept (a choice is credited with the rewards that
  follow it);
- ``"worker"``: PPO on an intrinsic reward, how much closer (Manhattan distance) a step brings
  the agent to the target cell; its episodes end with each option.

Updates of either task move the shared encoder. Deterministic evaluations (the most likely
sub-goal and action) run in a background thread every ``eval_every`` frames on 64 fresh grids;
their mean return is the success rate, and training stops once ``confirm`` evaluations in a
row reach the target.
Target: a deterministic success rate >= 0.9 on 200 held-out episodes (the slow test checks it
on seeds 0-2).

Usage: ``python examples/agents/hierarchical.py [--frames N] [--k K] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import evaluate, parse_config, plot_curve  # noqa: E402

from torchrl.agents.evaluation import EvaluationTask  # noqa: E402
from torchrl.agents.tasks import ComputationTask, TaskRunner  # noqa: E402
from torchrl.collectors import SyncDataCollector  # noqa: E402
from torchrl.data import Composite, OneHot, Unbounded  # noqa: E402
from torchrl.envs import Compose, EnvBase, StepCounter, TensorDictPrimer, TransformedEnv  # noqa: E402
from torchrl.modules import OneHotCategorical, ProbabilisticActor, ValueOperator  # noqa: E402
from torchrl.objectives import ClipPPOLoss  # noqa: E402
from torchrl.objectives.value import GAE  # noqa: E402
from torchrl.record.loggers import CSVLogger  # noqa: E402

#: Moves of the five actions: up, down, right, left, stay.
MOVES = torch.tensor([[0.0, 1.0], [0.0, -1.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 0.0]])
#: Offsets (in cells) of the manager's 25 sub-goals.
OFFSETS = torch.tensor([[dx, dy] for dx in range(-2, 3) for dy in range(-2, 3)], dtype=torch.float)


class GoalGrid(EnvBase):
    """Reach a random goal cell on a ``size x size`` grid (batched, pure torch).

    Observation ``[*B, 4]``: agent x, y and goal x, y scaled to ``[-1, 1]``. Action: one-hot
    ``[*B, 5]`` (up, down, right, left, stay; a move into a wall stays put). Reward 1 and
    termination on the goal; truncation after ``max_steps`` steps.
    """

    def __init__(self, size: int = 9, max_steps: int = 40, batch_size: Any = (), seed: int = 0):
        super().__init__(batch_size=batch_size)
        if size < 2:
            raise ValueError(f"GoalGrid: size must be >= 2, got {size}")
        self.size, self.max_steps = size, max_steps
        batch = self.batch_size
        self.observation_spec = Composite(observation=Unbounded(shape=(*batch, 4)), shape=batch)
        self.action_spec = OneHot(5, shape=(*batch, 5), dtype=torch.bool)
        self.reward_spec = Unbounded(shape=(*batch, 1))
        self._agent = torch.zeros(*batch, 2)
        self._goal = torch.zeros(*batch, 2)
        self._steps = torch.zeros(batch, dtype=torch.int64)
        self.set_seed(seed)

    def _set_seed(self, seed: int | None) -> None:
        self.rng = torch.Generator()
        if seed is not None:
            self.rng.manual_seed(seed)

    def _observation(self) -> torch.Tensor:
        scale = 2.0 / (self.size - 1)
        return torch.cat([self._agent, self._goal], -1) * scale - 1.0

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        batch = self.batch_size
        agent = torch.randint(0, self.size, (*batch, 2), generator=self.rng).float()
        goal = torch.randint(0, self.size, (*batch, 2), generator=self.rng).float()
        # a goal on the start cell moves one cell away (there is always a step to take)
        same = (agent == goal).all(-1, keepdim=True)
        shift = torch.where(goal[..., :1] > 0, -1.0, 1.0)
        goal[..., :1] = torch.where(same, goal[..., :1] + shift, goal[..., :1])
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            self._agent, self._goal = agent, goal
            self._steps.zero_()
        else:
            where = mask.reshape(batch)
            self._agent = torch.where(where.unsqueeze(-1), agent, self._agent)
            self._goal = torch.where(where.unsqueeze(-1), goal, self._goal)
            self._steps.masked_fill_(where, 0)
        return TensorDict(observation=self._observation(), batch_size=batch)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        move = tensordict["action"].float() @ MOVES
        self._agent = (self._agent + move).clamp(0, self.size - 1)
        self._steps += 1
        reached = (self._agent == self._goal).all(-1, keepdim=True)
        truncated = (self._steps >= self.max_steps).unsqueeze(-1) & ~reached
        return TensorDict(
            observation=self._observation(),
            reward=reached.float(),
            done=reached | truncated,
            terminated=reached,
            truncated=truncated,
            batch_size=self.batch_size,
        )


@dataclass
class Config:
    size: int = 9
    max_steps: int = 40
    k: int = 4  # steps between two manager decisions
    frames: int = 131_072
    num_envs: int = 16
    steps_per_env: int = 32  # frames per batch = num_envs * steps_per_env
    epochs: int = 4
    worker_minibatch: int = 256
    lr: float = 1e-3
    manager_gamma: float = 0.97
    worker_gamma: float = 0.5
    gae_lambda: float = 0.95
    clip_epsilon: float = 0.2
    entropy_coef: float = 0.01
    max_grad_norm: float = 0.5
    hidden: int = 64
    eval_every: int = 4096
    eval_episodes: int = 64
    target_success: float = 0.9
    confirm: int = 3  # evaluations in a row at the target before training stops
    final_eval_episodes: int = 200
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_env(cfg: Config, num_envs: int, seed: int) -> TransformedEnv:
    """The grid with a step counter and the carried sub-goal (x, y of the target cell)."""
    base = GoalGrid(cfg.size, cfg.max_steps, batch_size=[num_envs], seed=seed)
    # expand_specs=True: the primer's shape (2,) is per grid, even when there are 2 grids.
    primer = TensorDictPrimer(subgoal=Unbounded(shape=(2,)), expand_specs=True)
    return TransformedEnv(base, Compose(StepCounter(), primer))


class ChooseSubgoal(nn.Module):
    """The sub-goal in force: a new target cell on the manager's turns, else the carried one."""

    def __init__(self, k: int, size: int) -> None:
        super().__init__()
        self.k = k
        self.scale = 2.0 / (size - 1)  # cells -> observation units

    def forward(
        self,
        option: torch.Tensor,
        carried: torch.Tensor,
        step_count: torch.Tensor,
        observation: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        turn = (step_count % self.k) == 0  # [*B, 1]; step_count is 0 right after a reset
        target = observation[..., :2] + (option.float() @ OFFSETS) * self.scale
        subgoal = torch.where(turn, target.clamp(-1.0, 1.0), carried)
        return subgoal, turn, subgoal  # the last one is carried to the next step


class WorkerInputs(nn.Module):
    """The worker's view: the observation and the offset to the target cell, in cells / k."""

    def __init__(self, net: nn.Module, k: int, size: int, encoder: nn.Module | None = None):
        super().__init__()
        self.net, self.encoder = net, encoder
        self.to_cells = (size - 1) / 2.0 / k

    def forward(self, observation: torch.Tensor, subgoal: torch.Tensor) -> torch.Tensor:
        offset = (subgoal - observation[..., :2]) * self.to_cells
        features = observation if self.encoder is None else self.encoder(observation)
        return self.net(torch.cat([features, offset], -1))


def make_policy(cfg: Config) -> dict[str, Any]:
    hidden = cfg.hidden
    encoder = nn.Sequential(nn.Linear(4, hidden), nn.Tanh())  # shared by both levels
    n_options = OFFSETS.shape[0]
    manager = ProbabilisticActor(
        TensorDictModule(
            nn.Sequential(
                encoder, nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, n_options)
            ),
            in_keys=["observation"],
            out_keys=["option_logits"],
        ),
        in_keys={"logits": "option_logits"},
        out_keys=["option"],
        distribution_class=OneHotCategorical,
        distribution_kwargs={"validate_args": False},
        return_log_prob=True,
        log_prob_key="option_log_prob",
    )
    choose = TensorDictModule(
        ChooseSubgoal(cfg.k, cfg.size),
        in_keys=["option", "subgoal", "step_count", "observation"],
        out_keys=["subgoal_now", "manager_turn", ("next", "subgoal")],
    )
    worker_head = nn.Sequential(nn.Linear(hidden + 2, hidden), nn.Tanh(), nn.Linear(hidden, 5))
    worker = ProbabilisticActor(
        TensorDictModule(
            WorkerInputs(worker_head, cfg.k, cfg.size, encoder),
            in_keys=["observation", "subgoal_now"],
            out_keys=["logits"],
        ),
        in_keys=["logits"],
        distribution_class=OneHotCategorical,
        distribution_kwargs={"validate_args": False},
        return_log_prob=True,
    )
    mlp = lambda n_in: nn.Sequential(  # noqa: E731
        nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
        nn.Linear(hidden, 1),
    )  # fmt: skip
    manager_critic = ValueOperator(mlp(4), in_keys=["observation"])
    worker_critic = ValueOperator(
        WorkerInputs(mlp(6), cfg.k, cfg.size), in_keys=["observation", "subgoal_now"]
    )
    return {
        "policy": TensorDictSequential(manager, choose, worker),
        "manager": manager,
        "worker": worker,
        "manager_critic": manager_critic,
        "worker_critic": worker_critic,
        "encoder": encoder,
    }


def manager_view(batch: TensorDictBase, advantage: GAE) -> TensorDictBase:
    """GAE on the env reward over every step, then the steps where the manager chose."""
    advantage(batch)
    turns = batch["manager_turn"].squeeze(-1)
    return batch[turns].select(
        "observation", "option", "option_log_prob", "advantage", "value_target"
    )


def worker_view(batch: TensorDictBase, advantage: GAE, k: int, size: int) -> TensorDictBase:
    """The worker's data: intrinsic reward, option-long episodes, its GAE."""
    to_cells = (size - 1) / 2.0
    subgoal = batch["subgoal_now"]
    before = (subgoal - batch["observation"][..., :2]).abs().sum(-1, keepdim=True)
    after = (subgoal - batch["next", "observation"][..., :2]).abs().sum(-1, keepdim=True)
    intrinsic = (before - after) * to_cells  # +1 per cell closer, -1 per cell away
    option_ends = ((batch["step_count"] + 1) % k) == 0
    data = TensorDict(
        observation=batch["observation"],
        subgoal_now=subgoal,
        action=batch["action"],
        action_log_prob=batch["action_log_prob"],
        next=TensorDict(
            observation=batch["next", "observation"],
            subgoal_now=subgoal,  # the worker values the rest of its own option
            reward=intrinsic,
            done=batch["next", "done"] | option_ends,
            terminated=batch["next", "terminated"] | option_ends,
            batch_size=batch.batch_size,
        ),
        batch_size=batch.batch_size,
    )
    return advantage(data)


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    env = make_env(cfg, cfg.num_envs, cfg.seed)
    nets = make_policy(cfg)
    frames_per_batch = cfg.num_envs * cfg.steps_per_env
    collector = SyncDataCollector(
        env, nets["policy"], frames_per_batch=frames_per_batch, total_frames=cfg.frames
    )

    def ppo(actor: Any, critic: Any, **keys: str) -> ClipPPOLoss:
        loss = ClipPPOLoss(
            actor, critic, clip_epsilon=cfg.clip_epsilon, entropy_coef=cfg.entropy_coef,
            normalize_advantage=True, loss_critic_type="l2", critic_coef=0.5,
        )  # fmt: skip
        if keys:
            loss.set_keys(**keys)
        return loss

    manager_loss = ppo(
        nets["manager"], nets["manager_critic"], action="option", sample_log_prob="option_log_prob"
    )
    worker_loss = ppo(nets["worker"], nets["worker_critic"])
    manager_gae = GAE(
        gamma=cfg.manager_gamma, lmbda=cfg.gae_lambda, value_network=nets["manager_critic"]
    )
    worker_gae = GAE(
        gamma=cfg.worker_gamma, lmbda=cfg.gae_lambda, value_network=nets["worker_critic"]
    )
    tasks = [
        ComputationTask(
            "manager",
            manager_loss,
            torch.optim.Adam(manager_loss.parameters(), lr=cfg.lr),
            every=frames_per_batch,
            updates=cfg.epochs,
            batch_size=None,  # every choice of the round, once per epoch
            on_policy=True,
            buffer_size=frames_per_batch,
            preprocess=lambda batch: manager_view(batch, manager_gae),
            max_grad_norm=cfg.max_grad_norm,
        ),
        ComputationTask(
            "worker",
            worker_loss,
            torch.optim.Adam(worker_loss.parameters(), lr=cfg.lr),
            every=frames_per_batch,
            updates=cfg.epochs * frames_per_batch // cfg.worker_minibatch,
            batch_size=cfg.worker_minibatch,
            on_policy=True,
            preprocess=lambda batch: worker_view(batch, worker_gae, cfg.k, cfg.size),
            max_grad_norm=cfg.max_grad_norm,
        ),
    ]

    logger = CSVLogger(f"seed{cfg.seed}", log_dir=os.path.join(cfg.out, "hierarchical"))
    evaluation = EvaluationTask.from_env(
        make_env(cfg, cfg.eval_episodes, cfg.seed + 10_000),
        nets["policy"],
        every=cfg.eval_every,
        num_trajectories=cfg.eval_episodes,
        max_steps=cfg.max_steps,
        logger=logger,
    )
    runner = TaskRunner(collector, tasks, evaluations=[evaluation], logger=logger)
    history: dict = {"train": [], "eval": [], "solved_at": None}
    last = [0]

    def track(runner: TaskRunner, batches: dict) -> bool:
        batch = batches["0"]
        done = batch["next", "done"].squeeze(-1)
        for r in batch["next", "reward"].squeeze(-1)[done]:
            history["train"].append((runner.frames, float(r)))
        history["eval"] = [(f, m["eval/reward"]) for f, m in evaluation.history]
        if cfg.progress and runner.frames - last[0] >= cfg.eval_every:
            last[0] = runner.frames
            shown = f"{history['eval'][-1][1]:.2f}" if history["eval"] else "-"
            print(f"hierarchical seed {cfg.seed}: {runner.frames} frames, success {shown}")
        # stop after `confirm` evaluations in a row reach the target (one can pass by luck)
        recent = [r for _, r in history["eval"][-cfg.confirm :]]
        return len(recent) == cfg.confirm and min(recent) >= cfg.target_success

    start = time.perf_counter()
    runner.run(callback=track)
    history["wall"] = time.perf_counter() - start
    runner.shutdown()
    history["eval"] = [(f, m["eval/reward"]) for f, m in evaluation.history]
    solved = [f for f, r in history["eval"] if r >= cfg.target_success]
    history["solved_at"] = solved[0] if solved else None
    history["frames"] = runner.frames
    history["rounds"] = {task.name: task.rounds for task in tasks}
    final_env = make_env(cfg, cfg.final_eval_episodes, cfg.seed + 20_000)
    history["final_return"] = evaluate(final_env, nets["policy"], max_steps=cfg.max_steps)
    random_env = make_env(cfg, cfg.final_eval_episodes, cfg.seed + 20_000)
    history["random_return"] = evaluate(random_env, None, max_steps=cfg.max_steps)
    logger.close()
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # tiny networks: more threads only add overhead on small machines
    history = train(cfg)
    plot_curve(
        history, f"{cfg.out}/hierarchical.png", f"Manager (every {cfg.k} steps) + worker, "
        f"GoalGrid {cfg.size}x{cfg.size}", target=cfg.target_success,
    )  # fmt: skip
    solved = history["solved_at"]
    print(
        f"hierarchical GoalGrid {cfg.size}x{cfg.size}: final deterministic success rate "
        f"{history['final_return']:.2f} over {cfg.final_eval_episodes} episodes (random walk "
        f"{history['random_return']:.2f}; target {cfg.target_success:g}); "
        f"{'solved at ' + str(solved) + ' frames' if solved else 'not solved'}; "
        f"{history['frames']} frames in {history['wall']:.1f} s; rounds {history['rounds']}"
    )


if __name__ == "__main__":
    main()
