"""The OpenAI API's request and response bodies, typed with pydantic (as vLLM's server types them).

Requests are strict: a field of the wrong type is refused rather than coerced ("0.7" is not a
number), and a field edgespec does not know is refused by name rather than ignored, so a client
never believes a setting took effect when it did not. Fields that clients commonly send with
their neutral value (`n: 1`, `logprobs: false`, penalties of 0) are accepted with
that value only; any other value is a 400 that says what edgespec does instead. Sampling values
follow the one rule of models.toml and the command-line flags (`sampling_problem`). Text that reaches
the tokenizer (prompts, message content, stop strings) must be valid Unicode (`text_problem`):
JSON can escape a lone surrogate, which no tokenizer reads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from edgespec.constraints.response_format import ResponseFormat
from edgespec.decoding.sampling import sampling_problem
from edgespec.server.schema_base import Strict as _Strict
from edgespec.server.schema_base import Text
from edgespec.server.schema_base import valid_unicode as _valid_unicode
from edgespec.server.tool_schemas import NamedToolChoice, Tool, ToolCall, ToolChoice, ToolName, arguments_value

# -- requests ----------------------------------------------------------------------------------


def neutral_only(*neutral: Any, why: str) -> AfterValidator:
    """Accept a field only with a value that asks for nothing (its default); refuse the rest, saying why."""

    def check(value: Any) -> Any:
        if value in neutral:
            return value
        raise PydanticCustomError("unsupported_parameter", why)

    return AfterValidator(check)


def sampling_rule(name: str) -> AfterValidator:
    def check(value: Any) -> Any:
        problem = sampling_problem(name, value)
        if problem:
            raise PydanticCustomError("invalid_value", problem)
        return value

    return AfterValidator(check)


class TextPart(_Strict):
    type: Literal["text"]
    text: Text


def _only_for(role: str, what: str):
    def check(value: Any, info: ValidationInfo) -> Any:
        if value is not None and info.data.get("role") != role:
            raise PydanticCustomError("invalid_value", f"only a {role} message has {what}")
        return value

    return AfterValidator(check)


class Message(_Strict):
    """A chat message; "developer" is OpenAI's newer name for the system role. An assistant message
    may carry the tool calls it made (its content then may be null), and a "tool" message answers
    one of them by its id. Fields are checked in this order, each against those before it."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    tool_calls: Annotated[list[ToolCall] | None, _only_for("assistant", "tool_calls")] = None
    tool_call_id: Annotated[str | None, _only_for("tool", "a tool_call_id")] = Field(None, validate_default=True)
    name: Annotated[ToolName | None, _only_for("tool", "a name")] = None  # the function answered
    content: Text | list[TextPart] | None = Field(None, validate_default=True)

    @field_validator("tool_call_id")
    @classmethod
    def _answers_a_call(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None and info.data.get("role") == "tool":
            raise PydanticCustomError("missing", "Field required")
        return value

    @field_validator("content")
    @classmethod
    def _has_content(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None and not (info.data.get("role") == "assistant" and info.data.get("tool_calls")):
            raise PydanticCustomError("missing", "Field required")  # only a call may stand without text
        return value

    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class StreamOptions(_Strict):
    include_usage: bool = False


class EdgespecOptions(_Strict):
    """The extension field `"edgespec": {"sources": true}`: every chunk (or the whole reply) also
    lists its tokens with their origin: draft, correction, bonus, target, or repeated (the same greedy
    request's earlier reply, served again from the history). `"decode_again": true` decodes a greedy
    request asked before again instead (`engine/same_reply.py`). `"live_timings": true` lets auto
    choose draft lengths from the request's own timings (`engine.GenerateSettings.live_timings`)."""

    sources: bool = False
    decode_again: bool = False
    live_timings: bool = False


Stop = Annotated[str, Field(min_length=1), BeforeValidator(_valid_unicode)]  # Unicode first, then the length


class GenerationRequest(_Strict):
    """What chat and text completions share: length, sampling, stop strings, streaming."""

    model: str
    # the reply's length (None: up to the context; 0, an extension: only read the prompt, docs/serve.md);
    # `max_completion_tokens`, OpenAI's current name for it, is taken into it (`_one_length`)
    max_tokens: Annotated[int, Field(ge=0)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=0)] | None = None
    temperature: Annotated[float, sampling_rule("temperature")] | None = None
    top_p: Annotated[float, sampling_rule("top_p")] | None = None
    top_k: Annotated[int, sampling_rule("top_k")] | None = None
    min_p: Annotated[float, sampling_rule("min_p")] | None = None
    seed: Annotated[int, sampling_rule("seed")] | None = None
    stop: Stop | Annotated[list[Stop], Field(max_length=16)] | None = None  # OpenAI takes 4; editors send more
    stream: bool = False
    stream_options: StreamOptions | None = None
    edgespec: EdgespecOptions = Field(default_factory=EdgespecOptions)
    user: str | None = None  # an end-user id for abuse monitoring: nothing to do for a single user

    n: Annotated[
        int | None, neutral_only(None, 1, why="edgespec generates one choice per request; send 1 or leave it out")
    ] = None
    logprobs: Annotated[bool | int | None, neutral_only(None, False, why="log probabilities are not returned")] = None
    presence_penalty: Annotated[
        float | None, neutral_only(None, 0, why="penalties would change the target's distribution")
    ] = None
    frequency_penalty: Annotated[
        float | None, neutral_only(None, 0, why="penalties would change the target's distribution")
    ] = None
    logit_bias: Annotated[dict[str, float] | None, neutral_only(None, {}, why="logit bias is not supported")] = None

    @model_validator(mode="after")
    def _one_length(self) -> GenerationRequest:
        """The reply's length has one name from here on, `max_tokens`: `max_completion_tokens` is
        taken into it, and wins where a request sends both."""
        if self.max_completion_tokens is not None:
            self.max_tokens = self.max_completion_tokens
        return self

    @property
    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ChatCompletionRequest(GenerationRequest):
    messages: Annotated[list[Message], Field(min_length=1)]
    top_logprobs: Annotated[int | None, neutral_only(None, 0, why="log probabilities are not returned")] = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None

    @field_validator("tools")
    @classmethod
    def _names_differ(cls, tools: list[Tool] | None) -> list[Tool] | None:
        seen: set[str] = set()  # in one pass: a request may carry tens of thousands of tools
        for tool in tools or ():
            if tool.function.name in seen:
                raise PydanticCustomError("invalid_value", f"two tools are named {tool.function.name!r}")
            seen.add(tool.function.name)
        return tools

    @field_validator("tool_choice")
    @classmethod
    def _choice_among_tools(cls, choice: ToolChoice | None, info: ValidationInfo) -> ToolChoice | None:
        names = {t.function.name for t in info.data.get("tools") or ()}
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise PydanticCustomError("invalid_value", f"no tool named {choice.function.name!r} in tools")
        if choice == "required" and not names:
            raise PydanticCustomError("invalid_value", '"required" needs tools to call')
        return choice

    def chat_messages(self) -> list[dict]:
        """The messages as the chat template takes them (transformers' convention): an earlier
        call's arguments as an object where they are JSON (templates write them with `tojson`),
        and a tool message named after the call it answers."""
        called = {c.id: c.function.name for m in self.messages for c in m.tool_calls or ()}
        out = []
        for m in self.messages:
            message: dict = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
            if m.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": arguments_value(c)},
                    }
                    for c in m.tool_calls
                ]
            if m.role == "tool":
                message.update(tool_call_id=m.tool_call_id, name=m.name or called.get(m.tool_call_id or ""))
            out.append(message)
        return out


