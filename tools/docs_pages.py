"""Sphinx hooks of the documentation build (imported by ``docs/conf.py``).

* ``generate_pages`` writes ``docs/_generated/examples/<script>.rst``: one page per script of
  ``examples/`` showing its docstring, its command and its source. Pages link to them with the
  ``:example:`` role (``:example:`ppo_cartpole.py``` or ``:example:`offline/iql.py```); a script
  that does not exist is a build warning (an error under ``-W``).
* ``.. example-results:: ppo_cartpole`` renders the recorded run of an example
  (``docs/results/ppo_cartpole.json`` and its learning curve, written by
  ``tools/docs_record.py``), or says that none is recorded and how to record it.
* ``.. benchmark-results:: gae`` renders ``docs/benchmarks/gae.json`` (written by
  ``tools/docs_record.py``): the machine, the command and one table of its records.
* ``.. loss-keys:: torchrl.objectives.PPOLoss`` renders the keys a loss reads, from its
  ``default_keys`` (renamed with ``loss.set_keys(...)``).

Nothing here runs an example or a benchmark: the build only reads what they recorded.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.util import logging

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"
RESULTS = DOCS / "results"
BENCHMARKS = DOCS / "benchmarks"
GENERATED = DOCS / "_generated"

logger = logging.getLogger(__name__)


def example_scripts() -> list[str]:
    """Every example script, relative to ``examples/`` (helpers starting with ``_`` left out)."""
    out = []
    for path in sorted(EXAMPLES.rglob("*.py")):
        rel = path.relative_to(EXAMPLES)
        if any(part.startswith("_") for part in rel.parts):
            continue
        out.append(rel.as_posix())
    return out


def _docstring(path: Path) -> str:
    import ast

    try:
        return ast.get_docstring(ast.parse(path.read_text())) or ""
    except SyntaxError:
        return ""


def _write_if_changed(path: Path, text: str) -> None:
    # Rewriting an unchanged file would make Sphinx re-read it on every build.
    if path.exists() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _api_page(dotted: str) -> str:
    module, _, name = dotted.rpartition(".")
    obj = getattr(importlib.import_module(module), name)
    if isinstance(obj, type):
        body = [f".. autoclass:: {name}", "   :members:", "   :show-inheritance:"]
    elif callable(obj):
        body = [f".. autofunction:: {name}"]
    else:
        body = [f".. autodata:: {name}", "   :annotation:"]
    return "\n".join(
        [":orphan:", "", name, "=" * len(name), "", f".. currentmodule:: {module}", "", *body, ""]
    )


def generate_api_pages() -> None:
    """One page per name of the API reference's tables, under ``docs/_generated/api/``.

    The pages are orphans (reached from the tables, not from the navigation), so the sidebar
    of every page stays small; autosummary's own stub pages would all enter the navigation.
    """
    import docs_api

    out_dir = GENERATED / "api"
    wanted = set()
    for paths in docs_api.documented_paths().values():
        for dotted in paths:
            target = out_dir / f"{dotted}.rst"
            wanted.add(target)
            _write_if_changed(target, _api_page(dotted))
    for old in out_dir.glob("*.rst") if out_dir.exists() else []:
        if old not in wanted:
            old.unlink()


def generate_pages(app: Any = None) -> None:
    """Writes the example pages and the API reference's per-name pages under ``_generated/``."""
    generate_api_pages()
    out_dir = GENERATED / "examples"
    wanted = set()
    for rel in example_scripts():
        path = EXAMPLES / rel
        doc = _docstring(path)
        title = f"examples/{rel}"
        summary = doc.split("\n\n")[0].replace("\n", " ") if doc else ""
        rest = doc[len(doc.split("\n\n")[0]) :].strip() if doc else ""
        lines = [
            ":orphan:",
            "",
            title,
            "=" * len(title),
            "",
        ]
        if summary:
            lines += [summary, ""]
        if rest:
            lines += [rest, ""]
        lines += [
            f"Run it from the repository root: ``python examples/{rel}`` (``--help`` lists its",
            "options).",
            "",
            f".. literalinclude:: /../examples/{rel}",
            "   :language: python",
            "   :linenos:",
            "",
        ]
        target = out_dir / (rel[: -len(".py")] + ".rst")
        wanted.add(target)
        _write_if_changed(target, "\n".join(lines))
    for old in out_dir.rglob("*.rst") if out_dir.exists() else []:
        if old not in wanted:
            old.unlink()


