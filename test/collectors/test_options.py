"""The collectors' options objects: validation once, normalized values, what workers receive."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _collector_helpers import counting_env

from torchrl.collectors import (
    CollectorOptions,
    MultiCollectorOptions,
    MultiSyncDataCollector,
    RemoteCollectorOptions,
    SyncDataCollector,
)
from torchrl.collectors.distributed.utils import worker_options


class TestCollectorOptions:
    def test_normalized(self):
        opts = CollectorOptions(
            frames_per_batch=np.int64(8),
            total_frames=None,
            device="cpu",
            init_random_frames=None,
            split_trajs=np.bool_(True),
        )
        assert type(opts.frames_per_batch) is int and opts.total_frames == math.inf
        assert opts.device == torch.device("cpu") and opts.storing_device is None
        assert opts.init_random_frames == 0 and opts.split_trajs is True
        assert opts.use_buffers is True and opts.trust_policy is False

    @pytest.mark.parametrize(
        "kwargs, match",
        [
            ({"split_trajs": "yes"}, r"split_trajs must be True or False, got 'yes' \(str\)"),
            ({"reset_when_done": 2}, "reset_when_done must be True or False"),
            ({"env_device": "nowhere"}, "env_device must be a torch.device"),
            ({"postproc": 3}, "postproc must be a callable"),
            ({"interruptor": object()}, "interruptor must have a collection_stopped"),
            ({"replay_buffer": object()}, "replay_buffer must have an extend"),
            ({"replay_buffer": [], "split_trajs": True}, "split_trajs cannot be used"),
        ],
    )
    def test_errors_name_the_keyword(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            CollectorOptions(frames_per_batch=4, **kwargs)

    def test_errors_name_the_collector(self):
        with pytest.raises(ValueError, match="^SyncDataCollector: set_truncated"):
            SyncDataCollector(counting_env(), frames_per_batch=4, set_truncated="no")

    def test_unknown_keyword(self):
        with pytest.raises(TypeError, match="nope"):
            CollectorOptions(frames_per_batch=4, nope=1)

    def test_from_options_equals_the_constructor(self):
        options = CollectorOptions(frames_per_batch=6, total_frames=12, max_frames_per_traj=4)
        built = SyncDataCollector.from_options(counting_env(2), None, options)
        direct = SyncDataCollector(
            counting_env(2), frames_per_batch=6, total_frames=12, max_frames_per_traj=4
        )
        assert built.options == direct.options
        for a, b in zip(built, direct):
            assert (a["collector", "traj_ids"] == b["collector", "traj_ids"]).all()
            assert (a["next", "truncated"] == b["next", "truncated"]).all()


class TestMultiCollectorOptions:
    def test_worker_options(self):
        opts = MultiCollectorOptions.from_kwargs(
            "MultiSyncDataCollector",
            sync=True,
            frames_per_batch=8,
            total_frames=64,
            postproc=lambda td: td,
            init_random_frames=8,
        )
        flag = type("Flag", (), {"collection_stopped": lambda self: False})()
        worker = opts.worker_options(4, 4, flag)
        assert worker.frames_per_batch == 4 and worker.total_frames == math.inf
        assert worker.storing_device == torch.device("cpu") and worker.return_same_td
        assert worker.postproc is None and worker.interruptor is flag
        assert opts.collector.postproc is not None  # the parent keeps its own

    def test_async_refuses_preemption(self):
        with pytest.raises(ValueError, match="preemptive_threshold applies"):
            MultiCollectorOptions.from_kwargs(
                "MultiaSyncDataCollector", sync=False, frames_per_batch=4, preemptive_threshold=0.5
            )

    def test_bad_start_method(self):
        with pytest.raises(ValueError, match="mp_start_method"):
            MultiSyncDataCollector([counting_env] * 2, frames_per_batch=4, mp_start_method="x")


class TestRemoteCollectorOptions:
    def build(self, **kwargs):
        args = {
            "workers_keyword": "num_workers",
            "num_workers": None,
            "per_worker": (),
            "default_workers": 2,
            "sync": False,
            "frames_per_batch": 8,
        }
        return RemoteCollectorOptions.build("DistributedDataCollector", **{**args, **kwargs})

    def test_counts_workers_from_lists(self):
        opts = self.build(per_worker=([1, 2, 3], {"a": 1}), sync=False)
        assert opts.num_workers == 3 and opts.worker_frames == 8
        assert opts.per_worker({"a": 1}) == [{"a": 1}] * 3

    def test_list_lengths_must_agree(self):
        with pytest.raises(ValueError, match="2 entries in a per-worker list for num_workers=3"):
            self.build(num_workers=3, per_worker=([1, 2],))

    def test_frames_belong_to_the_collector(self):
        opts = self.build()
        with pytest.raises(ValueError, match="not in collector_kwargs"):
            opts.worker_kwargs({"total_frames": 10})
        assert opts.worker_kwargs({"device": "cpu"})[0] == {"device": "cpu", "frames_per_batch": 8}

    def test_worker_options_checked_before_launch(self):
        options, env_kwargs = worker_options(
            SyncDataCollector, {"frames_per_batch": 4, "create_env_kwargs": {"max_steps": 3}}
        )
        assert isinstance(options, CollectorOptions) and env_kwargs == {"max_steps": 3}
        with pytest.raises(ValueError, match="init_random_frames"):
            worker_options(SyncDataCollector, {"frames_per_batch": 4, "init_random_frames": -1})
        multi, _ = worker_options(MultiSyncDataCollector, {"frames_per_batch": 4, "num_workers": 2})
        assert isinstance(multi, MultiCollectorOptions) and multi.num_workers == 2
        other, none = worker_options(dict, {"a": 1})
        assert other == {"a": 1} and none is None


@pytest.mark.parametrize("given", ["mode", "MODE", "Mode"])
def test_exploration_type_by_name(given):
    from torchrl.envs.utils import ExplorationType

    opts = CollectorOptions(frames_per_batch=4, exploration_type=given)
    assert opts.exploration_type is ExplorationType.MODE
    with pytest.raises(ValueError, match="exploration_type must be"):
        CollectorOptions(frames_per_batch=4, exploration_type="sometimes")
