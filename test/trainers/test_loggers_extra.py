"""Tests of the logger services (ProcessLogger, RayLogger), LoggerMonitor/Every and TrackioLogger."""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
import types
import warnings

import numpy as np
import pytest
import torch

from torchrl._utils import has_module
from torchrl.record.loggers import (
    CSVLogger,
    Every,
    Logger,
    LoggerMonitor,
    ProcessLogger,
    RayLogger,
    TrackioLogger,
    get_logger,
)


def _rows(path):
    return [tuple(float(x) for x in line.split(",")) for line in path.read_text().splitlines()]


class _ListLogger(Logger):
    """Keeps every scalar in memory."""

    def _create_experiment(self):
        return []

    def log_scalar(self, name, value, step=None):
        self.experiment.append((name, float(value), step))

    def log_hparams(self, cfg):
        pass

    def log_video(self, name, video, step=None, **kwargs):
        pass

    def log_histogram(self, name, data, step=None, **kwargs):
        pass


class _FailingLogger(_ListLogger):
    def log_scalar(self, name, value, step=None):
        if name == "bad":
            raise ValueError("cannot log 'bad'")
        super().log_scalar(name, value, step)


class _BrokenLogger(_ListLogger):
    def __init__(self, exp_name, log_dir=None):
        raise OSError("backend unreachable")


# --------------------------------------------------------------------------- ProcessLogger
def _worker(client, n):
    for i in range(n):
        client.log_scalar("worker/loss", float(i), step=i)


class TestProcessLogger:
    def test_owner_and_worker_clients(self, tmp_path):
        logger = ProcessLogger(CSVLogger, exp_name="run", log_dir=str(tmp_path), mp_context="fork")
        try:
            assert logger.exp_name == "run" and logger.log_dir == str(tmp_path)
            logger.log_scalar("loss", torch.tensor(0.5), step=1)
            logger.log_histogram("w", torch.arange(4.0), step=1)
            ctx = mp.get_context("fork")
            worker = ctx.Process(target=_worker, args=(logger.client(), 3))
            worker.start()
            worker.join(30)
            assert worker.exitcode == 0
            logger.flush()
            # The flush returned: everything queued before it was written by the service.
            assert _rows(tmp_path / "run" / "scalars" / "loss.csv") == [(1.0, 0.5)]
            assert _rows(tmp_path / "run" / "scalars" / "worker" / "loss.csv") == [
                (0.0, 0.0),
                (1.0, 1.0),
                (2.0, 2.0),
            ]
            assert (tmp_path / "run" / "histograms" / "w_1.pt").is_file()
        finally:
            logger.shutdown()
        assert not logger.alive
        logger.shutdown()  # a second call does nothing
        with pytest.raises(RuntimeError, match="shut down"):
            logger.log_scalar("loss", 1.0)
        with pytest.raises(RuntimeError, match="shut down"):
            logger.client()

    def test_failed_calls_reported_at_flush(self):
        logger = ProcessLogger(_FailingLogger, "exp", log_dir=None, mp_context="fork")
        logger.log_scalar("good", 1.0)
        logger.log_scalar("bad", 1.0)
        with pytest.raises(RuntimeError, match="cannot log 'bad'"):
            logger.flush()
        logger.flush()  # reported once
        logger.shutdown()

    def test_construction_failure_carries_traceback(self):
        with pytest.raises(RuntimeError, match="backend unreachable"):
            ProcessLogger(_BrokenLogger, "exp", mp_context="fork")

    def test_client_refuses_other_calls_and_bad_arguments(self):
        logger = ProcessLogger(_ListLogger, "exp", log_dir=None, mp_context="fork")
        try:
            with pytest.raises(ValueError, match="log_scalar"):
                logger.client().submit("close", (), {})
        finally:
            logger.shutdown()
        with pytest.raises(TypeError, match="Logger subclass"):
            ProcessLogger(dict, mp_context="fork")
        with pytest.raises(ValueError, match="max_queue_size"):
            ProcessLogger(_ListLogger, "exp", max_queue_size=0, mp_context="fork")

    def test_dead_service_is_reported(self):
        logger = ProcessLogger(_ListLogger, "exp", log_dir=None, mp_context="fork")
        logger.experiment.kill()
        logger.experiment.join()
        with pytest.raises(RuntimeError, match="died"):
            logger.flush(timeout=10)
        # The service is gone: shutdown reports it instead of waiting forever.
        with pytest.raises(RuntimeError, match="died"):
            logger.shutdown(timeout=10)

    def test_get_logger_service_backend(self, tmp_path):
        logger = get_logger(
            "csv",
            str(tmp_path),
            "exp",
            service_backend="process",
            service_backend_options={"mp_context": "fork", "max_queue_size": 4},
        )
        try:
            assert isinstance(logger, ProcessLogger) and logger.logger_cls is CSVLogger
            for i in range(10):  # more calls than the queue holds: the caller waits for room
                logger.log_scalar("x", i, step=i)
            logger.flush()
            assert len(_rows(tmp_path / "exp" / "scalars" / "x.csv")) == 10
        finally:
            logger.shutdown()
        with pytest.raises(ValueError, match="service_backend"):
            get_logger("csv", str(tmp_path), "exp", service_backend="thread")
        with pytest.raises(ValueError, match="service_backend_options"):
            get_logger("csv", str(tmp_path), "exp", service_backend_options={"mp_context": "fork"})

    @pytest.mark.slow
    def test_spawn_default(self, tmp_path):
        logger = ProcessLogger(CSVLogger, exp_name="run", log_dir=str(tmp_path))
        logger.client().log_scalar("loss", 2.0, step=3)
        logger.shutdown()
        assert _rows(tmp_path / "run" / "scalars" / "loss.csv") == [(3.0, 2.0)]


