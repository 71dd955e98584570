"""The header's subtitle: what every reply of this chat is made by, and what it must match."""

from __future__ import annotations

import json

from edgespec.constraints.guidance import ConstraintSpec
from edgespec.engine.engine import Engine


def describe_pair(engine: Engine, constraint: ConstraintSpec | None = None) -> str:
    """'[constraint ·] backend · device · target ← drafter' (the long names last, where it truncates).

    The device is where the runtime put each loaded model ("cpu", "gpu", "gpu+cpu"): one word when
    both models run on the same device, else one per model ("target gpu, draft cpu"). A constraint
    (`chat --json` / `--json-schema`) comes first: it is why every reply is JSON."""
    pair = engine.pair
    drafter = pair.draft.name if pair.draft is not None else pair.drafter
    placements = engine.placements()
    devices = {p.device for p in placements.values()}
    where = devices.pop() if len(devices) == 1 else ", ".join(f"{role} {p.device}" for role, p in placements.items())
    parts = [pair.backend, where, f"{pair.target.name} ← {drafter}"]
    return " · ".join(([describe_constraint(constraint)] if constraint is not None else []) + parts)


def describe_constraint(spec: ConstraintSpec) -> str:
    """'JSON object', 'JSON schema "Pet"' (its title, when it has one), 'regex', ..."""
    if spec.kind == "json_object":
        return "JSON object"
    if spec.kind != "json_schema":
        return spec.kind
    schema = json.loads(spec.text)
    title = schema.get("title") if isinstance(schema, dict) else None
    return f"JSON schema {json.dumps(title, ensure_ascii=False)}" if isinstance(title, str) else "JSON schema"
