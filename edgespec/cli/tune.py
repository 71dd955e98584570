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
    from edgespec.bench import suites
    from edgespec.bench.tune import (
        DRAFT_ONLY,
        ORIGINAL,
        Tuner,
        build_candidate,
        check_tunable,
        qualifying_layouts,
        recommend,
        tuned_path,
        why_chosen,
    )
    from edgespec.models import layouts
    from edgespec.models.machine_layout import PUBLISHED, Choice, derived_model, record_choice, wants_machine_layout
    from edgespec.quality.perplexity import RULE, Reference, heldout_documents, measure_quality, shipped_quality

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
    known = shipped_quality(sha)
    if names is not None:
        chosen_layouts = [layouts.candidate(name) for name in names]
    elif known:
        chosen_layouts = [layout for layout, _ in qualifying_layouts(sha)[0]]
    else:
        chosen_layouts = list(layouts.CANDIDATES)
    if pick is not None and pick not in {c.name for c in chosen_layouts} | {DRAFT_ONLY}:
        raise UsageError(
            f"--pick {pick}: not among the layouts measured "
            f"({', '.join([c.name for c in chosen_layouts] + [DRAFT_ONLY])})"
        )
    tuned_dir = store.models_dir / "tuned"
    if tuned_dir.is_dir():
        remove_stale_partials(tuned_dir)  # what a tune killed part way left

    def say(line: str) -> None:  # one line a step, on a pipe as on a terminal
        click.echo(line, err=True)

    source_layout = layouts.read_layout(source).text()  # refuses a file that is not a GGUF, before loading
    say(f"tuning {chosen.name}: target {display_path(source)}, {source_layout}")
    for c in layouts.CANDIDATES:
        if c.name in known and c not in chosen_layouts:
            say(f"{c.name}: not measured, {known[c.name].text()} fails the quality rule")
    tuned_draft = None
    if draft is not None and chosen.draft.format == "gguf" and layouts.converts_anything(draft, layouts.DRAFT):
        tuned_draft = tuned_path(tuned_dir, chosen.draft.sha256 or store.sha256(draft), layouts.DRAFT.name)
    elif pick == DRAFT_ONLY:
        raise UsageError(f"--pick {DRAFT_ONLY}: the draft model of {chosen.name} has no tensors to convert")
    interrupted = False
    if tuned_draft is not None:
        say("the draft model: building its q4_0 layout")
        build_candidate(draft, tuned_draft, layouts.DRAFT)
    say("loading the pair")
    tuner = Tuner(chosen, source, draft, say, tuned_draft)
    reference = None
    if measure_quality_here and not known:
        say("reading the held-out text with the original, the reference for perplexity")
        reference = Reference(tuner.original, heldout_documents(tuner.original))
    try:
        tuner.measure(ORIGINAL, source_layout, source)
        if tuned_draft is not None:
            tuner.measure(DRAFT_ONLY, "the original; the draft as q4_0 where not repacked", source)
        for layout in chosen_layouts:
            say(f"{layout.name}: building")
            path = build_candidate(source, tuned_path(tuned_dir, sha, layout.name), layout)
            quality = known.get(layout.name)
            if quality is None and reference is not None:
                say(f"{layout.name}: perplexity on held-out text against the original")
                candidate = tuner.load(path)
                try:
                    quality = measure_quality(reference, candidate)
                finally:
                    candidate.close()
            tuner.measure(layout.name, layout.describe(), path, quality, fidelity=quality is None)
        tuner.retime()
        rows_done = [0]

        def on_row(row):
            rows_done[0] += 1
            say(
                f"bench {rows_done[0]}/{2 * len(suite) * len(tuner.rows)}: "
                f"{row.pair} {row.mode} {row.decode_tokens_per_s:.1f} tok/s"
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
                    "quality_rule": RULE,
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
    click.echo(f"quality rule: {RULE}")
    if best is None:
        click.echo("recommendation: keep the original (no layout that keeps its quality is clearly faster here)")
    else:
        click.echo(f"recommendation: {best.layout} ({best.what}): {_gain_text(best, rows[0])}")
    if wants_machine_layout(chosen) and names is None and pick is None:  # every qualifying layout was measured
        if best is None or best.layout == DRAFT_ONLY:
            why = "no layout that keeps its quality was clearly faster"
            record_choice(store.models_dir, sha, Choice(PUBLISHED, why))
        else:
            store.record_build(derived_model(chosen.target, sha, best.layout))
            record_choice(store.models_dir, sha, Choice(best.layout, why_chosen(best, rows[0])))
            click.echo(f"pair {chosen.name} now reads its target as {best.layout} on this machine")
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
                note=f"{pair.target.name} as {best.layout} ({best.what}), {_quality_cell(best)}",
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


def _gain_text(m, original) -> str:
    quality = "quality unknown" if m.quality is None else m.quality.text()
    if m.fidelity is not None and m.quality is None:
        quality = f"{m.fidelity.agreement:.1%} top-1 agreement with the original"
    call = f"a typical call {original.call_s / m.call_s:.2f}x faster"
    if m.gain_vs_original is None:
        return f"{call}, {quality}"
    return f"{call}, auto {m.gain:.2f}x its own ar, {m.gain_vs_original:.2f}x the original's ar, {quality}"


def _table(rows: list) -> Table:
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
            _quality_cell(m),
            "-" if m.gain is None else f"{m.gain:.2f}x",
            "-" if m.gain_vs_original is None else f"{m.gain_vs_original:.2f}x",
        )
    return t


def _quality_cell(m) -> str:
    """Against the published file on held-out text where known, else against the original on the
    calibration text (top-1 agreement and KL mean / p99)."""
    if m.quality is not None:
        return m.quality.text() + (" (qualifies)" if m.quality.qualifies else " (fails the rule)")
    if m.fidelity is None:
        return "-"
    f = m.fidelity
    return f"top-1 {f.agreement:.1%}, KL {f.mean_kl:.3f}/{f.p99_kl:.3f}" if f.positions else "the reference"
