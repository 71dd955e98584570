"""`edgespec models tune [PAIR]`: the table of candidate layouts, a recommendation, and (with
--apply or a yes on a terminal) the tuned pair registered in the user's models.toml.

Tables and results go to stdout; progress goes to stderr; errors are one line. The tuner (numpy,
llama.cpp, the bench) is imported when the command runs, as the other commands do (see cli/main.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from edgespec.cli.common import FiniteFloat, NameList, config_option, error_boundary
from edgespec.models.config import load_registry
from edgespec.models.store import Store
from edgespec.util.atomic_file import remove_stale_partials
from edgespec.util.errors import UsageError
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
    help="Candidate layouts to build and measure, comma-separated (default: all of "
    "q6k-as-q4k, q6k-as-q4_0, q6k-as-iq4_nl, output-as-q4_0, q4_0, q4_0-pure, iq4_nl).",
)
@click.option(
    "--prompts",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Code-edit prompts of the development set to bench ar and auto on (0: no bench).",
)
@click.option(
    "--min-agreement",
    type=FiniteFloat(0, 100),
    default=95.0,
    show_default=True,
    help="Recommend no layout whose top-1 agreement with the original is below this (percent).",
)
@click.option("--apply", "apply_", is_flag=True, help="Register the recommended layout without asking.")
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
def tune(pair, names, prompts, min_agreement, apply_, pick, keep, json_path, config):
    """Build faster weight layouts of a pair's GGUF target and measure them.

    Each candidate is made by llama.cpp's quantizer from the pair's target: the whole model in
    one type llama.cpp repacks for multi-token verification, or the original with only its
    tensors of other types converted. For each: the verify curve, top-1 agreement and KL against
    the original, and the gain of `auto` on a few prompts, benched against the original in one
    interleaved run. The fastest layout above --min-agreement is recommended; applying it adds
    the model and a pair PAIR-tuned to your models.toml (nothing else in it changes).

    A draft model with tensors llama.cpp does not repack gets a faster layout too (those tensors
    as q4_0): every candidate drafts with it, and the draft-only row keeps the original target.
    A draft's layout changes no output, since the target checks every token.
    """
    from edgespec.bench import suites
    from edgespec.bench.tune import DRAFT_ONLY, ORIGINAL, Tuner, build_candidate, check_tunable, recommend, tuned_path
    from edgespec.models import layouts

    chosen_layouts = list(layouts.CANDIDATES) if names is None else [layouts.candidate(name) for name in names]
    if pick is not None and pick not in {c.name for c in chosen_layouts} | {DRAFT_ONLY}:
        raise UsageError(
            f"--pick {pick}: not among the layouts measured "
            f"({', '.join([c.name for c in chosen_layouts] + [DRAFT_ONLY])})"
        )
    registry = load_registry(config)
    chosen = registry.pair(pair)
    check_tunable(chosen)
    if json_path:
        check_writable(json_path, "--json")
    store = Store()
    store.check_writable()  # every candidate is built in it
    source = store.ensure(chosen.target, chosen.name)
    draft = store.ensure(chosen.draft, chosen.name) if chosen.draft is not None else None
    suite = [p for p in suites.load_suite(suites.DEV_SET) if p.suite == "code-edit"][:prompts]
    sha = chosen.target.sha256 or store.sha256(source)
    tuned_dir = store.models_dir / "tuned"
    if tuned_dir.is_dir():
        remove_stale_partials(tuned_dir)  # what a tune killed part way left

    source_layout = layouts.read_layout(source).text()  # refuses a file that is not a GGUF, before loading
    click.echo(f"tuning {chosen.name}: target {display_path(source)}, {source_layout}", err=True)
    tuned_draft = None
    if draft is not None and chosen.draft.format == "gguf" and layouts.converts_anything(draft, layouts.DRAFT):
        tuned_draft = tuned_path(tuned_dir, chosen.draft.sha256 or store.sha256(draft), layouts.DRAFT.name)
    elif pick == DRAFT_ONLY:
        raise UsageError(f"--pick {DRAFT_ONLY}: the draft model of {chosen.name} has no tensors to convert")
    err = Console(stderr=True)
    interrupted = False
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err, transient=True
    ) as progress:
        task = progress.add_task("loading the pair")
        if tuned_draft is not None:
            progress.update(task, description="the draft model: building")
            build_candidate(draft, tuned_draft, layouts.DRAFT)
        tuner = Tuner(chosen, source, draft, lambda text: progress.update(task, description=text), tuned_draft)
        try:
            tuner.measure(ORIGINAL, source_layout, source)
            if tuned_draft is not None:
                tuner.measure(DRAFT_ONLY, "the original; the draft as q4_0 where not repacked", source)
            for layout in chosen_layouts:
                progress.update(task, description=f"{layout.name}: building")
                path = build_candidate(source, tuned_path(tuned_dir, sha, layout.name), layout)
                tuner.measure(layout.name, layout.describe(), path)
            rows_done = [0]

            def on_row(row):
                rows_done[0] += 1
                progress.update(
                    task,
                    description=f"bench {rows_done[0]}/{2 * len(suite) * len(tuner.rows)}: "
                    f"{row.pair} {row.mode} {row.decode_tokens_per_s:.1f} tok/s",
                )

            tuner.bench(suite, on_row)
        except KeyboardInterrupt:
            interrupted = True  # the layouts measured so far are still reported, and nothing is registered
        finally:
            tuner.close()

    rows = tuner.rows
    if interrupted and not rows:
        raise KeyboardInterrupt
    best = recommend(rows, min_agreement / 100)
    closed = write_or_defer(lambda: Console(width=None if sys.stdout.isatty() else 200).print(_table(rows)))
    if json_path:
        data = (
            json.dumps(
                {
                    "pair": chosen.name,
                    "min_agreement": min_agreement,
                    "prompts": len(suite),
                    "interrupted": interrupted,
                    "recommended": best.layout if best else None,
                    "layouts": [m.to_dict() for m in rows],
                },
                indent=1,
            )
            + "\n"
        )
        write_or_rescue(json_path, lambda tmp: tmp.write_text(data), "tune results")
    if interrupted:
        click.echo("edgespec: stopped; the layouts above were measured, nothing was registered", err=True)
        raise KeyboardInterrupt
    if closed is not None:  # nobody reads the recommendation, and nothing is registered unasked
        raise closed
    if best is None:
        click.echo(
            f"recommendation: keep the original (no layout with >= {min_agreement:g}% top-1 agreement "
            "is clearly faster here)"
        )
    else:
        click.echo(
            f"recommendation: {best.layout} ({best.what}): {_gain_text(best)}, "
            f"{best.fidelity.agreement:.1%} top-1 agreement with the original"
        )
    chosen_row = next(m for m in rows if m.layout == pick) if pick else best
    if not keep:
        for m in rows:
            if m.path != source and m is not chosen_row:
                m.path.unlink(missing_ok=True)
        if tuned_draft is not None and (chosen_row is None or chosen_row.draft_path is None):
            tuned_draft.unlink(missing_ok=True)
    if chosen_row is not None and (apply_ or pick or _confirmed(chosen_row)):
        _apply(chosen, chosen_row, store, config)


def _apply(pair, best, store: Store, config) -> None:
    from edgespec.bench.tune import DRAFT_ONLY
    from edgespec.models.layouts import DRAFT
    from edgespec.models.user_registry import DerivedModel, pair_table, register

    def in_store(path: Path) -> str:
        return path.relative_to(store.models_dir).as_posix()

    models = []
    target = pair.target.name
    if best.layout != DRAFT_ONLY:
        target = f"{pair.target.name}-{best.layout}"
        models.append(
            DerivedModel(
                name=target,
                base=pair.target.name,
                layout=best.layout,
                file=in_store(best.path),
                note=f"{pair.target.name} as {best.layout} ({best.what}), "
                f"{best.fidelity.agreement:.1%} top-1 agreement",
            )
        )
    drafter = None
    if best.draft_path is not None:
        drafter = f"{pair.draft.name}-{DRAFT.name}"
        models.append(
            DerivedModel(
                name=drafter,
                base=pair.draft.name,
                layout=DRAFT.name,
                file=in_store(best.draft_path),
                note=f"{pair.draft.name} as {DRAFT.name} ({DRAFT.describe()}); a draft's layout changes no output",
            )
        )
    tuned_pair = f"{pair.name}-tuned"
    changes = ([] if best.layout == DRAFT_ONLY else [f"target as {best.layout}"]) + (
        [f"draft as {DRAFT.name}"] if drafter else []
    )
    description = f"{pair.description or pair.name}; {', '.join(changes)} (models tune)"
    path, changed = register(models, tuned_pair, pair_table(pair, target, description, drafter), config)
    registered = load_registry(config).models
    for model in models:  # built already, by the call `models pull` makes: recorded as its build
        store.record_build(registered[model.name])
    state = "added to" if changed else "already in"
    click.echo(f"pair {tuned_pair} {state} {display_path(path)}; use it with: edgespec chat -m {tuned_pair}")


def _confirmed(best) -> bool:
    """Asked only on a terminal; a pipe or CI never registers without --apply."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return False
    return click.confirm(f"register {best.layout} as a tuned pair in your models.toml?", default=False)


