"""The prompt cache: the KV state of what a model has read, kept across calls and processes.

Reading the prompt is most of a coding assistant's call on a small CPU (docs/design.md, "Where a
call's time goes"), and editors and scripts ask several things about one file. A call whose prompt starts with
text read before (the same file with another instruction, a resumed chat) loads that state and
reads only the rest; loading a file's state takes a small part of the time reading it takes
(benchmarks/results/prompt_cache.json, `summary.cold_over_warm_ttft`).

- `warm(backend, tokens)` before a model reads `tokens`: loads the saved state sharing the longest
  prefix with them, when that beats what the backend's own cache shares by at least `MIN_TOKENS`.
- `save(backend)` after a reply: keeps the backend's state, unless a saved one already covers it;
  a saved state that the new one nearly covers is replaced, so asking ten things about one file
  keeps one entry, not ten.

A warm call computes what a cold one does, bit for bit: llama.cpp's numbers depend on how a read is
cut into batches, so the backend reads in chunks at fixed positions, a state is saved only up to
the last whole chunk (or tail chunk) read from the start, and a load is cut to where such a chunk
starts; the rest is read in the chunks a cold read forms (`ChunkedBackend` in
`decoding/backend.py`). The reply then differs only where the passes after the prompt differ
(drafts from earlier calls, the live choice of K).

The engine does both, for the target and the draft model (`Engine(cache=...)`). Only the front ends
that serve a user pass a cache (`run`, `chat`, `serve`); the bench passes none, so its timings stay
cold. Backends without `save_state` (the transformers one) are left alone.

On disk (`home()/prompt-cache`), one file per state (`prompt_cache_files.py`: the format, and
reading a file without trusting it). A damaged, truncated, foreign or older-format entry, or
anything else under an entry's name, is ignored, removed and said once on stderr (where the folder
does not let it go, that is said instead); a cache folder that cannot be written costs only the
cache. The folder is made 0700 and entries are 0600, whatever the umask. Writes are atomic
(`atomic_file`), so two processes that save the same entry leave one whole entry. The folder holds
at most `budget` bytes (default 2 GB, `[cache] budget` in models.toml, or EDGESPEC_CACHE_BUDGET; 0
turns the cache off); the least recently used entries go first (a hit or a save that finds its
state covered touches the file's mtime).

In memory (`memory_entries` > 0, for `serve`): the last few states of each model, so an editor
that alternates between two files loads neither from disk; the disk is the fallback.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeGuard

from edgespec.decoding.backend import (
    Backend,
    BackendError,
    StatefulBackend,
    common_prefix,
    exact_end,
    kept_from_saved,
    reused_prefix,
)
from edgespec.engine.prompt_cache_files import (
    Damaged,
    Entry,
    entry_header,
    entry_path,
    entry_size,
    identity_pattern,
    read_entry,
    remove,
    stamp,
    write_entry_file,
)
from edgespec.models.config import budget_setting
from edgespec.util import unsaved
from edgespec.util.atomic_file import write_atomic
from edgespec.util.home_files import Untrusted, check_no_links
from edgespec.util.paths import home, private_folder

MIN_TOKENS = 32  # shorter states are not saved, and a load must gain at least this many tokens
# A saved state is replaced by a new one that shares at least this share of its tokens (a state the
# new one extends, or the same file with another instruction and reply).
NEAR_DUPLICATE = 0.75
DEFAULT_BUDGET = 2 * 1000**3
SERVE_MEMORY_ENTRIES = 4  # states per model `serve` keeps in memory
BUDGET_ENV = "EDGESPEC_CACHE_BUDGET"
_STALE_PARTIAL_S = 3600  # a temporary file this old was left by a killed writer


class PromptCache:
    """Saved KV states in `folder` (default `home()/prompt-cache`), at most `budget` bytes, and the
    last `memory_entries` states of each model in memory. `warn` says a problem in one line
    (default: stderr)."""

    def __init__(
        self,
        folder: Path | None = None,
        budget: int = DEFAULT_BUDGET,
        memory_entries: int = 0,
        warn: Callable[[str], None] | None = None,
    ):
        self.folder = folder if folder is not None else home() / "prompt-cache"
        self.budget, self.memory_entries = budget, memory_entries
        self.warn = warn or _to_stderr
        self._said: set[str] = set()
        self._memory: dict[str, list[Entry]] = {}  # by identity, least recently used first

    # -- the two calls ------------------------------------------------------------------------

    def warm(self, backend: Backend, tokens: Sequence[int]) -> int:
        """Before `backend` reads `tokens`: load the saved state sharing the longest prefix with
        them, cut to that prefix and to all but the last token (whose logits the reader needs), and
        down to where one of the backend's read chunks starts, when it gains at least MIN_TOKENS
        over the backend's own cache. Returns the tokens gained."""
        if not _stateful(backend) or len(tokens) < 2:
            return 0
        identity = backend.cache_identity()
        have = reused_prefix(backend, tokens)
        ranked = sorted(
            ((kept_from_saved(backend, e.tokens, tokens), e) for e in self._entries(identity)),
            key=lambda pair: -pair[0],
        )  # stable: memory before disk on a tie
        for shared, entry in ranked:
            if shared - have < MIN_TOKENS:
                break
            state = self._state(entry)
            if state is None:
                continue  # damaged: removed, try the next best
            try:
                backend.load_state(state, entry.tokens)
            except BackendError as e:
                self._drop(entry, "refused", f"an entry llama.cpp refused: {e}")
                return 0  # the backend's cache is empty now: the reader reads the whole prompt
            backend.truncate(shared)
            self._used(entry, state)
            return shared - have
        return 0

    def save(self, backend: Backend) -> None:
        """Keep `backend`'s exact state (`exact_end`: the backend drops the rest) unless a saved
        one covers it (the same tokens or more after them). Saved states it nearly covers go
        (NEAR_DUPLICATE); a failure to save is said once and costs nothing else."""
        exact = exact_end(backend)
        if not _stateful(backend) or exact < MIN_TOKENS:
            return
        backend.truncate(exact)  # no later read keeps the rest (`sync_cache`): no state holds it
        identity, tokens = backend.cache_identity(), list(backend.cached)
        state: bytearray | None = None
        try:
            if self.memory_entries and not self._covered(self._memory.get(identity, []), backend):
                state = _state_of(backend)
                self._remember(Entry(identity, tokens, state=state))
            on_disk = self._disk_entries(identity)
            if not self._covered(on_disk, backend):
                state = state if state is not None else _state_of(backend)
                self._write(Entry(identity, tokens), state, [e for e in on_disk if _superseded(e, tokens)])
        except BackendError as e:
            self._say("state", f"prompt cache: {e}; this reply's state is not saved")

    # -- both tiers ---------------------------------------------------------------------------

    def _entries(self, identity: str) -> list[Entry]:
        """Saved states of this identity: in memory (most recent first), then on disk."""
        return self._memory.get(identity, [])[::-1] + self._disk_entries(identity)

    def _covered(self, entries: list[Entry], backend: Backend) -> bool:
        """Whether one of `entries` keeps all that `backend`'s state would for any later read (it
        starts with the same tokens and, where they end in tail chunks, ends in the same chunk):
        touched as used if so."""
        tokens = backend.cached
        for entry in entries:
            if kept_from_saved(backend, entry.tokens, tokens, 0) == len(tokens):  # it starts with all of them
                self._touch(entry)
                return True
        return False

    def _state(self, entry: Entry) -> bytearray | None:
        if entry.state is not None:
            return entry.state
        path = entry.path
        assert path is not None  # an entry holds its state in memory or names its file
        try:
            whole = read_entry(path, with_state=True, limit=self.budget)
        except FileNotFoundError:  # removed since the lookup (another process evicted it)
            return None
        except Damaged as e:
            self._drop(entry, "damaged", f"a damaged entry ({e}): {path.name}")
            return None
        except OSError as e:
            self._say("read", f"prompt cache: cannot read {path} ({e.strerror or e})")
            return None
        # replaced since the lookup by another process's save of the same tokens: still checked
        return whole.state if (whole.identity, whole.tokens) == (entry.identity, entry.tokens) else None

    def _used(self, entry: Entry, state: bytearray) -> None:
        self._touch(entry)
        if entry.path is not None and self.memory_entries:
            self._remember(Entry(entry.identity, entry.tokens, state=state))

    def _touch(self, entry: Entry) -> None:
        if entry.path is None:
            kept = self._memory[entry.identity]
            kept.remove(entry)
            kept.append(entry)
            return
        stamp(entry.path)

    def _drop(self, entry: Entry, kind: str, what: str) -> None:
        """Forget an entry that cannot be used, and say so once per kind of problem: "removed `what`",
        or, where the folder does not let it go (read-only), that `what` is ignored and kept."""
        if entry.path is None:
            self._memory[entry.identity].remove(entry)
        problem = None if entry.path is None else remove(entry.path)
        if problem is None:
            self._say(kind, f"prompt cache: removed {what}")
        else:
            self._say(f"{kind}, kept", f"prompt cache: ignored {what}, which cannot be removed ({problem})")

    def _say(self, kind: str, message: str) -> None:
        if kind not in self._said:
            self._said.add(kind)
            self.warn(message)

    # -- memory -------------------------------------------------------------------------------

    def _remember(self, entry: Entry) -> None:
        kept = [e for e in self._memory.get(entry.identity, []) if not _superseded(e, entry.tokens)]
        self._memory[entry.identity] = (kept + [entry])[-self.memory_entries :]

    # -- disk ---------------------------------------------------------------------------------

    def _disk_entries(self, identity: str) -> list[Entry]:
        """The entries on disk named for `identity`, headers checked; bad ones are removed."""
        if not self._folder_usable():
            return []
        try:
            paths = sorted(self.folder.glob(identity_pattern(identity)))
        except OSError:
            return []
        entries = []
        for path in paths:
            try:
                entry = read_entry(path, with_state=False, limit=self.budget)
            except FileNotFoundError:
                continue
            except Damaged as e:
                self._drop(Entry(identity, [], path), "damaged", f"a damaged entry ({e}): {path.name}")
                continue
            except OSError as e:
                self._say("read", f"prompt cache: cannot read {path} ({e.strerror or e})")
                continue
            if entry.identity != identity:
                self._drop(entry, "foreign", f"an entry saved by another model or runtime: {path.name}")
                continue
            entries.append(entry)
        return entries

    def _write(self, entry: Entry, state: bytearray, superseded: list[Entry]) -> None:
        """Save `state` as `entry` (atomically), remove what it supersedes, then keep to the budget."""
        header = entry_header(entry, state)
        size = entry_size(header, entry, state)
        if size > self.budget:
            self._say(
                "budget",
                f"prompt cache: a {size / 1e6:.0f} MB state is larger than the whole "
                f"{self.budget / 1e6:.0f} MB budget ({BUDGET_ENV}); not saved",
            )
            return
        path = entry_path(self.folder, entry.identity, entry.tokens)
        if not self._folder_usable():
            return
        try:
            private_folder(self.folder, tighten=True)
            write_atomic(path, lambda tmp: write_entry_file(tmp, header, entry.tokens, state))
            stamp(path)
            for old in superseded:  # entries on disk: each names its file
                if old.path is not None and old.path != path:
                    remove(old.path)
            self._evict()
        except OSError as e:
            unsaved.cannot_save("prompt cache", self.folder, e, self.warn)

    def _folder_usable(self) -> bool:
        """Whether the folder is one (or none yet), reached without a link: a link there would take
        reads and writes outside the home. Said once, and the cache goes without disk."""
        try:
            check_no_links(self.folder, home())
        except Untrusted as e:
            self._say("link", f"prompt cache: not using the disk: {e}")
            return False
        return True

    def _evict(self) -> None:
        """Remove the least recently used entries until the folder fits the budget, and temporary
        files that killed writers left."""
        now = time.time()
        entries = []
        with os.scandir(self.folder) as it:
            for item in it:
                try:
                    st = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                if item.name.endswith(".kv"):
                    entries.append((st.st_mtime_ns, st.st_size, Path(item.path)))
                elif item.name.endswith(".partial") and now - st.st_mtime > _STALE_PARTIAL_S:
                    remove(Path(item.path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.budget:
                break
            remove(path)
            total -= size


def _stateful(backend: Backend) -> TypeGuard[StatefulBackend]:
    """Whether `backend` can save and load its cache's state (`StatefulBackend`); the cache leaves
    one that cannot alone."""
    return getattr(backend, "save_state", None) is not None


def _state_of(backend: StatefulBackend) -> bytearray:
    state = backend.save_state()
    return state if isinstance(state, bytearray) else bytearray(state)


def _superseded(entry: Entry, tokens: list[int]) -> bool:
    """Whether a new state of `tokens` makes `entry` not worth keeping: it shares most of it."""
    return common_prefix(entry.tokens, tokens) >= NEAR_DUPLICATE * len(entry.tokens)


def _to_stderr(message: str) -> None:
    print(f"edgespec: {message}", file=sys.stderr, flush=True)


def cache_budget(from_config: int | None) -> int:
    """The budget in bytes: EDGESPEC_CACHE_BUDGET, else models.toml's `[cache] budget`, else 2 GB."""
    return budget_setting(BUDGET_ENV, from_config, DEFAULT_BUDGET, "a size (e.g. 2G, 500M, or a number of bytes)")


def open_cache(budget_from_config: int | None, memory_entries: int = 0) -> PromptCache | None:
    """The prompt cache a front end hands its engine (`EngineOptions(cache=True)`), or None with a
    budget of 0 (a cache that keeps nothing is no cache: nothing is read, saved or said, and the
    entries saved earlier are left as they are). `budget_from_config`: models.toml's, if it sets one."""
    budget = cache_budget(budget_from_config)
    return PromptCache(budget=budget, memory_entries=memory_entries) if budget > 0 else None
