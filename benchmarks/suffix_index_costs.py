"""What the reply history and its suffix index cost at 10M tokens indexed: sorting them, opening
the saved index, a lookup and proposal per drafting round, an append, memory and disk.

The corpus is made up, shaped like a user's history: records of a prompt (200-3,000 tokens) and a
reply (50-1,500), token ids from an active vocabulary of 40,000 of the 151,936 a Qwen2.5 tokenizer
has, drawn with Zipf (1/rank) frequencies, and 30% of the text copied from a pool of 3,000 chunks
(30-400 tokens: a file sent again, a function written twice), so long matches exist as in real
use. The rounds ask with contexts cut at random points of new records made the same way (half)
and of records already kept (half: a request made again).

Figures, all in one process on this machine:
- `first_open_s`: opening a log no index was saved for (read, checked, sorted, saved), and
  `build_s`, the sort alone (`SuffixIndex.build`);
- `open_s`: opening it again, the saved index memory-mapped;
- `round_ms`: `index.propose(context, k=8)` per round, median and p99 over `--rounds`, with the
  match lengths found; `earlier_replies_ms` the same for `earlier_replies(prompt)`;
- `append_ms`: `append(prompt, reply)` of a 1,000-token prompt and a 1,000-token reply, median,
  p99 and max over `--appends` (the max is a merge of the in-memory parts);
- memory: the index's arrays (`index_nbytes`) and the resident size the opening and the rounds
  added (psutil), and the bytes on disk of the log and the index.

    .venv/bin/python benchmarks/suffix_index_costs.py --json benchmarks/results/suffix_index_costs.json
"""

from __future__ import annotations

import argparse
import gc
import json
import mmap
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

from edgespec.decoding.copying.suffix_index import SuffixIndex
from edgespec.engine.history_log import LOG_MAGIC, encode_record
from edgespec.engine.reply_history import ReplyHistory
from edgespec.util.provenance import provenance

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402

VOCAB, ACTIVE = 151_936, 40_000
K = 8


class Corpus:
    """Made-up records (module docstring): token ids of an active vocabulary, 30% copied chunks."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.vocab = self.rng.permutation(VOCAB)[:ACTIVE].astype(np.int32)
        self.pool = [self.fresh(int(n)) for n in self.rng.integers(30, 400, 3000)]

    def fresh(self, n: int) -> np.ndarray:
        rank = np.exp(self.rng.random(n) * np.log(ACTIVE)).astype(np.int64) - 1  # P(rank) ~ 1/rank
        return self.vocab[np.minimum(rank, ACTIVE - 1)]

    def text(self, n: int) -> np.ndarray:
        spans, got = [], 0
        while got < n:
            if self.rng.random() < 0.3:
                span = self.pool[int(self.rng.integers(len(self.pool)))]
            else:
                span = self.fresh(int(self.rng.integers(20, 300)))
            spans.append(span)
            got += len(span)
        return np.concatenate(spans)[:n]

    def record(self) -> tuple[np.ndarray, np.ndarray]:
        return self.text(int(self.rng.integers(200, 3000))), self.text(int(self.rng.integers(50, 1500)))


def write_log(path: Path, records: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """The log `ReplyHistory` would have written had it appended `records` one by one."""
    with open(path, "wb") as f:
        f.write(LOG_MAGIC + bytes(16))
        for prompt, reply in records:
            f.write(encode_record(prompt.tolist(), reply.tolist()))


def quantiles(values: list[float]) -> dict:
    ordered = sorted(values)
    return {
        "median": statistics.median(ordered),
        "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "max": ordered[-1],
    }


def mapped(array: np.ndarray | None) -> bool:
    while array is not None and not isinstance(array, mmap.mmap):
        array = array.base
    return array is not None


def rss() -> int:
    return psutil.Process().memory_info().rss


def made_up_records(corpus: Corpus, tokens: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Records of `corpus` until they hold at least `tokens` tokens."""
    records, total = [], 0
    while total < tokens:
        records.append(corpus.record())
        total += len(records[-1][0]) + len(records[-1][1])
    return records


def first_opening(folder: Path, records: list[tuple[np.ndarray, np.ndarray]], budget: int) -> dict:
    """The sort alone, the distinct ids it holds, and opening a log no index was saved for."""
    start = time.perf_counter()
    built = SuffixIndex.build(np.concatenate([p, r]) for p, r in records)
    out: dict = {"build_s": time.perf_counter() - start}
    out["distinct_ids"] = int(np.count_nonzero(np.bincount(built.tokens + 1)[1:]))
    del built
    start = time.perf_counter()
    history = ReplyHistory.open(folder, budget, vocab=VOCAB)
    out["first_open_s"] = time.perf_counter() - start
    del history
    gc.collect()
    return out


