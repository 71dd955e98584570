"""`edgespec models tune` and the layout `models pull` chooses: build candidate layouts of a pair's
GGUF target, measure each on this machine, and pick the one a typical call runs fastest with,
among those that keep the published file's quality.

Quality belongs to the file, speed to the machine:
- quality: for a published file edgespec ships a table (data/layout_quality.json, made by
  benchmarks/layout_quality.py: perplexity on held-out text against the published file, and the
  rule of `quality/perplexity.py`). Only the layouts it qualifies are built on a user's machine.
  For a file the table does not know, `models tune` measures it here on the same text (minutes
  per layout); the old gate, top-1 agreement with the original on the calibration text, remains
  for `--min-agreement`.
- speed, the whole call as the objective: a candidate's prompt reading (tokens per second over a
  512-token batch) and its verify curve (seconds per target pass at every draft length auto may
  choose, `Engine.measure_costs`) predict a typical call: reading PROMPT_TOKENS, then decoding
  REPLY_TOKENS with the rounds `auto` ran on the development set (data/auto_rounds.json) replayed
  on the candidate's curve. A flatter curve lets auto draft more than those rounds did, so the
  prediction is conservative for it.
- `--prompts N` adds the bench gain of `auto` on a few code-edit prompts, interleaved across every
  layout, against its own `ar` and the original's `ar`.

Candidate files live in the store under tuned/, named after the source's sha256 and the layout,
the derived models of `models.machine_layout.derived_model`, so a pull or a tune reuses them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.bench.modes import AR, Mode, run_bench
from edgespec.bench.report import summarize
from edgespec.bench.suites import BenchPrompt
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.controller import LONGEST_DRAFT
from edgespec.decoding.policy.plan import KSetting
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import Engine
from edgespec.models import layouts
from edgespec.models.machine_layout import PUBLISHED, Choice, derived_model, record_choice
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.models.store import Store
from edgespec.quality.fidelity import Fidelity, measure_fidelity
from edgespec.quality.noise_floor import calibration_tokens
from edgespec.quality.perplexity import Quality, shipped_quality
from edgespec.util.errors import EdgespecError
from edgespec.util.paths import private_folder

ORIGINAL = "original"
DRAFT_ONLY = "draft-only"  # the original target with the tuned draft
AUTO = Mode("auto", DraftChoice.AUTO, KSetting("auto"))
READ_PROBE = 512  # tokens read in one batch to time prompt reading (llama.cpp's batch size here)
PROMPT_TOKENS = 1024  # a typical call's prompt: a file of a few hundred lines and an instruction
REPLY_TOKENS = 200
MARGIN = 1.03  # a layout must predict a call this much faster than the original to be chosen
RETIME_ROUNDS = 2  # rounds of timing every layout again, in turn (`Tuner.retime`)
ROUNDS = files("edgespec") / "data" / "auto_rounds.json"


class TuneError(EdgespecError):
    """A pair that cannot be tuned, or no room for the candidates."""


@dataclass
class Measured:
    """One layout's figures (the original is measured the same way, as the reference)."""

    layout: str
    what: str
    path: Path
    size: int
    kept: float  # share of the original's weight bytes kept unchanged
    repacked: str  # what llama.cpp repacked of it at load (`layouts.repacked_text`)
    verify_ms: dict[int, float]  # target pass over n tokens, at every n auto may verify
    read_tok_s: float  # prompt reading, tokens per second in one READ_PROBE batch
    fidelity: Fidelity | None  # top-1 / KL against the original on the calibration text (None: not measured)
    draft_ms: float | None  # one draft-model step, of the draft this row's pair uses (None: no draft)
    draft_path: Path | None  # that draft when it is the tuned one, else None
    quality: Quality | None = None  # against the published file on held-out text (shipped or measured)
    gain: float | None = None  # auto vs its own ar, median of per-prompt ratios
    gain_vs_original: float | None = None  # auto vs the original's ar

    @property
    def call_s(self) -> float:
        """The predicted seconds of a typical call (module docstring)."""
        return typical_call_s(self.verify_ms, self.read_tok_s)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["path"] = str(self.path)
        d["draft_path"] = None if self.draft_path is None else str(self.draft_path)
        d["quality"] = None if self.quality is None else self.quality.to_dict()
        d["call_s"] = self.call_s
        return d


