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
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from edgespec.backends import llamacpp, llamacpp_runtime  # noqa: E402  (llama_cpp itself is imported on first use)
from edgespec.backends.hf import HFBackend  # noqa: E402
from edgespec.backends.hf_loading import cpu_has_bf16  # noqa: E402
from edgespec.bench.hf_assisted import assisted_generate  # noqa: E402
from edgespec.decoding.decoder import SpeculativeDecoder  # noqa: E402
from edgespec.decoding.events import Summary, Token  # noqa: E402
from edgespec.decoding.model_drafter import ModelDrafter  # noqa: E402
from edgespec.decoding.policy.controller import AutoK  # noqa: E402
from edgespec.decoding.policy.costs import CostModel, best_k  # noqa: E402
from edgespec.decoding.policy.simple_policies import FixedK  # noqa: E402
from edgespec.decoding.sampling import SamplingParams  # noqa: E402
from edgespec.testing.rule_models import SHAPES, agreeing_permutation, build_model, export_gguf, set_rule  # noqa: E402
from edgespec.testing.tiny_hf import bytelevel_tokenizer  # noqa: E402

LLAMA_CPP = next(
    line.split('"')[1] for line in (ROOT / "pyproject.toml").read_text().splitlines() if '"llama-cpp-python==' in line
)


@dataclass
class CheckPlan:
    """What this run measures: which shapes, where, how many tokens and repetitions."""

    target: str
    draft: str
    device: str
    dtype: str  # the transformers models' dtype (and the 4-bit target's compute dtype)
    prompt: int  # prompt tokens before each measurement and decode
    tokens: int  # tokens generated per decode run
    reps: int
    accept: tuple[float, ...]
    fixed_k: tuple[int, ...]
    quants: tuple[str, ...]  # transformers target precisions: "none" (dtype) and/or "4bit" (nf4)
    llama_quant: str | None  # llama.cpp file type of both models; None leaves llama.cpp out
    llama_threads: int | None = None  # None: llama.cpp's default (physical cores)
    verify_ns: tuple[int, ...] = tuple(range(1, 17))
    n_ctx: int = 2048


def make_plan(args) -> CheckPlan:
    accept = tuple(float(a) for a in args.accept.split(","))
    llama_quant = None if args.llama_quant == "none" else args.llama_quant
    if args.tiny:
        # One thread: on a small shared CPU, OpenMP workers that spin while another process holds
        # the other core turn a 10 ms pass into 250 ms at random; one thread keeps timings stable.
        torch.set_num_threads(1)
        quants = ("none", "4bit") if bnb_runs_on("cpu") else ("none",)
        return CheckPlan(
            "tiny-target",
            "tiny-draft",
            "cpu",
            "bf16" if cpu_has_bf16() else "fp32",
            prompt=32,
            tokens=args.tokens or 24,
            reps=1,
            accept=accept,
            fixed_k=(2,),
            quants=quants,
            llama_quant=llama_quant,
            llama_threads=1,
        )
    if not torch.cuda.is_available():
        sys.exit("gpu_check: real shapes need a CUDA GPU (torch sees none); --tiny runs it on tiny shapes")
    return CheckPlan(
        "llama-3.1-8b",
        "llama-3.2-1b",
        "cuda",
        "bf16",
        prompt=256,
        tokens=args.tokens or 128,
        reps=5,
        accept=accept,
        fixed_k=(2, 4, 6),
        quants=("none", "4bit"),
        llama_quant=llama_quant,
    )


def bnb_runs_on(device: str) -> bool:
    try:
        import bitsandbytes as bnb
    except ImportError:
        return False
    return device == "cuda" or device in getattr(bnb, "supported_torch_devices", ())


# -- measurements ---------------------------------------------------------------------------------------


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

        def one(tokens=tokens, n=n):
            backend.eval(tokens, n)
            backend.truncate(base)

        out[n] = median_ms(one, reps)
    return out


class TimedEval:
    """Wraps a backend's passes (eval, and eval_tree for verification) to add up their seconds."""

    PASSES = ("eval", "eval_tree")

    def __init__(self, backend):
        self.backend, self.seconds = backend, 0.0
        for name in self.PASSES:
            setattr(backend, name, self._timed(getattr(backend, name)))

    def _timed(self, call):
        def timed(*args):
            t0 = time.perf_counter()
            try:
                return call(*args)
            finally:
                self.seconds += time.perf_counter() - t0

        return timed

    def detach(self):
        for name in self.PASSES:
            delattr(self.backend, name)


