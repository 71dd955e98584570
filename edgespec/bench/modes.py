"""`edgespec bench`: measured comparisons of decoding modes on a suite of prompts.

Modes run interleaved per prompt (ar, k2, ..., then the next prompt) so slow drift of a noisy
machine hits every mode alike; speedups are medians of per-prompt ratios against `ar` measured next
to them, both of the decoding alone and of the whole reply (reading the prompt, which gives the
first token, then decoding): the whole reply is what a user waits for. Every measured generation
starts cold (`Engine.empty_caches`): otherwise every mode but a prompt's first would find that
prompt already read. Several pairs (a tuned layout and its original) are interleaved the same way,
each prompt running every mode of every pair before the next, and each pair's speedups are given
both against its own `ar` and against the first pair's. With `repeats` > 1 each prompt runs the
whole interleaved round that many times and a prompt's speed in a mode is the median of its repeats:
on a small shared CPU one run of a prompt varies by several percent, as much as the differences
worth reporting (prompts where `auto` never drafted, so both modes did the same work, still spread
on either side of 1.0x).
Every figure comes from the engine's own event stream, as in `edgespec run`, except
those of `hf-assisted`: transformers' own `generate(assistant_model=...)` on the same pair and
prompts (hf backend only), the peer to beat, timed the same way (see `hf_assisted.assisted_generate`).
A prompt with a `response_format` decodes under it in every mode, and each reply is checked against
it (`structured_suite.reply_problem`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from edgespec.backends.hf import HFBackend
from edgespec.bench.hf_assisted import assisted_generate
from edgespec.bench.structured_suite import reply_problem
from edgespec.bench.suites import BenchPrompt
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Step, Summary, Token, WholeReply
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.models.layouts import describe_loaded
from edgespec.models.registry import PairConfig
from edgespec.quality.divergence import DIFF, Parting, Round, explain_parting, first_divergence
from edgespec.util.errors import EdgespecError, UsageError


@dataclass(frozen=True)
class Mode:
    """A named decoding setup: `ar` (plain), `kN`, `ngram-kN`, `model-kN`, `heuristic`, `auto`,
    `auto-chain` (auto drafting chains only: the baseline for its trees), or `hf-assisted`
    (transformers' generate with the draft model as assistant; `policy` is None)."""

    name: str
    draft: DraftChoice
    policy: PolicyChoice | None


HF_ASSISTED = "hf-assisted"
AR = Mode("ar", DraftChoice.NONE, PolicyChoice("fixed", 0))


@dataclass
class Row(WholeReply):
    id: str
    suite: str
    mode: str
    tokens: int
    decode_tokens_per_s: float
    drafted: int
    accepted: int
    target_passes: int
    matches_ar: bool | None
    first_divergence: int | None
    k_trace: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list, repr=False)
    repeat: int = 0  # which of the prompt's interleaved rounds
    pair: str = ""
    # Against ar: "exact", or where the output parted from it, TIE or DIFF (greedy modes of the
    # engine, see quality/divergence.py), or UNCHECKED (sampled output, or a peer's); None for ar itself.
    vs_ar: str | None = None
    parting: Parting | None = None
    # ar's greedy repeats against its first run of the prompt: the token where it parted from it
    # (plain decoding repeats its passes, so any parting means the host's numbers are not repeatable).
    ar_parted_at: int | None = None
    rounds: list[Round] = field(default_factory=list, repr=False)  # for explaining a parting
    # Where the reply's time went (seconds, see Summary): the first token, of which the target's
    # reading of the prompt (target_read_tokens of prompt_tokens evaluated); the draft model's
    # reading, while decoding; decoding. None: the mode does not say (hf-assisted's generate reads
    # inside its first pass).
    prompt_tokens: int = 0
    target_read_tokens: int = 0
    ttft_s: float = 0.0
    target_read_s: float | None = None
    draft_read_s: float | None = None
    decode_s: float = 0.0
    # Under a response_format: whether the reply parsed and validated, and if not why (None: no
    # constraint), and the seconds its matcher took (masks, following drafts), part of the times above.
    valid: bool | None = None
    invalid_reason: str | None = None
    constraint_s: float = 0.0
    # target passes per CPU thread count, where the engine chose the count per pass (empty: it did not)
    threads: dict[int, int] = field(default_factory=dict)