def example_role(
    name: str,
    rawtext: str,
    text: str,
    lineno: int,
    inliner: Any,
    options: dict | None = None,
    content: list | None = None,
) -> tuple[list, list]:
    """``:example:`ppo_cartpole.py``` links to the generated page of ``examples/ppo_cartpole.py``."""
    rel = text.strip()
    if rel.startswith("examples/"):
        rel = rel[len("examples/") :]
    if not (EXAMPLES / rel).is_file() or not rel.endswith(".py"):
        msg = inliner.reporter.warning(
            f":example: role: examples/{rel} is not an example script", line=lineno
        )
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    env = inliner.document.settings.env
    ref = addnodes.pending_xref(
        rawtext,
        refdomain="std",
        reftype="doc",
        reftarget="/_generated/examples/" + rel[: -len(".py")],
        refexplicit=True,
        refdoc=env.docname,
    )
    ref += nodes.literal(rawtext, f"examples/{rel}")
    return [ref], []


def _machine_line(data: dict) -> str:
    machine = data.get("machine") or {}
    keys = ("gpu", "cpu", "cores", "torch", "python")
    parts = [str(machine[k]) for k in keys if machine.get(k)]
    when = data.get("date", "unknown date")
    return f"{', '.join(parts) or 'unknown machine'}; recorded {when}"


class _RstDirective(Directive):
    """A directive that renders reStructuredText it writes itself."""

    def render(self, lines: list[str]) -> list[nodes.Node]:
        container = nodes.container()
        source = self.state_machine.get_source(self.lineno)
        self.state.nested_parse(StringList(lines, source=source), self.content_offset, container)
        return container.children


