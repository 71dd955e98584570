"""Tuning a pair's weight layouts on this machine: `edgespec models tune`, and the layout
`models pull` chooses. Each builds candidate layouts of the pair's GGUF target (`candidates`),
measures each here against the original, and ranks them by the call they predict
(`layout_ranking`), among those within the quality rule (`quality.perplexity.RULE`).

- `tune` (models tune) measures the layouts asked for, or those the shipped quality table qualifies,
  or for a file it does not know all of them (its quality measured here with `quality_here`); with
  prompts it benches `auto` against `ar` on each. It returns the rows; the command shows them,
  writes them, and then acts on the recommendation: `record_for_machine`, `remove_unchosen`,
  `register_tuned`.
- `choose_for_machine` (models pull) times only the layouts the table qualifies, keeps the
  fastest one's build if it beats the published file by MARGIN, and records that choice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from edgespec.bench import suites
from edgespec.bench.candidates import Tuner, build_candidate, tuned_path
from edgespec.bench.layout_ranking import (
    DRAFT_ONLY,
    MARGIN,
    ORIGINAL,
    Measured,
    qualifying_layouts,
    quality_text,
    recommend,
    why_chosen,
)
from edgespec.bench.partial_results import until_interrupted
from edgespec.bench.suites import BenchPrompt
from edgespec.models import layouts
from edgespec.models.config import load_registry
from edgespec.models.machine_layout import PUBLISHED, Choice, derived_model, record_choice, wants_machine_layout
from edgespec.models.registry import PairConfig
from edgespec.models.store import Store
from edgespec.models.user_registry import DerivedModel, pair_table, register
from edgespec.quality.perplexity import RULE, Quality, Reference, heldout_documents, measure_quality, shipped_quality
from edgespec.util.atomic_file import remove_stale_partials
from edgespec.util.errors import UsageError
from edgespec.util.paths import display_path


@dataclass
class Tuning:
    """One `models tune` of a pair: the rows measured (the original first) and the files they were
    measured from. `interrupted`: a signal stopped it part way, and the rows are those finished."""

    pair: PairConfig
    store: Store
    source: Path  # the pair's target as published
    sha: str  # the source's sha256
    prompts: int  # code-edit prompts benched in ar and auto on every layout
    tuned_draft: Path | None  # the draft as q4_0 where it has tensors llama.cpp does not repack
    rows: list[Measured]
    interrupted: bool = False

    def to_dict(self, min_agreement: float, best: Measured | None) -> dict:
        """Every figure, the whole verify curves included (`--json`)."""
        return {
            "pair": self.pair.name,
            "min_agreement": min_agreement,
            "quality_rule": RULE,
            "prompts": self.prompts,
            "interrupted": self.interrupted,
            "recommended": best.layout if best else None,
            "layouts": [m.to_dict() for m in self.rows],
        }


def tune(
    pair: PairConfig,
    names: Sequence[str] | None,
    prompts: int,
    quality_here: bool,
    pick: str | None,
    say: Callable[[str], None],
) -> Tuning:
    """Build and measure the layouts of `pair`'s target (`names`, else those that qualify), the
    original first, and bench `prompts` code-edit prompts on each. Every file and name is checked
    before anything loads (`pick` must be measured). A signal part way returns the rows finished."""
    store = Store()
    store.check_writable()  # every candidate is built in it
    source = store.ensure(pair.target, pair.name)
    draft = store.ensure(pair.draft, pair.name) if pair.draft is not None else None
    suite = [p for p in suites.load_suite(suites.DEV_SET) if p.suite == "code-edit"][:prompts]
    sha = pair.target.sha256 or store.sha256(source)
    known = shipped_quality(sha)
    chosen = _layouts_to_measure(names, known, sha, pick)
    tuned_dir = store.models_dir / "tuned"
    if tuned_dir.is_dir():
        remove_stale_partials(tuned_dir)  # what a tune killed part way left
    source_layout = layouts.read_layout(source).text()  # refuses a file that is not a GGUF, before loading
    say(f"tuning {pair.name}: target {display_path(source)}, {source_layout}")
    for c in layouts.CANDIDATES:
        if c.name in known and c not in chosen:
            say(f"{c.name}: not measured, {known[c.name].text()} fails the quality rule")
    tuned_draft = _tuned_draft(pair, store, draft, tuned_dir, pick)
    if tuned_draft is not None and draft is not None:  # a tuned draft is one of a draft model
        say("the draft model: building its q4_0 layout")
        build_candidate(draft, tuned_draft, layouts.DRAFT)
    say("loading the pair")
    tuner = Tuner(pair, source, draft, say, tuned_draft)
    reference = None
    if quality_here and not known:
        say("reading the held-out text with the original, the reference for perplexity")
        reference = Reference(tuner.original, heldout_documents(tuner.original))
    run = Tuning(pair, store, source, sha, len(suite), tuned_draft, tuner.rows)

    def measure() -> None:
        tuner.measure(ORIGINAL, source_layout, source)
        if tuned_draft is not None:
            tuner.measure(DRAFT_ONLY, "the original; the draft as q4_0 where not repacked", source)
        for layout in chosen:
            _measure_candidate(tuner, layout, tuned_path(tuned_dir, sha, layout.name), known, reference)
        tuner.retime()
        _bench(tuner, suite)

    # the layouts measured so far are still reported, and nothing is registered
    run.interrupted = until_interrupted(measure, tuner.close)
    return run


def _layouts_to_measure(
    names: Sequence[str] | None, known: dict[str, Quality], sha: str, pick: str | None
) -> list[layouts.Layout]:
    """The layouts named, else those the shipped table qualifies for this file, else all."""
    if names is not None:
        chosen = [layouts.candidate(name) for name in names]
    elif known:
        chosen = [layout for layout, _ in qualifying_layouts(sha)[0]]
    else:
        chosen = list(layouts.CANDIDATES)
    if pick is not None and pick not in {c.name for c in chosen} | {DRAFT_ONLY}:
        raise UsageError(
            f"--pick {pick}: not among the layouts measured ({', '.join([c.name for c in chosen] + [DRAFT_ONLY])})"
        )
    return chosen


def _tuned_draft(pair: PairConfig, store: Store, draft: Path | None, tuned_dir: Path, pick: str | None) -> Path | None:
    """Where the draft's q4_0 layout goes, for a draft with tensors llama.cpp does not repack."""
    spec = pair.draft
    if (
        draft is not None
        and spec is not None
        and spec.format == "gguf"
        and layouts.converts_anything(draft, layouts.DRAFT)
    ):
        return tuned_path(tuned_dir, spec.sha256 or store.sha256(draft), layouts.DRAFT.name)
    if pick == DRAFT_ONLY:
        raise UsageError(f"--pick {DRAFT_ONLY}: the draft model of {pair.name} has no tensors to convert")
    return None