EXACT, UNCHECKED = "exact", "unchecked"


def parse_modes(text: str, default_drafter: DraftChoice) -> list[Mode]:
    """ "ar,k4,ngram-k8,heuristic,auto,hf-assisted" -> modes; `kN` and `heuristic` use `default_drafter`."""
    modes = []
    for name in (m.strip() for m in text.split(",") if m.strip()):
        if name == "ar":
            modes.append(AR)
        elif name in PolicyChoice.COST_AWARE:
            modes.append(Mode(name, DraftChoice.AUTO, PolicyChoice(name)))
        elif name == "heuristic":
            modes.append(Mode(name, default_drafter, PolicyChoice("heuristic")))
        elif name == HF_ASSISTED:
            modes.append(Mode(name, DraftChoice.MODEL, None))
        # ASCII digits, few of them: int() refuses thousands of digits (ValueError), and reads other scripts' digits
        elif (m := re.fullmatch(r"(?:(ngram|model)-)?k([0-9]{1,4})", name)) and int(
            m.group(2)
        ) <= PolicyChoice.LONGEST_FIXED:
            drafter = DraftChoice(m.group(1)) if m.group(1) else default_drafter
            modes.append(Mode(name, drafter, PolicyChoice("fixed", int(m.group(2)))))
        else:
            raise UsageError(
                f"unknown bench mode {name!r}: use ar, kN (N <= {PolicyChoice.LONGEST_FIXED}), ngram-kN, model-kN, "
                "heuristic, auto, auto-chain, hf-assisted"
            )
    if not modes:
        raise UsageError("no bench modes given")
    # every ratio and output check is against plain decoding, so it runs first for each prompt
    return [AR] + [m for m in modes if m.name != "ar"]


def prompt_ids(engine: Engine, prompt: BenchPrompt) -> list[int]:
    """The tokens the engine generates after: the chat template's, or the plain text's."""
    if prompt.mode == "chat" and prompt.messages is not None:
        return engine.chat_tokens(prompt.messages)
    if prompt.mode == "completion" and prompt.prompt is not None:
        return engine.target.tokenize(prompt.prompt, special=False)
    raise UsageError(f"bench prompt {prompt.id}: mode {prompt.mode!r} without its input")  # suites.py checks it


def generate(engine: Engine, prompt: BenchPrompt, settings: GenerateSettings) -> tuple[Summary, list[int], list[Round]]:
    """One generation; returns its summary (K of each target pass included), output ids and rounds."""
    ids, rounds, summary = [], [], Summary()
    for e in engine.generate_tokens(prompt_ids(engine, prompt), settings):
        if isinstance(e, Token):
            ids.append(e.id)
        elif isinstance(e, Step):  # yielded before the tokens it produced
            parents, path = e.tree()
            rounds.append(Round(len(ids), e.drafted_ids, tuple(parents), tuple(path), e.drafter))
        elif isinstance(e, Summary):
            summary = e
    return summary, ids, rounds


