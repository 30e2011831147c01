"""Learning tests of the algorithm trainers against the plain examples' targets (slow).

Each test builds the env, networks, loss, hyper-parameters and evaluation of one plain example
(``examples/a2c_cartpole.py``, ``reinforce_cartpole.py``, ``dqn_cartpole.py``,
``td3_pendulum.py``, ``ddpg_pendulum.py``, ``iql_pendulum_offline.py``,
``cql_pendulum_offline.py``), importing its builders and its ``Config`` defaults, but trains
through the matching trainer of ``torchrl.trainers.algorithms`` instead of the example's own
loop, and asserts the target ``test_learning.py`` applies to the example: a deterministic
evaluation return >= 475 on CartPole-v1, a final 10-episode mean >= -200 on Pendulum-v1, or an
offline policy that beats the behaviour policy. Seed 0 only; ``pytest -s`` shows frames, wall
time and returns.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from types import ModuleType
from typing import Any

import pytest
import torch

pytest.importorskip("gymnasium")

from tensordict.nn import TensorDictSequential  # noqa: E402

from torchrl.collectors import SyncDataCollector  # noqa: E402
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer  # noqa: E402
from torchrl.envs import GymEnv, RewardSum, TransformedEnv  # noqa: E402
from torchrl.modules import (  # noqa: E402
    MLP,
    AdditiveGaussianModule,
    EGreedyModule,
    QValueActor,
    ValueOperator,
)
from torchrl.objectives import (  # noqa: E402
    A2CLoss,
    CQLLoss,
    DDPGLoss,
    DQNLoss,
    HardUpdate,
    IQLLoss,
    ReinforceLoss,
    SoftUpdate,
    TD3Loss,
)
from torchrl.objectives.value import GAE, TD1Estimator  # noqa: E402
from torchrl.trainers.algorithms import (  # noqa: E402
    A2CTrainer,
    CQLTrainer,
    DDPGTrainer,
    DQNTrainer,
    IQLTrainer,
    ReinforceTrainer,
    TD3Trainer,
)

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
SEED = 0


def _import_example(name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    """The example module and the examples' ``_common`` helpers."""
    monkeypatch.syspath_prepend(EXAMPLES)
    torch.set_num_threads(1)
    return importlib.import_module(name), importlib.import_module("_common")


class _EvalUntilSolved:
    """A ``post_steps`` op: the example's periodic evaluation and stopping rule.

    Every ``every`` collected frames it runs the examples' ``evaluate`` (``evaluate_confirmed``
    with ``confirm``) on ``env``; after ``passes`` evaluations in a row reach ``target`` it
    records the frame count in ``solved_at`` and asks the trainer to stop.
    """

    def __init__(
        self,
        common: ModuleType,
        env: Any,
        policy: Any,
        every: int,
        max_steps: int,
        target: float,
        confirm: bool = False,
        passes: int = 1,
    ) -> None:
        self.common = common
        self.env = env
        self.policy = policy
        self.every = every
        self.max_steps = max_steps
        self.target = target
        self.confirm = confirm
        self.passes = passes
        self.trainer: Any = None
        self.next_eval = every
        self.streak = 0
        self.evals: list[tuple[int, float]] = []
        self.solved_at: int | None = None

    def register(self, trainer: Any) -> None:
        self.trainer = trainer
        trainer.register_op("post_steps", self)

    def __call__(self) -> None:
        frames = self.trainer.collected_frames
        if frames < self.next_eval:
            return
        self.next_eval += self.every
        ret = self.common.evaluate_confirmed(
            self.env, self.policy, self.max_steps, self.target, self.confirm
        )
        self.evals.append((frames, ret))
        self.streak = self.streak + 1 if ret >= self.target else 0
        if self.streak >= self.passes:
            self.solved_at = frames
            self.trainer.request_stop("solved")


