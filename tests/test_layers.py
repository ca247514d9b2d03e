"""The import graph of src/lotus: no cycle, and each layer imports only the layers below it.

Every ``import`` in a module counts as an edge, at module level or inside a function (a lazy
import is still a dependency), under ``if TYPE_CHECKING:`` too (a type a module needs is a
dependency: a cycle hidden there is still a cycle). The graph is
read with ``ast`` from the source files, so nothing is imported to build it.

Run as a script to print the graph's cycles and its depth::

    python tests/test_layers.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "lotus"

# The layers, lowest first. A module may import its own layer and the layers below it.
ENGINE = "lotus.query"
FORMAT = "lotus.trace"
_FEATURES = ("lotus.model", "lotus.map", "lotus.live", "lotus.tune", "lotus.power", "lotus.submit",
             "lotus.profile", "lotus.demo", "lotus.launch", "lotus.dataloader", "lotus.commands", "lotus.cli")
FORBIDDEN = {
    # importer prefix: prefixes it must not import (the layers above it)
    FORMAT: (ENGINE, "lotus.analysis", *_FEATURES),
    ENGINE: ("lotus.analysis", *_FEATURES),
    "lotus.analysis": _FEATURES,
    "lotus.sim": ("lotus",),
    "lotus.errors": ("lotus",),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


class _Imports(ast.NodeVisitor):
    """(module imported, names imported from it) for every import of the module."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.found: list[tuple[str, tuple[str, ...]]] = []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((alias.name, ()))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        self.found.append((target, tuple(a.name for a in node.names)))

    def visit_Call(self, node: ast.Call) -> None:
        # importlib.import_module("lotus.x") with a literal name is an import too.
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "import_module" and node.args and isinstance(node.args[0], ast.Constant):
            value = node.args[0].value
            if isinstance(value, str):
                self.found.append((value, ()))
        self.generic_visit(node)


def _lazy_exports(tree: ast.Module) -> list[tuple[str, tuple[str, ...]]]:
    """The modules a package's ``__init__`` names in string constants (its lazy re-exports)."""
    return [
        (node.value, ())
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and node.value.startswith(PACKAGE + ".") and node.value.replace(".", "").replace("_", "").isalnum()
    ]


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def import_graph() -> tuple[dict[str, set[str]], dict[str, list[tuple[str, tuple[str, ...]]]]]:
    """{module: modules of lotus it imports} and {module: raw (target, names) imports}."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    raw: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for name, path in modules.items():
        visitor = _Imports(name, path.name == "__init__.py")
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        visitor.visit(tree)
        if path.name == "__init__.py":
            visitor.found += [(m, ()) for m, _ in _lazy_exports(tree) if m in modules]
        raw[name] = visitor.found
        edges: set[str] = set()
        for target, names in visitor.found:
            if target != PACKAGE and not target.startswith(PACKAGE + "."):
                continue
            # `from pkg import submodule` depends on the submodule; `from mod import name` on mod.
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
            if subs:
                edges.update(subs)
                if len(subs) < len(names):
                    edges.add(target)
            else:
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                edges.add(target)
        edges.discard(name)
        graph[name] = edges
    return graph, raw


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def depth(graph: dict[str, set[str]]) -> tuple[int, list[str]]:
    """The longest import chain (in modules) of the graph with each cycle taken as one node."""
    component_of = {m: m for m in graph}
    for comp in cycles(graph):
        for m in comp:
            component_of[m] = comp[0]
    cgraph: dict[str, set[str]] = {}
    for m, edges in graph.items():
        cgraph.setdefault(component_of[m], set()).update(
            component_of[e] for e in edges if e in graph and component_of[e] != component_of[m]
        )
    memo: dict[str, list[str]] = {}
    sys.setrecursionlimit(10000)

    def longest(node: str) -> list[str]:
        if node not in memo:
            best: list[str] = []
            for child in sorted(cgraph[node]):
                chain = longest(child)
                if len(chain) > len(best):
                    best = chain
            memo[node] = [node, *best]
        return memo[node]

    chain = max((longest(n) for n in sorted(cgraph)), key=len)
    return len(chain), chain


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def layer_violations(graph, raw) -> list[str]:
    problems = []
    for module, edges in sorted(graph.items()):
        for importer, banned in FORBIDDEN.items():
            if module == importer or module.startswith(importer + "."):
                for target in sorted(edges):
                    if any(target == b or target.startswith(b + ".") for b in banned):
                        problems.append(f"{module} imports {target} (a layer above it)")
        if module == ENGINE or module.startswith(ENGINE + "."):
            continue
        for target, names in raw[module]:
            if target.startswith(ENGINE + "."):
                problems.append(
                    f"{module} imports {target}: outside the engine, import from {ENGINE} itself"
                )
            elif target == ENGINE and any(_private(n) for n in names):
                problems.append(f"{module} imports {ENGINE} {', '.join(names)}: private to the engine")
    for module in sorted(graph):  # no package reaches into another's private names
        for target, names in raw[module]:
            # (the leaves lotus._env, lotus._names, lotus._warn are modules every layer may import)
            if target.startswith("lotus.") and _package(target) != _package(module) \
                    and any(_private(n) for n in names):
                problems.append(f"{module} imports {target} {', '.join(n for n in names if _private(n))}: "
                                f"private to {_package(target)}")
    return problems


def _package(module: str) -> str:
    """lotus.X of a module (lotus itself for its top-level modules)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def test_no_import_cycle():
    graph, _ = import_graph()
    found = cycles(graph)
    assert not found, "import cycles in src/lotus:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_layers_import_only_downwards():
    graph, raw = import_graph()
    problems = layer_violations(graph, raw)
    assert not problems, "\n".join(problems)


def test_the_graph_is_read():
    graph, _ = import_graph()
    assert "lotus.cli" in graph and "lotus.trace.schema" in graph
    assert ENGINE in graph


if __name__ == "__main__":
    if len(sys.argv) > 1:  # another checkout's src/, e.g. to measure before a change
        SRC = Path(sys.argv[1]).resolve()
    graph, raw = import_graph()
    found = cycles(graph)
    print(f"{len(graph)} modules, {sum(len(e) for e in graph.values())} edges")
    print(f"{len(found)} cycles (strongly connected components of more than one module):")
    for comp in found:
        print(f"  {len(comp)}: {' '.join(comp)}")
    n, chain = depth(graph)
    print(f"longest import chain, cycles folded: {n} modules")
    print("  " + " -> ".join(chain))
    for line in layer_violations(graph, raw):
        print("  layer:", line)