def measure(engine: Engine, prompt: BenchPrompt, mode: Mode, sampling: SamplingParams) -> Row:
    """One generation of `prompt` in `mode`, started cold, as a row not yet compared with ar."""
    engine.empty_caches()
    if mode.name == HF_ASSISTED:
        target, draft = engine.target, engine.draft
        if not isinstance(target, HFBackend) or not isinstance(draft, HFBackend):  # check_modes said so first
            raise UsageError(f"bench mode {HF_ASSISTED} needs a pair on the hf backend with a draft model")
        ids = prompt_ids(engine, prompt)
        r = assisted_generate(target, draft, ids, prompt.max_tokens)
        return Row(
            prompt.id,
            prompt.suite,
            mode.name,
            r.tokens,
            r.decode_tokens_per_s,
            r.drafted,
            r.accepted,
            r.target_passes,
            None,
            None,
            r.k_trace,
            r.ids,
            prompt_tokens=len(ids),
            target_read_tokens=len(ids),
            ttft_s=r.ttft_s,
            decode_s=r.decode_s,
        )
    assert mode.policy is not None, mode.name  # only hf-assisted has no K, and it returned above
    settings = GenerateSettings.build(prompt.max_tokens, sampling, mode.draft, mode.policy, prompt.constraint)
    summary, ids, rounds = generate(engine, prompt, settings)
    problem = None
    if prompt.constraint is not None:
        text = b"".join(engine.target.token_bytes(i) for i in ids).decode("utf-8", "replace")
        problem = reply_problem(prompt.constraint, text, summary.stop_reason)
    return Row(
        prompt.id,
        prompt.suite,
        mode.name,
        summary.tokens,
        summary.decode_tokens_per_s,
        summary.drafted,
        summary.accepted,
        summary.target_passes,
        None,
        None,
        summary.k_series,
        ids,
        rounds=rounds,
        prompt_tokens=summary.prompt_tokens,
        target_read_tokens=summary.target_read_tokens,
        ttft_s=summary.ttft_s,
        target_read_s=summary.target_read_s,
        draft_read_s=summary.draft_read_s,
        decode_s=summary.decode_s,
        valid=None if prompt.constraint is None else problem is None,
        invalid_reason=problem,
        constraint_s=summary.constraint_s,
        threads=summary.threads,
    )


def layout_lines(engine: Engine) -> list[str]:
    """What each loaded model of `engine` runs as: for llama.cpp, its weight types and what
    llama.cpp repacked at load (the layout decides how cheaply several tokens are verified)."""
    lines = []
    for role, backend in (("target", engine.target), ("draft", engine.draft)):
        repacked, path = getattr(backend, "repacked", None), getattr(backend, "path", None)  # llama.cpp's
        if repacked is not None and path is not None:
            lines.append(f"{engine.pair.name} {role}: {describe_loaded(path, repacked)}")
    return lines


def check_modes(pair: PairConfig, modes: list[Mode], sampling: SamplingParams) -> None:
    """Refuse, before anything loads, a mode this pair or these settings cannot run."""
    if any(m.name == HF_ASSISTED for m in modes):
        if pair.backend != "hf":
            raise UsageError(
                f"bench mode {HF_ASSISTED} runs transformers' generate and needs a pair on the hf backend; "
                f"pair {pair.name!r} is on {pair.backend}"
            )
        if pair.draft is None:
            raise UsageError(f"bench mode {HF_ASSISTED} needs a draft model; pair {pair.name!r} has none")
        if not sampling.greedy:
            raise UsageError(f"bench mode {HF_ASSISTED} is greedy only: use --temperature 0")


def check_prompts(modes: list[Mode], prompts: Sequence[BenchPrompt]) -> None:
    """Refuse, before anything loads, a mode that cannot decode under a prompt's response_format."""
    constrained = next((p for p in prompts if p.constraint is not None), None)
    if constrained is not None and any(m.name == HF_ASSISTED for m in modes):
        raise UsageError(
            f"bench mode {HF_ASSISTED} cannot decode under a response_format (transformers' generate "
            f"takes no constraint here), and prompt {constrained.id!r} has one"
        )


