"""models.toml -> typed pairs.

The registry is the built-in `edgespec/models.toml` (shipped in the package) plus at most one user
file (`--config`, `EDGESPEC_CONFIG`, or `models.toml` in the platform config dir). User
`[models.X]` and `[pairs.X]` tables add to or replace built-in ones of the same name, and a user
`default` overrides the built-in one. A user file is read after the built-in one, so a user pair may
name built-in models and a user model replaces the built-in one for every pair that names it.

Validation is by hand rather than with a schema library so that every error is one line that names
the file, the pair or model, the key and the valid choices, e.g.
`~/.config/edgespec/models.toml: pair "foo": key "backend": "lamacpp" is not one of llamacpp, hf`.
A model's own table is read in `models.model_table`; this module reads the files, merges them and
reads the pairs.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs

from edgespec.constraints.tool_calls import FORMATS as TOOL_FORMATS
from edgespec.decoding.sampling import SamplingParams, sampling_problem
from edgespec.models.model_table import NO_DRAFT_MODEL, UnresolvedDerived, model_spec, resolve_derived
from edgespec.models.registry import (
    DRAFT_WINDOW,
    MAX_CONTEXT,
    MAX_INT32,
    MAX_THREADS,
    MIN_CONTEXT,
    ConfigError,
    ModelSpec,
    PairConfig,
    Registry,
)
from edgespec.models.toml_table import Table, show, within
from edgespec.util.errors import UsageError
from edgespec.util.paths import display_path
from edgespec.util.user_files import read_user_file

BACKENDS = ("llamacpp", "hf")

_TOP_KEYS = ("default", "models", "pairs", "cache", "history")
_CACHE_KEYS = ("budget",)
_PAIR_KEYS = (
    "backend",
    "target",
    "drafter",
    "context",
    "draft_window",
    "sampling",
    "n_gpu_layers",
    "threads",
    "device_map",
    "description",
    "tool_format",
    "layout",
)
_SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p")
# The most bytes of a user's models.toml read: the built-in one is under 10 KiB. The bound also
# bounds tomllib's time, which grows with the square of a dotted key's length (`a.a.a...`).
CONFIG_BYTES = 64 << 10


def load_registry(user_file: Path | None = None) -> Registry:
    """Read the built-in registry and the user's file (if any) into one validated Registry."""
    user = _user_file(user_file)
    if user is None:
        return _merge([_builtin()])
    return registry_with(user, read_user_config(user))


def read_user_config(path: Path) -> bytes:
    """The user's models.toml as bytes, at most CONFIG_BYTES of them (`read_user_file`)."""
    return read_user_file(path, CONFIG_BYTES, display_path(path), error=ConfigError)


def registry_with(user: Path, data: bytes) -> Registry:
    """The registry as it would be with `data` as the user's file at `user` (checks an edit before
    it is written)."""
    return _merge([_builtin(), _parse_file(user, data)])


def _builtin() -> _Layer:
    builtin = resources.files("edgespec").joinpath("models.toml")
    return _parse_file(Path(str(builtin)), builtin.read_bytes())


def _user_file(explicit: Path | None) -> Path | None:
    """The user's models.toml: the argument, else $EDGESPEC_CONFIG, else the platform config file if it exists."""
    path = user_config_path(explicit)
    return path if explicit is not None or os.environ.get("EDGESPEC_CONFIG") or path.is_file() else None


def user_config_path(explicit: Path | None = None) -> Path:
    """Where the user's models.toml is read from, or would be written to (`models tune --apply`)."""
    if explicit is not None:
        return Path(explicit).expanduser()
    if os.environ.get("EDGESPEC_CONFIG"):
        return Path(os.environ["EDGESPEC_CONFIG"]).expanduser()
    return Path(platformdirs.user_config_dir("edgespec")) / "models.toml"


# -- one file --------------------------------------------------------------------------------------


@dataclass
class _Layer:
    """What one models.toml defines; pairs stay raw until every layer's models are known."""

    file: str
    models: dict[str, ModelSpec | UnresolvedDerived]  # derived ones resolved once every layer is read
    pairs: dict[str, dict[str, Any]]
    default: str | None
    path: Path
    cache_budget: int | None = None
    history_budget: int | None = None


def _parse_file(path: Path, data: bytes) -> _Layer:
    file = display_path(path)
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{file}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{file}: TOML syntax error: {e}") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays and inline tables
        raise ConfigError(f"{file}: TOML nested too deeply") from None
    top = Table(file, "", doc, _TOP_KEYS)
    default = top.get("default", str, None)
    models = {name: model_spec(file, name, raw) for name, raw in top.get("models", dict, {}).items()}
    pairs = top.get("pairs", dict, {})
    cache = _budget(top, "cache", 'a size (e.g. "2GB", "500MB", or a number of bytes)')
    history = _budget(top, "history", 'a number of tokens (e.g. "4M" or 4000000)')
    return _Layer(file, models, pairs, default, path, cache, history)


def _budget(top: Table, table: str, meaning: str) -> int | None:
    """`[<table>] budget`: a size such as "2GB" or "500M" (`parse_size`), or a whole number; `meaning`
    says what a valid one is, for the error."""
    raw = top.get(table, dict, None)
    if raw is None:
        return None
    t = top.sub(table, raw, _CACHE_KEYS)
    value = t.raw.get("budget")
    if value is None:
        return None
    size = parse_size(value) if isinstance(value, str) else value
    if isinstance(value, bool) or not isinstance(size, int) or not 0 <= size <= MAX_SIZE:
        raise t.key_error("budget", f"{show(value)} is not {meaning}")
    return size


