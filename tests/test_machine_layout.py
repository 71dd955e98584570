"""The target's layout chosen per machine: the quality rule a layout is held to, the shipped
quality table, the choice `models pull` records, and the file every front end then loads (the
layout chosen here, its build present and verified, else the published file)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.bench import layout_ranking
from edgespec.bench.tuning import choose_for_machine
from edgespec.cli import main as cli
from edgespec.decoding.costs import call_prediction
from edgespec.decoding.costs.call_prediction import PROMPT_TOKENS, typical_call_s
from edgespec.decoding.costs.steady_curve import SteadyCurve
from edgespec.engine.options import EngineOptions
from edgespec.models import layouts, machine_layout
from edgespec.models.config import load_registry
from edgespec.models.machine_layout import PUBLISHED, Choice, derived_model, machine_target, read_choice, record_choice
from edgespec.models.store import Store
from edgespec.quality.fidelity import Fidelity
from edgespec.quality.perplexity import (
    SHIPPED,
    TOLERANCE,
    Quality,
    Reference,
    heldout_documents,
    judge,
    measure_quality,
    shipped_quality,
)

PAIR = """
[models.t]
format = "gguf"
path = "{target}"

[pairs.tiny]
backend = "llamacpp"
target = "t"
drafter = "ngram"
context = 512

[pairs.kept]
backend = "llamacpp"
target = "t"
drafter = "ngram"
context = 512
layout = "published"
"""


@pytest.fixture
def env(tmp_path, monkeypatch, tiny_gguf):
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EDGESPEC_LAYOUT", raising=False)
    config = tmp_path / "models.toml"
    config.write_text(PAIR.format(target=tiny_gguf))
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    return tmp_path


def _fidelity():
    return Fidelity(1.0, 0.0, 0.0, 1)


# -- the rule -------------------------------------------------------------------------------------


def test_the_same_losses_qualify_and_a_clear_loss_fails():
    rng = np.random.default_rng(1)
    reference = rng.gamma(2.0, 1.0, 4000)
    same = judge(reference, reference.copy(), _fidelity())
    assert same.ratio == 1.0 and same.ratio_low <= 1.0 <= same.ratio_high and same.qualifies
    worse = judge(reference, reference + 0.05, _fidelity())  # 5% more perplexity everywhere
    assert worse.ratio == pytest.approx(np.exp(0.05)) and not worse.qualifies
    better = judge(reference, reference - 0.02, _fidelity())
    assert better.ratio < 1.0 and better.qualifies


def test_a_measurement_too_noisy_to_tell_fails_the_rule():
    """No loss on average, but so few and so noisy positions that the interval reaches past the
    tolerance: the rule asks for evidence, not for the absence of it."""
    rng = np.random.default_rng(2)
    reference = rng.gamma(2.0, 1.0, 256)
    noisy = reference + rng.normal(0.0, 0.5, 256)
    q = judge(reference, noisy, _fidelity())
    assert q.ratio_high > 1 + TOLERANCE and not q.qualifies


def test_a_quality_record_round_trips_and_a_damaged_one_is_refused():
    q = judge(np.ones(128), np.ones(128), _fidelity())
    d = q.to_dict()
    assert d["qualifies"] is True and Quality.from_dict(d) == q
    with pytest.raises(ValueError, match="not a quality record"):
        Quality.from_dict({"ratio": "x"})


@pytest.mark.heavy
def test_a_model_against_itself_loses_nothing_and_a_coarser_layout_moves(env, tiny_gguf):
    coarse = env / "q4_0.gguf"
    layouts.build(tiny_gguf, coarse, layouts.candidate("q4_0"))
    a, b, c = LlamaCppBackend(tiny_gguf, 512), LlamaCppBackend(tiny_gguf, 512), LlamaCppBackend(coarse, 512)
    try:
        documents = [doc[:200] for doc in heldout_documents(a)]
        assert len(documents) == 3 and all(len(doc) == 200 for doc in documents)
        reference = Reference(a, documents)
        same = measure_quality(reference, b)
        assert same.positions == 3 * 199  # every position with a next token in its own document
        assert same.ratio == 1.0 and same.mean_kl == pytest.approx(0.0, abs=1e-6) and same.agreement == 1.0
        other = measure_quality(reference, c)
        assert other.mean_kl > 0.0 and other.perplexity != other.reference_perplexity
        assert other.reference_perplexity == pytest.approx(same.reference_perplexity)
    finally:
        for m in (a, b, c):
            m.close()


def test_the_shipped_table_covers_every_candidate_of_the_built_in_target_with_its_command():
    target = load_registry(None).pair(None).target
    table = json.loads(SHIPPED.read_text())
    entry = table["files"][target.sha256]
    assert entry["model"] == target.name and all("layout_quality.py" in run["command"] for run in entry["meta"])
    assert set(entry["layouts"]) == {c.name for c in layouts.CANDIDATES}
    known = shipped_quality(target.sha256)
    assert set(known) == set(entry["layouts"])
    assert all(q.qualifies == entry["layouts"][name]["qualifies"] for name, q in known.items())
    assert shipped_quality("0" * 64) == {}


# -- the whole call as the objective --------------------------------------------------------------


def test_a_flatter_curve_and_faster_reading_predict_a_shorter_call():
    steep = SteadyCurve({n: 0.025 * n for n in range(1, 18)})
    flat = SteadyCurve({n: 0.025 + 0.005 * (n - 1) for n in range(1, 18)})
    assert typical_call_s(flat, 100.0) < typical_call_s(steep, 100.0)
    reading = typical_call_s(steep, 100.0) - typical_call_s(steep, 200.0)
    assert reading == pytest.approx(PROMPT_TOKENS / 200.0)


def test_a_round_past_the_dense_sizes_is_priced_by_the_curve_itself(monkeypatch):
    """A copy of 31 tokens is a pass over 32: priced at the curve's own figure there (timed, or
    interpolated between the timed sizes as auto prices it), not at the longest dense size's."""
    rounds = {"tokens": 200, "passes_by_k": {"31": 1}}
    monkeypatch.setattr(call_prediction, "_typical_rounds", lambda: rounds)
    curve = SteadyCurve({1: 0.02, 17: 0.1, 64: 0.2})
    assert typical_call_s(curve, float("inf")) == pytest.approx(curve.pass_s(32))
    assert curve.verify[17] < curve.pass_s(32) < curve.verify[64]


