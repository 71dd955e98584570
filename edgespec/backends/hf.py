"""transformers (+ accelerate, bitsandbytes): Hugging Face models, bf16 on CPU or quantized on a GPU.

One `HFBackend` holds one model and one KV cache, a transformers `DynamicCache`. The cache is rolled
back by cropping it (`DynamicLayer.crop` with a negative count), and a pass computes the output
projection only for the positions the caller asked for (`logits_to_keep`): for a 151936-token
vocabulary the full projection of a 500-token prompt would be 300 MB of logits nobody reads.

Loading (`load_hf_backend`) takes what the store resolved: a transformers directory, or a GGUF file,
which transformers dequantizes on load (about 50 s for the 1.5B on 2 cores); the result is converted
once and cached as safetensors (`hf_convert`). Weights come only from safetensors unless the model
opts in to pickles (`allow_pickle`), and code shipped with a model runs only if it opts in to
`trust_remote_code`: both can execute arbitrary code on this machine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from edgespec.backends.base import BackendError, ContextOverflow, Vocabulary
from edgespec.config import ModelSpec

# Prompts longer than this are evaluated in chunks: the attention scores of one pass grow with
# chunk x context, and a long prompt in one pass can need gigabytes for nothing.
PREFILL_CHUNK = 512

# Token texts that end a turn in the chat formats edgespec ships with; like llama.cpp's
# end-of-generation set, they stop generation even when the model's config names only one eos.
END_OF_TURN_TEXTS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>",
                     "<end_of_turn>", "<|end|>")

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


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
            out = subprocess.run(["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True, text=True, timeout=5)
            return out.stdout.strip() == "1"
        except (OSError, subprocess.SubprocessError):
            return False
    try:
        import torch

        return "AMX" in torch.backends.cpu.get_cpu_capability()
    except Exception:
        return False


def cuda_available() -> bool:
    import torch

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
        raise BackendError(f"device_map {device_map!r} needs a CUDA GPU, and torch sees none "
                           "(a CPU build of torch, or no driver): use device_map = \"auto\" or \"cpu\"")
    return device_map, on_cuda


def resolve_dtype(dtype: str, on_cuda: bool):
    """torch dtype for a ModelSpec.dtype: "auto" is bf16 on a GPU that has it (else fp16) and on a
    CPU that computes bf16 natively (else fp32, which such a CPU runs faster than emulated bf16)."""
    import torch

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
        import bitsandbytes as bnb
    except ImportError:
        raise BackendError(f"{model_name}: quant = \"{quant}\" needs bitsandbytes (pip install 'edgespec[hf]')") from None
    if not on_cuda and "cpu" not in getattr(bnb, "supported_torch_devices", ()):
        raise BackendError(f"{model_name}: quant = \"{quant}\" needs a CUDA GPU: there is none here, and bitsandbytes "
                           f"{bnb.__version__} has no CPU backend (use quant = \"none\" on this machine)")
    from transformers import BitsAndBytesConfig

    if quant == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=compute_dtype)


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
        raise BackendError(f"{model_name}: {folder} has only pickled weights ({', '.join(pickles[:2])}); loading a pickle "
                           "can run arbitrary code, so edgespec refuses it: use a safetensors copy, or set "
                           "allow_pickle = true for this model if you trust its source")


def check_remote_code(folder: Path, trust_remote_code: bool, model_name: str = "model") -> None:
    """Refuse a model whose architecture exists only in Python files shipped with it, unless it
    opts in: transformers would import and run them. (A repo that ships code for an architecture
    transformers already has loads with transformers' own code, and needs no opt-in.)"""
    if trust_remote_code:
        return
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

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
        raise BackendError(f"{model_name}: {folder / name} asks to run Python code shipped with the model "
                           f"({', '.join(code)}); edgespec does not run it unless the model sets "
                           "trust_remote_code = true in models.toml (only for a source you trust)")


def _code_files(auto_map: dict) -> list[str]:
    """The Python files an auto_map points at: "module.Class", "repo--module.Class", or a
    [slow, fast] pair of those for tokenizers."""
    refs = [r for v in auto_map.values() for r in (v if isinstance(v, (list, tuple)) else [v]) if r]
    return sorted({str(r).split("--")[-1].rsplit(".", 1)[0] + ".py" for r in refs})


def _custom_tokenizer(tokenizer_config: dict) -> bool:
    cls = tokenizer_config.get("tokenizer_class")
    if not cls:
        return True
    import transformers

    return not hasattr(transformers, cls) and not hasattr(transformers, cls.removesuffix("Fast"))


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


# -- token texts ------------------------------------------------------------------------------------


def _gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE spells every byte as a printable character; this undoes it."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    shift = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + shift)] = b
            shift += 1
    return table


_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _piece_style(tokenizer) -> str:
    """How the tokenizer spells bytes in its vocabulary: "bytelevel" (GPT-2, Llama 3, Qwen),
    "sentencepiece" (`▁` for a space, `<0xNN>` byte fallback: Llama 2, Mistral) or "plain"."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return "sentencepiece" if getattr(tokenizer, "sp_model", None) is not None else "plain"
    state = json.loads(backend.to_str())
    parts = json.dumps([state.get("decoder"), state.get("pre_tokenizer"), state.get("normalizer")], ensure_ascii=False)
    if '"ByteLevel"' in parts:
        return "bytelevel"
    if state.get("model", {}).get("byte_fallback") or '"ByteFallback"' in parts or "\u2581" in parts:
        return "sentencepiece"
    return "plain"


def token_tables(tokenizer, n_vocab: int) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """(spellings, raw bytes) of every id below n_vocab.

    Spellings are the vocabulary entries as the tokenizer stores them (`Ġthe`, `▁the`, `<0x0A>`),
    the same texts a GGUF of the model holds, so vocabularies compare across formats. Raw bytes are
    what a token stands for in the output: a space, a newline, or part of a UTF-8 character; special
    (control) tokens stand for nothing, as llama.cpp renders them, so both backends print the same
    text. Ids the tokenizer does not know (embedding rows padded past it) are b"" in both.
    """
    style = _piece_style(tokenizer)
    byte_of = _gpt2_byte_decoder()
    added = {i: b"" if t.special else t.content.encode("utf-8") for i, t in tokenizer.added_tokens_decoder.items()}
    pieces = tokenizer.convert_ids_to_tokens(list(range(min(n_vocab, len(tokenizer)))))
    spellings: list[bytes] = []
    raw: list[bytes] = []
    for i, piece in enumerate(pieces):
        if piece is None:
            spellings.append(b"")
            raw.append(b"")
            continue
        spellings.append(piece.encode("utf-8"))
        m = _BYTE_FALLBACK.fullmatch(piece) if style == "sentencepiece" else None
        if m:
            raw.append(bytes([int(m.group(1), 16)]))
        elif i in added:
            raw.append(added[i])
        elif style == "bytelevel":
            raw.append(bytes(byte_of[c] for c in piece) if all(c in byte_of for c in piece) else piece.encode("utf-8"))
        elif style == "sentencepiece":
            raw.append(piece.replace("\u2581", " ").encode("utf-8"))
        else:
            raw.append(tokenizer.convert_tokens_to_string([piece]).encode("utf-8"))
    pad = (b"",) * (n_vocab - len(pieces))
    return tuple(spellings) + pad, tuple(raw) + pad


def end_of_generation_ids(tokenizer, *configs) -> frozenset[int]:
    """eos ids named by the tokenizer, the model config and generation config (an int or a list
    each), plus the end-of-turn tokens of common chat formats present in the vocabulary."""
    ids: set[int] = set()
    for value in [getattr(tokenizer, "eos_token_id", None)] + [_get(c, "eos_token_id") for c in configs]:
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(v for v in value if isinstance(v, int))
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in END_OF_TURN_TEXTS if t in vocab)
    return frozenset(ids)


def _get(config, key: str):
    if config is None:
        return None
    if isinstance(config, dict):
        return config.get(key)
    return getattr(config, key, None)


def _load_tokenizer(folder: Path, trust_remote_code: bool, gguf_file: str | None = None):
    from transformers import AutoTokenizer

    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        with quiet_transformers():
            return AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code, **kwargs)
    except Exception as e:  # transformers raises ValueError, OSError, KeyError ... for a bad tokenizer
        raise BackendError(f"cannot read the tokenizer in {folder / (gguf_file or '')}: {_first_line(e)}") from None


@contextlib.contextmanager
def quiet_transformers():
    """Loading prints progress bars and advice to stderr, which edgespec keeps for its own output;
    errors still surface as exceptions."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def read_hf_vocabulary(path: Path) -> Vocabulary:
    """The vocabulary of a transformers directory (tokenizer files, config.json and
    generation_config.json) or of a GGUF file read by transformers; no weights are loaded.

    Token texts are the tokenizer's own spellings, so two transformers models compare like two
    GGUFs; `size` is the model's output width (config vocab_size), which may exceed the tokenizer's.
    """
    path = Path(path)
    if path.is_file() and path.suffix == ".gguf":
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

        try:
            with quiet_transformers():
                config = load_gguf_checkpoint(str(path), return_tensors=False)["config"]
        except Exception as e:
            raise BackendError(f"cannot read {path} as a GGUF: {_first_line(e)}") from None
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
    return Vocabulary(size=size, tokens=spellings[:size], eos_ids=end_of_generation_ids(tokenizer, *configs),
                      bos_id=tokenizer.bos_token_id)


# -- the backend ------------------------------------------------------------------------------------


class HFBackend:
    """One transformers causal LM with one KV cache (batch of one).

    `eval` runs under `torch.inference_mode`, asks the model for logits at the last `n_logits`
    positions only, and returns them as float32 numpy on the host: one device-to-host copy per
    call, the only synchronisation the decode loop needs.
    """

    name = "hf"

    def __init__(self, model, tokenizer, *, n_ctx: int, label: str = "model", path: Path | None = None):
        import torch
        from transformers import DynamicCache

        self._torch = torch
        self._new_cache = DynamicCache
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.label = label
        self.path = path  # the directory the weights came from (a GGUF's conversion), if any
        config = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
        limit = getattr(config, "max_position_embeddings", None)
        self.n_ctx = min(n_ctx, limit) if limit else n_ctx
        out = model.get_output_embeddings()
        self.n_vocab = int(getattr(out, "out_features", None) or config.vocab_size)
        self.eos_ids = end_of_generation_ids(tokenizer, model.config, getattr(model, "generation_config", None))
        self._spellings, self._bytes = token_tables(tokenizer, self.n_vocab)
        self._device = model.get_input_embeddings().weight.device
        # No config: every layer caches in full (DynamicLayer), so any length can be cropped; with
        # the config, sliding-window layers would keep only their window and refuse a rollback.
        self._cache = DynamicCache()
        self.cached: list[int] = []

    # -- the Backend protocol ---------------------------------------------------------------

    def eval(self, tokens: Sequence[int], n_logits: int) -> np.ndarray:
        """Append `tokens`; return float32 logits (n_logits, n_vocab) for the last n_logits of them."""
        n = len(tokens)
        if not 0 <= n_logits <= n:
            raise ValueError(f"n_logits={n_logits} with {n} tokens")
        if len(self.cached) + n > self.n_ctx:
            raise ContextOverflow(f"{len(self.cached) + n} tokens do not fit the {self.n_ctx}-token context")
        if n == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        torch = self._torch
        start = len(self.cached)
        try:
            with torch.inference_mode():
                for a, b in _chunks(n, n_logits, PREFILL_CHUNK):
                    ids = torch.tensor([list(tokens[a:b])], dtype=torch.long, device=self._device)
                    # logits_to_keep=0 would mean "all": a pass that needs none computes one.
                    keep = max(1, n_logits) if b == n else 1
                    out = self.model(input_ids=ids, cache=self._cache, use_cache=True, logits_to_keep=keep)
                rows = out.logits[0, out.logits.shape[1] - n_logits :] if n_logits else out.logits[0, :0]
                logits = rows.to(device="cpu", dtype=torch.float32).numpy()
        except BaseException:
            self._crop_to(start)  # a failed or interrupted pass may have filled some layers only
            raise
        self.cached.extend(tokens)
        return logits

    def truncate(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"truncate({n})")
        if n >= len(self.cached):
            return
        if n == 0:
            self._cache = self._new_cache()  # frees the tensors instead of keeping empty views of them
        else:
            self._crop_to(n)
        del self.cached[n:]

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        """Token ids of `text`, no BOS added (chat templates write their own, as in the llama.cpp
        backend). special=False spells special-token texts as plain text instead of parsing them."""
        return list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=not special)["input_ids"])

    def token_bytes(self, token_id: int) -> bytes:
        return self._bytes[token_id] if 0 <= token_id < self.n_vocab else b""

    def chat_prompt(self, messages: Sequence[dict]) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise BackendError(f"{self.label} has no chat template; use --raw for plain completion")
        try:
            return self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
        except Exception as e:  # jinja2 TemplateError, or a template's own raise_exception
            raise BackendError(f"the chat template of {self.label} failed: {_first_line(e)}") from None

    def vocabulary(self) -> Vocabulary:
        return Vocabulary(self.n_vocab, self._spellings, self.eos_ids, self.tokenizer.bos_token_id)

    # -- the cache ---------------------------------------------------------------------------

    def _crop_to(self, n: int) -> None:
        """Cut every layer back to n positions (layers are cropped one by one: after a failed pass
        they need not all hold the same length)."""
        with self._torch.inference_mode():
            for layer in self._cache.layers:
                length = layer.get_seq_length()
                if length > n:
                    layer.crop(n - length)

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        self._cache = self._new_cache()
        self.cached = []
        if self.model is not None:
            self.model = None
            import gc

            gc.collect()
            if self._torch.cuda.is_available():
                self._torch.cuda.empty_cache()