@dataclass
class DecodeResult:
    mode: str
    tokens: int
    seconds: float
    passes: int
    drafted: int
    accepted: int
    rejecting_passes: int  # passes that ended at a rejected draft token
    host_ms: float  # wall time per target pass outside model passes
    k_hist: dict = field(default_factory=dict)
    follows_rule: float = 1.0  # fraction of emitted tokens equal to the target's rule

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def acceptance(self) -> float:
        """Per-token acceptance: accepted / (accepted + passes that ended in a rejection)."""
        tried = self.accepted + self.rejecting_passes
        return self.accepted / tried if tried else float("nan")

    @property
    def k_used(self) -> int:
        """The K the policy chose most often."""
        return max(self.k_hist, key=self.k_hist.get) if self.k_hist else 0


def run_decode(target, draft, prompt, n_tokens, mode: str, oracle, costs) -> DecodeResult:
    """One greedy generation through edgespec's decoder. mode: "ar", "k=<K>" or "auto"."""
    if mode == "ar":
        policy, drafters = FixedK(0, "model"), []
    else:
        policy = AutoK("model", costs) if mode == "auto" else FixedK(int(mode.split("=")[1]), "model")
        drafters = [ModelDrafter(draft)]
        draft.truncate(0)
    target.truncate(0)
    timed = [TimedEval(b) for b in (target, draft) if b is not None]
    try:
        ids, summary = [], None
        for event in SpeculativeDecoder(target, policy, drafters).generate(prompt, n_tokens, SamplingParams()):
            if isinstance(event, Token):
                ids.append(event.id)
            elif isinstance(event, Summary):
                summary = event
        model_s = sum(t.seconds for t in timed)
    finally:
        for t in timed:
            t.detach()
    # host time: decode wall time outside model passes. The target's prompt pass is not decode time
    # (summary.target_read_s); the draft model's reading during decoding is, as in the user's loop.
    host_s = max(summary.decode_s - (model_s - summary.target_read_s), 0.0)
    seq = list(prompt[-1:]) + ids
    follows = sum(oracle(p) == n for p, n in pairwise(seq)) / max(len(ids), 1)
    return DecodeResult(
        mode=mode,
        tokens=summary.tokens,
        seconds=summary.decode_s,
        passes=summary.target_passes,
        drafted=summary.drafted,
        accepted=summary.accepted,
        rejecting_passes=sum(1 for a in summary.acceptance_series if a < 1),
        host_ms=1000 * host_s / max(summary.target_passes, 1),
        k_hist=dict(summary.k_histogram),
        follows_rule=follows,
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


# -- one backend ------------------------------------------------------------------------------------------


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
        k_star, predicted = best_k([a] * AutoK.max_k_model, round_seconds(measured, auto.host_ms))
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


def llama_files(plan: CheckPlan, target_model, draft_model, rules: dict, work: Path) -> tuple[Path, dict[float, Path]]:
    """The target and one draft per acceptance rate as GGUFs of `plan.llama_quant`."""

    def quantized(f16: Path) -> Path:
        out = llamacpp_runtime.quantize(
            f16, f16.with_name(f16.name.replace("-f16", f"-{plan.llama_quant}")), plan.llama_quant
        )
        f16.unlink()
        return out

    target = quantized(export_gguf(target_model, plan.target, work / "target-f16.gguf"))
    drafts = {}
    for a, rule in rules.items():
        set_rule(draft_model, rule)
        drafts[a] = quantized(export_gguf(draft_model, plan.draft, work / f"draft-{a}-f16.gguf"))
    return target, drafts


def scratch_dir(*models) -> str | None:
    """Where the GGUFs are written: /dev/shm (memory) when it has room for the f16 files, else the
    default temporary folder (a container's /dev/shm is often 64 MB)."""
    needed = 2 * sum(m.num_parameters() for m in models) * 1.5  # f16 files, one quantized copy at a time
    try:
        return "/dev/shm" if shutil.disk_usage("/dev/shm").free > needed else None
    except OSError:
        return None


def llama_left_out(plan: CheckPlan) -> str | None:
    """Why the llama.cpp part cannot run here, or None."""
    if plan.llama_quant is None:
        return "--llama-quant none"
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama-cpp-python is not installed"
    if plan.device == "cuda" and not llamacpp_runtime.gpu_offload():
        return "this llama-cpp-python does not offload to the GPU (a CPU build): --build-llama-cuda ARCH builds one"
    return None


# -- the check ----------------------------------------------------------------------------------------------


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


# -- the report ---------------------------------------------------------------------------------------------


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    rows = [header] + rows
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(rows[0]), line(tuple("-" * w for w in widths))] + [line(r) for r in rows[1:]])


