"""The rooms keep their rules: pure rooms import no I/O, and the package has no import cycle.

Read from the source with ``ast`` (nothing is imported), so a violation anywhere fails here, and
the message names the module and the import. Two kinds of cycle are looked for: between modules,
and between rooms (a subpackage, or a module at the top, is one room), since two rooms that
import each other through different modules are one room in all but name.
"""

from __future__ import annotations

import ast
import itertools
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


def _absolute(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` names, a relative one made absolute."""
    if not node.level:
        return node.module or ""
    package = name.split(".")
    if path.name != "__init__.py":
        package.pop()
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imports(path: Path, *, typing_too: bool = False) -> list[tuple[str, int]]:
    """Absolute names imported at module level or inside functions, a relative import made
    absolute. ``TYPE_CHECKING`` blocks are skipped (they never run) unless ``typing_too``: a
    cycle through a type-only import still ties two modules together."""
    tree = ast.parse(path.read_text())
    name = _module_name(path)
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if (
                not typing_too
                and isinstance(child, ast.If)
                and "TYPE_CHECKING" in ast.unparse(child.test)
            ):
                continue
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                module = _absolute(name, path, child)
                found.append((module, child.lineno))
                found.extend((f"{module}.{a.name}", child.lineno) for a in child.names)
            visit(child)

    visit(tree)
    return found


def _lazy_exports(path: Path) -> list[tuple[str, int]]:
    """The modules the root's ``__getattr__`` imports by name (the values of ``_HOME``): they
    are imports all the same, only invisible to an ``import`` statement."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == "_HOME" and node.value is not None:
            home = ast.literal_eval(node.value)
            return [(module, node.lineno) for module in sorted(set(home.values()))]
    return []


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


def _module_graph() -> dict[str, set[str]]:
    """Each module and the modules of the package it imports when it runs.

    The root is a module like the others, its lazy exports counted as its imports: a module that
    imports the root (``from turnlog import __version__``) imports, through it, every room the
    public API names, and so sits in a circle with them."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imports = _imports(path, typing_too=True)
        if name == "turnlog":
            imports += _lazy_exports(path)
        deps = set()
        for imported, _ in imports:
            # "from turnlog.x import y": y may be a module or a name in x; take the longest
            # prefix that is a module of the package.
            # A namespace package (a directory without __init__) is no module: nothing to take.
            parts = imported.split(".")
            while parts and ".".join(parts) not in modules:
                if (PACKAGE.parent.joinpath(*parts)).is_dir():
                    parts = []
                parts = parts[:-1]
            target = ".".join(parts)
            if target and target != name:
                deps.add(target)
        graph[name] = deps
    # A subpackage's __init__ re-exporting its own modules is not a cycle of the design (the root
    # is not such a package: its re-exports reach every room).
    for name in graph:
        graph[name] = {d for d in graph[name] if d == "turnlog" or not name.startswith(f"{d}.")}
    return graph


def _room(module: str) -> str:
    """``turnlog.kafka.topics`` is in the room ``turnlog.kafka``; the root is a room of its own."""
    return ".".join(module.split(".")[:2])


def _cycles(graph: dict[str, set[str]]) -> list[str]:
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
    return cycles


def test_the_package_has_no_import_cycle() -> None:
    assert _cycles(_module_graph()) == []


def test_the_rooms_have_no_import_cycle() -> None:
    """``settings`` importing ``kafka.security`` while ``kafka.topics`` imports ``settings`` is
    no cycle of modules, yet neither room can be read, tested or moved without the other."""
    rooms: dict[str, set[str]] = {}
    why: dict[tuple[str, str], str] = {}
    for name, deps in _module_graph().items():
        for dep in deps:
            if _room(dep) != _room(name):
                rooms.setdefault(_room(name), set()).add(_room(dep))
                why.setdefault((_room(name), _room(dep)), f"{name} imports {dep}")
    found = []
    for cycle in _cycles(rooms):
        steps = cycle.split(" -> ")
        found.append("; ".join(why[pair] for pair in itertools.pairwise(steps)))
    assert found == []


def test_no_module_imports_the_package_root() -> None:
    """The root is the public API, for users: a module of the package that imports it ties its
    room to every room the API names (the root re-exports them). Submodules imported through it
    (``from turnlog import _compiled``) are modules, not the root. No exception, ``__main__``
    included: it imports the CLI, not the root."""
    modules = _modules()
    bad = []
    for name, path in modules.items():
        if name == "turnlog":
            continue
        for node in ast.walk(ast.parse(path.read_text())):  # TYPE_CHECKING blocks included
            if isinstance(node, ast.Import):
                roots = [a.name for a in node.names if a.name == "turnlog"]
            elif isinstance(node, ast.ImportFrom) and _absolute(name, path, node) == "turnlog":
                roots = [a.name for a in node.names if f"turnlog.{a.name}" not in modules]
            else:
                continue
            bad.extend(f"{name}:{node.lineno} imports {root} from the root" for root in roots)
    assert bad == []


def test_no_loose_modules_at_the_top_but_the_entry_points() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    # _compiled decides which build of the resume path runs: it must load before any room does.
    # _version is the version the records carry, a leaf so no room imports the root for it.
    expected = ["__init__.py", "__main__.py", "_compiled.py", "_version.py", "api.py", "clock.py"]
    assert top == [*expected, "errors.py", "settings.py"]


def test_long_modules_say_why_at_their_top() -> None:
    long = []
    for name, path in _modules().items():
        text = path.read_text()
        if text.count("\n") > MAX_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "one module" not in doc.lower():
                long.append(f"{name}: {text.count(chr(10))} lines")
    assert long == []
