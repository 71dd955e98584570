"""What the engine's measurements kept between runs are filed under (`runtime_key`), and the
target's noise floor (`noise_floor.json`, beside the cost curve's `decoding/costs/saved.py`).

Each file maps a key to one measurement. The key starts with the measurement's version and names
what it depends on, so a measurement is reused only where it still holds, and one of another
version is measured again (`util/keyed_files.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from edgespec.decoding.backend import Backend, Placement
from edgespec.decoding.costs import saved
from edgespec.models.registry import PairConfig
from edgespec.quality.noise_floor import NoiseFloor
from edgespec.util.keyed_files import read_entry, save_entry

# "floor-v1" floors were measured after a 32-token prefix, too short a cache to show its noise.
NOISE_FLOOR_VERSION = "floor-v2"


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


def read_noise_floor(key: str) -> NoiseFloor | None:
    """The noise floor saved under `key` by an earlier run, if any (a damaged entry is none)."""
    entry = read_entry(_noise_floor_file(), key)
    try:
        return NoiseFloor.from_dict(entry) if entry else None
    except ValueError:
        return None


def save_noise_floor(key: str, floor: NoiseFloor) -> None:
    save_entry(_noise_floor_file(), key, floor.to_dict(), NOISE_FLOOR_VERSION, "noise floor")


def _noise_floor_file() -> Path:
    """Next to the calibration (so whatever moves one moves both)."""
    return saved.calibration_file().with_name("noise_floor.json")
