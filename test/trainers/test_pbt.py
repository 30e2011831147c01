"""Population-based training: spaces, selection, exploit/explore, backends, faults."""

from __future__ import annotations

import math
import os
import random
import signal
import time
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from torchrl.record.loggers.common import Logger
from torchrl.trainers.pbt import (
    PBT,
    ChoiceParam,
    ContinuousParam,
    IntegerParam,
    PBTMember,
    PBTMemberError,
    PBTRecord,
    PopulationBasedTraining,
    TrainerMember,
    explore,
    make_space,
    set_loss_coefficient,
    set_optimizer_lr,
)
from torchrl.trainers.trainer import Trainer

TARGET = 3.0


def make_toy_factory(die: dict[str, Any] | None = None):
    """A factory of toy members, its class defined here so Ray pickles it by value.

    A member pulls ``x`` towards its hyper-parameter ``h`` (``x += lr * (h - x)`` per step,
    with a little seeded noise); its score is ``-(x - TARGET)^2``: the best members are those
    whose ``h`` is near ``TARGET``. ``die={"seed": s, "call": c, "how": ...}`` makes the member
    with seed ``s`` fail on its ``c``-th ``train`` call (``"kill"``: SIGKILL itself,
    ``"raise"``: raise an exception).
    """

    class Toy:
        def __init__(self, hparams: dict[str, Any], seed: int) -> None:
            self.seed = seed
            self.gen = torch.Generator().manual_seed(seed)
            self.x = torch.zeros((), dtype=torch.float64)
            self.h = float(hparams["h"])
            self.lr = float(hparams.get("lr", 0.1))
            self.steps = 0
            self.calls = 0
            self.closed = False

        def train(self, steps: int) -> float:
            self.calls += 1
            if die is not None and self.seed == die["seed"] and self.calls == die["call"]:
                if die["how"] == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                if die["how"] == "hang":
                    time.sleep(60)
                raise ValueError("toy member failed on purpose")
            for _ in range(steps):
                noise = torch.randn((), generator=self.gen, dtype=torch.float64) * 0.01
                self.x = self.x + self.lr * (self.h - self.x) + noise
                self.steps += 1
            return -float((self.x - TARGET) ** 2)

        def state_dict(self) -> dict[str, Any]:
            return {"x": self.x.clone(), "steps": self.steps, "gen": self.gen.get_state()}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.x = state["x"].clone()
            self.steps = int(state["steps"])
            self.gen.set_state(state["gen"])

        def set_hparams(self, hparams: dict[str, Any]) -> None:
            self.h = float(hparams["h"])
            self.lr = float(hparams.get("lr", self.lr))

        def close(self) -> None:
            self.closed = True

    return Toy


SPACE = {"h": ContinuousParam(0.0, 10.0), "lr": ContinuousParam(0.01, 0.5, log=True)}


def _pbt(backend: str = "serial", **kwargs: Any) -> PopulationBasedTraining:
    kwargs.setdefault("population_size", 4)
    kwargs.setdefault("ready_interval", 5)
    kwargs.setdefault("seed", 1)
    make_member = kwargs.pop("make_member", None) or make_toy_factory()
    return PopulationBasedTraining(make_member, SPACE, backend=backend, **kwargs)


def _as_tuples(history: list[PBTRecord]) -> list[tuple]:
    return [(r.round, r.member, sorted(r.hparams.items()), r.score, r.parent) for r in history]


# -- spaces ------------------------------------------------------------------------------------------
def test_continuous_param_bounds_and_log_sampling():
    param = ContinuousParam(1e-4, 1e-1, log=True)
    rng = random.Random(0)
    samples = [param.sample(rng) for _ in range(2000)]
    assert all(1e-4 <= s <= 1e-1 for s in samples)
    # log-uniform: about half the samples below the geometric middle (1e-2.5)
    below = sum(s < 10**-2.5 for s in samples) / len(samples)
    assert 0.45 < below < 0.55
    assert param.perturb(0.09, 1.2) == pytest.approx(0.1)  # clipped at high
    assert param.perturb(1.1e-4, 0.8) == pytest.approx(1e-4)  # clipped at low
    assert param.perturb(0.01, 0.8) == pytest.approx(0.008)
    with pytest.raises(ValueError, match="low < high"):
        ContinuousParam(1.0, 1.0)
    with pytest.raises(ValueError, match="log=True needs low > 0"):
        ContinuousParam(0.0, 1.0, log=True)
    with pytest.raises(ValueError, match="'lr'.*\\[0.0001, 0.1\\].*0.5"):
        param.validate("lr", 0.5)


