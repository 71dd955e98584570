"""Rendering a model's own Jinja chat template (stored in GGUF metadata) in a sandbox.

Templates are written for transformers' renderer, whose `tojson` is plain `json.dumps` (no HTML
escaping of `<`, `>`, `&` and `'`, non-ASCII kept): Qwen2.5's writes each tool and each earlier
call's arguments with it, and must write them as the model read them in training."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from edgespec.decoding.backend import BackendError


@lru_cache(maxsize=8)
def _compile(template: str):
    def raise_exception(message: str):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = _tojson
    return env.from_string(template)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def render_chat(
    template: str, messages: Sequence[dict], *, tools: Sequence[dict] | None = None, bos: str = "", eos: str = ""
) -> str:
    """The prompt for `messages` (and `tools`, the template's `tools` variable: None when there
    are none, as transformers passes it), ending with the cue for the assistant's reply."""
    try:
        return _compile(template).render(
            messages=list(messages),
            tools=list(tools) if tools else None,
            add_generation_prompt=True,
            bos_token=bos,
            eos_token=eos,
        )
    except TemplateError as e:
        raise BackendError(f"the model's chat template failed: {e}") from None
