"""`edgespec bench --modes ...,hf-assisted`: transformers' own assisted generation as the peer, on tiny
random transformers models (edgespec/testing/tiny_hf.py) through a real Engine on the hf backend; and
the one-line refusals where the mode cannot run."""

from __future__ import annotations

import json
from itertools import count

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from edgespec.backends.hf_loading import load_hf_backend  # noqa: E402
from edgespec.bench.hf_assisted import assisted_generate  # noqa: E402
from edgespec.bench.modes import parse_modes, prompt_ids, run_bench  # noqa: E402
from edgespec.bench.report import summarize, to_json  # noqa: E402
from edgespec.bench.suites import BenchPrompt  # noqa: E402
from edgespec.bench.tables import table  # noqa: E402
from edgespec.decoding.events import Token  # noqa: E402
from edgespec.decoding.policy.plan import PolicyChoice  # noqa: E402
from edgespec.decoding.sampling import SamplingParams  # noqa: E402
from edgespec.engine.engine import Engine, GenerateSettings  # noqa: E402
from edgespec.models.registry import ModelSpec, PairConfig  # noqa: E402
from edgespec.testing.tiny_hf import build_tiny_hf  # noqa: E402
from edgespec.util.errors import UsageError  # noqa: E402
from tests.fakes import MarkovBackend  # noqa: E402

pytestmark = pytest.mark.torch

GREEDY = SamplingParams()
PROMPTS = [
    BenchPrompt("c/0", "code", "completion", 24, prompt="def fibonacci(n):\n    if n < 2:"),
    # the tiny target ends this reply with <|im_end|> after 23 tokens: the stop at an end token is compared too
    BenchPrompt(
        "t/0", "talk", "chat", 32, messages=({"role": "user", "content": "speculative decoding drafts tokens"},)
    ),
]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny matmuls gain nothing from threads (and this machine may be busy timing something)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    """(target dir, draft dir): a Llama-shaped target and a draft that agrees with it part of the time.
    (The tiny Qwen2 falls into repeating one token, which a draft predicts all at once: too easy.)"""
    root = tmp_path_factory.mktemp("tiny_hf_pair")
    return build_tiny_hf(root / "target", "llama"), build_tiny_hf(
        root / "draft", "llama", seed=7, like=0, similarity=0.9
    )


def hf_spec(name: str, path=None) -> ModelSpec:
    return ModelSpec(name=name, format="hf", path=path, dtype="fp32")


@pytest.fixture(scope="module")
def hf_engine(tiny_pair):
    target_dir, draft_dir = tiny_pair
    load = lambda d: load_hf_backend(hf_spec(d.name), d, n_ctx=256, device_map="cpu")  # noqa: E731
    pair = PairConfig("tiny-hf", "hf", hf_spec("target"), hf_spec("draft"), "model", 256, device_map="cpu")
    engine = Engine(pair, load(target_dir), load(draft_dir))
    yield engine
    engine.close()


def test_parse_modes_reads_hf_assisted():
    assert [m.name for m in parse_modes("hf-assisted,auto", "model")] == ["ar", "hf-assisted", "auto"]


def test_hf_assisted_runs_next_to_ar_and_matches_it(hf_engine):
    modes = parse_modes("ar,k3,hf-assisted", "model")
    rows = run_bench([hf_engine], PROMPTS, modes, GREEDY)
    assert [(r.id, r.mode) for r in rows] == [(p.id, m) for p in PROMPTS for m in ("ar", "k3", "hf-assisted")]
    for p in PROMPTS:
        ar, k3, peer = (r for r in rows if r.id == p.id)
        assert peer.output_ids == ar.output_ids and peer.matches_ar is True and peer.first_divergence is None
        assert k3.matches_ar is True
        assert peer.tokens == len(peer.output_ids) > 1 and peer.decode_tokens_per_s > 0
        assert peer.target_passes == len(peer.k_trace) > 0 and peer.drafted == sum(peer.k_trace) > 0
        assert 0 <= peer.accepted <= peer.drafted
    assert sum(r.accepted for r in rows if r.mode == "hf-assisted") > 0  # the draft helps at least once

    summary = summarize(rows)
    doc = json.loads(json.dumps(to_json(rows, summary, {"pair": "tiny-hf"})))
    peer_rows = [r for r in doc["rows"] if r["mode"] == "hf-assisted"]
    assert [r["id"] for r in peer_rows] == ["c/0", "t/0"] and all(r["matches_ar"] is True for r in peer_rows)
    peer_summary = [s for s in doc["summary"] if s["mode"] == "hf-assisted"]
    assert {s["suite"] for s in peer_summary} == {"code", "talk"}
    assert all(s["speedup_vs_ar"] is not None and s["matches_ar"] == 1.0 for s in peer_summary)

    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(table(summary))
    assert "hf-assisted" in console.export_text()


