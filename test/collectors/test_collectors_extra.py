"""BaseCollector, MultiCollector, aSyncDataCollector and Evaluator (TorchRL's current names)."""

from __future__ import annotations

import functools
import threading
import time

import pytest
import torch
from _collector_helpers import RaisingEnv, SlowEnv, counting_env, threshold_policy
from _envs import CountingEnv
from tensordict import TensorDict

from torchrl.collectors import (
    BaseCollector,
    DataCollectorBase,
    Evaluator,
    MultiaSyncDataCollector,
    MultiCollector,
    MultiSyncDataCollector,
    SyncDataCollector,
    WorkerError,
    aSyncDataCollector,
)
from torchrl.collectors.evaluator import episode_returns, first_episodes
from torchrl.envs.utils import ExplorationType
from torchrl.record.loggers import CSVLogger


def _set_bias(policy, value):
    with torch.no_grad():
        policy.module.linear.bias.fill_(value)


# ------------------------------------------------------------------------------ base classes
def test_base_collector_is_the_base_of_every_collector():
    assert BaseCollector is DataCollectorBase
    for cls in (SyncDataCollector, MultiSyncDataCollector, MultiaSyncDataCollector):
        assert issubclass(cls, BaseCollector)
    assert issubclass(MultiSyncDataCollector, MultiCollector)
    assert issubclass(aSyncDataCollector, MultiaSyncDataCollector)


# ---------------------------------------------------------------------------- MultiCollector
@pytest.mark.parametrize("sync", [True, False])
def test_multi_collector_dispatches_on_sync(sync):
    collector = MultiCollector(
        [counting_env, counting_env], frames_per_batch=10, total_frames=20, sync=sync
    )
    try:
        expected = MultiSyncDataCollector if sync else MultiaSyncDataCollector
        assert type(collector) is expected
        assert isinstance(collector, MultiCollector)
        batches = list(collector)
        assert sum(b.numel() for b in batches) == 20
        if sync:  # one share of every worker, stacked
            assert all(b.batch_size == torch.Size([2, 5]) for b in batches)
        else:  # one worker's whole batch
            assert all(b.batch_size == torch.Size([10]) for b in batches)
    finally:
        collector.shutdown()


def test_multi_collector_defaults_to_sync():
    collector = MultiCollector([counting_env], frames_per_batch=5, total_frames=5)
    try:
        assert type(collector) is MultiSyncDataCollector
    finally:
        collector.shutdown()


def test_multi_collector_bad_sync():
    with pytest.raises(TypeError, match="sync must be a bool"):
        MultiCollector([counting_env], frames_per_batch=5, sync="yes")
    # a concrete class refuses the other mode before starting any worker
    with pytest.raises(ValueError, match="sync=True, got sync=False"):
        MultiSyncDataCollector([counting_env], frames_per_batch=5, sync=False)
    with pytest.raises(ValueError, match="sync=False, got sync=True"):
        MultiaSyncDataCollector([counting_env], frames_per_batch=5, sync=True)


def test_multi_collector_from_options_dispatches():
    options = MultiSyncDataCollector([counting_env], frames_per_batch=5, total_frames=5)
    try:
        opts = options.options
    finally:
        options.shutdown()
    collector = MultiCollector.from_options([counting_env], None, opts)
    try:
        assert type(collector) is MultiSyncDataCollector
        assert sum(b.numel() for b in collector) == 5
    finally:
        collector.shutdown()


# ------------------------------------------------------------------------ aSyncDataCollector
def test_async_data_collector_one_worker_and_weights():
    policy = threshold_policy()
    collector = aSyncDataCollector(
        counting_env, policy, frames_per_batch=5, total_frames=-1, update_at_each_batch=True
    )
    try:
        assert collector.num_workers == 1
        first = collector.next()
        assert first.batch_size == torch.Size([5])
        assert (first["action"] == 0).all()
        _set_bias(policy, 1.0)
        collector.update_policy_weights_()
        # double buffering: a batch may be one update late, not more
        later = [collector.next() for _ in range(3)]
        assert (later[-1]["action"] == 1).all()
    finally:
        collector.shutdown()


