"""`edgespec models tune` end to end on a tiny GGUF: candidates built by llama.cpp's quantizer, measured
against the original, registered in the user's models.toml exactly once and without touching the
rest of it; and the pieces: fidelity, the recommendation's gate, the layout of a loaded model."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.bench.candidates import TuneError, check_space
from edgespec.bench.layout_ranking import ORIGINAL, Measured, recommend
from edgespec.cli import main as cli
from edgespec.decoding.costs.steady_curve import SteadyCurve
from edgespec.models import layouts
from edgespec.models.config import CONFIG_BYTES, load_registry
from edgespec.models.registry import ConfigError, Derived
from edgespec.models.store import Store
from edgespec.models.user_registry import register
from edgespec.models.vocab import read_vocabulary
from edgespec.quality.fidelity import Fidelity, measure_fidelity
from edgespec.quality.noise_floor import calibration_tokens

USER_FILE = """# my own models
default = "tiny"   # the pair I use most

[models.t]
format = "gguf"
path = "{target}"

[models.d]
format = "gguf"
path = "{draft}"

[pairs.tiny]
description = "tiny pair"
backend = "llamacpp"
target = "t"
drafter = "d"
context = 512

[pairs.text]  # a target that is not a GGUF
backend = "llamacpp"
target = "notgguf"
drafter = "none"
context = 64

