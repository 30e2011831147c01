"""Every name that the modules/objectives/trainers half of the TorchRL-compatibility work adds
resolves at TorchRL's documented module path, and each has a behaviour test in the suite."""

import importlib
import pathlib

import pytest

SAFE = [
    "SafeModule",
    "SafeProbabilisticModule",
    "SafeProbabilisticTensorDictSequential",
    "SafeSequential",
]
NETS = [
    "Conv3dNet",
    "CrossCriticGroupSpec",
    "CrossGroupCritic",
    "CrossGroupCriticSpec",
    "DdpgCnnActor",
    "DdpgCnnQNet",
    "DdpgMlpActor",
    "DdpgMlpQNet",
    "DistributionalDQNnet",
    "OnlineDTActor",
]
VALUE = [
    "ComposeValueTransform",
    "IdentityValueTransform",
    "PopArtValueNorm",
    "RunningValueNorm",
    "SignedHyperbolicValueTransform",
    "SymLogValueTransform",
    "ValueNorm",
    "ValueTransform",
]
MODULES = [
    *SAFE,
    *NETS,
    *VALUE,
    "ConsistentDropoutModule",
    "ReparamGradientStrategy",
    "set_exploration_modules_spec_from_env",
]
MCTS = ["EXP3Score", "MCTSScore", "MCTSScores", "PUCTScore", "UCB1TunedScore", "UCBScore"]
LOSSES = [
    "ACTLoss",
    "CrossQLoss",
    "DiffusionBCLoss",
    "GAILLoss",
    "IPPOLoss",
    "MAPPOLoss",
    "MultiAgentGAE",
    "RNDLoss",
    "TQCLoss",
]
HOOKS = [
    "LRSchedulerHook",
    "TargetNetUpdaterHook",
    "TrainerHookBase",
    "UTDRHook",
    "ValueEstimatorHook",
]
ALGORITHM_TRAINERS = [
    "A2CTrainer",
    "CQLTrainer",
    "DDPGTrainer",
    "DQNTrainer",
    "IQLTrainer",
    "OfflineToOnlineTrainer",
    "OnPolicyTrainer",
    "PPOTrainer",
    "ReinforceTrainer",
    "SACTrainer",
    "TD3Trainer",
]
HELPERS = [
    "correct_for_frame_skip",
    "get_stats_random_rollout",
    "make_collector_offpolicy",
    "make_collector_onpolicy",
    "make_dqn_loss",
    "make_replay_buffer",
    "make_target_updater",
    "make_trainer",
    "parallel_env_constructor",
    "sync_async_collector",
    "sync_sync_collector",
    "transformed_env_constructor",
]

# (TorchRL's documented module path, names it documents there)
PATHS = [
    ("torchrl.modules", MODULES),
    ("torchrl.modules.tensordict_module", [*SAFE, "DiffusionActor"]),
    ("torchrl.modules.functional", ["signed_hyperbolic", "signed_parabolic", "symexp", "symlog"]),
    (
        "torchrl.modules.distributions.utils",
        ["composite_entropy", "rsample_and_log_prob", "sample_and_log_prob"],
    ),
    ("torchrl.modules.mcts", MCTS),
    ("torchrl.objectives", [*LOSSES, "AUTO_LOSS_MASK_KEYS", "add_random_module"]),
    ("torchrl.objectives.multiagent", ["IPPOLoss", "MAPPOLoss"]),
    ("torchrl.objectives.value", ["MultiAgentGAE"]),
    ("torchrl.trainers", HOOKS),
    ("torchrl.trainers.algorithms", ALGORITHM_TRAINERS),
    ("torchrl.trainers.helpers", HELPERS),
]


@pytest.mark.parametrize(("path", "names"), PATHS, ids=[p for p, _ in PATHS])
def test_name_resolves_at_torchrl_path(path, names):
    module = importlib.import_module(path)
    missing = [name for name in names if not hasattr(module, name)]
    assert not missing, f"{path} lacks {missing}"


def test_same_object_at_every_path():
    seen: dict[str, object] = {}
    for path, names in PATHS:
        module = importlib.import_module(path)
        for name in names:
            obj = getattr(module, name)
            assert seen.setdefault(name, obj) is obj, f"{path}.{name} is a second object"


def test_every_name_has_a_behaviour_test():
    """Each name is used by some test file besides the import checks."""
    here = pathlib.Path(__file__).parent
    skip = {pathlib.Path(__file__).name, "test_issue17_names.py", "test_torchrl_paths.py"}
    text = "\n".join(p.read_text() for p in here.rglob("test_*.py") if p.name not in skip)
    names = {name for _, ns in PATHS for name in ns}
    untested = sorted(name for name in names if name not in text)
    assert not untested, f"no test uses {untested}"
