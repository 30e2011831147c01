"""Pretrained visual embeddings as transforms: R3M, VIP (ResNets) and VC-1 (a ViT).

Each transform is a :class:`Compose` of :class:`ToTensorImage`, :class:`Resize` and an
embedding stage that normalises the images with the ImageNet statistics and runs the backbone,
writing one vector per image (``"r3m_vec"``, ``"vip_vec"``, ``"VC1_vec"``). The backbones are
written here in plain PyTorch (no torchvision), with torchvision's parameter names, so a
published state dict loads into them. Nothing is downloaded: weights come from a local file
(``weights_path=``/``checkpoint_path=``, read with ``weights_only=True``); without one the
backbone is randomly initialised (useful for tests and for training the encoder yourself).

:class:`VIPRewardTransform` adds VIP's goal-conditioned reward: the decrease of the embedding
distance to a goal image given at reset.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._types import NestedKey
from torchrl.data.specs import Composite, TensorSpec, Unbounded
from torchrl.envs.transforms._utils import (
    get,
    key_list,
    map_output_specs,
    missing_key_error,
    set_,
)
from torchrl.envs.transforms.base import Compose, ObservationTransform
from torchrl.envs.transforms.image import Resize, ToTensorImage

__all__ = ["R3MTransform", "VC1Transform", "VIPRewardTransform", "VIPTransform"]

_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


# ----------------------------------------------------------------------------- backbones
class _BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int, downsample: nn.Module | None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + skip)


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int, downsample: nn.Module | None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + skip)


_RESNETS: dict[str, tuple[type[_BasicBlock] | type[_Bottleneck], tuple[int, ...]]] = {
    "resnet18": (_BasicBlock, (2, 2, 2, 2)),
    "resnet34": (_BasicBlock, (3, 4, 6, 3)),
    "resnet50": (_Bottleneck, (3, 4, 6, 3)),
}


class _ResNet(nn.Module):
    """A ResNet trunk ending in global average pooling (no classifier): ``[N, 3, H, W] -> [N, D]``."""

    def __init__(self, name: str) -> None:
        super().__init__()
        block, depths = _RESNETS[name]
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inplanes = 64
        for i, (planes, depth) in enumerate(zip((64, 128, 256, 512), depths)):
            stride = 1 if i == 0 else 2
            layers = []
            for j in range(depth):
                downsample = None
                if j == 0 and (stride != 1 or inplanes != planes * block.expansion):
                    downsample = nn.Sequential(
                        nn.Conv2d(inplanes, planes * block.expansion, 1, stride, bias=False),
                        nn.BatchNorm2d(planes * block.expansion),
                    )
                layers.append(block(inplanes, planes, stride if j == 0 else 1, downsample))
                inplanes = planes * block.expansion
            self.add_module(f"layer{i + 1}", nn.Sequential(*layers))
        self.out_dim = inplanes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(1, 5):
            x = getattr(self, f"layer{i}")(x)
        return x.mean(dim=(-2, -1))


_VITS = {
    # name: (embed dim, depth, heads); "default" is a small untrained model for tests.
    "default": (64, 2, 4),
    "base": (768, 12, 12),
    "vc1_vitb": (768, 12, 12),
    "large": (1024, 24, 16),
    "vc1_vitl": (1024, 24, 16),
}


class _ViT(nn.Module):
    """A ViT encoder (16x16 patches, class token, pre-norm blocks): ``[N, 3, S, S] -> [N, D]``."""

    def __init__(self, name: str, image_size: int = 224, patch: int = 16) -> None:
        super().__init__()
        dim, depth, heads = _VITS[name]
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        n_tokens = (image_size // patch) ** 2 + 1
        self.pos_embed = nn.Parameter(torch.randn(1, n_tokens, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.out_dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(tokens.shape[0], -1, -1)
        tokens = torch.cat([cls, tokens], dim=1) + self.pos_embed
        return self.norm(self.blocks(tokens))[:, 0]


def _load_weights(net: nn.Module, path: str | Path, owner: str) -> None:
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise TypeError(f"{owner}: {path} does not hold a state dict (got {type(state).__name__})")
    # Published checkpoints prefix their keys (``module.convnet.``, ``convnet.``...) and may
    # carry a classifier head: keep what matches this backbone.
    own = net.state_dict()
    matched: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        for prefix in ("", "module.", "module.convnet.", "convnet.", "model.", "encoder."):
            name = key[len(prefix) :] if key.startswith(prefix) else None
            if name in own and own[name].shape == value.shape:
                matched[name] = value
                break
    missing = sorted(set(own) - set(matched))
    if missing:
        raise KeyError(
            f"{owner}: the weights in {path} do not fit the backbone; missing "
            f"{len(missing)} entries, e.g. {missing[:5]}"
        )
    net.load_state_dict(matched)


# ----------------------------------------------------------------------------- stages
class _Embed(ObservationTransform):
    """Normalises ``[..., n?, 3, H, W]`` float images and embeds them with ``net``."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(
        self,
        net: nn.Module,
        in_keys: Sequence[NestedKey],
        out_keys: Sequence[NestedKey],
        *,
        stack_images: bool,
        del_keys: bool,
        owner: str,
    ) -> None:
        # The images are read (and maybe deleted); the vectors go to ``vec_keys``.
        super().__init__(list(in_keys), list(in_keys))
        self.vec_keys = list(out_keys)
        self.net = net.eval()
        self.stack_images = stack_images
        self.del_keys = del_keys
        self.owner = owner
        self.register_buffer("mean", torch.tensor(_IMAGENET_MEAN).view(3, 1, 1))
        self.register_buffer("std", torch.tensor(_IMAGENET_STD).view(3, 1, 1))

    @property
    def out_dim(self) -> int:
        return int(self.net.out_dim)  # type: ignore[arg-type]

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """Embeds float images ``[..., 3, H, W]`` in ``[0, 1]``: ``[..., D]``."""
        if images.ndim < 3 or images.shape[-3] != 3:
            raise ValueError(
                f"{self.owner}: expected RGB images [..., 3, H, W], got {tuple(images.shape)}"
            )
        lead = images.shape[:-3]
        flat = images.reshape(-1, *images.shape[-3:]).to(self.mean.dtype)
        with torch.no_grad():
            out = self.net((flat - self.mean) / self.std)
        return out.reshape(*lead, out.shape[-1])

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        images = []
        for key in self.in_keys:
            value = get(next_tensordict, key)
            if value is None:
                if self.missing_tolerance:
                    return next_tensordict
                raise missing_key_error(self, key, next_tensordict)
            images.append(value)
        if self.stack_images and len(images) > 1:
            emb = self.embed(torch.stack(images, dim=-4))
            set_(next_tensordict, self.vec_keys[0], emb.flatten(-2))
        else:
            for out_key, value in zip(self.vec_keys, images):
                set_(next_tensordict, out_key, self.embed(value))
        if self.del_keys:
            for key in self.in_keys:
                if key not in self.vec_keys:
                    next_tensordict.pop(key, None)
        return next_tensordict

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        n = len(self.in_keys)
        width = self.out_dim * (n if self.stack_images and n > 1 else 1)
        pairs = (
            [(self.in_keys[0], self.vec_keys[0])]
            if self.stack_images and n > 1
            else list(zip(self.in_keys, self.vec_keys))
        )

        def spec(leaf: TensorSpec, key: NestedKey) -> TensorSpec:
            return Unbounded(shape=(*leaf.shape[:-3], width), device=leaf.device)

        map_output_specs(self, output_spec, spec, pairs=pairs)
        if self.del_keys:
            observations = output_spec["full_observation_spec"]
            for key in self.in_keys:
                if key not in self.vec_keys and key in observations.keys(True, True):
                    del observations[key]
        return output_spec


