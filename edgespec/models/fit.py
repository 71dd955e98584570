"""What this machine offers a pair: the device a pair would run on, that device's memory,
and whether the pair fits in it (for `edgespec models`).

The device is what the runtime reports, never a config flag: llama.cpp's `llama_supports_gpu_offload`
(a CUDA build that sees a GPU) and ggml's device list, or torch's `cuda.is_available`. A pair that
asks for GPU layers on a CPU build of llama.cpp runs on the CPU, and is listed so. Once loaded, each
model's own `Placement` (decoding/backend.py) says where it went.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from edgespec.backends import llamacpp_runtime  # read at each call: the runtime's answer, not a copy
from edgespec.backends.hf_loading import resolve_placement
from edgespec.decoding.backend import BackendError
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.models.store import Store
from edgespec.util.hardware import ram_bytes

GB = 1e9  # decimal, as model pages and download tools count


@dataclass(frozen=True)
class Device:
    """Where a pair would run here, and the memory its weights would go to."""

    name: str  # "gpu", "cpu", "gpu+cpu" (some llama.cpp layers offloaded), or "-" (it cannot run here)
    why: str  # what the runtime said: "llama.cpp: all layers", "torch: no CUDA", ...
    memory: int  # bytes: the GPUs' memory on a GPU, RAM on the CPU, both when split, 0 when it cannot run
    memory_name: str  # "GPU", "RAM", "GPU + RAM"


def pair_device(pair: PairConfig) -> Device:
    return _llamacpp_device(pair) if pair.backend == "llamacpp" else _torch_device(pair)


def _llamacpp_device(pair: PairConfig) -> Device:
    if not llamacpp_runtime.gpu_offload():
        return Device("cpu", "llama.cpp: no GPU offload", ram_bytes(), "RAM")
    layers = llamacpp_runtime.gpu_layers(pair.n_gpu_layers)
    if layers == 0:
        return Device("cpu", "n_gpu_layers = 0", ram_bytes(), "RAM")
    if layers < 0:
        return Device("gpu", "llama.cpp: all layers", llamacpp_runtime.gpu_memory(), "GPU")
    memory = llamacpp_runtime.gpu_memory() + ram_bytes()
    return Device("gpu+cpu", f"llama.cpp: {layers} layers", memory, "GPU + RAM")


def _torch_device(pair: PairConfig) -> Device:
    try:
        import torch  # the optional hf extra
    except ImportError:
        return Device("-", "needs the hf extra", 0, "")
    try:
        _, on_cuda = resolve_placement(pair.device_map)
    except BackendError:
        return Device("-", f"device_map {pair.device_map} needs CUDA", 0, "")
    if not on_cuda:
        return Device("cpu", "torch: no CUDA", ram_bytes(), "RAM")
    memory = sum(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count()))
    return Device("gpu", "torch: CUDA", memory, "GPU")


# -- the memory-fit rule --------------------------------------------------------------------------

# Besides its weights a pair needs its KV caches and compute buffers, which grow with the context: at
# 8192 tokens in f16 the 14B Qwen's KV cache takes 1.6 GB (48 layers x 8 KV heads x 128 x 2 x 2 bytes
# a token) for 9.0 GB of Q4_K_M weights, the 7B's 0.5 GB for 4.7 GB, Llama-3.1-8B's 1.1 GB for 5.7 GB
# in 4-bit. 20% of the weights covers them; the runtime itself (a CUDA context) takes about 0.5 GB.
CACHE_SHARE = 0.2
RUNTIME_BYTES = int(0.5 * GB)


def memory_needed(weights: Sequence[int]) -> int:
    """Bytes a pair needs: its models' weights, 20% more for caches and buffers, and the runtime."""
    return int(sum(weights) * (1 + CACHE_SHARE)) + RUNTIME_BYTES


def weights_bytes(model: ModelSpec, backend: str, store: Store) -> int | None:
    """Bytes a model's weights take once loaded, None when unknown.

    The registry's `weights_gb` when it gives one; else a GGUF on llama.cpp takes its file's size
    (exact `size`, else the file in the store). A GGUF on transformers is dequantized on load and
    a quantized transformers model shrinks, so neither is its file's size.
    """
    if model.weights_gb is not None:
        return int(model.weights_gb * GB)
    if model.format != "gguf" or backend != "llamacpp":
        return None
    if model.size is not None:
        return model.size
    state = store.state(model)
    return state.size_on_disk if state.present else None


@dataclass(frozen=True)
class Fit:
    fits: bool | None  # None: some model's weights are unknown
    needed: int  # bytes (0 when unknown)
    text: str  # for the listing: "yes: 11.9 of 25.3 GB RAM"


def pair_fit(pair: PairConfig, device: Device, store: Store) -> Fit:
    """Whether the pair fits the memory of the device it would run on (GPU memory, else RAM)."""
    models = [pair.target] + ([pair.draft] if pair.draft is not None else [])
    weights = [weights_bytes(m, pair.backend, store) for m in models]
    if device.memory == 0:
        return Fit(None, 0, "-")
    if None in weights:
        return Fit(None, 0, "? (weights unknown)")
    needed = memory_needed([w for w in weights if w is not None])
    have = f"{device.memory / GB:.1f} GB {device.memory_name}"
    if needed <= device.memory:
        return Fit(True, needed, f"yes: {needed / GB:.1f} of {have}")
    return Fit(False, needed, f"no: {needed / GB:.1f} GB > {have}")