def _chunks(n: int, n_logits: int, size: int) -> list[tuple[int, int]]:
    """Split n tokens into passes of at most `size`, except that the last one holds every position
    that needs logits (so one pass yields them all)."""
    if n <= size:
        return [(0, n)]
    bounds = list(range(0, n, size)) + [n]
    spans = list(zip(bounds[:-1], bounds[1:]))
    while len(spans) > 1 and spans[-1][1] - spans[-1][0] < n_logits:
        (a, _), (_, b) = spans[-2], spans[-1]
        spans[-2:] = [(a, b)]
    return spans


# -- transformers' own speculative generation (the bench's peer) ------------------------------------


@dataclass(frozen=True)
class AssistedRun:
    """One greedy `generate(assistant_model=...)`, measured the way the engine's Summary is.

    `ids` are the generated tokens up to (not including) the first end-of-generation token, as the
    engine emits them; `tokens` is their count. `decode_tokens_per_s` counts the tokens after the
    first target pass per second after it: that pass reads the prompt (the engine's prefill) and, here,
    also verifies the first draft, so its tokens and its time are both left out. `target_passes`
    counts every target forward (the first included), `k_trace` the draft length of each.
    """

    ids: list[int]
    tokens: int
    decode_tokens_per_s: float
    target_passes: int
    drafted: int
    accepted: int
    k_trace: list[int]


