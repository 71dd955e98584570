"""Runtimes behind the protocol decoding owns (`decoding.backend.Backend`): llama.cpp and
transformers. They import only decoding and util."""
