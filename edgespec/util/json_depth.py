"""JSON from outside (a request's body, a call's arguments, a model's reply) read with its nesting
bounded.

`json.loads` recurses once per level and ends at Python's recursion limit (about 1,000 levels, less
the caller's own frames) with a RecursionError, which is not the ValueError that callers take for
"not JSON": 100,000 `[` escaped every handler. Anything that reads the value afterwards (pydantic's
serializer, a chat template's `tojson`, a walk of a JSON schema) recurses too, and fails somewhere
else below that limit. So a value is read only up to MAX_DEPTH levels, far more than any schema or
call arguments need, and deeper input is refused here as `TooDeep`, a ValueError.

This is the one reader of bounded JSON: the server's request bodies and calls use MAX_DEPTH, and
edgespec.constraints.json_schemas reads schemas through it with a tighter bound of its own.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 128  # containers within containers; a JSON schema of 100 levels still fits in a request


class TooDeep(ValueError):
    """JSON nested deeper than the bound: refused as text that is not JSON would be."""

    def __init__(self, max_depth: int):
        super().__init__(f"nested more than {max_depth} levels deep")


def nesting(value: Any) -> int:
    """How many containers (objects, arrays) deep `value` goes: 0 for a scalar. Level by level,
    without recursion, in time linear in the size of `value`."""
    depth, level = 0, [value]
    while True:
        containers = [v for v in level if isinstance(v, dict | list)]
        if not containers:
            return depth
        depth += 1
        level = [child for v in containers for child in (v.values() if isinstance(v, dict) else v)]


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads(text)`; TooDeep where the value is nested more than `max_depth` levels, and
    json's JSONDecodeError where it is not JSON (both ValueErrors)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep(max_depth) from None
    if nesting(value) > max_depth:
        raise TooDeep(max_depth)
    return value
