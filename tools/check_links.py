"""Dead pointers: every reference to a page of the repository, and every relative link, resolves.

Code and pages point at the docs the house way, `docs/<page>.md, "<heading>"` (in a docstring, a comment,
the Makefile or pyproject.toml, wrapped over lines or not); pages link with relative Markdown links
and `#anchors`. A page that moved or a heading that was reworded leaves such a pointer dead, and
nothing fails until a reader follows it. This script checks them all and names each dead one as
`path:line: ...`; it exits 1 if there is any. `make lint` and the pre-commit hook run it, and
tests/test_links.py runs it on the repository.

    python tools/check_links.py          # the repository this file is in
    python tools/check_links.py ROOT     # another tree

A page named in code resolves from the file's folder, the repository's root or docs/ (so
`design.md` in a module means docs/design.md); a heading must be one of that page's, word for word
(backticks and line breaks aside). A link resolves from its page's folder, and an anchor is GitHub's
id of a heading of the page it names.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

SCANNED_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".tcss", ".cfg"}
SCANNED_NAMES = {"Makefile"}
SKIPPED_FOLDERS = {"__pycache__", "build", "dist", "node_modules"}
# The pointers in this script's own test point into the made-up trees it builds.
EXAMPLES = {Path("tests/test_links.py")}

URL = re.compile(r"\b[a-z][a-z+.-]*://\S+")
# A page named in text, and the heading quoted after it (over comment markers and line breaks).
PAGE_REF = re.compile(r'(?<![\w/.-])((?:\.\.?/)*(?:[\w-]+/)*[\w-]+\.md)\b(?:,[\s#]*"([^"]+)")?')
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`\n]*`")


def scanned_files(root: Path) -> Iterator[Path]:
    """The text files whose pointers are checked: code, pages and configuration, outside hidden
    folders (.venv, .git) and build output."""
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if any(p.startswith(".") or p in SKIPPED_FOLDERS or p.endswith(".egg-info") for p in parts[:-1]):
            continue
        if Path(*parts) in EXAMPLES:
            continue
        if path.is_file() and (path.suffix in SCANNED_SUFFIXES or path.name in SCANNED_NAMES):
            yield path


def blanked(text: str, pattern: re.Pattern[str]) -> str:
    """`text` with every match of `pattern` replaced by spaces, so offsets and lines stay put."""
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def outside_fences(text: str) -> str:
    """A Markdown page with its fenced code blocks blanked: what is in them is neither a heading
    nor a link."""
    lines, fenced = text.split("\n"), False
    for i, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
            lines[i] = ""
        elif fenced:
            lines[i] = ""
    return "\n".join(lines)


def heading_text(text: str) -> str:
    """A heading as a pointer quotes it: without backticks, on one line."""
    return " ".join(text.replace("`", "").split())


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def headings(page: Path) -> tuple[frozenset[str], frozenset[str]]:
    """A page's headings as pointers quote them, and their anchors (a repeated heading's second
    anchor ends in -1, as on GitHub)."""
    texts, anchors, seen = set(), set(), {}
    for line in outside_fences(page.read_text(encoding="utf-8")).split("\n"):
        if m := HEADING.match(line):
            texts.add(heading_text(m.group(2)))
            base = slug(m.group(2))
            anchors.add(f"{base}-{seen[base]}" if base in seen else base)
            seen[base] = seen.get(base, 0) + 1
    return frozenset(texts), frozenset(anchors)


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def page_problem(root: Path, source: Path, name: str, heading: str | None) -> str | None:
    """What is dead about a pointer to page `name` (and `heading` in it) from `source`, or None."""
    page = next((p for p in (source.parent / name, root / name, root / "docs" / name) if p.is_file()), None)
    if page is None:
        return f"{name}: no such page"
    if heading is not None and heading_text(heading) not in headings(page.resolve())[0]:
        return f'{name}, "{heading_text(heading)}": no such heading'
    return None


def link_problem(source: Path, target: str) -> str | None:
    """What is dead about the relative link `target` on page `source`, or None."""
    path, _, anchor = target.partition("#")
    page = (source.parent / path) if path else source
    if not page.exists():
        return f"({target}): no such file"
    if anchor and (page.suffix != ".md" or anchor not in headings(page.resolve())[1]):
        return f"({target}): no such heading"
    return None


def dead_pointers(root: Path) -> list[str]:
    """Every dead pointer under `root`, as `path:line: what is dead`."""
    found = []
    for source in scanned_files(root):
        text = blanked(source.read_text(encoding="utf-8"), URL)
        if source.suffix == ".md":
            page = blanked(outside_fences(text), INLINE_CODE)
            for m in LINK.finditer(page):
                if problem := link_problem(source, m.group(1)):
                    found.append(f"{source.relative_to(root)}:{line_of(page, m.start())}: {problem}")
            text = blanked(text, re.compile(r"\]\([^)\s]+\)"))  # a link's target is checked above
        for m in PAGE_REF.finditer(text):
            if problem := page_problem(root, source, m.group(1), m.group(2)):
                found.append(f"{source.relative_to(root)}:{line_of(text, m.start())}: {problem}")
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1]).resolve() if len(argv) > 1 else Path(__file__).resolve().parent.parent
    found = dead_pointers(root)
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
