"""Prints the import graph of ``torchrl/`` as JSON and checks its shape.

Reads every module with :mod:`ast` (nothing is imported) and reports:

- ``cycles``: circles between files among module-level imports (imports under
  ``if TYPE_CHECKING:`` and inside functions are left out: they run late, after every
  module has loaded);
- ``cycles_with_late_imports``: the same with imports inside functions counted (a package's
  ``__init__`` importing submodules that import from the package shows up here);
- ``upward``: imports, at any depth, from a higher layer (``LAYERS`` below);
- ``private_imports``: underscore names imported from another torchrl module;
- ``tensordict_private``: uses of tensordict's private names outside the shim module.

``python tools/import_graph.py`` prints the report; ``--check`` also exits 1 when there
is a cycle, an upward import or a tensordict-private use outside the shim.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "torchrl"

# Lower numbers sit below higher ones; a module may import its own layer or lower ones.
LAYERS: dict[str, int] = {
    "torchrl._utils": 0,
    "torchrl._keys": 0,
    "torchrl._processes": 0,
    "torchrl._C": 0,
    "torchrl._recursions": 0,
    "torchrl._types": 0,
    "torchrl._td_compat": 0,
    "torchrl._compile": 0,
    "torchrl.record.loggers": 0,
    # The service registry imports nothing else from torchrl.
    "torchrl.services": 0,
    "torchrl.data": 1,
    "torchrl.envs": 2,
    # Weight sync schemes: used by the collectors, the inference server and the trainers.
    "torchrl.weight_update": 2,
    "torchrl.record": 2,
    "torchrl.modules": 3,
    "torchrl.collectors": 3,
    "torchrl.trainers": 3,
    "torchrl.checkpoint": 3,
    "torchrl.objectives": 4,
    # The algorithm trainers and the builder helpers put losses into the generic trainer.
    "torchrl.trainers.algorithms": 5,
    "torchrl.trainers.helpers": 5,
    # SaLinA-style agents and FLARE-style computation tasks sit on top of losses and collectors.
    "torchrl.agents": 5,
    "torchrl": 5,
}
SHIM = "torchrl._td_compat"
# tensordict's private names the library may need; only the shim touches them.
TD_PRIVATE = {
    "_tensordict",
    "_new_unsafe",
    "_set_str",
    "_get_str",
    "_set_tuple",
    "_get_tuple",
    "_fast_apply",
    "_set_at_str",
    "_set_at_tuple",
    "_StringOnlyDict",
    "_unravel_key_to_tuple",
}
# Private attributes that our own classes also use (EnvBase._device, Composite._device): they
# count only on a receiver named like a TensorDict.
TD_PRIVATE_ATTRS = {"_batch_size", "_device", "_is_shared", "_is_memmap", "_names"}
TD_NAMES = ("td", "tensordict", "nxt", "node")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> int:
    best, best_len = LAYERS["torchrl"], 0
    for prefix, level in LAYERS.items():
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
            best, best_len = level, len(prefix)
    return best


def resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_pkg:
        base = base[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def is_td_private(node: ast.Attribute) -> bool:
    if node.attr in TD_PRIVATE:
        return True
    if node.attr not in TD_PRIVATE_ATTRS:
        return False
    receiver = node.value
    name = receiver.id if isinstance(receiver, ast.Name) else ""
    return any(part in name.lower() for part in TD_NAMES)


def in_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def in_function(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return True
    return False


def analyse() -> dict:
    modules = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    extensions = {"torchrl._C"}  # compiled leaves: nothing to parse, nothing imported
    top_edges: dict[str, set[str]] = {m: set() for m in modules}
    all_edges: dict[str, set[str]] = {m: set() for m in modules}
    upward, private, td_private = [], [], []
    for mod, path in modules.items():
        tree = ast.parse(path.read_text())
        parents = {
            child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)
        }
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[tuple[str, list[str]]] = []
            if isinstance(node, ast.ImportFrom):
                target = resolve(mod, is_pkg, node)
                names = [a.name for a in node.names]
                # ``from pkg import submodule`` depends on the submodule itself
                sub = [
                    f"{target}.{n}"
                    for n in names
                    if f"{target}.{n}" in modules or f"{target}.{n}" in extensions
                ]
                if len(sub) < len(names):  # some names come from the package's __init__
                    targets.append((target, names))
                targets.extend((s, []) for s in sub)
                if target.startswith("tensordict") and mod != SHIM:
                    td_private.extend(
                        f"{mod}: from {target} import {n}" for n in names if n in TD_PRIVATE
                    )
            elif isinstance(node, ast.Import):
                targets.extend((a.name, []) for a in node.names)
            elif isinstance(node, ast.Attribute) and mod != SHIM and is_td_private(node):
                td_private.append(f"{mod}:{node.lineno}: .{node.attr}")
                continue
            else:
                continue
            typing_only = in_type_checking(node, parents)
            for target, names in targets:
                if not target.startswith("torchrl") or target == mod:
                    continue
                while target not in modules and target not in extensions and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target == mod or (target not in modules and target not in extensions):
                    continue
                if isinstance(node, ast.ImportFrom):
                    private.extend(
                        f"{mod} <- {target}.{n}"
                        for n in names
                        if n.startswith("_") and not n.startswith("__")
                    )
                if not typing_only and layer(target) > layer(mod):
                    upward.append(f"{mod} (layer {layer(mod)}) -> {target} (layer {layer(target)})")
                if not typing_only and target in modules:
                    all_edges[mod].add(target)
                    if not in_function(node, parents):
                        top_edges[mod].add(target)
    # a package's __init__ importing its own submodules is how packages load; a submodule
    # importing its parent package back is the circle worth reporting
    cycles = find_cycles(top_edges)
    return {
        "modules": len(modules),
        "edges": sum(len(v) for v in top_edges.values()),
        "package_graph": package_graph(all_edges),
        "cycles": cycles,
        "cycles_with_late_imports": find_cycles(all_edges),
        "upward": sorted(set(upward)),
        "private_imports": len(private),
        "private_import_list": sorted(private),
        "tensordict_private": td_private,
    }


def package_of(module: str) -> str:
    """The unit of the layer table a module belongs to (``torchrl.envs``, ``torchrl._utils``)."""
    best = "torchrl"
    for prefix in LAYERS:
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    return best


def package_graph(edges: dict[str, set[str]]) -> dict[str, list[str]]:
    """``{unit: [units it imports]}``, every import counted (late ones too), by layer then name."""
    out: dict[str, set[str]] = {}
    for src, targets in edges.items():
        a = package_of(src)
        out.setdefault(a, set()).update(b for b in map(package_of, targets) if b != a)
    order = sorted(out, key=lambda u: (-layer(u), u))
    return {u: sorted(out[u], key=lambda v: (-layer(v), v)) for u in order}


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 on a cycle, upward import or shim leak"
    )
    parser.add_argument("--list", action="store_true", help="list every private import")
    parser.add_argument(
        "--packages", action="store_true", help="print the graph between layer units"
    )
    args = parser.parse_args()
    report = analyse()
    if not args.list:
        report.pop("private_import_list")
    if not args.packages:
        report.pop("package_graph")
    print(json.dumps(report, indent=1))
    bad = report["cycles"] or report["upward"] or report["tensordict_private"]
    return 1 if args.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
