"""A calibration the user waits for is said on every front end: `run` on stderr (a pipe too, never
on stdout), the chat app as notifications (stderr would tear its screen). How the engine words it
and when: tests/test_engine_calibration.py; `serve`: tests/test_serve_ready.py."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import edgespec.decoding.costs.keeper
import edgespec.engine.engine
from edgespec.cli import main as cli
from tests.fakes import VirtualClock, fake_engine, simulated_time
from tests.scripted_chat import SIZE, make_app, send, wait_for_reply


def test_run_says_its_calibration_on_stderr(tmp_path, monkeypatch, engine_notices_unsaid, tiny_gguf, tiny_draft_gguf):
    """The tiny pair measures in milliseconds on a quiet machine; here every calibration is long
    enough to be said, and said where an engine says it outside the tests."""
    monkeypatch.setattr(edgespec.decoding.costs.keeper, "SAY_AFTER_S", 0.0)
    monkeypatch.setattr(edgespec.engine.engine, "say_on_stderr", engine_notices_unsaid)
    config = tmp_path / "models.toml"
    config.write_text(
        f'default = "tiny"\n[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{tiny_draft_gguf}"\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 256\n'
    )
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    result = CliRunner().invoke(cli.main, ["run", "hello", "--raw", "--max-tokens", "4"])
    assert result.exit_code == 0, result.stderr
    said = result.stderr.splitlines()
    assert said[0].startswith("edgespec: measuring this machine's speed with 'tiny'"), result.stderr
    assert said[1].startswith("edgespec: speed measured in "), result.stderr
    assert "speed" not in result.stdout


@pytest.mark.asyncio
async def test_chat_says_its_calibration_in_notifications(tmp_path):
    clock = VirtualClock()
    engine = fake_engine(clock, verify=lambda n: 0.030 + 0.015 * (n - 1), draft_step=0.01)  # 8 s to measure
    app = make_app(tmp_path, engine)
    with simulated_time(clock):
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "hello")
            await wait_for_reply(pilot)
            notes = [(note.title, note.severity, note.message) for note in app._notifications]
    assert [note[:2] for note in notes] == [("Speed", "information")] * 2
    assert notes[0][2].startswith("measuring this machine's speed with 'fake'")
    assert notes[1][2].startswith("speed measured in ")