def test_integer_and_choice_params():
    epochs = IntegerParam(1, 5)
    assert [epochs.perturb(v, 1.2) for v in (1, 2, 4, 5)] == [2, 3, 5, 5]
    assert [epochs.perturb(v, 0.8) for v in (1, 2, 5)] == [1, 1, 4]
    assert all(1 <= epochs.sample(random.Random(i)) <= 5 for i in range(50))
    with pytest.raises(ValueError, match="expected an int"):
        epochs.validate("epochs", 2.5)
    with pytest.raises(ValueError, match="low must be an int"):
        IntegerParam(0.5, 3)  # type: ignore[arg-type]
    choice = ChoiceParam(["a", "b", "c"])
    assert [choice.perturb("a", 0.8), choice.perturb("a", 1.2), choice.perturb("c", 1.2)] == [
        "a",
        "b",
        "c",
    ]
    with pytest.raises(ValueError, match="one of"):
        choice.validate("act", "d")
    with pytest.raises(ValueError, match="non-empty sequence"):
        ChoiceParam([])


def test_make_space_shorthands_and_errors():
    space = make_space({"lr": (1e-4, 1e-2), "n": (1, 4), "act": ["relu", "tanh"]})
    assert isinstance(space["lr"], ContinuousParam)
    assert isinstance(space["n"], IntegerParam)
    assert isinstance(space["act"], ChoiceParam)
    with pytest.raises(ValueError, match=r"hparam_space\['x'\].*got 3"):
        make_space({"x": 3})
    with pytest.raises(ValueError, match="non-empty mapping"):
        make_space({})


def test_explore_perturbs_within_factors_and_bounds():
    space = make_space({"lr": ContinuousParam(1e-4, 1.0), "n": IntegerParam(1, 8), "c": ["a", "b"]})
    rng = random.Random(0)
    hp = {"lr": 0.01, "n": 4, "c": "a", "fixed": 0.99}
    for _ in range(200):
        new = explore(hp, space, rng, perturb_factors=(0.8, 1.2), resample_probability=0.0)
        assert new["lr"] / hp["lr"] == pytest.approx(0.8) or new["lr"] / hp["lr"] == pytest.approx(
            1.2
        )
        assert new["n"] in (3, 5)
        assert new["fixed"] == 0.99
    seen = set()
    for _ in range(300):
        new = explore(hp, space, rng, resample_probability=1.0)
        for name, param in space.items():
            param.validate(name, new[name])
        seen.add(new["c"])
    assert seen == {"a", "b"}
    # a chain of perturbations never leaves the bounds
    for _ in range(300):
        hp = explore(hp, space, rng, resample_probability=0.1)
        for name, param in space.items():
            param.validate(name, hp[name])
    with pytest.raises(ValueError, match="perturb_factors"):
        explore(hp, space, rng, perturb_factors=(0.0, 1.2))
    with pytest.raises(ValueError, match="resample_probability"):
        explore(hp, space, rng, resample_probability=1.5)
    with pytest.raises(KeyError, match="'lr'"):
        explore({"n": 1, "c": "a"}, space, rng)


# -- selection, exploit and explore ------------------------------------------------------------------
def test_truncation_selection_picks_bottom_and_top():
    with _pbt(population_size=8, truncation=0.25) as pbt:
        scores = [5.0, 1.0, 7.0, 0.0, 3.0, 6.0, 2.0, 4.0]
        for _ in range(20):
            pairs = pbt.select(scores)
            assert sorted(member for _, member in pairs) == [1, 3]
            assert all(parent in (2, 5) for parent, _ in pairs)
        # NaN ranks last; mode="min" reverses the order
        pairs = pbt.select([float("nan"), 1.0, 7.0, 0.0, 3.0, 6.0, 2.0, 4.0])
        assert sorted(m for _, m in pairs) == [0, 3]
        pbt.mode = "min"
        pairs = pbt.select(scores)
        assert sorted(m for _, m in pairs) == [2, 5]
        assert all(parent in (1, 3) for parent, _ in pairs)
        with pytest.raises(ValueError, match="expected 8 scores"):
            pbt.select([1.0])
    with _pbt(population_size=2, truncation=0.25) as pbt:
        assert pbt.select([1.0, 2.0]) == [(1, 0)]  # at least one member is replaced
    with _pbt(population_size=1) as pbt:
        assert pbt.select([1.0]) == []


