"""Tiny llama-architecture GGUF models, written on the fly, for tests that need a real llama.cpp model.

A model here is 2 layers of width 64 with grouped-query attention (4 query heads, 2 KV heads), f32
random weights drawn from a seeded numpy generator, and a byte-level BPE tokenizer (llama.cpp's
`gpt2` model, `qwen2` pre-tokenizer like the built-in Qwen2.5 pair) over the 256 byte symbols, a few
merged tokens and the ChatML specials. The file is about 0.4 MB and loads in llama.cpp in
milliseconds, so tests can run a real runtime end to end without downloading anything.

Vocabulary layout (fixed, so tests can name ids): ids 0..255 are the single bytes (id == byte
value), then the merged tokens of MERGES in order, then `<|endoftext|>`, `<|im_start|>`,
`<|im_end|>` (CONTROL), then `n_vocab_extra` padding tokens `[PAD{id}]` (UNUSED), the way
convert_hf_to_gguf pads a vocabulary up to the embedding size.

Weights: every tensor comes from its own generator seeded by (seed, tensor name), and the rows of the
embedding and output matrices for padding tokens from a separate stream, so two models that differ
only in `n_vocab_extra` agree on the shared vocabulary. A different seed is an unrelated model over
the same vocabulary (a draft that is almost always rejected). `like=S, similarity=s` makes a draft of
target S: it takes S's embedding and output matrices and mixes the transformer blocks as
sqrt(s) * W_S + sqrt(1 - s) * W_seed. Measured on 200 random contexts against seed 0:

    similarity       0.5    0.9    0.95   0.98   0.99   0.995
    greedy agree     0.13   0.34   0.49   0.64   0.72   0.76
    sum min(p, q)    0.22   0.48   0.60   0.73   0.80   0.86

DRAFT below (0.99) gives speculative decoding plenty of both accepted and rejected drafts.

The output projection is scaled so that logits have a standard deviation of LOGIT_SCALE (a few
units): greedy continuations vary with the context instead of repeating one token, and sampled ones
are neither uniform nor deterministic.

Exactness: these are f32 models, yet llama.cpp's logits for a batch of n tokens differ from n single
steps by up to ~2e-3 (different matmul kernels), and random weights produce near-ties: in 3600
random positions the top-2 gap went down to 3e-5 and one argmax flipped between batch and single
evaluation. Outputs are reproducible for a fixed model, prompt, batch split and thread count, but a
test that compares speculative greedy output with plain greedy output should allow such flips (or
check that each emitted token is the argmax of the logits it was verified with).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

ARCH = "llama"

# Merges in rank order. Each "a b" adds the token "ab"; "Ġ" is the byte-level symbol for a space.
MERGES = ("h e", "Ġ t", "Ġt he", "i n", "e r", "o n", "Ġ a", "r e", "l l", "Ġ w")
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # the ChatML specials, shared with tiny_hf

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

LOGIT_SCALE = 3.0

# A draft for the default target (seed 0): write_tiny_gguf(path, **DRAFT).
DRAFT = {"seed": 1, "like": 0, "similarity": 0.99}


@dataclass(frozen=True, slots=True)
class TinyShape:
    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx: int = 512
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte value (printable bytes map to themselves)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shift)
            shift += 1
    return table


def vocab_tokens(n_vocab_extra: int = 0) -> list[str]:
    """The token texts, in id order, as the GGUF stores them (byte-level symbols for bytes)."""
    symbols = bytes_to_unicode()
    tokens = [symbols[b] for b in range(256)]
    tokens += [m.replace(" ", "") for m in MERGES]
    tokens += list(SPECIALS)
    tokens += [f"[PAD{len(tokens) + i}]" for i in range(n_vocab_extra)]
    return tokens


N_BASE_VOCAB = 256 + len(MERGES) + len(SPECIALS)
# Qwen2.5-Coder's fill-in-the-middle tokens: with `fim=True` the first padding tokens are these
# (CONTROL), so that a tiny model takes editors' inline-completion prompts.
FIM_SPECIALS = ("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")

# Another family's tokenizer for the tiny weights (write_tiny_gguf(tokens=...)): the byte tokens,
# then other merges and other specials, 289 tokens for 269 embedding rows. "</s>" as a plain token
# makes llama.cpp warn "control-looking token ... '</s>' was not control-type" before it refuses the
# file for the weights' shape.
FOREIGN_TOKENS = vocab_tokens()[:256] + ["Ġfoo", "bar", "</s>"] + [f"<extra_{i}>" for i in range(30)]


def token_id(text: str) -> int:
    """Id of a special or merged token by its text, e.g. token_id("<|im_end|>")."""
    return vocab_tokens().index(text)


def token_bytes(tid: int) -> bytes:
    """The raw bytes a (non-special) token stands for."""
    decode = {c: b for b, c in bytes_to_unicode().items()}
    return bytes(decode[c] for c in vocab_tokens()[tid])


def _normal(seed: int, name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return (rng.standard_normal(shape) * std).astype(np.float32)


def _vocab_matrix(seed: int, name: str, n_vocab_extra: int, n_embd: int, std: float) -> np.ndarray:
    base = _normal(seed, name, (N_BASE_VOCAB, n_embd), std)
    if n_vocab_extra == 0:
        return base
    return np.concatenate([base, _normal(seed, name + ".pad", (n_vocab_extra, n_embd), std)])


def tiny_weights(seed: int, n_vocab_extra: int = 0, shape: TinyShape = TinyShape()) -> dict[str, np.ndarray]:
    """All tensors by GGUF name, numpy shapes in (out, in) order (ggml reverses them)."""
    e, hd = shape.n_embd, shape.head_dim
    w = {
        "token_embd.weight": _vocab_matrix(seed, "token_embd", n_vocab_extra, e, 1.0),
        "output_norm.weight": np.ones(e, dtype=np.float32),
        # After the final RMS norm each of the e inputs has unit scale, so logits have std ~ scale.
        "output.weight": _vocab_matrix(seed, "output", n_vocab_extra, e, LOGIT_SCALE / np.sqrt(e)),
    }
    for i in range(shape.n_layer):
        blk = f"blk.{i}"
        w[f"{blk}.attn_norm.weight"] = np.ones(e, dtype=np.float32)
        # Queries scaled up a little so attention is not uniform: the context matters.
        w[f"{blk}.attn_q.weight"] = _normal(seed, f"{blk}.attn_q", (shape.n_head * hd, e), 2.0 / np.sqrt(e))
        w[f"{blk}.attn_k.weight"] = _normal(seed, f"{blk}.attn_k", (shape.n_head_kv * hd, e), 1.0 / np.sqrt(e))
        w[f"{blk}.attn_v.weight"] = _normal(seed, f"{blk}.attn_v", (shape.n_head_kv * hd, e), 1.0 / np.sqrt(e))
        w[f"{blk}.attn_output.weight"] = _normal(seed, f"{blk}.attn_output", (e, shape.n_head * hd), 1.0 / np.sqrt(e))
        w[f"{blk}.ffn_norm.weight"] = np.ones(e, dtype=np.float32)
        w[f"{blk}.ffn_gate.weight"] = _normal(seed, f"{blk}.ffn_gate", (shape.n_ff, e), 1.0 / np.sqrt(e))
        w[f"{blk}.ffn_up.weight"] = _normal(seed, f"{blk}.ffn_up", (shape.n_ff, e), 1.0 / np.sqrt(e))
        w[f"{blk}.ffn_down.weight"] = _normal(seed, f"{blk}.ffn_down", (e, shape.n_ff), 1.0 / np.sqrt(shape.n_ff))
    return w


def write_tiny_gguf(
    path: str | Path,
    *,
    seed: int = 0,
    n_vocab_extra: int = 0,
    eos_token: str = "<|endoftext|>",
    like: int | None = None,
    similarity: float = 0.0,
    shape: TinyShape = TinyShape(),
    name: str | None = None,
    tokens: list[str] | None = None,
    endless: bool = False,
    fim: bool = False,
) -> Path:
    """Write a tiny model to `path` and return it. See the module docstring for the parameters.
    `fim`: the first padding tokens are the fill-in-the-middle tokens (FIM_SPECIALS).

    `tokens` replaces the token list (all NORMAL, whatever their text) and nothing else: a file
    whose tokenizer does not fit its weights, which llama.cpp refuses to load. `endless` zeroes the
    output rows of the special tokens: their logit is then 0 where the best token's is several
    units, so greedy decoding never ends by itself (a generation still running when a test
    interrupts it)."""
    if eos_token not in SPECIALS:
        raise ValueError(f"eos_token must be one of {SPECIALS}, not {eos_token!r}")
    weights = tiny_weights(seed, n_vocab_extra, shape)
    if like is not None:
        base = tiny_weights(like, n_vocab_extra, shape)
        a, b = np.sqrt(similarity), np.sqrt(1.0 - similarity)
        weights = {
            k: (a * base[k] + b * v).astype(np.float32)
            if k.startswith("blk.") and not k.endswith("norm.weight")
            else base[k]
            for k, v in weights.items()
        }
    if endless:
        weights["output.weight"][256 + len(MERGES) : N_BASE_VOCAB] = 0.0
    name = name or f"tiny-llama-s{seed}" + (f"-like{like}" if like is not None else "")
    return write_llama_gguf(
        path, weights, shape, name=name, n_vocab_extra=n_vocab_extra, eos_token=eos_token, tokens=tokens, fim=fim
    )


def _vocabulary(n_vocab_extra: int, fim: bool) -> tuple[list[str], list[gguf.TokenType]]:
    """The tokens and their types: bytes and merges, the specials, the padding (`fim`: the first
    padding tokens are FIM_SPECIALS)."""
    tokens = vocab_tokens(n_vocab_extra)
    types = [gguf.TokenType.NORMAL] * (256 + len(MERGES)) + [gguf.TokenType.CONTROL] * len(SPECIALS)
    types += [gguf.TokenType.UNUSED] * n_vocab_extra
    if fim:
        if n_vocab_extra < len(FIM_SPECIALS):
            raise ValueError(f"fim needs n_vocab_extra >= {len(FIM_SPECIALS)}")
        span = slice(N_BASE_VOCAB, N_BASE_VOCAB + len(FIM_SPECIALS))
        tokens[span] = FIM_SPECIALS
        types[span] = [gguf.TokenType.CONTROL] * len(FIM_SPECIALS)
    return tokens, types


def write_llama_gguf(
    path: str | Path,
    weights: dict[str, np.ndarray],
    shape: TinyShape,
    *,
    name: str,
    n_vocab_extra: int = 0,
    eos_token: str = "<|endoftext|>",
    tokens: list[str] | None = None,
    fim: bool = False,
) -> Path:
    """Write a llama-architecture GGUF of `weights` (GGUF names, numpy (out, in) shapes, f32 or f16)
    with the byte-level vocabulary above padded by `n_vocab_extra` tokens (`fim`: the first of them
    are FIM_SPECIALS); `tokens` replaces the token list (all NORMAL). Also writes models of real
    shapes for benchmarks/gpu_check.py."""
    path = Path(path)
    if tokens is None:
        tokens, types = _vocabulary(n_vocab_extra, fim)
    else:
        types = [gguf.TokenType.NORMAL] * len(tokens)
    half = any(w.dtype == np.float16 for w in weights.values())

    writer = gguf.GGUFWriter(path, ARCH)
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if half else gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(len(tokens))
    writer.add_context_length(shape.n_ctx)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(shape.rms_eps)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(list(MERGES))
    # Like Qwen2.5: no BOS is prepended; the bos id is set anyway so llama.cpp's gpt2 default (11,
    # a byte token here) never leaks in.
    writer.add_bos_token_id(token_id("<|endoftext|>"))
    writer.add_eos_token_id(token_id(eos_token))
    writer.add_pad_token_id(token_id("<|endoftext|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)

    for tensor_name, tensor in weights.items():
        writer.add_tensor(tensor_name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
