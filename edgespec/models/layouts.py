"""Weight layouts of a GGUF target: what a file holds, which candidate layouts `models tune` builds,
and building one with llama.cpp's own quantizer.

Why layouts matter: llama.cpp's CPU backend repacks some quant types at load (q4_0, iq4_nl, q4_K
on x86 with AVX2) into interleaved layouts whose GEMM kernels take 4 or 8 rows at once, so
verifying several drafted tokens costs little more than one. Tensors of other types (q6_K, q8_0 on
some builds) are multiplied row by row, and each extra verified token costs nearly a full step.
Which types are repacked depends on the build and the CPU, so nothing here assumes it: the loaded
model reports it (`LlamaCppBackend.layout`), and `models tune` measures every candidate.

A candidate either requantizes the whole model to one type (llama.cpp still picks its own types
for a few tensors, as its `llama-quantize` does), or keeps every tensor of the source byte for byte
except those of some types, which it converts ("mixes"): those keep most of the original weights.
"""

from __future__ import annotations

import ctypes
import functools
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import gguf

from edgespec.backends.llamacpp_runtime import run_quantizer
from edgespec.decoding.backend import BackendError
from edgespec.util.atomic_file import partial_path
from edgespec.util.errors import EdgespecError
from edgespec.util.paths import private_folder


class LayoutError(EdgespecError):
    """A file that is not a GGUF model, or a layout llama.cpp could not build."""


# ggml tensor types (ggml.h) and llama.cpp file types (llama.h) by name
GGML_TYPES = {t.name.lower(): int(t.value) for t in gguf.GGMLQuantizationType}
FILE_TYPES = {t.name.lower().removeprefix("mostly_"): int(t.value) for t in gguf.LlamaFileType}


@dataclass(frozen=True)
class Layout:
    """One candidate. `whole`: a llama.cpp file type for the whole model (with `pure`, every
    tensor in it); else `convert` maps tensor types of the source to new ones, all else is kept."""

    name: str
    whole: str | None = None
    pure: bool = False
    convert: tuple[tuple[str, str], ...] = ()
    only: str | None = None  # a regex: convert only the tensors whose names match

    def describe(self) -> str:
        if self.whole:
            return f"all {self.whole}" + (" (every tensor)" if self.pure else " (llama.cpp's choices)")
        what = ", ".join(f"{a}->{b}" for a, b in self.convert)
        where = " in " + re.sub(r"\\(.)", r"\1", self.only) if self.only else ""  # the regex, unescaped
        return f"kept, {what}{where}"


# The candidates `models tune` measures. Whole-model requantizations to the types llama.cpp repacks,
# and mixes that keep the source's tensors and convert only those of a type that is not repacked.
CANDIDATES = (
    Layout("q6k-as-q4k", convert=(("q6_k", "q4_k"),)),
    Layout("q6k-as-q4_0", convert=(("q6_k", "q4_0"),)),
    Layout("q6k-as-iq4_nl", convert=(("q6_k", "iq4_nl"),)),
    Layout("output-as-q4_0", convert=(("q6_k", "q4_0"),), only=r"output\.weight"),
    Layout("output-as-q4k", convert=(("q6_k", "q4_k"),), only=r"output\.weight"),
    Layout("output-as-iq4_nl", convert=(("q6_k", "iq4_nl"),), only=r"output\.weight"),
    Layout("q4_0", whole="q4_0"),
    Layout("q4_0-pure", whole="q4_0", pure=True),
    Layout("iq4_nl", whole="iq4_nl"),
)


# The draft model's layout: its tensors of the types this llama.cpp multiplies row by row, as q4_0,
# which it repacks. A draft's weights cost no fidelity (the target checks every token it proposes,
# so the output is the same), only acceptance, and a draft step that is cheaper pays on every round.
DRAFT = Layout("draft-q4_0", convert=tuple((kind, "q4_0") for kind in ("q5_0", "q5_1", "q8_0", "q6_k")))


def candidate(name: str) -> Layout:
    """A target layout `models tune` measures, by name."""
    return _find(name, CANDIDATES)


def named(name: str) -> Layout:
    """Any layout by name, the draft's included (a derived model in models.toml names one)."""
    return _find(name, CANDIDATES + (DRAFT,))


def _find(name: str, layouts: tuple[Layout, ...]) -> Layout:
    for layout in layouts:
        if layout.name == name:
            return layout
    raise LayoutError(f"no layout {name!r}; layouts: {', '.join(c.name for c in layouts)}")


@dataclass(frozen=True)
class FileLayout:
    """What a GGUF file holds: its file type and how many weight tensors of each type."""

    file_type: str
    tensor_types: dict[str, int]  # ggml type name -> tensors (2-D weights only)
    size: int

    def text(self) -> str:
        if not self.tensor_types:
            return f"{self.file_type}, no weights"
        counts = " ".join(f"{t}x{n}" for t, n in sorted(self.tensor_types.items(), key=lambda kv: -kv[1]))
        return f"{self.file_type} ({counts})"


