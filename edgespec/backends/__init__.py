"""Runtimes behind the protocol decoding owns (`decoding.backend.Backend`): llama.cpp and
transformers. They import only decoding and util.

    llamacpp.py          one GGUF model through llama-cpp-python's low-level API
    llamacpp_state.py    a context's saved KV state: its identity, copied out and back in
    llamacpp_runtime.py  llama.cpp's process-wide side: its log, Ctrl-C, devices, the quantizer
    chat_template.py     a model's own Jinja chat template rendered in a sandbox
    hf.py                one transformers model: bf16 on a CPU, quantized on a GPU
    hf_loading.py        where a transformers model runs, in what precision, what may load at all
    hf_convert.py        GGUF -> transformers directory, converted once and cached
    hf_tokens.py         what a transformers tokenizer's ids spell and which end a generation
    hf_quiet.py          transformers kept off edgespec's stderr
"""