def test_exploit_copies_state_and_hparams_then_perturbs():
    with _pbt(population_size=4, truncation=0.5, resample_probability=0.0) as pbt:
        pbt.step()
        before = {i: pbt.member_state_dict(i) for i in range(4)}
        hp_before = [dict(h) for h in pbt.hparams]
        scores = [r.score for r in pbt.history]
        parents = pbt.exploit_and_explore(scores)
        assert len(parents) == 2
        ranked = sorted(range(4), key=lambda i: -scores[i])
        assert set(parents) == set(ranked[2:])
        assert set(parents.values()) <= set(ranked[:2])
        for member, parent in parents.items():
            state = pbt.member_state_dict(member)
            assert torch.equal(state["x"], before[parent]["x"])
            assert torch.equal(state["gen"], before[parent]["gen"])
            for name in ("h", "lr"):
                ratio = pbt.hparams[member][name] / hp_before[parent][name]
                clipped = pbt.hparams[member][name] in (SPACE[name].low, SPACE[name].high)
                assert clipped or ratio == pytest.approx(0.8) or ratio == pytest.approx(1.2)
        for member in ranked[:2]:  # the top half is untouched
            assert torch.equal(pbt.member_state_dict(member)["x"], before[member]["x"])
            assert pbt.hparams[member] == hp_before[member]


def test_history_records_parents_and_hparams_used():
    with _pbt(population_size=4, ready_interval=3) as pbt:
        history = pbt.train(num_rounds=3)
        assert len(history) == 12
        assert [r.round for r in history] == [0] * 4 + [1] * 4 + [2] * 4
        assert all(r.parent is None for r in history[:4])
        round1 = history[4:8]
        replaced = [r for r in round1 if r.parent is not None]
        assert len(replaced) == 1  # 25% of 4
        assert pbt.best is not None and pbt.best.round == 2
        assert pbt.best.score == max(r.score for r in history[8:])
        assert pbt.best_member == pbt.best.member
        # the latest hyper-parameters are those of the last round's records
        assert [r.hparams for r in history[8:]] == pbt.hparams


def test_pbt_improves_on_the_toy_problem():
    make = make_toy_factory()
    initial = [{"h": h, "lr": 0.2} for h in (0.5, 1.0, 8.0, 9.5)]
    with PBT(
        make,
        {"h": (0.0, 10.0)},
        population_size=4,
        ready_interval=10,
        initial_hparams=initial,
        seed=0,
        truncation=0.5,
    ) as pbt:
        pbt.train(num_rounds=15)
        best = pbt.best
    assert best is not None
    # the fixed hyper-parameters of the same members end near their own h: worst -(9.5-3)^2
    assert best.score > -0.25
    assert abs(best.hparams["h"] - TARGET) < 1.5


def test_serial_is_deterministic_and_seed_matters():
    runs = []
    for seed in (1, 1, 2):
        with _pbt(seed=seed) as pbt:
            runs.append(_as_tuples(pbt.train(num_rounds=3)))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_state_dict_resumes_exactly():
    with _pbt() as pbt:
        full = _as_tuples(pbt.train(num_rounds=4))
    with _pbt() as pbt:
        pbt.train(num_rounds=2)
        state = pbt.state_dict()
    assert state["round"] == 2 and len(state["members"]) == 4
    with _pbt(seed=99) as pbt:  # other seed: everything must come from the state
        pbt.load_state_dict(state)
        resumed = _as_tuples(pbt.train(num_rounds=2))
    assert resumed == full
    with _pbt(population_size=3) as pbt:
        with pytest.raises(ValueError, match="3"):
            pbt.load_state_dict(state)
        with pytest.raises(ValueError, match="version"):
            pbt.load_state_dict({**state, "version": 0})


