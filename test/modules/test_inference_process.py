"""Tests of ProcessInferenceServer, MPTransport, RayTransport and PolicyClientModule."""

from __future__ import annotations

import functools
import gc
import multiprocessing as mp
import os
import signal
import sys
import time

import pytest
import torch
from tensordict import TensorDict

from torchrl.modules.inference_server import (
    InferenceServer,
    MPTransport,
    PolicyClientModule,
    ProcessInferenceServer,
    ServerGoneError,
    SharedMemoryTransport,
    ThreadingTransport,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_inference_workers import (  # noqa: E402 - spawned workers import it by this name
    ACT_DIM,
    OBS_DIM,
    example,
    expected_action,
    free_layout_worker,
    make_policy,
    obs_for,
    policy_factory,
    set_scale,
    worker_loop,
    worker_until_error,
)


def _start(ctx, target, *args):
    proc = ctx.Process(target=target, args=args, daemon=True)
    proc.start()
    return proc


def _join_all(procs, timeout=30.0):
    deadline = time.monotonic() + timeout
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    codes = [proc.exitcode for proc in procs]
    for proc in procs:
        if proc.exitcode is None:
            proc.kill()
            proc.join()
    return codes


# ---------------------------------------------------------------- MPTransport
def test_mp_transport_free_layouts_and_routing():
    ctx = mp.get_context("fork")
    transport = MPTransport(ctx)
    clients = [transport.client() for _ in range(3)]
    # fork before the serving thread runs: a fork while another thread holds a lock (here,
    # the queues' feeder threads) can leave the child blocked on a copy of that lock
    procs = [_start(ctx, free_layout_worker, clients[i], i, 40) for i in range(3)]
    with InferenceServer(make_policy(), transport) as server:
        codes = _join_all(procs)
        stats = server.stats()
    assert codes == [0, 0, 0]
    assert stats["requests"] == 120
    assert not mp.active_children()


def test_mp_transport_several_in_flight_and_stop():
    transport = MPTransport()
    client = transport.client()
    server = InferenceServer(make_policy(2.0), transport).start()
    handles = [
        client.submit(TensorDict(observation=torch.full((OBS_DIM,), float(i)))) for i in range(5)
    ]
    # taken in any order: each handle gets its own response
    for i in reversed(range(5)):
        assert handles[i].result(timeout=10)["action"].tolist() == [8.0 * i] * 2
    server.shutdown()
    with pytest.raises(ServerGoneError):
        client(TensorDict(observation=torch.zeros(OBS_DIM)))


def test_mp_transport_worker_sees_stop():
    ctx = mp.get_context("fork")
    transport = MPTransport(ctx, poll_interval=0.1)
    client = transport.client()
    server = InferenceServer(make_policy(), transport).start()
    proc = _start(ctx, worker_until_error, client, 2)
    time.sleep(0.3)
    t0 = time.monotonic()
    server.shutdown()
    proc.join(10)
    assert proc.exitcode == 7 and time.monotonic() - t0 < 10


# ---------------------------------------------------------------- ProcessInferenceServer
def test_process_server_serves_workers_and_takes_weights():
    ctx = mp.get_context("fork")
    transport = SharedMemoryTransport()
    clients = [transport.client(example=example(2)) for _ in range(2)]
    local = transport.client(example=example(1))
    server = ProcessInferenceServer(
        policy_factory=functools.partial(policy_factory, 1.0), transport=transport
    )
    with server:
        assert server.pid != os.getpid() and server.is_alive
        with pytest.raises(RuntimeError, match="before start"):
            transport.client(example=example(1))
        procs = [_start(ctx, worker_loop, clients[i], i, 150, 2) for i in range(2)]
        for v in (1, 2):
            time.sleep(0.05)
            server.update_weights(set_scale(None, v + 1.0))  # a state dict
            assert server.policy_version == v
            out = local(TensorDict(observation=torch.ones(1, OBS_DIM), batch_size=[1]))
            assert out["policy_version"].tolist() == [v]
            assert out["action"].tolist() == [[4.0 * (v + 1)] * ACT_DIM]
        server.update_weights(make_policy(4.0))  # a module; version v has scale v + 1
        assert server.policy_version == 3
        codes = _join_all(procs)
        stats = server.stats()
    assert codes == [0, 0]
    assert stats["requests"] >= 300 and stats["weight_updates"] == 3
    assert not server.is_alive and not mp.active_children()


def test_process_server_weights_without_waiting():
    """update_weights(wait=False) returns at once; every update is applied, none is torn."""
    transport = SharedMemoryTransport()
    client = transport.client(example=example(1))
    server = ProcessInferenceServer(
        policy_factory=functools.partial(policy_factory, 1.0), transport=transport
    )
    obs = TensorDict(observation=torch.ones(1, OBS_DIM), batch_size=[1])
    with server:
        for v in range(1, 21):
            # back to back: each call first waits for the previous update to leave the buffer
            server.update_weights(set_scale(None, v + 1.0), wait=False)
            out = client(obs)
            version = int(out["policy_version"])
            assert v - 1 <= version <= v
            # whatever version answered, its action is the one of that version's weights
            assert out["action"].tolist() == [[4.0 * (version + 1)] * ACT_DIM]
        stats = server.stats()  # a command: reads the last update's reply first
        assert stats["weight_updates"] == 20 and server.policy_version == 20
        out = client(obs)
        assert out["action"].tolist() == [[4.0 * 21] * ACT_DIM]
    assert not server.is_alive


def test_process_server_death_reaches_clients_and_parent():
    ctx = mp.get_context("fork")
    transport = SharedMemoryTransport(poll_interval=0.1)
    client = transport.client(example=example(2))
    server = ProcessInferenceServer(policy_factory=policy_factory, transport=transport).start()
    worker = _start(ctx, worker_until_error, client, 2)
    time.sleep(0.3)
    os.kill(server.pid, signal.SIGKILL)
    t0 = time.monotonic()
    worker.join(10)
    assert worker.exitcode == 7, worker.exitcode  # ServerGoneError in the worker
    assert time.monotonic() - t0 < 10
    with pytest.raises(RuntimeError, match="died.*SIGKILL"):
        server.update_weights(make_policy(2.0))
    server.shutdown()
    assert not mp.active_children()


def test_process_server_with_mp_transport():
    transport = MPTransport()
    client = transport.client()
    with ProcessInferenceServer(
        policy_factory=functools.partial(policy_factory, 2.0), transport=transport
    ) as server:
        out = client(TensorDict(observation=torch.ones(3, OBS_DIM), batch_size=[3]))
        server.update_weights(TensorDict.from_module(make_policy(1.0)))  # a TensorDict
        again = client(TensorDict(observation=torch.ones(3, OBS_DIM), batch_size=[3]))
    assert out["action"].tolist() == [[8.0] * ACT_DIM] * 3
    assert again["action"].tolist() == [[4.0] * ACT_DIM] * 3
    assert again["policy_version"].tolist() == [1, 1, 1]


def test_process_server_bad_input():
    with pytest.raises(TypeError, match="SharedMemoryTransport or an MPTransport"):
        ProcessInferenceServer(policy_factory=policy_factory, transport=ThreadingTransport())
    transport = SharedMemoryTransport()
    transport.client(example=example(1))
    with ProcessInferenceServer(policy_factory=policy_factory, transport=transport) as server:
        with pytest.raises(KeyError, match="module"):
            server.update_weights(TensorDict(weight=torch.zeros(2, 4)))
        with pytest.raises(RuntimeError, match="module.bias"):
            server.update_weights({"module.weight": torch.zeros(2, 4)})
        assert server.policy_version == 0


def test_process_server_dropped_without_shutdown_is_stopped():
    transport = SharedMemoryTransport()
    transport.client(example=example(1))
    server = ProcessInferenceServer(policy_factory=policy_factory, transport=transport).start()
    assert len(mp.active_children()) == 1
    del server
    gc.collect()
    assert not mp.active_children()


# ---------------------------------------------------------------- PolicyClientModule
def test_policy_client_module_with_shared_memory_client():
    transport = SharedMemoryTransport()
    client = transport.client(example=example(2))
    with InferenceServer(make_policy(), transport):
        module = PolicyClientModule(client)
        assert module.in_keys == ["observation"]
        assert set(module.out_keys) == {"action", "policy_version"}
        td = TensorDict(observation=obs_for(0, 1, 2), batch_size=[2])
        out = module(td)
    assert out is td
    assert torch.equal(td["action"], expected_action(td["observation"], td["policy_version"]))
    with pytest.raises(TypeError, match="client must be"):
        PolicyClientModule(3)


def test_shared_memory_is_freed():
    def fds():
        return len(os.listdir("/proc/self/fd"))

    def serve_once():
        transport = SharedMemoryTransport()
        clients = [transport.client(example=example(3)) for _ in range(4)]
        with InferenceServer(make_policy(), transport):
            for client in clients:
                client(example(3))

    serve_once()
    gc.collect()
    before = (fds(), sorted(os.listdir("/dev/shm")))
    serve_once()
    gc.collect()
    assert (fds(), sorted(os.listdir("/dev/shm"))) == before


# ---------------------------------------------------------------- Ray
@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow  # ray.init takes 5-40 s on this machine
def test_ray_transport_round_trip(ray_session):
    from torchrl.modules.inference_server import RayTransport

    ray = ray_session

    def ray_worker(client, worker):
        # defined here so that Ray ships it by value: the test modules are not importable there
        import torch
        from tensordict import TensorDict

        ok = True
        for step in range(5):
            obs = torch.full((2, 4), float(worker * 100 + step)) + torch.arange(4.0)
            out = client(TensorDict(observation=obs, batch_size=[2]))
            expected = obs.sum(-1, keepdim=True).expand(2, 2) * (out["policy_version"][:, None] + 1)
            ok &= bool(torch.equal(out["action"], expected))
        return ok

    transport = RayTransport(poll_interval=0.1)
    clients = [transport.client() for _ in range(2)]
    remote = ray.remote(ray_worker)
    with InferenceServer(make_policy(), transport):
        assert ray.get([remote.remote(c, i) for i, c in enumerate(clients)], timeout=120) == [
            True,
            True,
        ]
        local = transport.client()
        assert local(TensorDict(observation=torch.ones(OBS_DIM)))["action"].tolist() == [4.0] * 2
    with pytest.raises(ServerGoneError):
        local(TensorDict(observation=torch.ones(OBS_DIM)))


@pytest.mark.slow  # the spawned server process imports torch: 4 s of CPU, often 15 s here
def test_process_server_spawn():
    transport = SharedMemoryTransport(poll_interval=0.2)
    client = transport.client(example=example(2))
    with ProcessInferenceServer(
        policy_factory=functools.partial(policy_factory, 2.0),
        transport=transport,
        mp_context="spawn",
        startup_timeout=120,
    ) as server:
        out = client(TensorDict(observation=torch.ones(2, OBS_DIM), batch_size=[2]))
        server.update_weights(set_scale(None, 1.0))
        again = client(TensorDict(observation=torch.ones(2, OBS_DIM), batch_size=[2]))
    assert out["action"].tolist() == [[8.0] * ACT_DIM] * 2
    assert again["action"].tolist() == [[4.0] * ACT_DIM] * 2
    assert again["policy_version"].tolist() == [1, 1]
    assert not mp.active_children()


def test_policy_client_submit_complete_with_a_blocking_callable():
    # A client that only answers blocking calls: submit answers at once, complete writes it in.
    def answer(td):
        return TensorDict(action=td["observation"].sum(-1, keepdim=True), batch_size=td.batch_size)

    remote = PolicyClientModule(answer, in_keys=["observation"], out_keys=["action"])
    td = TensorDict(observation=torch.ones(4, 3), batch_size=[4])
    handle = remote.submit(td)
    assert "action" not in td.keys()
    out = remote.complete(td, handle)
    assert out is td
    torch.testing.assert_close(td["action"], torch.full((4, 1), 3.0))