[models.notgguf]
format = "gguf"
path = "{text}"
"""


@pytest.fixture
def env(tmp_path, monkeypatch, tiny_gguf, tiny_draft_gguf):
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    text = tmp_path / "notes.gguf"
    text.write_text("not a model\n")
    config = tmp_path / "models.toml"
    config.write_text(USER_FILE.format(target=tiny_gguf, draft=tiny_draft_gguf, text=text))
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    return tmp_path


def tune(*args):
    return CliRunner().invoke(cli.main, ["models", "tune", *args])


@pytest.mark.heavy
def test_tune_builds_measures_and_registers_a_layout_once_keeping_the_users_file(env, tiny_gguf):
    config = env / "models.toml"
    before = config.read_text()
    out = env / "tune.json"
    r = tune("tiny", "--layouts", "q6k-as-q4k,q4_0", "--prompts", "0", "--pick", "q4_0", "--json", str(out))
    assert r.exit_code == 0, r.stderr
    result = json.loads(out.read_text())
    rows = {row["layout"]: row for row in result["layouts"]}
    assert list(rows) == [ORIGINAL, "q6k-as-q4k", "q4_0"]
    # the tiny model is all f32: the q6_K mix converts nothing, so it is a byte-for-byte copy
    assert rows["q6k-as-q4k"]["kept"] == 1.0
    assert rows["q6k-as-q4k"]["fidelity"]["agreement"] == 1.0
    assert rows["q6k-as-q4k"]["fidelity"]["mean_kl"] == pytest.approx(0.0, abs=1e-6)
    # q4_0 is coarser: less agreement, some divergence, none of the f32 weights kept
    assert rows["q4_0"]["kept"] == 0.0
    assert rows["q4_0"]["fidelity"]["agreement"] < 1.0 and rows["q4_0"]["fidelity"]["mean_kl"] > 0.0
    for row in rows.values():  # a curve at every length auto may verify, and the longer passes timed
        assert sorted(map(int, row["verify_ms"]))[:17] == list(range(1, 18))
    assert "edgespec models tune" in r.stdout and "pair tiny-tuned added to" in r.stdout

    # registered as a derived model (how it is made), verified as built, loading under the new pair
    # with the original's vocabulary
    registry, store = load_registry(), Store()
    tuned = registry.pairs["tiny-tuned"]
    assert tuned.target.name == "t-q4_0" and tuned.draft.name == "d" and tuned.context == 512
    assert tuned.target.source == Derived(registry.models["t"], "q4_0")
    built = store.path_for(tuned.target)
    assert built.is_file() and built.parent.name == "tuned" and store.verify(tuned.target)
    assert read_vocabulary(tuned.target, built) == read_vocabulary(registry.models["t"], tiny_gguf)
    assert layouts.read_layout(built).file_type == "q4_0"
    run = CliRunner().invoke(cli.main, ["run", "-m", "tiny-tuned", "the weather", "--raw", "--max-tokens", "8"])
    assert run.exit_code == 0, run.stderr
    # the candidate not picked is removed
    assert not (built.parent / built.name.replace("q4_0", "q6k-as-q4k")).exists()

    # the user's lines are all there, in order; only the new tables were added
    after = config.read_text()
    ops = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines()).get_opcodes()
    assert {op for op, *_ in ops} <= {"equal", "insert"}
    assert after.count("[models.t-q4_0]") == 1 and after.count("[pairs.tiny-tuned]") == 1

    # again: the same file is reused and the entries are not added twice
    mtime = built.stat().st_mtime_ns
    again = tune("tiny", "--layouts", "q4_0", "--prompts", "0", "--pick", "q4_0")
    assert again.exit_code == 0, again.stderr
    assert "already in" in again.stdout
    assert config.read_text() == after and built.stat().st_mtime_ns == mtime

    # gone (another machine with this models.toml, a cleanup): `models pull` builds the same bytes
    sha = store.sha256(built)
    built.unlink()
    run = CliRunner().invoke(cli.main, ["run", "-m", "tiny-tuned", "the weather", "--raw", "--max-tokens", "8"])
    assert run.exit_code == 1 and "run: edgespec models pull tiny-tuned" in run.stderr
    pull = CliRunner().invoke(cli.main, ["models", "pull", "tiny-tuned"])
    assert pull.exit_code == 0, pull.output
    assert store.sha256(built) == sha and store.verify(tuned.target)


@pytest.mark.heavy
def test_tune_never_overwrites_a_different_user_entry(env):
    config = env / "models.toml"
    config.write_text(
        config.read_text() + '\n[pairs.tiny-tuned]\nbackend = "llamacpp"\ntarget = "t"\n'
        'drafter = "none"\ncontext = 64\n'
    )
    before = config.read_text()
    r = tune("tiny", "--layouts", "q4_0", "--prompts", "0", "--pick", "q4_0")
    assert r.exit_code == 1 and "Traceback" not in r.stderr
    assert 'pair "tiny-tuned" already exists and differs' in r.stderr.strip().splitlines()[-1]
    assert config.read_text() == before


@pytest.mark.parametrize(
    "args, needle",
    [
        (("text",), "not a GGUF"),
        (("tiny", "--layouts", "q9_9"), "--layouts': unknown 'q9_9'"),
        (("tiny", "--layouts", "q4_0", "--pick", "iq4_nl"), "--pick iq4_nl: not among the layouts measured"),
        (("tiny", "--layouts", "q4_0", "--pick", "draft-only"), "draft model of tiny has no tensors to convert"),
        (("nosuchpair",), "nosuchpair"),
    ],
)
def test_tune_bad_inputs_are_one_line_errors(env, args, needle):
    r = tune(*args)
    assert r.exit_code != 0 and "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip() and not line.startswith("tuning ")]
    assert len(lines) == 1 and needle in lines[0], r.stderr


def test_a_malformed_user_file_is_one_line_and_left_alone(env):
    config = env / "models.toml"
    config.write_text("default = [unclosed\n")
    r = tune("tiny", "--prompts", "0")
    assert r.exit_code != 0 and "TOML syntax error" in r.stderr and "Traceback" not in r.stderr
    assert config.read_text() == "default = [unclosed\n"


def test_help_lists_every_candidate_layout():
    r = tune("--help")
    text = " ".join(r.stdout.split()).replace("- ", "-")  # names folded at a hyphen are whole again
    assert all(c.name in text for c in layouts.CANDIDATES)


@pytest.mark.heavy
def test_fidelity_of_a_model_with_itself_is_perfect_and_of_another_is_not(tiny_gguf, tiny_draft_gguf):
    a, b, draft = (
        LlamaCppBackend(tiny_gguf, 512),
        LlamaCppBackend(tiny_gguf, 512),
        LlamaCppBackend(tiny_draft_gguf, 512),
    )
    try:
        tokens = calibration_tokens(a)[:300]
        same = measure_fidelity(a, b, tokens)
        assert same.agreement == 1.0 and same.mean_kl == pytest.approx(0.0, abs=1e-6) and same.positions == 300
        assert len(a.cached) == 300  # left holding the text
        other = measure_fidelity(a, draft, tokens)
        assert 0.0 < other.agreement < 1.0 and other.mean_kl > 0.01 and other.p99_kl >= other.mean_kl
    finally:
        for m in (a, b, draft):
            m.close()


def test_recommendation_is_the_fastest_layout_above_the_gate_and_only_if_clearly_faster():
    def row(name, agreement, gain):
        fidelity = Fidelity(agreement, 0.0, 0.0, 100)
        curve = SteadyCurve({1: 0.025})
        return Measured(name, "", Path(name), 1, 1.0, "", curve, 500.0, fidelity, None, None, None, gain, gain)

    rows = [row(ORIGINAL, 1.0, 1.09), row("fast", 0.93, 1.40), row("faithful", 0.96, 1.25), row("same", 0.99, 1.10)]
    assert recommend(rows, 0.95).layout == "faithful"
    assert recommend(rows, 0.92).layout == "fast"
    assert recommend(rows, 0.97) is None  # "same" is within 3% of the original


def test_no_room_for_a_candidate_is_one_line(tmp_path):
    with pytest.raises(TuneError, match="not enough space"):
        check_space(tmp_path, 1 << 60)


def test_a_loaded_model_reports_its_layout(tiny_gguf):
    backend = LlamaCppBackend(tiny_gguf, 64)
    try:
        assert (
            layouts.describe_loaded(tiny_gguf, backend.repacked) == "all_f32 (f32x16), 0 of 16 weight tensors repacked"
        )
    finally:
        backend.close()


@pytest.mark.heavy
def test_a_draft_with_tensors_llama_cpp_does_not_repack_is_tuned_and_changes_no_output(env, tiny_gguf, tiny_draft_gguf):
    """A q8_0 draft (not repacked) gets a q4_0 layout; every candidate drafts with it, the
    draft-only row keeps the original target, and picking it registers the original target with
    the new draft, whose greedy output is the original pair's, token for token."""
    q8_draft = env / "draft-q8_0.gguf"
    layouts.build(tiny_draft_gguf, q8_draft, layouts.Layout("q8_0", whole="q8_0"))
    config = env / "models.toml"
    config.write_text(config.read_text().replace(str(tiny_draft_gguf), str(q8_draft)))
    out = env / "tune.json"
    r = tune("tiny", "--layouts", "q4_0", "--prompts", "0", "--pick", "draft-only", "--json", str(out))
    assert r.exit_code == 0, r.stderr
    rows = {row["layout"]: row for row in json.loads(out.read_text())["layouts"]}
    assert list(rows) == [ORIGINAL, "draft-only", "q4_0"]
    assert rows[ORIGINAL]["draft_path"] is None and rows[ORIGINAL]["draft_ms"] > 0
    assert rows["draft-only"]["draft_path"] == rows["q4_0"]["draft_path"] is not None
    assert rows["draft-only"]["path"] == str(tiny_gguf) and rows["draft-only"]["fidelity"]["agreement"] == 1.0

    tuned = load_registry().pairs["tiny-tuned"]
    assert tuned.target.name == "t" and tuned.draft.name == "d-draft-q4_0"
    assert tuned.draft.source.base.name == "d" and tuned.draft.source.layout == "draft-q4_0"
    draft = Store().ensure(tuned.draft)  # verified as built
    types = set(layouts.tensor_types(draft).values())
    assert "q4_0" in types and "q8_0" not in types
    assert read_vocabulary(tuned.draft, draft) == read_vocabulary(tuned.target, tiny_gguf)
    assert not Path(rows["q4_0"]["path"]).exists()  # the target candidate not picked is removed

    def greedy(pair):
        run = CliRunner().invoke(
            cli.main,
            ["run", "-m", pair, "the weather", "--raw", "--max-tokens", "24", "--temperature", "0", "--k", "4"],
        )
        assert run.exit_code == 0, run.stderr
        return run.stdout

    assert greedy("tiny-tuned") == greedy("tiny")
    assert config.read_text().count("[models.d-draft-q4_0]") == 1