class _AssistedTrace:
    """A streamer (transformers' BaseStreamer protocol: put/end) that stamps each target pass.

    generate() puts the prompt first, then the tokens each target pass validated (accepted drafts
    plus the target's own token). A forward hook on the draft calls `draft_forward` once per drafted
    token, so the drafts counted since the previous put are the K of the pass that follows them.
    """

    def __init__(self, clock):
        self.clock = clock
        self.prompt_seen = False
        self.passes: list[tuple[float, int, int]] = []  # (time, tokens validated, tokens drafted)
        self._drafted = 0

    def draft_forward(self, *_):
        self._drafted += 1

    def put(self, value) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.passes.append((self.clock(), int(value.numel()), self._drafted))
        self._drafted = 0

    def end(self) -> None:
        pass


def assisted_generate(target: HFBackend, draft: HFBackend, prompt_ids: Sequence[int], max_tokens: int, *,
                      clock: Callable[[], float] = time.perf_counter) -> AssistedRun:
    """Greedy `target.model.generate(..., assistant_model=draft.model)` after `prompt_ids`, with
    transformers' default assistant settings (draft length, confidence threshold), stopping at the
    target's end-of-generation tokens like the engine. Neither backend's own KV cache is touched:
    generate() builds its own.
    """
    torch = target._torch
    prompt_ids = list(prompt_ids)
    if not prompt_ids:
        raise ValueError("empty prompt")
    room = min(max_tokens, target.n_ctx - len(prompt_ids))
    if room <= 0:
        raise ContextOverflow(f"the prompt is {len(prompt_ids)} tokens; the context holds {target.n_ctx}")
    eos = sorted(target.eos_ids)
    pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else (eos[0] if eos else None)
    trace = _AssistedTrace(clock)
    hook = draft.model.register_forward_hook(trace.draft_forward)
    try:
        with torch.inference_mode(), quiet_transformers():
            ids = torch.tensor([prompt_ids], dtype=torch.long, device=target._device)
            out = target.model.generate(
                ids, attention_mask=torch.ones_like(ids), assistant_model=draft.model, streamer=trace,
                do_sample=False, repetition_penalty=1.0,  # plain argmax, whatever the model's generation_config says
                max_new_tokens=room, eos_token_id=eos or None, pad_token_id=pad,
            )
    finally:
        hook.remove()
    new = [int(t) for t in out[0, len(prompt_ids):].tolist()]
    stop = next((i for i, t in enumerate(new) if t in target.eos_ids), len(new))
    new = new[:stop]
    passes = trace.passes
    validated = sum(n for _, n, _ in passes)
    rate = 0.0
    if len(passes) > 1:
        decoded = len(new) - min(passes[0][1], len(new))
        span = passes[-1][0] - passes[0][0]
        rate = decoded / span if span > 0 else 0.0
    return AssistedRun(new, len(new), rate, len(passes), sum(k for *_, k in passes), validated - len(passes),
                       [k for *_, k in passes])


# -- loading ----------------------------------------------------------------------------------------


def load_hf_backend(
    model_spec: ModelSpec,
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
        from edgespec.backends.hf_convert import converted_dir

        path = converted_dir(path, _default_cache_dir() if cache_dir is None else Path(cache_dir), dtype=dtype,
                             sha256=model_spec.sha256)
    check_remote_code(path, model_spec.trust_remote_code, name)
    check_weight_files(path, model_spec.allow_pickle, name)
    tokenizer = _load_tokenizer(path, model_spec.trust_remote_code)

    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": dtype, "device_map": hf_map, "trust_remote_code": model_spec.trust_remote_code}
    if quant is not None:
        kwargs["quantization_config"] = quant
    if not model_spec.allow_pickle:
        kwargs["use_safetensors"] = True
    try:
        with quiet_transformers():
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (ImportError, OSError, ValueError, RuntimeError, KeyError, TypeError) as e:
        raise BackendError(f"{name}: transformers could not load {path}: {_first_line(e)}") from None
    return HFBackend(model, tokenizer, n_ctx=n_ctx, label=name, path=path)


def _default_cache_dir() -> Path:
    from edgespec.store import home

    return home() / "converted"
