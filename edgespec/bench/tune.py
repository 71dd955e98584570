"""`edgespec models tune`: build candidate layouts of a pair's GGUF target, measure each against
the original, and recommend the fastest one that stays faithful.

Each candidate is measured three ways, all on this machine:
- its verify curve: seconds per target pass at every draft length auto may choose (the engine's own
  calibration, `Engine.measure_costs`);
- its fidelity: top-1 agreement and KL against the original on the calibration text shipped with
  the package (`fidelity.measure_fidelity`);
- the bench gain of `auto`: every candidate and the original run `ar` and `auto` on a few prompts,
  interleaved prompt by prompt (`modes.run_bench`), so that a candidate's `auto` is compared with
  its own `ar` and with the original's `ar`, which is what the user gains.

Where the pair's draft model has tensors llama.cpp does not repack, a faster layout of it is built
too (`layouts.DRAFT`) and every candidate drafts with it, as the tuned pair will. The draft's layout
costs no fidelity, so it also gets a row of its own: the original target with the faster draft
(`DRAFT_ONLY`). The original row keeps the original draft: it is the reference.

Candidate files live in the store under tuned/, named after the source's sha256 and the layout, so
running the tuner again reuses them.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.bench.modes import AR, Mode, run_bench
from edgespec.bench.report import summarize
from edgespec.bench.suites import BenchPrompt
from edgespec.decoding.controller import LONGEST_DRAFT
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.plan import KSetting
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import Engine
from edgespec.models import layouts
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.quality.fidelity import Fidelity, measure_fidelity
from edgespec.quality.noise_floor import calibration_tokens
from edgespec.util.errors import EdgespecError

ORIGINAL = "original"
DRAFT_ONLY = "draft-only"  # the original target with the tuned draft
AUTO = Mode("auto", DraftChoice.AUTO, KSetting("auto"))


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
    fidelity: Fidelity
    draft_ms: float | None  # one draft-model step, of the draft this row's pair uses (None: no draft)
    draft_path: Path | None  # that draft when it is the tuned one, else None
    gain: float | None = None  # auto vs its own ar, median of per-prompt ratios
    gain_vs_original: float | None = None  # auto vs the original's ar

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["path"] = str(self.path)
        d["draft_path"] = None if self.draft_path is None else str(self.draft_path)
        return d


def check_tunable(pair: PairConfig) -> None:
    if pair.backend != "llamacpp" or pair.target.format != "gguf":
        raise TuneError(f"pair {pair.name!r} is on {pair.backend}; tune works on GGUF targets of llama.cpp pairs")


def tuned_path(tuned_dir: Path, source_sha256: str, layout: str) -> Path:
    return tuned_dir / f"{source_sha256[:16]}-{layout}.gguf"


def check_space(folder: Path, needed: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
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


def recommend(rows: Sequence[Measured], min_agreement: float, margin: float = 1.03) -> Measured | None:
    """The fastest layout whose top-1 agreement is at least `min_agreement`: by the bench gain
    against the original's ar when the bench ran, else by plain decoding speed. None when none
    beats the original by `margin` (a gain within noise is not worth a less faithful model)."""

    def score(m: Measured) -> float:
        if m.gain_vs_original is not None:
            return m.gain_vs_original
        return rows[0].verify_ms[1] / m.verify_ms[1]

    original = next(m for m in rows if m.layout == ORIGINAL)
    eligible = [m for m in rows if m.layout != ORIGINAL and m.fidelity.agreement >= min_agreement]
    best = max(eligible, key=score, default=None)
    return best if best is not None and score(best) >= margin * score(original) else None


class Tuner:
    """Loads the pair's original target and draft once; measures each layout against them. With
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
        self.original = self._load(target_path)
        self.draft = self._load(draft_path) if draft_path is not None else None
        self.tuned_draft_path = tuned_draft_path
        self.tuned_draft = self._load(tuned_draft_path) if tuned_draft_path is not None else None
        self.tokens = calibration_tokens(self.original)
        self.engines: list[Engine] = []
        self.rows: list[Measured] = []

    def _load(self, path: Path) -> LlamaCppBackend:
        return LlamaCppBackend(path, self.pair.context, n_gpu_layers=self.pair.n_gpu_layers, threads=self.pair.threads)

    def measure(self, layout: str, what: str, path: Path) -> Measured:
        """Load `path` (the original target's file: the loaded original), time its curve and
        compare it with the original."""
        self.on_step(f"{layout}: loading")
        target = self.original if path == self.source else self._load(path)
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
        if target is self.original:
            fidelity, kept = Fidelity(1.0, 0.0, 0.0, len(self.tokens)), 1.0
        else:
            self.on_step(f"{layout}: comparing with the original")
            fidelity, kept = measure_fidelity(self.original, target, self.tokens), layouts.kept_share(self.source, path)
        row = Measured(
            layout,
            what,
            path,
            path.stat().st_size,
            kept,
            layouts.repacked_text(path, target.repacked),
            verify_ms,
            fidelity,
            draft_ms,
            self.tuned_draft_path if tuned else None,
        )
        self.rows.append(row)
        return row

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
