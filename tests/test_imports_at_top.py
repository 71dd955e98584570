"""Imports go at the top of a module (docs/development.md). One inside a function keeps a heavy
or optional dependency off the paths that do not need it (`edgespec --help`, a bad flag), and a
comment says which: on the import's line, or on the line just above a run of such imports."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORTS = ast.Import | ast.ImportFrom
FUNCTIONS = ast.FunctionDef | ast.AsyncFunctionDef


def comment_lines(source: str) -> set[int]:
    """The numbers of the lines that hold a comment (a `#` in a string is not one)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {token.start[0] for token in tokens if token.type == tokenize.COMMENT}


def import_runs(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[list[ast.stmt]]:
    """The runs of import statements that follow one another in any body inside `function`."""
    runs: list[list[ast.stmt]] = []
    for node in ast.walk(function):
        for field in ("body", "orelse", "finalbody", "handlers"):
            body = getattr(node, field, [])
            run: list[ast.stmt] = []
            for statement in body if isinstance(body, list) else []:
                if isinstance(statement, IMPORTS):
                    run.append(statement)
                    continue
                if run:
                    runs.append(run)
                run = []
            if run:
                runs.append(run)
    return runs


def silent_imports(source: str) -> list[int]:
    """The line of each function-level import whose run carries no comment: none on the line
    above the run's first import, nor on any of the run's own lines."""
    comments = comment_lines(source)
    found: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, FUNCTIONS):
            continue
        for run in import_runs(node):
            lines = range(run[0].lineno - 1, (run[-1].end_lineno or run[-1].lineno) + 1)
            if not comments.intersection(lines):
                found.update(statement.lineno for statement in run)
    return sorted(found)


def test_the_rule_sees_a_silent_import():
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import json\n"  # a module-level block: not the rule's business
        "def a():\n"
        "    import torch  # the optional hf extra\n"
        "    import os\n"  # the line above carries a comment: one run
        "def b():\n"
        "    # gguf: only when it runs\n"
        "    from gguf import GGUFReader\n"
        "    x = '# not a comment'\n"
        "    import sys\n"
        "    def inner():\n"
        "        if x:\n"
        "            from pathlib import Path\n"
        "        return Path\n"
        "    return GGUFReader, sys, x, inner\n"
    )
    assert silent_imports(source) == [11, 14]


def test_every_import_inside_a_function_says_why():
    found = []
    for path in sorted((ROOT / "edgespec").rglob("*.py")):
        found += [f"{path.relative_to(ROOT)}:{line}" for line in silent_imports(path.read_text())]
    assert not found, "imports inside a function with no comment saying what they keep lazy:\n" + "\n".join(found)