class ExampleResultsDirective(_RstDirective):
    """``.. example-results:: NAME``: the recorded run of ``examples/NAME.py``."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        path = RESULTS / f"{name}.json"
        # re-read this page when the record appears or changes (a missing file counts as changed)
        self.state.document.settings.env.note_dependency(str(path))
        if not path.exists():
            return self.render(
                [
                    f".. note:: No recorded run of :example:`{name}.py` yet. Record one with",
                    f"   ``python tools/docs_record.py example {name}`` (then rebuild the docs).",
                    "",
                ]
            )
        data = json.loads(path.read_text())
        rows = [
            ("final score", data.get("final_score_text", "")),
            (data.get("budget_unit") or "frames", str(data.get("frames") or "")),
            ("wall time", f"{data['wall_s']:.1f} s" if data.get("wall_s") is not None else ""),
            ("command", f"``{data['command']}``"),
            ("machine", _machine_line(data)),
        ]
        if data.get("target") is not None:
            solved = data.get("solved_at")
            rows.insert(
                1,
                (
                    "target",
                    f"{data['target']:g}: "
                    + (f"reached at {solved} frames" if solved is not None else "not reached"),
                ),
            )
        lines = [".. list-table::", "   :widths: 20 80", ""]
        for key, value in rows:
            lines += [f"   * - {key}", f"     - {value or '(not reported)'}"]
        lines.append("")
        if data.get("curve"):
            lines += [
                f".. figure:: /results/{data['curve']}",
                "   :width: 600",
                "",
                f"   Learning curve written by the run above ({data.get('title', name)}).",
                "",
            ]
        return self.render(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, sort_keys=True)
    else:
        text = str(value)
    text = text.replace("|", "/").replace("`", "'").replace("*", "\\*")
    return text if len(text) <= 80 else text[:77] + "..."


def bar_plot(records: list[dict], label_keys: list[str], metric: str, path: Path) -> bool:
    """A horizontal bar chart of ``metric`` per record, labelled by ``label_keys``.

    Returns False (and writes nothing) when no record has a numeric ``metric``.
    """
    rows = [
        (" / ".join(str(r.get(k, "")) for k in label_keys), float(r[metric]))
        for r in records
        if isinstance(r.get(metric), (int, float))
    ]
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.3 * len(rows) + 1.0))
    ax.barh([r[0] for r in rows], [r[1] for r in rows], color="tab:blue")
    ax.invert_yaxis()
    ax.set_xlabel(metric)
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


class BenchmarkResultsDirective(_RstDirective):
    """``.. benchmark-results:: NAME``: the records of ``benchmarks/NAME.py`` as a table.

    Options: ``:metric: KEY`` and ``:label: KEY1, KEY2`` add a bar chart of that metric.
    Every key of every record is shown: past 10 columns the table continues in another one.
    """

    required_arguments = 1
    option_spec = {"metric": str, "label": str}

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        path = BENCHMARKS / f"{name}.json"
        self.state.document.settings.env.note_dependency(str(path))
        if not path.exists():
            return self.render(
                [
                    f".. note:: No recorded run of ``benchmarks/{name}.py`` yet: "
                    f"``python tools/docs_record.py bench {name}``.",
                    "",
                ]
            )
        data = json.loads(path.read_text())
        records = [r for r in data.get("records", []) if isinstance(r, dict)]
        lines = [
            f"Command: ``{data['command']}`` (exit status {data.get('returncode', '?')}); "
            f"machine: {_machine_line(data)}.",
            "",
        ]
        metric = self.options.get("metric")
        if metric:
            labels = [k.strip() for k in self.options.get("label", "impl").split(",")]
            png = GENERATED / "benchmarks" / f"{name}-{metric}.png"
            if bar_plot(data.get("records", []), labels, metric, png):
                lines += [f".. image:: /_generated/benchmarks/{png.name}", "   :width: 640", ""]
        if not records:
            lines += ["The run printed no JSON records.", ""]
            return self.render(lines)
        columns: list[str] = []
        for r in records:
            columns += [k for k in r if k not in columns and k != "bench"]
        # Wide records are shown as several tables of at most 10 columns, each repeating the
        # first column; a row whose cells of a table are all empty is left out of it.
        first, rest = columns[0], columns[1:]
        for start in range(0, max(len(rest), 1), 9):
            chunk = [first, *rest[start : start + 9]]
            rows = [[_cell(r.get(c, "")) for c in chunk] for r in records]
            rows = [row for row in rows if len(chunk) == 1 or any(row[1:])]
            lines += [".. list-table::", "   :header-rows: 1", ""]
            lines += ["   * - " + chunk[0]] + [f"     - {c}" for c in chunk[1:]]
            for row in rows:
                cells = [c or " " for c in row]
                lines += ["   * - " + cells[0]] + [f"     - {c}" for c in cells[1:]]
            lines.append("")
        return self.render(lines)


class LossKeysDirective(_RstDirective):
    """``.. loss-keys:: torchrl.objectives.PPOLoss``: the keys the loss reads, and their defaults."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        dotted = self.arguments[0]
        module, _, name = dotted.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        keys = getattr(cls, "default_keys", None)
        if keys is None or not dataclasses.is_dataclass(keys):
            raise self.error(f"loss-keys: {dotted} has no default_keys dataclass")
        lines = [
            ".. list-table::",
            "   :header-rows: 1",
            "   :widths: 30 70",
            "",
            "   * - ``set_keys`` name",
            "     - default key",
        ]
        for f in dataclasses.fields(keys):
            default = f.default if f.default is not dataclasses.MISSING else None
            if default is None and f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            lines += [f"   * - ``{f.name}``", f"     - ``{default!r}``"]
        lines.append("")
        return self.render(lines)


def skip_tensordict_members(
    app: Any, what: str, name: str, obj: Any, skip: bool, options: Any
) -> bool | None:
    """Leaves out the methods a ``@tensorclass`` copies onto our classes from tensordict.

    Their docstrings link to tensordict's own docs, which this build does not have.
    """
    if what == "class" and (getattr(obj, "__module__", None) or "").startswith("tensordict"):
        return True
    return None


def drop_builtin_docstrings(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Empties the docstring autodoc finds for a constant (``dict.__doc__`` for a dict).

    A module-level constant has no docstring of its own; the one of its type is not about it.
    """
    if what in ("data", "attribute") and type(obj).__module__ == "builtins":
        own = (type(obj).__doc__ or "").strip().splitlines()
        if own and lines and lines[0].strip() == own[0].strip():
            lines[:] = []


def setup_directives(app: Any) -> None:
    """Registers the directives and the role on a Sphinx app."""
    app.add_role("example", example_role)
    app.add_directive("example-results", ExampleResultsDirective)
    app.add_directive("benchmark-results", BenchmarkResultsDirective)
    app.add_directive("loss-keys", LossKeysDirective)
    app.connect("builder-inited", generate_pages)
    app.connect("autodoc-skip-member", skip_tensordict_members)
    app.connect("autodoc-process-docstring", drop_builtin_docstrings)


__all__ = ["example_scripts", "generate_pages", "setup_directives"]
os.environ.setdefault("MPLBACKEND", "Agg")
