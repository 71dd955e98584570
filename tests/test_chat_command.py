"""`edgespec chat`, the command: stdin into the first message, a chats folder that cannot take a
chat, and --json-schema; the app behind it is fed by the scripted fake engine (tests/scripted_chat.py)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from edgespec.decoding.sampling import SamplingParams
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.tui.app import ChatApp
from edgespec.tui.transcript import REJECTED, STYLES
from tests.scripted_chat import REPLY, SIZE, FakeEngine, send, wait_for_reply, wait_until


def test_chat_command_pipes_stdin_into_the_first_message(tmp_path, monkeypatch):
    import edgespec.engine.loading
    from edgespec.cli import chat as command

    engine = FakeEngine()
    engine.read_ahead = lambda prompt, cancel=None, save=True: None  # it can read ahead (tui/read_while_typing.py)
    seen: dict = {}
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    monkeypatch.setattr(
        edgespec.engine.loading,
        "load_engine",
        lambda pair, draft, cache: seen.update(pair=pair, draft=draft, cache=cache) or engine,
        raising=False,
    )
    monkeypatch.setattr(command, "_reopen_terminal", lambda: seen.update(reopened=True))
    monkeypatch.setattr(command, "_require_terminal", lambda: None)
    monkeypatch.setattr(ChatApp, "run", lambda self: seen.update(app=self))
    result = CliRunner().invoke(
        command.chat, ["-s", "review this", "--temperature", "0.7", "--draft", "ngram"], input="diff --git a/x b/x\n"
    )
    assert result.exit_code == 0, result.output
    app = seen["app"]
    assert seen["reopened"] and seen["draft"] == "ngram" and engine.closed
    assert seen["cache"].folder == tmp_path / "prompt-cache"  # each reply is saved for a later --resume
    assert app._first_message == "diff --git a/x b/x" and app.system == "review this"
    assert app.settings.sampling == SamplingParams(temperature=0.7) and app.settings.draft == "ngram"
    assert app.read_ahead.enabled
    assert CliRunner().invoke(command.chat, ["--no-read-ahead"], input="x\n").exit_code == 0
    assert not seen["app"].read_ahead.enabled

    missing = CliRunner().invoke(command.chat, ["--resume", "nope"])
    assert missing.exit_code == 1 and "no saved chat 'nope'" in missing.output


def test_a_chat_the_chats_folder_cannot_take_is_rescued_and_said_at_once_and_on_quit(tmp_path, monkeypatch):
    """The chats folder replaced by a file: the chat goes to rescued/ beside it, a notification says
    where as soon as it happens, and the same line is on stderr after ctrl+q."""
    import edgespec.engine.loading
    from edgespec.cli import chat as command

    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    (tmp_path / "chats").write_text("a file where the chats folder belongs\n")
    monkeypatch.setattr(edgespec.engine.loading, "load_engine", lambda pair, draft, cache: FakeEngine(), raising=False)
    monkeypatch.setattr(command, "_reopen_terminal", lambda: None)
    monkeypatch.setattr(command, "_require_terminal", lambda: None)
    seen: dict = {}

    async def chat_then_quit(pilot) -> None:
        await send(pilot, "Write is_palindrome")
        await wait_for_reply(pilot)
        seen["notes"] = [(n.title, n.message) for n in pilot.app._notifications]
        seen["id"] = pilot.app.conversation.id
        await pilot.press("ctrl+q")

    run = ChatApp.run
    monkeypatch.setattr(ChatApp, "run", lambda self: run(self, headless=True, size=SIZE, auto_pilot=chat_then_quit))
    result = CliRunner().invoke(command.chat, ["--no-cache"])
    assert result.exit_code == 0, result.output
    rescued = tmp_path / "rescued" / f"{seen['id']}.json"
    assert json.loads(rescued.read_text())["messages"][-1]["content"] == REPLY
    line = f"chat {seen['id']} could not be saved in {tmp_path / 'chats'} (Not a directory); it was saved to {rescued}"
    assert seen["notes"] == [("Saved elsewhere", line)]
    assert result.stderr.splitlines()[-1] == f"edgespec: warning: {line}"
    assert (tmp_path / "chats").read_text() == "a file where the chats folder belongs\n"


PET_SCHEMA = {
    "title": "Pet",
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 10}, "kind": {"enum": ["cat", "dog", "bird"]}},
    "required": ["name", "kind"],
    "additionalProperties": False,
}


def test_chat_json_schema_constrains_every_reply_shown_by_origin_like_any_other(
    tmp_path, monkeypatch, tiny_gguf, tiny_draft_gguf
):
    """`chat --json-schema` on the tiny GGUF pair: each reply parses and validates, streams into the
    same view with the same origin styles as an unconstrained reply, and the header names the schema."""
    import jsonschema

    import edgespec.engine.loading
    from edgespec.backends.llamacpp import LlamaCppBackend
    from edgespec.cli import chat as command
    from edgespec.engine.engine import Engine

    pair = PairConfig("tiny", "llamacpp", ModelSpec("t", "gguf"), ModelSpec("d", "gguf"), "model", 512)
    engine = Engine(pair, LlamaCppBackend(tiny_gguf, 512, threads=1), LlamaCppBackend(tiny_draft_gguf, 512, threads=1))
    schema = tmp_path / "pet.json"
    schema.write_text(json.dumps(PET_SCHEMA))
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    monkeypatch.setattr(edgespec.engine.loading, "load_engine", lambda pair, draft, cache: engine, raising=False)
    monkeypatch.setattr(command, "_reopen_terminal", lambda: None)
    monkeypatch.setattr(command, "_require_terminal", lambda: None)
    seen: dict = {}

    async def two_replies(pilot) -> None:
        app = pilot.app
        seen["header"] = app.sub_title
        for n, text in enumerate(("a pet", "another one"), 1):
            await send(pilot, text)
            await wait_until(pilot, lambda n=n: not app.generating and len(app.transcript.replies()) == n, timeout=60)
        views = app.transcript.replies()
        seen["messages"] = [view.message for view in views]
        seen["styles"] = [{str(span.style) for span in view.tokens.content.spans} for view in views]
        await pilot.press("ctrl+q")

    run = ChatApp.run
    monkeypatch.setattr(ChatApp, "run", lambda self: run(self, headless=True, size=SIZE, auto_pilot=two_replies))
    result = CliRunner().invoke(
        command.chat, ["--json-schema", str(schema), "--draft", "model", "--k", "3", "--temperature", "0", "--no-cache"]
    )
    assert result.exit_code == 0, result.output
    assert seen["header"].startswith('JSON schema "Pet" · llamacpp · cpu · ')
    drafted = set()
    for message, styles in zip(seen["messages"], seen["styles"], strict=True):
        assert message["stats"]["stop_reason"] == "eos"
        jsonschema.validate(json.loads(message["content"]), PET_SCHEMA)
        kinds = {kind for kind, _ in message["spans"]} - {"target", REJECTED}
        assert {STYLES[kind] for kind in kinds} <= styles
        drafted |= kinds
    assert drafted & {"draft", "correction", "bonus"}  # speculation wrote part of the replies


def test_chat_refuses_a_bad_schema_file_before_loading(tmp_path, monkeypatch):
    import edgespec.engine.loading
    from edgespec.cli import chat as command

    def no_loading(*args):
        raise AssertionError("the engine was opened")

    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    monkeypatch.setattr(edgespec.engine.loading, "load_engine", no_loading, raising=False)
    schema = tmp_path / "bad.json"
    schema.write_text('{"type": "object", "not": {"type": "string"}}')
    for args in (
        ["--json-schema", str(schema)],
        ["--json-schema", str(tmp_path / "none.json")],
        ["--json", "--json-schema", str(schema)],
    ):
        result = CliRunner().invoke(command.chat, args)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, result.stderr)
        assert lines[0].startswith("edgespec: error: --json")
    assert '"not"' in CliRunner().invoke(command.chat, ["--json-schema", str(schema)]).stderr
