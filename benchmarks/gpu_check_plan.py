"""What a GPU check measures (benchmarks/gpu_check.py): the shapes, the device, the tokens and the
repetitions, real shapes on a CUDA GPU or tiny ones on the CPU (`--tiny`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from edgespec.backends.hf_loading import cpu_has_bf16


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
