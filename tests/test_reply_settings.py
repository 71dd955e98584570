"""One builder and one name: a reply's settings are the same whether the flags or a request give
its values, and the reply's length is `max_tokens` from the request's body to the decoder.

Before, the server laid a request's sampling over its defaults on its own and made its settings
with a stand-in length (512) that the engine thread replaced; `max_completion_tokens` and
`n_predict` reached the engine as `token_limit`, and llama.cpp's random seed (-1) as
`sampling_seed`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.options import EngineOptions
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.server.native_schemas import NativeCompletionRequest
from edgespec.server.queued import request_settings
from edgespec.server.schemas import ChatCompletionRequest

# a pair whose own defaults each given value must override
PAIR = PairConfig(
    "p", "llamacpp", ModelSpec("t", "gguf"), None, "ngram", 256, SamplingParams(0.7, 40, 0.9, 0.05, seed=3)
)
MESSAGES = [{"role": "user", "content": "hi"}]

sampling_values = st.fixed_dictionaries(
    {},
    optional={
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0.01, 1),
        "top_k": st.integers(0, 100),
        "min_p": st.floats(0, 1),
        "seed": st.integers(0, 2**31),
    },
)


@given(values=sampling_values, max_tokens=st.integers(1, 4096), draft=st.sampled_from(["ngram", "none"]))
def test_a_request_and_the_same_flags_make_the_same_settings(values, max_tokens, draft):
    flags = EngineOptions(draft=DraftChoice(draft), policy=PolicyChoice("fixed", 2), max_tokens=max_tokens, **values)
    defaults = EngineOptions(draft=DraftChoice(draft), policy=PolicyChoice("fixed", 2)).settings(PAIR)
    openai = ChatCompletionRequest.model_validate({"model": "p", "messages": MESSAGES, **values})
    native = NativeCompletionRequest.model_validate({"prompt": "hi", **values})
    for body in (openai, native):
        assert request_settings(defaults, body)(max_tokens) == flags.settings(PAIR)


def test_llama_cpps_random_seed_is_no_seed():
    defaults = EngineOptions().settings(PAIR)
    native = NativeCompletionRequest.model_validate({"prompt": "hi", "seed": -1})
    assert native.seed is None
    assert request_settings(defaults, native)(8).sampling == PAIR.sampling


@pytest.mark.parametrize(
    "fields, max_tokens",
    [
        ({}, None),
        ({"max_tokens": 9}, 9),
        ({"max_completion_tokens": 3}, 3),
        ({"max_tokens": 9, "max_completion_tokens": 3}, 3),  # OpenAI's current name wins
        ({"max_tokens": 0}, 0),  # read only
    ],
)
def test_an_openai_body_names_the_replys_length_max_tokens(fields, max_tokens):
    body = ChatCompletionRequest.model_validate({"model": "p", "messages": MESSAGES, **fields})
    assert body.max_tokens == max_tokens


@pytest.mark.parametrize("n_predict, max_tokens", [(-1, None), (0, 0), (7, 7)])
def test_a_native_body_names_the_replys_length_max_tokens(n_predict, max_tokens):
    assert NativeCompletionRequest.model_validate({"prompt": "hi", "n_predict": n_predict}).max_tokens == max_tokens