def test_assisted_generate_stops_at_an_end_token_like_the_engine(hf_engine):
    """Make a token of the greedy reply an end-of-generation token: both stop just before it."""
    target, draft = hf_engine.target, hf_engine.draft
    prompt = prompt_ids(hf_engine, PROMPTS[0])
    plain = assisted_generate(target, draft, prompt, 24).ids
    assert len(plain) == 24
    stop_at = next(i for i in range(4, 24) if plain[i] not in plain[:i])
    saved = target.eos_ids
    target.eos_ids = frozenset({plain[stop_at]})
    try:
        run = assisted_generate(target, draft, prompt, 24)
        engine_ids = [
            e.id
            for e in hf_engine.generate_tokens(prompt, GenerateSettings(24, GREEDY, "none", PolicyChoice("fixed", 0)))
            if isinstance(e, Token)
        ]
    finally:
        target.eos_ids = saved
    assert run.ids == engine_ids == plain[:stop_at] and run.tokens == stop_at


def test_decode_rate_leaves_out_the_first_target_pass(hf_engine):
    """With a clock that reads 0, 1, 2, ... at each target pass, the rate is the tokens after the
    first pass's over (passes - 1) seconds, like Summary's tokens after the first over decode time."""
    ticks = count()
    run = assisted_generate(
        hf_engine.target, hf_engine.draft, prompt_ids(hf_engine, PROMPTS[0]), 24, clock=lambda: float(next(ticks))
    )
    assert run.target_passes > 1
    after_first = run.decode_tokens_per_s * (run.target_passes - 1)
    first_pass_tokens = run.tokens - round(after_first)
    assert after_first == pytest.approx(round(after_first))
    assert 1 <= first_pass_tokens <= run.k_trace[0] + 1


def test_draft_lengths_are_the_candidates_transformers_verified(hf_engine, monkeypatch):
    """K per pass comes from a forward hook on the draft (one forward per drafted token); check it
    against the candidate lengths transformers' own candidate generator returned."""
    from transformers.generation import candidate_generator

    lengths = []
    original = candidate_generator.AssistedCandidateGenerator.get_candidates

    def get_candidates(self, input_ids, **kwargs):
        candidates, logits = original(self, input_ids, **kwargs)
        lengths.append(candidates.shape[1] - input_ids.shape[1])
        return candidates, logits

    monkeypatch.setattr(candidate_generator.AssistedCandidateGenerator, "get_candidates", get_candidates)
    run = assisted_generate(hf_engine.target, hf_engine.draft, prompt_ids(hf_engine, PROMPTS[1]), 32)
    assert run.k_trace == lengths and run.drafted == sum(lengths)


def test_hf_assisted_is_refused_on_a_llama_cpp_engine_in_one_line():
    pair = PairConfig("fake", "llamacpp", ModelSpec("t", "gguf"), ModelSpec("d", "gguf"), "model", 512)
    engine = Engine(pair, MarkovBackend(seed=3), MarkovBackend(seed=3))
    with pytest.raises(UsageError) as e:
        run_bench([engine], PROMPTS[:1], parse_modes("ar,hf-assisted", "model"), GREEDY)
    message = str(e.value)
    assert "hf-assisted" in message and "llamacpp" in message and "\n" not in message
    assert engine.target.evals == []  # refused before anything ran


def test_hf_assisted_needs_a_draft_model_and_greedy_decoding(hf_engine):
    no_draft = Engine(PairConfig("solo", "hf", hf_spec("t"), None, "ngram", 256), hf_engine.target)
    with pytest.raises(UsageError, match="hf-assisted needs a draft model"):
        run_bench([no_draft], PROMPTS[:1], parse_modes("hf-assisted", "ngram"), GREEDY)
    with pytest.raises(UsageError, match="greedy"):
        run_bench(
            [hf_engine], PROMPTS[:1], parse_modes("hf-assisted", "model"), SamplingParams(temperature=0.7, seed=1)
        )


@pytest.mark.subprocess
def test_bench_command_runs_hf_assisted_on_an_hf_pair(tiny_pair, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from edgespec.cli import main as cli

    target_dir, draft_dir = tiny_pair
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    config = tmp_path / "models.toml"
    config.write_text(
        'default = "tiny-hf"\n'
        f'[models.t]\nformat = "hf"\npath = "{target_dir}"\ndtype = "fp32"\n'
        f'[models.d]\nformat = "hf"\npath = "{draft_dir}"\ndtype = "fp32"\n'
        '[pairs.tiny-hf]\nbackend = "hf"\ntarget = "t"\ndrafter = "d"\ncontext = 256\ndevice_map = "cpu"\n'
    )
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    suite = tmp_path / "suite.jsonl"
    suite.write_text(
        json.dumps(
            {"id": "c/0", "suite": "code", "mode": "completion", "prompt": "import numpy as np\n", "max_tokens": 12}
        )
        + "\n"
    )
    out = tmp_path / "out.json"
    r = CliRunner().invoke(cli.main, ["bench", "--suite", str(suite), "--modes", "ar,hf-assisted", "--json", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    doc = json.loads(out.read_text())
    assert doc["meta"]["modes"] == ["ar", "hf-assisted"]
    assert [(x["mode"], x["matches_ar"]) for x in doc["rows"]] == [("ar", True), ("hf-assisted", True)]
    assert "hf-assisted" in r.stdout  # kept whole in the table on an 80-column terminal
