"""Every name that the envs/data/collectors half of the TorchRL-compatibility work adds resolves at
TorchRL's documented module path, and each has a behaviour test somewhere in the suite."""

import importlib
import pathlib

import pytest

TRANSFORMS = [
    "ActionScaling",
    "AutoResetEnv",
    "AutoResetTransform",
    "BatchSizeTransform",
    "BinarizeReward",
    "ConditionalPolicySwitch",
    "ConditionalSkip",
    "Crop",
    "DeviceCastTransform",
    "DiscreteActionProjection",
    "EndOfLifeTransform",
    "ExpandAs",
    "FiniteTensorDictCheck",
    "FlattenAction",
    "Hash",
    "LineariseRewards",
    "MacroAction",
    "MacroPrimitive",
    "MacroPrimitiveTransform",
    "MeanActionSelector",
    "ModuleTransform",
    "MultiAction",
    "NextObservationDelta",
    "PinMemoryTransform",
    "R3MTransform",
    "RandomCropTensorDict",
    "RandomTruncationTransform",
    "RemoveEmptySpecs",
    "RNDTransform",
    "RunningMeanStd",
    "SignTransform",
    "Stack",
    "SuccessReward",
    "TargetMacroAction",
    "TerminateTransform",
    "Timer",
    "TrajCounter",
    "URScriptPrimitiveTransform",
    "UnaryTransform",
    "VC1Transform",
    "VecGymEnvTransform",
    "VIPRewardTransform",
    "VIPTransform",
    "VecNormV2",
    "gSDENoise",
]
ENVS = [
    "AntEnv",
    "ChessEnv",
    "GymLikeEnv",
    "HopperEnv",
    "HumanoidEnv",
    "LLMHashingEnv",
    "MujocoEnv",
    "TicTacToeEnv",
    "Walker2dEnv",
    "get_available_libraries",
    "gym_backend",
    "make_composite_from_td",
    "register_gym_spec_conversion",
    "set_gym_backend",
    "terminated_or_truncated",
]
SAMPLE_UNITS = ["SampleUnit", "Sequence", "Transition"]

# (TorchRL's documented module path, names it documents there)
PATHS = [
    ("torchrl.envs.transforms", TRANSFORMS),
    ("torchrl.envs.transforms.transforms", TRANSFORMS),
    ("torchrl.envs", [n for n in TRANSFORMS if not n.startswith(("Macro", "Target"))] + ENVS),
    ("torchrl.envs.transforms.functional", ["cat_frames"]),
    ("torchrl.envs.gym_like", ["GymLikeEnv"]),
    ("torchrl.envs.transforms.r3m", ["R3MTransform"]),
    ("torchrl.envs.transforms.vip", ["VIPRewardTransform", "VIPTransform"]),
    ("torchrl.envs.transforms.vc1", ["VC1Transform"]),
    ("torchrl.envs.libs.gym", ["gym_backend", "register_gym_spec_conversion", "set_gym_backend"]),
    ("torchrl.envs.custom.tictactoeenv", ["TicTacToeEnv"]),
    ("torchrl.envs.custom.chess", ["ChessEnv"]),
    ("torchrl.envs.utils", ["RandomPolicy", "make_composite_from_td", "terminated_or_truncated"]),
    ("torchrl.record", ["PixelRenderTransform", "TensorDictRecorder"]),
    ("torchrl.record.recorder", ["PixelRenderTransform", "TensorDictRecorder"]),
    ("torchrl.modules", ["RandomPolicy"]),
    ("torchrl.modules.tensordict_module", ["RandomPolicy"]),
    (
        "torchrl.data",
        [
            "PrioritizedSliceSampler",
            "RayReplayBuffer",
            "RemoteTensorDictReplayBuffer",
            "VideoClipRef",
            *SAMPLE_UNITS,
        ],
    ),
    ("torchrl.data.replay_buffers", ["ConsumingSampler", "PrioritizedSliceSampler", *SAMPLE_UNITS]),
    ("torchrl.data.replay_buffers.samplers", ["ConsumingSampler", "PrioritizedSliceSampler"]),
    ("torchrl.collectors", ["BaseCollector", "Evaluator", "MultiCollector", "aSyncDataCollector"]),
    (
        "torchrl.collectors.distributed",
        [
            "DistributedCollector",
            "DistributedSyncCollector",
            "RPCCollector",
            "RayEvalWorker",
            "submitit_delayed_launcher",
        ],
    ),
    (
        "torchrl.checkpoint",
        [
            "Checkpoint",
            "CheckpointError",
            "CheckpointFormat",
            "CheckpointLoadResult",
            "CheckpointOptions",
            "CheckpointRotation",
            "CheckpointStrictness",
            "DumpLoadCheckpointAdapter",
            "GlobalRNGState",
            "JSONCheckpointAdapter",
            "StateDictCheckpointAdapter",
        ],
    ),
    (
        "torchrl.record.loggers",
        ["Every", "LoggerMonitor", "ProcessLogger", "RayLogger", "TrackioLogger"],
    ),
    (
        "torchrl.trainers.loggers",
        ["Every", "LoggerMonitor", "ProcessLogger", "RayLogger", "TrackioLogger"],
    ),
]
# TorchRL's newer homes of the custom envs, not packages of their own here everywhere.
MUJOCO_PATHS = [
    (
        "torchrl.envs.custom.mujoco",
        ["AntEnv", "HopperEnv", "HumanoidEnv", "MujocoEnv", "Walker2dEnv"],
    ),
]


@pytest.mark.parametrize(
    ("path", "names"), PATHS + MUJOCO_PATHS, ids=[p for p, _ in PATHS + MUJOCO_PATHS]
)
def test_name_resolves_at_torchrl_path(path, names):
    module = importlib.import_module(path)
    missing = [name for name in names if not hasattr(module, name)]
    assert not missing, f"{path} lacks {missing}"


def test_same_object_at_every_path():
    seen: dict[str, object] = {}
    for path, names in PATHS + MUJOCO_PATHS:
        module = importlib.import_module(path)
        for name in names:
            obj = getattr(module, name)
            assert seen.setdefault(name, obj) is obj, f"{path}.{name} is a second object"


def test_every_name_has_a_behaviour_test():
    """Each name is used by some test file besides the import checks."""
    here = pathlib.Path(__file__).parent
    skip = {pathlib.Path(__file__).name, "test_torchrl_paths.py"}
    text = "\n".join(p.read_text() for p in here.rglob("test_*.py") if p.name not in skip)
    names = {name for _, ns in PATHS + MUJOCO_PATHS for name in ns}
    untested = sorted(name for name in names if name not in text)
    assert not untested, f"no test uses {untested}"
