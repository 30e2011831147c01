"""``TransformedEnv``: an env seen through transforms.

It computes its specs once (the base specs through every transform) and keeps the per-step path
to: one inverse pass (only when a transform has inverse keys), the base env's ``_step``, and the
transforms that act on steps, each reading and writing a few entries.
"""

from __future__ import annotations

import textwrap
import weakref
from collections.abc import Sequence
from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import NEXT
from torchrl._utils import auto_unwrap_transformed_env
from torchrl.data.specs import Composite, TensorSpec
from torchrl.envs._writes import STEP_MASK, step_mask
from torchrl.envs.common import EnvBase
from torchrl.envs.transforms._utils import shallow_copy
from torchrl.envs.transforms.base import Compose, Transform

__all__ = ["TransformedEnv"]


class TransformedEnv(EnvBase):
    """An env seen through transforms: the base env's data and specs, rewritten.

    Specs are computed once from the base env's specs through every transform, and again after
    :meth:`append_transform` / :meth:`insert_transform` or :meth:`empty_cache` (call it after
    changing the base env's specs). Set specs on ``env.base_env``, not here.

    Args:
        env: the base env.
        transform: a transform or a ``Compose`` (default: an empty ``Compose``).
        cache_specs: keep the transformed specs (``False``: recompute them on every access).
        validate_actions: check the actions that reach the base env (after the inverse
            transforms, so that a transform may project them, as ``ClipTransform`` does) against
            the base env's action spec, once per step (``None``: as the base env does).
        auto_unwrap: when ``env`` is itself a ``TransformedEnv``, take over its base env and its
            transforms (they run first, then ``transform``) instead of nesting the two envs; the
            inner env should not be used afterwards (``None``: the value of
            :func:`torchrl.auto_unwrap_transformed_env`, ``True`` unless set otherwise).

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import RewardSum, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(batch_size=[4], seed=0), StepCounter(max_steps=5))
        >>> env.append_transform(RewardSum())
        TransformedEnv(...)
        >>> sorted(env.observation_spec.keys())
        ['episode_reward', 'observation', 'params', 'step_count', 'th', 'thdot']
        >>> check_env_specs(env)
        >>> env.rollout(10).batch_size  # truncated after 5 steps
        torch.Size([4, 5])
    """

    def __init__(
        self,
        env: EnvBase,
        transform: Transform | None = None,
        cache_specs: bool = True,
        *,
        validate_actions: bool | None = None,
        auto_unwrap: bool | None = None,
        _adopt: bool = True,
    ) -> None:
        if not isinstance(env, EnvBase):
            raise TypeError(f"TransformedEnv wraps an EnvBase, got {type(env).__name__}")
        if isinstance(env, TransformedEnv) and _adopt:
            if auto_unwrap is None:
                auto_unwrap = bool(auto_unwrap_transformed_env())
            if auto_unwrap:
                env, transform = env._unwrapped_with(transform)
        super().__init__(
            device=env.device,
            batch_size=env.batch_size,
            allow_done_after_reset=env.allow_done_after_reset,
            validate_actions=env.validate_actions if validate_actions is None else validate_actions,
        )
        # Registered as children directly: the ``base_env`` and ``transform`` properties read them.
        self._modules["base_env"] = env
        self.batch_locked = env.batch_locked
        self.cache_specs = cache_specs
        self._adopt = _adopt
        # Like TorchRL, ``env.transform`` is the transform given (a bare one stays bare) until
        # another is appended or inserted; a Compose always runs the chain internally. The
        # Compose wrapping a bare transform is remembered here (a tuple: not a registered child).
        self._wrapper: tuple[Compose, ...] = ()
        if transform is None:
            transform = Compose()
        elif not isinstance(transform, Compose):
            if not isinstance(transform, Transform):
                raise TypeError(
                    f"TransformedEnv takes a Transform or a Compose, got {type(transform).__name__}"
                )
            transform = Compose(transform)
            self._wrapper = (transform,)
        if _adopt:
            transform.set_container(self)
        self._modules["transform"] = transform
        # A tuple: a Module attribute would register the Compose a second time.
        self._active: tuple[Compose, ...] = ()
        # The base env's own step/reset, when they are EnvBase's, are replaced by their
        # inner hooks plus done completion: this skips one "next" round trip per step.
        base_cls = type(env)
        self._base_plain_step = base_cls.step is EnvBase.step
        self._base_plain_reset = base_cls.reset is EnvBase.reset
        self._refresh_specs()

    # ------------------------------------------------------------------------------ specs
    def _refresh_specs(self) -> None:
        current = self._modules["transform"]
        if isinstance(current, Compose):
            compose = current
        elif isinstance(current, Transform):
            # Someone assigned a bare transform to ``env.transform``.
            compose = Compose(current)
            self._modules["transform"] = compose
            self._wrapper = (compose,)
        else:
            raise TypeError(
                f"TransformedEnv.transform must be a Transform, got {type(current).__name__}"
            )
        if self._adopt and compose._container() is not self:
            compose.set_container(self)
        base = self.base_env
        output_spec = compose.transform_output_spec(base.output_spec.clone())
        input_spec = compose.transform_input_spec(base.input_spec.clone())
        for name, spec in (("output_spec", output_spec), ("input_spec", input_spec)):
            if not isinstance(spec, Composite):
                raise TypeError(f"the transforms turned {name} into a {type(spec).__name__}")
        self._output_spec = output_spec
        self._input_spec = input_spec
        # Most transforms keep the base env's batch size and device (a couple of hook calls).
        self._batch_size = torch.Size(compose.transform_env_batch_size(base.batch_size))
        self._device = compose.transform_env_device(base.device)
        compose._prepare()
        compose._clear_parent_cache()
        self._active = (compose,)
        EnvBase.empty_cache(self)

    def _view_through(self, transforms: Sequence[Transform]) -> TransformedEnv:
        """The base env seen through ``transforms`` only: a view sharing them (``Transform.parent``)."""
        return TransformedEnv(self.base_env, Compose._view(transforms), _adopt=False)

    def _fresh(self) -> None:
        if (
            not self.cache_specs
            or not self._active
            or self._active[0] is not self._modules["transform"]
        ):
            self._refresh_specs()

    def empty_cache(self) -> None:
        """Recomputes the specs from the base env's (after they changed) and the key lists."""
        EnvBase.empty_cache(self)
        self._active = ()

    def _read_only(self, name: str) -> None:
        raise AttributeError(
            f"TransformedEnv.{name} is computed from the base env and the transforms: set "
            f"it on env.base_env, then call env.empty_cache()"
        )

    def _unwrapped_with(self, transform: Transform | None) -> tuple[EnvBase, Compose]:
        """This env's base env and its transforms followed by ``transform``, detached from here."""
        inner = list(self.transform) if isinstance(self.transform, Compose) else [self.transform]
        outer: list[Transform] = []
        if isinstance(transform, Compose):
            outer = list(transform)
        elif transform is not None:
            outer = [transform]
        for t in (*inner, *outer):
            t.reset_parent()
        return self.base_env, Compose(*inner, *outer)

    @property
    def output_spec(self) -> Composite:
        """The transformed ``output_spec`` (read-only)."""
        self._fresh()
        return self._output_spec

    @output_spec.setter
    def output_spec(self, value: Composite) -> None:
        self._read_only("output_spec")

    @property
    def input_spec(self) -> Composite:
        """The transformed ``input_spec`` (read-only)."""
        self._fresh()
        return self._input_spec

    @input_spec.setter
    def input_spec(self, value: Composite) -> None:
        self._read_only("input_spec")

    @property
    def full_observation_spec(self) -> Composite:
        """The transformed observation specs (read-only)."""
        return self.output_spec["full_observation_spec"]

    @full_observation_spec.setter
    def full_observation_spec(self, value: TensorSpec) -> None:
        self._read_only("observation_spec")

    @property
    def full_reward_spec(self) -> Composite:
        """The transformed reward specs (read-only)."""
        return self.output_spec["full_reward_spec"]

    @full_reward_spec.setter
    def full_reward_spec(self, value: TensorSpec) -> None:
        self._read_only("reward_spec")

    @property
    def full_done_spec(self) -> Composite:
        """The transformed done specs (read-only)."""
        return self.output_spec["full_done_spec"]

    @full_done_spec.setter
    def full_done_spec(self, value: TensorSpec) -> None:
        self._read_only("done_spec")

    @property
    def full_action_spec(self) -> Composite:
        """The transformed action specs (read-only)."""
        return self.input_spec["full_action_spec"]

    @full_action_spec.setter
    def full_action_spec(self, value: TensorSpec) -> None:
        self._read_only("action_spec")

    @property
    def full_state_spec(self) -> Composite:
        """The transformed state specs (read-only)."""
        return self.input_spec["full_state_spec"]

    @full_state_spec.setter
    def full_state_spec(self, value: TensorSpec) -> None:
        self._read_only("state_spec")

    # ---------------------------------------------------------------------- transforms
    @property
    def transform(self) -> Transform:
        """The transform: the one given, or a ``Compose`` (always after an append or insert).

        Assigning a transform or a Compose replaces it.
        """
        compose = self._compose_now()
        wrapped = self._wrapper and self._wrapper[0] is compose and len(compose._ts) == 1
        return compose._ts[0] if wrapped else compose

    @property
    def base_env(self) -> EnvBase:
        """The env the transforms wrap."""
        return cast(EnvBase, self._modules["base_env"])

    def __getattr__(self, name: str) -> Any:
        """Looks an unknown public attribute up on the base env (a custom method or field).

        Only called when the normal lookup fails, so it costs nothing on the step path. Private
        and dunder names are not forwarded: a missing one is a bug here, not a base-env field.
        """
        try:
            return super().__getattr__(name)
        except AttributeError as err:
            # ``__dict__`` directly: during unpickling or before ``__init__`` sets the base env,
            # going through ``self._modules`` would recurse into this method.
            modules = self.__dict__.get("_modules")
            base = modules.get("base_env") if modules is not None else None
            if base is None or name.startswith("_"):
                raise
            try:
                return getattr(base, name)
            except AttributeError:
                raise AttributeError(
                    f"{type(self).__name__} and its base env {type(base).__name__} have no "
                    f"attribute {name!r}"
                ) from err

    def append_transform(self, transform: Transform) -> TransformedEnv:
        """Adds a transform after the existing ones and recomputes the specs.

        Args:
            transform: the transform; it must not belong to another env or Compose.

        Returns:
            The env itself.
        """
        self._fresh()
        self._wrapper = ()
        self._compose_now().append(transform)
        return self

    def insert_transform(self, index: int, transform: Transform) -> TransformedEnv:
        """Inserts a transform before position ``index`` and recomputes the specs.

        Args:
            index: the position in the chain (``0``: right after the base env).
            transform: the transform; it must not belong to another env or Compose.

        Returns:
            The env itself.
        """
        self._fresh()
        self._wrapper = ()
        self._compose_now().insert(index, transform)
        return self

    # ------------------------------------------------------------------------- stepping
    def _compose_now(self) -> Compose:
        active = self._active
        if not active or active[0] is not self._modules["transform"]:
            self._refresh_specs()
            active = self._active
        return active[0]

    def _make_action_check(self, action_keys: list[Any]) -> None:
        # Actions are checked in _step, where they reach the base env (see validate_actions).
        return None

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        compose = self._compose_now()
        td_in = compose.inv(tensordict) if compose._inv_list else tensordict
        base: EnvBase = self._modules["base_env"]  # type: ignore[assignment]
        # An inverse (ConditionalSkip) may have set a step mask: then base.step honours it.
        if self._base_plain_step and (td_in is tensordict or td_in.get(STEP_MASK, None) is None):
            if self.validate_actions:
                check = (base._cache or base._spec_cache()).check_actions
                if check is not None:
                    check(td_in)
            next_td = base._step(td_in)
            cache = base._cache or base._spec_cache()
            cache.done_groups.complete(next_td)
            if base.run_type_checks:
                base._type_check(next_td, "step()", next_=True)
        else:
            next_td = base.step(td_in).get(NEXT)
        if compose._step_list:
            next_td = compose._step(tensordict, next_td)
        return next_td

    def _step_masked(self, tensordict: TensorDictBase, mask: torch.Tensor) -> TensorDictBase:
        # The base env gets the mask and steps the marked sub-envs only; the transforms then
        # see every sub-env, and EnvBase.step puts back the skipped ones' entries.
        compose = self._compose_now()
        td_in = compose.inv(tensordict) if compose._inv_list else shallow_copy(tensordict)
        previous = td_in.get(STEP_MASK, None)
        if previous is not None:  # an inverse set its own mask too: step where both say so
            mask = mask & step_mask(type(self).__name__, previous, mask.shape)
        td_in.set(STEP_MASK, mask)
        base: EnvBase = self._modules["base_env"]  # type: ignore[assignment]
        next_td = base.step(td_in).get(NEXT)
        if compose._step_list:
            next_td = compose._step(tensordict, next_td)
        return next_td

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        compose = self._compose_now()
        base: EnvBase = self._modules["base_env"]  # type: ignore[assignment]
        # A copy: the base env may write into its input, and the reset output must be a new
        # TensorDict so that EnvBase.reset keeps the entries of sub-envs that were not reset.
        td_in = shallow_copy(tensordict) if tensordict is not None else None
        if compose._pre_reset_list:
            # Only an input that was given is passed on (a base env may treat None specially).
            pre = compose._reset_env_preprocess(
                td_in if td_in is not None else TensorDict(batch_size=self.batch_size)
            )
            if td_in is not None:
                td_in = pre
        if self._base_plain_reset:
            out = base._reset(td_in, **kwargs)
            if not isinstance(out, TensorDictBase):
                raise TypeError(
                    f"{type(base).__name__}._reset must return a TensorDict, got "
                    f"{type(out).__name__}"
                )
            cache = base._cache or base._spec_cache()
            cache.done_groups.complete(out)
            if base.run_type_checks:
                base._type_check(out, "reset()", next_=False)
        else:
            out = base.reset(td_in, **kwargs)
        if compose._reset_list:
            if tensordict is None:
                tensordict = TensorDict(batch_size=out.batch_size, device=out.device)
            out = compose._reset(tensordict, out)
        return out

    def _set_seed(self, seed: int | None) -> None:
        self.base_env._set_seed(seed)

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int:
        """Seeds the base env (see :meth:`EnvBase.set_seed`).

        Returns:
            The seed for the next env of a chain, as the base env computes it.
        """
        return self.base_env.set_seed(seed, static_seed=static_seed)

    def _close(self) -> None:
        self.base_env.close()

    def to(self, *args: Any, **kwargs: Any) -> TransformedEnv:
        """Moves the base env, the transforms and the specs to a device.

        Returns:
            The env itself.
        """
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is not None:
            raise TypeError("TransformedEnv.to() moves between devices only, not dtypes")
        if device is None:
            return self
        base = self.base_env.to(device)
        self._compose_now().to(device)
        self._device = base.device
        self._refresh_specs()
        return self

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        transform = self._modules["transform"]
        if self._adopt and isinstance(transform, Transform):
            transform._container_ref = weakref.ref(self)

    def __repr__(self) -> str:
        compose = self._modules["transform"]
        transforms = compose._ts if isinstance(compose, Compose) else (compose,)
        inner = ",\n".join(textwrap.indent(repr(t), " " * 8) for t in transforms)
        env = textwrap.indent(repr(self.base_env), " " * 4).lstrip()
        return f"TransformedEnv(\n    env={env},\n    transform=Compose(\n{inner}))"
