"""The size rules of the house (docs/design.md, "Layers"): a reader takes in a function, a
command or a module at once, so none grows past the bound. A bound met is kept by this test."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The whole tree's code: the package, the benchmark scripts and the repository's own tools.
SOURCES = ("edgespec", "benchmarks", "tools")
FUNCTION_LINES = 60
COMMAND_LINES = 40
MODULE_LINES = 400
TEST_MODULE_LINES = 600


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def sources() -> list[Path]:
    """Every Python module the size rules cover, tests aside (they have a bound of their own)."""
    paths = (p for folder in SOURCES for p in (ROOT / folder).rglob("*.py"))
    return sorted(paths)


def is_command(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A click command or group: a function under a decorator that is a call whose name ends in
    `command` or `group` (`@click.command(...)`, `@main.command(...)`, `@click.group(...)`)."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in ("command", "group"):
            return True
    return False


def long_functions(source: str) -> list[str]:
    """`name (n lines, bound b)` for each function or method over its bound, `def` to last line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            bound = COMMAND_LINES if is_command(node) else FUNCTION_LINES
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > bound:
                found.append(f"{node.name} ({length} lines, bound {bound})")
    return found


def test_the_rule_sees_commands_and_long_functions():
    body = "\n".join(["    x = 1"] * 45)
    source = f"import click\n@click.command()\ndef cmd():\n{body}\n\n@main.group(name='g')\ndef grp():\n{body}\n"
    method = body.replace("    x", "        x")
    source += f"\ndef helper():\n{body}\n\nclass C:\n    def method(self):\n{method}\n{method}\n"
    assert long_functions(source) == [
        "cmd (46 lines, bound 40)",
        "grp (46 lines, bound 40)",
        "method (91 lines, bound 60)",
    ]


def test_no_function_over_its_bound():
    found = [f"{p.relative_to(ROOT)}:{entry}" for p in sources() for entry in long_functions(p.read_text())]
    assert found == []


def test_no_module_over_its_bound():
    found = [f"{p.relative_to(ROOT)} ({lines(p)})" for p in sources() if lines(p) > MODULE_LINES]
    assert found == []


def test_no_test_module_over_its_bound():
    tests = sorted((ROOT / "tests").glob("*.py"))
    found = [f"{p.relative_to(ROOT)} ({lines(p)})" for p in tests if lines(p) > TEST_MODULE_LINES]
    assert found == []
