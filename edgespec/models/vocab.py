"""Can these two models be paired? Read a GGUF's vocabulary and compare two vocabularies.

Speculative decoding passes token ids from the drafter to the target, so both must mean the same
text by the same id and stop on the same tokens. Like llama.cpp, a size difference of up to 128 ids
is allowed when the shared ids agree: converters pad embedding tables to a multiple of 64 or 128 with
unused tokens, so a 1.5B and a 0.5B of one family can differ only in padding. That case is a note,
not an error. The comparison works on `Vocabulary`, so any backend that produces one can use it.
"""

from __future__ import annotations

import json
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgespec.backends.hf_loading import read_hf_vocabulary
from edgespec.decoding.backend import Backend, BackendError, Vocabulary
from edgespec.util.errors import EdgespecError

if TYPE_CHECKING:
    from edgespec.models.registry import ModelSpec

MAX_PADDING_DIFFERENCE = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
SHOWN_MISMATCHES = 3

_TOKENS_KEY = "tokenizer.ggml.tokens"
_BOS_KEY = "tokenizer.ggml.bos_token_id"
_EOS_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
# GGUF value type ids (gguf.GGUFValueType; repeated here so that importing edgespec stays fast).
_STRING, _ARRAY = 8, 9
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class VocabularyError(EdgespecError):
    """A model file whose vocabulary cannot be read."""


class IncompatibleDraft(BackendError):
    """A loaded draft model whose vocabulary differs from the target's: its token ids would mean other text."""


@dataclass(frozen=True)
class Compatibility:
    """The result of comparing two vocabularies: `errors` forbid pairing, `notes` are tolerated differences."""

    errors: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def compatible(self) -> bool:
        return not self.errors


def read_vocabulary(model: ModelSpec, path: Path) -> Vocabulary:
    """A model file's vocabulary without loading the model: GGUF metadata for GGUF files (whatever
    the backend), the HF backend's reader otherwise."""
    if model.format == "gguf":
        return read_gguf_vocabulary(path)
    try:
        return read_hf_vocabulary(path)
    except ImportError as e:  # transformers, the optional hf extra, is imported there
        raise EdgespecError(
            f"cannot read the vocabulary of transformers model {model.name}: the hf backend is unavailable ({e})"
        ) from None


def read_gguf_vocabulary(path: Path) -> Vocabulary:
    """Token texts and special ids from a GGUF's metadata; the weights are never read.

    gguf.GGUFReader would do, but it parses every field and builds a numpy view per string, which
    for a vocabulary of 150k tokens and as many merges takes many seconds. Walking the key-value
    section once with struct and keeping only the keys needed here takes a fraction of a second.
    """
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            metadata = _GGUFMetadata(buf).read(keep={_TOKENS_KEY, _BOS_KEY, *_EOS_KEYS})
    except (OSError, ValueError, struct.error) as e:
        raise VocabularyError(f"{path}: not a readable GGUF file ({e})") from None
    if _TOKENS_KEY not in metadata:
        raise VocabularyError(f"{path}: no {_TOKENS_KEY} in the GGUF metadata")
    tokens = tuple(metadata[_TOKENS_KEY])
    eos = frozenset(int(metadata[key]) for key in _EOS_KEYS if key in metadata)
    bos = metadata.get(_BOS_KEY)
    return Vocabulary(size=len(tokens), tokens=tokens, eos_ids=eos, bos_id=None if bos is None else int(bos))


