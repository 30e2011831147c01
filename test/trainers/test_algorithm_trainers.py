"""Algorithm trainers (torchrl.trainers.algorithms) and building them from config files."""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import sys

import pytest
import torch
from _trainer_helpers import FakeCollector
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn

from torchrl.collectors import SyncDataCollector
from torchrl.data import (
    LazyTensorStorage,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
    TensorDictReplayBuffer,
)
from torchrl.envs import PendulumEnv
from torchrl.modules import MLP, ProbabilisticActor, TanhModule, TanhNormal, ValueOperator
from torchrl.objectives import (
    A2CLoss,
    ClipPPOLoss,
    CQLLoss,
    DDPGLoss,
    HardUpdate,
    IQLLoss,
    ReinforceLoss,
    SACLoss,
    SoftUpdate,
    TD3Loss,
)
from torchrl.trainers.algorithms import (
    A2CTrainer,
    CQLTrainer,
    DDPGTrainer,
    DQNTrainer,
    IQLTrainer,
    OfflineIterations,
    OfflineToOnlineTrainer,
    OnPolicyTrainer,
    PPOTrainer,
    ReinforceTrainer,
    SACTrainer,
    TD3Trainer,
)
from torchrl.trainers.algorithms.configs import (
    EnvConfig,
    OptimConfig,
    PPOTrainerConfig,
    SACTrainerConfig,
    apply_overrides,
    build,
    compose_config,
    config_from_dict,
    config_to_dict,
    from_config,
    load_config,
    parse_overrides,
    parse_value,
    run_with_config,
)
from torchrl.trainers.hooks import UpdateWeights

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
CONFIGS = os.path.join(EXAMPLES, "configs")
HAS_HYDRA = importlib.util.find_spec("hydra") is not None
HAS_GYM = importlib.util.find_spec("gymnasium") is not None


# -- tiny pieces -----------------------------------------------------------------------------
def stochastic_actor(env, return_log_prob: bool = True) -> ProbabilisticActor:
    net = TensorDictModule(
        nn.Sequential(MLP(in_features=3, out_features=2, num_cells=[8]), NormalParamExtractor()),
        ["observation"],
        ["loc", "scale"],
    )
    return ProbabilisticActor(
        net,
        in_keys=["loc", "scale"],
        spec=env.action_spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": -2.0, "high": 2.0},
        return_log_prob=return_log_prob,
    )


def deterministic_actor(env) -> TensorDictSequential:
    return TensorDictSequential(
        TensorDictModule(MLP(3, 1, num_cells=[8]), ["observation"], ["action"]),
        TanhModule(["action"], spec=env.action_spec),
    )


def value_net() -> ValueOperator:
    return ValueOperator(MLP(in_features=3, out_features=1, num_cells=[8]), in_keys=["observation"])


def qvalue_net() -> ValueOperator:
    return ValueOperator(
        MLP(in_features=4, out_features=1, num_cells=[8]), ["observation", "action"]
    )


def collector(env, policy, frames_per_batch: int = 20, total: int = 40) -> SyncDataCollector:
    return SyncDataCollector(env, policy, frames_per_batch=frames_per_batch, total_frames=total)


