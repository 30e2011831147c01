"""Checks and fills the API reference: every public name of the packages' ``__all__`` is listed.

The reference pages (``docs/api/*.rst``) list names in ``autosummary`` tables, grouped by topic
as TorchRL's reference groups them (the page and section of a name come from
``tools/torchrl_api_reference.txt`` when TorchRL documents it, else from the module that
defines it). Each page has one region between the comment lines ``.. api-names-begin`` and
``.. api-names-end``; everything outside it is prose written by hand.

``python tools/docs_api.py`` lists the public names missing from the reference (exit status 1
when some are), with the page and section each would go in.
``python tools/docs_api.py --update`` adds the missing names to their pages' regions (a new
section when needed) and drops entries whose name is no longer public; names already listed
stay where they are, so sections can be reordered or renamed by hand.

A public name is a name in ``__all__`` of ``torchrl`` or of one of its public subpackages
(``torchrl.data`` has no ``__all__``: its public non-module attributes count), leaving out
modules and dunder names. A name counts as documented when some autosummary entry
``pkg.Name`` has the same name and resolves to the same object: an alias (``CompositeSpec``
beside ``Composite``) is listed under its own name.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
API_DIR = ROOT / "docs" / "api"
TORCHRL_REFERENCE = ROOT / "tools" / "torchrl_api_reference.txt"
BEGIN, END = ".. api-names-begin", ".. api-names-end"

# TorchRL reference page -> (our page file, section title)
TORCHRL_PAGES = {
    "envs": ("envs", "Environments"),
    "envs (vectorized)": ("envs", "Batched and asynchronous environments"),
    "envs (multi-agent)": ("envs", "Multi-agent environments"),
    "transforms": ("envs", "Transforms"),
    "env libraries": ("envs", "Simulator wrappers"),
    "specs": ("data", "Specs"),
    "data utils": ("data", "Data utilities"),
    "replay buffers": ("data", "Replay buffers"),
    "storages": ("data", "Storages"),
    "samplers": ("data", "Samplers"),
    "writers": ("data", "Writers"),
    "datasets": ("datasets", "Datasets"),
    "postprocs": ("data", "Post-processing"),
    "modules: actors": ("modules", "Actors"),
    "modules: exploration": ("modules", "Exploration"),
    "modules: value networks and critics": ("modules", "Value networks and critics"),
    "modules: recurrent": ("modules", "Recurrent modules"),
    "modules: models": ("modules", "Models"),
    "modules: world models": ("modules", "World models"),
    "modules: planners": ("modules", "Planners"),
    "modules: distributions": ("modules", "Distributions"),
    "modules: utils": ("modules", "Utilities"),
    "modules: mcts": ("modules", "Monte-Carlo tree search"),
    "modules: inference server": ("inference_server", "Inference server"),
    "objectives: common": ("objectives", "Common"),
    "objectives: value estimators": ("objectives", "Value estimators"),
    "objectives: functional": ("objectives", "Functional value computations"),
    "objectives: value-based": ("objectives", "Value-based losses"),
    "objectives: actor-critic": ("objectives", "Actor-critic losses"),
    "objectives: policy gradient": ("objectives", "Policy-gradient losses"),
    "objectives: offline": ("objectives", "Offline losses"),
    "objectives: other": ("objectives", "Other losses"),
    "objectives: multi-agent": ("objectives", "Multi-agent losses"),
    "collectors": ("collectors", "Collectors"),
    "collectors (legacy names)": ("collectors", "Collectors"),
    "collectors: distributed": ("collectors", "Distributed collectors"),
    "weight update": ("weight_update", "Weight synchronisation"),
    "trainers": ("trainers", "Trainer"),
    "trainers: hooks": ("trainers", "Hooks"),
    "trainers: learners": ("trainers", "Learners"),
    "loggers": ("trainers", "Loggers"),
    "checkpoint": ("checkpoint", "Checkpointing"),
    "services": ("services", "Service registries"),
    "utils": ("torchrl", "Utilities"),
}

# Defining-module prefix -> page file, longest prefix first wins (names TorchRL has no page for).
MODULE_PAGES = {
    "torchrl.modules.inference_server": "inference_server",
    "torchrl.trainers.pbt": "pbt",
    "torchrl.data.datasets": "datasets",
    "torchrl.data": "data",
    "torchrl.envs": "envs",
    "torchrl.modules": "modules",
    "torchrl.objectives": "objectives",
    "torchrl.collectors.weight_updaters": "weight_update",
    "torchrl.collectors.distributed.weight_updaters": "weight_update",
    "torchrl.collectors": "collectors",
    "torchrl.weight_update": "weight_update",
    "torchrl.trainers": "trainers",
    "torchrl.record": "trainers",
    "torchrl.checkpoint": "checkpoint",
    "torchrl.agents": "agents",
    "torchrl": "torchrl",
}

# A defining module's last public component -> a section title (else the component, capitalised).
SECTION_TITLES = {
    "replay_buffers": "Replay buffers",
    "storages": "Storages",
    "samplers": "Samplers",
    "writers": "Writers",
    "checkpointers": "Storage checkpointers",
    "specs": "Specs",
    "transforms": "Transforms",
    "libs": "Simulator wrappers",
    "custom": "Pure-torch environments",
    "mujoco": "Pure-torch environments",
    "model_based": "Model-based environments",
    "batched": "Batched and asynchronous environments",
    "distributed": "Distributed collectors",
    "loggers": "Loggers",
    "algorithms": "Algorithm trainers",
    "configs": "Configuration (Hydra and dataclasses)",
    "helpers": "Builders",
    "value": "Value estimators",
    "multiagent": "Multi-agent losses",
    "models": "Models",
    "distributions": "Distributions",
    "mcts": "Monte-Carlo tree search",
    "pbt": "Population-based training",
    "openml": "Dataset readers",
    "d4rl": "Dataset readers",
    "lerobot": "Dataset readers",
    "minari_data": "Dataset readers",
    "atari_dqn": "Dataset readers",
    "registry": "Registry",
    "common": "Common",
    "utils": "Utilities",
    "gym_like": "Environments",
    "envs": "Environments",
    "hooks_extra": "Hooks",
}


@dataclass(frozen=True)
class PublicName:
    """One public name: the package whose ``__all__`` holds it, the name and the object."""

    package: str
    name: str
    obj: object

    @property
    def path(self) -> str:
        return f"{self.package}.{self.name}"


def public_packages() -> list[str]:
    """``torchrl`` and its subpackages whose dotted path has no private component."""
    import torchrl

    names = ["torchrl"]
    for info in pkgutil.walk_packages(torchrl.__path__, "torchrl."):
        if info.ispkg and not any(p.startswith("_") for p in info.name.split(".")):
            names.append(info.name)
    return names


def _exported(module: types.ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and not isinstance(v, type(annotations_feature()))
        ]
    return list(names)


def annotations_feature() -> object:
    """The ``__future__.annotations`` object, which leaks into modules without ``__all__``."""
    import __future__

    return __future__.annotations


IMPORT_ERRORS: dict[str, str] = {}


def public_names() -> list[PublicName]:
    """Every (package, name) pair of the packages' ``__all__``, modules and dunders left out.

    A package that fails to import is skipped and its error kept in ``IMPORT_ERRORS``.
    """
    out = []
    for package in public_packages():
        try:
            module = importlib.import_module(package)
        except Exception as err:  # a broken package must not hide the others' names
            IMPORT_ERRORS[package] = f"{type(err).__name__}: {err}"
            continue
        for name in _exported(module):
            if name.startswith("__"):
                continue
            obj = getattr(module, name)
            if isinstance(obj, types.ModuleType):
                continue
            out.append(PublicName(package, name, obj))
    return out


_ENTRY_RE = re.compile(r"^\s+~?(torchrl(?:\.[A-Za-z_][A-Za-z0-9_]*)+)\s*$")
_AUTO_RE = re.compile(
    r"^\.\.\s+auto(?:class|function|data|attribute|exception|method)::\s+(torchrl[\w.]+)"
)


def documented_paths(api_dir: Path = API_DIR) -> dict[str, list[str]]:
    """Dotted paths listed in ``autosummary`` tables and ``auto*::`` directives, per rst file.

    Parses the sources only (no Sphinx): an entry is an indented line holding one dotted
    ``torchrl.…`` path (optionally with ``~``) inside an ``.. autosummary::`` block.
    """
    found: dict[str, list[str]] = {}
    for path in sorted(api_dir.glob("*.rst")):
        paths: list[str] = []
        in_summary = False
        for line in path.read_text().splitlines():
            if line.startswith(".. autosummary::"):
                in_summary = True
                continue
            if in_summary:
                if line and not line[0].isspace():
                    in_summary = False
                else:
                    m = _ENTRY_RE.match(line)
                    if m:
                        paths.append(m.group(1))
                    continue
            m = _AUTO_RE.match(line)
            if m:
                paths.append(m.group(1))
        found[path.name] = paths
    return found


def resolve(path: str) -> tuple[bool, object]:
    """Imports ``a.b.C`` as attribute ``C`` of module ``a.b`` (False when it does not resolve)."""
    module, _, name = path.rpartition(".")
    try:
        return True, getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return False, None


def missing_names(
    names: list[PublicName] | None = None, api_dir: Path = API_DIR
) -> list[PublicName]:
    """Public names with no documented entry of the same name resolving to the same object."""
    names = public_names() if names is None else names
    by_name: dict[str, list[object]] = {}
    for paths in documented_paths(api_dir).values():
        for p in paths:
            ok, obj = resolve(p)
            if ok:
                by_name.setdefault(p.rpartition(".")[2], []).append(obj)
    return [n for n in names if not any(o is n.obj for o in by_name.get(n.name, []))]


def stale_entries(api_dir: Path = API_DIR) -> list[str]:
    """Documented paths that no longer resolve (a renamed or removed name)."""
    return [p for ps in documented_paths(api_dir).values() for p in ps if not resolve(p)[0]]


def _torchrl_sections() -> dict[str, tuple[str, str]]:
    """TorchRL's name -> (our page, section) from ``tools/torchrl_api_reference.txt``."""
    out: dict[str, tuple[str, str]] = {}
    page = None
    for line in TORCHRL_REFERENCE.read_text().splitlines():
        if line.startswith("# page:"):
            page = line[len("# page:") :].strip()
        elif line and not line.startswith("#") and page in TORCHRL_PAGES:
            name = line.split()[-1].rpartition(".")[2]
            out.setdefault(name, TORCHRL_PAGES[page])
    return out


