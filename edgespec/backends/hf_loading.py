"""Loading a transformers model for the hf backend: where it runs, in what precision, and what may be
loaded at all.

`load_hf_backend` takes what the store resolved: a transformers directory, or a GGUF file, which
transformers dequantizes on load (tens of seconds for the 1.5B on 2 cores); the result is converted once
and cached as safetensors (`hf_convert`). Weights come only from safetensors unless the model opts in
to pickles (`allow_pickle`), and code shipped with a model runs only if it opts in to
`trust_remote_code`: both can execute arbitrary code on this machine. `read_hf_vocabulary` reads the
same files, under the same remote-code rule, for the vocabulary alone (no weights).

torch, transformers and bitsandbytes are the optional `hf` extra: they are imported where used, so
this module imports without them.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Protocol

from edgespec.backends.hf import HFBackend
from edgespec.backends.hf_convert import converted_dir
from edgespec.backends.hf_quiet import first_line, quiet_transformers
from edgespec.backends.hf_tokens import end_of_generation_ids, token_tables
from edgespec.decoding.backend import BackendError, Vocabulary
from edgespec.util.paths import home

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


class HFModelSettings(Protocol):
    """What loading reads of a registry entry (`models.registry.ModelSpec` has all of it): the backend
    layer takes it by shape, so it never imports the registry above it. Read-only: the registry's
    entries are frozen."""

    @property
    def name(self) -> str: ...

    @property
    def dtype(self) -> str:
        """One of "auto", "bf16", "fp16", "fp32"."""
        ...

    @property
    def quant(self) -> str:
        """One of "none", "8bit", "4bit"."""
        ...

    @property
    def sha256(self) -> str | None:
        """Of a GGUF: keys its converted copy."""
        ...

    @property
    def trust_remote_code(self) -> bool: ...

    @property
    def allow_pickle(self) -> bool: ...


# -- where and in what precision -------------------------------------------------------------------


def cpu_has_bf16() -> bool:
    """True where the CPU computes bf16 natively (AVX512-BF16 / AMX on x86, the BF16 extension on Arm).

    torch runs bf16 anywhere, but without these instructions it emulates them and fp32 is faster.
    `torch.backends.cpu.get_cpu_capability()` reports only the vector width ("AVX512"), so the flags
    come from the OS.
    """
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        info = ""
    if info:
        return bool(re.search(r"\b(avx512_bf16|amx_bf16|bf16)\b", info))
    if sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True, text=True, timeout=5
            )
            return out.stdout.strip() == "1"
        except (OSError, subprocess.SubprocessError):
            return False
    try:
        import torch  # the optional hf extra (module docstring)

        return "AMX" in torch.backends.cpu.get_cpu_capability()
    except Exception:
        return False


def cuda_available() -> bool:
    import torch  # the optional hf extra

    return torch.cuda.is_available()


def resolve_placement(device_map: str | dict | None) -> tuple[Any, bool]:
    """(device_map for from_pretrained, whether the model goes to a CUDA GPU).

    "auto" means the GPU where there is one and the CPU otherwise; on a CPU-only machine it becomes
    "cpu" outright, so accelerate does not plan disk offloading and bitsandbytes sees a plain CPU model.
    """
    has_cuda = cuda_available()
    if device_map in (None, "", "auto"):
        return ("auto", True) if has_cuda else ("cpu", False)
    if isinstance(device_map, dict):
        devices = {str(v) for v in device_map.values()}
        on_cuda = any(d not in ("cpu", "disk") for d in devices)
    else:
        on_cuda = str(device_map) != "cpu"
    if on_cuda and not has_cuda:
        raise BackendError(
            f"device_map {device_map!r} needs a CUDA GPU, and torch sees none "
            '(a CPU build of torch, or no driver): use device_map = "auto" or "cpu"'
        )
    return device_map, on_cuda


def resolve_dtype(dtype: str, on_cuda: bool):
    """torch dtype for a ModelSpec.dtype: "auto" is bf16 on a GPU that has it (else fp16) and on a
    CPU that computes bf16 natively (else fp32, which such a CPU runs faster than emulated bf16)."""
    import torch  # the optional hf extra

    named = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    if dtype in named:
        return named[dtype]
    if dtype != "auto":
        raise BackendError(f"dtype {dtype!r} is not one of auto, bf16, fp16, fp32")
    if on_cuda:
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_has_bf16() else torch.float32


def quantization_config(quant: str, compute_dtype, on_cuda: bool, model_name: str = "model"):
    """A BitsAndBytesConfig for "8bit" / "4bit" (nf4, double-quantized statistics, `compute_dtype`
    matmuls), None for "none"; a one-line BackendError where bitsandbytes cannot run here."""
    if quant == "none":
        return None
    if quant not in ("8bit", "4bit"):
        raise BackendError(f"{model_name}: quant {quant!r} is not one of none, 8bit, 4bit")
    # bitsandbytes logs a warning at import where an optional CPU kernel package is missing, and one
    # from inside every 8-bit matmul whose input is not fp16 (always, on a CPU); edgespec's stderr
    # is for its own stats and errors.
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    try:
        import bitsandbytes as bnb  # the optional hf extra, and only for a quantized model
    except ImportError:
        raise BackendError(
            f"{model_name}: quant = \"{quant}\" needs bitsandbytes (pip install 'edgespec[hf]')"
        ) from None
    if not on_cuda and "cpu" not in getattr(bnb, "supported_torch_devices", ()):
        raise BackendError(
            f'{model_name}: quant = "{quant}" needs a CUDA GPU: there is none here, and bitsandbytes '
            f'{bnb.__version__} has no CPU backend (use quant = "none" on this machine)'
        )
    from transformers import BitsAndBytesConfig  # the optional hf extra

    if quant == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute_dtype,
    )


# -- what may be loaded ---------------------------------------------------------------------------


def check_weight_files(folder: Path, allow_pickle: bool, model_name: str = "model") -> None:
    """Refuse a directory whose only weights are pickles unless the model opts in: unpickling runs
    whatever code the file names, so a pickled checkpoint from an untrusted source can own the machine."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    if any(p.suffix == ".safetensors" for p in files):
        return
    pickles = sorted(p.name for p in files if p.suffix in PICKLE_SUFFIXES and not p.name.startswith("training_args"))
    if not pickles:
        raise BackendError(f"{model_name}: no weights in {folder} (expected *.safetensors)")
    if not allow_pickle:
        raise BackendError(
            f"{model_name}: {folder} has only pickled weights ({', '.join(pickles[:2])}); loading a pickle "
            "can run arbitrary code, so edgespec refuses it: use a safetensors copy, or set "
            "allow_pickle = true for this model if you trust its source"
        )


