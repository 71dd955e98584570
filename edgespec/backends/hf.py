"""transformers (+ accelerate, bitsandbytes): Hugging Face models, bf16 on CPU or quantized on a GPU.

One `HFBackend` holds one model and one KV cache, a transformers `DynamicCache`. The cache is rolled
back by cropping it (`DynamicLayer.crop` with a negative count), and a pass computes the output
projection only for the positions the caller asked for (`logits_to_keep`): for a 151936-token
vocabulary the full projection of a 500-token prompt would be 300 MB of logits nobody reads.

The backend takes a model and tokenizer already loaded: `hf_loading.load_hf_backend` decides where
and in what precision, and what may be loaded at all; `hf_tokens` says what each token id stands for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from edgespec.backends.base import BackendError, ContextOverflow, Placement, Vocabulary
from edgespec.backends.hf_quiet import first_line
from edgespec.backends.hf_tokens import end_of_generation_ids, token_tables

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
        config = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
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
        torch = self._torch
        start = len(self.cached)
        try:
            with torch.inference_mode():
                for a, b in _chunks(n, n_logits, PREFILL_CHUNK):
                    ids = torch.tensor([list(tokens[a:b])], dtype=torch.long, device=self.device)
                    # logits_to_keep=0 would mean "all": a pass that needs none computes one.
                    keep = max(1, n_logits) if b == n else 1
                    out = self.model(input_ids=ids, cache=self._cache, use_cache=True, logits_to_keep=keep)
                rows = out.logits[0, out.logits.shape[1] - n_logits :] if n_logits else out.logits[0, :0]
                logits = rows.to(device="cpu", dtype=torch.float32).numpy()
        except BaseException:
            self._crop_to(start)  # a failed or interrupted pass may have filled some layers only
            raise
        self.cached.extend(tokens)
        return logits

    def truncate(self, n: int) -> None:
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

    def chat_prompt(self, messages: Sequence[dict]) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise BackendError(f"{self.label} has no chat template; use --raw for plain completion")
        try:
            return self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
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
            import gc

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
    spans = list(zip(bounds[:-1], bounds[1:]))
    while len(spans) > 1 and spans[-1][1] - spans[-1][0] < n_logits:
        (a, _), (_, b) = spans[-2], spans[-1]
        spans[-2:] = [(a, b)]
    return spans
