"""Tool-call formats: the markup a model's chat template teaches it to write a call in, and the
grammar of valid calls in that markup.

A pair names its format in models.toml (`tool_format`); the models layer checks the name against
`FORMATS`, the server parses replies by the format's markup, and `call_constraint` constrains
decoding when a request requires a call. The tools themselves are rendered by the model's own chat
template, never here: only what the model writes back is the format's business.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from edgespec.constraints.guidance import JSON_LAYOUT, ConstraintError, ConstraintSpec, check


@dataclass(frozen=True, slots=True)
class ToolFormat:
    """A call is `open`, then one line of JSON `{"name": NAME, "arguments": {...}}`, then `close`;
    several calls are separated by `between`. `open` and `close` are what a parser looks for (its
    markup), and the grammar writes them with the newlines the template's own example puts around
    the JSON."""

    name: str
    open: str
    close: str
    between: str = "\n"


# Hermes' format, which Qwen2.5's (and Qwen3's) chat template teaches: "For each function call,
# return a json object with function name and arguments within <tool_call></tool_call> XML tags".
HERMES = ToolFormat("hermes", "<tool_call>", "</tool_call>")
FORMATS: dict[str, ToolFormat] = {f.name: f for f in (HERMES,)}


def call_constraint(
    fmt: ToolFormat, tools: Mapping[str, dict], parallel: bool, after_text: bool = False
) -> ConstraintSpec:
    """A Lark grammar (llguidance's, with embedded `%json` schemas) of one call to one of `tools`
    (name -> parameters schema), or with `parallel` one or more calls, each written exactly as the
    chat template writes a call in the history: `<tool_call>\\n{"name": "NAME", "arguments":
    ARGS}\\n</tool_call>`, ARGS one line of JSON valid against that tool's parameters. With
    `after_text` the calls may follow text, or not come at all: text free of the opening markup,
    or text up to it and then valid calls (`tool_choice` "auto" with strict tools: the model
    decides whether to call, and a call it starts is valid).

    The name is a literal of the grammar, so once the model has chosen among the tools every token
    up to the arguments is forced (free under speculation). ConstraintError names the tool whose
    parameters llguidance cannot enforce and the feature it rejected."""
    for name, schema in tools.items():
        try:
            check(ConstraintSpec.json_schema(schema))
        except ConstraintError as e:
            raise ConstraintError(f"the parameters of tool {name!r}: {e}") from None
    more = f" ({_literal(fmt.between + fmt.open)} body)*" if parallel else ""
    if after_text:  # the lazy lexeme ends at the first opening markup; TEXT never holds one
        opening = re.escape(fmt.open)
        lines = [
            f"start: TEXT | pre body{more}",
            f"TEXT: /(?s:.*)/ & ~/(?s:.*){opening}(?s:.*)/",
            f"pre[lazy]: /(?s:.*){opening}/",
        ]
    else:
        lines = [f"start: {_literal(fmt.open)} body{more}"]
    lines.append("body: " + " | ".join(f"body_{i}" for i in range(len(tools))))
    tail = _literal("}\n" + fmt.close)
    for i, (name, schema) in enumerate(tools.items()):
        head = _literal(f'\n{{"name": {json.dumps(name)}, "arguments": ')
        lines.append(f"body_{i}: {head} args_{i} {tail}")
        lines.append(f"args_{i}: %json {json.dumps({**schema, 'x-guidance': JSON_LAYOUT})}")
    spec = ConstraintSpec("lark", "\n".join(lines) + "\n")
    check(spec)  # each part checked above; the whole is compiled once more
    return spec


def _literal(text: str) -> str:
    """A Lark string literal (JSON's escapes are Lark's)."""
    return json.dumps(text)


def parameters_schema(parameters: dict | None) -> dict:
    """A tool's parameters as a schema: OpenAI's tools may leave them out, meaning no arguments."""
    return parameters if parameters is not None else {"type": "object", "properties": {}, "additionalProperties": False}