# --------------------------------------------------------------------------- RayLogger
@pytest.mark.slow  # starting Ray and its workers takes ~20 s on 2 cores
@pytest.mark.skipif(not has_module("ray"), reason="ray is not installed")
def test_ray_logger_owner_and_client(tmp_path, monkeypatch):
    import ray

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    started_here = not ray.is_initialized()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logger = RayLogger(
                CSVLogger,
                exp_name="run",
                log_dir=str(tmp_path),
                ray_init_config={"num_cpus": 1},
                ray_actor_options={"num_cpus": 0},
            )
        assert logger.exp_name == "run"
        client = logger.client()

        @ray.remote(num_cpus=0)
        def work(c):
            c.log_scalar("worker/loss", torch.tensor(1.5), step=2)

        ray.get(work.remote(client))
        logger.log_scalar("loss", 0.5, step=1)
        with pytest.raises(Exception, match="video"):
            logger.log_video("v", torch.zeros(3))  # a bad shape fails where it is called
        logger.shutdown()
        assert _rows(tmp_path / "run" / "scalars" / "loss.csv") == [(1.0, 0.5)]
        assert _rows(tmp_path / "run" / "scalars" / "worker" / "loss.csv") == [(2.0, 1.5)]
        with pytest.raises(RuntimeError, match="shut down"):
            logger.client()
    finally:
        if started_here:
            ray.shutdown()


def test_ray_logger_needs_a_logger_class():
    with pytest.raises(TypeError, match="Logger subclass"):
        RayLogger(object)


# --------------------------------------------------------------------------- Every / monitor
class _Source:
    def __init__(self):
        self.frames = 0
        self.fail = False

    def stats(self):
        if self.fail:
            raise RuntimeError("stats unavailable")
        return {"frames": self.frames, "queue": torch.tensor(3), "state": "running"}


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class TestEvery:
    def test_factories_and_validation(self):
        assert Every.seconds(2) == Every("seconds", 2.0)
        assert Every.counter("frames", 10) == Every("counter", 10, "frames")
        for bad in (
            lambda: Every.seconds(0),
            lambda: Every.counter("", 5),
            lambda: Every("minutes", 1.0),
            lambda: Every("seconds", 1.0, "frames"),
        ):
            with pytest.raises(ValueError):
                bad()


