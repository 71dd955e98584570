"""The auto policy chooses as it did when its choices were recorded (`tests/policy_recording.py`):
a change meant to move code, not behaviour, must leave every plan, draft and token the same."""

from __future__ import annotations

import json

from tests.policy_recording import RECORDING, recording


def test_the_auto_policys_choices_are_the_recorded_ones_byte_for_byte():
    recorded = json.loads(RECORDING.read_text())
    now = recording()
    assert list(now) == list(recorded)
    for name, lines in recorded.items():
        first = next((i for i, (a, b) in enumerate(zip(now[name], lines, strict=False)) if a != b), None)
        assert first is None and len(now[name]) == len(lines), (name, first, now[name][first or 0], lines[first or 0])
    assert json.dumps(now, indent=0) + "\n" == RECORDING.read_text()
