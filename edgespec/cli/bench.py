"""`edgespec bench`: the click command over edgespec.bench (suites, modes, report); the engines load
when it runs."""

from __future__ import annotations

import json
from pathlib import Path

import click

from edgespec.cli.common import (
    config_option,
    error_boundary,
    sampling_option,
)
from edgespec.decoding.drafters import DraftChoice
from edgespec.util.errors import UsageError
from edgespec.util.output_files import check_writable, write_or_rescue
from edgespec.util.stdout import write_or_defer


@click.command()
@click.option(
    "--suite",
    "suite_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="JSONL suite (default: the development set shipped with edgespec).",
)
@click.option(
    "-m",
    "--pair",
    "pairs",
    multiple=True,
    help="Model pair from models.toml (default: the registry's default); repeat it to compare pairs "
    "interleaved prompt by prompt, e.g. a tuned layout and its original.",
)
@config_option
@click.option(
    "--modes",
    default="ar,k2,k4,k8,heuristic,auto",
    show_default=True,
    help="Comma-separated: ar, kN, ngram-kN, model-kN, heuristic, auto, and hf-assisted (transformers' "
    "generate with the draft as assistant; hf pairs only).",
)
@click.option(
    "--drafter",
    type=click.Choice(["model", "ngram"]),
    default=None,
    callback=lambda ctx, param, value: value and DraftChoice(value),
    help="Drafter of kN and heuristic modes (default: the pair's draft model, else ngram).",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="First N prompts of each suite.")
@click.option("--suites", default=None, help="Only these suites (comma-separated).")
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Interleaved rounds per prompt; a prompt's speed is the median of its rounds.",
)
@sampling_option("--temperature", float, default=0.0)
@sampling_option("--seed", int, default=0)
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), default=None)
@click.option("--plot", "plot_path", type=click.Path(path_type=Path, dir_okay=False), default=None)
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 when a greedy output parts from ar beyond the target's noise floor (DIFF), or a reply "
    "does not match its prompt's response_format.",
)
@click.option(
    "--context",
    type=click.Path(path_type=Path, exists=True),
    multiple=True,
    help="A file or folder every mode may copy from (repeatable); no mode drafts from earlier calls.",
)
@error_boundary
def bench(
    suite_path,
    pairs,
    config,
    modes,
    drafter,
    limit,
    suites,
    repeats,
    temperature,
    seed,
    json_path,
    plot_path,
    strict,
    context,
):
    """Compare decoding modes on a suite of prompts: tokens/s, speedup vs plain, acceptance, K.

    Where a greedy output parts from plain decoding (ar), the target's logits at the first differing
    token are taken again as the verify pass and as single steps computed them: a tie (numerical
    noise) or DIFF (a bug); the `= ar` column counts exact / tie / DIFF outputs. Prompts with a
    response_format decode under it in every mode; the `valid` column counts the replies that parse
    and validate against it.

    No mode drafts from earlier calls (the history): every generation sees the same state, and none
    could copy another mode's reply to the same prompt. --context gives every mode the same corpus."""
    from rich.console import Console
    from rich.progress import Progress

    from edgespec.bench import modes as bench_modes
    from edgespec.bench import report
    from edgespec.bench import suites as bench_suites
    from edgespec.decoding.sampling import SamplingParams
    from edgespec.engine.draft_sources import open_sources
    from edgespec.engine.loading import find_pair, open_engine
    from edgespec.util.provenance import provenance

    if strict and temperature > 0:
        raise UsageError("--strict checks greedy outputs against ar; use it with --temperature 0")
    path = suite_path or bench_suites.DEV_SET
    pair_configs = [find_pair(name, config) for name in dict.fromkeys(pairs or (None,))]
    all_drafted = all(p.draft is not None for p in pair_configs)
    mode_list = bench_modes.parse_modes(modes, drafter or (DraftChoice.MODEL if all_drafted else DraftChoice.NGRAM))
    sampling = SamplingParams(temperature=temperature, seed=seed)
    for pair_config in pair_configs:  # every pair can run every mode, or nothing loads
        bench_modes.check_modes(pair_config, mode_list, sampling)
        for mode in mode_list:
            find_pair(pair_config.name, config, mode.draft)
    # every prompt must fit every pair's context
    prompts = bench_suites.select(bench_suites.load_suite(path, min(p.context for p in pair_configs)), limit, suites)
    bench_modes.check_prompts(mode_list, prompts)
    if json_path:
        check_writable(json_path, "--json")
    if plot_path:
        report.check_plot_path(plot_path)
    engines: list = []
    rows: list = []
    floors: dict = {}
    interrupted = False
    err = Console(stderr=True)
    try:
        for pair_config in pair_configs:
            engines.append(open_engine(pair_config))
            if context:
                engines[-1].sources = open_sources(engines[-1].target, None, context=context)
            for line in bench_modes.layout_lines(engines[-1]):
                err.print(line, highlight=False)
        with Progress(console=err, transient=True) as progress:
            if bench_modes.needs_noise_floor(
                mode_list, sampling
            ):  # what tells a parting from a bug; shown with the table
                measuring = progress.add_task("measuring the targets' noise floors (once per model)", total=None)
                floors = {engine.pair.name: engine.noise_floor() for engine in engines}
                progress.remove_task(measuring)
            task = progress.add_task("bench", total=len(prompts) * len(mode_list) * repeats * len(engines))

            def on_row(row):
                rows.append(row)
                progress.update(task, advance=1, description=f"{row.id} {row.mode} {row.decode_tokens_per_s:.1f} tok/s")

            bench_modes.run_bench(engines, prompts, mode_list, sampling, on_row, repeats)
    except KeyboardInterrupt:
        interrupted = True  # a long bench stopped part way still reports the rows it finished
    finally:
        for engine in engines:
            engine.close()
    closed = None
    if rows:
        summary = report.summarize(rows)
        closed = write_or_defer(lambda: Console().print(report.table(summary, floors, rows)))
        meta = {
            **provenance(),
            "pairs": [p.name for p in pair_configs],
            # the model each pair's target was read from: a layout chosen for this machine is another file
            "targets": {e.pair.name: e.pair.target.name for e in engines},
            "suite": str(path),
            "context": [str(c) for c in context],
            "modes": [m.name for m in mode_list],
            "temperature": temperature,
            "seed": seed,
            "repeats": repeats,
            "interrupted": interrupted,
            "noise_floors": {pair: floor.to_dict() for pair, floor in floors.items()},
            # what a verify pass costs by its length on this machine: what bounds auto's ratios
            "verify_ms": {e.pair.name: report.verify_ms(e.costs.quiet_curve()) for e in engines if e.costs.calibrated},
        }
        if json_path:
            data = json.dumps(report.to_json(rows, summary, meta), indent=1) + "\n"
            write_or_rescue(json_path, lambda tmp: tmp.write_text(data), "bench results")
        if plot_path:
            write_or_rescue(plot_path, lambda tmp: report.plot(tmp, rows, summary), "plot")
    if interrupted:
        raise KeyboardInterrupt
    if closed is not None:
        raise closed
    failure = bench_modes.strict_failure(rows) if strict else None
    if failure:
        raise failure
