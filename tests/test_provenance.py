"""What a result file records about the machine and the backend build (edgespec.util.provenance)."""

from __future__ import annotations

import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

from edgespec.util import provenance as p

X86 = """processor\t: 0
model name\t: AMD EPYC 9654
flags\t\t: fpu vme sse sse2 ssse3 fma sse4_1 avx f16c avx2 bmi2 avx512f avx512_vnni amx_tile aes

processor\t: 1
model name\t: AMD EPYC 9654
flags\t\t: fpu vme sse sse2
"""

ARM = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes asimddp sve i8mm bf16 cpuid
"""


def test_the_cpu_model_and_its_vector_extensions_are_recorded(tmp_path):
    (tmp_path / "x86").write_text(X86)
    (tmp_path / "arm").write_text(ARM)
    x86 = p._cpu(tmp_path / "x86")
    assert x86 == {
        "cpu_model": "AMD EPYC 9654",
        "isa": {"vector": "AVX-512", "avx512": ["avx512f", "avx512_vnni"], "amx": ["amx_tile"]},
        "cpu_flags": [
            "sse",
            "sse2",
            "ssse3",
            "fma",
            "sse4_1",
            "avx",
            "f16c",
            "avx2",
            "avx512f",
            "avx512_vnni",
            "amx_tile",
        ],
    }
    arm = p._cpu(tmp_path / "arm")
    assert arm["cpu_flags"] == ["asimd", "asimddp", "sve", "i8mm", "bf16"]
    assert arm["isa"] == {"vector": "SVE", "avx512": [], "amx": []}
    assert p._cpu(tmp_path / "missing") == {}


@pytest.mark.parametrize(
    "flags, label",
    [
        ("sse2 avx f16c avx2 fma", "AVX2"),
        ("avx2 avx512f avx512dq avx512_bf16 avx512_vnni", "AVX-512"),
        ("avx2 avx512f avx512_vnni amx_bf16 amx_tile amx_int8", "AVX-512 + AMX"),
        ("sse2 avx", "AVX"),
        ("asimd asimddp", "NEON"),
        ("sse2", "no AVX or NEON"),
    ],
)
def test_the_instruction_set_is_the_widest_extension_and_amx(flags, label):
    """Subsets spelled with an underscore (avx512_vnni, amx_int8) count, as /proc/cpuinfo spells them."""
    isa = p.instruction_set(flags.split())
    assert p.isa_label(isa) == label
    assert isa["avx512"] == [f for f in flags.split() if f.startswith("avx512")]
    assert isa["amx"] == [f for f in flags.split() if f.startswith("amx")]


@pytest.mark.subprocess
def test_a_measurement_records_the_backend_build():
    record = p.provenance(["edgespec", "bench"])
    assert record["command"] == "edgespec bench"
    backends = record["backends"]
    assert backends["llama-cpp-python"] == metadata.version("llama-cpp-python")
    assert backends["llama.cpp build"].startswith("CPU :")  # llama.cpp's own list of the features it was built with
    assert "cpus" in record["machine"] and "cpu_flags" in record["machine"] and "isa" in record["machine"]


def test_an_input_is_named_by_its_repository_path_or_a_description(tmp_path):
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    python = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    assert p.input_name(p._SOURCE / "edgespec" / "data" / "dev.jsonl") == "edgespec/data/dev.jsonl"
    assert p.input_name(stdlib) == f"{python}'s standard library"
    assert p.input_name(stdlib / "json") == f"json of {python}'s standard library"
    assert p.input_name(tmp_path / "controller200.py") == "controller200.py"