def test_logger_receives_scores_and_hparams():
    class ListLogger(Logger):
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

    logger = ListLogger("pbt", log_dir=None)
    with _pbt(population_size=2, logger=logger) as pbt:
        pbt.train(num_rounds=2)
    names = {name for name, _, _ in logger.experiment}
    assert {"pbt/member_0/score", "pbt/member_1/lr", "pbt/member_1/h", "pbt/best_score"} <= names
    assert {step for _, _, step in logger.experiment} == {0, 1}


def test_argument_errors():
    make = make_toy_factory()
    with pytest.raises(ValueError, match="population_size must be an int >= 1, got 0"):
        PBT(make, SPACE, population_size=0, ready_interval=1)
    with pytest.raises(ValueError, match="ready_interval"):
        PBT(make, SPACE, population_size=2, ready_interval=0)
    with pytest.raises(ValueError, match=r"truncation must be in \(0, 0.5\], got 0.7"):
        PBT(make, SPACE, population_size=2, ready_interval=1, truncation=0.7)
    with pytest.raises(ValueError, match="backend must be"):
        PBT(make, SPACE, population_size=2, ready_interval=1, backend="mpi")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        PBT(make, SPACE, population_size=2, ready_interval=1, mode="up")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="initial_hparams must hold population_size=2"):
        PBT(make, SPACE, population_size=2, ready_interval=1, initial_hparams=[{"h": 1.0}])
    with pytest.raises(KeyError, match=r"initial_hparams\[1\] has no 'lr'"):
        PBT(
            make,
            SPACE,
            population_size=2,
            ready_interval=1,
            initial_hparams=[{"h": 1.0, "lr": 0.1}, {"h": 1.0}],
        )
    with pytest.raises(ValueError, match="'h'.*got 11"):
        PBT(
            make, SPACE, population_size=1, ready_interval=1, initial_hparams=[{"h": 11, "lr": 0.1}]
        )
    with pytest.raises(TypeError, match=r"without \['load_state_dict', 'set_hparams'\]"):

        class Half:
            def __init__(self, hparams, seed):
                pass

            def train(self, n):
                return 0.0

            def state_dict(self):
                return {}

        PBT(Half, SPACE, population_size=1, ready_interval=1)
    pbt = _pbt(population_size=1)
    pbt.close()
    pbt.close()
    with pytest.raises(RuntimeError, match="closed"):
        pbt.step()


def test_members_are_closed():
    members = []
    base = make_toy_factory()

    def make(hparams, seed):
        member = base(hparams, seed)
        members.append(member)
        return member

    with _pbt(make_member=make, population_size=2) as pbt:
        pbt.step()
        assert isinstance(members[0], PBTMember)
    assert all(m.closed for m in members)


# -- Trainer adapter ---------------------------------------------------------------------------------
class _Quadratic(torch.nn.Module):
    def __init__(self, target: float) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.target = target
        self.weight = 1.0

    def forward(self, td):
        return TensorDict(loss=self.weight * ((td["x"] * self.target - self.w) ** 2).mean())


def _trainer_member(hparams: dict[str, Any], seed: int) -> TrainerMember:
    torch.manual_seed(seed)
    loss = _Quadratic(target=2.0)
    batches = (TensorDict(x=torch.ones(4, 1), batch_size=[4]) for _ in range(1000))
    trainer = Trainer(
        collector=batches,
        total_frames=4000,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=torch.optim.Adam(loss.parameters(), lr=hparams["lr"]),
        progress_bar=False,
    )
    return TrainerMember(trainer, score_fn=lambda t: -abs(2.0 - t.loss_module.w.item()))


def test_trainer_member_rounds_hparams_and_state():
    member = _trainer_member({"lr": 0.01}, 0)
    assert isinstance(member, PBTMember)
    member.set_hparams({"lr": 0.1, "weight": 2.0})
    assert member.optimizers()[0].param_groups[0]["lr"] == 0.1
    assert member.trainer.loss_module.weight == 2.0
    s1 = member.train(20)
    assert member.trainer.collected_frames == 20
    s2 = member.train(20)
    assert member.trainer.collected_frames == 40 and s2 > s1
    other = _trainer_member({"lr": 0.01}, 1)
    other.load_state_dict(member.state_dict())
    assert other.trainer.loss_module.w.item() == member.trainer.loss_module.w.item()
    assert other.optimizers()[0].param_groups[0]["lr"] == 0.1  # optimizer state came along
    assert other.trainer.collected_frames == 40
    with pytest.raises(KeyError, match="'gamma'"):
        member.set_hparams({"gamma": 0.9})
    member.close()
    other.close()


