"""R3M / VIP / VC-1 embedding transforms: shapes, specs, weights loading, VIP's goal reward."""

from __future__ import annotations

import pytest
import torch
from envs.transforms.transform_envs import ImageEnv
from tensordict import TensorDict

from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.envs import (
    R3MTransform,
    StepCounter,
    TransformedEnv,
    VC1Transform,
    VIPRewardTransform,
    VIPTransform,
    check_env_specs,
)
from torchrl.envs.transforms.pretrained import _ResNet


def test_resnet_trunks_match_published_sizes():
    # torchvision's ResNets minus their 1000-way classifier.
    assert sum(p.numel() for p in _ResNet("resnet18").parameters()) == 11689512 - 513000
    assert sum(p.numel() for p in _ResNet("resnet50").parameters()) == 25557032 - 2049000
    assert _ResNet("resnet34").out_dim == 512 and _ResNet("resnet50").out_dim == 2048


@pytest.mark.parametrize("batch_size", [(), (2,)])
def test_r3m_in_env(batch_size):
    env = TransformedEnv(ImageEnv(batch_size=batch_size), R3MTransform("resnet18", size=32))
    env.append_transform(StepCounter(3))
    check_env_specs(env)
    td = env.rollout(3)
    assert td["r3m_vec"].shape == (*batch_size, 3, 512)
    assert "pixels" not in td.keys()  # del_keys
    # Different images give different embeddings; the transform is deterministic (eval mode).
    assert not torch.allclose(td["r3m_vec"][..., 0, :], td["r3m_vec"][..., 1, :])
    again = env.rollout(3)
    torch.testing.assert_close(td["r3m_vec"], again["r3m_vec"])


def test_keys_stacking_and_errors():
    img = torch.randint(0, 255, (2, 20, 20, 3), dtype=torch.uint8)
    td = TensorDict(a=img, b=img.flip(1), batch_size=[2])
    stacked = VIPTransform("resnet18", in_keys=["a", "b"], size=32, del_keys=False)(td.clone())
    assert stacked["vip_vec"].shape == (2, 1024) and "a" in stacked.keys()
    separate = VIPTransform(
        "resnet18", in_keys=["a", "b"], out_keys=["ea", "eb"], size=32, stack_images=False
    )
    out = separate(td.clone())
    assert out["ea"].shape == (2, 512) and set(out.keys()) == {"ea", "eb"}
    with pytest.raises(ValueError, match="model_name"):
        R3MTransform("resnet101")
    with pytest.raises(ValueError, match="weights_path"):
        R3MTransform("resnet18", download=True)
    with pytest.raises(ValueError, match="2 out_keys"):
        VIPTransform("resnet18", in_keys=["a", "b"], out_keys=["x"], stack_images=False)


def test_weights_path_loads_published_layout(tmp_path):
    src = _ResNet("resnet18")
    for p in src.parameters():
        p.data.normal_()
    # The R3M checkpoints prefix their keys and carry extra entries: both are handled.
    state = {f"module.convnet.{k}": v for k, v in src.state_dict().items()}
    state["module.lang_enc.weight"] = torch.zeros(3)
    torch.save(state, tmp_path / "r3m.pt")
    t = R3MTransform("resnet18", size=32, weights_path=tmp_path / "r3m.pt")
    for name, value in src.state_dict().items():
        torch.testing.assert_close(t.net.state_dict()[name], value)
    torch.save({"fc.weight": torch.zeros(2)}, tmp_path / "bad.pt")
    with pytest.raises(KeyError, match="do not fit"):
        R3MTransform("resnet18", weights_path=tmp_path / "bad.pt")


def test_in_replay_buffer():
    rb = ReplayBuffer(storage=LazyTensorStorage(8), transform=R3MTransform("resnet18", size=32))
    rb.extend(TensorDict(pixels=torch.zeros(4, 16, 16, 3, dtype=torch.uint8), batch_size=[4]))
    assert rb.sample(3)["r3m_vec"].shape == (3, 512)


def test_vc1():
    env = TransformedEnv(ImageEnv(batch_size=(2,)), VC1Transform(in_keys=["pixels"]))
    check_env_specs(env)
    assert env.rollout(2)["VC1_vec"].shape == (2, 2, 64)
    with pytest.raises(ValueError, match="model_name"):
        VC1Transform(model_name="huge")
    with pytest.warns(UserWarning, match="randomly"):
        t = VC1Transform(model_name="base")
    assert t.out_dim == 768


def test_vip_reward_is_distance_decrease():
    env = TransformedEnv(ImageEnv(), VIPRewardTransform("resnet18", size=32))
    goal = ImageEnv()._pixels()  # the first frame: stepping away from it is penalised
    td = env.reset(TensorDict(goal_image=goal))
    g = env.transform.embed_images(goal)
    torch.testing.assert_close(td["goal_embedding"], g)
    td["action"] = torch.zeros(1)
    out = env.step(td)
    before = (td["vip_vec"] - g).norm()
    after = (out["next", "vip_vec"] - g).norm()
    torch.testing.assert_close(out["next", "reward"], (before - after).reshape(1))
    assert out["next", "reward"].item() < 0
    rollout = env.rollout(3, tensordict=env.reset(TensorDict(goal_image=goal)), auto_reset=False)
    assert rollout["next", "reward"].shape == (3, 1)
    with pytest.raises(KeyError, match="goal image"):
        env.reset()
