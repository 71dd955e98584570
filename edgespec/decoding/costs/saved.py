"""The cost curve kept between runs: `calibration.json` in EDGESPEC_HOME, one entry per machine
and pair (`util/keyed_files.py`), its key starting with CALIBRATION_VERSION and naming what the
curve depends on (the engine's `runtime_key`: the runtime, where each model runs, each model file).
"""

from __future__ import annotations

from pathlib import Path

from edgespec.util.keyed_files import read_entry, save_entry
from edgespec.util.paths import home

# Saved curves of another version are measured again: "v6" curves time passes past 17 tokens too,
# sparsely, as far as a copy may draft (without them a copy never drafts past 16); "v5" ones keep
# each size's recent session figures, refined by live passes at the models' own thread count;
# "v4" ones also took passes on fewer threads, so a spell of load could leave a size priced at
# twice its cost for good; "v3" ones kept one fastest timing per size; "v2" ones timed 1, 2, 4, 8
# and 16 tokens and interpolated between.
CALIBRATION_VERSION = "v6"
# What a saved curve's entry holds besides the curve. Format 2: "provisional" (cut short by its
# budget, sizes that contradict their neighbours, or contradicted by live passes), "measure_again"
# (live passes contradicted it) and "measured_at" (seconds since the epoch), which say when it is
# measured again (`keeper.py`). An entry without "format" (1) has no provisional mark, and
# is provisional if its sizes contradict their neighbours.
CALIBRATION_FORMAT = 2


def calibration_file() -> Path:
    """Where the curves are kept (other measurements kept between runs sit beside it)."""
    return home() / "calibration.json"


def read_calibration(key: str) -> dict | None:
    """The cost curve saved under `key` (`CostModel.to_dict` plus the marks of CALIBRATION_FORMAT), or None."""
    return read_entry(calibration_file(), key)


def save_calibration(key: str, entry: dict) -> None:
    save_entry(calibration_file(), key, entry, CALIBRATION_VERSION, "speed calibration")
