"""Replacing a file atomically: the one way edgespec rewrites the files a reader may see mid-write
(saved chats, the hash memo, the calibration, `--json` results).

The new content goes to a temporary file in the same folder, which then replaces the old one with
`os.replace`, so a reader (or the next run after a crash or a kill) sees the old file or the new
one, never half of one. No fsync: a killed process is covered, a power cut may lose the last write.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


def write_atomic(path: Path, write: Callable[[Path], None], keep_suffix: bool = False) -> None:
    """`write(tmp)` fills a temporary file next to `path`, which then replaces `path`. The temporary
    name ends in `.partial` (no reader's glob matches it) unless `keep_suffix`, for writers that
    choose the format from the name (matplotlib). A failure removes the temporary file and raises."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                               suffix=path.suffix if keep_suffix else ".partial")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