# -- the choice and the file that is loaded -------------------------------------------------------


def test_a_choice_is_this_machines_only(env, monkeypatch):
    models_dir = env / "home" / "models"
    models_dir.mkdir(parents=True)
    record_choice(models_dir, "ab" * 32, Choice("q4_0", "faster here"))
    assert read_choice(models_dir, "ab" * 32) == Choice("q4_0", "faster here")
    monkeypatch.setattr(machine_layout, "machine_fingerprint", lambda: "another CPU")
    assert read_choice(models_dir, "ab" * 32) is None


def test_a_damaged_record_is_no_choice(env):
    models_dir = env / "home" / "models"
    models_dir.mkdir(parents=True)
    (models_dir / machine_layout.RECORD).write_text("{not json")
    assert read_choice(models_dir, "ab" * 32) is None
    record_choice(models_dir, "ab" * 32, Choice(PUBLISHED, "why"))  # and a new choice replaces it
    assert read_choice(models_dir, "ab" * 32) == Choice(PUBLISHED, "why")


@pytest.mark.heavy
def test_the_chosen_layout_is_loaded_while_its_build_is_there_and_a_setting_keeps_the_published(
    env, tiny_gguf, monkeypatch
):
    store, registry = Store(), load_registry()
    pair = registry.pairs["tiny"]
    sha = store.sha256(tiny_gguf)
    model = derived_model(pair.target, sha, "q4_0")
    built = store.pull(model)
    assert built.parent.name == "tuned" and store.verify(model)
    assert machine_target(store, pair, tiny_gguf) == (pair.target, tiny_gguf, None)  # nothing chosen yet

    record_choice(store.models_dir, sha, Choice("q4_0", "faster here"))
    target, path, choice = machine_target(store, pair, tiny_gguf)
    assert (target.name, path, choice.layout) == ("t-q4_0", built, "q4_0")
    engine, _ = EngineOptions(pair=pair).check().open()
    try:  # every front end opens the engine this way
        assert engine.target.path == built and engine.pair.target.name == "t-q4_0"
    finally:
        engine.close()

    assert machine_target(store, registry.pairs["kept"], tiny_gguf)[1] == tiny_gguf
    monkeypatch.setenv("EDGESPEC_LAYOUT", "published")
    assert machine_target(store, pair, tiny_gguf)[1] == tiny_gguf
    monkeypatch.delenv("EDGESPEC_LAYOUT")

    built.unlink()  # removed since: the published file, and `models pull` builds it again
    assert machine_target(store, pair, tiny_gguf)[1] == tiny_gguf
    r = CliRunner().invoke(cli.main, ["models", "pull", "tiny"])
    assert r.exit_code == 0, r.output
    assert "building q4_0 again" in r.stderr and store.verify(model)
    assert machine_target(store, pair, tiny_gguf)[1] == built


