"""The pipe contract of `edgespec run`: stdout is only the model's text, stderr has stats and
errors, exit codes 0 / 1 / 2 / 130, and every bad input is one line, never a traceback."""

from __future__ import annotations

import inspect
import io
import json

import click
import pytest
from click.testing import CliRunner

from edgespec.bench import modes as bench_module
from edgespec.cli import main as cli
from edgespec.cli.common import _engine_options, read_stdin
from edgespec.cli.run import compose_message
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import Engine
from edgespec.testing.tiny_gguf import FOREIGN_TOKENS, write_tiny_gguf
from edgespec.util.errors import UsageError


@pytest.fixture
def env(tmp_path, monkeypatch, tiny_gguf, tiny_draft_gguf, tiny_gguf_factory):
    """A user models.toml with pairs of tiny GGUFs and an empty store."""
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    other_vocab = tiny_gguf_factory(seed=3, n_vocab_extra=200)
    config = tmp_path / "models.toml"
    config.write_text(
        f'default = "tiny"\n'
        f'[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{tiny_draft_gguf}"\n'
        f'[models.other]\nformat = "gguf"\npath = "{other_vocab}"\n'
        f'[models.gone]\nformat = "gguf"\npath = "{tmp_path / "nope.gguf"}"\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 256\n'
        '[pairs.short]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "ngram"\ncontext = 32\n'
        '[pairs.mismatch]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "other"\ncontext = 256\n'
        '[pairs.missing]\nbackend = "llamacpp"\ntarget = "gone"\ndrafter = "none"\ncontext = 256\n'
    )
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    return tmp_path


def invoke(*args, input=None):
    return CliRunner().invoke(cli.main, list(args), input=input)


def one_line_error(result, code):
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [s for s in result.stderr.splitlines() if s.strip()]
    assert len(lines) == 1 and "error" in lines[0].lower(), result.stderr
    return lines[0]


def test_run_streams_only_text_to_stdout_and_stats_to_stderr(env):
    out = env / "stats.json"
    r = invoke(
        "run", "def add(a, b):", "--raw", "--max-tokens", "20", "--stats", "--stats-json", str(out), "--color", "never"
    )
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() and "tok/s" not in r.stdout and "\x1b[" not in r.stdout
    assert "tok/s" in r.stderr and "acceptance" in r.stderr
    stats = json.loads(out.read_text())
    for key in (
        "tokens",
        "drafted",
        "accepted",
        "target_passes",
        "decode_s",
        "decode_tokens_per_s",
        "ttft_s",
        "k_histogram",
    ):
        assert key in stats
    assert 0 < stats["tokens"] <= 20


def test_stats_split_the_whole_reply_and_the_load(env):
    out = env / "stats.json"
    r = invoke("run", "def add(a, b):", "--raw", "--max-tokens", "12", "--stats", "--stats-json", str(out))
    assert r.exit_code == 0, r.stderr
    stats = json.loads(out.read_text())
    assert stats["ttft_s"] >= stats["target_read_s"] > 0
    assert stats["target_read_tokens"] == stats["prompt_tokens"] > 0
    assert stats["draft_s"] >= stats["draft_read_s"] >= 0
    assert stats["total_s"] == pytest.approx(stats["ttft_s"] + stats["decode_s"])
    assert stats["total_tokens_per_s"] == pytest.approx(stats["tokens"] / stats["total_s"])
    assert set(stats["load_s"]) == {"check", "target", "draft"} and all(v > 0 for v in stats["load_s"].values())
    (line,) = [s for s in r.stderr.splitlines() if s.strip()]
    load = stats["load_s"]
    assert line.startswith(
        f"load {sum(load.values()):.2f} s (check {load['check']:.2f} s, "
        f"target {load['target']:.2f} s, draft {load['draft']:.2f} s), "
    )
    for part in (
        f"TTFT {stats['ttft_s']:.2f} s (target read {stats['target_read_s']:.2f} s)",
        f"decode {stats['decode_s']:.2f} s (draft read {stats['draft_read_s']:.2f} s)",
        f"total {stats['total_s']:.2f} s, {stats['total_tokens_per_s']:.1f} tok/s",
        f"decode {stats['decode_tokens_per_s']:.1f} tok/s",
        "acceptance",
    ):
        assert part in line


