"""The speculative core: sampling math, drafters, the K controller and the decode loop.

Nothing here imports a runtime (llama.cpp, torch) or the UI; backends are reached only through the
small protocol in `edgespec.backends.base`.
"""