@functools.cache
def _typical_rounds() -> dict:
    """The development set's `auto` rounds, read once: every row's predicted call prices them."""
    return json.loads(ROUNDS.read_text())


def typical_call_s(verify_ms: dict[int, float], read_tok_s: float) -> float:
    """Reading PROMPT_TOKENS at `read_tok_s`, then REPLY_TOKENS decoded in the development set's
    `auto` rounds, each priced at the curve's cost of its pass (k drafted tokens: a pass over k+1)."""
    rounds = _typical_rounds()
    longest = max(verify_ms)
    passes_s = sum(n * verify_ms[min(int(k) + 1, longest)] / 1000 for k, n in rounds["passes_by_k"].items())
    return PROMPT_TOKENS / read_tok_s + passes_s * REPLY_TOKENS / rounds["tokens"]


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


def eligible(m: Measured, min_agreement: float) -> bool:
    """Quality first by the held-out rule where it is known, else by agreement with the original."""
    if m.quality is not None:
        return m.quality.qualifies
    return m.fidelity is not None and m.fidelity.agreement >= min_agreement


def recommend(rows: Sequence[Measured], min_agreement: float, margin: float = MARGIN) -> Measured | None:
    """The eligible layout a typical call is fastest with: by the bench gain against the original's
    ar when the bench ran, else by the predicted call. None when none beats the original by
    `margin` (a gain within noise is not worth a file that is not the published one)."""

    def score(m: Measured) -> float:
        if m.gain_vs_original is not None:
            return m.gain_vs_original
        return rows[0].call_s / m.call_s

    original = next(m for m in rows if m.layout == ORIGINAL)
    candidates = [m for m in rows if m.layout != ORIGINAL and eligible(m, min_agreement)]
    best = max(candidates, key=score, default=None)
    return best if best is not None and score(best) >= margin * score(original) else None


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
        engine = Engine(
            dataclasses.replace(self.pair, name=layout, target=spec), target, self.tuned_draft if tuned else self.draft
        )
        self.engines.append(engine)
        self.on_step(f"{layout}: timing verification")
        costs = engine.measure_costs()
        verify_ms = {n: costs.verify(n) * 1000 for n in range(1, LONGEST_DRAFT + 2)}
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
            verify_ms,
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
            for row, engine in zip(self.rows, self.engines, strict=True):
                self.on_step(f"{row.layout}: timing again, round {i + 2} of {rounds + 1}")
                for backend in (engine.target, engine.draft):  # as the first round found them: empty
                    if backend is not None:
                        backend.truncate(0)
                costs = engine.measure_costs()
                row.verify_ms = {n: min(row.verify_ms[n], costs.verify(n) * 1000) for n in row.verify_ms}
                row.read_tok_s = max(row.read_tok_s, _read_rate(engine.target))
        for row in self.rows:
            self.on_step(
                f"{row.layout}: reads {row.read_tok_s:.0f} tok/s, verifies 1/4/16 tokens in "
                f"{row.verify_ms[1]:.0f}/{row.verify_ms[4]:.0f}/{row.verify_ms[16]:.0f} ms, "
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
        for engine in self.engines:
            if engine.target is not self.original:
                engine.target.close()
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


_CANDIDATE_NAMES = {c.name for c in layouts.CANDIDATES}


def qualifying_layouts(source_sha256: str) -> tuple[list[tuple[layouts.Layout, Quality]], int]:
    """The candidates the shipped quality table qualifies for this source file, best quality first,
    and how many it knows of (0: the file is not in the table)."""
    table = shipped_quality(source_sha256)
    ok = [(layouts.candidate(name), q) for name, q in table.items() if q.qualifies and name in _CANDIDATE_NAMES]
    return sorted(ok, key=lambda lq: lq[1].ratio_high), len(table)


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


def why_chosen(best: Measured, original: Measured) -> str:
    """One line for `edgespec models`: the speed on this machine and the quality of the file."""
    quality = "" if best.quality is None else f"; quality against the published file: {best.quality.text()}"
    return (
        f"a typical call {original.call_s / best.call_s:.2f}x faster on this machine (reads "
        f"{best.read_tok_s / original.read_tok_s:.2f}x, verifies 4 tokens in {best.verify_ms[4]:.0f} ms "
        f"against {original.verify_ms[4]:.0f}){quality}"
    )