def _gain_text(m) -> str:
    if m.gain_vs_original is None:
        return "no bench run"
    return f"auto {m.gain:.2f}x its own ar, {m.gain_vs_original:.2f}x the original's ar"


def _table(rows: list) -> Table:
    t = Table(title="edgespec models tune")
    for col in (
        "layout",
        "weights",
        "size",
        "kept",
        "repacked",
        "verify ms at n=" + "/".join(map(str, CURVE_POINTS)),
        "draft ms",
        "top-1",
        "KL mean/p99",
        "auto vs ar",
        "vs original ar",
    ):
        t.add_column(col, justify="left" if col in ("layout", "weights", "repacked") else "right")
    for m in rows:
        t.add_row(
            m.layout,
            m.what,
            f"{m.size / 1e9:.2f} GB",
            f"{m.kept:.0%}",
            m.repacked,
            "/".join(f"{m.verify_ms[n]:.0f}" for n in CURVE_POINTS if n in m.verify_ms),
            "-" if m.draft_ms is None else f"{m.draft_ms:.0f}",
            f"{m.fidelity.agreement:.1%}",
            f"{m.fidelity.mean_kl:.3f}/{m.fidelity.p99_kl:.3f}",
            "-" if m.gain is None else f"{m.gain:.2f}x",
            "-" if m.gain_vs_original is None else f"{m.gain_vs_original:.2f}x",
        )
    return t
