"""`edgespec` commands in process (on the tiny pair of conftest's `tiny_cli_home`), and the one-line
error every bad input gets. Shared by the modules that drive `run --json` and `--json-schema`."""

from __future__ import annotations

from click.testing import CliRunner

from edgespec.cli import main as cli


def invoke(*args):
    return CliRunner().invoke(cli.main, list(args))


def one_line_error(result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    lines = [s for s in result.stderr.splitlines() if s.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgespec: error:"), result.stderr
    return lines[0]
