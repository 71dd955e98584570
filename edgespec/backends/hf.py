"""transformers (+ accelerate, bitsandbytes): Hugging Face models, bf16 on CPU or quantized on a GPU.

One `HFBackend` holds one model and one KV cache, a transformers `DynamicCache`. The cache is rolled
back by cropping it (`DynamicLayer.crop` with a negative count), and a pass computes the output
projection only for the positions the caller asked for (`logits_to_keep`): for a 151936-token
vocabulary the full projection of a 500-token prompt would be 300 MB of logits nobody reads.

A draft tree (`decoding/tree.py`) is verified in one forward: a 4D attention mask lets each token
see the committed text and its own ancestors, and explicit position ids put each node at its
depth. The cache then holds every node; `keep_path` moves the accepted path's entries up behind
the pending token (when the path is not the first nodes) and crops the rest. A chain needs neither:
its ancestry is the causal mask the model builds from the cache length, so it runs as `eval` does.

The backend takes a model and tokenizer already loaded: `hf_loading.load_hf_backend` decides where
and in what precision, and what may be loaded at all; `hf_tokens` says what each token id stands for.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import numpy as np

from edgespec.backends.hf_quiet import first_line
from edgespec.backends.hf_tokens import end_of_generation_ids, token_tables
from edgespec.decoding.backend import BackendError, ContextOverflow, Placement, Vocabulary
from edgespec.decoding.tree import ancestry, depths, is_chain

# Prompts longer than this are evaluated in chunks: the attention scores of one pass grow with
# chunk x context, and a long prompt in one pass can need gigabytes for nothing.
PREFILL_CHUNK = 512


class HFBackend:
    """One transformers causal LM with one KV cache (batch of one).

    `eval` runs under `torch.inference_mode`, asks the model for logits at the last `n_logits`
    positions only, and returns them as float32 numpy on the host: one device-to-host copy per
    call, the only synchronisation the decode loop needs.
    """

    def __init__(self, model, tokenizer, *, n_ctx: int, label: str = "model", path: Path | None = None):
        import torch  # optional dependencies (the hf extra): this module imports without them
        from transformers import DynamicCache

        self._torch = torch
        self._new_cache = DynamicCache
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.label = label
        self.path = path  # the directory the weights came from (a GGUF's conversion), if any
        config = (
            model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
        )
        limit = getattr(config, "max_position_embeddings", None)
        self.n_ctx = min(n_ctx, limit) if limit else n_ctx
        out = model.get_output_embeddings()
        self.n_vocab = int(getattr(out, "out_features", None) or config.vocab_size)
        self.eos_ids = end_of_generation_ids(tokenizer, model.config, getattr(model, "generation_config", None))
        self._spellings, self._bytes = token_tables(tokenizer, self.n_vocab)
        self.device = model.get_input_embeddings().weight.device  # where input ids go
        self.placement = placement_of({str(p.device) for p in model.parameters()}, torch.get_num_threads())
        # No config: every layer caches in full (DynamicLayer), so any length can be cropped; with
        # the config, sliding-window layers would keep only their window and refuse a rollback.
        self._cache = DynamicCache()
        self.cached: list[int] = []
        self._tree: list[int] | None = None  # the tree's tokens, from eval_tree until keep_path

    # -- the Backend protocol ---------------------------------------------------------------

    def eval(self, tokens: Sequence[int], n_logits: int) -> np.ndarray:
        """Append `tokens`; return float32 logits (n_logits, n_vocab) for the last n_logits of them."""
        n = len(tokens)
        if not 0 <= n_logits <= n:
            raise ValueError(f"n_logits={n_logits} with {n} tokens")
        if len(self.cached) + n > self.n_ctx:
            raise ContextOverflow(f"{len(self.cached) + n} tokens do not fit the {self.n_ctx}-token context")
        if n == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        start = len(self.cached)
        for a, b in _chunks(n, n_logits, PREFILL_CHUNK):
            # logits_to_keep=0 would mean "all": a pass that needs none computes one.
            logits = self._forward(start, tokens[a:b], max(1, n_logits) if b == n else 1)
        self.cached.extend(tokens)
        return logits[len(logits) - n_logits :] if n_logits else logits[:0]

    def eval_tree(
        self, pending: int, ids: Sequence[int], parents: Sequence[int], need: Sequence[bool] | None = None
    ) -> np.ndarray:
        """Evaluate the pending token and a draft tree in one forward (module docstring); float32
        logits (n + 1, n_vocab), row i + 1 after node i, every row whatever `need` says. `keep_path`
        must follow."""
        torch = self._torch
        start, n = len(self.cached), len(ids) + 1
        if start + n > self.n_ctx:
            raise ContextOverflow(f"{start + n} tokens do not fit the {self.n_ctx}-token context")
        tree = {}
        if not is_chain(parents):
            dtype = self.model.get_input_embeddings().weight.dtype
            mask = torch.zeros((1, 1, n, start + n), dtype=dtype, device=self.device)
            seen = torch.from_numpy(ancestry(parents)).to(self.device)
            mask[0, 0, :, start:].masked_fill_(~seen, torch.finfo(dtype).min)
            positions = [start] + [start + d for d in depths(parents)]
            tree = {"attention_mask": mask, "position_ids": torch.tensor([positions], device=self.device)}
        logits = self._forward(start, [pending, *ids], n, **tree)
        self.cached.append(pending)
        self._tree = list(ids)
        return logits

    def keep_path(self, path: Sequence[int]) -> None:
        """After `eval_tree`: keep the pending token and the nodes of `path` (root to leaf)."""
        ids, self._tree = self._tree, None
        assert ids is not None, "keep_path follows eval_tree"
        start = len(self.cached)  # the first node's cache entry
        end = start + len(path)
        if list(path) != list(range(len(path))):  # the path is not the first nodes: move it up
            where = self._torch.tensor([start + node for node in path], device=self.device)
            with self._torch.inference_mode():
                for layer in self._cache.layers:
                    layer.keys[..., start:end, :] = layer.keys.index_select(-2, where)
                    layer.values[..., start:end, :] = layer.values.index_select(-2, where)
        self._crop_to(end)
        self.cached.extend(ids[node] for node in path)

    def _forward(self, start: int, tokens: Sequence[int], keep: int, **tree) -> np.ndarray:
        """One pass over `tokens` after `start` cached ones; float32 logits of the last `keep`. A
        failed or interrupted pass may have filled some layers only: they are cut back to `start`."""
        torch = self._torch
        try:
            with torch.inference_mode():
                ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.device)
                out = self.model(input_ids=ids, cache=self._cache, use_cache=True, logits_to_keep=keep, **tree)
                return out.logits[0].to(device="cpu", dtype=torch.float32).numpy()
        except BaseException:
            self._crop_to(start)
            raise

    def truncate(self, n: int) -> None:
        if self._tree is not None:  # a tree pass that never reached keep_path (interrupted)
            self.keep_path([])
        if n < 0:
            raise ValueError(f"truncate({n})")
        if n >= len(self.cached):
            return
        if n == 0:
            self._cache = self._new_cache()  # frees the tensors instead of keeping empty views of them
        else:
            self._crop_to(n)
        del self.cached[n:]

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        """Token ids of `text`, no BOS added (chat templates write their own, as in the llama.cpp
        backend). special=False spells special-token texts as plain text instead of parsing them."""
        return list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=not special)["input_ids"])

    def token_bytes(self, token_id: int) -> bytes:
        return self._bytes[token_id] if 0 <= token_id < self.n_vocab else b""

    def chat_prompt(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise BackendError(f"{self.label} has no chat template; use --raw for plain completion")
        try:
            return self.tokenizer.apply_chat_template(
                list(messages), tools=list(tools) if tools else None, add_generation_prompt=True, tokenize=False
            )
        except Exception as e:  # jinja2 TemplateError, or a template's own raise_exception
            raise BackendError(f"the chat template of {self.label} failed: {first_line(e)}") from None

    def vocabulary(self) -> Vocabulary:
        return Vocabulary(self.n_vocab, self._spellings, self.eos_ids, self.tokenizer.bos_token_id)

    # -- the cache ---------------------------------------------------------------------------

    def _crop_to(self, n: int) -> None:
        """Cut every layer back to n positions (layers are cropped one by one: after a failed pass
        they need not all hold the same length)."""
        with self._torch.inference_mode():
            for layer in self._cache.layers:
                length = layer.get_seq_length()
                if length > n:
                    layer.crop(n - length)

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        self._cache = self._new_cache()
        self.cached = []
        if self.model is not None:
            self.model = None
            gc.collect()
            if self._torch.cuda.is_available():
                self._torch.cuda.empty_cache()


def placement_of(devices: set[str], threads: int) -> Placement:
    """Where a model runs, from the devices torch reports for its parameters ("cuda:0", "cpu";
    "meta" for weights accelerate keeps off the devices and runs on the CPU)."""
    on_gpu = sorted(d for d in devices if d not in ("cpu", "meta"))
    if not on_gpu:
        return Placement("cpu", f"{threads} thread{'s' if threads > 1 else ''}", threads)
    if len(on_gpu) == len(devices):
        return Placement("gpu", ", ".join(on_gpu), 0)
    return Placement("gpu+cpu", f"{', '.join(on_gpu)} and the CPU ({threads} threads)", threads)


def _chunks(n: int, n_logits: int, size: int) -> list[tuple[int, int]]:
    """Split n tokens into passes of at most `size`, except that the last one holds every position
    that needs logits (so one pass yields them all)."""
    if n <= size:
        return [(0, n)]
    bounds = list(range(0, n, size)) + [n]
    spans = list(pairwise(bounds))
    while len(spans) > 1 and spans[-1][1] - spans[-1][0] < n_logits:
        (a, _), (_, b) = spans[-2], spans[-1]
        spans[-2:] = [(a, b)]
    return spans
