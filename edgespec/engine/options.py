"""The one door into the engine: what a front end asks for, checked, then opened.

    options = EngineOptions(pair="qwen2.5-coder-1.5b", draft=DraftChoice.NGRAM, cache=True)
    checked = options.check()  # the registry parsed once, every setting checked, nothing loaded
    engine, settings = checked.open()  # the pair loaded, its prompt cache and draft sources attached

Every front end, bench runner and benchmark opens its engine this way, and nothing else loads a
pair (the CLI builds the options from its flags, `cli/common.py`; `models tune` opens each layout
it measures around models it loaded once, `open(models=...)`). `check` is all a front end needs
before loading: the pair's context (what bounds a piped input), the refusal of a draft model the
pair lacks, the cache's and the history's budgets. `open` runs where the engine will run (chat
and serve call it on their `EngineThread`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgespec.constraints.guidance import ConstraintSpec
from edgespec.decoding.backend import Backend
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine import loading
from edgespec.engine.copy_sources import open_sources
from edgespec.engine.engine import Engine, GenerateSettings, require_draft_model
from edgespec.engine.prompt_cache import PromptCache, open_cache
from edgespec.engine.reply_history import history_budget
from edgespec.engine.repository import context_files
from edgespec.models.config import load_registry
from edgespec.models.registry import PairConfig


@dataclass(frozen=True)
class EngineOptions:
    """What the front ends share: the pair (None: the registry's default) from the registry with
    `config` laid over it, or a pair made already (a test's, a layout `models tune` measures; the
    registry then gives only the cache's and the history's budgets); the drafter and K, the sampling
    values given (None: the pair's default), the reply's length and constraint, and what replies
    read from beyond their prompt: the prompt cache (`cache`, with `cache_memory_entries` states per
    model kept in memory too), the history of earlier calls (`history`), `context` paths and, with
    `repository`, the git work tree around the current folder. Everything is off by default, as the
    bench wants it: its timings stay cold and no mode copies another's reply."""

    pair: str | PairConfig | None = None
    config: Path | None = None
    draft: DraftChoice = DraftChoice.AUTO
    policy: PolicyChoice = PolicyChoice("auto")  # --k
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    max_tokens: int = 512
    constraint: ConstraintSpec | None = None
    cache: bool = False
    cache_memory_entries: int = 0
    history: bool = False
    decode_again: bool = False  # a greedy request asked before decodes again, not served from the history
    live_timings: bool = False  # auto prices passes from each call's own timings (`GenerateSettings`)
    context: tuple[Path, ...] = ()
    repository: bool = False

    def check(self) -> CheckedOptions:
        """Every setting checked against the registry (parsed here, once), nothing loaded: the pair
        (NoDraftModel when `draft` asks for a draft model it lacks), the cache's and the history's
        budgets, the `context` paths (a bad one is a usage error now, not after a load)."""
        registry = load_registry(self.config)
        pair = self.pair if isinstance(self.pair, PairConfig) else registry.pair(self.pair)
        require_draft_model(pair.name, pair.draft is not None, self.draft)
        cache = open_cache(registry.cache_budget, self.cache_memory_entries) if self.cache else None
        history = history_budget(registry.history_budget) if self.history else None
        return CheckedOptions(self, pair, cache, history, tuple(context_files(self.context)))

    def settings(self, pair: PairConfig) -> GenerateSettings:
        """Each reply's settings on `pair`: its default sampling with the values given laid over it."""
        return GenerateSettings.build(
            self.max_tokens,
            pair.sampling,
            self.draft,
            self.policy,
            self.constraint,
            given=self,
            decode_again=self.decode_again,
            live_timings=self.live_timings,
        )


@dataclass(frozen=True)
class CheckedOptions:
    """`options` that passed `EngineOptions.check`: the pair as the registry has it (its `context`
    bounds what a front end may read before loading), the prompt cache (None: off) and the
    history's budget in tokens (None: no history)."""

    options: EngineOptions
    pair: PairConfig
    cache: PromptCache | None
    history_budget: int | None
    context_files: tuple[Path, ...] = ()  # the files `options.context` names, checked (`context_files`)

    def open(self, models: tuple[Backend, Backend | None] | None = None) -> tuple[Engine, GenerateSettings]:
        """Load the pair (the draft model only where `draft` may use it) with its prompt cache and
        draft sources, and each reply's settings on the pair as loaded. A failure after the load
        frees the models before it is raised.

        `models`: a target and a draft model (or None) loaded already, which the pair is opened
        around instead of loading its files; their caller closes them. `models tune` loads the
        original target and the draft once and measures every layout of the target with them."""
        options = self.options
        if models is None:
            engine = loading.load_engine(self.pair, options.draft, self.cache)
        else:
            engine = Engine(self.pair, *models, cache=self.cache)
        try:
            engine.sources = open_sources(engine.target, self.history_budget, self.context_files, options.repository)
        except BaseException:
            if models is None:
                engine.close()
            raise
        return engine, options.settings(engine.pair)
