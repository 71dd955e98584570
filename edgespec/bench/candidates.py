"""Candidate layouts of a pair's GGUF target, built and measured on this machine.

A candidate is made by llama.cpp's quantizer from the pair's target (`models.layouts`). Candidate
files live in the store under tuned/, named after the source's sha256 and the layout, the derived
models of `models.machine_layout.derived_model`, so a pull or a tune reuses them. The `Tuner` loads
the original once and measures each candidate against it: the verify curve and prompt reading that
`layout_ranking` turns into a typical call, the fidelity to the original, and with prompts, the
bench gain of `auto`, interleaved across every layout.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.bench.layout_ranking import ORIGINAL, Measured
from edgespec.bench.modes import AR, Mode, run_bench
from edgespec.bench.report import summarize
from edgespec.bench.suites import BenchPrompt
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import Engine
from edgespec.engine.options import EngineOptions
from edgespec.models import layouts
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.quality.fidelity import Fidelity, measure_fidelity
from edgespec.quality.noise_floor import calibration_tokens
from edgespec.quality.perplexity import Quality
from edgespec.util.errors import EdgespecError
from edgespec.util.paths import private_folder

AUTO = Mode("auto", DraftChoice.AUTO, PolicyChoice("auto"))
READ_PROBE = 512  # tokens read in one batch to time prompt reading (llama.cpp's batch size here)
RETIME_ROUNDS = 2  # rounds of timing every layout again, in turn (`Tuner.retime`)


class TuneError(EdgespecError):
    """A pair that cannot be tuned, or no room for the candidates."""


def check_tunable(pair: PairConfig) -> None:
    if pair.backend != "llamacpp" or pair.target.format != "gguf":
        raise TuneError(f"pair {pair.name!r} is on {pair.backend}; tune works on GGUF targets of llama.cpp pairs")


def tuned_path(tuned_dir: Path, source_sha256: str, layout: str) -> Path:
    return tuned_dir / f"{source_sha256[:16]}-{layout}.gguf"


def check_space(folder: Path, needed: int) -> None:
    private_folder(folder)
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise TuneError(
            f"not enough space in {folder}: a candidate needs about {needed / 1e9:.1f} GB, {free / 1e9:.1f} GB free"
        )


def build_candidate(source: Path, dest: Path, layout: layouts.Layout) -> Path:
    """The candidate file, built unless a finished one is already there."""
    if not dest.is_file():
        check_space(dest.parent, int(source.stat().st_size * 1.1))
        layouts.build(source, dest, layout)
    return dest


class Tuner:
    """Loads the pair's original target (and draft) once; measures each layout against them. With
    `tuned_draft_path`, every candidate drafts with that draft instead."""

    def __init__(
        self,
        pair: PairConfig,
        target_path: Path,
        draft_path: Path | None,
        on_step: Callable[[str], None] = lambda text: None,
        tuned_draft_path: Path | None = None,
    ):
        self.pair, self.source, self.on_step = pair, target_path, on_step
        self.original = self.load(target_path)
        self.draft = self.load(draft_path) if draft_path is not None else None
        self.tuned_draft_path = tuned_draft_path
        self.tuned_draft = self.load(tuned_draft_path) if tuned_draft_path is not None else None
        self.engines: list[Engine] = []
        self.targets: list[LlamaCppBackend] = []  # each engine's target, as loaded here
        self.rows: list[Measured] = []

    def load(self, path: Path) -> LlamaCppBackend:
        """A model file of this pair, loaded as the pair loads its target."""
        return LlamaCppBackend(path, self.pair.context, n_gpu_layers=self.pair.n_gpu_layers, threads=self.pair.threads)

    def measure(
        self, layout: str, what: str, path: Path, quality: Quality | None = None, fidelity: bool = True
    ) -> Measured:
        """Load `path` (the original target's file: the loaded original), time its curve and its
        prompt reading; with `fidelity`, compare it with the original on the calibration text."""
        self.on_step(f"{layout}: loading")
        target = self.original if path == self.source else self.load(path)
        tuned = self.tuned_draft is not None and layout != ORIGINAL
        spec = ModelSpec(name=f"{self.pair.target.name}-{layout}", format="gguf", path=path)
        checked = EngineOptions(pair=dataclasses.replace(self.pair, name=layout, target=spec)).check()
        engine, _ = checked.open(models=(target, self.tuned_draft if tuned else self.draft))
        self.engines.append(engine)
        self.targets.append(target)
        self.on_step(f"{layout}: timing verification")
        costs = engine.measure_costs()
        draft_ms = None if costs.draft_step is None or engine.draft is None else costs.draft_step * 1000
        self.on_step(f"{layout}: timing prompt reading")
        read_tok_s = _read_rate(target)
        measured_fidelity, kept = None, 1.0
        if target is self.original:
            measured_fidelity = Fidelity(1.0, 0.0, 0.0, 0)
        else:
            kept = layouts.kept_share(self.source, path)
            if fidelity:
                self.on_step(f"{layout}: comparing with the original")
                measured_fidelity = measure_fidelity(self.original, target, calibration_tokens(self.original))
        row = Measured(
            layout,
            what,
            path,
            path.stat().st_size,
            kept,
            layouts.repacked_text(path, target.repacked),
            costs.fixed_curve(),
            read_tok_s,
            measured_fidelity,
            draft_ms,
            self.tuned_draft_path if tuned else None,
            quality,
        )
        self.rows.append(row)
        return row

    def retime(self, rounds: int = RETIME_ROUNDS) -> None:
        """Time every measured layout again, `rounds` times in turn, keeping each one's fastest
        figures: timed one after another only once, a layout's figures were mostly the order it
        was timed in (on a 2-core VM the same two files swapped places between runs). A busy
        moment only ever adds time, so the fastest of interleaved rounds is each file's own."""
        for i in range(rounds):
            for row, engine, target in zip(self.rows, self.engines, self.targets, strict=True):
                self.on_step(f"{row.layout}: timing again, round {i + 2} of {rounds + 1}")
                for backend in (engine.target, engine.draft):  # as the first round found them: empty
                    if backend is not None:
                        backend.truncate(0)
                row.curve = engine.measure_costs().fixed_curve()  # each size's fastest session (`quiet.py`)
                row.read_tok_s = max(row.read_tok_s, _read_rate(target))
        for row in self.rows:
            self.on_step(
                f"{row.layout}: reads {row.read_tok_s:.0f} tok/s, verifies 1/4/16 tokens in "
                f"{row.pass_ms(1):.0f}/{row.pass_ms(4):.0f}/{row.pass_ms(16):.0f} ms, "
                f"a typical call {row.call_s:.1f} s"
            )

    def bench(self, prompts: list[BenchPrompt], on_row=lambda row: None) -> None:
        """ar and auto on every measured layout, interleaved prompt by prompt; fills in the gains."""
        if not prompts:
            return
        modes = [AR, AUTO]
        rows = run_bench(self.engines, prompts, modes, SamplingParams(), on_row)
        by_layout = {s["pair"]: s for s in summarize(rows) if s["mode"] == AUTO.name}
        for m in self.rows:
            m.gain = by_layout[m.layout]["speedup_vs_ar"]
            m.gain_vs_original = by_layout[m.layout].get("speedup_vs_first_ar", m.gain)

    def close(self) -> None:
        for target in self.targets:
            if target is not self.original:
                target.close()
        self.original.close()
        for draft in (self.draft, self.tuned_draft):
            if draft is not None:
                draft.close()


def _read_rate(target: LlamaCppBackend) -> float:
    """Tokens per second reading READ_PROBE tokens in one batch from an empty cache (the cache is
    left empty); the faster of two readings, as a busy moment only ever adds time."""
    n = min(READ_PROBE, target.n_ctx - 1)
    best = float("inf")
    for _ in range(2):
        target.truncate(0)
        t0 = time.perf_counter()
        target.eval([0] * n, 1)
        best = min(best, time.perf_counter() - t0)
    target.truncate(0)
    return n / best
