"""Drafting a value's start from the prompt's text (edgespec/decoding/copying/source_copy.py), on a tiny GGUF's
vocabulary and llguidance matchers of real schemas: the word after the reply's last copy, the first
the constraint allows; nothing mid-value or before any copy; and the n-gram drafter proposing it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.constraints.guidance import ConstraintSpec, GuidanceMatcher, grammar_of, guidance_tokenizer
from edgespec.decoding.copying.ngram import NgramDrafter
from edgespec.decoding.copying.source_copy import SourceCopy

LOG = "Extract the fields of this line.\n\n2024-11-03 ERROR payments-api [req 7f3a] failed (status=402, attempt=2)"
SCHEMA = {
    "type": "object",
    "properties": {
        "day": {"type": "string"},
        "level": {"enum": ["INFO", "ERROR"]},
        "service": {"type": "string"},
        "status": {"type": "integer"},
        "attempt": {"type": "integer"},
    },
    "required": ["day", "level", "service", "status", "attempt"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def backend(tiny_gguf_factory) -> Iterator[LlamaCppBackend]:
    backend = LlamaCppBackend(tiny_gguf_factory(seed=0), 512, threads=1)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def tokenizer(backend):
    return guidance_tokenizer(backend)


def proposal_after(backend, tokenizer, reply: str, drafter=None) -> str:
    """What is proposed after `reply` (text the schema allows), for the LOG prompt."""
    prompt = backend.tokenize(LOG, special=False)
    drafter = drafter or SourceCopy(backend)
    drafter.begin(prompt)
    matcher = GuidanceMatcher(tokenizer, grammar_of(ConstraintSpec.json_schema(SCHEMA)))
    ids = backend.tokenize(reply, special=False)
    for token_id in ids:
        assert matcher.advance(token_id), reply
    draft = drafter.propose(prompt + ids, 32, constraint=matcher)
    return b"".join(backend.token_bytes(t) for t in draft.ids).decode()


@pytest.mark.parametrize(
    ("reply", "word"),
    [
        ('{"day": "2024-11-03", "level": "', "ERROR"),  # the next word, spelled without its space
        ('{"day": "2024-11-03", "level": "ERROR", "service": "', "payments-api"),
        # an integer: words it forbids are passed over; the key "status" moved the cursor to its value
        ('{"day": "2024-11-03", "level": "ERROR", "service": "payments-api", "status": ', "402"),
        ('{"day": "2024-11-03", "level": "ERROR", "service": "payments-api", "status": 402, "attempt": ', "2"),
    ],
)
def test_a_value_starts_with_the_prompts_next_word_the_constraint_allows(backend, tokenizer, reply, word):
    assert proposal_after(backend, tokenizer, reply) == word


@pytest.mark.parametrize(
    "reply",
    [
        '{"day": "',  # nothing copied yet: no cursor
        '{"day": "2024-11-03", "level": "ER',  # inside a value: token lookup's work
        '{"day": "2024-11-03", "level": "ERROR"',  # between a value and the next key
    ],
)
def test_nothing_is_proposed_before_a_copy_or_away_from_a_values_start(backend, tokenizer, reply):
    assert proposal_after(backend, tokenizer, reply) == ""


def test_a_value_not_in_the_prompt_leaves_the_cursor_where_it_was(backend, tokenizer):
    reply = '{"day": "2024-11-03", "level": "INFO", "service": "'
    assert proposal_after(backend, tokenizer, reply) == "ERROR"  # INFO is not in the prompt


def test_the_ngram_drafter_proposes_the_source_word_at_a_values_start(backend, tokenizer):
    reply = '{"day": "2024-11-03", "level": "ERROR", "service": "'
    assert proposal_after(backend, tokenizer, reply, NgramDrafter(source_copy=SourceCopy(backend))) == "payments-api"
    # token lookup alone copies what followed the reply's last `": "`: the previous value
    assert proposal_after(backend, tokenizer, reply, NgramDrafter()).startswith('ERROR"')
