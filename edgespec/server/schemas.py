"""The OpenAI API's request and response bodies, typed with pydantic (as vLLM's server types them).

Requests are strict: a field of the wrong type is refused rather than coerced ("0.7" is not a
number), and a field edgespec does not know is refused by name rather than ignored, so a client
never believes a setting took effect when it did not. Fields that clients commonly send with
their neutral value (`n: 1`, `logprobs: false`, `tools: []`, penalties of 0) are accepted with
that value only; any other value is a 400 that says what edgespec does instead. Sampling values
follow the one rule of models.toml and the command-line flags (`sampling_problem`). Text that reaches
the tokenizer (prompts, message content, stop strings) must be valid Unicode (`text_problem`):
JSON can escape a lone surrogate, which no tokenizer reads.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from edgespec.decoding.sampling import sampling_problem
from edgespec.util.text_check import text_problem

# -- requests ----------------------------------------------------------------------------------


def _only(*neutral: Any, why: str) -> AfterValidator:
    """Accept a field only with a value that asks for nothing (its default); refuse the rest, saying why."""

    def check(value: Any) -> Any:
        if value in neutral:
            return value
        raise PydanticCustomError("unsupported_parameter", why)

    return AfterValidator(check)


def _sampling_rule(name: str) -> AfterValidator:
    def check(value: Any) -> Any:
        problem = sampling_problem(name, value)
        if problem:
            raise PydanticCustomError("invalid_value", problem)
        return value

    return AfterValidator(check)


def _valid_unicode(value: Any) -> Any:
    # Before pydantic's own str check: with a length constraint it refuses a surrogate itself, in
    # words about "raw data" that do not say what was wrong.
    problem = text_problem(value, escapes=False) if isinstance(value, str) else None
    if problem:
        raise PydanticCustomError("invalid_unicode", problem)
    return value


Text = Annotated[str, BeforeValidator(_valid_unicode)]
"""Text that reaches the tokenizer."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TextPart(_Strict):
    type: Literal["text"]
    text: Text


class Message(_Strict):
    """A chat message; "developer" is OpenAI's newer name for the system role."""

    role: Literal["system", "developer", "user", "assistant"]
    content: Text | list[TextPart]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class StreamOptions(_Strict):
    include_usage: bool = False


class EdgespecOptions(_Strict):
    """The extension field `"edgespec": {"sources": true}`: every chunk (or the whole reply) also
    lists its tokens with their origin: draft, correction, bonus or target."""

    sources: bool = False


_FORMAT_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _format_name(value: str) -> str:
    if not _FORMAT_NAME.fullmatch(value):
        raise PydanticCustomError("invalid_value", "must be 1 to 64 letters a-z, A-Z, digits, underscores or dashes")
    return value


class JsonSchemaFormat(_Strict):
    """`response_format.json_schema` as OpenAI's structured outputs send it (the openai client's
    `parse` helper among them). What `strict` means here: edgespec.server.structured."""

    name: Annotated[str, AfterValidator(_format_name)]
    schema_: dict = Field(alias="schema")  # "schema" would shadow a BaseModel method
    description: str | None = None
    strict: bool | None = None


class ResponseFormat(_Strict):
    """`{"type": "text"}`, `{"type": "json_object"}` or `{"type": "json_schema", "json_schema": {...}}`."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise PydanticCustomError("invalid_value", "type 'json_schema' needs the field 'json_schema'")
        if self.type != "json_schema" and self.json_schema is not None:
            raise PydanticCustomError("invalid_value", "the field 'json_schema' goes with type 'json_schema' only")
        return self


Stop = Annotated[str, Field(min_length=1), BeforeValidator(_valid_unicode)]  # Unicode first, then the length


class GenerationRequest(_Strict):
    """What chat and text completions share: length, sampling, stop strings, streaming."""

    model: str
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, _sampling_rule("temperature")] | None = None
    top_p: Annotated[float, _sampling_rule("top_p")] | None = None
    top_k: Annotated[int, _sampling_rule("top_k")] | None = None
    min_p: Annotated[float, _sampling_rule("min_p")] | None = None
    seed: Annotated[int, _sampling_rule("seed")] | None = None
    stop: Stop | Annotated[list[Stop], Field(max_length=16)] | None = None  # OpenAI takes 4; editors send more
    stream: bool = False
    stream_options: StreamOptions | None = None
    edgespec: EdgespecOptions = Field(default_factory=EdgespecOptions)
    user: str | None = None  # an end-user id for abuse monitoring: nothing to do for a single user

    n: Annotated[
        int | None, _only(None, 1, why="edgespec generates one choice per request; send 1 or leave it out")
    ] = None
    logprobs: Annotated[bool | int | None, _only(None, False, why="log probabilities are not returned")] = None
    presence_penalty: Annotated[
        float | None, _only(None, 0, why="penalties would change the target's distribution")
    ] = None
    frequency_penalty: Annotated[
        float | None, _only(None, 0, why="penalties would change the target's distribution")
    ] = None
    logit_bias: Annotated[dict[str, float] | None, _only(None, {}, why="logit bias is not supported")] = None

    @property
    def token_limit(self) -> int | None:
        """max_completion_tokens (OpenAI's current name) or max_tokens; None: up to the context."""
        return self.max_completion_tokens or self.max_tokens

    @property
    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ChatCompletionRequest(GenerationRequest):
    messages: Annotated[list[Message], Field(min_length=1)]
    top_logprobs: Annotated[int | None, _only(None, 0, why="log probabilities are not returned")] = None
    tools: Annotated[list[dict] | None, _only(None, [], why="tool calls are not supported")] = None
    tool_choice: Annotated[str | dict | None, _only(None, "none", why="tool calls are not supported")] = None
    parallel_tool_calls: Annotated[bool | None, _only(None, False, why="tool calls are not supported")] = None
    response_format: ResponseFormat | None = None

    def chat_messages(self) -> list[dict]:
        """The messages as the chat template takes them."""
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in self.messages]


