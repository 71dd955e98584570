"""`edgespec models tune [PAIR]`: the table of candidate layouts, a recommendation, and (with
--apply or a yes on a terminal) the tuned pair registered in the user's models.toml.

Tables and results go to stdout; progress goes to stderr; errors are one line. The tuning itself
(edgespec/bench/tuning.py: numpy, llama.cpp, the bench) is imported when the command runs, as the
other commands do (see cli/main.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from edgespec.cli.common import FiniteFloat, NameList, config_option, error_boundary
from edgespec.models.config import load_registry
from edgespec.quality.perplexity import RULE
from edgespec.util.output_files import check_writable, write_or_rescue
from edgespec.util.paths import display_path
from edgespec.util.stdout import write_or_defer

CURVE_POINTS = (1, 2, 3, 4, 5, 8, 16)  # the table's columns; --json has every n


def _candidate_names() -> list[str]:
    from edgespec.models import layouts  # gguf: only when --layouts is given

    return [c.name for c in layouts.CANDIDATES]


@click.command("tune")
@click.argument("pair", required=False)
@click.option(
    "--layouts",
    "names",
    type=NameList(_candidate_names),
    default=None,
    help="Candidate layouts to build and measure, comma-separated (default: those edgespec's quality table "
    "qualifies for this file, else all of q6k-as-q4k, q6k-as-q4_0, q6k-as-iq4_nl, output-as-q4_0, "
    "output-as-q4k, output-as-iq4_nl, q4_0, q4_0-pure, iq4_nl).",
)
@click.option(
    "--prompts",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Code-edit prompts of the development set to bench ar and auto on (0: no bench, the call is predicted).",
)
@click.option(
    "--quality",
    "measure_quality_here",
    is_flag=True,
    help="Measure each layout's perplexity on held-out text against the original here (minutes per layout), "
    "where edgespec's table does not know the file.",
)
@click.option(
    "--min-agreement",
    type=FiniteFloat(0, 100),
    default=95.0,
    show_default=True,
    help="For a layout of unknown quality: recommend none whose top-1 agreement with the original is below this.",
)
@click.option("--apply", "apply_", is_flag=True, help="Register the recommended layout as a pair PAIR-tuned.")
@click.option(
    "--pick",
    default=None,
    help="Register this measured layout instead of the recommended one (your trade of speed against fidelity).",
)
@click.option("--keep", is_flag=True, help="Keep every candidate file (default: only the recommended one).")
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write every figure (the whole verify curves) to this file.",
)
@config_option
@error_boundary
def tune(pair, names, prompts, measure_quality_here, min_agreement, apply_, pick, keep, json_path, config):
    """Build faster weight layouts of a pair's GGUF target and measure them on this machine.

    Each candidate is made by llama.cpp's quantizer from the pair's target: the whole model in
    one type llama.cpp repacks for multi-token verification, or the original with only its
    tensors of other types converted. Quality belongs to the file: for a published file edgespec
    knows, its table says which layouts keep the file's quality (perplexity on held-out text), and
    only those are built. Speed belongs to the machine: each layout's prompt reading and verify
    curve predict a typical call (1,024 tokens read, 200 decoded as auto decodes). The fastest
    qualifying layout is recommended and, for a pair that reads its target in this machine's
    layout (the default), becomes the file it loads; --apply also registers it as a pair
    PAIR-tuned in your models.toml (nothing else in it changes).

    A draft model with tensors llama.cpp does not repack gets a faster layout too (those tensors
    as q4_0): every candidate drafts with it, and the draft-only row keeps the original target.
    A draft's layout changes no output, since the target checks every token.
    """
    from edgespec.bench import tuning  # jsonschema, pydantic and gguf (about 0.2 s): only when it runs
    from edgespec.bench.candidates import check_tunable
    from edgespec.bench.layout_ranking import recommend

    chosen = load_registry(config).pair(pair)
    check_tunable(chosen)
    if json_path:
        check_writable(json_path, "--json")
    run = tuning.tune(chosen, names, prompts, measure_quality_here, pick, lambda line: click.echo(line, err=True))
    if run.interrupted and not run.rows:
        raise KeyboardInterrupt
    best = recommend(run.rows, min_agreement / 100)
    _show_and_write(run, best, min_agreement, json_path)
    _say_recommendation(run, best)
    if names is None and pick is None and tuning.record_for_machine(run, best):  # every qualifying layout measured
        click.echo(f"pair {chosen.name} now reads its target as {best.layout} on this machine")
    chosen_row = next(m for m in run.rows if m.layout == pick) if pick else best
    if not keep:
        tuning.remove_unchosen(run, chosen_row)
    if chosen_row is not None and (apply_ or pick or _confirmed(chosen_row)):
        tuned_pair, path, changed = tuning.register_tuned(run, chosen_row, config)
        state = "added to" if changed else "already in"
        click.echo(f"pair {tuned_pair} {state} {display_path(path)}; use it with: edgespec chat -m {tuned_pair}")


def _show_and_write(run, best, min_agreement: float, json_path: Path | None) -> None:
    """The table, then --json, of the layouts measured; a tune that a signal stopped ends there,
    interrupted, as does one whose stdout closed (nobody reads the recommendation, and nothing is
    registered unasked)."""
    closed = write_or_defer(lambda: Console(width=None if sys.stdout.isatty() else 200).print(_table(run.rows)))
    if json_path:
        data = json.dumps(run.to_dict(min_agreement, best), indent=1) + "\n"
        write_or_rescue(json_path, lambda tmp: tmp.write_text(data), "tune results")
    if run.interrupted:
        click.echo("edgespec: stopped; the layouts above were measured, nothing was registered", err=True)
        raise KeyboardInterrupt
    if closed is not None:
        raise closed


def _say_recommendation(run, best) -> None:
    click.echo(f"quality rule: {RULE}")
    if best is None:
        click.echo("recommendation: keep the original (no layout that keeps its quality is clearly faster here)")
    else:
        click.echo(f"recommendation: {best.layout} ({best.what}): {_gain_text(best, run.rows[0])}")


def _confirmed(best) -> bool:
    """Asked only on a terminal; a pipe or CI never registers without --apply."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return False
    return click.confirm(f"register {best.layout} as a tuned pair in your models.toml?", default=False)


