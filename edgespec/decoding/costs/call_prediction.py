"""What a typical call costs on a curve: the whole call a layout is ranked by (`bench/layout_ranking.py`).

A typical call reads PROMPT_TOKENS, then decodes REPLY_TOKENS in the rounds `auto` ran on the
development set (data/auto_rounds.json: target passes by tokens drafted), each priced by the
curve itself (`SteadyCurve.pass_s`: the size's timed figure, else the room's interpolation), as a
steady call of auto prices its passes. A flatter curve lets auto draft more than those rounds did,
so the prediction is conservative for it.
"""

from __future__ import annotations

import functools
import json
from importlib.resources import files

from edgespec.decoding.costs.steady_curve import SteadyCurve

PROMPT_TOKENS = 1024  # a typical call's prompt: a file of a few hundred lines and an instruction
REPLY_TOKENS = 200
ROUNDS = files("edgespec") / "data" / "auto_rounds.json"


@functools.cache
def _typical_rounds() -> dict:
    """The development set's `auto` rounds, read once: every prediction prices them."""
    return json.loads(ROUNDS.read_text())


def typical_call_s(curve: SteadyCurve, read_tok_s: float) -> float:
    """Reading PROMPT_TOKENS at `read_tok_s`, then REPLY_TOKENS decoded in the development set's
    `auto` rounds, each priced at the curve's cost of its pass (k drafted tokens: a pass over k+1)."""
    rounds = _typical_rounds()
    passes_s = sum(n * curve.pass_s(int(k) + 1) for k, n in rounds["passes_by_k"].items())
    return PROMPT_TOKENS / read_tok_s + passes_s * REPLY_TOKENS / rounds["tokens"]
