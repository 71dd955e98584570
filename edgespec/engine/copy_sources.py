"""The text a call may copy from beyond its own: earlier calls (history, retries) and the repository.

Each source is its own drafter kind (`decoding/copying/corpus.py`), made per call:
- **retry**: the replies of earlier calls whose prompt this one equals or extends (a regeneration,
  an agent's retry after its edit failed to apply), each with the end of its prompt before it, so
  the reply's first tokens find the earlier reply's start;
- **history**: every earlier prompt and reply of `run`, `chat` and `serve`, kept on disk per
  tokenizer and shared by every process (`reply_history.py`);
- **repository**: the working repository's tracked text files and `--context` paths
  (`repository.py`);
- **replaced**: the reply a regenerate replaces, which the front end passes with the call
  (`GenerateSettings.earlier_reply`), after the end of this call's prompt: it is there with the
  history off too, and only for that call.
Every reply, complete or not, is added to the history once its Summary is out: the user saw it (a
whole greedy one with its request's digest, to be served again: `same_reply.py`).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edgespec.decoding.backend import Backend
from edgespec.decoding.copying.corpus import Corpus, CorpusDrafter
from edgespec.decoding.copying.suffix_index import SuffixIndex
from edgespec.decoding.drafters import DrafterKind
from edgespec.engine.history_log import NO_REQUEST
from edgespec.engine.reply_history import ReplyHistory, history_folder
from edgespec.engine.repository import RepositoryCorpus, context_files, work_tree_files

RETRY_LEAD = 32  # tokens of an earlier prompt's end kept before its reply in the retry corpus


@dataclass
class DraftSources:
    """The history store and the repository's corpus an engine drafts from (None: that source is off).
    `say` tells the user, in one line, that a source was turned off for this process."""

    history: ReplyHistory | None = None
    repository: Corpus | None = None
    say: Callable[[str], None] = field(default=lambda line: print(f"edgespec: {line}", file=sys.stderr))

    def drafters(
        self, prompt: Sequence[int], kinds: Collection[DrafterKind], replaced: Sequence[int] = ()
    ) -> list[CorpusDrafter]:
        """The copying drafters of `kinds` for a call after `prompt`, those with text to copy;
        `replaced`: the reply this call replaces (a regenerate), copied first where it matches."""
        out = []
        if self.history is not None:
            self.history.refresh()  # cleared by another process since: nothing of it is drafted from
        if replaced and DrafterKind.REPLACED in kinds:
            lead = prompt[max(0, len(prompt) - RETRY_LEAD) :]
            out.append(CorpusDrafter(DrafterKind.REPLACED, SuffixIndex.build([[*lead, *replaced]])))
        if self.history is not None and DrafterKind.RETRY in kinds:
            earlier = self.history.earlier_replies(prompt)
            if earlier:  # each earlier prompt is a prefix of this one
                docs = [[*prompt[max(0, n - RETRY_LEAD) : n], *reply] for n, reply in earlier]
                out.append(CorpusDrafter(DrafterKind.RETRY, SuffixIndex.build(docs)))
        if self.history is not None and DrafterKind.HISTORY in kinds:
            out.append(CorpusDrafter(DrafterKind.HISTORY, self.history.index))
        if self.repository is not None and DrafterKind.REPOSITORY in kinds:
            out.append(CorpusDrafter(DrafterKind.REPOSITORY, self.repository))
        return out

    def same_reply(self, prompt: Sequence[int], request: bytes) -> list[int] | None:
        """The whole reply the history holds to exactly `prompt` under `request` (`same_reply.py`)."""
        if self.history is None:
            return None
        self.history.refresh()  # cleared by another process since: nothing of it is served again
        return self.history.same_reply(prompt, request)

    def record(self, prompt: Sequence[int], reply: Sequence[int], request: bytes = NO_REQUEST) -> float:
        """Add a call to the history (`request`: the digest its whole reply answers, NO_REQUEST for
        one never served again); a store that cannot be written is turned off, said once. The
        seconds the append took (0: nothing was appended), for the call's Summary."""
        if self.history is None or not reply:
            return 0.0
        start = time.perf_counter()
        try:
            self.history.append(prompt, reply, request)
        except OSError as e:
            self.say(f"history turned off for this process: cannot write {self.history.folder} ({e.strerror or e})")
            self.history = None
        return time.perf_counter() - start


def tokenizer_id(backend: Backend) -> str:
    """A short name for the backend's tokenizer, the same for every model that shares it (a history
    is kept per tokenizer: token ids mean nothing under another). It hashes the vocabulary's size and
    the bytes of a spread of ids and of its last ids, where the special tokens are."""
    digest = hashlib.sha256(str(backend.n_vocab).encode())
    ids = [*range(0, backend.n_vocab, 97), *range(max(0, backend.n_vocab - 512), backend.n_vocab)]
    for token in ids:
        digest.update(backend.token_bytes(token) + b"\0")
    return digest.hexdigest()[:16]


def open_sources(
    backend: Backend, history_budget: int | None, context: Sequence[Path] = (), repository: bool = False
) -> DraftSources:
    """The sources a front end's engine drafts from: the history under the home, holding at most
    `history_budget` tokens (None: no history, as with --no-history or EDGESPEC_NO_HISTORY), and a
    corpus of the `context` paths plus, with `repository` (run and chat, unless
    EDGESPEC_NO_REPOSITORY), the git work tree around the current folder. Each is kept per
    tokenizer: token ids mean nothing under another."""
    sources = DraftSources()
    repository = repository and not os.environ.get("EDGESPEC_NO_REPOSITORY")
    if history_budget is None and not context and not repository:
        return sources  # nothing to read: the tokenizer is not even named
    folder = history_folder(tokenizer_id(backend))
    if history_budget is not None:
        sources.history = ReplyHistory.open(folder, history_budget, say=sources.say, vocab=backend.n_vocab)
    files = context_files(context)
    if repository:
        files += work_tree_files(Path.cwd())
    if files:
        tokenize = lambda text: backend.tokenize(text, special=False)  # noqa: E731
        sources.repository = RepositoryCorpus(folder / "files", tokenize, backend.n_vocab).build(files)
    return sources