def _measure_candidate(
    tuner: Tuner, layout: layouts.Layout, dest: Path, known: dict[str, Quality], reference: Reference | None
) -> None:
    """Build `layout` at `dest` (unless built already) and measure it; its quality from the shipped
    table, else measured against `reference` where there is one, else its fidelity to the original."""
    tuner.on_step(f"{layout.name}: building")
    path = build_candidate(tuner.source, dest, layout)
    quality = known.get(layout.name)
    if quality is None and reference is not None:
        tuner.on_step(f"{layout.name}: perplexity on held-out text against the original")
        candidate = tuner.load(path)
        try:
            quality = measure_quality(reference, candidate)
        finally:
            candidate.close()
    tuner.measure(layout.name, layout.describe(), path, quality, fidelity=quality is None)


def _bench(tuner: Tuner, suite: list[BenchPrompt]) -> None:
    """ar and auto on every measured layout, saying each row as it comes."""
    done = 0

    def on_row(row) -> None:
        nonlocal done
        done += 1
        total = 2 * len(suite) * len(tuner.rows)
        tuner.on_step(f"bench {done}/{total}: {row.pair} {row.mode} {row.decode_tokens_per_s:.1f} tok/s")

    tuner.bench(suite, on_row)


def record_for_machine(run: Tuning, best: Measured | None) -> bool:
    """For a pair that reads its target in this machine's layout, once every qualifying layout was
    measured: record the recommendation as this machine's choice (`models pull` would have made
    it), and whether the pair now reads `best`."""
    if not wants_machine_layout(run.pair):
        return False
    if best is None or best.layout == DRAFT_ONLY:
        why = "no layout that keeps its quality was clearly faster"
        record_choice(run.store.models_dir, run.sha, Choice(PUBLISHED, why))
        return False
    run.store.record_build(derived_model(run.pair.target, run.sha, best.layout))
    record_choice(run.store.models_dir, run.sha, Choice(best.layout, why_chosen(best, run.rows[0])))
    return True


