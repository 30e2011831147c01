"""Transforms over consecutive frames: ``CatFrames``, ``TimeMaxPool``, ``FrameSkipTransform``,
``NoopResetEnv``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from tensordict import TensorDictBase

from torchrl._keys import DONE, NEXT, OBSERVATION, PIXELS, RESET
from torchrl._types import NestedKey
from torchrl.data.specs import Composite, TensorSpec
from torchrl.envs._mdp import apply_mdp_plan
from torchrl.envs.transforms._utils import (
    expand_right,
    get,
    key_tuple,
    map_output_specs,
    set_,
    shallow_copy,
    spec_apply,
    unravel_key,
)
from torchrl.envs.transforms.base import ObservationTransform, Transform

__all__ = ["CatFrames", "FrameSkipTransform", "NoopResetEnv", "TimeMaxPool"]


def _reduce_mask(mask: torch.Tensor | None, batch_ndim: int) -> torch.Tensor | None:
    if mask is None:
        return None
    if mask.ndim > batch_ndim:
        mask = mask.reshape(*mask.shape[:batch_ndim], -1).any(-1)
    return mask if mask.dtype is torch.bool else mask.bool()


class CatFrames(ObservationTransform):
    """Stacks the last ``N`` frames of entries along ``dim`` (e.g. 4 Atari frames).

    **In an env**, a rolling buffer per entry holds the last ``N`` frames; a reset refills it
    (for the sub-envs being reset) with the first frame (``padding="same"``) or with
    ``padding_value`` before it (``"constant"``).

    **In a replay buffer** (``forward``), the data must hold trajectories along its last batch
    dim (time), single frames at ``key`` and ``("next", key)``. A new trajectory starts at index
    0 and after every step whose ``("next", done_key)`` is set; the stack at time ``t`` holds
    frames ``t-N+1 .. t`` of the same trajectory, padded like in the env, and
    ``("next", out_key)`` holds frames ``t-N+2 .. t`` plus ``("next", key)[t]``: exactly what the
    env would have produced. Store single frames and stack at sampling time to save memory.

    Args:
        N: the number of frames.
        dim: the dim to stack along (negative: counted from the end of each entry).
        in_keys: the entries (default ``["pixels"]``).
        out_keys: where to write the stacks (default: in place).
        padding: ``"same"`` (repeat the first frame) or ``"constant"``.
        padding_value: the value of ``"constant"`` padding.
        done_key: the done flag separating trajectories in replay-buffer data.
        reset_key: the ``"_reset"`` entry to follow in an env.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import CatFrames
        >>> obs = torch.arange(5.0).unsqueeze(-1)  # one trajectory of 5 steps
        >>> data = TensorDict(
        ...     observation=obs,
        ...     next=TensorDict(observation=obs + 1, done=torch.zeros(5, 1, dtype=torch.bool)),
        ...     batch_size=[5],
        ... )
        >>> out = CatFrames(N=3, dim=-1, in_keys=["observation"])(data)
        >>> out["observation"][:3]
        tensor([[0., 0., 0.],
                [0., 0., 1.],
                [0., 1., 2.]])
        >>> out["next", "observation"][2]
        tensor([1., 2., 3.])
    """

    def __init__(
        self,
        N: int,  # noqa: N803 (TorchRL's public name)
        dim: int,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        padding: Literal["same", "constant"] = "same",
        padding_value: float = 0.0,
        as_inverse: bool = False,
        reset_key: NestedKey | None = None,
        done_key: NestedKey | None = None,
    ) -> None:
        if int(N) < 1:
            raise ValueError(f"CatFrames: N must be >= 1, got {N}")
        if dim >= 0:
            raise ValueError(
                f"CatFrames: dim must be negative (from the end of each entry), got {dim}"
            )
        if padding not in ("same", "constant"):
            raise ValueError(f"CatFrames: padding must be 'same' or 'constant', got {padding!r}")
        if as_inverse:
            raise NotImplementedError("CatFrames(as_inverse=True) is not supported")
        super().__init__([PIXELS] if in_keys is None else in_keys, out_keys)
        self.N = int(N)
        self.dim = dim
        self.padding = padding
        self.padding_value = padding_value
        self.reset_key = RESET if reset_key is None else unravel_key(reset_key)
        self.done_key = DONE if done_key is None else unravel_key(done_key)
        # The rolling stacks, per out_key (not nn.Module buffers: transient env state).
        self._stacks: dict[NestedKey, torch.Tensor] = {}

    def _fill(self, frame: torch.Tensor) -> torch.Tensor:
        if self.padding == "same":
            return torch.cat([frame] * self.N, self.dim)
        pad = torch.full_like(frame, self.padding_value)
        return torch.cat([pad] * (self.N - 1) + [frame], self.dim)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        batch_ndim = tensordict_reset.batch_dims
        mask = _reduce_mask(get(tensordict, self.reset_key), batch_ndim)
        for in_key, out_key in self._pairs:
            frame = get(tensordict_reset, in_key)
            if frame is None:
                continue
            fill = self._fill(frame)
            buffer = self._stacks.get(out_key)
            if mask is not None and buffer is not None and buffer.shape == fill.shape:
                fill = torch.where(expand_right(mask, fill.ndim), fill, buffer)
            self._stacks[out_key] = fill
            set_(tensordict_reset, out_key, fill)
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in self._pairs:
            frame = get(next_tensordict, in_key)
            if frame is None:
                raise KeyError(
                    f"CatFrames: the input key {in_key!r} is missing from the step output"
                )
            buffer = self._stacks.get(out_key)
            if buffer is None:
                raise RuntimeError("CatFrames: reset the env before stepping it")
            size = frame.shape[self.dim]
            stacked = torch.cat(
                [buffer.narrow(self.dim, size, buffer.shape[self.dim] - size), frame], self.dim
            )
            if stacked.shape != buffer.shape:
                raise RuntimeError(
                    f"CatFrames: the frame of {in_key!r} has shape {tuple(frame.shape)}, which "
                    f"does not fit the stack of shape {tuple(buffer.shape)}; reset the env"
                )
            self._stacks[out_key] = stacked
            set_(next_tensordict, out_key, stacked)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Rebuilds stacks from trajectories (time = last batch dim); see the class docs."""
        if tensordict.batch_dims < 1:
            raise ValueError("CatFrames.forward needs data with a time dim (its last batch dim)")
        time_dim = tensordict.batch_dims - 1
        length = tensordict.batch_size[time_dim]
        device = tensordict.device
        done = tensordict.get((NEXT, *key_tuple(self.done_key)), None)
        steps = torch.arange(length, device=device)
        if done is None:
            first = torch.zeros(tensordict.batch_size, dtype=torch.long, device=device)
        else:
            ends = _reduce_mask(done, tensordict.batch_dims)
            assert ends is not None
            starts = torch.zeros_like(ends)
            starts[..., 1:] = ends[..., :-1]
            starts[..., 0] = True
            # The index of each step's trajectory start: a running max of the start indices.
            first = torch.where(starts, steps, torch.zeros_like(steps)).cummax(-1).values
        for in_key, out_key in self._pairs:
            frames = tensordict.get(in_key, None)
            if frames is None:
                if self.missing_tolerance:
                    continue
                raise KeyError(f"CatFrames: the input key {in_key!r} is missing from the data")
            stacked = self._unfold(frames, steps, first, time_dim)
            tensordict.set(out_key, stacked)
            next_frame = tensordict.get((NEXT, *key_tuple(in_key)), None)
            if next_frame is not None:
                size = next_frame.shape[self.dim]
                older = stacked.narrow(self.dim, size, stacked.shape[self.dim] - size)
                tensordict.set(
                    (NEXT, *key_tuple(out_key)), torch.cat([older, next_frame], self.dim)
                )
        return tensordict

    def _unfold(
        self, frames: torch.Tensor, steps: torch.Tensor, first: torch.Tensor, time_dim: int
    ) -> torch.Tensor:
        feature_shape = frames.shape[time_dim + 1 :]
        parts = []
        for lag in range(self.N - 1, -1, -1):
            source = steps - lag
            valid = source >= first
            index = torch.maximum(source, first)
            index_full = index.reshape(*index.shape, *([1] * len(feature_shape))).expand(
                frames.shape
            )
            frame = frames.gather(time_dim, index_full)
            if self.padding == "constant" and lag:
                pad = torch.full_like(frame, self.padding_value)
                frame = torch.where(expand_right(valid, frame.ndim), frame, pad)
            parts.append(frame)
        return torch.cat(parts, self.dim)

    def _spec(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        return spec_apply(leaf, lambda t: torch.cat([t] * self.N, self.dim), "CatFrames")

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        map_output_specs(self, output_spec, self._spec)
        return output_spec

    def extra_repr(self) -> str:
        return f"N={self.N}, dim={self.dim}, padding={self.padding!r}, {super().extra_repr()}"


class TimeMaxPool(ObservationTransform):
    """Replaces entries by their element-wise max over the last ``T`` steps.

    Args:
        in_keys: the entries (default ``["observation"]``).
        out_keys: where to write the max (default: in place).
        T: the window length.
        reset_key: the ``"_reset"`` entry to follow.

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import TimeMaxPool, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), TimeMaxPool(in_keys=["thdot"], out_keys=["thdot_max"], T=3))
        >>> r = env.rollout(6)
        >>> bool((r["next", "thdot_max"][2:] == r["next", "thdot"].unfold(0, 3, 1).amax(-1)).all())
        True
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        T: int = 1,  # noqa: N803 (TorchRL's public name)
        reset_key: NestedKey | None = None,
    ) -> None:
        if int(T) < 1:
            raise ValueError(f"TimeMaxPool: T must be >= 1, got {T}")
        super().__init__([OBSERVATION] if in_keys is None else in_keys, out_keys)
        self.T = int(T)
        self.reset_key = RESET if reset_key is None else unravel_key(reset_key)
        self._windows: dict[NestedKey, torch.Tensor] = {}

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        mask = _reduce_mask(get(tensordict, self.reset_key), tensordict_reset.batch_dims)
        for in_key, out_key in self._pairs:
            frame = get(tensordict_reset, in_key)
            if frame is None:
                continue
            fill = frame.unsqueeze(0).expand(self.T, *frame.shape).clone()
            buffer = self._windows.get(out_key)
            if mask is not None and buffer is not None and buffer.shape == fill.shape:
                fill = torch.where(expand_right(mask, fill.ndim - 1), fill, buffer)
            self._windows[out_key] = fill
            set_(tensordict_reset, out_key, fill.amax(0))
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in self._pairs:
            frame = get(next_tensordict, in_key)
            if frame is None:
                raise KeyError(
                    f"TimeMaxPool: the input key {in_key!r} is missing from the step output"
                )
            buffer = self._windows.get(out_key)
            if buffer is None:
                raise RuntimeError("TimeMaxPool: reset the env before stepping it")
            buffer = torch.cat([buffer[1:], frame.unsqueeze(0)], 0)
            self._windows[out_key] = buffer
            set_(next_tensordict, out_key, buffer.amax(0))
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError("TimeMaxPool pools over env steps; use it in a TransformedEnv")

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        map_output_specs(self, output_spec, lambda leaf, _: leaf.clone())
        return output_spec

    def extra_repr(self) -> str:
        return f"T={self.T}, {super().extra_repr()}"


class FrameSkipTransform(Transform):
    """Repeats each action ``frame_skip`` times, summing the rewards.

    The repetition stops early once a sub-env is done (a batched env cannot step its sub-envs
    separately: put the transform inside each sub-env for per-env frame skipping).

    Args:
        frame_skip: how many base steps one step makes.

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import FrameSkipTransform, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), StepCounter())
        >>> env.append_transform(FrameSkipTransform(3))  # doctest: +ELLIPSIS
        TransformedEnv(...)
        >>> env.rollout(2)["next", "step_count"].squeeze(-1)  # counted before the skip
        tensor([3, 6])
        >>> check_env_specs(env)
    """

    def __init__(self, frame_skip: int = 1) -> None:
        if int(frame_skip) < 1:
            raise ValueError(f"FrameSkipTransform: frame_skip must be >= 1, got {frame_skip}")
        super().__init__()
        self.frame_skip = int(frame_skip)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self.frame_skip == 1:
            return next_tensordict
        parent = self.parent
        if parent is None:
            raise RuntimeError("FrameSkipTransform must be used in a TransformedEnv")
        cache = parent._cache or parent._spec_cache()
        groups = cache.done_groups
        reward_keys = cache.reward_keys
        rewards = [get(next_tensordict, k) for k in reward_keys]
        td_in = self._input_at_level(tensordict)
        for _ in range(self.frame_skip - 1):
            if groups.any_done(next_tensordict):
                break
            td_in = shallow_copy(td_in)
            td_in.update(next_tensordict)
            next_tensordict = parent._step(td_in)
            groups.complete(next_tensordict)
            rewards = [r + get(next_tensordict, k) for r, k in zip(rewards, reward_keys)]
        for key, reward in zip(reward_keys, rewards):
            set_(next_tensordict, key, reward)
        return next_tensordict

    def _input_at_level(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The step input as the env below this transform sees it (later inverses applied)."""
        following = self._following()
        inverses = [t for t in reversed(following) if t._uses_inv()]
        if not inverses:
            return tensordict
        td = shallow_copy(tensordict)
        for t in inverses:
            td = t._inv_call(td)
        return td

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError("FrameSkipTransform repeats env steps; use it in a TransformedEnv")

    def extra_repr(self) -> str:
        return f"frame_skip={self.frame_skip}"