# -- signals: no half-written layout stays behind ------------------------------------------------


def test_a_signal_while_the_quantizer_runs_leaves_no_file(tiny_gguf, tmp_path, monkeypatch):
    """llama.cpp's quantizer cannot be stopped part way: a SIGTERM that lands while it runs is
    recorded by its log callback (C calls it), and raised once it returns; the half-built layout
    is removed, and no finished-looking file is left either."""
    import llama_cpp

    from edgespec.util import interrupts

    real = llama_cpp.llama_model_quantize

    def quantize_then_signal(source, dest, params):
        rc = real(source, dest, params)
        monkeypatch.setattr(interrupts, "_pending", True)  # what the callback records
        return rc

    monkeypatch.setattr(llama_cpp, "llama_model_quantize", quantize_then_signal)
    dest = tmp_path / "tuned" / "t-q4_0.gguf"
    with pytest.raises(KeyboardInterrupt):
        layouts.build(tiny_gguf, dest, layouts.candidate("q4_0"))
    assert list(dest.parent.iterdir()) == []


@pytest.mark.heavy
def test_a_tune_removes_the_partial_files_that_killed_tunes_left(env):
    tuned = env / "home" / "models" / "tuned"
    tuned.mkdir(parents=True)
    left = [tuned / "0123456789abcdef-q4_0.gguf.partial", tuned / "0123456789abcdef-iq4_nl.gguf.4194305.partial"]
    for path in left:
        path.write_bytes(b"half")
    r = tune("tiny", "--layouts", "q4_0", "--prompts", "0")
    assert r.exit_code == 0, r.stderr
    assert not any(path.exists() for path in left)


