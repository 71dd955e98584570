"""Where a measurement came from: the command, the code and the machine, kept beside the figures.

A benchmark's JSON is the record the pages' tables are rendered from (benchmarks/render.py), so it
says what made it: the command line, the commit (and whether the tree had uncommitted changes) of the
edgespec that ran, the machine (its platform, processor, cores and the CPU's vector extensions, which
decide which kernels llama.cpp runs, summed up as its instruction set: AVX2 or AVX-512, AMX) and the
backend builds (llama.cpp's own report of the features it was built with, and the runtime packages'
versions).
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import subprocess
import sys
import sysconfig
import time
from importlib import metadata
from pathlib import Path

from edgespec import __version__

_SOURCE = Path(__file__).resolve().parents[2]  # a checkout's root, when edgespec runs from one


def provenance(argv: list[str] | None = None) -> dict:
    """The command (`argv`, default this process's), commit, machine and time of a measurement."""
    return {
        "command": shlex.join(sys.argv if argv is None else argv),
        **_code(),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            **_cpu(),
        },
        "backends": _backends(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }


# The CPU flags that name vector and matrix extensions (x86 SSE/AVX/AMX, FMA, F16C; Arm NEON/SVE and
# its dot-product and matrix-multiply ones): what llama.cpp's CPU kernels are chosen by.
_VECTOR_FLAG = re.compile(r"(sse|ssse|avx|amx|fma|f16c|asimd|neon|sve|i8mm|dotprod|bf16|fp16)")


def _cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """The CPU's model name and vector extensions, where the system lists them (Linux)."""
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    flags = [f for f in (fields.get("flags") or fields.get("Features") or "").split() if _VECTOR_FLAG.match(f)]
    return {
        "cpu_model": fields.get("model name", fields.get("Model", "")),
        "cpu_flags": flags,
        "isa": instruction_set(flags),
    }


# The vector extensions from the widest down, each with the flag that names it.
_WIDEST = (
    ("AVX-512", "avx512f"),
    ("AVX2", "avx2"),
    ("AVX", "avx"),
    ("SVE", "sve"),
    ("NEON", "asimd"),
    ("NEON", "neon"),
)


def instruction_set(flags: list[str]) -> dict:
    """What the CPU's flags (as /proc/cpuinfo spells them, e.g. `avx512_vnni`, `amx_tile`) say about
    the kernels llama.cpp can run there: the widest vector extension, every AVX-512 subset and every
    AMX extension. Two hosts sold under one model name can differ widely in speed by these."""
    avx512 = [f for f in flags if f.startswith("avx512")]
    amx = [f for f in flags if f.startswith("amx")]
    widest = next((name for name, flag in _WIDEST if flag in flags), "no AVX or NEON")
    return {"vector": widest, "avx512": avx512, "amx": amx}


def isa_label(isa: dict) -> str:
    """An instruction set (`instruction_set`) as a page names it: "AVX-512 + AMX", "AVX2"."""
    return isa["vector"] + (" + AMX" if isa.get("amx") else "")


def _backends() -> dict:
    """The runtime packages installed, and the features llama.cpp says its build uses."""
    found = {}
    for package in ("llama-cpp-python", "torch", "transformers"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    if "llama-cpp-python" in found:
        try:
            import llama_cpp  # loads llama.cpp's libraries: only when a result file is written

            found["llama.cpp build"] = llama_cpp.llama_print_system_info().decode().strip(" |")
        except Exception:  # a broken install is recorded as such, not raised: the figures are already measured
            found["llama.cpp build"] = "unavailable"
    return found


def _code() -> dict:
    """The commit of the checkout edgespec runs from, or its version when it is not one."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(_SOURCE), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"version": __version__}
    return {
        "version": __version__,
        "commit": commit,
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def input_name(path: str | Path) -> str:
    """How a record names a measurement's input (a file or folder it read): its path in the checkout
    edgespec runs from, or in Python's standard library, or else its file name. Never an absolute
    path, which says only where one machine kept a file, and a temporary one not even that."""
    path = Path(path).resolve()
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    python = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    if (_SOURCE / ".git").exists() and path.is_relative_to(_SOURCE):
        return path.relative_to(_SOURCE).as_posix()
    if path == stdlib:
        return f"{python}'s standard library"
    if path.is_relative_to(stdlib):
        return f"{path.relative_to(stdlib).as_posix()} of {python}'s standard library"
    return path.name
