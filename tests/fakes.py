"""Honest small stand-ins for a runtime: deterministic numpy "models" behind the Backend protocol.

`MarkovBackend` computes each row of logits from the previous two tokens through a seeded random
table, so plain decoding is fully deterministic and exact equality between plain and speculative
greedy output is the right test. A draft model is the same table plus noise (it agrees often, not
always); `base_s` / `per_token_s` (or any `cost(n)` curve) give it a cost profile for controller and
bench tests, slept for real or, with a `VirtualClock`, only added to simulated time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from unittest import mock

import numpy as np

from edgespec.decoding import decoder, model_drafter
from edgespec.decoding.backend import ContextOverflow, Placement, Vocabulary
from edgespec.decoding.costs import measuring
from edgespec.decoding.tree import depths
from edgespec.engine.engine import Engine
from edgespec.models.registry import ModelSpec, PairConfig


class VirtualClock:
    """Simulated seconds for `time.perf_counter`: fake backends advance it instead of sleeping, so a
    test of speeds is exact and instant. Patch it in where the code under test reads the time."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@contextlib.contextmanager
def simulated_time(clock: VirtualClock) -> Iterator[None]:
    """Every module that reads the clock while generating or calibrating reads `clock` instead."""
    with contextlib.ExitStack() as stack:
        for module in (decoder, model_drafter, measuring):
            stack.enter_context(mock.patch.object(module, "time", SimpleNamespace(perf_counter=clock)))
        yield


class MarkovBackend:
    def __init__(
        self,
        n_vocab: int = 48,
        seed: int = 0,
        noise: float = 0.0,
        n_ctx: int = 512,
        eos: int | None = None,
        base_s: float = 0.0,
        per_token_s: float = 0.0,
        sharp: float = 3.0,
        cost: Callable[[int], float] | None = None,
        clock: VirtualClock | None = None,
        batch_noise: float = 0.0,
    ):
        rng = np.random.default_rng(seed)
        self.table = rng.normal(size=(n_vocab, n_vocab, n_vocab)).astype(np.float32) * sharp
        if noise:
            self.table += np.random.default_rng(seed + 1000).normal(size=self.table.shape).astype(np.float32) * noise
        self.n_vocab, self.n_ctx = n_vocab, n_ctx
        self.eos_ids = frozenset() if eos is None else frozenset({eos})
        self.cached: list[int] = []
        self._tree: list[int] | None = None  # eval_tree's nodes until keep_path
        self.base_s, self.per_token_s = base_s, per_token_s
        self.cost, self.clock = cost, clock  # cost(n): seconds to evaluate n tokens (overrides base/per-token)
        self.evals: list[int] = []  # tokens per eval call, for tests
        self.placement = Placement("cpu", "1 thread", 1)  # numpy on the calling thread
        # Logits of a batch of 4 or more tokens move by up to this much, as llama.cpp's batched
        # kernels move them: near-ties can then flip between a verify pass and a single step.
        self.batch_noise = batch_noise

    def row(self, prev2: int, prev1: int) -> np.ndarray:
        return self.table[prev2, prev1]

    def eval(self, tokens: Sequence[int], n_logits: int) -> np.ndarray:
        self._spend(len(tokens))
        self.cached.extend(tokens)
        seq = self.cached
        n = len(seq)
        where = range(n - n_logits, n)
        return self._rows([(seq[i - 1] if i >= 1 else 0, seq[i]) for i in where], where, len(tokens))

    def eval_tree(
        self, pending: int, ids: Sequence[int], parents: Sequence[int], need: Sequence[bool] | None = None
    ) -> np.ndarray:
        """Each node's row from the two tokens ending at it on its own branch; nodes sit at the
        position of their depth, so a chain gets exactly `eval`'s rows (batch noise included)."""
        self._spend(len(ids) + 1)
        start = len(self.cached)
        last2 = [(self.cached[-1] if self.cached else 0, pending)]
        for node, parent in enumerate(parents):
            last2.append((last2[parent + 1][1], ids[node]))
        self.cached.append(pending)
        self._tree = list(ids)
        return self._rows(last2, [start] + [start + d for d in depths(parents)], len(ids) + 1)

    def keep_path(self, path: Sequence[int]) -> None:
        self.cached.extend(self._tree[node] for node in path)
        self._tree = None

    def _spend(self, n_tokens: int) -> None:
        if len(self.cached) + n_tokens > self.n_ctx:
            raise ContextOverflow("context full")
        seconds = self.cost(n_tokens) if self.cost else self.base_s + self.per_token_s * n_tokens
        if seconds and self.clock is not None:
            self.clock.advance(seconds)
        elif seconds:
            time.sleep(seconds)
        self.evals.append(n_tokens)

    def _rows(self, last2: Sequence[tuple[int, int]], positions: Sequence[int], n_tokens: int) -> np.ndarray:
        rows = np.stack([self.row(a, b) for a, b in last2])
        if self.batch_noise and n_tokens >= 4:
            where = np.asarray(positions)[:, None] * 0.7 + np.arange(self.n_vocab) * 1.3 + n_tokens
            rows = rows + (self.batch_noise * np.sin(where)).astype(np.float32)
        return rows

    def truncate(self, n: int) -> None:
        del self.cached[n:]

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        return [b % self.n_vocab for b in text.encode()]

    def token_bytes(self, token_id: int) -> bytes:
        return bytes([97 + token_id % 26])

    def chat_prompt(self, messages, tools=None) -> str:
        return "".join(f"{m['role']}:{m['content']}\n" for m in messages) + "assistant:"

    def vocabulary(self) -> Vocabulary:
        return Vocabulary(self.n_vocab, tuple(self.token_bytes(i) for i in range(self.n_vocab)), self.eos_ids, None)


