"""`edgespec` commands in process (on the tiny pair of conftest's `tiny_cli_home`), and the one-line
error every bad input gets, and the models.toml of the tiny pair. Shared by the modules that drive
`run --json` and `--json-schema`, the prompt cache's and the history's commands."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from edgespec.cli import main as cli


def tiny_pair_toml(tiny_gguf: Path, tiny_draft_gguf: Path) -> str:
    """A models.toml whose default pair `tiny` is the tiny target and draft GGUFs (conftest's)."""
    return (
        f'default = "tiny"\n[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{tiny_draft_gguf}"\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 256\n'
    )


def invoke(*args):
    return CliRunner().invoke(cli.main, list(args))


def one_line_error(result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    lines = [s for s in result.stderr.splitlines() if s.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgespec: error:"), result.stderr
    return lines[0]
