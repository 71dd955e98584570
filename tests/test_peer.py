"""benchmarks/peer.py compares edgespec's default path with its peers on the published target,
llama.cpp alone and llama-cpp-python's own prompt lookup decoding: on one tiny model file every side
must read the same prompt and give the same greedy tokens (a lookup mode also proposing drafts), the
JSON must say what ran where, the summary's medians and ratios must be the peer's time over
edgespec's, and a bad argument must be one line and a non-zero exit."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("peer", ROOT / "benchmarks" / "peer.py")
peer = sys.modules["peer"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peer)
peer_cases, peer_sides = sys.modules["peer_cases"], sys.modules["peer_sides"]  # peer.py imported them
_spec = importlib.util.spec_from_file_location("render", ROOT / "benchmarks" / "render.py")
render = sys.modules["render"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render)

SUITE = [
    {"id": "c/0", "suite": "chat", "mode": "chat", "max_tokens": 12, "messages": [{"role": "user", "content": "hi"}]},
    {"id": "c/1", "suite": "chat", "mode": "chat", "max_tokens": 12, "messages": [{"role": "user", "content": "the"}]},
    {"id": "p/0", "suite": "plain", "mode": "completion", "max_tokens": 12, "prompt": "in the river"},
]


@pytest.fixture
def tiny_registry(tmp_path: Path, tiny_gguf: Path, tiny_draft_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A models.toml whose default pair is the tiny target drafted by the tiny draft model, with the
    target also registered as the model the peer runs; the store and home in `tmp_path`."""
    config = tmp_path / "models.toml"
    config.write_text(
        'default = "tiny"\n'
        f'[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{tiny_draft_gguf}"\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 512\nthreads = 1\n'
    )
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the processes of --whole-process import this checkout
    return config


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "suite.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in SUITE))
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    rc = peer.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_both_sides_read_the_same_prompt_and_give_the_same_greedy_tokens(tiny_registry, suite, tmp_path, capsys):
    result = tmp_path / "peer.json"
    argv = ["--config", str(tiny_registry), "--peer-model", "t", "--suite", str(suite), "--draft", "none"]
    rc, out, _ = run(argv + ["--rounds", "2", "--json", str(result)], capsys)
    assert rc == 0
    doc = json.loads(result.read_text())
    assert [(s["suite"], s["peer"], s["prompts"], s["equal"], s["timed"]) for s in doc["summary"]] == [
        ("chat", "alone", 2, 2, "call"),
        ("plain", "alone", 1, 1, "call"),
    ]
    for p in doc["prompts"]:
        assert p["alone"]["equal"] and p["alone"]["first_difference"] is None
        assert p["edgespec"]["tokens"] == p["alone"]["tokens"] > 0
    # both sides, each round, the first side alternating by round
    firsts = [r["side"] for r in doc["rows"] if r["id"] == "c/0"]
    assert firsts == ["edgespec", "alone", "alone", "edgespec"]
    assert all(r["whole_s"] >= r["ttft_s"] > 0 and r["decode_s"] >= 0 for r in doc["rows"])
    meta = doc["meta"]
    assert {"command", "version", "machine", "backends", "date"} <= set(meta)
    assert meta["edgespec"]["pair"] == "tiny" and meta["edgespec"]["target"] == meta["peer"]["path"]
    assert meta["edgespec"]["target_layout"] == meta["peer"]["layout"] and meta["edgespec"]["prompt_cache"] is False
    assert meta["peer"]["threads"] == meta["edgespec"]["threads"] == 1 and meta["rounds"] == 2
    assert meta["peer"]["modes"] == {"alone": {"runtime": peer_sides.ALONE, "num_pred_tokens": None}}
    assert out.splitlines()[0].startswith("suite (prompts) |") and out.splitlines()[1].startswith(
        "chat (2) | alone | call |"
    )
    # what the page's block renders of it
    rows = render.peer(tmp_path, ("peer.json",))
    assert rows[2].split(" | ", 1)[1].startswith("chat (2) | llama.cpp alone | call |")
    assert re.search(r"\| 2/2 \| \d+\.\d\dx \|$", rows[2])  # equal replies: their ratio is summed apart
    assert any(line.startswith("peer.json: edgespec pair `tiny`, `--draft none`") for line in rows)


