"""llama.cpp server's own request bodies, `/completion` and `/infill`, as editors' plugins send them.

llama.vim and llama.vscode send `/infill`; Continue's, Tabby's and Twinny's llama.cpp providers
send `/completion`. Every field these clients send is taken: either honoured, or accepted only with
the value that asks for nothing and refused by name otherwise (as in schemas.py). A few are taken
and documented as having nothing to do here (docs/serve.md, "Editors: inline completion, and reading
ahead"):

- `cache_prompt`: edgespec's prompt cache never changes a reply (a warm read is bit for bit a cold
  one), so the reason to turn llama.cpp's off does not arise; it is always on.
- `id_slot`: one engine serves every request in turn; -1 or 0.
- `t_max_prompt_ms`: llama.cpp does not apply it either; the prompt is always read whole.
- `samplers`: the names of the warps edgespec applies (temperature, top-k, top-p, min-p) in its one
  fixed order, whatever the list's order; `infill` (llama.cpp's merging of tokens that share a
  prefix) is taken and not applied: the reply follows the target's own distribution.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from edgespec.engine.infill import ExtraFile, Infill
from edgespec.server.schema_base import Strict, Text
from edgespec.server.schemas import Stop, neutral_only, sampling_rule

Sampler = Literal["top_k", "top_p", "min_p", "temperature", "infill"]


def _random_seed(seed: int) -> int | None:
    """llama.cpp's -1 asks for a random seed: no seed, as a request that sends none."""
    return None if seed == -1 else seed


class NativeRequest(Strict):
    """What `/completion` and `/infill` share: the reply's length (`n_predict`: -1 up to the
    context, 0 reads the prompt into the cache and writes nothing), sampling, stops and timing."""

    model: str | None = None
    n_predict: Annotated[int, Field(ge=-1)] = -1
    temperature: Annotated[float, sampling_rule("temperature")] | None = None
    top_k: Annotated[int, sampling_rule("top_k")] | None = None
    top_p: Annotated[float, sampling_rule("top_p")] | None = None
    min_p: Annotated[float, sampling_rule("min_p")] | None = None
    seed: Annotated[int, Field(ge=-1), AfterValidator(_random_seed)] | None = None  # -1 is taken as None
    stop: Annotated[list[Stop], Field(max_length=16)] | None = None
    stream: bool = False
    cache_prompt: bool = True
    samplers: list[Sampler] | None = None
    id_slot: Annotated[int, neutral_only(-1, 0, why="edgespec has one slot; send -1 or 0")] = -1
    t_max_prompt_ms: Annotated[int, Field(ge=-1)] | None = None
    t_max_predict_ms: Annotated[int, Field(ge=-1)] | None = None
    n_indent: Annotated[int, Field(ge=0)] = 0
    response_fields: list[str] | None = None
    n_probs: Annotated[int, neutral_only(0, why="token probabilities are not returned")] = 0
    ignore_eos: Annotated[bool, neutral_only(False, why="the reply ends where the target ends it")] = False
    repeat_penalty: Annotated[float, neutral_only(1, 1.0, why="penalties would change the target's distribution")] = 1.0
    penalty_last_n: int | None = None  # the window of a penalty, which is off
    presence_penalty: Annotated[float, neutral_only(0, why="penalties would change the target's distribution")] = 0
    frequency_penalty: Annotated[float, neutral_only(0, why="penalties would change the target's distribution")] = 0
    mirostat: Annotated[int, neutral_only(0, why="mirostat would change the target's distribution")] = 0
    typical_p: Annotated[float, neutral_only(1, 1.0, why="typical sampling is not supported")] = 1.0

    @property
    def max_tokens(self) -> int | None:
        """`n_predict` under the one name the server gives the reply's length: None up to the
        context; 0 read only."""
        return None if self.n_predict < 0 else self.n_predict

    @property
    def stops(self) -> tuple[str, ...]:
        return tuple(self.stop or ())


def _one_prompt(value: Any) -> Any:
    if isinstance(value, list) and len(value) != 1:
        raise PydanticCustomError("invalid_value", "edgespec completes one prompt per request")
    return value


class NativeCompletionRequest(NativeRequest):
    """POST /completion: a raw prompt (special tokens read as such, as llama.cpp reads them)."""

    prompt: Annotated[Text | list[Text], AfterValidator(_one_prompt)]

    @property
    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


class ExtraChunk(Strict):
    text: Text
    filename: Text = "tmp"
    # llama.vim sends when it picked the chunk (Vim's reltime(): seconds and microseconds); llama.cpp
    # does not read it, nor does edgespec
    time: list[int | float] | None = None


class InfillRequest(NativeRequest):
    """POST /infill: the code around the cursor and chunks of other files (llama.vim's ring)."""

    input_prefix: Text = ""
    input_suffix: Text = ""
    input_extra: list[ExtraChunk] = Field(default_factory=list)
    prompt: Text = ""  # the current line up to the cursor (llama.vim), read after the prefix

    def infill(self) -> Infill:
        extra = tuple(ExtraFile(c.filename, c.text) for c in self.input_extra)
        return Infill(self.input_prefix, self.input_suffix, self.prompt, extra)