class TestLoggerMonitor:
    def _monitor(self, **kwargs):
        logger = _ListLogger("exp", None)
        clock = _Clock()
        monitor = LoggerMonitor(logger, background=False, clock=clock, **kwargs)
        return logger, clock, monitor

    def test_counter_schedule(self):
        logger, clock, monitor = self._monitor()
        source = _Source()
        name = monitor.watch(
            source, name="rb", schedule=Every.counter("frames", 50), log_on_start=False
        )
        assert name == "rb"
        assert monitor.step() == {}  # primes the schedule
        source.frames = 40
        assert monitor.step() == {}
        source.frames = 160  # crossed 50, 100 and 150 since the last poll: one log
        assert monitor.step() == {"rb": {"frames": 160.0, "queue": 3.0}}
        assert logger.experiment == [("rb/frames", 160.0, 160), ("rb/queue", 3.0, 160)]
        source.frames = 190
        assert monitor.step() == {}
        source.frames = 10  # went back (a reset): starts again, nothing logged
        assert monitor.step() == {}
        source.frames = 49
        assert monitor.step() == {}
        source.frames = 50
        assert monitor.step()["rb"]["frames"] == 50.0

    def test_watches_a_real_collector_and_buffer(self):
        """Our collectors and replay buffers report stats(): frames/batches and buffer counters."""
        from torchrl.collectors import SyncDataCollector
        from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        from torchrl.envs import PendulumEnv

        logger, clock, monitor = self._monitor()
        collector = SyncDataCollector(
            PendulumEnv(seed=0), None, frames_per_batch=10, total_frames=30
        )
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(25), batch_size=4)
        monitor.watch(collector, name="collector", schedule=Every.counter("frames", 20))
        monitor.watch(rb, name="rb", rates=("write_count",))
        for batch in collector:
            rb.extend(batch)
            rb.sample()
            clock.t += 1.0
            monitor.step()
        collector.shutdown()
        assert collector.stats() == {"frames": 30, "batches": 3}
        assert rb.stats() == {
            "size": 25,
            "capacity": 25,
            "write_count": 30,
            "sample_calls": 3,
            "samples_returned": 12,
        }
        frames_logged = [v for name, v, _ in logger.experiment if name == "collector/frames"]
        assert frames_logged == [10.0, 20.0]  # the first poll, then when 20 frames were crossed
        rates = [v for name, v, _ in logger.experiment if name == "rb/write_count_per_second"]
        assert rates == [10.0, 10.0]  # 10 items written per (fake) second

    def test_seconds_schedule_rates_and_metric_filter(self):
        logger, clock, monitor = self._monitor(poll_interval=0.5)
        source = _Source()
        name = monitor.watch(source, metrics={"frames"}, rates=("frames",))
        assert name == "_source"
        assert monitor.step() == {"_source": {"frames": 0.0}}  # logged on start
        clock.t, source.frames = 0.25, 10
        assert monitor.step() == {}
        clock.t, source.frames = 2.0, 100
        assert monitor.step() == {"_source": {"frames": 100.0, "frames_per_second": 50.0}}
        assert [s for _, _, s in logger.experiment] == [0, 1, 1]
        assert monitor.watch(_Source()) == "_source_1"

    def test_errors(self):
        logger, clock, monitor = self._monitor(on_error="raise")
        source = _Source()
        monitor.watch(source, name="a")
        source.fail = True
        with pytest.raises(RuntimeError, match="stats unavailable"):
            monitor.step()
        _, _, warn_monitor = self._monitor()
        warn_monitor.watch(source, name="a")
        with pytest.warns(UserWarning, match="'a'.*stats unavailable"):
            assert warn_monitor.step() == {}
        _, _, quiet = self._monitor(on_error="ignore")
        quiet.watch(source, name="a")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert quiet.step() == {}
        # A counter the snapshot lacks is named.
        _, _, monitor = self._monitor(on_error="raise")
        monitor.watch(_Source(), schedule=Every.counter("steps", 1))
        with pytest.raises(KeyError, match="'steps'"):
            monitor.step()
        with pytest.raises(TypeError, match="stats"):
            monitor.watch(object())
        with pytest.raises(ValueError, match="already watched"):
            monitor.watch(_Source(), name="_source")
        with pytest.raises(KeyError, match="nothing watched"):
            monitor.unwatch("nope")
        monitor.unwatch("_source")
        assert monitor.names == []
        with pytest.raises(ValueError, match="on_error"):
            LoggerMonitor(logger, on_error="loud")

    def test_background_thread(self):
        logger = _ListLogger("exp", None)
        source = _Source()
        with LoggerMonitor(logger, poll_interval=0.01) as monitor:
            assert monitor.running
            monitor.watch(source, name="c", schedule=Every.counter("frames", 1))
            for frames in range(1, 30):
                source.frames = frames
                if any(step > 1 for name, _, step in logger.experiment if name == "c/frames"):
                    break
                time.sleep(0.02)
        assert not monitor.running
        assert any(name == "c/frames" for name, _, _ in logger.experiment)

    def test_background_failure_raised_at_stop(self):
        source = _Source()
        source.fail = True
        monitor = LoggerMonitor(_ListLogger("exp", None), poll_interval=0.01, on_error="raise")
        monitor.watch(source, name="a")
        deadline = time.monotonic() + 5
        while monitor.running and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(RuntimeError, match="background poll failed"):
            monitor.stop()

    def test_monitor_feeds_a_process_logger(self, tmp_path):
        logger = ProcessLogger(CSVLogger, exp_name="run", log_dir=str(tmp_path), mp_context="fork")
        try:
            monitor = LoggerMonitor(logger.client(), background=False)
            monitor.watch(_Source(), name="rb", metrics={"frames"})
            monitor.step()
            logger.flush()
            assert _rows(tmp_path / "run" / "scalars" / "rb" / "frames.csv") == [(0.0, 0.0)]
        finally:
            logger.shutdown()


