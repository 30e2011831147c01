"""Every local and multi-process collector sends its weights through its "policy" scheme.

Also: ``track_policy_version`` (a ``"policy_version"`` entry per step) and the legacy
weight updaters.
"""

from __future__ import annotations

import pytest
import torch
from _collector_helpers import counting_env, threshold_policy
from tensordict import TensorDict

from torchrl.collectors import MultiaSyncDataCollector, MultiSyncDataCollector, SyncDataCollector
from torchrl.collectors.weight_updaters import (
    MultiProcessedWeightUpdater,
    VanillaWeightUpdater,
    WeightUpdaterBase,
)
from torchrl.weight_update import (
    MultiProcessWeightSyncScheme,
    NoWeightSyncScheme,
    RayWeightSyncScheme,
    SharedMemWeightSyncScheme,
)

KEY = "policy_version"


def _set_bias(policy, value):
    with torch.no_grad():
        policy.module.linear.bias.fill_(value)


# ------------------------------------------------------------------------------ SyncDataCollector
@pytest.mark.parametrize("use_buffers", [True, False])
def test_sync_collector_scheme_versions_and_actions(use_buffers):
    policy = threshold_policy()
    collector = SyncDataCollector(
        counting_env(batch=2), policy, frames_per_batch=8, total_frames=32,
        track_policy_version=True, use_buffers=use_buffers,
    )  # fmt: skip
    scheme = collector.weight_sync_schemes["policy"]
    assert isinstance(scheme, SharedMemWeightSyncScheme) and scheme.role == "sender"
    versions, actions = [], []
    for i, batch in enumerate(collector):
        assert batch[KEY].shape == batch.batch_size  # [2, T]
        assert batch[KEY].dtype == torch.int64
        versions.append(batch[KEY].unique().tolist())
        actions.append(batch["action"].float().mean().item())
        _set_bias(policy, 1.0 if i % 2 == 0 else -1.0)
        collector.update_policy_weights_()
    assert versions == [[0], [1], [2], [3]]
    assert actions == [0.0, 1.0, 0.0, 1.0]
    assert collector.policy_version == 4
    collector.shutdown()


def test_sync_collector_explicit_weights():
    policy = threshold_policy()
    collector = SyncDataCollector(counting_env(), policy, frames_per_batch=4)
    new = TensorDict.from_module(threshold_policy())
    new["module", "linear", "bias"] = torch.full((1,), 2.0)
    collector.update_policy_weights_(new)
    assert torch.equal(policy.module.linear.bias, torch.full((1,), 2.0))
    assert collector.policy_version == 1
    with pytest.raises(KeyError, match="no weights named"):
        collector.update_policy_weights_({"nope": torch.zeros(1)})
    collector.shutdown()


def test_sync_collector_version_off_by_default_and_random_policy():
    collector = SyncDataCollector(counting_env(), None, frames_per_batch=4, total_frames=8)
    batch = next(iter(collector))
    assert KEY not in batch.keys()
    collector.update_policy_weights_()  # no weights: the version still counts
    assert collector.policy_version == 1
    collector.shutdown()


def test_sync_collector_no_weight_sync_scheme():
    policy = threshold_policy()
    scheme = NoWeightSyncScheme()
    collector = SyncDataCollector(
        counting_env(), policy, frames_per_batch=4, weight_sync_schemes={"policy": scheme}
    )
    collector.update_policy_weights_({"module.linear.bias": torch.ones(1)})
    assert policy.module.linear.bias.item() == -1.0  # nothing moved
    assert scheme.version == collector.policy_version == 1
    collector.shutdown()


