#!/usr/bin/env python3
"""GPU check for the transformers backend: real model shapes, random weights, known acceptance.

For a CUDA machine that reaches no network and receives no weights: it builds random-weight models
of real shapes on the GPU (Llama-3.1-8B as target, Llama-3.2-1B as draft; bf16, and bitsandbytes
nf4 4-bit), runs them through `edgespec.backends.hf.HFBackend` and the real decode loop
(`edgespec.decoding.decoder`), and prints one table:

  verify   target pass cost against n tokens verified (the cost model's t_verify(n))
  draft    one draft-model step (t_draft)
  host     wall time per target pass spent outside model passes (sampling, verification,
           cache bookkeeping, the controller, events)
  decode   tokens/s for ar (plain), fixed K and auto, each with the cost model's prediction
           E(K) / (K t_draft + t_verify(K+1) + host) at the nominal acceptance, and the measured one

Known acceptance: the target is built so that its greedy next token is a fixed permutation of the
previous token (unit-scale embeddings dominate the residual stream, and the output matrix is the
permuted embedding matrix, so the margin is large enough that bf16 and nf4 keep the argmax). A
synthetic drafter runs the real draft model for its cost but proposes that token with probability
a (0.5, 0.7, 0.9) and a wrong one otherwise, so per-token acceptance is a by construction. The
script checks that plain decoding really follows the permutation and prints the agreement.

    python scripts/gpu_check.py            # CUDA, real shapes, about 3-5 minutes, budget 8
    python scripts/gpu_check.py --tiny     # tiny shapes on the CPU: a smoke test of the script
    python scripts/gpu_check.py --json out.json

Everything runs in one process; the budget (--budget-s) stops the decode comparisons early (the
table says what was skipped) so the whole check ends in time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from edgespec.backends.base import sync_cache  # noqa: E402
from edgespec.backends.hf import HFBackend  # noqa: E402
from edgespec.backends.hf_loading import cpu_has_bf16  # noqa: E402
from edgespec.decoding.controller import AutoK  # noqa: E402
from edgespec.decoding.costs import CostModel, best_k  # noqa: E402
from edgespec.decoding.decoder import SpeculativeDecoder  # noqa: E402
from edgespec.decoding.drafters import Draft, ModelDrafter  # noqa: E402
from edgespec.decoding.events import Summary, Token  # noqa: E402
from edgespec.decoding.sampling import SamplingParams  # noqa: E402
from edgespec.decoding.simple_policies import FixedK  # noqa: E402
from edgespec.testing.tiny_hf import bytelevel_tokenizer  # noqa: E402

# -- shapes -------------------------------------------------------------------------------------------

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192, "rope_theta": 500000.0}

SHAPES = {
    # from the published config.json files of meta-llama/Llama-3.1-8B-Instruct and Llama-3.2-1B-Instruct
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=False,
                         max_position_embeddings=131072, rope_parameters=LLAMA3_ROPE),
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True,
                         max_position_embeddings=131072,
                         rope_parameters={**LLAMA3_ROPE, "factor": 32.0}),
    # --tiny: the same code path on a CPU in seconds
    "tiny-target": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=64, vocab_size=4096, tie_word_embeddings=False,
                        max_position_embeddings=2048, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    "tiny-draft": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=32, vocab_size=4096, tie_word_embeddings=True,
                       max_position_embeddings=2048, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
}


@dataclass
class CheckPlan:
    """What this run measures: which shapes, where, how many tokens and repetitions."""

    target: str
    draft: str
    device: str
    dtype: str  # the unquantized dtype (and 4-bit compute dtype)
    prompt: int  # prompt tokens before each measurement / decode
    tokens: int  # tokens generated per decode run
    verify_ns: tuple[int, ...]
    reps: int
    accept: tuple[float, ...]
    fixed_k: tuple[int, ...]
    quants: tuple[str, ...]
    n_ctx: int = 2048


def make_plan(args) -> CheckPlan:
    accept = tuple(float(a) for a in args.accept.split(","))
    fixed = tuple(int(k) for k in args.k.split(","))
    if args.tiny:
        # One thread: on a small shared CPU, OpenMP workers that spin while another process holds
        # the other core turn a 10 ms pass into 250 ms at random; one thread keeps timings stable.
        torch.set_num_threads(1)
        dtype = "bf16" if cpu_has_bf16() else "fp32"
        return CheckPlan("tiny-target", "tiny-draft", "cpu", dtype, prompt=64, tokens=args.tokens or 48,
                         verify_ns=(1, 2, 4, 8, 16), reps=3, accept=accept, fixed_k=fixed, quants=("none", "4bit"))
    if not torch.cuda.is_available():
        sys.exit("gpu_check: real shapes need a CUDA GPU (torch sees none); use --tiny for the CPU smoke test")
    return CheckPlan("llama-3.1-8b", "llama-3.2-1b", "cuda", "bf16", prompt=256, tokens=args.tokens or 128,
                     verify_ns=(1, 2, 3, 4, 5, 6, 8, 10, 12, 16), reps=7, accept=accept, fixed_k=fixed,
                     quants=("none", "4bit"))


# -- random models with a known greedy rule -------------------------------------------------------------


def build_model(shape: str, device: str, dtype: str, seed: int, permutation=None):
    """A LlamaForCausalLM of `shape` with random weights on `device`.

    With `permutation` (a LongTensor over the vocabulary) the model's greedy next token after x is
    permutation[x]: embeddings have unit scale, every residual branch's output projection is
    scaled down 100x so the residual stream stays close to the input embedding, and output row y is
    the embedding of permutation^-1(y), scaled so the right logit is about 30 and the others about
    +-2. The compute is the real model's: only the weights' values are chosen.
    """
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    config = LlamaConfig(**SHAPES[shape], rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None,
                         attention_bias=False, mlp_bias=False)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=torch_dtype)
    model.eval()
    with torch.no_grad():
        embed = model.get_input_embeddings().weight
        embed.normal_(0.0, 1.0)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(0.01)
            layer.mlp.down_proj.weight.mul_(0.01)
        if permutation is not None:
            assert not config.tie_word_embeddings, "a permuted output needs its own matrix"
            inverse = torch.empty_like(permutation)
            inverse[permutation] = torch.arange(len(permutation), device=permutation.device)
            scale = 30.0 / config.hidden_size
            model.lm_head.weight.copy_(embed[inverse] * scale)
    return model


def quantize_4bit(model, compute_dtype) -> None:
    """Replace every linear layer but the output head by a bitsandbytes nf4 Linear4bit, in place
    (what `from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit=True, ...))` builds,
    without writing 16 GB of random weights to disk first)."""
    import bitsandbytes as bnb  # only the 4-bit rows need it

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear) or child is model.get_output_embeddings():
                continue
            q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                  compute_dtype=compute_dtype, compress_statistics=True, quant_type="nf4",
                                  device="meta")
            weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False, compress_statistics=True,
                                       quant_type="nf4", module=q)
            q.weight = weight.to(child.weight.device)  # quantizes on that device
            if child.bias is not None:
                q.bias = child.bias
            setattr(parent, name, q)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def make_backend(model, n_ctx: int, label: str) -> HFBackend:
    backend = HFBackend(model, bytelevel_tokenizer(), n_ctx=n_ctx, label=label)
    backend.eos_ids = frozenset()  # synthetic text: never stop early
    return backend


# -- measurements -------------------------------------------------------------------------------------


def median_ms(fn: Callable[[], None], reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def measure_verify(backend, prompt: list[int], ns, reps: int) -> dict[int, float]:
    """Milliseconds per target pass evaluating n tokens with logits at all n, after `prompt`."""
    backend.truncate(0)
    backend.eval(prompt, 1)
    base = len(prompt)
    out = {}
    for n in ns:
        tokens = [(7 * i + 3) % backend.n_vocab for i in range(n)]

        def one():
            backend.eval(tokens, n)
            backend.truncate(base)

        out[n] = median_ms(one, reps)
    return out


def measure_draft(backend, prompt: list[int], reps: int) -> float:
    """Milliseconds per draft-model step (one token in, one row of logits out)."""
    return measure_verify(backend, prompt, (1,), reps)[1]


class TimedEval:
    """Wraps a backend's eval to add up the seconds spent in model passes."""

    def __init__(self, backend):
        self.backend, self.seconds, self.calls = backend, 0.0, 0
        self._eval = backend.eval
        backend.eval = self

    def __call__(self, tokens, n_logits):
        t0 = time.perf_counter()
        try:
            return self._eval(tokens, n_logits)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1

    def reset(self):
        self.seconds, self.calls = 0.0, 0

    def detach(self):
        del self.backend.eval


