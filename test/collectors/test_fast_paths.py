"""SyncDataCollector's fast paths: direct policy calls, handed-out buffers and their reuse."""

from __future__ import annotations

import pytest
import torch
from _collector_helpers import counting_env
from _envs import CountingEnv, NestedEnv
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, set_skip_existing
from torch import nn

import torchrl.collectors._buffer as sync_module
from torchrl.collectors import SyncDataCollector
from torchrl.collectors._buffer import BufferPool
from torchrl.collectors._policy import DirectModuleCall, direct_call
from torchrl.envs import PendulumEnv


def _module(**kwargs) -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"], **kwargs)


class TestDirectCall:
    def test_same_outputs_as_the_module(self):
        module = _module()
        fast = direct_call(module)
        assert isinstance(fast, DirectModuleCall)
        td = TensorDict(observation=torch.randn(4, 3), batch_size=[4])
        expected = module(td.clone())["action"]
        out = fast(td)
        assert out is td
        torch.testing.assert_close(td["action"], expected)

    def test_tuple_outputs(self):
        class Two(nn.Module):
            def forward(self, x):
                return x.sum(-1, keepdim=True), x * 2

        module = TensorDictModule(Two(), in_keys=["observation"], out_keys=["a", "b"])
        td = direct_call(module)(TensorDict(observation=torch.ones(2, 3), batch_size=[2]))
        assert td["a"].shape == (2, 1) and bool((td["b"] == 2).all())

    def test_unusual_modules_are_called_as_they_are(self):
        hooked = _module()
        hooked.register_forward_hook(lambda *args: None)
        for module in (hooked, _module(inplace=False), nn.Linear(3, 1)):
            assert direct_call(module) is module

    def test_missing_key_and_skip_existing_go_through_the_module(self):
        fast = direct_call(_module())
        with pytest.raises(KeyError):
            fast(TensorDict(other=torch.zeros(3), batch_size=[]))
        td = TensorDict(observation=torch.zeros(3), action=torch.full((1,), 7.0), batch_size=[])
        with set_skip_existing(True):
            fast(td)
        assert td["action"].item() == 7.0

    def test_sequential_runs_as_a_chain_of_forwards(self):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(3, 8), nn.Sequential(nn.Tanh(), nn.Linear(8, 1)))
        module = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
        fast = direct_call(module)
        assert fast.chain is not None and len(fast.chain) == 3
        td = TensorDict(observation=torch.randn(5, 3), batch_size=[5])
        torch.testing.assert_close(fast(td.clone())["action"], net(td["observation"]))
        # a hook added later is honoured from the next refresh (the collector's next batch)
        calls = []
        net[1][1].register_forward_hook(lambda *args: calls.append(1))
        fast.refresh()
        assert fast.chain is None
        fast(td)
        assert calls == [1]

    def test_chain_layers_follow_their_parameters(self):
        torch.manual_seed(0)
        net = nn.Sequential(
            nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 8), nn.Sigmoid(), nn.Linear(8, 8),
            nn.ReLU(inplace=True), nn.Linear(8, 2, bias=False), nn.Tanh(),
        )  # fmt: skip
        fast = direct_call(TensorDictModule(net, in_keys=["observation"], out_keys=["action"]))
        assert fast.chain is not None and len(fast.chain) == 8
        td = TensorDict(observation=torch.randn(5, 3), batch_size=[5])

        def check():
            with torch.no_grad():
                torch.testing.assert_close(fast(td.clone())["action"], net(td["observation"]))

        check()
        # in-place updates (optimizer steps, update_policy_weights_, load_state_dict) are seen
        with torch.no_grad():
            net[0].weight.mul_(-2.0)
            net[6].weight.add_(1.0)
        check()
        # a parameter replaced by a new object is seen from the next refresh (next batch)
        net[2].bias = nn.Parameter(torch.full((8,), 3.0))
        fast.refresh()
        check()

    def test_global_hooks_and_odd_layers_keep_module_calls(self):
        class Odd(nn.Linear):
            def __call__(self, x):
                return super().__call__(x) + 1

        module = TensorDictModule(nn.Sequential(Odd(3, 1)), ["observation"], ["action"])
        assert direct_call(module).chain is None
        handle = nn.modules.module.register_module_forward_hook(lambda *args: None)
        try:
            assert direct_call(_module()).chain is None
            plain = TensorDictModule(nn.Sequential(nn.Linear(3, 1)), ["observation"], ["action"])
            assert direct_call(plain).chain is None
        finally:
            handle.remove()

    def test_collector_results_unchanged(self):
        def run(policy):
            env = PendulumEnv(seed=0)
            collector = SyncDataCollector(env, policy, frames_per_batch=20, total_frames=40)
            out = [b for b in collector]
            collector.shutdown()
            return out

        class Generic(TensorDictModule):  # a subclass takes the generic path
            pass

        def net():
            torch.manual_seed(0)
            return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))

        plain = TensorDictModule(net(), in_keys=["observation"], out_keys=["action"])
        assert direct_call(plain).chain is not None
        fast = run(plain)
        slow = run(Generic(net(), in_keys=["observation"], out_keys=["action"]))
        for a, b in zip(fast, slow):
            assert (a == b).all()


@pytest.fixture
def hand_out(monkeypatch):
    """Makes every collector hand out its buffers (normally only for big steps)."""
    monkeypatch.setattr(sync_module, "_FRESH_MIN_BYTES", 0)


