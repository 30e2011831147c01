"""OpenMLExperienceReplay over small tables written here (ARFF, CSV, parquet, OpenML cache)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import torchrl.data.datasets.openml as openml_module
from torchrl.data.datasets.common import DatasetFormatError, DatasetNotFoundError
from torchrl.data.datasets.openml import OpenMLExperienceReplay, read_arff
from torchrl.data.datasets.registry import load_dataset

ARFF = """% a tiny adult-like table
@relation adult
@attribute age numeric
@attribute 'work class' {Private,'Self-emp',Gov}
@attribute hours integer
@attribute class {'<=50K','>50K'}
@data
39,Gov,40,'<=50K'
50,'Self-emp',13,'>50K'
38,Private,?,'<=50K'
53,Private,40,'>50K'
28,?,40,'<=50K'
37,Gov,20,'>50K'
"""


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHRL_DATASETS_ROOT", str(tmp_path / "cache"))
    return tmp_path / "cache" / "openml"


def write_adult(root):
    raw = root / "raw"
    raw.mkdir(parents=True)
    (raw / "adult.arff").write_text(ARFF)


def test_ordinal_and_onehot(root):
    write_adult(root)
    num = OpenMLExperienceReplay("adult_num", batch_size=3)
    # rows 3 and 5 miss a value and are dropped
    assert len(num) == 4 and num.metadata["dropped_rows"] == 2
    rows = num[torch.arange(4)]
    assert rows["X"].dtype == torch.float32 and rows["y"].dtype == torch.int64
    # work class codes follow the declared order Private, Self-emp, Gov
    assert rows["X"].tolist() == [[39, 2, 40], [50, 1, 13], [53, 0, 40], [37, 2, 20]]
    assert rows["y"].tolist() == [0, 1, 1, 1]
    assert num.metadata["classes"] == ["<=50K", ">50K"] and num.num_classes == 2
    assert num.metadata["feature_names"] == ["age", "work class", "hours"]
    assert num.sample()["X"].shape == (3, 3)

    onehot = load_dataset("openml/adult_onehot", batch_size=2)
    x = onehot[torch.arange(4)]["X"]
    assert onehot.metadata["feature_names"] == [
        "age",
        "work class=Private",
        "work class=Self-emp",
        "work class=Gov",
        "hours",
    ]
    assert x[:, 1:4].tolist() == [[0, 0, 1], [0, 1, 0], [1, 0, 0], [0, 0, 1]]
    assert torch.equal(x[:, [0, 4]], rows["X"][:, [0, 2]])


def test_csv_parquet_and_openml_cache(root, tmp_path):
    frame = pd.DataFrame(
        {
            "f1": np.arange(6, dtype=np.float64),
            "color": ["red", "blue", "red", "green", "blue", "red"],
            "label": [3, 1, 3, 2, 10, 1],
        }
    )
    csv_path = tmp_path / "t.csv"
    frame.to_csv(csv_path, index=False)
    data = OpenMLExperienceReplay("mine", data_file=csv_path, target="label")
    rows = data[torch.arange(6)]
    assert rows["X"][:, 1].tolist() == [2, 0, 2, 1, 0, 2]  # blue, green, red sorted
    # numeric classes are ordered by value, not as text
    assert data.metadata["classes"] == ["1", "2", "3", "10"]
    assert rows["y"].tolist() == [2, 0, 2, 1, 3, 0]

    cache = tmp_path / "openml" / "org" / "openml" / "www" / "datasets" / "61"
    cache.mkdir(parents=True)
    frame.to_parquet(cache / "dataset_61.pq")
    (cache / "description.xml").write_text(
        '<oml:data_set_description xmlns:oml="http://openml.org/openml">'
        "<oml:name>t</oml:name><oml:default_target_attribute>label"
        "</oml:default_target_attribute></oml:data_set_description>"
    )
    cached = OpenMLExperienceReplay(dataset_id="t61", data_file=cache, encoding="onehot")
    assert cached.metadata["target"] == "label" and cached[0]["X"].shape == (4,)
    with pytest.raises(ValueError, match="download='force'"):
        OpenMLExperienceReplay("t61", data_file=cache, encoding="ordinal")
    again = OpenMLExperienceReplay("t61", data_file=cache, encoding="ordinal", download="force")
    assert again[0]["X"].shape == (2,)


def test_missing_and_malformed(root, tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        OpenMLExperienceReplay("covertype")
    msg = str(err.value)
    assert "'covertype'" in msg and str(root / "raw" / "covertype") in msg and "openml.org" in msg
    with pytest.raises(ImportError, match="pip install openml"):
        OpenMLExperienceReplay("covertype", download=True)

    bad = tmp_path / "bad.arff"
    bad.write_text(ARFF.replace("53,Private,40,'>50K'", "53,Private,'>50K'"))
    with pytest.raises(DatasetFormatError, match=r"bad\.arff:11: row has 3 values"):
        OpenMLExperienceReplay("bad", data_file=bad)
    (tmp_path / "nodata.arff").write_text("@relation x\n@attribute a numeric\n")
    with pytest.raises(DatasetFormatError, match="no @data section"):
        OpenMLExperienceReplay("nodata", data_file=tmp_path / "nodata.arff")
    good = tmp_path / "good.arff"
    good.write_text(ARFF)
    with pytest.raises(DatasetFormatError, match="target column 'income' is not in the table"):
        OpenMLExperienceReplay("good", data_file=good, target="income")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 nope")
    with pytest.raises(DatasetFormatError, match=r"broken\.parquet: cannot read the table"):
        OpenMLExperienceReplay("broken", data_file=tmp_path / "broken.parquet", target="a")
    outside = tmp_path / "outside.arff"
    outside.write_text(ARFF.replace("39,Gov", "39,Army"))
    with pytest.raises(DatasetFormatError, match="outside its declared categories"):
        OpenMLExperienceReplay("outside", data_file=outside)
    with pytest.raises(ValueError, match="encoding must be"):
        OpenMLExperienceReplay("adult_num", encoding="binary")
    with pytest.raises(ValueError, match="name"):
        OpenMLExperienceReplay()


def test_pandas_missing(root, monkeypatch):
    write_adult(root)
    monkeypatch.setattr(openml_module, "_has_pandas", False)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[offline\]"'):
        OpenMLExperienceReplay("adult_num")


def test_read_arff_quotes(tmp_path):
    path = tmp_path / "q.arff"
    path.write_text(ARFF)
    frame, nominal = read_arff(path)
    assert list(frame.columns) == ["age", "work class", "hours", "class"]
    assert nominal["work class"] == ["Private", "Self-emp", "Gov"]
    assert frame["work class"].tolist()[:2] == ["Gov", "Self-emp"]
    assert np.isnan(frame["hours"][2]) and pd.isna(frame["work class"][4])
