"""The bench's `hf-assisted` peer: transformers' own speculative generation,
`generate(assistant_model=...)` with its default assistant settings, on the pair edgespec runs,
timed the way the engine's Summary times edgespec's modes (see `modes.measure`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from edgespec.backends.hf import HFBackend
from edgespec.backends.hf_quiet import quiet_transformers
from edgespec.decoding.backend import ContextOverflow


@dataclass(frozen=True)
class AssistedRun:
    """One greedy `generate(assistant_model=...)`, measured the way the engine's Summary is.

    `ids` are the generated tokens up to (not including) the first end-of-generation token, as the
    engine emits them; `tokens` is their count. `decode_tokens_per_s` counts the tokens after the
    first target pass per second after it: that pass reads the prompt (the engine's prefill) and, here,
    also verifies the first draft, so its tokens and its time are both left out (0 when it produced
    the whole reply: nothing is left to time). `ttft_s` runs from the call to the end of that first
    pass (both models reading the prompt, the first draft and its verification), `decode_s` from
    there to the last pass. `target_passes` counts every target forward (the first included),
    `k_trace` the draft length of each.
    """

    ids: list[int]
    tokens: int
    decode_tokens_per_s: float
    target_passes: int
    drafted: int
    accepted: int
    k_trace: list[int]
    ttft_s: float
    decode_s: float


class _AssistedTrace:
    """A streamer (transformers' BaseStreamer protocol: put/end) that stamps each target pass.

    generate() puts the prompt first, then the tokens each target pass validated (accepted drafts
    plus the target's own token). A forward hook on the draft calls `draft_forward` once per drafted
    token, so the drafts counted since the previous put are the K of the pass that follows them.
    """

    def __init__(self, clock):
        self.clock = clock
        self.prompt_seen = False
        self.passes: list[tuple[float, int, int]] = []  # (time, tokens validated, tokens drafted)
        self._drafted = 0

    def draft_forward(self, *_):
        self._drafted += 1

    def put(self, value) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.passes.append((self.clock(), int(value.numel()), self._drafted))
        self._drafted = 0

    def end(self) -> None:
        pass


def assisted_generate(
    target: HFBackend,
    draft: HFBackend,
    prompt_ids: Sequence[int],
    max_tokens: int,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> AssistedRun:
    """Greedy `target.model.generate(..., assistant_model=draft.model)` after `prompt_ids`, with
    transformers' default assistant settings (draft length, confidence threshold), stopping at the
    target's end-of-generation tokens like the engine. Neither backend's own KV cache is touched:
    generate() builds its own.
    """
    import torch  # optional dependency (the hf extra)

    prompt_ids = list(prompt_ids)
    if not prompt_ids:
        raise ValueError("empty prompt")
    room = min(max_tokens, target.n_ctx - len(prompt_ids))
    if room <= 0:
        raise ContextOverflow(f"the prompt is {len(prompt_ids)} tokens; the context holds {target.n_ctx}")
    eos = sorted(target.eos_ids)
    pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else (eos[0] if eos else None)
    trace = _AssistedTrace(clock)
    hook = draft.model.register_forward_hook(trace.draft_forward)
    start = clock()
    try:
        with torch.inference_mode(), quiet_transformers():
            ids = torch.tensor([prompt_ids], dtype=torch.long, device=target.device)
            out = target.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                assistant_model=draft.model,
                streamer=trace,
                do_sample=False,
                repetition_penalty=1.0,  # plain argmax, whatever the model's generation_config says
                max_new_tokens=room,
                eos_token_id=eos or None,
                pad_token_id=pad,
            )
    finally:
        hook.remove()
    new = [int(t) for t in out[0, len(prompt_ids) :].tolist()]
    stop = next((i for i, t in enumerate(new) if t in target.eos_ids), len(new))
    return _measured(new[:stop], trace.passes, start, clock)


def _measured(
    new: list[int], passes: list[tuple[float, int, int]], start: float, clock: Callable[[], float]
) -> AssistedRun:
    """The run's figures from its generated tokens (cut at the first end-of-generation token) and
    the passes `_AssistedTrace` stamped, timed from `start` (see AssistedRun)."""
    validated = sum(n for _, n, _ in passes)
    rate = 0.0
    ttft = passes[0][0] - start if passes else clock() - start
    if len(passes) > 1:
        decoded = len(new) - min(passes[0][1], len(new))
        span = passes[-1][0] - passes[0][0]
        rate = decoded / span if span > 0 else 0.0
    return AssistedRun(
        new,
        len(new),
        rate,
        len(passes),
        sum(k for *_, k in passes),
        validated - len(passes),
        [k for *_, k in passes],
        ttft,
        passes[-1][0] - passes[0][0] if passes else 0.0,
    )
