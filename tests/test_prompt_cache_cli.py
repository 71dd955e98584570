"""The prompt cache through the front ends: `run` with the same input and another instruction reads
only the rest, --no-cache keeps nothing, the budget comes from models.toml or the environment (a bad
one is one line), the folder and its entries are private, and a model's entries follow its file."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from edgespec.backends.llamacpp import READ_CHUNK
from edgespec.decoding.backend import common_prefix
from edgespec.engine.prompt_cache import open_cache
from edgespec.models.config import load_registry
from edgespec.models.registry import ConfigError
from tests.cached_prompts import FILE, LONGER, load
from tests.tiny_cli import tiny_pair_toml

# -- the front ends ------------------------------------------------------------------------------


@pytest.fixture
def cli_env(tmp_path, monkeypatch, tiny_gguf, tiny_draft_gguf):
    """A tiny pair in a user models.toml, and an empty EDGESPEC_HOME."""
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EDGESPEC_NO_CACHE", raising=False)
    monkeypatch.delenv("EDGESPEC_CACHE_BUDGET", raising=False)
    config = tmp_path / "models.toml"
    config.write_text(tiny_pair_toml(tiny_gguf, tiny_draft_gguf))
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    return tmp_path


def run(tmp_path: Path, instruction: str, *flags: str, stdin: str = FILE) -> tuple[str, dict]:
    from click.testing import CliRunner

    from edgespec.cli import main as cli

    stats = tmp_path / "stats.json"
    r = CliRunner().invoke(
        cli.main,
        ["run", instruction, "--max-tokens", "16", "--draft", "model", "--k", "3", "--stats-json", str(stats), *flags],
        input=stdin,
    )
    assert r.exit_code == 0, r.stderr
    return r.stdout, json.loads(stats.read_text())


def entries(tmp_path: Path) -> list[Path]:
    return list((tmp_path / "home" / "prompt-cache").glob("*.kv"))


@pytest.mark.parametrize("system", [(), ("-s", "You are terse.")])
def test_run_with_the_same_stdin_and_another_instruction_reads_only_the_rest(cli_env, system):
    # the CLI's backends read in READ_CHUNK tokens: a file of more than one chunk
    _, first = run(cli_env, "Explain f1.", *system, stdin=LONGER)
    assert first["prompt_cached"] == 0 and len(entries(cli_env)) == 2
    cold_text, cold = run(cli_env, "Add type hints.", "--no-cache", *system, stdin=LONGER)
    warm_text, warm = run(cli_env, "Add type hints.", *system, stdin=LONGER)
    assert warm_text == cold_text and cold["prompt_cached"] == 0
    # the instruction, the template's end, and what the last whole read chunk leaves
    assert warm["prompt_tokens"] - warm["prompt_cached"] < len("Add type hints.") + 16 + READ_CHUNK
    assert warm["prompt_cached"] >= READ_CHUNK


def test_run_max_tokens_0_reads_the_input_ahead_and_writes_nothing(cli_env):
    from click.testing import CliRunner

    from edgespec.cli import main as cli

    r = CliRunner().invoke(cli.main, ["run", "--max-tokens", "0", "--stats"], input=LONGER)
    assert r.exit_code == 0 and r.stdout == "", r.stderr
    assert "read 128 tokens" in r.stderr and len(entries(cli_env)) == 1  # the target's whole chunk
    cold_text, cold = run(cli_env, "Add type hints.", "--no-cache", stdin=LONGER)
    warm_text, warm = run(cli_env, "Add type hints.", stdin=LONGER)
    assert warm["prompt_cached"] == READ_CHUNK and warm_text == cold_text
    refused = CliRunner().invoke(cli.main, ["run", "--max-tokens", "0", "--no-cache"], input=LONGER)
    assert refused.exit_code == 2 and "--no-cache" in refused.stderr


@pytest.mark.parametrize("flags, env", [(("--no-cache",), {}), ((), {"EDGESPEC_NO_CACHE": "1"})])
def test_no_cache_writes_nothing(cli_env, monkeypatch, flags, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    run(cli_env, "Explain f1.", *flags)
    _, again = run(cli_env, "Explain f2.", *flags)
    assert again["prompt_cached"] == 0 and entries(cli_env) == []


def test_the_stdin_text_is_the_shared_prefix_with_and_without_a_system_prompt(tiny_gguf):
    from edgespec.cli.run import compose_message

    backend = load(tiny_gguf)
    for system in ([], [{"role": "system", "content": "Be brief."}]):
        a, b = (
            backend.tokenize(backend.chat_prompt(system + [{"role": "user", "content": compose_message(FILE, p)}]))
            for p in ("Explain f1.", "Add type hints.")
        )
        shared = b"".join(backend.token_bytes(t) for t in a[: common_prefix(a, b)]).decode()
        assert FILE.rstrip("\n") in shared
    backend.close()


@pytest.mark.parametrize(
    "value, expected",
    [('"2GB"', 2 * 10**9), ('"500M"', 500 * 10**6), ('"1.5GiB"', 3 * 2**29), ("4096", 4096), ('"0"', 0)],
)
def test_the_budget_is_read_from_models_toml(tmp_path, value, expected):
    config = tmp_path / "models.toml"
    config.write_text(f"[cache]\nbudget = {value}\n")
    assert load_registry(config).cache_budget == expected


@pytest.mark.parametrize("value", ['"lots"', "-1", "true", '"2XB"'])
def test_a_bad_budget_in_models_toml_is_one_line(cli_env, value):
    config = cli_env / "models.toml"
    config.write_text(config.read_text() + f"[cache]\nbudget = {value}\n")
    with pytest.raises(ConfigError, match=r'key "cache.budget": .* is not a size'):
        load_registry(config)


def test_the_budget_from_the_environment_wins_and_a_bad_one_is_a_usage_error(cli_env, monkeypatch):
    from click.testing import CliRunner

    from edgespec.cli import main as cli

    config = cli_env / "models.toml"
    config.write_text(config.read_text() + '[cache]\nbudget = "1G"\n')
    assert open_cache(load_registry(None).cache_budget).budget == 10**9
    monkeypatch.setenv("EDGESPEC_CACHE_BUDGET", "500M")
    assert open_cache(load_registry(None).cache_budget).budget == 500 * 10**6
    monkeypatch.setenv("EDGESPEC_CACHE_BUDGET", "much")
    r = CliRunner().invoke(cli.main, ["run", "hi"])
    assert r.exit_code == 2 and r.stderr.strip().count("\n") == 0 and "EDGESPEC_CACHE_BUDGET" in r.stderr


# -- the budget ---------------------------------------------------------------------------------

HUGE = "9" * 400


@pytest.mark.parametrize("table, meaning", [("cache", "a size"), ("history", "a number of tokens")])
@pytest.mark.parametrize(
    "value", [f'"{HUGE}"', HUGE, f'"{HUGE}GB"', '"10000000000T"'], ids=["text", "integer", "GB", "beyond-2**63"]
)
def test_a_budget_too_large_for_any_disk_in_models_toml_is_one_line(tmp_path, table, meaning, value):
    config = tmp_path / "models.toml"
    config.write_text(f"[{table}]\nbudget = {value}\n")
    with pytest.raises(ConfigError, match=rf'key "{table}.budget": .* is not {meaning}'):
        load_registry(config)


@pytest.mark.parametrize("command", [["run", "hi"], ["models", "list"]])
def test_a_budget_of_400_digits_is_one_line_for_every_command(cli_env, monkeypatch, command):
    from click.testing import CliRunner

    from edgespec.cli import main as cli

    config = cli_env / "models.toml"
    config.write_text(config.read_text() + f'[cache]\nbudget = "{HUGE}"\n')
    r = CliRunner().invoke(cli.main, command)
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit)
    assert r.stderr.count("\n") == 1 and 'key "cache.budget"' in r.stderr
    config.write_text(config.read_text().replace(f'"{HUGE}"', '"1G"'))
    monkeypatch.setenv("EDGESPEC_CACHE_BUDGET", HUGE)
    r = CliRunner().invoke(cli.main, ["run", "hi"])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)
    assert r.stderr.count("\n") == 1 and "EDGESPEC_CACHE_BUDGET" in r.stderr


def test_a_budget_of_0_reads_saves_and_says_nothing(cli_env, monkeypatch):
    run(cli_env, "Explain f1.")
    before = {p: p.stat().st_mtime_ns for p in entries(cli_env)}
    monkeypatch.setenv("EDGESPEC_CACHE_BUDGET", "0")
    from click.testing import CliRunner

    from edgespec.cli import main as cli

    stats = cli_env / "stats.json"
    r = CliRunner().invoke(
        cli.main, ["run", "Add type hints.", "--max-tokens", "8", "--stats-json", str(stats)], input=FILE
    )
    assert r.exit_code == 0 and "prompt cache" not in r.stderr
    assert json.loads(stats.read_text())["prompt_cached"] == 0
    assert {p: p.stat().st_mtime_ns for p in entries(cli_env)} == before  # neither used nor replaced


# -- the folder's modes, the model's identity --------------------------------------------------


def test_folders_are_private_and_entries_too_whatever_the_umask(cli_env):
    old = os.umask(0)
    try:
        run(cli_env, "Explain f1.")
    finally:
        os.umask(old)
    home = cli_env / "home"
    folders = [home, *(p for p in home.rglob("*") if p.is_dir())]
    assert (home / "prompt-cache") in folders
    assert {str(p): oct(p.stat().st_mode & 0o777) for p in folders} == {str(p): "0o700" for p in folders}
    assert entries(cli_env) and all(p.stat().st_mode & 0o777 == 0o600 for p in entries(cli_env))


def test_an_older_world_writable_cache_folder_is_made_private_on_the_next_save(cli_env):
    folder = cli_env / "home" / "prompt-cache"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    run(cli_env, "Explain f1.")
    assert folder.stat().st_mode & 0o777 == 0o700


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "make, stated_sha256",
    [(os.link, False), (os.link, True), (shutil.copyfile, True)],
    ids=["hard-link", "hard-link-with-sha256", "copy-with-sha256"],
)
def test_a_link_to_the_model_or_a_verified_copy_keeps_its_entries(
    cli_env, tiny_gguf, tiny_draft_gguf, make, stated_sha256
):
    """A file with no stated sha256 is named by path, size and mtime: a copy elsewhere is another
    file, whose entries are its own."""
    models = cli_env / "models"
    models.mkdir()
    files = {name: models / f"{name}.gguf" for name in ("t", "d")}
    shutil.copyfile(tiny_gguf, files["t"])
    shutil.copyfile(tiny_draft_gguf, files["d"])

    def configure(paths: dict[str, Path]) -> None:
        (cli_env / "models.toml").write_text(
            'default = "tiny"\n'
            + "".join(
                f'[models.{name}]\nformat = "gguf"\npath = "{path}"\n'
                + (f'sha256 = "{sha256_of(path)}"\n' if stated_sha256 else "")
                for name, path in paths.items()
            )
            + '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 256\n'
        )

    configure(files)
    run(cli_env, "Explain f1.")
    others = {name: models / f"{name}-other.gguf" for name in files}
    for name, path in files.items():
        make(path, others[name])
    if make is shutil.copyfile:
        configure(others)
    _, warm = run(cli_env, "Add type hints.")
    assert warm["prompt_cached"] > len(FILE) // 2
