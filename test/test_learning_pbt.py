"""Learning test of population-based training (slow; `make test-slow`).

``examples/pbt_cartpole.py`` runs PBT over PPO's learning rate and entropy coefficient on
CartPole-v1 from a population whose initial hyper-parameters are drawn from wide log ranges.
With ``compare_fixed``, the example also trains every initial member alone, with its fixed
hyper-parameters, for the same frames; all final policies are evaluated the same way
(deterministic episodes on the same seeded envs). PBT's best member must end better than the
worst fixed member and reach a return that shows learning. ``pytest -s`` prints the figures.
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

pytest.importorskip("gymnasium")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@pytest.mark.slow
def test_pbt_beats_the_worst_fixed_hyperparameters(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(EXAMPLES)
    module = importlib.import_module("pbt_cartpole")
    torch.set_num_threads(1)
    result = module.train(
        backend="process", compare_fixed=True, seed=0, out=str(tmp_path), progress=False
    )
    fixed = [run["final_return"] for run in result["fixed"]]
    print(
        f"\npbt_cartpole: PBT best final return {result['final_return']:.1f} "
        f"(member {result['best']['member']}, {result['best']['hparams']}); fixed members "
        f"{[round(f, 1) for f in fixed]}; PBT wall {result['wall']:.1f} s",
        file=sys.stderr,
    )
    assert len(fixed) == 4
    assert result["final_return"] > min(fixed)
    assert result["final_return"] >= 150.0
    # the population's scores went up: the last round's best beats the first round's best
    first = max(h["score"] for h in result["history"] if h["round"] == 0)
    last = max(h["score"] for h in result["history"] if h["round"] == 7)
    assert last > first
