"""The llama.cpp part of the GPU check (benchmarks/gpu_check.py): the models written as GGUFs and
quantized, why the part cannot run on this machine, and a CUDA build of llama-cpp-python."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from gpu_check_plan import CheckPlan

from edgespec.backends import llamacpp_runtime
from edgespec.testing.rule_models import export_gguf, set_rule

ROOT = Path(__file__).resolve().parents[1]
LLAMA_CPP = next(
    line.split('"')[1] for line in (ROOT / "pyproject.toml").read_text().splitlines() if '"llama-cpp-python==' in line
)


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
