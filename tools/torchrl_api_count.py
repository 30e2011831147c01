"""Counts how many names of TorchRL's API reference resolve at their documented path.

Reads ``tools/torchrl_api_reference.txt`` (one ``module.path Name`` per line, grouped
under ``# page: <name>`` lines), imports each module path once and checks that the
name is an attribute of the module. A module that fails to import counts all of its
names as missing; the error is printed on stderr and kept in the report. Nothing is
imported besides the listed modules themselves, so an optional backend is only
loaded when a listed module loads it on its own.

``python tools/torchrl_api_count.py`` prints a JSON report: the totals, and for each
page ``{"resolved": ..., "total": ..., "missing": [...]}``.
``python tools/torchrl_api_count.py --missing`` prints the missing names page by page
instead (``--page NAME`` keeps only the named pages, and may be repeated).

To measure another checkout, put it first on the path:
``PYTHONPATH=/path/to/checkout python tools/torchrl_api_count.py``; the report says
which ``torchrl`` it imported.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

REFERENCE = Path(__file__).resolve().parent / "torchrl_api_reference.txt"
PAGE_PREFIX = "# page:"
_MODULE_RE = re.compile(r"torchrl(\.[A-Za-z_][A-Za-z0-9_]*)*")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Entry:
    """One documented name: the reference page it sits on, its module and its name."""

    page: str
    module: str
    name: str


def parse_reference(path: Path = REFERENCE) -> list[Entry]:
    """Reads the reference file into a list of entries, in file order.

    Args:
        path: the reference file. Blank lines and ``#`` comments are skipped; a
            ``# page: <name>`` line starts a page; every other line must read
            ``module.path Name``.

    Returns:
        The entries, in the order of the file.

    Raises:
        ValueError: on a malformed line, a name before the first page, an empty or
            repeated page title, or a line listed twice (the line number is given).
    """
    entries: list[Entry] = []
    page: str | None = None
    pages: set[str] = set()
    seen: dict[tuple[str, str], int] = {}
    for lineno, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if line.startswith(PAGE_PREFIX):
            page = line[len(PAGE_PREFIX) :].strip()
            if not page:
                raise ValueError(f"{path}:{lineno}: empty page title")
            if page in pages:
                raise ValueError(f"{path}:{lineno}: page {page!r} appears twice")
            pages.add(page)
            continue
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"{path}:{lineno}: expected 'module.path Name', got {raw!r}")
        module, name = parts
        if not _MODULE_RE.fullmatch(module):
            raise ValueError(f"{path}:{lineno}: module {module!r} is not a dotted torchrl path")
        if not _NAME_RE.fullmatch(name):
            raise ValueError(f"{path}:{lineno}: name {name!r} is not an identifier")
        if page is None:
            raise ValueError(
                f"{path}:{lineno}: {module} {name} comes before any '{PAGE_PREFIX} <name>' line"
            )
        if (module, name) in seen:
            raise ValueError(
                f"{path}:{lineno}: '{module} {name}' already listed on line {seen[module, name]}"
            )
        seen[module, name] = lineno
        entries.append(Entry(page, module, name))
    return entries


def _import(module: str) -> tuple[ModuleType | None, str | None]:
    try:
        return importlib.import_module(module), None
    except Exception as err:  # any failure to import counts the module's names missing
        return None, f"{type(err).__name__}: {err}"


def _has(module: ModuleType, name: str) -> tuple[bool, str | None]:
    try:
        getattr(module, name)
    except AttributeError:
        return False, None
    except Exception as err:  # a lazy attribute that fails to load is missing too
        return False, f"{type(err).__name__}: {err}"
    return True, None


def count(entries: list[Entry]) -> dict[str, Any]:
    """Resolves every entry and builds the report.

    Args:
        entries: the parsed reference (see :func:`parse_reference`).

    Returns:
        A dict with ``torchrl`` (the imported package's path, or ``None``),
        ``total``, ``resolved``, ``pages`` (page title to
        ``{"resolved", "total", "missing"}``, missing names written
        ``module.Name``) and ``errors`` (module or ``module.Name`` to the error
        raised while importing or reading it).
    """
    modules: dict[str, ModuleType | None] = {}
    errors: dict[str, str] = {}
    pages: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if entry.module not in modules:
            modules[entry.module], err = _import(entry.module)
            if err is not None:
                errors[entry.module] = err
        page = pages.setdefault(entry.page, {"resolved": 0, "total": 0, "missing": []})
        page["total"] += 1
        module = modules[entry.module]
        found = False
        if module is not None:
            found, err = _has(module, entry.name)
            if err is not None:
                errors[f"{entry.module}.{entry.name}"] = err
        if found:
            page["resolved"] += 1
        else:
            page["missing"].append(f"{entry.module}.{entry.name}")
    torchrl = sys.modules.get("torchrl")
    return {
        "torchrl": getattr(torchrl, "__file__", None),
        "total": sum(p["total"] for p in pages.values()),
        "resolved": sum(p["resolved"] for p in pages.values()),
        "pages": pages,
        "errors": errors,
    }


def format_missing(report: dict[str, Any], pages: list[str] | None = None) -> str:
    """Writes the missing names of a report as text, page by page.

    Args:
        report: the output of :func:`count`.
        pages: the page titles to keep; all pages when ``None``.

    Returns:
        One ``# page (resolved/total)`` header per page followed by its missing
        names, one per line.

    Raises:
        KeyError: if a requested page is not in the report (the known pages are
            listed).
    """
    known = report["pages"]
    if pages is not None:
        unknown = [p for p in pages if p not in known]
        if unknown:
            raise KeyError(f"unknown page(s) {unknown}; known pages: {list(known)}")
    lines = [f"resolved {report['resolved']} of {report['total']}"]
    for title, page in known.items():
        if pages is not None and title not in pages:
            continue
        lines.append(f"# {title} ({page['resolved']}/{page['total']})")
        lines.extend(f"  {name}" for name in page["missing"])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        description="Count the TorchRL API reference names that resolve here."
    )
    parser.add_argument("--reference", type=Path, default=REFERENCE, help="the reference file")
    parser.add_argument("--missing", action="store_true", help="print the missing names per page")
    parser.add_argument(
        "--page", action="append", help="with --missing: only this page (repeatable)"
    )
    args = parser.parse_args(argv)
    report = count(parse_reference(args.reference))
    for where, err in report["errors"].items():
        print(f"could not load {where}: {err}", file=sys.stderr)
    if args.missing:
        try:
            print(format_missing(report, args.page))
        except KeyError as err:
            parser.error(str(err.args[0]))
    else:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
