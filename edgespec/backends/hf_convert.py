"""GGUF -> transformers directory, converted once and cached as safetensors.

transformers loads a GGUF by dequantizing every tensor (tens of seconds for the 1.5B on 2 cores); the
result is the same every time, so it is saved once as a transformers directory (safetensors
weights in the dtype the backend runs, config, tokenizer with the GGUF's chat template) and loaded
from there afterwards in a few seconds.

A conversion is named after the GGUF's file name, its identity (sha256 prefix when the registry
pins one, else size and modification time) and the dtype, so a changed file or another dtype gets
its own directory. It is written to a temporary directory next to its final place and renamed into
place when complete: an interrupted conversion leaves no half directory that would be taken for
a finished one, and two processes converting at once both end with a complete copy.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from edgespec.backends.hf_quiet import first_line, quiet_transformers
from edgespec.decoding.backend import BackendError
from edgespec.util.paths import private_folder

DONE = "edgespec-conversion.json"  # written last: its presence marks a complete conversion


def conversion_name(gguf: Path, dtype, sha256: str | None = None) -> str:
    st = gguf.stat()
    identity = sha256[:16] if sha256 else f"{st.st_size}-{st.st_mtime_ns}"
    dtype_name = str(dtype).removeprefix("torch.")
    return f"{gguf.stem}.{identity}.{dtype_name}"


def converted_dir(gguf: Path, cache_dir: Path, *, dtype, sha256: str | None = None) -> Path:
    """The transformers directory for `gguf` in `dtype`, converting it first if not yet cached."""
    gguf = Path(gguf)
    out = Path(cache_dir) / conversion_name(gguf, dtype, sha256)
    if (out / DONE).exists():
        return out
    private_folder(out.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        convert_gguf(gguf, tmp, dtype=dtype)
        (tmp / DONE).write_text(
            json.dumps({"source": str(gguf), "size": gguf.stat().st_size, "sha256": sha256, "dtype": str(dtype)}),
            encoding="utf-8",
        )
        if out.exists() and not (out / DONE).exists():
            shutil.rmtree(out, ignore_errors=True)  # a leftover of an older, interrupted layout
        try:
            os.rename(tmp, out)
        except OSError:
            if not (out / DONE).exists():  # not another process's complete copy: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def convert_gguf(gguf: Path, out: Path, *, dtype) -> None:
    """Dequantize `gguf` through transformers' GGUF loader and save model and tokenizer to `out`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # optional dependency (the hf extra)

    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=dtype, device_map="cpu"
            )
    except Exception as e:  # unsupported architecture or quantization type, truncated file ...
        raise BackendError(f"transformers cannot convert {gguf.name}: {first_line(e)}") from None
    # The weights are already plain tensors (dequantized on load); transformers still marks the model
    # as "quantized with gguf" and refuses to save it, so the marks go before saving.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    try:
        with quiet_transformers():
            model.save_pretrained(out)
            tokenizer.save_pretrained(out)
    except OSError as e:
        raise BackendError(f"cannot write the converted {gguf.name} to {out}: {e}") from None
