"""The pages' tables are what the committed result files render (benchmarks/render.py), so a figure
cannot drift from the run behind it; and the renderer notices a changed figure or a broken marker."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("render", ROOT / "benchmarks" / "render.py")
render = sys.modules["render"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render)
import render_sources as sources  # noqa: E402  (beside render.py, which put its folder on the path)
import render_speed as speed  # noqa: E402


@pytest.mark.parametrize("page", render.PAGES)
def test_the_committed_page_is_what_the_committed_results_render(page):
    text = (ROOT / page).read_text()
    assert render.render_page(text) == text, f"{page} is stale: run `make results`"


def test_every_result_file_is_rendered_on_some_page():
    used = {name for page in render.PAGES for name in render._OPENING.findall((ROOT / page).read_text())}
    assert used == set(render.BLOCKS)
    committed = {p.relative_to(render.RESULTS).as_posix() for p in render.RESULTS.rglob("*.json")}
    sources = render.render_page("".join(f"<!-- results:{n} -->\n<!-- /results:{n} -->\n" for n in used))
    assert {name for name in committed if f"benchmarks/results/{name}" in sources} == committed


def test_the_readme_has_the_one_table_and_stays_short():
    text = (ROOT / "README.md").read_text()
    assert render._OPENING.findall(text) == ["bench"]
    assert len(text.splitlines()) <= 250


def test_a_changed_figure_changes_the_page(tmp_path):
    folder = tmp_path / "results"
    shutil.copytree(render.RESULTS, folder)
    path = folder / "bench_dev.json"
    doc = json.loads(path.read_text())
    auto = next(s for s in doc["summary"] if s["mode"] == "auto")
    auto["total_speedup_vs_ar"] = 2.5
    path.write_text(json.dumps(doc))
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    rendered = render.render_page(page, folder)
    assert rendered != page and f"| {auto['suite']} ({auto['prompts']}) | **2.50x** |" in rendered


def test_another_machine_s_run_is_a_row_of_its_own(tmp_path):
    folder = tmp_path / "results"
    shutil.copytree(render.RESULTS, folder)
    other = folder / "other-cpu"
    other.mkdir(exist_ok=True)
    doc = json.loads((folder / "bench_structured.json").read_text())
    doc["meta"]["machine"]["cpu_model"] = "Other(R) CPU(TM) 9000"
    auto = next(s for s in doc["summary"] if s["mode"] == "auto")
    auto["total_speedup_vs_ar"] = 3.25
    (other / "bench_structured.json").write_text(json.dumps(doc))
    rows = render.structured(folder)
    other_host = f"Other CPU 9000, {sources.host(doc).partition(', ')[2]}"  # the instruction set of the copied run
    mine = [row for row in rows if f"| {other_host} |" in row]
    assert len(mine) == 1 and mine[0].startswith(f"| {auto['suite']} ({auto['prompts']}") and "**3.25x**" in mine[0]
    assert any(line.startswith(f"{auto['suite']} on {other_host}: `ar` decoded") for line in rows)
    assert any("`benchmarks/results/other-cpu/bench_structured.json`" in line for line in rows)


def test_the_source_line_names_the_command_commit_and_machine():
    doc = {
        "meta": {
            "command": "edgespec bench --json x.json",
            "commit": "0123456789abcdef",
            "dirty": False,
            "machine": {"cpus": 16, "cpu_model": "AMD EPYC 9654"},
            "backends": {"llama-cpp-python": "0.3.36"},
            "date": "2027-01-02 03:04:05 +0000",
        }
    }
    assert sources.source(doc, "x.json") == (
        "<sub>`benchmarks/results/x.json`: `edgespec bench --json x.json` at "
        "0123456, 16 CPUs (AMD EPYC 9654, ISA not recorded), llama-cpp-python 0.3.36, 2027-01-02</sub>"
    )


XEON = {"cpus": 2, "cpu_model": "Intel(R) Xeon(R) Processor"}


@pytest.mark.parametrize(
    "machine, named",
    [
        # a run recorded since provenance sums up the instruction set
        (
            XEON | {"isa": {"vector": "AVX-512", "avx512": ["avx512f", "avx512_vnni"], "amx": ["amx_tile"]}},
            "AVX-512 + AMX",
        ),
        (XEON | {"isa": {"vector": "AVX2", "avx512": [], "amx": []}}, "AVX2"),
        # an older run that listed the CPU's vector flags: read from them, underscores and all
        (XEON | {"cpu_flags": ["avx", "avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"]}, "AVX-512 + AMX"),
        (XEON | {"cpu_flags": ["sse2", "avx", "f16c", "avx2"]}, "AVX2"),
        # one that recorded no flags: no instruction set is made up for it
        (XEON, "ISA not recorded"),
    ],
)
def test_a_host_is_named_with_its_instruction_set_or_says_it_was_not_recorded(machine, named):
    doc = {"meta": {"command": "x", "commit": "0123456789", "dirty": False, "machine": machine}}
    assert sources.host(doc) == f"Intel Xeon, {named}"
    assert f"2 CPUs (Intel Xeon, {named})" in sources.source(doc, "x.json")


def test_the_source_line_says_when_the_llama_cpp_build_leaves_the_host_s_amx_out():
    isa = {"vector": "AVX-512", "avx512": ["avx512f"], "amx": ["amx_tile"]}
    build = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | REPACK = 1"
    doc = {
        "meta": {"machine": XEON | {"isa": isa}, "backends": {"llama-cpp-python": "0.3.36", "llama.cpp build": build}}
    }
    assert "(Intel Xeon, AVX-512 + AMX), llama-cpp-python 0.3.36 (built without AMX)</sub>" in sources.source(
        doc, "x.json"
    )
    doc["meta"]["backends"]["llama.cpp build"] = build + " | AMX_INT8 = 1"
    assert "(built without AMX)" not in sources.source(doc, "x.json")


def test_every_committed_result_names_its_host_s_instruction_set():
    """No committed run is rendered without an instruction set: each recorded it or its vector flags."""
    docs = [json.loads(path.read_text()) for path in render.RESULTS.rglob("*.json")]
    assert [sources.host(doc) for doc in docs if sources.host(doc).endswith("ISA not recorded")] == []


def test_the_verify_curve_line_names_the_machine_s_pass_costs():
    doc = {
        "meta": {"verify_ms": {"pair": {str(n): 20.0 + 10 * n for n in range(1, 18)}}},
        "summary": [{"suite": "s", "mode": "ar", "decode_tokens_per_s": 31.25}, {"suite": "s", "mode": "auto"}],
    }
    assert speed.verify_curve(doc) == (
        "s: `ar` decoded 31.2 tok/s; a target pass cost, in ms by tokens verified, "
        "1: 30 · 2: 40 · 3: 50 · 4: 60 · 6: 80 · 8: 100 · 12: 140 · 16: 180.<br>"
    )
    assert speed.verify_curve({"meta": {}, "summary": doc["summary"]}) is None  # a run that did not record it


@pytest.mark.parametrize(
    "text, problem",
    [
        ("<!-- results:bench -->\nno end\n", "unclosed"),
        ("<!-- results:nonesuch -->\n<!-- /results:nonesuch -->\n", "unknown results block 'nonesuch'"),
    ],
)
def test_a_broken_marker_is_an_error(text, problem):
    with pytest.raises(ValueError, match=problem):
        render.render_page(text)


def test_a_result_made_with_uncommitted_changes_or_without_provenance_is_refused(tmp_path, capsys):
    folder = tmp_path / "results"
    folder.mkdir()
    clean = json.loads((render.RESULTS / "read_chunk.json").read_text())
    (folder / "clean.json").write_text(json.dumps(clean))
    (folder / "dirty.json").write_text(json.dumps({**clean, "meta": {**clean["meta"], "dirty": True}}))
    (folder / "unknown.json").write_text(json.dumps({"rows": []}))
    assert render.main(folder) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"render.py: refused {folder / name}: {why}; run it again on a committed tree"
        for name, why in (
            ("dirty.json", "made with uncommitted changes"),
            ("unknown.json", "no provenance: the command and commit that made it are not recorded"),
        )
    ]


def test_every_committed_result_was_made_on_a_committed_tree():
    assert render.refused(render.RESULTS) == []


def absolute_paths(value) -> list[str]:
    """The strings in a JSON value that start with an absolute path (/..., ~/..., C:\\...)."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in absolute_paths(v)]
    if isinstance(value, list):
        return [s for v in value for s in absolute_paths(v)]
    return [value] if isinstance(value, str) and re.match(r"(/|~/|[A-Za-z]:\\)", value) else []


def test_absolute_paths_are_found_at_any_depth():
    doc = {"meta": {"command": "x --json /tmp/a.json", "suite": "/tmp/s.jsonl"}, "rows": [{"case": "~/b.py | x"}]}
    assert absolute_paths(doc) == ["/tmp/s.jsonl", "~/b.py | x"]


def test_result_files_name_inputs_by_a_repository_path_or_a_description():
    found = {
        path.relative_to(render.RESULTS).as_posix()
        for path in render.RESULTS.rglob("*.json")
        if absolute_paths(json.loads(path.read_text()))
    }
    assert found == set()
