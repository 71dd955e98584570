"""Vocabulary comparison on tiny GGUF files that hold only tokenizer metadata."""

from __future__ import annotations

import gguf
import pytest

from edgespec.decoding.backend import BackendError, Vocabulary
from edgespec.models.vocab import (
    IncompatibleDraft,
    VocabularyError,
    check_loaded_pair,
    compare_vocabularies,
    read_gguf_vocabulary,
)
from tests.model_files import tiny_tokens, write_tokenizer_gguf


@pytest.fixture
def target(tmp_path) -> Vocabulary:
    return read_gguf_vocabulary(write_tokenizer_gguf(tmp_path / "target.gguf", bos=259))


def draft(tmp_path, **kwargs) -> Vocabulary:
    kwargs.setdefault("bos", 259)
    return read_gguf_vocabulary(write_tokenizer_gguf(tmp_path / "draft.gguf", **kwargs))


def test_reads_tokens_and_special_ids(tmp_path):
    vocab = read_gguf_vocabulary(write_tokenizer_gguf(tmp_path / "m.gguf", bos=259, eot=261))
    assert vocab.size == len(vocab.tokens) == 261
    assert vocab.tokens[256] == b"he" and vocab.tokens[260] == b"<|im_end|>"
    assert vocab.tokens[200] == "\u00c8".encode()  # token texts are the GGUF's UTF-8 bytes
    assert vocab.eos_ids == {260, 261} and vocab.bos_id == 259


@pytest.mark.parametrize("endianess", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_reads_what_gguf_reader_reads(tmp_path, endianess):
    path = write_tokenizer_gguf(tmp_path / "m.gguf", bos=259, endianess=endianess)
    reader = gguf.GGUFReader(path, "r")
    field = reader.get_field("tokenizer.ggml.tokens")
    vocab = read_gguf_vocabulary(path)
    assert vocab.tokens == tuple(field.parts[i].tobytes() for i in field.data)
    assert vocab.eos_ids == {reader.get_field("tokenizer.ggml.eos_token_id").contents()}
    assert vocab.bos_id == reader.get_field("tokenizer.ggml.bos_token_id").contents() == 259


def test_identical_vocabularies_are_compatible(tmp_path, target):
    result = compare_vocabularies(target, draft(tmp_path))
    assert result.compatible and result.errors == () and result.notes == ()


def test_renamed_token_is_reported_with_its_id(tmp_path, target):
    tokens = tiny_tokens()
    tokens[257] = "LL"
    result = compare_vocabularies(target, draft(tmp_path, tokens=tokens))
    assert not result.compatible
    assert result.errors == ('token texts: 1 of 261 shared ids differ: id 257: target "ll", draft "LL"',)


def test_many_renamed_tokens_show_the_first_few(tmp_path, target):
    tokens = tiny_tokens()
    tokens[0:10] = [f"x{i}" for i in range(10)]
    (error,) = compare_vocabularies(target, draft(tmp_path, tokens=tokens)).errors
    assert error.startswith("token texts: 10 of 261 shared ids differ: id 0: target ")
    assert 'id 2: target "\\u0002", draft "x2"; and 7 more' in error


def test_different_eos_is_an_error(tmp_path, target):
    result = compare_vocabularies(target, draft(tmp_path, eos=259))
    assert result.errors == ('end-of-generation ids: target 260 "<|im_end|>", draft 259 "<|endoftext|>"',)


def test_different_bos_is_an_error(tmp_path, target):
    result = compare_vocabularies(target, draft(tmp_path, bos=256))
    assert result.errors == ('bos id: target 259 "<|endoftext|>", draft 256 "he"',)


def test_padding_size_difference_is_a_note(tmp_path, target):
    result = compare_vocabularies(target, draft(tmp_path, tokens=tiny_tokens(n_padding=100)))
    assert result.compatible
    assert result.notes == (
        "vocabulary size: target 261, draft 361 (differ by 100 ids, taken as padding since the shared ids agree)",
    )


def test_size_difference_beyond_padding_is_an_error(tmp_path, target):
    result = compare_vocabularies(target, draft(tmp_path, tokens=tiny_tokens(n_padding=129)))
    assert result.errors == (
        "vocabulary size: target 261, draft 390 (differ by 129, more than the 128 padding ids allowed)",
    )


def test_a_file_without_tokenizer(tmp_path):
    path = tmp_path / "empty.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(VocabularyError, match="no tokenizer.ggml.tokens"):
        read_gguf_vocabulary(path)


@pytest.mark.parametrize("damage", ["not a gguf", "empty", "truncated"])
def test_unreadable_file_is_one_line(tmp_path, damage):
    whole = write_tokenizer_gguf(tmp_path / "whole.gguf").read_bytes()
    path = tmp_path / "x.gguf"
    path.write_bytes({"not a gguf": b"not a gguf at all", "empty": b"", "truncated": whole[: len(whole) // 2]}[damage])
    with pytest.raises(VocabularyError, match=r"x.gguf: not a readable GGUF file \(.+\)$"):
        read_gguf_vocabulary(path)


class LoadedModel:
    """What check_loaded_pair needs from a backend."""

    def __init__(self, vocabulary: Vocabulary):
        self._vocabulary = vocabulary

    def vocabulary(self) -> Vocabulary:
        return self._vocabulary


def test_loaded_pair_check_refuses_a_different_vocabulary(tmp_path, target):
    assert check_loaded_pair(LoadedModel(target), LoadedModel(draft(tmp_path)), "p").compatible
    with pytest.raises(IncompatibleDraft) as e:
        check_loaded_pair(LoadedModel(target), LoadedModel(draft(tmp_path, eos=259)), "p")
    assert str(e.value).startswith(
        'pair "p": the draft model does not share the target\'s vocabulary: end-of-generation ids'
    )
    assert isinstance(e.value, BackendError) and "\n" not in str(e.value)
