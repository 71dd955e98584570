"""A loaded pair, ready to generate: the one object the CLI, the TUI and the bench drive.

    engine, settings = EngineOptions(pair="qwen2.5-coder-1.5b", max_tokens=256).check().open()
    for event in engine.chat(messages, settings, cancel=threading.Event()):
        ...  # Token / Step / Summary from edgespec.decoding.events

(`EngineOptions`: the one door, `edgespec.engine.options`; the loading itself: `loading.py`.)

`chat` and `generate_tokens` are generators; they may run in a worker thread and be stopped with `cancel`
(checked once per target pass; the generator then ends with a Summary whose stop_reason is
"cancelled"). The engine keeps its caches between calls, so a chat's earlier turns are not
re-evaluated, and its cost measurements, so the controller starts warm on the next reply. With a
prompt cache (`cache=`, passed by the front ends that serve a user, never by the bench), it also
loads what an earlier process read of the same prompt before reading it, and saves what it read
after each reply (`edgespec.engine.prompt_cache`). What it measures once per machine and pair (the
cost curve, the target's noise floor) is kept in files between runs (`decoding/costs/saved.py`,
`kept_measurements.py`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast

from edgespec.constraints.guidance import ConstraintSpec, GuidanceMatcher, Tokenizer, guidance_tokenizer
from edgespec.decoding.backend import Backend, Placement, ThreadedBackend
from edgespec.decoding.copying.ngram import NgramDrafter
from edgespec.decoding.copying.source_copy import SourceCopy
from edgespec.decoding.costs.keeper import CurveKeeper
from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.costs.saved import CALIBRATION_VERSION
from edgespec.decoding.costs.steady import SteadyCosts
from edgespec.decoding.costs.thread_count import ThreadPolicy
from edgespec.decoding.decoder import SpeculativeDecoder
from edgespec.decoding.drafters import DraftChoice, Drafter
from edgespec.decoding.events import Event, Summary, Token
from edgespec.decoding.model_drafter import ModelDrafter
from edgespec.decoding.policy.controller import make_policy
from edgespec.decoding.policy.plan import Policy, PolicyChoice
from edgespec.decoding.sampling import SamplingParams, sampling_from_flags
from edgespec.engine.call_figures import CallFigures
from edgespec.engine.copy_sources import DraftSources
from edgespec.engine.kept_measurements import NOISE_FLOOR_VERSION, read_noise_floor, runtime_key, save_noise_floor
from edgespec.engine.prompt_cache import PromptCache
from edgespec.engine.prompt_cache import _to_stderr as say_on_stderr
from edgespec.engine.read_ahead import ReadAheadCredit, Reading, read_whole_chunks
from edgespec.engine.same_reply import kept_request, model_identity, request_digest, served_again
from edgespec.models.registry import PairConfig
from edgespec.quality.noise_floor import NoiseFloor, calibration_tokens, measure_noise_floor
from edgespec.util.errors import SettingError
from edgespec.util.hardware import OtherLoad, physical_cores


class Sampled(Protocol):
    """The sampling values a front end was given: the command line's flags (`EngineOptions`) or a
    request's body (the server's schemas map their API's own fields to these, once); None where a
    value was not given."""

    @property
    def temperature(self) -> float | None: ...
    @property
    def top_p(self) -> float | None: ...
    @property
    def top_k(self) -> int | None: ...
    @property
    def min_p(self) -> float | None: ...
    @property
    def seed(self) -> int | None: ...


@dataclass(frozen=True)
class GenerateSettings:
    """One reply's settings. Front ends, the bench and the benchmarks make them with `build`; the
    defaults here serve tests that name only what they vary."""

    max_tokens: int = 512
    sampling: SamplingParams = field(default_factory=SamplingParams)
    draft: DraftChoice = DraftChoice.AUTO
    policy: PolicyChoice = PolicyChoice("auto")
    constraint: ConstraintSpec | None = None  # what the reply must match (compiled over the target's vocabulary)
    earlier_reply: str | None = None  # the reply this one replaces (a regenerate): drafted from, DrafterKind.REPLACED
    # a greedy request asked before: decode it again (drafting from the earlier reply) rather than serve
    # that reply again from the history (`same_reply.py`)
    decode_again: bool = False
    # auto prices passes from this call's own timings (the live curve) rather than the steady curve
    # fixed between calibrations (`decoding/costs/steady_curve.py`): it follows a busy moment, but the
    # same greedy request may then make other passes and part at a near-tie (docs/run.md)
    live_timings: bool = False

    @classmethod
    def build(
        cls,
        max_tokens: int,
        sampling: SamplingParams,
        draft: DraftChoice,
        policy: PolicyChoice,
        constraint: ConstraintSpec | None = None,
        *,
        given: Sampled | None = None,
        decode_again: bool = False,
        live_timings: bool = False,
    ) -> GenerateSettings:
        """The one place a reply's settings are made, from the flags (`EngineOptions.settings`), a
        server request's fields (`server/queued.py`) or a bench mode: its length in tokens, the
        sampling values `given` (the flags', a request's) laid over `sampling` (the pair's default,
        or the server's), the drafter and the policy choosing K, the constraint, whether a greedy
        request asked before decodes again rather than being served from the history, and whether
        auto prices passes from the call's own timings."""
        if given is not None:
            sampling = sampling_from_flags(
                sampling, given.temperature, given.top_p, given.top_k, given.min_p, given.seed
            )
        return cls(
            max_tokens, sampling, draft, policy, constraint, decode_again=decode_again, live_timings=live_timings
        )


class NoDraftModel(SettingError):
    """--draft model on a pair without a draft model."""

    def __init__(self, pair: str):
        super().__init__(f"pair {pair!r} has no draft model; draft with ngram or none", setting="draft")


def require_draft_model(pair: str, has_draft_model: bool, draft: DraftChoice) -> None:
    """NoDraftModel when `draft` asks for a draft model that is not there. One rule, asked of the
    registry's pair before anything loads (`EngineOptions.check`) and of the loaded engine at each
    generation (a pair opened without its draft model)."""
    if DraftChoice(draft) is DraftChoice.MODEL and not has_draft_model:
        raise NoDraftModel(pair)


class Engine:
    """A target backend, an optional draft-model backend, and the drafters built on them."""

    def __init__(
        self,
        pair: PairConfig,
        target: Backend,
        draft: Backend | None = None,
        load_s: dict[str, float] | None = None,
        cache: PromptCache | None = None,
        sources: DraftSources | None = None,
    ):
        self.pair, self.target, self.draft, self.cache = pair, target, draft, cache
        # what calls copy from beyond their own text (history, retries, the repository); the bench
        # swaps it per measured call, so every mode sees the same state
        self.sources = sources if sources is not None else DraftSources()
        self.n_ctx = target.n_ctx
        self._drafters: list[Drafter] = [NgramDrafter(source_copy=SourceCopy(target))]
        if draft is not None:
            self._drafters.append(ModelDrafter(draft, window=pair.draft_window or None, before_read=self.read_hook))
        self._policies: dict[tuple[DraftChoice, PolicyChoice], Policy] = {}
        self.costs = CostModel()  # shared by every policy, and every pass refines it: the hardware does not change
        # where each model ran at load: what measurements are keyed by, while the thread count moves
        self._loaded_placements = self.placements()
        self.threads = thread_policy(pair, target, draft, self.costs)
        # where the engine says what the user waits for (a calibration) or should know (one that
        # live passes contradicted): stderr, or the chat app's notifications
        self.notice: Callable[[str], None] = say_on_stderr
        # the curve's life: restored or measured, refined, judged, measured again (`decoding/costs/keeper.py`)
        self._curve = CurveKeeper(
            self.costs, self._calibration_key, target, draft, pair.name, lambda line: self.notice(line)
        )
        self._noise_floor: NoiseFloor | None = None
        self._tokenizer: Tokenizer | None = None  # llguidance's view of the target's vocabulary, built once
        # seconds `EngineOptions.open` spent per part of the load: "check" (the model files' size and
        # sha256, hashed once per file version), "target" and "draft" (each model's load)
        self.load_s = load_s or {}
        self.read_ahead_kept = ReadAheadCredit()  # what read_ahead read, until a reply keeps it
        self._model_identity: str | None = None  # the target, as a request's digest names it (made once)

    def chat(
        self, messages: Sequence[dict], settings: GenerateSettings, cancel: threading.Event | None = None
    ) -> Iterator[Event]:
        return self.generate_tokens(self.chat_tokens(messages), settings, cancel)

    def chat_tokens(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> list[int]:
        return self.target.tokenize(self.target.chat_prompt(messages, tools), special=True)

    def count_tokens(self, messages: Sequence[dict]) -> int:
        """Tokens the chat prompt for `messages` takes (for a context-fill gauge and trimming)."""
        return len(self.chat_tokens(messages))

    def token_text(self, token_id: int) -> str:
        """A token's text on its own (for showing rejected drafts)."""
        return self.target.token_bytes(token_id).decode("utf-8", "replace")

    def generate_tokens(
        self, prompt: list[int], settings: GenerateSettings, cancel: threading.Event | None = None
    ) -> Iterator[Event]:
        """Generate after already-tokenized input (what `chat` ends in). A greedy request the history
        holds a whole reply to is answered with that reply (`same_reply.py`)."""
        start = time.perf_counter()
        draft = DraftChoice(settings.draft)
        require_draft_model(self.pair.name, self.draft is not None, draft)
        request = self._request(settings)
        earlier = self.sources.same_reply(prompt, request) if request is not None else None
        if earlier is not None:
            return served_again(self.target, prompt, earlier, settings.max_tokens, cancel, start)
        drafters = [d for d in self._drafters if d.kind in draft.kinds]
        replaced = self.target.tokenize(settings.earlier_reply, special=False) if settings.earlier_reply else []
        copying = self.sources.drafters(prompt, draft.kinds, replaced)
        if settings.policy.cost_aware:
            self._curve.before_reply()
        constraint = self.constraint(settings.constraint) if settings.constraint is not None else None
        steady = self._steady(settings, request)
        if self.threads is not None:
            self.threads.holding = steady
        for model in (d for d in drafters if isinstance(d, ModelDrafter)):
            model.as_new = steady
        decoder = SpeculativeDecoder(self.target, self._policy(settings, steady), [*drafters, *copying], self.threads)
        events = decoder.generate(prompt, settings.max_tokens, settings.sampling, cancel, constraint)
        return self._generation(prompt, events, CallFigures(copying), request)

    def _request(self, settings: GenerateSettings) -> bytes | None:
        """The digest of the request (`same_reply.request_digest`), with a history to keep it in."""
        if self.sources.history is None:
            return None
        if self._model_identity is None:
            self._model_identity = model_identity(self.pair, self._loaded_placements, self.target)
        return request_digest(self._model_identity, self.n_ctx, settings)

    def _generation(
        self, prompt: list[int], events: Iterator[Event], figures: CallFigures, request: bytes | None
    ) -> Iterator[Event]:
        """The call's events: the decoder's (`events`, which start once the target is warmed from
        the prompt cache), its Summary built once with what the call did around it (`figures`).
        The reply is added to the history before its Summary goes out (a reply cut short too: the
        user saw it; a whole one to `request` is served again); the models' states are saved to
        the prompt cache after it (the reply is complete on screen while they are written); what
        the passes taught the cost curve is saved last, also when the caller stops early or the
        reply fails (the passes it made were real)."""
        try:
            figures.warm_s = self._warm(prompt)
            figures.read_ahead = self.read_ahead_kept.take()
            reply: list[int] = []
            for event in events:
                if isinstance(event, Token):
                    reply.append(event.id)
                elif isinstance(event, Summary):
                    figures.history_append_s = self.sources.record(prompt, reply, kept_request(request, event))
                    event = figures.summary(event)
                yield event
            if self.cache is not None:
                for backend in (self.target, self.draft):
                    if backend is not None:
                        self.cache.save(backend)
        finally:
            self.keep_costs()

    def _warm(self, prompt: list[int]) -> float:
        """Seconds spent loading the longest saved prefix of `prompt` into the target from the prompt
        cache (0 without one); a state it loads replaces what the target read ahead."""
        if self.cache is None:
            return 0.0
        start = time.perf_counter()
        if self.read_hook(self.target, prompt):
            self.read_ahead_kept.forget()
        return time.perf_counter() - start

    def constraint(self, spec: ConstraintSpec) -> GuidanceMatcher:
        """A fresh matcher of `spec` over the target's vocabulary (ConstraintError when it cannot be
        enforced), compiled from the grammar its check built (`ConstraintSpec.grammar`). The
        vocabulary's tokenizer is built at the first constraint and kept."""
        grammar = spec.grammar
        if self._tokenizer is None:
            self._tokenizer = guidance_tokenizer(self.target)
        return GuidanceMatcher(self._tokenizer, grammar)

    def read_hook(self, backend: Backend, tokens: Sequence[int]) -> int:
        """Called before a model reads `tokens` (the target here, the draft model from its drafter):
        loads the longest saved prefix of them from the prompt cache. Tokens it saved reading."""
        return self.cache.warm(backend, tokens) if self.cache is not None else 0

    def read_ahead(self, prompt: Sequence[int], cancel: threading.Event | None = None, save: bool = True) -> Reading:
        """Have the target hold the whole read chunks of a prompt yet to be asked (`read_ahead.py`),
        from the prompt cache where it has them; `save`: keep the state in the prompt cache too."""
        start = time.perf_counter()
        loaded = self.read_hook(self.target, prompt) if cancel is None or not cancel.is_set() else 0
        reading = read_whole_chunks(self.target, prompt, cancel, since=start)
        self.read_ahead_kept.add(reading, loaded > 0)
        if save and reading.read and self.cache is not None:
            self.cache.save(self.target)
        return reading

    def empty_caches(self) -> None:
        """Forget what the target and the draft model have read, so the next generation reads its whole prompt: a
        measurement of a cold call (the bench) must not reuse the previous one's cached prefix."""
        self.read_ahead_kept.forget()
        for backend in (self.target, self.draft):
            if backend is not None:
                backend.truncate(0)

    def placements(self) -> dict[str, Placement]:
        """Where each loaded model runs ("target", and "draft" when a draft model is loaded), as its
        runtime reported it at load."""
        loaded = {"target": self.target, "draft": self.draft}
        return {role: backend.placement for role, backend in loaded.items() if backend is not None}

    def decoding_threads(self) -> int:
        """CPU threads decoding keeps busy: the most any loaded model's passes use now (the thread policy may change it
        between passes), and at least one, the engine's own thread, which runs the decode loop between passes."""
        return max([1] + [p.cpu_threads for p in self.placements().values()])

    def _steady(self, settings: GenerateSettings, request: bytes | None) -> bool:
        """Whether this call's passes follow its text alone (the steady curve, a fresh policy, the
        models' own thread count): unless `live_timings`, wherever the history will not serve a
        repeat its earlier reply. Live timings are faster, most on a busy machine (docs/run.md)."""
        served_again = request is not None and settings.sampling.greedy and not settings.decode_again
        return not settings.live_timings and not served_again

    def _policy(self, settings: GenerateSettings, steady: bool) -> Policy:
        """With `steady`, a fresh policy for each call, pricing passes from the steady curve
        (`SteadyCosts`), so a call's passes follow its text alone: what a policy learnt in earlier calls
        would change them. Else one policy per (drafter, K) setting, kept across calls, live-priced."""
        if steady:
            costs = SteadyCosts(self.cost_model()) if settings.policy.cost_aware else self.costs
            return make_policy(settings.policy, settings.draft, costs)
        key = (settings.draft, settings.policy)
        if key not in self._policies:
            costs = self.cost_model() if settings.policy.cost_aware else self.costs
            self._policies[key] = make_policy(settings.policy, settings.draft, costs)
        return self._policies[key]

    def forget_policies(self) -> None:
        """The next calls start with fresh policies, as a new process does: nothing learnt before."""
        self._policies.clear()

    def cost_model(self, stop: threading.Event | None = None, quiet: bool = False) -> CostModel:
        """The cost curve of this pair on this machine: the saved calibration, or one measured now
        (raising CalibrationStopped within a pass of `stop` being set, if it is). `quiet`: the
        caller is at a quiet moment (a server before its first request), where a provisional curve
        is measured again (`decoding/costs/keeper.py`)."""
        return self._curve.cost_model(stop, quiet)

    def _calibration_key(self) -> str:
        """What the cost curve depends on: the models, the runtime and how it is run (and how it
        was calibrated, `CALIBRATION_VERSION`)."""
        key = runtime_key(self.pair, self._loaded_placements, (self.target, self.draft))
        return "|".join([CALIBRATION_VERSION, *key])

    def measure_costs(self) -> CostModel:
        """Time the target's verification at every length auto may draft, and a draft step; add
        them to the curve and save it (`models tune` measures each candidate layout this way,
        without a time limit: the longer passes too, or a copy would never draft past them)."""
        self._curve.measure()
        return self.costs

    def keep_costs(self) -> None:
        """Fold the live passes since the last call into the saved curve, after each reply and at
        close (`CurveKeeper.keep`)."""
        self._curve.keep()

    def _noise_floor_key(self) -> str:
        return "|".join([NOISE_FLOOR_VERSION, *runtime_key(self.pair, self._loaded_placements, (self.target,))])

    def saved_noise_floor(self) -> NoiseFloor | None:
        """The target's noise floor as measured by an earlier run, if any (a damaged entry is none)."""
        return read_noise_floor(self._noise_floor_key())

    def noise_floor(self) -> NoiseFloor:
        """How far the target's batched logits part from single steps (`quality/noise_floor.py`). Measured
        once per target file and runtime (about 10 s for the 1.5B target on a 2-core CPU) and kept
        in EDGESPEC_HOME/noise_floor.json. Empties the target's cache when it measures."""
        if self._noise_floor is None:
            self._noise_floor = self.saved_noise_floor()
        if self._noise_floor is None:
            self._noise_floor = measure_noise_floor(self.target, calibration_tokens(self.target))
            save_noise_floor(self._noise_floor_key(), self._noise_floor)
        return self._noise_floor

    def close(self) -> None:
        self.keep_costs()
        for backend in (self.target, self.draft):
            if backend is not None and hasattr(backend, "close"):
                backend.close()


def thread_policy(pair: PairConfig, target: Backend, draft: Backend | None, costs: CostModel) -> ThreadPolicy | None:
    """The thread count's policy for a pair whose models all run on the CPU on a runtime that can
    change it between passes (`ThreadedBackend`), on a machine with more than one core to choose
    from; None where the count stays as loaded: a pair whose `threads` pins it, a model on a GPU or
    whose placement its runtime did not report, a runtime without the call (transformers). The
    draft model follows the target's count."""
    models = [m for m in (target, draft) if m is not None]
    on_cpu = all(hasattr(m, "set_threads") and m.placement.device == "cpu" for m in models)
    cores = physical_cores()
    if pair.threads is not None or not on_cpu or cores < 2:
        return None
    threaded = cast(list[ThreadedBackend], models)

    def apply(n: int) -> None:
        for model in threaded:
            model.set_threads(n)

    return ThreadPolicy(cores, apply, costs, OtherLoad())
