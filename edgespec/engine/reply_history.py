"""The reply history: every prompt and reply of `run`, `chat` and `serve`, kept on disk per
tokenizer and shared by all processes, and the suffix index over it (`decoding/copying/suffix_index.py`).

What a user asks again (a regenerated answer, an agent's retry, the same edit another day) was often
answered before: the index finds what followed the text's last tokens in every earlier prompt and
reply, for a drafter to copy, and `earlier_replies` the whole replies of the earlier calls whose
prompt this one repeats or extends; `same_reply` the whole reply to exactly this prompt under the
same request, which the engine serves again (`same_reply.py`).

On disk, in `history_folder(tokenizer id)` = `home()/history/<tokenizer id>`, the folders 0700 and
the files 0600 (it holds the user's code):
- `log`: every call's prompt and reply, one record each, appended in one `write` (its format:
  `history_log.py`), under an exclusive `flock` of `lock`, so processes append at once and a
  reader (who takes the lock too) never sees half a record.
- `index-<generation>-<records>.idx`: the suffix index (the corpus and its suffix array, with
  checksums: `history_index.py`) over the first <records> records of that generation's log, a
  record one document (the prompt, then the reply that continues it). Opening memory-maps it and indexes the records
  appended since in memory; past REBUILD_TOKENS of those, the opening process sorts the whole log
  again and saves the result (0.7 s at 3M tokens on 2 cores, once per REBUILD_TOKENS appended;
  sorting the records since costs every opening 15 ms at most).
- `log.damaged-<time>`: a log that failed its checks (a record's magic, length or checksum), set
  aside with one line said; the records before the damage go on in a new log.

The log keeps at most `budget_tokens` tokens (default 4M: a 16 MB log and a 32 MB index;
EDGESPEC_HISTORY_BUDGET); past it the oldest records go, down to KEEP_AFTER_TRIM of it, so the
rewrite and the index's rebuild come once per quarter budget appended, not at every append.

Nothing in the folder is trusted (`util/home_files.py`): a link, a FIFO or a device under any of
these names, a log past `log_limit`, ids outside the vocabulary, an index that fails its checksums
are each set aside (a log renamed `log.damaged-<time>`, the rest removed) with one line, and the
call goes on. A folder reached through a link is not used: no read or write lands outside the home.

Another process may clear or rewrite the log (`edgespec history --clear`, a trim): `refresh`, before
each call, notices the log's generation change and drops what this process holds (its records and
index) for the log as it is now, and appends go on into a new log.

A folder that cannot be read or written costs only the history: said in one line, and the history
is off for the rest of the process. The methods are for one thread at a time (the engine's).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from edgespec.decoding.copying.suffix_index import SegmentedIndex, SuffixIndex
from edgespec.engine.history_files import clear_folder, folder_bytes, folder_lock, remove_stale_partials
from edgespec.engine.history_index import OLD_FORMATS, SUFFIX, index_name, load_index, save_index
from edgespec.engine.history_log import (
    GENERATION,
    LOG_HEADER,
    LOG_MAGIC,
    NO_REQUEST,
    TOKEN,
    Log,
    Record,
    append_record,
    appended,
    documents,
    encode_record,
    generation_of,
    log_limit,
    parse_log,
    prompt_digest,
    read_record,
    write_private,
)
from edgespec.models.config import budget_setting
from edgespec.util.atomic_file import write_atomic
from edgespec.util.home_files import Untrusted, check_no_links, discard, open_home_file, read_home_file, warn
from edgespec.util.paths import display_path, home, private_folder

DEFAULT_BUDGET = 4_000_000
BUDGET_ENV = "EDGESPEC_HISTORY_BUDGET"
KEEP_AFTER_TRIM = 0.75
REBUILD_TOKENS = 131_072
RECENT_RECORDS = 1000  # the records `earlier_replies` looks through, the newest
EARLIER_REPLIES = 4
_MAX_TOKEN = 2**31 - 1


class ReplyHistory:
    """The prompts and replies in `folder` (module docstring), at most `budget_tokens` tokens of ids
    below `vocab` (the tokenizer's size), and their suffix index (`index`). `say` gets the one-line
    warnings (default: stderr)."""

    def __init__(
        self, folder: Path, budget_tokens: int, say: Callable[[str], None] | None = None, *, vocab: int
    ) -> None:
        """Nothing is read here: `open` does."""
        self.folder, self.budget_tokens, self.vocab = folder, budget_tokens, vocab
        self.say = say if say is not None else warn
        self.index = SegmentedIndex()
        # the log as this process knows it: what it read on opening, and its own appends since
        self._generation, self._tokens = b"", 0
        self._records: list[Record] = []
        self._answers: dict[tuple[bytes, bytes], Record] = {}  # (request, prompt hash): its newest whole reply
        self._off = False

    @classmethod
    def open(
        cls,
        folder: Path,
        budget_tokens: int = DEFAULT_BUDGET,
        say: Callable[[str], None] | None = None,
        *,
        vocab: int,
    ) -> ReplyHistory:
        """The history in `folder` (made if missing), its index loaded or rebuilt; off (said in one
        line) when the folder cannot be used."""
        history = cls(folder, budget_tokens, say, vocab=vocab)
        try:
            check_no_links(folder, home())
            private_folder(folder, tighten=True)
            history._reload()
        except (OSError, Untrusted) as e:
            history._turn_off(e)
        return history

    def refresh(self) -> None:
        """Before a call: if another process cleared or rewrote the log since this one read it, drop
        what this process holds (records, index) and take the log as it is now."""
        if not self._off and generation_of(self._log_path) != self._generation:
            try:
                check_no_links(self.folder, home())
                private_folder(self.folder)  # removed since (a user's rm -rf): made again
                self._reload()
            except (OSError, Untrusted) as e:
                self._turn_off(e)

    def append(self, prompt: Sequence[int], reply: Sequence[int], request: bytes = NO_REQUEST) -> None:
        """Keep one call's prompt and reply, and index them (one document) in this process; `request`:
        the digest of the request it answers whole (`same_reply.py`), NO_REQUEST for a reply never
        served again. A record larger than the whole budget is not kept. Token ids must be below
        the vocabulary (ValueError)."""
        ids = np.asarray([*prompt, *reply], dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= min(self.vocab, _MAX_TOKEN + 1)):
            raise ValueError(f"token ids must be in 0..{min(self.vocab, _MAX_TOKEN + 1) - 1}")
        if self._off or not ids.size or ids.size > self.budget_tokens:
            return
        self.refresh()  # cleared since: the new record starts a new log, and nothing old stays indexed
        record = encode_record(prompt, reply, request)
        try:
            private_folder(self.folder)  # removed just now: made again
            with self._locked():
                if not self._generation or generation_of(self._log_path) != self._generation:
                    # none yet, or rewritten or cleared by another process just now: as it is now
                    log = self._read_log()
                    self._set_log(log if log.generation else self._write_log(b""))
                offset = append_record(self._log_path, record)
        except (OSError, Untrusted) as e:
            self._turn_off(e)
            return
        self._add(appended(offset, record))
        self._tokens += ids.size
        self.index.add(ids)
        if self._tokens > self.budget_tokens:
            try:
                with self._locked():
                    log = self._trimmed(self._read_log())
                self._adopt(log, None)
            except (OSError, Untrusted) as e:
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
            with open_home_file(self._log_path, log_limit(self.budget_tokens)) as f:
                for record in reversed(recent):
                    if record.reply_len and hashes.get(record.prompt_len) == record.prompt_hash:
                        tokens = read_record(f.fileno(), record, self.vocab)
                        if tokens is not None and tokens[: record.prompt_len].tobytes() == raw[: 4 * record.prompt_len]:
                            out.append((record.prompt_len, tokens[record.prompt_len :].tolist()))
                            if len(out) == EARLIER_REPLIES:
                                break
        except (OSError, Untrusted):
            pass  # rewritten or removed since by another process: nothing found this time
        return out

    def same_reply(self, prompt: Sequence[int], request: bytes) -> list[int] | None:
        """The newest whole reply recorded to exactly `prompt` under `request` (a digest that is not
        NO_REQUEST), read back and compared whole; None if there is none (or the log no longer
        holds it: rewritten since by another process)."""
        raw = np.asarray(prompt, dtype=TOKEN).tobytes()
        record = self._answers.get((request, prompt_digest(raw)))
        if record is None:
            return None
        try:
            with open_home_file(self._log_path, log_limit(self.budget_tokens)) as f:
                tokens = read_record(f.fileno(), record, self.vocab)
        except (OSError, Untrusted):
            return None
        if tokens is None or tokens[: record.prompt_len].tobytes() != raw:
            return None
        return tokens[record.prompt_len :].tolist()

    def size(self) -> tuple[int, int, int]:
        """(records, tokens) as this process knows them, and the folder's bytes on disk (its
        regular files; a name removed meanwhile counts nothing)."""
        return len(self._records), self._tokens, folder_bytes(self.folder)

    def clear(self) -> None:
        """Remove every prompt and reply kept (the log, the index, damaged logs set aside)."""
        try:
            with self._locked():
                for problem in clear_folder(self.folder):
                    self.say(f"history: {problem}")
        except (OSError, Untrusted) as e:
            self._turn_off(e)
        self._set_log(Log())
        self.index = SegmentedIndex()

    # -- the log ------------------------------------------------------------------------------

    @property
    def _log_path(self) -> Path:
        return self.folder / "log"

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        """Hold the folder's lock: every read and write of the log and the index is under it."""
        return folder_lock(self.folder, self.say)

    def _reload(self) -> None:
        """Read the log and its saved index again (under the lock), dropping this process's view."""
        with self._locked():
            log = self._trimmed(self._read_log())
            saved = self._saved_index(log)
        self._adopt(log, saved)

    def _read_log(self) -> Log:
        """The log on disk (under the lock). A damaged one, or anything else under its name, is set
        aside, its records before the damage kept in a new log, and said in one line."""
        try:
            data = read_home_file(self._log_path, log_limit(self.budget_tokens))
        except FileNotFoundError:
            return Log()
        except Untrusted as e:
            log, data = Log(), b""
            damage: str | None = str(e)
        else:
            if not data:  # created and never written: a writer killed at once
                return Log()
            log, damage = parse_log(data, self.vocab)
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
        log, _ = parse_log(data, self.vocab)
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
        self._generation, self._records, self._answers = log.generation, [], {}
        for record in log.records:
            self._add(record)
        self._tokens = sum(r.tokens for r in log.records)

    def _add(self, record: Record) -> None:
        self._records.append(record)
        if record.served_again:
            self._answers[record.request, record.prompt_hash] = record

    def _turn_off(self, error: OSError | Untrusted) -> None:
        if not self._off:
            self._off = True
            why = error.strerror or error if isinstance(error, OSError) else error
            self.say(
                f"history: cannot use {display_path(self.folder)} ({why}); going on without the reply history this run"
            )

    # -- the index ----------------------------------------------------------------------------

    def _saved_index(self, log: Log) -> tuple[SuffixIndex, int] | None:
        """The saved index of the most records of `log` (and how many), memory-mapped; None if
        none fits it (under the lock). Indexes of other generations describe logs rewritten since;
        a damaged one, or anything else under an index's name, is removed in one line."""
        if not log.generation:
            return None
        for path in sorted(self.folder.glob(f"index-{log.generation.hex()}-*{SUFFIX}"), key=_covered, reverse=True):
            covered = _covered(path)
            if not 0 < covered <= len(log.records):
                continue
            try:
                return load_index(path, log.records[:covered], self.vocab), covered
            except FileNotFoundError:
                continue
            except Untrusted as e:
                discard(path, f"not a usable index: {e}", self.say, "history")
        return None

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
        process, unless the log was rewritten while it was sorted; older indexes (and those of an
        older format) go."""
        name = index_name(generation, covered)
        try:
            with self._locked():
                if generation_of(self._log_path) != generation:
                    return
                write_atomic(self.folder / name, lambda tmp: _save_private(tmp, base))
                for pattern in (f"index-*{SUFFIX}", *OLD_FORMATS):
                    for path in self.folder.glob(pattern):
                        if path.name != name:
                            path.unlink(missing_ok=True)
                remove_stale_partials(self.folder)
        except OSError as e:
            self._turn_off(e)


def history_folder(tokenizer_id: str) -> Path:
    """Where the history of one tokenizer's ids is kept (`tokenizer_id`: a name safe in a path)."""
    return home() / "history" / tokenizer_id


def history_budget(from_config: int | None) -> int:
    """The budget in tokens: EDGESPEC_HISTORY_BUDGET, else the configured one, else 4M."""
    return budget_setting(BUDGET_ENV, from_config, DEFAULT_BUDGET, "a number of tokens (e.g. 4M or 4000000)")


def _covered(path: Path) -> int:
    covered = path.name.removesuffix(SUFFIX).rpartition("-")[2]
    return int(covered) if covered.isdigit() and len(covered) < 19 else -1


def _save_private(path: Path, base: SuffixIndex) -> None:
    save_index(path, base)
    os.chmod(path, 0o600)
