"""Population-based training: rounds of training, ranking, exploiting and exploring."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from torchrl.record.loggers.common import Logger
from torchrl.trainers.pbt.backends import Backend, PBTMemberError, make_backend
from torchrl.trainers.pbt.space import HParamSpace, check_perturb_factors, explore, make_space

__all__ = ["PBT", "PBTRecord", "PopulationBasedTraining"]

PBT_STATE_VERSION = 1


@dataclass(frozen=True)
class PBTRecord:
    """One member's round: the hyper-parameters it trained with and the score it reached.

    Attributes:
        round: the round index (0-based).
        member: the member index.
        hparams: the hyper-parameters used during the round.
        score: the score ``train`` returned at the end of the round.
        parent: the member whose weights this one copied at the start of the round, or ``None``
            when it went on from its own.

    Examples:
        The history :meth:`PopulationBasedTraining.train` returns is a list of records:

        >>> from torchrl.trainers.pbt import ContinuousParam, PopulationBasedTraining
        >>> class Quadratic:  # moves x toward 1 at the rate of its learning rate
        ...     def __init__(self, hparams, seed):
        ...         self.x, self.lr = 0.0, hparams["lr"]
        ...     def train(self, steps):
        ...         for _ in range(steps):
        ...             self.x += self.lr * (1.0 - self.x)
        ...         return -abs(1.0 - self.x)
        ...     def state_dict(self):
        ...         return {"x": self.x}
        ...     def load_state_dict(self, state):
        ...         self.x = state["x"]
        ...     def set_hparams(self, hparams):
        ...         self.lr = hparams["lr"]
        >>> with PopulationBasedTraining(Quadratic, {"lr": ContinuousParam(0.001, 0.5)},
        ...         population_size=2, ready_interval=5, seed=0) as pbt:
        ...     history = pbt.train(num_rounds=2)
        >>> [(r.round, r.member, r.parent) for r in history]  # member 1 copied member 0
        [(0, 0, None), (0, 1, None), (1, 0, None), (1, 1, 0)]
        >>> isinstance(history[0], PBTRecord), sorted(history[0].hparams)
        (True, ['lr'])
    """

    round: int
    member: int
    hparams: dict[str, Any]
    score: float
    parent: int | None


def _rank_key(score: float, mode: str) -> float:
    # NaN ranks last whatever the mode
    if math.isnan(score):
        return math.inf
    return -score if mode == "max" else score


class PopulationBasedTraining:
    """Trains a population in rounds; after each, the weakest members copy the strongest and
    perturb their hyper-parameters.

    Each round every member trains ``ready_interval`` and returns a score. Before the next
    round, each member of the bottom ``truncation`` fraction copies a random member of the top
    fraction (state and hyper-parameters), then each searched hyper-parameter is resampled with
    ``resample_probability`` or scaled by a factor from ``perturb_factors`` within its bounds.
    Members come from ``make_member(hparams, seed)`` (see
    :class:`~torchrl.trainers.pbt.PBTMember`, :class:`~torchrl.trainers.pbt.TrainerMember`);
    ``set_hparams`` is then called with the same hyper-parameters. See ``docs/api/pbt.rst``.

    Args:
        make_member: ``make_member(hparams: dict, seed: int) -> member``. With
            ``backend="process"`` and a ``spawn`` start method it must be picklable.
        hparam_space: name -> :class:`ContinuousParam`, :class:`IntegerParam`,
            :class:`ChoiceParam` or a shorthand (see :func:`make_space`).
        population_size: the number of members (``>= 1``).
        ready_interval: how much each member trains per round (passed to ``train``).
        truncation: the fraction of the population replaced each round, in ``(0, 0.5]`` (at
            least one member when the population has two or more).
        perturb_factors: the factors a perturbation picks from.
        resample_probability: the chance that a hyper-parameter is resampled, not perturbed.
        initial_hparams: one dict per member (may hold fixed hyper-parameters outside the
            space); ``None`` samples each member's from the space.
        mode: ``"max"`` (higher scores are better) or ``"min"``.
        seed: seeds the PBT's choices; member ``i`` is built with seed ``seed + i``.
        backend: ``"serial"`` (this process, deterministic), ``"process"`` (a worker process
            per member) or ``"ray"`` (a Ray actor per member).
        logger: a torchrl :class:`~torchrl.record.loggers.Logger` receiving each member's
            score and numeric hyper-parameters per round (step = round).
        timeout: seconds to wait for a member's answer before raising (``None``: no limit;
            a dead process or actor is reported at once either way).
        start_method: the ``multiprocessing`` start method of the process backend.
        num_threads: torch threads per member process or actor.
        ray_init_config: keyword arguments of ``ray.init`` when Ray is not running.
        ray_actor_options: options of each member's Ray actor (e.g. ``{"num_cpus": 1}``).

    Examples:
        >>> from torchrl.trainers.pbt import ContinuousParam
        >>> class Quadratic:  # its optimum moves with the learning rate it trains with
        ...     def __init__(self, hparams, seed):
        ...         self.x, self.lr = 0.0, hparams["lr"]
        ...     def train(self, steps):
        ...         for _ in range(steps):
        ...             self.x += self.lr * (1.0 - self.x)
        ...         return -abs(1.0 - self.x)
        ...     def state_dict(self):
        ...         return {"x": self.x}
        ...     def load_state_dict(self, state):
        ...         self.x = state["x"]
        ...     def set_hparams(self, hparams):
        ...         self.lr = hparams["lr"]
        >>> with PopulationBasedTraining(Quadratic, {"lr": ContinuousParam(0.001, 0.5)},
        ...         population_size=4, ready_interval=5, seed=0) as pbt:
        ...     history = pbt.train(num_rounds=4)
        >>> len(history), pbt.best.score > -0.05
        (16, True)
    """

    def __init__(
        self,
        make_member: Callable[[dict[str, Any], int], Any],
        hparam_space: Mapping[str, Any],
        *,
        population_size: int,
        ready_interval: int,
        truncation: float = 0.25,
        perturb_factors: Sequence[float] = (0.8, 1.2),
        resample_probability: float = 0.25,
        initial_hparams: Sequence[Mapping[str, Any]] | None = None,
        mode: Literal["max", "min"] = "max",
        seed: int = 0,
        backend: Literal["serial", "process", "ray"] = "serial",
        logger: Logger | None = None,
        timeout: float | None = None,
        start_method: str | None = None,
        num_threads: int = 1,
        ray_init_config: dict[str, Any] | None = None,
        ray_actor_options: dict[str, Any] | None = None,
    ) -> None:
        self._backend: Backend | None = None
        if not callable(make_member):
            raise TypeError(f"make_member must be callable, got {make_member!r}")
        for name, value, low in (
            ("population_size", population_size, 1),
            ("ready_interval", ready_interval, 1),
            ("num_threads", num_threads, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if isinstance(truncation, bool) or not 0.0 < float(truncation) <= 0.5:
            raise ValueError(f"truncation must be in (0, 0.5], got {truncation!r}")
        if not 0.0 <= float(resample_probability) <= 1.0:
            raise ValueError(
                f"resample_probability must be in [0, 1], got {resample_probability!r}"
            )
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        if backend not in ("serial", "process", "ray"):
            raise ValueError(f"backend must be 'serial', 'process' or 'ray', got {backend!r}")
        if logger is not None and not isinstance(logger, Logger):
            raise TypeError(f"logger must be a torchrl Logger, got {type(logger).__name__}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 or None, got {timeout!r}")
        self.space: HParamSpace = make_space(hparam_space)
        self.population_size = population_size
        self.ready_interval = ready_interval
        self.truncation = float(truncation)
        self.perturb_factors = check_perturb_factors(perturb_factors)
        self.resample_probability = float(resample_probability)
        self.mode = mode
        self.seed = int(seed)
        self.backend_name = backend
        self.logger = logger
        self.rng = random.Random(self.seed)

        if initial_hparams is None:
            hparams = [
                {name: param.sample(self.rng) for name, param in self.space.items()}
                for _ in range(population_size)
            ]
        else:
            if len(initial_hparams) != population_size:
                raise ValueError(
                    f"initial_hparams must hold population_size={population_size} dicts, got "
                    f"{len(initial_hparams)}"
                )
            hparams = [dict(h) for h in initial_hparams]
        for index, member_hparams in enumerate(hparams):
            for name, param in self.space.items():
                if name not in member_hparams:
                    raise KeyError(
                        f"initial_hparams[{index}] has no {name!r} (the space searches "
                        f"{list(self.space)})"
                    )
                param.validate(name, member_hparams[name])
        #: each member's current hyper-parameters
        self.hparams: list[dict[str, Any]] = hparams
        #: every (round, member) so far, in order
        self.history: list[PBTRecord] = []
        self.round = 0
        self._scores: list[float] | None = None
        self._backend = make_backend(
            backend,
            make_member,
            [(h, self.seed + i) for i, h in enumerate(hparams)],
            start_method=start_method,
            num_threads=num_threads,
            timeout=timeout,
            ray_init_config=ray_init_config,
            ray_actor_options=ray_actor_options,
        )
        for index, member_hparams in enumerate(hparams):
            self._call("set_hparams", index, member_hparams)

    # -- running ---------------------------------------------------------------------------------
    def _live(self) -> Backend:
        if self._backend is None:
            raise RuntimeError("PopulationBasedTraining: closed")
        return self._backend

    def _call(self, method: str, *args: Any) -> Any:
        # A failed member leaves the others mid-conversation: stop them all before raising.
        backend = self._live()
        try:
            return getattr(backend, method)(*args)
        except PBTMemberError:
            self.close()
            raise

    def _num_replaced(self) -> int:
        if self.population_size < 2:
            return 0
        return max(1, int(self.truncation * self.population_size))

    def select(self, scores: Sequence[float]) -> list[tuple[int, int]]:
        """Truncation selection: ``(parent, member)`` pairs, each bottom member with a random
        top one (drawn with the PBT's generator).

        Args:
            scores: one score per member.

        Returns:
            The pairs, bottom members in rank order (worst last).
        """
        if len(scores) != self.population_size:
            raise ValueError(f"select: expected {self.population_size} scores, got {len(scores)}")
        order = sorted(
            range(self.population_size), key=lambda i: (_rank_key(float(scores[i]), self.mode), i)
        )
        n = self._num_replaced()
        if n == 0:
            return []
        top, bottom = order[:n], order[-n:]
        return [(top[self.rng.randrange(n)], member) for member in bottom]

    def exploit_and_explore(self, scores: Sequence[float]) -> dict[int, int]:
        """Replaces the bottom members with explored copies of top ones.

        Returns:
            member -> parent for each replaced member.
        """
        pairs = self.select(scores)
        if not pairs:
            return {}
        self._call("copy_states", pairs)
        for parent, member in pairs:
            new = explore(
                self.hparams[parent],
                self.space,
                self.rng,
                self.perturb_factors,
                self.resample_probability,
            )
            self.hparams[member] = new
            self._call("set_hparams", member, new)
        return {member: parent for parent, member in pairs}

    def step(self) -> list[PBTRecord]:
        """One round: exploit/explore after the previous round's ranking (from the second
        round on), then train every member ``ready_interval``.

        Returns:
            This round's records, one per member.
        """
        parents = self.exploit_and_explore(self._scores) if self._scores is not None else {}
        hparams = [dict(h) for h in self.hparams]
        scores = self._call("train_all", self.ready_interval)
        records = [
            PBTRecord(self.round, i, hparams[i], float(scores[i]), parents.get(i))
            for i in range(self.population_size)
        ]
        self.history.extend(records)
        self._scores = [float(s) for s in scores]
        self._log(records)
        self.round += 1
        return records

    def train(self, num_rounds: int) -> list[PBTRecord]:
        """Runs ``num_rounds`` rounds; returns the whole :attr:`history`."""
        if isinstance(num_rounds, bool) or not isinstance(num_rounds, int) or num_rounds < 0:
            raise ValueError(f"num_rounds must be an int >= 0, got {num_rounds!r}")
        for _ in range(num_rounds):
            self.step()
        return self.history

    def _log(self, records: list[PBTRecord]) -> None:
        if self.logger is None:
            return
        for rec in records:
            self.logger.log_scalar(f"pbt/member_{rec.member}/score", rec.score, step=rec.round)
            for name, value in rec.hparams.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.logger.log_scalar(
                        f"pbt/member_{rec.member}/{name}", float(value), step=rec.round
                    )
        best = self.best
        if best is not None:
            self.logger.log_scalar("pbt/best_score", best.score, step=best.round)

    # -- results ---------------------------------------------------------------------------------
    @property
    def best(self) -> PBTRecord | None:
        """The best record of the latest round (``None`` before the first round)."""
        if not self.history:
            return None
        latest = [r for r in self.history if r.round == self.history[-1].round]
        return min(latest, key=lambda r: (_rank_key(r.score, self.mode), r.member))

    @property
    def best_member(self) -> int | None:
        """The index of the best member after the latest round."""
        best = self.best
        return None if best is None else best.member

    def member_state_dict(self, index: int) -> dict[str, Any]:
        """Member ``index``'s ``state_dict()`` (e.g. of :attr:`best_member`)."""
        if not 0 <= index < self.population_size:
            raise IndexError(f"member index must be in [0, {self.population_size}), got {index}")
        return self._call("get_state", index)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the run: rounds, generator, hyper-parameters,
        history, last scores and each member's state."""
        return {
            "version": PBT_STATE_VERSION,
            "round": self.round,
            "rng": self.rng.getstate(),
            "hparams": [dict(h) for h in self.hparams],
            "scores": None if self._scores is None else list(self._scores),
            "history": [asdict(r) for r in self.history],
            "members": [self.member_state_dict(i) for i in range(self.population_size)],
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores a :meth:`state_dict` of a population of the same size.

        Raises:
            ValueError: another format version or population size.
        """
        if state_dict.get("version") != PBT_STATE_VERSION:
            raise ValueError(
                f"PopulationBasedTraining: state version {state_dict.get('version')!r}, "
                f"expected {PBT_STATE_VERSION}"
            )
        members = state_dict["members"]
        if len(members) != self.population_size:
            raise ValueError(
                f"PopulationBasedTraining: the state holds {len(members)} members, this "
                f"population has {self.population_size}"
            )
        for index, state in enumerate(members):
            self._call("set_state", index, state)
        self.hparams = [dict(h) for h in state_dict["hparams"]]
        for index, member_hparams in enumerate(self.hparams):
            self._call("set_hparams", index, member_hparams)
        self.round = int(state_dict["round"])
        rng_state = state_dict["rng"]
        # a state that went through a serializer may hold lists where getstate gave tuples
        self.rng.setstate((rng_state[0], tuple(rng_state[1]), rng_state[2]))
        scores = state_dict["scores"]
        self._scores = None if scores is None else [float(s) for s in scores]
        self.history = [PBTRecord(**r) for r in state_dict["history"]]

    # -- lifetime --------------------------------------------------------------------------------
    def close(self) -> None:
        """Closes every member (stops their processes or actors); calling it again does
        nothing."""
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.close()

    def __enter__(self) -> PopulationBasedTraining:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # the process backend's own finalizer stops its workers; this covers the others
        if getattr(self, "_backend", None) is not None:
            try:
                self.close()
            except Exception:  # noqa: BLE001 - nothing to report to at collection time
                pass

    def __repr__(self) -> str:
        return (
            f"PopulationBasedTraining(population_size={self.population_size}, "
            f"ready_interval={self.ready_interval}, backend={self.backend_name!r}, "
            f"round={self.round})"
        )


#: Short name of :class:`PopulationBasedTraining`.
PBT = PopulationBasedTraining