class TestHandedOutBuffers:
    def test_big_steps_choose_it(self):
        small = SyncDataCollector(counting_env(), frames_per_batch=4)
        big = SyncDataCollector(PendulumEnv(batch_size=[4096]), frames_per_batch=4096 * 2)
        small.rollout(), big.rollout()
        assert not small._fresh_buffers and big._fresh_buffers
        small.shutdown(), big.shutdown()

    def test_kept_batches_are_never_overwritten(self, hand_out):
        collector = SyncDataCollector(PendulumEnv(batch_size=[3], seed=0), frames_per_batch=12)
        kept, copies, views = [], [], []
        for i, batch in enumerate(collector):
            if i % 2 == 0:
                kept.append(batch)
            else:
                # only a view of a leaf survives this batch
                views.append(batch["next", "observation"][1:])
            copies.append(batch.clone())
            if i == 9:
                break
        assert collector._fresh_buffers
        for batch, copy in zip(kept, copies[::2]):
            assert (batch == copy).all()
        for view, copy in zip(views, copies[1::2]):
            assert torch.equal(view, copy["next", "observation"][1:])
        collector.shutdown()

    def test_dropped_batches_are_reused(self, hand_out):
        collector = SyncDataCollector(PendulumEnv(batch_size=[3], seed=0), frames_per_batch=12)
        storages = set()
        for i, batch in enumerate(collector):
            storages.add(batch["observation"].data_ptr())
            if i == 10:
                break
        # the buffer, the batch in the user's hands (and in enumerate's tuple), one spare
        assert len(storages) <= 4
        collector.shutdown()

    def test_same_data_as_copies(self, hand_out):
        def run():
            collector = SyncDataCollector(
                PendulumEnv(batch_size=[2], seed=0), frames_per_batch=10, total_frames=60
            )
            torch.manual_seed(0)
            out = [b for b in collector]
            collector.shutdown()
            return out

        handed = run()
        sync_module._FRESH_MIN_BYTES = 1 << 60
        copied = run()
        for a, b in zip(handed, copied):
            assert (a == b).all()

    def test_random_frames_zero_policy_outputs(self, hand_out):
        class WithExtra(nn.Module):
            def forward(self, obs):
                return obs[..., :1], torch.ones_like(obs[..., :1])

        policy = TensorDictModule(WithExtra(), ["observation"], ["action", "extra"])
        collector = SyncDataCollector(
            PendulumEnv(seed=0), policy, frames_per_batch=5, init_random_frames=15
        )
        for i, batch in enumerate(collector):
            expected = 0.0 if i < 3 else 1.0
            assert bool((batch["extra"] == expected).all()), i
            if i == 5:
                break
        collector.shutdown()


def test_buffer_pool_sees_every_kind_of_reference():
    def make():
        leaves = {"a": torch.zeros(3, 2), "n": TensorDict({"b": torch.zeros(3)}, [3])}
        return TensorDict(leaves, [3])

    pool = BufferPool(keep=1)
    holders = [
        lambda td: td,
        lambda td: td["n"],
        lambda td: td["a"],
        lambda td: td["n", "b"][1:],
        lambda td: td["a"].numpy(),
        lambda td: torch.utils.dlpack.to_dlpack(td["a"]),
        lambda td: td.reshape(-1),
        lambda td: td[0],
    ]
    for hold in holders:
        batch = make()
        counts = BufferPool.counts(batch)
        held = hold(batch)
        pool.add(batch, None, counts)
        del batch
        assert pool.take() is None
        del held
        taken = pool.take()
        assert taken is not None and taken[2] == counts


@pytest.mark.parametrize("batch", [0, 1, 2])
@pytest.mark.parametrize("use_buffers", [True, False])
def test_batches_that_start_no_trajectory(batch, use_buffers):
    env = counting_env(batch, max_steps=100)
    collector = SyncDataCollector(
        env, frames_per_batch=4 * max(batch, 1), total_frames=-1, use_buffers=use_buffers
    )
    first, second, third = (b for _, b in zip(range(3), collector))
    ids = first["collector", "traj_ids"]
    assert ids.unique().numel() == max(batch, 1)
    for later in (second, third):
        expected = ids[..., -1:].expand_as(ids)
        assert torch.equal(later["collector", "traj_ids"], expected)
    collector.shutdown()


class _InPlace(nn.Module):
    """Writes action 1, and adds 1 to the observation in place (a policy that mutates input)."""

    def forward(self, observation):
        observation.add_(1.0)
        return torch.ones(*observation.shape[:-1], 1, dtype=torch.int64)


_CASES = {
    "partial_resets": (lambda: CountingEnv(batch_size=[3], max_steps=[2, 3, 5]), {}),
    "pendulum": (lambda: PendulumEnv(batch_size=[2], seed=0), {"max_frames_per_traj": 7}),
    "nested": (lambda: NestedEnv(batch_size=[2], max_steps=3), {"init_random_frames": 8}),
    "in_place_policy": (
        lambda: CountingEnv(batch_size=[2], max_steps=[3, 4]),
        {"policy": TensorDictModule(_InPlace(), ["observation"], ["action"])},
    ),
}


@pytest.mark.parametrize("case", list(_CASES))
def test_big_step_paths_give_the_same_batches(case, monkeypatch):
    """Handed-out buffers and deferred root copies change no value of any batch."""
    make_env, kwargs = _CASES[case]

    def run(threshold):
        monkeypatch.setattr(sync_module, "_FRESH_MIN_BYTES", threshold)
        torch.manual_seed(0)
        kwargs_ = dict(kwargs)
        collector = SyncDataCollector(
            make_env(), kwargs_.pop("policy", None), frames_per_batch=12, **kwargs_
        )
        out = [b.clone() for _, b in zip(range(5), collector)]
        assert collector._defer == (threshold == 0)
        collector.shutdown()
        return out

    fast, plain = run(0), run(1 << 60)
    for a, b in zip(fast, plain):
        assert (a == b).all()
