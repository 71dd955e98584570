"""llama.cpp server's reply bodies for `/completion` and `/infill`, as its clients read them.

A whole reply is one JSON object: `content`, `stop: true`, `stop_type`, `tokens_predicted`,
`tokens_evaluated`, `tokens_cached` (prompt tokens not read: the engine's cache or the prompt
cache held them), `truncated` and `timings` (`prompt_n` tokens read in `prompt_ms`, `predicted_n`
tokens written in `predicted_ms`, their rates, and the drafts: `draft_n`, `draft_n_accepted`).
Streamed, each piece is `{"content": ..., "stop": false}` and the last one carries the rest, as
server-sent events without a `[DONE]`. With `response_fields`, only the fields named are sent,
a nested one under its path as a key ("timings/prompt_n"), as llama.cpp does it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgespec.decoding.events import Summary, Tally
from edgespec.engine.read_ahead import Reading


@dataclass(frozen=True)
class NativeFormat:
    model: str
    prompt_tokens: int
    truncated: bool = False
    response_fields: tuple[str, ...] | None = None

    def piece(self, text: str, predicted: int) -> dict:
        return {"index": 0, "content": text, "stop": False, "id_slot": 0, "tokens_predicted": predicted}

    def final(self, content: str, summary: Summary, sent: Tally, stop_type: str, stopping_word: str = "") -> dict:
        """The whole reply (streamed: its last piece, `content` what was not sent yet)."""
        read_ms = summary.target_read_s * 1000
        written_ms = max(0.0, summary.total_s - summary.target_read_s) * 1000
        body = {
            "index": 0,
            "content": content,
            "id_slot": 0,
            "stop": True,
            "model": self.model,
            "tokens_predicted": sent.tokens,
            "tokens_evaluated": self.prompt_tokens,
            "has_new_line": "\n" in content,
            "truncated": self.truncated,
            "stop_type": stop_type,
            "stopping_word": stopping_word,
            "tokens_cached": summary.prompt_cached,
            "timings": timings(summary.target_read_tokens, read_ms, sent.tokens, written_ms)
            | {"draft_n": sent.drafted, "draft_n_accepted": sent.accepted},
        }
        return self.selected(body)

    def read_only(self, reading: Reading) -> dict:
        """A request with `n_predict: 0`: the prompt read into the cache, nothing written."""
        body = {
            "index": 0,
            "content": "",
            "id_slot": 0,
            "stop": True,
            "model": self.model,
            "tokens_predicted": 0,
            "tokens_evaluated": self.prompt_tokens,
            "truncated": self.truncated,
            "stop_type": "limit",
            "stopping_word": "",
            "tokens_cached": reading.cached,
            "timings": timings(reading.read, reading.seconds * 1000, 0, 0.0),
        }
        return self.selected(body)

    def selected(self, body: dict) -> dict:
        """`body` cut to `response_fields` (paths such as "timings/prompt_n" become keys)."""
        if self.response_fields is None:
            return body
        out: dict[str, Any] = {}
        for path in self.response_fields:
            value: Any = body
            for part in path.split("/"):
                if not isinstance(value, dict) or part not in value:
                    break
                value = value[part]
            else:
                out[path] = value
        return out


def timings(prompt_n: int, prompt_ms: float, predicted_n: int, predicted_ms: float) -> dict:
    return {
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": 1000 * prompt_n / prompt_ms if prompt_ms > 0 else 0.0,
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
        "predicted_per_second": 1000 * predicted_n / predicted_ms if predicted_ms > 0 else 0.0,
    }