def test_the_default_path_drafts_and_still_reports_against_the_peer(tiny_registry, suite, tmp_path, capsys):
    result = tmp_path / "peer.json"
    argv = ["--config", str(tiny_registry), "--peer-model", "t", "--suite", f"{suite}:chat", "--limit", "1"]
    rc, _, _ = run(argv + ["--rounds", "1", "--max-tokens", "20", "--json", str(result)], capsys)
    assert rc == 0
    doc = json.loads(result.read_text())
    assert doc["meta"]["edgespec"]["draft"] == "auto" and doc["meta"]["edgespec"]["draft_model"] is not None
    (s,) = doc["summary"]
    assert s["prompts"] == 1 and s["whole_ratio"] > 0 and s["edgespec_tokens"] == s["peer_tokens"] == 20


REPEATS = "the river and the hill, the river and the hill, the river and the hill, the river and"


def test_llama_cpp_python_s_prompt_lookup_runs_beside_llama_cpp_alone(tiny_registry, tmp_path, capsys):
    """Each lookup mode drafts (by its own count of proposed tokens, more at n=10 than at n=2), and
    its greedy reply is llama.cpp alone's and edgespec's, token for token, on the same prompt ids."""
    suite = tmp_path / "repeats.jsonl"
    lines = [{"id": "r/0", "suite": "repeats", "mode": "completion", "max_tokens": 40, "prompt": REPEATS}]
    lines.append({**SUITE[0], "max_tokens": 24})
    suite.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = tmp_path / "peer.json"
    argv = ["--config", str(tiny_registry), "--peer-model", "t", "--suite", str(suite), "--draft", "none"]
    rc, out, err = run(argv + ["--peers", "alone,lookup2,lookup10", "--rounds", "2", "--json", str(result)], capsys)
    assert rc == 0, err
    doc = json.loads(result.read_text())
    modes = doc["meta"]["peer"]["modes"]
    assert {m: modes[m]["num_pred_tokens"] for m in modes} == {"alone": None, "lookup2": 2, "lookup10": 10}
    assert "LlamaPromptLookupDecoding(num_pred_tokens=10)" in modes["lookup10"]["runtime"]
    # every side each round, in order and then in the reverse order
    sides = [r["side"] for r in doc["rows"] if r["id"] == "r/0"]
    assert sides == ["edgespec", "alone", "lookup2", "lookup10", "lookup10", "lookup2", "alone", "edgespec"]
    for p in doc["prompts"]:
        for mode in ("alone", "lookup2", "lookup10"):
            assert p[mode]["equal"] and p[mode]["tokens"] == p["edgespec"]["tokens"] > 0, (p["id"], mode)
        assert "drafted" not in p["alone"] and "drafted" not in p["edgespec"]
    (repeats,) = [p for p in doc["prompts"] if p["id"] == "r/0"]
    assert 0 < repeats["lookup2"]["drafted"] < repeats["lookup10"]["drafted"]
    assert [(s["suite"], s["peer"], s["equal"]) for s in doc["summary"]] == [
        (suite_, mode, 1) for mode in ("alone", "lookup2", "lookup10") for suite_ in ("repeats", "chat")
    ]
    assert all(s["whole_ratio"] > 0 for s in doc["summary"])
    assert [line.split(" | ")[1] for line in out.splitlines()[1:]] == ["alone"] * 2 + ["lookup2"] * 2 + ["lookup10"] * 2
    rows = render.peer(tmp_path, ("peer.json",))
    assert rows[4].split(" | ", 1)[1].startswith("repeats (1) | prompt lookup, 2 tokens | call |")