class _PretrainedEmbedding(Compose):
    """``ToTensorImage -> Resize -> _Embed``: the shared pipeline of the transforms below."""

    _default_out: str = "vec"
    _owner: str = "PretrainedEmbedding"

    def __init__(
        self,
        net: nn.Module,
        in_keys: NestedKey | Sequence[NestedKey] | None,
        out_keys: NestedKey | Sequence[NestedKey] | None,
        size: int,
        stack_images: bool,
        del_keys: bool,
    ) -> None:
        ins = key_list(in_keys) if in_keys is not None else ["pixels"]
        if not ins:
            ins = ["pixels"]
        n_out = 1 if stack_images else len(ins)
        if out_keys is None or not key_list(out_keys):
            outs: list[NestedKey] = (
                [self._default_out]
                if n_out == 1
                else [f"{self._default_out}{i}" for i in range(n_out)]
            )
        else:
            outs = key_list(out_keys)
        if len(outs) != n_out:
            raise ValueError(
                f"{self._owner}: {n_out} out_keys expected for in_keys={ins} "
                f"(stack_images={stack_images}), got {outs}"
            )
        # The images are converted in place; the embedding stage writes the vectors.
        stages = [
            ToTensorImage(in_keys=ins, shape_tolerant=True),
            Resize(size, size, in_keys=ins),
            _Embed(net, ins, outs, stack_images=stack_images, del_keys=del_keys, owner=self._owner),
        ]
        super().__init__(*stages)
        self.size = int(size)

    @property
    def _stage(self) -> _Embed:
        stage = self[-1]
        assert isinstance(stage, _Embed)
        return stage

    @property
    def net(self) -> nn.Module:
        """The backbone (an ``nn.Module`` mapping ``[N, 3, S, S]`` images to ``[N, D]``)."""
        return self._stage.net

    @property
    def out_dim(self) -> int:
        """The size ``D`` of one image's embedding."""
        return self._stage.out_dim

    def embed_images(self, images: torch.Tensor) -> torch.Tensor:
        """Embeds raw images (``[..., H, W, 3]`` uint8 or ``[..., 3, H, W]`` floats): ``[..., D]``."""
        for stage in list(self)[:-1]:
            images = stage._apply_transform(images)
        return self._stage.embed(images)


