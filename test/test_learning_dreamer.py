"""Learning tests of ``examples/dreamer/dreamer.py`` (slow; ``pytest -m slow``).

- DreamerV3 on Pendulum-v1 states: after 3000 agent steps (6000 env steps, action repeat 2)
  the final deterministic evaluation (5 fresh episodes) ends above -400 and beats uniform random
  actions (10 episodes) by at least 500.
- DreamerV3 from 64x64 renders of Pendulum-v1 (the example's pixel defaults: the central 52% of
  the render, 40 updates per 100 agent steps): after 10000 agent steps its final evaluation
  beats random actions and the run's first evaluation (at 1000 steps) by at least 300 each.
  Passed 2026-11-29 (2549 s): evaluations every 1000 steps -1447, -1364, -1001, -1020, -862,
  -801, -747, -577, -278, -126, final -263 against random -1182. The history of the earlier
  5000-step budget, which failed, follows. Measured
  (2026-11-27, 2013 s on the loaded 2-core CPU): final -1122, first -1532, random -1182: the
  margin over random is NOT met yet (see docs/model_based.rst, "Measured"). Tried since
  (2026-11-28, none learns, see the ``Config`` docstring of the example): action repeat 4,
  imagination burn-in, REINFORCE actor gradients, a 5-step horizon, smaller batches with more
  updates, world-model pretraining. Diagnostics show the pixel world model predicts rewards
  (posterior and 15-step open loop) as well as the state model after ~800 updates, so the
  failure is downstream of the model or in the budget; the test keeps the original settings.
  2026-11-28, later: per-phase logs find no acting bug (no frame lag, the filter resets every
  episode); the pixel actor shrinks its actions where the state actor stays bang-bang, and the
  pixel model predicts an action's effect a few steps on worse (correlation with the true
  dynamics 0.60-0.66 against 0.66-0.87). No entropy bonus, a 5x critic learning rate and
  action repeat 4 (with 40 or 80 updates per 100 steps) did not learn either; still failing.
  2026-11-29: rerun, final -1013 against first -1536 and random -1182 (523 over the first
  evaluation, 169 over random: still failing on the margin over random). A 16000-step run of
  the same defaults learns later than this budget: -862 at 5000 steps, -126 at 10000, between
  -163 and -287 from 13000 on, final -233 (docs/model_based.rst, "Measured"); the budget was
  what failed, hence the 10000 steps now.

Each test prints its evaluation curve, wall time and the random baseline (``pytest -s``).
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

pytest.importorskip("gymnasium")

EXAMPLES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "dreamer"
)


def _run(monkeypatch, tmp_path, **overrides) -> tuple[dict, float]:
    monkeypatch.syspath_prepend(EXAMPLES)
    monkeypatch.chdir(tmp_path)
    dreamer = importlib.import_module("dreamer")
    torch.set_num_threads(1)
    cfg = dreamer.Config(out=str(tmp_path), progress=False, **overrides)
    history = dreamer.train(cfg)
    random = dreamer.random_return(cfg, episodes=10)
    print(
        f"\n{cfg.tag} seed {cfg.seed}: evaluations {history['eval']}, final "
        f"{history['final_return']:.1f}, random {random:.1f}, {history['frames']} agent steps in "
        f"{history['wall']:.0f} s",
        file=sys.stderr,
    )
    return history, random


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dreamer_v3_learns_pendulum_from_states(seed: int, tmp_path, monkeypatch) -> None:
    history, random = _run(
        monkeypatch, tmp_path, version="v3", seed=seed, frames=3000, eval_every=500
    )
    final = history["final_return"]
    assert final > -400, f"DreamerV3 (seed {seed}) ends at {final:.1f}; curve {history['eval']}"
    assert final - random >= 500, (
        f"DreamerV3 (seed {seed}) {final:.1f} does not beat random actions ({random:.1f}) by 500"
    )


@pytest.mark.slow
def test_dreamer_v3_improves_from_pixels(tmp_path, monkeypatch) -> None:
    history, random = _run(
        monkeypatch, tmp_path, version="v3", pixels=True, seed=0, frames=10000, eval_every=1000
    )
    final, first = history["final_return"], history["eval"][0][1]
    assert final - random >= 300, (
        f"DreamerV3 from pixels ends at {final:.1f}, random {random:.1f}; curve {history['eval']}"
    )
    assert final - first >= 300, (
        f"no clear improvement over the run: curve {history['eval']}, final {final:.1f}"
    )
    assert os.path.isfile(history["imagination"][-1])
