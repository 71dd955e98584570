"""Every package's `__init__` docstring is its index: it names each module (`name.py`) and each
subpackage (`name/`) in it, so a reader finds a room from the door and a new module is not left out
of the map."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "edgespec"


def packages() -> list[Path]:
    return sorted(init.parent for init in PACKAGE.rglob("__init__.py"))


def unnamed(package: Path) -> list[str]:
    """The modules and subpackages of `package` that its `__init__` docstring does not name."""
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    rooms = [f"{p.name}" for p in package.glob("*.py") if p.name != "__init__.py"]
    rooms += [f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()]
    return sorted(room for room in rooms if not re.search(rf"(?<![\w/.]){re.escape(room)}(?!\w)", docstring))


def test_unnamed_finds_a_module_left_out(tmp_path):
    (tmp_path / "__init__.py").write_text('"""Index.\n\n    listed.py  named\n    sub/       named too\n"""\n')
    for name in ("listed.py", "missing.py", "app.py"):
        (tmp_path / name).write_text("")
    for name in ("sub", "other"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "data").mkdir()  # a folder without __init__.py is data, not a subpackage
    assert unnamed(tmp_path) == ["app.py", "missing.py", "other/"]


@pytest.mark.parametrize("package", packages(), ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_the_init_docstring_names_every_module_and_subpackage(package):
    assert unnamed(package) == []


# Each front end's application object is its `app.py`: one job, so one name.
SAME_JOB = {"app.py": ["server", "tui"]}


def test_no_two_modules_share_a_name_for_different_jobs():
    """A name found in two packages sends a reader to the wrong room (`grep`, tracebacks, imports)."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "__init__.py":
            found.setdefault(path.name, []).append(path.parent.relative_to(PACKAGE).as_posix())
    assert {name: where for name, where in found.items() if len(where) > 1} == SAME_JOB
