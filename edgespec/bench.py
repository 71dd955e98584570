"""`edgespec bench`: measured comparisons of decoding modes on a suite of prompts.

Modes run interleaved per prompt (ar, k2, ..., then the next prompt) so slow drift of a noisy
machine hits every mode alike; speedups are medians of per-prompt ratios against `ar` measured
next to them, both of the decoding alone and of the whole reply (reading the prompt, which gives the
first token, then decoding): the whole reply is what a user waits for. Every measured generation
starts cold (`Engine.empty_caches`): otherwise every mode but a prompt's first would find that
prompt already read. Several pairs (a tuned layout and its original) are interleaved the same way, each
prompt running every mode of every pair before the next, and each pair's speedups are given both
against its own `ar` and against the first pair's. With `repeats` > 1 each prompt runs the whole interleaved round that many times and a
prompt's speed in a mode is the median of its repeats: on a small shared CPU one run of a prompt
varies by several percent, as much as the differences worth reporting (prompts where `auto` never
drafted, so both modes did the same work, still spread on either side of 1.0x).
Every figure comes from the engine's own event stream, as in `edgespec run`, except
those of `hf-assisted`: transformers' own `generate(assistant_model=...)` on the same pair and
prompts (hf backend only), the peer to beat, timed the same way (see `bench_hf_assisted.assisted_generate`).
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import asdict, dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Callable, Iterable, Literal, Sequence

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from rich.console import Group
from rich.table import Table

from edgespec.bench_hf_assisted import assisted_generate
from edgespec.config import PairConfig
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Step, Summary, Token, WholeReply
from edgespec.decoding.plan import KSetting
from edgespec.decoding.sampling import SamplingParams
from edgespec.divergence import DIFF, TIE, Parting, Round, explain_parting, first_divergence
from edgespec.engine import Engine, GenerateSettings
from edgespec.errors import EdgespecError, UsageError
from edgespec.figures import histogram_text
from edgespec.layouts import describe_loaded
from edgespec.noise_floor import NoiseFloor
from edgespec.output_files import check_writable
from edgespec.text_check import context_bytes, text_problem

DEV_SET = Path(str(files("edgespec") / "data" / "dev.jsonl"))  # the development set shipped with edgespec


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    suite: str
    mode: str  # "completion" | "chat"
    max_tokens: int
    prompt: str | None = None
    messages: tuple[dict, ...] | None = None


@dataclass(frozen=True)
class Mode:
    """A named decoding setup: `ar` (plain), `kN`, `ngram-kN`, `model-kN`, `heuristic`, `auto`,
    `auto-chain` (auto drafting chains only: the baseline for its trees), or `hf-assisted`
    (transformers' generate with the draft model as assistant; k is None)."""

    name: str
    draft: DraftChoice
    k: KSetting | None


HF_ASSISTED = "hf-assisted"
AR = Mode("ar", DraftChoice.NONE, KSetting("fixed", 0))


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
    # engine, see divergence.py), or UNCHECKED (sampled output, or a peer's); None for ar itself.
    vs_ar: str | None = None
    parting: Parting | None = None
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


EXACT, UNCHECKED = "exact", "unchecked"


# A suite is read whole; the bound keeps a wrong file (a disk image, a log) from filling memory. A
# suite this size would take days to bench.
SUITE_BYTES = 64 << 20


def load_suite(path: Path, context: int | None = None) -> list[BenchPrompt]:
    """Read and check a JSONL suite, every line before any model loads; a bad line is a one-line
    error naming the file, the line and the field. `context`: the smallest context (tokens) of the
    pairs to run, which every prompt must be able to fit (`text_check.context_bytes`)."""
    if not path.is_file():
        raise UsageError(f"suite file {path} {'is not a regular file' if path.exists() else 'does not exist'}")
    try:
        with path.open("rb") as f:
            data = f.read(SUITE_BYTES + 1)
    except OSError as e:
        raise UsageError(f"suite file {path}: cannot read ({e.strerror or e})") from None
    if len(data) > SUITE_BYTES:
        raise UsageError(f"suite file {path} is over {SUITE_BYTES:,} bytes; split it")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UsageError(f"{path}:{line}: not UTF-8 text (invalid byte at offset {e.start})") from None
    prompts = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            fields = json.loads(line)
        except ValueError as e:
            raise UsageError(f"{path}:{n}: not JSON ({e})") from None
        except RecursionError:  # json's decoder recurses once per level of nesting
            raise UsageError(f"{path}:{n}: not JSON (nested too deeply)") from None
        if not isinstance(fields, dict):
            raise UsageError(f"{path}:{n}: not a JSON object")
        try:
            prompt = _prompt(SuiteLine.model_validate(fields))
        except ValidationError as e:
            raise UsageError(f"{path}:{n}: {_first_problem(e)}") from None
        if context is not None and (size := _text_bytes(prompt)) > context_bytes(context):
            raise UsageError(f"{path}:{n}: the {prompt.mode} text is {size:,} bytes, more than the pair's context "
                             f"of {context:,} tokens can hold")
        prompts.append(prompt)
    if not prompts:
        raise UsageError(f"suite file {path} has no prompts")
    return prompts


def _text(value: object) -> object:
    """Text as `text_check` says it, before pydantic's own check (which says less)."""
    problem = text_problem(value) if isinstance(value, str) else None
    if problem:
        raise ValueError(problem)
    return value


def _number_as_text(value: object) -> object:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


# Text that reaches the tokenizer or the terminal: a lone surrogate ("\ud800" in JSON) is refused here.
Text = Annotated[str, BeforeValidator(_text)]
Prompt = Annotated[str, Field(min_length=1), BeforeValidator(_text)]  # an empty one has nothing to continue
Id = Annotated[str, BeforeValidator(_text), BeforeValidator(_number_as_text)]  # "HumanEval/0", or 7


class SuiteMessage(BaseModel):
    model_config = ConfigDict(strict=True)

    role: Literal["system", "user", "assistant"]
    content: Text


class SuiteLine(BaseModel):
    """One line of a suite as written; unknown keys (`split`) are ignored. Strict: a number is not
    text, nor true a count."""

    model_config = ConfigDict(strict=True)

    id: Id
    suite: Text
    mode: Literal["completion", "chat"]
    max_tokens: int = Field(256, ge=1)
    prompt: Prompt | None = None
    messages: Annotated[list[SuiteMessage], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _has_its_modes_input(self) -> SuiteLine:
        if self.mode == "completion" and self.prompt is None:
            raise ValueError('mode "completion" needs a "prompt"')
        if self.mode == "chat" and self.messages is None:
            raise ValueError('mode "chat" needs "messages"')
        return self


def _first_problem(e: ValidationError) -> str:
    """The first error pydantic found, as `messages[0].content: <what is wrong>`."""
    error = e.errors(include_url=False)[0]
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
    cause = error.get("ctx", {}).get("error")
    message = str(cause) if error["type"] == "value_error" and cause is not None else error["msg"]
    return f"{where}: {message}" if where else message


def _prompt(line: SuiteLine) -> BenchPrompt:
    messages = tuple(m.model_dump() for m in line.messages) if line.mode == "chat" else None
    return BenchPrompt(line.id, line.suite, line.mode, line.max_tokens,
                       prompt=line.prompt if line.mode == "completion" else None, messages=messages)


def _text_bytes(prompt: BenchPrompt) -> int:
    texts = [prompt.prompt] if prompt.mode == "completion" else [m["content"] for m in prompt.messages]
    return sum(len(t.encode("utf-8")) for t in texts)


def select(prompts: list[BenchPrompt], limit: int | None, suites: str | None) -> list[BenchPrompt]:
    """The first `limit` prompts of each suite, of the suites named (comma-separated) if any."""
    wanted = {s.strip() for s in suites.split(",")} if suites else None
    if wanted:
        unknown = wanted - {p.suite for p in prompts}
        if unknown:
            raise UsageError(f"no suite named {', '.join(sorted(unknown))} in the file")
    taken: dict[str, int] = {}
    out = []
    for p in prompts:
        if (wanted is None or p.suite in wanted) and (limit is None or taken.get(p.suite, 0) < limit):
            taken[p.suite] = taken.get(p.suite, 0) + 1
            out.append(p)
    return out


def parse_modes(text: str, default_drafter: DraftChoice) -> list[Mode]:
    """"ar,k4,ngram-k8,heuristic,auto,hf-assisted" -> modes; `kN` and `heuristic` use `default_drafter`."""
    modes = []
    for name in (m.strip() for m in text.split(",") if m.strip()):
        if name == "ar":
            modes.append(AR)
        elif name in KSetting.COST_AWARE:
            modes.append(Mode(name, DraftChoice.AUTO, KSetting(name)))
        elif name == "heuristic":
            modes.append(Mode(name, default_drafter, KSetting("heuristic")))
        elif name == HF_ASSISTED:
            modes.append(Mode(name, DraftChoice.MODEL, None))
        # ASCII digits, few of them: int() refuses thousands of digits (ValueError), and reads other scripts' digits
        elif (m := re.fullmatch(r"(?:(ngram|model)-)?k([0-9]{1,4})", name)) and int(m.group(2)) <= KSetting.MAX:
            drafter = DraftChoice(m.group(1)) if m.group(1) else default_drafter
            modes.append(Mode(name, drafter, KSetting("fixed", int(m.group(2)))))
        else:
            raise UsageError(f"unknown bench mode {name!r}: use ar, kN (N <= {KSetting.MAX}), ngram-kN, model-kN, "
                             "heuristic, auto, auto-chain, hf-assisted")
    if not modes:
        raise UsageError("no bench modes given")
    # every ratio and output check is against plain decoding, so it runs first for each prompt
    return [AR] + [m for m in modes if m.name != "ar"]


def prompt_ids(engine: Engine, prompt: BenchPrompt) -> list[int]:
    """The tokens the engine generates after: the chat template's, or the plain text's."""
    if prompt.mode == "chat":
        return engine.chat_tokens(prompt.messages)
    return engine.target.tokenize(prompt.prompt, special=False)


def generate(engine: Engine, prompt: BenchPrompt, settings: GenerateSettings) -> tuple[Summary, list[int], list[Round]]:
    """One generation; returns its summary (K of each target pass included), output ids and rounds."""
    ids, rounds, summary = [], [], Summary()
    for e in engine.generate_tokens(prompt_ids(engine, prompt), settings):
        if isinstance(e, Token):
            ids.append(e.id)
        elif isinstance(e, Step):  # yielded before the tokens it produced
            rounds.append(Round(len(ids), e.drafted_ids, *map(tuple, e.tree()), e.drafter))
        elif isinstance(e, Summary):
            summary = e
    return summary, ids, rounds


def measure(engine: Engine, prompt: BenchPrompt, mode: Mode, sampling: SamplingParams) -> Row:
    """One generation of `prompt` in `mode`, started cold, as a row not yet compared with ar."""
    engine.empty_caches()
    if mode.name == HF_ASSISTED:
        ids = prompt_ids(engine, prompt)
        r = assisted_generate(engine.target, engine.draft, ids, prompt.max_tokens)
        return Row(prompt.id, prompt.suite, mode.name, r.tokens, r.decode_tokens_per_s, r.drafted, r.accepted,
                   r.target_passes, None, None, r.k_trace, r.ids, prompt_tokens=len(ids),
                   target_read_tokens=len(ids), ttft_s=r.ttft_s, decode_s=r.decode_s)
    summary, ids, rounds = generate(engine, prompt, GenerateSettings(prompt.max_tokens, sampling, mode.draft, mode.k))
    return Row(prompt.id, prompt.suite, mode.name, summary.tokens, summary.decode_tokens_per_s, summary.drafted,
               summary.accepted, summary.target_passes, None, None, summary.k_series, ids, rounds=rounds,
               prompt_tokens=summary.prompt_tokens, target_read_tokens=summary.target_read_tokens,
               ttft_s=summary.ttft_s, target_read_s=summary.target_read_s, draft_read_s=summary.draft_read_s,
               decode_s=summary.decode_s)


def layout_lines(engine: Engine) -> list[str]:
    """What each loaded model of `engine` runs as: for llama.cpp, its weight types and what
    llama.cpp repacked at load (the layout decides how cheaply several tokens are verified)."""
    lines = []
    for role, backend in (("target", engine.target), ("draft", engine.draft)):
        repacked = getattr(backend, "repacked", None)
        if repacked is not None:
            lines.append(f"{engine.pair.name} {role}: {describe_loaded(backend.path, repacked)}")
    return lines


def check_modes(pair: PairConfig, modes: list[Mode], sampling: SamplingParams) -> None:
    """Refuse, before anything loads, a mode this pair or these settings cannot run."""
    if any(m.name == HF_ASSISTED for m in modes):
        if pair.backend != "hf":
            raise UsageError(f"bench mode {HF_ASSISTED} runs transformers' generate and needs a pair on the hf backend; "
                             f"pair {pair.name!r} is on {pair.backend}")
        if pair.draft is None:
            raise UsageError(f"bench mode {HF_ASSISTED} needs a draft model; pair {pair.name!r} has none")
        if not sampling.greedy:
            raise UsageError(f"bench mode {HF_ASSISTED} is greedy only: use --temperature 0")


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
    cache (see divergence.py), against the target's noise floor (measured first, unless an earlier
    run did: measuring empties the cache)."""
    for engine in engines:
        check_modes(engine.pair, modes, sampling)
        if needs_noise_floor(modes, sampling):
            engine.noise_floor()
    rows = []
    warm = BenchPrompt(**{**asdict(prompts[0]), "max_tokens": 8})
    for engine in engines:
        for mode in modes:  # warm-up (calibration, first allocations): not measured
            measure(engine, warm, mode, sampling)
    for prompt in prompts:
        for repeat in range(repeats):
            for engine in engines:
                ar_ids = None
                for mode in modes:
                    row = measure(engine, prompt, mode, sampling)
                    row.repeat, row.pair = repeat, engine.pair.name
                    if mode.name == "ar":
                        ar_ids = row.output_ids
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
        row.parting = explain_parting(engine.target, prompt_ids(engine, prompt), ar_ids, row.output_ids,
                                      row.rounds, floor)
        row.vs_ar = row.parting.verdict


def strict_failure(rows: Iterable[Row]) -> EdgespecError | None:
    """`--strict`: one line naming the outputs that parted from ar beyond the noise floor, if any."""
    bad = [r for r in rows if r.vs_ar == DIFF]
    if not bad:
        return None
    where = ", ".join(f"{r.id} {r.mode} at token {r.parting.position}" for r in bad[:3])
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    floor = bad[0].parting.floor
    return EdgespecError(f"{len(bad)} greedy output(s) parted from ar beyond the target's noise floor of {floor:.3g} "
                         f"logits (DIFF, a bug): {where}{more}; --json has the gaps")


def summarize(rows: Iterable[Row]) -> list[dict]:
    """Per pair, suite and mode: median tokens/s of the decoding and of the whole reply, the median
    per-prompt speedups of both vs the pair's own ar (and, with several pairs, vs the first pair's
    ar), median times (first token, the target's and the draft model's reading, decoding, whole
    reply), acceptance, tokens per pass, K histogram, and the share of outputs identical to ar. A
    prompt's figure in a mode is the median of its repeats; each median time is taken on its own, so
    they need not add up."""
    rows = list(rows)
    speed = _prompt_medians(rows, lambda r: r.decode_tokens_per_s)
    whole = _prompt_medians(rows, lambda r: r.total_tokens_per_s)
    times = {name: _prompt_medians(rows, lambda r, name=name: getattr(r, name))
             for name in ("ttft_s", "target_read_s", "draft_read_s", "decode_s", "total_s")}
    pairs = list(dict.fromkeys(r.pair for r in rows))
    out = []
    for pair, suite, mode in dict.fromkeys((r.pair, r.suite, r.mode) for r in rows):
        group = [r for r in rows if r.pair == pair and r.suite == suite and r.mode == mode]
        ids = list(dict.fromkeys(r.id for r in group))
        hist: dict[str, int] = {}
        for r in group:
            for k in r.k_trace:
                hist[str(k)] = hist.get(str(k), 0) + 1
        drafted = sum(r.drafted for r in group)
        passes = sum(r.target_passes for r in group)
        drafting = sum(1 for r in group for k in r.k_trace if k)  # passes that verified a draft
        matched = [r.matches_ar for r in group if r.matches_ar is not None]
        verdicts = [r.vs_ar for r in group if r.vs_ar is not None]
        entry = {
            "pair": pair,
            "suite": suite,
            "mode": mode,
            "prompts": len(ids),
            "decode_tokens_per_s": _median_of(speed, pair, suite, ids, mode),
            "total_tokens_per_s": _median_of(whole, pair, suite, ids, mode),
            "total_speedup_vs_ar": _median_ratio(whole, pair, suite, ids, mode, pair),
            "speedup_vs_ar": _median_ratio(speed, pair, suite, ids, mode, pair),
            **{name: _median_of(t, pair, suite, ids, mode) for name, t in times.items()},
            "acceptance": sum(r.accepted for r in group) / drafted if drafted else 0.0,
            "tokens_per_pass": sum(max(r.tokens - 1, 0) for r in group) / passes if passes else 0.0,
            # per pass that verified a draft: its nodes (a chain's K) and the accepted path's length
            "tree_size": sum(k for r in group for k in r.k_trace) / drafting if drafting else 0.0,
            "accepted_length": sum(r.accepted for r in group) / drafting if drafting else 0.0,
            "k_histogram": dict(sorted(hist.items(), key=lambda kv: int(kv[0]))),
            "matches_ar": sum(matched) / len(matched) if matched else None,
            "vs_ar": {v: verdicts.count(v) for v in (EXACT, TIE, DIFF, UNCHECKED)} if verdicts else None,
        }
        if len(pairs) > 1:
            entry["total_speedup_vs_first_ar"] = _median_ratio(whole, pair, suite, ids, mode, pairs[0])
            entry["speedup_vs_first_ar"] = _median_ratio(speed, pair, suite, ids, mode, pairs[0])
        out.append(entry)
    return out


def _prompt_medians(rows: list[Row], figure: Callable[[Row], float | None]) -> dict[tuple, float]:
    """(pair, suite, prompt id, mode) -> the median of `figure` over that prompt's repeats; a
    figure the mode does not give (None) is left out."""
    values: dict[tuple, list[float]] = {}
    for r in rows:
        value = figure(r)
        if value is not None:
            values.setdefault((r.pair, r.suite, r.id, r.mode), []).append(value)
    return {key: statistics.median(v) for key, v in values.items()}


def _median_of(medians: dict[tuple, float], pair: str, suite: str, ids: list[str], mode: str) -> float | None:
    """The median over the prompts `ids` of their figures in `mode` (None: no prompt has one)."""
    values = [medians[key] for id in ids if (key := (pair, suite, id, mode)) in medians]
    return statistics.median(values) if values else None


def _median_ratio(speeds: dict[tuple, float], pair: str, suite: str, ids: list[str], mode: str,
                  ar_pair: str) -> float | None:
    """Median of per-prompt speed in `mode` over `ar_pair`'s ar. A speed of 0 is no speed: that run
    had nothing to time (a one-token reply's decoding; or `hf-assisted` whose first pass, which
    also reads the prompt, produced the whole reply), so its prompt has no ratio."""
    ratios = [v / ar for id in ids
              if (v := speeds.get((pair, suite, id, mode))) and (ar := speeds.get((ar_pair, suite, id, "ar")))]
    return statistics.median(ratios) if ratios else None


def to_json(rows: list[Row], summary: list[dict], meta: dict) -> dict:
    return {
        "meta": meta,
        "rows": [{**{k: v for k, v in asdict(r).items() if k not in ("output_ids", "rounds")},
                  "total_s": r.total_s, "total_tokens_per_s": r.total_tokens_per_s} for r in rows],
        "summary": summary,
    }


def table(summary: list[dict], floors: dict[str, NoiseFloor] | None = None) -> Group:
    """The summary as two tables, each narrow enough for an 80-column terminal (no outer edge): where
    a reply's time went (`times_table`), then the speedups and how the drafting went (`speed_table`)."""
    return Group(times_table(summary), speed_table(summary, floors))


