"""RPCReplayBuffer: a buffer in an RPC worker, extended by client processes, sampled here."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import pickle
import subprocess
import sys

import pytest
import torch
from tensordict import TensorDict

from torchrl.collectors.distributed import RPCReplayBuffer
from torchrl.data import LazyTensorStorage, PrioritizedSampler

TEST_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Client processes run this script (a fresh interpreter, so nothing depends on how pytest
# imported this module); they print the buffer length they saw after extending.
_CLIENT = """
import pickle, sys, torch
from tensordict import TensorDict
rb = pickle.load(open(sys.argv[1], "rb"))
start = float(sys.argv[2])
rb.extend(TensorDict(obs=torch.arange(start, start + 5.0), batch_size=[5]))
print("LEN", len(rb), flush=True)
rb.shutdown()
"""


def _start_client(handle: RPCReplayBuffer, start: float, tmp_path) -> subprocess.Popen:
    path = tmp_path / f"client{start:.0f}.pkl"
    path.write_bytes(pickle.dumps(handle))
    return subprocess.Popen(
        [sys.executable, "-c", _CLIENT, str(path), str(start)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def test_rpc_replay_buffer_bad_arguments():
    with pytest.raises(ValueError, match="launcher"):
        RPCReplayBuffer(storage=LazyTensorStorage(10), launcher="ray")
    with pytest.raises(ValueError, match="num_clients"):
        RPCReplayBuffer(storage=LazyTensorStorage(10), num_clients=-1)


@pytest.mark.slow
def test_rpc_replay_buffer_clients_extend_trainer_samples(tmp_path):
    rb = RPCReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=PrioritizedSampler(100, alpha=1.0, beta=1.0),
        batch_size=8,
        num_clients=2,
        rpc_timeout=30.0,
    )
    procs: list[subprocess.Popen] = []
    try:
        with pytest.raises(ValueError, match="index"):
            rb.client(2)
        procs = [_start_client(rb.client(i), 100.0 * (i + 1), tmp_path) for i in range(2)]
        rb.extend(TensorDict(obs=torch.arange(10.0), batch_size=[10]))
        rb.add(TensorDict(obs=torch.tensor(-1.0), batch_size=[]))
        sizes = []
        for proc in procs:
            out, _ = proc.communicate(timeout=30)
            assert proc.returncode == 0
            sizes.append(int(out.split("LEN")[1].split()[0]))
        assert 10 <= max(sizes) <= 21 and len(rb) == 21
        everything = rb.sample(21)["obs"]
        assert everything.shape == (21,)
        expected = {*range(10), -1, *range(100, 105), *range(200, 205)}
        assert {int(x) for x in everything}.issubset(expected)

        sample, info = rb.sample(return_info=True)
        assert sample.shape == (8,)
        # All weight on one item: it is the only one sampled from then on.
        index = torch.arange(21)
        priority = torch.full((21,), 1e-6)
        priority[3] = 1e6
        rb.update_priority(index, priority)
        assert (rb.sample()["obs"] == rb.sample(21)["obs"][0]).all()

        state = rb.state_dict()
        rb.empty()
        assert len(rb) == 0
        rb.load_state_dict(state)
        assert len(rb) == 21

        # launcher=None attaches to the running group and builds a second buffer in the host.
        other = RPCReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, launcher=None)
        other.extend(TensorDict(obs=torch.ones(3), batch_size=[3]))
        assert len(other) == 3 and len(rb) == 21
        other.shutdown()
    finally:
        rb.shutdown()
        rb.shutdown()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert not [p for p in mp.active_children() if p.name.startswith("RPCReplayBuffer")]


# torch.distributed.rpc starts once per process (a second group in the same process never
# completes its rendezvous), so this scenario runs its trainer in a fresh interpreter.
_DEAD_HOST = """
import multiprocessing as mp, time, torch
from tensordict import TensorDict
from torchrl.collectors.distributed import RPCReplayBuffer
from torchrl.data import LazyTensorStorage
rb = RPCReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, rpc_timeout=30.0)
rb.extend(TensorDict(obs=torch.arange(4.0), batch_size=[4]))
host = rb._process
host.kill()
host.join(10)
start = time.monotonic()
try:
    rb.sample()