def test_bad_weight_sync_arguments():
    env = counting_env()
    with pytest.raises(TypeError, match="weight_sync_schemes must be a dict"):
        SyncDataCollector(env, None, frames_per_batch=4, weight_sync_schemes=[1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"weight_sync_schemes\['policy'\] must map .* got int"):
        SyncDataCollector(env, None, frames_per_batch=4, weight_sync_schemes={"policy": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="was not initialised"):
        SyncDataCollector(
            env, threshold_policy(), frames_per_batch=4,
            weight_sync_schemes={"policy": MultiProcessWeightSyncScheme()},
        )  # fmt: skip
    with pytest.raises(TypeError, match="weight_updater must be a WeightUpdaterBase"):
        SyncDataCollector(env, None, frames_per_batch=4, weight_updater=object())
    with pytest.raises(ValueError, match="must be True or False"):
        SyncDataCollector(env, None, frames_per_batch=4, track_policy_version="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be a SharedMemWeightSyncScheme"):
        MultiSyncDataCollector(
            [counting_env], None, frames_per_batch=4,
            weight_sync_schemes={"policy": RayWeightSyncScheme()},
        )  # fmt: skip
    used = SharedMemWeightSyncScheme()
    used.init_on_sender(threshold_policy())
    with pytest.raises(ValueError, match="already initialised"):
        MultiSyncDataCollector(
            [counting_env], None, frames_per_batch=4, weight_sync_schemes={"policy": used}
        )


# ----------------------------------------------------------------------- legacy updaters
def test_vanilla_weight_updater():
    policy = threshold_policy()
    updater = VanillaWeightUpdater(policy_weights=TensorDict.from_module(policy))
    updater.push_weights({"module.linear.bias": torch.ones(1)})
    assert policy.module.linear.bias.item() == 1.0
    # registered with a collector and without targets: the collector's scheme
    source = threshold_policy()
    _set_bias(source, 1.0)
    target = threshold_policy()
    calls = []
    updater = VanillaWeightUpdater(weight_getter=lambda: TensorDict.from_module(source))
    updater.register_post_hook(lambda: calls.append(1))
    collector = SyncDataCollector(
        counting_env(), target, frames_per_batch=4, weight_updater=updater
    )
    assert updater.collector is collector
    collector.update_policy_weights_()
    assert target.module.linear.bias.item() == 1.0 and calls == [1]
    assert collector.policy_version == 1
    collector.shutdown()
    assert isinstance(WeightUpdaterBase.from_policy(policy), VanillaWeightUpdater)
    assert WeightUpdaterBase.from_policy(lambda td: td) is None
    with pytest.raises(RuntimeError, match="has no targets"):
        VanillaWeightUpdater().push_weights()


# -------------------------------------------------------------------- multi-process collectors
@pytest.mark.parametrize(
    "scheme_cls", [SharedMemWeightSyncScheme, MultiProcessWeightSyncScheme, None]
)
def test_multi_sync_collector_schemes(scheme_cls):
    policy = threshold_policy()
    schemes = {"policy": scheme_cls()} if scheme_cls is not None else None
    collector = MultiSyncDataCollector(
        [counting_env, counting_env], policy, frames_per_batch=8, total_frames=32,
        track_policy_version=True, weight_sync_schemes=schemes, cat_results="stack",
    )  # fmt: skip
    scheme = collector.weight_sync_schemes["policy"]
    assert isinstance(scheme, scheme_cls or SharedMemWeightSyncScheme)
    try:
        versions, actions = [], []
        for i, batch in enumerate(collector):
            assert batch[KEY].shape == batch.batch_size
            versions.append(batch[KEY].unique().tolist())
            actions.append(batch["action"].float().mean().item())
            _set_bias(policy, 1.0 if i % 2 == 0 else -1.0)
            collector.update_policy_weights_()
        assert versions == [[0], [1], [2], [3]]
        assert actions == [0.0, 1.0, 0.0, 1.0]
        assert collector.policy_version == 4
        # every worker holds exactly the sender's weights
        state = collector.state_dict()
        for w in range(2):
            for name, value in policy.state_dict().items():
                assert torch.equal(state[f"worker{w}"]["policy_state_dict"][name], value)
    finally:
        collector.shutdown()


def test_multi_async_collector_multiprocess_scheme():
    policy = threshold_policy()
    collector = MultiaSyncDataCollector(
        [counting_env, counting_env], policy, frames_per_batch=4, total_frames=80,
        track_policy_version=True,
        weight_sync_schemes={"policy": MultiProcessWeightSyncScheme()},
    )  # fmt: skip
    try:
        seen = []
        for i, batch in enumerate(collector):
            version = batch[KEY]
            seen.append((int(version.min()), int(version.max()), batch["action"].float()))
            if i == 2:
                _set_bias(policy, 1.0)
                collector.update_policy_weights_()  # returns once both workers acknowledged
        assert collector.policy_version == 1
        last_min, _, last_actions = seen[-1]
        assert last_min == 1 and bool((last_actions == 1).all())
        # steps stamped 0 ran with the old weights (action 0), 1 with the new ones
        assert seen[0][1] == 0 and bool((seen[0][2] == 0).all())
    finally:
        collector.shutdown()


def test_multiprocessed_weight_updater():
    policy = threshold_policy()
    collector = MultiSyncDataCollector(
        [counting_env], policy, frames_per_batch=4, total_frames=8,
        weight_updater=MultiProcessedWeightUpdater(),
    )  # fmt: skip
    try:
        it = iter(collector)
        assert next(it)["action"].float().mean().item() == 0.0
        _set_bias(policy, 1.0)
        collector.update_policy_weights_()
        assert next(it)["action"].float().mean().item() == 1.0
        assert collector.policy_version == 1
    finally:
        collector.shutdown()
    shared = {"cpu": TensorDict.from_module(threshold_policy()).clone()}
    updater = MultiProcessedWeightUpdater(
        get_server_weights=lambda: TensorDict.from_module(policy), policy_weights=shared
    )
    updater.push_weights()
    assert shared["cpu"]["module", "linear", "bias"].item() == 1.0