def test_async_data_collector_bad_args():
    with pytest.raises(ValueError, match="exactly one worker"):
        aSyncDataCollector(counting_env, frames_per_batch=5, num_workers=2)
    with pytest.raises(TypeError, match="one env constructor"):
        aSyncDataCollector([counting_env, counting_env], frames_per_batch=5)


# --------------------------------------------------------------------- episode statistics
def test_first_episodes_and_episode_returns():
    reward = torch.ones(3, 4, 1)
    done = torch.tensor([[0, 1, 0, 1], [0, 0, 0, 0], [1, 0, 0, 0]]).bool().unsqueeze(-1)
    returns, lengths, finished = first_episodes(reward, done)
    assert returns.tolist() == [2.0, 4.0, 1.0]
    assert lengths.tolist() == [2, 4, 1]
    assert finished.tolist() == [True, False, True]
    # every finished episode of the rollout (the trainers' Recorder uses it too)
    assert episode_returns(reward, done).tolist() == [2.0, 2.0, 1.0]
    with pytest.raises(ValueError, match="differ"):
        first_episodes(reward, done[:, :2])


def test_recorder_uses_the_shared_episode_returns():
    from torchrl.trainers import evaluation

    assert evaluation.episode_returns is episode_returns


# --------------------------------------------------------------------------------- Evaluator
def test_evaluate_blocking_metrics_and_weights():
    policy = threshold_policy()
    evaluator = Evaluator(counting_env, policy, num_trajectories=3, max_steps=10)
    try:
        result = evaluator.evaluate(step=7)
        assert set(result.keys()) == {
            "eval/reward",
            "eval/reward_std",
            "eval/episode_length",
            "eval/num_episodes",
            "eval/step",
        }
        assert result["eval/reward"].item() == 0.0  # action 0 pays 0
        assert result["eval/episode_length"].item() == 5.0  # CountingEnv ends after 5 steps
        assert result["eval/num_episodes"].item() == 3
        assert result["eval/step"].item() == 7
        # by default the evaluator reads the current weights of the policy it was given
        _set_bias(policy, 1.0)
        assert evaluator.evaluate()["eval/reward"].item() == 5.0
        # given weights win, and do not touch the training policy
        weights = {k: v.clone() for k, v in policy.state_dict().items()}
        weights["module.linear.bias"].fill_(-1.0)
        assert evaluator.evaluate(weights)["eval/reward"].item() == 0.0
        assert policy.module.linear.bias.item() == 1.0
        # its policy is a copy
        assert evaluator.policy is not policy
    finally:
        evaluator.shutdown()


def test_evaluate_batched_env_counts_first_episode_of_each_sub_env():
    env = CountingEnv(batch_size=[2], max_steps=torch.tensor([2, 4]))
    evaluator = Evaluator(env, None, num_trajectories=5, max_steps=10, log_prefix="test")
    try:
        result = evaluator.evaluate()
        assert result["test/num_episodes"].item() == 5
        # rollouts of 2 sub-envs: episodes of 2 and 4 steps, then again: first 5 are kept
        assert result["test/episode_length"].item() == pytest.approx((2 + 4 + 2 + 4 + 2) / 5)
        assert result["test/step"].item() == -1
    finally:
        evaluator.shutdown()


def test_max_steps_truncates_episodes():
    evaluator = Evaluator(counting_env, None, num_trajectories=2, max_steps=3)
    try:
        assert evaluator.evaluate()["eval/episode_length"].item() == 3.0
    finally:
        evaluator.shutdown()


def test_trigger_poll_wait_and_snapshot():
    policy = threshold_policy()
    evaluator = Evaluator(
        lambda: SlowEnv(delay=0.02), policy, num_trajectories=1, max_steps=5, busy_policy="skip"
    )
    try:
        assert evaluator.poll() is None and not evaluator.pending
        _set_bias(policy, 1.0)
        assert evaluator.trigger_eval(step=3)
        # the weights were copied when triggered: changing them now changes nothing
        _set_bias(policy, -1.0)
        assert evaluator.pending
        assert evaluator.poll() is None  # still running (5 steps of 20 ms)
        assert not evaluator.trigger_eval(step=4)  # busy: skipped
        result = evaluator.wait(10)
        assert result["eval/reward"].item() == 5.0 and result["eval/step"].item() == 3
        assert not evaluator.pending and evaluator.poll() is None
        # poll hands a finished result out once
        assert evaluator.trigger_eval(step=5)
        deadline = time.monotonic() + 10
        while (out := evaluator.poll()) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert out is not None and out["eval/reward"].item() == 0.0
        assert evaluator.poll() is None
    finally:
        evaluator.shutdown()


