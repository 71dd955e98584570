"""The result files behind the pages (benchmarks/render.py): reading them, refusing those whose
provenance is missing or names a tree with uncommitted changes, and the host and source line that
every rendered block ends with, so that each figure on a page names the run that made it."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from edgespec.util.provenance import instruction_set, isa_label

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT / "edgespec" / "data"  # measured tables edgespec ships: held to the same rule as results


def load(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


def unfit(doc: dict) -> str | None:
    """Why a result file's figures may not go on a page, or None: its provenance (under "meta", or at
    the top level of the older files) is missing, or says the tree had uncommitted changes."""
    meta = doc.get("meta", doc)
    if not isinstance(meta, dict) or not meta.get("command") or not meta.get("commit"):
        return "no provenance: the command and commit that made it are not recorded"
    if "dirty" not in meta:
        return "no provenance: whether the tree had uncommitted changes is not recorded"
    if meta["dirty"]:
        return "made with uncommitted changes"
    return None


def refused(folder: Path) -> list[str]:
    """One line for each result file under `folder` that may not be rendered, naming it and why."""
    lines = []
    for path in sorted(folder.rglob("*.json")):
        if why := unfit(json.loads(path.read_text())):
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            lines.append(f"{shown}: {why}")
    return lines


def data_unfit(doc: dict, results: Path = RESULTS) -> str | None:
    """Why a data file edgespec ships may not be trusted as measured, or None; the rule of `unfit`,
    for the two ways a data file records where it came from. A table of runs (one entry per source
    file, each with the `meta` of every run that made it, as benchmarks/layout_quality.py writes
    them): every run. A file derived from a result file (its `source` and that run's `commit`): the
    committed run of `source`, and it must be the one named, not an earlier one. A file that records
    neither is not measured data (a prompt set, a text)."""
    if isinstance(doc.get("files"), dict):
        runs = [run for entry in doc["files"].values() for run in entry.get("meta", [None])]
        return next((f"a run: {why}" for run in runs if (why := unfit({"meta": run}))), None)
    if "source" not in doc:
        return unfit(doc) if "commit" in doc or "command" in doc else None
    source = results / Path(doc["source"]).relative_to("benchmarks/results")
    if not source.exists():
        return f"derived from {doc['source']}, which is not a committed result file"
    if why := unfit(made := json.loads(source.read_text())):
        return f"derived from {doc['source']}, {why}"
    if made.get("meta", made).get("commit") != doc.get("commit"):
        return f"derived from a run of {doc['source']} at {str(doc.get('commit'))[:7]}, not the committed one"
    return None


def refused_data(paths: list[Path]) -> list[str]:
    """One line for each data file of `paths` whose provenance `data_unfit` refuses, naming it and why."""
    return [
        f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {why}"
        for path in paths
        if (why := data_unfit(json.loads(path.read_text())))
    ]


def on_every_machine(folder: Path, name: str) -> list[str]:
    """`name` and its namesakes in the other machines' sub-folders, as paths under `folder`: the
    machine of record first, where it has one (a run made so far only on another machine has none)."""
    others = sorted(p.relative_to(folder).as_posix() for p in folder.glob(f"*/{name}"))
    return [name, *others] if (folder / name).exists() else others


def _machine_of(doc: dict) -> dict:
    """A run's machine record: under "meta" (or at the top level of the older files), as provenance
    records it, or in the oldest files the meta itself."""
    meta = doc.get("meta", doc)
    return meta["machine"] if isinstance(meta.get("machine"), dict) else meta


def host(doc: dict) -> str:
    """The host a run was made on, as a table names it: its CPU model without trademark signs or the
    word "Processor", and its instruction set ("Intel Xeon, AVX-512 + AMX", "AMD EPYC, AVX2"); hosts
    of one model differ widely by it. A run made before provenance summed up the instruction set still
    listed the CPU's vector flags, and the label is read from them; one that listed none says so."""
    machine = _machine_of(doc)
    model = re.sub(r"\s*(\((R|TM)\)|\bProcessor\b)", "", machine.get("cpu_model") or "?").strip()
    isa = _isa(machine)
    return f"{model}, {isa_label(isa) if isa else 'ISA not recorded'}"


def _isa(machine: dict) -> dict | None:
    """The instruction set a machine record names, or reads from its vector flags; None: neither."""
    if isinstance(machine.get("isa"), dict):
        return machine["isa"]
    if isinstance(machine.get("cpu_flags"), list):
        return instruction_set(machine["cpu_flags"])
    return None


def source(doc: dict, name: str, where_kept: str = "benchmarks/results") -> str:
    """One line saying what made a file's figures: the command, commit, host and date; and where the
    host has AMX but the recorded llama.cpp build lists no AMX kernels, that the build leaves it out."""
    meta = doc.get("meta", doc)
    commit = (meta.get("commit") or "")[:7] or meta.get("version", "?")
    machine = _machine_of(doc)
    cpus = machine.get("cpus", machine.get("cpu_count"))
    where = f"{cpus} CPUs ({host(doc)})"
    backends = meta.get("backends") or {}
    if backends.get("llama-cpp-python"):
        where += f", llama-cpp-python {backends['llama-cpp-python']}"
        build = backends.get("llama.cpp build") or ""
        if (_isa(machine) or {}).get("amx") and "CPU :" in build and "AMX" not in build:
            where += " (built without AMX)"
    command = meta.get("command", "?")
    command = shlex.join(command) if isinstance(command, list) else command
    date = f", {meta['date'][:10]}" if meta.get("date") else ""
    return f"<sub>`{where_kept}/{name}`: `{command}` at {commit}, {where}{date}</sub>"
