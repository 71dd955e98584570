"""Adding derived models and their pair to the user's models.toml (what `models tune --apply` does).

A tuned layout is registered by how it is made (`source = { derive = BASE, layout = LAYOUT }`), not
by its path: `models pull` builds it again wherever it is missing, as it builds the built-in draft.

The user's file is theirs: it is edited with tomlkit, so comments, order and formatting outside the
new tables stay byte for byte; an entry of the same name that says something else is never
overwritten (one-line error instead); an entry that already says the same is left as it is, so
running the tuner again changes nothing. The file is replaced atomically, and the result is read
back through the registry's own validation before it is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tomlkit
from tomlkit.exceptions import TOMLKitError

from edgespec.models.config import CONFIG_BYTES, read_user_config, registry_with, user_config_path
from edgespec.models.registry import ConfigError, PairConfig
from edgespec.util.atomic_file import write_text_atomic
from edgespec.util.paths import display_path, private_folder
from edgespec.util.user_files import size_text


@dataclass(frozen=True)
class DerivedModel:
    name: str
    base: str  # the registry's name of the model it is built from
    layout: str  # a name in edgespec.models.layouts
    file: str  # where it is in the store, relative to the store's models folder
    note: str  # what it was derived from and how, written as a comment above its table


def pair_table(pair: PairConfig, target: str, description: str, drafter: str | None = None) -> dict:
    """The [pairs.X] table of a copy of `pair` whose target is `target` (and draft model `drafter`,
    when given)."""
    drafter = drafter or (pair.draft.name if pair.draft is not None else pair.drafter)
    table: dict = {
        "description": description,
        "backend": pair.backend,
        "target": target,
        "drafter": drafter,
        "context": pair.context,
    }
    if pair.n_gpu_layers:
        table["n_gpu_layers"] = pair.n_gpu_layers
    if pair.threads is not None:
        table["threads"] = pair.threads
    if pair.tool_format is not None:  # the same target writes calls the same way
        table["tool_format"] = pair.tool_format
    s = pair.sampling
    table["sampling"] = {"temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p}
    return table


def register(models: list[DerivedModel], pair_name: str, pair: dict, config: Path | None = None) -> tuple[Path, bool]:
    """Add `models` and the pair `pair_name` to the user's models.toml; returns (the file, whether
    it changed). ConfigError when the file cannot be parsed or already names any differently."""
    path = user_config_path(config)
    try:
        doc = tomlkit.parse(read_user_config(path).decode("utf-8") if path.exists() else "")
    except UnicodeDecodeError:
        raise ConfigError(f"{display_path(path)}: not UTF-8 text") from None
    except TOMLKitError as e:
        raise ConfigError(f"{display_path(path)}: TOML syntax error: {e}") from None
    changed = False
    for model in models:
        model_table = {"format": "gguf", "file": model.file, "source": {"derive": model.base, "layout": model.layout}}
        changed = _add(doc, path, "models", model.name, model_table, model.note) or changed
    note = f"the same pair with target {pair['target']} and draft {pair['drafter']}"
    changed = _add(doc, path, "pairs", pair_name, pair, note) or changed
    if not changed:
        return path, False
    new_text = tomlkit.dumps(doc)
    if len(new_text.encode()) > CONFIG_BYTES:  # edgespec would refuse to read what it wrote
        raise ConfigError(
            f'{display_path(path)}: adding pair "{pair_name}" would make it larger than '
            f"{size_text(CONFIG_BYTES)}, the most edgespec reads; remove entries you no longer use"
        )
    registry_with(path, new_text.encode())  # validated as edgespec will read it, before it is written
    try:
        private_folder(path.parent)
        write_text_atomic(path, new_text, users=True)  # through a symlink, keeping the mode
    except OSError as e:
        raise ConfigError(f"{display_path(path)}: cannot write: {e.strerror or e}") from None
    return path, True


def _add(doc: tomlkit.TOMLDocument, path: Path, section: str, name: str, table: dict, note: str) -> bool:
    """Append [section.name] unless an equal one is there; refuse a different one."""
    if section not in doc:
        doc[section] = tomlkit.table(is_super_table=True)
    elif not isinstance(doc[section], dict):
        raise ConfigError(f'{display_path(path)}: key "{section}" is not a table; cannot add "{name}"')
    existing = doc[section].get(name)
    if existing is not None:
        if existing.unwrap() == table:
            return False
        raise ConfigError(
            f'{display_path(path)}: {section[:-1]} "{name}" already exists and differs; '
            f"rename or remove it, then run again"
        )
    item = tomlkit.table()
    item.comment(f"added by edgespec models tune: {note}")
    for key, value in table.items():
        if isinstance(value, dict):
            sub = tomlkit.inline_table()
            sub.update(value)
            item[key] = sub
        else:
            item[key] = value
    doc[section][name] = item
    return True
