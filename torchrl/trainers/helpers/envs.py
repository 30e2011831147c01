"""Environment builders driven by a config: transformed envs, parallel envs, observation stats."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from torchrl.trainers.helpers._cfg import cfg_value

if TYPE_CHECKING:
    from torchrl._types import NestedKey
    from torchrl.envs.common import EnvBase
    from torchrl.envs.env_creator import EnvCreator
    from torchrl.record.loggers.common import Logger

__all__ = [
    "EnvConfig",
    "correct_for_frame_skip",
    "get_stats_random_rollout",
    "parallel_env_constructor",
    "transformed_env_constructor",
]

#: The config fields that count frames, divided by ``frame_skip`` in :func:`correct_for_frame_skip`.
FRAME_COUNT_FIELDS = (
    "max_frames_per_traj",
    "total_frames",
    "frames_per_batch",
    "record_frames",
    "annealing_frames",
    "init_random_frames",
    "init_env_steps",
    "noops",
)


@dataclasses.dataclass
class EnvConfig:
    """The environment fields read by the env helpers (any object with these attributes works).

    Attributes:
        env_library: ``"gym"`` or ``"dm_control"``.
        env_name: the env id (gym) or domain (dm_control).
        env_task: the dm_control task.
        from_pixels: observe rendered images (``"pixels"``) instead of states.
        frame_skip: env frames per step.
        reward_scaling: a :class:`~torchrl.envs.RewardScaling` factor (``None``: none).
        reward_loc: the :class:`~torchrl.envs.RewardScaling` shift.
        init_env_steps: frames of the random rollout of :func:`get_stats_random_rollout`.
        vecnorm: normalize observations with running statistics (:class:`~torchrl.envs.VecNorm`).
        norm_rewards: with ``vecnorm``, normalize the reward too.
        norm_stats: whether a script should compute fixed observation statistics (with
            :func:`get_stats_random_rollout`) and pass them as ``stats``.
        noops: random no-op steps after each reset (:class:`~torchrl.envs.NoopResetEnv`).
        catframes: stack this many frames of pixels (``0``: none).
        center_crop: crop pixels to ``[w]`` or ``[w, h]`` (empty: no crop).
        max_frames_per_traj: truncate episodes after this many steps (``<= 0``: never).
        image_size: the side of resized pixels.
        grayscale: convert pixels to grayscale.
        categorical_action_encoding: categorical (index) actions instead of one-hot.
        device: the device of the envs.

    Examples:
        >>> from torchrl.trainers.helpers import transformed_env_constructor
        >>> cfg = EnvConfig(env_name="Pendulum-v1", max_frames_per_traj=2)
        >>> env = transformed_env_constructor(cfg)()
        >>> rollout = env.rollout(5)  # stops at the step limit
        >>> rollout["observation"].shape, rollout["next", "truncated"].squeeze(-1).tolist()
        (torch.Size([2, 3]), [False, True])
    """

    env_library: str = "gym"
    env_name: str = "CartPole-v1"
    env_task: str = ""
    from_pixels: bool = False
    frame_skip: int = 1
    reward_scaling: float | None = None
    reward_loc: float = 0.0
    init_env_steps: int = 1000
    vecnorm: bool = False
    norm_rewards: bool = False
    norm_stats: bool = True
    noops: int = 0
    catframes: int = 0
    center_crop: list[int] = dataclasses.field(default_factory=list)
    max_frames_per_traj: int = 1000
    image_size: int = 84
    grayscale: bool = True
    categorical_action_encoding: bool = False
    device: str = "cpu"


def _get(cfg: Any, name: str) -> Any:
    return cfg_value(cfg, name, EnvConfig)


def correct_for_frame_skip(cfg: Any) -> Any:
    """Divides every frame-counting field of ``cfg`` by ``cfg.frame_skip``, in place.

    A run targeting 1M frames with ``frame_skip=4`` then collects 250k steps (1M env frames)
    instead of 4M frames. The fields are those of ``FRAME_COUNT_FIELDS`` that ``cfg`` has
    (``total_frames``, ``frames_per_batch``, ``max_frames_per_traj``, ``record_frames``,
    ``annealing_frames``, ``init_random_frames``, ``init_env_steps``, ``noops``); integer
    division, ``None`` values are kept.

    Args:
        cfg: an object with ``frame_skip`` and frame-count attributes.

    Returns:
        ``cfg`` itself.

    Examples:
        >>> cfg = EnvConfig(frame_skip=4, init_env_steps=1000)
        >>> correct_for_frame_skip(cfg).init_env_steps
        250
    """
    frame_skip = int(_get(cfg, "frame_skip"))
    if frame_skip < 1:
        raise ValueError(f"correct_for_frame_skip: frame_skip must be >= 1, got {frame_skip}")
    if frame_skip == 1:
        return cfg
    for name in FRAME_COUNT_FIELDS:
        value = getattr(cfg, name, None)
        if value is not None:
            setattr(cfg, name, int(value) // frame_skip)
    return cfg


def _base_env(cfg: Any, env_kwargs: dict[str, Any]) -> EnvBase:
    library = _get(cfg, "env_library")
    if library == "gym":
        from torchrl.envs.libs.gym import GymEnv

        return GymEnv(_get(cfg, "env_name"), **env_kwargs)
    if library == "dm_control":
        from torchrl.envs.libs.dm_control import DMControlEnv

        env_kwargs.pop("categorical_action_encoding", None)
        return DMControlEnv(_get(cfg, "env_name"), _get(cfg, "env_task"), **env_kwargs)
    raise ValueError(f"env_library must be 'gym' or 'dm_control', got {library!r}")


def _make_transformed_env(
    cfg: Any,
    video_tag: str,
    logger: Logger | None,
    stats: dict[str, Any] | None,
    norm_obs_only: bool,
    custom_env_maker: Callable[..., EnvBase] | None,
    custom_env: EnvBase | None,
    return_transformed_envs: bool,
    action_dim_gsde: int | None,
    state_dim_gsde: int | None,
    obs_norm_state_dict: dict[str, Any] | None,
    **kwargs: Any,
) -> EnvBase:
    from torchrl.envs.transforms import (
        CatFrames,
        CenterCrop,
        Compose,
        GrayScale,
        InitTracker,
        NoopResetEnv,
        ObservationNorm,
        Resize,
        RewardScaling,
        StepCounter,
        ToTensorImage,
        TransformedEnv,
        VecNorm,
        gSDENoise,
    )

    from_pixels = bool(_get(cfg, "from_pixels"))
    env_kwargs: dict[str, Any] = {
        "device": _get(cfg, "device"),
        "frame_skip": _get(cfg, "frame_skip"),
        "from_pixels": from_pixels,
        "pixels_only": from_pixels,
        "categorical_action_encoding": _get(cfg, "categorical_action_encoding"),
    }
    env_kwargs.update(kwargs)
    if custom_env is not None:
        env = custom_env
    elif custom_env_maker is not None:
        env = custom_env_maker(**env_kwargs)
    else:
        env = _base_env(cfg, env_kwargs)
    if not return_transformed_envs:
        return env

    transforms: list[Any] = []
    if logger is not None and video_tag and from_pixels:
        from torchrl.record import VideoRecorder

        transforms.append(VideoRecorder(logger, tag=video_tag, in_keys=["pixels"]))
    noops = int(_get(cfg, "noops"))
    if noops > 0:
        transforms.append(NoopResetEnv(noops))
    obs_key = "pixels" if from_pixels else "observation"
    if from_pixels:
        size = int(_get(cfg, "image_size"))
        transforms += [ToTensorImage(in_keys=[obs_key]), Resize(size, size, in_keys=[obs_key])]
        if _get(cfg, "grayscale"):
            transforms.append(GrayScale(in_keys=[obs_key]))
        crop = [int(c) for c in (_get(cfg, "center_crop") or [])]
        if crop:
            transforms.append(
                CenterCrop(crop[0], crop[1] if len(crop) > 1 else None, in_keys=[obs_key])
            )
        if int(_get(cfg, "catframes")) > 0:
            transforms.append(CatFrames(N=int(_get(cfg, "catframes")), dim=-3, in_keys=[obs_key]))
    reward_scaling = _get(cfg, "reward_scaling")
    if reward_scaling is not None:
        transforms.append(RewardScaling(float(_get(cfg, "reward_loc")), float(reward_scaling)))
    if _get(cfg, "vecnorm"):
        keys: list[Any] = [obs_key]
        if _get(cfg, "norm_rewards") and not norm_obs_only:
            keys.append("reward")
        transforms.append(VecNorm(in_keys=keys, decay=0.9999))
    elif stats is not None or obs_norm_state_dict is not None:
        # A saved state wins over stats; unset (None) statistics are not buffers yet, so the
        # state's tensors are passed to the constructor rather than loaded afterwards.
        source = dict(stats or {})
        source.update(obs_norm_state_dict or {})
        transforms.append(
            ObservationNorm(
                loc=source.get("loc"),
                scale=source.get("scale"),
                in_keys=[obs_key],
                standard_normal=True,
            )
        )
    if action_dim_gsde is not None:
        transforms.append(gSDENoise(action_dim=action_dim_gsde, state_dim=state_dim_gsde))
    max_steps = _get(cfg, "max_frames_per_traj")
    if max_steps is not None and int(max_steps) > 0:
        transforms.append(StepCounter(max_steps=int(max_steps)))
    transforms.append(InitTracker())
    return TransformedEnv(env, Compose(*transforms))


def transformed_env_constructor(
    cfg: Any,
    video_tag: str = "",
    logger: Logger | None = None,
    stats: dict[str, Any] | None = None,
    norm_obs_only: bool = False,
    use_env_creator: bool = False,
    custom_env_maker: Callable[..., EnvBase] | None = None,
    custom_env: EnvBase | None = None,
    return_transformed_envs: bool = True,
    action_dim_gsde: int | None = None,
    state_dim_gsde: int | None = None,
    batch_dims: int | None = 0,
    obs_norm_state_dict: dict[str, Any] | None = None,
) -> Callable[..., EnvBase] | EnvCreator:
    """Returns a constructor of the env described by ``cfg`` (see :class:`EnvConfig`), transformed.

    The env comes from ``cfg.env_library`` (``GymEnv``/``DMControlEnv``), ``custom_env_maker``
    (called with the env keywords ``device``, ``frame_skip``, ``from_pixels``, ``pixels_only``,
    ``categorical_action_encoding``) or ``custom_env``. The transforms, in order: a video
    recorder (pixels with a ``logger`` and ``video_tag``), ``NoopResetEnv`` (``noops``), the pixel
    pipeline (``ToTensorImage``, ``Resize``, ``GrayScale``, ``CenterCrop``, ``CatFrames``),
    ``RewardScaling``, ``VecNorm`` (``vecnorm``) or a standard-normal ``ObservationNorm`` (when
    ``stats`` or ``obs_norm_state_dict`` is given), ``gSDENoise`` (``action_dim_gsde``),
    ``StepCounter`` (``max_frames_per_traj``) and ``InitTracker``. The constructor pickles when
    ``cfg`` does (a ``functools.partial`` of a module function).

    Args:
        cfg: the config.
        video_tag: the tag of the recorded videos.
        logger: the logger the videos go to.
        stats: ``{"loc": ..., "scale": ...}`` of the observation (see
            :func:`get_stats_random_rollout`).
        norm_obs_only: with ``vecnorm`` and ``norm_rewards``, leave the reward alone.
        use_env_creator: return an :class:`~torchrl.envs.EnvCreator` (shared-memory statistics
            across workers) instead of a plain callable.
        custom_env_maker: builds the base env instead of ``cfg.env_library``.
        custom_env: the base env itself (each call transforms that same env).
        return_transformed_envs: ``False`` returns the base env, without transforms.
        action_dim_gsde: action size of a ``gSDENoise`` transform (``None``: none).
        state_dim_gsde: state size of that transform.
        batch_dims: kept for TorchRL compatibility (the stats carry their own shape).
        obs_norm_state_dict: a saved ``ObservationNorm`` state to load.

    Returns:
        A callable returning the env (keywords override the env keywords), or an ``EnvCreator``.

    Examples:
        >>> make_env = transformed_env_constructor(EnvConfig(env_name="CartPole-v1"))
        >>> env = make_env()
        >>> env.rollout(3)["observation"].shape
        torch.Size([3, 4])
    """
    del batch_dims
    make = functools.partial(
        _make_transformed_env,
        cfg,
        video_tag,
        logger,
        stats,
        norm_obs_only,
        custom_env_maker,
        custom_env,
        return_transformed_envs,
        action_dim_gsde,
        state_dim_gsde,
        obs_norm_state_dict,
    )
    if use_env_creator:
        from torchrl.envs.env_creator import EnvCreator

        return EnvCreator(make)
    return make


def parallel_env_constructor(
    cfg: Any, **kwargs: Any
) -> EnvBase | Callable[..., EnvBase] | EnvCreator:
    """Returns ``cfg.env_per_collector`` transformed envs in a :class:`~torchrl.envs.ParallelEnv`.

    With ``env_per_collector == 1`` the (single) env's :class:`~torchrl.envs.EnvCreator` is
    returned instead, as no worker process is needed.

    Args:
        cfg: the config (:class:`EnvConfig` fields plus ``env_per_collector``).
        **kwargs: passed to :func:`transformed_env_constructor` (``use_env_creator`` is set).

    Returns:
        The ``ParallelEnv`` (batch ``[env_per_collector]``), or an ``EnvCreator``.

    Examples:
        >>> import types
        >>> cfg = types.SimpleNamespace(env_name="CartPole-v1", env_per_collector=2)
        >>> env = parallel_env_constructor(cfg)
        >>> env.batch_size
        torch.Size([2])
        >>> env.close()
    """
    num = int(getattr(cfg, "env_per_collector", 1))
    if num < 1:
        raise ValueError(f"parallel_env_constructor: env_per_collector must be >= 1, got {num}")
    kwargs["use_env_creator"] = True
    creator = transformed_env_constructor(cfg, **kwargs)
    if num == 1:
        return creator
    from torchrl.envs.batched import ParallelEnv

    return ParallelEnv(num, creator)


def get_stats_random_rollout(
    cfg: Any, proof_environment: EnvBase | None = None, key: NestedKey | None = None
) -> dict[str, torch.Tensor]:
    """The mean (``loc``) and std (``scale``) of an observation over a random rollout.

    The rollout takes ``cfg.init_env_steps`` frames in all (divided among the sub-envs of a
    batched env) with random actions, resetting finished episodes. Statistics are taken over
    the batch and time dims, and for images (3 or more feature dims) over height and width too,
    so that ``loc``/``scale`` have shape ``[C, 1, 1]``. ``scale`` is at least ``1e-4``. They
    suit a standard-normal :class:`~torchrl.envs.ObservationNorm` (``stats=`` of
    :func:`transformed_env_constructor`).

    Args:
        cfg: a config with ``init_env_steps`` (and the :class:`EnvConfig` fields when
            ``proof_environment`` is not given).
        proof_environment: the env to roll out (default: one built from ``cfg``, then closed).
        key: the observation entry (default: the env's only floating-point observation).

    Returns:
        ``{"loc": tensor, "scale": tensor}``.

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv
        >>> cfg = EnvConfig(init_env_steps=50)
        >>> stats = get_stats_random_rollout(cfg, PendulumEnv(), key="observation")
        >>> stats["loc"].shape, bool((stats["scale"] > 0).all())
        (torch.Size([3]), True)
    """
    steps = int(_get(cfg, "init_env_steps"))
    if steps < 1:
        raise ValueError(f"get_stats_random_rollout: init_env_steps must be >= 1, got {steps}")
    env = proof_environment
    if env is None:
        made = transformed_env_constructor(cfg, use_env_creator=False)()
        env = made
    try:
        if key is None:
            candidates = [
                k
                for k, spec in env.observation_spec.items(True, True)
                if spec.dtype is not None and spec.dtype.is_floating_point
            ]
            if len(candidates) != 1:
                raise ValueError(
                    "get_stats_random_rollout: pass key=, the env has "
                    f"{len(candidates)} floating-point observations: {candidates}"
                )
            key = candidates[0]
        per_env = math.ceil(steps / max(env.batch_size.numel(), 1))
        with torch.no_grad():
            rollout = env.rollout(max_steps=per_env, break_when_any_done=False)
        values = rollout.get(key).float()
    finally:
        if proof_environment is None:
            env.close()
    dims = list(range(rollout.ndim))
    feature_ndim = values.ndim - rollout.ndim
    if feature_ndim >= 3:
        dims += [values.ndim - 2, values.ndim - 1]
    loc = values.mean(dim=dims)
    scale = values.std(dim=dims).clamp_min(1e-4)
    if feature_ndim >= 3:
        loc = loc.reshape(*loc.shape, 1, 1)
        scale = scale.reshape(*scale.shape, 1, 1)
    return {"loc": loc, "scale": scale}
