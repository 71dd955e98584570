"""Fill-in-the-middle prompts: what an editor's inline completion asks the target.

The format is Qwen2.5-Coder's repo-level one, which llama.cpp's server also writes for `/infill`:

    <|repo_name|>myproject\n<|file_sep|>a.py\n...text of a.py...<|file_sep|>b.py\n...
    <|fim_prefix|>code before the cursor<|fim_suffix|>code after it<|fim_middle|>

The extra files (an editor's ring of recent chunks) come first, then the three parts. Each part is
tokenized on its own with special tokens read as text, so a file that holds "<|fim_middle|>" cannot
steer the prompt.

**Order.** `psm` (prefix, suffix, middle) is the order the model was trained on and the order
llama.cpp writes. Its cost: a keystroke changes the prompt at the cursor, and with the suffix after
the cursor every token of the suffix is read again, from the start of the read chunk (or tail
chunk) holding the cursor (`ChunkedBackend`: a reply bit for bit a cold read's). `spm` puts the suffix before the
prefix (llama.cpp's `--spm-infill`), so a keystroke reads again only from that chunk's start to
the end, but Qwen2.5-Coder was not trained on it. `psm-near` keeps the trained order with only the
near suffix (the rest of the cursor's line and NEAR_LINES lines) after the cursor, and gives the
lines below as a chunk of the current file before the prefix, where a keystroke does not reach
them. What each costs, in tokens read again and in what the model suggests:
benchmarks/fim_order.py, docs/benchmarks.md.

Parts longer than the context allows are cut as llama.cpp cuts them, each within a share of the
context that does not depend on the others' lengths: the code around the cursor has half of what
the reply's room leaves (the prefix keeps its end, within 3/4 of it; the suffix its start, within
the rest), the extra files the other half (they keep their end). So a read of the extra files alone
(an editor's `n_predict: 0`) cuts them where the next completion does, and its chunks are reused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from edgespec.decoding.backend import Backend
from edgespec.util.errors import EdgespecError

Order = Literal["psm", "psm-near", "spm"]
ORDERS: tuple[Order, ...] = ("psm", "psm-near", "spm")
DEFAULT_ORDER: Order = "psm-near"
NEAR_LINES = 1  # lines after the cursor's line that `psm-near` keeps in the suffix
REPOSITORY = "myproject"  # the repository's name in the prompt, as llama.cpp writes it
CURRENT_FILE = "filename"  # the name of the file being edited, as llama.cpp writes it

_MARKS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
_REPO_MARKS = ("<|repo_name|>", "<|file_sep|>")


class NoInfill(EdgespecError):
    """The target's vocabulary has no fill-in-the-middle tokens."""


@dataclass(frozen=True)
class FimMarks:
    """The target's ids of the fill-in-the-middle tokens; `repo` and `file_sep` are None for a
    model without repository-level marks (extra files are then left out)."""

    prefix: int
    suffix: int
    middle: int
    repo: int | None
    file_sep: int | None


@dataclass(frozen=True)
class ExtraFile:
    """A chunk of another file (or of another part of this one) the suggestion may draw on."""

    filename: str
    text: str


@dataclass(frozen=True)
class Infill:
    """One inline completion: the text before the cursor (`prefix`, then `middle`, the current
    line up to the cursor, which llama.cpp's clients send apart), the text after it, extra files."""

    prefix: str
    suffix: str
    middle: str = ""
    extra: tuple[ExtraFile, ...] = ()


@dataclass(frozen=True)
class InfillPrompt:
    tokens: list[int]
    truncated: bool  # a part was cut to fit the context


def fim_marks(target: Backend) -> FimMarks:
    """The target's fill-in-the-middle tokens (NoInfill when it lacks the three marks)."""
    ids = [_single(target, mark) for mark in (*_MARKS, *_REPO_MARKS)]
    prefix, suffix, middle, repo, file_sep = ids
    if prefix is None or suffix is None or middle is None:
        raise NoInfill("the target has no fill-in-the-middle tokens (<|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>)")
    return FimMarks(prefix, suffix, middle, repo, file_sep)


def _single(target: Backend, mark: str) -> int | None:
    ids = target.tokenize(mark, special=True)
    return ids[0] if len(ids) == 1 and ids != target.tokenize(mark, special=False) else None


def infill_prompt(target: Backend, marks: FimMarks, infill: Infill, room: int, order: Order = "psm") -> InfillPrompt:
    """The prompt's tokens for `infill`, leaving `room` tokens of the context for the reply."""

    def text(t: str) -> list[int]:
        return target.tokenize(t, special=False) if t else []

    budget = max(0, target.n_ctx - room - 4)  # the marks
    local = budget // 2  # the code around the cursor; the extra files have the rest
    near, far = (
        _split_suffix(infill.suffix) if order == "psm-near" and marks.file_sep is not None else (infill.suffix, "")
    )
    before, after, below = text(infill.prefix) + text(infill.middle), text(near), text(far)
    keep_before = min(len(before), local * 3 // 4)
    keep_after = min(len(after), local - local * 3 // 4)
    keep_below = min(len(below), local - local * 3 // 4 - keep_after)
    files, current = _repository(marks, infill.extra, text)
    keep_files = min(len(files), max(0, budget - local - len(current)))
    truncated = (keep_before, keep_after, keep_below, keep_files) != (len(before), len(after), len(below), len(files))
    head = files[len(files) - keep_files :]
    if keep_below:  # the lines below the near suffix, as a chunk of the current file before it
        head += [*current, *below[:keep_below]]
    pre = [marks.prefix, *before[len(before) - keep_before :]]
    suf = [marks.suffix, *after[:keep_after]]
    parts = suf + pre if order == "spm" else pre + suf
    return InfillPrompt([*head, *current, *parts, marks.middle], truncated)


def _split_suffix(suffix: str) -> tuple[str, str]:
    """The suffix's near part (the rest of the current line and NEAR_LINES lines after it) and the
    lines below that."""
    cut = -1
    for _ in range(NEAR_LINES + 1):
        cut = suffix.find("\n", cut + 1)
        if cut < 0:
            return suffix, ""
    return suffix[: cut + 1], suffix[cut + 1 :]


def _repository(marks: FimMarks, files: tuple[ExtraFile, ...], text) -> tuple[list[int], list[int]]:
    """The repository part (its name, then each extra file) and the current file's separator and
    name; none of either where the model has no repository marks."""
    if marks.repo is None or marks.file_sep is None:
        return [], []
    tokens = [marks.repo, *text(REPOSITORY + "\n")]
    for f in files:
        tokens += [marks.file_sep, *text(f.filename + "\n"), *text(f.text)]
    return tokens, [marks.file_sep, *text(CURRENT_FILE + "\n")]
