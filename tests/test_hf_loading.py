"""What the transformers backend agrees to load, and how (edgespec/backends/hf_loading.py): pickled
weights and remote code refused unless allowed, clear errors for a bad path, the dtype, a CUDA
placement without CUDA, and bitsandbytes quantization on tiny models built here from configs."""

from __future__ import annotations

import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from edgespec.backends import hf_loading  # noqa: E402
from edgespec.backends.hf_loading import load_hf_backend, read_hf_vocabulary  # noqa: E402
from edgespec.decoding.backend import BackendError  # noqa: E402
from edgespec.testing.tiny_hf import (  # noqa: E402
    ARCHS,
    REMOTE_CODE_SENTINEL,
    build_tiny_hf,
    make_pickled,
    make_remote_code_model,
)
from tests.hf_models import ATOL, load, prompt_ids, spec  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_thread")]


# -- safety -------------------------------------------------------------------------------------


def test_pickled_weights_are_refused_unless_allowed(tmp_path):
    folder = make_pickled(build_tiny_hf(tmp_path / "pickled", "qwen2"))
    with pytest.raises(BackendError, match=r"pickled weights \(pytorch_model.bin\).*arbitrary code.*allow_pickle"):
        load(folder)
    reference = load(build_tiny_hf(tmp_path / "safe", "qwen2"))
    allowed = load(folder, allow_pickle=True)
    ids = prompt_ids(reference)
    np.testing.assert_allclose(allowed.eval(ids, 2), reference.eval(ids, 2), atol=ATOL, rtol=0)


def test_remote_code_is_refused_unless_trusted(tmp_path):
    folder = make_remote_code_model(tmp_path / "custom")
    with pytest.raises(BackendError, match=r"modeling_evil\.py.*trust_remote_code = true"):
        load(folder)
    assert not (folder / REMOTE_CODE_SENTINEL).exists()
    with pytest.raises(BackendError):
        read_hf_vocabulary(folder)
    assert not (folder / REMOTE_CODE_SENTINEL).exists()


def test_a_missing_path_and_a_stray_file_are_clear_errors(tmp_path):
    with pytest.raises(BackendError, match="does not exist"):
        load(tmp_path / "nope")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(BackendError, match="not a .gguf"):
        load(tmp_path / "weights.bin")


# -- precision, placement, quantization -----------------------------------------------------------


def test_dtype_auto_follows_the_cpu(monkeypatch):
    monkeypatch.setattr(hf_loading, "cpu_has_bf16", lambda: True)
    assert hf_loading.resolve_dtype("auto", on_cuda=False) == torch.bfloat16
    monkeypatch.setattr(hf_loading, "cpu_has_bf16", lambda: False)
    assert hf_loading.resolve_dtype("auto", on_cuda=False) == torch.float32
    assert hf_loading.resolve_dtype("fp16", on_cuda=False) == torch.float16
    with pytest.raises(BackendError):
        hf_loading.resolve_dtype("int3", on_cuda=False)


def test_bf16_model_runs_and_rolls_back(tiny_dirs):
    b = load(tiny_dirs["qwen2"], dtype="bf16")
    assert b.model.dtype == torch.bfloat16
    ids = prompt_ids(b)
    whole = b.eval(ids, 4)
    assert whole.dtype == np.float32
    b.truncate(len(ids) - 4)
    np.testing.assert_array_equal(b.eval(ids[-4:], 4), whole)  # same shapes: bit-identical


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_device_map_without_cuda_is_a_one_line_error(tiny_dirs):
    with pytest.raises(BackendError, match="needs a CUDA GPU") as e:
        load_hf_backend(spec(), tiny_dirs["llama"], n_ctx=64, device_map="cuda")
    assert "\n" not in str(e.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
@pytest.mark.parametrize("quant", ["8bit", "4bit"])
def test_quantization_without_a_usable_backend_is_a_one_line_error(tiny_dirs, monkeypatch, quant):
    bnb = pytest.importorskip("bitsandbytes")
    monkeypatch.setattr(bnb, "supported_torch_devices", {"cuda"})
    with pytest.raises(BackendError, match=f'quant = "{quant}" needs a CUDA GPU') as e:
        load(tiny_dirs["llama"], quant=quant)
    assert "\n" not in str(e.value)


def _bnb_cpu_skip() -> tuple[bool, str]:
    """(skip, reason) for quantized tests on this machine."""
    try:
        import bitsandbytes as bnb
    except ImportError:
        return True, "bitsandbytes is not installed"
    if torch.cuda.is_available() or "cpu" in getattr(bnb, "supported_torch_devices", ()):
        return False, ""
    return True, f"bitsandbytes {bnb.__version__} has no CPU backend and there is no CUDA GPU"


_SKIP_BNB, _WHY = _bnb_cpu_skip()
# Marked `cuda` only where it cannot run here (the rule); on this CPU it runs.
QUANT_MARKS = [pytest.mark.cuda, pytest.mark.skip(reason=_WHY)] if _SKIP_BNB else []


@pytest.mark.parametrize(
    "quant, layer",
    [pytest.param("8bit", "Linear8bitLt", marks=QUANT_MARKS), pytest.param("4bit", "Linear4bit", marks=QUANT_MARKS)],
)
@pytest.mark.parametrize("arch", ARCHS)
def test_quantized_model_loads_evaluates_and_rolls_back(tiny_dirs, arch, quant, layer, caplog):
    reference = load(tiny_dirs[arch])
    b = load(tiny_dirs[arch], quant=quant, dtype="auto")
    assert type(b.model.model.layers[0].mlp.up_proj).__name__ == layer
    ids = prompt_ids(b)
    with caplog.at_level(logging.WARNING):
        whole = b.eval(ids, len(ids))
    assert not [r for r in caplog.records if r.name.startswith("bitsandbytes")]  # no per-matmul warning spam
    assert np.isfinite(whole).all()
    b.truncate(10)
    again = b.eval(ids[10:], len(ids) - 10)
    np.testing.assert_allclose(again, whole[10:], atol=0.05 * np.abs(whole).max(), rtol=0)
    # quantization perturbs the logits, not the model: they still track the full-precision ones
    ref = reference.eval(ids, len(ids))
    assert np.corrcoef(whole.ravel(), ref.ravel())[0, 1] > 0.8