def _final_return(common: ModuleType, cfg: Any, policy: Any, max_steps: int) -> float:
    """The examples' final evaluation: ``final_eval_episodes`` fresh episodes, seed + 20000."""
    env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
    env.set_seed(cfg.seed + 20_000)
    ret = common.evaluate(env, policy, max_steps=max_steps)
    env.close()
    return ret


def _train(trainer: Any, stopper: _EvalUntilSolved, name: str) -> float:
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    print(
        f"\n{name} seed {SEED}: {trainer.collected_frames} frames, {wall:.1f} s, solved at "
        f"{stopper.solved_at}; evaluations {stopper.evals}",
        file=sys.stderr,
    )
    return wall


def _cartpole_envs(cfg: Any) -> tuple[TransformedEnv, GymEnv]:
    env = TransformedEnv(GymEnv(cfg.env_name, num_envs=cfg.num_envs), RewardSum())
    env.set_seed(cfg.seed)
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    return env, eval_env


@pytest.mark.slow
def test_a2c_trainer_solves_cartpole(monkeypatch: pytest.MonkeyPatch) -> None:
    example, common = _import_example("a2c_cartpole", monkeypatch)
    cfg = example.Config(seed=SEED, progress=False)
    torch.manual_seed(cfg.seed)
    env, eval_env = _cartpole_envs(cfg)
    actor, critic = example.make_agent(env, cfg.hidden)
    collector = SyncDataCollector(
        env, actor, frames_per_batch=cfg.num_envs * cfg.steps_per_env, total_frames=cfg.frames
    )
    loss_fn = A2CLoss(
        actor,
        critic,
        entropy_coef=cfg.entropy_coef,
        entropy_bonus=cfg.entropy_coef > 0,
        critic_coef=0.5,
        loss_critic_type="l2",
    )
    trainer = A2CTrainer(
        collector=collector,
        total_frames=cfg.frames,
        loss_module=loss_fn,
        optimizer=torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr),
        clip_norm=0.5,
        progress_bar=False,
        seed=cfg.seed,
        # The example's estimator: GAE with the advantages standardised over the batch.
        gae=GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic, average_gae=True),
    )
    stopper = _EvalUntilSolved(common, eval_env, actor, cfg.eval_every, 500, cfg.target_return)
    stopper.register(trainer)
    _train(trainer, stopper, "A2CTrainer")
    eval_env.close()
    print(f"final return {_final_return(common, cfg, actor, 500):.1f}", file=sys.stderr)
    assert stopper.solved_at is not None, (
        f"A2CTrainer did not reach {cfg.target_return} in {trainer.collected_frames} frames; "
        f"evaluations: {stopper.evals}"
    )


def _standardised_td1(estimator: TD1Estimator):
    """The example's advantage: Monte-Carlo (TD(1)) returns minus the baseline, standardised."""

    def advantage(batch: Any) -> None:
        estimator(batch)
        adv = batch["advantage"]
        batch["advantage"] = (adv - adv.mean()) / adv.std().clamp_min(1e-6)

    return advantage


@pytest.mark.slow
def test_reinforce_trainer_solves_cartpole(monkeypatch: pytest.MonkeyPatch) -> None:
    example, common = _import_example("reinforce_cartpole", monkeypatch)
    cfg = example.Config(seed=SEED, progress=False)
    torch.manual_seed(cfg.seed)
    env, eval_env = _cartpole_envs(cfg)
    actor, critic = example.make_agent(env, cfg.hidden)
    collector = SyncDataCollector(
        env, actor, frames_per_batch=cfg.num_envs * cfg.steps_per_env, total_frames=cfg.frames
    )
    loss_fn = ReinforceLoss(actor, critic, loss_critic_type="l2")
    estimator = TD1Estimator(gamma=cfg.gamma, value_network=critic, average_rewards=False)
    trainer = ReinforceTrainer(
        collector=collector,
        total_frames=cfg.frames,
        loss_module=loss_fn,
        optimizer=torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr),
        clip_norm=0.5,
        progress_bar=False,
        seed=cfg.seed,
        gae=_standardised_td1(estimator),
    )
    stopper = _EvalUntilSolved(common, eval_env, actor, cfg.eval_every, 500, cfg.target_return)
    stopper.register(trainer)
    _train(trainer, stopper, "ReinforceTrainer")
    eval_env.close()
    print(f"final return {_final_return(common, cfg, actor, 500):.1f}", file=sys.stderr)
    assert stopper.solved_at is not None, (
        f"ReinforceTrainer did not reach {cfg.target_return} in {trainer.collected_frames} "
        f"frames; evaluations: {stopper.evals}"
    )


