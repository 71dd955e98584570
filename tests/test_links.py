"""tools/check_links.py: every pointer from code and pages to a page and heading, and every relative
link and anchor, resolves; a dead one is named by file and line."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("check_links", ROOT / "tools" / "check_links.py")
check_links = sys.modules["check_links"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_links)

PAGE = """# Design

## Layers

```
## not a heading: in a fence
```

### Why the weight layout decides `CPU` speed

## Layers
"""


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in {"docs/design.md": PAGE, **files}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_live_pointers_pass(tmp_path):
    root = tree(
        tmp_path,
        {
            "pkg/mod.py": '"""See docs/design.md, "Layers", and\n'
            '(design.md, "Why the weight\nlayout decides CPU speed")."""\n'
            '# wrapped in a comment (docs/design.md,\n# "Why the weight layout decides CPU speed")\n',
            "Makefile": '# the rule (docs/design.md, "Layers")\n',
            "README.md": "[design](docs/design.md#layers), [again](docs/design.md#layers-1), [up](#readme)\n"
            "[the layout](docs/design.md#why-the-weight-layout-decides-cpu-speed) ![plot](docs)\n"
            "[web](https://example.com/x.md#nothing) and https://example.com/gone.md\n\n# Readme\n",
            "docs/run.md": "[design](design.md#layers) `[not a link](nowhere.md)`\n"
            "```\n[in a fence](nowhere.md)\n```\n",
        },
    )
    assert check_links.dead_pointers(root) == []


def test_each_dead_pointer_is_named_by_file_and_line(tmp_path):
    root = tree(
        tmp_path,
        {
            "pkg/mod.py": '"""Why (DESIGN.md, "Layers").\n\nAnd docs/design.md, "The whole\ncall"."""\n',
            "Makefile": '\n# see docs/design.md,\n# "Layer"\n',
            "README.md": "[a](docs/moved.md) [b](docs/design.md#gone)\n\n[c](#readme) [d](assets/x.png)\n",
            "docs/run.md": "line\n[up](../README.md#nothing), see run.md and "
            "[in fence](design.md#not-a-heading-in-a-fence)\n",
        },
    )
    assert check_links.dead_pointers(root) == [
        'Makefile:2: docs/design.md, "Layer": no such heading',
        "README.md:1: (docs/moved.md): no such file",
        "README.md:1: (docs/design.md#gone): no such heading",
        "README.md:3: (#readme): no such heading",
        "README.md:3: (assets/x.png): no such file",
        "docs/run.md:2: (../README.md#nothing): no such heading",
        "docs/run.md:2: (design.md#not-a-heading-in-a-fence): no such heading",
        "pkg/mod.py:1: DESIGN.md: no such page",
        'pkg/mod.py:3: docs/design.md, "The whole call": no such heading',
    ]


def test_the_script_exits_1_and_prints_what_is_dead(tmp_path, capsys):
    root = tree(tmp_path, {"a.py": "# docs/nowhere.md\n"})
    assert check_links.main(["check_links.py", str(root)]) == 1
    assert capsys.readouterr().err == "a.py:1: docs/nowhere.md: no such page\n"


def test_no_pointer_in_the_repository_is_dead():
    assert check_links.dead_pointers(ROOT) == []
