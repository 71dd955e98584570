"""The command line tried by a machine: generated flags for every command and generated bench suites.

The rule for any command line: it succeeds, or it exits non-zero with one line on stderr,
"edgespec: error: ...", never a traceback. Nothing loads: the moment a command would load a
model, pull a file or open the chat app, a stand-in stops it (`ReachedLoading`), which counts as
success, since every check of the flags must come before that moment. The pairs are tiny GGUFs
(and one whose files are missing) in a user models.toml; the home is a temporary folder.

Real argv cannot hold NUL, so none is generated; text that was not UTF-8 arrives as lone
surrogates (Python's surrogateescape), and those are generated. Beyond the one-line rule,
`broken_rules` checks issue 26's rules for values: nan and inf refused, an unknown pair a usage
error, text that is not Unicode refused before loading.
"""

from __future__ import annotations

import json
import re
import traceback
from itertools import pairwise

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import edgespec.bench.tuning
import edgespec.cli.chat
import edgespec.engine.loading
import edgespec.models.store
from edgespec.cli import main as cli

ARGV_CASES = 900  # generated command lines
SUITE_CASES = 300  # generated bench suite files; together at least 1,000


class ReachedLoading(Exception):
    """The command got as far as loading a model (or pulling, or opening the app): its flags passed."""


@pytest.fixture
def env(tmp_path, monkeypatch, tiny_gguf, tiny_draft_gguf):
    """A models.toml of tiny pairs, a temporary home and working folder, and nothing that loads."""
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("EDGESPEC_API_KEY", raising=False)
    monkeypatch.delenv("EDGESPEC_NO_CACHE", raising=False)
    config = tmp_path / "models.toml"
    config.write_text(
        'default = "tiny"\n'
        f'[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{tiny_draft_gguf}"\n'
        f'[models.gone]\nformat = "gguf"\npath = "{tmp_path / "nope.gguf"}"\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 256\n'
        '[pairs.plain]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "none"\ncontext = 256\n'
        '[pairs.missing]\nbackend = "llamacpp"\ntarget = "gone"\ndrafter = "none"\ncontext = 256\n'
    )
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    monkeypatch.chdir(tmp_path)

    def stop(*args, **kwargs):
        raise ReachedLoading

    monkeypatch.setattr(edgespec.engine.loading, "load_backend", stop)
    monkeypatch.setattr(edgespec.models.store.Store, "pull", stop)  # never the network
    monkeypatch.setattr(edgespec.bench.tuning, "build_candidate", stop)
    monkeypatch.setattr(edgespec.bench.tuning, "Tuner", stop)
    monkeypatch.setattr(edgespec.cli.chat, "_reopen_terminal", stop)  # never fd 0 of the test run
    monkeypatch.setattr(edgespec.cli.chat, "_require_terminal", stop)
    return tmp_path


# -- what is typed ---------------------------------------------------------------------------------

# Any character a terminal can pass (no NUL), lone surrogates included: bytes that were not UTF-8.
odd_text = st.text(st.characters(codec=None, exclude_characters="\x00"), max_size=8)
surrogates = st.sampled_from(["\udcff", "hi \udcff\udcfe there", "\ud800"])
numbers = st.sampled_from(
    [
        "nan",
        "NaN",
        "inf",
        "-inf",
        "Infinity",
        "1e309",
        "-0",
        "0",
        "1",
        "-1",
        "0.5",
        "1e-308",
        "2.5",
        "3",
        "12",
        "100",
        "2147483648",
        "18446744073709551616",
        "1" * 40,
        "0x10",
        "1_000",
        "",
        " ",
        "one",
        "٣",
    ]
)
anything = numbers | odd_text | surrogates
pair_names = st.sampled_from(["tiny", "plain", "missing", "no-such-pair", "", "TINY"]) | odd_text
paths = (
    st.sampled_from(
        [
            "out.json",
            "sub/none/out.json",
            ".",
            "/",
            "/proc/version",
            "home",
            "x.png",
            "out.svg",
            "/dev/null",
            "nope.jsonl",
        ]
    )
    | odd_text
)

