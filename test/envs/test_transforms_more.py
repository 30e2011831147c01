"""``NextStateReconstructor`` and ``Tokenizer`` (with a small stand-in tokenizer)."""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import pytest
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

import torchrl.envs as envs_pkg
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.envs import PendulumEnv, TransformedEnv
from torchrl.envs.transforms import NextStateReconstructor, Tokenizer


# ------------------------------------------------------------------ NextStateReconstructor
def _sample() -> TensorDict:
    return TensorDict(
        {
            "observation": torch.arange(6.0).unsqueeze(-1).expand(6, 2).clone(),
            ("next", "done"): torch.tensor([False, False, True, False, False, False]).unsqueeze(-1),
            ("collector", "traj_ids"): torch.tensor([0, 0, 0, 1, 1, 2]),
            "step_count": torch.tensor([0, 1, 2, 0, 5, 0]).unsqueeze(-1),
        },
        batch_size=[6],
    )


class TestNextStateReconstructor:
    def test_rebuilds_within_trajectories(self) -> None:
        out = NextStateReconstructor()(_sample())
        got = out["next", "observation"][:, 0].tolist()
        # 2 is done, 4 -> 5 crosses trajectories, 5 is last: NaN there
        assert got[0] == 1.0 and got[1] == 2.0 and got[3] == 4.0
        assert all(math.isnan(got[i]) for i in (2, 4, 5))
        assert out["next", "observation"].shape == (6, 2)

    def test_step_count_and_optional_checks(self) -> None:
        out = NextStateReconstructor(step_count_key="step_count", fill_value=-1.0)(_sample())
        # step 3 -> 4 jumps from count 0 to 5: not the next step
        assert out["next", "observation"][:, 0].tolist() == [1.0, 2.0, -1.0, -1.0, -1.0, -1.0]
        out = NextStateReconstructor(traj_key=None, done_key=None)(_sample())
        assert out["next", "observation"][:5, 0].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]

    def test_integer_entries_and_errors(self) -> None:
        td = _sample().set("count", torch.arange(6))
        with pytest.raises(TypeError, match="'count'.*torch.int64.*integer fill_value"):
            NextStateReconstructor(["count"])(td)
        out = NextStateReconstructor(["count"], fill_value=-1)(td)
        assert out["next", "count"].tolist() == [1, 2, -1, 4, -1, -1]
        with pytest.raises(KeyError, match="marker entry"):
            NextStateReconstructor()(td.exclude(("collector", "traj_ids")))
        relaxed = NextStateReconstructor(strict=False)(td.exclude(("collector", "traj_ids")))
        assert relaxed["next", "observation"][3, 0] == 4.0
        with pytest.raises(KeyError, match="input key .*missing"):
            NextStateReconstructor(["missing"])(td)
        with pytest.raises(ValueError, match=r"flat sample of batch \[B\], got batch \[2, 3\]"):
            NextStateReconstructor()(td.reshape(2, 3))

    def test_in_a_replay_buffer_not_in_an_env(self) -> None:
        rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=NextStateReconstructor())
        data = _sample()
        rb.extend(data)
        sample = rb[torch.arange(6)]
        assert sample["next", "observation"][0, 0] == 1.0
        with pytest.raises(RuntimeError, match="replay-buffer"):
            TransformedEnv(PendulumEnv(), NextStateReconstructor(["th"])).reset()


