"""`edgespec bench`, the command, on the tiny pair: the JSON document and plot it writes, a bad suite
in one line, and --strict.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from edgespec.decoding.costs.measuring import LONGEST_DENSE_DRAFT
from tests.bench_schema import ROW_KEYS, SUMMARY_KEYS


@pytest.fixture
def cli_env(tiny_cli_home, monkeypatch):
    """The tiny pair in a user models.toml, an empty store, and a two-suite JSONL file."""
    tmp_path = tiny_cli_home
    lines = [
        {"id": "c/0", "suite": "code", "mode": "completion", "prompt": "def add(a, b):", "max_tokens": 12},
        {"id": "c/1", "suite": "code", "mode": "completion", "prompt": "for i in range(", "max_tokens": 12},
        {"id": "c/2", "suite": "code", "mode": "completion", "prompt": "import os\n", "max_tokens": 12},
        {
            "id": "t/0",
            "suite": "talk",
            "mode": "chat",
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 12,
        },
    ]
    (tmp_path / "tiny.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _bench_command():
    from edgespec.cli import main as cli

    if "bench" not in cli.main.commands:
        pytest.skip("the `edgespec bench` command is not there yet")
    return cli


@pytest.mark.subprocess
def test_bench_command_writes_json_and_plot(cli_env):
    from click.testing import CliRunner

    cli = _bench_command()
    r = CliRunner().invoke(
        cli.main,
        [
            "bench",
            "--suite",
            str(cli_env / "tiny.jsonl"),
            "--modes",
            "ar,k2,auto",
            "--json",
            "out.json",
            "--plot",
            "out.png",
            "--limit",
            "2",
            "--repeats",
            "2",
        ],
    )
    assert r.exit_code == 0, (r.output, r.exception)
    doc = json.loads((cli_env / "out.json").read_text())
    rows = doc["rows"]
    assert doc["meta"]["repeats"] == 2
    assert doc["meta"]["suite"] == "tiny.jsonl"  # named, never by where a machine kept it
    # what made the figures: the command, the code and the machine
    assert {"command", "version", "machine", "date"} <= set(doc["meta"]) and doc["meta"]["machine"]["cpus"] >= 1
    # and what a verify pass cost there, by its length: auto measured it (every size it may draft)
    (curve,) = doc["meta"]["verify_ms"].values()
    short = {str(n) for n in range(1, LONGEST_DENSE_DRAFT + 2)}  # and longer passes, while they cost less a token
    assert short <= set(curve) and all(ms > 0 for ms in curve.values())
    assert all(int(n) in (32, 64, 128, 256) for n in set(curve) - short)
    checkout = Path(cli.__file__).resolve().parents[2]
    if (checkout / ".git").exists():
        head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
        assert doc["meta"]["commit"] == head.stdout.strip()
    # --limit 2 takes two prompts of each suite; every prompt runs every mode, interleaved, twice
    assert [(x["id"], x["repeat"], x["mode"]) for x in rows] == [
        (i, rep, m) for i in ("c/0", "c/1", "t/0") for rep in (0, 1) for m in ("ar", "k2", "auto")
    ]
    for x in rows:
        assert ROW_KEYS <= set(x)
        assert 0 < x["tokens"] <= 12 and x["target_passes"] > 0
    assert {(s["suite"], s["mode"]) for s in doc["summary"]} == {
        (s, m) for s in ("code", "talk") for m in ("ar", "k2", "auto")
    }
    for s in doc["summary"]:
        assert SUMMARY_KEYS <= set(s) and s["speedup_vs_ar"] is not None and s["total_speedup_vs_ar"] is not None
    for x in rows:  # each run starts cold, and its times add up
        assert x["target_read_tokens"] == x["prompt_tokens"] > 0
        assert x["ttft_s"] >= x["target_read_s"] > 0 and x["total_s"] == pytest.approx(x["ttft_s"] + x["decode_s"])
    assert (cli_env / "out.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "TTFT" in r.stdout and "edgespec bench" in r.stdout  # the tables


def test_bench_command_reports_a_bad_suite_in_one_line(cli_env):
    from click.testing import CliRunner

    cli = _bench_command()
    (cli_env / "bad.jsonl").write_text('{"id": "x"}\n')
    r = CliRunner().invoke(cli.main, ["bench", "--suite", "bad.jsonl", "--modes", "ar"])
    assert r.exit_code == 2
    assert "bad.jsonl:1" in r.stderr and "Traceback" not in r.stderr
    r = CliRunner().invoke(cli.main, ["bench", "--suite", "tiny.jsonl", "--modes", "ar,turbo"])
    assert r.exit_code == 2 and "turbo" in r.stderr


@pytest.mark.subprocess
def test_bench_command_strict_passes_and_explains_every_parting(cli_env):
    from click.testing import CliRunner

    cli = _bench_command()
    r = CliRunner().invoke(
        cli.main, ["bench", "--suite", "tiny.jsonl", "--modes", "ar,k3,ngram-k2", "--strict", "--json", "out.json"]
    )
    assert r.exit_code == 0, (r.output, r.exception)
    assert "exact / parted at a near-tie" in r.stdout and "noise floor of the target" in r.stdout
    doc = json.loads((cli_env / "out.json").read_text())
    (floor,) = doc["meta"]["noise_floors"].values()
    assert set(floor) == {str(n) for n in range(2, 17)}
    for x in doc["rows"]:
        if x["mode"] == "ar":
            assert x["vs_ar"] is None and x["parting"] is None
        elif x["vs_ar"] == "exact":
            assert x["matches_ar"] is True and x["parting"] is None
        else:
            assert x["vs_ar"] == "tie" and x["parting"]["position"] == x["first_divergence"]
            assert {"gap_batched", "gap_single", "batch", "floor", "token", "ar_token"} <= set(x["parting"])
    for s in doc["summary"]:
        assert s["mode"] == "ar" or sum(s["vs_ar"].values()) == s["prompts"] and s["vs_ar"]["DIFF"] == 0


@pytest.mark.subprocess
def test_bench_command_strict_fails_in_one_line_on_a_broken_verification(cli_env, monkeypatch):
    from click.testing import CliRunner

    from edgespec.decoding import decoder

    def accept_every_draft(logits, draft_ids, parents):
        return list(range(len(draft_ids))), int(logits[len(draft_ids)].argmax())

    cli = _bench_command()
    monkeypatch.setattr(decoder, "verify_greedy", accept_every_draft)
    r = CliRunner().invoke(cli.main, ["bench", "--suite", "tiny.jsonl", "--modes", "ar,k3", "--strict"])
    assert r.exit_code == 1
    assert "edgespec bench" in r.stdout  # the table still comes first
    # (the progress display leaves a newline; the loaded models' layouts come first)
    (line,) = [line for line in r.stderr.splitlines() if line.strip() and "weight tensors repacked" not in line]
    assert line.startswith("edgespec: error: ") and "DIFF" in line and "c/0 k3 at token" in line


def test_bench_command_strict_is_for_greedy_runs(cli_env):
    from click.testing import CliRunner

    cli = _bench_command()
    r = CliRunner().invoke(cli.main, ["bench", "--suite", "tiny.jsonl", "--strict", "--temperature", "0.7"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "--strict" in r.stderr  # before anything loads