@pytest.mark.slow
def test_dqn_trainer_solves_cartpole(monkeypatch: pytest.MonkeyPatch) -> None:
    example, common = _import_example("dqn_cartpole", monkeypatch)
    cfg = example.Config(seed=SEED, progress=False)
    torch.manual_seed(cfg.seed)
    env, eval_env = _cartpole_envs(cfg)
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    qnet = MLP(in_features=n_obs, out_features=n_act, num_cells=[cfg.hidden, cfg.hidden])
    greedy = QValueActor(qnet, in_keys=["observation"], spec=env.action_spec)
    egreedy = EGreedyModule(
        env.action_spec, eps_init=1.0, eps_end=cfg.eps_end, annealing_num_steps=cfg.eps_frames
    )
    loss_fn = DQNLoss(greedy, delay_value=True, double_dqn=True, loss_function="smooth_l1")
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    collector = SyncDataCollector(
        env,
        TensorDictSequential(greedy, egreedy),
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.frames,
        init_random_frames=cfg.init_random_frames,
    )
    trainer = DQNTrainer(
        collector=collector,
        total_frames=cfg.frames,
        optim_steps_per_batch=cfg.updates_per_batch,
        loss_module=loss_fn,
        optimizer=torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr),
        clip_norm=10.0,
        progress_bar=False,
        seed=cfg.seed,
        replay_buffer=TensorDictReplayBuffer(
            storage=LazyTensorStorage(cfg.buffer_size), batch_size=cfg.batch_size
        ),
        batch_size=cfg.batch_size,
        target_net_updater=HardUpdate(
            loss_fn, value_network_update_interval=cfg.target_update_interval
        ),
        greedy_module=egreedy,  # annealed once per collected batch, as in the example
    )
    stopper = _EvalUntilSolved(common, eval_env, greedy, cfg.eval_every, 500, cfg.target_return)
    stopper.register(trainer)
    _train(trainer, stopper, "DQNTrainer")
    eval_env.close()
    print(f"final return {_final_return(common, cfg, greedy, 500):.1f}", file=sys.stderr)
    assert stopper.solved_at is not None, (
        f"DQNTrainer did not reach {cfg.target_return} in {trainer.collected_frames} frames; "
        f"evaluations: {stopper.evals}"
    )


def _pendulum_setup(example: ModuleType, cfg: Any) -> tuple[Any, ...]:
    """The env, eval env, actor, critic and noisy exploration policy of the TD3/DDPG examples."""
    torch.manual_seed(cfg.seed)
    env = TransformedEnv(GymEnv(cfg.env_name), RewardSum())
    env.set_seed(cfg.seed)
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    actor, critic = example.make_agent(env, cfg.hidden)
    noise = AdditiveGaussianModule(
        env.action_spec, sigma_init=cfg.noise_sigma, sigma_end=cfg.noise_sigma
    )
    return env, eval_env, actor, critic, TensorDictSequential(actor, noise)


def _off_policy_kwargs(cfg: Any, env: Any, policy: Any) -> dict[str, Any]:
    """Collector, buffer and step count of the Pendulum examples (one update per frame)."""
    return {
        "collector": SyncDataCollector(
            env,
            policy,
            frames_per_batch=cfg.frames_per_batch,
            total_frames=cfg.frames,
            init_random_frames=cfg.init_random_frames,
        ),
        "total_frames": cfg.frames,
        "optim_steps_per_batch": int(cfg.frames_per_batch * cfg.updates_per_frame),
        "replay_buffer": TensorDictReplayBuffer(
            storage=LazyTensorStorage(cfg.buffer_size), batch_size=cfg.batch_size
        ),
        "batch_size": cfg.batch_size,
        "clip_norm": None,
        "progress_bar": False,
        "seed": cfg.seed,
    }


