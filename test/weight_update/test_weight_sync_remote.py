"""Ray, torch.distributed and RPC schemes (the last two in child programs, see _remote_child)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch
from _ray_holder import holder_class, net, train_step

from torchrl.weight_update import RayModuleTransformScheme, RayTransport, RayWeightSyncScheme
from torchrl.weight_update.weights import named_weights

HERE = os.path.dirname(os.path.abspath(__file__))


def _check(src, state, version):
    got_version, weights = state
    assert got_version == version
    mine = named_weights(src)
    assert sorted(weights) == sorted(mine)
    for k, v in weights.items():
        assert torch.equal(v, mine[k]), k


def test_ray_scheme(ray_cluster):
    ray = ray_cluster
    holder = holder_class(ray)
    src = net(0)
    scheme = RayWeightSyncScheme(timeout=120)
    actors = [holder.remote(scheme.receiver_copy(), 10 + i) for i in range(2)]
    ray.get([a.state.remote() for a in actors], timeout=300)  # started (slow on a busy box)
    scheme.init_on_sender(src, actors=actors)
    assert isinstance(scheme.transports[0], RayTransport)
    try:
        for expected in (1, 2):
            train_step(src)
            assert scheme.send() == expected  # waits until both applied them
            for state in ray.get([a.state.remote() for a in actors]):
                _check(src, state, expected)
        train_step(src)
        assert scheme.send_async(worker_ids=[0]) == 3
        scheme.wait([0])
        _check(src, ray.get(actors[0].state.remote()), 3)
        assert ray.get(actors[1].state.remote())[0] == 2
        # a dead actor is an error naming the worker, within seconds
        ray.kill(actors[1])
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="worker 1: RayTransport: the actor died"):
            scheme.send()
        assert time.monotonic() - start < 10
    finally:
        for a in actors:
            ray.kill(a)


def test_ray_module_transform_scheme(ray_cluster):
    ray = ray_cluster
    holder = holder_class(ray)
    src = net(0)
    scheme = RayModuleTransformScheme(timeout=120)
    actor = holder.remote(scheme.receiver_copy(), 3)
    ray.get(actor.state.remote(), timeout=300)
    with pytest.raises(TypeError, match="give actor=, not actors="):
        RayModuleTransformScheme().init_on_sender(src, actors=[actor])
    scheme.init_on_sender(src, actor=actor)
    try:
        train_step(src)
        assert scheme.send() == 1
        _check(src, ray.get(actor.state.remote()), 1)
        # the legacy updater with its own actors: a RayWeightSyncScheme underneath
        from torchrl.collectors.weight_updaters import RayWeightUpdater

        train_step(src)
        updater = RayWeightUpdater(policy_weights=src, remote_collectors=[actor])
        assert updater.push_weights() == 1  # the updater's own scheme counts from 1
        state = ray.get(actor.state.remote())
        _check(src, state, 1)  # the receiver holds the version it was sent
    finally:
        ray.kill(actor)


def test_ray_collector_uses_its_scheme(ray_cluster):
    from _collector_helpers import counting_env, threshold_policy

    from torchrl.collectors.distributed import RayCollector
    from torchrl.collectors.weight_updaters import RayWeightUpdater

    for updater in (None, RayWeightUpdater()):
        policy = threshold_policy()
        collector = RayCollector(
            counting_env, policy, num_collectors=1, sync=True, frames_per_batch=4,
            total_frames=12, weight_updater=updater,
        )  # fmt: skip
        assert isinstance(collector.weight_sync_schemes["policy"], RayWeightSyncScheme)
        try:
            actions = []
            for i, batch in enumerate(collector):
                actions.append(batch["action"].float().mean().item())
                if i == 0:
                    with torch.no_grad():
                        policy.module.linear.bias.fill_(1.0)
                    collector.update_policy_weights_()
            assert actions == [0.0, 1.0, 1.0]
            assert collector.policy_version == 1
            held = collector.worker_weights(0)
            for name, value in policy.state_dict().items():
                assert torch.equal(held[name], value)
        finally:
            collector.shutdown()


def _run_child(mode: str) -> None:
    code = (
        f"import sys; sys.path[:0] = [{HERE!r}, {os.path.dirname(HERE)!r}]; "
        f"import _remote_child as c; c.{mode}(); print('CHILD-OK')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=HERE
    )
    assert out.returncode == 0 and "CHILD-OK" in out.stdout, out.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["dist_scheme", "rpc_scheme", "dist_collector", "rpc_collector"])
def test_distributed_and_rpc(mode):
    # torch.distributed (gloo on loopback) and RPC, each in a fresh process: a group made in
    # this process after Ray started breaks later forks, and RPC starts once per process
    _run_child(mode)