# --------------------------------------------------------------------------- TrackioLogger
class _FakeRun:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.config = dict(kwargs.get("config") or {})


@pytest.fixture
def fake_trackio(monkeypatch):
    """A stand-in with trackio's documented API: init(project, name, ...) -> Run,
    log(metrics, step=None), finish(), Video(value, fps=...), Histogram(sequence, num_bins=64)."""
    module = types.ModuleType("trackio")
    module.calls = []

    def init(project, name=None, **kwargs):
        module.calls.append(("init", project, name, kwargs))
        return _FakeRun(project=project, name=name, **kwargs)

    def log(metrics, step=None):
        assert isinstance(metrics, dict)
        module.calls.append(("log", metrics, step))

    def finish():
        module.calls.append(("finish",))

    class Video:
        def __init__(self, value, caption=None, fps=None, format=None):
            self.value, self.fps, self.caption = value, fps, caption

    class Histogram:
        def __init__(self, sequence=None, np_histogram=None, num_bins=64):
            self.sequence, self.num_bins = sequence, num_bins

    module.init, module.log, module.finish = init, log, finish
    module.Video, module.Histogram = Video, Histogram
    monkeypatch.setitem(sys.modules, "trackio", module)
    return module


class TestTrackioLogger:
    def test_calls_match_trackio_api(self, fake_trackio):
        logger = TrackioLogger("run-1", project="proj", video_fps=8, config={"lr": 0.1})
        assert logger.log_dir == "proj" and logger.exp_name == "run-1"
        assert fake_trackio.calls[0] == ("init", "proj", "run-1", {"config": {"lr": 0.1}})
        logger.log_scalar("loss", torch.tensor(0.25), step=3)
        logger.log_scalar("reward", 1, step=None)
        assert fake_trackio.calls[1:] == [
            ("log", {"loss": 0.25}, 3),
            ("log", {"reward": 1.0}, None),
        ]
        logger.log_video("rollout", torch.zeros(4, 3, 8, 8, dtype=torch.uint8), step=5)
        _, payload, step = fake_trackio.calls[-1]
        clip = payload["rollout"]
        assert step == 5 and clip.fps == 8 and isinstance(clip.value, np.ndarray)
        assert clip.value.shape == (4, 3, 8, 8)
        logger.log_video("rollout", torch.zeros(1, 2, 3, 4, 4, dtype=torch.uint8), fps=2)
        assert fake_trackio.calls[-1][1]["rollout"].fps == 2
        with pytest.raises(ValueError, match="video"):
            logger.log_video("bad", torch.zeros(3, 4))
        logger.log_histogram("w", torch.ones(2, 3), step=1, num_bins=10)
        hist = fake_trackio.calls[-1][1]["w"]
        assert hist.num_bins == 10 and hist.sequence.shape == (6,)
        logger.log_hparams({"net": {"depth": 2}})
        assert logger.experiment.config == {"lr": 0.1, "net.depth": 2}
        logger.close()
        assert fake_trackio.calls[-1] == ("finish",)

    def test_get_logger(self, fake_trackio):
        logger = get_logger("trackio", "my-project", "exp")
        assert isinstance(logger, TrackioLogger) and logger.project == "my-project"
        logger = get_logger("trackio", "ignored", "exp", project="p2")
        assert logger.project == "p2"

    def test_bad_arguments(self, fake_trackio):
        with pytest.raises(ValueError, match="project"):
            TrackioLogger("run", project="")
        with pytest.raises(ValueError, match="video_fps"):
            TrackioLogger("run", project="p", video_fps=0)

    def test_missing_trackio_names_the_extra(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "trackio", None)  # import trackio raises ImportError
        with pytest.raises(ImportError, match=r'pip install "torchrl\[trackio\]"'):
            TrackioLogger("run", project="p")


def test_one_home_for_each_name():
    import torchrl.trainers.loggers as trainers_loggers
    from torchrl.record import loggers as record_loggers
    from torchrl.trainers.loggers import monitoring, process, ray_logger, trackio

    for name in ("ProcessLogger", "RayLogger", "LoggerMonitor", "Every", "TrackioLogger"):
        assert getattr(trainers_loggers, name) is getattr(record_loggers, name)
    assert process.ProcessLogger is ProcessLogger and ray_logger.RayLogger is RayLogger
    assert monitoring.Every is Every and trackio.TrackioLogger is TrackioLogger