def check_remote_code(folder: Path, trust_remote_code: bool, model_name: str = "model") -> None:
    """Refuse a model whose architecture exists only in Python files shipped with it, unless it
    opts in: transformers would import and run them. (A repo that ships code for an architecture
    transformers already has loads with transformers' own code, and needs no opt-in.)"""
    if trust_remote_code:
        return
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES  # the optional hf extra

    for name in ("config.json", "tokenizer_config.json"):
        data = _read_json(folder / name)
        auto_map = data.get("auto_map")
        if not auto_map:
            continue
        if name == "config.json" and data.get("model_type") in CONFIG_MAPPING_NAMES:
            continue
        if name == "tokenizer_config.json" and not _custom_tokenizer(data):
            continue
        code = _code_files(auto_map)
        raise BackendError(
            f"{model_name}: {folder / name} asks to run Python code shipped with the model "
            f"({', '.join(code)}); edgespec does not run it unless the model sets "
            "trust_remote_code = true in models.toml (only for a source you trust)"
        )


def _code_files(auto_map: dict) -> list[str]:
    """The Python files an auto_map points at: "module.Class", "repo--module.Class", or a
    [slow, fast] pair of those for tokenizers."""
    refs = [r for v in auto_map.values() for r in (v if isinstance(v, (list, tuple)) else [v]) if r]
    return sorted({str(r).split("--")[-1].rsplit(".", 1)[0] + ".py" for r in refs})


def _custom_tokenizer(tokenizer_config: dict) -> bool:
    cls = tokenizer_config.get("tokenizer_class")
    if not cls:
        return True
    import transformers  # the optional hf extra

    return not hasattr(transformers, cls) and not hasattr(transformers, cls.removesuffix("Fast"))


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


