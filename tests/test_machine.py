"""Where models run and whether pairs fit: what llama.cpp and torch report on this machine (no GPU
claimed on a CPU), the device a pair would run on, and the memory-fit rule of `edgespec models`.

The GPU cases are marked `cuda` and skip here with the reason; on a CUDA machine they run.
"""

from __future__ import annotations

import pytest
import torch

from edgespec.backends import hf, llamacpp_runtime
from edgespec.backends.hf_loading import load_hf_backend
from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.backends.llamacpp_runtime import gpu_layers, gpu_memory, gpu_offload, placement_of
from edgespec.decoding.backend import Placement
from edgespec.engine.engine import Engine
from edgespec.models import fit as machine
from edgespec.models.config import load_registry
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.models.store import Store
from edgespec.testing.tiny_hf import build_tiny_hf
from tests.fakes import fake_engine

LLAMA_GPU = gpu_offload()
NO_LLAMA_GPU = "llama.cpp here cannot offload to a GPU (a CPU build, or no CUDA GPU)"
NO_TORCH_GPU = "torch sees no CUDA GPU"


def llama_pair(n_gpu_layers: int | None = None) -> PairConfig:
    return PairConfig("p", "llamacpp", ModelSpec("t", "gguf"), None, "ngram", 256, n_gpu_layers=n_gpu_layers)


# -- llama.cpp ----------------------------------------------------------------------------------------


@pytest.mark.skipif(LLAMA_GPU, reason="llama.cpp here offloads to a GPU: the CPU case cannot be seen")
def test_a_cpu_build_runs_every_layer_on_the_cpu_whatever_the_config_asks(tiny_gguf):
    assert gpu_layers(None) == 0 and gpu_memory() == 0
    for asked in (None, -1, 0, 2):
        backend = LlamaCppBackend(tiny_gguf, 64, n_gpu_layers=asked, threads=1)
        try:
            assert backend.placement == Placement("cpu", "1 thread", 1)
        finally:
            backend.close()


@pytest.mark.cuda
@pytest.mark.skipif(not LLAMA_GPU, reason=NO_LLAMA_GPU)
def test_a_cuda_build_offloads_every_layer_unless_told_otherwise(tiny_gguf):
    assert gpu_layers(None) == -1 and gpu_memory() > 0
    backend = LlamaCppBackend(tiny_gguf, 64, threads=1)  # 2 layers and the output layer
    try:
        assert backend.placement.device == "gpu" and backend.placement.detail.startswith("3/3 layers on ")
        assert backend.placement.cpu_threads == 0
    finally:
        backend.close()
    backend = LlamaCppBackend(tiny_gguf, 64, n_gpu_layers=0, threads=1)
    try:
        assert backend.placement == Placement("cpu", "1 thread", 1)
    finally:
        backend.close()


def test_placement_from_the_device_llamacpp_reports_for_each_layer():
    assert placement_of(["CPU"] * 3, 4) == Placement("cpu", "4 threads", 4)
    assert placement_of(["CUDA0"] * 29, 4) == Placement("gpu", "29/29 layers on CUDA0", 0)
    assert placement_of(["CPU"] * 9 + ["CUDA0"] * 10 + ["CUDA1"] * 10, 4) == Placement(
        "gpu+cpu", "20/29 layers on CUDA0,CUDA1, the rest on 4 CPU threads", 4
    )
    assert placement_of([], 2) == Placement("unknown", "llama.cpp did not report its layers' devices", 2)


def test_a_pair_asks_for_gpu_layers_only_by_number():
    assert [gpu_layers(n) for n in (-1, 0, 20)] == [-1, 0, 20]


# -- torch ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_hf_dir(tmp_path_factory):
    return build_tiny_hf(tmp_path_factory.mktemp("tiny_hf") / "llama", "llama")


@pytest.mark.torch
def test_a_torch_model_on_the_cpu_reports_the_cpu(tiny_hf_dir):
    backend = load_hf_backend(ModelSpec("tiny", "hf", dtype="fp32"), tiny_hf_dir, n_ctx=64, device_map="cpu")
    threads = torch.get_num_threads()
    assert backend.placement == Placement("cpu", f"{threads} thread{'s' if threads > 1 else ''}", threads)


@pytest.mark.torch
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_TORCH_GPU)
def test_a_torch_model_on_a_gpu_reports_the_gpu(tiny_hf_dir):
    backend = load_hf_backend(ModelSpec("tiny", "hf", dtype="bf16"), tiny_hf_dir, n_ctx=64, device_map="auto")
    assert backend.placement == Placement("gpu", "cuda:0", 0)


def test_placement_from_the_devices_of_a_torch_models_parameters():
    assert hf.placement_of({"cuda:0"}, 8) == Placement("gpu", "cuda:0", 0)
    assert hf.placement_of({"cuda:0", "cuda:1"}, 8) == Placement("gpu", "cuda:0, cuda:1", 0)
    assert hf.placement_of({"cuda:0", "cpu"}, 8) == Placement("gpu+cpu", "cuda:0 and the CPU (8 threads)", 8)
    assert hf.placement_of({"cuda:0", "meta"}, 8).device == "gpu+cpu"  # accelerate's offloaded weights
    assert hf.placement_of({"cpu"}, 1) == Placement("cpu", "1 thread", 1)