def times_table(summary: list[dict]) -> Table:
    """Median seconds per pair, suite and mode: the first token (of which the target's reading of
    the prompt), the draft model's reading, decoding, the whole reply, and its tokens/s."""
    several = _several_pairs(summary)
    t = Table(title="edgespec bench: where a reply's time goes (medians, seconds)", show_edge=False,
              caption="TTFT (time to first token) holds the target's reading of the prompt and the draft model's "
                      "reading before the first token; draft read: all the draft model's reading, before the first "
                      "token and while decoding; whole = TTFT + decode; -: the mode does not say")
    for col in (("pair",) if several else ()) + ("suite", "mode", "TTFT", "target read", "draft read", "decode",
                                                 "whole", "whole tok/s"):
        _add_column(t, col)
    for s in summary:
        cells = [s["pair"]] if several else []
        cells += [s["suite"], s["mode"], *(_seconds(s[key]) for key in
                                           ("ttft_s", "target_read_s", "draft_read_s", "decode_s", "total_s"))]
        t.add_row(*cells, f"{s['total_tokens_per_s']:.1f}")
    return t


def speed_table(summary: list[dict], floors: dict[str, NoiseFloor] | None = None) -> Table:
    """The speedups of the whole reply, then of decoding alone, and how the drafting went; `= ar`
    counts outputs equal to plain decoding's, parted at a tie, and parted beyond the target's noise
    floor (DIFF), in that order. The caption gives the auto modes' mean accepted path over their mean
    tree size (nodes) per drafting pass. With several pairs, a pair column and each pair's speedups
    against the first pair's ar."""
    caption = "= ar: outputs exact / parted at a near-tie / parted beyond the noise floor (DIFF)"
    floors = floors or {}
    for pair, floor in floors.items():
        whose = "the target" if len(floors) == 1 else f"{pair}'s target"
        caption += f"\nnoise floor of {whose}: {floor.max:.2f} logits (largest |batched - single step|, n = 2..16)"
    trees = [s for s in summary if s["mode"].startswith("auto") and s["tree_size"]]
    if trees:  # the modes whose drafts may branch; every row's figures are in --json
        caption += "\naccepted path / tree size per drafting pass: " + ", ".join(
            f"{s['mode']} {s['suite']} {s['accepted_length']:.1f}/{s['tree_size']:.1f}" for s in trees)
    several = _several_pairs(summary)
    first = summary[0]["pair"] if summary else ""
    columns = (("pair",) if several else ()) + ("suite", "mode", "whole vs ar") \
        + ((f"whole vs {first} ar",) if several else ()) + ("decode tok/s", "decode vs ar") \
        + ((f"decode vs {first} ar",) if several else ()) \
        + ("acceptance", "tokens/pass", "K histogram", "= ar")
    t = Table(title="edgespec bench", caption=caption, show_edge=False)
    for col in columns:
        _add_column(t, col)
    for s in summary:
        hist = histogram_text({int(k): v for k, v in s["k_histogram"].items()})
        cells = [s["pair"]] if several else []
        cells += [s["suite"], s["mode"], _ratio(s["total_speedup_vs_ar"])]
        cells += [_ratio(s["total_speedup_vs_first_ar"])] if several else []
        cells += [f"{s['decode_tokens_per_s']:.1f}", _ratio(s["speedup_vs_ar"])]
        cells += [_ratio(s["speedup_vs_first_ar"])] if several else []
        cells += [f"{s['acceptance']:.0%}", f"{s['tokens_per_pass']:.2f}", hist, _vs_ar_text(s["vs_ar"])]
        t.add_row(*cells)
    return t