def budget_setting(env: str, from_config: int | None, default: int, meaning: str) -> int:
    """A budget from the environment variable `env` (a size, `parse_size`), else models.toml's, else
    `default`; a value that is not one is a UsageError saying it is not `meaning`."""
    raw = os.environ.get(env)
    if raw is None or not raw.strip():
        return from_config if from_config is not None else default
    size = parse_size(raw)
    if size is None:
        raise UsageError(f'{env}: "{raw}" is not {meaning}')
    return size


_SIZE = re.compile(r"\s*(\d{1,30}(?:\.\d{1,30})?)\s*([kmgt]?)(i?)b?\s*", re.IGNORECASE)
# The largest size (a budget of bytes or tokens): what a file offset holds. Anything larger is a
# typo, and refusing it keeps every later sum and ratio inside a float and a C integer.
MAX_SIZE = 2**63 - 1


def parse_size(text: str) -> int | None:
    """Bytes in "2GB", "2G", "500M", "1.5GiB", "4096" (K, M, G, T in powers of 1000; with i, of 1024),
    or None when `text` is not such a size or is larger than MAX_SIZE. Computed exactly (Fraction,
    not float): a long run of digits is refused, never an OverflowError."""
    match = _SIZE.fullmatch(text)
    if match is None:
        return None
    number, unit, binary = match.groups()
    power = "kmgt".find(unit.lower()) + 1 if unit else 0
    if binary and not unit:
        return None
    size = int(Fraction(number) * (1024 if binary else 1000) ** power)
    return size if size <= MAX_SIZE else None


# -- merging and pairs -----------------------------------------------------------------------------


def _merge(layers: list[_Layer]) -> Registry:
    stated: dict[str, ModelSpec | UnresolvedDerived] = {}
    raw_pairs: dict[str, tuple[_Layer, dict[str, Any]]] = {}
    default, default_layer = None, layers[0]
    cache_budget = history_budget = None
    for layer in layers:
        stated.update(layer.models)
        cache_budget = layer.cache_budget if layer.cache_budget is not None else cache_budget
        history_budget = layer.history_budget if layer.history_budget is not None else history_budget
        raw_pairs.update({name: (layer, raw) for name, raw in layer.pairs.items()})
        if layer.default is not None:
            default, default_layer = layer.default, layer
    models = resolve_derived(stated)
    pairs = {name: _pair(layer.file, name, raw, models) for name, (layer, raw) in raw_pairs.items()}
    if default is None:
        raise ConfigError(f'{default_layer.file}: missing key "default" (the pair used without -m)')
    if default not in pairs:
        raise ConfigError(
            f'{default_layer.file}: key "default": "{default}" is not a pair; available: {", ".join(pairs)}'
        )
    return Registry(models, pairs, default, tuple(layer.path for layer in layers), cache_budget, history_budget)


def _pair(file: str, name: str, raw: dict[str, Any], models: dict[str, ModelSpec]) -> PairConfig:
    t = Table(file, f'pair "{name}"', raw, _PAIR_KEYS)
    backend = t.get("backend", str, choices=BACKENDS)
    target = _model_ref(t, "target", models, backend)
    drafter_name = t.get("drafter", str)
    if drafter_name in NO_DRAFT_MODEL:
        drafter, draft = drafter_name, None
    elif drafter_name in models:
        drafter, draft = "model", _model_ref(t, "drafter", models, backend)
    else:
        choices = f"{', '.join(NO_DRAFT_MODEL)} or a model: {', '.join(models)}"
        raise t.key_error("drafter", f'"{drafter_name}" is not one of {choices}')
    return PairConfig(
        name=name,
        backend=backend,
        target=target,
        draft=draft,
        drafter=drafter,
        context=t.get("context", int, check=within(MIN_CONTEXT, MAX_CONTEXT, "tokens")),
        draft_window=t.get("draft_window", int, DRAFT_WINDOW, check=within(0, MAX_CONTEXT, "0 = the whole prompt")),
        sampling=_sampling(t),
        n_gpu_layers=t.get("n_gpu_layers", int, None, check=within(-1, MAX_INT32, "-1 = all layers")),
        threads=t.get("threads", int, None, check=within(1, MAX_THREADS, "llama.cpp's most")),
        device_map=t.get("device_map", str, "auto"),
        description=t.get("description", str, ""),
        tool_format=t.get("tool_format", str, None, choices=tuple(TOOL_FORMATS)),
        layout=t.get("layout", str, "machine", choices=("machine", "published")),
    )


def _model_ref(pair: Table, key: str, models: dict[str, ModelSpec], backend: str) -> ModelSpec:
    name = pair.get(key, str)
    if name not in models:
        raise pair.key_error(key, f'"{name}" is not a model; models: {", ".join(models)}')
    model = models[name]
    if backend == "llamacpp" and model.format != "gguf":
        raise pair.key_error(key, f'model "{name}" has format "{model.format}"; backend "llamacpp" needs "gguf"')
    return model


def _sampling(pair: Table) -> SamplingParams:
    raw = pair.get("sampling", dict, None)
    if raw is None:
        return SamplingParams()
    t = pair.sub("sampling", raw, _SAMPLING_KEYS)
    return SamplingParams(
        temperature=t.get("temperature", float, 0.0, check=_sampling_rule("temperature")),
        top_k=t.get("top_k", int, 0, check=_sampling_rule("top_k")),
        top_p=t.get("top_p", float, 1.0, check=_sampling_rule("top_p")),
        min_p=t.get("min_p", float, 0.0, check=_sampling_rule("min_p")),
    )


def _sampling_rule(name: str) -> Callable[[Any], str | None]:
    return lambda value: sampling_problem(name, value)
