"""Collectors: compile_policy / cudagraph_policy, and data on the requested devices.

Every collector that runs a policy takes ``device``, ``env_device``, ``policy_device`` and
``storing_device``: batches land on the storing device and the policy sees its inputs on the
policy device. CPU variants run here; CUDA variants (a CUDA policy with CPU envs, storing on
CUDA, CUDA graphs) skip without CUDA. Compiling uses ``backend="eager"`` where the test is
about the collectors' plumbing, and one real inductor compile.
"""

from __future__ import annotations

import functools
import os
import warnings

import pytest
import torch

# What worker processes unpickle lives in an importable module: a "spawn" worker (the start
# method once CUDA is initialised) cannot import a test module loaded by pytest's importlib mode.
from _collector_helpers import DeviceCheck, OutOfBounds, marking_backend, pendulum
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from torchrl.collectors import (
    AsyncBatchedCollector,
    CollectorOptions,
    MultiaSyncDataCollector,
    MultiSyncDataCollector,
    SyncDataCollector,
    aSyncDataCollector,
)
from torchrl.collectors.distributed.generic import COLLECTOR_KEYWORDS
from torchrl.collectors.distributed.utils import worker_options
from torchrl.envs import PendulumEnv

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs CUDA")
EAGER = {"backend": "eager"}
MULTI = [MultiSyncDataCollector, MultiaSyncDataCollector]


def _policy(expected: str | None = None, seed: int = 0) -> TensorDictModule:
    torch.manual_seed(seed)
    return TensorDictModule(DeviceCheck(expected), ["observation"], ["action"])


def _mlp_policy(seed: int = 0) -> TensorDictModule:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1), nn.Tanh())
    return TensorDictModule(net, ["observation"], ["action"])


def _sequence_policy(seed: int = 0) -> TensorDictSequential:
    """Not a plain TensorDictModule: compiled whole, TensorDict in and out."""
    torch.manual_seed(seed)
    return TensorDictSequential(
        TensorDictModule(nn.Linear(3, 8), ["observation"], ["hidden"]),
        TensorDictModule(
            nn.Sequential(nn.Tanh(), nn.Linear(8, 1), nn.Tanh()), ["hidden"], ["action"]
        ),
    )


def _sync_batches(policy, n_batches: int = 2, **kwargs) -> list[TensorDictBase]:
    collector = SyncDataCollector(
        pendulum(), policy, frames_per_batch=8, total_frames=8 * n_batches, **kwargs
    )
    try:
        return [batch.clone() for batch in collector]
    finally:
        collector.shutdown()


def _leaf_devices(td: TensorDictBase) -> set[torch.device]:
    return {value.device for value in td.values(True, True)}


def _assert_same_rollouts(first: list[TensorDictBase], second: list[TensorDictBase]) -> None:
    assert len(first) == len(second)
    for a, b in zip(first, second):
        for key in ("observation", "action", ("next", "observation"), ("next", "reward")):
            torch.testing.assert_close(a[key].cpu(), b[key].cpu())


def _actions_match_weights(batch: TensorDictBase, net: nn.Module) -> None:
    """The stored actions are what ``net`` (with its current weights) computes."""
    with torch.no_grad():
        expected = net(batch["observation"].to(next(net.parameters()).device))
    torch.testing.assert_close(batch["action"], expected.to(batch["action"].device))


# ------------------------------------------------------------------------ devices: CPU variants
CPU_DEVICE_KWARGS = [
    pytest.param({"device": "cpu"}, id="device"),
    pytest.param(
        {"env_device": "cpu", "policy_device": "cpu", "storing_device": "cpu"}, id="all-explicit"
    ),
    pytest.param({"env_device": None, "policy_device": "cpu", "storing_device": None}, id="mixed"),
    pytest.param({"device": None, "storing_device": torch.device("cpu")}, id="storing-only"),
]


@pytest.mark.parametrize("kwargs", CPU_DEVICE_KWARGS)
def test_sync_cpu_devices(kwargs):
    policy = _policy("cpu")
    collector = SyncDataCollector(pendulum(), policy, frames_per_batch=8, total_frames=16, **kwargs)
    for batch in collector:
        assert _leaf_devices(batch) == {torch.device("cpu")}
    collector.shutdown()
    assert set(policy.module.seen) == {torch.device("cpu")}
    if kwargs.get("device") or kwargs.get("policy_device"):
        assert collector.policy_device == torch.device("cpu")


