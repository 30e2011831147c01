"""Tests of torchrl.modules.inference_server: batching, routing, weights, faults, transports."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from tensordict import TensorDict

from torchrl.modules.inference_server import (
    InferenceClient,
    InferenceDeviceConfig,
    InferenceServer,
    InferenceServerConfig,
    ServerGoneError,
    SharedMemoryTransport,
    SlotTransport,
    ThreadingTransport,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_inference_workers import (  # noqa: E402 - spawned workers import it by this name
    ACT_DIM,
    OBS_DIM,
    example,
    expected_action,
    make_policy,
    obs_for,
    serve_then_hang,
    set_scale,
    worker_loop,
    worker_until_error,
)


# ---------------------------------------------------------------- in-process transports
def test_threading_transport_batches_and_routes():
    transport = ThreadingTransport()
    with InferenceServer(make_policy(), transport, max_batch_size=64, timeout=0.02) as server:
        client = transport.client()
        assert isinstance(client, InferenceClient)
        start = threading.Barrier(8)

        def run(worker):
            start.wait()
            for step in range(20):
                obs = obs_for(worker, step, 3)
                out = client(TensorDict(observation=obs, batch_size=[3]))
                assert torch.equal(out["action"], expected_action(obs, out["policy_version"]))

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(run, range(8)))
        stats = server.stats()
    assert stats["requests"] == 160 and stats["rows"] == 480
    assert stats["mean_batch_requests"] > 1, stats
    assert stats["max_batch_rows"] <= 64


def test_threading_future_and_unbatched_request():
    transport = ThreadingTransport()
    with InferenceServer(make_policy(2.0), transport):
        future = transport.client().submit(TensorDict(observation=torch.ones(OBS_DIM)))
        out = future.result(timeout=5)
    assert out.batch_size == torch.Size([])
    assert out["action"].tolist() == [8.0, 8.0]
    assert out["policy_version"].shape == ()


def test_slot_transport_round_trip():
    transport = SlotTransport(num_slots=3, preallocate=True)
    with InferenceServer(make_policy(), transport):
        clients = [transport.client() for _ in range(3)]
        with pytest.raises(RuntimeError, match="num_slots=3"):
            transport.client()

        def run(i):
            for step in range(10):
                obs = obs_for(i, step, 2)
                out = clients[i](TensorDict(observation=obs, batch_size=[2]))
                assert torch.equal(out["action"], expected_action(obs, out["policy_version"]))

        with ThreadPoolExecutor(3) as pool:
            list(pool.map(run, range(3)))


def test_max_batch_size_is_respected():
    transport = ThreadingTransport()
    server = InferenceServer(make_policy(), transport, max_batch_size=4)
    client = transport.client()
    futures = [client.submit(example(2)) for _ in range(10)]  # queued before the start
    server.start()
    for f in futures:
        f.result(timeout=5)
    stats = server.stats()
    server.shutdown()
    assert stats["max_batch_rows"] == 4 and stats["batches"] == 5


def test_min_batch_size_waits_for_rows():
    transport = ThreadingTransport()
    with InferenceServer(make_policy(), transport, min_batch_size=4, timeout=1.0) as server:
        client = transport.client()
        futures = []
        for _ in range(4):
            futures.append(client.submit(example(1)))
            time.sleep(0.02)
        for f in futures:
            f.result(timeout=5)
        assert server.stats()["batches"] == 1


def test_update_weights_between_batches_and_versions():
    transport = ThreadingTransport()
    policy = make_policy(1.0)
    with InferenceServer(policy, transport) as server:
        client = transport.client()
        obs = obs_for(0, 0, 2)
        td = TensorDict(observation=obs, batch_size=[2])
        first = client(td)
        assert first["policy_version"].tolist() == [0, 0]
        server.update_weights(set_scale(policy, 2.0))  # state dict
        second = client(td)
        assert server.policy_version == 1
        assert second["policy_version"].tolist() == [1, 1]
        assert torch.equal(second["action"], 2 * first["action"])
        server.update_weights(make_policy(3.0))  # a module
        third = client(td)
        server.update_weights(TensorDict.from_module(make_policy(4.0)))  # a TensorDict
        fourth = client(td)
    assert third["policy_version"].tolist() == [2, 2]
    assert torch.equal(third["action"], 3 * first["action"])
    assert torch.equal(fourth["action"], 4 * first["action"])
    assert server.stats()["weight_updates"] == 3


def test_update_weights_bad_input():
    server = InferenceServer(make_policy(), ThreadingTransport())
    with pytest.raises(KeyError, match="module.bias"):
        server.update_weights({"module.weight": torch.zeros(2, 4)})
    with pytest.raises(ValueError, match=r"module.weight.*\(2, 4\).*\(3, 4\)"):
        server.update_weights({"module.weight": torch.zeros(3, 4), "module.bias": torch.zeros(2)})
    with pytest.raises(TypeError, match="weights must be"):
        server.update_weights(3)
    server.shutdown()


class CountingScheme:
    """A duck-typed weight sync scheme: hands over new weights once."""

    def __init__(self, weights):
        self.weights = weights
        self.calls = 0

    def receive(self, timeout=0.0):
        self.calls += 1
        weights, self.weights = self.weights, None
        return weights


def test_weight_sync_scheme_is_polled():
    transport = ThreadingTransport()
    scheme = CountingScheme(set_scale(None, 5.0))
    with InferenceServer(make_policy(), transport, weight_sync=scheme) as server:
        deadline = time.monotonic() + 5
        while server.policy_version == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        out = transport.client()(TensorDict(observation=torch.ones(OBS_DIM)))
    assert out["action"].tolist() == [20.0, 20.0]
    assert out["policy_version"].item() == 1 and scheme.calls > 1


def test_weight_sync_with_a_torchrl_scheme():
    weight_update = pytest.importorskip("torchrl.weight_update")
    learner = make_policy(1.0)
    served = make_policy(1.0)
    parent, child = mp.Pipe()
    sender = weight_update.MultiProcessWeightSyncScheme(sync=True, timeout=10.0)
    sender.init_on_sender(learner, connections=[parent])
    receiver = weight_update.MultiProcessWeightSyncScheme(sync=True, timeout=10.0)
    receiver.init_on_receiver(served, connection=child)
    transport = ThreadingTransport()
    with InferenceServer(served, transport, weight_sync=receiver) as server:
        client = transport.client()
        td = TensorDict(observation=torch.ones(OBS_DIM))
        assert client(td)["action"].tolist() == [4.0, 4.0]
        with torch.no_grad():
            learner.module.weight.fill_(3.0)
        assert sender.send() == 1  # returns once the server acknowledged (sync=True)
        out = client(td)
        assert out["action"].tolist() == [12.0, 12.0]
        assert out["policy_version"].item() == 1 == server.policy_version
        assert server.stats()["weight_updates"] == 1


def test_weight_sync_scheme_set_up_by_the_server():
    weight_update = pytest.importorskip("torchrl.weight_update")
    learner = make_policy(1.0)
    sender = weight_update.SharedMemWeightSyncScheme()
    sender.init_on_sender(learner)
    receiver = sender.receiver_copy()  # what a worker gets: not set up yet
    transport = ThreadingTransport()
    with InferenceServer(make_policy(0.0), transport, weight_sync=receiver) as server:
        assert receiver.role == "receiver"
        with torch.no_grad():
            learner.module.weight.fill_(2.0)
        sender.send()
        deadline = time.monotonic() + 5
        while server.policy_version != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        out = transport.client()(TensorDict(observation=torch.ones(OBS_DIM)))
    assert out["action"].tolist() == [8.0, 8.0] and out["policy_version"].item() == 1


def test_model_error_fails_that_batch_only():
    calls = []

    def flaky(td):
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("boom")
        return td.set("action", td["observation"] * 2)

    transport = ThreadingTransport()
    with InferenceServer(flaky, transport) as server:
        client = transport.client()
        with pytest.raises(ValueError, match="boom"):
            client(example(1))
        assert client(example(1))["action"].shape == (1, OBS_DIM)
        assert server.stats()["failed_batches"] == 1


def test_threading_client_raises_when_server_stops():
    transport = ThreadingTransport()
    server = InferenceServer(make_policy(), transport)  # never started
    future = transport.client().submit(example(1))
    server.shutdown()
    with pytest.raises(ServerGoneError, match="shut down"):
        future.result(timeout=5)
    with pytest.raises(ServerGoneError):
        transport.client().submit(example(1))


def test_configs():
    transport = ThreadingTransport()
    server = InferenceServer(
        make_policy(),
        transport,
        server_config=InferenceServerConfig(max_batch_size=3, policy_version_key="v"),
        device_config=InferenceDeviceConfig(policy_device="cpu"),
    )
    assert server.max_batch_size == 3 and server.device == torch.device("cpu")
    with server:
        assert "v" in transport.client()(example(2)).keys()
    with pytest.raises(ValueError, match="max_batch_size"):
        InferenceServer(
            make_policy(),
            ThreadingTransport(),
            max_batch_size=5,
            server_config=InferenceServerConfig(),
        )
    with pytest.raises(ValueError, match="min_batch_size"):
        InferenceServerConfig(max_batch_size=2, min_batch_size=3)
    with pytest.raises(TypeError, match="transport"):
        InferenceServer(make_policy(), "thread")


def test_no_version_key():
    transport = ThreadingTransport()
    with InferenceServer(make_policy(), transport, policy_version_key=None):
        assert "policy_version" not in transport.client()(example(1)).keys()


# ---------------------------------------------------------------- shared memory, processes
def _start(ctx, target, *args):
    proc = ctx.Process(target=target, args=args, daemon=True)
    proc.start()
    return proc


def _join_all(procs, timeout=20.0):
    deadline = time.monotonic() + timeout
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    codes = [proc.exitcode for proc in procs]
    for proc in procs:
        if proc.exitcode is None:
            proc.kill()
            proc.join()
    return codes


def test_shared_memory_batches_workers_and_routes_fork():
    ctx = mp.get_context("fork")
    transport = SharedMemoryTransport()
    # B differs between clients; the server probes each layout once
    rows = [1, 2, 3, 4]
    clients = [transport.client(example=example(r)) for r in rows]
    start = ctx.Event()
    with InferenceServer(make_policy(), transport, timeout=0.005) as server:
        procs = [
            _start(ctx, worker_loop, clients[i], i, 60, rows[i], start) for i in range(len(rows))
        ]
        start.set()
        codes = _join_all(procs)
        stats = server.stats()
    assert codes == [0] * len(rows), codes
    assert stats["requests"] == 60 * len(rows)
    assert stats["mean_batch_requests"] > 1, stats
    assert not mp.active_children()


@pytest.mark.slow  # a spawned worker imports torch: 4 s of CPU, often 15 s of wall time here
def test_shared_memory_spawn_worker():
    ctx = mp.get_context("spawn")
    transport = SharedMemoryTransport()
    with InferenceServer(make_policy(), transport):
        client = transport.client(example=example(2))
        codes = _join_all([_start(ctx, worker_loop, client, 5, 20, 2)], 120)
    assert codes == [0]


def test_shared_memory_weights_change_in_workers():
    ctx = mp.get_context("fork")
    transport = SharedMemoryTransport()
    policy = make_policy(1.0)
    clients = [transport.client(example=example(2)) for _ in range(2)]
    local = transport.client(example=example(1))
    with InferenceServer(policy, transport) as server:
        procs = [_start(ctx, worker_loop, clients[i], i, 300, 2) for i in range(2)]
        versions = []
        for v in (1, 2, 3):
            time.sleep(0.02)
            server.update_weights(set_scale(policy, v + 1.0))
            out = local(TensorDict(observation=torch.ones(1, OBS_DIM), batch_size=[1]))
            versions.append(out["policy_version"].item())
            assert out["action"].tolist() == [[4.0 * (v + 1)] * 2]
        codes = _join_all(procs)
    assert versions == [1, 2, 3]
    assert codes == [0, 0]  # every worker checked its rows against the version it got


def test_shared_memory_client_death_does_not_stop_others():
    ctx = mp.get_context("fork")
    transport = SharedMemoryTransport()
    clients = [transport.client(example=example(2)) for _ in range(3)]
    with InferenceServer(make_policy(), transport) as server:
        victim = _start(ctx, worker_until_error, clients[0], 2)
        time.sleep(0.2)
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(5)
        procs = [_start(ctx, worker_loop, clients[i], i, 50, 2) for i in (1, 2)]
        codes = _join_all(procs)
        assert server.is_alive
    assert victim.exitcode == -signal.SIGKILL
    assert codes == [0, 0]


def test_shared_memory_client_raises_when_server_stops():
    ctx = mp.get_context("fork")
    transport = SharedMemoryTransport(poll_interval=0.1)
    server = InferenceServer(make_policy(), transport).start()
    client = transport.client(example=example(2))
    proc = _start(ctx, worker_until_error, client, 2)
    time.sleep(0.3)
    t0 = time.monotonic()
    server.shutdown()
    proc.join(10)
    assert proc.exitcode == 7  # the worker saw ServerGoneError
    assert time.monotonic() - t0 < 10


class BrokenScheme:
    """A weight sync scheme that fails after a while: it ends the serving loop."""

    def __init__(self, after: float):
        self.deadline = time.monotonic() + after

    def receive(self, timeout=0.0):
        if time.monotonic() > self.deadline:
            raise ConnectionError("weights channel lost")
        return None


def test_shared_memory_client_raises_when_server_loop_dies():
    ctx = mp.get_context("fork")
    transport = SharedMemoryTransport(poll_interval=0.1)
    client = transport.client(example=example(2))
    server = InferenceServer(make_policy(), transport, weight_sync=BrokenScheme(0.5)).start()
    proc = _start(ctx, worker_until_error, client, 2)
    proc.join(10)
    assert proc.exitcode == 7  # ServerGoneError in the worker
    assert not server.is_alive and isinstance(server.error, ConnectionError)
    with pytest.raises(ServerGoneError, match="weights channel lost"):
        client(example(2))
    server.shutdown()


def test_shared_memory_client_raises_when_owner_dies():
    # the server thread lives in a process that gets killed: its workers learn it in seconds
    ctx = mp.get_context("fork")
    transport = SharedMemoryTransport(poll_interval=0.1)
    client = transport.client(
        example=example(1),
        response_spec=TensorDict(
            action=torch.zeros(1, ACT_DIM),
            policy_version=torch.zeros(1, dtype=torch.int64),
            batch_size=[1],
        ),
    )
    owner = _start(ctx, serve_then_hang, transport)
    worker = _start(ctx, worker_until_error, client, 1)
    time.sleep(0.5)
    os.kill(owner.pid, signal.SIGKILL)
    t0 = time.monotonic()
    owner.join(5)
    worker.join(10)
    assert worker.exitcode == 7
    assert time.monotonic() - t0 < 10


def test_shared_memory_bad_layout_names_key_and_shapes():
    transport = SharedMemoryTransport()
    client = transport.client(example=example(3))
    with InferenceServer(make_policy(), transport):
        with pytest.raises(ValueError, match=r"'observation'.*\(3, 4\).*\(2, 4\)"):
            client(example(2))
        with pytest.raises(KeyError, match="observation"):
            client(TensorDict(obs=torch.zeros(3, 4), batch_size=[3]))
        bad_dtype = TensorDict(observation=torch.zeros(3, 4, dtype=torch.float64), batch_size=[3])
        with pytest.raises(ValueError, match="float64"):
            client(bad_dtype)
        assert client(example(3))["action"].shape == (3, ACT_DIM)  # still usable


def test_shared_memory_client_arguments():
    transport = SharedMemoryTransport()
    with pytest.raises(ValueError, match="example="):
        transport.client()
    with pytest.raises(TypeError, match="example must be"):
        transport.client(example=torch.zeros(3))
    lonely = transport.client(example=example(1))
    with pytest.raises(RuntimeError, match="no response layout"):
        import pickle

        pickle.dumps(lonely)
    with pytest.raises(RuntimeError, match="transport.client"):
        transport.submit(example(1))
    transport.close()


def test_shared_memory_one_request_in_flight():
    transport = SharedMemoryTransport()
    client = transport.client(example=example(1))
    with InferenceServer(make_policy(), transport):
        handle = client.submit(example(1))
        with pytest.raises(RuntimeError, match="in flight"):
            client.submit(example(1))
        assert handle.result(timeout=5)["action"].shape == (1, ACT_DIM)
        assert client.submit(example(1)).result(timeout=5) is not None


def test_shared_memory_model_error_reaches_client():
    def failing(td):
        if td["observation"].sum() > 0:
            raise ValueError("negative only")
        return td.set("action", td["observation"][..., :2])

    transport = SharedMemoryTransport()
    client = transport.client(example=example(1))
    with InferenceServer(failing, transport):
        with pytest.raises(RuntimeError, match="negative only"):
            client(TensorDict(observation=torch.ones(1, OBS_DIM), batch_size=[1]))
        assert client(example(1))["action"].shape == (1, 2)


def test_multi_dim_batches_keep_their_shape():
    transport = ThreadingTransport()
    with InferenceServer(make_policy(), transport, timeout=0.05, min_batch_size=5):
        client = transport.client()
        a = client.submit(TensorDict(observation=torch.ones(3, 2, OBS_DIM), batch_size=[3, 2]))
        b = client.submit(TensorDict(observation=torch.ones(2, 2, OBS_DIM), batch_size=[2, 2]))
        out_a, out_b = a.result(timeout=5), b.result(timeout=5)
    assert out_a.batch_size == (3, 2) and out_b.batch_size == (2, 2)
    assert out_a["policy_version"].shape == (3, 2)
    assert out_a["action"].shape == (3, 2, ACT_DIM)


def test_serving_thread_exploration_type_stays_in_its_thread():
    from torchrl.envs.utils import exploration_type

    transport = ThreadingTransport()
    with InferenceServer(make_policy(), transport, exploration_type="random"):
        client = transport.client()
        for _ in range(50):
            client(TensorDict(observation=torch.ones(OBS_DIM)))
            assert exploration_type() is None
    assert exploration_type() is None
