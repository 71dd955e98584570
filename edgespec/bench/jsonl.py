"""Reading a JSONL file of the bench (a suite, a session suite): bounded, UTF-8, one JSON object a
line, and pydantic's first complaint about a line as one short phrase. Every problem is a one-line
`UsageError` naming the file and the line."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from pathlib import Path

from pydantic import ValidationError

from edgespec.util.errors import UsageError
from edgespec.util.user_files import read_user_file


def json_objects(path: Path, max_bytes: int, what: str = "suite file") -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of `path`, a file (or a pipe: `<(zcat x.gz)`) of
    at most `max_bytes` (read no further: a wrong file, a log, an endless pipe, does not fill
    memory; `read_user_file`). `what` names the file in the errors about the whole file ("suite
    file x.jsonl is larger than ...")."""
    data = read_user_file(path, max_bytes, f"{what} {path}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        where = data[: e.start].count(b"\n") + 1
        raise UsageError(f"{path}:{where}: not UTF-8 text (invalid byte at offset {e.start})") from None
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            fields = json.loads(line)
        except ValueError as e:
            raise UsageError(f"{path}:{n}: not JSON ({e})") from None
        except RecursionError:  # json's decoder recurses once per level of nesting
            raise UsageError(f"{path}:{n}: not JSON (nested too deeply)") from None
        if not isinstance(fields, dict):
            raise UsageError(f"{path}:{n}: not a JSON object")
        yield n, fields


def first_problem(e: ValidationError, tags: Collection[str] = ()) -> str:
    """The first error pydantic found, as `messages[0].content: <what is wrong>`. `tags`: the tags of
    the model's tagged unions, which pydantic puts in the location and a reader of the file never wrote."""
    error = e.errors(include_url=False)[0]
    loc = [part for part in error["loc"] if part not in tags]
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
    cause = error.get("ctx", {}).get("error")
    message = str(cause) if error["type"] == "value_error" and cause is not None else error["msg"]
    return f"{where}: {message}" if where else message
