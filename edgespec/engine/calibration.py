"""What the engine measures once and keeps between runs: the cost curve (`calibration.json`) and
the target's noise floor (`noise_floor.json`), both in EDGESPEC_HOME.

Each file maps a key to one measurement. The key starts with the measurement's version and names
what it depends on (`runtime_key`: the runtime, where each model runs, each model file), so a
measurement is reused only where it still holds, and one of another version is measured again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from edgespec.decoding.backend import Backend, Placement
from edgespec.models.registry import PairConfig
from edgespec.quality.noise_floor import NoiseFloor
from edgespec.util import unsaved
from edgespec.util.atomic_file import write_text_atomic
from edgespec.util.home_files import read_home_json
from edgespec.util.paths import home, private_folder

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
# measured again (`curve_keeper.py`). An entry without "format" (1) has no provisional mark, and
# is provisional if its sizes contradict their neighbours.
CALIBRATION_FORMAT = 2
# A calibration stops after this long and goes on with what it timed: a machine that needs longer
# is busy, so the figures would be inflated anyway. It is provisional, measured again at a quiet
# moment, and live passes correct what they run meanwhile (`curve_keeper.py`).
CALIBRATION_BUDGET_S = 30.0
# "floor-v1" floors were measured after a 32-token prefix, too short a cache to show its noise.
NOISE_FLOOR_VERSION = "floor-v2"
_FILE_BYTES = 1 << 20  # a file of measurements past this is not one (`read_home_json`)


def runtime_key(pair: PairConfig, placements: Mapping[str, Placement], backends: Sequence[Backend | None]) -> list[str]:
    """What a measurement on these backends depends on: the runtime, how it is run (where each
    model runs, `placements` as loaded), and each model file (path and size)."""
    parts = [pair.backend, str(pair.threads), pair.device_map]
    parts += [f"{p.device} {p.detail}" for p in placements.values()]
    for backend in backends:
        path = getattr(backend, "path", None)
        if path is not None:
            st = Path(path).stat()
            parts += [str(path), str(st.st_size)]
    return parts


def read_calibration(key: str) -> dict | None:
    """The cost curve saved under `key` (`CostModel.to_dict` plus the marks of CALIBRATION_FORMAT), or None."""
    return _read_saved(_calibration_file(), key)


def save_calibration(key: str, entry: dict) -> None:
    _save(_calibration_file(), key, entry, CALIBRATION_VERSION, "speed calibration")


def read_noise_floor(key: str) -> NoiseFloor | None:
    """The noise floor saved under `key` by an earlier run, if any (a damaged entry is none)."""
    saved = _read_saved(_noise_floor_file(), key)
    try:
        return NoiseFloor.from_dict(saved) if saved else None
    except ValueError:
        return None


def save_noise_floor(key: str, floor: NoiseFloor) -> None:
    _save(_noise_floor_file(), key, floor.to_dict(), NOISE_FLOOR_VERSION, "noise floor")


def _calibration_file() -> Path:
    return home() / "calibration.json"


def _noise_floor_file() -> Path:
    """Next to the calibration (so whatever moves one moves both)."""
    return _calibration_file().with_name("noise_floor.json")


def _read_saved(path: Path, key: str) -> dict | None:
    """The measurement saved under `key` in a JSON file of them, or None (no file, no entry, damaged)."""
    saved = read_home_json(path, _FILE_BYTES, path.name).get(key)  # one line where it is not a record
    return saved if isinstance(saved, dict) else None


def _save(path: Path, key: str, value: dict, version: str, what: str) -> None:
    """Save a measurement (`what`, for the user) under `key`; entries of other versions (keys not
    starting with `version`) go, and so does a damaged file. A file that cannot be read or written
    only costs a measurement next time (said once: `unsaved`)."""
    try:
        data = {k: v for k, v in read_home_json(path, _FILE_BYTES, path.name).items() if k.startswith(version + "|")}
        data[key] = value
        private_folder(path.parent)
        write_text_atomic(path, json.dumps(data, indent=1))
    except OSError as e:
        unsaved.cannot_save(what, path.parent, e)
