"""The rooms keep their rules: pure rooms import no I/O, and the package has no import cycle.

Read from the source with ``ast`` (nothing is imported), so a violation anywhere fails here, and
the message names the module and the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "turnlog"

#: What the pure rooms may not import: a client, a store, a JWT library, or the OS.
IO_MODULES = ("aiokafka", "rocksdict", "jwt", "os", "socket", "subprocess")
PURE_ROOMS = ("contracts", "wire")
#: The one exception, and why: the C reader's loader reads TURNLOG_PURE_PYTHON at import, to
#: leave the extension unused (``os.environ``, nothing else of ``os``).
ALLOWED = {("turnlog.wire.native", "os")}
#: A module longer than this says at its top why it is one module.
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    """Absolute names imported at module level or inside functions (``TYPE_CHECKING`` blocks
    are skipped: they never run)."""
    tree = ast.parse(path.read_text())
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append((child.module, child.lineno))
                found.extend((f"{child.module}.{a.name}", child.lineno) for a in child.names)
            visit(child)

    visit(tree)
    return found


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def test_the_pure_rooms_import_no_io() -> None:
    bad = []
    for name, path in _modules().items():
        room = name.split(".")[1] if "." in name else ""
        if room not in PURE_ROOMS:
            continue
        for imported, line in _imports(path):
            if imported.split(".")[0] in IO_MODULES and (name, imported) not in ALLOWED:
                bad.append(f"{name}:{line} imports {imported}")
    assert bad == []


def test_the_package_has_no_import_cycle() -> None:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for imported, _ in _imports(path):
            # "from turnlog.x import y": y may be a module or a name in x; take the longest
            # prefix that is a module of the package.
            parts = imported.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            target = ".".join(parts)
            if target and target != name and target != "turnlog":
                deps.add(target)
        graph[name] = deps
    # A package's __init__ re-exporting its own modules is not a cycle of the design.
    for name in graph:
        graph[name] = {d for d in graph[name] if not name.startswith(f"{d}.")}
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(" -> ".join([*stack[stack.index(dep) :], dep]))
            elif dep not in state:
                walk(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    assert cycles == []


def test_no_loose_modules_at_the_top_but_the_entry_points() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    # _compiled decides which build of the resume path runs: it must load before any room does.
    expected = ["__init__.py", "__main__.py", "_compiled.py", "api.py", "clock.py", "errors.py"]
    assert top == [*expected, "settings.py"]


def test_long_modules_say_why_at_their_top() -> None:
    long = []
    for name, path in _modules().items():
        text = path.read_text()
        if text.count("\n") > MAX_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "one module" not in doc.lower():
                long.append(f"{name}: {text.count(chr(10))} lines")
    assert long == []
