"""GTrXL: a gated transformer-XL whose memory is the last ``n`` per-layer embeddings.

Parisotto et al. (2019), "Stabilizing Transformers for Reinforcement Learning". Each layer
reads the current step's embedding and a memory of the embeddings that entered the same layer
at the ``n`` previous steps of the episode (as in transformer-XL, without gradient into the
memory). Two changes to the transformer block make it trainable by RL: layer norm moves to the
input of each sub-layer (the "identity map reordering"), and every residual connection becomes a
GRU-type gate ``g(x, y)`` whose bias starts at ``gate_bias`` (2 by default), so that each layer
starts close to the identity and the network close to a reactive (memoryless) one.

Positions are relative (transformer-XL style): the attention score of a key ``d`` steps in the
past adds ``(q + v) . r_d`` to the content term ``(q + u) . k``, with learned ``r_d`` for the
``n + 1`` distances a query can reach (0 to ``n``) and learned per-head biases ``u``, ``v``.

A step therefore contributes one ``[num_layers, hidden_size]`` entry to the memory of later
steps. :class:`GTrXLModule` stores that entry once per step and gets the memory back through a
trajectory view (``TrajectoryView(embeddings, "-n:-1")``), or, without a views-aware collector,
carries the whole memory in the TensorDict with a primer, as :class:`~torchrl.modules.LSTMModule`
carries its states.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from torchrl._keys import DONE, IS_INIT, NEXT
from torchrl._types import NestedKey
from torchrl.data.trajectory_views import TrajectoryView
from torchrl.modules._spec_utils import module_keys
from torchrl.modules.recurrent import recurrent_mode, window_episode_starts

if TYPE_CHECKING:
    from torchrl.envs.transforms import TensorDictPrimer

__all__ = ["GTrXL", "GTrXLModule"]

MemoryMode = Literal["views", "primer"]


def _under_next(key: NestedKey) -> NestedKey:
    return (NEXT, key) if isinstance(key, str) else (NEXT, *key)


class _GRUGate(nn.Module):
    """The GRU-type gate that replaces a residual connection: ``g(x, y)``.

    ``x`` is the residual stream, ``y`` the sub-layer's output. With the gate bias ``b`` the
    update gate ``z = sigmoid(W_z y + U_z x - b)`` starts near ``sigmoid(-b)``, so the layer
    starts close to ``g(x, y) = x``.
    """

    def __init__(self, dim: int, gate_bias: float, device: torch.device | str | None) -> None:
        super().__init__()
        self.from_input = nn.Linear(dim, 3 * dim, bias=False, device=device)  # W_r, W_z, W_g
        self.from_stream = nn.Linear(dim, 2 * dim, bias=False, device=device)  # U_r, U_z
        self.candidate = nn.Linear(dim, dim, bias=False, device=device)  # U_g
        self.bias = nn.Parameter(torch.full((dim,), float(gate_bias), device=device))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        w_r, w_z, w_g = self.from_input(y).chunk(3, dim=-1)
        u_r, u_z = self.from_stream(x).chunk(2, dim=-1)
        reset = torch.sigmoid(w_r + u_r)
        update = torch.sigmoid(w_z + u_z - self.bias)
        candidate = torch.tanh(w_g + self.candidate(reset * x))
        return torch.lerp(x, candidate, update)


class _GTrXLLayer(nn.Module):
    """One gated block: relative multi-head attention over ``[memory, window]``, then an MLP."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        memory_length: int,
        dim_feedforward: int,
        dropout: float,
        gate_bias: float,
        device: torch.device | str | None,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.dropout = dropout
        self.norm_attn = nn.LayerNorm(dim, device=device)
        self.query = nn.Linear(dim, dim, device=device)
        self.key_value = nn.Linear(dim, 2 * dim, device=device)
        self.out = nn.Linear(dim, dim, device=device)
        # r_d for the distances 0..n a query reaches, and transformer-XL's u and v biases
        self.relative = nn.Parameter(
            0.02 * torch.randn(num_heads, memory_length + 1, self.head_dim, device=device)
        )
        self.content_bias = nn.Parameter(torch.zeros(num_heads, 1, self.head_dim, device=device))
        self.position_bias = nn.Parameter(torch.zeros(num_heads, 1, self.head_dim, device=device))
        self.gate_attn = _GRUGate(dim, gate_bias, device)
        self.norm_mlp = nn.LayerNorm(dim, device=device)
        self.mlp = nn.Sequential(
            nn.Linear(dim, dim_feedforward, device=device),
            nn.ReLU(),
            nn.Linear(dim_feedforward, dim, device=device),
        )
        self.gate_mlp = _GRUGate(dim, gate_bias, device)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        allowed: torch.Tensor,
        distance: torch.Tensor,
    ) -> torch.Tensor:
        """``x [N, T, D]``, ``memory [N, n, D]``, ``allowed [N, T, n + T]``, ``distance [T, n + T]``."""
        rows, steps, dim = x.shape
        heads, head_dim = self.num_heads, self.head_dim
        h = self.norm_attn(x)
        context = torch.cat([self.norm_attn(memory), h], dim=1)  # [N, S, D]
        span = context.shape[1]
        q = self.query(h).reshape(rows, steps, heads, head_dim).transpose(1, 2)
        k, v = (
            self.key_value(context)
            .reshape(rows, span, 2, heads, head_dim)
            .permute(2, 0, 3, 1, 4)
            .unbind(0)
        )  # [N, H, S, hd] each
        content = (q + self.content_bias) @ k.transpose(-1, -2)  # [N, H, T, S]
        by_distance = (q + self.position_bias) @ self.relative.transpose(-1, -2)  # [N, H, T, n+1]
        position = by_distance.gather(-1, distance.expand(rows, heads, steps, span))
        scores = (content + position) / math.sqrt(head_dim)
        scores = scores.masked_fill(~allowed.unsqueeze(1), float("-inf"))
        weights = F.dropout(scores.softmax(-1), self.dropout, self.training)
        attended = (weights @ v).transpose(1, 2).reshape(rows, steps, dim)
        y = F.dropout(self.out(attended), self.dropout, self.training)
        x = self.gate_attn(x, F.relu(y))
        y = F.dropout(self.mlp(self.norm_mlp(x)), self.dropout, self.training)
        return self.gate_mlp(x, F.relu(y))