def _resnet(owner: str, model_name: str, choices: Sequence[str], download: Any, path: Any):
    if model_name not in choices:
        raise ValueError(f"{owner}: model_name must be one of {list(choices)}, got {model_name!r}")
    if download:
        raise ValueError(
            f"{owner}: download=True is not supported (nothing is fetched at run time); save "
            f"the published weights to a file and pass weights_path=<file>"
        )
    net = _ResNet(model_name)
    if path is not None:
        _load_weights(net, path, owner)
    return net


class _ResNetEmbedding(_PretrainedEmbedding):
    """The constructor shared by the ResNet-based embeddings (R3M, VIP)."""

    def __init__(
        self,
        model_name: str = "resnet50",
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        size: int = 244,
        stack_images: bool = True,
        download: Any = False,
        download_path: str | None = None,
        tensor_pixels_keys: Any = None,
        *,
        weights_path: str | Path | None = None,
        del_keys: bool = True,
    ) -> None:
        net = _resnet(self._owner, model_name, list(_RESNETS), download, weights_path)
        super().__init__(net, in_keys, out_keys, size, stack_images, del_keys)
        self.model_name = model_name


class R3MTransform(_ResNetEmbedding):
    """R3M's visual embedding (Nair et al. 2022): images -> ResNet features (``"r3m_vec"``).

    Args:
        model_name: ``"resnet18"`` (512 features), ``"resnet34"`` (512) or ``"resnet50"`` (2048).
        in_keys: the image entries (default ``["pixels"]``), ``[..., H, W, 3]`` uint8 or
            ``[..., 3, H, W]`` floats in ``[0, 1]``.
        out_keys: where the embeddings go (default ``["r3m_vec"]``).
        size: the side of the square image fed to the backbone (default 244, as TorchRL).
        stack_images: with several in_keys, embed them together into one entry (their
            features concatenated); otherwise one out_key per in_key.
        download: downloading is not supported here (raises); use ``weights_path``.
        download_path: ignored (kept for compatibility).
        tensor_pixels_keys: ignored (kept for compatibility).
        weights_path: a local file with the backbone's state dict (torchvision names, an
            optional ``module.convnet.`` prefix), loaded with ``weights_only=True``. Without
            it the backbone is randomly initialised.
        del_keys: remove the images once embedded (default ``True``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import R3MTransform
        >>> t = R3MTransform("resnet18", in_keys=["pixels"], size=32)
        >>> td = TensorDict(pixels=torch.zeros(2, 40, 40, 3, dtype=torch.uint8), batch_size=[2])
        >>> t(td)["r3m_vec"].shape
        torch.Size([2, 512])
    """

    _default_out = "r3m_vec"
    _owner = "R3MTransform"


class VIPTransform(_ResNetEmbedding):
    """VIP's visual embedding (Ma et al. 2023): images -> ResNet-50 features (``"vip_vec"``).

    Takes the keywords of :class:`R3MTransform`; ``model_name`` is ``"resnet50"`` (2048
    features) for VIP's published weights, ``"resnet18"``/``"resnet34"`` give small encoders.
    The embeddings go to ``"vip_vec"`` by default.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import VIPTransform
        >>> t = VIPTransform("resnet18", size=32)
        >>> td = TensorDict(pixels=torch.zeros(40, 40, 3, dtype=torch.uint8))
        >>> t(td)["vip_vec"].shape
        torch.Size([512])
    """

    _default_out = "vip_vec"
    _owner = "VIPTransform"