def test_busy_policy_error_and_wait_timeout():
    evaluator = Evaluator(
        lambda: SlowEnv(delay=0.05), None, num_trajectories=1, max_steps=5, busy_policy="error"
    )
    try:
        evaluator.trigger_eval()
        with pytest.raises(RuntimeError, match="already running"):
            evaluator.trigger_eval()
        with pytest.raises(RuntimeError, match="background evaluation is running"):
            evaluator.evaluate()
        with pytest.raises(TimeoutError, match="did not end"):
            evaluator.wait(0.01)
        assert evaluator.wait(10) is not None
    finally:
        evaluator.shutdown()


class _RecordingLogger:
    def __init__(self):
        self.scalars = []

    def log_scalar(self, name, value, step=None):
        self.scalars.append((name, value, step))


def test_on_result_logger_and_metrics_fn():
    seen = []
    logger = _RecordingLogger()
    evaluator = Evaluator(
        counting_env,
        None,
        num_trajectories=2,
        max_steps=5,
        on_result=lambda result: seen.append((threading.current_thread().name, result)),
        metrics_fn=lambda rollouts: {"steps": sum(r.numel() for r in rollouts)},
        logger=logger,
    )
    try:
        evaluator.trigger_eval(step=11)
        result = evaluator.wait(10)
        assert result["eval/steps"].item() == 10
        assert len(seen) == 1 and seen[0][0].startswith("torchrl-evaluator")
        assert seen[0][1] is result
    finally:
        evaluator.shutdown()
    logged = {name: (value, step) for name, value, step in logger.scalars}
    assert set(logged) == {
        "eval/reward",
        "eval/reward_std",
        "eval/episode_length",
        "eval/num_episodes",
        "eval/steps",
    }
    assert logged["eval/steps"] == (10.0, 11)
    assert all(isinstance(v, float) for v, _ in logged.values())


def test_logs_to_a_real_logger(tmp_path):
    logger = CSVLogger("evaluator", log_dir=str(tmp_path))
    evaluator = Evaluator(counting_env, None, num_trajectories=1, max_steps=5, logger=logger)
    try:
        evaluator.evaluate(step=3)
    finally:
        evaluator.shutdown()
        logger.close()
    written = " ".join(str(p) for p in tmp_path.rglob("*") if p.is_file())
    assert "reward" in written


def test_maybe_trigger_eval_every_interval():
    evaluator = Evaluator(counting_env, None, num_trajectories=1, max_steps=5, eval_interval=100)
    try:
        started = []
        for frames in range(0, 350, 50):
            if evaluator.maybe_trigger_eval(step=frames):
                started.append(frames)
                evaluator.wait(10)
        assert started == [0, 100, 200, 300]
    finally:
        evaluator.shutdown()
    with pytest.raises(RuntimeError, match="eval_interval"):
        Evaluator(counting_env, None).maybe_trigger_eval(step=0)


def test_failed_evaluation_is_raised_not_swallowed():
    def broken(td):
        raise ValueError("policy bug")

    evaluator = Evaluator(counting_env, broken, num_trajectories=1, max_steps=5)
    try:
        evaluator.trigger_eval()
        with pytest.raises(RuntimeError, match="evaluation failed") as info:
            evaluator.wait(10)
        assert isinstance(info.value.__cause__, ValueError)
        with pytest.raises(ValueError, match="policy bug"):
            evaluator.evaluate()
    finally:
        evaluator.shutdown()