def _gain_text(m, original) -> str:
    quality = "quality unknown" if m.quality is None else m.quality.text()
    if m.fidelity is not None and m.quality is None:
        quality = f"{m.fidelity.agreement:.1%} top-1 agreement with the original"
    call = f"a typical call {original.call_s / m.call_s:.2f}x faster"
    if m.gain_vs_original is None:
        return f"{call}, {quality}"
    return f"{call}, auto {m.gain:.2f}x its own ar, {m.gain_vs_original:.2f}x the original's ar, {quality}"


def _table(rows: list) -> Table:
    from edgespec.bench.layout_ranking import quality_text  # gguf: only when it runs

    t = Table(title="edgespec models tune")
    for col in (
        "layout",
        "weights",
        "size",
        "kept",
        "repacked",
        "read tok/s",
        "verify ms at n=" + "/".join(map(str, CURVE_POINTS)),
        "draft ms",
        "call s",
        "quality",
        "auto vs ar",
        "vs original ar",
    ):
        t.add_column(col, justify="left" if col in ("layout", "weights", "repacked", "quality") else "right")
    for m in rows:
        t.add_row(
            m.layout,
            m.what,
            f"{m.size / 1e9:.2f} GB",
            f"{m.kept:.0%}",
            m.repacked,
            f"{m.read_tok_s:.0f}",
            "/".join(f"{m.verify_ms[n]:.0f}" for n in CURVE_POINTS if n in m.verify_ms),
            "-" if m.draft_ms is None else f"{m.draft_ms:.0f}",
            f"{m.call_s:.1f}",
            quality_text(m),
            "-" if m.gain is None else f"{m.gain:.2f}x",
            "-" if m.gain_vs_original is None else f"{m.gain_vs_original:.2f}x",
        )
    return t