class SyntheticDrafter(ModelDrafter):
    """A ModelDrafter that pays for the real draft model but proposes the target's own next token
    with probability `a` (a wrong one otherwise): per-token acceptance a by construction."""

    def __init__(self, backend, oracle: Callable[[int], int], a: float, seed: int = 0):
        super().__init__(backend)
        self.oracle, self.a = oracle, a
        self.coin = np.random.default_rng(seed)

    def propose(self, context, k, params, rng, stop=None) -> Draft:
        out = Draft()
        if k <= 0:
            return out
        sync_cache(self.backend, context, 1)  # the draft model's real cost
        prev = context[-1]
        while True:
            right = self.oracle(prev)
            if self.coin.random() < self.a:
                token = right
            else:
                token = (right + 1 + int(self.coin.integers(self.backend.n_vocab - 1))) % self.backend.n_vocab
            if out.ids and stop is not None and stop(len(out.ids), self.a):
                break
            out.ids.append(token)
            out.dists.append(None)
            out.confidence.append(self.a)
            if len(out.ids) == k:
                break
            self.backend.eval([token], 1)
            prev = token
        return out


@dataclass
class DecodeResult:
    mode: str
    a: float | None
    tokens: int
    seconds: float
    passes: int
    drafted: int
    accepted: int
    host_ms: float  # per target pass
    k_hist: dict = field(default_factory=dict)
    follows_rule: float = 1.0  # fraction of plain-decoded tokens equal to the permutation's

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def acceptance(self) -> float:
        """Per-token acceptance: accepted / (accepted + rounds that ended in a rejection)."""
        rejections = self.passes_with_drafts_rejected
        return self.accepted / (self.accepted + rejections) if self.accepted + rejections else float("nan")

    passes_with_drafts_rejected: int = 0