def read_layout(path: Path) -> FileLayout:
    """The layout of the GGUF at `path`, read from its header (no weights are loaded). Parsing a
    header with a 150k-token vocabulary takes seconds in gguf's Python reader, and a load, its
    repack report and the tuner's table each ask for it: one parse per file version."""
    st = path.stat()
    return _parsed_layout(str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _parsed_layout(path: str, size: int, mtime_ns: int) -> FileLayout:
    reader = _reader(Path(path))
    types = Counter(t.tensor_type.name.lower() for t in reader.tensors if len(t.shape) >= 2)
    field = reader.fields.get("general.file_type")
    file_type = "unknown"
    if field is not None:
        value = int(field.parts[field.data[0]][0])
        file_type = next((name for name, v in FILE_TYPES.items() if v == value), str(value))
    return FileLayout(file_type, dict(types), size)


def repacked_text(path: Path, repacked: dict[str, int]) -> str:
    """What llama.cpp repacked of a loaded GGUF, e.g. "168 of 198 weight tensors repacked (q4_K_8x8 x168)"."""
    n = sum(repacked.values())
    kinds = " ".join(f"{k} x{v}" for k, v in sorted(repacked.items()))
    total = sum(read_layout(path).tensor_types.values())
    return f"{n} of {total} weight tensors repacked" + (f" ({kinds})" if kinds else "")


def describe_loaded(path: Path, repacked: dict[str, int]) -> str:
    """A loaded GGUF's layout as llama.cpp set it up: its weight types and what it repacked."""
    return f"{read_layout(path).text()}, {repacked_text(path, repacked)}"


def _reader(path: Path) -> gguf.GGUFReader:
    try:
        return gguf.GGUFReader(str(path))
    except (ValueError, OSError, KeyError, IndexError) as e:
        raise LayoutError(f"{path}: not a GGUF model ({e})") from None


def tensor_types(path: Path) -> dict[str, str]:
    """Weight tensor name -> ggml type name, for the 2-D tensors of the GGUF at `path`."""
    return {t.name: t.tensor_type.name.lower() for t in _reader(path).tensors if len(t.shape) >= 2}


def plan_types(source: Path, layout: Layout) -> dict[str, str]:
    """For a mix: the type every weight tensor of the result should have."""
    only = re.compile(layout.only) if layout.only else None
    conversions = dict(layout.convert)
    return {
        name: conversions.get(kind, kind) if only is None or only.fullmatch(name) else kind
        for name, kind in tensor_types(source).items()
    }


def converts_anything(source: Path, layout: Layout) -> bool:
    """Whether a mix would change any tensor of `source` (a whole-model layout always does)."""
    return bool(layout.whole) or plan_types(source, layout) != tensor_types(source)


def build(source: Path, dest: Path, layout: Layout, threads: int = 0) -> None:
    """Write `layout` of the GGUF at `source` to `dest` with llama.cpp's quantizer (about half a
    minute for a 1.5B model on two cores). A mix names every tensor's type explicitly, so tensors
    that keep their type are copied unchanged (llama.cpp skips requantizing a tensor to its own
    type) whatever rules this llama.cpp version would apply to the file type."""
    import llama_cpp as lc  # loads llama.cpp's libraries (about 0.1 s): only when a layout is built

    params = lc.llama_model_quantize_default_params()
    params.allow_requantize = True
    params.nthread = threads
    keep_alive: list[object] = []  # what the C parameters point into, alive until the quantizer ran
    if layout.whole:
        params.ftype = FILE_TYPES[layout.whole]
        params.pure = layout.pure
    else:
        source_type = read_layout(source).file_type
        params.ftype = FILE_TYPES.get(source_type, FILE_TYPES["q4_k_m"])
        overrides = plan_types(source, layout)
        table = (lc.llama_model_tensor_override * (len(overrides) + 1))()
        for i, (name, kind) in enumerate(overrides.items()):
            pattern = ("^" + re.escape(name) + "$").encode()
            keep_alive.append(pattern)
            table[i].pattern, table[i].type = pattern, GGML_TYPES[kind]
        table[len(overrides)].pattern = None
        params.tt_overrides = ctypes.cast(table, type(params.tt_overrides))
        keep_alive.append(table)
    private_folder(dest.parent)
    partial = partial_path(dest)
    try:
        run_quantizer(source, partial, params, f"llama.cpp could not write layout {layout.name} of {source}")
    except BackendError as e:
        partial.unlink(missing_ok=True)
        raise LayoutError(str(e)) from None
    except BaseException:  # a signal: no half-written layout stays behind
        partial.unlink(missing_ok=True)
        raise
    partial.replace(dest)


def kept_share(source: Path, built: Path) -> float:
    """The share of the source's weights (by bytes) that `built` holds unchanged."""
    a = {t.name: t for t in _reader(source).tensors if len(t.shape) >= 2}
    kept = total = 0
    for t in _reader(built).tensors:
        if len(t.shape) < 2 or t.name not in a:
            continue
        total += int(a[t.name].n_bytes)
        if t.tensor_type == a[t.name].tensor_type and bytes(t.data) == bytes(a[t.name].data):
            kept += int(a[t.name].n_bytes)
    return kept / total if total else 0.0