@pytest.mark.heavy
def test_pull_of_a_file_with_no_quality_table_keeps_the_published_file_and_says_why(env, tiny_gguf):
    r = CliRunner().invoke(cli.main, ["models", "pull", "tiny"])
    assert r.exit_code == 0, r.output
    assert "target layout: published (edgespec has no quality table for this file" in r.stderr
    assert not (Store().models_dir / "tuned").exists()
    again = CliRunner().invoke(cli.main, ["models", "pull", "tiny"])
    assert "timing the layouts" not in again.stderr and "target layout: published" in again.stderr
    listing = CliRunner().invoke(cli.main, ["models"])
    assert "tiny: target as published: edgespec has no quality table" in listing.stdout
    assert "quality rule" in listing.stdout


@pytest.mark.heavy
def test_the_machine_choice_times_only_qualifying_layouts_and_keeps_one_build_at_most(env, tiny_gguf, monkeypatch):
    """Which layout wins is this machine's timing; what must hold whatever it is: the layout that
    fails the rule is never built, and what was chosen is what is loaded."""
    good = judge(np.ones(256), np.ones(256), _fidelity())
    bad = judge(np.ones(256), np.ones(256) + 0.1, _fidelity())
    monkeypatch.setattr(layout_ranking, "shipped_quality", lambda sha: {"q4_0": good, "iq4_nl": bad})
    store, pair = Store(), load_registry().pairs["tiny"]
    lines: list[str] = []
    choice = choose_for_machine(pair, store, lines.append)
    sha = store.sha256(tiny_gguf)
    assert not store.path_for(derived_model(pair.target, sha, "iq4_nl")).exists()
    assert any(line.startswith("q4_0: reads") and "a typical call" in line for line in lines)
    assert read_choice(store.models_dir, sha) == choice
    loaded = machine_target(store, pair, tiny_gguf)[1]
    q4 = store.path_for(derived_model(pair.target, sha, "q4_0"))
    if choice.layout == "q4_0":
        assert loaded == q4 and "faster on this machine" in choice.why and "perplexity" in choice.why
    else:
        assert choice.layout == PUBLISHED and loaded == tiny_gguf and not q4.exists()


@pytest.mark.parametrize(
    "env_value, config_text, needle, code",
    [
        ("pubished", None, "EDGESPEC_LAYOUT='pubished': use 'published'", 2),  # a usage error
        ("", 'layout = "fastest"\n', '"fastest" is not one of machine, published', 1),  # a file's, as the others
    ],
)
def test_a_bad_layout_setting_is_one_line_and_an_error(env, monkeypatch, env_value, config_text, needle, code):
    if env_value:
        monkeypatch.setenv("EDGESPEC_LAYOUT", env_value)
    if config_text:
        config = env / "models.toml"
        config.write_text(config.read_text().replace('layout = "published"\n', config_text))
    r = CliRunner().invoke(cli.main, ["run", "-m", "tiny", "hi", "--raw", "--max-tokens", "2"])
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.exit_code == code and "Traceback" not in r.stderr
    assert len(lines) == 1 and needle in lines[0], r.stderr