_MAX_NOOP_TRIALS = 10


class NoopResetEnv(Transform):
    """Makes a random number of random steps after each reset (Atari-style no-op starts).

    Needs an env with a single done flag (not a batch of sub-envs).

    Args:
        noops: the largest number of random steps.
        random: draw the number in ``[0, noops]``; ``False``: always ``noops``.

    Raises:
        RuntimeError: at reset, when the env keeps finishing during the random steps.

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import NoopResetEnv, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), StepCounter())
        >>> env.append_transform(NoopResetEnv(noops=5, random=False))  # doctest: +ELLIPSIS
        TransformedEnv(...)
        >>> env.reset()["step_count"]
        tensor([5])
        >>> check_env_specs(env)
    """

    def __init__(self, noops: int = 30, random: bool = True) -> None:
        if int(noops) < 0:
            raise ValueError(f"NoopResetEnv: noops must be >= 0, got {noops}")
        super().__init__()
        self.noops = int(noops)
        self.random = random

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        parent = self.parent
        if parent is None:
            raise RuntimeError("NoopResetEnv must be used in a TransformedEnv")
        cache = parent._cache or parent._spec_cache()
        groups = cache.done_groups
        flags = groups[0].flags(tensordict_reset) if groups else None
        if len(groups) != 1 or (flags is not None and flags.numel() != 1):
            raise ValueError(
                "NoopResetEnv: there is more than one done state in the parent environment; "
                "use it inside each sub-env of a batched env"
            )
        count = int(torch.randint(self.noops + 1, ())) if self.random else self.noops
        td = tensordict_reset
        trials = 0
        i = 0
        while i < count:
            td = parent.step(parent.rand_action(td))
            td = apply_mdp_plan(td, cache.mdp_plan)
            i += 1
            if groups.any_done(td):
                trials += 1
                if trials >= _MAX_NOOP_TRIALS:
                    raise RuntimeError(
                        f"NoopResetEnv: the env finished during the {count} random steps after "
                        f"reset in {trials} trials in a row; lower noops (now {self.noops})"
                    )
                td = parent.reset()
                i = 0
        return td

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError("NoopResetEnv acts on env resets; use it in a TransformedEnv")

    def extra_repr(self) -> str:
        return f"noops={self.noops}, random={self.random}"
