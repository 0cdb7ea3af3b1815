"""Every file, example and module the pages under docs/ name exists, and the README links the
documentation: a renamed example or module fails here, not in a reader's hands."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").rglob("*.md"))
TOP = r"(?:src|tests|examples|docs|schemas|compose|bench|scripts)"
PATH = re.compile(rf"(?<![\w./-]){TOP}/[\w./-]*[\w/]")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
MODULE = re.compile(r"`(turnlog(?:\.\w+)+)`")
# Names under the default prefix that are topics, transactional ids or groups, not modules.
NOT_MODULES = frozenset({"pauses", "answers", "consumptions", "resumed", "rejections", "resume"})


#: The protocols' doors (``turnlog.mcp``, ``turnlog.a2a``): packages of their own, each with a
#: page beside the framework adapters'.
PROTOCOLS = frozenset({"mcp", "a2a"})


def test_there_is_one_page_per_framework_adapter_and_protocol() -> None:
    adapters = {p.stem for p in (ROOT / "src/turnlog/adapters").glob("*.py") if p.stem[0] != "_"}
    pages = {p.stem.replace("-", "_") for p in (ROOT / "docs/adapters").glob("*.md")}
    assert pages == adapters | PROTOCOLS
    assert all((ROOT / "src/turnlog" / name / "__init__.py").exists() for name in PROTOCOLS)


def test_every_path_and_example_the_docs_name_exists() -> None:
    named = 0
    for page in DOCS:
        text = page.read_text()
        for path in PATH.findall(text):
            named += 1
            assert (ROOT / path).exists(), f"{page.relative_to(ROOT)} names {path}"
        for target in LINK.findall(text):
            if "://" not in target:
                named += 1
                assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links {target}"
    assert named >= 3 * len(DOCS)


def _resolves(dotted: str) -> bool:
    """A module of the package, or a name one of its modules defines (``turnlog.__all__``)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT / "src" / Path(*parts[:cut])
        if base.with_suffix(".py").is_file() or base.is_dir():
            if cut == len(parts):
                return True
            obj: object = importlib.import_module(".".join(parts[:cut]))
            for name in parts[cut:]:
                if not hasattr(obj, name):
                    return False
                obj = getattr(obj, name)
            return True
    return False


def test_every_module_the_docs_name_exists() -> None:
    for page in DOCS:
        for module in MODULE.findall(page.read_text()):
            if module.split(".")[1] not in NOT_MODULES:
                assert _resolves(module), f"{page.relative_to(ROOT)} names {module}"


def test_the_readme_links_the_docs_and_each_link_resolves() -> None:
    readme = (ROOT / "README.md").read_text()
    links = {t for t in LINK.findall(readme) if "://" not in t}
    for target in links:
        assert (ROOT / target).exists(), target
    assert "docs/index.md" in links


def test_the_broker_script_the_cli_runs_ships_with_the_checkout() -> None:
    from turnlog.cli.admin import _kafka_script  # `turnlog broker up`, the tour's first step

    assert _kafka_script() == ROOT / "compose" / "kafka-local" / "kafka.sh"
