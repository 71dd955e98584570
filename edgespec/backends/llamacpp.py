"""llama.cpp through llama-cpp-python's low-level API (GGUF models, CPU or CUDA builds).

Why the low-level API rather than `Llama`: `Llama(logits_all=True)` keeps n_ctx x n_vocab floats
(1.2 GB at n_ctx=2048 for a 151936-token vocabulary); here a batch asks for logits only at the
positions being verified, and the cache is rolled back with `llama_memory_seq_rm`, not by
resetting a counter.

Draft trees (`decoding/tree.py`) are verified in one batch with one cache sequence per branch: a
token carries the seq id of every branch through it, at the position of its depth, and each
branch's sequence first shares the committed text with sequence 0 (`llama_memory_seq_cp`, which
in a unified cache only tags the cells). Once verified, the accepted branch's cells are kept
(`llama_memory_seq_keep`) and become sequence 0 again. A chain is one branch, sequence 0: the
same batch as a plain `eval`, and no copies.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from edgespec.backends import llamacpp_runtime as runtime
from edgespec.backends.chat_template import render_chat
from edgespec.backends.llamacpp_state import copy_in, copy_out, state_identity
from edgespec.decoding.backend import BackendError, ContextOverflow, ReadCut, Vocabulary
from edgespec.decoding.tree import branches_through, depths, leaves
from edgespec.util import interrupts

if TYPE_CHECKING:
    import llama_cpp

_BATCH = 512  # the most tokens one llama_decode call may hold (a tree pass's limit)
# Reads are cut into chunks of READ_CHUNK tokens at fixed positions (0, READ_CHUNK, ...). The CPU
# kernels' results depend on a batch's shape and on a token's row in it, so a read that resumed at
# any other point would compute different numbers than a fresh read: a warm call's reply could then
# differ from a cold call's at a near-tie. `exact` counts the leading cached tokens read in whole
# chunks from position 0; a later read keeps at most those, and forms the fresh read's chunks after.
# 128 reads a prompt as fast as any size tried (benchmarks/read_chunk.py). A read's last, partial
# chunk is cut into tail chunks of a quarter of that, so a prompt that changes near its end (an
# editor's keystroke) reads again at most 31 tokens of what it shares with the last one, where whole
# chunks alone would read up to 127; 32-token chunks alone would read a whole prompt slower
# (benchmarks/read_chunk.py, docs/benchmarks.md).
READ_CHUNK = 128
TAIL_CHUNKS_PER_CHUNK = 4
# Batches from this size up (prompts) may be aborted part way by Ctrl-C. Smaller ones (a verify pass
# is at most 17 tokens) are not: the abort check is a Python call per graph node, about 600 a pass
# for a 1.5B model, a few percent of a draft pass, and such a batch ends soon anyway.
_ABORTABLE_BATCH = 32
_SEQUENCE_0 = (0,)  # the committed text's sequence (and a chain's)
# The most branches one verify pass may hold (the context's n_seq_max; one cache sequence each).
MAX_BRANCHES = 16


class LlamaCppBackend:
    """One GGUF model with its own context and KV cache (sequence 0)."""

    def __init__(
        self,
        path: Path,
        n_ctx: int,
        *,
        n_gpu_layers: int | None = None,
        threads: int | None = None,
        sha256: str | None = None,
        read_chunk: int = READ_CHUNK,
    ):
        """`n_gpu_layers`: layers to offload (-1 all); None offloads all where llama.cpp can (`gpu_layers`).
        `sha256`: the file's, where the caller verified it (names the model in `cache_identity`).
        `read_chunk`: tokens per read chunk (`exact`; small ones let tests on tiny contexts see whole
        chunks); a read's last partial chunk is cut into tail chunks of a quarter of it."""
        import llama_cpp as lc  # loads llama.cpp's libraries (about 0.1 s): only when a model opens

        self._lc = lc
        self.path, self._sha256 = path, sha256
        if not 0 < read_chunk <= _BATCH or read_chunk % TAIL_CHUNKS_PER_CHUNK:
            raise ValueError(f"read_chunk {read_chunk}")
        self.read_chunk = read_chunk
        self.tail_chunk = read_chunk // TAIL_CHUNKS_PER_CHUNK
        # what close() frees, whenever loading stops
        self._model: llama_cpp.llama_model_p | None = None
        self._ctx: llama_cpp.llama_context_p | None = None
        self._batch: llama_cpp.llama_batch | None = None
        try:
            self._load(n_ctx, n_gpu_layers, threads)
        except BaseException:  # a failure or a Ctrl-C part way: free what was made, then say so
            self.close()
            raise

    def _load(self, n_ctx: int, n_gpu_layers: int | None, threads: int | None) -> None:
        lc, path = self._lc, self.path
        calls = runtime.callbacks(lc)
        lc.llama_backend_init()
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = runtime.gpu_layers(n_gpu_layers)
        mparams.progress_callback = calls.progress
        runtime.error_lines.clear()
        runtime.repacked.clear()
        runtime.layer_devices.clear()
        self._model = lc.llama_model_load_from_file(str(path).encode(), mparams)
        interrupts.raise_pending()
        if not self._model:
            raise BackendError(runtime.failure(f"llama.cpp could not load {path}"))
        # what llama.cpp reported while loading: tensors moved into GEMM-friendly layouts, by layout
        self.repacked: dict[str, int] = dict(Counter(runtime.repacked))
        n_threads = threads or runtime.default_threads()
        self._layer_devices = list(runtime.layer_devices)
        self.placement = runtime.placement_of(self._layer_devices, n_threads)
        self._vocab = lc.llama_model_get_vocab(self._model)
        self.n_vocab = lc.llama_vocab_n_tokens(self._vocab)
        n_train = lc.llama_model_n_ctx_train(self._model)
        self.n_ctx = min(n_ctx, n_train) if n_train > 0 else n_ctx

        cparams = lc.llama_context_default_params()
        cparams.n_ctx = self.n_ctx
        cparams.n_batch = _BATCH
        cparams.n_ubatch = _BATCH
        # Branches of a draft tree share the committed text's cells: one unified cache of n_ctx
        # cells for every sequence (split per sequence, the tree's sequences could not share cells).
        cparams.n_seq_max = MAX_BRANCHES
        cparams.kv_unified = True
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        runtime.error_lines.clear()
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        interrupts.raise_pending()
        if not self._ctx:
            raise BackendError(runtime.failure(f"llama.cpp could not create a {self.n_ctx}-token context for {path}"))
        self._mem = lc.llama_get_memory(self._ctx)
        self._identity = state_identity(lc, path, self._sha256, mparams, cparams, self.placement, ReadCut.of(self))
        self._batch = lc.llama_batch_init(_BATCH, 0, MAX_BRANCHES)
        self.cached: list[int] = []
        self.exact = 0  # leading cached tokens a fresh read computes the same (`ChunkedBackend`)
        self.exact_tail = 0  # and the tail chunks after them
        # what eval_tree left for keep_path: nodes' branches, tokens, branch count
        self._tree: tuple[list[list[int]], list[int], int] | None = None
        self.eos_ids = frozenset(t for t in range(self.n_vocab) if lc.llama_vocab_is_eog(self._vocab, t))
        self._pieces: dict[int, bytes] = {}

    # -- the Backend protocol ---------------------------------------------------------------

    def eval(self, tokens: Sequence[int], n_logits: int) -> np.ndarray:
        """Append tokens; return a (n_logits, n_vocab) float32 view of llama.cpp's logits buffer
        (a copy when the rows span read chunks; a decoder's pass of fewer than `tail_chunk` tokens
        never does).

        A read from where the exact cache ends is cut as a fresh read is (`ChunkedBackend`); from
        anywhere else (a pass after a reply's tokens) into plain chunks from its start.
        The view is only valid until the next eval on this backend: callers use it at once."""
        if len(self.cached) + len(tokens) > self.n_ctx:
            raise ContextOverflow(f"{len(self.cached) + len(tokens)} tokens do not fit the {self.n_ctx}-token context")
        if not 0 < n_logits <= len(tokens):
            raise ValueError(f"n_logits={n_logits} with {len(tokens)} tokens")
        first_logit = len(tokens) - n_logits
        earlier: list[np.ndarray] = []  # rows of chunks before the last, copied before the next decode
        n_out, start = 0, 0
        while start < len(tokens):
            if n_out:
                earlier.append(self._logits(n_out).copy())
            pos0 = len(self.cached)
            size = ReadCut.of(self).batch(self.exact, self.exact_tail, pos0, pos0 + len(tokens) - start)
            chunk = tokens[start : start + size]
            n_out = 0
            for i, tok in enumerate(chunk):
                want = start + i >= first_logit
                self._put(i, tok, pos0 + i, _SEQUENCE_0, want)
                n_out += want
            rc = self._run(len(chunk), n_branches=1)
            if rc == 0:
                self.cached.extend(chunk)
                self.exact, self.exact_tail = ReadCut.of(self).read(self.exact, self.exact_tail, pos0, len(chunk))
            self._raise_on(rc)
            start += len(chunk)
        last = self._logits(n_out)
        return np.concatenate([*earlier, last]) if earlier else last

    def eval_tree(
        self, pending: int, ids: Sequence[int], parents: Sequence[int], need: Sequence[bool] | None = None
    ) -> np.ndarray:
        """Evaluate the pending token and a draft tree in one batch, one sequence per branch (module
        docstring); logits for every token, or for those `need` marks (the rest zero: llama.cpp runs
        its output layer only on the rows flagged for logits). `keep_path` must follow."""
        n, start = len(ids), len(self.cached)
        if start + n + 1 > self.n_ctx:
            raise ContextOverflow(f"{start + n + 1} tokens do not fit the {self.n_ctx}-token context")
        on = branches_through(parents)
        n_branches = max(1, len(leaves(parents)))
        if n_branches > MAX_BRANCHES or n + 1 > _BATCH:
            raise ValueError(f"a tree of {n} nodes and {n_branches} branches is too large to verify in one pass")
        for branch in range(1, n_branches):
            self._lc.llama_memory_seq_cp(self._mem, 0, branch, -1, -1)
        want = [True] * (n + 1) if need is None else list(need)
        self._put(0, pending, start, range(n_branches), want[0])
        for i, (tok, depth, branches) in enumerate(zip(ids, depths(parents), on, strict=True), start=1):
            self._put(i, tok, start + depth, branches, want[i])
        rc = self._run(n + 1, n_branches)
        if rc == 0:
            self.cached.append(pending)
            self._tree = (on, list(ids), n_branches)
        self._raise_on(rc)
        if all(want):
            return self._logits(n + 1)
        rows = np.zeros((n + 1, self.n_vocab), dtype=np.float32)
        for i in (i for i, w in enumerate(want) if w):  # llama.cpp keeps the flagged rows only
            rows[i] = np.ctypeslib.as_array(self._lc.llama_get_logits_ith(self._ctx, i), shape=(self.n_vocab,))
        return rows

    def keep_path(self, path: Sequence[int]) -> None:
        """After `eval_tree`: keep the pending token and the nodes of `path` (root to leaf) as
        sequence 0; every other branch's cells are freed."""
        assert self._tree is not None, "keep_path follows eval_tree"
        on, ids, n_branches = self._tree
        self._tree = None
        lc, mem = self._lc, self._mem
        if n_branches > 1:
            winner = on[path[-1]][0] if path else 0
            lc.llama_memory_seq_keep(mem, winner)
            if winner != 0:
                lc.llama_memory_seq_cp(mem, winner, 0, -1, -1)
                lc.llama_memory_seq_rm(mem, winner, -1, -1)
        # the kept branch may reach deeper than the accepted path: positions are depths
        lc.llama_memory_seq_rm(mem, 0, len(self.cached) + len(path), -1)
        self.cached.extend(ids[node] for node in path)

    def _put(self, i: int, token: int, pos: int, seqs: Sequence[int], logits: bool) -> None:
        """Slot i of the batch: a token at a position, in sequences `seqs`, with or without logits."""
        batch = self._batch
        assert batch is not None, "used after close()"
        batch.token[i] = token
        batch.pos[i] = pos  # type: ignore[call-overload]  # llama_cpp types pos as an array of arrays; it is llama_pos*
        batch.n_seq_id[i] = len(seqs)
        for j, seq in enumerate(seqs):
            batch.seq_id[i][j] = seq
        batch.logits[i] = logits

    def _run(self, n_tokens: int, n_branches: int) -> int:
        """Decode the first n_tokens slots of the batch after the cached text; on failure, drop
        whatever part of them reached the cache (every branch's sequence included). llama_decode's
        return code."""
        batch = self._batch
        assert batch is not None, "used after close()"
        batch.n_tokens = n_tokens
        rc = self._decode(batch, abortable=n_tokens >= _ABORTABLE_BATCH)
        if rc != 0:
            for branch in range(1, n_branches):
                self._lc.llama_memory_seq_rm(self._mem, branch, -1, -1)
            self._lc.llama_memory_seq_rm(self._mem, 0, len(self.cached), -1)
        return rc

    def _raise_on(self, rc: int) -> None:
        interrupts.raise_pending()
        if rc != 0:
            raise BackendError(runtime.failure(f"llama_decode failed (code {rc}) at position {len(self.cached)}"))

    def _logits(self, n_out: int) -> np.ndarray:
        """The latest decode's n_out rows of logits, as a view of llama.cpp's buffer."""
        return np.ctypeslib.as_array(self._lc.llama_get_logits(self._ctx), shape=(n_out, self.n_vocab))

    def _decode(self, batch, abortable: bool) -> int:
        lc = self._lc
        runtime.error_lines.clear()
        if not abortable:
            return lc.llama_decode(self._ctx, batch)
        calls = runtime.callbacks(lc)
        lc.llama_set_abort_callback(self._ctx, calls.abort, None)
        try:
            return lc.llama_decode(self._ctx, batch)
        finally:  # single tokens and verify passes run without the per-node check
            lc.llama_set_abort_callback(self._ctx, calls.no_abort, None)

    def truncate(self, n: int) -> None:
        if self._tree is not None:  # a tree pass that never reached keep_path (interrupted)
            self.keep_path([])
        if n < len(self.cached):
            self._lc.llama_memory_seq_rm(self._mem, 0, n, -1)
            del self.cached[n:]
            self.exact, self.exact_tail = ReadCut.of(self).truncated(self.exact, self.exact_tail, n)

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (self._lc.llama_token * cap)()
        n = self._lc.llama_tokenize(self._vocab, data, len(data), buf, cap, False, special)
        if n < 0:  # buffer too small: n is minus the needed size
            cap = -n
            buf = (self._lc.llama_token * cap)()
            n = self._lc.llama_tokenize(self._vocab, data, len(data), buf, cap, False, special)
        return list(buf[:n])

    def token_bytes(self, token_id: int) -> bytes:
        piece = self._pieces.get(token_id)
        if piece is None:
            buf = ctypes.create_string_buffer(64)
            n = self._lc.llama_token_to_piece(self._vocab, token_id, buf, len(buf), 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = self._lc.llama_token_to_piece(self._vocab, token_id, buf, len(buf), 0, False)
            piece = self._pieces[token_id] = buf.raw[:n]
        return piece

    def chat_prompt(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> str:
        template = self._lc.llama_model_chat_template(self._model, None)
        if not template:
            raise BackendError(f"{self.path.name} has no chat template; use --raw for plain completion")
        return render_chat(
            template.decode("utf-8"),
            messages,
            tools=tools,
            bos=self._special_text(self._lc.llama_vocab_bos),
            eos=self._special_text(self._lc.llama_vocab_eos),
        )

    def vocabulary(self) -> Vocabulary:
        lc = self._lc
        tokens = tuple(lc.llama_vocab_get_text(self._vocab, t) or b"" for t in range(self.n_vocab))
        bos = lc.llama_vocab_bos(self._vocab)
        return Vocabulary(self.n_vocab, tokens, self.eos_ids, bos if bos >= 0 else None)

    # -- threads -------------------------------------------------------------------------------

    def set_threads(self, n: int) -> None:
        """Run the next passes on `n` threads (`ThreadedBackend`): prompt batches too, so a prompt
        is read at the count chosen for the machine as it is. `placement` follows; the cache's
        identity does not (a state's bytes do not depend on the thread count)."""
        if n < 1:
            raise ValueError(f"{n} threads")
        self._lc.llama_set_n_threads(self._ctx, n, n)
        self.placement = runtime.placement_of(self._layer_devices, self.threads)

    @property
    def threads(self) -> int:
        """The threads llama.cpp runs this context's single-token passes on, as it reports them."""
        return self._lc.llama_n_threads(self._ctx)

    # -- saved states (the prompt cache) ------------------------------------------------------

    def cache_identity(self) -> str:
        """What decides the bytes of `save_state` beside the tokens: the model file, the llama.cpp
        build, and the context and cache settings. A state is only loaded into a backend of the
        same identity (`edgespec.engine.prompt_cache` checks it)."""
        return self._identity

    def save_state(self) -> bytearray:
        """The KV cells of sequence 0 (the tokens of `cached`), as llama.cpp serializes them. Only
        an exact cache is saved (the prompt cache cuts it to `exact_end` first): a loaded state counts
        as exact, so that a warm call computes what a cold one does."""
        if self.exact + self.exact_tail != len(self.cached):
            raise ValueError(f"saving {len(self.cached)} tokens of which {self.exact + self.exact_tail} are exact")
        return copy_out(self._lc, self._ctx)

    def load_state(self, data: bytes | bytearray, tokens: Sequence[int]) -> None:
        """Replace the cache with a state from `save_state` of a backend with this `cache_identity`,
        which held `tokens`. BackendError when llama.cpp refuses it; the cache is then empty."""
        lc = self._lc
        self.truncate(0)
        runtime.error_lines.clear()
        if len(tokens) > self.n_ctx or not copy_in(lc, self._ctx, data):
            lc.llama_memory_seq_rm(self._mem, 0, -1, -1)
            raise BackendError(runtime.failure("llama.cpp could not load a saved state"))
        self.cached = list(tokens)
        self.exact, self.exact_tail = ReadCut.of(self).split(len(tokens))

    # -- lifetime ----------------------------------------------------------------------------

    def _special_text(self, getter) -> str:
        t = getter(self._vocab)
        return (self._lc.llama_vocab_get_text(self._vocab, t) or b"").decode("utf-8", "replace") if t >= 0 else ""

    def close(self) -> None:
        """Free the batch, context and model. Safe to call again, from __del__, and after a Ctrl-C
        cut an earlier call short: each handle is cleared before it is freed, so none is ever freed
        twice (an interrupted close at worst leaks what it had not reached, as the process exits)."""
        batch, ctx, model = self._batch, self._ctx, self._model
        self._batch = self._ctx = self._model = None
        if batch is not None:
            self._lc.llama_batch_free(batch)
        if ctx is not None:
            self._lc.llama_free(ctx)
        if model is not None:
            self._lc.llama_model_free(model)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
