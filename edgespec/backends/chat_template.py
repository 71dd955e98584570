"""Rendering a model's own Jinja chat template (stored in GGUF metadata) in a sandbox."""

from __future__ import annotations

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
    return env.from_string(template)


def render_chat(template: str, messages: Sequence[dict], *, bos: str = "", eos: str = "") -> str:
    """The prompt for `messages`, ending with the cue for the assistant's reply."""
    try:
        return _compile(template).render(
            messages=list(messages), add_generation_prompt=True, bos_token=bos, eos_token=eos
        )
    except TemplateError as e:
        raise BackendError(f"the model's chat template failed: {e}") from None
