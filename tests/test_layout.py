"""The layout's rules, checked: subpackages along the data path, no import cycle, a pure core,
one module that starts tshark, scan workers without DuckDB, small modules.

The import graph is read from the source (every ``import`` and ``from … import`` of a quicack
module, inside functions too; only ``if TYPE_CHECKING:`` blocks are left out, as they never run).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "quicack"

#: Modules that do I/O or load DuckDB: the pure core imports none of them, directly or through
#: another quicack module.
IMPURE = {"duckdb", "socket", "subprocess", "asyncio", "selectors", "ssl", "aioquic", "polars",
          "plotly", "multiprocessing", "urllib", "http", "shutil", "tempfile"}


def _name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str) -> str | None:
    """The quicack module (or package) an import names, else None."""
    while module and module not in MODULES:
        module = module.rpartition(".")[0]
    return module or None


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(quicack modules, other top-level modules) that the file imports, anywhere but under
    ``if TYPE_CHECKING:``."""
    ours, others = set(), set()
    module = _name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if _type_checking(node):
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                (ours.add(_resolve(alias.name)) if alias.name.startswith("quicack")
                 else others.add(alias.name.split(".")[0]))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            if base.startswith("quicack._native"):  # the Rust extension: a leaf
                others.add("_native")
            elif base == "quicack" or base.startswith("quicack."):
                for alias in node.names:
                    if alias.name == "_native":  # the Rust extension: a leaf, no Python imports
                        others.add("_native")
                        continue
                    target = _resolve(f"{base}.{alias.name}")
                    ours.add(target if target != base or f"{base}.{alias.name}" in MODULES else base)
            elif base != "__future__":
                others.add(base.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    ours.discard(None)
    ours.discard(module)
    return ours, others


GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v][0]:
            if w not in GRAPH:
                continue
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in GRAPH:
        if v not in index:
            connect(v)
    return found


def test_the_graph_sees_imports_inside_functions():
    """The reader of imports is not blind: a function-level import is an edge (labcli imports the
    lab inside its commands), a TYPE_CHECKING import is not."""
    assert "quicack.lab.serve" in GRAPH["quicack.labcli"][0]
    assert "quicack.store.transaction" in GRAPH["quicack.store.database"][0]
    assert "quicack.pcap.tshark" not in GRAPH["quicack.store.database"][0]  # (TYPE_CHECKING only)


def test_no_import_cycle():
    assert _cycles() == []


def test_top_level_is_small_and_subpackages_name_the_data_path():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top
    subpackages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert len(subpackages) >= 5, subpackages
    assert {"core", "qlog", "pcap", "store", "scan", "lab", "report"} <= set(subpackages)


def test_subpackage_init_files_import_nothing():
    """Start-up order depends on it: importing one module of a subpackage loads no other."""
    for init in PACKAGE.glob("*/__init__.py"):
        tree = ast.parse(init.read_text())
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)], init


def _reachable(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        v = todo.pop()
        if v in seen or v not in GRAPH:
            continue
        seen.add(v)
        todo.extend(GRAPH[v][0])
    return seen


def test_core_is_pure():
    """core/ imports no module that does I/O, and no quicack module outside core/ but the model."""
    core = [m for m in MODULES if m.startswith("quicack.core.")]
    assert len(core) >= 5
    for module in core:
        reached = _reachable(module)
        outside = {m for m in reached if not m.startswith("quicack.core") and m not in ("quicack.model", "quicack")}
        assert not outside, (module, outside)
        impure = set().union(*(GRAPH[m][1] for m in reached)) & IMPURE
        assert not impure, (module, impure)


def _starts_tshark(path: Path) -> bool:
    """A module that runs a subprocess and names the tshark binary: calls the function that
    finds it (``tshark_binary``) or spells the program "tshark" in code (not in a docstring)."""
    tree = ast.parse(path.read_text())
    runs = any(isinstance(n, ast.Attribute) and n.attr in ("run", "Popen", "check_output", "call")
               and isinstance(n.value, ast.Name) and n.value.id == "subprocess" for n in ast.walk(tree))
    names_tshark = any(
        (isinstance(n, ast.Name) and n.id == "tshark_binary") or
        (isinstance(n, ast.Attribute) and n.attr == "tshark_binary") or
        (isinstance(n, ast.Constant) and n.value in ("tshark", "tshark.exe"))
        for n in ast.walk(tree))
    return runs and names_tshark


def test_only_one_module_starts_tshark():
    starters = sorted(name for name, path in MODULES.items() if _starts_tshark(path))
    assert starters == ["quicack.pcap.tshark"]


def test_scan_worker_never_loads_duckdb():
    """A probing process imports the worker module first; DuckDB must not come with it (nor
    with anything it imports, at module level or in a function it may call)."""
    worker = "quicack.scan.worker"  # (what a probing process imports first)
    assert worker in MODULES
    reached = _reachable(worker)
    assert not any("duckdb" in GRAPH[m][1] for m in reached), sorted(m for m in reached if "duckdb" in GRAPH[m][1])
    code = f"import sys, {worker}; print('duckdb' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO).stdout.split()
    assert out == ["False"]


MAX_MODULE_LINES = 600
#: Longest a function may be; longer ones do several things and are split.
MAX_FUNCTION_LINES = 80


def test_no_module_over_600_lines():
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert {n: s for n, s in sizes.items() if s > MAX_MODULE_LINES} == {}


def test_no_long_function():
    long = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append((name, node.name, lines))
    assert long == []


def test_the_native_crate_has_unit_tests_of_its_own():
    tests = sum(p.read_text().count("#[test]") for p in (REPO / "native" / "src").rglob("*.rs"))
    assert tests >= 20


@pytest.mark.parametrize("name", ["quicack.cli", "quicack"])
def test_importing_the_command_line_starts_nothing(name):
    """Importing the CLI runs no program (tshark is started by quicack.__main__, on a capture)."""
    code = (f"import subprocess, sys; calls = []; subprocess.Popen.__init__ = lambda *a, **k: calls.append(a); "
            f"import {name}; print(len(calls), 'duckdb' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO).stdout.split()
    assert out == ["0", "False"]