# -- the engine: how many CPU threads decoding keeps busy ---------------------------------------------------


def test_decoding_threads_are_the_busiest_models_and_at_least_the_engines_own(tiny_gguf):
    engine = fake_engine()
    engine.target.placement = Placement("cpu", "4 threads", 4)
    engine.draft.placement = Placement("cpu", "2 threads", 2)
    assert engine.decoding_threads() == 4
    engine.target.placement = engine.draft.placement = Placement("gpu", "29/29 layers on CUDA0", 0)
    assert engine.decoding_threads() == 1  # the decode loop's thread between passes
    assert set(engine.placements()) == {"target", "draft"}
    target = LlamaCppBackend(tiny_gguf, 64, threads=1)
    try:
        real = Engine(llama_pair(), target)
        assert real.placements() == {"target": target.placement}
        assert real.decoding_threads() == 1  # one llama.cpp thread, or none on a GPU: the engine's own
    finally:
        target.close()


# -- where a pair would run, before anything loads ------------------------------------------------------


@pytest.mark.skipif(LLAMA_GPU, reason="llama.cpp here offloads to a GPU")
def test_a_llamacpp_pair_runs_on_the_cpu_of_a_cpu_build():
    device = machine.pair_device(llama_pair(-1))
    assert (device.name, device.why, device.memory, device.memory_name) == (
        "cpu",
        "llama.cpp: no GPU offload",
        machine.ram_bytes(),
        "RAM",
    )


def test_a_llamacpp_pair_on_a_build_that_offloads(monkeypatch):
    monkeypatch.setattr(llamacpp_runtime, "gpu_offload", lambda: True)
    monkeypatch.setattr(llamacpp_runtime, "gpu_memory", lambda: 24_000_000_000)
    assert machine.pair_device(llama_pair()) == machine.Device("gpu", "llama.cpp: all layers", 24_000_000_000, "GPU")
    assert machine.pair_device(llama_pair(0)).name == "cpu"
    split = machine.pair_device(llama_pair(20))
    assert (split.name, split.memory) == ("gpu+cpu", 24_000_000_000 + machine.ram_bytes())


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a CUDA GPU: the CPU case cannot be seen")
def test_a_transformers_pair_runs_where_torch_says():
    pair = PairConfig("p", "hf", ModelSpec("t", "hf"), None, "ngram", 256)
    assert machine.pair_device(pair) == machine.Device("cpu", "torch: no CUDA", machine.ram_bytes(), "RAM")
    on_cuda = PairConfig("p", "hf", ModelSpec("t", "hf"), None, "ngram", 256, device_map="cuda")
    assert machine.pair_device(on_cuda).name == "-"


# -- the memory-fit rule ---------------------------------------------------------------------------------


def test_memory_needed_is_the_weights_a_fifth_more_and_the_runtime():
    assert machine.memory_needed([9_000_000_000, 1_000_000_000]) == 12_500_000_000
    assert machine.memory_needed([]) == machine.RUNTIME_BYTES


def test_the_14b_pair_fits_a_16_gb_card_and_not_an_8_gb_one(tmp_path):
    pair = load_registry().pair("qwen2.5-coder-14b")
    store = Store(tmp_path)
    needed = machine.memory_needed([8988111072, 491400064])  # the registry's exact sizes
    gpu16 = machine.Device("gpu", "llama.cpp: all layers", 17_170_000_000, "GPU")
    fit = machine.pair_fit(pair, gpu16, store)
    assert (fit.fits, fit.needed, fit.text) == (True, needed, "yes: 11.9 of 17.2 GB GPU")
    gpu8 = machine.Device("gpu", "llama.cpp: all layers", 8_590_000_000, "GPU")
    assert machine.pair_fit(pair, gpu8, store).text == "no: 11.9 GB > 8.6 GB GPU"
    cannot_run = machine.Device("-", "needs the hf extra", 0, "")
    assert machine.pair_fit(pair, cannot_run, store).fits is None


def test_weights_come_from_the_registry_else_the_file_else_are_unknown(tmp_path):
    store = Store(tmp_path)
    hub = ModelSpec("g", "gguf", file="g.gguf")
    assert machine.weights_bytes(hub, "llamacpp", store) is None
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "g.gguf").write_bytes(b"x" * 1000)
    assert machine.weights_bytes(hub, "llamacpp", store) == 1000  # pulled: the file's size
    assert machine.weights_bytes(hub, "hf", store) is None  # transformers dequantizes a GGUF
    assert machine.weights_bytes(ModelSpec("q", "hf", quant="4bit", weights_gb=5.53), "hf", store) == 5_530_000_000
    pair = PairConfig("p", "hf", ModelSpec("q", "hf"), None, "ngram", 256)
    ram = machine.Device("cpu", "torch: no CUDA", 8_000_000_000, "RAM")
    assert machine.pair_fit(pair, ram, store).text == "? (weights unknown)"
