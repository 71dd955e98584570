"""JSON files of measurements kept between runs in EDGESPEC_HOME, one entry per key (the cost
curve's `calibration.json`, the noise floor's `noise_floor.json`).

A key starts with its measurement's version and names what the measurement depends on, so one is
reused only where it still holds: saving drops the entries of other versions, which are measured
again. A file that cannot be read or written only costs a measurement next time.
"""

from __future__ import annotations

import json
from pathlib import Path

from edgespec.util import unsaved
from edgespec.util.atomic_file import write_text_atomic
from edgespec.util.home_files import read_home_json
from edgespec.util.paths import private_folder

FILE_BYTES = 1 << 20  # a file of measurements past this is not one (`read_home_json`)


def read_entry(path: Path, key: str) -> dict | None:
    """The measurement saved under `key` in a JSON file of them, or None (no file, no entry, damaged)."""
    saved = read_home_json(path, FILE_BYTES, path.name).get(key)  # one line where it is not a record
    return saved if isinstance(saved, dict) else None


def save_entry(path: Path, key: str, value: dict, version: str, what: str) -> None:
    """Save a measurement (`what`, for the user) under `key`; entries of other versions (keys not
    starting with `version`) go, and so does a damaged file. A file that cannot be read or written
    only costs a measurement next time (said once: `unsaved`)."""
    try:
        data = {k: v for k, v in read_home_json(path, FILE_BYTES, path.name).items() if k.startswith(version + "|")}
        data[key] = value
        private_folder(path.parent)
        write_text_atomic(path, json.dumps(data, indent=1))
    except OSError as e:
        unsaved.cannot_save(what, path.parent, e)
