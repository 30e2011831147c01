"""Atari 2600 games through ``ale-py`` (or envpool), with the DQN/PPO preprocessing as transforms.

``ale-py`` ships its ROMs, so ``GymEnv("ALE/Pong-v5")`` runs offline once the ``ALE/`` ids are
registered with gymnasium (:func:`register_ale_envs`). :func:`make_atari_env` builds the
standard pipeline (Mnih et al. 2015; Machado et al. 2018) out of our transforms:

* inside each game (a single env), in numpy before the gymnasium env reaches
  :class:`~torchrl.envs.GymWrapper`: up to ``noop_max`` NOOP frames after a reset, each
  action repeated ``frame_skip`` times with the max over the last two frames, and the grey
  screen resized to 84x84 with OpenCV's area interpolation, as gymnasium's
  ``AtariPreprocessing`` does (the emulator's screens read into preallocated arrays, no
  TensorDict per frame; :class:`~torchrl.envs.transforms.NoopResetEnv`,
  :class:`~torchrl.envs.transforms.atari.MaxPoolFrameSkip` and
  :class:`~torchrl.envs.transforms.Resize` are the same steps as transforms, for any env); the
  lives left are an observation (``"lives"``);
* on the batch of games (:class:`~torchrl.envs.SerialEnv`, which steps plain gymnasium games
  in one batched call with one TensorDict per step, or :class:`~torchrl.envs.ParallelEnv`):
  :class:`~torchrl.envs.transforms.EndOfLifeTransform` (``"end-of-life"``: a life was lost),
  :class:`~torchrl.envs.transforms.ToTensorImage` (with ``obs_type="rgb"``: then
  :class:`~torchrl.envs.transforms.GrayScale` and :class:`~torchrl.envs.transforms.Resize`),
  :class:`~torchrl.envs.transforms.CatFrames` (the last 4 frames) and
  :class:`~torchrl.envs.transforms.SignTransform` (reward clipping).

With ``backend="envpool"`` the games run in envpool's C++ thread pool, which does the same
preprocessing itself (its ``episodic_life`` makes a lost life ``done``); only the scaling to
``[0, 1]`` and the reward clipping are our transforms there.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from torchrl._keys import OBSERVATION, PIXELS, REWARD
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.envs.batched import ParallelEnv, SerialEnv
from torchrl.envs.common import EnvBase
from torchrl.envs.libs.gym import GymWrapper, register_ale_envs
from torchrl.envs.transforms import (
    CatFrames,
    Compose,
    EndOfLifeTransform,
    ExcludeTransform,
    GrayScale,
    Resize,
    RewardSum,
    SignTransform,
    ToTensorImage,
    Transform,
    TransformedEnv,
    UnsqueezeTransform,
)

__all__ = ["atari_game_env", "make_atari_env", "register_ale_envs"]

_has_ale = has_module("ale_py")

_ALE_PREFIX = "ALE/"


def _ale_id(env_name: str) -> str:
    if not isinstance(env_name, str) or not env_name:
        raise TypeError(f"make_atari_env: env_name must be a game id string, got {env_name!r}")
    return env_name if env_name.startswith(_ALE_PREFIX) else _ALE_PREFIX + env_name


def atari_game_env(
    env_name: str = "ALE/Pong-v5",
    *,
    frame_skip: int = 4,
    noop_max: int = 30,
    episodic_life: bool = True,
    repeat_action_probability: float = 0.25,
    full_action_space: bool = False,
    max_episode_frames: int = 108_000,
    obs_type: Literal["rgb", "grayscale"] = "grayscale",
    screen_size: int | None = None,
    device: DeviceLike = "cpu",
) -> TransformedEnv:
    """One Atari game with the per-game preprocessing (no-op reset, frame skip, end of life).

    The game runs with ``frameskip=1`` in ALE; the no-op starts, the repeated, max-pooled
    frames and the resize run in numpy (and OpenCV) inside the gymnasium env, on the emulator's
    screens (no TensorDict per emulator frame), then :class:`~torchrl.envs.GymWrapper` wraps
    it. Its observation is ALE's grey screen (uint8 ``[210, 160]`` under ``"observation"``), or
    the RGB screen (``[210, 160, 3]``) with ``obs_type="rgb"``, or either resized to
    ``[screen_size, screen_size]`` with OpenCV's area interpolation (as gymnasium's
    ``AtariPreprocessing``); actions are indices (``Categorical``). :func:`make_atari_env`
    batches these. With ``episodic_life``, the game writes its lives (``"lives"``) and
    :class:`~torchrl.envs.transforms.EndOfLifeTransform` adds ``"end-of-life"``.

    Args:
        env_name: the ALE id (``"ALE/Pong-v5"``; the ``ALE/`` prefix may be left out).
        frame_skip: emulator frames per step (the action is repeated, rewards summed).
        noop_max: the largest number of NOOP frames after a reset, drawn uniformly from
            ``[0, noop_max]`` with the game's generator (``0``: none).
        episodic_life: add ``"lives"`` and ``"end-of-life"`` (a life lost, or the game over).
        repeat_action_probability: ALE's sticky actions (0.25 in v5; 0 for the 2015 protocol).
        full_action_space: use all 18 actions instead of the game's minimal set.
        max_episode_frames: ALE's cap on emulator frames per episode (truncation).
        obs_type: ``"grayscale"`` (ALE's grey screen) or ``"rgb"`` (the colour screen).
        screen_size: resize the max-pooled screens to this square side (``None``: keep
            ``210x160``; needs ``opencv-python-headless``, in the ``atari`` extra).
        device: the device of the output tensors.

    Returns:
        A :class:`~torchrl.envs.TransformedEnv` of batch ``[]``.

    Examples:
        >>> from torchrl.envs.libs.atari import atari_game_env
        >>> env = atari_game_env("ALE/Pong-v5")  # doctest: +SKIP
        >>> env.rollout(3)["next", "observation"].shape  # doctest: +SKIP
        torch.Size([3, 210, 160])
    """
    base = _game(
        env_name,
        frame_skip=frame_skip,
        noop_max=noop_max,
        lives=episodic_life,
        repeat_action_probability=repeat_action_probability,
        full_action_space=full_action_space,
        max_episode_frames=max_episode_frames,
        obs_type=obs_type,
        screen_size=screen_size,
        device=device,
    )
    transforms: list[Transform] = []
    if episodic_life:
        transforms.append(EndOfLifeTransform(eol_attribute=None))
    return TransformedEnv(base, Compose(*transforms))


def _game(
    env_name: str,
    *,
    frame_skip: int,
    noop_max: int,
    lives: bool,
    repeat_action_probability: float,
    full_action_space: bool,
    max_episode_frames: int,
    obs_type: str,
    screen_size: int | None,
    device: DeviceLike,
) -> GymWrapper:
    """One ALE game in :class:`AtariSkipPool` in a :class:`GymWrapper`, without transforms.

    With ``lives``, the lives left are an observation (``"lives"``), so that
    :class:`EndOfLifeTransform` can run on a batch of these games: a
    :class:`~torchrl.envs.SerialEnv` of plain ``GymWrapper`` envs steps them all in one batched
    call (``GymWrapper._batched_stepper``), one TensorDict per step of the batch.
    """
    if obs_type not in ("rgb", "grayscale"):
        raise ValueError(f"atari_game_env: obs_type must be 'rgb' or 'grayscale', got {obs_type!r}")
    if int(frame_skip) < 1:
        raise ValueError(f"atari_game_env: frame_skip must be >= 1, got {frame_skip}")
    if int(noop_max) < 0:
        raise ValueError(f"atari_game_env: noop_max must be >= 0, got {noop_max}")
    if screen_size is not None and int(screen_size) < 1:
        raise ValueError(f"atari_game_env: screen_size must be >= 1, got {screen_size}")
    if not _has_ale:
        import_optional("ale_py", extra="atari")
    import gymnasium

    from torchrl.envs.libs._atari_gym import AtariSkipPool

    register_ale_envs()
    game = gymnasium.make(
        _ale_id(env_name),
        frameskip=1,
        repeat_action_probability=float(repeat_action_probability),
        full_action_space=bool(full_action_space),
        max_num_frames_per_episode=int(max_episode_frames),
        obs_type=obs_type,
    )
    size = None if screen_size is None else int(screen_size)
    game = AtariSkipPool(
        game, int(frame_skip), min(2, int(frame_skip)), int(noop_max), size, lives=lives
    )
    return GymWrapper(game, categorical_action_encoding=True, device=device)


def make_atari_env(
    env_name: str = "ALE/Pong-v5",
    num_envs: int = 0,
    *,
    backend: Literal["ale", "envpool"] = "ale",
    parallel: bool = False,
    frame_skip: int = 4,
    noop_max: int = 30,
    screen_size: int = 84,
    frame_stack: int = 4,
    episodic_life: bool = True,
    clip_rewards: bool = True,
    repeat_action_probability: float = 0.25,
    full_action_space: bool = False,
    max_episode_frames: int = 108_000,
    obs_type: Literal["rgb", "grayscale"] = "grayscale",
    track_return: bool = False,
    seed: int | None = None,
    device: DeviceLike = "cpu",
) -> TransformedEnv:
    """An Atari game (or a batch of games) with the standard DQN/PPO preprocessing.

    The output holds ``"pixels"``, float32 ``[*B, frame_stack, screen_size, screen_size]`` in
    ``[0, 1]`` (the last ``frame_stack`` grey frames, oldest first), a reward clipped to its sign
    (``clip_rewards``), and with ``episodic_life`` the ``"lives"`` and ``"end-of-life"`` entries
    (ALE backend). Actions are indices (``Categorical``). See the module docstring for the
    transforms. Partial resets (``"_reset"``) and
    :meth:`~torchrl.envs.EnvBase.step_and_maybe_reset` reset the finished games only.

    Args:
        env_name: the game id (``"ALE/Pong-v5"`` or ``"Pong-v5"``).
        num_envs: how many games side by side (``0``: one game, batch ``[]``).
        backend: ``"ale"`` (ale-py through gymnasium) or ``"envpool"`` (needs ``num_envs >= 1``).
        parallel: with the ALE backend, run the games in worker processes (``ParallelEnv``).
        frame_skip: emulator frames per step.
        noop_max: the largest number of NOOP frames after a reset.
        screen_size: the side of the square grey frames.
        frame_stack: how many frames are stacked.
        episodic_life: signal lost lives (see above).
        clip_rewards: replace rewards by their sign.
        repeat_action_probability: ALE's sticky actions (0.25 in v5).
        full_action_space: use all 18 actions.
        max_episode_frames: the cap on emulator frames per episode.
        obs_type: ``"grayscale"``: ALE returns grey screens (what gymnasium's
            ``AtariPreprocessing`` reads: a third of the pixels to copy and pool), resized in
            each game with OpenCV (``INTER_AREA``, as ``AtariPreprocessing``); ``"rgb"``: the
            games return colour screens made grey by ``GrayScale`` and resized (bilinear,
            antialiased) by ``Resize`` on the batch.
        track_return: add ``"episode_reward"``, the game score so far (summed before clipping;
            :class:`~torchrl.envs.transforms.RewardSum`).
        seed: seed the env (``env.set_seed``) once built.
        device: the device of the output tensors.

    Returns:
        A :class:`~torchrl.envs.TransformedEnv`.

    Raises:
        ImportError: when ale-py (or envpool) is missing, naming the extra.
        ValueError: for an unknown backend or bad sizes.

    Examples:
        >>> from torchrl.envs.libs.atari import make_atari_env
        >>> env = make_atari_env("ALE/Pong-v5", num_envs=2, seed=0)  # doctest: +SKIP
        >>> env.rollout(3)["next", "pixels"].shape  # doctest: +SKIP
        torch.Size([2, 3, 4, 84, 84])
    """
    if backend not in ("ale", "envpool"):
        raise ValueError(f"make_atari_env: backend must be 'ale' or 'envpool', got {backend!r}")
    for name, value, low in (
        ("num_envs", num_envs, 0),
        ("frame_skip", frame_skip, 1),
        ("noop_max", noop_max, 0),
        ("screen_size", screen_size, 1),
        ("frame_stack", frame_stack, 1),
    ):
        if int(value) < low:
            raise ValueError(f"make_atari_env: {name} must be >= {low}, got {value}")
    if backend == "envpool":
        env = _envpool_env(
            env_name,
            num_envs,
            frame_skip=frame_skip,
            noop_max=noop_max,
            screen_size=screen_size,
            frame_stack=frame_stack,
            episodic_life=episodic_life,
            repeat_action_probability=repeat_action_probability,
            full_action_space=full_action_space,
            max_episode_frames=max_episode_frames,
            device=device,
        )
        transforms: list[Transform] = [
            ToTensorImage(in_keys=[OBSERVATION], out_keys=[PIXELS], shape_tolerant=True),
            ExcludeTransform(OBSERVATION),
        ]
    else:
        if not _has_ale:
            import_optional("ale_py", extra="atari")
        make_game = functools.partial(
            _game,
            env_name,
            frame_skip=frame_skip,
            noop_max=noop_max,
            lives=episodic_life,
            repeat_action_probability=repeat_action_probability,
            full_action_space=full_action_space,
            max_episode_frames=max_episode_frames,
            obs_type=obs_type,
            # grey screens are resized inside each game, as gymnasium's AtariPreprocessing does
            # (OpenCV's area interpolation on uint8); colour ones after GrayScale on the batch
            screen_size=int(screen_size) if obs_type == "grayscale" else None,
            device=device,
        )
        if num_envs:
            batched = ParallelEnv if parallel else SerialEnv
            env = batched(int(num_envs), make_game, device=device)
        else:
            env = make_game()
        # on the batch, so that a SerialEnv of plain games steps them in one call
        transforms = [EndOfLifeTransform(eol_attribute=None)] if episodic_life else []
        if obs_type == "rgb":
            transforms += [
                ToTensorImage(in_keys=[OBSERVATION], out_keys=[PIXELS]),
                ExcludeTransform(OBSERVATION),
                GrayScale(in_keys=[PIXELS]),
                Resize(int(screen_size), int(screen_size), in_keys=[PIXELS]),
            ]
        else:
            transforms += [
                UnsqueezeTransform(-1, in_keys=[OBSERVATION]),  # [..., H, W] -> [..., H, W, 1]
                ToTensorImage(in_keys=[OBSERVATION], out_keys=[PIXELS]),
                ExcludeTransform(OBSERVATION),
            ]
        transforms.append(CatFrames(N=int(frame_stack), dim=-3, in_keys=[PIXELS]))
    if track_return:
        transforms.append(RewardSum())
    if clip_rewards:
        transforms.append(SignTransform(in_keys=[REWARD]))
    out = TransformedEnv(env, Compose(*transforms))
    if seed is not None:
        out.set_seed(int(seed))
    return out


def _envpool_env(env_name: str, num_envs: int, **options: Any) -> EnvBase:
    import_optional("envpool", extra="envpool")
    from torchrl.envs.libs.envpool import MultiThreadedEnv

    if int(num_envs) < 1:
        raise ValueError(
            f"make_atari_env: the envpool backend runs a batch of games, num_envs must be >= 1, "
            f"got {num_envs}"
        )
    task = env_name[len(_ALE_PREFIX) :] if env_name.startswith(_ALE_PREFIX) else env_name
    kwargs = {
        "frame_skip": int(options["frame_skip"]),
        "noop_max": max(int(options["noop_max"]), 1),  # envpool wants at least one no-op
        "img_height": int(options["screen_size"]),
        "img_width": int(options["screen_size"]),
        "stack_num": int(options["frame_stack"]),
        "gray_scale": True,
        "episodic_life": bool(options["episodic_life"]),
        "reward_clip": False,  # SignTransform does it, as for the ALE backend
        "repeat_action_probability": float(options["repeat_action_probability"]),
        "full_action_space": bool(options["full_action_space"]),
        "max_episode_steps": int(options["max_episode_frames"]) // int(options["frame_skip"]),
    }
    return MultiThreadedEnv(
        int(num_envs),
        task,
        create_env_kwargs=kwargs,
        categorical_action_encoding=True,
        device=options["device"],
    )
