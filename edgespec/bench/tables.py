"""The bench's summary (`report.summarize`) as tables, on a terminal of any width or a pipe (80
columns): where a reply's time went, the speedups, and how the drafting went. Wide enough, two tables
with a pair column; narrower, the same figures stacked per pair in three narrower tables. No cell is
ever cut short to "…": a reader of a pipe or a small terminal gets every figure."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rich.console import Console, ConsoleOptions, Group, OverflowMethod, RenderableType, RenderResult
from rich.table import Table

from edgespec.bench.modes import EXACT, UNCHECKED, Row
from edgespec.engine.stats_line import histogram_text
from edgespec.quality.divergence import DIFF, TIE
from edgespec.quality.noise_floor import NoiseFloor

Column = tuple[str, Callable[[dict], str]]  # a header, and the cell of one summary entry


def table(summary: list[dict], floors: dict[str, NoiseFloor] | None = None, rows: Iterable[Row] = ()) -> RenderableType:
    """The summary as tables, laid out for the width they are printed at (a pipe's is 80): where a
    reply's time went, then the speedups and how the drafting went, whose caption names the `rows`
    whose reply did not match its response_format. Two tables with a pair column where every cell
    shows whole at that width (`times_table`, `speed_table`), else stacked narrower tables
    (`stacked_tables`): no cell is ever cut short to "…"."""
    rows = list(rows)
    wide = Group(times_table(summary), speed_table(summary, floors, rows))
    return _FirstWhole(wide, stacked_tables(summary, floors, rows))


class _FirstWhole:
    """Renders `wide` where it shows every cell whole at the width at hand, else `narrow`."""

    def __init__(self, wide: RenderableType, narrow: RenderableType):
        self.wide, self.narrow = wide, narrow

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.wide, options, pad=False)
        yield self.narrow if any("…" in segment.text for line in lines for segment in line) else self.wide


def times_table(summary: list[dict]) -> Table:
    """Median seconds per pair, suite and mode: the first token (of which the target's reading of
    the prompt), the draft model's reading, decoding, the whole reply, and its tokens/s."""
    names = _name_columns(_several_pairs(summary), True)
    return _table(f"edgespec bench: {_TIMES}", _TIMES_CAPTION, names + _time_columns(), summary)


def speed_table(summary: list[dict], floors: dict[str, NoiseFloor] | None = None, rows: Iterable[Row] = ()) -> Table:
    """The speedups of the whole reply, then of decoding alone, and how the drafting went; `= ar`
    counts outputs equal to plain decoding's, parted at a tie, and parted beyond the target's noise
    floor (DIFF), in that order. The caption gives the auto modes' mean accepted path over their mean
    tree size (nodes) per drafting pass. With several pairs, a pair column and each pair's speedups
    against the first pair's ar. Where a suite has a response_format, a `valid` column counts the
    replies that parse and validate, and the caption names each one that does not."""
    several = _several_pairs(summary)
    first = summary[0]["pair"] if several else None
    columns = _name_columns(several, True) + _speed_columns(first, f"vs {first} ar")
    columns += _drafting_columns(any(s["replies"] for s in summary))
    return _table("edgespec bench", _drafting_caption(summary, floors, rows), columns, summary)


def stacked_tables(summary: list[dict], floors: dict[str, NoiseFloor] | None = None, rows: Iterable[Row] = ()) -> Group:
    """The same figures for a narrow terminal or a pipe: for each pair in turn (named in the titles,
    as the suite is when there is only one), where the time went, the speedups (a pair after the
    first also against the first pair's ar), and the drafting. A figure's column still too narrow
    folds its text onto more lines instead of cutting it short."""
    pairs = list(dict.fromkeys(s["pair"] for s in summary))
    suites = list(dict.fromkeys(s["suite"] for s in summary))
    structured = any(s["replies"] for s in summary)
    names = _name_columns(False, len(suites) > 1)
    tables: list[Table] = []
    for i, pair in enumerate(pairs):
        mine = [s for s in summary if s["pair"] == pair]
        named = ([pair] if len(pairs) > 1 else []) + (suites if len(suites) == 1 else [])
        title = "".join(["edgespec bench"] + [f", {name}" for name in named])
        later = i > 0  # against the first pair's ar too
        speeds = names + _speed_columns(pairs[0] if later else None, "vs first ar")
        tables += [
            _table(f"{title}: {_TIMES}", _TIMES_CAPTION if i == 0 else None, names + _time_columns(), mine, True),
            _table(
                f"{title}: speedups", f"vs first ar: against {pairs[0]}'s ar" if later else None, speeds, mine, True
            ),
            _table(
                f"{title}: drafting",
                _drafting_caption(summary, floors, rows) if i == len(pairs) - 1 else None,
                names + _drafting_columns(structured),
                mine,
                True,
            ),
        ]
    return Group(*tables)


_TIMES = "where a reply's time goes (medians, seconds)"
_TIMES_CAPTION = (
    "TTFT (time to first token) holds the target's reading of the prompt and the draft model's "
    "reading before the first token; draft read: all the draft model's reading, before the first "
    "token and while decoding; whole = TTFT + decode; -: the mode does not say"
)


def _name_columns(pair: bool, suite: bool) -> list[Column]:
    return (
        ([("pair", lambda s: s["pair"])] if pair else [])
        + ([("suite", lambda s: s["suite"])] if suite else [])
        + [("mode", lambda s: s["mode"])]
    )


def _time_columns() -> list[Column]:
    seconds = (
        ("TTFT", "ttft_s"),
        ("target read", "target_read_s"),
        ("draft read", "draft_read_s"),
        ("decode", "decode_s"),
        ("whole", "total_s"),
    )
    columns: list[Column] = [(name, _seconds_of(key)) for name, key in seconds]
    return columns + [("whole tok/s", lambda s: f"{s['total_tokens_per_s']:.1f}")]


def _seconds_of(key: str) -> Callable[[dict], str]:
    """The cell of a time column: the summary entry's `key`, in seconds."""
    return lambda s: _seconds(s[key])


def _speed_columns(first: str | None, vs_first: str) -> list[Column]:
    """Whole-reply and decoding speedups; with `first` (a pair), also against that pair's ar, under
    headers that end in `vs_first`."""
    columns: list[Column] = [("whole vs ar", lambda s: _ratio(s["total_speedup_vs_ar"]))]
    if first is not None:
        columns.append((f"whole {vs_first}", lambda s: _ratio(s["total_speedup_vs_first_ar"])))
    columns += [
        ("decode tok/s", lambda s: f"{s['decode_tokens_per_s']:.1f}"),
        ("decode vs ar", lambda s: _ratio(s["speedup_vs_ar"])),
    ]
    if first is not None:
        columns.append((f"decode {vs_first}", lambda s: _ratio(s["speedup_vs_first_ar"])))
    return columns


def _drafting_columns(structured: bool) -> list[Column]:
    columns: list[Column] = [
        ("acceptance", lambda s: f"{s['acceptance']:.0%}"),
        ("tokens/pass", lambda s: f"{s['tokens_per_pass']:.2f}"),
        ("K histogram", lambda s: histogram_text({int(k): v for k, v in s["k_histogram"].items()})),
        ("= ar", lambda s: _vs_ar_text(s["vs_ar"])),
    ]
    return columns + ([("valid", _valid_text)] if structured else [])


def _drafting_caption(summary: list[dict], floors: dict[str, NoiseFloor] | None, rows: Iterable[Row]) -> str:
    """What `= ar` and `valid` count, the replies that did not validate, the targets' noise floors,
    and the auto modes' accepted path over tree size per drafting pass."""
    caption = "= ar: outputs exact / parted at a near-tie / parted beyond the noise floor (DIFF)"
    if any(s["replies"] for s in summary):
        caption += "\nvalid: replies that parse and validate against their response_format / replies under one"
        if shares := [s for s in summary if s["constraint_share"] is not None]:
            caption += "\nthe constraint's matcher, share of those replies' time: " + ", ".join(
                f"{s['mode']} {s['suite']} {s['constraint_share']:.1%}" for s in shares
            )
        for r in (r for r in rows if r.valid is False):
            caption += f"\nINVALID {r.id} {r.mode}: {r.invalid_reason}"
    floors = floors or {}
    for pair, floor in floors.items():
        whose = "the target" if len(floors) == 1 else f"{pair}'s target"
        caption += f"\nnoise floor of {whose}: {floor.max:.2f} logits (largest |batched - single step|, n = 2..16)"
    trees = [s for s in summary if s["mode"].startswith("auto") and s["tree_size"]]
    if trees:  # the modes whose drafts may branch; every row's figures are in --json
        pair_of = (lambda s: f"{s['pair']} ") if _several_pairs(summary) else (lambda s: "")
        caption += "\naccepted path / tree size per drafting pass: " + ", ".join(
            f"{pair_of(s)}{s['mode']} {s['suite']} {s['accepted_length']:.1f}/{s['tree_size']:.1f}" for s in trees
        )
    return caption


_SQUEEZABLE = ("decode tok/s", "acceptance", "tokens/pass", "= ar", "valid")  # short figures beside long headers


def _table(title: str, caption: str | None, columns: list[Column], summary: list[dict], fold: bool = False) -> Table:
    """One row per summary entry, with no outer edge. Names are kept whole on a narrow terminal, and
    times and speeds ("2.36x") too; headers and the other figures wrap instead. With `fold`, a
    figure's column too narrow for a word folds it onto more lines instead of eliding it (only names,
    which are never narrowed before the figures, are cut, and only where nothing else could be)."""
    t = Table(title=title, caption=caption, show_edge=False)
    overflow: OverflowMethod = "fold" if fold else "ellipsis"
    for name, _ in columns:
        if name in ("pair", "suite", "mode"):
            t.add_column(name, no_wrap=True)
        elif name == "K histogram":
            t.add_column(name, overflow=overflow)
        else:
            min_width = 5 if name not in _SQUEEZABLE else None
            t.add_column(name, justify="right", min_width=min_width, overflow=overflow)
    for s in summary:
        t.add_row(*(cell(s) for _, cell in columns))
    return t


def _several_pairs(summary: list[dict]) -> bool:
    return any("speedup_vs_first_ar" in s for s in summary)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _valid_text(s: dict) -> str:
    replies = s["replies"]
    return "-" if replies is None else f"{replies['valid']}/{replies['valid'] + replies['invalid']}"


def _vs_ar_text(counts: dict | None) -> str:
    if counts is None:
        return "-"
    text = f"{counts[EXACT]}/{counts[TIE]}/{counts[DIFF]}"
    return text + (f" ({counts[UNCHECKED]} unchecked)" if counts[UNCHECKED] else "")
