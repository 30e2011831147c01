"""The API-reference counter (tools/torchrl_api_count.py) and its reference list."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"
REFERENCE = TOOLS / "torchrl_api_reference.txt"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location(
        "torchrl_api_count", TOOLS / "torchrl_api_count.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # a dataclass looks its module up in sys.modules while being built
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def entries(tool):
    return tool.parse_reference(REFERENCE)


def test_reference_lines_are_well_formed_and_unique():
    line_re = re.compile(r"torchrl(\.[A-Za-z_]\w*)* [A-Za-z_]\w*")
    names = []
    for raw in REFERENCE.read_text().splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        assert line_re.fullmatch(raw), raw
        names.append(raw)
    assert len(names) == len(set(names))
    assert len(names) > 500


def test_reference_parses_into_the_issue_pages(entries):
    assert len(entries) > 500
    pages = {entry.page for entry in entries}
    for page in (
        "envs",
        "transforms",
        "env libraries",
        "replay buffers",
        "storages",
        "samplers",
        "writers",
        "collectors",
        "trainers",
        "trainers: hooks",
        "loggers",
        "checkpoint",
    ):
        assert page in pages
    # nothing from the pages the count leaves out
    assert not [e for e in entries if ".llm" in e.module or ".configs" in e.module]


def test_count_on_the_whole_reference(tool, entries):
    report = tool.count(entries)
    assert report["total"] == len(entries)
    assert 0 < report["resolved"] <= report["total"]
    assert report["torchrl"] is not None
    for page in report["pages"].values():
        assert page["resolved"] + len(page["missing"]) == page["total"]
    json.dumps(report)  # the report is plain JSON


def test_count_resolves_misses_and_reports_import_errors(tool, tmp_path):
    ref = tmp_path / "ref.txt"
    ref.write_text(
        "# a comment\n\n"
        "# page: one\n"
        "torchrl.envs EnvBase\n"
        "torchrl.envs NotARealName\n"
        "# page: two\n"
        "torchrl.no_such_module Thing\n"
        "torchrl.no_such_module Other\n"
    )
    report = tool.count(tool.parse_reference(ref))
    assert report["total"] == 4
    assert report["resolved"] == 1
    assert report["pages"]["one"] == {
        "resolved": 1,
        "total": 2,
        "missing": ["torchrl.envs.NotARealName"],
    }
    assert report["pages"]["two"]["missing"] == [
        "torchrl.no_such_module.Thing",
        "torchrl.no_such_module.Other",
    ]
    assert "ModuleNotFoundError" in report["errors"]["torchrl.no_such_module"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("torchrl.envs EnvBase\n", "before any"),
        ("# page: a\ntorchrl.envs\n", "expected 'module.path Name'"),
        ("# page: a\nnumpy ndarray\n", "not a dotted torchrl path"),
        ("# page: a\ntorchrl.envs Env-Base\n", "not an identifier"),
        ("# page: a\ntorchrl.envs A\n# page: b\ntorchrl.envs A\n", "already listed"),
        ("# page: a\n# page: a\n", "appears twice"),
        ("# page:\n", "empty page title"),
    ],
)
def test_parse_rejects_bad_lines(tool, tmp_path, text, message):
    ref = tmp_path / "ref.txt"
    ref.write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)):
        tool.parse_reference(ref)


def test_command_line_missing_listing(tool, tmp_path, capsys):
    ref = tmp_path / "ref.txt"
    ref.write_text(
        "# page: one\ntorchrl.envs EnvBase\ntorchrl.envs NotARealName\n"
        "# page: two\ntorchrl.no_such_module Thing\n"
    )
    assert tool.main(["--reference", str(ref), "--missing", "--page", "one"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "resolved 1 of 3",
        "# one (1/2)",
        "  torchrl.envs.NotARealName",
    ]
    assert "could not load torchrl.no_such_module: ModuleNotFoundError" in err
    assert tool.main(["--reference", str(ref)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["resolved"] == 1
    with pytest.raises(SystemExit):
        tool.main(["--reference", str(ref), "--missing", "--page", "three"])
    assert "unknown page" in capsys.readouterr().err
