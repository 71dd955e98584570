"""The repository corpus: which files are read, and their tokens kept per file version."""

from __future__ import annotations

import os

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
