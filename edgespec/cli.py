"""The `edgespec` command: run (pipes), chat (TUI), serve (OpenAI API), bench, models, export.

Unix contract of `run`: stdout carries only the model's text, streamed; stats, progress and errors
go to stderr; exit 0 ok, 1 runtime error, 2 usage error, 130 on Ctrl-C (partial output flushed),
143 on SIGTERM, 129 on SIGHUP. A reader that closes the pipe early ends the reply quietly with exit
1, the stats still written; any other failure to write stdout is one line and exit 1 (edgespec.stdout).

Commands import the engine, the bench and the chat app when they run, not when this module loads,
so `--help` and a bad flag answer at once instead of after numpy, llama.cpp and Textual load.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import click

from edgespec import __version__
from edgespec.cli_common import (
    OneLineErrorGroup,
    cache_option,
    config_option,
    decoding_options,
    error_boundary,
    pair_options,
    read_stdin,
    sampling_from_flags,
    sampling_option,
)
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Source, Summary, Token
from edgespec.errors import UsageError
from edgespec.figures import stats_line
from edgespec.output_files import check_writable, write_or_rescue
from edgespec.stdout import PipeClosed, check_open, write_or_defer
from edgespec.text_check import check_text

# Styles that read without colour too: corrections are underlined, bonus tokens bold.
TOKEN_STYLES = {
    Source.DRAFT: dict(fg="green"),
    Source.CORRECTION: dict(fg="red", underline=True),
    Source.BONUS: dict(fg="cyan", bold=True),
    Source.TARGET: dict(),
}


@click.group(cls=OneLineErrorGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edgespec")
def main() -> None:
    """Fast local chat and coding assistance with lossless speculative decoding."""


def compose_message(stdin_text: str | None, prompt: str | None) -> str:
    """stdin, a blank line, then the prompt: `cat app.py | edgespec run "add type hints"`."""
    parts = [p for p in (stdin_text.rstrip("\n") if stdin_text else None, prompt) if p and p.strip()]
    if not parts:
        raise UsageError("nothing to do: give a PROMPT or pipe text on stdin (see `edgespec run --help`)")
    return "\n\n".join(parts)


@main.command()
@click.argument("prompt", required=False)
@click.option("-s", "--system", default=None, help="System message.")
@pair_options
@decoding_options
@click.option("--max-tokens", type=click.IntRange(min=1), default=512, show_default=True)
@click.option("--raw", is_flag=True, help="Plain completion of the text, without the chat template.")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Colour tokens by source: green = accepted draft, red underlined = correction, bold cyan = bonus.")
@click.option("--stats", is_flag=True, help="One line of speed and acceptance figures on stderr.")
@click.option("--stats-json", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write the generation summary as JSON to this file.")
@cache_option
@error_boundary
def run(prompt, system, pair, config, draft, k, temperature, top_p, top_k, min_p, seed, max_tokens, raw, color,
        stats, stats_json, no_cache):
    """Generate a reply to PROMPT (and/or piped stdin) and stream it to stdout.

    Piped text comes first and the PROMPT after it, so asking another thing about the same input
    finds it in the prompt cache and reads only the new instruction (see --no-cache)."""
    from edgespec.engine import GenerateSettings, find_pair, open_engine
    from edgespec.prompt_cache import open_cache

    check_open()
    check_text(prompt, "PROMPT")
    check_text(system, "--system")
    if raw and system:
        raise UsageError("--system has no meaning with --raw (no chat template)")
    pair_config = find_pair(pair, config, draft)  # its context bounds the stdin read
    text = compose_message(read_stdin(pair_config.context), prompt)
    if stats_json:
        check_writable(stats_json, "--stats-json")
    engine = open_engine(pair_config, draft, open_cache(config, no_cache))
    try:
        settings = GenerateSettings(
            max_tokens=max_tokens,
            sampling=sampling_from_flags(engine.pair.sampling, temperature, top_p, top_k, min_p, seed),
            draft=draft,
            k=k,
        )
        reply(engine, text, system, raw, settings, color, stats, stats_json)
    finally:
        engine.close()


def reply(engine, text: str, system: str | None, raw: bool, settings, color: str, stats: bool,
          stats_json: Path | None) -> None:
    """Tokenize the input the way asked, check it fits, stream the reply, report the figures."""
    if raw:
        prompt_tokens = engine.target.tokenize(text, special=False)
    else:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        prompt_tokens = engine.chat_tokens(messages)
    if len(prompt_tokens) >= engine.n_ctx:
        raise UsageError(
            f"the input is {len(prompt_tokens)} tokens but pair {engine.pair.name!r} has a {engine.n_ctx}-token "
            "context; shorten it or pick a pair with a longer context"
        )
    colored = color == "always" or (color == "auto" and sys.stdout.isatty())
    stop = threading.Event()
    summary, closed = stream_to_stdout(engine.generate_tokens(prompt_tokens, settings, stop), colored, stop)
    if summary.stop_reason == "context":
        click.echo(f"edgespec: the reply was cut: the {engine.n_ctx}-token context is full", err=True)
    if stats:
        click.echo(stats_line(summary, engine.load_s), err=True)
    if stats_json:
        data = json.dumps({"pair": engine.pair.name, **summary.to_dict(), "load_s": engine.load_s}, indent=2) + "\n"
        write_or_rescue(stats_json, lambda tmp: tmp.write_text(data), "stats")
    if closed is not None:
        raise closed


def stream_to_stdout(events, colored: bool, stop: threading.Event) -> tuple[Summary, PipeClosed | None]:
    """Write token text as it arrives; on Ctrl-C the partial output is flushed before exiting.
    When the reader closes the pipe, `stop` ends the generation (within one target pass) and its
    Summary still comes: the reply's figures, and the PipeClosed to end the command with."""
    out = sys.stdout
    summary = Summary()
    wrote = ""
    closed = None
    try:
        for event in events:
            if isinstance(event, Token):
                if event.text and closed is None:
                    style = TOKEN_STYLES[event.source] if colored else None
                    try:
                        out.write(click.style(event.text, **style) if style else event.text)
                        out.flush()
                    except PipeClosed as e:
                        closed = e
                        stop.set()
                    wrote = event.text
            elif isinstance(event, Summary):
                summary = event
    finally:
        if wrote and not wrote.endswith("\n") and closed is None:
            out.write("\n")
        out.flush()
    return summary, closed


