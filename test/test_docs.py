"""The documentation site's sources: API reference coverage and links to every script.

Fast: parses the rst sources, builds nothing (``make docs`` builds the site, with warnings as
errors, and runs ``tools/docs_linkcheck.py`` on it).
"""

from __future__ import annotations

import doctest
import importlib.util
import inspect
import re
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _tool(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


docs_api = _tool("docs_api")

# Pages written by hand (generated pages under _generated/, api/generated/ and the gallery's
# output in tutorials/ do not count as links).
GENERATED = ("_build", "_generated", "api/generated", "tutorials")


def _hand_written_rst() -> dict[str, str]:
    out = {}
    for path in DOCS.rglob("*.rst"):
        rel = path.relative_to(DOCS).as_posix()
        if any(rel.startswith(g + "/") for g in GENERATED):
            continue
        out[rel] = path.read_text()
    return out


def _scripts(folder: Path) -> list[str]:
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*.py")
        if not any(part.startswith("_") for part in p.relative_to(folder).parts)
    )


def test_every_public_name_is_in_the_api_reference() -> None:
    names = docs_api.public_names()
    assert not docs_api.IMPORT_ERRORS, f"packages that do not import: {docs_api.IMPORT_ERRORS}"
    assert len(names) > 500
    missing = docs_api.missing_names(names)
    assert not missing, (
        f"{len(missing)} public names are not in docs/api/*.rst (run "
        f"`python tools/docs_api.py --update`): {sorted({n.path for n in missing})}"
    )


def test_api_reference_has_no_stale_entries() -> None:
    assert docs_api.stale_entries() == []


def _is_class_or_function(obj: object) -> bool:
    return inspect.isclass(obj) or inspect.isroutine(obj)


def _unique_public_objects() -> list[docs_api.PublicName]:
    """One public name per object (an alias such as ``CompositeSpec`` is its object's)."""
    seen: dict[int, docs_api.PublicName] = {}
    for n in docs_api.public_names():
        seen.setdefault(id(n.obj), n)
    return list(seen.values())


def test_every_public_class_and_function_has_an_example() -> None:
    # The docstring's own text (a class inherits no docstring here): every public class and
    # function shows its use in a doctest that `make test` runs (--doctest-modules).
    names = [n for n in _unique_public_objects() if _is_class_or_function(n.obj)]
    assert len(names) > 500
    missing = sorted(n.path for n in names if ">>>" not in (getattr(n.obj, "__doc__", None) or ""))
    assert not missing, (
        f"{len(missing)} public classes/functions have no `>>>` example in their docstring "
        f"(add an Examples: section): {missing}"
    )


def _api_prose() -> dict[str, str]:
    """The hand-written text of each ``docs/api`` page (the managed region left out)."""
    out = {}
    for path in sorted((DOCS / "api").glob("*.rst")):
        head, _, rest = path.read_text().partition(docs_api.BEGIN)
        _, _, tail = rest.partition(docs_api.END)
        out[path.name] = head + "\n" + tail
    return out


def test_every_public_constant_has_an_example_on_its_page() -> None:
    # Constants (dicts, tuples, strings, typing aliases, ...) carry no docstring of their own:
    # their examples are doctests in the prose of the docs/api pages (run below).
    example_lines = "\n".join(
        line
        for text in _api_prose().values()
        for line in text.splitlines()
        if line.lstrip().startswith((">>>", "..."))
    )
    constants = [n for n in _unique_public_objects() if not _is_class_or_function(n.obj)]
    missing = sorted(
        n.path for n in constants if not re.search(rf"\b{re.escape(n.name)}\b", example_lines)
    )
    assert not missing, (
        f"public constants with no doctest naming them in the prose of docs/api/*.rst (outside "
        f"the api-names region): {missing}"
    )


