"""Which weight layout of a GGUF target this machine reads and verifies fastest, as `models pull`
or `models tune` measured it, and the derived model that layout is.

Quality belongs to the file (a shipped table says which layouts of a published file qualify);
speed belongs to the machine. So the choice is recorded per source file and per machine, in
models/.machine-layouts.json:

    {"<source sha256>": {"machine": "<fingerprint>", "layout": "q6k-as-iq4_nl" | "published",
                         "why": "one line for `edgespec models`"}}

A record made on another machine (a home carried over, another CPU or llama.cpp build) is not
used: the published file is, until `models pull` measures this one. `layout = "published"` on a
pair, or EDGESPEC_LAYOUT=published, keeps the published file byte for byte whatever was chosen.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from edgespec.models.registry import Derived, ModelSpec, PairConfig
from edgespec.models.store import Store
from edgespec.util.atomic_file import write_text_atomic
from edgespec.util.errors import UsageError
from edgespec.util.hardware import physical_cores
from edgespec.util.home_files import read_home_json

PUBLISHED = "published"  # the layout name of the file as published
LAYOUT_ENV = "EDGESPEC_LAYOUT"  # "published": every pair keeps its published target file
RECORD = ".machine-layouts.json"
RECORD_BYTES = 1 << 20  # a choice per source file: a few hundred bytes each


@dataclass(frozen=True)
class Choice:
    layout: str  # a layout of edgespec.models.layouts, or PUBLISHED
    why: str


def machine_fingerprint() -> str:
    """What a layout's speed depends on besides the file: the CPU, its cores and what llama.cpp was
    built to use on it."""
    # llama.cpp's libraries (about 0.1 s): only for a fingerprint, taken where a layout is chosen or used
    import llama_cpp

    cpu = _cpu_model() or platform.processor() or platform.machine()
    features = llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()
    return f"{cpu} | {physical_cores()} cores | llama-cpp-python {llama_cpp.__version__} | {features}"


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return None


def wants_machine_layout(pair: PairConfig) -> bool:
    """Whether the pair's target may be read in the layout chosen for this machine: a GGUF target
    on llama.cpp whose pair and environment do not ask for the published file."""
    setting = os.environ.get(LAYOUT_ENV, "").strip().lower()
    if setting not in ("", "machine", PUBLISHED):
        raise UsageError(f"{LAYOUT_ENV}={setting!r}: use {PUBLISHED!r} (the published file) or 'machine'")
    on_llamacpp = pair.backend == "llamacpp" and pair.target.format == "gguf"
    return on_llamacpp and pair.layout != PUBLISHED and setting != PUBLISHED


def derived_model(target: ModelSpec, source_sha256: str, layout: str) -> ModelSpec:
    """The model `layout` of `target` is: built by `models pull` like any derived model, in the
    store's tuned/ folder under the source's hash (so a new source file is a new model)."""
    return ModelSpec(
        name=f"{target.name}-{layout}",
        format="gguf",
        file=f"tuned/{source_sha256[:16]}-{layout}.gguf",
        source=Derived(target, layout),
    )


def read_choice(models_dir: Path, source_sha256: str) -> Choice | None:
    """This machine's choice for the source file, or None (never measured here, or a damaged record)."""
    entry = _read(models_dir).get(source_sha256)
    if not isinstance(entry, dict) or entry.get("machine") != machine_fingerprint():
        return None
    layout, why = entry.get("layout"), entry.get("why", "")
    if not isinstance(layout, str) or not isinstance(why, str):
        return None
    return Choice(layout, why)


def record_choice(models_dir: Path, source_sha256: str, choice: Choice) -> None:
    records = _read(models_dir)
    records[source_sha256] = {"machine": machine_fingerprint(), "layout": choice.layout, "why": choice.why}
    write_text_atomic(models_dir / RECORD, json.dumps(records, indent=1))


def _read(models_dir: Path) -> dict:
    """The choices made here; {} when none, or when the record is not one (removed in one line)."""
    return read_home_json(models_dir / RECORD, RECORD_BYTES, "machine layout record")


def machine_target(store: Store, pair: PairConfig, published_path: Path) -> tuple[ModelSpec, Path, Choice | None]:
    """The target model and file a pair loads: the layout chosen for this machine where the pair
    wants it and its build is present and verified, else the published file (a build removed or
    damaged since: the published file, until `models pull` builds it again). The choice is
    returned whenever one was made here, for saying which file is in use and why."""
    if not wants_machine_layout(pair):
        return pair.target, published_path, None
    sha = pair.target.sha256 or store.sha256(published_path)
    choice = read_choice(store.models_dir, sha)
    if choice is None or choice.layout == PUBLISHED:
        return pair.target, published_path, choice
    model = derived_model(pair.target, sha, choice.layout)
    if not store.verify(model):
        return pair.target, published_path, choice
    return model, store.path_for(model), choice
