"""Test support shipped with the package: tiny random models, written on the fly, that load in the
real runtimes in milliseconds (`tiny_gguf` for llama.cpp, `tiny_hf` for transformers), and models of
real shapes whose greedy tokens follow known rules (`rule_models`, for benchmarks/gpu_check.py). The test
suite and benchmarks/gpu_check.py build on them; nothing in edgespec's own code imports them.

    tiny_gguf.py    tiny llama-architecture GGUF models for llama.cpp
    tiny_hf.py      tiny transformers models, from configs, no downloads
    rule_models.py  random-weight Llama models of real shapes whose greedy next token is known
"""
