"""tools/check_commit_msg.py, the commit-msg hook: a subject of at most 72 characters and a blank
line before the body."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("check_commit_msg", ROOT / "tools" / "check_commit_msg.py")
check_commit_msg = sys.modules["check_commit_msg"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_commit_msg)

SUBJECT = "decoding: ModelDrafter gets its own module"


@pytest.mark.parametrize(
    "text",
    [
        SUBJECT + "\n",
        SUBJECT,
        "x" * 72 + "\n\nA body, with figures:\n" + "y" * 200 + "\n",
        f"\n\n{SUBJECT}\n\nWhy.\n# Please enter the commit message for your changes.\n#" + " long comment" * 20,
        f"{SUBJECT}\n\nWhy.\n{check_commit_msg.SCISSORS}\ndiff --git a/x b/x\n" + "z" * 100,
        "# only a comment\n",
    ],
)
def test_a_well_shaped_message_passes(text):
    assert check_commit_msg.problems(text) == []


def test_a_long_subject_is_refused():
    assert check_commit_msg.problems("x" * 73 + "\n\nbody\n") == [
        "the subject is 73 characters; at most 72, the rest in the body"
    ]


def test_a_body_right_under_the_subject_is_refused():
    assert check_commit_msg.problems(f"{SUBJECT}\nno blank line before this\n") == [
        "the subject and the body need a blank line between them"
    ]


def test_the_hook_prints_each_problem_and_exits_1(tmp_path, capsys):
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text("y" * 80 + "\nbody\n")
    assert check_commit_msg.main(["check_commit_msg.py", str(message)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "commit message: the subject is 80 characters; at most 72, the rest in the body",
        "commit message: the subject and the body need a blank line between them",
    ]
    message.write_text(SUBJECT + "\n\nWhy it changed.\n")
    assert check_commit_msg.main(["check_commit_msg.py", str(message)]) == 0