@pytest.mark.parametrize("cls", MULTI)
@pytest.mark.parametrize("kwargs", CPU_DEVICE_KWARGS[:3])
def test_multi_cpu_devices(cls, kwargs):
    collector = cls(
        [pendulum, pendulum], _policy("cpu"), frames_per_batch=8, total_frames=16, **kwargs
    )
    try:
        for batch in collector:
            assert _leaf_devices(batch) == {torch.device("cpu")}
    finally:
        collector.shutdown()


def test_async_single_worker_cpu_devices():
    collector = aSyncDataCollector(
        pendulum,
        _policy("cpu"),
        frames_per_batch=8,
        total_frames=16,
        env_device="cpu",
        policy_device="cpu",
        storing_device="cpu",
    )
    try:
        for batch in collector:
            assert _leaf_devices(batch) == {torch.device("cpu")}
    finally:
        collector.shutdown()


@pytest.mark.parametrize("kwargs", CPU_DEVICE_KWARGS[:3])
def test_async_batched_cpu_devices(kwargs):
    collector = AsyncBatchedCollector(
        [functools.partial(PendulumEnv)] * 2,
        policy=_policy("cpu"),
        frames_per_batch=8,
        total_frames=16,
        num_workers=1,
        num_splits=1,
        seed=0,
        **kwargs,
    )
    try:
        for batch in collector:
            assert _leaf_devices(batch) == {torch.device("cpu")}
        assert collector.policy_device in (None, torch.device("cpu"))
    finally:
        collector.shutdown()


@pytest.mark.parametrize("cls", [*MULTI, AsyncBatchedCollector])
def test_shared_memory_collectors_store_on_cpu_only(cls):
    fns = [PendulumEnv, PendulumEnv]
    with pytest.raises(ValueError, match="storing_device must be the CPU"):
        cls(fns, _policy(), frames_per_batch=8, total_frames=8, storing_device="cuda:0")


def test_distributed_collectors_forward_the_device_and_compile_keywords():
    for key in ("device", "storing_device", "env_device", "policy_device"):
        assert key in COLLECTOR_KEYWORDS
    assert COLLECTOR_KEYWORDS["compile_policy"] is None
    assert COLLECTOR_KEYWORDS["cudagraph_policy"] is None
    options, _ = worker_options(
        SyncDataCollector, {"frames_per_batch": 8, "compile_policy": {"backend": "eager"}}
    )
    assert options.compile_policy == {"backend": "eager"}
    options, _ = worker_options(
        MultiSyncDataCollector, {"frames_per_batch": 8, "compile_policy": True}
    )
    assert options.collector.compile_policy == {}


# ---------------------------------------------------------------------------- compile_policy
@pytest.mark.parametrize("make", [_mlp_policy, _sequence_policy], ids=["module", "sequence"])
def test_sync_compiled_rollout_equals_eager(make):
    eager = _sync_batches(make())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = _sync_batches(make(), compile_policy=EAGER)
    # compiled for real, not run eagerly after a failed compilation
    assert not [w for w in caught if "torch.compile failed" in str(w.message)]
    _assert_same_rollouts(eager, compiled)


def test_sync_compile_warmup_option():
    eager = _sync_batches(_mlp_policy())
    compiled = _sync_batches(_mlp_policy(), compile_policy={"backend": "aot_eager", "warmup": 3})
    _assert_same_rollouts(eager, compiled)


def test_sync_compiled_policy_sees_weight_updates():
    policy = _mlp_policy()
    collector = SyncDataCollector(
        pendulum(), policy, frames_per_batch=8, total_frames=-1, compile_policy=EAGER
    )
    batches = iter(collector)
    before = next(batches).clone()
    _actions_match_weights(before, policy.module)
    new = {k: v + 0.5 for k, v in policy.state_dict().items()}
    collector.update_policy_weights_(new)
    torch.testing.assert_close(policy.module[0].bias, new["module.0.bias"])
    after = next(batches)
    _actions_match_weights(after, policy.module)
    # the same observations give other actions with the new weights
    with torch.no_grad():
        assert not torch.allclose(policy.module(before["observation"]), before["action"])
    collector.shutdown()


