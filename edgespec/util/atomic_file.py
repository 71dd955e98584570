"""Replacing a file atomically: the one way edgespec rewrites the files a reader may see mid-write
(saved chats, the hash memo, the calibration, `--json` results).

The new content goes to a temporary file in the same folder, which then replaces the old one with
`os.replace`, so a reader (or the next run after a crash or a kill) sees the old file or the new
one, never half of one. No fsync: a killed process is covered, a power cut may lose the last write.

Model files (a pull, a tuned layout) are built the same way under `partial_path`, a name that holds
the writer's process id: a writer stopped by a signal removes its own, and one killed outright
leaves it for the next run to remove (`remove_stale_partials`), while a file another running
edgespec is writing is left alone. Work folders (a pull's downloads) follow the same rule: named
`work_folder_prefix`, removed by the next run once their maker is gone (`remove_stale_folders`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(path: Path, write: Callable[[Path], object], keep_suffix: bool = False, users: bool = False) -> None:
    """`write(tmp)` fills a temporary file next to `path`, which then replaces `path`. The temporary
    name ends in `.partial` (no reader's glob matches it) unless `keep_suffix`, for writers that
    choose the format from the name (matplotlib). A failure removes the temporary file and raises.

    `users`: the file is the user's (models.toml, a results file they named), who may keep it
    elsewhere behind a symlink and may have set its permissions. The link's final target is what
    gets replaced (written beside it), so the link stays a link, and the new file keeps the old
    one's mode. edgespec's own stores leave `users` off: a link planted in their folders is
    replaced, never written through."""
    if users:
        path = Path(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix if keep_suffix else ".partial"
    )
    os.close(fd)
    try:
        write(Path(tmp))
        if users:
            with contextlib.suppress(FileNotFoundError):  # a new file: mkstemp's private mode
                os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def partial_path(final: Path) -> Path:
    """Where this process builds `final` before renaming it into place."""
    return final.with_name(f"{final.name}.{os.getpid()}.partial")


def remove_stale_partials(folder: Path) -> None:
    """Remove the `*.partial` files in `folder` whose writer is no longer running (those named
    without a process id came from an edgespec that wrote `<file>.partial`: left by a kill too)."""
    for path in folder.glob("[!.]*.partial"):  # not write_atomic's own: `.<name>.<random>.partial`
        pid = path.name.removesuffix(".partial").rpartition(".")[2]
        if not (pid.isdigit() and _running(int(pid))):
            with contextlib.suppress(OSError):  # a folder this user cannot write: left as it is
                path.unlink(missing_ok=True)


def work_folder_prefix(kind: str) -> str:
    """The name prefix of this process's temporary work folders of `kind` (".pull-")."""
    return f"{kind}{os.getpid()}-"


def remove_stale_folders(folder: Path, kind: str) -> None:
    """Remove the work folders of `kind` in `folder` whose maker is no longer running (those named
    without a process id came from an older edgespec, which left them whenever it was killed). A
    link under such a name is removed itself, never followed."""
    for path in folder.glob(f"{kind}*"):
        pid = path.name.removeprefix(kind).partition("-")[0]
        if pid.isdigit() and _running(int(pid)):
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or a folder this user cannot write
            if path.is_symlink() or not path.is_dir():
                path.unlink()
            else:
                shutil.rmtree(path)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def write_text_atomic(path: Path, text: str, users: bool = False) -> None:
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), users=users)