_SQUEEZABLE = ("decode tok/s", "acceptance", "tokens/pass", "= ar")  # short figures beside long headers


def _add_column(t: Table, name: str) -> None:
    """Names are kept whole on a narrow terminal, and times and speeds ("2.36x") too; headers and
    the other figures wrap instead."""
    if name in ("pair", "suite", "mode"):
        t.add_column(name, no_wrap=True)
    elif name == "K histogram":
        t.add_column(name)
    else:
        t.add_column(name, justify="right", min_width=5 if name not in _SQUEEZABLE else None)


def _several_pairs(summary: list[dict]) -> bool:
    return any("speedup_vs_first_ar" in s for s in summary)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _vs_ar_text(counts: dict | None) -> str:
    if counts is None:
        return "-"
    text = f"{counts[EXACT]}/{counts[TIE]}/{counts[DIFF]}"
    return text + (f" ({counts[UNCHECKED]} unchecked)" if counts[UNCHECKED] else "")


def check_plot_path(path: Path) -> None:
    """Refuse, before the bench runs, a plot path that cannot be written or whose suffix names no
    image format matplotlib writes."""
    from matplotlib.figure import Figure

    check_writable(path, "--plot")
    formats = Figure().canvas.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        raise UsageError(f"--plot {path}: the name must end in one of {', '.join('.' + f for f in sorted(formats))}")


