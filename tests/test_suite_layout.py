"""The test suite's own rules: shared helpers live in conftest.py and helper modules (tests/fakes.py,
tests/live_server.py, ...), so no test module imports another, and any one of them runs alone
(`pytest tests/test_x.py`) without collecting another's tests or fixtures."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(source: str) -> list[str]:
    """The test modules (`test_*`) that `source` imports, in any spelling of the import."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[-1].startswith("test_")]
        elif isinstance(node, ast.ImportFrom):
            module = ("." * node.level) + (node.module or "")
            if module.split(".")[-1].startswith("test_"):
                found.append(module)
            elif module in ("tests", ".") or module.endswith("."):
                found += [f"{module}.{a.name}" for a in node.names if a.name.startswith("test_")]
    return found


def test_the_rule_sees_every_spelling_of_an_import():
    source = (
        "from tests.test_tui import make_app\nimport tests.test_store as store\n"
        "from tests import test_vocab\nfrom .test_cli import run\nfrom tests.fakes import MarkovBackend\n"
    )
    assert imported_test_modules(source) == ["tests.test_tui", "tests.test_store", "tests.test_vocab", ".test_cli"]


def test_no_test_module_imports_another():
    found = {path.name: imported_test_modules(path.read_text()) for path in sorted(TESTS.glob("test_*.py"))}
    assert {name: modules for name, modules in found.items() if modules} == {}