class CompletionRequest(GenerationRequest):
    prompt: Text | Annotated[list[Text], Field(min_length=1, max_length=1)]
    echo: Annotated[bool | None, _only(None, False, why="the prompt is not echoed")] = None
    best_of: Annotated[int | None, _only(None, 1, why="edgespec generates one choice per request")] = None
    suffix: Annotated[
        str | None, _only(None, "", why="insertion (suffix) is not supported; send a fill-in-the-middle prompt")
    ] = None

    @property
    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


# -- responses ---------------------------------------------------------------------------------


def _omitted_if_none(**kwargs) -> Any:
    """An extension field, left out of the JSON when unset, so plain OpenAI clients see plain OpenAI bodies."""
    return Field(default=None, exclude_if=lambda v: v is None, **kwargs)


class TokenOrigin(BaseModel):
    """One emitted token: its id, its text, and where it came from (edgespec.decoding.events.Source)."""

    id: int
    text: str
    source: Literal["draft", "correction", "bonus", "target"]


class TokenOrigins(BaseModel):
    tokens: list[TokenOrigin]


class PromptTokensDetails(BaseModel):
    cached_tokens: int  # prompt tokens not read: in the engine's cache or loaded from the prompt cache


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails  # as OpenAI reports it


class SpeculativeDecoding(BaseModel):
    """vLLM's per-request figures (`--per-request-spec-decode-metrics summary`), named as vLLM names
    them, plus edgespec's: target passes (with K = 0, plain decoding, included), tokens per target
    pass and the K histogram. A spec step is a target pass that verified at least one drafted token."""

    num_spec_steps: int
    num_draft_tokens: int
    num_accepted_draft_tokens: int
    draft_acceptance_rate: float | None  # accepted / drafted; null when nothing was drafted
    mean_acceptance_length: float | None  # 1 + accepted / spec steps; null without spec steps
    acceptance_histogram: list[int]  # spec steps by the number of drafted tokens accepted (0, 1, ...)
    target_passes: int
    tokens_per_target_pass: float
    k_histogram: dict[str, int]  # target passes by draft length K ("0" = plain decoding)


class Metrics(BaseModel):
    speculative_decoding: SpeculativeDecoding
    decode_tokens_per_s: float  # tokens after the first, per second after it
    ttft_s: float  # from the engine taking the request to the first token (prefill)
    sources: dict[str, int]  # completion tokens by origin; they add up to usage.completion_tokens


class ChatMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Delta(BaseModel):
    role: Literal["assistant"] | None = _omitted_if_none()
    content: str | None = _omitted_if_none()


FinishReason = Literal["stop", "length"]


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatMessage
    finish_reason: FinishReason
    logprobs: None = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: FinishReason | None = None
    logprobs: None = None


class TextChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: FinishReason | None = None
    logprobs: None = None


class _Reply(BaseModel):
    """The fields in the order OpenAI writes them; each kind of reply names its object and choices."""

    id: str
    object: str
    created: int
    model: str
    choices: list
    usage: Usage | None = _omitted_if_none()
    metrics: Metrics | None = _omitted_if_none()
    edgespec: TokenOrigins | None = _omitted_if_none()


class ChatCompletion(_Reply):
    object: Literal["chat.completion"] = "chat.completion"
    choices: list[ChatChoice]


class ChatCompletionChunk(_Reply):
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    choices: list[ChatChunkChoice]


class TextCompletion(_Reply):
    """A text completion; streamed chunks have the same shape (as in OpenAI's API)."""

    object: Literal["text_completion"] = "text_completion"
    choices: list[TextChoice]


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "edgespec"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail
