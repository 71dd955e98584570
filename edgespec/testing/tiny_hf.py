"""Tiny transformers models, built from configs in a temporary directory: no downloads.

`build_tiny_hf(folder, arch)` writes a 2-layer, width-64 Llama or Qwen2 (grouped-query attention, 4
query and 2 KV heads; the Qwen2 one with attention biases and tied embeddings, like the small Qwens)
with seeded random weights, saved with `save_pretrained` as safetensors next to a byte-level BPE
tokenizer trained here with the `tokenizers` library on a small built-in text, with the ChatML
specials and chat template. The Llama tokenizer also has a BOS token that its chat template writes,
as Llama 3's does. The embedding table is padded past the tokenizer (to a multiple of 64) the way
real checkpoints are, so code that confuses the two sizes fails here.

Weights are scaled (unit embeddings, logits with a standard deviation of a few units) so greedy
continuations depend on the context and argmaxes are not near-ties. `like=TARGET_SEED,
similarity=s` mixes sqrt(s) of that target's weights into a new seed's: a draft that agrees with
the target on part of its greedy choices.

`sentencepiece_tokenizer()` builds a Llama-2-style tokenizer (`▁` for spaces, `<0xNN>` byte
fallback) to test raw token bytes for that spelling too.

torch, transformers and tokenizers (the hf extra) are imported where used, so the module imports
without them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from edgespec.testing.tiny_gguf import CHATML_TEMPLATE, SPECIALS

BOS = "<|begin_of_text|>"
ARCHS = ("llama", "qwen2")

CORPUS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun.",
    "import numpy as np\nfrom pathlib import Path\n\n"
    "class Model:\n    def __init__(self, name):\n        self.name = name\n",
    "for i in range(10):\n    print(i, i * i)\n# a comment about the loop\n",
    "Café, naïve, über, déjà vu; 日本語のテキスト; emoji 🙂🚀 and symbols → ≤ ≥ ∑.",
    "speculative decoding drafts tokens with a small model and verifies them with the target model",
    "hello world, hello there, hello again: the world says hello back",
] * 4


def _bytelevel_tokenizer(with_bos: bool, vocab_size: int = 420):
    # the hf extra (module docstring)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    specials = list(SPECIALS) + ([BOS] if with_bos else [])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    if with_bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tok.token_to_id(BOS))]
        )
    return tok


def bytelevel_tokenizer(with_bos: bool = False):
    """A transformers tokenizer over a freshly trained byte-level BPE with ChatML."""
    from transformers import PreTrainedTokenizerFast  # the hf extra (module docstring)

    template = ("{{ bos_token }}" if with_bos else "") + CHATML_TEMPLATE
    return PreTrainedTokenizerFast(
        tokenizer_object=_bytelevel_tokenizer(with_bos),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=BOS if with_bos else None,
        chat_template=template,
    )


def sentencepiece_tokenizer():
    """A Llama-2-style tokenizer: Metaspace pieces (`▁`), byte fallback `<0xNN>` for anything outside
    its small alphabet, `<unk>`, `<s>`, `</s>`."""
    from tokenizers import Tokenizer, models, normalizers, trainers  # the hf extra (module docstring)
    from transformers import PreTrainedTokenizerFast

    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.pre_tokenizer = None
    trainer = trainers.BpeTrainer(
        vocab_size=420, special_tokens=["<unk>", "<s>", "</s>", *byte_tokens], show_progress=False, limit_alphabet=60
    )
    tok.train_from_iterator([line for line in CORPUS if line.isascii()], trainer=trainer)
    # The trainer registers its special tokens as added tokens; in a sentencepiece vocabulary the
    # byte pieces are ordinary entries, so only <unk>, <s> and </s> stay "added".
    state = json.loads(tok.to_str())
    state["added_tokens"] = [t for t in state["added_tokens"] if t["content"] in ("<unk>", "<s>", "</s>")]
    state["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    }
    tok = Tokenizer.from_str(json.dumps(state))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def tiny_config(arch: str, vocab_size: int, tokenizer, *, layers: int = 2, hidden: int = 64, n_ctx: int = 512):
    from transformers import LlamaConfig, Qwen2Config  # the hf extra (module docstring)

    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=n_ctx,
        rms_norm_eps=1e-5,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if arch == "llama":
        return LlamaConfig(tie_word_embeddings=False, **common)
    if arch == "qwen2":
        return Qwen2Config(tie_word_embeddings=True, use_sliding_window=False, **common)
    raise ValueError(f"arch must be one of {ARCHS}")


def _scaled_init(model, seed: int, hidden: int) -> None:
    """Seeded weights with useful scales (see the module docstring)."""
    import torch  # the hf extra (module docstring)

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
                continue
            if "embed_tokens" in name:
                std = 1.0
            elif "lm_head" in name:
                std = 3.0 / math.sqrt(hidden)
            elif name.endswith("bias"):
                std = 0.1
            else:
                std = (2.0 if "q_proj" in name else 1.0) / math.sqrt(p.shape[-1])
            p.copy_(torch.randn(p.shape, generator=gen) * std)


def build_tiny_hf(
    folder: str | Path,
    arch: str = "llama",
    *,
    seed: int = 0,
    like: int | None = None,
    similarity: float = 0.0,
    layers: int = 2,
    hidden: int = 64,
    n_ctx: int = 512,
) -> Path:
    """Write a tiny model + tokenizer to `folder` (created) and return it."""
    import torch  # the hf extra (module docstring)
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = bytelevel_tokenizer(with_bos=arch == "llama")
    vocab_size = -(-len(tokenizer) // 64) * 64 + 64  # padded past the tokenizer, like real checkpoints
    config = tiny_config(arch, vocab_size, tokenizer, layers=layers, hidden=hidden, n_ctx=n_ctx)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    _scaled_init(model, seed, hidden)
    if like is not None:
        base = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        _scaled_init(base, like, hidden)
        a, b = math.sqrt(similarity), math.sqrt(1.0 - similarity)
        with torch.no_grad():
            for (name, p), q in zip(model.named_parameters(), base.parameters(), strict=True):
                p.copy_(q if "norm" in name or "embed" in name or "lm_head" in name else a * q + b * p)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def make_pickled(folder: Path) -> Path:
    """Replace a directory's safetensors weights by a pickled pytorch_model.bin (same tensors)."""
    import torch  # the hf extra (module docstring)
    from safetensors.torch import load_file

    state = {}
    for f in sorted(folder.glob("*.safetensors")):
        state.update(load_file(f))
        f.unlink()
    for index in folder.glob("*.safetensors.index.json"):
        index.unlink()
    torch.save(state, folder / "pytorch_model.bin")
    return folder


REMOTE_CODE_SENTINEL = "remote_code_ran.txt"


def make_remote_code_model(folder: Path) -> Path:
    """A directory whose config names an architecture defined only in a shipped Python file, which
    writes a sentinel file when imported: proof of whether the loader ran it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "modeling_evil.py").write_text(
        f"from pathlib import Path\nPath(__file__).with_name({REMOTE_CODE_SENTINEL!r}).write_text('ran')\n"
    )
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "edgespec_evil",
                "architectures": ["EvilForCausalLM"],
                "auto_map": {
                    "AutoConfig": "modeling_evil.EvilConfig",
                    "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM",
                },
            }
        )
    )
    (folder / "model.safetensors").write_bytes(b"")
    return folder
