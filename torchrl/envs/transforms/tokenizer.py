"""``Tokenizer``: strings to token ids (and back) with a Hugging Face style tokenizer.

The tokenizer is any object with the ``transformers`` tokenizer interface (``encode``,
``__call__`` on a list of strings, ``decode``, ``batch_decode``, ``vocab_size``); pass one in, or
a pretrained name, which needs the optional ``transformers`` package (``pip install
"torchrl[llm]"``), imported only then.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDictBase

from torchrl._types import NestedKey
from torchrl.data.specs import Bounded, Composite
from torchrl.envs.transforms._utils import key_tuple, missing_key_error
from torchrl.envs.transforms.base import Transform

__all__ = ["Tokenizer"]

_has_transformers = importlib.util.find_spec("transformers") is not None

_DEFAULT_TOKENIZER = "google-bert/bert-base-uncased"


def _load_tokenizer(name: str) -> Any:
    if not _has_transformers:
        raise ImportError(
            f"Tokenizer: loading the pretrained tokenizer {name!r} needs the transformers "
            'package: pip install "torchrl[llm]" (or pass a tokenizer object as tokenizer=)'
        )
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def _mask_key(key: NestedKey) -> NestedKey:
    """The attention mask's key: ``key`` with its last part replaced by ``"attention_mask"``."""
    parts = key_tuple(key)
    return "attention_mask" if len(parts) == 1 else (*parts[:-1], "attention_mask")