def round_contexts(records, corpus: Corpus, rng: np.random.Generator, rounds: int) -> list[list[int]]:
    """The drafting rounds' contexts: cut at random in new records (even rounds) and kept ones (odd)."""
    contexts = []
    for n in range(rounds):
        prompt, reply = records[int(rng.integers(len(records)))] if n % 2 else corpus.record()
        text = np.concatenate([prompt, reply])
        contexts.append(text[: int(rng.integers(64, len(text)))].tolist())
    return contexts


def drafting_rounds(history: ReplyHistory, contexts: list[list[int]]) -> dict:
    """`propose` per round: its milliseconds, the match lengths it found and the ids it gave."""
    times, lengths, nodes = [], [], []
    for context in contexts:
        start = time.perf_counter()
        draft = history.index.propose(context, K)
        times.append(1000 * (time.perf_counter() - start))
        lengths.append(draft.match_len)
        nodes.append(len(draft.ids))
    return {
        "round_ms": quantiles(times),
        "match_len": {  # contexts of new records (even rounds), of records kept (odd)
            "new_median": statistics.median(lengths[::2]),
            "kept_median": statistics.median(lengths[1::2]),
            "none": lengths.count(0) / len(lengths),
        },
        "nodes_median": statistics.median(nodes),
    }


def earlier_replies_ms(history: ReplyHistory, records, corpus: Corpus, rng: np.random.Generator, n: int) -> dict:
    """`earlier_replies` for prompts of kept records (odd) and new ones (even), in milliseconds."""
    times = []
    for i in range(n):
        prompt = records[int(rng.integers(len(records)))][0].tolist() if i % 2 else corpus.record()[0].tolist()
        start = time.perf_counter()
        history.earlier_replies(prompt)
        times.append(1000 * (time.perf_counter() - start))
    return quantiles(times)


def appends(history: ReplyHistory, corpus: Corpus, n: int) -> dict:
    """`append` of a 1,000-token prompt and reply, `n` times, and the index's parts after them."""
    times = []
    for _ in range(n):
        prompt, reply = corpus.text(1000).tolist(), corpus.text(1000).tolist()
        start = time.perf_counter()
        history.append(prompt, reply)
        times.append(1000 * (time.perf_counter() - start))
    return {"append_ms": quantiles(times), "parts_after_appends": len(history.index.parts)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=10_000_000, help="tokens indexed (default 10M)")
    parser.add_argument("--rounds", type=int, default=2000, help="lookups timed")
    parser.add_argument("--appends", type=int, default=200, help="appends timed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()

    corpus = Corpus(args.seed)
    records = made_up_records(corpus, args.tokens)
    total = sum(len(p) + len(r) for p, r in records)
    budget = 2 * total
    out: dict = {"tokens": total, "records": len(records), "distinct_ids": 0}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "history"
        folder.mkdir(mode=0o700)
        write_log(folder / "log", records)
        out.update(first_opening(folder, records, budget))

        rng = np.random.default_rng(args.seed + 1)
        # made before the baseline of the resident size: they are Python lists
        contexts = round_contexts(records, corpus, rng, args.rounds)
        before = rss()
        start = time.perf_counter()
        history = ReplyHistory.open(folder, budget, vocab=VOCAB)
        out["open_s"] = time.perf_counter() - start
        out["rss_after_open_mb"] = (rss() - before) / 1e6
        base = history.index.parts[0]
        out["index_mapped"] = mapped(base.sa)  # the saved index, not sorted again
        out["index_nbytes_mb"] = (base.tokens.nbytes + base.sa.nbytes + base._starts.nbytes) / 1e6
        out.update(drafting_rounds(history, contexts))
        out["rss_after_rounds_mb"] = (rss() - before) / 1e6
        out["earlier_replies_ms"] = earlier_replies_ms(history, records, corpus, rng, min(args.rounds, 500))
        out.update(appends(history, corpus, args.appends))

        out["log_bytes"] = (folder / "log").stat().st_size
        out["index_bytes"] = sum(p.stat().st_size for p in folder.glob("index-*.idx"))
        out["disk_bytes"] = history.size()[2]

    print(json.dumps(out, indent=1))
    if args.json:
        write_result(args.json, {**provenance(), "k": K, "rounds": args.rounds, "appends": args.appends, **out})


if __name__ == "__main__":
    main()
