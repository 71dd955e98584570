"""A llama.cpp context's saved KV state, the prompt cache's side of `llamacpp.LlamaCppBackend`: what
a state depends on beyond its tokens (the identity a saved state is only loaded under), and copying
sequence 0's cells out of a context and back into one."""

from __future__ import annotations

import ctypes
from pathlib import Path

from edgespec.decoding.backend import BackendError, Placement, ReadCut


def _u8_array(buffer: bytearray):
    """A ctypes view of `buffer` (no copy) for llama.cpp's uint8_t* parameters."""
    return (ctypes.c_uint8 * len(buffer)).from_buffer(buffer)


def state_identity(lc, path: Path, sha256: str | None, mparams, cparams, placement: Placement, cut: ReadCut) -> str:
    """What a saved KV state depends on besides its tokens (see `LlamaCppBackend.cache_identity`).
    The model is named by its content: the sha256 the store verified before the load, so a hard
    link, a copy or a move keeps every entry. A file with no known sha256 (a local `path` without
    one) is named by path, size and mtime, without hashing a gigabyte on every load: a new hard link
    changes the file's ctime and inode count, not these."""
    if sha256 is not None:
        model = f"sha256 {sha256}"
    else:
        st = Path(path).stat()
        model = f"{Path(path).resolve()} {st.st_size} {st.st_mtime_ns}"
    settings = {name: getattr(cparams, name) for name in _STATE_SETTINGS}
    return "|".join(
        [
            f"llama-cpp-python {lc.__version__}",
            lc.llama_print_system_info().decode("utf-8", "replace").strip(),
            model,
            f"n_gpu_layers {mparams.n_gpu_layers}",
            f"{placement.device} {placement.detail}",
            " ".join(f"{k} {v}" for k, v in settings.items()),
            f"read_chunk {cut.chunk} tail {cut.tail}",  # states saved under another cut would not be exact
        ]
    )


# The context settings that decide what a state holds or how its numbers were computed.
_STATE_SETTINGS = (
    "n_ctx",
    "n_batch",
    "n_ubatch",
    "n_seq_max",
    "kv_unified",
    "type_k",
    "type_v",
    "flash_attn_type",
    "offload_kqv",
    "swa_full",
    "rope_freq_base",
    "rope_freq_scale",
)


def copy_out(lc, ctx) -> bytearray:
    """The KV cells of sequence 0 of `ctx`, as llama.cpp serializes them."""
    data = bytearray(lc.llama_state_seq_get_size(ctx, 0))
    n = lc.llama_state_seq_get_data(ctx, _u8_array(data), len(data), 0) if data else 0
    if n == 0:
        raise BackendError("llama.cpp could not copy the cache's state")
    return data[:n] if n < len(data) else data


def copy_in(lc, ctx, data: bytes | bytearray) -> bool:
    """Put a state from `copy_out` into sequence 0 of `ctx`; False when llama.cpp refuses it."""
    buffer = data if isinstance(data, bytearray) else bytearray(data)
    return lc.llama_state_seq_set_data(ctx, _u8_array(buffer), len(buffer), 0) != 0
