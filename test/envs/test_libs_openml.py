"""Tests of OpenMLEnv on small tables written by the tests (no network, no ``openml`` package)."""

import warnings

import pytest
import torch

from torchrl.data.datasets import DatasetNotFoundError
from torchrl.envs import ParallelEnv, SerialEnv, check_env_specs
from torchrl.envs.libs.openml import OpenMLEnv

pytest.importorskip("pandas")

# 6 rows, a numeric and a nominal feature, 3 classes; x is the row number, so rows are told apart
ARFF = """% a toy table
@relation toy
@attribute x numeric
@attribute color {red,green,blue}
@attribute class {a,b,c}
@data
0,red,a
1,green,b
2,blue,c
3,red,a
4,green,b
5,blue,c
"""


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "toy.arff"
    path.write_text(ARFF)
    return path


def make(table, batch_size=None, **kwargs):
    return OpenMLEnv(
        "toy", batch_size=batch_size, data_file=table, root=table.parent / "cache", **kwargs
    )


@pytest.mark.parametrize("batch_size", [None, [4], [2, 3]])
def test_specs(table, batch_size):
    env = make(table, batch_size)
    check_env_specs(env)
    batch = torch.Size(batch_size or [])
    assert env.batch_size == batch
    assert env.observation_spec["observation"].shape == (*batch, 2)
    assert env.observation_spec["y"].shape == batch
    assert env.action_spec.n == 3 and env.action_spec.shape == batch
    assert env.action_spec.dtype == torch.int64
    assert env.reward_spec.shape == (*batch, 1) and env.reward_spec.dtype == torch.float32
    assert env.num_classes == 3 and env.dataset.metadata["classes"] == ["a", "b", "c"]


def test_onehot_encoding_and_names(table):
    env = make(table, [2], encoding="onehot")
    assert env.observation_spec["observation"].shape == (2, 4)  # x + 3 colours
    assert env.reset()["observation"][:, 1:].sum(-1).eq(1).all()
    assert "adult_onehot" in OpenMLEnv.available_envs and len(OpenMLEnv.available_envs) == 7
    assert repr(env).startswith("OpenMLEnv(dataset_name='toy', rows=6, num_classes=3")


def test_reward_is_one_for_the_right_class_and_episodes_last_one_step(table):
    env = make(table, [6])
    td = env.reset()
    # every row is shown once in a pass over the table, with its own class
    rows = td["observation"][:, 0].long()
    assert sorted(rows.tolist()) == list(range(6))
    assert torch.equal(td["y"], rows % 3)
    td["action"] = torch.where(rows < 3, td["y"], (td["y"] + 1) % 3)
    out = env.step(td)
    assert out["next", "reward"].squeeze(-1).tolist() == [float(r < 3) for r in rows.tolist()]
    assert out["next", "done"].all() and out["next", "terminated"].all()
    assert not out["next", "truncated"].any()
    assert torch.equal(out["next", "observation"], td["observation"])
    assert env.rollout(10).batch_size == (6, 1)  # stops at the first (every) done


def test_rows_are_drawn_without_replacement_per_pass(table):
    env = make(table, [4])
    env.set_seed(0)
    seen = []
    for _ in range(3):  # 12 rows: two full passes
        seen.extend(env.reset()["observation"][:, 0].long().tolist())
    assert sorted(seen[:6]) == list(range(6)) and sorted(seen[6:]) == list(range(6))


def test_seeding_is_reproducible(table):
    def rows(env, seed):
        env.set_seed(seed)
        return torch.stack([env.reset()["observation"] for _ in range(5)])

    a, b = make(table, [3]), make(table, [3])
    assert torch.equal(rows(a, 1), rows(b, 1))
    assert torch.equal(rows(a, 1), rows(a, 1))
    assert not torch.equal(rows(a, 1), rows(a, 2))
    torch.manual_seed(0)
    c = make(table, [3])
    torch.manual_seed(0)
    d = make(table, [3])
    assert torch.equal(c.reset()["observation"], d.reset()["observation"])


def test_partial_reset_draws_rows_for_the_marked_sub_envs_only(table):
    env = make(table, [3])
    td = env.reset()
    before = td["observation"].clone()
    td["_reset"] = torch.tensor([[False], [True], [False]])
    td = env.reset(td)
    assert torch.equal(td["observation"][[0, 2]], before[[0, 2]])
    assert td["observation"][1, 0] not in before[:, 0]  # the next row of the pass
    assert "_reset" not in td.keys()
    # step_and_maybe_reset: every sub-env is done after a step, so all are reset
    td["action"] = td["y"]
    out, nxt = env.step_and_maybe_reset(td)
    assert out["next", "reward"].eq(1).all() and not nxt["done"].any()


def test_step_needs_only_the_action(table):
    env = make(table, [3])
    td = env.reset()
    labels = td["y"].clone()
    # the env rewards the rows it showed, whatever the input says they are
    out = env.step(td.select().set("action", labels).set("y", (labels + 1) % 3))
    assert out["next", "reward"].eq(1).all() and torch.equal(out["next", "y"], labels)


def test_step_mask_skips_sub_envs(table):
    env = make(table, [3])
    td = env.reset()
    td["action"] = td["y"]
    td["_step"] = torch.tensor([True, False, True])
    out = env.step(td)
    assert out["next", "reward"].squeeze(-1).tolist() == [1.0, 0.0, 1.0]


def test_errors(table, tmp_path, monkeypatch):
    env = make(table, [2], validate_actions=False)
    td = env.reset()
    td["action"] = torch.zeros(2, 1, dtype=torch.int64)
    with pytest.raises(ValueError, match="'action' has shape \\[2, 1\\], expected \\[2\\]"):
        env.step(td)
    with pytest.raises(DatasetNotFoundError, match="not found"):
        OpenMLEnv("shuttle", root=tmp_path / "empty", download=False)
    monkeypatch.setattr("torchrl.data.datasets.openml._has_openml", False)
    with pytest.raises(ImportError, match="pip install openml"):
        OpenMLEnv("shuttle", root=tmp_path / "empty")


def test_missing_pandas_names_the_extra(table, monkeypatch):
    monkeypatch.setattr("torchrl.data.datasets.openml._has_pandas", False)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[offline\]"'):
        make(table)


def test_csv_table_and_declared_target(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("label,f1,f2\n0,1.0,2.0\n1,3.0,4.0\n1,5.0,6.0\n")
    env = OpenMLEnv("t", batch_size=[3], data_file=path, root=tmp_path, target="label")
    td = env.reset()
    assert td["observation"].shape == (3, 2) and sorted(td["y"].tolist()) == [0, 1, 1]


def test_serial_and_parallel_env_with_collector(table):
    from torchrl.collectors import SyncDataCollector

    def make_one():
        return make(table, [2])

    serial = SerialEnv(2, make_one)
    check_env_specs(serial)
    serial.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = ParallelEnv(2, make_one)
    try:
        env.set_seed(0)
        collector = SyncDataCollector(env, None, frames_per_batch=24, total_frames=24)
        (batch,) = list(collector)
        collector.shutdown()
    finally:
        if not env.is_closed:
            env.close()
    assert batch["next", "observation"].shape == (2, 2, 6, 2)
    assert batch["next", "done"].all()
    # every step is its own trajectory
    assert batch["collector", "traj_ids"].flatten().unique().numel() == 24
    # each worker shows the 6 rows once per pass of its own seeded order
    rows = batch["observation"][..., 0].long()
    for worker in range(2):
        seen = rows[worker].transpose(0, 1).reshape(-1)  # time-major, 2 rows per step
        assert sorted(seen[:6].tolist()) == list(range(6))