@main.command()
@click.option("--suite", "suite_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="JSONL suite (default: the development set shipped with edgespec).")
@click.option("-m", "--pair", "pairs", multiple=True,
              help="Model pair from models.toml (default: the registry's default); repeat it to compare pairs "
                   "interleaved prompt by prompt, e.g. a tuned layout and its original.")
@config_option
@click.option("--modes", default="ar,k2,k4,k8,heuristic,auto", show_default=True,
              help="Comma-separated: ar, kN, ngram-kN, model-kN, heuristic, auto, and hf-assisted (transformers' "
                   "generate with the draft as assistant; hf pairs only).")
@click.option("--drafter", type=click.Choice(["model", "ngram"]), default=None,
              callback=lambda ctx, param, value: value and DraftChoice(value),
              help="Drafter of kN and heuristic modes (default: the pair's draft model, else ngram).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="First N prompts of each suite.")
@click.option("--suites", default=None, help="Only these suites (comma-separated).")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Interleaved rounds per prompt; a prompt's speed is the median of its rounds.")
@sampling_option("--temperature", float, default=0.0)
@sampling_option("--seed", int, default=0)
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), default=None)
@click.option("--plot", "plot_path", type=click.Path(path_type=Path, dir_okay=False), default=None)
@click.option("--strict", is_flag=True,
              help="Exit 1 when a greedy output parts from ar beyond the target's noise floor (DIFF).")
