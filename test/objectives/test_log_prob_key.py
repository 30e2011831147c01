"""The log-probability key: "action_log_prob" by default (current TorchRL), "sample_log_prob" still read."""

from __future__ import annotations

import pytest
import torch
from _loss_helpers import gaussian_actor, mlp, trajectory_batch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, set_interaction_type
from torch import nn

from torchrl._keys import paper_era_log_prob_key
from torchrl.modules import NormalParamExtractor, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import VTrace


def _batch_with_log_prob(key):
    torch.manual_seed(0)
    actor = gaussian_actor(3, 2, return_log_prob=True)
    td = trajectory_batch(2, 7, 3, seed=0)
    with torch.no_grad(), set_interaction_type("random"):
        actor(td)
    log_prob = td.pop("action_log_prob")
    td[key] = log_prob
    return actor, td


def test_actor_writes_action_log_prob_by_default():
    net = TensorDictModule(
        nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()), ["observation"], ["loc", "scale"]
    )
    actor = ProbabilisticActor(
        net, in_keys=["loc", "scale"], distribution_class=TanhNormal, return_log_prob=True
    )
    with set_interaction_type("random"):
        td = actor(TensorDict(observation=torch.randn(5, 3), batch_size=[5]))
    assert "action_log_prob" in td.keys() and "sample_log_prob" not in td.keys()
    # the key follows the sample key, and the paper-era name can still be asked for
    nested = ProbabilisticActor(
        TensorDictModule(
            nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()),
            [("agents", "observation")],
            [("agents", "loc"), ("agents", "scale")],
        ),
        in_keys=[("agents", "loc"), ("agents", "scale")],
        out_keys=[("agents", "action")],
        distribution_class=TanhNormal,
        return_log_prob=True,
    )
    data = TensorDict({"agents": {"observation": torch.randn(5, 3)}}, batch_size=[5])
    with set_interaction_type("random"):
        assert ("agents", "action_log_prob") in nested(data).keys(True)
    legacy = ProbabilisticActor(
        net,
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        return_log_prob=True,
        log_prob_key="sample_log_prob",
    )
    with set_interaction_type("random"):
        td = legacy(TensorDict(observation=torch.randn(5, 3), batch_size=[5]))
    assert "sample_log_prob" in td.keys()


def test_ppo_reads_either_name_with_the_same_result():
    actor, td_new = _batch_with_log_prob("action_log_prob")
    _, td_old = _batch_with_log_prob("sample_log_prob")
    torch.manual_seed(1)
    loss = ClipPPOLoss(actor, ValueOperator(mlp(3, 1)))
    assert loss.tensor_keys.sample_log_prob == "action_log_prob"
    out_new, out_old = loss(td_new.clone()), loss(td_old.clone())
    for key in ("loss_objective", "loss_critic"):
        torch.testing.assert_close(out_new[key], out_old[key])
    # both present: the configured key wins
    both = td_new.clone()
    both["sample_log_prob"] = both["action_log_prob"] + 5.0
    torch.testing.assert_close(loss(both)["loss_objective"], out_new["loss_objective"])


def test_missing_log_prob_names_both_keys():
    actor, td = _batch_with_log_prob("action_log_prob")
    del td["action_log_prob"]
    loss = ClipPPOLoss(actor, ValueOperator(mlp(3, 1)))
    with pytest.raises(KeyError, match="action_log_prob.{0,4} nor .{0,4}sample_log_prob"):
        loss(td)


def test_vtrace_reads_the_paper_era_name():
    actor, td_new = _batch_with_log_prob("action_log_prob")
    _, td_old = _batch_with_log_prob("sample_log_prob")
    for td in (td_new, td_old):
        td["state_value"] = torch.zeros(2, 7, 1)
        td["next", "state_value"] = torch.zeros(2, 7, 1)
    vtrace = VTrace(gamma=0.9, actor_network=actor)
    torch.testing.assert_close(vtrace(td_new)["advantage"], vtrace(td_old)["advantage"])


@pytest.mark.parametrize(
    "key, legacy",
    [
        ("action_log_prob", "sample_log_prob"),
        (("agents", "action_log_prob"), ("agents", "sample_log_prob")),
        ("other_log_prob", None),
        ("sample_log_prob", None),
    ],
)
def test_paper_era_key(key, legacy):
    assert paper_era_log_prob_key(key) == legacy