@pytest.mark.slow
def test_td3_trainer_solves_pendulum(monkeypatch: pytest.MonkeyPatch) -> None:
    example, common = _import_example("td3_pendulum", monkeypatch)
    cfg = example.Config(seed=SEED, progress=False)
    env, eval_env, actor, critic, policy = _pendulum_setup(example, cfg)
    loss_fn = TD3Loss(
        actor,
        critic,
        action_spec=env.action_spec,
        num_qvalue_nets=2,
        policy_noise=cfg.policy_noise,
        noise_clip=cfg.noise_clip,
        loss_function="l2",
    )
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    # One optimizer over the actor and the critic ensemble held by the loss; on the steps
    # without an actor update the trainer leaves loss_actor out, so the actor has no gradient.
    actor_ids = {id(p) for p in actor.parameters()}
    critic_params = [p for p in loss_fn.parameters() if id(p) not in actor_ids]
    optim = torch.optim.Adam(
        [
            {"params": list(actor.parameters()), "lr": cfg.actor_lr},
            {"params": critic_params, "lr": cfg.critic_lr},
        ]
    )
    trainer = TD3Trainer(
        loss_module=loss_fn,
        optimizer=optim,
        policy_delay=cfg.policy_delay,
        target_net_updater=SoftUpdate(loss_fn, tau=cfg.tau),
        **_off_policy_kwargs(cfg, env, policy),
    )
    stopper = _EvalUntilSolved(
        common,
        eval_env,
        actor,
        cfg.eval_every,
        200,
        cfg.target_return,
        confirm=cfg.confirm,
        passes=cfg.passes_to_stop,
    )
    stopper.register(trainer)
    _train(trainer, stopper, "TD3Trainer")
    eval_env.close()
    final = _final_return(common, cfg, actor, 200)
    print(f"final return {final:.1f}", file=sys.stderr)
    assert final >= cfg.target_return, (
        f"TD3Trainer: final evaluation {final:.1f} over {cfg.final_eval_episodes} episodes is "
        f"below {cfg.target_return} after {trainer.collected_frames} frames; evaluations: "
        f"{stopper.evals}"
    )


@pytest.mark.slow
def test_ddpg_trainer_solves_pendulum(monkeypatch: pytest.MonkeyPatch) -> None:
    example, common = _import_example("ddpg_pendulum", monkeypatch)
    cfg = example.Config(seed=SEED, progress=False)
    env, eval_env, actor, critic, policy = _pendulum_setup(example, cfg)
    loss_fn = DDPGLoss(actor, critic, delay_actor=True, delay_value=True, loss_function="l2")
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    optim = torch.optim.Adam(
        [
            {"params": actor.parameters(), "lr": cfg.actor_lr},
            {"params": critic.parameters(), "lr": cfg.critic_lr},
        ]
    )
    trainer = DDPGTrainer(
        loss_module=loss_fn,
        optimizer=optim,
        target_net_updater=SoftUpdate(loss_fn, tau=cfg.tau),
        **_off_policy_kwargs(cfg, env, policy),
    )
    stopper = _EvalUntilSolved(
        common, eval_env, actor, cfg.eval_every, 200, cfg.target_return, confirm=cfg.confirm
    )
    stopper.register(trainer)
    _train(trainer, stopper, "DDPGTrainer")
    eval_env.close()
    final = _final_return(common, cfg, actor, 200)
    print(f"final return {final:.1f}", file=sys.stderr)
    assert final >= cfg.target_return, (
        f"DDPGTrainer: final evaluation {final:.1f} over {cfg.final_eval_episodes} episodes is "
        f"below {cfg.target_return} after {trainer.collected_frames} frames; evaluations: "
        f"{stopper.evals}"
    )