class _GGUFMetadata:
    """A sequential reader of a GGUF header and key-value section (format: ggml's GGUF spec,
    https://github.com/ggml-org/ggml/blob/master/docs/gguf.md)."""

    def __init__(self, buf: mmap.mmap):
        self.buf, self.pos, self.order = buf, 0, "<"

    def read(self, keep: set[str]) -> dict[str, Any]:
        """The values of the `keep` keys present in the file (strings as bytes); other values are skipped."""
        if self.buf[:4] != b"GGUF":
            raise ValueError("no GGUF magic")
        self.pos = 4
        version = self._unpack("I")
        if version & 0xFFFF == 0:  # written on a big-endian machine
            self.order, version = ">", int.from_bytes(version.to_bytes(4, "little"), "big")
        if version < 2:
            raise ValueError(f"GGUF version {version} is too old")
        self._unpack("Q")  # the tensor count: tensors are not read
        found = {}
        for _ in range(self._unpack("Q")):
            key = self._string().decode("utf-8")
            value = self._value(self._unpack("I"), key in keep)
            if key in keep:
                found[key] = value
        return found

    def _unpack(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def _string(self) -> bytes:
        n = self._unpack("Q")
        if self.pos + n > len(self.buf):
            raise ValueError("truncated metadata")
        self.pos += n
        return self.buf[self.pos - n : self.pos]

    def _value(self, kind: int, keep: bool) -> Any:
        if kind == _STRING:
            return self._string() if keep else self._skip_string()
        if kind == _ARRAY:
            item_kind, n = self._unpack("I"), self._unpack("Q")
            if not keep and item_kind in _SCALAR_FORMATS:
                self.pos += n * struct.calcsize(_SCALAR_FORMATS[item_kind])  # skip without reading
                return None
            return [self._value(item_kind, keep) for _ in range(n)]
        if kind not in _SCALAR_FORMATS:
            raise ValueError(f"unknown GGUF value type {kind}")
        return self._unpack(_SCALAR_FORMATS[kind])

    def _skip_string(self) -> None:
        n = self._unpack("Q")  # read first: `self.pos += self._unpack(...)` would add to the old position
        self.pos += n


def compare_vocabularies(target: Vocabulary, draft: Vocabulary) -> Compatibility:
    """Every difference that matters for pairing `draft` with `target`, in words fit for the user."""
    errors: list[str] = []
    notes: list[str] = []
    mismatch = _token_mismatches(target, draft)
    if mismatch:
        errors.append(mismatch)
    gap = abs(target.size - draft.size)
    if gap > MAX_PADDING_DIFFERENCE:
        errors.append(
            f"vocabulary size: target {target.size}, draft {draft.size} "
            f"(differ by {gap}, more than the {MAX_PADDING_DIFFERENCE} padding ids allowed)"
        )
    elif gap:
        padding = "" if mismatch else ", taken as padding since the shared ids agree"
        notes.append(f"vocabulary size: target {target.size}, draft {draft.size} (differ by {gap} ids{padding})")
    if target.eos_ids != draft.eos_ids:
        errors.append(
            f"end-of-generation ids: target {_ids(target, target.eos_ids)}, draft {_ids(draft, draft.eos_ids)}"
        )
    if target.bos_id != draft.bos_id:
        errors.append(f"bos id: target {_ids(target, {target.bos_id})}, draft {_ids(draft, {draft.bos_id})}")
    return Compatibility(tuple(errors), tuple(notes))


def check_loaded_pair(target: Backend, draft: Backend, pair: str) -> Compatibility:
    """Refuse a loaded draft whose vocabulary is not the target's (IncompatibleDraft); notes pass."""
    return check_pair(target.vocabulary(), draft.vocabulary(), pair)


def check_pair(target: Vocabulary, draft: Vocabulary, pair: str) -> Compatibility:
    """Refuse a draft vocabulary that is not the target's (IncompatibleDraft, naming each
    difference as `edgespec models check` does); notes pass."""
    result = compare_vocabularies(target, draft)
    if not result.compatible:
        raise IncompatibleDraft(
            f'pair "{pair}": the draft model does not share the target\'s vocabulary: {"; ".join(result.errors)} '
            f"(edgespec models check {pair} shows it; --draft ngram or none decodes without it)"
        )
    return result


def _token_mismatches(target: Vocabulary, draft: Vocabulary) -> str | None:
    """One line naming how many shared ids spell different texts, with the first few."""
    shared = min(len(target.tokens), len(draft.tokens))
    differing = [i for i in range(shared) if target.tokens[i] != draft.tokens[i]]
    if not differing:
        return None
    shown = "; ".join(
        f"id {i}: target {_text(target.tokens[i])}, draft {_text(draft.tokens[i])}"
        for i in differing[:SHOWN_MISMATCHES]
    )
    more = f"; and {len(differing) - SHOWN_MISMATCHES} more" if len(differing) > SHOWN_MISMATCHES else ""
    return f"token texts: {len(differing)} of {shared} shared ids differ: {shown}{more}"


def _ids(vocab: Vocabulary, ids) -> str:
    """Token ids with their texts, e.g. `151645 "<|im_end|>"`; "none" for no id."""
    named = [
        f"{i} {_text(vocab.tokens[i])}" if 0 <= i < len(vocab.tokens) else str(i)
        for i in sorted(i for i in ids if i is not None)
    ]
    return ", ".join(named) or "none"


def _text(token: bytes) -> str:
    """A token's text quoted, with control characters and invalid UTF-8 escaped so it stays on one line."""
    return json.dumps(token.decode("utf-8", "backslashreplace"), ensure_ascii=False)