# ------------------------------------------------------------------ Tokenizer
class CharTokenizer:
    """One id per character (id 0 pads); ``transformers``' call, encode and decode signatures."""

    vocab_size = 128

    def __init__(self) -> None:
        self.added: list[str] = []

    def add_tokens(self, tokens: list[str]) -> None:
        self.added.extend(tokens)

    def encode(self, text: str, return_tensors: Any = None, **kwargs: Any) -> torch.Tensor:
        ids = [ord(c) for c in text]
        if kwargs.get("padding") == "max_length":
            ids = (ids + [0] * kwargs["max_length"])[: kwargs["max_length"]]
        return torch.tensor([ids])

    def __call__(self, texts: list[str], return_tensors: Any = None, **kwargs: Any) -> dict:
        length = kwargs.get("max_length") or max(len(t) for t in texts)
        ids = [([ord(c) for c in t] + [0] * length)[:length] for t in texts]
        mask = [[1 if i < len(t) else 0 for i in range(length)] for t in texts]
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids if i != 0 or not skip_special_tokens)

    def batch_decode(self, ids: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        return [self.decode(row, skip_special_tokens) for row in ids]


class TestTokenizer:
    def test_single_and_batched_strings(self) -> None:
        t = Tokenizer(["text"], ["tokens"], tokenizer=CharTokenizer())
        out = t(TensorDict(text=NonTensorData("ab")))
        assert out["tokens"].tolist() == [97, 98] and out["attention_mask"].tolist() == [1, 1]
        batch = TensorDict(
            text=NonTensorStack(NonTensorData("abc"), NonTensorData("d")), batch_size=[2]
        )
        out = t(batch)
        assert out["tokens"].tolist() == [[97, 98, 99], [100, 0, 0]]
        assert out["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]

    def test_nested_keys_max_length_and_no_mask(self) -> None:
        t = Tokenizer([("q", "text")], [("q", "ids")], tokenizer=CharTokenizer(), max_length=4)
        out = t(TensorDict(q=TensorDict(text=NonTensorData("hello"))))
        assert out["q", "ids"].tolist() == [104, 101, 108, 108]
        assert ("q", "attention_mask") in out.keys(True)
        t = Tokenizer(["text"], ["ids"], tokenizer=CharTokenizer(), return_attention_mask=False)
        assert "attention_mask" not in t(TensorDict(text=NonTensorData("x"))).keys()

    def test_inverse_decodes(self) -> None:
        t = Tokenizer(in_keys_inv=["text"], out_keys_inv=["ids"], tokenizer=CharTokenizer())
        td = t.inv(TensorDict(ids=torch.tensor([[104, 105], [111, 0]]), batch_size=[2]))
        assert td["text"] == ["hi", "o"]
        td = t.inv(TensorDict(ids=torch.tensor([104, 105])))
        assert td["text"] == "hi"

    def test_missing_and_bad_inputs(self) -> None:
        tok = CharTokenizer()
        t = Tokenizer(["text"], ["ids"], tokenizer=tok, additional_tokens=["<x>"])
        assert tok.added == ["<x>"]
        assert "ids" not in t(TensorDict()).keys()
        strict = Tokenizer(["text"], ["ids"], tokenizer=tok, missing_tolerance=False)
        with pytest.raises(KeyError, match="'text'"):
            strict(TensorDict())
        with pytest.raises(TypeError, match="has no encode"):
            Tokenizer(["text"], tokenizer=object())
        with pytest.raises(ValueError, match="in_keys"):
            Tokenizer(tokenizer=tok)

    def test_env_specs_need_max_length(self) -> None:
        with pytest.raises(ValueError, match="'ids'.*max_length"):
            TransformedEnv(PendulumEnv(), Tokenizer(["th"], ["ids"], tokenizer=CharTokenizer()))
        env = TransformedEnv(
            PendulumEnv(), Tokenizer(["th"], ["ids"], tokenizer=CharTokenizer(), max_length=3)
        )
        assert env.observation_spec["ids"].shape == (3,)

    @pytest.mark.skipif(
        importlib.util.find_spec("transformers") is not None, reason="transformers is installed"
    )
    def test_pretrained_name_needs_transformers(self) -> None:
        with pytest.raises(ImportError, match=r'pip install "torchrl\[llm\]"'):
            Tokenizer(["text"])
        with pytest.raises(ImportError, match="'gpt2'"):
            Tokenizer(["text"], tokenizer="gpt2")


def test_exported_from_envs() -> None:
    assert envs_pkg.NextStateReconstructor is NextStateReconstructor
    assert envs_pkg.Tokenizer is Tokenizer