def placement(name: PublicName, torchrl_sections: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """The page and section a name belongs in."""
    defining = getattr(name.obj, "__module__", None)
    if not isinstance(defining, str) or not defining.startswith("torchrl"):
        defining = name.package
    page = next(
        MODULE_PAGES[p]
        for p in sorted(MODULE_PAGES, key=len, reverse=True)
        if defining == p or defining.startswith(p + ".")
    )
    if name.name in torchrl_sections and page not in ("pbt", "inference_server", "datasets"):
        return torchrl_sections[name.name]
    parts = [p for p in defining.split(".")[1:] if not p.startswith("_")]
    last = parts[-1] if parts else "torchrl"
    for part in reversed(parts):
        if part in SECTION_TITLES:
            return page, SECTION_TITLES[part]
    return page, last.replace("_", " ").capitalize()


def _shortest(names: list[PublicName]) -> Iterator[PublicName]:
    """One entry per (name, object): the one exported by the shortest package path."""
    best: dict[tuple[str, int], PublicName] = {}
    for n in names:
        key = (n.name, id(n.obj))
        if key not in best or len(n.package) < len(best[key].package):
            best[key] = n
    yield from best.values()


def _parse_region(text: str) -> tuple[str, dict[str, list[str]], str]:
    head, sep, rest = text.partition(BEGIN)
    if not sep:
        return text.rstrip() + "\n\n", {}, ""
    body, _, tail = rest.partition(END)
    sections: dict[str, list[str]] = {}
    lines = body.splitlines()
    current = None
    for i, line in enumerate(lines):
        if i + 1 < len(lines) and set(lines[i + 1]) == {"-"} and line.strip():
            current = line.strip()
            sections.setdefault(current, [])
        m = _ENTRY_RE.match(line)
        if m and current is not None:
            sections[current].append(m.group(1))
    return head, sections, tail


def _render_region(sections: dict[str, list[str]]) -> str:
    out = [BEGIN, ""]
    for title, paths in sections.items():
        if not paths:
            continue
        out += [title, "-" * len(title), "", ".. autosummary::", "   :nosignatures:", ""]
        out += [f"   ~{p}" for p in paths]
        out.append("")
    out.append(END)
    return "\n".join(out)


def update(api_dir: Path = API_DIR) -> list[str]:
    """Adds missing names to their pages and drops stale entries; returns the pages written."""
    missing = list(_shortest(missing_names(api_dir=api_dir)))
    sections_of = _torchrl_sections()
    wanted: dict[str, list[tuple[str, str]]] = {}
    for n in sorted(missing, key=lambda n: n.path):
        page, section = placement(n, sections_of)
        wanted.setdefault(page, []).append((section, n.path))
    stale = set(stale_entries(api_dir))
    written = []
    for page in sorted(set(wanted) | {p.stem for p in api_dir.glob("*.rst")}):
        path = api_dir / f"{page}.rst"
        text = path.read_text() if path.exists() else f"{page}\n{'=' * len(page)}\n"
        head, sections, tail = _parse_region(text)
        before = {k: list(v) for k, v in sections.items()}
        for title in sections:
            sections[title] = [p for p in sections[title] if p not in stale]
        for section, dotted in wanted.get(page, []):
            sections.setdefault(section, []).append(dotted)
        if sections == before and BEGIN in text:
            continue
        path.write_text(head + _render_region(sections) + (tail or "\n"))
        written.append(str(path))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="add missing names to the pages")
    args = parser.parse_args(argv)
    if args.update:
        for path in update():
            print(f"wrote {path}")
    missing = missing_names()
    stale = stale_entries()
    sections_of = _torchrl_sections()
    for n in missing:
        page, section = placement(n, sections_of)
        print(f"missing: {n.path} (page docs/api/{page}.rst, section {section!r})")
    for p in stale:
        print(f"stale: {p} does not resolve")
    for package, err in IMPORT_ERRORS.items():
        print(f"import error: {package}: {err}")
    print(f"{len(missing)} public names missing from the API reference, {len(stale)} stale entries")
    return 1 if missing or stale or IMPORT_ERRORS else 0


if __name__ == "__main__":
    sys.exit(main())
