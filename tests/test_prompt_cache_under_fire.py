"""The prompt cache under fire, through real `edgespec run` processes on a tiny pair: several at once
on one folder, one killed in the middle of a save, a full disk, and a folder holding FIFOs, links,
folders and lying headers under entries' names. Each run ends (the subprocess timeouts are hang
detectors, generous for a busy machine), without a traceback, and writes what a cold run writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from edgespec.engine.prompt_cache_files import MAGIC, read_entry
from tests.edgespec_process import CRASH_SIGNS, edgespec_env, without_speed_lines

pytestmark = pytest.mark.subprocess

FILE = "".join(f"def f{i}(a, b):\n    return a * {i} + b\n\n" for i in range(4))  # about 110 tokens
HANG = 300  # seconds: far beyond a run of the tiny pair, even on a loaded machine

# `python -c SABOTEUR MODE ARGS...`: `edgespec ARGS...` with the prompt cache's file writer replaced.
# MODE "kill": it writes half an entry, says so (a file named by EDGESPEC_SAVING) and waits to be
# killed. MODE "full": it writes half an entry and fails as a full disk does.
SABOTEUR = textwrap.dedent("""
    import errno, os, sys, time
    from pathlib import Path
    import edgespec.engine.prompt_cache as prompt_cache
    from edgespec.engine.prompt_cache_files import MAGIC
    from edgespec.__main__ import main

    mode = sys.argv[1]

    def write_half(tmp, header, tokens, state):
        with open(tmp, "wb") as f:
            f.write(MAGIC + header[: len(header) // 2])
            f.flush()
            if mode == "kill":
                Path(os.environ["EDGESPEC_SAVING"]).touch()
                time.sleep(3600)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    prompt_cache.write_entry_file = write_half
    sys.argv = ["edgespec", *sys.argv[2:]]
    main()
""")


@pytest.fixture
def env(tmp_path, tiny_gguf, tiny_draft_gguf) -> dict[str, str]:
    """A subprocess environment: the tiny pair on one thread (the same arithmetic in every run,
    whatever the load), an empty home, the prompt cache on."""
    config = tmp_path / "models.toml"
    config.write_text(
        f'default = "tiny"\n[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{tiny_draft_gguf}"\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 256\nthreads = 1\n'
    )
    env = edgespec_env(
        EDGESPEC_CONFIG=str(config), EDGESPEC_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg")
    )
    for name in ("EDGESPEC_NO_CACHE", "EDGESPEC_CACHE_BUDGET"):
        env.pop(name, None)
    return env


def folder(env: dict[str, str]) -> Path:
    return Path(env["EDGESPEC_HOME"]) / "prompt-cache"


def run_argv(instruction: str, stats: Path, *flags: str) -> list[str]:
    return ["run", instruction, "--max-tokens", "16", "--color", "never", "--stats-json", str(stats), *flags]


def start(env: dict[str, str], argv: list[str], prefix: tuple[str, ...] = ("-m", "edgespec")) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *prefix, *argv],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen) -> tuple[str, str]:
    """stdout and stderr of a run that must end by itself, cleanly, within HANG seconds."""
    try:
        out, err = proc.communicate(FILE, timeout=HANG)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"still running after {HANG} s: {proc.args}")
    assert proc.returncode == 0, err
    assert not any(sign in err for sign in CRASH_SIGNS), err
    assert all(line.startswith("edgespec: ") for line in err.splitlines()), err  # one-line messages only
    return out, err


def run(env: dict[str, str], instruction: str, *flags: str) -> tuple[str, str, dict]:
    stats = Path(env["EDGESPEC_HOME"]).parent / f"stats-{time.monotonic_ns()}.json"
    out, err = finish(start(env, run_argv(instruction, stats, *flags)))
    return out, err, json.loads(stats.read_text())


def cold(env: dict[str, str], *instructions: str) -> dict[str, str]:
    return {instruction: run(env, instruction, "--no-cache")[0] for instruction in instructions}


def assert_whole_entries_only(cache: Path) -> None:
    """Every file left is a whole entry, and no temporary file of a writer is left beside them."""
    names = [p.name for p in cache.iterdir()]
    assert names and all(name.endswith(".kv") for name in names), names
    assert all(read_entry(cache / name, with_state=True, limit=1 << 40).state for name in names)


def test_runs_at_once_on_one_folder_reply_as_a_cold_run(env):
    instructions = ("Explain f1.", "Add type hints.")
    expected = cold(env, *instructions)
    assert not folder(env).exists()
    hits = 0
    for _ in range(2):  # the first round saves at once, the second loads what the first saved
        stats = [Path(env["EDGESPEC_HOME"]).parent / f"stats-{i}.json" for i in range(4)]
        procs = [start(env, run_argv(instructions[i % 2], stats[i])) for i in range(4)]
        outs = [finish(proc)[0] for proc in procs]
        assert outs == [expected[instructions[i % 2]] for i in range(4)]
        hits += sum(json.loads(s.read_text())["prompt_cached"] > 0 for s in stats)
    assert hits > 0  # the cache was in play (a run may miss an entry that another run replaced meanwhile)
    assert_whole_entries_only(folder(env))


def test_a_run_killed_in_the_middle_of_a_save_costs_nothing_after_it(env, tmp_path):
    expected = cold(env, "Explain f1.", "Add type hints.", "Rename f2.")
    saving = tmp_path / "saving"
    proc = start(
        {**env, "EDGESPEC_SAVING": str(saving)},
        ["kill", *run_argv("Explain f1.", tmp_path / "s.json")],
        ("-c", SABOTEUR),
    )
    proc.stdin.write(FILE)
    proc.stdin.close()
    deadline = time.monotonic() + HANG
    while not saving.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, f"no save began after {HANG} s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=HANG)
    (partial,) = folder(env).iterdir()  # half an entry, under a name no lookup reads
    assert partial.name.endswith(".partial")

    out, _, stats = run(env, "Add type hints.")
    assert out == expected["Add type hints."] and stats["prompt_cached"] == 0
    assert partial.exists()  # as fresh as another process's write in flight: left alone
    old = time.time() - 2 * 3600  # as a killed writer's file looks two hours later
    os.utime(partial, (old, old))
    out, _, stats = run(env, "Rename f2.")
    assert out == expected["Rename f2."] and stats["prompt_cached"] > 0
    run(env, "Rename f2.", "-s", "Be brief.")  # another prefix: a save that writes, and sweeps
    assert_whole_entries_only(folder(env))


def test_a_full_disk_costs_only_the_cache_and_is_said_once(env, tmp_path):
    expected = cold(env, "Explain f1.")
    proc = start(env, ["full", *run_argv("Explain f1.", tmp_path / "s.json")], ("-c", SABOTEUR))
    out, err = finish(proc)
    assert out == expected["Explain f1."]
    (said,) = without_speed_lines(err)  # a calibration on a busy machine is said too
    assert "cannot save the prompt cache" in said and "No space left on device" in said
    assert list(folder(env).iterdir()) == []  # the half-written entries went with the failure


def plant_hostile_entries(cache: Path) -> list[Path]:
    """Beside each identity's whole entries, under names of that identity: a FIFO, links to a device
    and to a FIFO, a folder, headers claiming sizes no file has, a header of nested brackets, bytes
    that are no entry. Returns what was planted."""
    planted = []
    for identity_digest in sorted({p.name.split("-")[0] for p in cache.glob("*.kv")}):
        (whole, *_) = cache.glob(f"{identity_digest}-*.kv")
        identity = read_entry(whole, with_state=False, limit=1 << 40).identity
        names = [cache / f"{identity_digest}-{i:016x}.kv" for i in range(9)]
        fifo, to_device, to_fifo, a_folder, *lying, deep, noise = names
        os.mkfifo(fifo)
        to_device.symlink_to("/dev/zero")
        to_fifo.symlink_to(fifo)
        a_folder.mkdir()
        for path, (n_tokens, state_size) in zip(lying, ((2**62, 0), (10**11, 0), (0, 2**62)), strict=True):
            header = json.dumps(
                {
                    "identity": identity,
                    "n_tokens": n_tokens,
                    "state_size": state_size,
                    "tokens_crc32": 0,
                    "state_crc32": 0,
                }
            ).encode()
            path.write_bytes(MAGIC + len(header).to_bytes(4, "little") + header)
        deep.write_bytes(MAGIC + (60_000).to_bytes(4, "little") + b"[" * 60_000)
        noise.write_bytes(os.urandom(4096))
        planted += names
    return planted


def test_a_hostile_folder_neither_stops_nor_changes_a_run(env):
    expected = cold(env, "Add type hints.", "Rename f2.")
    run(env, "Explain f1.")  # the whole entries to plant beside
    planted = plant_hostile_entries(folder(env))
    assert planted  # beside the target's entry, and the draft's where the run drafted with it

    out, err, stats = run(env, "Add type hints.")
    assert out == expected["Add type hints."] and stats["prompt_cached"] > 0  # the whole entries still serve
    assert "removed a damaged entry" in err and "cannot be removed" in err  # the folders stay
    assert [p for p in planted if os.path.lexists(p)] == [p for p in planted if p.is_dir()]
    out, err, stats = run(env, "Rename f2.")  # again, with the folders still there
    assert out == expected["Rename f2."] and stats["prompt_cached"] > 0