@pytest.mark.subprocess
def test_whole_processes_read_the_same_file_and_prompt(tiny_registry, tmp_path, capsys):
    source = tmp_path / "notes.txt"
    source.write_text("the river and the hill\n" * 20)
    result = tmp_path / "peer.json"
    argv = ["--config", str(tiny_registry), "--peer-model", "t", "--file", f"{source}:10", "say it again"]
    argv += ["--peers", "alone,lookup2", "--whole-process", "--draft", "none", "--rounds", "1"]
    rc, _, err = run(argv + ["--json", str(result)], capsys)
    assert rc == 0, err
    doc = json.loads(result.read_text())
    assert [(s["suite"], s["peer"], s["timed"], s["prompts"], s["equal"]) for s in doc["summary"]] == [
        ("files", "alone", "process", 1, 1),
        ("files", "lookup2", "process", 1, 1),
    ]
    rows = {r["side"]: r for r in doc["rows"]}
    # each side's own count of the prompt it read: the peers tokenized the text edgespec rendered
    assert rows["edgespec"]["prompt_tokens"] == rows["alone"]["prompt_tokens"] == rows["lookup2"]["prompt_tokens"] > 100
    assert (
        rows["edgespec"]["tokens"] == rows["alone"]["tokens"] == rows["lookup2"]["tokens"] == peer_cases.FILE_MAX_TOKENS
    )
    assert rows["lookup2"]["drafted"] > 0 and "drafted" not in rows["alone"]  # the process drafted by prompt lookup
    assert all(r["whole_s"] > r["ttft_s"] for r in rows.values())


def test_the_summary_is_medians_per_prompt_and_the_peer_s_time_over_edgespec_s():
    def row(id_, side, round_, whole, ttft, tokens=10, parted=None):
        return {
            "suite": "s",
            "id": id_,
            "side": side,
            "round": round_,
            "timed": "call",
            "prompt_tokens": 5,
            "whole_s": whole,
            "ttft_s": ttft,
            "decode_s": whole - ttft,
            "tokens": tokens,
            "first_difference": parted,
        }

    rows = [
        # a: edgespec 1, 2, 3 s (median 2), the peer 4 s every round; equal
        *(row("a", "edgespec", r, w, 0.5) for r, w in enumerate((1.0, 2.0, 3.0))),
        *(row("a", "peer", r, 4.0, 1.0) for r in range(3)),
        # b: edgespec 2 s, the peer 3 s; parted at 7 in one round and 4 in another
        *(row("b", "edgespec", r, 2.0, 1.0, tokens=8) for r in range(3)),
        *(row("b", "peer", r, 3.0, 1.0, tokens=9, parted=p) for r, p in enumerate((7, None, 4))),
    ]
    prompts, (s,) = peer.summarise(rows)
    assert prompts[0]["edgespec"]["whole_s"] == 2.0 and prompts[0]["peer"]["equal"]
    assert not prompts[1]["peer"]["equal"] and prompts[1]["peer"]["first_difference"] == 4
    assert s["edgespec_whole_s"] == 4.0 and s["peer_whole_s"] == 7.0
    assert s["whole_ratio"] == pytest.approx(7 / 4)
    assert s["whole_ratio_median"] == pytest.approx((4 / 2 + 3 / 2) / 2)
    assert s["ttft_ratio"] == pytest.approx(2.0 / 1.5) and s["decode_ratio"] == pytest.approx(5.0 / 2.5)
    assert (s["edgespec_tokens"], s["peer_tokens"]) == (18, 19)
    assert (s["equal"], s["equal_share"], s["first_differences"]) == (1, 0.5, [4])
    assert "1.75x (1.75x)" in peer.table([s])[1]


