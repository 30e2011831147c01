"""Recurrent policies: LSTM/GRU modules that keep their state in the TensorDict.

Collection runs one step at a time: the module reads the state written at the previous step
(``"recurrent_state_h"``, ...), zeroes it where ``"is_init"`` is True, and writes the new state
under ``"next"`` so that ``step_mdp`` carries it to the next step. Training runs whole ``[*B, T]``
sequences (``set_recurrent_mode(True)``): each row is cut into segments at its episode starts
and all segments go through the RNN in one padded batch, starting from the stored state (first
segment of a row) or from zeros (later segments). Both paths compute the same outputs.

With ``state_views=True`` the states are stored once: the module declares each input state as
a trajectory view of its own output state one step earlier
(``TrajectoryView(("next", "recurrent_state_h"), -1, out_key="recurrent_state_h")``), so a
views-aware collector or replay buffer (or :func:`~torchrl.data.trajectory_views.build_views`)
builds it, zero at an episode start, and no primer is needed.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from torchrl._keys import DONE, IS_INIT, NEXT
from torchrl._types import NestedKey
from torchrl.data.trajectory_views import TrajectoryView
from torchrl.modules._spec_utils import module_keys

_F = TypeVar("_F", bound=Callable[..., Any])

_RECURRENT_MODE: list[bool | None] = [None]

if TYPE_CHECKING:
    from torchrl.envs.transforms import TensorDictPrimer


def recurrent_mode() -> bool | None:
    """The recurrent mode set by :class:`set_recurrent_mode`, or ``None`` outside of it.

    Examples:
        >>> print(recurrent_mode())
        None
        >>> with set_recurrent_mode(True):
        ...     recurrent_mode()
        True
    """
    return _RECURRENT_MODE[0]


class set_recurrent_mode:
    """Runs recurrent modules on whole sequences (``True``) or step by step (``False``).

    Works as a context manager or a decorator; inside, every :class:`LSTMModule` and
    :class:`GRUModule` uses this mode instead of its ``default_recurrent_mode``.

    Args:
        mode: ``True`` or ``"recurrent"`` (sequences ``[*B, T]``), ``False`` or
            ``"sequential"`` (single steps ``[*B]``), or ``None`` (each module's default).

    Examples:
        >>> @set_recurrent_mode(True)
        ... def train_step():
        ...     return recurrent_mode()
        >>> train_step()
        True
    """

    _NAMED = {"recurrent": True, "sequential": False}

    def __init__(self, mode: bool | str | None = True) -> None:
        if isinstance(mode, str):
            if mode not in self._NAMED:
                raise ValueError(
                    f"mode must be a bool, None, 'recurrent' or 'sequential', got {mode!r}"
                )
            mode = self._NAMED[mode]
        if mode is not None and not isinstance(mode, bool):
            raise TypeError(f"mode must be a bool, None, 'recurrent' or 'sequential', got {mode!r}")
        self.mode: bool | None = mode
        self._previous: list[bool | None] = []

    def __enter__(self) -> None:
        self._previous.append(_RECURRENT_MODE[0])
        _RECURRENT_MODE[0] = self.mode

    def __exit__(self, *exc: object) -> None:
        _RECURRENT_MODE[0] = self._previous.pop()

    def __call__(self, func: _F) -> _F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_recurrent_mode(self.mode):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def window_episode_starts(
    tensordict: TensorDictBase,
    *,
    is_init_key: NestedKey = IS_INIT,
    done_key: NestedKey = (NEXT, DONE),
    owner: str = "the recurrent module",
) -> torch.Tensor:
    """Where episodes start inside a trajectory window ``[*B, T]`` (time is the last batch dim).

    Read from ``is_init_key`` when the window has it, else from the previous step's
    ``done_key``; in that case the first step is ``False``: whether it starts an episode is
    unknown, and a module that takes its state or memory from trajectory views does not need
    to know (the view is already zero-padded there).

    Args:
        tensordict: the window, batch ``[*B, T]``.
        is_init_key: the entry marking episode starts.
        done_key: the per-step done entry, used when ``is_init_key`` is absent.
        owner: the name used in the error message.

    Returns:
        bool ``[*B, T]``.

    Raises:
        KeyError: neither entry is in the window.

    Examples:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({("next", "done"): torch.tensor([[False], [True], [False]])}, [3])
        >>> window_episode_starts(td).tolist()
        [False, False, True]
    """
    lead = tensordict.batch_size
    is_init = tensordict.get(is_init_key, None)
    if is_init is not None:
        return is_init.reshape(*lead, -1).any(-1)
    done = tensordict.get(done_key, None)
    if done is None:
        raise KeyError(
            f"{owner}: the window has neither {is_init_key!r} nor {done_key!r}, so its episode "
            "starts are unknown. Add the InitTracker transform to the env "
            "(env.append_transform(InitTracker())) or keep the done flags in the data."
        )
    done = done.reshape(*lead, -1).any(-1)
    starts = torch.zeros_like(done)
    starts[..., 1:] = done[..., :-1]
    return starts


def _segments(starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Cuts ``[N, T]`` rows at ``starts``; returns flat segment ids, positions, start indices, max length."""
    flat = starts.reshape(-1)
    seg_id = flat.long().cumsum(0) - 1
    seg_start = flat.nonzero().squeeze(-1)
    pos = torch.arange(flat.numel(), device=flat.device) - seg_start[seg_id]
    max_len = int(torch.bincount(seg_id).max())
    return seg_id, pos, seg_start, max_len


class _RecurrentModule(TensorDictModuleBase):
    """Shared key handling, state checks and the two execution modes of LSTM/GRU modules."""

    _rnn_name = "RNN"
    _n_states = 1

    def __init__(
        self,
        rnn: nn.LSTM | nn.GRU,
        in_key: NestedKey | None,
        in_keys: Sequence[NestedKey] | None,
        out_key: NestedKey | None,
        out_keys: Sequence[NestedKey] | None,
        default_state_keys: list[str],
        default_recurrent_mode: bool | None,
        is_init_key: NestedKey,
        state_views: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(state_views, bool):
            raise TypeError(f"state_views must be a bool, got {state_views!r}")
        if not rnn.batch_first:
            raise ValueError(f"{self._rnn_name}Module needs batch_first=True")
        if rnn.bidirectional:
            raise ValueError(
                f"{self._rnn_name}Module does not support bidirectional RNNs (not causal)"
            )
        if getattr(rnn, "proj_size", 0):
            raise ValueError(f"{self._rnn_name}Module does not support proj_size > 0")
        self.rnn = rnn
        keys = self._keys(in_key, in_keys, default_state_keys, "in")
        if len(keys) == 2 + self._n_states:  # TorchRL's layout: the last in_key is is_init
            is_init_key = keys.pop()
        #: the recurrent state entries read at each step
        self.state_keys: list[NestedKey] = list(keys[1:])
        # is_init is an input unless the states come from views (then it is optional)
        self.in_keys = module_keys(keys if state_views else [*keys, is_init_key])
        if out_keys is not None and out_key is not None:
            raise ValueError("pass exactly one of out_key and out_keys")
        if out_keys is None and out_key is not None:
            out_keys = [out_key, *[(NEXT, k) for k in default_state_keys]]
        self.out_keys = module_keys(self._keys(None, out_keys, [], "out"))
        if len(self.out_keys) != 1 + self._n_states:
            raise ValueError(
                f"{self._rnn_name}Module needs {1 + self._n_states} out_keys (output, "
                f"{self._n_states} next state(s)), got {self.out_keys}"
            )
        self.default_recurrent_mode = bool(default_recurrent_mode)
        self.is_init_key = is_init_key
        self.state_views = state_views
        # the state read at t is the state written at t-1: stored once, under "next"
        self.views: list[TrajectoryView] = (
            [
                TrajectoryView(out_state, -1, out_key=in_state)
                for in_state, out_state in zip(self.state_keys, self.out_keys[1:])
            ]
            if state_views
            else []
        )

    def _keys(
        self,
        key: NestedKey | None,
        keys: Sequence[NestedKey] | None,
        state_keys: list[str],
        direction: str,
    ) -> list[NestedKey]:
        if (key is None) == (keys is None):
            raise ValueError(f"pass exactly one of {direction}_key and {direction}_keys")
        if keys is None:
            return [key, *state_keys]  # type: ignore[list-item]
        keys = [keys] if isinstance(keys, (str, tuple)) else list(keys)
        if direction == "in" and len(keys) not in (1 + self._n_states, 2 + self._n_states):
            raise ValueError(
                f"{self._rnn_name}Module needs {1 + self._n_states} in_keys (input, "
                f"{self._n_states} state(s)), optionally followed by the is_init key, got {keys}"
            )
        return keys

    @property
    def recurrent_mode(self) -> bool:
        """Whether the module runs on sequences now (context first, then the module's default)."""
        mode = recurrent_mode()
        return self.default_recurrent_mode if mode is None else mode

    def set_recurrent_mode(self, mode: bool = True) -> _RecurrentModule:
        """Returns a copy sharing the parameters whose default mode is ``mode``.

        Args:
            mode: ``True`` to run on sequences by default.
        """
        out = copy.copy(self)
        out._modules = dict(self._modules)  # same RNN object, hence same parameters
        out.default_recurrent_mode = mode
        return out

    def make_tensordict_primer(self) -> TensorDictPrimer:
        """The ``TensorDictPrimer`` that makes an env write zero recurrent states at reset.

        Append it to the env (with an ``InitTracker``) so that every reset sub-env starts from
        zero states of shape ``[*batch, num_layers, hidden_size]`` and steps carry them over.
        With ``state_views=True`` the env needs no primer (the states are views, and a primer
        on the env only repeats their work); the primer still declares the states' shapes, which
        a views-aware collector reads to size its ring buffers.

        Returns:
            A :class:`~torchrl.envs.transforms.TensorDictPrimer` declaring the state entries.

        Examples:
            >>> from torchrl.envs import PendulumEnv
            >>> from torchrl.envs.transforms import InitTracker, TransformedEnv
            >>> lstm = LSTMModule(3, 8, in_key="observation", out_key="features")
            >>> env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), InitTracker())
            >>> env = env.append_transform(lstm.make_tensordict_primer())
            >>> env.reset()["recurrent_state_h"].shape
            torch.Size([2, 1, 8])
        """
        from torchrl.data.specs import Unbounded
        from torchrl.envs.transforms import TensorDictPrimer

        shape = (self.rnn.num_layers, self.rnn.hidden_size)
        # always prepend the env's batch dims: a state [num_layers, hidden] may start like them
        return TensorDictPrimer(
            {key: Unbounded(shape=shape) for key in self.state_keys}, expand_specs=True
        )

    # --------------------------------------------------------------------------- state I/O
    def _get_states(self, tensordict: TensorDictBase) -> list[torch.Tensor]:
        states: list[torch.Tensor] = []
        for key in self.state_keys:
            state = tensordict.get(key, None)
            if state is None:
                if self.state_views:
                    how = (
                        "With state_views=True it is a view of the previous step's "
                        f"{self.out_keys[1 + len(states)]!r}, built by a views-aware collector "
                        "or replay buffer, or by build_views(td, get_views(policy))."
                    )
                else:
                    how = (
                        "Add the primer to the env so that reset writes zero states: "
                        "env.append_transform(module.make_tensordict_primer()) (a "
                        "TensorDictPrimer)."
                    )
                raise KeyError(
                    f"{self._rnn_name}Module: the tensordict has no recurrent state {key!r}. "
                    f"{how} The module never starts from implicit zeros."
                )
            states.append(state)
        return states

    def _get_is_init(self, tensordict: TensorDictBase) -> torch.Tensor:
        is_init = tensordict.get(self.is_init_key, None)
        if is_init is None:
            raise KeyError(
                f"{self._rnn_name}Module: the tensordict has no {self.is_init_key!r} entry marking "
                "episode starts, so the recurrent state cannot be reset. Add the InitTracker "
                "transform to the env: env.append_transform(InitTracker())."
            )
        return is_init

    def _run(
        self, x: torch.Tensor, states: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``x [N, T, F]``, states ``[L, N, H]`` -> ``y [N, T, H]``, states ``[L, N, H]``."""
        if self._n_states == 2:
            y, (h, c) = self.rnn(x, (states[0], states[1]))
            return y, [h, c]
        y, h = self.rnn(x, states[0])
        return y, [h]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.recurrent_mode:
            return self._forward_sequence(tensordict)
        return self._forward_step(tensordict)

    def _forward_step(self, tensordict: TensorDictBase) -> TensorDictBase:
        x = tensordict.get(self.in_keys[0])
        states = self._get_states(tensordict)
        # a state view is already zero at an episode start: is_init is optional then
        is_init = (
            tensordict.get(self.is_init_key, None)
            if self.state_views
            else self._get_is_init(tensordict)
        )
        batch = x.shape[:-1]
        n = batch.numel()
        if is_init is None:
            reset = torch.zeros(n, dtype=torch.bool, device=x.device)
        else:
            reset = is_init.reshape(n, -1).any(-1)
        # [*B, L, H] -> [L, N, H], zeroed where an episode starts
        flat_states = [
            s.reshape(n, *s.shape[-2:]).masked_fill(reset[:, None, None], 0).transpose(0, 1)
            for s in states
        ]
        y, new_states = self._run(x.reshape(n, 1, x.shape[-1]), flat_states)
        tensordict.set(self.out_keys[0], y.reshape(*batch, y.shape[-1]))
        for key, state in zip(self.out_keys[1:], new_states):
            tensordict.set(key, state.transpose(0, 1).reshape(*batch, *state.shape[::2]))
        return tensordict

    def _forward_sequence(self, tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict.ndim < 1:
            raise ValueError(
                f"{self._rnn_name}Module in recurrent mode needs a tensordict with a time dim "
                f"(batch [*B, T]), got batch_size={tuple(tensordict.batch_size)}"
            )
        x = tensordict.get(self.in_keys[0])
        states = self._get_states(tensordict)
        lead = tensordict.batch_size
        n, t = lead[:-1].numel(), lead[-1]
        x = x.reshape(n, t, x.shape[-1])
        if self.state_views:
            # is_init if present, else the previous step's done (the first step's state is a
            # view, zero at an episode start either way)
            is_init = window_episode_starts(
                tensordict, is_init_key=self.is_init_key, owner=f"{self._rnn_name}Module"
            ).reshape(n, t)
        else:
            is_init = self._get_is_init(tensordict).reshape(n, t, -1).any(-1)
        starts = is_init.clone()
        starts[:, 0] = True
        seg_id, pos, seg_start, max_len = _segments(starts)
        n_seg = seg_start.numel()
        # A segment starts from the stored state of its first step, zeroed when that step
        # begins an episode: stored state for a row's first segment, zeros for the others.
        reset = is_init.reshape(-1)[seg_start]
        init_states = [
            s.reshape(n * t, *s.shape[-2:])[seg_start]
            .masked_fill(reset[:, None, None], 0)
            .transpose(0, 1)
            .contiguous()
            for s in states
        ]
        padded = x.new_zeros(n_seg, max_len, x.shape[-1])
        padded[seg_id, pos] = x.reshape(n * t, -1)
        # Padding sits after each segment's last step: the causal RNN ignores it.
        y, _ = self._run(padded, init_states)
        y = y[seg_id, pos].reshape(*lead, y.shape[-1])
        tensordict.set(self.out_keys[0], y)
        return tensordict


class LSTMModule(_RecurrentModule):
    """An ``nn.LSTM`` policy block whose hidden and cell states live in the TensorDict.

    Reads ``[in_key, "recurrent_state_h", "recurrent_state_c"]`` and ``"is_init"``; writes
    ``[out_key, ("next", "recurrent_state_h"), ("next", "recurrent_state_c")]``. States are
    ``[*B, num_layers, hidden_size]``. In recurrent mode (``set_recurrent_mode(True)``) the input
    is ``[*B, T, input_size]`` (time is the last batch dim) and only ``out_key`` is written.

    Args:
        input_size: input features (or pass ``lstm``).
        hidden_size: hidden features.
        num_layers: stacked layers.
        bias: whether the LSTM has biases.
        batch_first: must be ``True``.
        dropout: dropout between layers.
        proj_size: must be 0.
        bidirectional: must be ``False``.
        in_key: the input entry (state keys get their defaults).
        in_keys: ``[input, h, c]`` or ``[input, h, c, is_init]`` (instead of ``in_key``);
            ``module.in_keys`` ends with the is_init key unless ``state_views=True``.
        out_key: the output entry (next-state keys get their defaults).
        out_keys: ``[output, next h, next c]`` (instead of ``out_key``).
        device: device of the parameters.
        lstm: an existing ``nn.LSTM`` to wrap instead of building one.
        default_recurrent_mode: mode used outside :class:`set_recurrent_mode`.
        is_init_key: entry marking episode starts.
        state_views: declare each state as a view of the previous step's next state (stored
            once, no primer, ``is_init`` optional; see the module docstring).

    Examples:
        >>> from tensordict import TensorDict
        >>> lstm = LSTMModule(3, 8, in_key="embed", out_key="features")
        >>> td = TensorDict(embed=torch.randn(4, 3), is_init=torch.ones(4, 1, dtype=torch.bool),
        ...                 recurrent_state_h=torch.zeros(4, 1, 8),
        ...                 recurrent_state_c=torch.zeros(4, 1, 8), batch_size=[4])
        >>> td = lstm(td)
        >>> td["features"].shape, td["next", "recurrent_state_h"].shape
        (torch.Size([4, 8]), torch.Size([4, 1, 8]))
        >>> viewed = LSTMModule(3, 8, in_key="embed", out_key="features", state_views=True)
        >>> [(v.key, v.shift, v.out_key) for v in viewed.views][0]
        (('next', 'recurrent_state_h'), -1, 'recurrent_state_h')
    """

    _rnn_name = "LSTM"
    _n_states = 2

    def __init__(
        self,
        input_size: int | None = None,
        hidden_size: int | None = None,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0.0,
        proj_size: int = 0,
        bidirectional: bool = False,
        *,
        in_key: NestedKey | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        device: torch.device | str | None = None,
        lstm: nn.LSTM | None = None,
        default_recurrent_mode: bool | None = None,
        is_init_key: NestedKey = IS_INIT,
        state_views: bool = False,
    ) -> None:
        if lstm is None:
            if input_size is None or hidden_size is None:
                raise ValueError("LSTMModule needs input_size and hidden_size (or an lstm)")
            lstm = nn.LSTM(
                input_size,
                hidden_size,
                num_layers,
                bias=bias,
                batch_first=batch_first,
                dropout=dropout,
                proj_size=proj_size,
                bidirectional=bidirectional,
                device=device,
            )
        elif input_size is not None or hidden_size is not None:
            raise ValueError("pass either an lstm or its sizes, not both")
        super().__init__(
            lstm,
            in_key,
            in_keys,
            out_key,
            out_keys,
            ["recurrent_state_h", "recurrent_state_c"],
            default_recurrent_mode,
            is_init_key,
            state_views,
        )

    @property
    def lstm(self) -> nn.LSTM:
        """The wrapped ``nn.LSTM``."""
        return self.rnn  # type: ignore[return-value]


class GRUModule(_RecurrentModule):
    """An ``nn.GRU`` policy block whose hidden state lives in the TensorDict.

    Reads ``[in_key, "recurrent_state"]`` and ``"is_init"``; writes
    ``[out_key, ("next", "recurrent_state")]``; see :class:`LSTMModule` for the modes.

    Args:
        input_size: input features (or pass ``gru``).
        hidden_size: hidden features.
        num_layers: stacked layers.
        bias: whether the GRU has biases.
        batch_first: must be ``True``.
        dropout: dropout between layers.
        bidirectional: must be ``False``.
        in_key: the input entry.
        in_keys: ``[input, state]`` or ``[input, state, is_init]`` (instead of ``in_key``);
            ``module.in_keys`` ends with the is_init key unless ``state_views=True``.
        out_key: the output entry.
        out_keys: ``[output, next state]`` (instead of ``out_key``).
        device: device of the parameters.
        gru: an existing ``nn.GRU`` to wrap instead of building one.
        default_recurrent_mode: mode used outside :class:`set_recurrent_mode`.
        is_init_key: entry marking episode starts.
        state_views: declare the state as a view of the previous step's next state (stored
            once, no primer, ``is_init`` optional).

    Examples:
        >>> from tensordict import TensorDict
        >>> gru = GRUModule(3, 8, in_key="embed", out_key="features")
        >>> td = TensorDict(embed=torch.randn(2, 5, 3), is_init=torch.zeros(2, 5, 1, dtype=torch.bool),
        ...                 recurrent_state=torch.zeros(2, 5, 1, 8), batch_size=[2, 5])
        >>> with set_recurrent_mode(True):
        ...     gru(td)["features"].shape
        torch.Size([2, 5, 8])
    """

    _rnn_name = "GRU"
    _n_states = 1

    def __init__(
        self,
        input_size: int | None = None,
        hidden_size: int | None = None,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0.0,
        bidirectional: bool = False,
        *,
        in_key: NestedKey | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        device: torch.device | str | None = None,
        gru: nn.GRU | None = None,
        default_recurrent_mode: bool | None = None,
        is_init_key: NestedKey = IS_INIT,
        state_views: bool = False,
    ) -> None:
        if gru is None:
            if input_size is None or hidden_size is None:
                raise ValueError("GRUModule needs input_size and hidden_size (or a gru)")
            gru = nn.GRU(
                input_size,
                hidden_size,
                num_layers,
                bias=bias,
                batch_first=batch_first,
                dropout=dropout,
                bidirectional=bidirectional,
                device=device,
            )
        elif input_size is not None or hidden_size is not None:
            raise ValueError("pass either a gru or its sizes, not both")
        super().__init__(
            gru,
            in_key,
            in_keys,
            out_key,
            out_keys,
            ["recurrent_state"],
            default_recurrent_mode,
            is_init_key,
            state_views,
        )

    @property
    def gru(self) -> nn.GRU:
        """The wrapped ``nn.GRU``."""
        return self.rnn  # type: ignore[return-value]
