"""Generated hostile homes: a home that `edgespec run` filled (the reply history's log, lock and
index, the repository token cache, the prompt cache, the calibration, the model store's record),
then one of its files or folders replaced by a piece of what a damaged or hostile home holds (a
FIFO, a link to /dev/zero or out of the home, a truncation, flipped bits, huge numbers, token ids
outside the vocabulary, a folder made read-only or a link). A call and `edgespec history` against
each must give a reply, or one line, never a traceback or a hang, and leave what lies outside the
home as it was."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from edgespec.engine.history_index import INDEX_MAGIC
from edgespec.engine.history_log import encode_record
from tests.edgespec_process import REPO, edgespec_env

PROMPT = "rewrite this function so that it adds two to x instead of one, and keep the name f as it is now. " * 3
HANG_S = 120  # a call that takes this long hangs: the tiny pair answers in about a second
BIG_ID = 2**31 - 1  # np.bincount over it: 16 GiB
# Folders a user may keep behind a link: the home itself, and models/ (model files are large, and
# each is checked against its sha256 before it loads).
LINKS_ALLOWED = {".", "models"}
PIECES = ["fifo", "link to /dev/zero", "link out", "truncated", "flipped", "huge", "ids", "read-only", "folder link"]


def edgespec(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [sys.executable, "-m", "edgespec", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=HANG_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"edgespec {' '.join(args)[:40]} hung")


def environment(folder: Path) -> dict[str, str]:
    env = edgespec_env(EDGESPEC_CONFIG=str(folder / "models.toml"), EDGESPEC_HOME=str(folder / "home"))
    for name in ("EDGESPEC_NO_HISTORY", "EDGESPEC_NO_REPOSITORY"):
        env.pop(name, None)
    return env


@pytest.fixture(scope="module")
def filled(tmp_path_factory, tiny_gguf, tiny_draft_gguf) -> Path:
    """A folder holding models.toml (the tiny pair), a --context file and a home two calls filled."""
    folder = tmp_path_factory.mktemp("filled")
    (folder / "models.toml").write_text(
        f'default = "tiny"\n[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{tiny_draft_gguf}"\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 512\n'
    )
    (folder / "context.py").write_text("def f(x):\n    return x + 1\n")
    args = ("run", PROMPT, "--max-tokens", "12", "--context", str(folder / "context.py"))
    for _ in range(3):  # the third opens the history with records: its index is saved
        done = edgespec(environment(folder), *args)
        assert done.returncode == 0, done.stderr
    return folder


def stores(home: Path) -> list[str]:
    """The files the calls left in the home, relative to it: each store's entries."""
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file() and not p.is_symlink())


def outside_tree(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(folder)): (os.lstat(p).st_mode, p.read_bytes() if p.is_file() else b"")
        for p in [folder, *folder.rglob("*")]
    }


def out_of_range(path: Path) -> None:
    """Ids outside the vocabulary, where the file holds ids, with every checksum made to hold."""
    data = bytearray(path.read_bytes())
    if path.name == "log":
        data += encode_record([1], [BIG_ID], b"r" * 16)
    elif path.suffix == ".idx":
        head = len(INDEX_MAGIC)
        n, _, sa_crc = struct.unpack_from("<QII", data, head)
        start = head + struct.calcsize("<QII")
        tokens = np.frombuffer(bytes(data[start : start + 4 * n]), "<i4").copy()
        tokens[1] = BIG_ID
        data[start : start + 4 * n] = tokens.tobytes()
        struct.pack_into("<QII", data, head, n, zlib.crc32(tokens.tobytes()), sa_crc)
    else:
        data += np.asarray([BIG_ID], "<i4").tobytes()
    path.write_bytes(bytes(data))


def huge(path: Path, at: float) -> None:
    """Huge numbers: every number of a JSON file, else eight bytes of 0xFF (a length, a count)."""
    if path.suffix == ".json":
        path.write_text(json.dumps(_numbers_to(json.loads(path.read_text()), 10**400)))
        return
    data = bytearray(path.read_bytes())
    start = min(int(at * len(data)), max(0, len(data) - 8))
    data[start : start + 8] = b"\xff" * 8
    path.write_bytes(bytes(data))


def _numbers_to(value, n):
    if isinstance(value, dict):
        return {k: _numbers_to(v, n) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers_to(v, n) for v in value]
    return n if isinstance(value, int | float) and not isinstance(value, bool) else value


def plant(home: Path, outside: Path, store: str, piece: str, at: float) -> None:
    path = home / store
    if piece in ("fifo", "link to /dev/zero", "link out"):
        path.unlink()
        if piece == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to("/dev/zero" if piece == "link to /dev/zero" else outside / "secret")
    elif piece == "truncated":
        path.write_bytes(path.read_bytes()[: int(at * path.stat().st_size)])
    elif piece == "flipped":
        data = bytearray(path.read_bytes())
        if data:
            data[min(int(at * len(data)), len(data) - 1)] ^= 1 << int(at * 8 % 8)
        path.write_bytes(bytes(data))
    elif piece == "huge":
        huge(path, at)
    elif piece == "ids" and (path.name == "log" or path.suffix in (".idx", ".tokens")):
        out_of_range(path)
    elif piece == "ids":
        huge(path, at)
    elif piece == "read-only":
        path.parent.chmod(0o500)
    else:  # the store's folder replaced by a link to a copy of it outside the home
        shutil.copytree(path.parent, outside / "folder")
        shutil.rmtree(path.parent)
        path.parent.symlink_to(outside / "folder")


def one_line_or_reply(done: subprocess.CompletedProcess, reply: bool) -> None:
    """A reply (exit 0, text on stdout when one is asked for), or one line and a non-zero exit;
    whatever is said on stderr is said in lines of edgespec's, never a traceback."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr and all(line.startswith("edgespec: ") for line in lines), done.stderr
    if done.returncode == 0:
        assert done.stdout.strip() or not reply, done.stderr
    else:
        assert len(lines) == 1 and done.returncode in (1, 2), (done.returncode, done.stderr)


@pytest.mark.heavy
@pytest.mark.subprocess
@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), piece=st.sampled_from(PIECES), at=st.floats(0.0, 1.0))
def test_a_call_in_a_hostile_home_replies_or_says_one_line(filled, data, piece, at):
    store = data.draw(st.sampled_from(stores(filled / "home")), label="store")
    assume(piece != "folder link" or str(Path(store).parent) not in LINKS_ALLOWED)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        shutil.copytree(filled, folder, dirs_exist_ok=True, symlinks=True)
        outside = folder / "outside"
        outside.mkdir()
        (outside / "secret").write_bytes(b"the user's own file\n")
        (outside / "secret").chmod(0o640)
        plant(folder / "home", outside, store, piece, at)
        before = outside_tree(outside)
        env = environment(folder)
        try:
            done = edgespec(env, "run", PROMPT, "--max-tokens", "12", "--context", str(folder / "context.py"))
            one_line_or_reply(done, reply=True)
            one_line_or_reply(edgespec(env, "history"), reply=False)
            assert outside_tree(outside) == before  # nothing outside the home read into, written or chmod'ed
        finally:
            for path in [folder, *folder.rglob("*")]:
                if path.is_dir() and not path.is_symlink():
                    path.chmod(0o700)  # a read-only folder: removable again
