"""check_env_specs with NonTensor leaves (strings), and gym Text spaces mapped to NonTensor specs."""

from __future__ import annotations

import pytest
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict, TensorDictBase

from torchrl.data import Bounded, Categorical, Composite, NonTensor, Unbounded
from torchrl.envs import EnvBase, SerialEnv, check_env_specs
from torchrl.envs._spec_checks import check_entry

WORDS = ("left", "right", "up")


class InstructionEnv(EnvBase):
    """A counter with a string instruction in its observations (nested one level too).

    ``bad`` breaks the output on purpose: ``"tensor"`` writes a tensor where the spec says
    non-tensor, ``"missing"`` leaves the instruction out, ``"shape"`` gives a stack of the wrong
    batch size.
    """

    def __init__(self, batch_size: tuple[int, ...] = (), bad: str | None = None) -> None:
        super().__init__(batch_size=torch.Size(batch_size))
        batch = self.batch_size
        self.bad = bad
        self.observation_spec = Composite(
            count=Unbounded(shape=(*batch, 1)),
            instruction=NonTensor(shape=batch, example_data="left"),
            task=Composite(goal=NonTensor(shape=batch, example_data="up"), shape=batch),
            shape=batch,
        )
        self.action_spec = Categorical(3, shape=batch)
        self.reward_spec = Unbounded(shape=(*batch, 1))
        self._count = torch.zeros(*batch, 1)

    def _text(self, step: int) -> NonTensorData | NonTensorStack:
        if not self.batch_size:
            return NonTensorData(WORDS[step % 3])
        n = self.batch_size.numel()
        size = n + 1 if self.bad == "shape" else n
        return NonTensorStack(*(NonTensorData(WORDS[(step + i) % 3]) for i in range(size)))

    def _obs(self) -> dict:
        step = int(self._count.reshape(-1)[0])
        out: dict = {"count": self._count.clone()}
        if self.bad == "tensor":
            out["instruction"] = torch.zeros(self.batch_size)
        elif self.bad != "missing":
            out["instruction"] = self._text(step)
        out["task"] = TensorDict(goal=self._text(step + 1), batch_size=self.batch_size)
        return out

    def _reset(self, tensordict: TensorDictBase | None, **kwargs) -> TensorDictBase:
        self._count = torch.zeros(*self.batch_size, 1)
        flags = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        data = {**self._obs(), "done": flags, "terminated": flags.clone()}
        return TensorDict(data, batch_size=self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._count = self._count + 1
        flags = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        data = {**self._obs(), "reward": self._count.clone()}
        data.update(done=flags, terminated=flags.clone())
        return TensorDict(data, batch_size=self.batch_size)

    def _set_seed(self, seed: int | None) -> None:
        pass


@pytest.mark.parametrize("batch_size", [(), (2,)])
@pytest.mark.parametrize("contiguous", [True, False])
def test_nontensor_observation_passes(batch_size, contiguous) -> None:
    env = InstructionEnv(batch_size)
    check_env_specs(env, return_contiguous=contiguous)
    rollout = env.rollout(3)
    # the strings come out stacked along time (and the batch)
    assert isinstance(rollout.get("instruction"), NonTensorStack)
    expected = (*batch_size, 3)
    assert tuple(rollout.get(("next", "task", "goal")).batch_size) == expected


def test_nontensor_in_serial_env() -> None:
    env = SerialEnv(2, lambda: InstructionEnv())
    check_env_specs(env)
    rollout = env.rollout(3)
    assert rollout["next", "instruction"] == [["right", "up", "left"]] * 2


def test_tensor_where_nontensor_declared_fails() -> None:
    with pytest.raises(ValueError, match="'instruction'.*non-tensor data.*a tensor of shape"):
        check_env_specs(InstructionEnv(bad="tensor"))


def test_missing_nontensor_entry_fails() -> None:
    with pytest.raises(ValueError, match="'instruction'"):
        check_env_specs(InstructionEnv(bad="missing"))


def test_nontensor_of_wrong_batch_size_fails() -> None:
    # the env's own output already has the wrong batch size: the TensorDict refuses it
    with pytest.raises((ValueError, RuntimeError)):
        check_env_specs(InstructionEnv((2,), bad="shape"))


def test_undeclared_nontensor_entry_fails() -> None:
    env = InstructionEnv()
    del env.observation_spec["instruction"]
    with pytest.raises(ValueError, match="'instruction'.*non-tensor data.*no spec declares it"):
        check_env_specs(env)


def test_check_entry_nontensor() -> None:
    spec = NonTensor(shape=(2,))
    stack = NonTensorStack(NonTensorData("a"), NonTensorData("b"))
    check_entry("step()", "text", spec, stack, 1)
    with pytest.raises(ValueError, match="'text' has batch size \\(2,\\).*expects \\(2, 3\\)"):
        check_entry("rollout", "text", spec, stack, 1, (3,))
    with pytest.raises(ValueError, match="'text' should be non-tensor data.*a str"):
        check_entry("step()", "text", spec, "a", 1)
    with pytest.raises(ValueError, match="'obs' should be a tensor.*non-tensor data"):
        check_entry("step()", "obs", Bounded(0, 1, shape=(2,)), stack, 1)


# ------------------------------------------------------------------ gym Text -> NonTensor
gym = pytest.importorskip("gymnasium")


@pytest.mark.parametrize(
    "kwargs,example",
    [
        ({"max_length": 8}, "0"),  # min_length 1, alphanumeric charset
        ({"max_length": 8, "min_length": 0}, ""),
        ({"max_length": 5, "min_length": 2, "charset": "zyx"}, "xx"),
    ],
)
def test_text_space_conversion(kwargs, example) -> None:
    from torchrl.envs.libs.gym import gym_to_torchrl_spec_transform

    space = gym.spaces.Text(**kwargs)
    spec = gym_to_torchrl_spec_transform(space)
    assert isinstance(spec, NonTensor) and spec.shape == ()
    assert spec.zero().data == example and space.contains(example)
    batched = gym_to_torchrl_spec_transform(space, batch_size=[3])
    assert batched.shape == (3,)
    nested = gym.spaces.Dict(x=gym.spaces.Box(0, 1, (2,)), text=space)
    composite = gym_to_torchrl_spec_transform(nested, batch_size=[3])
    assert isinstance(composite["text"], NonTensor) and composite["text"].shape == (3,)


def test_text_reader_passes_strings_through() -> None:
    from torchrl.envs.libs._gym_spaces import make_reader

    read = make_reader(gym.spaces.Text(10), categorical=False)
    single = read("hello")
    assert isinstance(single, NonTensorData) and single.data == "hello"
    for values in (("a", "bc"), ["a", "bc"]):
        stacked = read(values)
        assert stacked.batch_size == (2,) and stacked.tolist() == ["a", "bc"]


class _TextEnv(gym.Env):
    """Observes a random word (a Text space) beside a Box; ends after 4 steps."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Dict(
            obs=gym.spaces.Box(-1.0, 1.0, (2,)),
            word=gym.spaces.Text(6, min_length=1, charset="abc"),
        )
        self.action_space = gym.spaces.Discrete(2)
        self._t = 0

    def _observe(self) -> dict:
        return {"obs": self.observation_space["obs"].sample(), "word": "ab"[self._t % 2] * 3}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action):
        self._t += 1
        return self._observe(), 1.0, self._t >= 4, False, {}


def test_gym_wrapper_with_text_observation() -> None:
    from torchrl.envs.libs.gym import GymWrapper

    env = GymWrapper(_TextEnv())
    assert isinstance(env.observation_spec["word"], NonTensor)
    check_env_specs(env)
    rollout = env.rollout(4)
    assert rollout["next", "word"] == ["bbb", "aaa", "bbb", "aaa"]
    vec = gym.vector.SyncVectorEnv(
        [_TextEnv, _TextEnv], autoreset_mode=gym.vector.AutoresetMode.DISABLED
    )
    env = GymWrapper(vec)
    assert env.observation_spec["word"].shape == (2,)
    check_env_specs(env)
    assert env.reset()["word"] == ["aaa", "aaa"]