def test_registering_writes_through_a_symlinked_user_file_keeping_its_mode(env):
    """A models.toml kept elsewhere behind a link (a dotfiles repository) was replaced by a plain
    file: the link is kept, its target gets the new pair, and the target's permissions stay."""
    config = env / "models.toml"
    dotfiles = env / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "edgespec.toml"
    config.rename(real)
    real.chmod(0o644)
    config.symlink_to(real)
    pair = {"description": "copy", "backend": "llamacpp", "target": "t", "drafter": "d", "context": 512}
    path, changed = register([], "tiny-copy", pair)
    assert changed and config.is_symlink() and config.resolve() == real
    assert "[pairs.tiny-copy]" in real.read_text() and real.read_text().startswith("# my own models")
    assert real.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in dotfiles.iterdir()] == ["edgespec.toml"]  # no temporary file left
    assert load_registry().pair("tiny-copy").target.name == "t"


def test_registering_never_writes_a_file_too_large_to_read_back(env):
    config = env / "models.toml"
    config.write_text(config.read_text() + "#" * (CONFIG_BYTES - len(config.read_bytes()) - 10) + "\n")
    before = config.read_bytes()
    load_registry()  # read as it is
    pair = {"description": "copy", "backend": "llamacpp", "target": "t", "drafter": "d", "context": 512}
    with pytest.raises(ConfigError, match=r'adding pair "tiny-copy" would make it larger than 64 KiB'):
        register([], "tiny-copy", pair)
    assert config.read_bytes() == before