def adam(module: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam(module.parameters(), lr=1e-3)


def params(module: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def changed(before: list[torch.Tensor], module: nn.Module) -> bool:
    return any(not torch.equal(b, p) for b, p in zip(before, module.parameters(), strict=True))


def dataset(n: int = 64) -> ReplayBuffer:
    """Random Pendulum transitions, as an offline dataset.

    A plain ``ReplayBuffer``: a ``TensorDictReplayBuffer`` adds ``"index"`` to its samples,
    which the online half of an ``OfflineToOnlineReplayBuffer`` sample lacks.
    """
    env = PendulumEnv()
    env.set_seed(0)
    data = env.rollout(n, break_when_any_done=False)
    rb = ReplayBuffer(storage=LazyTensorStorage(1000))
    rb.extend(data.exclude("params", ("next", "params")))
    return rb


class RecordingLoss(nn.Module):
    """Records the observations of every minibatch it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.seen: list[torch.Tensor] = []

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        self.seen.append(td["observation"].squeeze(-1).clone())
        return TensorDict(loss_w=(self.w - td["observation"].mean()) ** 2)


# -- on-policy -------------------------------------------------------------------------------
def test_ppo_trainer_runs_and_registers_hooks() -> None:
    torch.manual_seed(0)
    env = PendulumEnv()
    actor, critic = stochastic_actor(env), value_net()
    loss = ClipPPOLoss(actor, critic)
    before = params(actor)
    trainer = PPOTrainer(
        collector=collector(env, actor),
        total_frames=40,
        loss_module=loss,
        optimizer=adam(loss),
        batch_size=10,
        progress_bar=False,
    )
    # 4 epochs (PPO's default) of 20 // 10 minibatches.
    assert trainer.num_epochs == 4 and trainer.optim_steps_per_batch == 8
    assert any(isinstance(op, UpdateWeights) for op in trainer.ops("post_steps"))
    assert "optimizer" in trainer.state_dict()["modules"]
    trainer.train()
    assert trainer.collected_frames == 40 and trainer.optim_count == 16
    assert changed(before, actor)
    for key in ("loss_objective", "loss_critic", "r_training", "action_norm"):
        assert key in trainer.latest_logs


def test_on_policy_epochs_cover_every_item_once() -> None:
    loss = RecordingLoss()
    trainer = OnPolicyTrainer(
        collector=FakeCollector(frames_per_batch=12, total_frames=24),
        total_frames=24,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
        num_epochs=3,
        batch_size=4,
        add_gae=False,
        progress_bar=False,
    )
    assert trainer.optim_steps_per_batch == 9
    trainer.train()
    assert len(loss.seen) == 18
    for batch_index in range(2):
        for epoch in range(3):
            start = batch_index * 9 + epoch * 3
            seen = torch.cat(loss.seen[start : start + 3]).sort().values
            expected = torch.arange(12.0) + 12 * batch_index
            assert torch.equal(seen, expected)


def test_on_policy_replay_buffer_holds_only_the_latest_batch() -> None:
    loss = RecordingLoss()
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
    trainer = OnPolicyTrainer(
        collector=FakeCollector(frames_per_batch=10, total_frames=30),
        total_frames=30,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
        replay_buffer=rb,
        batch_size=5,
        add_gae=False,
        progress_bar=False,
    )
    trainer.train()
    assert len(rb) == 10
    assert bool((torch.cat(loss.seen[-2:]) >= 20).all())


@pytest.mark.parametrize("cls,loss_cls", [(A2CTrainer, A2CLoss), (ReinforceTrainer, ReinforceLoss)])
def test_single_pass_trainers(cls, loss_cls) -> None:
    env = PendulumEnv()
    actor = stochastic_actor(env)
    loss = loss_cls(actor, value_net())
    trainer = cls(
        collector=collector(env, actor),
        total_frames=40,
        loss_module=loss,
        optimizer=adam(loss),
        progress_bar=False,
    )
    assert trainer.num_epochs == 1 and trainer.optim_steps_per_batch == 1
    trainer.train()
    assert trainer.optim_count == 2
    assert trainer.gae is not None


def test_on_policy_errors() -> None:
    env = PendulumEnv()
    actor = stochastic_actor(env)
    no_critic = ClipPPOLoss(actor)
    with pytest.raises(ValueError, match="add_gae"):
        PPOTrainer(collector=collector(env, actor), total_frames=20, loss_module=no_critic)
    with pytest.raises(ValueError, match="frames_per_batch"):
        PPOTrainer(
            collector=[TensorDict()],
            total_frames=20,
            loss_module=RecordingLoss(),
            batch_size=4,
            add_gae=False,
        )
    with pytest.raises(ValueError, match="num_epochs"):
        PPOTrainer(
            collector=collector(env, actor), total_frames=20, loss_module=no_critic, num_epochs=0
        )


def test_lr_scheduler_and_hooks() -> None:
    loss = RecordingLoss()
    optim = torch.optim.SGD(loss.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(optim, step_size=1, gamma=0.5)
    registered = []

    class Hook:
        def register(self, trainer):
            registered.append(trainer)

    trainer = A2CTrainer(
        collector=FakeCollector(frames_per_batch=4, total_frames=12),
        total_frames=12,
        loss_module=loss,
        optimizer=optim,
        add_gae=False,
        lr_scheduler=sched,
        hooks=[Hook()],
        progress_bar=False,
    )
    assert registered == [trainer] and "lr_scheduler" in trainer.state_dict()["modules"]
    trainer.train()
    assert optim.param_groups[0]["lr"] == pytest.approx(0.125)
    with pytest.raises(TypeError, match="register"):
        A2CTrainer(
            collector=FakeCollector(),
            total_frames=10,
            loss_module=loss,
            add_gae=False,
            hooks=[lambda batch: None],
        )


# -- off-policy ------------------------------------------------------------------------------
def test_sac_trainer_buffer_and_soft_update() -> None:
    env = PendulumEnv()
    actor = stochastic_actor(env, return_log_prob=False)
    loss = SACLoss(actor, qvalue_net())
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000))
    trainer = SACTrainer(
        collector=collector(env, actor),
        total_frames=40,
        optim_steps_per_batch=3,
        loss_module=loss,
        optimizer=adam(loss),
        replay_buffer=rb,
        batch_size=8,
        target_net_updater=SoftUpdate(loss, tau=0.1),
        progress_bar=False,
    )
    assert trainer.target_net_updater.step in trainer.ops("post_optim")
    targets = loss.network_params("qvalue_network", target=True)
    before = [t.clone() for t in targets.values(True, True)]
    trainer.train()
    assert len(rb) == 40 and trainer.optim_count == 6
    after = loss.network_params("qvalue_network", target=True).values(True, True)
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))
    for key in ("loss_actor", "loss_qvalue", "loss_alpha"):
        assert key in trainer.latest_logs


def test_off_policy_without_buffer_uses_the_batch_and_no_updater() -> None:
    loss = RecordingLoss()
    trainer = SACTrainer(
        collector=FakeCollector(frames_per_batch=10, total_frames=20),
        total_frames=20,
        optim_steps_per_batch=2,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
        batch_size=4,
        progress_bar=False,
    )
    assert trainer.target_net_updater is None
    trainer.train()
    assert [s.shape[0] for s in loss.seen] == [4] * 4
    assert bool((loss.seen[-1] >= 10).all())


@pytest.mark.skipif(not HAS_GYM, reason="gymnasium is not installed")
def test_dqn_trainer_hard_update() -> None:
    from torchrl.envs import GymEnv
    from torchrl.modules import EGreedyModule, QValueActor
    from torchrl.objectives import DQNLoss

    env = GymEnv("CartPole-v1")
    actor = QValueActor(MLP(4, 2, num_cells=[8]), in_keys=["observation"], spec=env.action_spec)
    egreedy = EGreedyModule(env.action_spec, eps_init=1.0, eps_end=0.1, annealing_num_steps=64)
    loss = DQNLoss(actor, delay_value=True)
    trainer = DQNTrainer(
        collector=collector(
            env, TensorDictSequential(actor, egreedy), frames_per_batch=16, total=32
        ),
        total_frames=32,
        optim_steps_per_batch=2,
        loss_module=loss,
        optimizer=adam(loss),
        replay_buffer=TensorDictReplayBuffer(storage=LazyTensorStorage(100)),
        batch_size=8,
        target_net_updater=HardUpdate(loss, value_network_update_interval=3),
        greedy_module=egreedy,
        progress_bar=False,
    )
    trainer.train()
    assert trainer.optim_count == 4 and trainer.target_net_updater.counter == 4 % 3
    # two batches of 16 frames: epsilon went half way from 1.0 to 0.1
    assert egreedy.eps.item() == pytest.approx(0.55)
    assert trainer.state_dict()["exploration"]  # checkpointed with the collector's policy
    with pytest.warns(UserWarning, match="target_net_updater"):
        DQNTrainer(collector=collector(env, actor), total_frames=1, loss_module=loss)


def test_ddpg_trainer() -> None:
    env = PendulumEnv()
    actor = deterministic_actor(env)
    loss = DDPGLoss(actor, qvalue_net(), delay_actor=True, delay_value=True)
    before = params(actor)
    trainer = DDPGTrainer(
        collector=collector(env, actor),
        total_frames=40,
        optim_steps_per_batch=2,
        loss_module=loss,
        optimizer=adam(loss),
        replay_buffer=TensorDictReplayBuffer(storage=LazyTensorStorage(100)),
        batch_size=8,
        target_net_updater=SoftUpdate(loss, tau=0.01),
        progress_bar=False,
    )
    trainer.train()
    assert trainer.optim_count == 4 and changed(before, actor)


@pytest.mark.parametrize("steps,actor_moves", [(1, False), (2, True)])
def test_td3_trainer_delays_the_actor(steps: int, actor_moves: bool) -> None:
    torch.manual_seed(0)
    env = PendulumEnv()
    actor, critic = deterministic_actor(env), qvalue_net()
    loss = TD3Loss(actor, critic, action_spec=env.action_spec)
    actor_before = params(actor)
    trainer = TD3Trainer(
        collector=collector(env, actor, frames_per_batch=20, total=20),
        total_frames=20,
        optim_steps_per_batch=steps,
        loss_module=loss,
        optimizer=adam(loss),
        replay_buffer=TensorDictReplayBuffer(storage=LazyTensorStorage(100)),
        batch_size=8,
        policy_delay=2,
        target_net_updater=SoftUpdate(loss, tau=0.01),
        progress_bar=False,
    )
    trainer.train()
    assert changed(actor_before, actor) is actor_moves
    assert "loss_actor" in trainer.latest_logs


@pytest.mark.parametrize("cls", [IQLTrainer, CQLTrainer])
def test_offline_trainers(cls) -> None:
    env = PendulumEnv()
    actor = stochastic_actor(env, return_log_prob=False)
    if cls is IQLTrainer:
        loss = IQLLoss(actor, qvalue_net(), value_net())
    else:
        loss = CQLLoss(actor, qvalue_net(), action_spec=env.action_spec)
    rb = dataset()
    rb_len = len(rb)
    trainer = cls(
        collector=None,
        total_frames=12,
        optim_steps_per_batch=4,
        loss_module=loss,
        optimizer=adam(loss),
        replay_buffer=rb,
        batch_size=16,
        target_net_updater=SoftUpdate(loss, tau=0.01),
        progress_bar=False,
    )
    assert isinstance(trainer.collector, OfflineIterations)
    trainer.train()
    assert trainer.optim_count == 12 and trainer.collected_frames == 12
    assert len(rb) == rb_len  # the dataset is never written to
    with pytest.raises(ValueError, match="replay_buffer"):
        cls(collector=None, total_frames=12, loss_module=loss)


# -- offline to online -----------------------------------------------------------------------
def test_offline_to_online_pretrains_then_anneals() -> None:
    env = PendulumEnv()
    actor = stochastic_actor(env, return_log_prob=False)
    loss = SACLoss(actor, qvalue_net())
    rb = OfflineToOnlineReplayBuffer(dataset(), online_capacity=500, offline_fraction=0.5)
    online_frames = []

    trainer = OfflineToOnlineTrainer(
        collector=collector(env, actor, frames_per_batch=20, total=60),
        total_frames=60,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=adam(loss),
        replay_buffer=rb,
        batch_size=8,
        offline_steps=7,
        anneal_frames=40,
        target_net_updater=SoftUpdate(loss, tau=0.01),
        progress_bar=False,
    )
    trainer.register_op("post_steps", lambda: online_frames.append(rb.offline_fraction))
    trainer.train()
    assert trainer.offline_steps_done == 7 and trainer.optim_count == 7 + 3
    # Annealed after each batch (20, 40, 60 frames of 40), logged before the op above ran.
    assert online_frames == pytest.approx([0.25, 0.0, 0.0])
    assert len(rb.online_buffer) == 60
    offline_keys = set(rb.offline_buffer.sample(1).keys(True, True))
    assert set(rb.online_buffer.sample(1).keys(True, True)) == offline_keys
    assert trainer.state_dict()["modules"]["offline_to_online"]["offline_steps_done"] == 7


def test_offline_to_online_plain_buffer_and_errors() -> None:
    env = PendulumEnv()
    actor = stochastic_actor(env, return_log_prob=False)
    loss = SACLoss(actor, qvalue_net())
    rb = dataset(32)
    trainer = OfflineToOnlineTrainer(
        collector=collector(env, actor, frames_per_batch=10, total=10),
        total_frames=10,
        loss_module=loss,
        optimizer=adam(loss),
        replay_buffer=rb,
        batch_size=8,
        offline_steps=3,
        target_net_updater=SoftUpdate(loss, tau=0.01),
        progress_bar=False,
    )
    trainer.train()
    assert trainer.optim_count == 4 and len(rb) == 42
    with pytest.raises(ValueError, match="replay_buffer"):
        OfflineToOnlineTrainer(collector=None, total_frames=1, loss_module=loss, replay_buffer=None)
    with pytest.raises(ValueError, match="offline_steps"):
        OfflineToOnlineTrainer(
            collector=None, total_frames=1, loss_module=loss, replay_buffer=rb, offline_steps=-1
        )


# -- configs ---------------------------------------------------------------------------------
def test_parse_value_and_overrides() -> None:
    assert parse_value("1e-4") == pytest.approx(1e-4)
    assert parse_value("-3") == -3 and parse_value("False") is False
    assert parse_value("[]") == [] and parse_value("[a, 2]") == ["a", 2]
    assert parse_value('"1"') == "1" and parse_value("none") is None
    assert parse_overrides(["a.b=1", "c=x=y"]) == {"a.b": 1, "c": "x=y"}
    with pytest.raises(ValueError, match="key=value"):
        parse_overrides(["lr"])


@pytest.mark.skipif(HAS_HYDRA, reason="Hydra is installed: these arguments are Hydra's")
@pytest.mark.parametrize("arg", ["--multirun", "+new=1", "~env", "hydra.run.dir=x", "optim.lr=1,2"])
def test_hydra_only_arguments_name_the_extra(arg: str) -> None:
    with pytest.raises(ImportError, match=r'pip install "torchrl\[hydra\]"'):
        parse_overrides([arg])


def test_apply_overrides_errors_name_the_key() -> None:
    cfg = config_to_dict(PPOTrainerConfig())
    out = apply_overrides(cfg, {"optim.lr": 0.5, "env.name": "X"})
    assert out["optim"]["lr"] == 0.5 and cfg["optim"]["lr"] != 0.5  # a copy
    with pytest.raises(KeyError, match=r"optim\.lrr.*'lrr'.*keys there"):
        apply_overrides(cfg, {"optim.lrr": 1})
    with pytest.raises(KeyError, match=r"'envv' at the top level"):
        apply_overrides(cfg, {"envv.name": 1})


def test_config_from_dict_checks_keys_and_types() -> None:
    cfg = config_from_dict(
        PPOTrainerConfig, {"optim": {"lr": 1}, "collector": {"total_frames": 1e3}}
    )
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float)
    assert cfg.collector.total_frames == 1000 and isinstance(cfg.collector.total_frames, int)
    assert cfg.env == EnvConfig()
    with pytest.raises(KeyError, match=r"'env\.nmae' is unknown"):
        config_from_dict(PPOTrainerConfig, {"env": {"nmae": "x"}})
    with pytest.raises(TypeError, match=r"'collector\.total_frames'"):
        config_from_dict(PPOTrainerConfig, {"collector": {"total_frames": 1.5}})
    with pytest.raises(TypeError, match=r"'optim\.name'"):
        config_from_dict(OptimConfig, {"name": "Adamm"}, "optim")
    with pytest.raises(TypeError, match=r"'trainer\.progress_bar'"):
        config_from_dict(PPOTrainerConfig, {"trainer": {"progress_bar": "yes"}})
    assert config_from_dict(PPOTrainerConfig, config_to_dict(cfg)) == cfg


def test_load_config_formats(tmp_path) -> None:
    data = {"optim": {"lr": 0.01}}
    (tmp_path / "c.json").write_text(json.dumps(data))
    (tmp_path / "c.toml").write_text("[optim]\nlr = 0.01\n")
    assert load_config(tmp_path / "c.json") == data == load_config(tmp_path / "c.toml")
    (tmp_path / "c.ini").write_text("")
    with pytest.raises(ValueError, match="unknown config format"):
        load_config(tmp_path / "c.ini")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ValueError, match="mapping"):
        load_config(tmp_path / "list.json")
    cfg = compose_config(PPOTrainerConfig, tmp_path / "c.json", ["optim.name=SGD"])
    assert cfg.optim.lr == 0.01 and cfg.optim.name == "SGD"
    (tmp_path / "bad.json").write_text(json.dumps({"optim": {"rate": 1}}))
    with pytest.raises(KeyError, match=r"'optim\.rate'"):
        compose_config(PPOTrainerConfig, tmp_path / "bad.json")


@pytest.mark.parametrize(
    "name,cls,example",
    [
        ("ppo_cartpole", PPOTrainerConfig, "ppo_cartpole_trainer"),
        ("sac_pendulum", SACTrainerConfig, "sac_pendulum_trainer"),
    ],
)
def test_example_yaml_matches_the_trainer_example(name, cls, example, monkeypatch) -> None:
    pytest.importorskip("yaml")
    cfg = compose_config(cls, os.path.join(CONFIGS, f"{name}.yaml"))
    # The file sets every field: nothing is left to the dataclass defaults.
    assert config_to_dict(cfg) == load_config(os.path.join(CONFIGS, f"{name}.yaml"))
    if not HAS_GYM:
        return
    monkeypatch.syspath_prepend(EXAMPLES)
    ref = importlib.import_module(example).Config()
    assert cfg.env.name == ref.env_name and cfg.optim.lr == ref.lr
    assert cfg.collector.total_frames == ref.frames and cfg.eval.target_return == ref.target_return
    if cls is PPOTrainerConfig:
        assert cfg.collector.frames_per_batch == ref.num_envs * ref.steps_per_env
        assert (cfg.loss.gamma, cfg.loss.lmbda) == (ref.gamma, ref.gae_lambda)
        assert cfg.trainer.num_epochs == ref.optim_steps_per_batch
        assert cfg.loss.clip_epsilon == ref.clip_epsilon
    else:
        assert cfg.loss.tau == ref.tau and cfg.replay_buffer.batch_size == ref.batch_size
        assert cfg.collector.init_random_frames == ref.init_random_frames


def test_run_with_config_without_hydra(tmp_path) -> None:
    (tmp_path / "c.json").write_text(json.dumps({"env": {"name": "Pendulum-v1"}}))
    got = run_with_config(
        lambda cfg: cfg, PPOTrainerConfig, tmp_path / "c.json", ["optim.lr=0.5"], use_hydra=False
    )
    assert got.env.name == "Pendulum-v1" and got.optim.lr == 0.5
    if not HAS_HYDRA:
        with pytest.raises(ImportError, match=r'pip install "torchrl\[hydra\]"'):
            run_with_config(print, PPOTrainerConfig, tmp_path / "c.json", [], use_hydra=True)


@pytest.mark.skipif(not HAS_HYDRA, reason="hydra-core is not installed")
def test_run_with_config_under_hydra(tmp_path, monkeypatch) -> None:
    import yaml

    monkeypatch.chdir(tmp_path)
    # Under Hydra the file is the whole schema: it lists every key.
    full = config_to_dict(PPOTrainerConfig(env=EnvConfig(name="Pendulum-v1")))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(full))
    got: list = []
    run_dir = f"hydra.run.dir={tmp_path / 'run'}"
    run_with_config(got.append, PPOTrainerConfig, tmp_path / "c.yaml", ["optim.lr=0.5", run_dir])
    assert got[0].env.name == "Pendulum-v1" and got[0].optim.lr == 0.5


@pytest.mark.skipif(not HAS_GYM, reason="gymnasium is not installed")
def test_build_ppo_and_sac_from_config(tmp_path) -> None:
    tiny = [
        "collector.total_frames=64",
        "collector.frames_per_batch=32",
        "trainer.progress_bar=false",
        f"logger.log_dir={tmp_path}",
        "eval.every=32",
        "eval.episodes=2",
        "eval.max_steps=20",
        "eval.target_return=1e9",
        "loss.minibatch_size=16",
        "trainer.num_epochs=2",
    ]
    built = build(PPOTrainerConfig(), tiny)
    assert isinstance(built.trainer, PPOTrainer) and built.trainer.optim_steps_per_batch == 4
    built.trainer.train()
    assert [f for f, _ in built.eval_history] == [32, 64]
    assert list(tmp_path.rglob("*.csv")), "the CSV logger wrote nothing"
    sac_tiny = [t for t in tiny if not t.startswith(("loss.", "trainer.num"))]
    sac_tiny += ["collector.init_random_frames=32", "replay_buffer.batch_size=8"]
    trainer = from_config(SACTrainerConfig(), [*sac_tiny, "trainer.optim_steps_per_batch=2"])
    assert isinstance(trainer, SACTrainer)
    trainer.train()
    # No optimization during the random frames.
    assert trainer.optim_count == 2 and len(trainer.replay_buffer) == 64
    with pytest.raises(TypeError, match="discrete"):
        build(SACTrainerConfig(env=EnvConfig(name="CartPole-v1")))
    with pytest.raises(KeyError, match="'loss.clip'"):
        build(PPOTrainerConfig(), ["loss.clip=0.1"])


@pytest.mark.skipif(not HAS_GYM, reason="gymnasium is not installed")
@pytest.mark.skipif(HAS_HYDRA, reason="Hydra reads the command line when installed")
def test_hydra_example_smoke(tmp_path, monkeypatch, capsys) -> None:
    pytest.importorskip("yaml")
    path = os.path.join(EXAMPLES, "ppo_cartpole_hydra.py")
    args = ["collector.total_frames=256", "eval.every=256", "eval.episodes=2"]
    monkeypatch.setattr(sys, "argv", [path, *args, "--out", str(tmp_path), "--no-progress"])
    monkeypatch.syspath_prepend(EXAMPLES)
    runpy.run_path(path, run_name="__main__")
    assert "final deterministic evaluation return" in capsys.readouterr().out
    assert list(tmp_path.glob("*.png"))
    monkeypatch.setattr(sys, "argv", [path, "optim.lrr=1"])
    with pytest.raises(KeyError, match=r"'optim\.lrr'"):
        runpy.run_path(path, run_name="__main__")