except RuntimeError as err:
    print("ERROR", time.monotonic() - start, err, flush=True)
rb.shutdown()
rb.shutdown()
alive = [p for p in mp.active_children() if p.name.startswith("RPCReplayBuffer")]
print("CHILDREN", len(alive), "PROCESS", rb._process, flush=True)
try:
    len(rb)
except RuntimeError as err:
    print("AFTER", err, flush=True)
"""


@pytest.mark.slow
def test_rpc_replay_buffer_dead_host_raises_and_shutdown_cleans():
    proc = subprocess.run(
        [sys.executable, "-c", _DEAD_HOST],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line}
    assert "ERROR" in lines, proc.stdout
    elapsed = float(lines["ERROR"].split()[1])
    assert elapsed < 5.0 and "replay_buffer" in lines["ERROR"] and "died" in lines["ERROR"]
    assert lines["CHILDREN"].split()[1:] == ["0", "PROCESS", "None"]
    assert "shut down" in lines["AFTER"]


# ----------------------------------------------------------------------- network exposure
def test_rendezvous_store_listens_on_loopback_only():
    """The ``torchrl-tcp://`` rendezvous of launcher='mp': the store binds 127.0.0.1 only."""
    import torch.distributed as dist
    from _net_helpers import listening, reachable_from_other_interface

    from torchrl.collectors.distributed.rpc_replay import _SCHEME, _free_port, _register_rendezvous

    _register_rendezvous()
    _register_rendezvous()  # idempotent
    port = _free_port()
    store, rank, world_size = next(dist.rendezvous(f"{_SCHEME}://127.0.0.1:{port}", 0, 2))
    assert (rank, world_size) == (0, 2)
    assert ("127.0.0.1", port) in listening(os.getpid())
    assert not reachable_from_other_interface(port)
    client, _, _ = next(dist.rendezvous(f"{_SCHEME}://127.0.0.1:{port}", 1, 2))
    client.set("k", b"v")
    assert store.get("k") == b"v"


def test_gloo_group_of_rpc_start_binds_loopback(monkeypatch):
    """RPC builds a gloo group with gloo's default device while it starts: on loopback here,
    whatever GLOO_SOCKET_IFNAME said before (restored afterwards)."""
    from datetime import timedelta

    import torch.distributed as dist
    from _net_helpers import listening

    from torchrl.collectors.distributed.rpc_replay import _gloo_on_loopback
    from torchrl.collectors.distributed.utils import listening_store

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "some-public-interface")
    store = listening_store("127.0.0.1", 0, 1, timedelta(seconds=5))
    before = listening(os.getpid())
    with _gloo_on_loopback(True):
        group = dist.ProcessGroupGloo(store, 0, 1, timedelta(seconds=5))
    assert {address for address, _ in listening(os.getpid()) - before} == {"127.0.0.1"}
    assert os.environ["GLOO_SOCKET_IFNAME"] == "some-public-interface"
    del group


_LISTENERS = """
import json, os, sys, torch
sys.path.insert(0, sys.argv[1])
from tensordict import TensorDict
from _net_helpers import exposed, listening
from torchrl.collectors.distributed import RPCReplayBuffer
from torchrl.data import LazyTensorStorage
before = listening(os.getpid())
rb = RPCReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, rpc_timeout=30.0)
rb.extend(TensorDict(obs=torch.arange(4.0), batch_size=[4]))
pids = [os.getpid(), rb._process.pid]
ours = sorted((listening(os.getpid()) - before) | listening(pids[1]))
print("RESULT", json.dumps({"len": len(rb), "listening": ours, "exposed": exposed(pids)}))
rb.shutdown()
"""


@pytest.mark.slow
def test_rpc_replay_buffer_listens_on_loopback_only():
    """Trainer and host of launcher='mp': no listener reachable from another interface."""
    proc = subprocess.run(
        [sys.executable, "-c", _LISTENERS, TEST_DIR],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT"))
    result = json.loads(line.split(" ", 1)[1])
    assert result["len"] == 4
    assert result["listening"] and {a for a, _ in result["listening"]} == {"127.0.0.1"}
    assert result["exposed"] == []