class CompletionRequest(GenerationRequest):
    prompt: Text | Annotated[list[Text], Field(min_length=1, max_length=1)]
    echo: Annotated[bool | None, neutral_only(None, False, why="the prompt is not echoed")] = None
    best_of: Annotated[int | None, neutral_only(None, 1, why="edgespec generates one choice per request")] = None
    suffix: Text | None = None  # text after the insertion point: a fill-in-the-middle prompt (engine/infill.py)

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
    source: Literal["draft", "correction", "bonus", "target", "repeated"]


class TokenOrigins(BaseModel):
    tokens: list[TokenOrigin]


class PromptTokensDetails(BaseModel):
    cached_tokens: int  # prompt tokens not read: in the engine's cache or loaded from the prompt cache


class ReadAhead(BaseModel):
    """A read-only request's figures (`max_tokens: 0`): prompt tokens the target holds now that a
    later request keeps (whole read chunks), how many it read for this request, in how long, and
    whether a generating request stopped it first."""

    ready_tokens: int
    read_tokens: int
    read_s: float
    stopped: bool


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
    content: str | None  # null when the reply is only tool calls
    tool_calls: list[ToolCall] | None = _omitted_if_none()


class FunctionDelta(BaseModel):
    name: str | None = _omitted_if_none()
    arguments: str


class ToolCallDelta(BaseModel):
    """A piece of a streamed call: the first names it (index, id, type, name, arguments ""), the
    rest carry only its index and more of its arguments, as OpenAI streams them."""

    index: int
    id: str | None = _omitted_if_none()
    type: Literal["function"] | None = _omitted_if_none()
    function: FunctionDelta


class Delta(BaseModel):
    role: Literal["assistant"] | None = _omitted_if_none()
    content: str | None = _omitted_if_none()
    tool_calls: list[ToolCallDelta] | None = _omitted_if_none()


FinishReason = Literal["stop", "length", "tool_calls"]


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
    read_ahead: ReadAhead | None = _omitted_if_none()


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