def run_decode(target, draft, prompt, n_tokens, mode: str, a: float | None, oracle, costs) -> DecodeResult:
    """One generation through edgespec's decoder. mode: "ar", "k=<K>" or "auto"."""
    if mode == "ar":
        policy, model = FixedK(0, "model"), None
    elif mode == "auto":
        policy, model = AutoK("model", costs), SyntheticDrafter(draft, oracle, a, seed=1)
    else:
        policy, model = FixedK(int(mode.split("=")[1]), "model"), SyntheticDrafter(draft, oracle, a, seed=1)
    target.truncate(0)
    draft.truncate(0)
    t_eval, d_eval = TimedEval(target), TimedEval(draft)
    try:
        decoder = SpeculativeDecoder(target, policy, [model] if model is not None else [])
        events = decoder.generate(prompt, n_tokens, SamplingParams())
        ids, summary = [], None
        t_eval.reset()
        d_eval.reset()
        for event in events:
            if isinstance(event, Token):
                ids.append(event.id)
            elif isinstance(event, Summary):
                summary = event
        model_s = t_eval.seconds + d_eval.seconds
    finally:
        t_eval.detach()
        d_eval.detach()
    assert summary is not None
    # host time: decode wall time outside model passes, per target pass. The target's prompt pass is
    # not decode time (summary.prefill_s is its wall time); the draft model's first catch-up on the
    # prompt is, in edgespec's loop as in the user's, and counts as model time.
    host_s = max(summary.decode_s - (model_s - summary.prefill_s), 0.0)
    seq = list(prompt[-1:]) + ids
    follows = sum(oracle(p) == n for p, n in zip(seq, seq[1:])) / max(len(ids), 1)
    return DecodeResult(
        mode=mode, a=a, tokens=summary.tokens, seconds=summary.decode_s, passes=summary.target_passes,
        drafted=summary.drafted, accepted=summary.accepted,
        host_ms=1000 * host_s / max(summary.target_passes, 1), k_hist=dict(summary.k_histogram),
        follows_rule=follows, passes_with_drafts_rejected=sum(1 for a in summary.acceptance_series if a < 1),
    )