class GTrXL(nn.Module):
    """The gated transformer-XL network (Parisotto et al., 2019) over an explicit memory.

    ``forward(x, memory, memory_mask, episode_start)`` runs a window of ``T`` steps. Step ``i``
    attends to itself and to the ``memory_length`` steps before it (the memory slots first, then
    earlier window steps), never to a padded memory slot (``memory_mask`` False) nor across an
    episode start inside the window. ``T == 1`` is one collection step. Layer norm sits before
    each sub-layer, gates replace the residuals (bias ``gate_bias``, near-identity start), and
    positions are learned relative ones (see the module docstring). No gradient enters the memory.

    Args:
        input_size: input features.
        hidden_size: width of the embeddings, the memory and the output (divisible by heads).
        num_layers: gated blocks.
        num_heads: attention heads.
        memory_length: ``n``, the past steps each step attends to.
        dim_feedforward: MLP width (default ``4 * hidden_size``).
        dropout: dropout on attention weights and sub-layer outputs.
        gate_bias: initial bias of the update gates (larger: closer to the identity).
        device: device of the parameters.

    Examples:
        >>> net = GTrXL(3, 8, num_layers=2, num_heads=2, memory_length=4)
        >>> out, embeddings = net(torch.randn(5, 6, 3))  # 5 rows, 6 steps, no memory
        >>> out.shape, embeddings.shape
        (torch.Size([5, 6, 8]), torch.Size([5, 6, 2, 8]))
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        *,
        num_heads: int = 1,
        memory_length: int,
        dim_feedforward: int | None = None,
        dropout: float = 0.0,
        gate_bias: float = 2.0,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        for name, value in (
            ("input_size", input_size),
            ("hidden_size", hidden_size),
            ("num_layers", num_layers),
            ("num_heads", num_heads),
            ("memory_length", memory_length),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GTrXL: {name} must be a positive int, got {value!r}")
        if hidden_size % num_heads:
            raise ValueError(
                f"GTrXL: hidden_size={hidden_size} is not divisible by num_heads={num_heads}"
            )
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.memory_length = memory_length
        self.embed = nn.Linear(input_size, hidden_size, device=device)
        ff = dim_feedforward or 4 * hidden_size
        self.layers = nn.ModuleList(
            _GTrXLLayer(hidden_size, num_heads, memory_length, ff, dropout, gate_bias, device)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(hidden_size, device=device)

    @property
    def memory_shape(self) -> torch.Size:
        """Shape of one step's memory: ``[memory_length, num_layers, hidden_size]``."""
        return torch.Size([self.memory_length, self.num_layers, self.hidden_size])

    def attention_mask(
        self, memory_mask: torch.Tensor, episode_start: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Which keys each query may attend to, and how far back each key lies.

        Keys are the ``n`` memory slots (oldest first) followed by the ``T`` window steps.

        Args:
            memory_mask: bool ``[N, n]``, True where a memory slot holds a real step.
            episode_start: bool ``[N, T]``, True where an episode starts in the window.

        Returns:
            ``(allowed [N, T, n + T] bool, distance [T, n + T] long in [0, n])``.

        Examples:
            >>> net = GTrXL(2, 4, memory_length=2)
            >>> allowed, _ = net.attention_mask(
            ...     torch.tensor([[False, True]]), torch.tensor([[False, True, False]]))
            >>> allowed[0].int()
            tensor([[0, 1, 1, 0, 0],
                    [0, 0, 0, 1, 0],
                    [0, 0, 0, 1, 1]], dtype=torch.int32)
        """
        n = self.memory_length
        rows, steps = episode_start.shape
        device = episode_start.device
        query = torch.arange(steps, device=device).unsqueeze(-1) + n
        key = torch.arange(n + steps, device=device)
        distance = query - key  # [T, S]
        in_reach = (distance >= 0) & (distance <= n)
        window = torch.arange(steps, device=device).expand(rows, steps)
        last_start = torch.where(episode_start, window, -1).cummax(-1).values
        # first key of each query's episode: the start's slot, or the oldest memory slot
        lowest = torch.where(last_start >= 0, last_start + n, 0)  # [N, T]
        key_ok = torch.cat(
            [memory_mask, torch.ones(rows, steps, dtype=torch.bool, device=device)], dim=-1
        )
        allowed = in_reach & (key >= lowest.unsqueeze(-1)) & key_ok.unsqueeze(1)
        return allowed, distance.clamp(0, n)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        episode_start: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Runs a window of steps against the memory of its first step.

        Args:
            x: ``[N, T, input_size]``.
            memory: ``[N, n, num_layers, hidden_size]``, the inputs of each layer at the ``n``
                steps before the window, oldest first (``None``: no memory).
            memory_mask: bool ``[N, n]``, True where a slot is a real step (default: all True
                when ``memory`` is given).
            episode_start: bool ``[N, T]``, True where an episode starts (default: none).

        Returns:
            ``(out [N, T, hidden_size], embeddings [N, T, num_layers, hidden_size])``: the output
            and each step's layer inputs, the entry it contributes to later memories.
        """
        if x.ndim != 3 or x.shape[-1] != self.input_size:
            raise ValueError(f"GTrXL: x must be [N, T, {self.input_size}], got {tuple(x.shape)}")
        rows, steps = x.shape[:2]
        n = self.memory_length
        embedded = self.embed(x)
        if memory is None:
            memory = embedded.new_zeros(rows, *self.memory_shape)
            memory_mask = torch.zeros(rows, n, dtype=torch.bool, device=x.device)
        elif tuple(memory.shape) != (rows, *self.memory_shape):
            raise ValueError(
                f"GTrXL: memory must be [N, n, num_layers, hidden_size] = "
                f"{[rows, *self.memory_shape]}, got {list(memory.shape)}"
            )
        if memory_mask is None:
            memory_mask = torch.ones(rows, n, dtype=torch.bool, device=x.device)
        if episode_start is None:
            episode_start = torch.zeros(rows, steps, dtype=torch.bool, device=x.device)
        allowed, distance = self.attention_mask(memory_mask, episode_start)
        memory = memory.detach().to(embedded.dtype)  # transformer-XL: no gradient into memory
        inputs = []
        h = embedded
        for i, layer in enumerate(self.layers):
            inputs.append(h)
            h = layer(h, memory[:, :, i], allowed, distance)
        return self.norm(h), torch.stack(inputs, dim=2)


class GTrXLModule(TensorDictModuleBase):
    """A :class:`GTrXL` policy block: ``in_key [*B, input_size]`` -> ``out_key [*B, hidden_size]``.

    Step mode (collection) runs one step against a memory of the ``n = memory_length`` previous
    steps of the episode. With ``memory_mode="views"`` (default) it writes the step's embeddings
    ``embeddings_key [*B, num_layers, hidden_size]`` and a True ``valid_key [*B, 1]``, stored
    once per step, and reads ``memory_key [*B, n, num_layers, hidden_size]`` and
    ``memory_mask_key [*B, n]``, which it declares as views of those two entries (``self.views``):
    a views-aware collector or :func:`~torchrl.data.trajectory_views.build_views` builds them,
    zero/False-padded before the episode's start. With ``memory_mode="primer"`` the memory is
    carried in the TensorDict like an LSTM state: add :meth:`make_tensordict_primer` and an
    ``InitTracker`` to the env; the module clears the memory where ``"is_init"`` is True and
    writes the shifted memory under ``"next"`` (``n`` embeddings per frame, under the root and
    ``"next"`` each, against one in views mode).

    Recurrent mode (``set_recurrent_mode(True)``) runs ``[*B, T]`` windows: the first step's
    memory comes from the data (views or primer entries), causal attention inside the window
    never crosses an episode start (``"is_init"``, else the previous step's done), and windows
    need not start an episode. Both modes give the same outputs; no gradient enters the memory.

    Args:
        input_size: input features (or pass ``gtrxl``).
        hidden_size: width of embeddings and output.
        num_layers: gated blocks.
        num_heads: attention heads.
        memory_length: ``n``, the past steps attended to.
        dim_feedforward: MLP width (default ``4 * hidden_size``).
        dropout: dropout rate.
        gate_bias: initial gate bias (near-identity start).
        in_key: the input entry.
        out_key: the output entry.
        memory_mode: ``"views"`` or ``"primer"``.
        embeddings_key: per-step embeddings written in views mode.
        valid_key: per-step True marker written in views mode (its view is the padding mask).
        memory_key: the memory read (a view, or a primer entry).
        memory_mask_key: bool mask of the real memory slots.
        is_init_key: entry marking episode starts.
        done_key: per-step done entry, used for windows without ``is_init_key``.
        default_recurrent_mode: mode used outside ``set_recurrent_mode``.
        gtrxl: an existing :class:`GTrXL` to wrap instead of building one.
        device: device of the parameters.

    Examples:
        >>> from tensordict import TensorDict
        >>> m = GTrXLModule(3, 8, memory_length=4, in_key="obs", out_key="h")
        >>> [(v.key, v.shift, v.out_key) for v in m.views]
        [('gtrxl_embeddings', '-4:-1', 'gtrxl_memory'), ('gtrxl_valid', '-4:-1', 'gtrxl_memory_mask')]
        >>> td = TensorDict(obs=torch.randn(2, 3), gtrxl_memory=torch.zeros(2, 4, 1, 8),
        ...                 gtrxl_memory_mask=torch.zeros(2, 4, dtype=torch.bool), batch_size=[2])
        >>> td = m(td)
        >>> td["h"].shape, td["gtrxl_embeddings"].shape
        (torch.Size([2, 8]), torch.Size([2, 1, 8]))
    """

    def __init__(
        self,
        input_size: int | None = None,
        hidden_size: int | None = None,
        num_layers: int = 1,
        *,
        num_heads: int = 1,
        memory_length: int | None = None,
        dim_feedforward: int | None = None,
        dropout: float = 0.0,
        gate_bias: float = 2.0,
        in_key: NestedKey,
        out_key: NestedKey,
        memory_mode: MemoryMode = "views",
        embeddings_key: NestedKey = "gtrxl_embeddings",
        valid_key: NestedKey = "gtrxl_valid",
        memory_key: NestedKey = "gtrxl_memory",
        memory_mask_key: NestedKey = "gtrxl_memory_mask",
        is_init_key: NestedKey = IS_INIT,
        done_key: NestedKey = (NEXT, DONE),
        default_recurrent_mode: bool | None = None,
        gtrxl: GTrXL | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if gtrxl is None:
            if input_size is None or hidden_size is None or memory_length is None:
                raise ValueError(
                    "GTrXLModule needs input_size, hidden_size and memory_length (or a gtrxl)"
                )
            gtrxl = GTrXL(
                input_size,
                hidden_size,
                num_layers,
                num_heads=num_heads,
                memory_length=memory_length,
                dim_feedforward=dim_feedforward,
                dropout=dropout,
                gate_bias=gate_bias,
                device=device,
            )
        elif not isinstance(gtrxl, GTrXL):
            raise TypeError(f"GTrXLModule: gtrxl must be a GTrXL, got {type(gtrxl).__name__}")
        elif input_size is not None or hidden_size is not None or memory_length is not None:
            raise ValueError("GTrXLModule: pass either a gtrxl or its sizes, not both")
        if memory_mode not in ("views", "primer"):
            raise ValueError(
                f"GTrXLModule: memory_mode must be 'views' or 'primer', got {memory_mode!r}"
            )
        self.gtrxl = gtrxl
        self.memory_mode = memory_mode
        self.in_key = in_key
        self.out_key = out_key
        self.embeddings_key = embeddings_key
        self.valid_key = valid_key
        self.memory_key = memory_key
        self.memory_mask_key = memory_mask_key
        self.is_init_key = is_init_key
        self.done_key = done_key
        self.default_recurrent_mode = bool(default_recurrent_mode)
        n = gtrxl.memory_length
        if memory_mode == "views":
            self.in_keys = module_keys([in_key, memory_key, memory_mask_key])
            self.out_keys = module_keys([out_key, embeddings_key, valid_key])
            self.views = [
                TrajectoryView(embeddings_key, f"-{n}:-1", out_key=memory_key),
                TrajectoryView(valid_key, f"-{n}:-1", out_key=memory_mask_key),
            ]
        else:
            self.in_keys = module_keys([in_key, memory_key, memory_mask_key, is_init_key])
            self.out_keys = module_keys(
                [out_key, _under_next(memory_key), _under_next(memory_mask_key)]
            )
            self.views = []

    # ----------------------------------------------------------------------- modes
    @property
    def recurrent_mode(self) -> bool:
        """Whether the module runs on windows now (context first, then the module's default)."""
        mode = recurrent_mode()
        return self.default_recurrent_mode if mode is None else mode

    def set_recurrent_mode(self, mode: bool = True) -> GTrXLModule:
        """Returns a copy sharing the parameters whose default mode is ``mode``.

        Args:
            mode: ``True`` to run on windows by default.

        Examples:
            >>> m = GTrXLModule(3, 8, memory_length=2, in_key="x", out_key="h")
            >>> m.set_recurrent_mode(True).recurrent_mode
            True
        """
        out = copy.copy(self)
        out._modules = dict(self._modules)  # same network, hence same parameters
        out.default_recurrent_mode = mode
        return out

    def make_tensordict_primer(self) -> TensorDictPrimer:
        """The primer of the memory entries (``memory_mode="primer"``), or their per-step shapes.

        Primer mode: it declares ``memory_key [n, num_layers, hidden_size]`` (zeros at reset)
        and ``memory_mask_key [n]`` (False at reset); append it to the env with an
        ``InitTracker``. Views mode: the env needs none; the primer declares the per-step
        entries ``embeddings_key [num_layers, hidden_size]`` and ``valid_key [1]``, whose shapes
        a views-aware collector reads to size its ring buffers (on an env it would only add
        copies of them to the rollout).

        Returns:
            A :class:`~torchrl.envs.transforms.TensorDictPrimer`.

        Examples:
            >>> from torchrl.envs import PendulumEnv
            >>> from torchrl.envs.transforms import InitTracker, TransformedEnv
            >>> m = GTrXLModule(3, 8, memory_length=4, in_key="observation", out_key="h",
            ...                 memory_mode="primer")
            >>> env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), InitTracker())
            >>> env = env.append_transform(m.make_tensordict_primer())
            >>> env.reset()["gtrxl_memory"].shape
            torch.Size([2, 4, 1, 8])
        """
        from torchrl.data.specs import Unbounded
        from torchrl.envs.transforms import TensorDictPrimer

        shape = self.gtrxl.memory_shape
        # expand_specs=True: the env's batch dims are always prepended, even when the memory's
        # shape happens to start like them (memory_length == number of envs)
        if self.memory_mode == "views":
            return TensorDictPrimer(
                {
                    self.embeddings_key: Unbounded(shape=shape[1:]),
                    self.valid_key: Unbounded(shape=(1,), dtype=torch.bool),
                },
                expand_specs=True,
            )
        return TensorDictPrimer(
            {
                self.memory_key: Unbounded(shape=shape),
                self.memory_mask_key: Unbounded(shape=shape[:1], dtype=torch.bool),
            },
            expand_specs=True,
        )

    # ----------------------------------------------------------------------- inputs
    def _memory(
        self, tensordict: TensorDictBase, lead: torch.Size
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The memory and its mask, ``[*lead, n, L, D]`` and ``[*lead, n]``, checked."""
        memory = tensordict.get(self.memory_key, None)
        mask = tensordict.get(self.memory_mask_key, None)
        if memory is None or mask is None:
            missing = self.memory_key if memory is None else self.memory_mask_key
            if self.memory_mode == "views":
                how = (
                    "In views mode the collector (or build_views(td, get_views(policy))) builds "
                    "it from the stored embeddings; use memory_mode='primer' with "
                    "env.append_transform(module.make_tensordict_primer()) otherwise."
                )
            else:
                how = (
                    "Add the primer to the env so that reset writes an empty memory: "
                    "env.append_transform(module.make_tensordict_primer())."
                )
            raise KeyError(f"GTrXLModule: the tensordict has no memory {missing!r}. {how}")
        expected = (*lead, *self.gtrxl.memory_shape)
        if tuple(memory.shape) != expected:
            raise ValueError(
                f"GTrXLModule: {self.memory_key!r} must have shape [*batch, memory_length, "
                f"num_layers, hidden_size] = {list(expected)}, got {list(memory.shape)}"
            )
        n = self.gtrxl.memory_length
        if mask.shape[: len(lead) + 1] != (*lead, n) or mask.numel() != lead.numel() * n:
            raise ValueError(
                f"GTrXLModule: {self.memory_mask_key!r} must have shape [*batch, "
                f"memory_length] = {[*lead, n]} (or with a trailing 1), got {list(mask.shape)}"
            )
        return memory, mask.reshape(*lead, n).to(torch.bool)

    def _input(self, tensordict: TensorDictBase, lead: torch.Size) -> torch.Tensor:
        x = tensordict.get(self.in_key, None)
        if x is None:
            raise KeyError(f"GTrXLModule: the tensordict has no input {self.in_key!r}")
        size = self.gtrxl.input_size
        if tuple(x.shape) != (*lead, size):
            raise ValueError(
                f"GTrXLModule: {self.in_key!r} must have shape [*batch, input_size] = "
                f"{[*lead, size]}, got {list(x.shape)}"
            )
        return x

    def _is_init(self, tensordict: TensorDictBase, lead: torch.Size) -> torch.Tensor | None:
        is_init = tensordict.get(self.is_init_key, None)
        if is_init is None:
            if self.memory_mode == "primer":
                raise KeyError(
                    f"GTrXLModule: the tensordict has no {self.is_init_key!r} entry marking "
                    "episode starts, so the memory cannot be reset. Add the InitTracker "
                    "transform to the env: env.append_transform(InitTracker())."
                )
            return None
        return is_init.reshape(*lead, -1).any(-1)

    # ----------------------------------------------------------------------- forward
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.recurrent_mode:
            return self._forward_window(tensordict)
        return self._forward_step(tensordict)

    def _forward_step(self, tensordict: TensorDictBase) -> TensorDictBase:
        lead = tensordict.batch_size
        rows = lead.numel()
        x = self._input(tensordict, lead).reshape(rows, 1, -1)
        memory, mask = self._memory(tensordict, lead)
        memory = memory.reshape(rows, *self.gtrxl.memory_shape)
        mask = mask.reshape(rows, -1)
        is_init = self._is_init(tensordict, lead)
        if is_init is not None:
            # a new episode forgets the memory (a view is already empty there)
            reset = is_init.reshape(rows)
            memory = memory.masked_fill(reset[:, None, None, None], 0)
            mask = mask & ~reset[:, None]
        out, embeddings = self.gtrxl(x, memory, mask)
        tensordict.set(self.out_key, out.reshape(*lead, -1))
        step = embeddings[:, 0]  # [N, L, D]
        if self.memory_mode == "views":
            tensordict.set(self.embeddings_key, step.reshape(*lead, *step.shape[1:]))
            tensordict.set(self.valid_key, torch.ones(*lead, 1, dtype=torch.bool, device=x.device))
        else:
            shifted = torch.cat([memory[:, 1:], step.unsqueeze(1).to(memory.dtype)], dim=1)
            shifted_mask = torch.cat([mask[:, 1:], torch.ones_like(mask[:, :1])], dim=1)
            tensordict.set(_under_next(self.memory_key), shifted.reshape(*lead, *shifted.shape[1:]))
            tensordict.set(_under_next(self.memory_mask_key), shifted_mask.reshape(*lead, -1))
        return tensordict

    def _forward_window(self, tensordict: TensorDictBase) -> TensorDictBase:
        lead = tensordict.batch_size
        if len(lead) < 1:
            raise ValueError(
                "GTrXLModule in recurrent mode needs a tensordict with a time dim "
                f"(batch [*B, T]), got batch_size={tuple(lead)}"
            )
        rows, steps = lead[:-1].numel(), lead[-1]
        x = self._input(tensordict, lead).reshape(rows, steps, -1)
        memory, mask = self._memory(tensordict, lead)
        # the window's first step carries the memory of everything before the window
        memory = memory.reshape(rows, steps, *self.gtrxl.memory_shape)[:, 0]
        mask = mask.reshape(rows, steps, -1)[:, 0]
        if self.memory_mode == "primer":
            self._is_init(tensordict, lead)  # the memory cannot be reset without it
        starts = window_episode_starts(
            tensordict, is_init_key=self.is_init_key, done_key=self.done_key, owner="GTrXLModule"
        ).reshape(rows, steps)
        out, _ = self.gtrxl(x, memory, mask, starts)
        tensordict.set(self.out_key, out.reshape(*lead, -1))
        return tensordict