def _train_offline(
    trainer_cls: type, cfg: Any, common: ModuleType, loss_fn: Any, actor: Any, buffer: Any
) -> float:
    """``train_offline`` of ``iql_pendulum_offline.py`` through an offline trainer.

    Adam on every loss term, the cosine decay of the rate over the offline steps, soft target
    updates; one gradient step per trainer iteration (so the scheduler, stepped once per
    iteration, decays per step as in the example) and ``total_frames`` counting steps.
    Returns the final deterministic return over ``cfg.final_eval_episodes`` fresh episodes.
    """
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr)
    schedule = (
        torch.optim.lr_scheduler.CosineAnnealingLR(optim, cfg.offline_steps)
        if cfg.cosine_lr
        else None
    )
    trainer = trainer_cls(
        collector=None,
        total_frames=cfg.offline_steps,
        optim_steps_per_batch=1,
        loss_module=loss_fn,
        optimizer=optim,
        replay_buffer=buffer,
        batch_size=cfg.batch_size,
        target_net_updater=SoftUpdate(loss_fn, tau=cfg.tau),
        lr_scheduler=schedule,
        clip_norm=None,
        progress_bar=False,
        seed=cfg.seed,
    )
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    final = _final_return(common, cfg, actor, 200)
    print(
        f"\n{trainer_cls.__name__} seed {SEED}: {trainer.optim_count} gradient steps, "
        f"{wall:.1f} s offline, final return {final:.1f}",
        file=sys.stderr,
    )
    return final


@pytest.mark.slow
def test_iql_trainer_beats_behaviour(monkeypatch: pytest.MonkeyPatch) -> None:
    example, common = _import_example("iql_pendulum_offline", monkeypatch)
    cfg = example.Config(seed=SEED, progress=False)
    torch.manual_seed(cfg.seed)
    buffer, behaviour_return = example.make_dataset(cfg)
    env = GymEnv(cfg.env_name)
    actor, qvalue = example.sac_pendulum.make_agent(env, cfg.hidden)
    n_obs = env.observation_spec["observation"].shape[-1]
    value = ValueOperator(
        MLP(n_obs, 1, num_cells=[cfg.hidden, cfg.hidden], activation_class=torch.nn.ReLU),
        in_keys=["observation"],
    )
    loss_fn = IQLLoss(
        actor,
        qvalue,
        value,
        num_qvalue_nets=2,
        loss_function="l2",
        expectile=cfg.expectile,
        temperature=cfg.temperature,
    )
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    final = _train_offline(IQLTrainer, cfg, common, loss_fn, actor, buffer)
    print(f"behaviour return {behaviour_return:.1f}", file=sys.stderr)
    assert final > behaviour_return, (
        f"IQLTrainer: final return {final:.1f} does not beat the behaviour policy's "
        f"{behaviour_return:.1f}"
    )


@pytest.mark.slow
def test_cql_trainer_beats_behaviour(monkeypatch: pytest.MonkeyPatch) -> None:
    example, common = _import_example("cql_pendulum_offline", monkeypatch)
    offline = importlib.import_module("iql_pendulum_offline")
    cfg = example.Config(seed=SEED, progress=False)
    torch.manual_seed(cfg.seed)
    buffer, behaviour_return = offline.make_dataset(cfg)
    env = GymEnv(cfg.env_name)
    actor, qvalue = example.sac_pendulum.make_agent(env, cfg.hidden)
    loss_fn = CQLLoss(
        actor,
        qvalue,
        action_spec=env.action_spec,
        loss_function="l2",
        min_q_weight=cfg.min_q_weight,
    )
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    final = _train_offline(CQLTrainer, cfg, common, loss_fn, actor, buffer)
    print(f"behaviour return {behaviour_return:.1f}", file=sys.stderr)
    assert final > behaviour_return, (
        f"CQLTrainer: final return {final:.1f} does not beat the behaviour policy's "
        f"{behaviour_return:.1f}"
    )