def test_no_draft_model_is_loaded_for_plain_decoding(env):
    out = env / "stats.json"
    r = invoke("run", "def add(a, b):", "--raw", "--max-tokens", "4", "--draft", "none", "--stats-json", str(out))
    assert r.exit_code == 0, r.stderr
    stats = json.loads(out.read_text())
    assert set(stats["load_s"]) == {"check", "target"} and stats["draft_read_s"] == 0.0


def test_color_always_marks_tokens_by_source(env):
    r = invoke(
        "run", "def add(a, b):", "--raw", "--max-tokens", "24", "--color", "always", "--draft", "model", "--k", "3"
    )
    assert r.exit_code == 0, r.stderr
    assert "\x1b[" in r.stdout  # at least one styled token (accepted drafts are green)


def test_stdin_and_prompt_are_composed_into_one_message():
    assert compose_message("code\n", "add hints") == "code\n\nadd hints"
    assert compose_message(None, "hi") == "hi"
    assert compose_message("only stdin", None) == "only stdin"
    with pytest.raises(UsageError):
        compose_message(None, None)


def test_piped_stdin_reaches_the_model(env):
    r = invoke("run", "--raw", "--max-tokens", "4", "--stats-json", str(env / "s.json"), input="def add(a, b):")
    assert r.exit_code == 0, r.stderr
    assert json.loads((env / "s.json").read_text())["prompt_tokens"] > 3


