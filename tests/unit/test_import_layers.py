"""The import graph of python/ferromq: no runtime cycle, and no import in a forbidden direction.

Every module is parsed with `ast`; relative imports are resolved, imports inside functions count,
and imports under `if TYPE_CHECKING:` are marked type-only (they do not run, so they may close a
circle a type checker follows but the interpreter never does).
"""

from __future__ import annotations

import ast
import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferromq.app import make_broker
from ferromq.broker import Broker, load_broker_config
from ferromq.errors import ConfigError

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "python" / "ferromq"

# (importer package, imported package): the lower layer must not reach up into the higher one.
FORBIDDEN = [
    ("ferromq.broker", "ferromq.proxy"),
    ("ferromq.controller", "ferromq.broker"),
    ("ferromq.protocol", "ferromq.broker"),
    ("ferromq.protocol", "ferromq.client"),
    ("ferromq.remoting", "ferromq.broker"),
    ("ferromq.remoting", "ferromq.client"),
    ("ferromq.store", "ferromq.broker"),
    # Table topics are one package the broker, the admin client, the console and Spark use: it
    # reads its own keys (ferromq.tables.config) and the store, never the broker, Spark or a client.
    ("ferromq.tables", "ferromq.broker"),
    ("ferromq.tables", "ferromq.spark"),
    ("ferromq.tables", "ferromq.client"),
    # Tiered storage (the bucket, its uploader, its reader) is used by the broker and Spark: it
    # reads its own keys and the store, never the broker, Spark or a client.
    ("ferromq.tiered", "ferromq.broker"),
    ("ferromq.tiered", "ferromq.spark"),
    ("ferromq.tiered", "ferromq.client"),
    # `ferromq admin` works against any RocketMQ broker, through the client: never the broker's
    # own modules.
    ("ferromq.admin", "ferromq.broker"),
]


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    type_only: bool
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    modules = {module_name(p): p for p in sorted(PACKAGE_ROOT.rglob("*.py"))}
    # The Rust extension (`ferromq._store`) by its stub: a leaf, so `from ferromq import _store`
    # is an edge to it and not to the package.
    for stub in sorted(PACKAGE_ROOT.rglob("*.pyi")):
        modules.setdefault(module_name(stub), stub)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that `name` names (an imported attribute resolves to its module)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _base_package(importer: str, path: Path, level: int) -> str:
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return package


def module_edges(importer: str, path: Path, modules: dict[str, Path]) -> list[Edge]:
    if path.suffix == ".pyi":
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    edges: list[Edge] = []

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.body:
                visit(statement, True)
            for statement in node.orelse:
                visit(statement, type_only)
            return
        targets: list[str] = []
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _base_package(importer, path, node.level)
                base = f"{package}.{base}" if base else package
            # `from pkg import mod` imports the submodule; `from mod import name` the module.
            targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
        for target in targets:
            resolved = _resolve(target, modules)
            if resolved is not None and resolved != importer:
                edges.append(Edge(importer, resolved, type_only, line))
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(tree, False)
    return edges


def import_edges() -> list[Edge]:
    modules = all_modules()
    edges: list[Edge] = []
    for name, path in modules.items():
        edges.extend(module_edges(name, path, modules))
    return edges


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); components of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, set()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def runtime_graph(edges: list[Edge]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in all_modules()}
    for edge in edges:
        if not edge.type_only:
            graph[edge.importer].add(edge.imported)
    return graph


def full_graph(edges: list[Edge]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in all_modules()}
    for edge in edges:
        graph[edge.importer].add(edge.imported)
    return graph


def _in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def forbidden_edges(edges: list[Edge]) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for edge in edges:
        for low_layer, high_layer in FORBIDDEN:
            if _in_package(edge.importer, low_layer) and _in_package(edge.imported, high_layer):
                found.add((edge.importer, edge.imported))
    return found


def test_the_graph_sees_relative_function_level_and_type_only_imports() -> None:
    edges = import_edges()
    by_pair = {(e.importer, e.imported): e for e in edges}
    # An absolute import at the top of a module, and the extension's stub as a module.
    assert ("ferromq.broker.broker", "ferromq.broker.config") in by_pair
    assert ("ferromq.message", "ferromq._store") in by_pair
    assert ("ferromq.message", "ferromq") not in by_pair
    # Enough edges that the parse did not silently miss the package.
    assert len(all_modules()) > 100
    assert len(edges) > 500
    assert any(e.type_only for e in edges)


def test_strongly_connected_finds_a_circle_and_ignores_a_chain() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(graph) == [["a", "b", "c"]]


def test_no_runtime_import_cycle() -> None:
    cycles = strongly_connected(runtime_graph(import_edges()))
    assert cycles == [], f"runtime import cycles: {cycles}"


def test_no_import_in_a_forbidden_direction() -> None:
    found = sorted(forbidden_edges(import_edges()))
    assert found == [], f"forbidden imports: {found}"


def test_no_cycle_even_through_type_checking_imports() -> None:
    # Type-only cycles are closed by narrow Protocols declared where they are used (the broker's
    # collaborators type it by their own *Context protocols), so the full graph has none either.
    cycles = strongly_connected(full_graph(import_edges()))
    assert cycles == [], f"cycles through TYPE_CHECKING imports: {cycles}"


def test_a_broker_serves_grpc_only_through_the_composition(tmp_path: Path) -> None:
    # The broker does not import the proxy: a grpcServerPort it cannot serve stops the start,
    # before any port or store is opened; make_broker hands it the proxy's gRPC server.
    cfg = load_broker_config(profile="small", store_path_root_dir=str(tmp_path / "store"), grpc_server_port=0)
    bare = Broker(cfg, "127.0.0.1")
    with pytest.raises(ConfigError, match=r"ferromq\.app\.make_broker"):
        asyncio.run(bare.start())
    assert bare.server is None
    assert not (tmp_path / "store").exists()
    composed = make_broker(cfg, "127.0.0.1")
    assert composed._grpc_port is not None
