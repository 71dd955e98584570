"""The repository corpus: which files are read, and their tokens kept per file version."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from edgespec.cli import main as cli
from edgespec.engine.repository import RepositoryCorpus, context_files, read_text


def test_only_text_worth_copying_is_read_and_a_fifo_never_blocks(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "blob.bin").write_bytes(b"\0\1\2")
    (tmp_path / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "huge.txt").write_text("y" * (300 << 10))
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n")
    files = context_files([tmp_path])
    assert all(".git" not in f.parts for f in files)
    assert [f.name for f in files if read_text(f) is not None] == ["a.py"]


def test_a_files_tokens_are_kept_until_it_changes(tmp_path):
    calls: list[str] = []

    def tokenize(text: str) -> list[int]:
        calls.append(text)
        return [ord(c) for c in text]

    src = tmp_path / "src.py"
    src.write_text("abcabc")
    corpus = RepositoryCorpus(tmp_path / "cache", tokenize, 256)
    index = corpus.build([src])
    assert index is not None and index.propose([ord("a"), ord("b")], 2).ids == [ord("c"), ord("a")]
    corpus.build([src])
    assert calls == ["abcabc"]  # read from the kept tokens the second time
    src.write_text("abcabd!")
    corpus.build([src])
    assert calls == ["abcabc", "abcabd!"]
    assert RepositoryCorpus(tmp_path / "cache", tokenize, 256).build([tmp_path / "gone.py"]) is None


def test_links_into_the_kernels_files_are_never_read(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "status").symlink_to("/proc/self/status")  # text: read once, as a regular file of size 0
    (tmp_path / "zero").symlink_to("/dev/zero")
    assert [f.name for f in context_files([tmp_path]) if read_text(f) is not None] == ["a.py"]


@pytest.mark.parametrize("path", ["/proc", "/proc/self/environ", "/sys", "/dev/zero", "/dev/null", "fifo", "link"])
def test_a_bad_context_path_is_one_line_before_the_model_loads(tiny_cli_home, path):
    """The pair "missing" has no model file: an error about it would mean the load came first."""
    os.mkfifo(tiny_cli_home / "fifo")
    (tiny_cli_home / "link").symlink_to("/proc/self")
    given = str(tiny_cli_home / path) if not path.startswith("/") else path
    result = CliRunner().invoke(cli.main, ["run", "-m", "missing", "hi", "--context", given], input="")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"edgespec: error: --context {given}: ")
