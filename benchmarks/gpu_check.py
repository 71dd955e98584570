#!/usr/bin/env python3
"""GPU check: what a user would see on a CUDA GPU, measured with random weights of real shapes.

For a CUDA machine that reaches no network and receives no weights. It builds random-weight Llama
models of real shapes on the GPU (Llama-3.1-8B target, Llama-3.2-1B draft) whose greedy tokens
follow known rules, so each token the draft proposes is accepted with a chosen probability a
(edgespec/testing/rule_models.py), and measures, per backend: transformers in bf16, transformers
with the target in 4-bit (bitsandbytes nf4, as the registry's 4-bit pairs), and llama.cpp with both
models in Q4_K_M on a CUDA build of llama-cpp-python:

  verify     ms per target pass of n tokens, every n from 1 to 16 (the cost model's t_verify(n))
  draft      ms per draft-model token
  ar         plain decoding, tokens/s; the host time per pass; whether it follows the target's rule
  decode     at a = 0.5 / 0.7 / 0.9: fixed K, and the cost-aware controller (auto): the K it chose,
             its predicted speedup over ar (the cost model at the nominal a: E(K) / (K t_draft +
             t_verify(K+1) + host), over the same model's ar) and the measured one; and, on
             transformers, its own assisted generation (hf-assisted) with the same two models

    python benchmarks/gpu_check.py                          # CUDA, real shapes: about 5 minutes
    python benchmarks/gpu_check.py --build-llama-cuda 90    # first build llama-cpp-python for sm_90, timed
    python benchmarks/gpu_check.py --tiny                   # tiny shapes on the CPU in a minute
    make gpu-check CUDA_ARCH=90 [LLAMA_SOURCE=llama_cpp_python-0.3.36.tar.gz]

The llama.cpp part runs where llama-cpp-python offloads to a GPU; elsewhere the report says why it
was left out. `--build-llama-cuda ARCH` builds the pinned llama-cpp-python with CUDA for that one
architecture into build/llama-cuda-ARCH and uses it. It needs nvcc, and the package index; with none,
point `--llama-source` at a downloaded sdist and set PIP_NO_INDEX=1 PIP_FIND_LINKS=<a folder with
scikit-build-core's wheels>, pip's own settings, which the build passes on. `--budget-s` stops
starting decode runs after that many seconds (the report says what was skipped) so that the whole
check ends in time; `--tiny` runs every part on tiny shapes with one thread, which is how the tests
run this script.

Its parts sit beside it: what a run measures (gpu_check_plan.py), the timed passes and decode runs
(gpu_check_runs.py), one backend measured end to end (gpu_check_sides.py), the llama.cpp files and
build (gpu_check_llama.py) and the report's text and JSON (gpu_check_report.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from gpu_check_llama import LLAMA_CPP, build_llama_cuda, llama_files, llama_left_out, scratch_dir  # noqa: E402
from gpu_check_plan import CheckPlan, make_plan  # noqa: E402
from gpu_check_report import json_default, render  # noqa: E402
from gpu_check_sides import Side, hf_backend, measure_llama, measure_side, quantize_4bit  # noqa: E402

from edgespec.backends.hf import HFBackend  # noqa: E402
from edgespec.testing.rule_models import SHAPES, agreeing_permutation, build_model, set_rule  # noqa: E402


def gpu_check(plan: CheckPlan, budget_s: float, setup: dict | None = None) -> tuple[str, dict]:
    t_start = time.perf_counter()
    deadline = t_start + budget_s
    report: dict = {"plan": asdict(plan), "setup": dict(setup or {}), "sides": {}}
    report["device"] = torch.cuda.get_device_name(0) if plan.device == "cuda" else "cpu"
    vocab = SHAPES[plan.target]["vocab_size"]
    gen = torch.Generator().manual_seed(0)
    permutation = torch.randperm(vocab, generator=gen)
    rules = {a: agreeing_permutation(permutation, a, seed=round(100 * a)) for a in plan.accept}
    perm_host = permutation.numpy()
    oracle = lambda token: int(perm_host[token])  # noqa: E731
    prompt = torch.randint(0, vocab, (plan.prompt,), generator=gen).tolist()

    def progress(line: str) -> None:
        print(f"  {time.perf_counter() - t_start:5.0f} s  {line}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    target_model = build_model(plan.target, plan.device, plan.dtype, seed=1, permutation=permutation.to(plan.device))
    draft_model = build_model(plan.draft, plan.device, plan.dtype, seed=2, permutation=permutation.to(plan.device))
    report["setup"]["transformers models built"] = time.perf_counter() - t0
    progress("models built")

    why_not = llama_left_out(plan)
    if why_not is None:
        with tempfile.TemporaryDirectory(prefix="gpu-check-", dir=scratch_dir(target_model, draft_model)) as tmp:
            t0 = time.perf_counter()
            target_gguf, draft_ggufs = llama_files(plan, target_model, draft_model, rules, Path(tmp))
            report["setup"][f"GGUFs written and quantized to {plan.llama_quant}"] = time.perf_counter() - t0
            progress("GGUFs written")
            report["sides"][f"llama.cpp {plan.llama_quant}"] = measure_llama(
                plan, target_gguf, draft_ggufs, prompt, oracle, deadline
            )
        progress("llama.cpp measured")
    else:
        report["llama.cpp left out"] = why_not

    compute = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[plan.dtype]
    draft = hf_backend(draft_model, plan.n_ctx, plan.draft)

    def hf_draft_for(a: float) -> HFBackend:
        set_rule(draft_model, rules[a])
        draft.truncate(0)
        return draft

    for quant in plan.quants:
        if quant == "4bit":
            t0 = time.perf_counter()
            quantize_4bit(target_model, compute)
            report["setup"]["target quantized to nf4"] = time.perf_counter() - t0
        label = f"transformers {plan.dtype}" if quant == "none" else f"transformers nf4/{plan.dtype}"
        target = hf_backend(target_model, plan.n_ctx, plan.target)
        report["sides"][label] = measure_side(
            Side(label, target, hf_draft_for, assisted=True), plan, prompt, oracle, deadline
        )
        progress(f"{label} measured")
    report["seconds"] = time.perf_counter() - t_start
    return render(plan, report), report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU: every part, in a minute")
    p.add_argument(
        "--build-llama-cuda",
        metavar="ARCH",
        help="first build llama-cpp-python with CUDA for this "
        "architecture (e.g. 90 for H100/H200, 89 for RTX 40xx, 86 for RTX 30xx)",
    )
    p.add_argument(
        "--llama-source",
        default=LLAMA_CPP,
        help=f"what that build installs (default {LLAMA_CPP}; "
        "a path to a downloaded sdist where there is no package index)",
    )
    p.add_argument(
        "--llama-quant", default="Q4_K_M", help="llama.cpp file type of both models; none leaves llama.cpp out"
    )
    p.add_argument("--budget-s", type=float, default=420.0, help="stop starting decode runs after this (default 420)")
    p.add_argument("--tokens", type=int, default=0, help="tokens per decode run (default 128, --tiny 24)")
    p.add_argument("--accept", default="0.5,0.7,0.9", help="acceptance rates the draft is built for")
    p.add_argument("--json", type=Path, help="also write the report as JSON here")
    args = p.parse_args(argv)
    setup = {}
    if args.build_llama_cuda:
        folder, seconds = build_llama_cuda(args.build_llama_cuda, args.llama_source)
        sys.path.insert(0, str(folder))  # before anything imports llama_cpp
        setup[f"llama-cpp-python CUDA build for sm_{args.build_llama_cuda}"] = seconds
    plan = make_plan(args)
    text, report = gpu_check(plan, args.budget_s, setup)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=json_default))
    return 0


if __name__ == "__main__":
    sys.exit(main())
