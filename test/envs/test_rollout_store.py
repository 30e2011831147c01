"""The rollout's step store: chunked stacking gives what one stack of every step gives."""

from __future__ import annotations

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from torchrl.envs import PendulumEnv
from torchrl.envs._rollout import StepStore as _StepStore
from torchrl.envs._rollout import stack_steps as _stack_steps


def _step(t: int, batch: tuple[int, ...] = (2,), extra: bool = False) -> TensorDict:
    td = TensorDict(
        {
            "obs": torch.full((*batch, 3), float(t)),
            "next": TensorDict({"obs": torch.full((*batch, 3), t + 0.5)}, batch_size=batch),
        },
        batch_size=batch,
    )
    if extra:
        td["extra"] = torch.ones(*batch, 1)
    return td


@pytest.mark.parametrize("n", [1, 15, 16, 17, 40])
@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
def test_chunked_equals_stack(n, batch):
    steps = [_step(t, batch) for t in range(n)]
    store = _StepStore()
    for td in steps:
        store.append(td)
    out = store.result()
    expected = _stack_steps([td.clone() for td in steps])
    assert out.batch_size == expected.batch_size == torch.Size([*batch, n])
    assert (out == expected).all()


def test_heterogeneous_steps_behave_as_one_stack():
    # 20 steps with the same keys (one chunk), then steps with an extra key: the store ends
    # with an error, as one stack of all the steps does (torch.stack refuses differing keys)
    steps = [_step(t) for t in range(20)] + [_step(t, extra=True) for t in range(20, 30)]
    store = _StepStore()
    for td in steps:
        store.append(td)
    with pytest.raises((KeyError, RuntimeError)):
        _stack_steps([td.clone() for td in steps])
    with pytest.raises((KeyError, RuntimeError)):
        store.result()


def test_lazy_result():
    store = _StepStore(lazy=True)
    for t in range(20):
        store.append(_step(t))
    out = store.result(contiguous=False)
    assert isinstance(out, LazyStackedTensorDict)
    assert out.batch_size == torch.Size([2, 20])


@pytest.mark.parametrize("return_contiguous", [True, False])
def test_long_rollout_matches_step_by_step(return_contiguous):
    env = PendulumEnv(batch_size=[3])
    env.set_seed(0)
    torch.manual_seed(0)
    rollout = env.rollout(37, break_when_any_done=False, return_contiguous=return_contiguous)
    env.set_seed(0)
    torch.manual_seed(0)
    td = env.reset()
    for t in range(37):
        td = env.rand_action(td)
        transition, td = env.step_and_maybe_reset(td)
        step = rollout[..., t]
        for key in transition.keys(True, True):
            assert torch.equal(step[key], transition[key]), (t, key)