def test_trainer_member_errors():
    loss = _Quadratic(1.0)
    batches = [TensorDict(x=torch.ones(4, 1), batch_size=[4]) for _ in range(2)]
    trainer = Trainer(
        collector=batches,
        total_frames=100,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
        progress_bar=False,
    )
    member = TrainerMember(trainer, score_key="r_training")
    with pytest.raises(RuntimeError, match="'r_training' is not in trainer.latest_logs"):
        member.train(4)
    with pytest.raises(RuntimeError, match="collector ended at 8 frames"):
        member.train(8)
    with pytest.raises(TypeError, match="expected a Trainer"):
        TrainerMember(object())  # type: ignore[arg-type]


def test_pbt_over_trainers():
    with PBT(
        _trainer_member,
        {"lr": ContinuousParam(1e-4, 0.3, log=True)},
        population_size=4,
        ready_interval=8,
        seed=0,
        initial_hparams=[{"lr": lr} for lr in (1e-4, 3e-4, 0.01, 0.1)],
    ) as pbt:
        pbt.train(num_rounds=4)
        best = pbt.best
        state = pbt.member_state_dict(pbt.best_member)
    assert best is not None and best.score > -1.0
    assert state["collected_frames"] == 32


def test_optimizer_and_loss_helpers():
    w = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD(
        [{"params": [w]}, {"params": [torch.nn.Parameter(torch.ones(1))]}], lr=0.1
    )
    set_optimizer_lr(opt, 0.5, group=1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    set_optimizer_lr(opt, 0.2)
    assert [g["lr"] for g in opt.param_groups] == [0.2, 0.2]
    with pytest.raises(ValueError, match="lr must be a finite number > 0, got -1"):
        set_optimizer_lr(opt, -1)
    with pytest.raises(IndexError, match="group 5"):
        set_optimizer_lr(opt, 0.1, group=5)
    loss = torch.nn.Module()
    loss.register_buffer("coef", torch.tensor(1.0))
    ref = loss.coef
    set_loss_coefficient(loss, "coef", 3.0)
    assert ref.item() == 3.0  # in place
    with pytest.raises(AttributeError, match="no number or tensor attribute 'nope'"):
        set_loss_coefficient(loss, "nope", 1.0)


# -- process backend ---------------------------------------------------------------------------------
def test_process_backend_matches_serial_and_cleans_up():
    with _pbt() as pbt:
        serial = _as_tuples(pbt.train(num_rounds=3))
        serial_best = pbt.member_state_dict(pbt.best_member)
    pbt = _pbt(backend="process")
    backend = pbt._backend
    procs = list(backend.procs)
    tmpdir = backend.tmpdir
    assert len(procs) == 4 and all(p.is_alive() for p in procs)
    assert _as_tuples(pbt.train(num_rounds=3)) == serial
    state = pbt.member_state_dict(pbt.best_member)
    assert torch.equal(state["x"], serial_best["x"])
    pbt.close()
    assert all(p.exitcode is not None for p in procs)
    assert not os.path.exists(tmpdir)


def test_process_backend_state_dict_round_trip():
    with _pbt(backend="process", population_size=2) as pbt:
        pbt.train(num_rounds=1)
        state = pbt.state_dict()
    with _pbt(population_size=2) as pbt:
        pbt.load_state_dict(state)
        assert torch.equal(pbt.member_state_dict(0)["x"], state["members"][0]["x"])


def test_process_member_killed_is_reported_quickly():
    make = make_toy_factory(die={"seed": 2, "call": 2, "how": "kill"})
    pbt = _pbt(backend="process", make_member=make, seed=1, population_size=3)
    procs = list(pbt._backend.procs)
    pbt.step()
    start = time.monotonic()
    with pytest.raises(
        PBTMemberError,
        match=r"member 1: its process \(pid \d+\) died during "
        r"'train': killed by SIGKILL",
    ) as info:
        pbt.step()
    assert time.monotonic() - start < 5.0
    assert info.value.member == 1
    # the failure closed the population: no process is left
    assert all(p.exitcode is not None for p in procs)
    with pytest.raises(RuntimeError, match="closed"):
        pbt.step()


def test_process_member_exception_carries_traceback():
    make = make_toy_factory(die={"seed": 0, "call": 1, "how": "raise"})
    pbt = _pbt(backend="process", make_member=make, seed=0, population_size=2)
    procs = list(pbt._backend.procs)
    with pytest.raises(PBTMemberError, match="(?s)member 0: train failed.*toy member failed on"):
        pbt.step()
    assert all(p.exitcode is not None for p in procs)


def test_process_member_timeout_stops_everything_quickly():
    make = make_toy_factory(die={"seed": 1, "call": 1, "how": "hang"})
    pbt = _pbt(backend="process", make_member=make, seed=0, population_size=2, timeout=0.5)
    procs = list(pbt._backend.procs)
    start = time.monotonic()
    with pytest.raises(PBTMemberError, match=r"member 1: no answer to 'train' within 0.5 s"):
        pbt.step()
    assert time.monotonic() - start < 4.0  # the hung member is terminated, not waited for
    assert all(p.exitcode is not None for p in procs)


def _child_exit_code(code: int) -> int:
    import multiprocessing as mp

    proc = mp.get_context("fork").Process(target=os._exit, args=(code,))
    proc.start()
    proc.join()
    return proc.exitcode


def test_process_members_may_start_processes():
    base = make_toy_factory()

    class Spawner(base):  # e.g. a member whose trainer steps a ParallelEnv
        def train(self, steps):
            return float(_child_exit_code(7)) + 0.0 * super().train(steps)

    with _pbt(backend="process", make_member=Spawner, population_size=2) as pbt:
        assert [r.score for r in pbt.step()] == [7.0, 7.0]


def test_process_factory_error_is_reported():
    def broken(hparams, seed):
        raise RuntimeError("cannot build")

    with pytest.raises(PBTMemberError, match="(?s)member [01]: start failed.*cannot build"):
        PBT(broken, SPACE, population_size=2, ready_interval=1, backend="process")


def _orphaning_main(conn) -> None:
    # runs in a forked child that plays the main process; the test then SIGKILLs it
    pbt = _pbt(backend="process", population_size=2, start_method="fork")
    pbt.step()
    conn.send((pbt._backend.tmpdir, [p.pid for p in pbt._backend.procs]))
    time.sleep(60)


def test_process_workers_end_when_the_main_process_is_killed():
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    parent_conn, child_conn = ctx.Pipe()
    # not a daemon: daemonic processes may not start processes
    main = ctx.Process(target=_orphaning_main, args=(child_conn,))
    main.start()
    try:
        mp.connection.wait([parent_conn, main.sentinel], 30.0)
        assert parent_conn.poll(), f"the stand-in main process failed ({main.exitcode})"
        tmpdir, pids = parent_conn.recv()
        assert os.path.isdir(tmpdir) and len(pids) == 2
    finally:
        main.kill()
        main.join()
    deadline = time.monotonic() + 5.0
    alive = pids
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if _pid_alive(pid)]
        if not alive and not os.path.exists(tmpdir):
            break
        time.sleep(0.05)
    assert alive == [], "member processes outlived the killed main process"
    assert not os.path.exists(tmpdir)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (ended, not yet reaped by init) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# -- ray backend -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


@pytest.mark.slow
def test_ray_backend_matches_serial_and_reports_dead_actor(ray_session):
    # slow: each actor is a fresh Ray worker importing torch (~8 s each on 2 cores)
    with _pbt(population_size=3) as pbt:
        serial = _as_tuples(pbt.train(num_rounds=2))
    pbt = _pbt(backend="ray", population_size=3)
    assert _as_tuples(pbt.train(num_rounds=2)) == serial
    assert math.isfinite(pbt.member_state_dict(0)["x"].item())
    ray_session.kill(pbt._backend.actors[1])
    start = time.monotonic()
    with pytest.raises(PBTMemberError, match="member 1: its Ray actor died during 'train'"):
        pbt.step()
    assert time.monotonic() - start < 10.0
    with pytest.raises(RuntimeError, match="closed"):  # the failure closed the population
        pbt.step()
