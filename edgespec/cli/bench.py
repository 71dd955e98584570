"""`edgespec bench`: the click command over a bench comparison (edgespec/bench/comparison.py); the
engines load when it runs. Tables go to stdout; the loaded models' layouts and the progress go to
stderr; errors are one line."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.progress import Progress, TaskID

from edgespec.cli.common import (
    config_option,
    error_boundary,
    sampling_option,
)
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
def bench(json_path: Path | None, plot_path: Path | None, **options) -> None:
    """Compare decoding modes on a suite of prompts: tokens/s, speedup vs plain, acceptance, K.

    Where a greedy output parts from plain decoding (ar), the target's logits at the first differing
    token are taken again as the verify pass and as single steps computed them: a tie (numerical
    noise) or DIFF (a bug); the `= ar` column counts exact / tie / DIFF outputs. Prompts with a
    response_format decode under it in every mode; the `valid` column counts the replies that parse
    and validate against it.

    No mode drafts from earlier calls (the history): every generation sees the same state, and none
    could copy another mode's reply to the same prompt. --context gives every mode the same corpus."""
    # the bench's modules import jsonschema, pydantic and gguf (about 0.2 s): only when it runs
    from edgespec.bench import comparison, report
    from edgespec.bench.modes import strict_failure

    plan = comparison.plan(**options)
    if json_path:
        check_writable(json_path, "--json")
    if plot_path:
        report.check_plot_path(plot_path)
    with _ProgressOnStderr() as watcher:
        result = comparison.run(plan, watcher)
    _show_and_write(result, json_path, plot_path)
    failure = strict_failure(result.rows) if plan.strict else None
    if failure:
        raise failure


def _show_and_write(result, json_path: Path | None, plot_path: Path | None) -> None:
    """The tables, then --json and --plot, of the rows the bench finished; a bench that a signal
    stopped ends there, interrupted, as does one whose stdout closed."""
    from edgespec.bench import report, tables  # the bench's modules: only when it runs (above)

    closed = None
    if result.rows:
        closed = write_or_defer(lambda: Console().print(tables.table(result.summary, result.floors, result.rows)))
        if json_path:
            data = json.dumps(report.to_json(result.rows, result.summary, result.meta), indent=1) + "\n"
            write_or_rescue(json_path, lambda tmp: tmp.write_text(data), "bench results")
        if plot_path:
            write_or_rescue(plot_path, lambda tmp: report.plot(tmp, result.rows, result.summary), "plot")
    if result.interrupted:
        raise KeyboardInterrupt
    if closed is not None:
        raise closed


class _ProgressOnStderr:
    """A bench's `comparison.Watcher` on stderr: each loaded model's layout as a line, then one
    progress bar per stage, started once those lines are out and gone when the bench ends."""

    def __init__(self) -> None:
        self.err = Console(stderr=True)
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def __enter__(self) -> _ProgressOnStderr:
        return self

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.stop()

    def loaded(self, line: str) -> None:
        self.err.print(line, highlight=False)

    def stage(self, description: str, total: int | None) -> None:
        if self.progress is None:
            self.progress = Progress(console=self.err, transient=True)
            self.progress.start()
        elif self.task is not None:
            self.progress.remove_task(self.task)
        self.task = self.progress.add_task(description, total=total)

    def row(self, row) -> None:
        assert self.progress is not None and self.task is not None
        self.progress.update(
            self.task, advance=1, description=f"{row.id} {row.mode} {row.decode_tokens_per_s:.1f} tok/s"
        )