class VIPRewardTransform(VIPTransform):
    """VIP embeddings plus VIP's goal-reaching reward.

    At reset, the goal image must be given in the reset input under ``goal_key`` (default
    ``"goal_image"``, same layout as the observations); its embedding is kept as state
    (``"goal_embedding"``). Each step's reward is the decrease of the embedding distance to the
    goal, ``||e(o_t) - e(g)|| - ||e(o_{t+1}) - e(g)||``, written at ``reward_key`` (replacing
    the env's reward).

    Args:
        *args: the arguments of :class:`VIPTransform` (``model_name``, ``in_keys``, ...).
        goal_key: the reset entry holding the goal image.
        reward_key: where the reward is written.
        **kwargs: the keywords of :class:`VIPTransform`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import VIPRewardTransform
        >>> t = VIPRewardTransform("resnet18", size=32)
        >>> goal = torch.zeros(40, 40, 3, dtype=torch.uint8)
        >>> t.embed_images(goal).shape
        torch.Size([512])
    """

    _owner = "VIPRewardTransform"

    def __init__(
        self,
        *args: Any,
        goal_key: NestedKey = "goal_image",
        reward_key: NestedKey = "reward",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.goal_key = goal_key
        self.reward_key = reward_key
        self.goal_embedding_key = "goal_embedding"

    @property
    def _vec_key(self) -> NestedKey:
        return self._stage.vec_keys[0]

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        tensordict_reset = super()._reset(tensordict, tensordict_reset)
        goal = None if tensordict is None else get(tensordict, self.goal_key)
        if goal is None:
            raise KeyError(
                f"VIPRewardTransform: the reset input has no goal image {self.goal_key!r}; "
                f"reset with env.reset(TensorDict({{{self.goal_key!r}: goal_image}}, ...))"
            )
        tensordict_reset.set(self.goal_embedding_key, self.embed_images(goal))
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        next_tensordict = super()._step(tensordict, next_tensordict)
        goal = tensordict.get(self.goal_embedding_key, None)
        if goal is None:
            raise missing_key_error(self, self.goal_embedding_key, tensordict)
        before = (get(tensordict, self._vec_key) - goal).norm(dim=-1, keepdim=True)
        after = (get(next_tensordict, self._vec_key) - goal).norm(dim=-1, keepdim=True)
        next_tensordict.set(self.goal_embedding_key, goal)
        reward = before - after
        old = get(next_tensordict, self.reward_key)
        if old is not None:
            reward = reward.reshape(old.shape).to(old.dtype)
        set_(next_tensordict, self.reward_key, reward)
        return next_tensordict

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        output_spec = super().transform_output_spec(output_spec)
        obs = output_spec["full_observation_spec"]
        obs[self.goal_embedding_key] = Unbounded(
            shape=(*obs.shape, self.out_dim), device=obs.device
        )
        return output_spec


class VC1Transform(_PretrainedEmbedding):
    """VC-1's visual embedding (Majumdar et al. 2023): images -> ViT class token (``"VC1_vec"``).

    Args:
        in_keys: the image entries (default ``["pixels"]``).
        out_keys: where the embeddings go (default ``["VC1_vec"]``).
        model_name: ``"default"`` (a small, untrained ViT for tests: 64 features), ``"base"``/
            ``"vc1_vitb"`` (ViT-B/16, 768) or ``"large"``/``"vc1_vitl"`` (ViT-L/16, 1024).
        del_keys: remove the images once embedded (default ``True``).
        checkpoint_path: a local state dict of the ViT (``weights_only=True``). The ``"base"``
            and ``"large"`` models are randomly initialised without one (with a warning).
        size: the image side (default 224).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import VC1Transform
        >>> t = VC1Transform(in_keys=["pixels"], model_name="default")
        >>> td = TensorDict(pixels=torch.zeros(1, 64, 64, 3, dtype=torch.uint8), batch_size=[1])
        >>> t(td)["VC1_vec"].shape
        torch.Size([1, 64])
    """

    _default_out = "VC1_vec"
    _owner = "VC1Transform"

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        model_name: str = "default",
        del_keys: bool = True,
        *,
        checkpoint_path: str | Path | None = None,
        size: int = 224,
    ) -> None:
        if model_name not in _VITS:
            raise ValueError(
                f"VC1Transform: model_name must be one of {list(_VITS)}, got {model_name!r}"
            )
        net = _ViT(model_name, image_size=size)
        if checkpoint_path is not None:
            _load_weights(net, checkpoint_path, self._owner)
        elif model_name != "default":
            warnings.warn(
                f"VC1Transform({model_name!r}): no checkpoint_path, the ViT is randomly "
                f"initialised (the published VC-1 weights are not downloaded here)",
                stacklevel=2,
            )
        super().__init__(net, in_keys, out_keys, size, False, del_keys)
        self.model_name = model_name
