"""The one rule for summing a loss output: loss_terms / total_loss."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from torchrl.objectives import loss_terms, total_loss


def _out() -> TensorDict:
    return TensorDict(
        loss=torch.tensor(1.0),
        loss_actor=torch.tensor(2.0, dtype=torch.float16),
        alpha=torch.tensor(5.0),
        nested={"loss_inner": torch.tensor(7.0)},
    )


def test_default_rule_takes_top_level_loss_entries():
    # top-level names starting with "loss"; diagnostics and nested entries stay out
    assert loss_terms(_out()) == ["loss", "loss_actor"]
    assert float(total_loss(_out())) == 3.0


def test_keys_given_and_dtype():
    out = _out()
    assert loss_terms(out, [("nested", "loss_inner"), "loss"]) == [("nested", "loss_inner"), "loss"]
    total = total_loss(out, ["loss_actor", "loss"], dtype=torch.float32)
    assert total.dtype == torch.float32 and float(total) == 3.0
    assert total_loss(out, ["loss_actor"]).dtype == torch.float16


def test_errors_name_the_owner_and_option():
    with pytest.raises(KeyError, match=r"Mine: my_keys .*loss_x.* not in the loss output"):
        loss_terms(_out(), ["loss_x"], owner="Mine", option="my_keys")
    with pytest.raises(KeyError, match="Mine: the loss output has no entry starting with 'loss'"):
        total_loss(TensorDict(alpha=torch.tensor(1.0)), owner="Mine")
    with pytest.raises(ValueError, match="'loss' must be a scalar"):
        total_loss(TensorDict(loss=torch.ones(2)))