def test_the_page_block_gives_a_row_per_suite_and_peer_of_each_run(tmp_path):
    meta = {
        "command": "benchmarks/peer.py --suite dev:humaneval --json peer.json",
        "commit": "0123456789abcdef",
        "machine": {"cpus": 2, "cpu_model": "AMD EPYC 7B13"},
        "date": "2027-01-02 03:04:05 +0000",
        "rounds": 3,
        "edgespec": {"pair": "p", "draft": "auto", "target": "/m/tuned.gguf", "target_layout": "q4_K_M (q4_Kx2)"},
        "peer": {"path": "/m/published.gguf", "layout": "q4_K_M (q4_Kx1 q6_Kx1)", "threads": 2},
    }
    suite = {
        "suite": "humaneval",
        "timed": "call",
        "prompts": 20,
        "edgespec_whole_s": 100.0,
        "peer_whole_s": 125.0,
        "whole_ratio": 1.25,
        "whole_ratio_median": 1.2,
        "ttft_ratio": 1.0,
        "decode_ratio": None,
        "edgespec_tokens": 2000,
        "peer_tokens": 1990,
        "equal": 17,
    }
    # peer.json: a run of two peer modes; peer_files.json: one made before runs named their peers
    modes = {"alone": {"num_pred_tokens": None}, "lookup2": {"num_pred_tokens": 2}}
    lookup = {**suite, "peer": "lookup2", "peer_whole_s": 150.0, "whole_ratio": 1.5}
    files = {**suite, "suite": "files", "timed": "process", "prompts": 3, "equal": 3}
    run = {"meta": {**meta, "peer": {**meta["peer"], "modes": modes}}, "summary": [{**suite, "peer": "alone"}, lookup]}
    (tmp_path / "peer.json").write_text(json.dumps(run))
    (tmp_path / "peer_files.json").write_text(json.dumps({"meta": meta, "summary": [files]}))
    # the same run on another machine, in its sub-folder: rows of its own, named by its host
    xeon = {"machine": {"cpus": 2, "cpu_model": "Intel(R) Xeon(R) Processor", "cpu_flags": ["avx2", "avx512f"]}}
    (tmp_path / "intel-xeon").mkdir()
    (tmp_path / "intel-xeon" / "peer.json").write_text(json.dumps({**run, "meta": {**run["meta"], **xeon}}))
    rows = render.peer(tmp_path)
    epyc = "| AMD EPYC 7B13, ISA not recorded"
    assert rows[2:7] == [
        f"{epyc} | humaneval (20) | llama.cpp alone | call | 100.0 / 125.0 s | **1.25x** (1.20x) | 1.00x | - "
        "| 2000 / 1990 | 17/20 | - |",
        f"{epyc} | humaneval (20) | prompt lookup, 2 tokens | call | 100.0 / 150.0 s | **1.50x** (1.20x) | 1.00x | - "
        "| 2000 / 1990 | 17/20 | - |",
        "| Intel Xeon, AVX-512 | humaneval (20) | llama.cpp alone | call | 100.0 / 125.0 s | **1.25x** (1.20x) "
        "| 1.00x | - | 2000 / 1990 | 17/20 | - |",
        "| Intel Xeon, AVX-512 | humaneval (20) | prompt lookup, 2 tokens | call | 100.0 / 150.0 s | **1.50x** "
        "(1.20x) | 1.00x | - | 2000 / 1990 | 17/20 | - |",
        f"{epyc} | files (3) | llama.cpp alone | whole process | 100.0 / 125.0 s | **1.25x** (1.20x) | 1.00x | - "
        "| 2000 / 1990 | 3/3 | - |",
    ]
    assert rows[8] == (
        "peer.json: edgespec pair `p`, `--draft auto`, target `tuned.gguf` (q4_K_M (q4_Kx2)); llama-cpp-python on "
        "`published.gguf` (q4_K_M (q4_Kx1 q6_Kx1)); 2 threads each, medians of 3 rounds.<br>"
    )
    assert rows[-1].startswith("<sub>`benchmarks/results/peer_files.json`: `benchmarks/peer.py --suite")
    (tmp_path / "peer.json").unlink()
    (tmp_path / "intel-xeon" / "peer.json").unlink()
    assert render.peer(tmp_path)[2].startswith(f"{epyc} | files (3) |")  # a run of the files alone


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "nothing to run"),
        (["--suite", "dev", "--rounds", "0"], "--rounds must be at least 1"),
        (["--suite", "dev", "--whole-process"], "--whole-process times the --file cases"),
        (["--suite", "dev", "--draft", "always"], "invalid choice"),
        (["--suite", "dev", "--rounds", "two"], "invalid int value"),
        (["--suite", "dev", "--nonesuch"], "unrecognized arguments"),
        (["--suite", "no-such-suite.jsonl"], "does not exist"),
        (["--suite", "dev:nonesuch"], "no suite named nonesuch"),
        (["--file", "no-such-file.py", "explain"], "no such file"),
        (["--suite", "dev", "--peer-model", "nonesuch"], "not in the registry"),
        (["--suite", "dev", "--peers", "alone,lookup0"], "--peers: unknown peer 'lookup0'"),
        (["--suite", "dev", "--peers", "speculative"], "--peers: unknown peer 'speculative'"),
        (["--suite", "dev", "-m", "nonesuch"], 'unknown pair "nonesuch"'),
    ],
)
def test_a_bad_argument_is_one_line_and_a_non_zero_exit(argv, message, tiny_registry, capsys):
    rc, out, err = run(["--config", str(tiny_registry), *argv], capsys)
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("peer.py: ") and message in err
