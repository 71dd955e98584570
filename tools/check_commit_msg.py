"""A commit message's shape: a subject of at most 72 characters, and a blank line before the body.

`git log --oneline`, GitHub and every tool that shows one line per commit cut a longer subject;
the figures and reasons belong in the body, which git tells from the subject by the blank line.
The commit-msg hook of .pre-commit-config.yaml runs this on the message file git hands it:

    python tools/check_commit_msg.py .git/COMMIT_EDITMSG

It prints what is wrong and exits 1, so the commit is refused. Lines git drops (comments, and all
below the scissors line of `commit -v`) are not part of the message.
"""

from __future__ import annotations

import sys
from pathlib import Path

SUBJECT_MAX = 72
SCISSORS = "# ------------------------ >8 ------------------------"


def message_lines(text: str) -> list[str]:
    """The message as git keeps it: comment lines and everything below the scissors dropped,
    leading blank lines too."""
    kept = []
    for line in text.split("\n"):
        if line.startswith(SCISSORS):
            break
        if not line.startswith("#"):
            kept.append(line.rstrip())
    while kept and not kept[0]:
        kept.pop(0)
    return kept


def problems(text: str) -> list[str]:
    """What is wrong with a commit message's shape, one line each; empty when nothing is."""
    lines = message_lines(text)
    if not lines:
        return []  # git refuses an empty message itself
    found = []
    if len(lines[0]) > SUBJECT_MAX:
        found.append(f"the subject is {len(lines[0])} characters; at most {SUBJECT_MAX}, the rest in the body")
    if len(lines) > 1 and lines[1]:
        found.append("the subject and the body need a blank line between them")
    return found


def main(argv: list[str]) -> int:
    found = problems(Path(argv[1]).read_text(encoding="utf-8"))
    for line in found:
        print(f"commit message: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
