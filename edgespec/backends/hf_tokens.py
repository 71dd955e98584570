"""What a transformers tokenizer's ids stand for: their vocabulary spellings, the raw bytes they print
as, and which of them end a generation.

A tokenizer spells bytes in one of three ways (GPT-2's byte-level symbols, sentencepiece's `▁` and
`<0xNN>` byte fallback, or plain text); the tables here undo each, so the hf backend prints the same
bytes as the llama.cpp backend for the same model, and its vocabulary compares with a GGUF's.
Nothing here reads files: the tokenizer object comes from the loader (`hf_loading`).
"""

from __future__ import annotations

import json
import re

# Token texts that end a turn in the chat formats edgespec ships with; like llama.cpp's
# end-of-generation set, they stop generation even when the model's config names only one eos.
END_OF_TURN_TEXTS = (
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<end_of_turn>",
    "<|end|>",
)


def _gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE spells every byte as a printable character; this undoes it."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    shift = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + shift)] = b
            shift += 1
    return table


_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _piece_style(tokenizer) -> str:
    """How the tokenizer spells bytes in its vocabulary: "bytelevel" (GPT-2, Llama 3, Qwen),
    "sentencepiece" (`▁` for a space, `<0xNN>` byte fallback: Llama 2, Mistral) or "plain"."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return "sentencepiece" if getattr(tokenizer, "sp_model", None) is not None else "plain"
    state = json.loads(backend.to_str())
    parts = json.dumps([state.get("decoder"), state.get("pre_tokenizer"), state.get("normalizer")], ensure_ascii=False)
    if '"ByteLevel"' in parts:
        return "bytelevel"
    if state.get("model", {}).get("byte_fallback") or '"ByteFallback"' in parts or "\u2581" in parts:
        return "sentencepiece"
    return "plain"


def token_tables(tokenizer, n_vocab: int) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """(spellings, raw bytes) of every id below n_vocab.

    Spellings are the vocabulary entries as the tokenizer stores them (`Ġthe`, `▁the`, `<0x0A>`),
    the same texts a GGUF of the model holds, so vocabularies compare across formats. Raw bytes are
    what a token stands for in the output: a space, a newline, or part of a UTF-8 character; special
    (control) tokens stand for nothing, as llama.cpp renders them, so both backends print the same
    text. Ids the tokenizer does not know (embedding rows padded past it) are b"" in both.
    """
    style = _piece_style(tokenizer)
    byte_of = _gpt2_byte_decoder()
    added = {i: b"" if t.special else t.content.encode("utf-8") for i, t in tokenizer.added_tokens_decoder.items()}
    pieces = tokenizer.convert_ids_to_tokens(list(range(min(n_vocab, len(tokenizer)))))
    spellings: list[bytes] = []
    raw: list[bytes] = []
    for i, piece in enumerate(pieces):
        if piece is None:
            spellings.append(b"")
            raw.append(b"")
            continue
        spellings.append(piece.encode("utf-8"))
        m = _BYTE_FALLBACK.fullmatch(piece) if style == "sentencepiece" else None
        if m:
            raw.append(bytes([int(m.group(1), 16)]))
        elif i in added:
            raw.append(added[i])
        elif style == "bytelevel":
            raw.append(bytes(byte_of[c] for c in piece) if all(c in byte_of for c in piece) else piece.encode("utf-8"))
        elif style == "sentencepiece":
            raw.append(piece.replace("\u2581", " ").encode("utf-8"))
        else:
            raw.append(tokenizer.convert_tokens_to_string([piece]).encode("utf-8"))
    pad = (b"",) * (n_vocab - len(pieces))
    return tuple(spellings) + pad, tuple(raw) + pad


def end_of_generation_ids(tokenizer, *configs) -> frozenset[int]:
    """eos ids named by the tokenizer, the model config and generation config (an int or a list
    each), plus the end-of-turn tokens of common chat formats present in the vocabulary."""
    ids: set[int] = set()
    for value in [getattr(tokenizer, "eos_token_id", None)] + [_get(c, "eos_token_id") for c in configs]:
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(v for v in value if isinstance(v, int))
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in END_OF_TURN_TEXTS if t in vocab)
    return frozenset(ids)


def _get(config, key: str):
    if config is None:
        return None
    if isinstance(config, dict):
        return config.get(key)
    return getattr(config, key, None)
