"""`edgespec history`: what the history of earlier calls holds, and clearing it.

The history (`engine/reply_history.py`) keeps every prompt and reply per tokenizer under the home,
for drafting from earlier calls; the per-file tokens of the repositories indexed sit beside it.
"""

from __future__ import annotations

import shutil

import click

from edgespec.cli.common import error_boundary
from edgespec.util.errors import UsageError
from edgespec.util.paths import display_path, home


@click.command("history")
@click.option("--clear", is_flag=True, help="Forget every earlier call and every indexed repository file.")
@error_boundary
def history(clear: bool) -> None:
    """Show the size of the history of earlier calls that replies draft from (or --clear it).

    Every prompt and reply of run, chat and serve is kept, per tokenizer, so later calls can copy
    what repeats. Turn it off with --no-history or EDGESPEC_NO_HISTORY=1; bound it with
    EDGESPEC_HISTORY_BUDGET or [history] budget in models.toml (tokens)."""
    from edgespec.engine.reply_history import ReplyHistory

    root = home() / "history"
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if clear:
        for folder in folders:
            try:
                shutil.rmtree(folder)
            except OSError as e:
                raise UsageError(f"cannot clear {display_path(folder)} ({e.strerror or e})") from None
        click.echo(f"history cleared ({len(folders)} tokenizer{'s' if len(folders) != 1 else ''})")
        return
    if not folders:
        click.echo(f"history: empty ({display_path(root)})")
        return
    for folder in folders:
        try:
            calls, tokens, size = ReplyHistory.open(folder, budget_tokens=1 << 62).size()
        except OSError as e:
            raise UsageError(f"cannot read {display_path(folder)} ({e.strerror or e})") from None
        files = folder / "files"
        cached = sum(f.stat().st_size for f in files.iterdir()) if files.is_dir() else 0
        click.echo(
            f"{display_path(folder)}: {calls:,} calls, {tokens:,} tokens, {size / 1e6:.1f} MB "
            f"(+ {cached / 1e6:.1f} MB of repository tokens)"
        )
