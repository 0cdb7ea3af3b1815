"""The adapter pages' cost, counted (issue 37): the lines turnlog adds to an agent and to the
person's side, on the examples the pages include, and the names they show.

An example marks each line turnlog adds: ``# turnlog`` on the agent's side, ``# turnlog:
answering`` on the person's, ``# turnlog: both`` for a line both need (counted on each). The
marks cannot be left off to flatter the count: every line that imports from turnlog, calls a
turnlog function, a method of the ``Turnlog`` client or catches a turnlog error must carry one.
The targets are issue 37's: at most 8 lines on the agent's side, 6 on the answering side.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from pathlib import Path
from types import ModuleType

import pytest

import turnlog

ROOT = Path(__file__).resolve().parents[2]
PAGES = {
    "langgraph.md": ("langgraph_agent.py", "turnlog.adapters.langgraph"),
    "pydantic-ai.md": ("pydantic_ai_agent.py", "turnlog.adapters.pydantic_ai"),
    "openai-agents.md": ("openai_agents_agent.py", "turnlog.adapters.openai_agents"),
}
AGENT_MOST, ANSWERING_MOST = 8, 6
MARK = re.compile(r"#\s*turnlog(?::\s*(answering|both)\b)?")
#: The one-process demo's own worker (``python examples/x.py`` alone); a deployment runs
#: ``turnlog worker`` apart, so it is no line of the agent's.
DEMO_ONLY = frozenset({"run_worker"})


def marks(source: str) -> dict[int, str]:
    """The marked lines of code (a comment alone on its line is no line of code): their
    number, and ``agent``, ``answering`` or ``both``."""
    found: dict[int, str] = {}
    lines = source.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        mark = MARK.match(token.string)
        row = token.start[0]
        if mark and lines[row - 1][: token.start[1]].strip():
            found[row] = mark.group(1) or "agent"
    return found


def turnlog_lines(source: str) -> dict[int, str]:
    """The lines that use turnlog, and how: an import from it, a call of a name imported from
    it or of a method of the client ``tl``, an ``except`` of a turnlog error."""
    tree = ast.parse(source)
    names: set[str] = set()
    used: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("turnlog"):
            names.update(alias.asname or alias.name for alias in node.names)
            used[node.lineno] = f"from {node.module} import ..."
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in names:
                used[node.lineno] = f"{func.id}(...)"
            elif (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "tl"
                and func.attr not in DEMO_ONLY
            ):
                used[node.lineno] = f"tl.{func.attr}(...)"
        elif isinstance(node, ast.ExceptHandler) and node.type is not None:
            caught = {n.id for n in ast.walk(node.type) if isinstance(n, ast.Name)}
            if caught & names:
                used[node.lineno] = f"except {', '.join(sorted(caught & names))}"
    return used


def example(page: str) -> str:
    return (ROOT / "examples" / PAGES[page][0]).read_text()


def test_the_mark_reader_counts_code_lines_and_their_side() -> None:
    source = (
        "from turnlog import Turnlog  # turnlog: both\n"
        "# turnlog: a comment alone is no line\n"
        "x = tl.answer(t, r)  # turnlog: answering\n"
        "y = f(x)  # turnlog\n"
        "z = 1\n"
    )
    assert marks(source) == {1: "both", 3: "answering", 4: "agent"}
    assert turnlog_lines(source) == {1: "from turnlog import ...", 3: "tl.answer(...)"}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_line_using_turnlog_in_an_adapter_example_is_marked(page: str) -> None:
    source = example(page)
    unmarked = {n: how for n, how in turnlog_lines(source).items() if n not in marks(source)}
    assert unmarked == {}, f"{PAGES[page][0]}: lines using turnlog without a # turnlog mark"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_an_agent_needs_at_most_8_turnlog_lines_and_the_answering_side_6(page: str) -> None:
    sides = list(marks(example(page)).values())
    agent = sides.count("agent") + sides.count("both")
    answering = sides.count("answering") + sides.count("both")
    assert agent <= AGENT_MOST, f"{page}: {agent} turnlog lines in the agent"
    assert answering <= ANSWERING_MOST, f"{page}: {answering} on the answering side"
    text = (ROOT / "docs" / "adapters" / page).read_text()
    said = re.search(r"to both: (\d+) and (\d+) here", text)
    assert said is not None, f"{page} does not say its counts"
    assert (int(said[1]), int(said[2])) == (agent, answering), f"{page} says other counts"
    assert f'--8<-- "examples/{PAGES[page][0]}"' in text  # the page shows what is counted


def _defined_in_turnlog(module: ModuleType, name: str) -> bool:
    value = getattr(module, name, None)
    return str(getattr(value, "__module__", "")).startswith("turnlog")


@pytest.mark.parametrize("page", sorted(PAGES))
def test_a_page_and_its_example_show_only_public_names_the_page_documents(page: str) -> None:
    """Nothing internal: a name of turnlog's on the page is public (the adapter's ``__all__``,
    ``turnlog.adapters.__all__`` or ``turnlog.__all__``), and every adapter name the example
    imports is on the page."""
    adapter = importlib.import_module(PAGES[page][1])
    shared = importlib.import_module("turnlog.adapters")
    public = set(adapter.__all__) | set(shared.__all__) | set(turnlog.__all__)
    text = (ROOT / "docs" / "adapters" / page).read_text()
    shown = {w for span in re.findall(r"`([^`]+)`", text) for w in re.findall(r"\w+", span)}
    internal = {w for w in shown if _defined_in_turnlog(adapter, w) and w not in public}
    assert internal == set(), f"{page} names what is not public"
    tree = ast.parse(example(page))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("turnlog"):
            assert node.module in ("turnlog", PAGES[page][1]), node.module
            allowed = set(turnlog.__all__) if node.module == "turnlog" else set(adapter.__all__)
            for alias in node.names:
                assert alias.name in allowed, f"{alias.name} is not public"
                if node.module != "turnlog":
                    assert alias.name in shown, f"{page} does not document {alias.name}"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_continue_step_continues_its_own_turn_not_a_loop_skipping_others(page: str) -> None:
    """Issue 37: the pages' continue step looped over ``tl.resumed()`` and skipped (and
    committed past) every other thread's turn; it continues its own pause, by its token."""
    for text in (example(page), (ROOT / "docs" / "adapters" / page).read_text()):
        assert "tl.resumed()" not in text
        assert "continue_run(tl, " in text
    assert "RunState` lives in one process" not in (ROOT / "docs/adapters" / page).read_text()
