"""RayEvalWorker: evaluation rollouts in a Ray actor.

(In a file of its own that sorts after ``test_generic.py``: Ray must start after the gloo
groups of the torch.distributed tests, or the fork-based collectors of later tests abort.)
"""

from __future__ import annotations

import time

import pytest
import torch
from _collector_helpers import counting_env, threshold_policy

from torchrl.collectors import WorkerError
from torchrl.collectors.distributed import RayEvalWorker


def _set_bias(policy, value):
    with torch.no_grad():
        policy.module.linear.bias.fill_(value)


# ------------------------------------------------------------------------------ RayEvalWorker
def test_ray_eval_worker_submit_poll(ray_cluster):
    # a local function: Ray ships it by value (this test module is not importable in actors)
    def _policy_maker(env):
        return threshold_policy()

    worker = RayEvalWorker(None, counting_env, _policy_maker, num_gpus=0)
    try:
        assert worker.poll() is None and not worker.pending
        worker.submit(None, max_steps=10)
        assert worker.pending
        with pytest.raises(RuntimeError, match="pending"):
            worker.submit(None)
        result = worker.wait(60)
        assert result["reward"] == 0.0 and result["episode_length"] == 5.0
        assert result["frames"] is None
        policy = threshold_policy()
        _set_bias(policy, 1.0)
        worker.submit(policy, max_steps=3)  # a module: its weights are sent
        deadline = time.monotonic() + 60
        while (result := worker.poll(0.1)) is None and time.monotonic() < deadline:
            pass
        assert result == {"reward": 3.0, "episode_length": 3.0, "frames": None}
    finally:
        worker.shutdown()


@pytest.mark.slow
def test_ray_eval_worker_errors(ray_cluster):
    def _policy_maker(env):
        return threshold_policy()

    with pytest.raises(ValueError, match="num_gpus=0"):
        RayEvalWorker(None, counting_env, _policy_maker, num_gpus=64)

    def broken_env():
        raise RuntimeError("no simulator here")

    with pytest.raises(WorkerError, match="no simulator here"):
        RayEvalWorker(None, broken_env, _policy_maker, num_gpus=0)