def remove_unchosen(run: Tuning, kept: Measured | None) -> None:
    """Remove every candidate file but `kept`'s (the recommended or picked row; None: keep none)."""
    for m in run.rows:
        if m.path != run.source and m is not kept:
            m.path.unlink(missing_ok=True)
    if run.tuned_draft is not None and (kept is None or kept.draft_path is None):
        run.tuned_draft.unlink(missing_ok=True)


def register_tuned(run: Tuning, best: Measured, config: Path | None) -> tuple[str, Path, bool]:
    """Register `best` as the pair PAIR-tuned in the user's models.toml, its files as derived models
    (how they are made) recorded as built. Returns the pair's name, the file, and whether it changed."""
    pair, store = run.pair, run.store

    def in_store(path: Path) -> str:
        return path.relative_to(store.models_dir).as_posix()

    models = []
    target = pair.target.name
    if best.layout != DRAFT_ONLY:
        target = f"{pair.target.name}-{best.layout}"
        note = f"{pair.target.name} as {best.layout} ({best.what}), {quality_text(best)}"
        models.append(DerivedModel(target, pair.target.name, best.layout, in_store(best.path), note))
    drafter = None
    if best.draft_path is not None and pair.draft is not None:  # measured with the draft's layout
        drafter = f"{pair.draft.name}-{layouts.DRAFT.name}"
        draft = layouts.DRAFT
        note = f"{pair.draft.name} as {draft.name} ({draft.describe()}); a draft's layout changes no output"
        models.append(DerivedModel(drafter, pair.draft.name, draft.name, in_store(best.draft_path), note))
    tuned_pair = f"{pair.name}-tuned"
    changes = ([] if best.layout == DRAFT_ONLY else [f"target as {best.layout}"]) + (
        [f"draft as {layouts.DRAFT.name}"] if drafter else []
    )
    description = f"{pair.description or pair.name}; {', '.join(changes)} (models tune)"
    path, changed = register(models, tuned_pair, pair_table(pair, target, description, drafter), config)
    registered = load_registry(config).models
    for model in models:  # built already, by the call `models pull` makes: recorded as its build
        store.record_build(registered[model.name])
    return tuned_pair, path, changed


def choose_for_machine(pair: PairConfig, store: Store, say: Callable[[str], None]) -> Choice:
    """What `models pull` does for a pair that reads its target in this machine's layout: build
    the layouts the shipped table qualifies, time each against the published file, keep the one a
    typical call is fastest with (only if it beats the published file by MARGIN), record the
    choice for this machine and remove the other builds. Measures speed only: minutes."""
    source = store.ensure(pair.target, pair.name)
    sha = pair.target.sha256 or store.sha256(source)
    qualifying, known = qualifying_layouts(sha)
    if not qualifying:
        why = (
            "no layout of this file keeps its quality by edgespec's table"
            if known
            else "edgespec has no quality table for this file (edgespec models tune measures one)"
        )
        choice = Choice(PUBLISHED, why)
        record_choice(store.models_dir, sha, choice)
        return choice
    built: dict[str, Path] = {}
    for layout, _ in qualifying:
        model = derived_model(pair.target, sha, layout.name)
        if not store.verify(model):
            say(f"{layout.name}: building {store.path_for(model).name} with llama.cpp's quantizer")
        built[layout.name] = store.pull(model)
    tuner = Tuner(pair, source, None, say)
    try:
        original = tuner.measure(ORIGINAL, layouts.read_layout(source).text(), source, fidelity=False)
        for layout, quality in qualifying:
            tuner.measure(layout.name, layout.describe(), built[layout.name], quality, fidelity=False)
        tuner.retime()
    finally:
        tuner.close()
    best = recommend(tuner.rows, 1.0)
    for name, path in built.items():
        if best is None or name != best.layout:
            path.unlink(missing_ok=True)
    if best is None:
        choice = Choice(
            PUBLISHED, f"no layout that keeps its quality is {MARGIN - 1:.0%} faster on this machine for a typical call"
        )
    else:
        assert best.quality is not None
        choice = Choice(best.layout, why_chosen(best, original))
    record_choice(store.models_dir, sha, choice)
    return choice
