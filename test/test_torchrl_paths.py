"""TorchRL's public module paths (from its docs and tutorials) resolve here to our own objects."""

import importlib

import pytest

import torchrl.data.specs as specs_names
import torchrl.envs.transforms as transform_names

SPECS = sorted(specs_names.__all__)
TRANSFORMS = sorted(transform_names.__all__)
SAMPLERS = [
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "RandomSampler",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
]
ESTIMATORS = ["GAE", "TD0Estimator", "TD1Estimator", "TDLambdaEstimator", "VTrace"]
LOGGERS = ["CSVLogger", "Logger", "MLFlowLogger", "TensorboardLogger", "WandbLogger"]

# (TorchRL's path, our canonical module, names TorchRL's docs import from that path)
PATHS = [
    ("torchrl.data.tensor_specs", "torchrl.data", SPECS),
    ("torchrl.data.postprocs", "torchrl.data", ["MultiStep"]),
    ("torchrl.data.postprocs.postprocs", "torchrl.data", ["MultiStep"]),
    ("torchrl.data.replay_buffers", "torchrl.data", [*SAMPLERS, "ReplayBuffer"]),
    ("torchrl.data.replay_buffers.samplers", "torchrl.data", SAMPLERS),
    (
        "torchrl.data.replay_buffers.storages",
        "torchrl.data",
        ["LazyMemmapStorage", "LazyTensorStorage", "ListStorage", "Storage", "TensorStorage"],
    ),
    (
        "torchrl.data.replay_buffers.writers",
        "torchrl.data",
        ["RoundRobinWriter", "TensorDictMaxValueWriter", "TensorDictRoundRobinWriter", "Writer"],
    ),
    (
        "torchrl.data.replay_buffers.replay_buffers",
        "torchrl.data",
        [
            "PrioritizedReplayBuffer",
            "ReplayBuffer",
            "TensorDictPrioritizedReplayBuffer",
            "TensorDictReplayBuffer",
        ],
    ),
    ("torchrl.envs.transforms.transforms", "torchrl.envs.transforms", TRANSFORMS),
    (
        "torchrl.envs.utils",
        "torchrl.envs",
        [
            "ExplorationType",
            "RandomPolicy",
            "check_env_specs",
            "exploration_type",
            "make_composite_from_td",
            "set_exploration_type",
            "step_mdp",
            "terminated_or_truncated",
        ],
    ),
    ("torchrl.envs.common", "torchrl.envs", ["EnvBase"]),
    ("torchrl.envs.batched_envs", "torchrl.envs", ["BatchedEnvBase", "ParallelEnv", "SerialEnv"]),
    ("torchrl.envs.env_creator", "torchrl.envs", ["EnvCreator"]),
    ("torchrl.envs.custom.pendulum", "torchrl.envs", ["PendulumEnv"]),
    (
        "torchrl.envs.libs.gym",
        "torchrl.envs",
        ["GymEnv", "GymWrapper", "default_info_dict_reader"],
    ),
    ("torchrl.envs.libs.dm_control", "torchrl.envs", ["DMControlEnv", "DMControlWrapper"]),
    ("torchrl.envs.libs.brax", "torchrl.envs", ["BraxEnv", "BraxWrapper"]),
    ("torchrl.envs.libs.envpool", "torchrl.envs", ["MultiThreadedEnv", "MultiThreadedEnvWrapper"]),
    ("torchrl.envs.libs.pettingzoo", "torchrl.envs", ["PettingZooEnv", "PettingZooWrapper"]),
    ("torchrl.envs.libs.vmas", "torchrl.envs", ["VmasEnv", "VmasWrapper"]),
    (
        "torchrl.modules.tensordict_module",
        "torchrl.modules",
        [
            "Actor",
            "ActorCriticWrapper",
            "ActorValueOperator",
            "EGreedyModule",
            "LSTMModule",
            "ProbabilisticActor",
            "QValueModule",
            "ValueOperator",
        ],
    ),
    (
        "torchrl.modules.tensordict_module.actors",
        "torchrl.modules",
        ["Actor", "ProbabilisticActor", "QValueActor", "QValueModule", "ValueOperator"],
    ),
    (
        "torchrl.modules.tensordict_module.exploration",
        "torchrl.modules",
        ["AdditiveGaussianModule", "EGreedyModule", "OrnsteinUhlenbeckProcessModule"],
    ),
    ("torchrl.modules.tensordict_module.rnn", "torchrl.modules", ["GRUModule", "LSTMModule"]),
    ("torchrl.modules.tensordict_module.world_models", "torchrl.modules", ["WorldModelWrapper"]),
    ("torchrl.modules.models", "torchrl.modules", ["ConvNet", "MLP", "MultiAgentMLP"]),
    ("torchrl.modules.models.models", "torchrl.modules", ["ConvNet", "DuelingCnnDQNet", "MLP"]),
    ("torchrl.modules.models.multiagent", "torchrl.modules", ["MultiAgentMLP"]),
    (
        "torchrl.modules.distributions",
        "torchrl.modules",
        ["MaskedCategorical", "OneHotCategorical", "TanhNormal"],
    ),
    ("torchrl.modules.distributions.continuous", "torchrl.modules", ["TanhNormal"]),
    ("torchrl.objectives.value", "torchrl.objectives.value", ESTIMATORS),
    ("torchrl.objectives.value.advantages", "torchrl.objectives.value", ESTIMATORS),
    (
        "torchrl.objectives.value.functional",
        "torchrl.objectives.value",
        ["generalized_advantage_estimate", "td_lambda_return_estimate"],
    ),
    (
        "torchrl.objectives.utils",
        "torchrl.objectives",
        ["HardUpdate", "SoftUpdate", "ValueEstimators", "distance_loss", "hold_out_net"],
    ),
    ("torchrl.objectives.common", "torchrl.objectives", ["LossModule"]),
    (
        "torchrl.objectives.ppo",
        "torchrl.objectives",
        ["ClipPPOLoss", "KLPENPPOLoss", "PPOLoss"],
    ),
    ("torchrl.objectives.dqn", "torchrl.objectives", ["DQNLoss", "DistributionalDQNLoss"]),
    ("torchrl.objectives.sac", "torchrl.objectives", ["DiscreteSACLoss", "SACLoss"]),
    ("torchrl.objectives.ddpg", "torchrl.objectives", ["DDPGLoss"]),
    ("torchrl.objectives.td3", "torchrl.objectives", ["TD3Loss"]),
    ("torchrl.objectives.a2c", "torchrl.objectives", ["A2CLoss"]),
    ("torchrl.objectives.multiagent.qmixer", "torchrl.objectives", ["QMixerLoss"]),
    ("torchrl.collectors.utils", "torchrl.collectors", ["split_trajectories"]),
    (
        "torchrl.collectors.collectors",
        "torchrl.collectors",
        [
            "DataCollectorBase",
            "MultiSyncDataCollector",
            "MultiaSyncDataCollector",
            "SyncDataCollector",
        ],
    ),
    ("torchrl.trainers", "torchrl.trainers", ["Trainer", "ReplayBufferTrainer", "LogReward"]),
    (
        "torchrl.trainers.trainers",
        "torchrl.trainers",
        ["LogReward", "Recorder", "ReplayBufferTrainer", "Trainer", "UpdateWeights"],
    ),
    ("torchrl.record", "torchrl.record", [*LOGGERS, "VideoRecorder"]),
    ("torchrl.record.recorder", "torchrl.record", ["VideoRecorder"]),
    ("torchrl.record.loggers", "torchrl.record", [*LOGGERS, "generate_exp_name", "get_logger"]),
    ("torchrl.record.loggers.csv", "torchrl.record", ["CSVLogger"]),
    ("torchrl.record.loggers.tensorboard", "torchrl.record", ["TensorboardLogger"]),
    ("torchrl.record.loggers.wandb", "torchrl.record", ["WandbLogger"]),
    ("torchrl.record.loggers.mlflow", "torchrl.record", ["MLFlowLogger"]),
    ("torchrl.record.loggers.utils", "torchrl.record", ["generate_exp_name", "get_logger"]),
]


@pytest.mark.parametrize(("path", "canonical", "names"), PATHS, ids=[p[0] for p in PATHS])
def test_torchrl_path_resolves_to_our_objects(path, canonical, names):
    module = importlib.import_module(path)
    home = importlib.import_module(canonical)
    for name in names:
        assert getattr(module, name) is getattr(home, name), f"{path}.{name}"
    if hasattr(module, "__all__"):
        assert set(names) <= set(module.__all__), sorted(set(names) - set(module.__all__))