def render(plan: CheckPlan, report: dict) -> str:
    sides = report["sides"]
    head = (
        f"edgespec gpu_check on {report['device']}: target {plan.target}, draft {plan.draft} (random weights, "
        f"rule-following), prompt {plan.prompt} tokens, {plan.tokens} generated per run, greedy; "
        f"total {report['seconds']:.0f} s"
    )
    setup = "setup: " + "; ".join(f"{what} {s:.0f} s" for what, s in report["setup"].items())
    if "llama.cpp left out" in report:
        setup += f"\nllama.cpp left out: {report['llama.cpp left out']}"
    verify = table(
        ("verify ms, n =",) + tuple(str(n) for n in plan.verify_ns),
        [(label,) + tuple(f"{s['verify_ms'][n]:.1f}" for n in plan.verify_ns) for label, s in sides.items()],
    )
    plain = "\n".join(
        f"{label}: draft step {s['draft_ms']:.2f} ms; ar {s['ar'].tok_s:.1f} tok/s, host {s['ar'].host_ms:.2f} "
        f"ms/pass, follows the target's rule {s['ar'].follows_rule:.3f}"
        + (f"; runs on {s['placement']}" if "placement" in s else "")
        for label, s in sides.items()
    )
    rows = []
    for label, s in sides.items():
        ar = s["ar"].tok_s
        for a, r in s["accept"].items():
            if r is None:
                rows.append((label, f"{a:g}", "skipped: over the time budget") + ("",) * 6)
                continue
            fixed = ", ".join(f"k={k} {f.tok_s:.1f} ({f.tok_s / ar:.2f}x)" for k, f in r["fixed"].items())
            auto = r["auto"]
            hist = ",".join(f"{k}:{n}" for k, n in sorted(auto.k_hist.items()))
            assisted = r["assisted"]
            rows.append(
                (
                    label,
                    f"{a:g}",
                    f"{r['measured_a']:.2f}",
                    fixed,
                    f"{auto.tok_s:.1f}",
                    f"{auto.k_used} ({hist}); K* {r['k_star']}",
                    f"{r['predicted_speedup']:.2f}x",
                    f"{r['measured_speedup']:.2f}x",
                    f"{assisted['tok_s']:.1f} ({assisted['speedup']:.2f}x)" if assisted else "-",
                )
            )
    decode = table(
        (
            "backend",
            "a",
            "measured a",
            "fixed K tok/s",
            "auto tok/s",
            "auto K used (passes); best K*",
            "auto predicted",
            "auto measured",
            "hf-assisted tok/s",
        ),
        rows,
    )
    return "\n\n".join([head, setup, verify, plain, decode])


def build_llama_cuda(arch: str, source: str) -> tuple[Path, float]:
    """pip-install llama-cpp-python built with CUDA for one architecture into build/llama-cuda-ARCH.
    Returns the folder (to put first on sys.path) and the seconds it took."""
    dest = ROOT / "build" / f"llama-cuda-{arch}"
    env = {
        **os.environ,
        "CMAKE_ARGS": f"-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES={arch}",
        "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1),
    }
    t0 = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-cache-dir",
            "--upgrade",
            "--target",
            str(dest),
            source,
        ],
        env=env,
    )
    if done.returncode != 0:
        sys.exit(
            f"gpu_check: building {source} with CUDA for sm_{arch} failed (pip exit {done.returncode}; its "
            "output is above)"
        )
    return dest, time.perf_counter() - t0


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
        args.json.write_text(json.dumps(report, indent=1, default=_json_default))
    return 0


def _json_default(value):
    if isinstance(value, DecodeResult):
        return {**asdict(value), "tok_s": value.tok_s, "acceptance": value.acceptance, "k_used": value.k_used}
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
