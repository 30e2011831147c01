"""Dreamer's latent env (``DreamerEnv``) and the transform that decodes its states to pixels.

In Dreamer, the agent learns its behaviour in imagination: a recurrent state-space model
(RSSM) steps a latent state made of a stochastic part, ``"state"`` (``prior_shape``), and a
deterministic part, ``"belief"`` (``belief_shape``); a reward model reads both. ``DreamerEnv``
puts that model behind the env contract, so that ``env.rollout(horizon, actor)`` gives the
imagined trajectories the actor and value losses train on. ``DreamerDecoder`` turns latent
states back into pixels (``"reco_pixels"``) to look at what the model imagines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from torchrl._types import DeviceLike, NestedKey, ShapeLike
from torchrl.data.specs import Composite, TensorSpec, Unbounded
from torchrl.envs.common import EnvBase
from torchrl.envs.model_based.common import ModelBasedEnvBase, ParamsLike, batched_spec
from torchrl.envs.transforms.base import Transform

__all__ = ["BELIEF_KEY", "RECO_PIXELS_KEY", "STATE_KEY", "DreamerDecoder", "DreamerEnv"]

#: The stochastic part of Dreamer's latent state.
STATE_KEY = "state"
#: The deterministic (recurrent) part of Dreamer's latent state.
BELIEF_KEY = "belief"
#: The pixels decoded from the latent state.
RECO_PIXELS_KEY = "reco_pixels"


class DreamerEnv(ModelBasedEnvBase):
    """Dreamer's imagination env: the latent state ``("state", "belief")`` stepped by a model.

    The world model reads ``"state"``, ``"belief"`` and ``"action"`` and writes the next
    ``"state"`` and ``"belief"`` (in place of the current ones, or under ``"next"``) and the
    ``"reward"`` (e.g. a ``WorldModelWrapper`` of an RSSM prior and a reward model). Imagination
    runs for a fixed horizon: nothing terminates unless the model writes done flags. Resets
    start from the states in the reset TensorDict (typically posterior states computed on real
    data), else from zeros (the RSSM's initial state). The action, reward and done specs come
    from the real env (:meth:`set_specs_from_env`) or from ``action_spec``/``reward_spec``;
    the observations are the two latent entries only (decode pixels with
    :class:`DreamerDecoder`).

    Args:
        world_model: the latent transition and reward model.
        prior_shape: the shape of ``"state"`` for one sub-env, e.g. ``(30,)``.
        belief_shape: the shape of ``"belief"`` for one sub-env, e.g. ``(200,)``.
        obs_decoder: a module decoding latent states to pixels (used by ``DreamerDecoder``).
        device: where the env's tensors live.
        batch_size: the batch size of a reset without input (default ``[]``).
        action_spec: the action's spec for one sub-env (else ``set_specs_from_env``).
        reward_spec: the reward's spec for one sub-env (default ``Unbounded((1,))``).
        state_key: the key of the stochastic state.
        belief_key: the key of the deterministic state.
        params: parameters to run the model with (see ``ModelBasedEnvBase``).
        buffers: buffers to run the model with (see ``ModelBasedEnvBase``).
        run_type_checks: check every output against the specs.
        validate_actions: check every action against the action spec.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.data import Bounded
        >>> from torchrl.envs.model_based.dreamer import DreamerEnv
        >>> class Prior(torch.nn.Module):  # a stand-in for an RSSM prior
        ...     def forward(self, state, belief, action):
        ...         belief = torch.tanh(belief + action.sum(-1, keepdim=True))
        ...         return state + belief[..., :4], belief, belief.mean(-1, keepdim=True)
        >>> model = TensorDictModule(
        ...     Prior(), ["state", "belief", "action"], ["state", "belief", "reward"]
        ... )
        >>> env = DreamerEnv(model, prior_shape=(4,), belief_shape=(8,),
        ...                  action_spec=Bounded(-1.0, 1.0, shape=(2,)))
        >>> starts = TensorDict(state=torch.randn(16, 4), belief=torch.randn(16, 8), batch_size=[16])
        >>> env.rollout(15, tensordict=starts)["next", "belief"].shape
        torch.Size([16, 15, 8])
    """

    def __init__(
        self,
        world_model: nn.Module,
        prior_shape: Sequence[int],
        belief_shape: Sequence[int],
        obs_decoder: nn.Module | None = None,
        device: DeviceLike = "cpu",
        batch_size: ShapeLike | None = None,
        *,
        action_spec: TensorSpec | None = None,
        reward_spec: TensorSpec | None = None,
        state_key: NestedKey = STATE_KEY,
        belief_key: NestedKey = BELIEF_KEY,
        params: ParamsLike | None = None,
        buffers: ParamsLike | None = None,
        run_type_checks: bool = False,
        validate_actions: bool = True,
    ) -> None:
        super().__init__(
            world_model,
            params=params,
            buffers=buffers,
            device=device,
            batch_size=batch_size,
            run_type_checks=run_type_checks,
            # Start states come from real data, whose done flags say nothing of imagination.
            allow_done_after_reset=True,
            validate_actions=validate_actions,
        )
        self.prior_shape = torch.Size(prior_shape)
        self.belief_shape = torch.Size(belief_shape)
        self.obs_decoder = obs_decoder
        self.state_key = state_key
        self.belief_key = belief_key
        self._set_latent_specs(torch.float32)
        if action_spec is not None:
            self.action_spec = batched_spec(action_spec, self.batch_size, self.device)
        if reward_spec is not None:
            self.reward_spec = batched_spec(reward_spec, self.batch_size, self.device)

    def _set_latent_specs(self, dtype: torch.dtype) -> None:
        batch, device = self.batch_size, self.device
        latent = Composite(
            {
                self.state_key: Unbounded(shape=(*batch, *self.prior_shape), dtype=dtype),
                self.belief_key: Unbounded(shape=(*batch, *self.belief_shape), dtype=dtype),
            },
            shape=batch,
            device=device,
        )
        self.observation_spec = latent
        self.state_spec = latent.clone()

    def set_specs_from_env(self, env: EnvBase) -> None:
        """Takes the action, reward and done specs of the real env ``env``.

        The observations stay the latent ``"state"`` and ``"belief"``; when ``env`` declares
        them too (Dreamer's real env carries them), their shapes must be ``prior_shape`` and
        ``belief_shape``, and their dtype is taken.

        Args:
            env: the real env.

        Examples:
            >>> import torch
            >>> from tensordict.nn import TensorDictModule
            >>> from torchrl.envs import PendulumEnv
            >>> from torchrl.envs.model_based.dreamer import DreamerEnv
            >>> model = TensorDictModule(torch.nn.Identity(), ["state"], ["state"])
            >>> env = DreamerEnv(model, prior_shape=(4,), belief_shape=(8,))
            >>> env.set_specs_from_env(PendulumEnv())
            >>> env.action_spec.shape, sorted(env.observation_spec.keys())
            (torch.Size([1]), ['belief', 'state'])
        """
        if not isinstance(env, EnvBase):
            raise TypeError(
                f"DreamerEnv.set_specs_from_env needs an EnvBase, got {type(env).__name__}"
            )
        observed = env.full_observation_spec_unbatched
        dtype = torch.float32
        for key, shape in (
            (self.state_key, self.prior_shape),
            (self.belief_key, self.belief_shape),
        ):
            spec = observed.get(key, None)
            if spec is None:
                continue
            if spec.shape != shape:
                raise ValueError(
                    f"DreamerEnv: the real env's {key!r} spec has shape {list(spec.shape)} per "
                    f"sub-env, but this env was built with {list(shape)}"
                )
            dtype = spec.dtype or dtype
        batch, device = self.batch_size, self.device
        self.full_action_spec = batched_spec(env.full_action_spec_unbatched, batch, device)
        self.full_reward_spec = batched_spec(env.full_reward_spec_unbatched, batch, device)
        self.full_done_spec = batched_spec(env.full_done_spec_unbatched, batch, device)
        self._set_latent_specs(dtype)

    def sample_start_states(self, batch_size: torch.Size) -> TensorDictBase:
        """Zero latent states (the RSSM's initial state) for ``batch_size`` sub-envs.

        Args:
            batch_size: the batch size of the reset.

        Returns:
            A TensorDict with zero ``"state"`` and ``"belief"``.
        """
        lead = batch_size[: len(batch_size) - len(self.batch_size)]
        return self.full_observation_spec.zero(lead) if lead else self.full_observation_spec.zero()

    def decode_obs(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Decodes the latent states of ``tensordict`` with ``obs_decoder``.

        Args:
            tensordict: holds ``"state"`` and ``"belief"`` (any batch shape).

        Returns:
            ``tensordict`` with the decoder's output (``"reco_pixels"`` by default).
        """
        if self.obs_decoder is None:
            raise RuntimeError("DreamerEnv.decode_obs: this env was built without obs_decoder")
        return DreamerDecoder(self.obs_decoder)(tensordict)


class DreamerDecoder(Transform):
    """A transform writing the pixels decoded from Dreamer's latent state (``"reco_pixels"``).

    A ``TensorDictModule`` decoder is run on the data and writes its own ``out_keys``; another
    module is called as ``decoder(state, belief)`` and its output written to ``out_keys[0]``.
    Without ``decoder``, the ``obs_decoder`` of the env the transform is appended to (a
    :class:`DreamerEnv`) is used. The spec of the decoded pixels (``Unbounded``, float) is
    found by decoding zero states once.

    Args:
        decoder: the decoder module (``None``: the parent env's ``obs_decoder``).
        in_keys: the latent entries it reads (default: the decoder's ``in_keys``, else
            ``["state", "belief"]``).
        out_keys: where the pixels go (default: the decoder's ``out_keys``, else
            ``["reco_pixels"]``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.model_based.dreamer import DreamerDecoder
        >>> class Decoder(torch.nn.Module):
        ...     def forward(self, state, belief):
        ...         x = torch.cat([state, belief], -1).mean(-1)
        ...         return x[..., None, None, None].expand(*x.shape, 3, 8, 8)
        >>> decode = DreamerDecoder(Decoder())
        >>> td = TensorDict(state=torch.zeros(2, 4), belief=torch.ones(2, 6), batch_size=[2])
        >>> decode(td)["reco_pixels"].shape
        torch.Size([2, 3, 8, 8])
    """

    def __init__(
        self,
        decoder: nn.Module | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        if decoder is not None and not isinstance(decoder, nn.Module):
            raise TypeError(
                f"DreamerDecoder: decoder must be a torch.nn.Module, got {type(decoder).__name__}"
            )
        super().__init__()
        if isinstance(decoder, TensorDictModuleBase):
            default_in = [cast(NestedKey, k) for k in decoder.in_keys]
            default_out = [cast(NestedKey, k) for k in decoder.out_keys]
        else:
            default_in, default_out = [STATE_KEY, BELIEF_KEY], [RECO_PIXELS_KEY]
        latent_keys = list(in_keys) if in_keys is not None else default_in
        pixel_keys = list(out_keys) if out_keys is not None else default_out
        if not pixel_keys:
            raise ValueError("DreamerDecoder: out_keys is empty")
        self._in_keys = latent_keys
        self._out_keys = pixel_keys
        self._update_pairs()
        self.decoder = decoder

    def _update_pairs(self) -> None:
        # Several latent entries decode into one image: the keys are not paired one to one.
        self._pairs = []
        self._inv_pairs = []
        self.latent_keys: list[NestedKey] = list(self._in_keys)
        self.pixel_keys: list[NestedKey] = self.out_keys

    def _find_decoder(self) -> nn.Module:
        if self.decoder is not None:
            return self.decoder
        env = self.container
        while env is not None and getattr(env, "obs_decoder", None) is None:
            env = getattr(env, "base_env", None)
        if env is None:
            raise RuntimeError(
                "DreamerDecoder has no decoder: pass DreamerDecoder(decoder) or append it to a "
                "DreamerEnv built with obs_decoder"
            )
        return env.obs_decoder

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        decoder = self._find_decoder()
        missing = [k for k in self.latent_keys if next_tensordict.get(k, None) is None]
        if missing:
            if self.missing_tolerance:
                return next_tensordict
            raise KeyError(
                f"DreamerDecoder: the input lacks {missing} (it holds "
                f"{list(next_tensordict.keys(True, True))})"
            )
        if isinstance(decoder, TensorDictModuleBase):
            out = decoder(next_tensordict.select(*self.latent_keys))
            for key in self.pixel_keys:
                next_tensordict.set(key, out.get(key))
        else:
            pixels = decoder(*(next_tensordict.get(k) for k in self.latent_keys))
            next_tensordict.set(self.pixel_keys[0], pixels)
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        """Adds the decoded pixels' spec, found by decoding zero latent states."""
        missing = [k for k in self.latent_keys if observation_spec.get(k, None) is None]
        if missing:
            raise KeyError(
                f"DreamerDecoder: the env declares no {missing} observation to decode (its "
                f"observations: {list(observation_spec.keys(True, True))})"
            )
        shape = observation_spec.shape
        zeros = TensorDict(batch_size=shape, device=observation_spec.device)
        for key in self.latent_keys:
            zeros.set(key, observation_spec[key].zero())
        with torch.no_grad():
            decoded = self._call(zeros)
        for key in self.pixel_keys:
            value = decoded.get(key)
            observation_spec[key] = Unbounded(
                shape=value.shape, dtype=value.dtype, device=observation_spec.device
            )
        return observation_spec

    def extra_repr(self) -> str:
        return f"in_keys={self.latent_keys}, out_keys={self.pixel_keys}"
