"""llama.cpp's process-wide side, shared by every loaded model: its log (kept: errors, the tensors it
repacked, the device of each layer), the callbacks through which Ctrl-C stops a load or a decode, the
devices it can run on, and its quantizer. `llamacpp.LlamaCppBackend` is one model on top of it.

llama_cpp is imported where used: importing it loads llama.cpp's shared libraries (about 0.1 s),
which listing pairs or checking flags does not need."""

from __future__ import annotations

import ctypes
import functools
import re
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from edgespec.decoding.backend import BackendError, Placement
from edgespec.util import interrupts
from edgespec.util.hardware import physical_cores

_LOG_ERROR = 4  # GGML_LOG_LEVEL_ERROR in ggml.h (DEBUG 1, INFO 2, WARN 3, CONT 5)
error_lines: list[str] = []  # what llama.cpp logged as errors since the current operation began
_REPACK = re.compile(r"repack tensor (\S+) with (\S+)")
repacked: list[str] = []  # the kernel layout of each tensor llama.cpp repacked during the current load
# llama.cpp's load reports, at debug level, the device of each of the model's n_layer + 1 layer slots
# (the last is the output layer): "load_tensors: layer  12 assigned to device CUDA0, is_swa = 0".
_LAYER_DEVICE = re.compile(r"layer\s+\d+ assigned to device (\S+?),")
layer_devices: list[str] = []  # the devices reported since the current load began
_CPU_DEVICE = "CPU"  # the name ggml gives its CPU device
_GPU_TYPES = (1, 2)  # enum ggml_backend_dev_type: CPU 0, GPU 1, IGPU 2 (an integrated GPU), ACCEL 3


@interrupts.c_callback(stopped=None)
def _on_log(level: int, text: bytes, user_data) -> None:
    """llama.cpp logs every load to stderr; edgespec's stderr is for its own stats and errors, so
    its log is swallowed. Kept: error lines, to explain a failure (warnings are not errors: a model
    that loads fine may warn about its vocabulary); where each layer went, which is how llama.cpp
    tells where the model runs; and which tensors it repacked (the layout `bench` and `models tune`
    show)."""
    if level == _LOG_ERROR:
        error_lines.append(text.decode("utf-8", "replace").strip())
    elif b"repack tensor" in text and (match := _REPACK.search(text.decode("utf-8", "replace"))):
        repacked.append(match.group(2))
    elif match := _LAYER_DEVICE.search(text.decode("utf-8", "replace")):
        layer_devices.append(match.group(1))


@interrupts.c_callback(stopped=False)
def _on_load_progress(progress: float, user_data) -> bool:
    """llama.cpp aborts a model load when this returns False: it does once Ctrl-C is pressed."""
    return not interrupts.requested()


@interrupts.c_callback(stopped=True)
def _on_compute(data) -> bool:
    """llama.cpp's CPU backend aborts a decode when this returns True (between graph nodes)."""
    return interrupts.requested()


@functools.cache
def callbacks(lc) -> SimpleNamespace:
    """The ctypes callback objects, made once and kept (llama.cpp holds bare pointers to them);
    the log one is installed for the process."""
    calls = SimpleNamespace(
        log=lc.llama_log_callback(_on_log),
        progress=lc.llama_progress_callback(_on_load_progress),
        abort=lc.ggml_abort_callback(_on_compute),
        no_abort=lc.ggml_abort_callback(),  # NULL
    )
    lc.llama_log_set(calls.log, ctypes.c_void_p(0))
    return calls


def failure(message: str) -> str:
    """`message`, with the first error llama.cpp logged since `error_lines` was cleared (the cause;
    the lines after it only say that the operation failed), without the C function's name."""
    return f"{message}: {re.sub(r'^[A-Za-z_][A-Za-z0-9_:]*: ', '', error_lines[0])}" if error_lines else message


def default_threads() -> int:
    """Physical cores: llama.cpp decoding is compute-bound, hyper-threads only contend."""
    return physical_cores()