SAMPLING = {"--temperature": numbers, "--top-p": numbers, "--top-k": numbers, "--min-p": numbers, "--seed": numbers}
DECODING = {
    "--draft": st.sampled_from(["auto", "model", "ngram", "none", "nope", ""]),
    "--k": st.sampled_from(["auto", "auto-chain", "heuristic", "0", "4", "99", "-1", "k4", "1" * 5000]) | anything,
    **SAMPLING,
}
PAIR = {"-m": pair_names, "--pair": pair_names, "--config": paths | st.just("models.toml")}
FLAGS = {  # each command's options and the values tried for them (None: a flag without a value)
    "run": {
        **PAIR,
        **DECODING,
        "-s": anything,
        "--system": anything,
        "--max-tokens": numbers,
        "--raw": None,
        "--color": st.sampled_from(["auto", "always", "never", "rainbow"]),
        "--stats": None,
        "--stats-json": paths,
        "--no-cache": None,
    },
    "bench": {
        "-m": pair_names,
        "--config": paths | st.just("models.toml"),
        "--suite": paths,
        "--modes": st.lists(
            st.sampled_from(
                [
                    "ar",
                    "k2",
                    "k4",
                    "ngram-k3",
                    "model-k2",
                    "heuristic",
                    "auto",
                    "auto-chain",
                    "hf-assisted",
                    "k99",
                    "k",
                    "x",
                    "",
                    "k" + "1" * 5000,
                    "k٣",
                ]
            ),
            max_size=4,
        ).map(",".join)
        | anything,
        "--drafter": st.sampled_from(["model", "ngram", "none"]),
        "--limit": numbers,
        "--suites": st.sampled_from(["code-edit", "nope", ",", ""]) | odd_text,
        "--repeats": numbers,
        "--temperature": numbers,
        "--seed": numbers,
        "--json": paths,
        "--plot": paths,
        "--strict": None,
    },
    "serve": {
        **PAIR,
        **DECODING,
        "--host": st.sampled_from(
            [
                "127.0.0.1",
                "localhost",
                "::1",
                "",
                "not a host",
                "256.1.1.1",
                "[::1]",
                "\udcff",
                "a" * 64,
                "é.invalid",
                "1.2.3.4",
            ]
        ),
        "--port": st.sampled_from(["0", "-1", "65536", "http", "nan", "1" * 30, "0x50"]),
        "--api-key": anything,
        "--queue": numbers,
        "--no-cache": None,
    },
    "chat": {
        **PAIR,
        **DECODING,
        "-s": anything,
        "--resume": odd_text | st.just("nope"),
        "--max-tokens": numbers,
        "--no-cache": None,
    },
    "models list": {"--config": paths},
    "models pull": {"--config": paths},
    "models check": {"--config": paths, "--noise-floor": None},
    "models tune": {
        "--config": paths,
        "--layouts": st.sampled_from(["q4_0", "q4_0,iq4_nl", "nope", ",", ""]) | odd_text,
        "--prompts": numbers,
        "--min-agreement": numbers,
        "--apply": None,
        "--keep": None,
        "--pick": odd_text | st.just("q4_0"),
        "--json": paths,
    },
    "export vllm": {"--config": paths, "--k": numbers},
}
POSITIONAL = {
    "run": anything,
    "models pull": pair_names,
    "models check": pair_names,
    "models tune": pair_names,
    "export vllm": pair_names,
}
FLOAT_FLAGS = {"--temperature", "--top-p", "--min-p", "--min-agreement"}
NAN_OR_INF = re.compile(r"[-+]?(nan|inf(inity)?|1e309)", re.IGNORECASE)


@st.composite
def command_lines(draw) -> list[str]:
    command = draw(st.sampled_from(sorted(FLAGS)))
    options = FLAGS[command]
    argv = command.split()
    for flag in draw(st.lists(st.sampled_from(sorted(options) + ["--nope", "-x"]), max_size=5)):
        argv.append(flag)
        values = options.get(flag, anything)
        if values is not None and draw(st.integers(0, 12)) != 6:  # now and then a flag missing its value
            argv.append(draw(values))
    if command in POSITIONAL and draw(st.booleans()):
        argv.insert(len(command.split()), draw(POSITIONAL[command]))
    if draw(st.integers(0, 20)) == 10:
        argv.append(draw(anything))  # one argument too many
    return argv


# -- what must come back ---------------------------------------------------------------------------