class Tokenizer(Transform):
    """Tokenizes string entries (``in_keys`` -> ``out_keys``) and decodes tokens on the way in.

    A string becomes a 1-d ``int64`` tensor of token ids; a batch of strings (a
    ``NonTensorStack``) a ``[*B, L]`` tensor padded to the longest (or to ``max_length``). With
    ``return_attention_mask``, the mask goes next to each output, under ``"attention_mask"`` in
    the same sub-TensorDict. The inverse pass reads token ids under ``out_keys_inv`` and writes
    the decoded strings under ``in_keys_inv`` (an env whose action is a string can then take
    tokens). In an env, ``max_length`` fixes the token dim of the specs and is required.

    Args:
        in_keys: the string entries to tokenize.
        out_keys: where the token ids go (default: ``in_keys``).
        in_keys_inv: the string inputs the inverse pass writes.
        out_keys_inv: the token entries the inverse pass decodes (default: ``in_keys_inv``).
        tokenizer: a tokenizer object, a pretrained name, or ``None`` (``bert-base-uncased``);
            names need ``transformers`` (``pip install "torchrl[llm]"``).
        use_raw_nontensor: give ``NonTensorData``/``NonTensorStack`` entries to the tokenizer
            as they are instead of their strings.
        additional_tokens: tokens added to the tokenizer's vocabulary (``add_tokens``).
        skip_special_tokens: drop special tokens when decoding.
        add_special_tokens: add special tokens when encoding.
        padding: pad batches of strings to their longest.
        max_length: pad (and truncate) every output to this many tokens.
        return_attention_mask: write the attention masks.
        missing_tolerance: skip absent entries instead of raising a ``KeyError``.
        call_before_reset: tokenize the reset's input instead of its output.

    Examples:
        >>> import torch
        >>> from tensordict import NonTensorData, TensorDict
        >>> from torchrl.envs.transforms import Tokenizer
        >>> class Chars:  # a tiny stand-in for a transformers tokenizer: one id per character
        ...     vocab_size = 256
        ...     def encode(self, text, return_tensors=None, **kwargs):
        ...         return torch.tensor([[ord(c) for c in text]])
        ...     def decode(self, ids, skip_special_tokens=True):
        ...         return "".join(chr(int(i)) for i in ids)
        >>> t = Tokenizer(["text"], ["tokens"], tokenizer=Chars())
        >>> td = t(TensorDict(text=NonTensorData("hi")))
        >>> td["tokens"], td["attention_mask"]
        (tensor([104, 105]), tensor([1, 1]))
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        *,
        tokenizer: Any = None,
        use_raw_nontensor: bool = False,
        additional_tokens: list[str] | None = None,
        skip_special_tokens: bool = True,
        add_special_tokens: bool = False,
        padding: bool = True,
        max_length: int | None = None,
        return_attention_mask: bool = True,
        missing_tolerance: bool = True,
        call_before_reset: bool = False,
    ) -> None:
        if not in_keys and not in_keys_inv:
            raise ValueError("Tokenizer: give in_keys (to tokenize) or in_keys_inv (to decode)")
        if max_length is not None and max_length < 1:
            raise ValueError(f"Tokenizer: max_length must be >= 1, got {max_length}")
        if tokenizer is None or isinstance(tokenizer, str):
            tokenizer = _load_tokenizer(tokenizer or _DEFAULT_TOKENIZER)
        for method in ("encode", "decode"):
            if not callable(getattr(tokenizer, method, None)):
                raise TypeError(
                    f"Tokenizer: the tokenizer {type(tokenizer).__name__} has no {method}() "
                    "method (expected a transformers-style tokenizer)"
                )
        super().__init__(
            in_keys=in_keys,
            out_keys=out_keys,
            in_keys_inv=in_keys_inv,
            out_keys_inv=out_keys_inv,
        )
        self.tokenizer = tokenizer
        if additional_tokens:
            tokenizer.add_tokens(additional_tokens)
        self.use_raw_nontensor = use_raw_nontensor
        self.skip_special_tokens = skip_special_tokens
        self.add_special_tokens = add_special_tokens
        self.padding = padding
        self.max_length = max_length
        self.return_attention_mask = return_attention_mask
        self.missing_tolerance = missing_tolerance
        self.call_before_reset = call_before_reset

    # ------------------------------------------------------------------------ encoding
    def _strings(self, value: Any) -> Any:
        if self.use_raw_nontensor:
            return value
        if isinstance(value, NonTensorStack):
            return value.tolist()
        if isinstance(value, NonTensorData):
            return value.data
        return value

    def _encode(self, value: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and attention mask of a string (1-d) or a nested list of strings."""
        text = self._strings(value)
        kwargs: dict[str, Any] = {"add_special_tokens": self.add_special_tokens}
        if self.max_length is not None:
            kwargs.update(padding="max_length", max_length=self.max_length, truncation=True)
        if isinstance(text, str):
            ids = torch.as_tensor(self.tokenizer.encode(text, return_tensors="pt", **kwargs))
            ids = ids.reshape(-1).to(torch.int64)
            return ids, torch.ones_like(ids)
        if not isinstance(text, list):
            raise TypeError(
                f"Tokenizer: expected a string or a batch of strings, got {type(text).__name__}"
            )
        if text and isinstance(text[0], list):  # more than one batch dim: encode row by row
            rows = [self._encode(row) for row in text]
            return torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows])
        if self.max_length is None:
            kwargs["padding"] = self.padding
        out = self.tokenizer(text, return_tensors="pt", return_attention_mask=True, **kwargs)
        ids = torch.as_tensor(out["input_ids"]).to(torch.int64)
        return ids, torch.as_tensor(out["attention_mask"]).to(torch.int64)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in self._pairs:
            value = next_tensordict.get(in_key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise missing_key_error(self, in_key, next_tensordict)
            ids, mask = self._encode(value)
            device = next_tensordict.device
            if device is not None:
                ids, mask = ids.to(device), mask.to(device)
            next_tensordict.set(out_key, ids)
            if self.return_attention_mask:
                next_tensordict.set(_mask_key(out_key), mask)
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        if self.call_before_reset:
            return tensordict_reset
        return self._call_tolerant(tensordict_reset)

    def _reset_env_preprocess(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.call_before_reset and tensordict is not None:
            return self._call_tolerant(tensordict)
        return tensordict

    # ------------------------------------------------------------------------ decoding
    def _decode(self, ids: torch.Tensor) -> NonTensorData | NonTensorStack:
        skip = self.skip_special_tokens
        if ids.ndim == 1:
            return NonTensorData(self.tokenizer.decode(ids.tolist(), skip_special_tokens=skip))
        if ids.ndim == 2 and callable(getattr(self.tokenizer, "batch_decode", None)):
            texts = self.tokenizer.batch_decode(ids.tolist(), skip_special_tokens=skip)
            return NonTensorStack(*[NonTensorData(t) for t in texts])
        return NonTensorStack(*[self._decode(row) for row in ids.unbind(0)])

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in self._inv_pairs:
            ids = tensordict.get(out_key, None)
            if ids is None:
                if self.missing_tolerance:
                    continue
                raise missing_key_error(self, out_key, tensordict)
            tensordict.set(in_key, self._decode(ids))  # type: ignore[arg-type]
        return tensordict

    # ------------------------------------------------------------------------ specs
    def _token_spec(self, batch: torch.Size, device: Any, high: int, key: NestedKey) -> Bounded:
        if self.max_length is None:
            raise ValueError(
                f"Tokenizer: in an env the token entry {key!r} needs a fixed length for its "
                "spec; pass max_length"
            )
        shape = (*batch, self.max_length)
        return Bounded(0, high, shape=shape, dtype=torch.int64, device=device)

    def _vocab(self) -> int:
        size = getattr(self.tokenizer, "vocab_size", None)
        if size is None:
            raise AttributeError("Tokenizer: the tokenizer has no vocab_size for the specs")
        return int(size) + len(getattr(self.tokenizer, "added_tokens_encoder", {}) or {}) - 1

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        batch, device = observation_spec.shape, observation_spec.device
        for _, out_key in self._pairs:
            observation_spec[out_key] = self._token_spec(batch, device, self._vocab(), out_key)
            if self.return_attention_mask:
                mask = self._token_spec(batch, device, 1, out_key)
                observation_spec[_mask_key(out_key)] = mask
        return observation_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        for in_key, out_key in self._inv_pairs:
            for name in ("full_action_spec", "full_state_spec"):
                sub = input_spec[name]
                if in_key in sub.keys(include_nested=True, leaves_only=True):
                    del sub[in_key]
                    sub[out_key] = self._token_spec(sub.shape, sub.device, self._vocab(), out_key)
                    break
            else:
                raise KeyError(
                    f"Tokenizer: the inverse key {in_key!r} is not among the env's action or "
                    "state entries"
                )
        return input_spec