def plain_greedy(backend: MarkovBackend, prompt: Sequence[int], n: int) -> list[int]:
    """Reference greedy decoding straight from the table, no cache, no speculation."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(np.argmax(backend.row(seq[-2] if len(seq) > 1 else 0, seq[-1]))))
    return seq[len(prompt) :]


class ArgmaxRecorder:
    """Wraps a real backend and remembers, per position, the argmax of the last logits row the
    target produced there, so a test can check every emitted token against the logits it was
    verified with (the honest greedy test when batched and single-token logits differ slightly)."""

    def __init__(self, backend):
        self._b = backend
        self.argmax_after: dict[int, int] = {}  # position p -> argmax of the row predicting p + 1
        self.rows: dict[int, np.ndarray] = {}

    def __getattr__(self, name):
        return getattr(self._b, name)

    @property
    def cached(self):
        return self._b.cached

    def eval(self, tokens, n_logits):
        start = len(self._b.cached)
        out = self._b.eval(tokens, n_logits)
        first = start + len(tokens) - n_logits
        for j in range(n_logits):
            self.argmax_after[first + j] = int(np.argmax(out[j]))
            self.rows[first + j] = np.array(out[j])
        return out

    def eval_tree(self, pending, ids, parents, need=None):
        self._tree_start = len(self._b.cached)
        self._tree_rows = np.array(self._b.eval_tree(pending, ids, parents, need))
        return self._tree_rows

    def keep_path(self, path):
        """The rows that predicted the committed tokens: the pending token's, then the path's."""
        self._b.keep_path(path)
        for depth, row in enumerate([0, *(node + 1 for node in path)]):
            self.argmax_after[self._tree_start + depth] = int(np.argmax(self._tree_rows[row]))
            self.rows[self._tree_start + depth] = self._tree_rows[row]

    def truncate(self, n):
        self._b.truncate(n)

    def check_greedy(self, prompt_len: int, emitted: list[int]) -> None:
        for i, tok in enumerate(emitted):
            pos = prompt_len + i - 1
            assert self.argmax_after[pos] == tok, (
                f"token {i} ({tok}) is not the target's argmax ({self.argmax_after[pos]})"
            )


def fake_engine(
    clock: VirtualClock | None = None,
    verify=None,
    draft_step: float = 0.0,
    noise: float = 1.0,
    batch_noise: float = 0.0,
) -> Engine:
    """An Engine around a deterministic fake pair (greedy output is exactly reproducible unless the
    target's batches carry `batch_noise`)."""
    spec = ModelSpec("fake-target", "gguf")
    pair = PairConfig("fake", "llamacpp", spec, ModelSpec("fake-draft", "gguf"), "model", 512)
    target = MarkovBackend(seed=21, n_ctx=512, cost=verify, clock=clock, batch_noise=batch_noise)
    draft = MarkovBackend(
        seed=21, noise=noise, n_ctx=512, cost=(lambda n: n * draft_step) if draft_step else None, clock=clock
    )
    return Engine(pair, target, draft)