def outcome(result) -> str:
    """ "loads" (reached loading), "ok" or "error"; fails on a traceback or an error not in one line."""
    if isinstance(result.exception, ReachedLoading):
        return "loads"
    assert result.exception is None or isinstance(result.exception, SystemExit), "".join(
        traceback.format_exception(result.exception)
    )
    assert "Traceback" not in result.stderr, result.stderr
    if result.exit_code == 0:
        return "ok"
    lines = [line for line in result.stderr.split("\n") if line.strip()]  # as a terminal breaks them
    assert result.exit_code in (1, 2), (result.exit_code, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("edgespec: error: "), result.stderr
    return "error"


KNOWN_PAIRS = {"tiny", "plain", "missing"}
PAIR_ARGUMENT = {"models pull", "models check", "models tune", "export vllm"}  # PAIR is the first argument


def has_surrogate(text: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in text)


def broken_rules(argv: list[str], result) -> list[str]:
    """Issue 26's rules for this command line that the result breaks (beyond the one-line rule)."""
    command = " ".join(argv[:2]) if argv[0] in ("models", "export") else argv[0]
    rest = argv[len(command.split()) :]
    flags = dict(pairwise(rest))
    loads = isinstance(result.exception, ReachedLoading)
    broken = []
    for flag in FLOAT_FLAGS & set(flags):
        if NAN_OR_INF.fullmatch(flags[flag]) and rest.count(flag) == 1 and (loads or result.exit_code != 2):
            broken.append(f"{flag} nan/inf exits 2")
    pairs = {flags[f] for f in ("-m", "--pair") if f in flags}
    if command in PAIR_ARGUMENT and rest and not rest[0].startswith("-"):
        pairs.add(rest[0])
    if pairs - KNOWN_PAIRS:
        if loads:
            broken.append("an unknown pair loads nothing")
        elif result.exit_code != 2 and "unknown pair" in result.stderr:
            broken.append("an unknown pair exits 2")
    texts = [flags[f] for f in ("-s", "--system") if f in flags and command in ("run", "chat")]
    texts += rest[:1] if command == "run" and rest and not rest[0].startswith("-") else []
    if loads and any(map(has_surrogate, texts)):
        broken.append("text that is not valid Unicode loads nothing")
    return broken


@pytest.mark.heavy
def test_generated_command_lines_end_in_success_or_one_line(env):
    tally = {"loads": 0, "ok": 0, "error": 0}

    @settings(
        max_examples=ARGV_CASES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )
    @given(command_lines())
    def one(argv):
        result = CliRunner().invoke(cli.main, argv, input="")
        tally[outcome(result)] += 1
        assert not broken_rules(argv, result), (argv, result.exit_code, result.stderr)

    one()
    print(f"{sum(tally.values())} generated command lines: {tally}")
    assert sum(tally.values()) >= ARGV_CASES
    assert tally["loads"] and tally["error"]  # the generator reaches both ends


def test_an_error_quoting_what_was_typed_stays_one_line(env):
    """A name with a newline, a carriage return or a terminal escape is written escaped (found by the
    generated command lines: `export vllm $'\\n'` printed two lines)."""
    for argv in (["export", "vllm", "\n"], ["run", "-m", "a\rb", "hi"], ["run", "hi", "--config", "x\x1b[2Jy"]):
        result = CliRunner().invoke(cli.main, argv, input="")
        assert outcome(result) == "error"
        assert "\x1b" not in result.stderr and "\r" not in result.stderr


# -- bench suites ----------------------------------------------------------------------------------

messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant"]) | odd_text, "content": odd_text}),
    max_size=2,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | odd_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(odd_text, inner, max_size=3),
    max_leaves=5,
)
completion_line = st.fixed_dictionaries(
    {"id": odd_text, "suite": odd_text, "mode": st.just("completion"), "prompt": odd_text},
    optional={"max_tokens": st.integers(-1, 300) | json_values},
)
chat_line = st.fixed_dictionaries(
    {"id": odd_text, "suite": odd_text, "mode": st.just("chat"), "messages": messages},
    optional={"max_tokens": st.integers(-1, 300) | json_values},
)
suite_value = st.one_of(  # mostly lines of the right shape, so that whole files load too
    completion_line,
    chat_line,
    completion_line,
    chat_line,
    st.dictionaries(st.sampled_from(["id", "suite", "mode", "prompt", "messages", "max_tokens"]), json_values),
    json_values,
)
# Written as UTF-8, or ASCII with escapes: a lone surrogate then stays in the text.
suite_line = st.builds(lambda value, ascii_only: json.dumps(value, ensure_ascii=ascii_only), suite_value, st.booleans())


@st.composite
def suite_files(draw) -> bytes:
    lines = draw(st.lists(suite_line | st.sampled_from(["", "{", "not json", "[" * 5000, "NaN", "{}"]), max_size=3))
    raw = "\n".join(lines).encode("utf-8", "surrogatepass")  # a lone surrogate: bytes that are not UTF-8
    return raw + draw(st.sampled_from([b"", b"\n", b"\xff\xfe", b"\x00"]))


def empty_or_not_unicode(raw: bytes) -> bool:
    """Whether a suite that loaded holds a prompt that is empty or not valid Unicode: refused before
    loading by issue 26's rules (item 6, item 3)."""
    for line in raw.decode("utf-8").splitlines():
        d = json.loads(line) if line.strip() else {}
        texts = [d.get("prompt")] if d.get("mode") == "completion" else [m["content"] for m in d.get("messages", [])]
        if d.get("mode") == "chat" and not d["messages"] or any(not t.strip() or has_surrogate(t) for t in texts):
            return True
    return False


@pytest.mark.heavy
def test_generated_bench_suites_end_in_success_or_one_line(env):
    tally = {"loads": 0, "ok": 0, "error": 0}
    suite = env / "suite.jsonl"

    @settings(
        max_examples=SUITE_CASES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )
    @given(suite_files(), st.sampled_from([[], ["--limit", "1"], ["--suites", "a"], ["--modes", "ar,k2"]]))
    def one(raw, extra):
        suite.write_bytes(raw)
        result = outcome(CliRunner().invoke(cli.main, ["bench", "--suite", str(suite), *extra], input=""))
        tally[result] += 1
        assert not (result == "loads" and empty_or_not_unicode(raw)), raw

    one()
    print(f"{sum(tally.values())} generated suite files: {tally}")
    assert sum(tally.values()) >= SUITE_CASES
    assert tally["loads"] and tally["error"]