def test_evaluator_keys_and_exploration_type():
    calls = []

    def policy(td):
        from torchrl.envs.utils import exploration_type

        calls.append(exploration_type())
        td.set("action", torch.zeros(1, dtype=torch.int64))
        return td

    evaluator = Evaluator(counting_env, policy, num_trajectories=1, max_steps=2)
    try:
        evaluator.evaluate()
        assert set(calls) == {ExplorationType.DETERMINISTIC}
    finally:
        evaluator.shutdown()
    evaluator = Evaluator(counting_env, None, reward_keys=("next", "nope"), max_steps=2)
    with pytest.raises(KeyError, match="nope"):
        evaluator.evaluate()
    evaluator.shutdown()


def test_evaluator_bad_args():
    with pytest.raises(ValueError, match="backend"):
        Evaluator(counting_env, backend="ray")
    with pytest.raises(ValueError, match="busy_policy"):
        Evaluator(counting_env, busy_policy="queue")
    with pytest.raises(ValueError, match="num_trajectories"):
        Evaluator(counting_env, num_trajectories=0)
    with pytest.raises(ValueError, match="max_steps"):
        Evaluator(counting_env, max_steps=0)
    with pytest.raises(ValueError, match="not both"):
        Evaluator(counting_env, threshold_policy(), policy_factory=threshold_policy)
    with pytest.raises(TypeError, match="EnvBase"):
        Evaluator(lambda: "not an env")
    evaluator = Evaluator(counting_env, threshold_policy())
    with pytest.raises(TypeError, match="weights must be"):
        evaluator.evaluate(weights=3)
    evaluator.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        evaluator.evaluate()


def test_policy_factory_and_tensordict_weights():
    policy = threshold_policy()
    _set_bias(policy, 1.0)
    evaluator = Evaluator(counting_env, policy_factory=threshold_policy, max_steps=5)
    try:
        assert evaluator.evaluate()["eval/reward"].item() == 0.0  # its own fresh policy
        weights = TensorDict.from_module(policy)
        assert evaluator.evaluate(weights)["eval/reward"].item() == 5.0
    finally:
        evaluator.shutdown()


# ------------------------------------------------------------------- Evaluator, process backend
@pytest.mark.slow
def test_process_backend_weights_results_and_callbacks():
    policy = threshold_policy()
    seen = []
    evaluator = Evaluator(
        counting_env,
        policy,
        num_trajectories=2,
        max_steps=10,
        backend="process",
        on_result=seen.append,
    )
    try:
        child = evaluator._process.proc
        assert child.is_alive() and evaluator.env is None
        assert evaluator.evaluate(step=1)["eval/reward"].item() == 0.0
        _set_bias(policy, 1.0)
        assert evaluator.trigger_eval(step=2)
        _set_bias(policy, -1.0)  # the weights were taken when triggered
        result = evaluator.wait(60)
        assert result["eval/reward"].item() == 5.0 and result["eval/step"].item() == 2
        assert result["eval/episode_length"].item() == 5.0
        assert [r["eval/step"].item() for r in seen] == [1, 2]
    finally:
        evaluator.shutdown()
    child.join(10)
    assert not child.is_alive()


@pytest.mark.slow
def test_process_backend_reports_errors_and_a_dead_process():
    # an env error travels back with its traceback (the env is built in the process)
    env_fn = functools.partial(RaisingEnv, fail_at=3)
    evaluator = Evaluator(env_fn, None, max_steps=5, backend="process")
    try:
        with pytest.raises(RuntimeError, match="boom at step 3"):
            evaluator.evaluate()
    finally:
        evaluator.shutdown()
    # a killed process fails the pending evaluation at once
    env_fn = functools.partial(SlowEnv, delay=0.2)
    evaluator = Evaluator(env_fn, None, max_steps=5, backend="process")
    try:
        evaluator.trigger_eval()
        evaluator._process.proc.kill()
        with pytest.raises(RuntimeError, match="evaluation failed") as info:
            evaluator.wait(30)
        assert isinstance(info.value.__cause__, WorkerError)
        assert "died while evaluating" in str(info.value.__cause__)
    finally:
        evaluator.shutdown()


def test_process_backend_bad_args():
    with pytest.raises(TypeError, match="env constructor"):
        Evaluator(CountingEnv(), backend="process")
