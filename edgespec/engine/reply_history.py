"""The reply history: every prompt and reply of `run`, `chat` and `serve`, kept on disk per
tokenizer and shared by all processes, and the suffix index over it (`decoding/suffix_index.py`).

What a user asks again (a regenerated answer, an agent's retry, the same edit another day) was often
answered before: the index finds what followed the text's last tokens in every earlier prompt and
reply, for a drafter to copy, and `earlier_replies` the whole replies of the earlier calls whose
prompt this one repeats or extends.

On disk, in `history_folder(tokenizer id)` = `home()/history/<tokenizer id>`, the folders 0700 and
the files 0600 (it holds the user's code):
- `log`: every call's prompt and reply, one record each, appended in one `write` (its format:
  `history_log.py`), under an exclusive `flock` of `lock`, so processes append at once and a
  reader (who takes the lock too) never sees half a record.
- `index-<generation>-<records>.npy`: the suffix index (a 2 x n int32 array: the corpus and its
  suffix array) over the first <records> records of that generation's log, a record one document
  (the prompt, then the reply that continues it). Opening memory-maps it and indexes the records
  appended since in memory; past REBUILD_TOKENS of those, the opening process sorts the whole log
  again and saves the result (0.7 s at 3M tokens on 2 cores, once per REBUILD_TOKENS appended;
  sorting the records since costs every opening 15 ms at most).
- `log.damaged-<time>`: a log that failed its checks (a record's magic, length or checksum), set
  aside with one line said; the records before the damage go on in a new log.

The log keeps at most `budget_tokens` tokens (default 4M: a 16 MB log and a 32 MB index;
EDGESPEC_HISTORY_BUDGET); past it the oldest records go, down to KEEP_AFTER_TRIM of it, so the
rewrite and the index's rebuild come once per quarter budget appended, not at every append.

A folder that cannot be read or written costs only the history: said in one line, and the history
is off for the rest of the process. The methods are for one thread at a time (the engine's).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from edgespec.decoding.suffix_index import SegmentedIndex, SuffixIndex
from edgespec.engine.history_log import (
    GENERATION,
    LOG_HEADER,
    LOG_MAGIC,
    RECORD,
    RECORD_MAGIC,
    RECORD_VERSION,
    TOKEN,
    Log,
    Record,
    append_record,
    documents,
    generation_of,
    parse_log,
    prompt_digest,
    read_record,
    write_private,
)
from edgespec.models.config import budget_setting
from edgespec.util.atomic_file import write_atomic
from edgespec.util.paths import display_path, home, private_folder

DEFAULT_BUDGET = 4_000_000
BUDGET_ENV = "EDGESPEC_HISTORY_BUDGET"
KEEP_AFTER_TRIM = 0.75
REBUILD_TOKENS = 131_072
RECENT_RECORDS = 1000  # the records `earlier_replies` looks through, the newest
EARLIER_REPLIES = 4
_MAX_TOKEN = 2**31 - 1
_STALE_PARTIAL_S = 3600  # a temporary file this old was left by a killed writer


class ReplyHistory:
    """The prompts and replies in `folder` (module docstring), at most `budget_tokens` tokens, and
    their suffix index (`index`). `say` gets the one-line warnings (default: stderr)."""

    def __init__(self, folder: Path, budget_tokens: int = DEFAULT_BUDGET, say: Callable[[str], None] | None = None):
        """Nothing is read here: `open` does."""
        self.folder, self.budget_tokens = folder, budget_tokens
        self.say = say if say is not None else _to_stderr
        self.index = SegmentedIndex()
        # the log as this process knows it: what it read on opening, and its own appends since
        self._generation, self._tokens = b"", 0
        self._records: list[Record] = []
        self._off = False

    @classmethod
    def open(
        cls, folder: Path, budget_tokens: int = DEFAULT_BUDGET, say: Callable[[str], None] | None = None
    ) -> ReplyHistory:
        """The history in `folder` (made if missing), its index loaded or rebuilt; off (said in one
        line) when the folder cannot be used."""
        history = cls(folder, budget_tokens, say)
        try:
            private_folder(folder, tighten=True)
            with history._locked():
                log = history._trimmed(history._read_log())
                saved = history._saved_index(log)
            history._adopt(log, saved)
        except OSError as e:
            history._turn_off(e)
        return history

    def append(self, prompt: Sequence[int], reply: Sequence[int]) -> None:
        """Keep one call's prompt and reply, and index them (one document) in this process. A record
        larger than the whole budget is not kept. Token ids must be in 0..2**31-1 (ValueError)."""
        ids = np.asarray([*prompt, *reply], dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() > _MAX_TOKEN):
            raise ValueError("token ids must be in 0..2**31-1")
        if self._off or not ids.size or ids.size > self.budget_tokens:
            return
        payload = ids.astype(TOKEN).tobytes()
        crc = zlib.crc32(payload)
        try:
            with self._locked():
                if not self._generation or generation_of(self._log_path) != self._generation:
                    # none yet, or rewritten or cleared by another process since: as it is now
                    log = self._read_log()
                    self._set_log(log if log.generation else self._write_log(b""))
                header = RECORD.pack(RECORD_MAGIC, RECORD_VERSION, 0, len(prompt), len(reply), crc)
                offset = append_record(self._log_path, header + payload)
        except OSError as e:
            self._turn_off(e)
            return
        self._records.append(Record(offset, len(prompt), len(reply), crc, prompt_digest(payload[: 4 * len(prompt)])))
        self._tokens += ids.size
        self.index.add(ids)
        if self._tokens > self.budget_tokens:
            try:
                with self._locked():
                    log = self._trimmed(self._read_log())
                self._adopt(log, None)
            except OSError as e:
                self._turn_off(e)

    def earlier_replies(self, prompt: Sequence[int]) -> list[tuple[int, list[int]]]:
        """(the earlier prompt's length, its reply) of earlier records whose prompt equals `prompt` or
        is a prefix of it (a regeneration, or a retry that extends the conversation), newest first, at most
        EARLIER_REPLIES, among the last RECENT_RECORDS records. A record is compared by the hash of
        its prompt, then read and compared whole."""
        recent = self._records[-RECENT_RECORDS:]
        lengths = sorted({r.prompt_len for r in recent if 0 < r.prompt_len <= len(prompt)})
        if not lengths:
            return []
        raw = np.asarray(prompt[: lengths[-1]], dtype=TOKEN).tobytes()
        hashes, hasher, done = {}, hashlib.blake2b(digest_size=16), 0
        for n in lengths:  # one pass over the prompt, a hash at each length an earlier prompt has
            hasher.update(raw[4 * done : 4 * n])
            hashes[n], done = hasher.copy().digest(), n
        out: list[tuple[int, list[int]]] = []
        try:
            with open(self._log_path, "rb") as f:
                for record in reversed(recent):
                    if record.reply_len and hashes.get(record.prompt_len) == record.prompt_hash:
                        tokens = read_record(f.fileno(), record)
                        if tokens is not None and tokens[: record.prompt_len].tobytes() == raw[: 4 * record.prompt_len]:
                            out.append((record.prompt_len, tokens[record.prompt_len :].tolist()))
                            if len(out) == EARLIER_REPLIES:
                                break
        except OSError:
            pass  # rewritten or removed since by another process: nothing found this time
        return out

    def size(self) -> tuple[int, int, int]:
        """(records, tokens) as this process knows them, and the folder's bytes on disk."""
        try:
            on_disk = sum(p.stat().st_size for p in self.folder.iterdir() if p.is_file())
        except OSError:
            on_disk = 0
        return len(self._records), self._tokens, on_disk

    def clear(self) -> None:
        """Remove every prompt and reply kept (the log, the index, damaged logs set aside)."""
        try:
            with self._locked():
                for pattern in ("log", "log.damaged-*", "index-*.npy", ".*.partial"):
                    for path in self.folder.glob(pattern):
                        path.unlink(missing_ok=True)
        except OSError as e:
            self._turn_off(e)
        self._set_log(Log())
        self.index = SegmentedIndex()

    # -- the log ------------------------------------------------------------------------------

    @property
    def _log_path(self) -> Path:
        return self.folder / "log"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the folder's lock: every read and write of the log and the index is under it."""
        fd = os.open(self.folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.fchmod(fd, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _read_log(self) -> Log:
        """The log on disk (under the lock). A damaged one is set aside, its records before the
        damage kept in a new log, and said in one line."""
        try:
            data = self._log_path.read_bytes()
        except FileNotFoundError:
            return Log()
        if not data:  # created and never written: a writer killed at once
            return Log()
        log, damage = parse_log(data)
        if damage is None:
            return log
        aside = self._log_path.with_name(f"log.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(self._log_path, aside)
        kept = self._write_log(data[LOG_HEADER : log.records[-1].end] if log.records else b"")
        self.say(
            f"history: {display_path(self._log_path)} was damaged ({damage}); set it aside as {aside.name}, "
            f"kept the {len(kept.records)} records before the damage"
        )
        return kept

    def _write_log(self, records: bytes) -> Log:
        """A new log (a new generation) of `records` (whole records, as on disk), replacing the old."""
        data = LOG_MAGIC + os.urandom(GENERATION) + records
        write_atomic(self._log_path, lambda tmp: write_private(tmp, data))
        log, _ = parse_log(data)
        return log

    def _trimmed(self, log: Log) -> Log:
        """`log` within the budget (under the lock): over it, a new log of the newest records that
        fill KEEP_AFTER_TRIM of it."""
        if sum(r.tokens for r in log.records) <= self.budget_tokens:
            return log
        keep, total = 0, 0
        for record in reversed(log.records):
            if total + record.tokens > KEEP_AFTER_TRIM * self.budget_tokens:
                break
            keep, total = keep + 1, total + record.tokens
        first = log.records[len(log.records) - keep].offset if keep else len(log.data)
        return self._write_log(log.data[first:])

    def _set_log(self, log: Log) -> None:
        self._generation, self._records = log.generation, list(log.records)
        self._tokens = sum(r.tokens for r in log.records)

    def _turn_off(self, error: OSError) -> None:
        if not self._off:
            self._off = True
            self.say(
                f"history: cannot use {display_path(self.folder)} ({error.strerror or error}); "
                "going on without the reply history this run"
            )

    # -- the index ----------------------------------------------------------------------------

    def _saved_index(self, log: Log) -> tuple[SuffixIndex, int] | None:
        """The saved index of the most records of `log` (and how many), memory-mapped; None if
        none fits it. Indexes of other generations describe logs rewritten since."""
        best: tuple[SuffixIndex, int] | None = None
        if not log.generation:
            return None
        for path in self.folder.glob(f"index-{log.generation.hex()}-*.npy"):
            covered = path.stem.rpartition("-")[2]
            if not covered.isdigit() or int(covered) > len(log.records) or (best and best[1] >= int(covered)):
                continue
            try:
                both = np.load(path, mmap_mode="r")
                base = SuffixIndex(both[0], both[1])
            except (OSError, ValueError, IndexError):
                continue  # damaged or half-written: rebuilt
            if base.size == 1 + sum(r.tokens + 1 for r in log.records[: int(covered)]):
                best = base, int(covered)
        return best

    def _adopt(self, log: Log, saved: tuple[SuffixIndex, int] | None) -> None:
        """Take `log` as this process's view, indexed: the saved index and the records after it, or
        (none, or too many after it) all of it sorted again and saved."""
        self._set_log(log)
        base, covered = saved if saved is not None else (None, 0)
        rest = log.records[covered:]
        try:
            if base is not None and sum(r.tokens for r in rest) <= REBUILD_TOKENS:
                self.index = SegmentedIndex(base, documents(log.data, rest))
                return
            base = SuffixIndex.build(documents(log.data, log.records))
        except ValueError as e:  # token ids the index cannot take: written by something else
            self._turn_off(OSError(errno.EINVAL, f"the log holds what is not token ids ({e})"))
            return
        self.index = SegmentedIndex(base)
        if log.records:
            self._save_index(base, log.generation, len(log.records))

    def _save_index(self, base: SuffixIndex, generation: bytes, covered: int) -> None:
        """Save `base` (the index of the first `covered` records of `generation`'s log) for the next
        process, unless the log was rewritten while it was sorted; older indexes go."""
        name = f"index-{generation.hex()}-{covered}.npy"
        try:
            with self._locked():
                if generation_of(self._log_path) != generation:
                    return
                write_atomic(self.folder / name, lambda tmp: _save_array(tmp, np.stack([base.tokens, base.sa])))
                for path in self.folder.glob("index-*.npy"):
                    if path.name != name:
                        path.unlink(missing_ok=True)
                _remove_stale_partials(self.folder)
        except OSError as e:
            self._turn_off(e)


def history_folder(tokenizer_id: str) -> Path:
    """Where the history of one tokenizer's ids is kept (`tokenizer_id`: a name safe in a path)."""
    return home() / "history" / tokenizer_id


def history_budget(from_config: int | None) -> int:
    """The budget in tokens: EDGESPEC_HISTORY_BUDGET, else the configured one, else 4M."""
    return budget_setting(BUDGET_ENV, from_config, DEFAULT_BUDGET, "a number of tokens (e.g. 4M or 4000000)")


def _save_array(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:  # a file, not a name: np.save would add ".npy" to the temporary name
        np.save(f, array)
    os.chmod(path, 0o600)


def _remove_stale_partials(folder: Path) -> None:
    """Temporary files that killed writers left (`write_atomic`'s, named `.<name>.<random>.partial`)."""
    now = time.time()
    for path in folder.glob(".*.partial"):
        try:
            if now - path.stat().st_mtime > _STALE_PARTIAL_S:
                path.unlink()
        except OSError:
            pass  # removed by another process meanwhile


def _to_stderr(message: str) -> None:
    print(f"edgespec: {message}", file=sys.stderr, flush=True)
