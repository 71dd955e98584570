"""What every request body's model is made of: strict models, and text that must be valid Unicode
before it reaches the tokenizer (edgespec.server.schemas says why both)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError

from edgespec.util.text_check import text_problem


def valid_unicode(value: Any) -> Any:
    # Before pydantic's own str check: with a length constraint it refuses a surrogate itself, in
    # words about "raw data" that do not say what was wrong.
    problem = text_problem(value, escapes=False) if isinstance(value, str) else None
    if problem:
        raise PydanticCustomError("invalid_unicode", problem)
    return value


Text = Annotated[str, BeforeValidator(valid_unicode)]
"""Text that reaches the tokenizer."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
