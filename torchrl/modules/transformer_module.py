"""Causal transformers as temporal policy modules, and the helpers recurrent training shares.

A :class:`TransformerModule` is the attention counterpart of :class:`~torchrl.modules.LSTMModule`.
Collection runs one step at a time against a key/value cache that the module owns (no state
travels in the TensorDict); training (``set_recurrent_mode(True)``) runs a whole ``[*B, T]``
window at once, rebuilding the per-step positions and a block-diagonal causal mask from
``"is_init"`` (:func:`positions_from_is_init`, :func:`segment_causal_mask_from_is_init`). Both
paths give the same outputs.

The file also holds two small knobs of the recurrent stack: the process-wide matmul precision of
recurrent modules (:func:`set_recurrent_matmul_precision`) and
:func:`canonicalize_rnn_subset`, which gives the entries several recurrent modules read one
contiguous layout.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from torchrl._keys import IS_INIT
from torchrl._types import NestedKey
from torchrl.modules._spec_utils import module_keys
from torchrl.modules.recurrent import recurrent_mode

# --------------------------------------------------------------------------- matmul precision

PrecisionMode = Literal["ieee", "tf32", "tf32x3", "fast", "high-prec", "auto"]
ConcretePrecision = Literal["ieee", "tf32", "tf32x3"]

_CONCRETE: tuple[str, ...] = ("ieee", "tf32", "tf32x3")
_SYMBOLIC: tuple[str, ...] = ("fast", "high-prec")
_PRECISION_ENV_VAR = "TORCHRL_RNN_PRECISION"
_PRECISION_OVERRIDE: list[str | None] = [None]

# torch.get_float32_matmul_precision() -> our concrete mode
_FROM_TORCH = {"highest": "ieee", "high": "tf32", "medium": "tf32"}
# our concrete mode -> the torch setting that runs it ("tf32x3" is fp32-accurate)
_TO_TORCH = {"ieee": "highest", "tf32": "high", "tf32x3": "highest"}


def _check_precision(mode: str | None, origin: str) -> None:
    if mode is not None and mode not in (*_CONCRETE, *_SYMBOLIC, "auto"):
        raise ValueError(
            f"{origin}: unknown recurrent matmul precision {mode!r}; expected one of "
            f"{(*_CONCRETE, *_SYMBOLIC, 'auto')} or None"
        )


def _resolve_symbolic(mode: str) -> str:
    """``"fast"``/``"high-prec"`` -> a concrete mode for the current CUDA device (if any)."""
    tf32_capable = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8
    if not tf32_capable:
        return "ieee"
    return "tf32" if mode == "fast" else "tf32x3"


def _resolve_precision(mode: str | None = None) -> str:
    """Concrete precision: ``mode`` (a per-module value) first, then the global setting."""
    _check_precision(mode, "recurrent_matmul_precision")
    if mode is None or mode == "auto":
        mode = _PRECISION_OVERRIDE[0]
    if mode is None:
        env_mode = os.environ.get(_PRECISION_ENV_VAR) or None
        _check_precision(env_mode, _PRECISION_ENV_VAR)
        mode = env_mode if env_mode != "auto" else None
    if mode is None:
        mode = _FROM_TORCH.get(torch.get_float32_matmul_precision(), "ieee")
    if mode in _SYMBOLIC:
        mode = _resolve_symbolic(mode)
    return mode


def set_recurrent_matmul_precision(mode: str | None) -> None:
    """Sets the process-wide float32 matmul precision of recurrent modules.

    The value is read at every call of a module that honours it (:class:`TransformerModule`),
    so a change takes effect immediately; a module's own ``recurrent_matmul_precision=`` wins
    over it. Only CUDA matmuls are affected: CPU float32 matmuls are always IEEE.

    Args:
        mode: ``"ieee"`` (full fp32), ``"tf32"`` (tensor-core TF32), ``"tf32x3"`` (fp32-accurate),
            ``"fast"``/``"high-prec"`` (resolved per device at each call: TF32/``"tf32x3"`` on
            GPUs that have TF32, else ``"ieee"``), or ``"auto"``/``None`` to clear the setting
            and follow the ``TORCHRL_RNN_PRECISION`` environment variable, then
            ``torch.get_float32_matmul_precision()``.

    Examples:
        >>> set_recurrent_matmul_precision("ieee")
        >>> get_recurrent_matmul_precision()
        'ieee'
        >>> set_recurrent_matmul_precision(None)
    """
    _check_precision(mode, "set_recurrent_matmul_precision")
    _PRECISION_OVERRIDE[0] = None if mode == "auto" else mode


def get_recurrent_matmul_precision() -> ConcretePrecision:
    """The recurrent matmul precision in effect now, as one of ``"ieee"``, ``"tf32"``, ``"tf32x3"``.

    Symbolic settings (``"fast"``, ``"high-prec"``) are resolved for the current device;
    per-module overrides are not seen here.

    Returns:
        The concrete precision mode.

    Examples:
        >>> import torch
        >>> set_recurrent_matmul_precision(None)
        >>> torch.get_float32_matmul_precision()
        'highest'
        >>> get_recurrent_matmul_precision()
        'ieee'
    """
    return _resolve_precision(None)  # type: ignore[return-value]


@contextlib.contextmanager
def _matmul_precision(mode: str, device: torch.device) -> Iterator[None]:
    """Runs CUDA float32 matmuls at ``mode`` inside the block; a no-op elsewhere."""
    if device.type != "cuda":
        yield
        return
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(_TO_TORCH[mode])
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


# --------------------------------------------------------------------------- canonical layout


def _canonical_keys(module: nn.Module) -> list[NestedKey]:
    keys = getattr(module, "canonical_keys", None)
    if keys is not None:
        return list(keys)
    keys = list(getattr(module, "in_keys", []))
    is_init_key = getattr(module, "is_init_key", None)
    if is_init_key is not None and is_init_key not in keys:
        keys.append(is_init_key)
    return keys


def canonicalize_rnn_subset(
    data: TensorDictBase, modules: Iterable[nn.Module], *, inplace: bool = False
) -> TensorDictBase:
    """Gives the entries that recurrent modules read one contiguous layout, once for all of them.

    The keys of each module are its ``canonical_keys`` if it has some, else its ``in_keys``
    plus its ``is_init_key``; their union is made contiguous (a replay-buffer slice or a
    transposed rollout often is not) and written back. Keys absent from ``data`` are skipped
    and every other entry is left as it is. Use it when a recurrent actor and a recurrent
    critic read the same TensorDict.

    Args:
        data: the TensorDict, batch ``[*B, T]`` or ``[*B]``.
        modules: :class:`~torchrl.modules.LSTMModule`, :class:`~torchrl.modules.GRUModule`,
            :class:`TransformerModule` (or any module with ``in_keys``).
        inplace: write into ``data`` and return it; by default a shallow copy is returned.

    Returns:
        A TensorDict whose recurrent entries are contiguous.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.modules import LSTMModule
        >>> actor = LSTMModule(3, 4, in_key="obs", out_key="actor_h")
        >>> critic = LSTMModule(3, 4, in_key="obs", out_key="critic_h")
        >>> obs = torch.zeros(5, 2, 3).transpose(0, 1)
        >>> td = TensorDict(obs=obs, batch_size=[2, 5])
        >>> canonicalize_rnn_subset(td, [actor, critic])["obs"].is_contiguous()
        True
        >>> td["obs"].is_contiguous()
        False
    """
    keys: list[NestedKey] = []
    for module in modules:
        for key in _canonical_keys(module):
            if key not in keys:
                keys.append(key)
    out = data if inplace else data.copy()
    for key in keys:
        value = out.get(key, None)
        if isinstance(value, torch.Tensor) and not value.is_contiguous():
            out.set(key, value.contiguous())
    return out


# --------------------------------------------------------------------------- positions and masks


def _episode_starts(is_init: torch.Tensor) -> torch.Tensor:
    if is_init.dtype is not torch.bool:
        raise ValueError(f"is_init must be a boolean tensor, got dtype {is_init.dtype}")
    if is_init.ndim < 1:
        raise ValueError("is_init needs a time dimension: shape [*batch, T]")
    starts = is_init.clone()
    # The window's first step starts a segment, whatever its flag says.
    starts[..., :1] = True
    return starts


def positions_from_is_init(is_init: torch.Tensor) -> torch.Tensor:
    """Per-step positions inside each episode of a window, restarting at 0 at every ``is_init``.

    The first step of the window is position 0 whatever its flag: pass windows that start at
    an episode start (:class:`TransformerModule` checks this in training).

    Args:
        is_init: boolean ``[*batch, T]``, ``True`` at the first step of each episode.

    Returns:
        ``torch.long`` ``[*batch, T]``: the number of steps since the episode started.

    Examples:
        >>> import torch
        >>> positions_from_is_init(torch.tensor([[True, False, False, True, False]]))
        tensor([[0, 1, 2, 0, 1]])
    """
    starts = _episode_starts(is_init)
    steps = torch.arange(starts.shape[-1], device=starts.device).expand_as(starts)
    last_start = torch.where(starts, steps, torch.zeros_like(steps)).cummax(-1).values
    return steps - last_start


def segment_causal_mask_from_is_init(is_init: torch.Tensor) -> torch.Tensor:
    """A causal attention mask that never crosses an episode start.

    Entry ``[..., i, j]`` is ``True`` (step ``i`` may attend to step ``j``) iff ``j <= i`` and
    both steps belong to the same episode segment of the window. The window's first step
    opens a segment whatever its flag.

    Args:
        is_init: boolean ``[*batch, T]``, ``True`` at the first step of each episode.

    Returns:
        boolean ``[*batch, T, T]``, ``True`` where attention is allowed.

    Examples:
        >>> import torch
        >>> segment_causal_mask_from_is_init(torch.tensor([[False, False, True]])).int()
        tensor([[[1, 0, 0],
                 [1, 1, 0],
                 [0, 0, 1]]], dtype=torch.int32)
    """
    starts = _episode_starts(is_init)
    segment = starts.long().cumsum(-1)
    t = starts.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool, device=starts.device).tril()
    return causal & (segment.unsqueeze(-1) == segment.unsqueeze(-2))


# --------------------------------------------------------------------------- backbone

KVCache = tuple[torch.Tensor, torch.Tensor]


class _Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(ln(x))`` then ``x + mlp(ln(x))``."""

    def __init__(
        self, hidden: int, heads: int, ff: int, dropout: float, device: Any = None
    ) -> None:
        super().__init__()
        self.heads = heads
        self.ln_attn = nn.LayerNorm(hidden, device=device)
        self.qkv = nn.Linear(hidden, 3 * hidden, device=device)
        self.proj = nn.Linear(hidden, hidden, device=device)
        self.ln_mlp = nn.LayerNorm(hidden, device=device)
        self.mlp = nn.Sequential(
            nn.Linear(hidden, ff, device=device),
            nn.GELU(),
            nn.Linear(ff, hidden, device=device),
        )
        self.dropout = dropout

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        n, t, _ = x.shape
        return x.reshape(n, t, self.heads, -1).transpose(1, 2)  # [N, H, T, D]

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        cache: KVCache | None,
        slots: torch.Tensor | None,
    ) -> torch.Tensor:
        """``x [N, T, E]``; ``mask [N, T, S]``; with a cache, ``T == 1`` and ``slots [N]``."""
        q, k, v = self.qkv(self.ln_attn(x)).chunk(3, dim=-1)
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        if cache is not None and slots is not None:
            rows = torch.arange(x.shape[0], device=x.device)
            # The cache holds detached values: collection does not backpropagate through
            # past steps, and autograd would reject the next in-place write otherwise.
            cache[0][rows, :, slots] = k[:, :, 0].detach().to(cache[0].dtype)
            cache[1][rows, :, slots] = v[:, :, 0].detach().to(cache[1].dtype)
            k, v = cache[0].to(q.dtype), cache[1].to(q.dtype)
        p = self.dropout if self.training else 0.0
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.unsqueeze(1), dropout_p=p)
        x = x + F.dropout(self.proj(attn.transpose(1, 2).flatten(2)), p, self.training)
        return x + F.dropout(self.mlp(self.ln_mlp(x)), p, self.training)