def run_bench(
    engines: Sequence[Engine],
    prompts: list[BenchPrompt],
    modes: list[Mode],
    sampling: SamplingParams,
    on_row: Callable[[Row], None] = lambda row: None,
    repeats: int = 1,
) -> list[Row]:
    """Every prompt in every mode of every engine, interleaved. A greedy output of an engine that
    parts from its `ar` is explained right after its run, while the target still holds that run's
    cache (see quality/divergence.py), against the target's noise floor (measured first, unless an earlier
    run did: measuring empties the cache)."""
    check_prompts(modes, prompts)
    for engine in engines:
        check_modes(engine.pair, modes, sampling)
        if needs_noise_floor(modes, sampling):
            engine.noise_floor()
    rows = []
    first_ar: dict[tuple[int, str], list[int]] = {}  # (engine, prompt id): ar's output in the first round
    warm = replace(prompts[0], max_tokens=8)
    for engine in engines:
        for mode in modes:  # warm-up (calibration, first allocations): not measured
            measure(engine, warm, mode, sampling)
    for prompt in prompts:
        for repeat in range(repeats):
            for e, engine in enumerate(engines):
                ar_ids = None
                for mode in modes:
                    row = measure(engine, prompt, mode, sampling)
                    row.repeat, row.pair = repeat, engine.pair.name
                    if mode.name == "ar":
                        ar_ids = row.output_ids
                        first = first_ar.setdefault((e, prompt.id), ar_ids)
                        row.ar_parted_at = first_divergence(ar_ids, first) if sampling.greedy else None
                    elif ar_ids is not None:
                        compare_with_ar(engine, prompt, row, ar_ids, sampling)
                    if ar_ids is not None:
                        row.matches_ar = row.first_divergence is None
                    rows.append(row)
                    on_row(row)
    return rows


def needs_noise_floor(modes: list[Mode], sampling: SamplingParams) -> bool:
    """Whether a parting from ar may need explaining: greedy runs of the engine's own modes."""
    return sampling.greedy and any(m.name not in ("ar", HF_ASSISTED) for m in modes)


def compare_with_ar(engine: Engine, prompt: BenchPrompt, row: Row, ar_ids: list[int], sampling: SamplingParams) -> None:
    """Set the row's first divergence from `ar_ids` and its `vs_ar`, explaining a greedy parting."""
    row.first_divergence = first_divergence(row.output_ids, ar_ids)
    if row.first_divergence is None:
        row.vs_ar = EXACT
    elif not sampling.greedy or row.mode == HF_ASSISTED:
        row.vs_ar = UNCHECKED  # a sampled output parts by chance; a peer's cache is not ours to replay
    else:
        floor = engine.noise_floor().max
        row.parting = explain_parting(
            engine.target, prompt_ids(engine, prompt), ar_ids, row.output_ids, row.rounds, floor
        )
        row.vs_ar = row.parting.verdict


def strict_failure(rows: Iterable[Row]) -> EdgespecError | None:
    """`--strict`: one line naming the outputs that parted from ar beyond the noise floor, or ar's
    repeats that parted from its first run, or else the replies that do not parse or validate
    against their response_format, if any."""
    rows = list(rows)
    bad = [(r, r.parting) for r in rows if r.vs_ar == DIFF and r.parting is not None]  # DIFF: a parting's verdict
    if not bad:
        return unrepeatable_failure(rows) or invalid_failure(rows)
    where = ", ".join(f"{r.id} {r.mode} at token {parting.position}" for r, parting in bad[:3])
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    floor = bad[0][1].floor
    return EdgespecError(
        f"{len(bad)} greedy output(s) parted from ar beyond the target's noise floor of {floor:.3g} "
        f"logits (DIFF, a bug): {where}{more}; --json has the gaps"
    )


def unrepeatable_failure(rows: list[Row]) -> EdgespecError | None:
    """One line naming the prompts where a greedy `ar` repeat parted from its first run."""
    bad = [r for r in rows if r.ar_parted_at is not None]
    if not bad:
        return None
    where = ", ".join(f"{r.id} (repeat {r.repeat}) at token {r.ar_parted_at}" for r in bad[:3])
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    return EdgespecError(
        f"ar parted from its own first run: {where}{more}; plain greedy decoding did not repeat on this host "
        "(see docs/run.md, near-ties)"
    )


def invalid_failure(rows: list[Row]) -> EdgespecError | None:
    """One line naming the replies that do not parse or validate against their response_format."""
    bad = [r for r in rows if r.valid is False]
    if not bad:
        return None
    where = "; ".join(f"{r.id} {r.mode}: {r.invalid_reason}" for r in bad[:2])
    more = f" and {len(bad) - 2} more" if len(bad) > 2 else ""
    replies = "1 reply does" if len(bad) == 1 else f"{len(bad)} replies do"
    return EdgespecError(f"{replies} not match the response_format: {where}{more}; --json has every row")
