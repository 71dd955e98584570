"""One backend as the GPU check measures it (benchmarks/gpu_check.py): the verify curve, the draft
step, plain decoding, and per acceptance rate fixed K, the controller and transformers' assisted
generation; the transformers models (bf16, and nf4 in place) and the llama.cpp pair behind it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from gpu_check_plan import CheckPlan
from gpu_check_runs import measure_verify, measured_costs, round_seconds, run_decode

from edgespec.backends import llamacpp  # llama_cpp itself is imported on first use
from edgespec.backends.hf import HFBackend
from edgespec.bench.hf_assisted import assisted_generate
from edgespec.decoding.costs.model import CostModel, best_k
from edgespec.decoding.policy.controller import AutoK
from edgespec.testing.tiny_hf import bytelevel_tokenizer


@dataclass
class Side:
    """One backend as the check measures it: its target, the draft that agrees with it at rate a,
    and whether transformers' assisted generation can run its models."""

    label: str
    target: object
    draft_for: Callable[[float], object]
    assisted: bool


def measure_side(side: Side, plan: CheckPlan, prompt: list[int], oracle, deadline: float) -> dict:
    """The verify curve, the draft step, ar, and per acceptance rate fixed K, auto and hf-assisted."""
    out: dict = {"verify_ms": measure_verify(side.target, prompt, plan.verify_ns, plan.reps)}
    draft = side.draft_for(plan.accept[0])
    out["draft_ms"] = measure_verify(draft, prompt, (1,), plan.reps)[1]
    costs = CostModel()  # what auto plans with, calibrated as the engine calibrates it
    costs.calibrate(side.target, draft)
    measured = measured_costs(out["verify_ms"], out["draft_ms"])
    ar = run_decode(side.target, None, prompt, plan.tokens, "ar", oracle, costs)
    out["ar"] = ar
    predicted_ar = 1 / round_seconds(measured, ar.host_ms)(0)
    out["accept"] = {}
    for a in plan.accept:
        if time.perf_counter() > deadline:
            out["accept"][a] = None  # over the time budget
            continue
        draft = side.draft_for(a)
        fixed = {k: run_decode(side.target, draft, prompt, plan.tokens, f"k={k}", oracle, costs) for k in plan.fixed_k}
        auto = run_decode(side.target, draft, prompt, plan.tokens, "auto", oracle, costs)
        k_star, predicted = best_k([a] * AutoK.longest_model_draft, round_seconds(measured, auto.host_ms))
        drafting = list(fixed.values()) or [auto]  # fixed K always drafts: its acceptance is the draft's
        accepted = sum(r.accepted for r in drafting)
        tried = accepted + sum(r.rejecting_passes for r in drafting)
        row = {
            "fixed": fixed,
            "auto": auto,
            "measured_a": accepted / tried if tried else float("nan"),
            "k_star": k_star,
            "predicted_speedup": predicted / predicted_ar,
            "measured_speedup": auto.tok_s / ar.tok_s if ar.tok_s else float("nan"),
            "assisted": None,
        }
        if side.assisted:
            run = assisted_generate(side.target, draft, prompt, plan.tokens)
            row["assisted"] = {
                "tok_s": run.decode_tokens_per_s,
                "speedup": run.decode_tokens_per_s / ar.tok_s,
                "accepted_of_drafted": run.accepted / run.drafted if run.drafted else float("nan"),
            }
        out["accept"][a] = row
    return out


def hf_backend(model, n_ctx: int, label: str) -> HFBackend:
    backend = HFBackend(model, bytelevel_tokenizer(), n_ctx=n_ctx, label=label)
    backend.eos_ids = frozenset()  # synthetic text: never stop early
    return backend


def quantize_4bit(model, compute_dtype) -> None:
    """Replace every linear layer but the output head by a bitsandbytes nf4 Linear4bit, in place
    (what `from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit=True, ...))` builds,
    without writing 16 GB of random weights to disk first)."""
    import bitsandbytes as bnb

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear) or child is model.get_output_embeddings():
                continue
            q = bnb.nn.Linear4bit(
                child.in_features,
                child.out_features,
                bias=child.bias is not None,
                compute_dtype=compute_dtype,
                compress_statistics=True,
                quant_type="nf4",
                device="meta",
            )
            weight = bnb.nn.Params4bit(
                child.weight.data, requires_grad=False, compress_statistics=True, quant_type="nf4", module=q
            )
            q.weight = weight.to(child.weight.device)  # quantizes on that device
            if child.bias is not None:
                q.bias = child.bias
            setattr(parent, name, q)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def measure_llama(
    plan: CheckPlan, target_gguf: Path, draft_ggufs: dict[float, Path], prompt, oracle, deadline: float
) -> dict:
    """The llama.cpp side: both models loaded as a user's pair is (every layer on the GPU where it can)."""

    def load(path: Path):
        backend = llamacpp.LlamaCppBackend(path, plan.n_ctx, threads=plan.llama_threads)
        backend.eos_ids = frozenset()  # synthetic text: never stop early
        return backend

    target, loaded = load(target_gguf), {}

    def draft_for(a: float):
        if a not in loaded:
            for backend in loaded.values():
                backend.close()
            loaded.clear()
            loaded[a] = load(draft_ggufs[a])
        return loaded[a]

    try:
        out = measure_side(Side("llama.cpp", target, draft_for, assisted=False), plan, prompt, oracle, deadline)
        out["placement"] = f"{target.placement.device} ({target.placement.detail})"
        return out
    finally:
        for backend in [target, *loaded.values()]:
            backend.close()
