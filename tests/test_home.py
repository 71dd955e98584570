"""A home edgespec cannot write: read-only use works and says once what it does not save; commands
that exist to write stop with one line naming the folder; a home that is a plain file is one line
for every command that reads it.

The read-only cases run `python -m edgespec` with the home really unwritable (`read_only` in
conftest.py: a read-only bind mount as root, file modes otherwise), so every write edgespec
attempts there fails the way it would for a user.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgespec.cli import main as cli
from tests.edgespec_process import without_speed_lines

REPO = Path(__file__).resolve().parent.parent


def env_for(tmp_path: Path, home: Path, config: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {
        **os.environ,
        "PYTHONPATH": path,
        "EDGESPEC_HOME": str(home),
        "EDGESPEC_CONFIG": str(config),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
    }


def edgespec(read_only, home: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    argv = read_only(home, [sys.executable, "-m", "edgespec", *args])
    return subprocess.run(
        argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
    )


def stored(name: str, path: Path) -> str:
    """A models.toml entry for a GGUF in the store (models/<file>), with its size and sha256 (its
    source is never reached: the file is there and verified)."""
    data = path.read_bytes()
    return (
        f'[models.{name}]\nformat = "gguf"\nfile = "{path.name}"\nsize = {len(data)}\n'
        f'sha256 = "{hashlib.sha256(data).hexdigest()}"\n'
        f'source = {{ hf = "nobody/{name}", file = "{path.name}" }}\n'
    )


@pytest.fixture
def filled_home(tmp_path, tiny_gguf, tiny_draft_gguf) -> tuple[Path, Path]:
    """A home holding a pair's two models, and no hash record, calibration or prompt cache yet."""
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    for path in (tiny_gguf, tiny_draft_gguf):
        shutil.copy(path, home / "models" / path.name)
    config = tmp_path / "models.toml"
    config.write_text(
        'default = "tiny"\n'
        + stored("t", tiny_gguf)
        + stored("d", tiny_draft_gguf)
        + '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 256\n'
    )
    return home, config


@pytest.mark.subprocess
def test_run_from_a_read_only_home_works_and_says_once_what_it_does_not_save(tmp_path, filled_home, read_only):
    home, config = filled_home
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    # a prompt long enough for the prompt cache to save it, and --k auto: a calibration to save
    prompt = "def add(a, b):\n    return a + b\n\n" * 4
    r = edgespec(read_only, home, env_for(tmp_path, home, config), "run", prompt, "--raw", "--max-tokens", "8")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    lines = without_speed_lines(r.stderr)
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("edgespec: warning: cannot save the model hash record in ")
    assert str(home / "models") in lines[0] and "prompt cache" in lines[0]
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == before


@pytest.mark.subprocess
def test_pull_into_a_read_only_home_is_one_line_naming_the_folder(tmp_path, read_only):
    home = tmp_path / "home"
    home.mkdir()
    config = tmp_path / "models.toml"
    config.write_text("")  # the built-in pairs: the check comes before any download
    r = edgespec(read_only, home, env_for(tmp_path, home, config), "models", "pull")
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"edgespec: error: cannot write in {home / 'models'} (")
    assert not any(home.iterdir())


@pytest.fixture
def home_is_a_file(tmp_path, monkeypatch, tiny_gguf) -> Path:
    home = tmp_path / "home"
    home.write_text("not a folder\n")
    monkeypatch.setenv("EDGESPEC_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    config = tmp_path / "models.toml"
    config.write_text(
        f'default = "tiny"\n[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "ngram"\ncontext = 256\n'
    )
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    return home


@pytest.mark.parametrize(
    "args",
    [
        ("run", "hi"),
        ("run", "--no-cache", "hi"),
        ("chat",),
        ("chat", "--resume"),
        (
            "serve",
            "--host",
            "256.0.0.0",
        ),  # were the home not checked first, a bad address: never a server that stays up
        ("bench", "--limit", "1"),
        ("models",),
        ("models", "pull"),
        ("models", "check", "tiny", "--noise-floor"),
        ("models", "tune", "--prompts", "0"),
    ],
)
def test_a_home_that_is_a_file_is_one_line_naming_it_for_every_command(home_is_a_file, args):
    r = CliRunner().invoke(cli.main, list(args))
    assert r.exit_code == 1, (r.stdout, r.stderr)
    assert (
        r.stderr == f"edgespec: error: EDGESPEC_HOME {home_is_a_file} is a file, not a folder; move it away or "
        "point EDGESPEC_HOME at a folder\n"
    )
    assert home_is_a_file.read_text() == "not a folder\n"