def plot(path: Path, rows: list[Row], summary: list[dict]) -> None:
    """Whole-reply speedup per suite and mode (bars), and K over time for the `auto` generation that drafted most."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = list(dict.fromkeys(s["suite"] for s in summary))
    pairs = list(dict.fromkeys(s["pair"] for s in summary))
    series = [(p, m) for p, m in dict.fromkeys((s["pair"], s["mode"]) for s in summary) if m != "ar"]
    modes = [m for _, m in series]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(len(series), 1)
    for i, (pair, mode) in enumerate(series):
        vals = [next((s["total_speedup_vs_ar"] or 0 for s in summary
                      if s["pair"] == pair and s["suite"] == su and s["mode"] == mode), 0) for su in suites]
        ax1.bar([j + i * width for j in range(len(suites))], vals, width,
                label=f"{pair} {mode}" if len(pairs) > 1 else mode)
    ax1.axhline(1.0, color="black", linewidth=0.8)
    ax1.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(suites))], suites)
    ax1.set_ylabel("whole reply (first token + decoding) speed vs plain\n(median of per-prompt ratios)")
    if series:
        ax1.legend(fontsize=8)
    trace_mode = "auto" if any(r.mode == "auto" for r in rows) else (modes[0] if modes else "ar")
    candidates = [r for r in rows if r.mode == trace_mode]
    if candidates:
        r = max(candidates, key=lambda r: (r.drafted, len(r.k_trace)))
        ax2.step(range(len(r.k_trace)), r.k_trace, where="post")
        ax2.set_title(f"K per target pass: {trace_mode}, {r.id}", fontsize=9)
        ax2.set_xlabel("target pass")
        ax2.set_ylabel("K (0 = plain step)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