def measured_costs(verify_ms: dict[int, float], draft_ms: float) -> CostModel:
    """The controller's cost model holding this check's medians, so that a prediction interpolates
    t_verify(n) the way the controller does when it plans."""
    costs = CostModel()
    for n, ms in verify_ms.items():
        costs.observe_verify(n, ms / 1000)
    costs.observe_draft(1, draft_ms / 1000)
    return costs


def round_seconds(costs: CostModel, host_ms: float) -> Callable[[int], float]:
    """Seconds for a round drafting k tokens: k t_draft + t_verify(k+1) + host."""
    return lambda k: k * costs.draft_step + costs.verify(k + 1) + host_ms / 1000


def predict(costs: CostModel, host_ms: float, a: float, k: int) -> float:
    """Cost-model tokens/s drafting exactly k tokens per pass at per-token acceptance a."""
    expected = sum(a**i for i in range(k + 1))  # E(K) = 1 + a + ... + a^K
    return expected / round_seconds(costs, host_ms)(k)


# -- the check ----------------------------------------------------------------------------------------


class Table:
    def __init__(self):
        self.rows: list[tuple[str, ...]] = []

    def add(self, *cells) -> None:
        self.rows.append(tuple(str(c) for c in cells))
        print("  " + " | ".join(self.rows[-1]), file=sys.stderr, flush=True)  # progress

    def render(self, header: tuple[str, ...]) -> str:
        rows = [header] + self.rows
        widths = [max(len(r[i]) if i < len(r) else 0 for r in rows) for i in range(len(header))]
        line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
        return "\n".join([line(header), line(tuple("-" * w for w in widths))] + [line(r) for r in self.rows])


