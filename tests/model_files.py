"""Model files for the store, vocabulary and `models` command tests, written here with no network:
an offline Hugging Face cache, a GGUF that holds only a tokenizer, a file damaged in place."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import gguf

COMMIT = "a" * 40  # the revision a filled hub repo's `main` points at

BYTES = [bytes([b]).decode("latin-1") for b in range(256)]  # stand-ins for the 256 byte symbols
MERGED = ["he", "ll", "hello"]
SPECIALS = ["<|endoftext|>", "<|im_end|>"]


def fill_repo(cache: Path, repo: str, files: dict[str, bytes], commit: str = COMMIT) -> None:
    """`files` of hub repo `repo` in the Hugging Face cache `cache`, laid out as the hub client does
    (blobs, a snapshot of symlinks, refs/main)."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    for name, data in files.items():
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(exist_ok=True)
        blob.write_bytes(data)
        link = folder / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))


def overwrite_keeping_mtime(path: Path, offset: int, n: int = 64) -> None:
    """`dd conv=notrunc` then `touch -d` back: n bytes from `offset` inverted, the same size and mtime."""
    before = path.stat()
    time.sleep(0.01)  # ctime has the kernel clock's tick (ms on older kernels): write on a later tick than the stamp
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(n)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in old))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def tiny_tokens(n_padding: int = 0) -> list[str]:
    return BYTES + MERGED + SPECIALS + [f"[PAD{i}]" for i in range(n_padding)]


def write_tokenizer_gguf(
    path: Path,
    tokens: list[str] | None = None,
    eos: int | None = None,
    bos: int | None = None,
    eot: int | None = None,
    endianess: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE,
) -> Path:
    """A GGUF with a byte-level gpt2 tokenizer and no tensors: enough for the vocabulary reader."""
    tokens = tokens or tiny_tokens()
    writer = gguf.GGUFWriter(path, "llama", endianess=endianess)
    writer.add_context_length(512)  # scalars of other types that the reader must step over
    writer.add_rope_freq_base(10000.0)
    writer.add_add_bos_token(False)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges(["h e", "l l", "he ll"])  # gpt2 refuses an empty merges list
    writer.add_eos_token_id(tokens.index("<|im_end|>") if eos is None else eos)
    if bos is not None:
        writer.add_bos_token_id(bos)
    if eot is not None:
        writer.add_eot_token_id(eot)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