def gpu_offload() -> bool:
    """True when this llama.cpp build can put layers on a GPU and sees one (a CUDA build on a
    machine with a CUDA GPU): `llama_supports_gpu_offload`, llama.cpp's own answer."""
    import llama_cpp as lc  # llama.cpp's libraries (module docstring)

    return bool(lc.llama_supports_gpu_offload())


def gpu_layers(requested: int | None) -> int:
    """n_gpu_layers for a load: what the pair asks for, else every layer (-1) where llama.cpp can
    offload and none (0) where it cannot."""
    if requested is not None:
        return requested
    return -1 if gpu_offload() else 0


def gpu_memory() -> int:
    """Total bytes of the GPUs llama.cpp sees (0 for none), as ggml's device list reports them."""
    ggml = _ggml_devices()
    total = 0
    for i in range(ggml.ggml_backend_dev_count()):
        device = ggml.ggml_backend_dev_get(i)
        if ggml.ggml_backend_dev_type(device) in _GPU_TYPES:
            free, size = ctypes.c_size_t(), ctypes.c_size_t()
            ggml.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(size))
            total += size.value
    return total


@functools.cache
def _ggml_devices():
    """ggml's library with its device-list calls declared: llama-cpp-python binds only llama.h, and
    loads ggml as `llama_cpp._ggml.libggml` (in the pinned 0.3.36)."""
    from llama_cpp._ggml import libggml as ggml  # llama.cpp's libraries (module docstring)

    ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_dev_get.argtypes, ggml.ggml_backend_dev_get.restype = [ctypes.c_size_t], ctypes.c_void_p
    ggml.ggml_backend_dev_type.argtypes, ggml.ggml_backend_dev_type.restype = [ctypes.c_void_p], ctypes.c_int
    ggml.ggml_backend_dev_memory.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    return ggml


def placement_of(layer_devices: Sequence[str], threads: int) -> Placement:
    """Where a model runs, from the device llama.cpp reported for each layer slot at load."""
    on_gpu = [d for d in layer_devices if d != _CPU_DEVICE]
    if not layer_devices:
        return Placement("unknown", "llama.cpp did not report its layers' devices", threads)
    if not on_gpu:
        return Placement("cpu", f"{threads} thread{'s' if threads > 1 else ''}", threads)
    layers = f"{len(on_gpu)}/{len(layer_devices)} layers on {','.join(dict.fromkeys(on_gpu))}"
    if len(on_gpu) == len(layer_devices):
        return Placement("gpu", layers, 0)
    return Placement("gpu+cpu", f"{layers}, the rest on {threads} CPU threads", threads)


def quantize(source: Path, dest: Path, ftype: str, threads: int | None = None) -> Path:
    """Write `source` (an f32/f16 GGUF) quantized to llama.cpp's file type `ftype` ("Q4_K_M", "Q8_0",
    ...; tensors whose rows do not fit its blocks get llama.cpp's fallback type) to `dest`."""
    import llama_cpp as lc  # llama.cpp's libraries (module docstring)

    try:
        file_type = getattr(lc, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    except AttributeError:
        raise BackendError(f"llama.cpp has no file type {ftype!r} (e.g. Q4_K_M, Q4_0, Q8_0)") from None
    params = lc.llama_model_quantize_default_params()
    params.ftype = file_type
    params.nthread = threads or default_threads()
    run_quantizer(source, dest, params, f"llama.cpp could not quantize {source} to {ftype}")
    return dest


def run_quantizer(source: Path, dest: Path, params, message: str) -> None:
    """llama.cpp's quantizer with `params` (its llama_model_quantize_params), its log routed to
    edgespec's handler (it logs every tensor; edgespec's stderr stays quiet). BackendError
    `message`, with the cause llama.cpp logged, when it fails. A signal that came while it ran (its
    log callback recorded it) is raised once it returns: llama.cpp's quantizer cannot be stopped
    part way."""
    import llama_cpp as lc  # llama.cpp's libraries (module docstring)

    callbacks(lc)
    error_lines.clear()
    rc = lc.llama_model_quantize(str(source).encode(), str(dest).encode(), ctypes.byref(params))
    interrupts.raise_pending()
    if rc != 0:
        raise BackendError(failure(message))
