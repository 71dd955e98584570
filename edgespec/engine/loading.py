"""Loading a pair: the model files checked, each model on its runtime.

`load_backend` picks the runtime a pair names; `load_engine` loads the target, and the draft model
only where it may be used, refusing one whose vocabulary is not the target's. Only the one door,
`edgespec.engine.options`, calls it, once every setting is checked (an import contract in
pyproject.toml keeps everything above the engine out of this module).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from edgespec.backends.hf_loading import load_hf_backend
from edgespec.decoding.backend import Backend, BackendError
from edgespec.decoding.drafters import DraftChoice, DrafterKind
from edgespec.engine.engine import Engine
from edgespec.engine.prompt_cache import PromptCache
from edgespec.models.machine_layout import machine_target
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.models.store import Store
from edgespec.models.vocab import check_loaded_pair, check_pair, read_vocabulary
from edgespec.util.errors import EdgespecError
from edgespec.util.paths import home


class LoadedModel(Backend, Protocol):
    """A backend as `load_backend` returns it: it frees its model on `close`, which loading calls
    when what follows the load fails."""

    def close(self) -> None: ...


def load_backend(pair: PairConfig, model: ModelSpec, path: Path, sha256: str | None = None) -> LoadedModel:
    """`sha256`: the file's, as the store verified it (names the model for the prompt cache)."""
    if pair.backend == "llamacpp":
        # jinja2 (its chat templates, tens of ms to import): only when a llama.cpp pair loads
        from edgespec.backends.llamacpp import LlamaCppBackend

        return LlamaCppBackend(path, pair.context, n_gpu_layers=pair.n_gpu_layers, threads=pair.threads, sha256=sha256)
    return load_hf_backend(model, path, n_ctx=pair.context, device_map=pair.device_map, cache_dir=home() / "converted")


def load_engine(pair: PairConfig, draft: DraftChoice, cache: PromptCache | None) -> Engine:
    """Load a pair: check its files, load the target (and the draft model if it may be used: not
    for --draft ngram or none). The engine's `load_s` has the seconds of each part; the draft's
    includes checking that its vocabulary is the target's. `cache`: the prompt cache its replies
    read from and save to (none: every reply reads cold)."""
    store = Store()
    t0 = time.perf_counter()
    target_model, target_path, _ = machine_target(store, pair, store.ensure(pair.target, pair.name))
    pair = replace(pair, target=target_model)
    draft_model = pair.draft if DrafterKind.MODEL in DraftChoice(draft).kinds else None
    draft_path = store.ensure(draft_model, pair.name) if draft_model is not None else None
    t1 = time.perf_counter()
    target = load_backend(pair, pair.target, target_path, store.expected_sha256(pair.target))
    t2 = time.perf_counter()
    load_s = {"check": t1 - t0, "target": t2 - t1}
    try:
        draft_backend = None
        if draft_model is not None and draft_path is not None:
            sha256 = store.expected_sha256(draft_model)
            draft_backend = _load_draft(pair, target, target_path, draft_model, draft_path, sha256)
            load_s["draft"] = time.perf_counter() - t2
    except BaseException:  # a Ctrl-C too: the target is freed here, not left to __del__ at exit
        target.close()
        raise
    return Engine(pair, target, draft_backend, load_s=load_s, cache=cache)


def _load_draft(
    pair: PairConfig, target: Backend, target_path: Path, model: ModelSpec, path: Path, sha256: str | None
) -> LoadedModel:
    """The draft model's backend, refused (IncompatibleDraft) when its vocabulary is not the target's.

    A draft the runtime cannot load at all may still have a readable vocabulary: when that differs
    from the target's, the error says how (as `edgespec models check` does), not what the runtime
    logged on the way down."""
    try:
        draft = load_backend(pair, model, path, sha256)
    except BackendError:
        _refuse_unlike_vocabularies(pair, target_path, model, path)
        raise
    try:
        check_loaded_pair(target, draft, pair.name)
    except BaseException:
        draft.close()
        raise
    return draft


def _refuse_unlike_vocabularies(pair: PairConfig, target_path: Path, draft_model: ModelSpec, draft_path: Path) -> None:
    """IncompatibleDraft when the two files' vocabularies differ; nothing when they agree or a file
    has no readable vocabulary (then the runtime's own error says more)."""
    try:
        target, draft = read_vocabulary(pair.target, target_path), read_vocabulary(draft_model, draft_path)
    except EdgespecError:
        return
    check_pair(target, draft, pair.name)