@pytest.mark.parametrize("page", sorted(p for p, t in _api_prose().items() if ">>>" in t))
def test_api_page_examples_run(page: str) -> None:
    test = doctest.DocTestParser().get_doctest(_api_prose()[page], {}, page, page, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    output: list[str] = []
    result = runner.run(test, out=output.append)
    assert result.failed == 0, "".join(output)


def test_documented_paths_parser(tmp_path) -> None:
    (tmp_path / "x.rst").write_text(
        "T\n=\n\n.. autosummary::\n   :toctree: generated\n\n   ~torchrl.envs.GymEnv\n"
        "   torchrl.data.ReplayBuffer\n\nprose torchrl.not.Listed\n\n"
        ".. autoclass:: torchrl.envs.EnvBase\n"
    )
    paths = docs_api.documented_paths(tmp_path)["x.rst"]
    assert paths == ["torchrl.envs.GymEnv", "torchrl.data.ReplayBuffer", "torchrl.envs.EnvBase"]
    from torchrl.envs import GymEnv

    gym = docs_api.PublicName("torchrl.envs", "GymEnv", GymEnv)
    other = docs_api.PublicName("torchrl.envs", "NotListed", object())
    assert docs_api.missing_names([gym, other], tmp_path) == [other]


_EXAMPLE_ROLE = re.compile(r":example:`(?:examples/)?([^`]+\.py)`")


def _linked_examples() -> set[str]:
    return {m for text in _hand_written_rst().values() for m in _EXAMPLE_ROLE.findall(text)}


def test_every_example_is_linked_from_a_page() -> None:
    linked = _linked_examples()
    unlinked = [s for s in _scripts(ROOT / "examples") if s not in linked]
    assert not unlinked, f"examples no page links with :example:`...`: {unlinked}"


def test_example_links_point_to_scripts() -> None:
    dead = sorted(s for s in _linked_examples() if not (ROOT / "examples" / s).is_file())
    assert not dead, f":example: links to scripts that do not exist: {dead}"


def test_every_tutorial_is_linked_from_a_page() -> None:
    text = "\n".join(_hand_written_rst().values())
    unlinked = [
        s
        for s in _scripts(ROOT / "tutorials")
        if not re.search(rf":doc:`[^`]*tutorials/{re.escape(s[:-3])}`", text)
    ]
    assert not unlinked, f"tutorials no hand-written page links with :doc:: {unlinked}"


def test_every_benchmark_has_a_section() -> None:
    text = (DOCS / "benchmarks.rst").read_text()
    shown = set(re.findall(r"^\.\. benchmark-results:: (\S+)", text, re.M))
    missing = [s for s in _scripts(ROOT / "benchmarks") if s[:-3] not in shown and "/" not in s]
    assert not missing, f"benchmarks not on docs/benchmarks.rst: {missing}"


def test_summary_line_parser() -> None:
    docs_record = _tool("docs_record")
    out = "noise\nPPO CartPole-v1: final deterministic evaluation return 500.0 (target 475); "
    out += "solved at 6144 frames; 6144 frames in 3.8 s\n"
    s = docs_record.parse_summary(out)
    assert s["final_score"] == 500.0 and s["target"] == 475.0 and s["solved_at"] == 6144
    assert s["frames"] == 6144 and s["wall_s"] == 3.8
    s = docs_record.parse_summary(
        "X: final deterministic evaluation return -150.5 (10 episodes); 9 frames in 1.0 s"
    )
    assert s["final_score"] == -150.5 and s["target"] is None
    s = docs_record.parse_summary(
        "GAIL CartPole-v1: expert return 500.0 (9 PPO frames, 1.0 s); final deterministic "
        "evaluation return 480.5 (target 450.0); reached at 2048 frames; 4096 GAIL frames in 20.5 s"
    )
    assert (s["final_score"], s["target"], s["solved_at"]) == (480.5, 450.0, 2048)
    assert (s["frames"], s["wall_s"]) == (4096, 20.5)
    s = docs_record.parse_summary(
        "IQL Pendulum-v1 (offline): final deterministic evaluation return -160.2; behaviour "
        "policy -499.0; 5000 gradient steps in 60.0 s"
    )
    assert (s["final_score"], s["frames"], s["budget_unit"]) == (-160.2, 5000, "gradient steps")
    assert docs_record.parse_summary("no summary here") is None


def test_device_machine_file_parser(tmp_path) -> None:
    """``docs_record.py device`` reads the machine that ``tools/device_checks.sh`` described."""
    docs_record = _tool("docs_record")
    path = tmp_path / "machine.txt"
    path.write_text(
        "name, memory.total [MiB], driver_version\n"
        "NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04\n"
        "cores: 16\n"
        "3.12.3 2.11.0+cu130 True 0.15.3 2.5.2\n"
    )
    assert docs_record.device_machine(path) == {
        "gpu": "NVIDIA H100 80GB HBM3 (81559 MiB, 580.159.04)",
        "cores": "16 cores",
        "torch": "torch 2.11.0+cu130",
        "python": "Python 3.12.3",
    }


@pytest.mark.slow
def test_landing_page_example_runs(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["quickstart.py"])
    runpy.run_path(str(DOCS / "quickstart.py"), run_name="__main__")
    assert "mean return" in capsys.readouterr().out


def test_linkcheck_finds_broken_files_and_anchors(tmp_path) -> None:
    docs_linkcheck = _tool("docs_linkcheck")
    (tmp_path / "sub").mkdir()
    (tmp_path / "index.html").write_text(
        '<a href="sub/page.html#here">ok</a><a href="sub/page.html#gone">bad anchor</a>'
        '<a href="missing.html">bad file</a><a href="https://example.org/x">external</a>'
        '<img src="img.png"><a href="#top">self</a><p id="top"></p>'
    )
    (tmp_path / "sub" / "page.html").write_text(
        '<h1 id="here">x</h1><a href="../index.html">up</a>'
    )
    broken = docs_linkcheck.broken_links(tmp_path)
    assert sorted(link for _, link in broken) == ["img.png", "missing.html", "sub/page.html#gone"]
