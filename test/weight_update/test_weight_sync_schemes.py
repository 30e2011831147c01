"""The weight sync schemes on their own: strategies, versions, shared memory and pipes."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import time
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
from _collector_helpers import child_pids
from tensordict import TensorDict
from torch import nn

from torchrl.weight_update import (
    InitialSyncTransport,
    MPTransport,
    MultiProcessWeightSyncScheme,
    NoWeightSyncScheme,
    SharedMemTransport,
    SharedMemWeightSyncScheme,
    TransportBackend,
    WeightStrategy,
    WeightSyncScheme,
)
from torchrl.weight_update.weights import flat_weights, named_weights


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    net[1].running_mean.normal_()  # a buffer that must travel too
    return net


def _assert_same(a: nn.Module, b: nn.Module) -> None:
    wa, wb = named_weights(a), named_weights(b)
    assert sorted(wa) == sorted(wb)
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name


def _train_step(net: nn.Module) -> None:
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p))
        net[1].running_mean.add_(1.0)


# ------------------------------------------------------------------------------ strategy
@pytest.mark.parametrize("kind", ["tensordict", "state_dict"])
def test_strategy_roundtrip(kind):
    src, dst = _net(0), _net(1)
    strategy = WeightStrategy(kind)
    weights = strategy.extract_weights(src)
    assert isinstance(weights, TensorDict if kind == "tensordict" else dict)
    strategy.apply_weights(dst, weights)
    _assert_same(src, dst)


def test_strategy_bind_not_copy():
    src, dst = _net(0), _net(1)
    WeightStrategy().apply_weights(dst, named_weights(src), inplace=False)
    with torch.no_grad():
        src[0].bias.fill_(7.0)
    assert torch.equal(dst[0].bias, src[0].bias)


def test_strategy_bad_input():
    with pytest.raises(ValueError, match="extract_as must be 'tensordict' or 'state_dict'"):
        WeightStrategy("pickle")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match=r"no weights named \['nope'\]"):
        WeightStrategy().apply_weights(_net(0), {"nope": torch.zeros(1)})
    with pytest.raises(ValueError, match="has shape"):
        WeightStrategy().apply_weights(_net(0), {"0.bias": torch.zeros(5)})
    with pytest.raises(TypeError, match="got int"):
        WeightStrategy().apply_weights(_net(0), 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"entries \['x'\] are not tensors"):
        flat_weights({"x": 1.0})  # type: ignore[dict-item]


# ------------------------------------------------------------------------ the base class
def test_scheme_roles_and_errors():
    scheme = SharedMemWeightSyncScheme()
    assert scheme.role is None and scheme.version == 0
    with pytest.raises(RuntimeError, match="send runs on the sender.*not initialised"):
        scheme.send()
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        scheme.init_on_sender(42)
    scheme = SharedMemWeightSyncScheme()
    scheme.init_on_sender(_net(0))
    with pytest.raises(RuntimeError, match="already initialised as the sender"):
        scheme.init_on_sender(_net(0))
    with pytest.raises(RuntimeError, match="receive runs on the receiver"):
        scheme.receive()
    assert isinstance(scheme.transports[0], SharedMemTransport)
    assert isinstance(scheme.transports[0], TransportBackend)
    with pytest.raises(TypeError, match="unexpected arguments"):
        NoWeightSyncScheme().init_on_sender(_net(0), bogus=1)


def test_context_is_weak():
    class Owner:
        pass

    owner = Owner()
    scheme = NoWeightSyncScheme()
    scheme.init_on_sender(_net(0), context=owner)
    assert scheme.context is owner
    del owner
    assert scheme.context is None


def test_no_weight_sync_counts_versions_only():
    src, dst = _net(0), _net(1)
    before = {k: v.clone() for k, v in named_weights(dst).items()}
    sender = NoWeightSyncScheme()
    sender.init_on_sender(src)
    receiver = sender.receiver_copy()
    receiver.init_on_receiver(dst)
    assert [sender.send() for _ in range(3)] == [1, 2, 3]
    assert receiver.receive() is None
    for k, v in named_weights(dst).items():
        assert torch.equal(v, before[k])


def test_initial_sync_transport():
    src, dst = _net(0), _net(1)
    scheme = MultiProcessWeightSyncScheme()
    scheme.init_on_receiver(dst, transport=InitialSyncTransport(named_weights(src), version=4))
    assert scheme.receive() == 4
    _assert_same(src, dst)
    assert scheme.receive() is None
    with pytest.raises(RuntimeError, match="initial weights only"):
        InitialSyncTransport({}).send_weights({}, 1)


def test_pickled_scheme_carries_no_sender_state():
    scheme = MultiProcessWeightSyncScheme()
    parent, child = mp.Pipe()
    scheme.init_on_sender(_net(0), connections=[parent])
    clone = pickle.loads(pickle.dumps(scheme))
    assert clone.role is None and clone.model is None and clone.transports == {}
    parent.close()
    child.close()


# -------------------------------------------------------------------------- shared memory
def test_shared_mem_in_process():
    src, dst = _net(0), _net(1)
    sender = SharedMemWeightSyncScheme()
    sender.init_on_sender(src)
    receiver = pickle.loads(ForkingPickler.dumps(sender))
    receiver.init_on_receiver(dst)
    _assert_same(src, dst)  # bound at init: the initial weights
    for expected in (1, 2, 3):
        _train_step(src)
        assert sender.send() == expected
        assert receiver.version == expected == receiver.receive()
        _assert_same(src, dst)
    # explicit weights instead of the model's
    other = _net(5)
    sender.send(TensorDict.from_module(other))
    _assert_same(other, dst)
    assert receiver.version == 4


def _shared_child(scheme, conn):
    torch.set_num_threads(1)
    model = _net(1)
    scheme.init_on_receiver(model)
    conn.send("ready")
    while True:
        cmd = conn.recv()
        if cmd == "stop":
            return
        conn.send(
            (scheme.version, {k: v.detach().clone() for k, v in named_weights(model).items()})
        )


def test_shared_mem_across_processes():
    ctx = mp.get_context("fork")
    src = _net(0)
    sender = SharedMemWeightSyncScheme()
    sender.init_on_sender(src)
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_shared_child, args=(sender.receiver_copy(), child), daemon=True)
    proc.start()
    child.close()
    try:
        assert parent.recv() == "ready"
        for expected in (1, 2):
            _train_step(src)
            sender.send()
            parent.send("get")
            version, weights = parent.recv()
            assert version == expected
            mine = named_weights(src)
            for k, v in weights.items():
                assert torch.equal(v, mine[k]), k
        parent.send("stop")
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()
    assert proc.exitcode == 0


# ---------------------------------------------------------------------------------- pipes
def _mp_child(conn, seed):
    torch.set_num_threads(1)
    model = _net(seed)
    scheme = MultiProcessWeightSyncScheme()
    scheme.init_on_receiver(model, connection=conn)
    while True:
        version = scheme.receive(timeout=30)
        if version is None:
            return
        if version < 0:  # never: versions count up from 1
            return
        if model[0].bias[0].item() == 12345.0:
            return  # told to stop


def test_multiprocess_scheme_delivers_copies_and_versions():
    ctx = mp.get_context("fork")
    src = _net(0)
    pipes = [ctx.Pipe() for _ in range(2)]
    procs = [
        ctx.Process(target=_mp_child, args=(child, 10 + i), daemon=True)
        for i, (_, child) in enumerate(pipes)
    ]
    for p in procs:
        p.start()
    for _, child in pipes:
        child.close()
    sender = MultiProcessWeightSyncScheme(timeout=20)
    sender.init_on_sender(src, connections=[p for p, _ in pipes], processes=procs)
    try:
        for expected in (1, 2, 3):
            _train_step(src)
            assert sender.send() == expected  # returns once both workers acknowledged
        assert sender.send(worker_ids=[1]) == 4
        with pytest.raises(ValueError, match=r"no receiver with worker ids \[7\]"):
            sender.send(worker_ids=[7])
        stop = {k: v.detach().clone() for k, v in named_weights(src).items()}
        stop["0.bias"][0] = 12345.0
        sender.send(stop)
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
    assert [p.exitcode for p in procs] == [0, 0]


def _mp_echo_child(conn):
    # receives, applies, acknowledges, and sends its weights back for comparison
    model = _net(3)
    scheme = MultiProcessWeightSyncScheme()
    scheme.init_on_receiver(model, connection=conn)
    version = scheme.receive(timeout=30)
    # numpy arrays: torch would share tensors through this process, which exits now
    weights = {k: v.detach().numpy().copy() for k, v in named_weights(model).items()}
    conn.send(("weights", version, weights))


def test_multiprocess_scheme_weights_identical():
    ctx = mp.get_context("fork")
    src = _net(0)
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_mp_echo_child, args=(child,), daemon=True)
    proc.start()
    child.close()
    sender = MultiProcessWeightSyncScheme(sync=True, timeout=20)
    sender.init_on_sender(src, connections=[parent], processes=[proc])
    try:
        assert sender.send() == 1
        _, version, weights = parent.recv()
        assert version == 1
        mine = named_weights(src)
        assert sorted(weights) == sorted(mine)
        for k, v in weights.items():
            assert torch.equal(torch.from_numpy(v), mine[k]), k
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()


def _dying_child(conn):
    conn.recv()  # the weights arrive, then the process dies without acknowledging
    os._exit(3)


def test_dead_receiver_is_reported_within_seconds():
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_dying_child, args=(child,), daemon=True)
    proc.start()
    child.close()
    sender = MultiProcessWeightSyncScheme(timeout=60)
    sender.init_on_sender(_net(0), connections=[parent], processes=[proc])
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"receiver process \(pid \d+\) is gone"):
        sender.send()
    assert time.monotonic() - start < 5
    proc.join(5)
    assert proc.exitcode == 3


def _bad_child(conn):
    scheme = MultiProcessWeightSyncScheme()
    scheme.init_on_receiver(nn.Linear(2, 2), connection=conn)  # not the sender's model
    try:
        scheme.receive(timeout=30)
    except RuntimeError:
        pass


def test_receiver_failure_is_reported_to_the_sender():
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_bad_child, args=(child,), daemon=True)
    proc.start()
    child.close()
    sender = MultiProcessWeightSyncScheme(timeout=20)
    sender.init_on_sender(_net(0), connections=[parent], processes=[proc])
    with pytest.raises(RuntimeError, match="failed to apply weights"):
        sender.send()
    proc.join(10)


def test_silent_receiver_times_out():
    parent, child = mp.Pipe()
    sender = MultiProcessWeightSyncScheme(timeout=0.3)
    sender.init_on_sender(_net(0), connections=[parent])
    with pytest.raises(TimeoutError, match="did not acknowledge weights version 1"):
        sender.send()
    assert isinstance(MPTransport(child).receive_weights(timeout=0.0)[0], dict)  # type: ignore[index]


def test_no_stray_processes():
    before = child_pids()
    test_multiprocess_scheme_weights_identical()
    test_dead_receiver_is_reported_within_seconds()
    assert child_pids() <= before


def test_abstract_base():
    with pytest.raises(TypeError):
        WeightSyncScheme()  # type: ignore[abstract]
