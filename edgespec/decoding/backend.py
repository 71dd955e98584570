"""The protocol every runtime implements, and the bookkeeping they share. It lives in decoding, the
layer that consumes it: the backends implement it from above, so the algorithm imports no runtime.

A backend owns one model and one KV cache. The decoder talks to it only through `eval` (append
tokens, get logits at the positions asked for), `truncate` (roll the cache back), and `eval_tree` /
`keep_path` (verify a draft tree in one pass, then keep the accepted path), so the speculative loop
never knows which runtime it drives. `cached` mirrors the token ids in the cache,
which lets callers reuse a shared prefix (a chat's earlier turns) instead of re-evaluating it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeGuard

import numpy as np

from edgespec.util.errors import EdgespecError


class BackendError(EdgespecError):
    """A runtime failure with a message fit for the user (one line)."""


class ContextOverflow(BackendError):
    """The tokens asked for do not fit in the model's context window."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a loaded model runs, as its runtime reported it at load, never as a config asked for it.

    `device` is "cpu", "gpu", "gpu+cpu" (layers split between them) or "unknown" (the runtime did
    not say); `detail` is the runtime's own account ("29/29 layers on CUDA0", "cuda:0", "4
    threads"). `cpu_threads` counts the CPU threads its passes keep busy, 0 when none of it runs on
    the CPU: whether decoding competes with the rest of the machine (the chat app) for the CPU.
    """

    device: str
    detail: str
    cpu_threads: int


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """What two models must share to be paired: token texts and special tokens."""

    size: int
    tokens: tuple[bytes, ...]  # the text of each id, as the model's tokenizer spells it
    eos_ids: frozenset[int]  # end-of-generation ids (eos, eot, im_end ...)
    bos_id: int | None


class Backend(Protocol):
    """One model with one KV cache.

    Shapes and units: logits are float32 numpy arrays of shape (n, n_vocab); row i is the
    distribution of the token that follows the i-th of the last n tokens passed to `eval`.
    """

    n_ctx: int
    n_vocab: int
    eos_ids: frozenset[int]
    cached: list[int]  # token ids currently in the KV cache, in order (read-only for callers)
    placement: Placement  # where the model runs, as the runtime reported it

    def tokenize(self, text: str, *, special: bool = True) -> list[int]: ...

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes a token stands for (may be part of a UTF-8 character)."""
        ...

    def chat_prompt(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> str:
        """Render messages with the model's own chat template, ending with the assistant cue.
        `tools` (OpenAI's function tools) go to the template as its `tools` variable, as
        transformers passes them: the template writes them where and how its model was trained to
        read them (messages may then carry `tool_calls` and the "tool" role)."""
        ...

    def eval(self, tokens: Sequence[int], n_logits: int) -> np.ndarray:
        """Append `tokens` to the cache; return logits for the last `n_logits` of them."""
        ...

    def truncate(self, n: int) -> None:
        """Drop everything in the cache after the first `n` tokens."""
        ...

    def eval_tree(
        self, pending: int, ids: Sequence[int], parents: Sequence[int], need: Sequence[bool] | None = None
    ) -> np.ndarray:
        """Evaluate `pending` and a draft tree after it in one pass (`decoding/tree.py`: node i is
        `ids[i]` under `parents[i]`); logits (n + 1, n_vocab), row 0 after `pending`, row i + 1 after
        node i, each as if the tokens from `pending` down to it were all that followed the cache.
        `need`: the rows whose logits are wanted (None: all); a runtime may leave the others zero
        and skip computing them (the output layer is a large share of a row's cost on a CPU).
        `cached` then ends in `pending`; `keep_path` must come next."""
        ...

    def keep_path(self, path: Sequence[int]) -> None:
        """After `eval_tree`: the cache holds what it held, `pending`, and the nodes of `path` (root
        to leaf) as if evaluated in a row; every other node is dropped."""
        ...

    def vocabulary(self) -> Vocabulary: ...


class StatefulBackend(Backend, Protocol):
    """A backend whose cache can be saved and loaded again, in this process or another (the prompt
    cache, `edgespec.engine.prompt_cache`). Optional: callers test for `save_state`. llama.cpp's backend
    has it; the transformers backend keeps no saved states."""

    def cache_identity(self) -> str:
        """What decides a saved state's bytes besides its tokens (model file, runtime build, cache
        settings): a state loads only into a backend of the same identity."""
        ...

    def save_state(self) -> bytes | bytearray:
        """The cache's state, covering exactly the tokens of `cached`."""
        ...

    def load_state(self, data: bytes | bytearray, tokens: Sequence[int]) -> None:
        """Replace the cache with a saved state that covered `tokens`; BackendError when the runtime
        refuses it (the cache is then empty)."""
        ...


class ChunkedBackend(Backend, Protocol):
    """A backend whose numbers depend on how a read is cut into batches (llama.cpp's CPU kernels
    compute a token's row differently by the batch's shape and the row's place in it). It reads in
    chunks at fixed positions and says how much of its cache a later read may keep and still compute,
    bit for bit, what a fresh read of the same tokens would: a warm call then replies exactly as a
    cold one. Optional: callers test for `exact`; other backends keep any shared prefix.

    A read of tokens [0, n) is cut the same way whatever the cache held before: whole chunks of
    `read_chunk` up to the last multiple of it, then tail chunks of `tail_chunk`, then the rest. The
    tail chunks let a prompt that changes near its end (an editor's keystroke) keep all but the last
    tail chunk or so; they are kept only by a prompt whose last whole chunk ends where theirs starts
    (a longer prompt reads that span as one whole chunk)."""

    read_chunk: int  # tokens per chunk; chunks start at multiples of it
    tail_chunk: int  # tokens per tail chunk (a read's last, partial chunk is cut into these; divides read_chunk)
    exact: int  # leading tokens of `cached` read in whole chunks from position 0 (a multiple of read_chunk)
    exact_tail: int  # tokens after `exact` read in whole tail chunks (a multiple of tail_chunk, < read_chunk)


class ThreadedBackend(Backend, Protocol):
    """A backend whose CPU thread count can change between passes (the thread policy,
    `decoding/costs/thread_count.py`, measures which count is fastest on the machine as it is). Optional:
    callers test for `set_threads`. llama.cpp's backend has it; the transformers backend does not,
    and a model whose passes do not run on the CPU is not tuned whatever its backend."""

    def set_threads(self, n: int) -> None:
        """Run the next passes (single tokens and batches alike) on `n` threads; `placement` says so."""
        ...


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest shared prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def chunk_start(backend: Backend, n: int) -> int:
    """Where the read chunk holding position `n` starts (`n` itself for a backend without chunks)."""
    chunk = getattr(backend, "read_chunk", 1)
    return n - n % chunk


def exact_prefix(backend: Backend, n: int, length: int | None = None) -> int:
    """The most of the first `n` cached tokens a read of a `length`-token prompt may keep and still
    compute what a fresh read computes (`ChunkedBackend`; `length` None: whole chunks only); all `n`
    for a backend that makes no such distinction."""
    if not is_chunked(backend):
        return n
    return ReadCut.of(backend).kept(backend.exact, backend.exact_tail, n, length)


def exact_end(backend: Backend) -> int:
    """Where the cached tokens that a later read may keep end (`exact` and `exact_tail`): what a
    saved state covers."""
    return backend.exact + backend.exact_tail if is_chunked(backend) else len(backend.cached)


def is_chunked(backend: Backend) -> TypeGuard[ChunkedBackend]:
    """Whether `backend` reads in chunks at fixed positions (`ChunkedBackend`)."""
    return hasattr(backend, "exact")


@dataclass(frozen=True)
class ReadCut:
    """How a `ChunkedBackend` cuts reads: whole chunks of `chunk`, the last partial one in tails of
    `tail`. The arithmetic of what a cache read under this cut may keep, for a backend or a saved
    state alike."""

    chunk: int
    tail: int

    @classmethod
    def of(cls, backend: ChunkedBackend) -> ReadCut:
        return cls(backend.read_chunk, backend.tail_chunk)

    def split(self, n: int) -> tuple[int, int]:
        """`exact` and `exact_tail` of a cache holding an exact read of `n` tokens (a saved state's)."""
        whole = n - n % self.chunk
        return whole, (n - whole) - (n - whole) % self.tail

    def batch(self, exact: int, exact_tail: int, pos: int, end: int) -> int:
        """How many tokens the next batch of a read from `pos` to `end` holds: a fresh read's cut from
        where the exact cache ends; plain chunks from anywhere else (no later read keeps those)."""
        if pos != exact + exact_tail or end > exact + self.chunk and exact_tail:
            return min(self.chunk, end - pos)
        if not exact_tail and end - pos >= self.chunk:
            return self.chunk
        return self.tail if end - pos >= self.tail else end - pos

    def read(self, exact: int, exact_tail: int, pos: int, n: int) -> tuple[int, int]:
        """`exact` and `exact_tail` once a batch of `n` tokens at `pos` is read: extended when it was a
        whole chunk or a tail chunk where the exact cache ended."""
        if pos == exact + exact_tail and not exact_tail and n == self.chunk:
            return exact + n, 0
        if pos == exact + exact_tail and n == self.tail and exact_tail + n < self.chunk:
            return exact, exact_tail + n
        return exact, exact_tail

    def truncated(self, exact: int, exact_tail: int, n: int) -> tuple[int, int]:
        """`exact` and `exact_tail` once a cache is cut to its first `n` tokens."""
        whole = min(exact, n - n % self.chunk)
        if whole < exact:
            return whole, 0
        end = min(exact + exact_tail, n - n % self.tail)
        return whole, max(0, end - whole)

    def kept(self, exact: int, exact_tail: int, n: int, length: int | None) -> int:
        """Of a cache with `exact` and `exact_tail` sharing its first `n` tokens with a `length`-token
        prompt, the most a read of that prompt keeps: the whole chunks, and the tail chunks too when
        the prompt's last whole chunk ends where they start (a fresh read then cuts them the same)."""
        whole = min(n, exact) - min(n, exact) % self.chunk
        if exact_tail and length is not None and whole == exact and length - length % self.chunk == exact:
            shared = min(n, exact + exact_tail)
            return shared - shared % self.tail
        return whole


def kept_from_saved(backend: Backend, saved: Sequence[int], tokens: Sequence[int], n_logits: int = 1) -> int:
    """How many of `tokens` a read keeps from an exact read of `saved` (a saved state, or the cache a
    reply to `saved` left): all but the last `n_logits` at most (the reader needs their logits)."""
    n = min(common_prefix(saved, tokens), len(tokens) - n_logits)
    if not is_chunked(backend):
        return n
    cut = ReadCut.of(backend)
    return cut.kept(*cut.split(len(saved)), n, len(tokens))


def reused_prefix(backend: Backend, tokens: Sequence[int], n_logits: int = 1, exact: bool = True) -> int:
    """How many of `tokens` `sync_cache` would keep from the cache; it evaluates the rest."""
    keep = max(0, min(common_prefix(backend.cached, tokens), len(tokens) - n_logits))
    return exact_prefix(backend, keep, len(tokens)) if exact else keep


def sync_cache(backend: Backend, tokens: Sequence[int], n_logits: int, exact: bool = True) -> np.ndarray:
    """Make the cache hold exactly `tokens` and return logits for the last `n_logits` of them.

    Reuses the longest cached prefix; always re-evaluates at least the last `n_logits` tokens so
    their logits exist. `exact`: keep only what a fresh read would compute the same (`exact_prefix`),
    so the logits are those of a cold read; off where only speed depends on them (a draft model's
    reads within one generation). This is the only place where cache reuse is decided.
    """
    if len(tokens) > backend.n_ctx:
        raise ContextOverflow(f"{len(tokens)} tokens do not fit the {backend.n_ctx}-token context")
    keep = reused_prefix(backend, tokens, n_logits, exact)
    if keep < len(backend.cached):
        backend.truncate(keep)
    return backend.eval(tokens[keep:], n_logits)
