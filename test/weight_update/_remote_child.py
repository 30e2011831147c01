"""Child programs for the torch.distributed and RPC tests (each runs in a fresh process).

torch.distributed groups made in the pytest process would outlive the test (and a gloo group
made after Ray started breaks later forks); RPC can start only once per process. Each mode
prints ``CHILD-OK`` when every check passed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from torchrl.collectors.distributed.rpc_replay import (
    RENDEZVOUS_SCHEME,
    free_loopback_port,
    gloo_on_loopback,
    rpc_backend_options,
)
from torchrl.collectors.distributed.utils import listening_store
from torchrl.weight_update import DistributedWeightSyncScheme, RPCWeightSyncScheme
from torchrl.weight_update.weights import named_weights


def net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    model[1].running_mean.normal_()
    return model


def train_step(model: nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
        model[1].running_mean.add_(1.0)


def as_numpy(model: nn.Module) -> dict:
    return {k: v.detach().numpy().copy() for k, v in named_weights(model).items()}


def check_same(model: nn.Module, weights: dict) -> None:
    mine = named_weights(model)
    assert sorted(mine) == sorted(weights), (sorted(mine), sorted(weights))
    for k, v in weights.items():
        assert torch.equal(torch.from_numpy(v), mine[k]), k


def group(port: int, rank: int) -> dist.ProcessGroup:
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=False, timeout=timedelta(seconds=30))
    with gloo_on_loopback(True):
        return dist.ProcessGroupGloo(dist.PrefixStore("w", store), rank, 2, timedelta(seconds=30))


# ----------------------------------------------------------------------- torch.distributed
def dist_receiver(port: int, conn) -> None:
    model = net(1)
    scheme = DistributedWeightSyncScheme()
    scheme.init_on_receiver(model, group=group(port, 1), src=0)
    for _ in range(3):
        version = scheme.receive()
        conn.send((version, as_numpy(model)))
    conn.recv()  # stays alive until the sender has checked


def dist_scheme() -> None:
    store = listening_store("127.0.0.1", 0, 2, timedelta(seconds=30))
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=dist_receiver, args=(store.port, child), daemon=True)
    proc.start()
    try:
        with gloo_on_loopback(True):
            pg = dist.ProcessGroupGloo(dist.PrefixStore("w", store), 0, 2, timedelta(seconds=30))
        src = net(0)
        scheme = DistributedWeightSyncScheme()
        scheme.init_on_sender(src, group=pg, ranks=[1])
        for expected in (1, 2, 3):
            train_step(src)
            assert scheme.send() == expected
            version, weights = parent.recv()
            assert version == expected, version
            check_same(src, weights)
        parent.send("done")
        try:
            DistributedWeightSyncScheme(backend="nccl")
        except ValueError as err:
            assert "backend must be 'gloo'" in str(err)
        else:
            raise AssertionError("nccl accepted")
    finally:
        proc.join(20)
        if proc.is_alive():
            proc.kill()
    assert proc.exitcode == 0, proc.exitcode


# ------------------------------------------------------------------------------------- RPC
_MODEL: dict[str, nn.Module] = {}


def rpc_weights() -> tuple[int, dict]:
    from torchrl.weight_update.rpc_scheme import _RECEIVERS

    return _RECEIVERS["policy"].version, as_numpy(_MODEL["m"])


def rpc_receiver(init_method: str) -> None:
    from torch.distributed import rpc

    _MODEL["m"] = net(1)
    scheme = RPCWeightSyncScheme()
    scheme.init_on_receiver(_MODEL["m"])
    with gloo_on_loopback(True):
        rpc.init_rpc(
            "worker1",
            rank=1,
            world_size=2,
            rpc_backend_options=rpc_backend_options(init_method, 60, 4, True),
        )
    rpc.shutdown()  # graceful: waits for the sender


def rpc_scheme() -> None:
    from torch.distributed import rpc

    init_method = f"{RENDEZVOUS_SCHEME}://127.0.0.1:{free_loopback_port()}"
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=rpc_receiver, args=(init_method,), daemon=True)
    proc.start()
    try:
        with gloo_on_loopback(True):
            rpc.init_rpc(
                "trainer",
                rank=0,
                world_size=2,
                rpc_backend_options=rpc_backend_options(init_method, 60, 4, True),
            )
        src = net(0)
        scheme = RPCWeightSyncScheme()
        scheme.init_on_sender(src, worker_names=["worker1"])
        assert scheme.transports[0].check_connection()
        for expected in (1, 2, 3):
            train_step(src)
            assert scheme.send() == expected
            version, weights = rpc.rpc_sync("worker1", rpc_weights)
            assert version == expected, version
            check_same(src, weights)
        rpc.shutdown()
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    assert proc.exitcode == 0, proc.exitcode


# ------------------------------------------------------------------------------ collectors
def dist_collector() -> None:
    from _collector_helpers import counting_env, threshold_policy

    from torchrl.collectors.distributed import DistributedDataCollector
    from torchrl.collectors.distributed.weight_updaters import DistributedWeightUpdater

    for sync in (True, False):
        policy = threshold_policy()
        updater = DistributedWeightUpdater() if not sync else None
        collector = DistributedDataCollector(
            counting_env, policy, num_workers=2, sync=sync, launcher="mp",
            frames_per_batch=8, total_frames=48, timeout=60, weight_updater=updater,
        )  # fmt: skip
        scheme = collector.weight_sync_schemes["policy"]
        assert isinstance(scheme, DistributedWeightSyncScheme) and scheme.role == "sender"
        actions = []
        try:
            for i, batch in enumerate(collector):
                actions.append(batch["action"].float().mean().item())
                if i == 0:
                    with torch.no_grad():
                        policy.module.linear.bias.fill_(1.0)
                    collector.update_policy_weights_()
                    assert collector.policy_version == 1
        finally:
            collector.shutdown()
        assert actions[0] == 0.0 and actions[-1] == 1.0, (sync, actions)


def rpc_collector() -> None:
    from _collector_helpers import counting_env, threshold_policy

    from torchrl.collectors.distributed import RPCCollector
    from torchrl.collectors.distributed.weight_updaters import RPCWeightUpdater

    policy = threshold_policy()
    collector = RPCCollector(
        counting_env, policy, frames_per_batch=8, total_frames=40, num_workers=2, sync=True,
        timeout=60, weight_updater=RPCWeightUpdater(),
    )  # fmt: skip
    scheme = collector.weight_sync_schemes["policy"]
    assert isinstance(scheme, RPCWeightSyncScheme) and scheme.role == "sender"
    actions = []
    try:
        for i, batch in enumerate(collector):
            actions.append(batch["action"].float().mean().item())
            if i == 0:
                with torch.no_grad():
                    policy.module.linear.bias.fill_(1.0)
                collector.update_policy_weights_()
                assert collector.policy_version == 1
    finally:
        collector.shutdown()
    assert actions[0] == 0.0 and actions[-1] == 1.0, actions


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    start = time.monotonic()
    {
        "dist_scheme": dist_scheme,
        "rpc_scheme": rpc_scheme,
        "dist_collector": dist_collector,
        "rpc_collector": rpc_collector,
    }[sys.argv[1]]()
    print(f"CHILD-OK {time.monotonic() - start:.1f}s", flush=True)
