"""torchrl._compile: compile_with_warmup, compile_options, maybe_compile."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch
from torch import nn

from torchrl._compile import compile_options, compile_with_warmup, maybe_compile


class _Counter:
    """A function recording whether each call ran under dynamo tracing or eagerly."""

    def __init__(self) -> None:
        self.eager_calls = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            self.eager_calls += 1
        return x * 2 + 1


# ------------------------------------------------------------------------------ compile_with_warmup
def test_compile_with_warmup_runs_eagerly_then_compiled():
    counter = _Counter()
    fn = compile_with_warmup(counter, warmup=2, backend="eager")
    x = torch.arange(3.0)
    for _ in range(5):
        torch.testing.assert_close(fn(x), x * 2 + 1)
    # 2 warm-up calls; compiled calls run the traced graph, never the Python body.
    assert counter.eager_calls == 2


def test_compile_with_warmup_zero_compiles_at_once():
    counter = _Counter()
    fn = compile_with_warmup(counter, warmup=0, backend="eager")
    fn(torch.ones(2))
    fn(torch.ones(2))
    assert counter.eager_calls == 0


def test_compile_with_warmup_module_sees_in_place_weight_updates():
    module = nn.Linear(3, 2)
    fn = compile_with_warmup(module, warmup=1, backend="eager")
    x = torch.ones(1, 3)
    fn(x)
    before = fn(x).detach().clone()
    with torch.no_grad():
        module.weight.add_(1.0)
    after = fn(x)
    torch.testing.assert_close(after, module(x))
    assert not torch.allclose(before, after)


@pytest.mark.parametrize("warmup", [-1, 1.5, True, "2"])
def test_compile_with_warmup_rejects_bad_warmup(warmup):
    with pytest.raises(ValueError, match="warmup must be an int >= 0"):
        compile_with_warmup(torch.sin, warmup=warmup)


def test_compile_with_warmup_pickles_without_the_compiled_function():
    fn = compile_with_warmup(torch.sin, warmup=0, backend="eager")
    fn(torch.ones(1))
    copy = pickle.loads(pickle.dumps(fn))
    assert copy._compiled is None
    torch.testing.assert_close(copy(torch.ones(1)), torch.sin(torch.ones(1)))


@pytest.mark.slow
def test_compile_with_warmup_inductor():
    # One real inductor compile of a tiny graph (about 8 s on the 2-core dev box).
    fn = compile_with_warmup(lambda x: torch.relu(x) + 1, warmup=1)
    x = torch.tensor([-1.0, 2.0])
    fn(x)
    torch.testing.assert_close(fn(x), torch.tensor([1.0, 3.0]))


# ------------------------------------------------------------------------------ compile_options
@pytest.mark.parametrize(
    "value, expected",
    [
        (None, None),
        (False, None),
        (True, {}),
        ({"mode": "reduce-overhead"}, {"mode": "reduce-overhead"}),
    ],
)
def test_compile_options_normalises(value, expected):
    assert compile_options(value, "Owner", "compile_policy") == expected


def test_compile_options_copies_the_dict():
    value = {"backend": "eager"}
    out = compile_options(value, "Owner", "compile_policy")
    assert out == value and out is not value


@pytest.mark.parametrize("value", ["yes", 1, 0, ["backend"], object()])
def test_compile_options_rejects_other_types(value):
    with pytest.raises(TypeError, match=r"MyCollector: compile_x must be a bool, a dict"):
        compile_options(value, "MyCollector", "compile_x")


def test_compile_options_rejects_non_string_keys():
    with pytest.raises(TypeError, match="MyLoss: compile_loss keys must be strings"):
        compile_options({1: "eager"}, "MyLoss", "compile_loss")


# ------------------------------------------------------------------------------ maybe_compile
def test_maybe_compile_none_is_identity():
    fn = torch.cos
    assert maybe_compile(fn, None, owner="x") is fn


def test_maybe_compile_compiles_with_options_and_warmup():
    counter = _Counter()
    fn = maybe_compile(counter, {"backend": "eager", "warmup": 1}, owner="x")
    x = torch.ones(2)
    for _ in range(3):
        torch.testing.assert_close(fn(x), x * 2 + 1)
    assert counter.eager_calls == 1


def test_maybe_compile_falls_back_and_warns_once_on_compile_failure():
    def data_dependent(x):
        # fullgraph=True cannot trace a branch on a tensor's value: dynamo raises Unsupported.
        if x.sum() > 0:
            return x + 1
        return x - 1

    fn = maybe_compile(data_dependent, {"backend": "eager", "fullgraph": True}, owner="MyOwner")
    with pytest.warns(RuntimeWarning, match=r"MyOwner: torch.compile failed \(Unsupported"):
        out = fn(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(fn(-torch.ones(2)), torch.full((2,), -2.0))
    assert fn.failed is not None


def test_maybe_compile_falls_back_on_backend_failure():
    def broken_backend(gm, example_inputs):
        raise RuntimeError("no compiler here")

    fn = maybe_compile(lambda x: x * 3, {"backend": broken_backend}, owner="MyOwner")
    with pytest.warns(RuntimeWarning, match="MyOwner: torch.compile failed"):
        out = fn(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 3.0))


def test_maybe_compile_user_errors_propagate():
    def checks_shape(x):
        if x.shape[-1] != 3:
            raise ValueError(f"expected 3 features, got {x.shape[-1]}")
        return x

    fn = maybe_compile(checks_shape, {"backend": "eager"}, owner="x")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(ValueError, match="expected 3 features, got 2"):
            fn(torch.ones(2))
    assert fn.failed is None


@pytest.mark.parametrize("options", ["eager", ["backend"]])
def test_maybe_compile_rejects_non_dict_options(options):
    with pytest.raises(TypeError, match="MyOwner: compile options must be a dict or None"):
        maybe_compile(torch.sin, options, owner="MyOwner")


def test_maybe_compile_rejects_bad_warmup():
    with pytest.raises(ValueError, match="MyOwner: compile option 'warmup' must be an int"):
        maybe_compile(torch.sin, {"warmup": -2}, owner="MyOwner")


def test_maybe_compile_pickles():
    fn = maybe_compile(torch.sin, {"backend": "eager"}, owner="x")
    fn(torch.ones(1))
    copy = pickle.loads(pickle.dumps(fn))
    torch.testing.assert_close(copy(torch.ones(1)), torch.sin(torch.ones(1)))
