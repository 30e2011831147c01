"""LLMHashingEnv: equal token chains get equal observations; text decoding; bad input."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from torchrl.envs import LLMHashingEnv, StepCounter, TransformedEnv, check_env_specs


class CharTokenizer:
    """Token ``i`` is the letter ``chr(97 + i)``."""

    def __len__(self) -> int:
        return 26

    def decode(self, ids):
        return "".join(chr(97 + i) for i in ids)


def test_hash_identifies_chains():
    env = LLMHashingEnv(vocab_size=8, batch_size=[3])
    prompt = torch.tensor([[1, 2], [1, 2], [2, 1]])
    td = env.reset(TensorDict(observation=prompt, batch_size=[3]))
    obs = td["observation"]
    assert obs.shape == (3, 1) and obs.dtype == torch.int64
    assert obs[0] == obs[1] and obs[0] != obs[2]
    td["action"] = torch.tensor([[5], [6], [5]])
    nxt = env.step(td)["next", "observation"]
    assert nxt[0] != nxt[1]  # same prefix, different token
    # Replaying the same chain in a fresh episode lands on the same hash.
    again = env.reset(TensorDict(observation=prompt, batch_size=[3]))
    again["action"] = torch.tensor([[5], [5], [5]])
    assert env.step(again)["next", "observation"][0] == nxt[0]


def test_text_output_and_specs():
    env = LLMHashingEnv(tokenizer=CharTokenizer())
    assert env.vocab_size == 26
    td = env.reset(TensorDict(observation=torch.tensor([7, 8])))
    assert td["text"] == "hi"
    td["action"] = torch.tensor([0])
    assert env.step(td)["next", "text"] == "hia"
    env = TransformedEnv(LLMHashingEnv(vocab_size=5, batch_size=[2]), StepCounter(4))
    check_env_specs(env)
    rollout = env.rollout(10)
    assert rollout.shape == (2, 4)


def test_custom_hash_and_errors():
    env = LLMHashingEnv(vocab_size=4, hashing_module=lambda rows: rows.sum(-1))
    td = env.reset(TensorDict(observation=torch.tensor([1, 2])))
    assert td["observation"].item() == 3
    td["action"] = torch.tensor([2])
    assert env.step(td)["next", "observation"].item() == 5
    td["action"] = torch.tensor([4])
    with pytest.raises(ValueError, match="does not fit the action spec"):
        env.step(td)
    with pytest.raises(ValueError, match="vocab_size or a tokenizer"):
        LLMHashingEnv()