@error_boundary
def bench(suite_path, pairs, config, modes, drafter, limit, suites, repeats, temperature, seed, json_path, plot_path,
          strict):
    """Compare decoding modes on a suite of prompts: tokens/s, speedup vs plain, acceptance, K.

    Where a greedy output parts from plain decoding (ar), the target's logits at the first differing
    token are taken again as the verify pass and as single steps computed them: a tie (numerical
    noise) or DIFF (a bug); the `= ar` column counts exact / tie / DIFF outputs."""
    from rich.console import Console
    from rich.progress import Progress

    from edgespec import bench as b
    from edgespec.decoding.sampling import SamplingParams
    from edgespec.engine import find_pair, open_engine
    from edgespec.provenance import provenance

    if strict and temperature > 0:
        raise UsageError("--strict checks greedy outputs against ar; use it with --temperature 0")
    path = suite_path or b.DEV_SET
    pair_configs = [find_pair(name, config) for name in dict.fromkeys(pairs or (None,))]
    all_drafted = all(p.draft is not None for p in pair_configs)
    mode_list = b.parse_modes(modes, drafter or (DraftChoice.MODEL if all_drafted else DraftChoice.NGRAM))
    sampling = SamplingParams(temperature=temperature, seed=seed)
    for pair_config in pair_configs:  # every pair can run every mode, or nothing loads
        b.check_modes(pair_config, mode_list, sampling)
        for mode in mode_list:
            find_pair(pair_config.name, config, mode.draft)
    # every prompt must fit every pair's context
    prompts = b.select(b.load_suite(path, min(p.context for p in pair_configs)), limit, suites)
    if json_path:
        check_writable(json_path, "--json")
    if plot_path:
        b.check_plot_path(plot_path)
    engines: list = []
    rows: list = []
    floors: dict = {}
    interrupted = False
    err = Console(stderr=True)
    try:
        for pair_config in pair_configs:
            engines.append(open_engine(pair_config))
            for line in b.layout_lines(engines[-1]):
                err.print(line, highlight=False)
        with Progress(console=err, transient=True) as progress:
            if b.needs_noise_floor(mode_list, sampling):  # what tells a parting from a bug; shown with the table
                measuring = progress.add_task("measuring the targets' noise floors (once per model)", total=None)
                floors = {engine.pair.name: engine.noise_floor() for engine in engines}
                progress.remove_task(measuring)
            task = progress.add_task("bench", total=len(prompts) * len(mode_list) * repeats * len(engines))

            def on_row(row):
                rows.append(row)
                progress.update(task, advance=1, description=f"{row.id} {row.mode} {row.decode_tokens_per_s:.1f} tok/s")

            b.run_bench(engines, prompts, mode_list, sampling, on_row, repeats)
    except KeyboardInterrupt:
        interrupted = True  # a long bench stopped part way still reports the rows it finished
    finally:
        for engine in engines:
            engine.close()
    closed = None
    if rows:
        summary = b.summarize(rows)
        closed = write_or_defer(lambda: Console().print(b.table(summary, floors)))
        meta = {**provenance(), "pairs": [p.name for p in pair_configs], "suite": str(path),
                "modes": [m.name for m in mode_list],
                "temperature": temperature, "seed": seed, "repeats": repeats, "interrupted": interrupted,
                "noise_floors": {pair: floor.to_dict() for pair, floor in floors.items()}}
        if json_path:
            data = json.dumps(b.to_json(rows, summary, meta), indent=1) + "\n"
            write_or_rescue(json_path, lambda tmp: tmp.write_text(data), "bench results")
        if plot_path:
            write_or_rescue(plot_path, lambda tmp: b.plot(tmp, rows, summary), "plot")
    if interrupted:
        raise KeyboardInterrupt
    if closed is not None:
        raise closed
    failure = b.strict_failure(rows) if strict else None
    if failure:
        raise failure


def _register_subcommands() -> None:
    from edgespec.export_vllm import export
    from edgespec.models_cmd import models
    from edgespec.server.command import serve
    from edgespec.tui.command import chat

    main.add_command(models)
    main.add_command(chat)
    main.add_command(serve)
    main.add_command(export)


_register_subcommands()