class CausalTransformer(nn.Module):
    """A causal transformer with a window path (training) and a cached-step path (collection).

    The backbone :class:`TransformerModule` drives. Both paths share the parameters and give
    the same outputs: ``forward(features, positions, mask)`` runs ``[B, T]`` at once;
    ``forward(features, positions, kv_cache=cache)`` runs one step ``[B, 1]`` against a
    key/value cache from :meth:`new_kv_cache`, writing the step's keys at slot ``positions``
    and attending to slots ``<= positions``. Positions are learned embeddings, hence
    ``positions < max_seq_len``. The cache is a ``(k, v)`` pair of
    ``[B, num_layers, num_heads, max_seq_len, head_dim]`` tensors in the weights' dtype.

    Args:
        input_size: input features.
        hidden_size: width of the residual stream (divisible by ``num_heads``).
        num_layers: number of blocks.
        num_heads: attention heads.
        max_seq_len: longest episode the positions cover.
        dim_feedforward: MLP width (default ``4 * hidden_size``).
        dropout: dropout of attention and residual branches.
        device: device of the parameters.

    Examples:
        >>> import torch
        >>> net = CausalTransformer(3, 8, num_heads=2, max_seq_len=16)
        >>> x, pos = torch.randn(2, 4, 3), torch.arange(4).expand(2, 4)
        >>> out, _ = net(x, pos, torch.ones(4, 4, dtype=torch.bool).tril().expand(2, 4, 4))
        >>> cache = net.new_kv_cache(2)
        >>> step, cache = net(x[:, :1], pos[:, :1], kv_cache=cache)
        >>> torch.allclose(step[:, 0], out[:, 0], atol=1e-5)
        True
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        *,
        num_heads: int,
        max_seq_len: int,
        dim_feedforward: int | None = None,
        dropout: float = 0.0,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size={hidden_size} is not divisible by {num_heads} heads")
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.max_seq_len = max_seq_len
        self.hidden_size = hidden_size
        self.input_proj = nn.Linear(input_size, hidden_size, device=device)
        self.position_embedding = nn.Embedding(max_seq_len, hidden_size, device=device)
        ff = dim_feedforward or 4 * hidden_size
        self.blocks = nn.ModuleList(
            _Block(hidden_size, num_heads, ff, dropout, device) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(hidden_size, device=device)

    def new_kv_cache(
        self,
        batch_size: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> KVCache:
        """An empty ``(k, v)`` cache for ``batch_size`` streams.

        Args:
            batch_size: number of independent streams (envs).
            device: defaults to the parameters' device.
            dtype: accepted for the backbone contract; the cache uses the weights' dtype.

        Returns:
            Two zero tensors ``[batch_size, num_layers, num_heads, max_seq_len, head_dim]``.
        """
        weight = self.input_proj.weight
        shape = (batch_size, self.num_layers, self.num_heads, self.max_seq_len, self.head_dim)
        device = weight.device if device is None else device
        return (
            torch.zeros(shape, device=device, dtype=weight.dtype),
            torch.zeros(shape, device=device, dtype=weight.dtype),
        )

    def reset_kv_cache(self, kv_cache: KVCache, mask: torch.Tensor) -> KVCache:
        """Clears the streams where the boolean ``mask [batch_size]`` is ``True``.

        Args:
            kv_cache: the cache to clear rows of (changed in place).
            mask: boolean ``[batch_size]``.

        Returns:
            The cache.
        """
        for t in kv_cache:
            t.masked_fill_(mask.reshape(-1, 1, 1, 1, 1), 0)
        return kv_cache

    def forward(
        self,
        features: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None = None,
        kv_cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, KVCache | None]:
        """Runs a window (``mask``) or one cached step (``kv_cache``).

        Args:
            features: ``[B, T, input_size]`` (``T == 1`` with a cache).
            positions: long ``[B, T]``, each step's position in its episode.
            mask: boolean ``[B, T, T]`` (``True`` = attend); default plain causal.
            kv_cache: a cache from :meth:`new_kv_cache` to run one step against.

        Returns:
            ``(out [B, T, hidden_size], kv_cache)``.
        """
        if int(positions.max()) >= self.max_seq_len:
            raise ValueError(
                f"position {int(positions.max())} is past max_seq_len={self.max_seq_len}: "
                "episodes longer than max_seq_len need a larger max_seq_len"
            )
        x = self.input_proj(features) + self.position_embedding(positions)
        n, t = features.shape[:2]
        slots: torch.Tensor | None = None
        if kv_cache is not None:
            if t != 1:
                raise ValueError(f"the cached path runs one step at a time, got T={t}")
            slots = positions[:, 0]
            seen = torch.arange(self.max_seq_len, device=x.device) <= slots[:, None]
            attn_mask = seen[:, None, :]  # [N, 1, S]
        elif mask is None:
            attn_mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril().expand(n, t, t)
        else:
            attn_mask = mask
        for i, block in enumerate(self.blocks):
            layer_cache = None if kv_cache is None else (kv_cache[0][:, i], kv_cache[1][:, i])
            x = block(x, attn_mask, layer_cache, slots)
        return self.norm(x), kv_cache


# --------------------------------------------------------------------------- TensorDict module


class TransformerModule(TensorDictModuleBase):
    """A causal transformer policy block: the attention counterpart of ``LSTMModule``.

    Reads ``in_key`` ``[*B, input_size]`` and ``"is_init"`` (from an ``InitTracker``); writes
    ``out_key`` ``[*B, hidden_size]``. Step mode (collection) attends to the earlier steps of
    each env's episode through a key/value cache the module owns (one stream per batch row,
    cleared where ``is_init``; dropped on a new batch shape, changed parameters or
    :meth:`reset_cache`; empty in copies and pickles): no state goes into the TensorDict.
    Recurrent mode (``set_recurrent_mode(True)``) runs ``[*B, T]`` windows that start an
    episode, with :func:`positions_from_is_init` and :func:`segment_causal_mask_from_is_init`;
    both modes give the same outputs, and only windows backpropagate into past steps.
    Episodes are at most ``max_seq_len`` steps.

    Args:
        input_size: input features (or pass ``transformer``).
        hidden_size: width of the residual stream and of the output.
        num_layers: transformer blocks.
        num_heads: attention heads.
        max_seq_len: longest episode (positional embeddings).
        dim_feedforward: MLP width (default ``4 * hidden_size``).
        dropout: dropout rate.
        in_key: the input entry; ``in_keys=[input, is_init]`` instead.
        out_key: the output entry; ``out_keys=[output]`` instead.
        transformer: a backbone with the :class:`CausalTransformer` contract.
        is_init_key: entry marking episode starts.
        default_recurrent_mode: mode used outside ``set_recurrent_mode``.
        recurrent_matmul_precision: overrides :func:`set_recurrent_matmul_precision`.
        device: device of the parameters.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.modules import set_recurrent_mode
        >>> tr = TransformerModule(3, 8, num_heads=2, max_seq_len=32, in_key="obs", out_key="h")
        >>> td = TensorDict(obs=torch.randn(2, 5, 3), is_init=torch.zeros(2, 5, 1, dtype=torch.bool),
        ...                 batch_size=[2, 5])
        >>> td["is_init"][:, 0] = True
        >>> with set_recurrent_mode(True):
        ...     window = tr(td.clone())["h"]
        >>> steps = torch.stack([tr(td[:, t].clone())["h"] for t in range(5)], 1)
        >>> torch.allclose(window, steps, atol=1e-5)
        True
    """

    def __init__(
        self,
        input_size: int | None = None,
        hidden_size: int | None = None,
        num_layers: int = 1,
        *,
        num_heads: int | None = None,
        max_seq_len: int | None = None,
        dim_feedforward: int | None = None,
        dropout: float = 0.0,
        in_key: NestedKey | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        transformer: nn.Module | None = None,
        is_init_key: NestedKey = IS_INIT,
        default_recurrent_mode: bool | None = None,
        recurrent_matmul_precision: str | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if transformer is None:
            if None in (input_size, hidden_size, num_heads, max_seq_len):
                raise ValueError(
                    "TransformerModule needs input_size, hidden_size, num_heads and "
                    "max_seq_len (or a transformer)"
                )
            transformer = CausalTransformer(
                input_size,  # type: ignore[arg-type]
                hidden_size,  # type: ignore[arg-type]
                num_layers,
                num_heads=num_heads,  # type: ignore[arg-type]
                max_seq_len=max_seq_len,  # type: ignore[arg-type]
                dim_feedforward=dim_feedforward,
                dropout=dropout,
                device=device,
            )
        self.transformer = transformer
        if (in_key is None) == (in_keys is None):
            raise ValueError("pass exactly one of in_key and in_keys")
        if in_keys is None:
            in_keys = [in_key, is_init_key]  # type: ignore[list-item]
        in_keys = [in_keys] if isinstance(in_keys, (str, tuple)) else list(in_keys)
        if len(in_keys) == 1:
            in_keys.append(is_init_key)
        if len(in_keys) != 2:
            raise ValueError(f"TransformerModule needs in_keys [input, is_init], got {in_keys}")
        if (out_key is None) == (out_keys is None):
            raise ValueError("pass exactly one of out_key and out_keys")
        if out_keys is None:
            out_keys = [out_key]  # type: ignore[list-item]
        out_keys = [out_keys] if isinstance(out_keys, (str, tuple)) else list(out_keys)
        if len(out_keys) != 1:
            raise ValueError(f"TransformerModule writes one entry, got out_keys={out_keys}")
        self.in_keys = module_keys(in_keys)
        self.out_keys = module_keys(out_keys)
        self.is_init_key = in_keys[1]
        self.default_recurrent_mode = bool(default_recurrent_mode)
        _check_precision(recurrent_matmul_precision, "TransformerModule")
        self.recurrent_matmul_precision = recurrent_matmul_precision
        self._clear_cache_state()

    # ----------------------------------------------------------------------- cache lifecycle
    def _clear_cache_state(self) -> None:
        self._kv_cache: Any = None
        self._next_position: torch.Tensor | None = None
        self._params_stamp: tuple[Any, ...] | None = None

    def reset_cache(self) -> None:
        """Releases the key/value cache; the next step must start every episode (``is_init``).

        Examples:
            >>> tr = TransformerModule(3, 8, num_heads=2, max_seq_len=8, in_key="x", out_key="h")
            >>> tr.reset_cache()
        """
        self._clear_cache_state()

    def _stamp(self) -> tuple[Any, ...]:
        # Tensor._version counts in-place writes (optimizer steps); the getattr default keeps
        # the check working (identity and storage only) if torch ever drops the attribute.
        return tuple(
            (id(p), p.data_ptr(), getattr(p, "_version", 0)) for p in self.transformer.parameters()
        )

    def __getstate__(self) -> dict[str, Any]:
        # Copies and pickles never carry inference state.
        state = self.__dict__.copy()
        state.update(_kv_cache=None, _next_position=None, _params_stamp=None)
        return state

    # ----------------------------------------------------------------------- modes
    @property
    def recurrent_mode(self) -> bool:
        """Whether the module runs on windows now (context first, then the module's default)."""
        mode = recurrent_mode()
        return self.default_recurrent_mode if mode is None else mode

    def set_recurrent_mode(self, mode: bool = True) -> TransformerModule:
        """Returns a copy sharing the parameters (not the cache) whose default mode is ``mode``.

        Args:
            mode: ``True`` to run on windows by default.

        Examples:
            >>> tr = TransformerModule(3, 8, num_heads=2, max_seq_len=8, in_key="x", out_key="h")
            >>> tr.set_recurrent_mode(True).recurrent_mode
            True
        """
        out = copy.copy(self)
        out._modules = dict(self._modules)  # same backbone, hence same parameters
        out._clear_cache_state()
        out.default_recurrent_mode = mode
        return out

    def _get_is_init(self, tensordict: TensorDictBase, lead: torch.Size) -> torch.Tensor:
        is_init = tensordict.get(self.is_init_key, None)
        if is_init is None:
            raise KeyError(
                f"TransformerModule: the tensordict has no {self.is_init_key!r} entry marking "
                "episode starts. Add the InitTracker transform to the env: "
                "env.append_transform(InitTracker())."
            )
        return is_init.reshape(*lead, -1).any(-1)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        x = tensordict.get(self.in_keys[0])
        mode = _resolve_precision(self.recurrent_matmul_precision)
        with _matmul_precision(mode, x.device):
            if self.recurrent_mode:
                y = self._forward_window(tensordict, x)
            else:
                y = self._forward_step(tensordict, x)
        tensordict.set(self.out_keys[0], y)
        return tensordict

    def _forward_window(self, tensordict: TensorDictBase, x: torch.Tensor) -> torch.Tensor:
        lead = tensordict.batch_size
        if len(lead) < 1:
            raise ValueError(
                "TransformerModule in recurrent mode needs a tensordict with a time dim "
                f"(batch [*B, T]), got batch_size={tuple(lead)}"
            )
        n, t = lead[:-1].numel(), lead[-1]
        is_init = self._get_is_init(tensordict, lead).reshape(n, t)
        if not bool(is_init[:, 0].all()):
            raise ValueError(
                "TransformerModule in recurrent mode needs windows that start an episode "
                f"({self.is_init_key!r} True at the first step of every row): a transformer "
                "carries no state from before the window"
            )
        y, _ = self.transformer(
            x.reshape(n, t, x.shape[-1]),
            positions_from_is_init(is_init),
            segment_causal_mask_from_is_init(is_init),
        )
        return y.reshape(*lead, y.shape[-1])

    def _forward_step(self, tensordict: TensorDictBase, x: torch.Tensor) -> torch.Tensor:
        lead = tensordict.batch_size
        n = lead.numel()
        is_init = self._get_is_init(tensordict, lead).reshape(n)
        backbone: Any = self.transformer  # any module with the CausalTransformer contract
        stamp = self._stamp()
        stale = (
            self._kv_cache is None
            or self._next_position is None
            or self._next_position.shape[0] != n
            or self._next_position.device != x.device
            or stamp != self._params_stamp
        )
        if stale:
            if not bool(is_init.all()):
                raise RuntimeError(
                    "TransformerModule: no key/value cache for this step (first call, new "
                    "batch shape, changed parameters or reset_cache()), and some rows do not "
                    f"start an episode ({self.is_init_key!r} False). Start collection from a "
                    "reset with an InitTracker on the env; the module never guesses a history."
                )
            self._kv_cache = backbone.new_kv_cache(n, device=x.device)
            self._next_position = torch.zeros(n, dtype=torch.long, device=x.device)
        elif bool(is_init.any()):
            self._kv_cache = backbone.reset_kv_cache(self._kv_cache, is_init)
        assert self._next_position is not None
        positions = torch.where(is_init, 0, self._next_position)
        y, self._kv_cache = self.transformer(
            x.reshape(n, 1, x.shape[-1]), positions[:, None], kv_cache=self._kv_cache
        )
        self._next_position = positions + 1
        self._params_stamp = stamp
        return y.reshape(*lead, y.shape[-1])
