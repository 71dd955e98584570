"""A bench comparison, as `edgespec bench` runs it: decoding modes of one or more pairs on a suite
of prompts, interleaved (`modes.run_bench`), with the targets' noise floors that tell a greedy
output's parting from ar at a near-tie from a bug.

`plan` checks everything it can before any model loads: the pairs and their draft models, every
mode against every pair, every prompt against every pair's context. `run` loads the pairs, measures
and returns a `BenchReport`: rows, their summary, the noise floors and the run's metadata (what made
the figures). A signal part way returns the rows finished, marked interrupted. No mode drafts from
earlier calls (the history), so every generation sees the same state; `context` gives every mode
the same corpus to copy from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from edgespec.bench import modes as bench_modes
from edgespec.bench import report
from edgespec.bench import suites as bench_suites
from edgespec.bench.modes import Mode, Row
from edgespec.bench.partial_results import until_interrupted
from edgespec.bench.suites import BenchPrompt
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import Engine, require_draft_model
from edgespec.engine.options import CheckedOptions, EngineOptions
from edgespec.models.registry import PairConfig
from edgespec.quality.noise_floor import NoiseFloor
from edgespec.util.errors import UsageError
from edgespec.util.provenance import input_name, provenance


@dataclass(frozen=True)
class BenchPlan:
    """What a bench runs, checked: each pair in every mode on every prompt, `repeats` times. Each
    pair is opened through the engine's door with no cache and no history, the --context corpus
    attached."""

    doors: list[CheckedOptions]
    modes: list[Mode]
    prompts: list[BenchPrompt]
    sampling: SamplingParams
    suite: Path
    context: tuple[Path, ...]
    repeats: int
    strict: bool

    @property
    def pairs(self) -> list[PairConfig]:
        return [door.pair for door in self.doors]


@dataclass
class BenchReport:
    """The rows a bench finished, their summary (`report.summarize`), the targets' noise floors by
    pair (empty where none was needed) and the run's metadata, as `--json` writes them."""

    rows: list[Row]
    summary: list[dict]
    floors: dict[str, NoiseFloor]
    meta: dict
    interrupted: bool


class Watcher(Protocol):
    """What a bench tells the user while it runs."""

    def loaded(self, line: str) -> None:
        """What a model just loaded runs as (`modes.layout_lines`)."""

    def stage(self, description: str, total: int | None) -> None:
        """A new stage, of `total` steps (None: one step of unknown length)."""

    def row(self, row: Row) -> None:
        """One step of the bench stage: a generation measured."""


def plan(
    *,
    suite_path: Path | None,
    pairs: Sequence[str],
    config: Path | None,
    modes: str,
    drafter: str | None,
    limit: int | None,
    suites: str | None,
    repeats: int,
    temperature: float,
    seed: int,
    strict: bool,
    context: tuple[Path, ...],
) -> BenchPlan:
    """The bench the command's options ask for (named as the options are), refused in one line
    before anything loads where a pair, a mode or a prompt cannot run."""
    if strict and temperature > 0:
        raise UsageError("--strict checks greedy outputs against ar; use it with --temperature 0")
    path = suite_path or bench_suites.DEV_SET
    names = dict.fromkeys(pairs or (None,))
    doors = [EngineOptions(pair=name, config=config, context=context).check() for name in names]
    pair_configs = [door.pair for door in doors]
    all_drafted = all(p.draft is not None for p in pair_configs)
    default_drafter = DraftChoice(drafter) if drafter else (DraftChoice.MODEL if all_drafted else DraftChoice.NGRAM)
    mode_list = bench_modes.parse_modes(modes, default_drafter)
    sampling = SamplingParams(temperature=temperature, seed=seed)
    for pair_config in pair_configs:  # every pair can run every mode, or nothing loads
        bench_modes.check_modes(pair_config, mode_list, sampling)
        for mode in mode_list:
            require_draft_model(pair_config.name, pair_config.draft is not None, mode.draft)
    # every prompt must fit every pair's context
    prompts = bench_suites.select(bench_suites.load_suite(path, min(p.context for p in pair_configs)), limit, suites)
    bench_modes.check_prompts(mode_list, prompts)
    return BenchPlan(doors, mode_list, prompts, sampling, path, context, repeats, strict)


def run(plan: BenchPlan, watcher: Watcher) -> BenchReport:
    """Load the pairs (closed again before it returns), measure their noise floors where a greedy
    parting may need explaining, and run the bench."""
    engines: list[Engine] = []
    rows: list[Row] = []
    floors: dict[str, NoiseFloor] = {}

    def measure() -> None:
        for door in plan.doors:
            engine, _ = door.open()
            engines.append(engine)
            for line in bench_modes.layout_lines(engine):
                watcher.loaded(line)
        if bench_modes.needs_noise_floor(plan.modes, plan.sampling):  # what tells a parting from a bug
            watcher.stage("measuring the targets' noise floors (once per model)", None)
            floors.update({engine.pair.name: engine.noise_floor() for engine in engines})
        watcher.stage("bench", len(plan.prompts) * len(plan.modes) * plan.repeats * len(engines))

        def on_row(row: Row) -> None:
            rows.append(row)
            watcher.row(row)

        bench_modes.run_bench(engines, plan.prompts, plan.modes, plan.sampling, on_row, plan.repeats)

    def close() -> None:
        for engine in engines:
            engine.close()

    interrupted = until_interrupted(measure, close)
    if not rows:
        return BenchReport(rows, [], floors, {}, interrupted)
    return BenchReport(rows, report.summarize(rows), floors, _meta(plan, engines, floors, interrupted), interrupted)


def _meta(plan: BenchPlan, engines: list[Engine], floors: dict[str, NoiseFloor], interrupted: bool) -> dict:
    """What made the figures: the command, code and machine (`provenance`), and the bench's settings."""
    return {
        **provenance(),
        "pairs": [p.name for p in plan.pairs],
        # the model each pair's target was read from: a layout chosen for this machine is another file
        "targets": {e.pair.name: e.pair.target.name for e in engines},
        "suite": input_name(plan.suite),
        "context": [input_name(c) for c in plan.context],
        "modes": [m.name for m in plan.modes],
        "temperature": plan.sampling.temperature,
        "seed": plan.sampling.seed,
        "repeats": plan.repeats,
        "interrupted": interrupted,
        "noise_floors": {pair: floor.to_dict() for pair, floor in floors.items()},
        # what a verify pass costs by its length on this machine: what bounds auto's ratios
        "verify_ms": {e.pair.name: report.verify_ms(e.costs.quiet_curve()) for e in engines if e.costs.calibrated},
    }
