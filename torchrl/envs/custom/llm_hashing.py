"""``LLMHashingEnv``: token-by-token text generation where each token chain is one hash.

The observation is a single integer identifying the whole chain generated so far: the reset
hashes the prompt's tokens, and each step hashes the pair ``(previous hash, new token)``. Equal
chains therefore get equal observations whatever the batch element or episode, so a tree
search or a replay buffer can key nodes on the observation alone and spot repeated prefixes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike, NestedKey, ShapeLike
from torchrl.data.specs import Categorical, Composite, NonTensor, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.transforms.hashing import Hash

__all__ = ["LLMHashingEnv", "row_hash"]


def row_hash(rows: torch.Tensor) -> torch.Tensor:
    """Hashes each row of a ``[N, L]`` integer tensor into one int64.

    The first word of :meth:`~torchrl.envs.transforms.Hash.reproducible_hash` (SHA-256) of the
    row: the same in every process and run (unlike Python's ``hash``).

    Examples:
        >>> import torch
        >>> from torchrl.envs.custom.llm_hashing import row_hash
        >>> h = row_hash(torch.tensor([[1, 2], [1, 2], [2, 1]]))
        >>> bool(h[0] == h[1]), bool(h[0] == h[2])
        (True, False)
    """
    data = rows.detach().to("cpu", torch.int64)
    out = [Hash.reproducible_hash(row)[0] for row in data]
    return torch.stack(out).to(rows.device) if out else torch.zeros(0, dtype=torch.int64)


class LLMHashingEnv(EnvBase):
    """A text-generation env whose observation is a hash of the token chain so far.

    The action (int64, ``[*B, 1]``) is the next token id, in ``[0, vocab_size)``. At reset, the
    prompt's token ids may be given in the input at ``observation_key`` (``[*B, L]`` ints);
    they are hashed into the initial observation (int64, ``[*B, 1]``; an empty prompt when
    absent). Each step writes ``hashing_module([previous hash, token])``. Rewards are zero and
    the env never ends by itself (add a ``StepCounter``, or a reward transform). With
    ``text_output`` and a ``tokenizer`` (anything with ``decode``), the decoded text so far is
    written at ``text_key`` too.

    Args:
        vocab_size: the number of token ids (default: ``len(tokenizer)``).
        hashing_module: maps ``[N, L]`` int64 rows to ``[N]`` int64 hashes (default
            :func:`row_hash`).
        observation_key: where the hash goes.
        text_output: also write the decoded text (needs a tokenizer).
        tokenizer: decodes token ids to text (``tokenizer.decode(list_of_ids)``).
        text_key: where the text goes.
        device: the device of the tensors.
        batch_size: the batch shape.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs import LLMHashingEnv
        >>> env = LLMHashingEnv(vocab_size=10)
        >>> td = env.reset(TensorDict(observation=torch.tensor([1, 2, 3])))
        >>> td["action"] = torch.tensor([4])
        >>> a = env.step(td)["next", "observation"]
        >>> b = env.step(td.clone())["next", "observation"]  # same chain, same hash
        >>> bool(a == b)
        True
    """

    def __init__(
        self,
        vocab_size: int | None = None,
        *,
        hashing_module: Callable[[torch.Tensor], torch.Tensor] | None = None,
        observation_key: NestedKey = "observation",
        text_output: bool = True,
        tokenizer: Any = None,
        text_key: NestedKey | None = "text",
        device: DeviceLike = None,
        batch_size: ShapeLike | None = None,
    ) -> None:
        if vocab_size is None:
            if tokenizer is None:
                raise ValueError("LLMHashingEnv: give vocab_size or a tokenizer")
            vocab_size = len(tokenizer)
        if vocab_size < 1:
            raise ValueError(f"LLMHashingEnv: vocab_size must be >= 1, got {vocab_size}")
        super().__init__(device=device, batch_size=batch_size)
        self.vocab_size = int(vocab_size)
        self.hashing_module = hashing_module if hashing_module is not None else row_hash
        self.observation_key = observation_key
        self.tokenizer = tokenizer
        self.text_key: NestedKey = text_key if text_key is not None else "text"
        self.text_output = bool(text_output and tokenizer is not None and text_key is not None)
        batch = self.batch_size
        obs: dict[NestedKey, Any] = {
            observation_key: Unbounded(shape=(*batch, 1), dtype=torch.int64)
        }
        if self.text_output:
            assert text_key is not None
            obs[text_key] = NonTensor(shape=batch, example_data="")
        self.observation_spec = Composite(obs, shape=batch)
        self.action_spec = Categorical(self.vocab_size, shape=(*batch, 1))
        self.reward_spec = Unbounded(shape=(*batch, 1))

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _hash(self, rows: torch.Tensor) -> torch.Tensor:
        flat = rows.reshape(rows.shape[:-1].numel(), rows.shape[-1])
        out = self.hashing_module(flat)
        return out.reshape(*rows.shape[:-1], 1).to(torch.int64)

    def _texts(self, previous: Any, tokens: torch.Tensor | None, batch: torch.Size) -> Any:
        n = batch.numel()
        old = [""] * n if previous is None else _flat_strings(previous, n)
        if tokens is not None:
            ids = tokens.reshape(n, -1).tolist()
            old = [text + self.tokenizer.decode(row) for text, row in zip(old, ids)]
        return _stack_strings(old, batch, self.device)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        batch = self.batch_size if tensordict is None else tensordict.batch_size
        prompt = None if tensordict is None else tensordict.get(self.observation_key, None)
        if prompt is None or prompt.dtype.is_floating_point or prompt.shape == (*batch, 1):
            # No prompt (or the hash of a previous episode): start from an empty chain.
            tokens = None
            obs = self._hash(torch.zeros(*batch, 0, dtype=torch.int64, device=self.device))
        else:
            if prompt.shape[: len(batch)] != batch or prompt.ndim != len(batch) + 1:
                raise ValueError(
                    f"LLMHashingEnv: the prompt at {self.observation_key!r} must be shaped "
                    f"[*batch, L] = [{', '.join(map(str, batch))}, L], got {tuple(prompt.shape)}"
                )
            tokens = prompt.to(torch.int64)
            obs = self._hash(tokens)
        out = TensorDict({self.observation_key: obs}, batch_size=batch, device=self.device)
        if self.text_output:
            out.set(self.text_key, self._texts(None, tokens, batch))
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        batch = tensordict.batch_size
        token = tensordict.get(ACTION).to(torch.int64).reshape(*batch, 1)
        previous = tensordict.get(self.observation_key)
        obs = self._hash(torch.cat([previous.to(torch.int64), token], -1))
        false = torch.zeros(*batch, 1, dtype=torch.bool, device=token.device)
        out = TensorDict(
            {
                self.observation_key: obs,
                REWARD: torch.zeros(*batch, 1, device=token.device),
                DONE: false,
                TERMINATED: false.clone(),
                TRUNCATED: false.clone(),
            },
            batch_size=batch,
            device=self.device,
        )
        if self.text_output:
            out.set(self.text_key, self._texts(tensordict.get(self.text_key, None), token, batch))
        return out


def _flat_strings(value: Any, n: int) -> list[str]:
    """The strings of a non-tensor entry (``NonTensorData``/``NonTensorStack``), row-major."""
    items = value.tolist() if hasattr(value, "tolist") else value
    items = items if isinstance(items, list) else [items]
    while any(isinstance(x, list) for x in items):
        items = [y for x in items for y in (x if isinstance(x, list) else [x])]
    if len(items) != n:
        raise ValueError(f"LLMHashingEnv: {n} texts expected, got {len(items)}")
    return [str(x) for x in items]


def _stack_strings(texts: list[str], batch: torch.Size, device: Any) -> Any:
    if not batch:
        return NonTensorData(texts[0], device=device)
    nested: Any = texts
    for size in reversed(batch[1:]):
        nested = [nested[i : i + size] for i in range(0, len(nested), size)]
    return NonTensorStack.from_list(nested)
