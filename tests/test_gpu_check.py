"""benchmarks/gpu_check.py end to end in its --tiny form: tiny shapes on the CPU, every part of the
GPU check (the rule-following models on transformers and, exported to GGUF and quantized, on
llama.cpp; the verify curve at every n to 16; fixed K, the controller and hf-assisted at each
acceptance rate). The real shapes need a CUDA GPU and are run by `make gpu-check` there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess  # the module's fixture runs the check in a process of its own

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[str, dict]:
    out = tmp_path_factory.mktemp("gpu_check") / "report.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--json", str(out)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, json.loads(out.read_text())


def test_every_backend_is_measured(smoke):
    text, report = smoke
    sides = report["sides"]
    assert "llama.cpp Q4_K_M" in sides and "llama.cpp left out" not in report
    assert any(label.startswith("transformers ") for label in sides)
    assert sides["llama.cpp Q4_K_M"]["placement"] == "cpu (1 thread)"  # what llama.cpp reported at load
    for side in sides.values():
        assert sorted(int(n) for n in side["verify_ms"]) == list(range(1, 17))
        assert all(ms > 0 for ms in side["verify_ms"].values()) and side["draft_ms"] > 0
        assert side["ar"]["follows_rule"] == 1.0  # the rule survives bf16, nf4 and Q4_K_M
    assert "verify ms, n =" in text and "hf-assisted tok/s" in text


def test_each_acceptance_rate_has_fixed_k_the_controller_and_the_peer(smoke):
    _, report = smoke
    for label, side in report["sides"].items():
        rows = side["accept"]
        assert set(rows) == {"0.5", "0.7", "0.9"}
        for row in rows.values():
            auto = row["auto"]
            assert auto["tok_s"] > 0 and sum(auto["k_hist"].values()) == auto["passes"]
            assert 0 <= row["k_star"] <= 8 and row["predicted_speedup"] > 0 and row["measured_speedup"] > 0
            assert set(row["fixed"]) == {"2"} and row["fixed"]["2"]["drafted"] > 0
            assert (row["assisted"] is None) == label.startswith("llama.cpp")
            if row["assisted"] is not None:
                assert row["assisted"]["tok_s"] > 0
        # the drafts are accepted at about the rate they were built for (deterministic: seeded rules)
        assert rows["0.5"]["measured_a"] < rows["0.9"]["measured_a"]
        assert rows["0.9"]["measured_a"] > 0.75, label