# -- reading a model's files ----------------------------------------------------------------------


def _load_tokenizer(folder: Path, trust_remote_code: bool, gguf_file: str | None = None):
    from transformers import AutoTokenizer  # the optional hf extra

    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        with quiet_transformers():
            return AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code, **kwargs)
    except Exception as e:  # transformers raises ValueError, OSError, KeyError ... for a bad tokenizer
        raise BackendError(f"cannot read the tokenizer in {folder / (gguf_file or '')}: {first_line(e)}") from None


def read_hf_vocabulary(path: Path) -> Vocabulary:
    """The vocabulary of a transformers directory (tokenizer files, config.json and
    generation_config.json) or of a GGUF file read by transformers; no weights are loaded.

    Token texts are the tokenizer's own spellings, so two transformers models compare like two
    GGUFs; `size` is the model's output width (config vocab_size), which may exceed the tokenizer's.
    """
    path = Path(path)
    if path.is_file() and path.suffix == ".gguf":
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint  # the optional hf extra

        try:
            with quiet_transformers():
                config = load_gguf_checkpoint(str(path), return_tensors=False)["config"]
        except Exception as e:
            raise BackendError(f"cannot read {path} as a GGUF: {first_line(e)}") from None
        tokenizer = _load_tokenizer(path.parent, False, gguf_file=path.name)
        configs = [config]
    elif path.is_dir():
        check_remote_code(path, False, path.name)
        tokenizer = _load_tokenizer(path, False)
        config = _read_json(path / "config.json")
        config = config.get("text_config", config) if "vocab_size" not in config else config
        configs = [config, _read_json(path / "generation_config.json")]
    else:
        raise BackendError(f"{path} is neither a transformers model directory nor a .gguf file")
    size = int(configs[0].get("vocab_size") or len(tokenizer))
    spellings, _ = token_tables(tokenizer, max(size, len(tokenizer)))
    return Vocabulary(
        size=size,
        tokens=spellings[:size],
        eos_ids=end_of_generation_ids(tokenizer, *configs),
        bos_id=tokenizer.bos_token_id,
    )


# -- loading ----------------------------------------------------------------------------------------


def load_hf_backend(
    model_spec: HFModelSettings,
    path: Path,
    *,
    n_ctx: int,
    device_map: str | dict | None = "auto",
    cache_dir: Path | None = None,
) -> HFBackend:
    """Load `model_spec` from `path`: a transformers directory, or a GGUF file (converted once to
    safetensors under `cache_dir`, reused afterwards). Errors are one-line BackendErrors."""
    path = Path(path)
    name = model_spec.name
    if not path.exists():
        raise BackendError(f"{name}: {path} does not exist")
    hf_map, on_cuda = resolve_placement(device_map)
    dtype = resolve_dtype(model_spec.dtype, on_cuda)
    quant = quantization_config(model_spec.quant, dtype, on_cuda, name)
    if path.is_file():
        if path.suffix != ".gguf":
            raise BackendError(f"{name}: {path} is a file but not a .gguf; a transformers model is a directory")
        path = converted_dir(
            path, home() / "converted" if cache_dir is None else Path(cache_dir), dtype=dtype, sha256=model_spec.sha256
        )
    check_remote_code(path, model_spec.trust_remote_code, name)
    check_weight_files(path, model_spec.allow_pickle, name)
    tokenizer = _load_tokenizer(path, model_spec.trust_remote_code)

    from transformers import AutoModelForCausalLM  # the optional hf extra

    kwargs: dict[str, Any] = {"dtype": dtype, "device_map": hf_map, "trust_remote_code": model_spec.trust_remote_code}
    if quant is not None:
        kwargs["quantization_config"] = quant
    if not model_spec.allow_pickle:
        kwargs["use_safetensors"] = True
    try:
        with quiet_transformers():
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (ImportError, OSError, ValueError, RuntimeError, KeyError, TypeError) as e:
        raise BackendError(f"{name}: transformers could not load {path}: {first_line(e)}") from None
    return HFBackend(model, tokenizer, n_ctx=n_ctx, label=name, path=path)