def gpu_check(plan: CheckPlan, budget_s: float, decode_comparison: bool = True) -> tuple[str, dict]:
    t_start = time.perf_counter()
    deadline = t_start + budget_s
    table = Table()
    report: dict = {"plan": plan.__dict__, "rows": []}
    compute = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[plan.dtype]
    vocab = SHAPES[plan.target]["vocab_size"]
    gen = torch.Generator().manual_seed(0)
    permutation = torch.randperm(vocab, generator=gen).to(plan.device)
    perm_host = permutation.cpu().numpy()
    oracle = lambda token: int(perm_host[token])  # noqa: E731
    prompt = torch.randint(0, vocab, (plan.prompt,), generator=gen).tolist()
    device_name = torch.cuda.get_device_name(0) if plan.device == "cuda" else "cpu"
    report["device"] = device_name

    def row(section, model, setting, measured, predicted="", note=""):
        table.add(section, model, setting, measured, predicted, note)
        report["rows"].append(dict(section=section, model=model, setting=setting, measured=measured,
                                   predicted=predicted, note=note))

    t0 = time.perf_counter()
    draft_model = build_model(plan.draft, plan.device, plan.dtype, seed=2)
    draft = make_backend(draft_model, plan.n_ctx, plan.draft)
    row("build", plan.draft, plan.dtype, f"{time.perf_counter() - t0:.1f} s")
    draft_ms = {}
    draft_ms["none"] = measure_draft(draft, prompt, plan.reps)
    row("draft", plan.draft, plan.dtype, f"{draft_ms['none']:.2f} ms/token")

    target_model = None
    for quant in plan.quants:
        t0 = time.perf_counter()
        if target_model is None:
            target_model = build_model(plan.target, plan.device, plan.dtype, seed=1, permutation=permutation)
        if quant == "4bit":
            quantize_4bit(target_model, compute)
        target = make_backend(target_model, plan.n_ctx, plan.target)
        label = plan.dtype if quant == "none" else f"nf4/{plan.dtype}"
        row("build", plan.target, label, f"{time.perf_counter() - t0:.1f} s")

        verify = measure_verify(target, prompt, plan.verify_ns, plan.reps)
        for n, ms in verify.items():
            row("verify", plan.target, f"{label} n={n}", f"{ms:.2f} ms", "", f"{ms / verify[1]:.2f}x n=1")

        if not decode_comparison:
            continue
        costs = CostModel()  # what the auto policy plans with, calibrated as the engine does
        costs.calibrate(target, draft)
        measured = measured_costs(verify, draft_ms["none"])
        results = []
        modes = [("ar", None)] + [(f"k={k}", a) for a in plan.accept for k in plan.fixed_k] + \
                [("auto", a) for a in plan.accept]
        for mode, a in modes:
            if time.perf_counter() > deadline:
                row("decode", plan.target, f"{label} {mode} a={a}", "skipped", "", "over the time budget")
                continue
            r = run_decode(target, draft, prompt, plan.tokens, mode, a, oracle, costs)
            results.append(r)
            host = r.host_ms
            if mode == "ar":
                pred = predict(measured, host, 0.0, 0)
                note = f"host {host:.2f} ms/pass; follows rule {r.follows_rule:.3f}"
                row("decode", plan.target, f"{label} ar", f"{r.tok_s:.1f} tok/s", f"{pred:.1f}", note)
                ar_rate = r.tok_s
                continue
            if mode == "auto":
                k_star, pred = best_k([a] * AutoK.max_k_model, round_seconds(measured, host))
                note = f"best K*={k_star}; K used {_hist(r.k_hist)}"
            else:
                k = int(mode.split("=")[1])
                pred = predict(measured, host, a, k)
                note = ""
            note = (f"a={a} measured a={r.acceptance:.2f}; host {host:.2f} ms/pass; "
                    f"{r.tok_s / ar_rate:.2f}x ar; " + note).rstrip("; ")
            row("decode", plan.target, f"{label} {mode} a={a}", f"{r.tok_s:.1f} tok/s", f"{pred:.1f}", note)
        if results:
            spec_host = [r.host_ms for r in results if r.mode != "ar"]
            row("host", plan.target, label, f"{results[0].host_ms:.2f} ms/pass ar",
                "", f"{statistics.median(spec_host):.2f} ms/pass drafting (median of {len(spec_host)} runs)"
                if spec_host else "")
        target.close()
        del target

    if "4bit" in plan.quants:
        t0 = time.perf_counter()
        quantize_4bit(draft.model, compute)
        draft.truncate(0)
        ms = measure_draft(draft, prompt, plan.reps)
        row("draft", plan.draft, f"nf4/{plan.dtype}", f"{ms:.2f} ms/token", "", f"quantized in {time.perf_counter() - t0:.1f} s")
    report["seconds"] = time.perf_counter() - t_start
    text = table.render(("what", "model", "setting", "measured", "predicted", "note"))
    head = (f"edgespec gpu_check on {device_name}: target {plan.target}, draft {plan.draft}, prompt {plan.prompt} "
            f"tokens, {plan.tokens} generated per run, greedy; predicted = cost model at nominal a "
            f"(E(K) / (K t_draft + t_verify(K+1) + host)); total {report['seconds']:.0f} s")
    return head + "\n" + text, report


def _hist(h: dict) -> str:
    return ",".join(f"{k}:{v}" for k, v in sorted(h.items()))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU (a smoke test of this script)")
    p.add_argument("--budget-s", type=float, default=420.0, help="stop starting decode runs after this (default 420)")
    p.add_argument("--tokens", type=int, default=0, help="tokens per decode run (default 128, --tiny 48)")
    p.add_argument("--accept", default="0.5,0.7,0.9", help="synthetic acceptance rates")
    p.add_argument("--k", default="2,4,6", help="fixed K values to compare")
    p.add_argument("--quant", default="none,4bit", help="target precisions: none (bf16) and/or 4bit")
    p.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    plan = make_plan(args)
    plan.quants = tuple(q for q in args.quant.split(",") if q)
    text, report = gpu_check(plan, args.budget_s)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
