"""Drafting from earlier calls and the repository, end to end through `edgespec run` on a tiny pair:
what is kept, what is drafted from it, and that the reply stays the target's."""

from __future__ import annotations

import json
import subprocess

import click
import pytest
from click.testing import CliRunner

from edgespec.cli import main as cli
from tests.tiny_cli import tiny_pair_toml


@pytest.fixture
def env(tmp_path, monkeypatch, tiny_gguf, tiny_draft_gguf):
    """A tiny pair, its own home, and the history on (the test suite turns it off elsewhere)."""
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("EDGESPEC_NO_HISTORY")
    config = tmp_path / "models.toml"
    config.write_text(tiny_pair_toml(tiny_gguf, tiny_draft_gguf))
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    return tmp_path


def run(env, *args):
    stats = env / "stats.json"
    r = CliRunner().invoke(cli.main, ["run", *args, "--max-tokens", "40", "--stats-json", str(stats)])
    assert r.exit_code == 0, r.stderr
    return r.stdout, json.loads(stats.read_text())


def test_a_regenerated_reply_is_drafted_from_the_first_and_equals_it(env):
    first, stats = run(env, "write a loop")
    assert "retry" not in stats["lookups"]  # nothing earlier to retry from
    again, stats = run(env, "write a loop", "--decode-again")  # else the first reply is served again
    assert again == first
    assert stats["lookups"]["retry"] > 0 and stats["lookups"]["history"] > 0
    assert stats["accepted"] > 0
    shown = CliRunner().invoke(cli.main, ["history"])
    assert shown.exit_code == 0 and "2 calls" in shown.stdout
    coloured = CliRunner().invoke(cli.main, ["run", "write a loop", "--max-tokens", "40", "--color", "always"])
    assert click.unstyle(coloured.stdout) == first and "\x1b[35m" in coloured.stdout  # copied or repeated: magenta
    cleared = CliRunner().invoke(cli.main, ["history", "--clear"])
    assert cleared.exit_code == 0 and "cleared" in cleared.stdout
    assert "empty" in CliRunner().invoke(cli.main, ["history"]).stdout


def test_no_history_keeps_nothing_and_drafts_from_nothing_earlier(env):
    run(env, "write a loop", "--no-history")
    _, stats = run(env, "write a loop", "--no-history")
    assert not stats["lookups"]
    assert "empty" in CliRunner().invoke(cli.main, ["history"]).stdout


def test_a_bad_history_budget_is_one_line_and_exit_2(env, monkeypatch):
    monkeypatch.setenv("EDGESPEC_HISTORY_BUDGET", "lots")
    r = CliRunner().invoke(cli.main, ["run", "hi", "--max-tokens", "4"])
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert [line for line in r.stderr.splitlines() if line.strip()] == [
        line for line in r.stderr.splitlines() if "EDGESPEC_HISTORY_BUDGET" in line
    ]


def test_context_paths_and_the_work_tree_are_drafted_from(env, monkeypatch):
    code = env / "code"
    code.mkdir()
    (code / "lib.py").write_text("def area(width, height):\n    return width * height\n" * 5)
    _, stats = run(env, "hi", "--no-history", "--context", str(code))
    assert stats["lookups"]["repository"] > 0
    subprocess.run(["git", "init", "-q", str(code)], check=True)
    subprocess.run(["git", "-C", str(code), "add", "lib.py"], check=True)
    monkeypatch.chdir(code)
    monkeypatch.delenv("EDGESPEC_NO_REPOSITORY")
    _, stats = run(env, "hi", "--no-history")
    assert stats["lookups"]["repository"] > 0
    missing = CliRunner().invoke(cli.main, ["run", "hi", "--context", str(env / "nope")])
    assert missing.exit_code == 2 and "Traceback" not in missing.stderr