def test_sync_compiled_policy_sees_parameters_changed_in_place():
    # an optimizer step writes into the parameters the compiled call reads
    policy = _mlp_policy()
    collector = SyncDataCollector(
        pendulum(), policy, frames_per_batch=8, total_frames=-1, compile_policy=EAGER
    )
    batches = iter(collector)
    next(batches)
    with torch.no_grad():
        for param in policy.parameters():
            param.mul_(-1.0)
    collector.update_policy_weights_()
    _actions_match_weights(next(batches), policy.module)
    collector.shutdown()


@pytest.mark.slow
def test_sync_compile_with_inductor_and_weight_update():
    # the one real inductor compile of the file (about 9 s on the 2-core dev box)
    policy = _mlp_policy()
    eager = _sync_batches(_mlp_policy())
    collector = SyncDataCollector(
        pendulum(), policy, frames_per_batch=8, total_frames=-1, compile_policy=True
    )
    batches = iter(collector)
    compiled = [next(batches).clone(), next(batches).clone()]
    _assert_same_rollouts(eager, compiled)
    collector.update_policy_weights_({k: v * 2 for k, v in policy.state_dict().items()})
    _actions_match_weights(next(batches), policy.module)
    collector.shutdown()


class _DataDependent(nn.Module):
    """A network dynamo cannot trace in one graph (a branch on a tensor's value)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        out = self.linear(observation).tanh()
        if out.sum() > 1e6:
            return out * 0
        return out


def test_sync_compile_failure_warns_once_and_runs_eagerly():
    def make():
        torch.manual_seed(0)
        return TensorDictModule(_DataDependent(), ["observation"], ["action"])

    eager = _sync_batches(make())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = _sync_batches(make(), compile_policy={"backend": "eager", "fullgraph": True})
    failures = [w for w in caught if "torch.compile failed" in str(w.message)]
    assert len(failures) == 1
    assert "SyncDataCollector" in str(failures[0].message)
    assert "Unsupported" in str(failures[0].message)
    _assert_same_rollouts(eager, compiled)


@pytest.mark.parametrize("cls", MULTI)
def test_multi_workers_compile_their_policy(cls, tmp_path):
    backend = functools.partial(marking_backend, str(tmp_path))

    def run(**kwargs):
        torch.manual_seed(0)
        policy = _mlp_policy()
        collector = cls(
            [pendulum, pendulum], policy, frames_per_batch=16, total_frames=32, **kwargs
        )
        try:
            return policy, [b.clone() for b in collector]
        finally:
            collector.shutdown()

    _, eager = run()
    policy, compiled = run(compile_policy={"backend": backend})
    marks = [name for name in os.listdir(tmp_path) if name.startswith("compiled-")]
    assert len(marks) == 2  # one compile per worker process
    assert f"compiled-{os.getpid()}" not in marks  # the parent compiles nothing
    if cls is MultiSyncDataCollector:
        _assert_same_rollouts(eager, compiled)
    for batch in compiled:
        _actions_match_weights(batch, policy.module)


def test_multi_compiled_workers_see_weight_updates():
    policy = _mlp_policy()
    collector = MultiSyncDataCollector(
        [pendulum, pendulum],
        policy,
        frames_per_batch=16,
        total_frames=-1,
        compile_policy={"backend": "aot_eager"},
    )
    try:
        batches = iter(collector)
        _actions_match_weights(next(batches), policy.module)
        with torch.no_grad():
            for param in policy.parameters():
                param.add_(0.25)
        collector.update_policy_weights_()
        _actions_match_weights(next(batches), policy.module)
    finally:
        collector.shutdown()


def test_async_batched_compiled_server_and_weight_update():
    policy = _mlp_policy()
    collector = AsyncBatchedCollector(
        [PendulumEnv] * 2,
        policy=policy,
        frames_per_batch=8,
        total_frames=-1,
        num_workers=1,
        num_splits=1,
        seed=0,
        compile_policy=EAGER,
    )
    try:
        batches = iter(collector)
        _actions_match_weights(next(batches), policy.module)
        # constant actions from the new weights: rows with version 1 show them
        new = {k: torch.zeros_like(v) for k, v in policy.state_dict().items()}
        new["module.2.bias"] = torch.full_like(new["module.2.bias"], 0.75)
        collector.update_policy_weights_(new)
        for _ in range(20):
            batch = next(batches)
            fresh = batch["policy_version"] >= 1
            if fresh.any():
                actions = batch["action"][fresh]
                torch.testing.assert_close(actions, torch.full_like(actions, 0.75).tanh())
                break
        else:
            pytest.fail("no step was collected with the updated weights")
    finally:
        collector.shutdown()


# ------------------------------------------------------------------------- bad option values
@pytest.mark.parametrize("name", ["compile_policy", "cudagraph_policy"])
@pytest.mark.parametrize("value", ["yes", 1, ["backend"]])
def test_bad_option_types_name_the_collector_and_option(name, value):
    with pytest.raises(TypeError, match=f"SyncDataCollector: {name} must be a bool, a dict"):
        SyncDataCollector(pendulum(), _policy(), frames_per_batch=8, **{name: value})


@pytest.mark.parametrize("name", ["DistributedCollector", "RPCCollector"])
def test_distributed_bad_compile_option_raises_before_launch(name):
    import torchrl.collectors.distributed as distributed

    cls = getattr(distributed, name)
    with pytest.raises(TypeError, match="compile_policy must be a bool, a dict"):
        cls(
            PendulumEnv, None, frames_per_batch=8, total_frames=8, num_workers=1,
            compile_policy="inductor",
        )  # fmt: skip


def test_unknown_compile_keys_are_rejected_at_construction():
    with pytest.raises(ValueError, match=r"compile_policy has unknown keys \['fullgraf'\]"):
        SyncDataCollector(pendulum(), _policy(), frames_per_batch=8, compile_policy={"fullgraf": 1})
    with pytest.raises(ValueError, match=r"compile_policy\['warmup'\] must be an int >= 0"):
        CollectorOptions(frames_per_batch=8, compile_policy={"warmup": -1})


@pytest.mark.parametrize("cls", MULTI)
def test_multi_bad_compile_option_raises_before_starting_workers(cls):
    with pytest.raises(TypeError, match=f"{cls.__name__}: compile_policy must be a bool"):
        cls([pendulum, pendulum], _policy(), frames_per_batch=8, compile_policy="inductor")


def test_async_batched_bad_compile_option():
    with pytest.raises(ValueError, match="AsyncBatchedCollector: compile_policy has unknown keys"):
        AsyncBatchedCollector(
            [PendulumEnv] * 2, policy=_policy(), frames_per_batch=8, compile_policy={"x": 1}
        )


def test_cudagraph_keys_are_checked():
    with pytest.raises(ValueError, match=r"cudagraph_policy has unknown keys \['in_keys'\]"):
        CollectorOptions(frames_per_batch=8, cudagraph_policy={"in_keys": ["observation"]})


@pytest.mark.skipif(CUDA, reason="checks the error on a machine without CUDA")
@pytest.mark.parametrize("cls", [SyncDataCollector, MultiSyncDataCollector, AsyncBatchedCollector])
def test_cudagraph_without_cuda_is_a_clear_error(cls):
    env = pendulum() if cls is SyncDataCollector else [PendulumEnv, PendulumEnv]
    with pytest.raises(ValueError, match="cudagraph_policy needs CUDA"):
        cls(env, _policy(), frames_per_batch=8, cudagraph_policy=True)


@needs_cuda
@pytest.mark.parametrize("cls", [SyncDataCollector, MultiSyncDataCollector, AsyncBatchedCollector])
def test_cudagraph_needs_a_cuda_policy(cls):
    env = pendulum() if cls is SyncDataCollector else [PendulumEnv, PendulumEnv]
    with pytest.raises(ValueError, match="cudagraph_policy needs the .*policy on a CUDA device"):
        cls(env, _policy(), frames_per_batch=8, cudagraph_policy=True, policy_device="cpu")


# ---------------------------------------------------------------------- devices: CUDA variants
@needs_cuda
def test_sync_cuda_policy_cpu_env_cuda_storage():
    policy = _policy("cuda")
    collector = SyncDataCollector(
        pendulum(),
        policy,
        frames_per_batch=8,
        total_frames=16,
        env_device="cpu",
        policy_device="cuda",
        storing_device="cuda",
    )
    for batch in collector:
        assert {d.type for d in _leaf_devices(batch)} == {"cuda"}
    running = collector.policy  # a CUDA copy of the CPU policy
    assert {d.type for d in running.module.seen} == {"cuda"}
    assert collector.env.device.type == "cpu"
    collector.shutdown()


@needs_cuda
def test_sync_all_on_cuda_with_device():
    collector = SyncDataCollector(
        pendulum(), _policy("cuda"), frames_per_batch=8, total_frames=16, device="cuda"
    )
    for batch in collector:
        assert {d.type for d in _leaf_devices(batch)} == {"cuda"}
    assert collector.env.device.type == "cuda"
    collector.shutdown()


@needs_cuda
def test_sync_cuda_policy_cpu_storage_mixed_none():
    collector = SyncDataCollector(
        pendulum(),
        _policy("cuda"),
        frames_per_batch=8,
        total_frames=16,
        policy_device="cuda",
        storing_device=None,
    )
    for batch in collector:
        assert _leaf_devices(batch) == {torch.device("cpu")}
    collector.shutdown()


@needs_cuda
@pytest.mark.parametrize("cls", MULTI)
def test_multi_cuda_policy_cpu_envs(cls):
    collector = cls(
        [pendulum, pendulum],
        _policy("cuda"),
        frames_per_batch=8,
        total_frames=16,
        policy_device="cuda",
        env_device="cpu",
        mp_start_method="spawn",
    )
    try:
        for batch in collector:
            assert _leaf_devices(batch) == {torch.device("cpu")}
    finally:
        collector.shutdown()


@needs_cuda
def test_async_batched_cuda_server():
    collector = AsyncBatchedCollector(
        [PendulumEnv] * 2,
        policy=_policy("cuda"),
        frames_per_batch=8,
        total_frames=16,
        num_workers=1,
        num_splits=1,
        seed=0,
        policy_device="cuda",
    )
    try:
        for batch in collector:
            assert _leaf_devices(batch) == {torch.device("cpu")}
    finally:
        collector.shutdown()


@needs_cuda
@pytest.mark.parametrize("compile_policy", [None, EAGER], ids=["graph", "compiled-graph"])
def test_sync_cudagraph_rollout_equals_eager_and_sees_weight_updates(compile_policy):
    kwargs = {"policy_device": "cuda", "storing_device": "cuda"}
    eager = _sync_batches(_mlp_policy(), **kwargs)
    policy = _mlp_policy()
    collector = SyncDataCollector(
        pendulum(),
        policy,
        frames_per_batch=8,
        total_frames=-1,
        cudagraph_policy=True,
        compile_policy=compile_policy,
        **kwargs,
    )
    batches = iter(collector)
    graphed = [next(batches).clone(), next(batches).clone()]
    _assert_same_rollouts(eager, graphed)
    running = collector.policy.module
    collector.update_policy_weights_({k: v - 0.3 for k, v in policy.state_dict().items()})
    _actions_match_weights(next(batches), running)
    collector.shutdown()


@needs_cuda
def test_sync_cudagraph_sequence_policy():
    kwargs = {"policy_device": "cuda"}
    eager = _sync_batches(_sequence_policy(), **kwargs)
    graphed = _sync_batches(_sequence_policy(), cudagraph_policy={"warmup": 3}, **kwargs)
    _assert_same_rollouts(eager, graphed)


@needs_cuda
def test_async_batched_cudagraph_server():
    policy = _mlp_policy()
    collector = AsyncBatchedCollector(
        [PendulumEnv] * 4,
        policy=policy,
        frames_per_batch=16,
        total_frames=48,
        num_workers=1,
        num_splits=2,
        seed=0,
        policy_device="cuda",
        cudagraph_policy=True,
    )
    try:
        for batch in collector:
            _actions_match_weights(batch, policy.module)
    finally:
        collector.shutdown()


# ------------------------------------------------------------------- worker errors reach the parent
def test_async_worker_error_reaches_the_parent():
    # A worker that collects ahead has unread messages of the parent when it fails; closing
    # its pipe with them unread used to reset the connection, and the parent reported a
    # worker "died unexpectedly (exit code 0)" instead of the worker's error.
    for _ in range(3):
        policy = TensorDictModule(OutOfBounds(), ["observation"], ["action"])
        collector = aSyncDataCollector(pendulum, policy, frames_per_batch=8, total_frames=16)
        try:
            with pytest.raises(ValueError, match="does not fit the action spec"):
                list(collector)
        finally:
            collector.shutdown()