def test_terminal_stdin_without_prompt_is_a_usage_error(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stdin", Tty())
    assert read_stdin(256) is None  # a terminal is never read (no hang)


def test_no_prompt_and_empty_stdin_exits_2(env):
    one_line_error(invoke("run", input=""), 2)


def test_binary_stdin_is_refused(env):
    line = one_line_error(invoke("run", "explain", input=b"\x7fELF\x00\x01\x02"), 2)
    assert "binary" in line


def test_non_utf8_stdin_is_refused(env):
    line = one_line_error(invoke("run", "explain", input=b"caf\xe9 au lait"), 2)
    assert "UTF-8" in line


def test_prompt_longer_than_context_names_the_limit(env):
    line = one_line_error(invoke("run", "-m", "short", "word " * 200), 2)
    assert "32-token context" in line


@pytest.mark.parametrize(
    "args, code, needle",
    [
        # a name that does not exist is a usage error, whichever flag names it, and the valid ones are listed
        (("run", "-m", "no-such-pair", "hi"), 2, 'unknown pair "no-such-pair"'),
        (("run", "-m", "no-such-pair", "hi"), 2, "available: qwen2.5-coder-1.5b"),
        (("bench", "-m", "tiny", "-m", "no-such-pair"), 2, "available: qwen2.5-coder-1.5b"),
        (("run", "--draft", "no-such-drafter", "hi"), 2, "is not one of 'auto', 'model'"),
        (("models", "tune", "tiny", "--layouts", "q4_0,nope"), 2, "--layouts': unknown 'nope'; valid: q6k-as-q4k"),
        (("models", "tune", "tiny", "--layouts", " , "), 2, "--layouts"),
        # every float flag of every command refuses nan and inf while the flags are parsed
        (("models", "tune", "missing", "--min-agreement", "nan"), 2, "--min-agreement"),
        (("models", "tune", "missing", "--min-agreement", "inf"), 2, "--min-agreement"),
        (("serve", "-m", "missing", "--temperature", "nan"), 2, "--temperature"),
        (("serve", "-m", "missing", "--min-p", "-inf"), 2, "--min-p"),
        (("chat", "-m", "missing", "--top-p", "nan"), 2, "--top-p"),
        (("run", "-m", "missing", "hi"), 1, "nope.gguf"),
        (("run", "-m", "mismatch", "hi"), 1, "vocabular"),
        (("run", "--k", "lots", "hi"), 2, "--k"),
        (("run", "--draft", "model", "-m", "short", "hi"), 2, "no draft model"),
        # every flag is checked before anything loads: pair "missing" would fail on its model file
        (("run", "-m", "missing", "--k", "65", "hi"), 2, "--k"),
        (("run", "-m", "missing", "--draft", "model", "hi"), 2, "no draft model"),
        (("run", "-m", "missing", "--temperature", "nan", "hi"), 2, "--temperature"),
        (("run", "-m", "missing", "--temperature", "inf", "hi"), 2, "--temperature"),
        (("run", "-m", "missing", "--temperature", "-1", "hi"), 2, "--temperature"),
        (("run", "-m", "missing", "--top-p", "0", "hi"), 2, "--top-p"),
        (("run", "-m", "missing", "--top-p", "nan", "hi"), 2, "--top-p"),
        (("run", "-m", "missing", "--min-p", "1.5", "hi"), 2, "--min-p"),
        (("run", "-m", "missing", "--top-k", "-3", "hi"), 2, "--top-k"),
        (("run", "-m", "missing", "--seed", "-1", "hi"), 2, "--seed"),
        (("bench", "-m", "missing", "--temperature", "nan"), 2, "--temperature"),
        (("run", "-m", "missing", "   "), 2, "nothing to do"),
        (("run", "-m", "missing", "--stats-json", "nope/dir/s.json", "hi"), 2, "does not exist"),
        (("run", "-m", "missing", "--stats-json", "/sys/s.json", "hi"), 2, "cannot write"),
        (("run", "-m", "missing", "--stats-json", "/proc/version", "hi"), 2, "cannot write"),
        (("run", "-m", "missing", "--stats-json", "/tmp", "hi"), 2, "directory"),
        (("bench", "-m", "missing", "--json", "nodir/x.json"), 2, "--json"),
        (("bench", "-m", "missing", "--plot", "nodir/x.png"), 2, "--plot"),
        (("bench", "-m", "missing", "--plot", "bench.bogus"), 2, ".png"),
        (("bench", "-m", "missing", "--modes", "ar,k65"), 2, "k65"),
        (("bench", "-m", "missing", "--suite", "/dev/null"), 2, "/dev/null is not a regular file"),
        (("run", "--raw", "-s", "be terse", "hi"), 2, "--system"),
        # click's own parse errors read the same way
        (("run", "--max-tokens", "-1", "hi"), 2, "--max-tokens"),
        (("run", "--frobnicate", "hi"), 2, "--frobnicate"),
        (("bench", "--repeats", "0"), 2, "--repeats"),
        (("models", "check", "--bogus"), 2, "--bogus"),
        (("nosuch",), 2, "nosuch"),
    ],
)
def test_bad_inputs_are_one_line_errors(env, args, code, needle):
    assert needle in one_line_error(invoke(*args), code)


def test_every_float_flag_of_every_command_refuses_nan_and_inf():
    """One rule for every float flag (`cli_common.FiniteFloat`): a new flag declared as a plain
    float, or a FloatRange (nan passes every range check), fails here."""

    def commands(command, path):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from commands(sub, f"{path} {name}")

    def takes(param, value) -> bool:
        try:
            param.type.convert(value, param, None)
        except click.BadParameter:
            return False
        return True

    flags = [
        (f"{path} --{param.name.replace('_', '-')}", param)
        for path, command in commands(cli.main, "edgespec")
        for param in command.params
        if isinstance(param.type, click.types.FloatParamType)
    ]
    assert {
        "edgespec run --temperature",
        "edgespec serve --top-p",
        "edgespec bench --temperature",
        "edgespec models tune --min-agreement",
    } <= {name for name, _ in flags}
    assert [(name, value) for name, param in flags for value in ("nan", "inf", "-inf") if takes(param, value)] == []


def test_no_help_shows_a_range_bound_of_none():
    """A float flag without bounds showed "[x<=None]" in --help (click describes any FloatRange
    as if it had a bound); one with bounds still shows them."""

    def helps(command, path):
        yield path, command.get_help(click.Context(command, info_name=path))
        for name, sub in getattr(command, "commands", {}).items():
            yield from helps(sub, f"{path} {name}")

    texts = dict(helps(cli.main, "edgespec"))
    assert [path for path, text in texts.items() if "None]" in text or "None;" in text] == []
    assert "0<=x<=100" in texts["edgespec models tune"]


def test_stats_json_through_a_symlink_writes_its_target(env):
    """A results file the user keeps behind a link is written through it, not replaced by a file."""
    (env / "results").mkdir()
    target, link = env / "results" / "stats.json", env / "stats.json"
    link.symlink_to(target)
    r = invoke("run", "def add(a, b):", "--raw", "--max-tokens", "4", "--stats-json", str(link))
    assert r.exit_code == 0, r.stderr
    assert link.is_symlink() and json.loads(target.read_text())["tokens"] > 0


def test_whitespace_only_stdin_without_prompt_exits_2(env):
    assert "nothing to do" in one_line_error(invoke("run", "-m", "missing", input=" \n\t\n"), 2)


def test_a_suite_that_is_not_utf8_is_one_line(env):
    suite = env / "suite.jsonl"
    suite.write_bytes(b'{"id": "a"}\n\xff\xfe{}\n')
    line = one_line_error(invoke("bench", "-m", "missing", "--suite", str(suite)), 2)
    assert "suite.jsonl:2" in line and "UTF-8" in line


@pytest.mark.subprocess
def test_a_bench_whose_results_cannot_be_written_keeps_them(env, monkeypatch):
    """The folder checked at the start is gone when the bench ends: the results go to the cache
    dir, and the one-line error says where."""
    out_dir = env / "out"
    out_dir.mkdir()
    real = bench_module.run_bench

    def run_then_lose_the_folder(*args, **kwargs):
        rows = real(*args, **kwargs)
        out_dir.rmdir()
        return rows

    monkeypatch.setattr(bench_module, "run_bench", run_then_lose_the_folder)
    suite = env / "suite.jsonl"
    suite.write_text('{"id": "p1", "suite": "s", "mode": "completion", "prompt": "the weather", "max_tokens": 8}\n')
    r = invoke("bench", "--modes", "ar", "--suite", str(suite), "--json", str(out_dir / "b.json"))
    assert r.exit_code == 1 and "Traceback" not in r.stderr
    *layout, line = [s for s in r.stderr.splitlines() if s.strip()]
    assert [s.split(":")[0] for s in layout] == ["tiny target", "tiny draft"]  # what each loaded model runs as
    assert "error" in line.lower()
    rescued = env / "home" / "rescued" / "b.json"
    assert str(rescued) in line and str(out_dir / "b.json") in line
    assert json.loads(rescued.read_text())["rows"]
    assert "edgespec bench" in r.stdout  # the table was printed before the write


@pytest.mark.subprocess
def test_a_bench_stopped_by_ctrl_c_reports_the_rows_it_finished(env, monkeypatch):
    real = bench_module.run_bench

    def stopped_after_two_rows(engine, prompts, modes, sampling, on_row, repeats):
        seen = []

        def count(row):
            on_row(row)
            seen.append(row)
            if len(seen) == 2:
                raise KeyboardInterrupt

        return real(engine, prompts, modes, sampling, count, repeats)

    monkeypatch.setattr(bench_module, "run_bench", stopped_after_two_rows)
    suite = env / "suite.jsonl"
    suite.write_text(
        "".join(
            f'{{"id": "p{i}", "suite": "s", "mode": "completion", "prompt": "the weather", "max_tokens": 8}}\n'
            for i in range(3)
        )
    )
    r = invoke("bench", "--modes", "ar,k2", "--suite", str(suite), "--json", str(env / "b.json"))
    assert r.exit_code == 130 and "interrupted" in r.stderr and "Traceback" not in r.stderr
    assert "edgespec bench" in r.stdout
    saved = json.loads((env / "b.json").read_text())
    assert saved["meta"]["interrupted"] and [row["mode"] for row in saved["rows"]] == ["ar", "k2"]


@pytest.mark.subprocess
def test_bench_interleaves_several_pairs_and_compares_each_with_the_first_ones_ar(env):
    suite = env / "suite.jsonl"
    suite.write_text(
        "".join(
            f'{{"id": "p{i}", "suite": "s", "mode": "completion", "prompt": "the weather", "max_tokens": 8}}\n'
            for i in range(2)
        )
    )
    # sampled: the 32-token context of "short" has no room to measure a noise floor (greedy only)
    r = invoke(
        "bench",
        "-m",
        "tiny",
        "-m",
        "short",
        "--modes",
        "ar,k2",
        "--suite",
        str(suite),
        "--temperature",
        "0.5",
        "--json",
        str(env / "b.json"),
    )
    assert r.exit_code == 0, r.stderr
    saved = json.loads((env / "b.json").read_text())
    assert saved["meta"]["pairs"] == ["tiny", "short"]
    order = [(row["id"], row["pair"], row["mode"]) for row in saved["rows"]]
    assert order == [(p, pair, m) for p in ("p0", "p1") for pair in ("tiny", "short") for m in ("ar", "k2")]
    summary = {(s["pair"], s["mode"]): s for s in saved["summary"]}
    assert summary[("tiny", "ar")]["speedup_vs_first_ar"] == 1.0
    assert summary[("short", "k2")]["speedup_vs_first_ar"] is not None
    assert summary[("tiny", "ar")]["total_speedup_vs_first_ar"] == 1.0
    assert summary[("short", "k2")]["total_speedup_vs_first_ar"] is not None
    assert "short" in r.stdout and "tiny" in r.stdout  # a pair column


def test_a_greedy_bench_of_a_context_too_short_for_the_noise_floor_is_one_line(env):
    suite = env / "suite.jsonl"
    suite.write_text('{"id": "p0", "suite": "s", "mode": "completion", "prompt": "the weather", "max_tokens": 4}\n')
    r = invoke("bench", "-m", "short", "--modes", "ar,k2", "--suite", str(suite))
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "too small to measure the target's noise floor" in r.stderr.strip().splitlines()[-1]


def test_a_reply_cut_by_the_full_context_says_so(env):
    r = invoke("run", "-m", "short", "--raw", "--draft", "none", "the weather is", "--max-tokens", "100")
    assert r.exit_code == 0, r.stderr
    assert [s for s in r.stderr.splitlines() if s.strip()] == [
        "edgespec: the reply was cut: the 32-token context is full"
    ]


def test_a_draft_llama_cpp_refuses_is_explained_by_its_vocabulary(env):
    """A draft with another family's tokenizer, which llama.cpp refuses to load after warning
    about its tokens: the error says how the vocabularies differ, as `models check` does, and
    quotes nothing from llama.cpp's log."""
    foreign = write_tiny_gguf(env / "foreign.gguf", tokens=FOREIGN_TOKENS)
    config = env / "models.toml"
    config.write_text(
        config.read_text() + f'[models.foreign]\nformat = "gguf"\npath = "{foreign}"\n'
        '[pairs.foreign]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "foreign"\ncontext = 256\n'
    )
    line = one_line_error(invoke("run", "-m", "foreign", "hi"), 1)
    assert "does not share the target's vocabulary" in line and 'id 256: target "he", draft "Ġfoo"' in line
    assert "models check foreign" in line
    for log_text in ("control-looking", "special_eos_id", "wrong shape", "load:"):
        assert log_text not in line
    check = invoke("models", "check", "foreign")
    assert check.exit_code == 1 and 'id 256: target "he", draft "Ġfoo"' in check.stdout


def test_no_command_shows_the_help():
    result = invoke()
    assert result.exit_code == 2 and "Commands:" in result.stderr and "error" not in result.stderr


def test_bad_config_file_is_one_line(env, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[pairs.x]\nbackend = "lamacpp"\n')
    line = one_line_error(invoke("run", "--config", str(bad), "hi"), 1)
    assert "bad.toml" in line


def test_ctrl_c_flushes_partial_output_and_exits_130(env, monkeypatch):
    real = Engine.generate_tokens

    def interrupted(self, *a, **kw):
        for n, event in enumerate(real(self, *a, **kw)):
            if n == 6:
                raise KeyboardInterrupt
            yield event

    monkeypatch.setattr(Engine, "generate_tokens", interrupted)
    r = invoke("run", "def add(a, b):", "--raw", "--max-tokens", "50", "--draft", "none", "--color", "never")
    assert r.exit_code == 130
    assert r.stdout.strip()  # what was generated before the interrupt is kept
    assert "interrupted" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "name, extra, max_tokens", [("run", ["--max-tokens", "7", "hi"], 7), ("chat", [], 512), ("serve", [], 512)]
)
def test_every_engine_flag_reaches_its_engine_option_and_the_rest_reach_the_command(name, extra, max_tokens):
    """`_engine_options` maps each flag to its EngineOptions field by name (--k to `policy`); a flag
    the command lacks (serve's --max-tokens) keeps the default; what it leaves is exactly what the
    command's function takes besides `options`."""
    command = cli.main.commands[name]
    args = ["--k", "3", "--no-cache", "--draft", "ngram", "--top-k", "5", *extra]
    flags = dict(command.make_context(name, args).params)
    options = _engine_options(flags, repository=True)
    assert options.policy == PolicyChoice("fixed", 3) and options.draft == DraftChoice.NGRAM
    assert (options.max_tokens, options.top_k, options.cache, options.repository) == (max_tokens, 5, False, True)
    assert options.pair is None and options.temperature is None and not options.decode_again
    taken = set(inspect.signature(command.callback).parameters) - {"options"}
    assert set(flags) == taken
