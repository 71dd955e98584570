"""Random-weight Llama models of real shapes whose greedy next token is known, for benchmarks/gpu_check.py.

A model built with a `permutation` of its vocabulary predicts permutation[x] after token x, by a
wide margin: embeddings have unit scale, every residual branch's output projection is scaled down
100x so the residual stream stays close to the input embedding, and output row y is the embedding of
permutation^-1(y), scaled so that the right logit is about 30 and the others about +-2 (+-0.5 at a
width of 4096). The margin survives bf16, nf4 and llama.cpp's Q4_K_M. The compute is the real
model's: only the weights' values are chosen.

A draft built with `agreeing_permutation(target's, a)` predicts the target's token after a random
fraction a of the vocabulary and another one elsewhere, so the tokens it drafts along the target's
greedy path are accepted with probability a each, whichever runtime drafts: edgespec's drafter,
transformers' assisted generation, llama.cpp. `set_rule` rewrites only the output matrix, so one
draft model serves every acceptance rate.

`export_gguf` writes such a model as a llama-architecture GGUF, the way convert_hf_to_gguf.py lays
a Llama out (its q/k rows reordered for llama.cpp's rope), with the byte-level vocabulary of
`tiny_gguf` padded to the model's size. Rope scaling (Llama-3.1's "llama3" frequencies) is left
out of the GGUF: it changes values, not cost.

torch and transformers (the hf extra) are imported where used, so the module imports without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgespec.testing.tiny_gguf import N_BASE_VOCAB, TinyShape, write_llama_gguf

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_theta": 500000.0,
}
PLAIN_ROPE = {"rope_type": "default", "rope_theta": 10000.0}

# Output matrices are untied everywhere: a rule needs one of its own (Llama-3.2-1B ties it to the
# embeddings; untying it costs memory, not compute). Each is a LlamaConfig's keyword arguments.
SHAPES: dict[str, dict[str, Any]] = {
    # from the published config.json files of meta-llama/Llama-3.1-8B-Instruct and Llama-3.2-1B-Instruct
    "llama-3.1-8b": dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=128256,
        max_position_embeddings=131072,
        rope_parameters=LLAMA3_ROPE,
    ),
    "llama-3.2-1b": dict(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        vocab_size=128256,
        max_position_embeddings=131072,
        rope_parameters={**LLAMA3_ROPE, "factor": 32.0},
    ),
    # the same code paths on a CPU in seconds (--tiny)
    "tiny-target": dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        vocab_size=4096,
        max_position_embeddings=2048,
        rope_parameters=PLAIN_ROPE,
    ),
    "tiny-draft": dict(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        vocab_size=4096,
        max_position_embeddings=2048,
        rope_parameters=PLAIN_ROPE,
    ),
}


def build_model(shape: str, device: str, dtype: str, seed: int, permutation):
    """A LlamaForCausalLM of `shape` on `device` whose greedy next token after x is permutation[x]."""
    import torch  # the hf extra (module docstring)
    from transformers import LlamaConfig, LlamaForCausalLM

    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    config = LlamaConfig(
        **SHAPES[shape],
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        bos_token_id=None,
        eos_token_id=None,
        attention_bias=False,
        mlp_bias=False,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=torch_dtype)
    model.eval()
    with torch.no_grad():
        model.get_input_embeddings().weight.normal_(0.0, 1.0)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(0.01)
            layer.mlp.down_proj.weight.mul_(0.01)
    set_rule(model, permutation)
    return model


def set_rule(model, permutation) -> None:
    """Make the model's greedy next token after x be permutation[x] (rewrites its output matrix)."""
    import torch  # the hf extra (module docstring)

    with torch.no_grad():
        embed = model.get_input_embeddings().weight
        inverse = torch.empty_like(permutation)
        inverse[permutation] = torch.arange(len(permutation), device=permutation.device)
        model.lm_head.weight.copy_(embed[inverse.to(embed.device)] * (30.0 / model.config.hidden_size))


def agreeing_permutation(permutation, a: float, seed: int = 0):
    """A permutation equal to `permutation` on a random fraction `a` of the tokens and different from
    it on every other one: permutation composed with a cyclic shift of the tokens outside that set."""
    import torch  # the hf extra (module docstring)

    n = len(permutation)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    others = order[round(a * n) :]  # where the draft disagrees
    moved = torch.arange(n)
    moved[others] = others.roll(1)
    return permutation[moved.to(permutation.device)]


# -- llama.cpp --------------------------------------------------------------------------------------


def gguf_shape(shape: str, n_ctx: int = 4096) -> TinyShape:
    s = SHAPES[shape]
    return TinyShape(
        n_layer=s["num_hidden_layers"],
        n_embd=s["hidden_size"],
        n_head=s["num_attention_heads"],
        n_head_kv=s["num_key_value_heads"],
        n_ff=s["intermediate_size"],
        n_ctx=n_ctx,
        rope_theta=s["rope_parameters"]["rope_theta"],
    )


def export_gguf(model, shape: str, path: Path) -> Path:
    """Write the model as a llama GGUF: f16 matrices (what llama.cpp's quantizer reads), f32 norms."""
    import torch  # the hf extra (module docstring)

    config = model.config

    def matrix(t) -> np.ndarray:
        return t.detach().to("cpu", torch.float16).numpy()

    def rope_rows(t, heads: int) -> np.ndarray:
        """q/k rows as llama.cpp's rope pairs them (convert_hf_to_gguf.py's LlamaModel.permute)."""
        w = matrix(t)
        return w.reshape(heads, 2, w.shape[0] // heads // 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)

    def norm(t) -> np.ndarray:
        return t.detach().to("cpu", torch.float32).numpy()

    weights = {
        "token_embd.weight": matrix(model.get_input_embeddings().weight),
        "output_norm.weight": norm(model.model.norm.weight),
        "output.weight": matrix(model.lm_head.weight),
    }
    for i, layer in enumerate(model.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        weights |= {
            f"blk.{i}.attn_norm.weight": norm(layer.input_layernorm.weight),
            f"blk.{i}.attn_q.weight": rope_rows(attn.q_proj.weight, config.num_attention_heads),
            f"blk.{i}.attn_k.weight": rope_rows(attn.k_proj.weight, config.num_key_value_heads),
            f"blk.{i}.attn_v.weight": matrix(attn.v_proj.weight),
            f"blk.{i}.attn_output.weight": matrix(attn.o_proj.weight),
            f"blk.{i}.ffn_norm.weight": norm(layer.post_attention_layernorm.weight),
            f"blk.{i}.ffn_gate.weight": matrix(mlp.gate_proj.weight),
            f"blk.{i}.ffn_up.weight": matrix(mlp.up_proj.weight),
            f"blk.{i}.ffn_down.weight": matrix(mlp.down_proj.weight),
        }
    return write_llama_gguf(
        path, weights, gguf_shape(shape), name=f"rule-{shape}", n_vocab_extra=config.vocab_size - N_BASE_VOCAB
    )
