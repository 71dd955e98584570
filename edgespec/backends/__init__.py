"""Runtimes behind one small protocol (`base.Backend`): llama.cpp and transformers."""
