"""`edgespec history`: what the history of earlier calls holds, and clearing it.

The history (`engine/reply_history.py`) keeps every prompt and reply per tokenizer under the home,
for drafting from earlier calls; the per-file tokens of the repositories indexed sit beside it.
Showing writes nothing and follows no link (`engine/history_files.py`); clearing removes what it
can, names what it could not, and exits 1 then (an I/O failure, not a usage error).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import click

from edgespec.cli.common import error_boundary
from edgespec.engine.history_files import clear_folder, counts, folder_lock, remove_entry
from edgespec.util.errors import EdgespecError
from edgespec.util.home_files import Untrusted, warn
from edgespec.util.paths import display_path, home


class HistoryIOError(EdgespecError):
    """The history could not be read or cleared (exit 1): the message names what."""


@click.command("history")
@click.option("--clear", is_flag=True, help="Forget every earlier call and every indexed repository file.")
@error_boundary
def history(clear: bool) -> None:
    """Show the size of the history of earlier calls that replies draft from (or --clear it).

    Every prompt and reply of run, chat and serve is kept, per tokenizer, so later calls can copy
    what repeats. Turn it off with --no-history or EDGESPEC_NO_HISTORY=1; bound it with
    EDGESPEC_HISTORY_BUDGET or [history] budget in models.toml (tokens)."""
    root = home() / "history"
    if clear:
        _clear(root)
    else:
        _show(root)


def _entries(root: Path) -> list[tuple[Path, int]]:
    """The entries of `root` with their modes (lstat: a link is a link), those gone meanwhile left out."""
    try:
        names = sorted(root.iterdir())
    except FileNotFoundError:
        return []
    except OSError as e:
        raise HistoryIOError(f"cannot read {display_path(root)} ({e.strerror or e})") from None
    out = []
    for path in names:
        try:
            out.append((path, os.lstat(path).st_mode))
        except FileNotFoundError:
            continue  # removed by a concurrent run since it was listed
        except OSError as e:
            raise HistoryIOError(f"cannot read {display_path(path)} ({e.strerror or e})") from None
    return out


def _show(root: Path) -> None:
    try:
        root_mode = os.lstat(root).st_mode
    except FileNotFoundError:
        root_mode = stat.S_IFDIR
    except OSError as e:
        raise HistoryIOError(f"cannot read {display_path(root)} ({e.strerror or e})") from None
    if not stat.S_ISDIR(root_mode):
        click.echo(f"history: {display_path(root)} is not a folder; not followed (history --clear removes it)")
        return
    lines = []
    for folder, mode in _entries(root):
        if not stat.S_ISDIR(mode):
            lines.append(f"{display_path(folder)}: not a folder; not followed (history --clear removes it)")
            continue
        try:
            kept = counts(folder)
        except OSError as e:
            raise HistoryIOError(f"cannot read {display_path(folder / 'log')} ({e.strerror or e})") from None
        if kept.calls or kept.bytes or kept.repository_bytes or kept.note:  # a cleared one keeps its lock only
            note = f"; {kept.note}" if kept.note else ""
            lines.append(
                f"{display_path(folder)}: {kept.calls:,} calls, {kept.tokens:,} tokens, {kept.bytes / 1e6:.1f} MB "
                f"(+ {kept.repository_bytes / 1e6:.1f} MB of repository tokens){note}"
            )
    click.echo("\n".join(lines) if lines else f"history: empty ({display_path(root)})")


def _clear(root: Path) -> None:
    try:
        root_is_folder = stat.S_ISDIR(os.lstat(root).st_mode)
    except FileNotFoundError:
        root_is_folder = True
    except OSError as e:
        raise HistoryIOError(f"cannot clear {display_path(root)} ({e.strerror or e})") from None
    entries = _entries(root) if root_is_folder else [(root, 0)]
    problems: list[str] = []
    for path, mode in entries:
        if not stat.S_ISDIR(mode):  # a link or a file where a tokenizer's folder should be: itself removed
            problem = remove_entry(path)
            problems += [problem] if problem else []
            continue
        try:
            with folder_lock(path, say=warn):  # a running process's appends wait meanwhile
                problems += clear_folder(path)
        except (OSError, Untrusted):  # cannot lock (a read-only mount): still remove what can be
            problems += clear_folder(path)
    n = len(entries)
    if problems:
        raise HistoryIOError(f"history partly cleared: {'; '.join(problems)}")
    click.echo(f"history cleared ({n} tokenizer{'s' if n != 1 else ''})")
